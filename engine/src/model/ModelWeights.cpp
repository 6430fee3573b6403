#include "model/ModelWeights.hpp"

#include "k3/model.hpp"

#include <cmath>
#include <cstring>

namespace k3::model {
namespace {

const std::string kPrefix = "language_model.model.";

// E8M0 (the MX scale format) reserves 0xFF for NaN; the kernels would read it as a zero
// scale and skip the group, so a weight silently changes. Refused by tensor and position.
void refuseNanScales(const std::string& name, const std::vector<std::uint8_t>& scales,
                     std::size_t perRow) {
    for (std::size_t i = 0; i < scales.size(); ++i)
        if (scales[i] == 0xFF)
            throw ModelError("tensor " + name + " has scale byte 0xFF (NaN in E8M0) at row " +
                             std::to_string(perRow ? i / perRow : 0) + ", group " +
                             std::to_string(perRow ? i % perRow : i) +
                             ": the checkpoint is damaged");
}

std::string shapeText(const TensorInfo& t) {
    std::string s = "[";
    for (std::size_t i = 0; i < t.rank; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
    return s + "]";
}

// Kimi K3 ships its weights in BF16 (F32 where precision matters; our test checkpoints
// use F32 too). F16 is never one of them, and BF16 bytes relabelled F16 in a shard
// header have the same size and would load as other numbers: refused, with any other
// dtype.
std::string unexpectedDtype(const std::string& name, DType dtype) {
    return "tensor " + name + " has dtype " + std::string(dtypeName(dtype)) +
           ": Kimi K3's weights are BF16 or F32 (an F16 checkpoint, or BF16 data relabelled "
           "F16 in a shard header, is refused)";
}

class Binder {
public:
    Binder(const TensorSource& c, std::uint64_t& bytes) : ckpt_(c), bytes_(bytes) {}

    // rows x cols; rank-3 [rows, 1, cols] (conv weights) is accepted as the same.
    Matrix matrix(const std::string& name, int rows, int cols) {
        // A draft trunk stores the matrix as MXFP4 under NAME_packed / NAME_scale.
        if (!ckpt_.has(name) && ckpt_.has(name + "_packed")) {
            PackedMatrix p = packedAs(name + "_packed", name + "_scale", rows, cols);
            Matrix m;
            m.dtype = DType::U8;
            m.rows = rows;
            m.cols = cols;
            m.raw.resize(p.packed.size());
            std::memcpy(m.raw.data(), p.packed.data(), p.packed.size());
            m.scales = std::move(p.scales);
            return m; // counted by packedAs
        }
        const TensorInfo& t = ckpt_.info(name);
        const bool rank2 =
            t.rank == 2 && t.shape[0] == std::uint64_t(rows) && t.shape[1] == std::uint64_t(cols);
        const bool rank3 = t.rank == 3 && t.shape[0] == std::uint64_t(rows) && t.shape[1] == 1 &&
                           t.shape[2] == std::uint64_t(cols);
        if (!rank2 && !rank3)
            throw ModelError("tensor " + name + " has shape " + shapeText(t) + ", expected [" +
                             std::to_string(rows) + ", " + std::to_string(cols) +
                             "] from config.json");
        Matrix m;
        m.rows = rows;
        m.cols = cols;
        if (t.dtype == DType::BF16 || t.dtype == DType::F32) {
            m.dtype = t.dtype;
            std::vector<std::byte> owned;
            const auto bytes = ckpt_.raw(name, owned);
            if (!owned.empty())
                m.raw = std::move(owned);
            else
                m.lent = bytes.data();
        } else {
            throw ModelError(unexpectedDtype(name, t.dtype));
        }
        bytes_ += m.raw.size();
        return m;
    }

    // A vector of at least n elements; the first n are kept (A_log ships head_dim
    // values of which only the first num_heads are meaningful).
    std::vector<float> vector(const std::string& name, int n, bool allowLonger = false) {
        const TensorInfo& t = ckpt_.info(name);
        const std::uint64_t numel = t.numel();
        if (numel != std::uint64_t(n) && !(allowLonger && numel > std::uint64_t(n)))
            throw ModelError("tensor " + name + " has shape " + shapeText(t) + ", expected " +
                             std::to_string(n) + " elements from config.json");
        if (t.dtype != DType::BF16 && t.dtype != DType::F32)
            throw ModelError(unexpectedDtype(name, t.dtype));
        std::vector<std::byte> owned;
        const auto bytes = ckpt_.raw(name, owned);
        std::vector<float> v(static_cast<std::size_t>(numel));
        widenToFloat(t.dtype, bytes, v);
        v.resize(std::size_t(n));
        // Norms, router biases (e_score_correction_bias), conv weights: a NaN bias ranks
        // its expert last and a NaN norm poisons every logit, both without a word.
        for (std::size_t i = 0; i < v.size(); ++i)
            if (!std::isfinite(v[i]))
                throw ModelError("tensor " + name + " element " + std::to_string(i) + " is " +
                                 (std::isnan(v[i]) ? "NaN" : "infinite") +
                                 ": refusing a non-finite norm, bias or vector weight");
        bytes_ += v.size() * sizeof(float);
        return v;
    }

    PackedMatrix packed(const std::string& base, int rows, int cols) {
        return packedAs(base + ".weight_packed", base + ".weight_scale", rows, cols);
    }

    PackedMatrix packedAs(const std::string& pName, const std::string& sName, int rows, int cols) {
        const TensorInfo& p = ckpt_.info(pName);
        const TensorInfo& s = ckpt_.info(sName);
        const auto rowBytes = std::uint64_t(mxfp4RowBytes(cols));
        const auto rowScales = std::uint64_t(mxfp4ScalesPerRow(cols));
        if (p.dtype != DType::U8 || p.rank != 2 || p.shape[0] != std::uint64_t(rows) ||
            p.shape[1] != rowBytes)
            throw ModelError("tensor " + pName + " is " + std::string(dtypeName(p.dtype)) + " " +
                             shapeText(p) + ", expected U8 [" + std::to_string(rows) + ", " +
                             std::to_string(rowBytes) + "] (MXFP4, two weights per byte)");
        if (s.dtype != DType::U8 || s.rank != 2 || s.shape[0] != std::uint64_t(rows) ||
            s.shape[1] != rowScales)
            throw ModelError("tensor " + sName + " is " + std::string(dtypeName(s.dtype)) + " " +
                             shapeText(s) + ", expected U8 [" + std::to_string(rows) + ", " +
                             std::to_string(rowScales) + "] (one E8M0 scale per 32 weights)");
        PackedMatrix m;
        m.rows = rows;
        m.cols = cols;
        std::vector<std::byte> pOwned, sOwned;
        const auto pr = ckpt_.raw(pName, pOwned);
        const auto sr = ckpt_.raw(sName, sOwned);
        m.packed.assign(reinterpret_cast<const std::uint8_t*>(pr.data()),
                        reinterpret_cast<const std::uint8_t*>(pr.data()) + pr.size());
        m.scales.assign(reinterpret_cast<const std::uint8_t*>(sr.data()),
                        reinterpret_cast<const std::uint8_t*>(sr.data()) + sr.size());
        refuseNanScales(sName, m.scales, std::size_t(rowScales));
        bytes_ += m.packed.size() + m.scales.size();
        return m;
    }

    // A routed expert's matrix: MXFP4 packed + scales when config.json declares a
    // quantization_config, else the plain NAME.weight in BF16 or F32, as stored (F16 is
    // refused: the expert cache reads bytes as they are, so both paths give one answer).
    ExpertMatrix expert(const std::string& base, int rows, int cols, bool mxfp4) {
        ExpertMatrix m;
        m.mxfp4 = mxfp4;
        if (mxfp4) {
            m.packed = packed(base, rows, cols);
            return m;
        }
        const std::string name = base + ".weight";
        const TensorInfo* found = nullptr;
        try {
            found = &ckpt_.info(name);
        } catch (const std::exception& e) {
            throw ModelError(std::string(e.what()) +
                             ": config.json has no quantization_config, so routed experts are "
                             "read as plain BF16/F32 NAME.weight tensors");
        }
        const TensorInfo& t = *found;
        if (t.dtype != DType::BF16 && t.dtype != DType::F32)
            throw ModelError("tensor " + name + " has dtype " + std::string(dtypeName(t.dtype)) +
                             ", expected BF16 or F32 (config.json has no quantization_config, "
                             "so routed experts are plain matrices)");
        m.plain = matrix(name, rows, cols);
        return m;
    }

    int rowsOf(const std::string& name) {
        const TensorInfo& t = ckpt_.info(name);
        if (t.rank != 2)
            throw ModelError("tensor " + name + " has shape " + shapeText(t) + ", expected 2-D");
        return int(t.shape[0]);
    }

private:
    const TensorSource& ckpt_;
    std::uint64_t& bytes_;
};

// AttnRes scores proj . (rmsnorm(src) * norm): fold proj * norm once at load.
std::vector<float> fold(Binder& b, const std::string& normName, const std::string& projName,
                        int n) {
    std::vector<float> norm = b.vector(normName, n);
    const std::vector<float> proj = b.vector(projName, n);
    for (int i = 0; i < n; ++i) norm[std::size_t(i)] *= proj[std::size_t(i)];
    return norm;
}

void bindKda(Binder& b, const ModelConfig& c, const std::string& a, KdaWeights& w) {
    const int E = c.hiddenSize, H = c.kdaNumHeads, D = c.kdaHeadDim, P = H * D,
              K = c.shortConvKernelSize;
    w.q = b.matrix(a + "q_proj.weight", P, E);
    w.k = b.matrix(a + "k_proj.weight", P, E);
    w.v = b.matrix(a + "v_proj.weight", P, E);
    w.g = b.matrix(a + "g_proj.weight", P, E);
    w.o = b.matrix(a + "o_proj.weight", E, P);
    w.fa = b.matrix(a + "f_a_proj.weight", D, E);
    w.fb = b.matrix(a + "f_b_proj.weight", P, D);
    w.b = b.matrix(a + "b_proj.weight", H, E);
    w.qConv = b.vector(a + "q_conv1d.weight", P * K);
    w.kConv = b.vector(a + "k_conv1d.weight", P * K);
    w.vConv = b.vector(a + "v_conv1d.weight", P * K);
    w.aLog = b.vector(a + "A_log", H, /*allowLonger=*/true);
    w.dtBias = b.vector(a + "dt_bias", P);
    w.oNorm = b.vector(a + "o_norm.weight", D);
}

void bindMla(Binder& b, const ModelConfig& c, const std::string& a, MlaWeights& w) {
    const int E = c.hiddenSize, H = c.numAttentionHeads;
    const int qk = c.qkNopeHeadDim + c.qkRopeHeadDim;
    w.qa = b.matrix(a + "q_a_proj.weight", c.qLoraRank, E);
    w.qaNorm = b.vector(a + "q_a_layernorm.weight", c.qLoraRank);
    w.qb = b.matrix(a + "q_b_proj.weight", H * qk, c.qLoraRank);
    w.kva = b.matrix(a + "kv_a_proj_with_mqa.weight", c.kvLoraRank + c.qkRopeHeadDim, E);
    w.kvaNorm = b.vector(a + "kv_a_layernorm.weight", c.kvLoraRank);
    w.kvb = b.matrix(a + "kv_b_proj.weight", H * (c.qkNopeHeadDim + c.vHeadDim), c.kvLoraRank);
    if (c.mlaUseOutputGate) w.g = b.matrix(a + "g_proj.weight", H * c.vHeadDim, E);
    w.o = b.matrix(a + "o_proj.weight", E, H * c.vHeadDim);
}

std::vector<ExpertWeightsStored> routedExperts(Binder& b, const ModelConfig& c,
                                               const std::string& m) {
    const int L = c.routedExpertHiddenSize, I = c.moeIntermediateSize;
    std::vector<ExpertWeightsStored> experts(std::size_t(c.numExperts));
    for (int e = 0; e < c.numExperts; ++e) {
        const std::string x = m + "experts." + std::to_string(e) + ".";
        auto& ex = experts[std::size_t(e)];
        const bool mxfp4 = c.quantization.has_value();
        ex.w1 = b.expert(x + "w1", I, L, mxfp4);
        ex.w3 = b.expert(x + "w3", I, L, mxfp4);
        ex.w2 = b.expert(x + "w2", L, I, mxfp4);
    }
    return experts;
}

void bindMoe(Binder& b, const ModelConfig& c, const std::string& m, MoeWeightsStored& w,
             bool withExperts) {
    const int E = c.hiddenSize, L = c.routedExpertHiddenSize, I = c.moeIntermediateSize;
    w.gate = b.matrix(m + "gate.weight", c.numExperts, E);
    w.bias = b.vector(m + "gate.e_score_correction_bias", c.numExperts);
    w.down = b.matrix(m + "routed_expert_down_proj.weight", L, E);
    w.up = b.matrix(m + "routed_expert_up_proj.weight", E, L);
    if (c.latentMoeUseNorm) w.norm = b.vector(m + "routed_expert_norm.weight", L);
    w.hasShared = c.numSharedExperts > 0;
    if (w.hasShared) {
        const int SI = I * c.numSharedExperts; // the shared experts are one wider MLP
        w.sharedGate = b.matrix(m + "shared_experts.gate_proj.weight", SI, E);
        w.sharedUp = b.matrix(m + "shared_experts.up_proj.weight", SI, E);
        w.sharedDown = b.matrix(m + "shared_experts.down_proj.weight", E, SI);
    }
    if (withExperts) w.experts = routedExperts(b, c, m);
}

} // namespace

const TensorInfo& CheckpointSource::info(const std::string& name) const {
    return ckpt_.at(name);
}

bool CheckpointSource::has(const std::string& name) const {
    return ckpt_.find(name) != nullptr;
}

std::span<const std::byte> CheckpointSource::raw(const std::string& name,
                                                 std::vector<std::byte>& owned) const {
    owned = ckpt_.readRaw(name);
    return owned;
}

WeightView Matrix::view() const {
    const std::byte* p = data();
    if (dtype == DType::U8)
        return WeightView::mxfp4(reinterpret_cast<const std::uint8_t*>(p), scales.data(), rows,
                                 cols);
    if (dtype == DType::BF16)
        return WeightView::bf16(reinterpret_cast<const std::uint16_t*>(p), rows, cols);
    return WeightView::f32(reinterpret_cast<const float*>(p), rows, cols);
}

WeightView PackedMatrix::view() const {
    return WeightView::mxfp4(packed.data(), scales.data(), rows, cols);
}

void bindModelTensors(const TensorSource& source, const ModelConfig& c, ModelWeights& w,
                      bool withTables) {
    Binder b(source, w.bytes);
    const int E = c.hiddenSize;
    if (withTables) {
        w.embed = b.matrix(kPrefix + "embed_tokens.weight", c.vocabSize, E);
        w.lmHead = b.matrix("language_model.lm_head.weight", c.vocabSize, E);
    }
    w.finalNorm = b.vector(kPrefix + "norm.weight", E);
    w.outputResFold = fold(b, kPrefix + "output_attn_res_norm.weight",
                           kPrefix + "output_attn_res_proj.weight", E);
}

void bindLayerMlp(const TensorSource& source, const ModelConfig& c, int L, bool withExperts,
                  std::uint64_t& bytes, LayerWeights& lw) {
    Binder b(source, bytes);
    const int E = c.hiddenSize;
    const std::string p = kPrefix + "layers." + std::to_string(L) + ".";
    if (lw.spec.mlp == MlpKind::Dense) {
        lw.dense.gate = b.matrix(p + "mlp.gate_proj.weight", c.intermediateSize, E);
        lw.dense.up = b.matrix(p + "mlp.up_proj.weight", c.intermediateSize, E);
        lw.dense.down = b.matrix(p + "mlp.down_proj.weight", E, c.intermediateSize);
    } else {
        bindMoe(b, c, p + "block_sparse_moe.", lw.moe, withExperts);
    }
}

LayerWeights bindLayer(const TensorSource& source, const ModelConfig& c, int L, bool withExperts,
                       std::uint64_t& bytes, bool withMlp) {
    Binder b(source, bytes);
    const int E = c.hiddenSize;
    LayerWeights lw;
    const std::string p = kPrefix + "layers." + std::to_string(L) + ".";
    lw.spec = c.layers[std::size_t(L)];
    lw.inputNorm = b.vector(p + "input_layernorm.weight", E);
    lw.postNorm = b.vector(p + "post_attention_layernorm.weight", E);
    lw.attnResFold =
        fold(b, p + "self_attention_res_norm.weight", p + "self_attention_res_proj.weight", E);
    lw.mlpResFold = fold(b, p + "mlp_res_norm.weight", p + "mlp_res_proj.weight", E);
    if (lw.spec.attention == AttentionKind::Kda)
        bindKda(b, c, p + "self_attn.", lw.kda);
    else
        bindMla(b, c, p + "self_attn.", lw.mla);
    if (withMlp) bindLayerMlp(source, c, L, withExperts, bytes, lw);
    return lw;
}

std::vector<ExpertWeightsStored> bindRoutedExperts(const TensorSource& source, const ModelConfig& c,
                                                   int layer, std::uint64_t& bytes) {
    Binder b(source, bytes);
    return routedExperts(b, c, kPrefix + "layers." + std::to_string(layer) + ".block_sparse_moe.");
}

ModelWeights bindWeights(const Checkpoint& ckpt, const ModelConfig& c, int layerCount) {
    ModelWeights w;
    const CheckpointSource source(ckpt);
    bindModelTensors(source, c, w);
    w.layers.reserve(std::size_t(layerCount));
    for (int L = 0; L < layerCount; ++L) w.layers.push_back(bindLayer(source, c, L, true, w.bytes));
    return w;
}

} // namespace k3::model
