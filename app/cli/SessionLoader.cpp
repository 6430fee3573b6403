#include "SessionLoader.hpp"

#include "CliSupport.hpp"

#include <k3/config.hpp>
#include <k3/launch.hpp>
#include <k3/memory_plan.hpp>
#include <k3/pack.hpp>
#include <k3/state_cache.hpp>
#include <k3/tokenizer.hpp>

#include <chrono>
#include <cstdio>
#include <filesystem>

namespace fs = std::filesystem;

namespace k3cli {

k3::ModelConfig readConfigOrThrow(const std::string& modelDir) {
    if (modelDir.empty())
        throw usageError("MODEL_DIR is required: the folder holding config.json and the "
                         ".safetensors shards (see k3 --help)");
    std::error_code ec;
    if (!fs::is_directory(modelDir, ec))
        throw usageError("MODEL_DIR " + modelDir + " is not a folder");
    try {
        return k3::readModelConfig(fs::path(modelDir) / "config.json");
    } catch (const k3::ConfigError& error) {
        throw usageError(error.what());
    } catch (const k3::LaunchError& error) {
        throw usageError(error.what());
    }
}

namespace {

// Checking a trunk against changed shards reads its tensors from them (tens of GB for the
// real checkpoint): said once it has taken a second, a rewritten line on a terminal, a
// line every 10% otherwise.
k3::TrunkCheckObserver trunkCheckProgress(bool tty) {
    return [tty, lastTenth = -1](const k3::TrunkCheckProgress& p) mutable {
        if (p.seconds < 1.0) return;
        const int tenth = p.bytesTotal ? int(10 * p.bytesDone / p.bytesTotal) : 10;
        const std::string line =
            "checking the trunk's weights against the model: " + k3::formatBytes(p.bytesDone) +
            " of " + k3::formatBytes(p.bytesTotal) + ", " + p.shard;
        if (tty)
            std::fprintf(stderr, "\r\033[2K%s", terminalSafe(line).c_str());
        else if (tenth != lastTenth)
            std::fprintf(stderr, "%s\n", terminalSafe(line).c_str());
        lastTenth = tenth;
    };
}

} // namespace

LoadedSession openModel(const ModelArgs& args, TokenizerNeed need) {
    const k3::ModelConfig config = readConfigOrThrow(args.modelDir);
    if (args.layers < 0 || args.layers > config.numHiddenLayers)
        throw usageError("--layers " + std::to_string(args.layers) + " is outside 1.." +
                         std::to_string(config.numHiddenLayers) + " (num_hidden_layers of " +
                         args.modelDir + "/config.json)");

    const std::string tokDir = args.tokenizerDir.empty() ? args.modelDir : args.tokenizerDir;
    const bool tokFiles = fs::exists(fs::path(tokDir) / "tiktoken.model") &&
                          fs::exists(fs::path(tokDir) / "tokenizer_config.json");
    bool loadTokenizer = false;
    if (need == TokenizerNeed::Required || args.tokenizerGiven) {
        if (!tokFiles)
            throw usageError("the tokenizer folder " + tokDir +
                             " lacks tiktoken.model or tokenizer_config.json; point --tok at "
                             "the checkpoint folder (the tokenizer ships with it), or pass "
                             "token ids with --ids");
        loadTokenizer = true;
    } else {
        loadTokenizer = tokFiles;
    }

    // The memory dial: the same tokens at every budget, memory only buys speed.
    k3::LaunchConfig launch;
    launch.modelDir = args.modelDir;
    launch.trunkDir = args.memory.trunkDir;
    launch.budget = args.memory.budget;
    launch.pinMode = args.memory.pinMode;
    launch.prefillChunk = args.prefillChunk;
    launch.contextLength = args.context;
    if (!args.stateCacheDir.empty()) {
        launch.stateCacheDir = args.stateCacheDir == "default" ? k3::defaultStateCacheDirectory()
                                                               : fs::path(args.stateCacheDir);
        if (launch.stateCacheDir.empty())
            throw usageError("--state-cache default: neither XDG_CACHE_HOME nor HOME is set; "
                             "give a folder");
        launch.stateCacheBytes = std::uint64_t(args.stateCacheGB * 1e9);
    }
    // The rollback record the plan counts is sized for the widest verification asked for.
    if (args.speculation != 0) launch.maxSpeculation = args.speculation > 0 ? args.speculation : 16;
    launch.draftDir = args.draftDir;
    // The load refuses up front (exit 1, with the numbers and the options) a plan over 95%
    // of MemAvailable, rather than swapping or being killed halfway through.
    k3::LaunchDiagnostics diagnostics;
    diagnostics.tokenizerDir = tokDir;
    diagnostics.loadTokenizer = loadTokenizer;
    diagnostics.layerLimit = args.layers;
    diagnostics.recordCacheTrace = !args.memory.cacheTraceDir.empty();
    if (stderrIsTty())
        std::fprintf(stderr, "loading %s ...\r", terminalSafe(args.modelDir).c_str());
    const auto t0 = std::chrono::steady_clock::now();
    try {
        // Before the load, which checks again (remembered by then), to show progress.
        if (!args.memory.trunkDir.empty())
            k3::openTrunkIndex(args.memory.trunkDir, args.modelDir,
                               trunkCheckProgress(stderrIsTty()));
        LoadedSession loaded{k3::Session::open(launch, diagnostics),
                             loadTokenizer ? tokDir : std::string(), 0};
        loaded.loadSeconds =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (stderrIsTty()) std::fprintf(stderr, "\033[2K");
        return loaded;
    } catch (const k3::ConfigError& error) {
        throw usageError(error.what());
    } catch (const k3::LaunchError& error) {
        throw usageError(error.what());
    } catch (const k3::TokenizerError& error) {
        throw CommandError{kExitFailure,
                           "cannot read the tokenizer in " + tokDir + ": " + error.what()};
    } catch (const std::exception& error) {
        throw CommandError{kExitFailure, "cannot load the model in " + args.modelDir + ": " +
                                             error.what() + cliAdvice(error)};
    }
}

} // namespace k3cli
