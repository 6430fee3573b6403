// Portable matvec rows: the reference order, written one element at a time.

#include "kernels/MatvecRows.hpp"

#include "k3/kernels.hpp"

#include <cmath>

namespace k3::detail {

float foldLanes(const float* lanes) {
    float t[8];
    for (int j = 0; j < 8; ++j) t[j] = (lanes[j] + lanes[j + 8]) + (lanes[j + 16] + lanes[j + 24]);
    return ((t[0] + t[1]) + (t[2] + t[3])) + ((t[4] + t[5]) + (t[6] + t[7]));
}

float dotF32Scalar(const float* x, const float* w, int n) {
    float lanes[kLanes] = {};
    for (int i = 0; i < n; ++i) lanes[i % kLanes] = std::fma(x[i], w[i], lanes[i % kLanes]);
    return foldLanes(lanes);
}

float dotBf16Scalar(const float* x, const std::uint16_t* w, int n) {
    float lanes[kLanes] = {};
    for (int i = 0; i < n; ++i)
        lanes[i % kLanes] = std::fma(x[i], bf16ToFloat(w[i]), lanes[i % kLanes]);
    return foldLanes(lanes);
}

float dotMxfp4Scalar(const float* x, const std::uint8_t* packed, const std::uint8_t* scales,
                     int n) {
    float lanes[kLanes] = {};
    const int groups = (n + kMxfp4Group - 1) / kMxfp4Group;
    for (int g = 0; g < groups; ++g) {
        if (scales[g] == 255) continue; // NaN scale: the whole group is dropped
        const float s = e8m0(scales[g]);
        const int begin = g * kMxfp4Group;
        const int end = begin + kMxfp4Group < n ? begin + kMxfp4Group : n;
        for (int i = begin; i < end; ++i) {
            // low nibble = EVEN element, high nibble = ODD element
            const unsigned nib = (packed[i >> 1] >> ((i & 1) * 4)) & 0xFu;
            // E2M1 times a power of two is exact: the same value the f32 path would see.
            const float wv = kE2m1[nib] * s;
            lanes[i % kLanes] = std::fma(x[i], wv, lanes[i % kLanes]);
        }
    }
    return foldLanes(lanes);
}

} // namespace k3::detail
