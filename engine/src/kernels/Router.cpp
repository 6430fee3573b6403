// MoE router: biased scores choose, unbiased scores weigh.

#include "k3/kernels.hpp"

#include <cmath>
#include <string>
#include <vector>

namespace k3 {

namespace {

// Strictly better selection score; NaN ranks below every number, equal scores keep the
// earlier (lower-index) expert because the scan only replaces on strictly better.
bool better(float a, float b) {
    if (std::isnan(a)) return false;
    if (std::isnan(b)) return true;
    return a > b;
}

} // namespace

void routeTopK(int* idx, float* weight, const float* x, const WeightView& gate, const float* bias,
               int topK, bool renormalise, float routedScale) {
    std::vector<float> logits(static_cast<std::size_t>(gate.rows));
    matvec(logits.data(), x, gate);
    routeTopKFromLogits(idx, weight, logits.data(), gate.rows, bias, topK, renormalise,
                        routedScale);
}

void routeTopKFromLogits(int* idx, float* weight, const float* logits, int E, const float* bias,
                         int topK, bool renormalise, float routedScale) {
    if (topK < 1 || topK > E)
        throw KernelError("routeTopK: top-k " + std::to_string(topK) + " outside 1.." +
                          std::to_string(E) + " experts");
    std::vector<float> score(E), choice(E);
    for (int e = 0; e < E; ++e) {
        score[e] = sigmoid(logits[e]);                  // the UNBIASED score
        choice[e] = score[e] + (bias ? bias[e] : 0.0f); // the SELECTION score
    }
    std::vector<char> taken(E, 0);
    for (int j = 0; j < topK; ++j) {
        int best = -1;
        for (int e = 0; e < E; ++e)
            if (!taken[e] && (best < 0 || better(choice[e], choice[best]))) best = e;
        taken[best] = 1;
        idx[j] = best;
        weight[j] = score[best]; // weighed by the unbiased score again
    }
    if (renormalise) {
        float sum = 0.0f;
        for (int j = 0; j < topK; ++j) sum += weight[j];
        if (sum > 0.0f)
            for (int j = 0; j < topK; ++j) weight[j] /= sum;
    }
    for (int j = 0; j < topK; ++j) weight[j] *= routedScale;
}

} // namespace k3
