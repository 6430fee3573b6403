#pragma once
// The routed-expert cache: a fixed arena of slots, each sized to one expert (aligned up
// to 4096, plus room for the read to start on an aligned boundary), filled straight
// from the checkpoint shards. A slot holds a key, or is EMPTY, or INFLIGHT (being read
// into right now, never a victim, never handed out). A layer's top-k is fetched as a
// batch: reservations are made serially (no two experts can take the same slot), the
// reads run in parallel in disk-offset order, and only what arrived is published, into
// the slot that was RESERVED for it. Slots in use are pinned.
//
// Hit counters separate TRUE resident hits (the expert was in memory before its layer
// asked) from prefetch hits (the batch pulled it off disk moments earlier): the raw
// hit rate of a prefetching cache reads near 100% at any size.
//
// The batch's reads are submitted together and not waited for: acquire() waits only
// for the expert it asks for, so the model computes on the first experts while the
// rest are still in flight (memory/ExpertReader.hpp: io_uring, or a thread pool).
// releaseBatch() waits for every read of the batch (no read outlives its slot's pin).
//
// Not thread-safe: one model thread drives it (only the reads run elsewhere).

#include "k3/config.hpp"
#include "k3/error.hpp"
#include "k3/memory_stats.hpp"
#include "k3/safetensors.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

namespace k3 {

namespace memory {
class ExpertReader;
}

class CacheError : public Error {
public:
    explicit CacheError(const std::string& message) : Error(ErrorKind::Cache, message) {}
};

class AlignedFile;

// One aligned read that brings a whole expert into its slot (an expert whose tensors
// form one run in one shard): an asynchronous reader can issue it itself.
struct ExpertWindow {
    const AlignedFile* file = nullptr;
    std::uint64_t offset = 0;      // 4096-aligned
    std::size_t length = 0;        // 4096-aligned; may run past the end of the file
    std::size_t needed = 0;        // bytes that must arrive (through the payload's end)
    std::size_t payloadOffset = 0; // where the payload starts in the slot
};

// Where the bytes of routed experts come from.
class ExpertStore {
public:
    virtual ~ExpertStore() = default;
    // Bytes a slot must have to receive any expert (a multiple of 4096).
    virtual std::size_t slotBytes() const = 0;
    // Bytes of one expert's payload (what a read delivers, for the statistics).
    virtual std::uint64_t expertBytes(int layer, int expert) const = 0;
    // Sort key: reads of a batch are issued in this order (shard, then file offset).
    virtual std::uint64_t diskOrder(int layer, int expert) const = 0;
    // Reads the expert into `slot` (slotBytes(), 4096-aligned) and returns where its
    // payload starts in the slot. Throws (IoError, CacheError) on a failed or short read,
    // or (CheckpointExpertStore) on an E8M0 scale byte 0xFF (NaN): the cache counts it
    // as a failed read, the expert is dropped and the run is invalid.
    virtual std::size_t read(int layer, int expert, std::byte* slot) const = 0;
    // The expert as one aligned window, when it is one (false: only read() brings it).
    virtual bool window(int, int, ExpertWindow&) const { return false; }
    // After a window arrived: the checks read() makes on the bytes (throws as read()).
    virtual void checkArrived(int, int, const std::byte*) const {}
};

// Offsets of an expert's tensors from the start of its payload. MXFP4 (type U8): six
// tensors, packed + scales. Plain experts (no quantization_config; type BF16 or F32, as
// each tensor declares): the matrix sits at w*Packed and w*Scales is unused.
struct ExpertLayout {
    std::size_t w1Packed = 0, w1Scales = 0, w3Packed = 0, w3Scales = 0, w2Packed = 0, w2Scales = 0;
    DType w1Type = DType::U8, w3Type = DType::U8, w2Type = DType::U8;
};

// Routed experts read from the checkpoint shards, MXFP4 or plain BF16/F32 as config.json
// declares (quantization_config present or not). An expert whose tensors form one
// contiguous run is one aligned O_DIRECT read into the slot (no copy); otherwise each
// tensor is read separately. Shapes are checked against config.json at construction.
class CheckpointExpertStore : public ExpertStore {
public:
    // checkShapes=false only for fixtures whose experts are bytes, not a model (the
    // peer's cache fixture).
    CheckpointExpertStore(const Checkpoint& checkpoint, const ModelConfig& config, int layerCount,
                          bool checkShapes = true);
    ~CheckpointExpertStore() override;

    std::size_t slotBytes() const override { return slotBytes_; }
    std::uint64_t expertBytes(int layer, int expert) const override;
    std::uint64_t diskOrder(int layer, int expert) const override;
    std::size_t read(int layer, int expert, std::byte* slot) const override;
    bool window(int layer, int expert, ExpertWindow& out) const override;
    void checkArrived(int layer, int expert, const std::byte* slot) const override;

    const ExpertLayout& layout(int layer, int expert) const;
    int experts() const { return numExperts_; }
    bool hasLayer(int layer) const;
    std::uint64_t totalExperts() const;

private:
    struct Piece {
        std::uint64_t fileOffset = 0;
        std::uint64_t nbytes = 0;
        std::size_t slotOffset = 0;
        std::uint32_t shard = 0;
    };
    struct Entry {
        std::uint32_t shard = 0;
        bool contiguous = true;
        std::uint64_t lo = 0, hi = 0; // contiguous: the run in the shard
        std::vector<Piece> pieces;    // non-contiguous: one per tensor
        ExpertLayout layout;
        std::uint64_t bytes = 0;
    };
    const Entry& entry(int layer, int expert) const;
    std::size_t readBytes(int layer, int expert, std::byte* slot) const;

    std::vector<std::filesystem::path> shardPaths_;
    std::vector<std::vector<Entry>> entries_; // [layer][expert]; empty for dense layers
    int numExperts_ = 0;
    std::size_t slotBytes_ = 0;
    bool checkScales_ = true;      // false for byte fixtures (checkShapes=false)
    std::size_t scaleBytes13_ = 0; // w1/w3 weight_scale bytes
    std::size_t scaleBytes2_ = 0;  // w2 weight_scale bytes
    struct Files;
    std::unique_ptr<Files> files_;
};

// Eviction policy: which keyed, unpinned slot gives way. Pluggable; LRU first.
class EvictionPolicy {
public:
    virtual ~EvictionPolicy() = default;
    virtual void inserted(int slot) = 0; // a key was published into slot
    virtual void used(int slot) = 0;     // a request hit it
    virtual void removed(int slot) = 0;  // evicted or emptied
    // A slot to evict among those `evictable` accepts (keyed and unpinned); -1 when none.
    virtual int victim(const std::function<bool(int)>& evictable) = 0;
};

enum class CachePolicy { Lru };
std::unique_ptr<EvictionPolicy> makeEvictionPolicy(CachePolicy policy, int slotCount);

// How one request was served, as the request trace records it.
enum class CacheHit : std::uint8_t {
    Resident, // in memory before the layer asked (a TRUE resident hit)
    Prefetch, // read by the layer's batch just before use
    Miss,     // read synchronously on request
    Failed,   // the read failed: the expert was dropped (run invalid)
};
const char* cacheHitName(CacheHit hit); // "resident", "prefetch", "miss", "failed"

struct CacheRequest {
    std::int64_t step = 0; // the model's forward call (0-based: prompt positions, then tokens)
    std::int32_t layer = 0;
    std::int32_t expert = 0;
    CacheHit hit = CacheHit::Miss;
};

// How the batch's reads are issued (memory/ExpertReader.hpp). Auto: K3_EXPERT_IO
// (threads|uring) when set, else io_uring where the kernel allows, else threads.
enum class ExpertIo { Auto, Threads, Uring, Inline };

struct CacheOptions {
    int slotCount = 1;
    CachePolicy policy = CachePolicy::Lru;
    bool recordTrace = false; // keep every request for --dump-cache-trace
    int readThreads = 0;      // reads in flight at most (0: 16, the doctor's QD16)
    ExpertIo io = ExpertIo::Auto;
};

class ExpertCache {
public:
    static constexpr std::int64_t kEmpty = -1;
    static constexpr std::int64_t kInflight = -2;

    ExpertCache(std::shared_ptr<const ExpertStore> store, const CacheOptions& options);
    ~ExpertCache();
    ExpertCache(const ExpertCache&) = delete;
    ExpertCache& operator=(const ExpertCache&) = delete;

    // The batch: reserve slots for the missing experts serially, submit their reads in
    // disk-offset order and return; each is published when it arrives. Every expert of
    // the batch stays pinned until acquired and released, or releaseBatch().
    void prefetch(int layer, std::span<const int> experts);

    struct Handle {
        int slot = -1;
        const std::byte* data = nullptr; // null: the read failed (a dropped expert)
    };
    // Pins and returns the expert (reading it now when the batch had no room for it).
    Handle acquire(int layer, int expert);
    void release(Handle& handle);
    // Waits for the batch's reads still in flight, then drops the pins prefetch() left
    // on experts never acquired.
    void releaseBatch();
    // The request for `expert` served `positions` (position, expert) selections of the
    // chunk: positions - 1 of them are chunk reuse, not hits.
    void countPositionUses(std::uint64_t positions) { stats_.positionUses += positions; }
    const ExpertIoInfo& ioInfo() const { return ioInfo_; }

    CacheStats stats() const { return stats_; }
    void resetStats() { stats_ = {}; }
    int slotCount() const { return int(keys_.size()); }
    std::size_t slotBytes() const { return slotBytes_; }
    std::uint64_t arenaBytes() const;
    std::int64_t slotKey(int slot) const { return keys_.at(std::size_t(slot)); }
    int pins(int slot) const { return pins_.at(std::size_t(slot)); }
    static std::int64_t key(int layer, int expert) {
        return (std::int64_t(layer) << 32) | std::uint32_t(expert);
    }

    // Requests in order, as (layer, expert), when recordTrace was set.
    const std::vector<std::pair<std::int32_t, std::int32_t>>& trace() const { return trace_; }
    // The same requests with their step and how each was served.
    const std::vector<CacheRequest>& requests() const { return requests_; }
    // Marks the start of the next forward step (the trace's step column).
    void nextStep() { ++step_; }
    // DIR/expert_requests.tsv (a header line "step<TAB>layer<TAB>expert<TAB>hit", then
    // one line per request), DIR/expert_trace.bin (little-endian int32 pairs: layer,
    // expert; the peer's format) and DIR/expert_hist.json (requests per layer and expert).
    void writeTrace(const std::filesystem::path& dir) const;

private:
    int pickVictim();
    std::byte* slotData(int slot) const;
    void evict(int slot);
    void publish(int slot, std::int64_t k, std::size_t dataOffset, bool byPrefetch);
    void takeCompletion();      // one finished batch read, published or freed
    void waitForRead(int slot); // until the batch read into `slot` finished
    void drainReads();          // until no batch read is in flight

    std::shared_ptr<const ExpertStore> store_;
    std::unique_ptr<EvictionPolicy> policy_;
    std::size_t slotBytes_ = 0;
    struct Arena;
    std::unique_ptr<Arena> arena_;
    std::vector<std::int64_t> keys_;
    std::vector<int> pins_;
    std::vector<std::size_t> dataOffset_;
    std::vector<char> prefetched_; // published by a batch, not yet requested
    std::vector<char> batchPinned_;
    std::unordered_map<std::int64_t, int> where_;
    CacheStats stats_;
    bool recordTrace_ = false;
    int readThreads_ = 16;
    std::vector<std::pair<std::int32_t, std::int32_t>> trace_;
    std::vector<CacheRequest> requests_;
    std::int64_t step_ = -1;
    // Batch reads in flight: the key each slot is being read for (kEmpty: none).
    std::vector<std::int64_t> pendingKey_;
    std::unordered_map<std::int64_t, int> pendingWhere_;
    int pendingReads_ = 0;
    double busySince_ = 0; // seconds on the steady clock when the in-flight count left 0
    ExpertIoInfo ioInfo_;
    std::unique_ptr<memory::ExpertReader> reader_; // last: gone before the arena it reads into
};

// Reads a trace in the peer's expert_trace.bin format. Throws CacheError.
std::vector<std::pair<std::int32_t, std::int32_t>>
readExpertTrace(const std::filesystem::path& file);

struct TraceReplay {
    int capacity = 0;
    CacheStats stats;
};
// Replays a trace through the real cache logic (no bytes moved): consecutive requests
// for one layer form a batch, as the forward issues them.
TraceReplay replayExpertTrace(std::span<const std::pair<std::int32_t, std::int32_t>> trace,
                              int capacity, CachePolicy policy = CachePolicy::Lru);
// The same, one request per distinct expert of a layer visit (k3/cache_replay.hpp).
TraceReplay replayLayerVisits(std::span<const std::pair<std::int32_t, std::int32_t>> trace,
                              int capacity, CachePolicy policy = CachePolicy::Lru);

} // namespace k3
