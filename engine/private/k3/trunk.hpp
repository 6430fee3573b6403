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
#include "k3/memory_stats.hpp"
#include "k3/pack.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace k3 {

class TrunkError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// A streamed layer larger than the ring slot arrives in two PIECES, in the order the
// forward uses them: piece 0 holds everything but the MLP (norms, AttnRes, attention),
// piece 1 the MLP (dense or the MoE's router, latent projections, shared experts). While
// the attention computes on piece 0, piece 1 is already in flight (with a ring of 2).
// Tensors of a piece are not contiguous in trunk.bin, so a piece is a few aligned
// windows placed one after another in the slot.
struct TrunkPiece {
    struct Run {
        std::uint64_t fileOffset = 0; // 4096-aligned, in trunk.bin
        std::uint64_t bytes = 0;      // 4096-aligned
        std::uint64_t slotOffset = 0; // where the window lands in the slot
    };
    std::vector<Run> runs;
    std::uint64_t slotBytes = 0;                                // sum of the windows
    std::uint64_t payloadBytes = 0;                             // the tensors' own bytes
    std::map<std::string, std::uint64_t, std::less<>> tensorAt; // name -> offset in the slot
};

// True for the tensors of a layer's MLP piece (".mlp." and ".block_sparse_moe.").
bool isMlpPieceTensor(std::string_view name);

// The two pieces of one layer record (piece 0: everything else, piece 1: the MLP).
std::array<TrunkPiece, 2> splitLayerRecord(const TrunkRecord& record);

// The slot bytes the larger of a record's two pieces needs.
std::uint64_t largestPieceBytes(const TrunkRecord& record);

// The reader's buffers for a compressed trunk (0 for a raw one): coded blocks are read
// into one half of a staging buffer of kTrunkStagingBytes while the other half is decoded
// into the slot, and a block that straddles a piece's window is decoded into a scratch
// block first. The plan counts them, and the block index (8 bytes a block). 2 x 32 MiB: one read of
// 4 MiB at a time left the disk idle (bench_trunk_codec e2e).
inline constexpr std::uint64_t kTrunkStagingBytes = std::uint64_t{64} << 20;
std::uint64_t trunkDecodeBufferBytes(const TrunkIndex& index);

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
    // TrunkError naming the layer when its read failed, or when the layer is piecewise.
    const std::byte* acquire(int layer);

    // True when layer L is streamed in two pieces (it is larger than the ring slot).
    bool piecewise(int layer) const;
    // Piece p (0 or 1) of a piecewise layer, laid out as piece(layer, p) says; valid
    // until the next acquire. Starts the read of the next piece or layer.
    const std::byte* acquirePiece(int layer, int piece);
    const TrunkPiece& piece(int layer, int piece) const;

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
