#pragma once
// How a model is opened, as ONE description the k3 CLI, the desktop app and its wizard
// share: the folders, the memory budget, threads, the prefill chunk and the context.
// Session::open and Model::load take it as it is; planLaunch gives the memory plan a
// Session opened from it will hold, from the files on disk and without reading a weight
// (the same planning Model::load runs).

#include "k3/memory_plan.hpp"

#include <cstdint>
#include <filesystem>
#include <optional>
#include <span>
#include <string>
#include <string_view>
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
    // Embeddings and lm_head left on disk (one embedding row read per token, lm_head in
    // row blocks); set, it replaces the preset's choice (the ultra preset's).
    std::optional<bool> modelTablesOnDisk;

    static LaunchBudget resident() { return {}; }
    static LaunchBudget ofPreset(std::string name) { return {std::move(name), {}, {}, {}}; }
    static LaunchBudget ofBytes(std::uint64_t trunk, std::uint64_t cache) {
        return {{}, trunk, cache, {}};
    }
    bool isResident() const {
        return preset.empty() && !trunkBytes && !cacheBytes && !modelTablesOnDisk.value_or(false);
    }
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
    // A draft trunk (k3 pack --draft): speculation proposes with it instead of prompt
    // lookup. Resident, in the plan, and checked to be this model's draft.
    std::filesystem::path draftDir;
    // The prefix cache on disk (k3/state_cache.hpp): a prompt starting with ids a cached
    // state holds reads only the rest. Empty, none; 0 bytes: kDefaultStateCacheBytes.
    std::filesystem::path stateCacheDir;
    std::uint64_t stateCacheBytes = 0;
    bool operator==(const LaunchConfig&) const = default;
};

// What tests, benchmarks and the CLI's diagnostic flags change beside a LaunchConfig;
// the defaults are what the front ends run with.
struct LaunchDiagnostics {
    std::filesystem::path tokenizerDir; // empty: the model folder's
    bool loadTokenizer = true;          // false: ids in, ids out
    int layerLimit = 0;                 // bind and run only the first N layers (0: all)
    int expertCacheSlots = 0;           // > 0: exactly this many cache slots (replaces the bytes)
    bool recordCacheTrace = false;      // keep the expert request trace (Model::writeCacheTrace)
    bool enforceMemoryPlan = true;      // refuse a plan over 95% of MemAvailable, with the numbers
    // > 0: plan against this many bytes available instead of the system's MemAvailable
    // (tests of the plan's choices at a small machine's memory).
    std::uint64_t availableBytes = 0;
    // lm_head's row blocks when the budget streams the model tables (two buffers).
    std::uint64_t tableBlockBytes = std::uint64_t{64} << 20;
};

// "raw", "compressed", "measured": the pin mode's name in flags, settings and reports.
const char* pinModeName(PinMode mode);
// The pin mode `name` names; none for any other text.
std::optional<PinMode> pinModeNamed(std::string_view name);

// The ranges of a LaunchConfig's numbers, one table for the CLI's flags, the settings
// dialog and the settings read back.
struct LaunchRange {
    int min = 0;
    int max = 0;
    bool contains(long long v) const { return v >= min && v <= max; }
};
inline constexpr LaunchRange kThreadsRange{0, 1024};      // 0: every core
inline constexpr LaunchRange kContextRange{16, 1 << 20};  // positions
inline constexpr LaunchRange kPrefillChunkRange{0, 4096}; // 0: the plan's
inline constexpr LaunchRange kSpeculationRange{0, kMaxSpeculation};
inline constexpr std::uint64_t kMaxBudgetBytes = 1'000'000'000'000'000; // 1e6 GB

// Every field of `config` outside its range or otherwise unusable before a file is read
// (a negative or empty size, no model folder), each named with its value and what is
// allowed; empty: valid. Session::open, Model::load and planLaunch refuse (LaunchError)
// what this reports.
std::vector<std::string> validate(const LaunchConfig& config);

class LaunchError : public Error {
public:
    explicit LaunchError(const std::string& message) : Error(ErrorKind::Config, message) {}
};

// The memory plan a Session opened with `config` holds, against
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
