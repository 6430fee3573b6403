#pragma once
// The Kimi K3 forward pass over a checkpoint in the released format: weights bound by
// tensor name (nothing guessed: a missing or mis-shaped tensor is an error naming it),
// one token at a time with the carried state (MLA latent cache, KDA recurrent and
// ShortConv state). Feeding a prompt token by token from a fresh state IS the
// full-sequence forward: every layer is causal, so both give the same logits.

#include "k3/config.hpp"
#include "k3/error.hpp"
#include "k3/launch.hpp"
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

namespace model {
struct LoadOptions;
}

class ModelError : public Error {
public:
    explicit ModelError(const std::string& message, ErrorKind kind = ErrorKind::Model)
        : Error(kind, message) {}
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
    // Reads config.json and binds every tensor of the checkpoint in config.modelDir. A
    // LaunchConfig of a model folder alone keeps every weight resident; the memory dial
    // (a packed trunk streamed within the trunk budget, routed experts behind an expert
    // cache) gives the same tokens and logits, bit for bit. Throws LaunchError for what
    // validate(config) reports.
    static Model load(const LaunchConfig& config, const LaunchDiagnostics& diagnostics = {});
    // Every weight of the checkpoint in `dir` resident (a LaunchConfig of the folder alone).
    static Model load(const std::filesystem::path& dir);
    // A draft model (k3 pack --draft) in `dir` for speculation beside `target`: it binds
    // no routed experts of its own and runs those `target` holds in memory (resident
    // experts; behind an expert cache, none), never reading any. Resident: the config's
    // trunk and budget are ignored; its context, chunk and the layer limit apply.
    // `target` must outlive the draft.
    static Model loadDraft(const std::filesystem::path& dir, const Model& target,
                           const LaunchConfig& config, const LaunchDiagnostics& diagnostics = {});

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
    // Writes DIR/expert_trace.bin and DIR/expert_hist.json (needs
    // LaunchDiagnostics::recordCacheTrace).
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
    static Model loadResolved(const model::LoadOptions& options);
    std::unique_ptr<Impl> impl_;
};

// Index of the largest logit (lowest index on ties): greedy decoding.
int argmax(std::span<const float> logits);

} // namespace k3
