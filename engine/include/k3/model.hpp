#pragma once
// The Kimi K3 forward pass over a checkpoint in the released format: weights bound by
// tensor name (nothing guessed: a missing or mis-shaped tensor is an error naming it),
// one token at a time with the carried state (MLA latent cache, KDA recurrent and
// ShortConv state). Feeding a prompt token by token from a fresh state IS the
// full-sequence forward: every layer is causal, so both give the same logits.

#include "k3/config.hpp"
#include "k3/error.hpp"
#include "k3/memory_plan.hpp"
#include "k3/memory_stats.hpp"

#include <cstdint>
#include <filesystem>
#include <functional>
#include <limits>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace k3 {

class ModelError : public Error {
public:
    explicit ModelError(const std::string& message, ErrorKind kind = ErrorKind::Model)
        : Error(kind, message) {}
};

// The defaults keep every weight resident, read from the checkpoint at load. The
// memory dial: a packed trunk (trunkDir) streamed within trunkBytes, and routed experts
// served by an expert cache. Every setting gives the same tokens and logits, bit for bit.
struct ModelOptions {
    int layerLimit = 0;             // bind and run only the first N layers (0: all), a diagnostic
    std::filesystem::path trunkDir; // packed trunk (k3 pack); empty: trunk from the checkpoint
    std::uint64_t trunkBytes = std::numeric_limits<std::uint64_t>::max(); // pinned + ring
    PinMode pinMode = PinMode::Measured; // a compressed trunk's pinned layers (memory_plan.hpp)
    std::uint64_t expertCacheBytes = 0;  // > 0: routed experts go through the expert cache
    int expertCacheSlots = 0;            // > 0: exactly this many slots (overrides the bytes)
    int contextLength = 4096;            // positions the plan's KV cache must hold
    int prefillChunk = 0;                // positions per chunk (0: kDefaultPrefillChunk)
    // Speculation width the plan holds rollback records for (0: none, at most
    // kMaxSpeculation); a verification chunk holds this many proposals plus one.
    int maxSpeculation = 16;
    bool enforceMemoryPlan = false; // refuse a plan over 95% of MemAvailable
    // Leave embeddings and lm_head on disk (the ultra preset): one embedding row is read
    // per token and lm_head streams in row blocks of tableBlockBytes (two buffers).
    bool streamModelTables = false;
    std::uint64_t tableBlockBytes = std::uint64_t{64} << 20;
    bool recordCacheTrace = false; // keep the expert request trace (--dump-cache-trace)
    std::string budgetSource;      // how the budget was asked for, for the plan's report
    // A draft model (k3 pack --draft) for speculation: binds no routed experts of its own
    // and runs those `draftOf` holds in memory (resident experts; behind an expert cache,
    // none), never reading any for the draft. Resident: trunkDir and the cache options
    // are ignored. `draftOf` must outlive the draft.
    const class Model* draftOf = nullptr;
};

// Live figures of the memory dial, for the run report and the app's panels.
struct MemoryStats {
    bool trunkStreamed = false; // layers come from a packed trunk
    bool expertsCached = false; // routed experts come through the cache
    TrunkStats trunk;
    CacheStats cache;
    int cacheSlots = 0;
    std::uint64_t cacheSlotBytes = 0;
    ExpertIoInfo expertIo;            // how the cache reads experts (empty without a cache)
    bool modelTablesStreamed = false; // embeddings and lm_head read from disk
    std::uint64_t tableBytesRead = 0; // by the embedding rows and lm_head blocks
};

// Per-conversation state: grows by one position per token fed.
class InferenceState {
public:
    ~InferenceState();
    InferenceState(InferenceState&&) noexcept;
    InferenceState& operator=(InferenceState&&) noexcept;

    int length() const;               // positions fed so far
    void reset();                     // back to an empty conversation
    std::uint64_t cacheBytes() const; // bytes held by the MLA cache and KDA state
    // Bytes allocated for this state: its vectors' capacity, the rollback record included.
    std::uint64_t heldBytes() const;
    InferenceState clone() const; // a snapshot to return to (prompt reuse)

private:
    friend class Model;
    friend class Session; // saveState / loadState read and fill the layers
    struct Data;
    explicit InferenceState(std::unique_ptr<Data> data);
    std::unique_ptr<Data> d_;
};

// Rows fed in place of the token embeddings at some positions of a chunk: an image's
// projector rows at its <|media_pad|> positions (k3/vision.hpp). `positions` index the
// chunk's tokens (increasing); `rows` holds positions.size() x hidden floats.
struct InputRows {
    std::span<const int> positions;
    std::span<const float> rows;
};

struct TokenStats {
    int droppedExperts = 0; // routed experts that could not be loaded (run invalid)
    bool nonFinite = false; // a NaN/Inf reached the logits (run invalid)
    bool stopped = false;   // the forward's `stop` said so: see Model::forward
};

class Model {
public:
    // Reads config.json and binds every tensor of the checkpoint in `dir`.
    static Model load(const std::filesystem::path& dir, const ModelOptions& options = {});

    ~Model();
    Model(Model&&) noexcept;
    Model& operator=(Model&&) noexcept;

    const ModelConfig& config() const;
    int layersBound() const;
    std::uint64_t weightBytes() const; // bytes of tensors held in memory

    InferenceState newState() const;

    // The plan computed at load, before anything was allocated.
    const MemoryPlan& memoryPlan() const;
    MemoryStats memoryStats() const;
    void resetCacheStats();
    // Writes DIR/expert_trace.bin and DIR/expert_hist.json (needs recordCacheTrace).
    void writeCacheTrace(const std::filesystem::path& dir) const;

    // Feeds `token` at position state.length(); writes vocabSize logits.
    TokenStats forward(InferenceState& state, int token, std::span<float> logits) const;
    // Feeds a chunk of T tokens at positions state.length() .. + T - 1: each trunk layer
    // is bound once for the chunk and each unique routed expert fetched once. `logits`
    // holds vocabSize floats (the last position's) or T x vocabSize ([T][vocab], every
    // position's). Every position gets exactly the bits T one-token calls give.
    // keepRollback: record what rollback() needs to return to any position inside
    // this chunk (speculative verification).
    // `replaced`: rows fed instead of the embeddings at some of the chunk's positions.
    // beforeLayer(L): called before each layer L, for progress inside a long chunk and
    // so that it can be stopped within a layer's time. When it returns true the forward
    // ends with stats.stopped and the logits untouched; the state is as it was before the
    // call when no layer had run, else empty (length 0): a partly fed chunk cannot be
    // kept, the recurrent state is updated in place.
    TokenStats forward(InferenceState& state, std::span<const int> tokens, std::span<float> logits,
                       bool keepRollback = false, const InputRows& replaced = {},
                       const std::function<bool(int layer)>& beforeLayer = {}) const;
    // Returns the state to `length` positions, anywhere from the start to the end of the
    // last chunk fed with keepRollback: KDA state replayed from the chunk's record (no
    // weights read), the MLA cache truncated. The same bits as a forward that stopped
    // there. Throws ModelError outside that range.
    void rollback(InferenceState& state, int length) const;

private:
    struct Impl;
    explicit Model(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// Index of the largest logit (lowest index on ties): greedy decoding.
int argmax(std::span<const float> logits);

} // namespace k3
