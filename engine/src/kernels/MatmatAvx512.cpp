// AVX-512F multi-column BF16 rows (k3::matmat on KernelPath::Avx512). One zmm register
// holds exactly the 16 float lanes of the BF16 reduction order (s[i % 16], see
// kernels.hpp), so a pair needs one accumulator per block instead of the AVX2 kernel's two
// half passes, and each weight vector feeds every column of the tile. The weights widen
// in natural element order (zero-extend, shift), so x is copied unpermuted. Every pair
// meets its elements in the same order with the same roundings as the single-column
// kernel: column t has the bits of matvec(x_t), on every path (tst_kernels_matmat).

#include "kernels/MatvecRows.hpp"

#include "k3/kernels.hpp"

#if defined(K3_HAVE_AVX2_PATH)

#include <cmath>
#include <cstring>
#include <immintrin.h>

// GCC 12 reports the intrinsics' own _mm512_undefined_* values as maybe-uninitialized
// (a false positive inside avx512fintrin.h).
#pragma GCC diagnostic ignored "-Wmaybe-uninitialized"

#define K3_AVX512 __attribute__((target("avx512f,avx2,fma")))

namespace k3::detail {

namespace {

// Columns per pass over a block of rows: the pairs' double lanes stay in L1 (as AVX2).
constexpr int kTileColumns = 32;
// Register tile: R x C accumulators + C x vectors + a weight vector of the 32 zmm.
constexpr int kR = 6, kC = 4;

template <int Ahead> K3_AVX512 inline void prefetch(const void* p) {
    _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<std::uintptr_t>(p) + Ahead),
                 _MM_HINT_T0);
}

// 16 BF16 weights as 16 floats in element order: a BF16 is the top half of its float.
K3_AVX512 inline __m512 widen16(const std::uint16_t* w) {
    const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(v), 16));
}

// The end of a block: double lane L takes float lane L, then float lane L + 8
// (flushBf16Block).
K3_AVX512 inline void flush(double* lanes, __m512 s) {
    __m512d a = _mm512_load_pd(lanes);
    a = _mm512_add_pd(a, _mm512_cvtps_pd(_mm512_castps512_ps256(s)));
    a = _mm512_add_pd(
        a, _mm512_cvtps_pd(_mm256_castpd_ps(_mm512_extractf64x4_pd(_mm512_castps_pd(s), 1))));
    _mm512_store_pd(lanes, a);
}

struct Job {
    double* st; // pair (r, c) at st + (r * stride + c) * kLanes
    int stride;
    const std::uint16_t* w; // row 0 at this block
    std::size_t n;
    const float* xb; // column 0's copy of this block
};

// One full block of R rows x C columns.
template <int R, int C> K3_AVX512 inline void tile(const Job& j, int r0, int c0) {
    const std::uint16_t* wr[R];
    __m512 acc[R][C];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        wr[r] = j.w + (r0 + r) * j.n;
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) acc[r][c] = _mm512_setzero_ps();
    }
    const float* xb = j.xb + c0 * kBf16Block;
#pragma GCC unroll 8
    for (int i = 0; i < kBf16Block; i += 16) {
        __m512 xv[C];
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) xv[c] = _mm512_load_ps(xb + c * kBf16Block + i);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const __m512 wv = widen16(wr[r] + i);
#pragma GCC unroll 8
            for (int c = 0; c < C; ++c) acc[r][c] = _mm512_fmadd_ps(wv, xv[c], acc[r][c]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c)
            flush(j.st + ((r0 + r) * j.stride + c0 + c) * kLanes, acc[r][c]);
}

template <int R, int C> K3_AVX512 inline void cols(const Job& j, int r, int c, int cEnd) {
    for (; c + C <= cEnd; c += C) tile<R, C>(j, r, c);
    if constexpr (C > 1)
        if (c < cEnd) cols<R, C - 1>(j, r, c, cEnd);
}

template <int R, int C> K3_AVX512 inline void rowTiles(const Job& j, int r, int rEnd, int ct) {
    for (; r + R <= rEnd; r += R) cols<R, C>(j, r, 0, ct);
    if constexpr (R > 1)
        if (r < rEnd) rowTiles<R - 1, C>(j, r, rEnd, ct);
}

// The end of one pair: the partial last block's float lanes (in element order; null when
// there is none), the tail element by element, the flush and the fold (finishBf16).
float finishPair(const double* st, const float* slots, const float* x, const std::uint16_t* w,
                 int full, int n) {
    double lanes[kLanes];
    std::memcpy(lanes, st, sizeof lanes);
    if (n % kBf16Block == 0) return foldLanes(lanes);
    float s[16] = {};
    if (slots) std::memcpy(s, slots, sizeof s);
    for (int i = full; i < n; ++i) s[i % 16] = std::fma(bf16ToFloat(w[i]), x[i], s[i % 16]);
    flushBf16Block(lanes, s);
    return foldLanes(lanes);
}

// The SIMD part of a partial last block (len elements, a multiple of 16) of one pair.
K3_AVX512 void openPairSlots(float* slots, const std::uint16_t* w, const float* xc, int len) {
    __m512 s = _mm512_setzero_ps();
    for (int i = 0; i < len; i += 16)
        s = _mm512_fmadd_ps(widen16(w + i), _mm512_load_ps(xc + i), s);
    _mm512_storeu_ps(slots, s);
}

} // namespace

// Block-major like permuteXBf16ColumnsAvx2, in element order.
K3_AVX512 void copyXBf16ColumnsAvx512(float* xn, const float* x, int n, int columns) {
    const int full = n / 16 * 16;
    for (int c = 0; c < columns; ++c) {
        const float* xc = x + static_cast<std::size_t>(c) * n;
        for (int i = 0; i < full; i += 16) {
            float* d = xn + (static_cast<std::size_t>(i / kBf16Block) * columns + c) * kBf16Block +
                       i % kBf16Block;
            _mm512_store_ps(d, _mm512_loadu_ps(xc + i));
        }
    }
}

K3_AVX512 void rowsBf16ColumnsAvx512(float* y, std::size_t ldy, const float* x, const float* xn,
                                     const std::uint16_t* w, int n, int count, int columns) {
    alignas(64) double st[kMatmatRows * kTileColumns * kLanes];
    const int full = n / 16 * 16;
    const std::size_t nn = static_cast<std::size_t>(n);
    for (int c0 = 0; c0 < columns; c0 += kTileColumns) {
        const int ct = columns - c0 < kTileColumns ? columns - c0 : kTileColumns;
        std::memset(st, 0, sizeof(double) * kLanes * ct * count);
        for (int b = 0; b < full; b += kBf16Block) {
            if (c0 == 0) // the next block but one of every row, a line per 32 weights
                for (int r = 0; r < count; ++r)
                    for (int k = 0; k < kBf16Block; k += 32)
                        prefetch<2 * kBf16Block * 2>(w + r * nn + b + k);
            const float* xb =
                xn + (static_cast<std::size_t>(b / kBf16Block) * columns + c0) * kBf16Block;
            const int len = full - b < kBf16Block ? full - b : kBf16Block;
            if (len == kBf16Block) {
                rowTiles<kR, kC>(Job{st, ct, w + b, nn, xb}, 0, count, ct);
                continue;
            }
            // The partial last block ends every pair.
            for (int r = 0; r < count; ++r)
                for (int c = 0; c < ct; ++c) {
                    alignas(64) float slots[16];
                    openPairSlots(slots, w + r * nn + b, xb + c * kBf16Block, len);
                    y[(c0 + c) * ldy + r] = finishPair(st + (r * ct + c) * kLanes, slots,
                                                       x + (c0 + c) * nn, w + r * nn, full, n);
                }
        }
        if (full % kBf16Block == 0) // no open block: the pairs end here (tail, if any)
            for (int r = 0; r < count; ++r)
                for (int c = 0; c < ct; ++c)
                    y[(c0 + c) * ldy + r] = finishPair(st + (r * ct + c) * kLanes, nullptr,
                                                       x + (c0 + c) * nn, w + r * nn, full, n);
    }
}

} // namespace k3::detail

#endif
