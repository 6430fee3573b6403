#pragma once
// Row dot products behind k3::matvec*, one set per instruction path. Both sets follow
// the order documented in k3/kernels.hpp (32 fp32 lanes by i % 32, explicit FMA, fixed
// fold), so they return identical bits.

#include <bit>
#include <cstdint>

namespace k3::detail {

inline constexpr int kLanes = 32;

// E2M1 magnitudes indexed by the low three bits; bit 3 is the sign.
inline constexpr float kE2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// E8M0 -> 2^(s - 127) built from its bits (no libm call in the inner loop); 0 is the
// subnormal 2^-127; 255 (NaN by spec) -> 0.
inline float e8m0(std::uint8_t s) {
    if (s == 255) return 0.0f;
    return std::bit_cast<float>(s == 0 ? 0x00400000u : static_cast<std::uint32_t>(s) << 23);
}

// The fixed fold of the 32 lanes into one value (shared by both paths).
float foldLanes(const float* lanes);

float dotF32Scalar(const float* x, const float* w, int n);
float dotBf16Scalar(const float* x, const std::uint16_t* w, int n);
float dotMxfp4Scalar(const float* x, const std::uint8_t* packed, const std::uint8_t* scales, int n);

#if defined(__x86_64__)
#define K3_HAVE_AVX2_PATH 1
float dotF32Avx2(const float* x, const float* w, int n);
float dotBf16Avx2(const float* x, const std::uint16_t* w, int n);
float dotMxfp4Avx2(const float* x, const std::uint8_t* packed, const std::uint8_t* scales, int n);
#endif

} // namespace k3::detail
