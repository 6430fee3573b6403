#pragma once
// Weights of the model bound by tensor name, each checked against the shape the
// config implies. Held in memory in their stored format (BF16 / F32 / packed MXFP4);
// the streaming trunk and expert cache replace this storage, not the forward pass.

#include "k3/config.hpp"
#include "k3/kernels.hpp"
#include "k3/safetensors.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace k3::model {

// A 2-D weight in BF16 or F32 (F16 is widened to F32 at load).
struct Matrix {
    DType dtype = DType::F32;
    std::vector<std::byte> raw;
    int rows = 0;
    int cols = 0;
    WeightView view() const;
    std::uint64_t bytes() const { return raw.size(); }
};

struct PackedMatrix { // MXFP4: ceil(cols/2) bytes + ceil(cols/32) scales per row
    std::vector<std::uint8_t> packed;
    std::vector<std::uint8_t> scales;
    int rows = 0;
    int cols = 0;
    WeightView view() const;
};

struct KdaWeights {
    Matrix q, k, v, g, o, fa, fb, b;
    std::vector<float> qConv, kConv, vConv; // [channels][kernel]
    std::vector<float> aLog;                // [heads]: only the first num_heads count
    std::vector<float> dtBias;              // [heads * headDim]
    std::vector<float> oNorm;               // [headDim]
};

struct MlaWeights {
    Matrix qa, qb, kva, kvb, g, o;
    std::vector<float> qaNorm, kvaNorm;
};

struct DenseMlpWeights {
    Matrix gate, up, down;
};

struct ExpertWeightsStored {
    PackedMatrix w1, w3, w2;
};

struct MoeWeightsStored {
    Matrix gate;
    std::vector<float> bias;
    Matrix down, up;
    std::vector<float> norm;
    bool hasShared = false;
    Matrix sharedGate, sharedUp, sharedDown;
    std::vector<ExpertWeightsStored> experts;
};

struct LayerWeights {
    LayerSpec spec;
    std::vector<float> inputNorm, postNorm;
    std::vector<float> attnResFold, mlpResFold; // res_norm * res_proj, folded at load
    KdaWeights kda;
    MlaWeights mla;
    DenseMlpWeights dense;
    MoeWeightsStored moe;
};

struct ModelWeights {
    Matrix embed, lmHead;
    std::vector<float> finalNorm, outputResFold;
    std::vector<LayerWeights> layers;
    std::uint64_t bytes = 0;
};

// Binds the first `layerCount` layers. Throws ModelError naming the tensor and the
// expected/actual shape.
ModelWeights bindWeights(const Checkpoint& checkpoint, const ModelConfig& config, int layerCount);

} // namespace k3::model
