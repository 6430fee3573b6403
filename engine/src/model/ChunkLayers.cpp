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

// Where the output of (position, slot) lives until moeCombine adds it.
float* outputRow(MoeChunk& m, int position, int slot, int latent, int topK) {
    const int last = m.last[std::size_t(position)];
    if (slot == last) return m.z.data() + at(position, latent);
    const int row = position * (topK - 1) + (slot < last ? slot : slot - 1);
    return m.eo.data() + at(row, latent);
}

const float* outputRow(const MoeChunk& m, int position, int slot, int latent, int topK) {
    return outputRow(const_cast<MoeChunk&>(m), position, slot, latent, topK);
}

// Per tile of positions: their gathered latents, the expert's two products and outputs.
struct ExpertScratch {
    Floats gathered, g, u, outputs;
};

// Runs expert `ex` on the latents of its uses, `tile` positions at a time, and writes
// each output to its (position, slot) row. A tile gathers all its inputs before writing,
// and a position's z is overwritten only by its last use, so no input is read after it
// was overwritten.
void runExpert(const ExpertWeights& ex, const MoeChunk::Use* uses, int count, MoeChunk& m,
               int latent, int topK, int tile, const ModelConfig& c, ExpertScratch& s) {
    const int inter = ex.w1.rows;
    expectShape("w1", ex.w1, inter, latent);
    expectShape("w3", ex.w3, inter, latent);
    expectShape("w2", ex.w2, latent, inter);
    for (int b = 0; b < count; b += tile) {
        const int n = std::min(tile, count - b);
        s.gathered.resize(at(n, latent));
        for (int i = 0; i < n; ++i)
            std::copy_n(m.z.data() + at(uses[b + i].position, latent), latent,
                        s.gathered.data() + at(i, latent));
        mm(s.g, ex.w1, s.gathered.data(), n);
        mm(s.u, ex.w3, s.gathered.data(), n);
        situGlu(s.g.data(), s.g.data(), s.u.data(), inter * n, float(c.activationSituBeta),
                float(c.activationSituLinearBeta));
        mm(s.outputs, ex.w2, s.g.data(), n);
        for (int i = 0; i < n; ++i) {
            const MoeChunk::Use& use = uses[b + i];
            std::copy_n(s.outputs.data() + at(i, latent), latent,
                        outputRow(m, use.position, use.slot, latent, topK));
            m.present[at(use.position, topK) + std::size_t(use.slot)] = 1;
        }
    }
}

// One expert of the union: its id and its uses [begin, end) in MoeChunk::uses.
struct UnionExpert {
    int expert;
    int begin, end;
};

} // namespace

void moeBegin(MoeChunk& m, int T, const ModelConfig& c) {
    const int topK = c.numExpertsPerToken, latent = c.routedExpertHiddenSize;
    m.positions = T;
    m.idx.resize(at(T, topK));
    m.wt.resize(at(T, topK));
    m.z.resize(at(T, latent));
    m.eo.resize(at(T, std::max(0, topK - 1)) * std::size_t(latent));
    m.last.assign(std::size_t(T), 0);
    m.present.assign(at(T, topK), 0);
    m.uses.clear();
    m.nonFiniteScores = false;
}

void moeRoute(MoeChunk& m, const float* xn, int first, int n, const MoeWeightsStored& w,
              const ModelConfig& c) {
    const int topK = c.numExpertsPerToken, latent = w.down.rows, nExperts = w.gate.rows;
    Floats logits;
    mm(logits, w.gate, xn, n); // routing on the full width, per position
    for (std::size_t i = 0; i < at(n, nExperts); ++i)
        if (!std::isfinite(logits[i])) {
            m.nonFiniteScores = true;
            break;
        }
    for (int t = 0; t < n; ++t)
        routeTopKFromLogits(m.idx.data() + at(first + t, topK), m.wt.data() + at(first + t, topK),
                            logits.data() + at(t, nExperts), nExperts,
                            w.bias.empty() ? nullptr : w.bias.data(), topK, c.moeRenormalize,
                            float(c.routedScalingFactor));
    matmat(m.z.data() + at(first, latent), xn, w.down.view(), n);
}

// Long on purpose: the union of the chunk's experts, its order (disk offsets), which use
// runs last per position, and the waves through the cache share one loop order (each
// expert read once per chunk); split, the pieces would pass that order around and hide it.
void moeExperts(MoeChunk& m, const MoeWeightsStored& w, const ModelConfig& c,
                const ExpertSource& src, int tile) {
    const int T = m.positions, topK = c.numExpertsPerToken, latent = w.down.rows;
    tile = std::max(1, tile);
    // The union of the chunk's experts, each with the positions that chose it (in
    // position order, as the one-position layer would meet them).
    m.uses.resize(at(T, topK));
    for (int t = 0; t < T; ++t)
        for (int j = 0; j < topK; ++j)
            m.uses[at(t, topK) + std::size_t(j)] = {m.idx[at(t, topK) + std::size_t(j)], t, j};
    std::sort(m.uses.begin(), m.uses.end(), [](const MoeChunk::Use& a, const MoeChunk::Use& b) {
        return a.expert != b.expert       ? a.expert < b.expert
               : a.position != b.position ? a.position < b.position
                                          : a.slot < b.slot;
    });
    std::vector<UnionExpert> order;
    for (int i = 0; i < int(m.uses.size()); ++i) {
        if (order.empty() || order.back().expert != m.uses[std::size_t(i)].expert)
            order.push_back({m.uses[std::size_t(i)].expert, i, i});
        order.back().end = i + 1;
    }
    if (src.cache && src.store)
        std::stable_sort(order.begin(), order.end(),
                         [&](const UnionExpert& a, const UnionExpert& b) {
                             return src.store->diskOrder(src.layer, a.expert) <
                                    src.store->diskOrder(src.layer, b.expert);
                         });
    for (const UnionExpert& u : order) // the traversal order decides each position's last use
        for (int i = u.begin; i < u.end; ++i)
            m.last[std::size_t(m.uses[std::size_t(i)].position)] = m.uses[std::size_t(i)].slot;

    ExpertScratch scratch;
    const auto run = [&](const ExpertWeights& ex, const UnionExpert& u) {
        runExpert(ex, m.uses.data() + u.begin, u.end - u.begin, m, latent, topK, tile, c, scratch);
    };
    if (src.cache) {
        // Waves of at most the slot count: every expert of a wave is pinned together, so
        // none is evicted before it computes and no two share a slot. The wave's reads go
        // out together; each expert computes once it has arrived, the rest still in flight.
        const std::size_t wave = std::size_t(std::max(1, src.cache->slotCount()));
        std::vector<int> ids;
        ExpertCache::Handle held;
        try {
            for (std::size_t first = 0; first < order.size(); first += wave) {
                const std::size_t n = std::min(wave, order.size() - first);
                ids.clear();
                for (std::size_t i = first; i < first + n; ++i) ids.push_back(order[i].expert);
                src.cache->prefetch(src.layer, {ids.data(), n});
                for (std::size_t i = first; i < first + n; ++i) {
                    const int e = order[i].expert;
                    if (e < 0 || e >= c.numExperts) continue; // dropped, never silent
                    held = src.cache->acquire(src.layer, e);
                    src.cache->countPositionUses(std::size_t(order[i].end - order[i].begin));
                    if (held.data)
                        run(cachedExpert(*src.store, held.data, src.layer, e, c), order[i]);
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
        for (const UnionExpert& u : order) {
            ExpertWeights ex;
            if (residentExpert(experts, u.expert, ex)) run(ex, u);
        }
    }
}

int moeCombine(float* out, const float* xn, int first, int n, const MoeChunk& m,
               const MoeWeightsStored& w, const ModelConfig& c, float eps,
               const ExpertSource& src) {
    const int hidden = c.hiddenSize, latent = w.down.rows, topK = c.numExpertsPerToken;
    if (src.skipRouted) {
        std::fill(out, out + at(n, hidden), 0.0f);
        if (w.hasShared) gluChunk(out, xn, n, w.sharedGate, w.sharedUp, w.sharedDown, c);
        return 0;
    }
    // Each position adds its experts in ITS selection order, as the one-position layer.
    int drops = 0;
    Floats acc(at(n, latent), 0.0f);
    for (int t = 0; t < n; ++t) {
        float* a = acc.data() + at(t, latent);
        for (int j = 0; j < topK; ++j) {
            const std::size_t row = at(first + t, topK) + std::size_t(j);
            if (!m.present[row]) {
                ++drops; // counted, never silent: the caller marks the run invalid
                continue;
            }
            const float wj = m.wt[row];
            const float* e = outputRow(m, first + t, j, latent, topK);
            for (int i = 0; i < latent; ++i) a[i] += wj * e[i];
        }
        if (!w.norm.empty()) rmsnorm(a, a, w.norm.data(), latent, eps);
    }
    matmat(out, acc.data(), w.up.view(), n);
    if (w.hasShared) {
        Floats shared(at(n, hidden));
        gluChunk(shared.data(), xn, n, w.sharedGate, w.sharedUp, w.sharedDown, c); // ORIGINAL x
        for (std::size_t i = 0; i < shared.size(); ++i) out[i] += shared[i];       // unweighted
    }
    return drops;
}

} // namespace k3::model
