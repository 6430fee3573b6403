// checkLaunch: everything a load reads, checked before anything is unloaded or saved.
#include "k3/config.hpp"
#include "k3/launch.hpp"
#include "k3/pack.hpp"
#include "k3/safetensors.hpp"

#include <system_error>

namespace k3 {
namespace fs = std::filesystem;

namespace {

void checkTokenizerFiles(const fs::path& modelDir, std::vector<std::string>& problems) {
    for (const char* name : kTokenizerFiles) {
        std::error_code ec;
        const fs::path file = modelDir / name;
        if (!fs::is_regular_file(file, ec))
            problems.push_back(file.string() + " is missing: the tokenizer needs " + name);
        else if (fs::file_size(file, ec) == 0 || ec)
            problems.push_back(file.string() + " is empty: the tokenizer needs its contents");
    }
}

// Another checkpoint's trunk is never to be repacked in place: it may be 10 GB of a
// model that still uses it, so the suggestion is a fresh folder.
void checkTrunk(const LaunchConfig& config, std::vector<std::string>& problems) {
    try {
        openTrunkIndex(config.trunkDir, config.modelDir);
    } catch (const StaleTrunkError& e) {
        problems.push_back(e.what());
    } catch (const std::exception& e) {
        problems.push_back(std::string("trunk ") + config.trunkDir.string() + ": " + e.what());
    }
}

} // namespace

std::vector<std::string> checkLaunch(const LaunchConfig& config) {
    std::vector<std::string> problems;
    std::error_code ec;
    if (config.modelDir.empty() || !fs::is_directory(config.modelDir, ec)) {
        problems.push_back((config.modelDir / "config.json").string() +
                           " does not exist: " + config.modelDir.string() + " is not a folder");
        return problems;
    }
    try {
        readModelConfig(config.modelDir / "config.json");
    } catch (const std::exception& e) {
        problems.push_back(e.what());
    }
    bool checkpointOk = false;
    try {
        Checkpoint::open(config.modelDir); // every shard present, each header inside its file
        checkpointOk = true;
    } catch (const std::exception& e) {
        problems.push_back(e.what());
    }
    checkTokenizerFiles(config.modelDir, problems);
    if (!config.trunkDir.empty() && checkpointOk) checkTrunk(config, problems);
    return problems;
}

} // namespace k3
