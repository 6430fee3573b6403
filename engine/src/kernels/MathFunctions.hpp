#pragma once
// The engine's transcendentals, written here instead of taken from libm: glibc's
// float functions change bits between versions (2.41 made tanhf correctly rounded),
// and the engine promises the same output bits on every machine. Each function is
// evaluated in double with IEEE +, -, *, / only (plus exact scaling by a power of two)
// and the float versions round once at the end, so every conforming platform computes
// the same bits, and those bits are the correctly rounded float in all but
// astronomically rare cases. The engine is built with -ffp-contract=off, so the
// compiler cannot fuse these operations differently on another machine either.

#include <cmath>

namespace k3::math {

namespace detail {

// ln 2 split so that k * kLn2Hi is exact for |k| < 2^20 (the low 32 bits are zero).
inline constexpr double kLn2Hi = 6.93147180369123816490e-01;
inline constexpr double kLn2Lo = 1.90821492927058770002e-10;
inline constexpr double kInvLn2 = 1.44269504088896338700e+00;

// e^r - 1 for |r| <= ln2/2 (+ a little): Taylor terms up to r^13/13!, whose remainder
// (< 5e-18) is below half an ulp of the result.
inline double expm1Reduced(double r) {
    double p = 1.0 / 6227020800.0; // 1/13!
    p = 1.0 / 479001600.0 + r * p; // 1/12!
    p = 1.0 / 39916800.0 + r * p;
    p = 1.0 / 3628800.0 + r * p;
    p = 1.0 / 362880.0 + r * p;
    p = 1.0 / 40320.0 + r * p;
    p = 1.0 / 5040.0 + r * p;
    p = 1.0 / 720.0 + r * p;
    p = 1.0 / 120.0 + r * p;
    p = 1.0 / 24.0 + r * p;
    p = 1.0 / 6.0 + r * p;
    p = 0.5 + r * p;
    return r + (r * r) * p;
}

// x = k ln2 + r with |r| <= ln2/2; valid for |x| < 750 (callers clamp).
inline int reduce(double x, double& r) {
    const double kd = x * kInvLn2;
    const int k = static_cast<int>(kd < 0 ? kd - 0.5 : kd + 0.5); // round half away
    r = (x - k * kLn2Hi) - k * kLn2Lo;
    return k;
}

} // namespace detail

inline double expD(double x) {
    if (std::isnan(x)) return x;
    if (x > 709.8) return HUGE_VAL;
    if (x < -745.2) return 0.0;
    double r;
    const int k = detail::reduce(x, r);
    return std::ldexp(1.0 + detail::expm1Reduced(r), k); // ldexp is exact (or one IEEE rounding)
}

// e^x - 1 without the cancellation near 0 (tanh needs it for small arguments).
inline double expm1D(double x) {
    if (std::isnan(x)) return x;
    if (x > 709.8) return HUGE_VAL;
    if (x < -40.0) return -1.0; // e^-40 is below half an ulp of 1
    double r;
    const int k = detail::reduce(x, r);
    const double p = detail::expm1Reduced(r);
    if (k == 0) return p;
    // 2^k (p + 1 - 2^-k): 1 - 2^-k is exact for |k| <= 53, larger k cannot cancel.
    return std::ldexp(p + (1.0 - std::ldexp(1.0, -k)), k);
}

inline double tanhD(double x) {
    if (std::isnan(x)) return x;
    const double ax = std::fabs(x);
    if (ax > 22.0) return std::copysign(1.0, x); // 1 - tanh(22) < 2^-62
    const double e = expm1D(2.0 * ax);
    return std::copysign(e / (e + 2.0), x);
}

inline float expF(float x) {
    return static_cast<float>(expD(x));
}
inline float tanhF(float x) {
    return static_cast<float>(tanhD(x));
}

} // namespace k3::math
