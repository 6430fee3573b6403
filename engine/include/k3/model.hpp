#pragma once
// The Kimi K3 forward pass over a checkpoint in the released format: weights bound by
// tensor name (nothing guessed: a missing or mis-shaped tensor is an error naming it),
// one token at a time with the carried state (MLA latent cache, KDA recurrent and
// ShortConv state). Feeding a prompt token by token from a fresh state IS the
// full-sequence forward: every layer is causal, so both give the same logits.

#include "k3/config.hpp"

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <stdexcept>
#include <string>
#include <vector>

namespace k3 {

class ModelError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

struct ModelOptions {
    int layerLimit = 0; // bind and run only the first N layers (0: all), a diagnostic
};

// Per-conversation state: grows by one position per token fed.
class InferenceState {
public:
    ~InferenceState();
    InferenceState(InferenceState&&) noexcept;
    InferenceState& operator=(InferenceState&&) noexcept;

    int length() const;              // positions fed so far
    void reset();                    // back to an empty conversation
    std::uint64_t cacheBytes() const; // bytes held by the MLA cache and KDA state
    InferenceState clone() const;    // a snapshot to return to (prompt reuse)

private:
    friend class Model;
    struct Data;
    explicit InferenceState(std::unique_ptr<Data> data);
    std::unique_ptr<Data> d_;
};

struct TokenStats {
    int droppedExperts = 0; // routed experts that could not be loaded (run invalid)
    bool nonFinite = false; // a NaN/Inf reached the logits (run invalid)
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

    // Feeds `token` at position state.length(); writes vocabSize logits.
    TokenStats forward(InferenceState& state, int token, std::span<float> logits) const;

private:
    struct Impl;
    explicit Model(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

// Index of the largest logit (lowest index on ties): greedy decoding.
int argmax(std::span<const float> logits);

} // namespace k3
