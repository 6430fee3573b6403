// AVX2/FMA matvec rows. Compiled with function-level target attributes, never with
// -mavx2 for the file, so the rest of the engine stays portable and the choice is made
// at run time by CPUID.
//
// Two __m256d accumulators hold the 8 double lanes of the order in k3/kernels.hpp
// (F32, BF16: lanes 0-3 and 4-7; MXFP4: lanes 0,2,4,6 and 1,3,5,7, the order its
// decode produces, with x permuted the same way). Each lane receives exactly its
// elements, in increasing i, through fma(w, x, lane) whose product is exact in double,
// so it rounds like the scalar path's lane + w * x and the bits are identical. Several
// rows run per pass because one row's two dependent chains leave the FMA units idle.

#include "kernels/MatvecRows.hpp"

#include "k3/kernels.hpp"

#if defined(K3_HAVE_AVX2_PATH)

#include <array>
#include <immintrin.h>

#define K3_AVX2 __attribute__((target("avx2,fma")))

namespace k3::detail {

namespace {

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

// Bytes ahead that each weight row is prefetched; the rows are streamed once,
// so this hides DRAM latency the hardware prefetcher leaves exposed with few threads.
constexpr int kPrefetchBytes = 512; // measured (fp32 lanes): 0, 256, 512, 1024, 2048, 4096

K3_AVX2 inline void prefetch(const void* p) {
    _mm_prefetch(static_cast<const char*>(p) + kPrefetchBytes, _MM_HINT_T0);
}

struct Acc2 {
    __m256d a0, a1;
};

K3_AVX2 inline Acc2 zeroAcc() {
    const __m256d z = _mm256_setzero_pd();
    return {z, z};
}

K3_AVX2 inline void storeAcc(const Acc2& a, double* lanes) {
    _mm256_storeu_pd(lanes, a.a0);
    _mm256_storeu_pd(lanes + 4, a.a1);
}

// Four bf16 weights widened exactly to double.
K3_AVX2 inline __m256d bf16x4(const std::uint16_t* w) {
    const __m128i v = _mm_cvtepu16_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(w)));
    return _mm256_cvtps_pd(_mm_castsi128_ps(_mm_slli_epi32(v, 16)));
}

K3_AVX2 float finishBf16(const Acc2& a, const float* x, const std::uint16_t* w, int full, int n) {
    double lanes[kLanes];
    storeAcc(a, lanes);
    for (int i = full; i < n; ++i) lanes[i % kLanes] += double(bf16ToFloat(w[i])) * double(x[i]);
    return foldLanes(lanes);
}

// R rows of BF16 in one pass, sharing the x loads (2R accumulators).
template <int R>
K3_AVX2 inline void bf16Rows(float* y, const float* x, const double* xd, const std::uint16_t* w,
                             int n) {
    const int full = n / kLanes * kLanes;
    Acc2 a[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) a[r] = zeroAcc();
    for (int i = 0; i < full; i += kLanes) {
        const __m256d x0 = _mm256_loadu_pd(xd + i), x1 = _mm256_loadu_pd(xd + i + 4);
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const std::uint16_t* p = w + r * static_cast<std::size_t>(n) + i;
            if ((i & 31) == 0) prefetch(p); // one 64-byte line per 32 weights
            a[r].a0 = _mm256_fmadd_pd(bf16x4(p), x0, a[r].a0);
            a[r].a1 = _mm256_fmadd_pd(bf16x4(p + 4), x1, a[r].a1);
        }
    }
    for (int r = 0; r < R; ++r)
        y[r] = finishBf16(a[r], x, w + r * static_cast<std::size_t>(n), full, n);
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

// One full group (16 bytes, 32 weights) of one row. The shuffles leave register k
// holding the unscaled E2M1 values of elements 8k + (0, 2, 4, 6, 1, 3, 5, 7); each half
// is scaled exactly (in float where that cannot overflow, else in double), widened to
// double and fma'd with x in the same permuted order.
K3_AVX2 inline void mxfp4Group(Acc2& a, const std::uint8_t* p, std::uint8_t scale, const double* xg,
                               const MxConst& c) {
    // Low 128 bits: the low nibbles (even elements); high 128 bits: the high nibbles.
    const __m256i bytes =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p)));
    const __m256i idx = _mm256_and_si256(_mm256_srlv_epi32(bytes, c.shifts), c.nibble);
    const __m256i hi = _mm256_shuffle_epi8(c.high, idx);
    const __m256i lo = _mm256_shuffle_epi8(c.low, idx);
    const __m256i w01 = _mm256_unpacklo_epi8(lo, hi); // bf16 of bytes 0..7, per half
    const __m256i w23 = _mm256_unpackhi_epi8(lo, hi); // bytes 8..15
    const __m256i zero = _mm256_setzero_si256();
    const __m256 d[4] = {_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, w01)),
                         _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, w01)),
                         _mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, w23)),
                         _mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, w23))};
    if (scale < 253) {
        // |E2M1| <= 6 times 2^(s-127) <= 2^125 is exact in float (2^-127 included, as a
        // subnormal): one float multiply per 8 weights instead of two double ones.
        const __m256 s = _mm256_set1_ps(e8m0(scale));
#pragma GCC unroll 4
        for (int k = 0; k < 4; ++k) {
            const __m256 w = _mm256_mul_ps(d[k], s);
            a.a0 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(w)),
                                   _mm256_loadu_pd(xg + 8 * k), a.a0);
            a.a1 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(w, 1)),
                                   _mm256_loadu_pd(xg + 8 * k + 4), a.a1);
        }
        return;
    }
    const __m256d s = _mm256_set1_pd(e8m0Double(scale)); // a float product could overflow
#pragma GCC unroll 4
    for (int k = 0; k < 4; ++k) {
        const __m256d even = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_castps256_ps128(d[k])), s);
        const __m256d odd = _mm256_mul_pd(_mm256_cvtps_pd(_mm256_extractf128_ps(d[k], 1)), s);
        a.a0 = _mm256_fmadd_pd(even, _mm256_loadu_pd(xg + 8 * k), a.a0);
        a.a1 = _mm256_fmadd_pd(odd, _mm256_loadu_pd(xg + 8 * k + 4), a.a1);
    }
}

K3_AVX2 float finishMxfp4(const Acc2& a, const float* x, const std::uint8_t* packed,
                          const std::uint8_t* scales, int fullGroups, int n) {
    alignas(32) double tmp[kLanes];
    storeAcc(a, tmp);
    double lanes[kLanes];
    for (int j = 0; j < 4; ++j) {
        lanes[2 * j] = tmp[j];
        lanes[2 * j + 1] = tmp[4 + j];
    }
    // The partial last group, if any, element by element exactly as the scalar path.
    const int begin = fullGroups * kMxfp4Group;
    if (begin < n && scales[fullGroups] != 255) {
        const double s = e8m0Double(scales[fullGroups]);
        for (int i = begin; i < n; ++i) {
            const unsigned nib = (packed[i >> 1] >> ((i & 1) * 4)) & 0xFu;
            lanes[i % kLanes] += (double(kE2m1[nib]) * s) * double(x[i]);
        }
    }
    return foldLanes(lanes);
}

} // namespace

K3_AVX2 float dotF32Avx2(const float* x, const float* w, int n) {
    Acc2 a = zeroAcc();
    int i = 0;
    for (; i + kLanes <= n; i += kLanes) {
        a.a0 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm_loadu_ps(w + i)),
                               _mm256_cvtps_pd(_mm_loadu_ps(x + i)), a.a0);
        a.a1 = _mm256_fmadd_pd(_mm256_cvtps_pd(_mm_loadu_ps(w + i + 4)),
                               _mm256_cvtps_pd(_mm_loadu_ps(x + i + 4)), a.a1);
    }
    double lanes[kLanes];
    storeAcc(a, lanes);
    for (; i < n; ++i) lanes[i % kLanes] += double(w[i]) * double(x[i]);
    return foldLanes(lanes);
}

K3_AVX2 void widenXBf16Avx2(double* xd, const float* x, int n) {
    for (int b = 0; b + 4 <= n; b += 4)
        _mm256_storeu_pd(xd + b, _mm256_cvtps_pd(_mm_loadu_ps(x + b)));
}

// Even elements then odd ones, per 8: the order mxfp4Group decodes them in.
K3_AVX2 void widenXMxfp4Avx2(double* xd, const float* x, int n) {
    const __m256i order = _mm256_setr_epi32(0, 2, 4, 6, 1, 3, 5, 7);
    for (int b = 0; b + 8 <= n; b += 8) {
        const __m256 v = _mm256_permutevar8x32_ps(_mm256_loadu_ps(x + b), order);
        _mm256_storeu_pd(xd + b, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
        _mm256_storeu_pd(xd + b + 4, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
    }
}

// Four rows per pass (eight accumulators, two x vectors and temporaries fit the sixteen
// YMM registers), then the rest one at a time.
K3_AVX2 void rowsBf16Avx2(float* y, const float* x, const double* xd, const std::uint16_t* w, int n,
                          int count) {
    int r = 0;
    for (; r + 4 <= count; r += 4)
        bf16Rows<4>(y + r, x, xd, w + r * static_cast<std::size_t>(n), n);
    for (; r < count; ++r) bf16Rows<1>(y + r, x, xd, w + r * static_cast<std::size_t>(n), n);
}

// Two rows per pass: one row's two dependent fma chains (4 fmas each per group) bound
// it by latency, a second row's group fills the gap.
K3_AVX2 void rowsMxfp4Avx2(float* y, const float* x, const double* xd, const std::uint8_t* packed,
                           std::size_t rowBytes, const std::uint8_t* scales, std::size_t rowScales,
                           int n, int count) {
    const int fullGroups = n / kMxfp4Group;
    const MxConst c = mxConst();
    constexpr int groupBytes = kMxfp4Group / 2;
    int r = 0;
    for (; r + 2 <= count; r += 2) {
        const std::uint8_t* ra = packed + r * rowBytes;
        const std::uint8_t* rb = ra + rowBytes;
        const std::uint8_t* sa = scales + r * rowScales;
        const std::uint8_t* sb = sa + rowScales;
        Acc2 a = zeroAcc(), b = zeroAcc();
        for (int g = 0; g < fullGroups; ++g) {
            if ((g & 3) == 0) { // one line per 4 groups
                prefetch(ra + g * groupBytes);
                prefetch(rb + g * groupBytes);
            }
            const double* xg = xd + g * kMxfp4Group;
            // NaN scale: the whole group is dropped
            if (sa[g] != 255) mxfp4Group(a, ra + g * groupBytes, sa[g], xg, c);
            if (sb[g] != 255) mxfp4Group(b, rb + g * groupBytes, sb[g], xg, c);
        }
        y[r] = finishMxfp4(a, x, ra, sa, fullGroups, n);
        y[r + 1] = finishMxfp4(b, x, rb, sb, fullGroups, n);
    }
    for (; r < count; ++r) {
        const std::uint8_t* row = packed + r * rowBytes;
        const std::uint8_t* rowScale = scales + r * rowScales;
        Acc2 a = zeroAcc();
        for (int g = 0; g < fullGroups; ++g) {
            if ((g & 3) == 0) prefetch(row + g * groupBytes);
            if (rowScale[g] != 255)
                mxfp4Group(a, row + g * groupBytes, rowScale[g], xd + g * kMxfp4Group, c);
        }
        y[r] = finishMxfp4(a, x, row, rowScale, fullGroups, n);
    }
}

} // namespace k3::detail

#endif
