#include "model/ChunkLayers.hpp"

#include "k3/kernels.hpp"
#include "k3/model.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <map>
#include <string>

namespace k3::model {

namespace {

using Floats = std::vector<float>;

std::size_t at(int t, int width) {
    return std::size_t(t) * std::size_t(width);
}

// y[T][w.rows] = W x[T][w.cols]
void mm(Floats& y, const WeightView& w, const float* x, int T) {
    y.resize(at(T, w.rows));
    matmat(y.data(), x, w, T);
}

void mm(Floats& y, const Matrix& w, const float* x, int T) {
    mm(y, w.view(), x, T);
}

} // namespace

void gluChunk(float* out, const float* x, int T, const Matrix& gate, const Matrix& up,
              const Matrix& down, const ModelConfig& c) {
    Floats g, u;
    mm(g, gate, x, T);
    mm(u, up, x, T);
    // Elementwise: one call over the whole chunk is T one-position calls.
    situGlu(g.data(), g.data(), u.data(), gate.rows * T, float(c.activationSituBeta),
            float(c.activationSituLinearBeta));
    matmat(out, g.data(), down.view(), T);
}

void kdaChunk(float* out, const float* xn, int T, const KdaWeights& w, LayerState& s,
              const ModelConfig& c, float eps, KdaReplay* replay) {
    const int H = c.kdaNumHeads, D = c.kdaHeadDim, P = H * D, K = c.shortConvKernelSize;
    Floats q, k, v, z, a, beta, gate;
    mm(q, w.q, xn, T);
    mm(k, w.k, xn, T);
    mm(v, w.v, xn, T);
    if (replay) {
        replay->positions = T;
        replay->S = s.S;
        replay->qConv = s.qConv;
        replay->kConv = s.kConv;
        replay->vConv = s.vConv;
        replay->raw.resize(at(T, 3 * P));
        for (int t = 0; t < T; ++t) {
            std::copy_n(q.data() + at(t, P), P, replay->raw.data() + at(t, 3 * P));
            std::copy_n(k.data() + at(t, P), P, replay->raw.data() + at(t, 3 * P) + P);
            std::copy_n(v.data() + at(t, P), P, replay->raw.data() + at(t, 3 * P) + 2 * P);
        }
        replay->beta.resize(at(T, H));
    }
    // The conv walks the chunk's positions in order, carrying its history.
    shortConvSilu(q.data(), q.data(), w.qConv.data(), s.qConv.data(), P, K, T);
    shortConvSilu(k.data(), k.data(), w.kConv.data(), s.kConv.data(), P, K, T);
    shortConvSilu(v.data(), v.data(), w.vConv.data(), s.vConv.data(), P, K, T);
    mm(beta, w.b, xn, T);
    mm(a, w.fa, xn, T);
    mm(z, w.fb, a.data(), T);
    mm(gate, w.g, xn, T);
    Floats alpha(at(T, P)), g(at(T, P)), o(at(T, P));
    const float qScale = 1.0f / std::sqrt(float(D));
    for (int t = 0; t < T; ++t) {
        kdaDecay(g.data() + at(t, P), alpha.data() + at(t, P), z.data() + at(t, P), w.aLog.data(),
                 w.dtBias.data(), H, D, float(c.gateLowerBound));
        // Heads are independent (each its own state and slices), so the thread count
        // changes no bit; on K3 the delta rule is ~10% of a pinned prefill otherwise.
#pragma omp parallel for schedule(static) if (H >= 2)
        for (int h = 0; h < H; ++h) {
            float* qh = q.data() + at(t, P) + std::size_t(h) * D;
            float* kh = k.data() + at(t, P) + std::size_t(h) * D;
            float* oh = o.data() + at(t, P) + std::size_t(h) * D;
            l2norm(qh, D);
            l2norm(kh, D);
            for (int i = 0; i < D; ++i) qh[i] *= qScale;
            const float b = sigmoid(beta[at(t, w.b.rows) + std::size_t(h)]);
            if (replay) replay->beta[at(t, H) + std::size_t(h)] = b;
            kdaStep(s.S.data() + std::size_t(h) * D * D, oh, qh, kh,
                    v.data() + at(t, P) + std::size_t(h) * D,
                    alpha.data() + at(t, P) + std::size_t(h) * D, b, D, D);
            // RMSNorm per head FIRST, then the output gate.
            rmsnorm(oh, oh, w.oNorm.data(), D, eps);
        }
        for (int i = 0; i < P; ++i) o[at(t, P) + i] *= sigmoid(gate[at(t, w.g.rows) + i]);
    }
    if (replay) { // k after its l2norm, v after its conv, alpha: what kdaStep read
        replay->k = k;
        replay->v = v;
        replay->alpha = alpha;
    }
    matmat(out, o.data(), w.o.view(), T);
}

void rollbackKda(LayerState& s, const KdaReplay& r, int keep, const ModelConfig& c) {
    const int H = c.kdaNumHeads, D = c.kdaHeadDim, P = H * D, hist = c.shortConvKernelSize - 1;
    s.S = r.S;
#pragma omp parallel for schedule(static) if (H >= 2)
    for (int h = 0; h < H; ++h) {
        Floats o(static_cast<std::size_t>(D)); // the delta rule's output is not needed
        for (int t = 0; t < keep; ++t) {
            const float* kh = r.k.data() + at(t, P) + std::size_t(h) * D;
            kdaStep(s.S.data() + std::size_t(h) * D * D, o.data(), kh, kh,
                    r.v.data() + at(t, P) + std::size_t(h) * D,
                    r.alpha.data() + at(t, P) + std::size_t(h) * D,
                    r.beta[at(t, H) + std::size_t(h)], D, D);
        }
    }
    // Each conv history: the last `hist` raw inputs of (the history before, the kept positions).
    const Floats* before[3] = {&r.qConv, &r.kConv, &r.vConv};
    Floats* after[3] = {&s.qConv, &s.kConv, &s.vConv};
    for (int which = 0; which < 3; ++which)
        for (int ch = 0; ch < P; ++ch)
            for (int j = 0; j < hist; ++j) {
                const int from = keep + j; // index in (history, positions) of slot j
                (*after[which])[at(ch, hist) + std::size_t(j)] =
                    from < hist
                        ? (*before[which])[at(ch, hist) + std::size_t(from)]
                        : r.raw[at(from - hist, 3 * P) + std::size_t(which) * P + std::size_t(ch)];
            }
}

void mlaChunk(float* out, const float* xn, int T, const MlaWeights& w, LayerState& s,
              const ModelConfig& c, float eps, int first) {
    const int H = c.numAttentionHeads, R = c.qkRopeHeadDim, C = c.kvLoraRank;
    const int QA = c.qLoraRank, KV = w.kva.rows, Q = w.qb.rows, O = H * c.vHeadDim;
    Floats qa, q, kv, gate;
    mm(qa, w.qa, xn, T);
    for (int t = 0; t < T; ++t)
        rmsnorm(qa.data() + at(t, QA), qa.data() + at(t, QA), w.qaNorm.data(), QA, eps);
    mm(q, w.qb, qa.data(), T);
    mm(kv, w.kva, xn, T);
    Floats o(at(T, O));
    const MlaShape shape{H, c.qkNopeHeadDim, R, C, c.vHeadDim};
    for (int t = 0; t < T; ++t) {
        float* kvt = kv.data() + at(t, KV);
        rmsnorm(kvt, kvt, w.kvaNorm.data(), C, eps); // the latent part only
        s.latent.insert(s.latent.end(), kvt, kvt + C);
        s.rope.insert(s.rope.end(), kvt + C, kvt + C + R);
        // Causal: position first + t sees the cache up to itself, nothing later.
        mlaAttend(o.data() + at(t, O), q.data() + at(t, Q), s.latent.data(), s.rope.data(),
                  first + t + 1, w.kvb.view(), shape);
    }
    if (c.mlaUseOutputGate) {
        mm(gate, w.g, xn, T);
        for (int t = 0; t < T; ++t)
            for (int i = 0; i < O; ++i) o[at(t, O) + i] *= sigmoid(gate[at(t, w.g.rows) + i]);
    }
    matmat(out, o.data(), w.o.view(), T);
}

namespace {

// One routed expert's three MXFP4 (or stored) matrices.
bool residentExpert(const std::vector<ExpertWeightsStored>& experts, int e, ExpertWeights& ex) {
    if (e < 0 || std::size_t(e) >= experts.size()) return false;
    const auto& s = experts[std::size_t(e)];
    ex.w1 = s.w1.view();
    ex.w3 = s.w3.view();
    ex.w2 = s.w2.view();
    return true;
}

ExpertWeights cachedExpert(const CheckpointExpertStore& store, const std::byte* data, int layer,
                           int e, const ModelConfig& c) {
    const int I = c.moeIntermediateSize, Lat = c.routedExpertHiddenSize;
    const ExpertLayout& lay = store.layout(layer, e);
    const auto* b = reinterpret_cast<const std::uint8_t*>(data);
    // MXFP4, or a plain BF16/F32 matrix (no quantization_config), as the store found it.
    const auto view = [b](DType type, std::size_t at, std::size_t scales, int rows, int cols) {
        if (type == DType::BF16)
            return WeightView::bf16(reinterpret_cast<const std::uint16_t*>(b + at), rows, cols);
        if (type == DType::F32)
            return WeightView::f32(reinterpret_cast<const float*>(b + at), rows, cols);
        return WeightView::mxfp4(b + at, b + scales, rows, cols);
    };
    ExpertWeights ex;
    ex.w1 = view(lay.w1Type, lay.w1Packed, lay.w1Scales, I, Lat);
    ex.w3 = view(lay.w3Type, lay.w3Packed, lay.w3Scales, I, Lat);
    ex.w2 = view(lay.w2Type, lay.w2Packed, lay.w2Scales, Lat, I);
    return ex;
}

void expectShape(const char* what, const WeightView& w, int rows, int cols) {
    if (!w.data || w.rows != rows || w.cols != cols)
        throw ModelError(std::string("routed expert ") + what + " is " + std::to_string(w.rows) +
                         "x" + std::to_string(w.cols) + ", expected " + std::to_string(rows) + "x" +
                         std::to_string(cols));
}

// The positions routed to one expert, as (position, selection slot j).
struct Routed {
    std::vector<int> position, slot;
};

// Runs expert `ex` on the latents of its positions and writes each output to its
// (position, slot) row of eo [T][topK][latent].
void runExpert(const ExpertWeights& ex, const Routed& r, const Floats& z, Floats& eo, int latent,
               int topK, const ModelConfig& c, Floats& gathered, Floats& outputs, Floats& g,
               Floats& u) {
    const int n = int(r.position.size());
    const int inter = ex.w1.rows;
    expectShape("w1", ex.w1, inter, latent);
    expectShape("w3", ex.w3, inter, latent);
    expectShape("w2", ex.w2, latent, inter);
    gathered.resize(at(n, latent));
    for (int i = 0; i < n; ++i)
        std::copy_n(z.data() + at(r.position[std::size_t(i)], latent), latent,
                    gathered.data() + at(i, latent));
    mm(g, ex.w1, gathered.data(), n);
    mm(u, ex.w3, gathered.data(), n);
    situGlu(g.data(), g.data(), u.data(), inter * n, float(c.activationSituBeta),
            float(c.activationSituLinearBeta));
    mm(outputs, ex.w2, g.data(), n);
    for (int i = 0; i < n; ++i) {
        const std::size_t row = std::size_t(r.position[std::size_t(i)]) * std::size_t(topK) +
                                std::size_t(r.slot[std::size_t(i)]);
        std::copy_n(outputs.data() + at(i, latent), latent, eo.data() + row * std::size_t(latent));
    }
}

} // namespace

// Long on purpose: routing, the union of experts, their matmats and the weighted sum
// share per-chunk buffers and one expert-major loop order (each expert read once per
// chunk); split, the pieces would pass those buffers around and hide that order.
int moeChunk(float* out, const float* xn, int T, const MoeWeightsStored& w, const ModelConfig& c,
             float eps, const ExpertSource& src) {
    const int hidden = c.hiddenSize, latent = w.down.rows, topK = c.numExpertsPerToken;
    const int nExperts = w.gate.rows;
    if (src.skipRouted) {
        std::fill(out, out + at(T, hidden), 0.0f);
        if (w.hasShared) gluChunk(out, xn, T, w.sharedGate, w.sharedUp, w.sharedDown, c);
        return 0;
    }
    // Routing on the full width, per position.
    Floats logits, z;
    mm(logits, w.gate, xn, T);
    std::vector<int> idx(at(T, topK));
    Floats wt(at(T, topK));
    for (int t = 0; t < T; ++t)
        routeTopKFromLogits(idx.data() + at(t, topK), wt.data() + at(t, topK),
                            logits.data() + at(t, nExperts), nExperts,
                            w.bias.empty() ? nullptr : w.bias.data(), topK, c.moeRenormalize,
                            float(c.routedScalingFactor));
    mm(z, w.down, xn, T);

    // The union of the chunk's experts, each with the positions that chose it.
    std::map<int, Routed> routed;
    for (int t = 0; t < T; ++t)
        for (int j = 0; j < topK; ++j) {
            Routed& r = routed[idx[at(t, topK) + std::size_t(j)]];
            r.position.push_back(t);
            r.slot.push_back(j);
        }
    std::vector<int> order;
    for (const auto& kv : routed) order.push_back(kv.first);
    if (src.cache && src.store)
        std::stable_sort(order.begin(), order.end(), [&](int a, int b) {
            return src.store->diskOrder(src.layer, a) < src.store->diskOrder(src.layer, b);
        });

    Floats eo(at(T, topK) * std::size_t(latent), 0.0f);
    std::vector<char> present(at(T, topK), 0);
    Floats gathered, outputs, g, u;
    auto markDone = [&](int e) {
        const Routed& r = routed[e];
        for (std::size_t i = 0; i < r.position.size(); ++i)
            present[at(r.position[i], topK) + std::size_t(r.slot[i])] = 1;
    };
    if (src.cache) {
        // Waves of at most the slot count: every expert of a wave is pinned together, so
        // none is evicted before it computes and no two share a slot. The wave's reads go
        // out together; each expert computes once it has arrived, the rest still in flight.
        const std::size_t wave = std::size_t(std::max(1, src.cache->slotCount()));
        ExpertCache::Handle held;
        try {
            for (std::size_t first = 0; first < order.size(); first += wave) {
                const std::size_t n = std::min(wave, order.size() - first);
                src.cache->prefetch(src.layer, {order.data() + first, n});
                for (std::size_t i = first; i < first + n; ++i) {
                    const int e = order[i];
                    if (e < 0 || e >= c.numExperts) continue; // dropped, never silent
                    held = src.cache->acquire(src.layer, e);
                    src.cache->countPositionUses(routed[e].position.size());
                    if (held.data) {
                        runExpert(cachedExpert(*src.store, held.data, src.layer, e, c), routed[e],
                                  z, eo, latent, topK, c, gathered, outputs, g, u);
                        markDone(e);
                    }
                    src.cache->release(held);
                }
                src.cache->releaseBatch();
            }
        } catch (...) {
            src.cache->release(held);
            src.cache->releaseBatch();
            throw;
        }
    } else {
        const auto& experts = src.resident ? *src.resident : w.experts;
        for (int e : order) {
            ExpertWeights ex;
            if (!residentExpert(experts, e, ex)) continue;
            runExpert(ex, routed[e], z, eo, latent, topK, c, gathered, outputs, g, u);
            markDone(e);
        }
    }

    // Each position adds its experts in ITS selection order, as the one-position layer.
    int drops = 0;
    Floats acc(at(T, latent), 0.0f);
    for (int t = 0; t < T; ++t) {
        float* a = acc.data() + at(t, latent);
        for (int j = 0; j < topK; ++j) {
            const std::size_t row = at(t, topK) + std::size_t(j);
            if (!present[row]) {
                ++drops; // counted, never silent: the caller marks the run invalid
                continue;
            }
            const float wj = wt[row];
            const float* e = eo.data() + row * std::size_t(latent);
            for (int i = 0; i < latent; ++i) a[i] += wj * e[i];
        }
        if (!w.norm.empty()) rmsnorm(a, a, w.norm.data(), latent, eps);
    }
    matmat(out, acc.data(), w.up.view(), T);
    if (w.hasShared) {
        Floats shared(at(T, hidden));
        gluChunk(shared.data(), xn, T, w.sharedGate, w.sharedUp, w.sharedDown, c); // ORIGINAL x
        for (std::size_t i = 0; i < shared.size(); ++i) out[i] += shared[i];       // unweighted
    }
    return drops;
}

} // namespace k3::model
