#pragma once
// The packed trunk: every layer's non-expert tensors (attention, norms, router, shared
// experts, latent projections) rewritten once into trunk.bin, one 4096-aligned record
// per layer, so a layer comes back in ONE O_DIRECT read. The model-level tensors
// (embeddings, final norm, output AttnRes, lm_head) are records of their own.
// trunk.json describes the records and the source checkpoint's identity (shard names,
// sizes, mtimes, a hash of config.json): a trunk packed from other bytes is refused.
//
// Packing is atomic: trunk.bin is written as trunk.bin.partial, trunk.json is written
// last through a temp file + rename, and an old trunk.json is removed first, so a
// half-written trunk never looks valid.

#include "k3/safetensors.hpp"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <stdexcept>
#include <string>
#include <vector>

namespace k3 {

class PackError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// The trunk exists but was packed from a different checkpoint (or an older format).
class StaleTrunkError : public PackError {
public:
    using PackError::PackError;
};

inline constexpr std::uint64_t kTrunkAlignment = 4096;

inline std::uint64_t alignUp(std::uint64_t n, std::uint64_t a = kTrunkAlignment) {
    return (n + a - 1) / a * a;
}

struct TrunkTensor {
    std::uint64_t offset = 0; // inside its record
    TensorInfo info;          // dtype, shape, nbytes (offset/shard fields unused)
};

struct TrunkRecord {
    std::string name;         // "layer.7", or the tensor name for model-level records
    int layer = -1;           // -1 for model-level records
    std::uint64_t offset = 0; // in trunk.bin, a multiple of 4096
    std::uint64_t bytes = 0;  // payload; the record occupies alignUp(bytes)
    std::map<std::string, TrunkTensor, std::less<>> tensors;
};

// What a trunk was packed from: any difference makes it stale.
struct CheckpointIdentity {
    struct Shard {
        std::string name;
        std::uint64_t size = 0;
        std::int64_t mtimeNs = 0;
    };
    std::vector<Shard> shards; // sorted by name
    std::string configHash;    // FNV-1a 64 of config.json, hex
    int numLayers = 0;

    // Empty when equal, else one sentence naming the first difference.
    std::string differenceFrom(const CheckpointIdentity& other) const;
};

CheckpointIdentity checkpointIdentity(const std::filesystem::path& modelDir);

struct TrunkIndex {
    std::filesystem::path binPath;
    std::uint64_t fileBytes = 0;
    CheckpointIdentity source;
    std::vector<TrunkRecord> layers;         // index = layer
    std::vector<TrunkRecord> modelRecords;   // embed, norm, output AttnRes, lm_head
    std::uint64_t largestLayerBytes() const; // the natural ring slot size
    std::uint64_t layerBytesTotal() const;   // sum of alignUp(layer bytes)
    const TrunkRecord* modelRecordFor(std::string_view tensor) const;
};

// Reads trunkDir/trunk.json, bounds-checks every record against trunk.bin, and (when
// modelDir is not empty) refuses a trunk whose source identity differs from modelDir's
// (StaleTrunkError naming the difference).
TrunkIndex openTrunkIndex(const std::filesystem::path& trunkDir,
                          const std::filesystem::path& modelDir = {});

// The same checks on trunk.json's text, for a trunk.bin of binBytes in trunkDir (the
// folder only names files in messages and fills binPath; nothing is read).
TrunkIndex parseTrunkIndex(std::string_view json, std::uint64_t binBytes,
                           const std::filesystem::path& trunkDir);

// True when trunkDir holds a complete trunk for modelDir (no exception).
bool trunkIsCurrent(const std::filesystem::path& trunkDir, const std::filesystem::path& modelDir);

// True for a routed expert's tensor (the streamed-through-the-cache part). Shared
// experts run on every token and belong to the trunk.
bool isRoutedExpertTensor(std::string_view name);

struct PackProgress {
    int recordsDone = 0;
    int recordsTotal = 0;
    std::uint64_t bytesDone = 0;
    std::uint64_t bytesTotal = 0;
    double seconds = 0;
    double mbPerSecond = 0;
    std::string record; // the record just written
};

struct PackResult {
    std::uint64_t fileBytes = 0;
    std::uint64_t payloadBytes = 0;
    std::uint64_t largestLayerBytes = 0;
    int layers = 0;
    double seconds = 0;
};

using PackObserver = std::function<void(const PackProgress&)>;

// Packs modelDir's trunk into trunkDir (created if needed). Refuses a layer whose
// non-expert tensors are not one contiguous run in one shard, naming the layer and the
// gap. Throws PackError; on cancel (PackError "cancelled"), nothing valid is left.
PackResult packTrunk(const std::filesystem::path& modelDir, const std::filesystem::path& trunkDir,
                     const PackObserver& observer = {}, const std::atomic<bool>* cancel = nullptr);

} // namespace k3
