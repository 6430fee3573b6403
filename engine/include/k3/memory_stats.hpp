#pragma once
// What the trunk streamer and the expert cache did, as the memory report and the
// panels show it: plain figures, so front ends need not see the streamer or the cache.

#include <cstdint>
#include <string>

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
    // A compute thread waiting for a streamed unit decodes blocks alongside the reader.
    double helperDecodeSeconds = 0;
    std::uint64_t helperBytesDecoded = 0; // part of bytesDecoded
    // Pinned layers kept compressed in RAM, decoded by the compute threads before each use.
    int pinnedCompressedLayers = 0;
    std::uint64_t pinnedBytesDecoded = 0; // not part of bytesDecoded (no read behind it)
    double pinnedDecodeSeconds = 0;
    double waitSeconds = 0; // time the compute thread waited for a layer
};

// A request is one expert of one layer's chunk (a chunk asks for each expert of its
// union once). Only residentHits were served without a read: prefetchHits and misses
// came off the disk. An expert chosen by several positions of a chunk is read once and
// used by all of them: that is chunk reuse, not a hit (positionUses - requests).
struct CacheStats {
    std::uint64_t requests = 0;     // experts asked for by the forward
    std::uint64_t hits = 0;         // residentHits + prefetchHits (not a hit rate to show)
    std::uint64_t residentHits = 0; // TRUE hits: in memory before the layer asked, no read
    std::uint64_t prefetchHits = 0; // read by the layer's batch just before use
    std::uint64_t misses = 0;       // read synchronously on request (batch had no slot)
    std::uint64_t positionUses = 0; // (position, expert) selections the requests served
    std::uint64_t evictions = 0;
    std::uint64_t failedReads = 0;
    std::uint64_t diskReads = 0;
    std::uint64_t bytesRead = 0;
    double readSeconds = 0;   // wall time the model thread waited for expert reads
    double ioBusySeconds = 0; // wall time with at least one expert read in flight
    int maxInFlight = 0;      // the most expert reads in flight at once
    double residentHitRate() const {
        return requests ? double(residentHits) / double(requests) : 0;
    }
    double trueHitRate() const { return residentHitRate(); }
    // Selections served by an expert another position of the same chunk had brought in.
    std::uint64_t chunkReuse() const {
        return positionUses > requests ? positionUses - requests : 0;
    }
};

// How routed experts are read (the run report's "expert_io").
struct ExpertIoInfo {
    std::string mode; // "uring", "threads" or "inline"
    int depth = 0;    // reads in flight at most
    std::string note; // why this mode, when not the default (e.g. why io_uring is not used)
};

} // namespace k3
