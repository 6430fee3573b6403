#pragma once
// Row dot products behind k3::matvec*, one set per instruction path. Both sets follow
// the order documented in k3/kernels.hpp (8 double lanes by i % 8, exact products,
// BF16 summed in 16 float lanes per block first, MXFP4 summed per group then scaled
// exactly, fixed fold, one rounding to float), so they return identical bits.

#include <array>
#include <atomic>
#include <bit>
#include <cstddef>
#include <cstdint>

namespace k3::detail {

inline constexpr int kLanes = 8;

// E2M1 magnitudes indexed by the low three bits; bit 3 is the sign.
inline constexpr float kE2m1[16] = {0.0f,  0.5f,  1.0f,  1.5f,  2.0f,  3.0f,  4.0f,  6.0f,
                                    -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

// E8M0 -> 2^(s - 127) built from its bits (no libm call in the inner loop); 0 is the
// subnormal 2^-127; 255 (NaN by spec) -> 0.
inline float e8m0(std::uint8_t s) {
    if (s == 255) return 0.0f;
    return std::bit_cast<float>(s == 0 ? 0x00400000u : static_cast<std::uint32_t>(s) << 23);
}

// E8M0 -> 2^(s - 127) as a double: every such power is a normal double, so E2M1 times
// it is exact, even where the float product would overflow. 255 is never passed.
inline double e8m0Double(std::uint8_t s) {
    return std::bit_cast<double>(static_cast<std::uint64_t>(s + (1023 - 127)) << 52);
}

// e8m0Double for every byte (255 -> 0, never used): the SIMD kernels broadcast the
// group scale straight from memory instead of building it in a general register.
alignas(64) inline constexpr std::array<double, 256> kE8m0Doubles = [] {
    std::array<double, 256> t{};
    for (int s = 0; s < 255; ++s)
        t[s] = std::bit_cast<double>(static_cast<std::uint64_t>(s + (1023 - 127)) << 52);
    return t;
}();

// The fixed fold of the 8 double lanes, rounded once to float (shared by both paths).
float foldLanes(const double* lanes);

// The end of a BF16 block: double lane L takes float lane L, then float lane L + 8.
inline void flushBf16Block(double* lanes, const float* s) {
    for (int l = 0; l < kLanes; ++l) {
        lanes[l] += double(s[l]);
        lanes[l] += double(s[l + kLanes]);
    }
}

// One MXFP4 group (elements [begin, end), end - begin <= 32) into the 8 lanes, in the
// documented order: per lane, the exact products E2M1 * x summed in increasing i from
// +0, then that sum times 2^(scale - 127) (exact) added to the lane. scale != 255.
void addMxfp4Group(double* lanes, const float* x, const std::uint8_t* packed, std::uint8_t scale,
                   int begin, int end);

float dotF32Scalar(const float* x, const float* w, int n);
float dotBf16Scalar(const float* x, const std::uint16_t* w, int n);
float dotMxfp4Scalar(const float* x, const std::uint8_t* packed, const std::uint8_t* scales, int n);

#if defined(__x86_64__)
#define K3_HAVE_AVX2_PATH 1
float dotF32Avx2(const float* x, const float* w, int n);

// The AVX2 BF16 and MXFP4 kernels read x through a copy made once per matvec (shared by
// every row). BF16's unpack leaves each 16 weights as (0-3, 8-11) and (4-7, 12-15), so
// its float copy is permuted the same way and each register slot stays one float lane
// (i % 16). MXFP4's decode leaves each 8 weights in the order (0, 2, 1, 3, 4, 6, 5, 7),
// so its copy, widened to double, is permuted that way; each lane still sees exactly the
// elements i with i % 8 == lane, in increasing i. Only full 16-chunks (BF16) or
// 32-groups (MXFP4) are read, the tail of a row reads x itself.
void permuteXBf16Avx2(float* xp, const float* x, int n);
void widenXMxfp4Avx2(double* xd, const float* x, int n);
// `count` consecutive rows of `n` columns into y[0..count); several rows per pass
// (BF16: 6, MXFP4: 3) give independent fma chains. Row r of BF16 starts at w + r * n; row r of
// MXFP4 at packed + r * rowBytes with scales + r * rowScales.
void rowsBf16Avx2(float* y, const float* x, const float* xp, const std::uint16_t* w, int n,
                  int count);
void rowsMxfp4Avx2(float* y, const float* x, const double* xd, const std::uint8_t* packed,
                   std::size_t rowBytes, const std::uint8_t* scales, std::size_t rowScales, int n,
                   int count);

// Multi-column products (k3::matmat). Each column's x is copied once per call, block-major:
// for every block of a row (F32: kF32Chunk elements, BF16: one kBf16Block, MXFP4: one
// 32-group) the copies of all columns sit side by side, so the x that a block of rows
// needs next is one contiguous stretch that stays in L1 while every row of the block uses
// it. Inside a block each column's copy has the layout of the single-column copy above
// (F32: plain doubles). The *Floats / *Doubles functions give the copy's size.
inline constexpr int kF32Chunk = 128;
std::size_t bf16ColumnsFloats(int n, int columns);
std::size_t f32ColumnsDoubles(int n, int columns);
std::size_t mxfp4ColumnsDoubles(int n, int columns);
void permuteXBf16ColumnsAvx2(float* xp, const float* x, int n, int columns);
void widenXF32ColumnsAvx2(double* xd, const float* x, int n, int columns);
void widenXMxfp4ColumnsAvx2(double* xd, const float* x, int n, int columns);
// `count` (<= kMatmatRows) consecutive rows, each against every column: y[t * ldy + r]
// for column t, whose x is x + t * n and, copied, the block-major copy above. Rows and
// weights as in the single-column functions.
inline constexpr int kMatmatRows = 12;
// MXFP4: a tile of fewer columns than this scales each column's partial sums (fma into the
// lanes, as the single-column kernel) instead of the decoded weights; the same bits either
// way (rowsMxfp4ColumnsAvx2). A variable only so that bench_matmat_variants can time both
// on the same inputs (0: always the weights, the kernel before issue 36).
inline constexpr int kMxfp4ScalePartsBelow = 8;
extern std::atomic<int> gMxfp4ScalePartsBelow;
void rowsF32ColumnsAvx2(float* y, std::size_t ldy, const float* x, const double* xd, const float* w,
                        int n, int count, int columns);
void rowsBf16ColumnsAvx2(float* y, std::size_t ldy, const float* x, const float* xp,
                         const std::uint16_t* w, int n, int count, int columns);
void rowsMxfp4ColumnsAvx2(float* y, std::size_t ldy, const float* x, const double* xd,
                          const std::uint8_t* packed, std::size_t rowBytes,
                          const std::uint8_t* scales, std::size_t rowScales, int n, int count,
                          int columns);
// KernelPath::Avx512's BF16 multi-column rows: the copy in element order (same
// block-major layout and size as the permuted one) and the rows.
void copyXBf16ColumnsAvx512(float* xn, const float* x, int n, int columns);
void rowsBf16ColumnsAvx512(float* y, std::size_t ldy, const float* x, const float* xn,
                           const std::uint16_t* w, int n, int count, int columns);
#endif

#if defined(__aarch64__)
#define K3_HAVE_NEON_PATH 1
// NEON (KernelsNeon.hpp): the same order with the 8 double lanes as 4 float64x2 registers
// in lane order, so nothing is permuted. BF16 reads x as it is; MXFP4 reads x widened to
// double once per call (neonXDoubles(n) doubles: matvec, element order; matmat, the
// block-major copy of every column below).
float dotF32Neon(const float* x, const float* w, int n);
void rowsBf16Neon(float* y, const float* x, const std::uint16_t* w, int n, int count);
void widenXMxfp4Neon(double* xd, const float* x, int n);
void rowsMxfp4Neon(float* y, const float* x, const double* xd, const std::uint8_t* packed,
                   std::size_t rowBytes, const std::uint8_t* scales, std::size_t rowScales, int n,
                   int count);
// Multi-column rows (k3::matmat): `count` (<= kMatmatRowsNeon) consecutive rows against
// every column, y[t * ldy + r]; the weights of a block (BF16: kBf16Block elements, MXFP4:
// one group, decoded once) are applied to every column while they are in registers or L1.
// MXFP4's xd is the copy of widenXMxfp4ColumnsNeon: for each full group, the 32 doubles of
// every column side by side (mxfp4ColumnsDoublesNeon(n, columns) doubles).
inline constexpr int kMatmatRowsNeon = 12;
void rowsF32ColumnsNeon(float* y, std::size_t ldy, const float* x, const float* w, int n, int count,
                        int columns);
void rowsBf16ColumnsNeon(float* y, std::size_t ldy, const float* x, const std::uint16_t* w, int n,
                         int count, int columns);
std::size_t mxfp4ColumnsDoublesNeon(int n, int columns);
void widenXMxfp4ColumnsNeon(double* xd, const float* x, int n, int columns);
void rowsMxfp4ColumnsNeon(float* y, std::size_t ldy, const float* x, const double* xd,
                          const std::uint8_t* packed, std::size_t rowBytes,
                          const std::uint8_t* scales, std::size_t rowScales, int n, int count,
                          int columns);
#endif

} // namespace k3::detail
