#pragma once
// What the trunk streamer and the expert cache did, as the memory report and the
// panels show it: plain figures, so front ends need not see the streamer or the cache.

#include <cstdint>

namespace k3 {

struct TrunkStats {
    int totalLayers = 0;
    int pinnedLayers = 0;
    int ringSlots = 0;
    std::uint64_t pinnedBytes = 0;
    std::uint64_t ringSlotBytes = 0;
    std::uint64_t binds = 0;        // acquire() calls
    std::uint64_t pinnedHits = 0;   // served from the pinned prefix
    std::uint64_t reads = 0;        // layer reads from trunk.bin (pinned load included)
    std::uint64_t pieceReads = 0;   // piece reads of layers larger than the slot
    int piecewiseLayers = 0;        // streamed layers that arrive in two pieces
    std::uint64_t bytesRead = 0;    // from trunk.bin (coded bytes for a compressed trunk)
    std::uint64_t bytesDecoded = 0; // coded layers: the raw bytes their blocks gave
    double ioSeconds = 0; // time the reader spent in read calls (coded layers: waiting for them)
    double decodeSeconds = 0; // time the reader spent decoding blocks (after the reads)
    double waitSeconds = 0;   // time the compute thread waited for a layer
};

struct CacheStats {
    std::uint64_t requests = 0;     // experts asked for by the forward
    std::uint64_t hits = 0;         // served without a read on the request path
    std::uint64_t residentHits = 0; // TRUE resident: in memory before the layer asked
    std::uint64_t prefetchHits = 0; // read by the layer's batch just before use
    std::uint64_t misses = 0;       // read synchronously on request (batch had no slot)
    std::uint64_t evictions = 0;
    std::uint64_t failedReads = 0;
    std::uint64_t diskReads = 0;
    std::uint64_t bytesRead = 0;
    double readSeconds = 0; // wall time spent waiting for expert reads
    double hitRate() const { return requests ? double(hits) / double(requests) : 0; }
    double residentHitRate() const {
        return requests ? double(residentHits) / double(requests) : 0;
    }
};

} // namespace k3
