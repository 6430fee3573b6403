// AVX2/FMA matvec rows. Compiled with function-level target attributes, never with
// -mavx2 for the file, so the rest of the engine stays portable and the choice is made
// at run time by CPUID.
//
// Every accumulator register position is one of the 32 lanes of the order in
// k3/kernels.hpp and receives exactly that lane's elements, in increasing i, through an
// FMA with the same operands as the scalar path. Only WHICH register position holds a
// lane differs per weight type (whatever order the cheapest widening produces): x is
// read through a copy permuted the same way, and the lanes are put back in order
// before the shared fold, so the bits equal the scalar path's.

#include "kernels/MatvecRows.hpp"

#include "k3/kernels.hpp"

#if defined(K3_HAVE_AVX2_PATH)

#include <array>
#include <cmath>
#include <immintrin.h>

#define K3_AVX2 __attribute__((target("avx2,fma")))

namespace k3::detail {

namespace {

using LaneMap = std::array<int, kLanes>; // register position -> lane

// BF16: a 32-byte load holds elements 2d (low half of dword d) and 2d+1 (high half);
// shifting left by 16 widens the even ones, masking the high half the odd ones.
constexpr LaneMap bf16Lanes() {
    LaneMap m{};
    for (int d = 0; d < 8; ++d) {
        m[d] = 2 * d;
        m[8 + d] = 2 * d + 1;
        m[16 + d] = 16 + 2 * d;
        m[24 + d] = 17 + 2 * d;
    }
    return m;
}

// MXFP4: the byte shuffles of decodeGroup leave register k holding elements 8k + (0, 2,
// 4, 6, 1, 3, 5, 7).
constexpr LaneMap mxfp4Lanes() {
    LaneMap m{};
    constexpr int within[8] = {0, 2, 4, 6, 1, 3, 5, 7};
    for (int k = 0; k < 4; ++k)
        for (int j = 0; j < 8; ++j) m[8 * k + j] = 8 * k + within[j];
    return m;
}

constexpr LaneMap kBf16Lanes = bf16Lanes();
constexpr LaneMap kMxfp4Lanes = mxfp4Lanes();

// Every E2M1 value (with its sign, -0 included) is exactly a bfloat16: the top two bytes
// of its float. Two 16-entry byte tables indexed by the nibble rebuild it.
constexpr std::array<std::uint8_t, 16> e2m1Byte(int shift) {
    std::array<std::uint8_t, 16> t{};
    for (int n = 0; n < 16; ++n)
        t[n] = static_cast<std::uint8_t>(std::bit_cast<std::uint32_t>(kE2m1[n]) >> shift);
    return t;
}

constexpr bool e2m1IsBf16() {
    for (float v : kE2m1)
        if ((std::bit_cast<std::uint32_t>(v) & 0xFFFFu) != 0) return false;
    return true;
}
static_assert(e2m1IsBf16(), "the nibble tables rebuild only the top 16 bits of each value");

alignas(16) constexpr std::array<std::uint8_t, 16> kE2m1High = e2m1Byte(24);
alignas(16) constexpr std::array<std::uint8_t, 16> kE2m1Low = e2m1Byte(16);

// Puts register position p back at lane lanes[p].
K3_AVX2 inline void storeLanes(__m256 a0, __m256 a1, __m256 a2, __m256 a3, const LaneMap& lanes,
                               float* out) {
    alignas(32) float tmp[kLanes];
    _mm256_store_ps(tmp, a0);
    _mm256_store_ps(tmp + 8, a1);
    _mm256_store_ps(tmp + 16, a2);
    _mm256_store_ps(tmp + 24, a3);
    for (int p = 0; p < kLanes; ++p) out[lanes[p]] = tmp[p];
}

// Bytes ahead that each weight row is prefetched; the rows are streamed once,
// so this hides DRAM latency the hardware prefetcher leaves exposed with few threads.
constexpr int kPrefetchBytes = 512; // measured: 0, 256, 512, 1024, 2048, 4096

K3_AVX2 inline void prefetch(const void* p) {
    _mm_prefetch(static_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
}

struct Acc4 {
    __m256 a0, a1, a2, a3;
};

K3_AVX2 inline void bf16Block(Acc4& a, const std::uint16_t* w, __m256 x0, __m256 x1, __m256 x2,
                              __m256 x3, __m256i high) {
    const __m256i v0 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    const __m256i v1 = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + 16));
    a.a0 = _mm256_fmadd_ps(x0, _mm256_castsi256_ps(_mm256_slli_epi32(v0, 16)), a.a0);
    a.a1 = _mm256_fmadd_ps(x1, _mm256_castsi256_ps(_mm256_and_si256(v0, high)), a.a1);
    a.a2 = _mm256_fmadd_ps(x2, _mm256_castsi256_ps(_mm256_slli_epi32(v1, 16)), a.a2);
    a.a3 = _mm256_fmadd_ps(x3, _mm256_castsi256_ps(_mm256_and_si256(v1, high)), a.a3);
}

K3_AVX2 float finishBf16(const Acc4& a, const float* x, const std::uint16_t* w, int full, int n) {
    float lanes[kLanes];
    storeLanes(a.a0, a.a1, a.a2, a.a3, kBf16Lanes, lanes);
    for (int i = full; i < n; ++i)
        lanes[i % kLanes] = std::fma(x[i], bf16ToFloat(w[i]), lanes[i % kLanes]);
    return foldLanes(lanes);
}

struct MxConst {
    __m256i high, low, nibble, shifts;
};

K3_AVX2 inline MxConst mxConst() {
    return {_mm256_broadcastsi128_si256(
                _mm_load_si128(reinterpret_cast<const __m128i*>(kE2m1High.data()))),
            _mm256_broadcastsi128_si256(
                _mm_load_si128(reinterpret_cast<const __m128i*>(kE2m1Low.data()))),
            _mm256_set1_epi8(0x0F), _mm256_setr_epi32(0, 0, 0, 0, 4, 4, 4, 4)};
}

// One full group (16 bytes, 32 weights) of one row: each weight is its E2M1 value times
// the group scale, rounded as the scalar path's kE2m1[nib] * s (the same fp32 multiply),
// then fma(x, w, lane).
K3_AVX2 inline void mxfp4Group(Acc4& a, const std::uint8_t* p, std::uint8_t scale, __m256 x0,
                               __m256 x1, __m256 x2, __m256 x3, const MxConst& c) {
    const __m256 s = _mm256_set1_ps(e8m0(scale));
    // Low 128 bits: the low nibbles (even elements); high 128 bits: the high nibbles.
    const __m256i bytes =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(bytes, c.shifts), c.nibble);
    const __m256i hi = _mm256_shuffle_epi8(c.high, idx);
    const __m256i lo = _mm256_shuffle_epi8(c.low, idx);
    const __m256i w01 = _mm256_unpacklo_epi8(lo, hi); // bf16 of bytes 0..7, per half
    const __m256i w23 = _mm256_unpackhi_epi8(lo, hi); // bytes 8..15
    const __m256i zero = _mm256_setzero_si256();
    const __m256 d0 = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, w01));
    const __m256 d1 = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, w01));
    const __m256 d2 = _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, w23));
    const __m256 d3 = _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, w23));
    a.a0 = _mm256_fmadd_ps(x0, _mm256_mul_ps(d0, s), a.a0);
    a.a1 = _mm256_fmadd_ps(x1, _mm256_mul_ps(d1, s), a.a1);
    a.a2 = _mm256_fmadd_ps(x2, _mm256_mul_ps(d2, s), a.a2);
    a.a3 = _mm256_fmadd_ps(x3, _mm256_mul_ps(d3, s), a.a3);
}

K3_AVX2 float finishMxfp4(const Acc4& a, const float* x, const std::uint8_t* packed,
                          const std::uint8_t* scales, int fullGroups, int n) {
    float lanes[kLanes];
    storeLanes(a.a0, a.a1, a.a2, a.a3, kMxfp4Lanes, lanes);
    // The partial last group, if any, element by element exactly as the scalar path.
    const int begin = fullGroups * kMxfp4Group;
    if (begin < n && scales[fullGroups] != 255) {
        const float s = e8m0(scales[fullGroups]);
        for (int i = begin; i < n; ++i) {
            const unsigned nib = (packed[i >> 1] >> ((i & 1) * 4)) & 0xFu;
            lanes[i % kLanes] = std::fma(x[i], kE2m1[nib] * s, lanes[i % kLanes]);
        }
    }
    return foldLanes(lanes);
}

K3_AVX2 inline Acc4 zeroAcc() {
    const __m256 z = _mm256_setzero_ps();
    return {z, z, z, z};
}

} // namespace

K3_AVX2 float dotF32Avx2(const float* x, const float* w, int n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + kLanes <= n; i += kLanes) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(w + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(w + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(w + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(w + i + 24), a3);
    }
    float lanes[kLanes];
    _mm256_storeu_ps(lanes, a0);
    _mm256_storeu_ps(lanes + 8, a1);
    _mm256_storeu_ps(lanes + 16, a2);
    _mm256_storeu_ps(lanes + 24, a3);
    for (; i < n; ++i) lanes[i % kLanes] = std::fma(x[i], w[i], lanes[i % kLanes]);
    return foldLanes(lanes);
}

// Even elements then odd ones, per 16: the order bf16Block widens them in.
K3_AVX2 void permuteXBf16Avx2(float* xp, const float* x, int n) {
    for (int b = 0; b + 16 <= n; b += 16) {
        const __m256 lo = _mm256_loadu_ps(x + b), hi = _mm256_loadu_ps(x + b + 8);
        // shuffle_ps works per 128-bit half: [0 2 8 10 | 4 6 12 14], then fix the quads.
        const __m256 even = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(2, 0, 2, 0));
        const __m256 odd = _mm256_shuffle_ps(lo, hi, _MM_SHUFFLE(3, 1, 3, 1));
        _mm256_storeu_ps(xp + b, _mm256_castpd_ps(_mm256_permute4x64_pd(_mm256_castps_pd(even),
                                                                        _MM_SHUFFLE(3, 1, 2, 0))));
        _mm256_storeu_ps(xp + b + 8, _mm256_castpd_ps(_mm256_permute4x64_pd(
                                         _mm256_castps_pd(odd), _MM_SHUFFLE(3, 1, 2, 0))));
    }
}

K3_AVX2 void permuteXMxfp4Avx2(float* xp, const float* x, int n) {
    const __m256i order = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    for (int b = 0; b + 8 <= n; b += 8)
        _mm256_storeu_ps(xp + b, _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + b), order));
}

// BF16 runs two rows at a time sharing the x loads (eight accumulators, four x
// vectors and a mask fit the sixteen YMM registers).
K3_AVX2 void rowsBf16Avx2(float* y, const float* x, const float* xp, const std::uint16_t* w, int n,
                          int count) {
    const int full = n / kLanes * kLanes;
    const __m256i high = _mm256_set1_epi32(static_cast<int>(0xFFFF0000u));
    int r0 = 0;
    for (; r0 + 2 <= count; r0 += 2) {
        const std::uint16_t* ra = w + r0 * static_cast<std::size_t>(n);
        const std::uint16_t* rb = ra + n;
        Acc4 a = zeroAcc(), b = zeroAcc();
        for (int i = 0; i < full; i += kLanes) {
            prefetch(ra + i);
            prefetch(rb + i);
            const __m256 x0 = _mm256_loadu_ps(xp + i), x1 = _mm256_loadu_ps(xp + i + 8);
            const __m256 x2 = _mm256_loadu_ps(xp + i + 16), x3 = _mm256_loadu_ps(xp + i + 24);
            bf16Block(a, ra + i, x0, x1, x2, x3, high);
            bf16Block(b, rb + i, x0, x1, x2, x3, high);
        }
        y[r0] = finishBf16(a, x, ra, full, n);
        y[r0 + 1] = finishBf16(b, x, rb, full, n);
    }
    for (int r = r0; r < count; ++r) {
        const std::uint16_t* row = w + r * static_cast<std::size_t>(n);
        Acc4 a = zeroAcc();
        for (int i = 0; i < full; i += kLanes) {
            prefetch(row + i);
            bf16Block(a, row + i, _mm256_loadu_ps(xp + i), _mm256_loadu_ps(xp + i + 8),
                      _mm256_loadu_ps(xp + i + 16), _mm256_loadu_ps(xp + i + 24), high);
        }
        y[r] = finishBf16(a, x, row, full, n);
    }
}

// MXFP4 runs one row at a time: a second row's four accumulators plus the decode
// constants and temporaries exceed the sixteen YMM registers, and the accumulator
// spills cost more (measured) than the x loads, which hit L1, would save.
K3_AVX2 void rowsMxfp4Avx2(float* y, const float* x, const float* xp, const std::uint8_t* packed,
                           std::size_t rowBytes, const std::uint8_t* scales, std::size_t rowScales,
                           int n, int count) {
    const int fullGroups = n / kMxfp4Group;
    const MxConst c = mxConst();
    constexpr int groupBytes = kMxfp4Group / 2;
    for (int r = 0; r < count; ++r) {
        const std::uint8_t* row = packed + r * rowBytes;
        const std::uint8_t* rowScale = scales + r * rowScales;
        Acc4 a = zeroAcc();
        for (int g = 0; g < fullGroups; ++g) {
            if ((g & 3) == 0) prefetch(row + g * groupBytes); // one line per 4 groups
            const float* xg = xp + g * kMxfp4Group;
            if (rowScale[g] != 255) // NaN scale: the whole group is dropped
                mxfp4Group(a, row + g * groupBytes, rowScale[g], _mm256_loadu_ps(xg),
                           _mm256_loadu_ps(xg + 8), _mm256_loadu_ps(xg + 16),
                           _mm256_loadu_ps(xg + 24), c);
        }
        y[r] = finishMxfp4(a, x, row, rowScale, fullGroups, n);
    }
}

} // namespace k3::detail

#endif
