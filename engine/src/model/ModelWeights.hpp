#pragma once
// Weights of the model bound by tensor name, each checked against the shape the
// config implies. Held in their stored format (BF16 / F32 / packed MXFP4), either owned
// (read from the checkpoint) or lent by a TensorSource (a pinned or streamed trunk
// record): the streaming trunk and expert cache replace this storage, not the forward.

#include "k3/config.hpp"
#include "k3/kernels.hpp"
#include "k3/safetensors.hpp"

#include <cstdint>
#include <span>
#include <string>
#include <vector>

namespace k3::model {

// Where a layer's tensors come from: the checkpoint (bytes are read and owned) or a
// trunk record already in memory (bytes are lent, valid while the record is).
class TensorSource {
public:
    virtual ~TensorSource() = default;
    virtual const TensorInfo& info(const std::string& name) const = 0;
    // The tensor's raw bytes. A source that cannot lend memory fills `owned` and
    // returns a span over it.
    virtual std::span<const std::byte> raw(const std::string& name,
                                           std::vector<std::byte>& owned) const = 0;
    virtual bool has(const std::string& name) const = 0;
};

class CheckpointSource : public TensorSource {
public:
    explicit CheckpointSource(const Checkpoint& c) : ckpt_(c) {}
    const TensorInfo& info(const std::string& name) const override;
    std::span<const std::byte> raw(const std::string& name,
                                   std::vector<std::byte>& owned) const override;
    bool has(const std::string& name) const override;

private:
    const Checkpoint& ckpt_;
};

// A 2-D weight in BF16 or F32 (F16 is widened to F32 at load), or MXFP4 (dtype U8: a
// draft trunk's NAME_packed + NAME_scale, always owned).
struct Matrix {
    DType dtype = DType::F32;
    std::vector<std::byte> raw;       // owned bytes, or empty when lent
    const std::byte* lent = nullptr;  // lent bytes (a trunk record), when raw is empty
    std::vector<std::uint8_t> scales; // MXFP4 only
    int rows = 0;
    int cols = 0;
    WeightView view() const;
    std::uint64_t bytes() const { return raw.size() + scales.size(); }
    const std::byte* data() const { return raw.empty() ? lent : raw.data(); }
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

// One routed-expert matrix in the form the checkpoint declares: MXFP4 when config.json
// has a quantization_config, else a plain BF16 / F32 matrix (the kernels take either).
struct ExpertMatrix {
    bool mxfp4 = true;
    PackedMatrix packed; // mxfp4
    Matrix plain;        // !mxfp4
    WeightView view() const { return mxfp4 ? packed.view() : plain.view(); }
};

struct ExpertWeightsStored {
    ExpertMatrix w1, w3, w2;
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

// The pieces, for a trunk: the model-level tensors (embeddings, final norm, output
// AttnRes, lm_head) and one layer. `withExperts` false leaves moe.experts empty (the
// expert cache serves them). `bytes` counts owned bytes only.
// `withTables` false leaves embed and lmHead empty (they are streamed from disk).
void bindModelTensors(const TensorSource& source, const ModelConfig& config, ModelWeights& w,
                      bool withTables = true);
// `withMlp` false binds everything but the MLP (piece 0 of a piecewise streamed layer);
// bindLayerMlp then binds the MLP into the same LayerWeights from piece 1.
LayerWeights bindLayer(const TensorSource& source, const ModelConfig& config, int layer,
                       bool withExperts, std::uint64_t& bytes, bool withMlp = true);
void bindLayerMlp(const TensorSource& source, const ModelConfig& config, int layer,
                  bool withExperts, std::uint64_t& bytes, LayerWeights& lw);
// Layer `layer`'s routed experts alone (a streamed trunk with resident experts).
std::vector<ExpertWeightsStored> bindRoutedExperts(const TensorSource& source,
                                                   const ModelConfig& config, int layer,
                                                   std::uint64_t& bytes);

} // namespace k3::model
