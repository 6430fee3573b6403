// Kimi Delta Attention pieces: the short convolution, the decay gate and one step of
// the delta-rule recurrence over a fixed-size per-head state.

#include "k3/kernels.hpp"
#include "kernels/MathFunctions.hpp"

#include <cmath>
#include <string>
#include <vector>

namespace k3 {

void shortConvSilu(float* y, const float* x, const float* w, float* state, int channels, int kernel,
                   int T) {
    if (kernel < 1 || channels < 0 || T < 0)
        throw KernelError("shortConvSilu: bad sizes kernel=" + std::to_string(kernel) +
                          " channels=" + std::to_string(channels) + " T=" + std::to_string(T));
    const int hist = kernel - 1; // guard on the history length, never on a pointer
    std::vector<float> buf(static_cast<std::size_t>(hist));
    for (int c = 0; c < channels; ++c) {
        const float* wc = w + static_cast<std::size_t>(c) * kernel;
        for (int j = 0; j < hist; ++j)
            buf[j] = state ? state[static_cast<std::size_t>(c) * hist + j] : 0.0f;
        for (int t = 0; t < T; ++t) {
            const std::size_t at = static_cast<std::size_t>(t) * channels + c;
            const float cur = x[at]; // read before y[at] is written: x and y may alias
            // taps oldest to newest, fp32, in that order
            float acc = 0.0f;
            for (int j = 0; j < hist; ++j) acc += wc[j] * buf[j];
            acc += wc[hist] * cur;
            for (int j = 0; j + 1 < hist; ++j) buf[j] = buf[j + 1];
            if (hist > 0) buf[hist - 1] = cur;
            y[at] = silu(acc);
        }
        if (state)
            for (int j = 0; j < hist; ++j) state[static_cast<std::size_t>(c) * hist + j] = buf[j];
    }
}

void kdaDecay(float* g, float* alpha, const float* z, const float* aLog, const float* dtBias,
              int heads, int headDim, float lowerBound) {
    for (int h = 0; h < heads; ++h) {
        const float a = math::expF(aLog[h]); // PER HEAD: aLog is never indexed by channel
        for (int d = 0; d < headDim; ++d) {
            const int i = h * headDim + d;
            const float gi = lowerBound * sigmoid(a * (z[i] + dtBias[i]));
            g[i] = gi;
            alpha[i] = math::expF(gi);
        }
    }
}

void kdaStep(float* S, float* o, const float* q, const float* k, const float* v, const float* alpha,
             float beta, int dk, int dv) {
    // Everything is sized before the state is touched: a failure later would leave S
    // decayed but never updated, and every later token would read a wrong state.
    std::vector<float> u(static_cast<std::size_t>(dv), 0.0f);

    for (int i = 0; i < dk; ++i) { // decay row i by its key channel's alpha
        float* row = S + static_cast<std::size_t>(i) * dv;
        for (int j = 0; j < dv; ++j) row[j] *= alpha[i];
    }
    for (int i = 0; i < dk; ++i) { // u = S^T k
        const float* row = S + static_cast<std::size_t>(i) * dv;
        for (int j = 0; j < dv; ++j) u[j] += k[i] * row[j];
    }
    for (int j = 0; j < dv; ++j) u[j] = beta * (v[j] - u[j]); // the scaled prediction error
    for (int i = 0; i < dk; ++i) {                            // rank-one delta write
        float* row = S + static_cast<std::size_t>(i) * dv;
        for (int j = 0; j < dv; ++j) row[j] += k[i] * u[j];
    }
    for (int j = 0; j < dv; ++j) o[j] = 0.0f;
    for (int i = 0; i < dk; ++i) { // o = S^T q from the UPDATED state
        const float* row = S + static_cast<std::size_t>(i) * dv;
        for (int j = 0; j < dv; ++j) o[j] += q[i] * row[j];
    }
}

} // namespace k3
