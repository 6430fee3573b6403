// Portable matvec rows: the reference order, written one element at a time.
//
// A float times a float (or an MXFP4 weight, 2 significant bits times a power of two)
// is exact in double, so `lane += double(w) * x` rounds once per element, exactly as
// the AVX2 path's fma does.

#include "kernels/MatvecRows.hpp"

#include "k3/kernels.hpp"

#include <cmath>

namespace k3::detail {

float foldLanes(const double* l) {
    return static_cast<float>(((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7])));
}

float dotF32Scalar(const float* x, const float* w, int n) {
    double lanes[kLanes] = {};
    for (int i = 0; i < n; ++i) lanes[i % kLanes] += double(w[i]) * double(x[i]);
    return foldLanes(lanes);
}

// std::fma: one rounding per element, as the AVX2 path's vfmadd (where the CPU has no
// FMA, the C library computes it exactly in software).
float dotBf16Scalar(const float* x, const std::uint16_t* w, int n) {
    double lanes[kLanes] = {};
    for (int b = 0; b < n; b += kBf16Block) {
        float s[2 * kLanes] = {};
        const int end = n - b < kBf16Block ? n : b + kBf16Block;
        for (int i = b; i < end; ++i)
            s[i % (2 * kLanes)] = std::fma(bf16ToFloat(w[i]), x[i], s[i % (2 * kLanes)]);
        flushBf16Block(lanes, s);
    }
    return foldLanes(lanes);
}

void addMxfp4Group(double* lanes, const float* x, const std::uint8_t* packed, std::uint8_t scale,
                   int begin, int end) {
    double part[kLanes] = {};
    for (int i = begin; i < end; ++i) {
        // low nibble = EVEN element, high nibble = ODD element
        const unsigned nib = (packed[i >> 1] >> ((i & 1) * 4)) & 0xFu;
        part[i % kLanes] += double(kE2m1[nib]) * double(x[i]); // exact product
    }
    const double s = e8m0Double(scale);
    for (int l = 0; l < kLanes; ++l) lanes[l] += part[l] * s; // exact product
}

float dotMxfp4Scalar(const float* x, const std::uint8_t* packed, const std::uint8_t* scales,
                     int n) {
    double lanes[kLanes] = {};
    const int groups = (n + kMxfp4Group - 1) / kMxfp4Group;
    for (int g = 0; g < groups; ++g) {
        if (scales[g] == 255) continue; // NaN scale: the whole group is dropped
        const int begin = g * kMxfp4Group;
        addMxfp4Group(lanes, x, packed, scales[g], begin,
                      begin + kMxfp4Group < n ? begin + kMxfp4Group : n);
    }
    return foldLanes(lanes);
}

} // namespace k3::detail
