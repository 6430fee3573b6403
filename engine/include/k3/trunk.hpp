#pragma once
// The trunk streamer: a pinned PREFIX of layers held for the whole run, and a ring of
// slots through which every other layer is streamed from trunk.bin with O_DIRECT (one
// aligned read per layer), the NEXT layer's read in flight on a reader thread while
// the current layer computes.
//
// Why never LRU: the forward walks layers 0..N-1 in the same order on every token, a
// cyclic scan. Under LRU the layer needed next is always the least recently used one,
// so it has just been evicted: an LRU of N-3 slots over an N-layer cycle hits exactly
// 0%. A pinned prefix of P layers hits P/N, deterministically.

#include "k3/memory_plan.hpp"
#include "k3/pack.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <stdexcept>

namespace k3 {

class TrunkError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct TrunkStats {
    int totalLayers = 0;
    int pinnedLayers = 0;
    int ringSlots = 0;
    std::uint64_t pinnedBytes = 0;
    std::uint64_t ringSlotBytes = 0;
    std::uint64_t binds = 0;      // acquire() calls
    std::uint64_t pinnedHits = 0; // served from the pinned prefix
    std::uint64_t reads = 0;      // layer reads from trunk.bin (pinned load included)
    std::uint64_t bytesRead = 0;
    double ioSeconds = 0;   // time the reader spent in read calls
    double waitSeconds = 0; // time the compute thread waited for a layer
};

class TrunkStreamer {
public:
    // Reads the pinned prefix now (plan.pinnedLayers layers) and allocates the ring
    // (plan.ringSlots x plan.ringSlotBytes). Throws TrunkError naming the layer.
    TrunkStreamer(const TrunkIndex& index, const MemoryPlan& plan);
    ~TrunkStreamer();
    TrunkStreamer(const TrunkStreamer&) = delete;
    TrunkStreamer& operator=(const TrunkStreamer&) = delete;

    // Layer L's record bytes, valid until acquire() of another streamed layer after the
    // next one. Starts the read of the next streamed layer (cyclic order). Throws
    // TrunkError naming the layer when its read failed.
    const std::byte* acquire(int layer);

    bool pinned(int layer) const;
    // A pinned layer's bytes (stable for the streamer's lifetime); null when not pinned.
    const std::byte* pinnedData(int layer) const;
    TrunkStats stats() const;
    const TrunkIndex& index() const;

private:
    struct Impl;
    std::unique_ptr<Impl> d_;
};

} // namespace k3
