// AVX2/FMA multi-column rows (k3::matmat): the weights of a block of rows are loaded (and
// MXFP4 decoded) once and applied to every column, instead of once per column.
//
// Every (row, column) pair keeps exactly the accumulators of the single-column kernel in
// MatvecAvx2.cpp and meets its elements in the same order with the same roundings, so
// column t has the bits of matvec(x_t): only the interleaving of independent pairs
// differs (MXFP4 scales the weights instead of the partial sums on tiles of many columns,
// which gives the same values: see rowsMxfp4ColumnsAvx2). Between blocks (F32: kF32Chunk
// elements, BF16: one kBf16Block, MXFP4: one group) a pair's 8 double lanes live in a small
// state array in L1; within a block the float lanes (BF16) or the partial sums (MXFP4) live
// in registers.

#include "kernels/MatvecRows.hpp"

#include "k3/kernels.hpp"

#if defined(K3_HAVE_AVX2_PATH)

#include "kernels/Mxfp4Avx2.hpp"

#include <atomic>
#include <cmath>
#include <cstring>
#include <immintrin.h>

namespace k3::detail {

std::atomic<int> gMxfp4ScalePartsBelow{kMxfp4ScalePartsBelow};

namespace {

// Columns per pass over a block of rows: the pairs' double lanes (rows x columns x 64
// bytes, 24 KB at 12 x 32) and the x of one block of all these columns stay in L1.
constexpr int kTileColumns = 32;

// Register tiles (rows x columns of accumulators per pass over a block).
constexpr int kF32R = 2, kF32C = 2; // 8 double accumulators + 4 widened weights
// BF16, per half block: 8 float accumulators, 2 x, 1 weight and zero (from 1 x 8 to 6 x 2
// all ran within 5% of each other).
constexpr int kBf16R = 4, kBf16C = 2;

template <int Ahead> K3_AVX2 inline void prefetch(const void* p) {
    _mm_prefetch(reinterpret_cast<const char*>(reinterpret_cast<std::uintptr_t>(p) + Ahead),
                 _MM_HINT_T0);
}

// The state of a tile of rows x columns pairs: pair (r, c) at st + (r * stride + c) * 8.
struct Tile {
    double* st;
    int stride;
};

// ---- F32 ------------------------------------------------------------------------------

struct F32Job {
    Tile t;
    const float* w; // first row of the block
    std::size_t n;
    const double* xb; // this chunk, first column of the column tile
    int len;          // elements in this chunk (a multiple of 8)
    int begin;        // first element of this chunk
};

template <int R, int C> K3_AVX2 inline void f32Tile(const F32Job& j, int r0, int c0) {
    __m256d a[R][C][2];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
            const double* s = j.t.st + ((r0 + r) * j.t.stride + c0 + c) * kLanes;
            a[r][c][0] = _mm256_load_pd(s);
            a[r][c][1] = _mm256_load_pd(s + 4);
        }
    const float* w = j.w + (r0 * j.n) + j.begin;
    const double* xb = j.xb + c0 * kF32Chunk;
    for (int i = 0; i < j.len; i += kLanes) {
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const __m256d w0 = _mm256_cvtps_pd(_mm_loadu_ps(w + r * j.n + i));
            const __m256d w1 = _mm256_cvtps_pd(_mm_loadu_ps(w + r * j.n + i + 4));
#pragma GCC unroll 8
            for (int c = 0; c < C; ++c) {
                const double* xc = xb + c * kF32Chunk + i;
                a[r][c][0] = _mm256_fmadd_pd(w0, _mm256_load_pd(xc), a[r][c][0]);
                a[r][c][1] = _mm256_fmadd_pd(w1, _mm256_load_pd(xc + 4), a[r][c][1]);
            }
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
            double* s = j.t.st + ((r0 + r) * j.t.stride + c0 + c) * kLanes;
            _mm256_store_pd(s, a[r][c][0]);
            _mm256_store_pd(s + 4, a[r][c][1]);
        }
}

// Columns [c, cEnd) of rows [r, r + R): tiles of C, the rest with fewer columns.
template <int R, int C> K3_AVX2 inline void f32Cols(const F32Job& j, int r, int c, int cEnd) {
    for (; c + C <= cEnd; c += C) f32Tile<R, C>(j, r, c);
    if constexpr (C > 1)
        if (c < cEnd) f32Cols<R, C - 1>(j, r, c, cEnd);
}

template <int R, int C> K3_AVX2 inline void f32Rows(const F32Job& j, int r, int rEnd, int ct) {
    for (; r + R <= rEnd; r += R) f32Cols<R, C>(j, r, 0, ct);
    if constexpr (R > 1)
        if (r < rEnd) f32Rows<R - 1, C>(j, r, rEnd, ct);
}

// ---- BF16 -----------------------------------------------------------------------------

struct Bf16Job {
    Tile t;
    const std::uint16_t* w; // first row of the block
    std::size_t n;
    const float* xb; // this block's x copy, first column of the column tile
    int begin;       // first element of this block
    int len;         // elements of this block read by SIMD (a multiple of 16)
    // For the partial last block: the output and the raw x of the tile's first column.
    float* y;
    std::size_t ldy;
    const float* x;
    int full; // n / 16 * 16
};

// The end of one pair: its double lanes (state), the partial block's float lanes (slots
// in register order, null when there is no partial block), the tail element by element,
// the flush and the fold: finishBf16 of MatvecAvx2.cpp.
K3_AVX2 float finishBf16Pair(const double* st, const float* slots, const float* x,
                             const std::uint16_t* w, int full, int n) {
    double lanes[kLanes];
    std::memcpy(lanes, st, sizeof lanes);
    if (n % kBf16Block == 0) return foldLanes(lanes);
    constexpr int kLaneOfSlot[16] = {0, 1, 2, 3, 8, 9, 10, 11, 4, 5, 6, 7, 12, 13, 14, 15};
    float s[16] = {};
    if (slots)
        for (int j = 0; j < 16; ++j) s[kLaneOfSlot[j]] = slots[j];
    for (int i = full; i < n; ++i) s[i % 16] = std::fma(bf16ToFloat(w[i]), x[i], s[i % 16]);
    flushBf16Block(lanes, s);
    return foldLanes(lanes);
}

// The partial last block of one pair (rare, short), as bf16Rows does it, then the pair's
// end: its float lanes go to finishBf16Pair instead of a flush.
K3_AVX2 void bf16OpenPair(const Bf16Job& j, int r, int c) {
    const __m256i zero = _mm256_setzero_si256();
    __m256 lo = _mm256_setzero_ps(), hi = _mm256_setzero_ps();
    const std::uint16_t* w = j.w + r * j.n + j.begin;
    const float* xc = j.xb + c * kBf16Block;
    for (int i = 0; i < j.len; i += 16) {
        const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(w + i));
        lo = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_unpacklo_epi16(zero, v)),
                             _mm256_load_ps(xc + i), lo);
        hi = _mm256_fmadd_ps(_mm256_castsi256_ps(_mm256_unpackhi_epi16(zero, v)),
                             _mm256_load_ps(xc + i + 8), hi);
    }
    alignas(32) float slots[16];
    _mm256_store_ps(slots, lo);
    _mm256_store_ps(slots + 8, hi);
    j.y[c * j.ldy + r] =
        finishBf16Pair(j.t.st + (r * j.t.stride + c) * kLanes, slots, j.x + c * j.n, j.w + r * j.n,
                       j.full, static_cast<int>(j.n));
}

// One full block of R rows x C columns, one half of each 16 weights (H = 0: the unpacklo
// slots, float lanes 0-3 and 8-11; H = 1: unpackhi, 4-7 and 12-15), then that half's
// flush: double lanes 0-3 (or 4-7) take the low register half, then the high one, as in
// bf16Rows. The two halves are independent float lanes, and a half needs only R x C
// accumulators, which leaves registers for the x of every column, loaded once per 16
// elements and used by all R rows (with all 16 lanes at once, x came from memory once per
// row and fma: 62 vs 80 GFLOP/s, docs/measurements.md "Multi-column products").
// w: row r0 at the block; xb: column c0's copy of the block; st: pair (r0, c0)'s lanes.
template <int R, int C, int H>
K3_AVX2 inline void bf16Pass(const std::uint16_t* w, std::size_t n, const float* xb, double* st,
                             int stride) {
    const __m256i zero = _mm256_setzero_si256();
    const std::uint16_t* wr[R];
    __m256 acc[R][C];
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r) {
        wr[r] = w + r * n;
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) acc[r][c] = _mm256_setzero_ps();
    }
    xb += 8 * H;
#pragma GCC unroll 8
    for (int i = 0; i < kBf16Block; i += 16) {
        __m256 xv[C];
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) xv[c] = _mm256_load_ps(xb + c * kBf16Block + i);
#pragma GCC unroll 8
        for (int r = 0; r < R; ++r) {
            const __m256i v = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(wr[r] + i));
            const __m256 wv = _mm256_castsi256_ps(H == 0 ? _mm256_unpacklo_epi16(zero, v)
                                                         : _mm256_unpackhi_epi16(zero, v));
#pragma GCC unroll 8
            for (int c = 0; c < C; ++c) acc[r][c] = _mm256_fmadd_ps(wv, xv[c], acc[r][c]);
        }
    }
#pragma GCC unroll 8
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 8
        for (int c = 0; c < C; ++c) {
            double* d = st + (r * stride + c) * kLanes + 4 * H;
            __m256d a = _mm256_load_pd(d);
            a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm256_castps256_ps128(acc[r][c])));
            a = _mm256_add_pd(a, _mm256_cvtps_pd(_mm256_extractf128_ps(acc[r][c], 1)));
            _mm256_store_pd(d, a);
        }
}

template <int R, int C> K3_AVX2 inline void bf16FullTile(const Bf16Job& j, int r0, int c0) {
    const std::uint16_t* w = j.w + r0 * j.n + j.begin;
    const float* xb = j.xb + c0 * kBf16Block;
    double* st = j.t.st + (r0 * j.t.stride + c0) * kLanes;
    bf16Pass<R, C, 0>(w, j.n, xb, st, j.t.stride);
    bf16Pass<R, C, 1>(w, j.n, xb, st, j.t.stride);
}

template <int R, int C> K3_AVX2 inline void bf16Cols(const Bf16Job& j, int r, int c, int cEnd) {
    for (; c + C <= cEnd; c += C) bf16FullTile<R, C>(j, r, c);
    if constexpr (C > 1)
        if (c < cEnd) bf16Cols<R, C - 1>(j, r, c, cEnd);
}

template <int R, int C>
K3_AVX2 inline void bf16RowTiles(const Bf16Job& j, int r, int rEnd, int ct) {
    for (; r + R <= rEnd; r += R) bf16Cols<R, C>(j, r, 0, ct);
    if constexpr (R > 1)
        if (r < rEnd) bf16RowTiles<R - 1, C>(j, r, rEnd, ct);
}

// ---- MXFP4 ----------------------------------------------------------------------------

// finishMxfp4 of MatvecAvx2.cpp for one pair: lanes from the slot order, the partial last
// group element by element, the fold.
K3_AVX2 float finishMxfp4Pair(const double* st, const float* x, const std::uint8_t* packed,
                              const std::uint8_t* scales, int fullGroups, int n) {
    constexpr int kFrom[kLanes] = {0, 2, 1, 3, 4, 6, 5, 7}; // lane of state slot
    double lanes[kLanes];
    for (int j = 0; j < kLanes; ++j) lanes[kFrom[j]] = st[j];
    const int begin = fullGroups * kMxfp4Group;
    if (begin < n && scales[fullGroups] != 255)
        addMxfp4Group(lanes, x, packed, scales[fullGroups], begin, n);
    return foldLanes(lanes);
}

} // namespace

// ---- x copies -------------------------------------------------------------------------

std::size_t bf16ColumnsFloats(int n, int columns) {
    const std::size_t blocks =
        (static_cast<std::size_t>(n / 16 * 16) + kBf16Block - 1) / kBf16Block;
    return blocks * columns * kBf16Block;
}

std::size_t f32ColumnsDoubles(int n, int columns) {
    const std::size_t chunks =
        (static_cast<std::size_t>(n / kLanes * kLanes) + kF32Chunk - 1) / kF32Chunk;
    return chunks * columns * kF32Chunk;
}

std::size_t mxfp4ColumnsDoubles(int n, int columns) {
    return static_cast<std::size_t>(n / kMxfp4Group) * columns * kMxfp4Group;
}

// Per 16 elements (0-3, 8-11, 4-7, 12-15), as permuteXBf16Avx2.
K3_AVX2 void permuteXBf16ColumnsAvx2(float* xp, const float* x, int n, int columns) {
    const int full = n / 16 * 16;
    for (int c = 0; c < columns; ++c) {
        const float* xc = x + static_cast<std::size_t>(c) * n;
        for (int i = 0; i < full; i += 16) {
            float* d = xp + (static_cast<std::size_t>(i / kBf16Block) * columns + c) * kBf16Block +
                       i % kBf16Block;
            const __m256 first = _mm256_loadu_ps(xc + i), second = _mm256_loadu_ps(xc + i + 8);
            _mm256_store_ps(d, _mm256_permute2f128_ps(first, second, 0x20));
            _mm256_store_ps(d + 8, _mm256_permute2f128_ps(first, second, 0x31));
        }
    }
}

K3_AVX2 void widenXF32ColumnsAvx2(double* xd, const float* x, int n, int columns) {
    const int full = n / kLanes * kLanes;
    for (int c = 0; c < columns; ++c) {
        const float* xc = x + static_cast<std::size_t>(c) * n;
        for (int i = 0; i < full; i += 4) {
            double* d = xd + (static_cast<std::size_t>(i / kF32Chunk) * columns + c) * kF32Chunk +
                        i % kF32Chunk;
            _mm256_store_pd(d, _mm256_cvtps_pd(_mm_loadu_ps(xc + i)));
        }
    }
}

// Per 8 elements (0, 2, 1, 3, 4, 6, 5, 7), as widenXMxfp4Avx2.
K3_AVX2 void widenXMxfp4ColumnsAvx2(double* xd, const float* x, int n, int columns) {
    const int groups = n / kMxfp4Group;
    for (int c = 0; c < columns; ++c) {
        const float* xc = x + static_cast<std::size_t>(c) * n;
        for (int g = 0; g < groups; ++g) {
            double* d = xd + (static_cast<std::size_t>(g) * columns + c) * kMxfp4Group;
            for (int b = 0; b < kMxfp4Group; b += 4)
                _mm256_store_pd(
                    d + b, _mm256_permute4x64_pd(_mm256_cvtps_pd(_mm_loadu_ps(xc + g * 32 + b)),
                                                 _MM_SHUFFLE(3, 1, 2, 0)));
        }
    }
}

// ---- rows ---------------------------------------------------------------------------

K3_AVX2 void rowsF32ColumnsAvx2(float* y, std::size_t ldy, const float* x, const double* xd,
                                const float* w, int n, int count, int columns) {
    alignas(64) double st[kMatmatRows * kTileColumns * kLanes];
    const int full = n / kLanes * kLanes;
    const std::size_t nn = static_cast<std::size_t>(n);
    for (int c0 = 0; c0 < columns; c0 += kTileColumns) {
        const int ct = columns - c0 < kTileColumns ? columns - c0 : kTileColumns;
        std::memset(st, 0, sizeof(double) * kLanes * ct * count);
        for (int b = 0; b < full; b += kF32Chunk) {
            const F32Job j{{st, ct},
                           w,
                           nn,
                           xd +
                               (static_cast<std::size_t>(b / kF32Chunk) * columns + c0) * kF32Chunk,
                           full - b < kF32Chunk ? full - b : kF32Chunk,
                           b};
            f32Rows<kF32R, kF32C>(j, 0, count, ct);
        }
        for (int r = 0; r < count; ++r)
            for (int c = 0; c < ct; ++c) {
                double lanes[kLanes];
                std::memcpy(lanes, st + (r * ct + c) * kLanes, sizeof lanes);
                const float* xc = x + (c0 + c) * nn;
                const float* wr = w + r * nn;
                for (int i = full; i < n; ++i) lanes[i % kLanes] += double(wr[i]) * double(xc[i]);
                y[(c0 + c) * ldy + r] = foldLanes(lanes);
            }
    }
}

K3_AVX2 void rowsBf16ColumnsAvx2(float* y, std::size_t ldy, const float* x, const float* xp,
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
            const int len = full - b < kBf16Block ? full - b : kBf16Block;
            const Bf16Job j{{st, ct},
                            w,
                            nn,
                            xp + (static_cast<std::size_t>(b / kBf16Block) * columns + c0) *
                                     kBf16Block,
                            b,
                            len,
                            y + c0 * ldy,
                            ldy,
                            x + c0 * nn,
                            full};
            if (len == kBf16Block) {
                bf16RowTiles<kBf16R, kBf16C>(j, 0, count, ct);
                continue;
            }
            for (int r = 0; r < count; ++r) // the partial last block ends every pair
                for (int c = 0; c < ct; ++c) bf16OpenPair(j, r, c);
        }
        if (full % kBf16Block == 0) // no open block: the pairs end here (tail, if any)
            for (int r = 0; r < count; ++r)
                for (int c = 0; c < ct; ++c)
                    y[(c0 + c) * ldy + r] = finishBf16Pair(st + (r * ct + c) * kLanes, nullptr,
                                                           x + (c0 + c) * nn, w + r * nn, full, n);
    }
}

namespace {

// Half a group of R (1 or 2) rows against every column of the tile. Half H of the 32
// weights is the vectors v[m] with m % 2 == H (decodeMxfp4Group): the elements of lanes
// (0, 2, 1, 3) (H = 0) or (4, 6, 5, 7), each lane's 4 elements in increasing i, so a
// column's partial sum for those lanes is one mul and three fmas, as in mxfp4Group. Two
// rows share each x load (one row needed more loads than fmas: 10 per 8, and the loads
// were the limit); half a group keeps the 8 weight vectors of two rows in registers.
template <int R, int H, bool ScaledWeights>
K3_AVX2 inline void mxfp4Half(const __m256d (*decoded)[8], const __m256d* scale, const double* xg,
                              double* const* st, int ct) {
    __m256d v[R][4];
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r)
#pragma GCC unroll 4
        for (int j = 0; j < 4; ++j) v[r][j] = decoded[r][2 * j + H];
#pragma GCC unroll 2
    for (int c = 0; c < ct; ++c) {
        const double* xc = xg + c * kMxfp4Group + 4 * H;
        __m256d part[R];
        const __m256d x0 = _mm256_load_pd(xc);
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r) part[r] = _mm256_mul_pd(v[r][0], x0);
#pragma GCC unroll 4
        for (int j = 1; j < 4; ++j) {
            const __m256d xv = _mm256_load_pd(xc + 8 * j);
#pragma GCC unroll 2
            for (int r = 0; r < R; ++r) part[r] = _mm256_fmadd_pd(v[r][j], xv, part[r]);
        }
#pragma GCC unroll 2
        for (int r = 0; r < R; ++r) {
            double* lanes = st[r] + c * kLanes + 4 * H;
            const __m256d lane = _mm256_load_pd(lanes);
            _mm256_store_pd(lanes, ScaledWeights ? _mm256_add_pd(lane, part[r])
                                                 : _mm256_fmadd_pd(part[r], scale[r], lane));
        }
    }
}

// One full group of R rows: decoded once for both halves (decoding per half was 6-10%
// slower at 16 columns). ScaledWeights: times the exact scale (see rowsMxfp4ColumnsAvx2),
// 8 multiplies per row and group; otherwise each column's part is scaled as it is added
// (fma(part, scale, lane), as the single-column kernel), 2 per row, group and column: fewer
// for a tile of few columns.
template <int R, bool ScaledWeights>
K3_AVX2 inline void mxfp4Rows(const std::uint8_t* const* p, const std::uint8_t* s, const MxConst& k,
                              const double* xg, double* const* st, int ct) {
    alignas(32) __m256d decoded[R][8];
    __m256d scale[R];
#pragma GCC unroll 2
    for (int r = 0; r < R; ++r) {
        decodeMxfp4Group(decoded[r], p[r], k);
        scale[r] = _mm256_broadcast_sd(&kE8m0Doubles[s[r]]);
        if constexpr (ScaledWeights)
#pragma GCC unroll 8
            for (int m = 0; m < 8; ++m) decoded[r][m] = _mm256_mul_pd(decoded[r][m], scale[r]);
    }
    mxfp4Half<R, 0, ScaledWeights>(decoded, scale, xg, st, ct);
    mxfp4Half<R, 1, ScaledWeights>(decoded, scale, xg, st, ct);
}

} // namespace

// A full group is decoded once per tile of columns, times its exact scale, and each
// column's 8 products per lane summed as mxfp4Group sums them, the sum added to the pair's
// lanes. Scaling the weights instead of each column's partial sum is exact: q * 2^(s - 127)
// is a double, and every product and partial sum is the single-column one times that
// power of two, all far from double's overflow and subnormal range (|x| < 2^128,
// |q| <= 6, the scale 2^-127..2^127); so each rounding happens at the same relative place
// and the lane meets the same value part * 2^(s - 127) that the single-column
// fma(part, s, lane) adds. That costs 8 multiplies per row and group; a tile of fewer
// than kMxfp4ScalePartsBelow columns takes the single-column fma(part, s, lane) instead
// (2 per row, group and column), the same bits by the argument above. A group whose
// scale byte is 255 is skipped, as there.
K3_AVX2 void rowsMxfp4ColumnsAvx2(float* y, std::size_t ldy, const float* x, const double* xd,
                                  const std::uint8_t* packed, std::size_t rowBytes,
                                  const std::uint8_t* scales, std::size_t rowScales, int n,
                                  int count, int columns) {
    constexpr int groupBytes = kMxfp4Group / 2;
    alignas(64) double st[kMatmatRows * kTileColumns * kLanes];
    const MxConst k = mxConst();
    const int fullGroups = n / kMxfp4Group;
    const std::size_t nn = static_cast<std::size_t>(n);
    const int scalePartsBelow = gMxfp4ScalePartsBelow.load(std::memory_order_relaxed);
    for (int c0 = 0; c0 < columns; c0 += kTileColumns) {
        const int ct = columns - c0 < kTileColumns ? columns - c0 : kTileColumns;
        const bool scaleWeights = ct >= scalePartsBelow;
        std::memset(st, 0, sizeof(double) * kLanes * ct * count);
        for (int g = 0; g < fullGroups; ++g) {
            const double* xg = xd + (static_cast<std::size_t>(g) * columns + c0) * kMxfp4Group;
            int r = 0;
            for (; r < count; r += 2) {
                const int pair = count - r < 2 ? 1 : 2;
                const std::uint8_t* p[2];
                std::uint8_t s[2];
                double* lanes[2];
                int live = 0; // rows of the pair whose group is not dropped (scale 255)
                for (int q = 0; q < pair; ++q) {
                    const std::uint8_t* pq = packed + (r + q) * rowBytes + g * groupBytes;
                    if (c0 == 0 && (g & 3) == 0) prefetch<1024>(pq); // a line per 4 groups
                    const std::uint8_t sq = scales[(r + q) * rowScales + g];
                    if (sq == 255) continue; // NaN scale: the whole group is dropped
                    p[live] = pq;
                    s[live] = sq;
                    lanes[live++] = st + (r + q) * ct * kLanes;
                }
                if (scaleWeights) {
                    if (live == 2)
                        mxfp4Rows<2, true>(p, s, k, xg, lanes, ct);
                    else if (live == 1)
                        mxfp4Rows<1, true>(p, s, k, xg, lanes, ct);
                } else if (live == 2)
                    mxfp4Rows<2, false>(p, s, k, xg, lanes, ct);
                else if (live == 1)
                    mxfp4Rows<1, false>(p, s, k, xg, lanes, ct);
            }
        }
        for (int r = 0; r < count; ++r)
            for (int c = 0; c < ct; ++c)
                y[(c0 + c) * ldy + r] =
                    finishMxfp4Pair(st + (r * ct + c) * kLanes, x + (c0 + c) * nn,
                                    packed + r * rowBytes, scales + r * rowScales, fullGroups, n);
    }
}

} // namespace k3::detail

#endif
