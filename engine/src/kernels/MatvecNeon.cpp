// NEON matvec rows (AArch64). The order of k3/kernels.hpp, as KernelsNeon.hpp sums it:
// identical bits to MatvecScalar.cpp (tst_kernels_paths, under qemu-aarch64 in CI).
// Several rows per pass share the x loads and give independent fma chains. No speed
// claim is made for these kernels: they have only run under qemu (README).

#include "kernels/KernelsNeon.hpp"

#if defined(K3_HAVE_NEON_PATH)

namespace k3::detail {

namespace {

// BF16 rows per pass: 4 rows x 16 float lanes is 16 registers of AArch64's 32.
constexpr int kBf16RowsNeon = 4;
// MXFP4 rows per pass: a decoded group is 16 registers, so rows take turns; 3 rows share
// each widened x load.
constexpr int kMxfp4RowsNeon = 3;

template <int R> void bf16Rows(float* y, const float* x, const std::uint16_t* w, int n) {
    const int full = n / 16 * 16;
    alignas(16) double lanes[R][kLanes] = {};
    double* st[R];
    const std::uint16_t* row[R];
    for (int r = 0; r < R; ++r) {
        st[r] = lanes[r];
        row[r] = w + r * static_cast<std::size_t>(n);
    }
    for (int b = 0; b < n; b += kBf16Block)
        neon::bf16Block<R>(st, x, row, b, n - b < kBf16Block ? n : b + kBf16Block, full);
    for (int r = 0; r < R; ++r) y[r] = foldLanes(lanes[r]);
}

template <int R>
void mxfp4Rows(float* y, const float* x, const double* xd, const std::uint8_t* packed,
               std::size_t rowBytes, const std::uint8_t* scales, std::size_t rowScales, int n,
               const neon::MxTables& t) {
    constexpr int groupBytes = kMxfp4Group / 2;
    const int fullGroups = n / kMxfp4Group;
    neon::Lanes a[R];
    for (int r = 0; r < R; ++r) a[r] = neon::zeroLanes();
    for (int g = 0; g < fullGroups; ++g) {
#pragma GCC unroll 4
        for (int r = 0; r < R; ++r) {
            const std::uint8_t s = scales[r * rowScales + g];
            if (s == 255) continue; // NaN scale: the whole group is dropped
            float64x2_t d[16];
            neon::decodeGroup(d, packed + r * rowBytes + g * groupBytes, t);
            neon::addGroup(a[r], d, xd + g * kMxfp4Group, vdupq_n_f64(kE8m0Doubles[s]));
        }
    }
    for (int r = 0; r < R; ++r) {
        double lanes[kLanes];
        neon::storeLanes(a[r], lanes);
        // The partial last group, if any, element by element exactly as the scalar path.
        const int begin = fullGroups * kMxfp4Group;
        const std::uint8_t* sc = scales + r * rowScales;
        if (begin < n && sc[fullGroups] != 255)
            addMxfp4Group(lanes, x, packed + r * rowBytes, sc[fullGroups], begin, n);
        y[r] = foldLanes(lanes);
    }
}

} // namespace

float dotF32Neon(const float* x, const float* w, int n) {
    neon::Lanes a = neon::zeroLanes();
    const int end8 = n / kLanes * kLanes;
    neon::addF32(a, x, w, end8);
    double lanes[kLanes];
    neon::storeLanes(a, lanes);
    for (int i = end8; i < n; ++i) lanes[i % kLanes] += double(w[i]) * double(x[i]);
    return foldLanes(lanes);
}

void rowsBf16Neon(float* y, const float* x, const std::uint16_t* w, int n, int count) {
    int r = 0;
    for (; r + kBf16RowsNeon <= count; r += kBf16RowsNeon)
        bf16Rows<kBf16RowsNeon>(y + r, x, w + r * static_cast<std::size_t>(n), n);
    for (; r < count; ++r) bf16Rows<1>(y + r, x, w + r * static_cast<std::size_t>(n), n);
}

void widenXMxfp4Neon(double* xd, const float* x, int n) {
    neon::widenX(xd, x, n);
}

void rowsMxfp4Neon(float* y, const float* x, const double* xd, const std::uint8_t* packed,
                   std::size_t rowBytes, const std::uint8_t* scales, std::size_t rowScales, int n,
                   int count) {
    const neon::MxTables t = neon::mxTables();
    int r = 0;
    for (; r + kMxfp4RowsNeon <= count; r += kMxfp4RowsNeon)
        mxfp4Rows<kMxfp4RowsNeon>(y + r, x, xd, packed + r * rowBytes, rowBytes,
                                  scales + r * rowScales, rowScales, n, t);
    for (; r < count; ++r)
        mxfp4Rows<1>(y + r, x, xd, packed + r * rowBytes, rowBytes, scales + r * rowScales,
                     rowScales, n, t);
}

} // namespace k3::detail

#endif
