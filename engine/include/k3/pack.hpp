#pragma once
// The packed trunk: every layer's non-expert tensors (attention, norms, router, shared
// experts, latent projections) rewritten once into trunk.bin, one 4096-aligned record
// per layer, so a layer comes back in ONE O_DIRECT read. The model-level tensors
// (embeddings, final norm, output AttnRes, lm_head) are records of their own.
// trunk.json describes the records and the source checkpoint's identity (shard names,
// sizes, a hash of each shard's header bytes, a hash of config.json): a trunk packed
// from another model is refused, whatever the files' names, sizes and mtimes.
//
// The trunk also knows the weights by their bytes: each tensor's XXH3-64 in trunk.json is
// the hash of the source tensor as packed. Opening a trunk with its model hashes the
// trunk tensors of every shard whose (device, inode, size, mtime, ctime) is not one seen
// holding those bytes, and refuses any difference ("this trunk was packed from different
// weights: re-pack it", naming the shard and the tensor). The tuples seen are kept in
// trunk.checked.json beside trunk.json (bound to trunk.json's checksum, written by the
// pack and after each successful check), so only a changed shard is read again.
//
// Nothing in trunk.json is trusted (format version 2): trunk.json carries an XXH3-64
// checksum of itself, every record and every tensor carries the XXH3-64 of its bytes
// (verified as the bytes are read: the streamer's reads, the pinned load), records may
// not overlap, a record's tensors tile it exactly, and when the model is given every
// tensor's dtype, shape, size and place in its record must be the checkpoint header's.
//
// Format 3 (`k3 pack --compress`) stores each LAYER record as blocks of block_bytes raw
// bytes, each coded on its own (see docs/trunk-format.md: the BF16 high bytes as short
// indices, or raw when coding does not pay) with its own XXH3-64; trunk.json lists each
// block's stored size. Model-level records stay raw (their rows are read in place). The
// record and tensor checksums are of the decoded bytes, so a decode is checked end to end.
// Format 2 trunks are still read.
//
// Packing never harms a trunk already there: the new one is written beside it
// (trunk.bin.partial, trunk.json.next) and put in place by two renames once complete,
// trunk.json last. A failed or cancelled pack removes its files and leaves the old trunk
// working; a pack that was killed leaves them for the next pack to remove.

#include "k3/error.hpp"
#include "k3/safetensors.hpp"

#include <atomic>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace k3 {

// The pack that would give a usable trunk again, for a front end to offer in its own
// words (the CLI as a `k3 pack` command line, the app as its setup wizard): the engine's
// message says what is wrong and "re-pack it", never a command.
struct PackRemedy {
    std::filesystem::path modelDir; // empty: not known where the fault was found
    // Where to pack: the trunk's own folder, or a new one when the trunk there may be
    // another model's (never packed over).
    std::filesystem::path trunkDir;
    bool compress = false; // the format-3 block codec (--compress)
    bool draft = false;    // a draft trunk (--draft)
};

class PackError : public Error {
public:
    explicit PackError(const std::string& message, ErrorKind kind = ErrorKind::Pack)
        : Error(kind, message) {}
    PackError(const std::string& message, PackRemedy remedy, ErrorKind kind = ErrorKind::Pack)
        : Error(kind, message), remedy_(std::move(remedy)) {}
    // The pack that fixes this, when one does.
    const std::optional<PackRemedy>& remedy() const { return remedy_; }

private:
    std::optional<PackRemedy> remedy_;
};

// The trunk exists but was packed from a different checkpoint (or an older format).
class StaleTrunkError : public PackError {
public:
    explicit StaleTrunkError(const std::string& message)
        : PackError(message, ErrorKind::StaleTrunk) {}
    StaleTrunkError(const std::string& message, PackRemedy remedy)
        : PackError(message, std::move(remedy), ErrorKind::StaleTrunk) {}
};

inline constexpr std::uint64_t kTrunkAlignment = 4096;

inline std::uint64_t alignUp(std::uint64_t n, std::uint64_t a = kTrunkAlignment) {
    return (n + a - 1) / a * a;
}

struct TrunkTensor {
    std::uint64_t offset = 0;   // inside its record
    TensorInfo info;            // dtype, shape, nbytes (offset/shard fields unused)
    std::uint64_t checksum = 0; // XXH3-64 of its nbytes bytes
};

struct TrunkRecord {
    std::string name;           // "layer.7", or the tensor name for model-level records
    int layer = -1;             // -1 for model-level records
    std::uint64_t offset = 0;   // in trunk.bin, a multiple of 4096
    std::uint64_t bytes = 0;    // payload; the record occupies alignUp(bytes)
    std::uint64_t checksum = 0; // XXH3-64 of the payload
    std::map<std::string, TrunkTensor, std::less<>> tensors;
    // Format 3: the stored (coded) size in trunk.bin, and where each block starts in the
    // record (blocks + 1 entries, the last = storedBytes). Raw records: storedBytes ==
    // bytes and no blocks.
    std::uint64_t storedBytes = 0;
    std::vector<std::uint64_t> blockStarts;
    bool compressed() const { return !blockStarts.empty(); }
    std::uint64_t stored() const { return compressed() ? storedBytes : bytes; }
    std::size_t blockCount() const { return blockStarts.empty() ? 0 : blockStarts.size() - 1; }
};

// What a trunk was packed from: any difference makes it stale.
struct CheckpointIdentity {
    struct Shard {
        std::string name;
        std::uint64_t size = 0;
        std::string headerHash; // XXH3-64 of the 8-byte length and the header JSON, hex
    };
    std::vector<Shard> shards; // sorted by name
    std::string configHash;    // FNV-1a 64 of config.json, hex
    int numLayers = 0;

    // Empty when equal, else one sentence naming the first difference.
    std::string differenceFrom(const CheckpointIdentity& other) const;
};

CheckpointIdentity checkpointIdentity(const std::filesystem::path& modelDir);
// The identity as trunk.json's "source" object (JSON text), and back (PackError naming
// the field when a field is missing or malformed).
std::string checkpointIdentityJson(const CheckpointIdentity& identity);
CheckpointIdentity parseCheckpointIdentityJson(std::string_view json);

// The trunk's checksum: XXH3-64 (libxxhash) of n bytes.
std::uint64_t trunkChecksum(const void* data, std::size_t n);

struct TrunkIndex {
    std::filesystem::path binPath;
    std::uint64_t indexChecksum = 0; // trunk.json's own XXH3-64 ("index_xxh3")
    std::uint64_t fileBytes = 0;
    int version = 2;
    std::uint64_t blockBytes = 0; // format 3: raw bytes per block (the last may be shorter)
    CheckpointIdentity source;
    std::vector<TrunkRecord> layers;         // index = layer
    std::vector<TrunkRecord> modelRecords;   // embed, norm, output AttnRes, lm_head
    std::uint64_t largestLayerBytes() const; // the natural ring slot size
    std::uint64_t layerBytesTotal() const;   // sum of alignUp(layer bytes)
    std::uint64_t layerStoredTotal() const;  // the same as stored in trunk.bin
    bool compressed() const;                 // any layer record stored in blocks
    const TrunkRecord* modelRecordFor(std::string_view tensor) const;
};

// Checking a trunk's tensors against changed shards reads them: up to the whole trunk's
// size from the checkpoint, once.
struct TrunkCheckProgress {
    std::string shard; // the file being read
    std::uint64_t bytesDone = 0;
    std::uint64_t bytesTotal = 0;
    double seconds = 0;
};
using TrunkCheckObserver = std::function<void(const TrunkCheckProgress&)>;

// Reads trunkDir/trunk.json, checks its checksum, bounds-checks every record against
// trunk.bin (aligned, inside, not overlapping, tiled exactly by its tensors), and (when
// modelDir is not empty) refuses a trunk whose source identity differs from modelDir's
// (StaleTrunkError naming the difference), whose records do not describe the
// checkpoint's tensors (PackError naming the record and the tensor), or whose tensors'
// bytes differ from the shards' (StaleTrunkError, checked as the top of this file says;
// `checkProgress` is called while shards are read). A trunk of another format version is
// a StaleTrunkError saying to re-pack.
TrunkIndex openTrunkIndex(const std::filesystem::path& trunkDir,
                          const std::filesystem::path& modelDir = {},
                          const TrunkCheckObserver& checkProgress = {});

// A folder for a NEW trunk of modelDir, never one that exists (so never another model's
// trunk): MODEL_DIR/trunk, else MODEL_DIR/trunk-2, trunk-3, ... Messages that suggest
// `k3 pack` name this folder.
std::filesystem::path freshTrunkFolder(const std::filesystem::path& modelDir);

// The same checks on trunk.json's text, for a trunk.bin of binBytes in trunkDir (the
// folder only names files in messages and fills binPath; nothing is read).
TrunkIndex parseTrunkIndex(std::string_view json, std::uint64_t binBytes,
                           const std::filesystem::path& trunkDir);

// Re-computes trunk.json's own checksum over an edited text (tests and the fuzzer use it
// to reach the checks behind the checksum). Throws PackError when it is not JSON.
std::string sealTrunkJson(std::string_view json);

// Checks bytes just read against the record's (or one tensor's) checksum: a PackError
// naming the record (and tensor), trunk.bin and both checksums on a mismatch.
void verifyTrunkRecord(const TrunkRecord& record, const std::byte* bytes,
                       const std::filesystem::path& binPath);
void verifyTrunkTensor(const TrunkRecord& record, const std::string& tensor, const std::byte* bytes,
                       const std::filesystem::path& binPath);

// True when trunkDir holds a complete trunk for modelDir (no exception): openTrunkIndex,
// so after a shard changed the first call reads the trunk's tensors from it.
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
    std::uint64_t layerBytes = 0;       // the layer records, raw
    std::uint64_t layerStoredBytes = 0; // and as stored (== layerBytes unless compressed)
    std::uint64_t largestLayerBytes = 0;
    int layers = 0;
    double seconds = 0;
};

using PackObserver = std::function<void(const PackProgress&)>;

struct PackOptions {
    bool compress = false; // format 3: layer records coded per block
    // Raw bytes per block, a multiple of 64 up to 65536 (tests use small blocks so a tiny
    // layer spans many).
    std::uint64_t blockBytes = 65536;
    // Keep a layer's blocks even when the record would be smaller raw (tests: exercises the
    // decoder on layers where coding does not pay).
    bool keepBlocksWhenLarger = false;
};

// Packs modelDir's trunk into trunkDir (created if needed). Refuses a layer whose
// non-expert tensors are not one contiguous run in one shard, naming the layer and the
// gap. Throws PackError; on failure or cancel (PackError "cancelled"), a trunk already in
// trunkDir is left as it was and the new one's files are removed.
PackResult packTrunk(const std::filesystem::path& modelDir, const std::filesystem::path& trunkDir,
                     const PackObserver& observer = {}, const std::atomic<bool>* cancel = nullptr,
                     const PackOptions& options = {});

} // namespace k3
