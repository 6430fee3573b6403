// The latent MoE layer for one token: route on the full width, run the chosen experts
// in the latent, norm their AGGREGATE, project up, add the shared experts.

#include "k3/kernels.hpp"

#include <string>
#include <vector>

namespace k3 {

namespace {

void expectShape(const char* what, const WeightView& w, int rows, int cols) {
    if (!w.data || w.rows != rows || w.cols != cols)
        throw KernelError(std::string("latentMoeForward: ") + what + " is " +
                          std::to_string(w.rows) + "x" + std::to_string(w.cols) +
                          (w.data ? "" : " (missing)") + ", expected " + std::to_string(rows) +
                          "x" + std::to_string(cols));
}

// gate/up -> SiTU-GLU -> down, with the two projections' outputs in scratch.
void gluMlp(float* out, const float* x, const WeightView& w1, const WeightView& w3,
            const WeightView& w2, const LatentMoeConfig& cfg, std::vector<float>& scratch) {
    const int inter = w1.rows;
    scratch.resize(static_cast<std::size_t>(inter) * 2);
    float* g = scratch.data();
    float* u = g + inter;
    matvec(g, x, w1);
    matvec(u, x, w3);
    situGlu(g, g, u, inter, cfg.situBeta, cfg.situLinearBeta);
    matvec(out, g, w2);
}

} // namespace

int latentMoeForward(float* out, const float* x, const LatentMoeWeights& w,
                     const LatentMoeConfig& cfg) {
    const int hidden = w.gate.cols;
    const int latent = w.down.rows;
    expectShape("down", w.down, latent, hidden);
    expectShape("up", w.up, hidden, latent);
    const int sharedInter = w.sharedW1.rows;
    expectShape("shared w1", w.sharedW1, sharedInter, hidden);
    expectShape("shared w3", w.sharedW3, sharedInter, hidden);
    expectShape("shared w2", w.sharedW2, hidden, sharedInter);

    std::vector<int> idx(cfg.topK);
    std::vector<float> wt(cfg.topK);
    routeTopK(idx.data(), wt.data(), x, w.gate, w.selectionBias, cfg.topK, cfg.renormalise,
              cfg.routedScale); // on the FULL width, not the latent
    if (w.prefetch) w.prefetch(idx.data(), cfg.topK);

    std::vector<float> z(latent), acc(latent, 0.0f), eo(latent), scratch;
    matvec(z.data(), x, w.down);
    int drops = 0;
    for (int j = 0; j < cfg.topK; ++j) {
        ExpertWeights e;
        if (!w.expert || !w.expert(idx[j], e)) {
            ++drops; // counted, never silent: the caller marks the run invalid
            continue;
        }
        const int inter = e.w1.rows;
        expectShape("expert w1", e.w1, inter, latent);
        expectShape("expert w3", e.w3, inter, latent);
        expectShape("expert w2", e.w2, latent, inter);
        gluMlp(eo.data(), z.data(), e.w1, e.w3, e.w2, cfg, scratch);
        for (int i = 0; i < latent; ++i) acc[i] += wt[j] * eo[i];
    }
    if (w.latentNorm) rmsnorm(acc.data(), acc.data(), w.latentNorm, latent, cfg.rmsEps);
    matvec(out, acc.data(), w.up);

    std::vector<float> shared(hidden);
    gluMlp(shared.data(), x, w.sharedW1, w.sharedW3, w.sharedW2, cfg, scratch); // ORIGINAL x
    for (int i = 0; i < hidden; ++i) out[i] += shared[i];                       // unweighted
    return drops;
}

} // namespace k3
