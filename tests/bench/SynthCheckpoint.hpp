#pragma once
// A synthetic Kimi K3 checkpoint in the RELEASED format at the real widths: nested
// config.json (text_config, linear_attn_config, quantization_config), shards named
// model-000NN-of-000MM.safetensors with model.safetensors.index.json, the released
// tensor names and dtypes (BF16 trunk, F32 A_log and router bias, MXFP4 routed experts
// as U8 weight_packed + weight_scale, 17,547,264 bytes each), with a chosen number of
// layers and routed experts per layer. Weights are random but valid: finite BF16 of
// modest size, norm gains near 1, E8M0 scales in 2^-9..2^-5 (never the NaN code 255).
//
// Written at disk speed: each tensor's bytes are copied from a few pre-filled random
// pools (nothing is generated per byte) into 16 MB O_DIRECT sequential writes.

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <functional>
#include <vector>

namespace k3synth {

struct SynthOptions {
    int layers = 2;         // num_hidden_layers (layer 0 dense, the rest MoE)
    int experts = 4;        // routed experts per MoE layer (num_experts)
    std::uint64_t seed = 1; // the same seed writes the same bytes
    // The layers' BF16 trunk tensors as fresh draws of N(0, 0.02) rounded to BF16 (each
    // element its own draw, exact to 2^-48 in probability), so a compressed trunk's ratio
    // means something; otherwise they are cut from pools with 4 equally likely exponents.
    bool gaussianTrunk = false;
    // Routing held to a chosen set per MoE layer (index: layer; empty: unrestricted): the
    // router bias (e_score_correction_bias, which only selects, never weighs) is 0 on the
    // set and -4 elsewhere, so every position picks its top-k inside the set (sigmoid
    // scores are in (0, 1)). A prompt long enough then reads exactly the set's experts:
    // how benchmarks give the synthetic model a real trace's expert union.
    std::vector<std::vector<int>> allowedExperts;
    // Every shard's header as written, its tensor bytes a hole (ftruncate: ext4 stores no
    // block), so the full-size model (93 layers x 896 experts, 1.56 TB) costs a few MB of
    // disk: for the memory planner and the wizard, which read headers only. Its weights
    // are all zero: it cannot answer.
    bool sparse = false;
    // The vision tower and projector as released (168 BF16 tensors, 0.89 GB, their own
    // shard) and config.json's vision_config (shared/reference/vision.md).
    bool vision = false;
};

// Per layer, the experts a recorded trace (k3 --dump-cache-trace's expert_trace.bin:
// little-endian int32 (layer, expert) pairs) used at trace layer `firstTraceLayer` + L - 1
// for each MoE layer L of a `layers`-layer checkpoint (layer 0 is dense: empty).
std::vector<std::vector<int>> traceExpertUnions(const std::filesystem::path& trace, int layers,
                                                int firstTraceLayer);

// Fills n BF16 values with draws of round_to_bf16(N(0, 0.02)) from a stream seeded by seed.
void fillGaussianBf16(std::uint16_t* out, std::size_t n, std::uint64_t seed);

struct SynthResult {
    std::uint64_t bytes = 0; // tensor bytes written
    int shards = 0;
    int tensors = 0;
    double seconds = 0;
};

// Called after each shard: (bytes so far, bytes in all).
using SynthProgress = std::function<void(std::uint64_t done, std::uint64_t total)>;

// Writes the checkpoint into `dir` (created). Throws std::runtime_error naming the file.
SynthResult writeSynthCheckpoint(const std::filesystem::path& dir, const SynthOptions& options,
                                 const SynthProgress& progress = {});

// The bytes writeSynthCheckpoint would write (tensor data only), to check free space.
std::uint64_t synthCheckpointBytes(const SynthOptions& options);

// The trunk `k3 pack` writes for a checkpoint whose tensor bytes are all zero (a sparse
// one above), without reading or writing those zeros: trunk.json with the packer's records
// (one per layer, then the model-level tensors, each 4096-aligned) and the XXH3-64 of
// zeros, trunk.bin a hole of its size. Returns trunk.bin's size. Opening it with the model
// still checks it as any trunk (its tensors hashed from the shards' holes, once).
std::uint64_t writeZeroTrunk(const std::filesystem::path& modelDir,
                             const std::filesystem::path& trunkDir);

} // namespace k3synth
