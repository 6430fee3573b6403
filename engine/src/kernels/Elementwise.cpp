// Norms and activations. One implementation each, so their order is simply the loop
// order below; sums of squares are double so a long row cannot lose its small terms.
// The transcendentals come from MathFunctions.hpp (never libm) for the same bits on
// every machine.

#include "k3/kernels.hpp"
#include "kernels/MathFunctions.hpp"

#include <cmath>

namespace k3 {

float sigmoid(float x) {
    // The float formula of the reference (PyTorch): its peer fixtures carry these
    // roundings, and a sigmoid rounded once from double lands further from them.
    return 1.0f / (1.0f + math::expF(-x));
}

float silu(float x) {
    return x * sigmoid(x);
}

void rmsnorm(float* out, const float* x, const float* w, int n, float eps) {
    if (n <= 0) return;
    double ss = 0.0;
    for (int i = 0; i < n; ++i) ss += double(x[i]) * double(x[i]);
    // eps goes INSIDE the square root, as in the reference.
    const float inv = float(1.0 / std::sqrt(ss / double(n) + double(eps)));
    for (int i = 0; i < n; ++i) out[i] = x[i] * inv * (w ? w[i] : 1.0f);
}

void l2norm(float* x, int n, float eps) {
    if (n <= 0) return;
    double ss = 0.0;
    for (int i = 0; i < n; ++i) ss += double(x[i]) * double(x[i]);
    const float inv = float(1.0 / std::sqrt(ss + double(eps)));
    for (int i = 0; i < n; ++i) x[i] *= inv;
}

void situGlu(float* y, const float* gate, const float* up, int n, float beta, float linearBeta) {
    for (int i = 0; i < n; ++i) {
        const float g = gate[i];
        // The sigmoid reads the UNCAPPED gate; only the tanh factor is capped.
        const float a = beta * math::tanhF(g / beta) * sigmoid(g);
        const float u = linearBeta * math::tanhF(up[i] / linearBeta);
        y[i] = a * u;
    }
}

} // namespace k3
