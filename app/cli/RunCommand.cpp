// `k3 MODEL_DIR (--prompt T | --prompt-file F | --ids 1,2,3) ...`: the seed's batch run.
// Prints the plan, one line per token and a summary; writes the run report (--out).
#include "CliSupport.hpp"
#include "Commands.hpp"
#include "RunReport.hpp"
#include "SessionLoader.hpp"

#include <k3/chat.hpp>
#include <k3/console.hpp>
#include <k3/memory_plan.hpp>
#include <k3/presets.hpp>
#include <k3/read_file.hpp>
#include <k3/session.hpp>
#include <k3/version.hpp>
#include <k3/vision.hpp>

#include <nlohmann/json.hpp>

#include <cerrno>
#include <charconv>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

namespace k3cli {

namespace {

constexpr std::size_t kMaxPromptTokens = 32768; // the seed's engine limit

std::string readPromptFile(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw usageError("--prompt-file " + path + ": " + std::strerror(errno));
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) throw usageError("--prompt-file " + path + ": read error");
    return text.str();
}

// An output file is checked before the model loads: a run is not thrown away at the end
// because --out names a folder, a device or a read-only file.
void checkOutputFile(const char* option, const std::string& path) {
    try {
        k3::resolveOutputFile(path);
    } catch (const k3::ChatError& error) {
        throw usageError(std::string(option) + ": " + error.what());
    }
}

// Quoted and escaped, so a token's bytes are visible on one line.
std::string jsonQuoted(const std::string& text) {
    return nlohmann::ordered_json(text).dump(-1, ' ', false,
                                             nlohmann::ordered_json::error_handler_t::replace);
}

class BatchObserver : public k3::SessionObserver {
public:
    BatchObserver(const k3::Session& session, bool captureLogits)
        : session_(session), captureLogits_(captureLogits), progress_(stderrIsTty()) {
        if (session.hasTokenizer()) decoder_.emplace(session.tokenizer());
    }

    void onProgress(const k3::SessionProgress& p) override {
        // Prefill reports after each fed position, so at the last one the logits are the
        // first step's (what --dump-logits wants), before any token is sampled.
        if (captureLogits_ && p.stage == "prefill" && p.done == p.total) {
            const auto logits = session_.lastLogits();
            firstLogits.assign(logits.begin(), logits.end());
        }
        if (p.stage == "prefill" && p.done == p.total) { // the prompt's requests are not a step's
            const k3::MemoryReport memory = session_.memoryReport();
            seenRequests_ = memory.cache.requests;
            seenHits_ = memory.cache.residentHits;
        }
        if (progress_ && progressDue(p.done == p.total)) {
            std::fprintf(stderr, "\r%s %lld/%lld", p.stage.c_str(), (long long)p.done,
                         (long long)p.total);
            if (p.done == p.total) std::fprintf(stderr, "\r\033[2K");
            std::fflush(stderr);
        }
    }

    void onToken(const k3::TokenEvent& ev) override {
        TokenRecord record{ev.id, {}, ev.timing.totalSeconds()};
        if (decoder_) record.piece = decoder_->push(ev.id);
        // The session has just fed this token (its timing is that forward's): the cache
        // counters' growth since the previous token is this step's TRUE hit rate (a batch
        // read just before use came off the disk: not a hit).
        const k3::MemoryReport memory = session_.memoryReport();
        if (memory.expertsCached) {
            const std::uint64_t requests = memory.cache.requests - seenRequests_;
            const std::uint64_t hits = memory.cache.residentHits - seenHits_; // TRUE hits
            if (requests > 0) record.cacheHitPercent = 100.0 * double(hits) / double(requests);
            seenRequests_ = memory.cache.requests;
            seenHits_ = memory.cache.residentHits;
        }
        record.gbRead = double(memory.trunk.bytesRead + memory.cache.bytesRead) / 1e9;
        // The last token is never fed, so its time is only the sampling: no rate for it.
        char rate[32] = "-";
        if (record.seconds > 1e-4) std::snprintf(rate, sizeof rate, "%.3f", 1.0 / record.seconds);
        char hit[16] = "-";
        if (record.cacheHitPercent >= 0)
            std::snprintf(hit, sizeof hit, "%.1f", record.cacheHitPercent);
        std::printf("%-6d %-10d %-10.3f %-7s %-9.3f %-9s %s\n", ev.index, int(ev.id),
                    record.seconds, hit, record.gbRead, rate,
                    decoder_ ? jsonQuoted(record.piece).c_str() : "");
        std::fflush(stdout);
        tokens.push_back(std::move(record));
    }

    std::string flushText() { return decoder_ ? decoder_->flush() : std::string(); }

    std::vector<TokenRecord> tokens;
    std::vector<float> firstLogits;

private:
    const k3::Session& session_;
    bool captureLogits_;
    bool progress_;
    std::optional<k3::StreamDecoder> decoder_;
    std::uint64_t seenRequests_ = 0, seenHits_ = 0;
};

// --image files, decoded and preprocessed before any weight is read: a bad file is a
// usage error naming it, as is a text-only checkpoint.
std::vector<k3::PreparedImage> prepareImages(const RunArgs& args) {
    std::vector<k3::PreparedImage> images;
    if (args.images.empty()) return images;
    const std::filesystem::path config = std::filesystem::path(args.model.modelDir) / "config.json";
    if (!k3::parseVisionConfig(k3::readRegularFile(config, k3::kMaxConfigBytes, "config"),
                               config.string()))
        throw usageError("--image: " + args.model.modelDir +
                         " is a text-only checkpoint (config.json has no vision_config); it "
                         "cannot read images");
    for (const std::string& file : args.images) {
        try {
            images.push_back(k3::prepareImage(k3::readImageFile(file), args.imagePatchLimit));
        } catch (const k3::Error& e) {
            throw usageError(std::string("--image ") + e.what());
        }
    }
    return images;
}

// The prompt as given: ids, or text to encode once the tokenizer is loaded.
struct BatchPrompt {
    int sources = 0; // --prompt, --prompt-file and --ids given
    std::vector<k3::TokenId> ids;
    std::string text;
};

// Exactly one prompt (or a --load-state to go on from), read and checked before loading.
BatchPrompt readBatchPrompt(const RunArgs& args) {
    BatchPrompt prompt;
    prompt.sources =
        int(args.prompt.has_value()) + int(args.promptFile.has_value()) + int(args.ids.has_value());
    const bool continuing = !args.loadState.empty();
    if (args.gen == 0 && args.saveState.empty() && args.model.stateCacheDir.empty())
        throw usageError("--gen 0 generates nothing: it is for reading a prompt into "
                         "--save-state FILE or --state-cache DIR");
    if (prompt.sources > 1 || (prompt.sources == 0 && !continuing))
        throw usageError(std::string(prompt.sources == 0 ? "no prompt given"
                                                         : "more than one prompt "
                                                           "given") +
                         ": pass exactly one of --prompt TEXT, --prompt-file FILE or --ids "
                         "1,2,3 (or --chat for a conversation)");
    if (args.ids) prompt.ids = parseIdList(*args.ids);
    if (args.prompt) prompt.text = *args.prompt;
    if (args.promptFile) prompt.text = readPromptFile(*args.promptFile);
    if (prompt.sources == 1 && !args.ids && prompt.text.empty())
        throw usageError(std::string(args.prompt ? "--prompt" : "--prompt-file") +
                         " is empty: give the text to continue");
    return prompt;
}

// The files the run will write, and the trace's need of a cache, before loading.
void checkBatchOutputs(const RunArgs& args) {
    if (args.out != "-") checkOutputFile("--out", args.out);
    if (!args.dumpLogits.empty()) checkOutputFile("--dump-logits", args.dumpLogits);
    if (!args.saveState.empty()) checkOutputFile("--save-state", args.saveState);
    const MemoryArgs& memory = args.model.memory;
    if (!memory.cacheTraceDir.empty() && !(memory.cacheGB && *memory.cacheGB > 0))
        throw usageError("--dump-cache-trace " + memory.cacheTraceDir +
                         ": the trace records expert-cache requests, and this run has no "
                         "expert cache; give --cache-gb X or a --preset with a cache");
}

void checkIdsInVocabulary(const std::vector<k3::TokenId>& ids, const k3::ModelConfig& config) {
    for (std::size_t i = 0; i < ids.size(); ++i)
        if (ids[i] >= config.vocabSize)
            throw usageError("--ids: token id " + std::to_string(ids[i]) + " (item " +
                             std::to_string(i + 1) + ") is outside 0.." +
                             std::to_string(config.vocabSize - 1) + " (vocab_size)");
}

// The prompt's tokens once the model is loaded: the images' and the text's, after the
// --load-state ids. Returns the positions the state restored.
int completePrompt(k3::Session& session, const RunArgs& args,
                   const std::vector<k3::PreparedImage>& images, BatchPrompt& prompt) {
    if (prompt.sources == 1 && !args.ids) {
        // Each image's prompt (special markers from us, never from the text), then the text.
        for (const k3::PreparedImage& image : images) {
            const auto marked = session.tokenizer().encodeWithSpecial(k3::imagePrompt(image.plan));
            prompt.ids.insert(prompt.ids.end(), marked.begin(), marked.end());
        }
        const auto text = session.tokenizer().encode(prompt.text);
        prompt.ids.insert(prompt.ids.end(), text.begin(), text.end());
    }
    if (prompt.sources == 1 && prompt.ids.empty())
        throw usageError("the prompt encodes to no tokens");
    int restored = 0;
    if (!args.loadState.empty()) { // the state's ids, then the new ones: only those are read
        session.loadState(args.loadState);
        const std::span<const k3::TokenId> held = session.heldIds();
        restored = int(held.size());
        prompt.ids.insert(prompt.ids.begin(), held.begin(), held.end());
    }
    if (prompt.ids.size() > kMaxPromptTokens)
        throw usageError("the prompt is " + std::to_string(prompt.ids.size()) +
                         " tokens; the limit is " + std::to_string(kMaxPromptTokens));
    if (args.ids && session.hasTokenizer())
        prompt.text = k3::sanitizeUtf8(session.tokenizer().decode(prompt.ids));
    return restored;
}

} // namespace

std::vector<std::int32_t> parseIdList(const std::string& text) {
    std::vector<std::int32_t> ids;
    std::size_t at = 0;
    while (at <= text.size()) {
        std::size_t comma = text.find(',', at);
        if (comma == std::string::npos) comma = text.size();
        std::string item = text.substr(at, comma - at);
        const auto first = item.find_first_not_of(" \t");
        const auto last = item.find_last_not_of(" \t");
        item = first == std::string::npos ? std::string() : item.substr(first, last - first + 1);
        std::int32_t value = 0;
        const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), value);
        if (item.empty() || ec != std::errc() || end != item.data() + item.size() || value < 0)
            throw usageError("--ids \"" + text + "\": \"" + item + "\" (item " +
                             std::to_string(ids.size() + 1) +
                             ") is not a token id; give comma-separated non-negative integers, "
                             "e.g. --ids 1008,10484,318");
        ids.push_back(value);
        at = comma + 1;
    }
    return ids;
}

ResolvedSampling resolveSampling(const SamplingArgs& args) {
    ResolvedSampling r;
    r.seedGiven = args.seed.has_value();
    r.seed = args.seed.value_or(0);
    const bool asked = args.temperature || args.topP || args.seed;
    if (!asked || args.greedy) return r;
    r.sampling = true;
    r.temperature = float(args.temperature.value_or(1.0));
    r.topP = float(args.topP.value_or(0.95));
    if (r.temperature == 0.0f) r.sampling = false; // temperature 0 is argmax
    return r;
}

int runBatch(const RunArgs& args) {
    BatchPrompt prompt = readBatchPrompt(args);
    checkBatchOutputs(args);
    // The ids and images are checked before any weight is read.
    const k3::ModelConfig config = readConfigOrThrow(args.model.modelDir);
    const std::vector<k3::PreparedImage> images = prepareImages(args);
    checkIdsInVocabulary(prompt.ids, config);

    const ReportOnStdout stdoutReport(args.out == "-");
    LoadedSession loaded =
        openModel(args.model, args.ids ? TokenizerNeed::IfPresent : TokenizerNeed::Required);
    k3::Session& session = loaded.session;
    const int restored = completePrompt(session, args, images, prompt);
    const ResolvedSampling sampling = resolveSampling(args.model.sampling);
    printRunHeader(args, loaded, prompt.ids, images, sampling);

    installInterruptHandler(true);
    BatchObserver observer(session, !args.dumpLogits.empty());
    if (!args.dumpLogits.empty() && restored == int(prompt.ids.size())) {
        // Nothing to read: the first step's logits are the loaded ones.
        const auto logits = session.lastLogits();
        observer.firstLogits.assign(logits.begin(), logits.end());
    }
    k3::GenerateOptions options;
    options.maxTokens = args.gen;
    options.speculation = args.model.speculation;
    options.sampling.temperature = sampling.sampling ? sampling.temperature : 0.0f;
    options.sampling.topP = sampling.sampling ? sampling.topP : 1.0f;
    options.sampling.seed = sampling.seed;
    options.images = images;
    k3::GenerateResult result;
    try {
        result = session.generateIds(prompt.ids, options, &observer, &cancelFlag());
    } catch (const k3::ContextFull& error) {
        throw usageError(std::string(error.what()) + " (--context " +
                         std::to_string(error.context()) + "; raise it or shorten the prompt)");
    } catch (const std::exception& error) {
        throw CommandError{kExitFailure, std::string("the forward pass failed: ") + error.what()};
    }
    const std::string tail = observer.flushText();
    if (!tail.empty() && !observer.tokens.empty()) observer.tokens.back().piece += tail;

    BatchRun run{args,
                 loaded,
                 prompt.ids,
                 prompt.text,
                 images,
                 sampling,
                 options,
                 result,
                 std::move(observer.tokens),
                 std::move(observer.firstLogits),
                 restored};
    return reportBatchRun(run, stdoutReport);
}

} // namespace k3cli
