#pragma once
// NEON pieces shared by the matvec (MatvecNeon.cpp) and matmat (MatmatNeon.cpp) kernels,
// so both sum a block or a group with the same instructions in the same order. Included
// only where K3_HAVE_NEON_PATH is defined (AArch64, where Advanced SIMD is part of the
// base architecture: no run-time feature test is needed).
//
// The order is the one in k3/kernels.hpp, element for element. A float64x2_t holds two
// neighbouring double lanes, so the 8 lanes are 4 registers in lane order (L0 L1, L2 L3,
// L4 L5, L6 L7); a float32x4_t holds four neighbouring float lanes of a BF16 block, so
// its 16 float lanes are 4 registers. NEON widens in place (bf16 by a shift, float to
// double by fcvtl), so neither the weights nor x are permuted. Every product here is
// exact (float x float, or an E2M1 value x a float, in double; a bf16 x a float in fmaf),
// so vfmaq rounds once per element exactly as the scalar path's lane + w * x or std::fma:
// the bits are identical. Double lanes start at +0 and a +0 start absorbs the sign of a
// zero product, so the signed zeros of the scalar path come out too.

#include "kernels/MatvecRows.hpp"

#include "k3/kernels.hpp"

#if defined(K3_HAVE_NEON_PATH)

#include <arm_neon.h>

#include <array>
#include <bit>
#include <cmath>
#include <cstdint>

namespace k3::detail::neon {

struct Lanes {
    float64x2_t v[4]; // double lanes (0, 1), (2, 3), (4, 5), (6, 7)
};

inline Lanes zeroLanes() {
    const float64x2_t z = vdupq_n_f64(0.0);
    return {{z, z, z, z}};
}

inline Lanes loadLanes(const double* l) {
    return {{vld1q_f64(l), vld1q_f64(l + 2), vld1q_f64(l + 4), vld1q_f64(l + 6)}};
}

inline void storeLanes(const Lanes& a, double* l) {
    for (int j = 0; j < 4; ++j) vst1q_f64(l + 2 * j, a.v[j]);
}

// ---- F32 --------------------------------------------------------------------------------

// Elements [0, end8) (end8 a multiple of 8) of one row into its lanes: lane i % 8 takes
// fma(double(w[i]), double(x[i]), lane), in increasing i.
inline void addF32(Lanes& a, const float* x, const float* w, int end8) {
    for (int i = 0; i < end8; i += 8) {
        const float32x4_t w0 = vld1q_f32(w + i), w1 = vld1q_f32(w + i + 4);
        const float32x4_t x0 = vld1q_f32(x + i), x1 = vld1q_f32(x + i + 4);
        a.v[0] = vfmaq_f64(a.v[0], vcvt_f64_f32(vget_low_f32(w0)), vcvt_f64_f32(vget_low_f32(x0)));
        a.v[1] = vfmaq_f64(a.v[1], vcvt_high_f64_f32(w0), vcvt_high_f64_f32(x0));
        a.v[2] = vfmaq_f64(a.v[2], vcvt_f64_f32(vget_low_f32(w1)), vcvt_f64_f32(vget_low_f32(x1)));
        a.v[3] = vfmaq_f64(a.v[3], vcvt_high_f64_f32(w1), vcvt_high_f64_f32(x1));
    }
}

// ---- BF16 -------------------------------------------------------------------------------

// One block [b, end) of R rows against one x (rows at w[r] + element index), lanes in
// st[r] (8 doubles each, read and written back). The 16 float lanes start at +0 and take
// fmaf(w, x, lane) in increasing i: full 16-chunks in registers, the elements past
// `full` (= n / 16 * 16; only the last block has them) one at a time into lane i % 16.
// Then the flush: double lane L += float lane L, then += float lane L + 8.
template <int R>
inline void bf16Block(double* const* st, const float* x, const std::uint16_t* const* w, int b,
                      int end, int full) {
    float32x4_t s[R][4];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
        for (int j = 0; j < 4; ++j) s[r][j] = vdupq_n_f32(0.0f);
    const int vecEnd = end < full ? end : full;
    for (int i = b; i < vecEnd; i += 16) {
        const float32x4_t x0 = vld1q_f32(x + i), x1 = vld1q_f32(x + i + 4);
        const float32x4_t x2 = vld1q_f32(x + i + 8), x3 = vld1q_f32(x + i + 12);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const uint16x8_t lo = vld1q_u16(w[r] + i), hi = vld1q_u16(w[r] + i + 8);
            // bf16 -> float: the 16 bits become the top half of the float (exact).
            s[r][0] =
                vfmaq_f32(s[r][0], vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(lo), 16)), x0);
            s[r][1] = vfmaq_f32(s[r][1], vreinterpretq_f32_u32(vshll_high_n_u16(lo, 16)), x1);
            s[r][2] =
                vfmaq_f32(s[r][2], vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(hi), 16)), x2);
            s[r][3] = vfmaq_f32(s[r][3], vreinterpretq_f32_u32(vshll_high_n_u16(hi, 16)), x3);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        if (end > full) { // the tail of the last block, element by element as the scalar path
            float f[16];
            for (int j = 0; j < 4; ++j) vst1q_f32(f + 4 * j, s[r][j]);
            for (int i = full; i < end; ++i)
                f[i % 16] = std::fma(bf16ToFloat(w[r][i]), x[i], f[i % 16]);
            for (int j = 0; j < 4; ++j) s[r][j] = vld1q_f32(f + 4 * j);
        }
        Lanes a = loadLanes(st[r]);
        // Double lanes 0-3 take float lanes 0-3 then 8-11; lanes 4-7 take 4-7 then 12-15.
        a.v[0] = vaddq_f64(a.v[0], vcvt_f64_f32(vget_low_f32(s[r][0])));
        a.v[1] = vaddq_f64(a.v[1], vcvt_high_f64_f32(s[r][0]));
        a.v[2] = vaddq_f64(a.v[2], vcvt_f64_f32(vget_low_f32(s[r][1])));
        a.v[3] = vaddq_f64(a.v[3], vcvt_high_f64_f32(s[r][1]));
        a.v[0] = vaddq_f64(a.v[0], vcvt_f64_f32(vget_low_f32(s[r][2])));
        a.v[1] = vaddq_f64(a.v[1], vcvt_high_f64_f32(s[r][2]));
        a.v[2] = vaddq_f64(a.v[2], vcvt_f64_f32(vget_low_f32(s[r][3])));
        a.v[3] = vaddq_f64(a.v[3], vcvt_high_f64_f32(s[r][3]));
        storeLanes(a, st[r]);
    }
}

// ---- MXFP4 ------------------------------------------------------------------------------

// Every E2M1 float (-0 included) is exactly its top 16 bits: two byte tables indexed by
// the nibble rebuild them, and a shift by 16 makes the float.
constexpr std::array<std::uint8_t, 16> e2m1FloatByte(int shift) {
    std::array<std::uint8_t, 16> t{};
    for (int n = 0; n < 16; ++n)
        t[n] = static_cast<std::uint8_t>(std::bit_cast<std::uint32_t>(kE2m1[n]) >> shift);
    return t;
}

constexpr bool e2m1IsFloatTop16() {
    for (float v : kE2m1)
        if ((std::bit_cast<std::uint32_t>(v) & 0xFFFFu) != 0) return false;
    return true;
}
static_assert(e2m1IsFloatTop16(), "the float tables rebuild only the top 16 bits");

alignas(16) inline constexpr std::array<std::uint8_t, 16> kE2m1FloatHigh = e2m1FloatByte(24);
alignas(16) inline constexpr std::array<std::uint8_t, 16> kE2m1FloatLow = e2m1FloatByte(16);

struct MxTables {
    uint8x16_t high, low;
};

inline MxTables mxTables() {
    return {vld1q_u8(kE2m1FloatHigh.data()), vld1q_u8(kE2m1FloatLow.data())};
}

// The 32 weights of one full group (16 bytes at p) as doubles in element order: d[k]
// holds elements 2k and 2k + 1, which belong to the lane pair k % 4.
inline void decodeGroup(float64x2_t d[16], const std::uint8_t* p, const MxTables& t) {
    const uint8x16_t bytes = vld1q_u8(p);
    const uint8x16_t even = vandq_u8(bytes, vdupq_n_u8(0x0F)); // low nibble: even element
    const uint8x16_t odd = vshrq_n_u8(bytes, 4);
    const uint8x16_t idx[2] = {vzip1q_u8(even, odd), vzip2q_u8(even, odd)}; // 0-15, 16-31
#pragma GCC unroll 2
    for (int h = 0; h < 2; ++h) {
        const uint8x16_t hi = vqtbl1q_u8(t.high, idx[h]), lo = vqtbl1q_u8(t.low, idx[h]);
        const uint16x8_t top[2] = {vreinterpretq_u16_u8(vzip1q_u8(lo, hi)),
                                   vreinterpretq_u16_u8(vzip2q_u8(lo, hi))};
#pragma GCC unroll 2
        for (int q = 0; q < 2; ++q) {
            const float32x4_t f0 = vreinterpretq_f32_u32(vshll_n_u16(vget_low_u16(top[q]), 16));
            const float32x4_t f1 = vreinterpretq_f32_u32(vshll_high_n_u16(top[q], 16));
            float64x2_t* o = d + 8 * h + 4 * q;
            o[0] = vcvt_f64_f32(vget_low_f32(f0));
            o[1] = vcvt_high_f64_f32(f0);
            o[2] = vcvt_f64_f32(vget_low_f32(f1));
            o[3] = vcvt_high_f64_f32(f1);
        }
    }
}

// One decoded full group against x (xg: the group's 32 elements of x widened to double):
// per lane, the 4 exact products summed from +0 in increasing i, then the sum times the
// exact scale 2^(s - 127) added to the lane (fma: that product is exact too).
inline void addGroup(Lanes& a, const float64x2_t d[16], const double* xg, float64x2_t scale) {
    float64x2_t part[4];
    for (int j = 0; j < 4; ++j) part[j] = vdupq_n_f64(0.0);
#pragma GCC unroll 16
    for (int k = 0; k < 16; ++k) part[k % 4] = vfmaq_f64(part[k % 4], d[k], vld1q_f64(xg + 2 * k));
    for (int j = 0; j < 4; ++j) a.v[j] = vfmaq_f64(a.v[j], part[j], scale);
}

// x widened to double in element order (n elements).
inline void widenX(double* xd, const float* x, int n) {
    int i = 0;
    for (; i + 4 <= n; i += 4) {
        const float32x4_t v = vld1q_f32(x + i);
        vst1q_f64(xd + i, vcvt_f64_f32(vget_low_f32(v)));
        vst1q_f64(xd + i + 2, vcvt_high_f64_f32(v));
    }
    for (; i < n; ++i) xd[i] = double(x[i]);
}

} // namespace k3::detail::neon

#endif
