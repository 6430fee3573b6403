#pragma once
// The memory plan: every byte the run will hold, added up BEFORE anything is allocated
// and compared with MemAvailable (not MemFree). A plan above 95% of what is available
// is refused with the numbers and the options. The plan is a forecast; the run report's
// peak RSS (getrusage) is the measured figure.
//
// The trunk budget buys a pinned PREFIX of layers plus a ring of streamed slots; the
// pinned count and the slot size depend on each other (the slot must hold the largest
// layer NOT pinned), so they are computed as a fixed point.

#include "k3/error.hpp"
#include <cstdint>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace k3 {

// How a compressed trunk's pinned layers are held: as raw bytes, compressed (decoded
// before each use, so a budget pins more layers), or compressed where a measurement at
// load says the decode costs less time than the reads it saves (pinCompressedPays).
enum class PinMode { Raw, Compressed, Measured };

// Why a plan was refused, with the figure a front end turns into its own advice.
class MemoryRefusal : public Error {
public:
    enum class Reason {
        Setting,       // a preset or budget that cannot be read
        TrunkTooSmall, // the trunk budget holds no ring slot: needs minTrunkBytes()
        OverAvailable, // the plan exceeds 95% of the available memory
        ContextTooBig, // ... and the KV cache is what does not fit: fitPositions() do
    };
    explicit MemoryRefusal(const std::string& message, Reason reason = Reason::Setting,
                           std::uint64_t minTrunkBytes = 0, std::uint64_t fitPositions = 0)
        : Error(ErrorKind::Memory, message), reason_(reason), minTrunkBytes_(minTrunkBytes),
          fitPositions_(fitPositions) {}
    Reason reason() const { return reason_; }
    std::uint64_t minTrunkBytes() const { return minTrunkBytes_; }
    std::uint64_t fitPositions() const { return fitPositions_; }

private:
    Reason reason_;
    std::uint64_t minTrunkBytes_;
    std::uint64_t fitPositions_;
};

// The budget the user asked for, in bytes. `automatic`: fill from MemAvailable, trunk first.
struct MemoryBudget {
    std::uint64_t trunkBytes = 0;
    std::uint64_t cacheBytes = 0;
    bool automatic = false;
    std::string source; // "preset laptop, then --cache-gb 2" (for the report)
};

// What the plan needs to know about the model, from config.json and the packed trunk.
struct PlanInputs {
    std::vector<std::uint64_t> layerBytes; // each trunk layer record (payload bytes)
    // Per layer, the slot bytes of its larger piece (attention | MLP); empty: a layer
    // larger than the ring share is refused rather than streamed in pieces.
    std::vector<std::uint64_t> layerPieceBytes;
    std::uint64_t modelBytes = 0;       // embeddings, final norm, output AttnRes, lm_head
    std::uint64_t trunkDecodeBytes = 0; // a compressed trunk's reader buffers
    // A compressed trunk's layer records as stored (coded); set to pin layers compressed:
    // a pinned layer then costs its stored bytes, and one decode slot of the largest
    // pinned layer holds the pinned layer in use (decoded before each use).
    std::vector<std::uint64_t> layerStoredBytes;
    std::uint64_t residentExpertBytes = 0; // routed experts held in memory (no cache)
    std::uint64_t expertSlotBytes = 0;     // one routed expert, aligned up to 4096
    std::uint64_t expertCount = 0;         // routed experts in the whole model
    int topK = 0;
    // Every copy a session holds (live, prompt snapshot, rollback record), all layers.
    std::uint64_t stateBytes = 0;         // KDA recurrent + ShortConv state
    std::uint64_t kvBytesPerPosition = 0; // MLA latent + rope
    int contextLength = 0;                // positions the KV cache must hold
    std::uint64_t bufferBytes = 0;        // logits, scratch and a chunk's tile buffers
    // What a chunk holds for its whole pass, per position (the residual stream, the
    // AttnRes block snapshots, a MoE layer's routing, routed input and expert outputs);
    // the tile buffers are in bufferBytes. The plan sizes the chunk from it
    // (requestedChunk positions, else see kDefaultPrefillChunk; fewer when memory does
    // not hold them).
    std::uint64_t chunkBytesPerPosition = 0;
    int requestedChunk = 0; // 0: as many positions as the cache's bytes, see kDefaultPrefillChunk
    bool streamed = true;   // false: everything resident (no --trunk)
    // Embeddings and lm_head stay on disk (the ultra preset): modelBytes then counts
    // only the small model tensors and the bounded read buffers.
    bool modelTablesStreamed = false;
    // A draft model for speculation (LaunchConfig::draftDir), resident: everything its
    // own plan holds (weights, state, KV cache, buffers).
    std::uint64_t draftBytes = 0;
    // The vision tower and projector (vision_tower.*, mm_projector.*) as VisionTower holds
    // them, when the checkpoint has one: loaded on the first image, counted from the start.
    std::uint64_t visionBytes = 0;
};

struct MemoryPlan {
    // trunk
    int totalLayers = 0;
    int pinnedLayers = 0;
    std::uint64_t pinnedBytes = 0;
    int ringSlots = 0;               // 2: one computing, the next in flight; 1: no overlap
    std::uint64_t ringSlotBytes = 0; // aligned; holds the largest layer not pinned
    // A streamed layer larger than the slot arrives in two pieces (attention, MLP); the
    // slot then holds the larger piece, so the budget is never silently overshot.
    bool piecewise = false;
    // Pinned layers kept compressed in RAM (pinnedBytes counts their stored bytes) and
    // decoded into the decode slot before each use; the slot is part of the trunk budget.
    bool pinCompressed = false;
    int pinnedCompressedLayers = 0; // of pinnedLayers: those whose record is coded
    std::uint64_t pinDecodeSlotBytes = 0;
    // What decided it (the measured decode and disk rates), for the report; empty: not asked.
    std::string pinChoice;
    std::uint64_t trunkBytes() const {
        return pinnedBytes + pinDecodeSlotBytes + std::uint64_t(ringSlots) * ringSlotBytes;
    }
    // A compressed trunk's staging and scratch buffers (trunkDecodeBufferBytes).
    std::uint64_t trunkDecodeBytes = 0;
    // the rest
    std::uint64_t modelBytes = 0;
    bool modelTablesStreamed = false;
    std::uint64_t residentExpertBytes = 0;
    int cacheSlots = 0;
    std::uint64_t expertSlotBytes = 0;
    std::uint64_t cacheBytes() const { return std::uint64_t(cacheSlots) * expertSlotBytes; }
    std::uint64_t stateBytes = 0;
    std::uint64_t bufferBytes = 0; // the chunk's activations included
    // Of bufferBytes: the chunk's per-position state, held only while a prefill runs.
    std::uint64_t chunkBytes = 0;
    int chunkPositions = 1; // positions a prefill chunk holds at this budget
    int requestedChunk = 0; // what was asked (0: the default)
    int maxSpeculation = 0; // proposals per verification the state copies are sized for
    std::uint64_t kvBytes = 0;
    int contextLength = 0;
    std::uint64_t draftBytes = 0;  // PlanInputs::draftBytes
    std::uint64_t visionBytes = 0; // PlanInputs::visionBytes
    // The tower's rule (issue 33). Resident: loaded on the first image and kept, when the
    // plan holds it next to the full prefill chunk (or the memory available is unknown).
    // Otherwise transient: loaded for each prompt with images and released as soon as
    // its rows are computed, before the prefill, whose chunk then uses that memory: the
    // two take turns, so the plan counts the larger of the two, not their sum.
    bool visionResident = true;
    // What the tower adds to total(): visionBytes resident; transient, only what it
    // holds beyond the chunk's state (chunkBytes) it takes turns with.
    std::uint64_t visionPlanBytes() const {
        if (visionResident) return visionBytes;
        return visionBytes > chunkBytes ? visionBytes - chunkBytes : 0;
    }
    std::uint64_t total() const;
    std::uint64_t available = 0;
    std::string availableBoundBy = "MemAvailable"; // or the cgroup limit that bound it
    MemoryBudget budget;

    // "memory plan\n  trunk (STREAMED) ..." as the run report prints it.
    std::string format() const;
};

inline constexpr double kPlanMaxShareOfAvailable = 0.95;
// The shortest unasked chunk (and the one an automatic budget reserves while it is
// shared out). Past it, an unasked chunk holds as many positions as the expert cache's
// bytes pay for, up to the context: only the per-position state (chunkBytesPerPosition)
// grows with it, so a long prompt reads the trunk and its experts' union once.
inline constexpr int kDefaultPrefillChunk = 64;
// Positions per tile of a chunk's products (the kernels' matmat shares each weight read
// over 64 columns): the tile buffers are fixed, whatever the chunk.
inline constexpr int kPrefillTilePositions = 64;

struct ModelConfig;
// What a prefill chunk holds per position for its whole pass, for the first `layers`
// layers of `config` (PlanInputs::chunkBytesPerPosition).
std::uint64_t chunkBytesPerPosition(const ModelConfig& config, int layers);
// The tile buffers of a chunk's products, whatever its length (part of bufferBytes).
std::uint64_t prefillTileBytes(const ModelConfig& config);
// The widest speculative verification: proposals per pass.
inline constexpr int kMaxSpeculation = 32;

// The pinned prefix for `budgetBytes`, as the fixed point with the ring slot size.
// Fills totalLayers, pinnedLayers, pinnedBytes, ringSlots, ringSlotBytes, piecewise.
// Whole layers first (a ring of 2, then of 1); when no slot fits the largest unpinned
// layer and `pieceBytes` is given, layers over the slot stream in two pieces and the
// slot is the ring's share of the budget (a ring of 2, then of 1). A budget of 0 asks for
// the smallest ring: nothing pinned, one slot of the largest piece (or layer). Throws
// MemoryRefusal when the budget cannot hold even that (the message gives the numbers).
// With `storedBytes` (a compressed trunk's stored layer records), pinned layers stay
// compressed: each costs its stored bytes, plus one decode slot of the largest raw pinned
// layer (pinCompressed, pinDecodeSlotBytes).
void planTrunk(MemoryPlan& plan, std::span<const std::uint64_t> layerBytes,
               std::uint64_t budgetBytes, std::span<const std::uint64_t> pieceBytes = {},
               std::span<const std::uint64_t> storedBytes = {});

// Pinning compressed decodes the layers a raw plan pins (rawPinnedBytes) on every token
// and saves the reads of the layers it pins beyond them (storedSavedBytes): true when the
// decode at decodeBytesPerSecond takes less time than those reads at diskBytesPerSecond.
bool pinCompressedPays(std::uint64_t rawPinnedBytes, std::uint64_t storedSavedBytes,
                       double decodeBytesPerSecond, double diskBytesPerSecond);

// Adds everything up. An automatic budget is filled from `availableBytes`: the trunk
// first (pinning is worth more than cache), the rest to the cache. Does not refuse.
MemoryPlan planMemory(const PlanInputs& inputs, const MemoryBudget& budget,
                      std::uint64_t availableBytes);

// Throws MemoryRefusal when the plan exceeds 95% of available memory: the message has
// every component, the shortfall and the options. When the KV cache is what breaks the
// plan, it says that this is a memory limit of this machine, not an engine ceiling. An
// unknown available figure (0) is not judged.
void enforceMemoryPlan(const MemoryPlan& plan);

// "1.23 GB" / "456.00 MB" / "789 B".
std::string formatBytes(std::uint64_t bytes);

} // namespace k3
