#pragma once
// How a model is opened, as ONE description the k3 CLI, the desktop app and its wizard
// share: the folders, the memory budget, threads, the prefill chunk and the context.
// planLaunch gives the memory plan a Session opened from it will hold, from the files on
// disk and without reading a weight (the same planning Model::load runs).

#include "k3/memory_plan.hpp"
#include "k3/session.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace k3 {

// The memory budget: a preset's numbers, each replaceable by an explicit size. Nothing
// at all is "everything resident" (every layer pinned, routed experts in memory).
struct LaunchBudget {
    std::string preset; // a name of presets(); empty: none
    // Trunk bytes (pinned + ring) and expert-cache bytes; set, they replace the preset's.
    // A trunk budget only applies with a packed trunk; 0 there is the smallest ring. A
    // cache of 0 keeps the routed experts in memory.
    std::optional<std::uint64_t> trunkBytes;
    std::optional<std::uint64_t> cacheBytes;

    static LaunchBudget resident() { return {}; }
    static LaunchBudget ofPreset(std::string name) { return {std::move(name), {}, {}}; }
    static LaunchBudget ofBytes(std::uint64_t trunk, std::uint64_t cache) {
        return {{}, trunk, cache};
    }
    bool isResident() const { return preset.empty() && !trunkBytes && !cacheBytes; }
    // The sizes in force (the preset's unless replaced); no trunk budget: every layer.
    // Throw MemoryRefusal for a preset name that is not in the table, listing the names.
    std::uint64_t resolvedTrunkBytes() const;
    std::uint64_t resolvedCacheBytes() const;
    bool streamsModelTables() const; // the preset leaves embeddings and lm_head on disk
    // "preset laptop", "preset ultra, trunk 1.50 GB", "trunk 3.00 GB / cache 1.50 GB",
    // "everything resident".
    std::string describe() const;
    bool operator==(const LaunchBudget&) const = default;
};

struct LaunchConfig {
    std::filesystem::path modelDir;
    std::filesystem::path trunkDir; // a packed trunk (k3 pack); empty: trunk from the checkpoint
    LaunchBudget budget;
    // OpenMP threads (0: every core). The count is per calling thread, so the front end
    // applies it on the thread that runs the engine; the plan does not depend on it.
    int threads = 0;
    int prefillChunk = 0; // positions per prefill chunk (0: the plan's)
    int contextLength = 4096;
    int maxSpeculation = 16; // widest speculation the plan holds state copies for
    // How a compressed trunk's pinned layers are held (memory_plan.hpp); a raw trunk
    // ignores it.
    PinMode pinMode = PinMode::Measured;
    // The prefix cache on disk (k3/state_cache.hpp): empty, none; 0 bytes: the default.
    std::filesystem::path stateCacheDir;
    std::uint64_t stateCacheBytes = 0;
    bool operator==(const LaunchConfig&) const = default;
};

// The session options for `config`, the memory plan enforced (a plan over 95% of
// MemAvailable is refused with the numbers). The tokenizer is the model folder's.
// Throws MemoryRefusal for an unknown preset.
SessionOptions toSessionOptions(const LaunchConfig& config);

// The memory plan a Session opened with toSessionOptions(config) holds, against
// `availableBytes`: config.json, the safetensors headers and trunk.json are read, no
// weight. Throws what opening would (a missing file, a trunk of another checkpoint, a
// budget that cannot hold one ring slot), naming it.
MemoryPlan planLaunch(const LaunchConfig& config, std::uint64_t availableBytes);

// The files Tokenizer::fromDirectory reads from a model folder.
inline constexpr const char* kTokenizerFiles[] = {"tiktoken.model", "tokenizer_config.json"};

// What stops `config` from opening, found without reading a weight: config.json, every
// shard the index names (present, its header inside the file), the tokenizer files, and
// a packed trunk made from THIS checkpoint. Each problem names the file and what is
// wrong; empty: everything a load reads is there. The memory budget is not judged here
// (planLaunch does that against the memory available).
std::vector<std::string> checkLaunch(const LaunchConfig& config);

// "auto": the budget that fills `availableBytes` (90% of it), the trunk first (a pinned
// layer saves a read on every token), the rest to the expert cache, as explicit sizes.
// Without a packed trunk: everything resident.
LaunchBudget automaticBudget(const LaunchConfig& config, std::uint64_t availableBytes);

// One memory flag as given on the command line; later flags override earlier ones
// (--preset server --cache-gb 40: the server trunk with a 40 GB cache).
struct MemoryFlag {
    enum class Kind { Preset, TrunkGB, CacheGB };
    Kind kind = Kind::Preset;
    std::string preset; // Kind::Preset: a preset name or "auto"
    double gb = 0;      // Kind::TrunkGB / CacheGB (1 GB = 1e9 bytes, as the presets)
};

// Applies the flags in order: a preset replaces both sizes, a size flag replaces one.
// "auto" is the preset recommendPreset(availableBytes) picks. No flags: everything
// resident. Throws MemoryRefusal for an unknown preset (listing the valid ones), a
// negative or non-finite size, or "auto" when nothing fits or availableBytes is 0
// (unknown).
LaunchBudget resolveMemoryFlags(std::span<const MemoryFlag> flags, std::uint64_t availableBytes);

} // namespace k3
