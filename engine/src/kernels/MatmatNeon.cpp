// NEON multi-column rows (k3::matmat on AArch64). Every (row, column) pair keeps the 8
// double lanes of the single-column kernel (MatvecNeon.cpp) in a small state array and
// meets its elements through the same KernelsNeon.hpp functions in the same order, so
// column t has the bits of matvec(x_t): only independent pairs are interleaved. The
// weights of a block (BF16: a kBf16Block of a few rows, in L1; MXFP4: one group, decoded
// once into registers) serve every column of a tile before the next block is read.
// Unmeasured on ARM hardware (README): the tiles follow the AVX2 kernel's reasoning.

#include "kernels/KernelsNeon.hpp"

#if defined(K3_HAVE_NEON_PATH)

#include <cstring>

namespace k3::detail {

namespace {

// Columns per pass over a block of rows: the pairs' lanes (12 x 32 x 64 bytes, 24 KB)
// and one block of x for those columns stay in L1.
constexpr int kTileColumnsNeon = 32;
constexpr int kBf16RowsNeon = 4;

} // namespace

void rowsF32ColumnsNeon(float* y, std::size_t ldy, const float* x, const float* w, int n, int count,
                        int columns) {
    // F32 weights are the small ones (norm-sized and router matrices): each row is read
    // from memory once and from L1/L2 for the other columns.
    const std::size_t nn = static_cast<std::size_t>(n);
    for (int r = 0; r < count; ++r)
        for (int c = 0; c < columns; ++c) y[c * ldy + r] = dotF32Neon(x + c * nn, w + r * nn, n);
}

void rowsBf16ColumnsNeon(float* y, std::size_t ldy, const float* x, const std::uint16_t* w, int n,
                         int count, int columns) {
    alignas(16) double st[kMatmatRowsNeon * kTileColumnsNeon * kLanes];
    const int full = n / 16 * 16;
    const std::size_t nn = static_cast<std::size_t>(n);
    for (int c0 = 0; c0 < columns; c0 += kTileColumnsNeon) {
        const int ct = columns - c0 < kTileColumnsNeon ? columns - c0 : kTileColumnsNeon;
        std::memset(st, 0, sizeof(double) * kLanes * ct * count);
        for (int b = 0; b < n; b += kBf16Block) {
            const int end = n - b < kBf16Block ? n : b + kBf16Block;
            for (int c = 0; c < ct; ++c) {
                const float* xc = x + (c0 + c) * nn;
                int r = 0;
                for (; r + kBf16RowsNeon <= count; r += kBf16RowsNeon) {
                    double* s[kBf16RowsNeon];
                    const std::uint16_t* row[kBf16RowsNeon];
                    for (int q = 0; q < kBf16RowsNeon; ++q) {
                        s[q] = st + ((r + q) * ct + c) * kLanes;
                        row[q] = w + (r + q) * nn;
                    }
                    neon::bf16Block<kBf16RowsNeon>(s, xc, row, b, end, full);
                }
                for (; r < count; ++r) {
                    double* s[1] = {st + (r * ct + c) * kLanes};
                    const std::uint16_t* row[1] = {w + r * nn};
                    neon::bf16Block<1>(s, xc, row, b, end, full);
                }
            }
        }
        for (int r = 0; r < count; ++r)
            for (int c = 0; c < ct; ++c)
                y[(c0 + c) * ldy + r] = foldLanes(st + (r * ct + c) * kLanes);
    }
}

std::size_t mxfp4ColumnsDoublesNeon(int n, int columns) {
    return static_cast<std::size_t>(n / kMxfp4Group) * columns * kMxfp4Group;
}

void widenXMxfp4ColumnsNeon(double* xd, const float* x, int n, int columns) {
    const int groups = n / kMxfp4Group;
    for (int c = 0; c < columns; ++c)
        for (int g = 0; g < groups; ++g)
            neon::widenX(xd + (static_cast<std::size_t>(g) * columns + c) * kMxfp4Group,
                         x + static_cast<std::size_t>(c) * n + g * kMxfp4Group, kMxfp4Group);
}

void rowsMxfp4ColumnsNeon(float* y, std::size_t ldy, const float* x, const double* xd,
                          const std::uint8_t* packed, std::size_t rowBytes,
                          const std::uint8_t* scales, std::size_t rowScales, int n, int count,
                          int columns) {
    constexpr int groupBytes = kMxfp4Group / 2;
    alignas(16) double st[kMatmatRowsNeon * kTileColumnsNeon * kLanes];
    const neon::MxTables t = neon::mxTables();
    const int fullGroups = n / kMxfp4Group;
    const std::size_t nn = static_cast<std::size_t>(n);
    for (int c0 = 0; c0 < columns; c0 += kTileColumnsNeon) {
        const int ct = columns - c0 < kTileColumnsNeon ? columns - c0 : kTileColumnsNeon;
        std::memset(st, 0, sizeof(double) * kLanes * ct * count);
        for (int g = 0; g < fullGroups; ++g) {
            const double* xg = xd + (static_cast<std::size_t>(g) * columns + c0) * kMxfp4Group;
            for (int r = 0; r < count; ++r) {
                const std::uint8_t s = scales[r * rowScales + g];
                if (s == 255) continue; // NaN scale: the whole group is dropped
                float64x2_t d[16];
                neon::decodeGroup(d, packed + r * rowBytes + g * groupBytes, t);
                const float64x2_t scale = vdupq_n_f64(kE8m0Doubles[s]);
                for (int c = 0; c < ct; ++c) {
                    double* lanes = st + (r * ct + c) * kLanes;
                    neon::Lanes a = neon::loadLanes(lanes);
                    neon::addGroup(a, d, xg + c * kMxfp4Group, scale);
                    neon::storeLanes(a, lanes);
                }
            }
        }
        const int begin = fullGroups * kMxfp4Group;
        for (int r = 0; r < count; ++r)
            for (int c = 0; c < ct; ++c) {
                double* lanes = st + (r * ct + c) * kLanes;
                const std::uint8_t* sc = scales + r * rowScales;
                if (begin < n && sc[fullGroups] != 255) // the partial last group, as scalar
                    addMxfp4Group(lanes, x + (c0 + c) * nn, packed + r * rowBytes, sc[fullGroups],
                                  begin, n);
                y[(c0 + c) * ldy + r] = foldLanes(lanes);
            }
    }
}

} // namespace k3::detail

#endif
