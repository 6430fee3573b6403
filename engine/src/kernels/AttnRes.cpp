// Attention residuals: a layer mixes the block snapshots and the running prefix with
// softmax weights scored on the normalised sources.

#include "k3/kernels.hpp"
#include "kernels/MathFunctions.hpp"

#include <cmath>
#include <string>
#include <vector>

namespace k3 {

void attnRes(float* out, const float* const* sources, int nSources, const float* fold, int n,
             float eps) {
    if (nSources < 1 || n < 1)
        throw KernelError("attnRes: needs at least one source of width >= 1 (got " +
                          std::to_string(nSources) + " of width " + std::to_string(n) + ")");
    std::vector<float> score(static_cast<std::size_t>(nSources));
    for (int s = 0; s < nSources; ++s) {
        const float* v = sources[s];
        double ss = 0.0;
        for (int i = 0; i < n; ++i) ss += double(v[i]) * double(v[i]);
        const float inv = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
        double acc = 0.0; // the KEY is the normalised source
        for (int i = 0; i < n; ++i) acc += double(v[i] * inv) * double(fold[i]);
        score[s] = float(acc);
    }
    float m = score[0];
    for (int s = 1; s < nSources; ++s)
        if (score[s] > m) m = score[s];
    double z = 0.0;
    for (int s = 0; s < nSources; ++s) {
        score[s] = math::expF(score[s] - m);
        z += score[s];
    }
    // Accumulate aside so out may alias a source.
    std::vector<float> acc(static_cast<std::size_t>(n), 0.0f);
    for (int s = 0; s < nSources; ++s) {
        const float p = float(score[s] / z);
        const float* v = sources[s]; // the VALUE is the raw source
        for (int i = 0; i < n; ++i) acc[i] += p * v[i];
    }
    for (int i = 0; i < n; ++i) out[i] = acc[i];
}

namespace {

void aggregate(float* out, const float* const* blocks, int nBlocks, const float* prefix,
               const float* fold, int n, float eps) {
    if (nBlocks < 0) throw KernelError("attnRes: negative block count");
    std::vector<const float*> src(blocks, blocks + nBlocks);
    src.push_back(prefix);
    attnRes(out, src.data(), nBlocks + 1, fold, n, eps);
}

} // namespace

bool attnResBeforeAttention(float* out, const float* const* blocks, int nBlocks,
                            const float* prefix, const float* fold, int n, float eps) {
    if (nBlocks == 0) return false; // the reference skips it until a snapshot exists
    aggregate(out, blocks, nBlocks, prefix, fold, n, eps);
    return true;
}

void attnResBeforeMlp(float* out, const float* const* blocks, int nBlocks, const float* prefix,
                      const float* fold, int n, float eps) {
    aggregate(out, blocks, nBlocks, prefix, fold, n, eps); // no guard, as in the reference
}

} // namespace k3
