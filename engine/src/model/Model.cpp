#include "k3/model.hpp"

#include "k3/kernels.hpp"
#include "model/ModelWeights.hpp"

#include <algorithm>
#include <cmath>

namespace k3 {

using model::LayerWeights;
using model::Matrix;

// What one layer carries from token to token.
struct LayerState {
    // KDA: recurrent state [heads][dk][dv] and ShortConv history [channels][kernel-1].
    std::vector<float> S, qConv, kConv, vConv;
    // MLA: the whole per-position cache is the normed latent plus the unrotated rope.
    std::vector<float> latent, rope;
};

struct InferenceState::Data {
    std::vector<LayerState> layers;
    int length = 0;
    std::vector<LayerState> fresh; // the zero state, kept to reset without a model
};

InferenceState::InferenceState(std::unique_ptr<Data> data) : d_(std::move(data)) {}
InferenceState::~InferenceState() = default;
InferenceState::InferenceState(InferenceState&&) noexcept = default;
InferenceState& InferenceState::operator=(InferenceState&&) noexcept = default;
int InferenceState::length() const { return d_->length; }
void InferenceState::reset() {
    d_->layers = d_->fresh;
    d_->length = 0;
}
InferenceState InferenceState::clone() const {
    return InferenceState(std::make_unique<Data>(*d_));
}

std::uint64_t InferenceState::cacheBytes() const {
    std::uint64_t n = 0;
    for (const auto& l : d_->layers)
        n += (l.S.size() + l.qConv.size() + l.kConv.size() + l.vConv.size() + l.latent.size() +
              l.rope.size()) * sizeof(float);
    return n;
}

struct Model::Impl {
    ModelConfig config;
    model::ModelWeights w;
    float eps = 1e-5f;
};

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

const ModelConfig& Model::config() const { return impl_->config; }
int Model::layersBound() const { return int(impl_->w.layers.size()); }
std::uint64_t Model::weightBytes() const { return impl_->w.bytes; }

Model Model::load(const std::filesystem::path& dir, const ModelOptions& options) {
    auto impl = std::make_unique<Impl>();
    impl->config = readModelConfig(dir / "config.json");
    const int n = impl->config.numHiddenLayers;
    if (options.layerLimit < 0 || options.layerLimit > n)
        throw ModelError("--layers " + std::to_string(options.layerLimit) + " is outside 1.." +
                         std::to_string(n) + " (num_hidden_layers in " + (dir / "config.json").string() + ")");
    const int layers = options.layerLimit == 0 ? n : options.layerLimit;
    const Checkpoint ckpt = Checkpoint::open(dir);
    impl->w = model::bindWeights(ckpt, impl->config, layers);
    impl->eps = float(impl->config.rmsNormEps);
    return Model(std::move(impl));
}

InferenceState Model::newState() const {
    const ModelConfig& c = impl_->config;
    auto d = std::make_unique<InferenceState::Data>();
    d->layers.resize(impl_->w.layers.size());
    for (std::size_t L = 0; L < d->layers.size(); ++L) {
        if (impl_->w.layers[L].spec.attention != AttentionKind::Kda) continue;
        const std::size_t P = std::size_t(c.kdaNumHeads) * std::size_t(c.kdaHeadDim);
        LayerState& s = d->layers[L];
        s.S.assign(P * std::size_t(c.kdaHeadDim), 0.0f);
        const std::size_t hist = P * std::size_t(c.shortConvKernelSize - 1);
        s.qConv.assign(hist, 0.0f);
        s.kConv.assign(hist, 0.0f);
        s.vConv.assign(hist, 0.0f);
    }
    d->fresh = d->layers;
    return InferenceState(std::move(d));
}

namespace {

void mv(std::vector<float>& y, const Matrix& w, const float* x) {
    y.resize(std::size_t(w.rows));
    matvec(y.data(), x, w.view());
}

// down(situGlu(gate x, up x)): the dense layer 0 and the shared experts.
void gluMlp(float* out, const float* x, const Matrix& gate, const Matrix& up, const Matrix& down,
            const ModelConfig& c) {
    std::vector<float> g, u;
    mv(g, gate, x);
    mv(u, up, x);
    situGlu(g.data(), g.data(), u.data(), gate.rows, float(c.activationSituBeta),
            float(c.activationSituLinearBeta));
    matvec(out, g.data(), down.view());
}

void kdaToken(float* out, const float* xn, const model::KdaWeights& w, LayerState& s,
              const ModelConfig& c, float eps) {
    const int H = c.kdaNumHeads, D = c.kdaHeadDim, P = H * D, K = c.shortConvKernelSize;
    std::vector<float> q, k, v, z, a, beta, gate;
    mv(q, w.q, xn);
    mv(k, w.k, xn);
    mv(v, w.v, xn);
    shortConvSilu(q.data(), q.data(), w.qConv.data(), s.qConv.data(), P, K, 1);
    shortConvSilu(k.data(), k.data(), w.kConv.data(), s.kConv.data(), P, K, 1);
    shortConvSilu(v.data(), v.data(), w.vConv.data(), s.vConv.data(), P, K, 1);
    mv(beta, w.b, xn);
    mv(a, w.fa, xn);
    mv(z, w.fb, a.data());
    std::vector<float> alpha(static_cast<std::size_t>(P)), g(static_cast<std::size_t>(P));
    kdaDecay(g.data(), alpha.data(), z.data(), w.aLog.data(), w.dtBias.data(), H, D,
             float(c.gateLowerBound));
    const float qScale = 1.0f / std::sqrt(float(D));
    std::vector<float> o(static_cast<std::size_t>(P));
    for (int h = 0; h < H; ++h) {
        float* qh = q.data() + h * D;
        float* kh = k.data() + h * D;
        l2norm(qh, D);
        l2norm(kh, D);
        for (int i = 0; i < D; ++i) qh[i] *= qScale;
        kdaStep(s.S.data() + std::size_t(h) * D * D, o.data() + h * D, qh, kh, v.data() + h * D,
                alpha.data() + h * D, sigmoid(beta[std::size_t(h)]), D, D);
        // RMSNorm per head FIRST, then the output gate.
        rmsnorm(o.data() + h * D, o.data() + h * D, w.oNorm.data(), D, eps);
    }
    mv(gate, w.g, xn);
    for (int i = 0; i < P; ++i) o[std::size_t(i)] *= sigmoid(gate[std::size_t(i)]);
    matvec(out, o.data(), w.o.view());
}

void mlaToken(float* out, const float* xn, const model::MlaWeights& w, LayerState& s,
              const ModelConfig& c, float eps, int position) {
    const int H = c.numAttentionHeads, R = c.qkRopeHeadDim, C = c.kvLoraRank;
    std::vector<float> qa, q, kv, gate;
    mv(qa, w.qa, xn);
    rmsnorm(qa.data(), qa.data(), w.qaNorm.data(), c.qLoraRank, eps);
    mv(q, w.qb, qa.data());
    mv(kv, w.kva, xn);
    rmsnorm(kv.data(), kv.data(), w.kvaNorm.data(), C, eps); // the latent part only
    s.latent.insert(s.latent.end(), kv.begin(), kv.begin() + C);
    s.rope.insert(s.rope.end(), kv.begin() + C, kv.begin() + C + R);
    std::vector<float> o(std::size_t(H) * std::size_t(c.vHeadDim));
    const MlaShape shape{H, c.qkNopeHeadDim, R, C, c.vHeadDim};
    mlaAttend(o.data(), q.data(), s.latent.data(), s.rope.data(), position + 1, w.kvb.view(), shape);
    if (c.mlaUseOutputGate) {
        mv(gate, w.g, xn);
        for (std::size_t i = 0; i < o.size(); ++i) o[i] *= sigmoid(gate[i]);
    }
    matvec(out, o.data(), w.o.view());
}

int moeToken(float* out, const float* xn, const model::MoeWeightsStored& w, const ModelConfig& c,
             float eps) {
    LatentMoeWeights lw;
    lw.gate = w.gate.view();
    lw.selectionBias = w.bias.data();
    lw.down = w.down.view();
    lw.up = w.up.view();
    lw.latentNorm = w.norm.empty() ? nullptr : w.norm.data();
    if (w.hasShared) {
        lw.sharedW1 = w.sharedGate.view();
        lw.sharedW3 = w.sharedUp.view();
        lw.sharedW2 = w.sharedDown.view();
    }
    lw.expert = [&w](int e, ExpertWeights& ex) {
        if (e < 0 || std::size_t(e) >= w.experts.size()) return false;
        const auto& s = w.experts[std::size_t(e)];
        ex.w1 = s.w1.view();
        ex.w3 = s.w3.view();
        ex.w2 = s.w2.view();
        return true;
    };
    LatentMoeConfig cfg;
    cfg.topK = c.numExpertsPerToken;
    cfg.renormalise = c.moeRenormalize;
    cfg.routedScale = float(c.routedScalingFactor);
    cfg.rmsEps = eps;
    cfg.situBeta = float(c.activationSituBeta);
    cfg.situLinearBeta = float(c.activationSituLinearBeta);
    return latentMoeForward(out, xn, lw, cfg);
}

} // namespace

TokenStats Model::forward(InferenceState& state, int token, std::span<float> logits) const {
    const ModelConfig& c = impl_->config;
    const auto& W = impl_->w;
    const float eps = impl_->eps;
    const int E = c.hiddenSize;
    if (token < 0 || token >= c.vocabSize)
        throw ModelError("token id " + std::to_string(token) + " is outside 0.." +
                         std::to_string(c.vocabSize - 1) + " (vocab_size)");
    if (logits.size() != std::size_t(c.vocabSize))
        throw ModelError("logits buffer holds " + std::to_string(logits.size()) + " floats, vocab_size is " +
                         std::to_string(c.vocabSize));
    TokenStats stats;
    const int position = state.d_->length;

    // The embedding row, widened exactly.
    std::vector<float> h(static_cast<std::size_t>(E));
    {
        const WeightView ev = W.embed.view().rowSlice(token, 1);
        for (int i = 0; i < E; ++i)
            h[std::size_t(i)] = ev.type == WeightType::BF16
                                    ? bf16ToFloat(static_cast<const std::uint16_t*>(ev.data)[i])
                                    : static_cast<const float*>(ev.data)[i];
    }

    // Attention residuals: completed block snapshots plus the running partial block.
    std::vector<std::vector<float>> blocks;
    std::vector<float> x(static_cast<std::size_t>(E)), xn(static_cast<std::size_t>(E)), att(static_cast<std::size_t>(E)), mlp(static_cast<std::size_t>(E));
    std::vector<const float*> sources;
    auto aggregate = [&](float* out, const std::vector<float>* partial, const std::vector<float>& foldW) {
        sources.clear();
        for (const auto& b : blocks) sources.push_back(b.data());
        if (partial) sources.push_back(partial->data());
        attnRes(out, sources.data(), int(sources.size()), foldW.data(), E, eps);
    };

    for (std::size_t L = 0; L < W.layers.size(); ++L) {
        const LayerWeights& lw = W.layers[L];
        LayerState& ls = state.d_->layers[L];
        std::vector<float> partial = h;
        bool hasPartial = true;
        // Pre-attention aggregation is skipped while no block exists.
        if (!blocks.empty()) aggregate(x.data(), &partial, lw.attnResFold);
        else x = h;
        if (int(L) % c.attnResBlockSize == 0) { // block boundary: snapshot, start afresh
            blocks.push_back(partial);
            hasPartial = false;
        }
        rmsnorm(xn.data(), x.data(), lw.inputNorm.data(), E, eps);
        if (lw.spec.attention == AttentionKind::Kda) kdaToken(att.data(), xn.data(), lw.kda, ls, c, eps);
        else mlaToken(att.data(), xn.data(), lw.mla, ls, c, eps, position);
        if (hasPartial)
            for (int i = 0; i < E; ++i) partial[std::size_t(i)] += att[std::size_t(i)];
        else
            partial = att;
        // Pre-MLP aggregation always runs: the partial block alone is a valid source set.
        aggregate(x.data(), &partial, lw.mlpResFold);
        rmsnorm(xn.data(), x.data(), lw.postNorm.data(), E, eps);
        if (lw.spec.mlp == MlpKind::Dense)
            gluMlp(mlp.data(), xn.data(), lw.dense.gate, lw.dense.up, lw.dense.down, c);
        else
            stats.droppedExperts += moeToken(mlp.data(), xn.data(), lw.moe, c, eps);
        for (int i = 0; i < E; ++i) h[std::size_t(i)] = partial[std::size_t(i)] + mlp[std::size_t(i)];
    }

    aggregate(x.data(), &h, W.outputResFold);
    rmsnorm(xn.data(), x.data(), W.finalNorm.data(), E, eps);
    matvec(logits.data(), xn.data(), W.lmHead.view());
    for (float v : logits)
        if (!std::isfinite(v)) {
            stats.nonFinite = true;
            break;
        }
    state.d_->length = position + 1;
    return stats;
}

int argmax(std::span<const float> logits) {
    if (logits.empty()) return -1;
    return int(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

} // namespace k3
