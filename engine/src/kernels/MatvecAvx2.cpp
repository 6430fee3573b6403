// AVX2/FMA matvec rows. Compiled with function-level target attributes, never with
// -mavx2 for the file, so the rest of the engine stays portable and the choice is made
// at run time by CPUID.
//
// Two __m256d accumulators hold the 8 double lanes of the order in k3/kernels.hpp
// (F32, BF16: lanes 0-3 and 4-7; MXFP4: lanes 0,2,1,3 and 4,6,5,7, the order its
// decode produces, with x permuted the same way). Each lane receives exactly its
// elements, in increasing i, through fma(w, x, lane) whose product is exact in double,
// so it rounds like the scalar path's lane + w * x and the bits are identical (MXFP4:
// per group, fma(q, x, part) into partial lanes, then fma(part, 2^(s-127), lane), both
// products exact, as addMxfp4Group in MatvecScalar.cpp; BF16: float fma into 16 float
// lanes per block, as std::fma in dotBf16Scalar, then the block's lanes added to the
// double lanes). Several rows run per pass because one row's dependent chains leave the
// FMA units idle.

#include "kernels/MatvecRows.hpp"

#include "k3/kernels.hpp"

#if defined(K3_HAVE_AVX2_PATH)

#include "kernels/Mxfp4Avx2.hpp"

#include <array>
#include <cmath>
#include <immintrin.h>

namespace k3::detail {

namespace {

// BF16 prefetches each row at the same column in the row one pass ahead (kBf16Rows rows
// further on, the next rows this thread reads: blocks are contiguous per thread), into
// L2. That starts every line a whole pass (6 x 14 KB at K3's widths) before it is read,
// where a fixed distance ahead in the same row left DRAM latency exposed. Measured
// same-run with the double-lane kernel, 2 threads, 12288x7168 from DRAM (Zen 4): 5.2 ms
// vs 5.9 ms with 512 bytes ahead in the same row (T0), 6.2 ms with none; T0/T2/NTA hints
// were no better than T1.
constexpr int kBf16Rows = 6;
// MXFP4 rows are short (1.5-1.75 KB) and a pass reads 3 of them side by side, so 512
// bytes ahead is too little of the stream to cover a DRAM latency: in the cold 16-expert
// cycle (2 threads, Zen 4, same run) one matvec took 0.55 ms at 6144 bytes ahead vs 0.68
// at 512 (1.24x; 1 thread 1.25x); 4096-12288 is a plateau, 1024 no better than 512,
// 2048 in between. 6144 reaches into the rows of the next pass, which is where the
// stream goes next since rows are contiguous. NTA and T1 hints were no faster than T0.
constexpr int kMxfp4PrefetchBytes = 6144;

template <int Ahead> K3_AVX2 inline void prefetch(const void* p) {
    _mm_prefetch(static_cast<const char*>(p) + Ahead, _MM_HINT_T0);
}

// The last pass of the matrix prefetches past its end: harmless, a prefetch never faults,
// and the address is formed as an integer so no out-of-bounds pointer is ever made.
K3_AVX2 inline void prefetchNextPass(const void* p, std::size_t bytes) {
    _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<std::uintptr_t>(p) + bytes),
                 _MM_HINT_T1);
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

// The last block, if partial: its float lanes so far (lo, hi), then the tail elements one
// at a time into the lane i % 16 as the scalar path, then the block's flush and the fold.
// After full blocks only, lo and hi are zero and there is no tail: nothing is added.
K3_AVX2 float finishBf16(const Acc2& a, __m256 lo, __m256 hi, const float* x,
                         const std::uint16_t* w, int full, int n) {
    double lanes[kLanes];
    storeAcc(a, lanes);
    if (n % kBf16Block == 0) return foldLanes(lanes);
    alignas(32) float slots[16];
    _mm256_store_ps(slots, lo);
    _mm256_store_ps(slots + 8, hi);
    constexpr int kLaneOfSlot[16] = {0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15};
    float s[16];
    for (int j = 0; j < 16; ++j) s[kLaneOfSlot[j]] = slots[j];
    for (int i = full; i < n; ++i) s[i % 16] = std::fma(bf16ToFloat(w[i]), x[i], s[i % 16]);
    flushBf16Block(lanes, s);
    return foldLanes(lanes);
}

// R rows of BF16 in one pass (the order of k3/kernels.hpp: float lanes per block, then
// double lanes), sharing the x loads. A bf16 is the top half of a float: interleaving a
// zero word below each of 16 weights (one in-lane unpack per 8) gives the floats of
// elements (0-3, 8-11) and (4-7, 12-15), which xp holds x permuted to match; so each
// float register slot is one float lane i % 16, multiplied in place with one fma per 8
// weights. At the end of a block, slots 0-3 / 4-7 of the low register are float lanes
// 0-3 / 8-11 and go to double lanes 0-3 in that order (4-7 / 12-15 of the high one to
// double lanes 4-7), as flushBf16Block does.
template <int R>
K3_AVX2 inline void bf16Rows(float* y, const float* x, const float* xp, const std::uint16_t* w,
                             int n) {
    const int full = n / 16 * 16;
    const std::size_t nextPassBytes = static_cast<std::size_t>(kBf16Rows) * n * sizeof(*w);
    const __m256i zero = _mm256_setzero_si256();
    Acc2 a[R];
    __m256 lo[R], hi[R];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        a[r] = zeroAcc();
        lo[r] = hi[r] = _mm256_setzero_ps();
    }
    for (int b = 0; b < full; b += kBf16Block) {
        const int end = full - b < kBf16Block ? full : b + kBf16Block;
        for (int i = b; i < end; i += 16) {
            const __m256 xlo = _mm256_load_ps(xp + i), xhi = _mm256_load_ps(xp + i + 8);
#pragma GCC unroll 8
            for (int r = 0; r < R; ++r) {
                const std::uint16_t* p = w + r * static_cast<std::size_t>(n) + i;
                if ((i & 31) == 0) prefetchNextPass(p, nextPassBytes); // a line per 32 weights
                const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p));
                lo[r] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, v)), xlo,
                                        lo[r]);
                hi[r] = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, v)), xhi,
                                        hi[r]);
            }
        }
        if (end - b < kBf16Block) break; // a partial last block ends in finishBf16
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            a[r].a0 = _mm256_add_pd(a[r].a0, _mm256_cvtps_pd(_mm256_castps256_ps128(lo[r])));
            a[r].a0 = _mm256_add_pd(a[r].a0, _mm256_cvtps_pd(_mm256_extractf128_ps(lo[r], 1)));
            a[r].a1 = _mm256_add_pd(a[r].a1, _mm256_cvtps_pd(_mm256_castps256_ps128(hi[r])));
            a[r].a1 = _mm256_add_pd(a[r].a1, _mm256_cvtps_pd(_mm256_extractf128_ps(hi[r], 1)));
            lo[r] = hi[r] = _mm256_setzero_ps();
        }
    }
    for (int r = 0; r < R; ++r)
        y[r] = finishBf16(a[r], lo[r], hi[r], x, w + r * static_cast<std::size_t>(n), full, n);
}

// One full group (16 bytes, 32 weights) of one row into its two accumulators.
K3_AVX2 inline void mxfp4Group(Acc2& a, const std::uint8_t* p, std::uint8_t scale, const double* xg,
                               const MxConst& c) {
    __m256d v[8];
    decodeMxfp4Group(v, p, c);
    // The exact products q * x of each lane summed over the group (4 per lane), then the
    // group's sum times 2^(s - 127) (exact) added to the lane: one multiply per group
    // instead of one per weight, and the 4-deep chain no longer runs through the lanes.
    __m256d part[2];
#pragma GCC unroll 8
    for (int m = 0; m < 8; ++m) {
        const __m256d xv = _mm256_loadu_pd(xg + 4 * m);
        part[m % 2] = m < 2 ? _mm256_mul_pd(v[m], xv) : _mm256_fmadd_pd(v[m], xv, part[m % 2]);
    }
    const __m256d s = _mm256_broadcast_sd(&kE8m0Doubles[scale]);
    a.a0 = _mm256_fmadd_pd(part[0], s, a.a0);
    a.a1 = _mm256_fmadd_pd(part[1], s, a.a1);
}

K3_AVX2 float finishMxfp4(const Acc2& a, const float* x, const std::uint8_t* packed,
                          const std::uint8_t* scales, int fullGroups, int n) {
    alignas(32) double tmp[kLanes];
    storeAcc(a, tmp);
    constexpr int kFrom[kLanes] = {0, 2, 1, 3, 4, 6, 5, 7}; // lane of tmp slot
    double lanes[kLanes];
    for (int j = 0; j < kLanes; ++j) lanes[kFrom[j]] = tmp[j];
    // The partial last group, if any, element by element exactly as the scalar path.
    const int begin = fullGroups * kMxfp4Group;
    if (begin < n && scales[fullGroups] != 255)
        addMxfp4Group(lanes, x, packed, scales[fullGroups], begin, n);
    return foldLanes(lanes);
}

// R rows per pass: independent fma chains from different rows keep the FMA units fed.
template <int R>
K3_AVX2 inline void mxfp4Rows(float* y, const float* x, const double* xd,
                              const std::uint8_t* packed, std::size_t rowBytes,
                              const std::uint8_t* scales, std::size_t rowScales, int n,
                              const MxConst& c) {
    constexpr int groupBytes = kMxfp4Group / 2;
    const int fullGroups = n / kMxfp4Group;
    const std::uint8_t* row[R];
    const std::uint8_t* sc[R];
    Acc2 a[R];
#pragma GCC unroll 4
    for (int r = 0; r < R; ++r) {
        row[r] = packed + r * rowBytes;
        sc[r] = scales + r * rowScales;
        a[r] = zeroAcc();
    }
    for (int g = 0; g < fullGroups; ++g) {
        const double* xg = xd + g * kMxfp4Group;
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            if ((g & 3) == 0)
                prefetch<kMxfp4PrefetchBytes>(row[r] + g * groupBytes); // a line per 4 groups
            // NaN scale: the whole group is dropped
            if (sc[r][g] != 255) mxfp4Group(a[r], row[r] + g * groupBytes, sc[r][g], xg, c);
        }
    }
    for (int r = 0; r < R; ++r) y[r] = finishMxfp4(a[r], x, row[r], sc[r], fullGroups, n);
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

// Per 16 elements: (0-3, 8-11, 4-7, 12-15), the order bf16Rows unpacks weights in.
K3_AVX2 void permuteXBf16Avx2(float* xp, const float* x, int n) {
    for (int b = 0; b + 16 <= n; b += 16) {
        const __m256 first = _mm256_loadu_ps(x + b), second = _mm256_loadu_ps(x + b + 8);
        _mm256_store_ps(xp + b, _mm256_permute2f128_ps(first, second, 0x20));     // 0-3, 8-11
        _mm256_store_ps(xp + b + 8, _mm256_permute2f128_ps(first, second, 0x31)); // 4-7, 12-15
    }
}

// Per 8 elements (0, 2, 1, 3, 4, 6, 5, 7): the order mxfp4Group builds its doubles in.
K3_AVX2 void widenXMxfp4Avx2(double* xd, const float* x, int n) {
    for (int b = 0; b + 4 <= n; b += 4)
        _mm256_storeu_pd(xd + b, _mm256_permute4x64_pd(_mm256_cvtps_pd(_mm_loadu_ps(x + b)),
                                                       _MM_SHUFFLE(3, 1, 2, 0)));
}

// Six rows per pass, then the rest one at a time. The twelve float accumulators stay in
// registers; the double lanes, touched once per block, may be spilled. Same run, weights
// in L2, 1 thread: 3, 4 and 6 rows 52.8, 54.6 and 56.4 GB/s of weights; from DRAM the
// row count matters less than the prefetch (docs/measurements.md, "BF16 float blocks").
K3_AVX2 void rowsBf16Avx2(float* y, const float* x, const float* xp, const std::uint16_t* w, int n,
                          int count) {
    int r = 0;
    for (; r + kBf16Rows <= count; r += kBf16Rows)
        bf16Rows<kBf16Rows>(y + r, x, xp, w + r * static_cast<std::size_t>(n), n);
    for (; r < count; ++r) bf16Rows<1>(y + r, x, xp, w + r * static_cast<std::size_t>(n), n);
}

// Three rows per pass, then two or one (measured on Zen 4 at the expert shapes, one
// thread, weights in L3, with per-group partial sums: 2 rows 21.0-21.4, 3 rows
// 22.2-22.5 GFLOP/s; before partial sums 2 rows was best).
K3_AVX2 void rowsMxfp4Avx2(float* y, const float* x, const double* xd, const std::uint8_t* packed,
                           std::size_t rowBytes, const std::uint8_t* scales, std::size_t rowScales,
                           int n, int count) {
    const MxConst c = mxConst();
    int r = 0;
    for (; r + 3 <= count; r += 3)
        mxfp4Rows<3>(y + r, x, xd, packed + r * rowBytes, rowBytes, scales + r * rowScales,
                     rowScales, n, c);
    if (r + 2 <= count) {
        mxfp4Rows<2>(y + r, x, xd, packed + r * rowBytes, rowBytes, scales + r * rowScales,
                     rowScales, n, c);
        r += 2;
    }
    for (; r < count; ++r)
        mxfp4Rows<1>(y + r, x, xd, packed + r * rowBytes, rowBytes, scales + r * rowScales,
                     rowScales, n, c);
}

} // namespace k3::detail

#endif
