#pragma once
// AVX2 pieces shared by the matvec (MatvecAvx2.cpp) and matmat (MatmatAvx2.cpp) kernels:
// the target attribute and the MXFP4 decode, so both decode a group with the same
// instructions. Included only where K3_HAVE_AVX2_PATH is defined.

#include "kernels/MatvecRows.hpp"

#include <array>
#include <bit>
#include <cstdint>
#include <immintrin.h>

#define K3_AVX2 __attribute__((target("avx2,fma")))

namespace k3::detail {

// Every E2M1 value (with its sign, -0 included) is exactly the top 16 bits of its
// double (a sign, the exponent and at most one mantissa bit): two 16-entry byte tables
// indexed by the nibble rebuild it.
constexpr std::array<std::uint8_t, 16> e2m1DoubleByte(int shift) {
    std::array<std::uint8_t, 16> t{};
    for (int n = 0; n < 16; ++n)
        t[n] = static_cast<std::uint8_t>(std::bit_cast<std::uint64_t>(double(kE2m1[n])) >> shift);
    return t;
}

constexpr bool e2m1IsDoubleTop16() {
    for (float v : kE2m1)
        if ((std::bit_cast<std::uint64_t>(double(v)) & 0xFFFFFFFFFFFFull) != 0) return false;
    return true;
}
static_assert(e2m1IsDoubleTop16(), "the double tables rebuild only the top 16 bits");

alignas(16) inline constexpr std::array<std::uint8_t, 16> kE2m1High = e2m1DoubleByte(56);
alignas(16) inline constexpr std::array<std::uint8_t, 16> kE2m1Low = e2m1DoubleByte(48);

// MXFP4 straight to double: the nibbles index byte tables for the top 16 bits of each
// E2M1 double, and one in-lane byte shuffle per 4 weights moves those 16 bits to the
// top of a zeroed 64-bit slot. No float->double conversion (a two-step cross-lane
// instruction) is left in the loop, and the scale is one exact multiply per group
// (fused into the add to the lane), not one per weight. Per 8 elements, the two registers hold
// elements (0, 2, 1, 3) and (4, 6, 5, 7): the order of widenXMxfp4Avx2 and of the two accumulators.
struct MxConst {
    __m256i high, low, nibble, shifts;
    __m256i place[4];
};

K3_AVX2 inline MxConst mxConst() {
    MxConst c;
    c.high = _mm256_broadcastsi128_si256(
        _mm_load_si128(reinterpret_cast<const __m128i*>(kE2m1High.data())));
    c.low = _mm256_broadcastsi128_si256(
        _mm_load_si128(reinterpret_cast<const __m128i*>(kE2m1Low.data())));
    c.nibble = _mm256_set1_epi8(0x0F);
    c.shifts = _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4);
    // place[m]: 16-bit slots 2m and 2m+1 of each lane to bytes 6-7 of its two qwords.
    for (int m = 0; m < 4; ++m) {
        alignas(32) std::int8_t b[32];
        for (int j = 0; j < 32; ++j) {
            const int q = (j % 16) / 8, byte = j % 8;
            b[j] = byte < 6 ? static_cast<std::int8_t>(-128)
                            : static_cast<std::int8_t>(2 * (2 * m + q) + (byte - 6));
        }
        c.place[m] = _mm256_load_si256(reinterpret_cast<const __m256i*>(b));
    }
    return c;
}

// The 32 weights of one full group (16 bytes at p) as doubles: v[m] holds elements
// 4m + (0, 2, 1, 3), so v[m] meets x widened by widenXMxfp4Avx2 at xg + 4m and its
// slots are the lanes (0, 2, 1, 3) (m even) or (4, 6, 5, 7) (m odd).
K3_AVX2 inline void decodeMxfp4Group(__m256d v[8], const std::uint8_t* p, const MxConst& c) {
    // Low 128 bits: the low nibbles (even elements); high 128 bits: the high nibbles.
    const __m256i bytes =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(bytes, c.shifts), c.nibble);
    const __m256i hi = _mm256_shuffle_epi8(c.high, idx);
    const __m256i lo = _mm256_shuffle_epi8(c.low, idx);
    const __m256i w[2] = {_mm256_unpacklo_epi8(lo, hi),  // elements 0..15, 16 bits each
                          _mm256_unpackhi_epi8(lo, hi)}; // elements 16..31
#pragma GCC unroll 8
    for (int m = 0; m < 8; ++m)
        v[m] = _mm256_castsi256_pd(_mm256_shuffle_epi8(w[m / 4], c.place[m % 4]));
}

} // namespace k3::detail
