// The AVX2 MXFP4 multi-column kernel places the group scale in one of two ways (issue 36):
// on the decoded weights (tiles of many columns) or on each column's partial sums (tiles
// of few columns, kMxfp4ScalePartsBelow). Both must give every column the bits matvec and
// the scalar path give it, whichever the tile size: here each placement is forced over
// every column count and tile end, odd shapes, extreme and NaN scale bytes, non-finite x,
// and 1 and 2 threads.

#include "k3/kernels.hpp"
#include "kernels/MatvecRows.hpp"

#include <QTest>

#include <omp.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

using namespace k3;

namespace {

struct Mxfp4Matrix {
    int rows = 0, cols = 0;
    std::vector<std::uint8_t> packed, scales;
    WeightView view() const { return WeightView::mxfp4(packed.data(), scales.data(), rows, cols); }
};

// Scale bytes across the whole E8M0 range (0: 2^-127, 254: 2^127) and about one in
// twenty 255 (the group is dropped).
Mxfp4Matrix randomMatrix(int rows, int cols, std::mt19937& rng) {
    Mxfp4Matrix m{rows, cols, {}, {}};
    std::uniform_int_distribution<int> byte(0, 255), scale(100, 140), rare(0, 19);
    const std::uint8_t edge[] = {0, 1, 254, 255};
    m.packed.resize(rows * mxfp4RowBytes(cols));
    m.scales.resize(rows * mxfp4ScalesPerRow(cols));
    for (auto& b : m.packed) b = std::uint8_t(byte(rng));
    for (auto& s : m.scales) {
        const int r = rare(rng);
        s = r < 2 ? edge[byte(rng) % 4] : std::uint8_t(scale(rng));
    }
    return m;
}

// Mostly N(0, 1), with zeros of both signs, subnormals, huge values and infinities.
std::vector<float> randomColumns(int n, int columns, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> pick(0, 49);
    const float edge[] = {0.0f, -0.0f, 1e-40f, -1e-45f, 3e38f, -INFINITY};
    std::vector<float> x(std::size_t(n) * columns);
    for (auto& v : x) {
        const int p = pick(rng);
        v = p < int(std::size(edge)) ? edge[p] : normal(rng);
    }
    return x;
}

std::vector<float> perColumn(const WeightView& w, const std::vector<float>& x, int columns) {
    std::vector<float> y(std::size_t(w.rows) * columns, -7.0f);
    for (int t = 0; t < columns; ++t)
        matvec(y.data() + std::size_t(t) * w.rows, x.data() + std::size_t(t) * w.cols, w);
    return y;
}

std::vector<float> together(const WeightView& w, const std::vector<float>& x, int columns) {
    std::vector<float> y(std::size_t(w.rows) * columns, -7.0f);
    matmat(y.data(), x.data(), w, columns);
    return y;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

} // namespace

class TestKernelsMxfp4Tiles : public QObject {
    Q_OBJECT

private slots:
    void cleanup() {
        resetKernelPath();
        omp_set_num_threads(2);
#if defined(K3_HAVE_AVX2_PATH)
        detail::gMxfp4ScalePartsBelow = detail::kMxfp4ScalePartsBelow;
#endif
    }

    void bothScalePlacementsKeepColumnBits() {
#if defined(K3_HAVE_AVX2_PATH)
        if (!kernelPathAvailable(KernelPath::Avx2)) QSKIP("this CPU has no AVX2+FMA");
        std::mt19937 rng(3636);
        // Rows: one, within a row block, across blocks and row pairs; cols: partial groups.
        const int shapes[][2] = {{1, 64}, {3, 33}, {13, 96}, {25, 257}, { 67, 1031 }};
        // Column counts across the threshold, the 32-column tiles and 64-column passes.
        const int columnCounts[] = {2, 3, 5, 7, 8, 9, 31, 32, 33, 39, 64, 65, 71, 100};
        const int placements[] = {0, 1 << 30, detail::kMxfp4ScalePartsBelow};
        int compared = 0;
        for (const auto& s : shapes) {
            const Mxfp4Matrix m = randomMatrix(s[0], s[1], rng);
            const auto x = randomColumns(s[1], 100, rng);
            setKernelPath(KernelPath::Scalar);
            std::vector<std::vector<float>> scalar;
            for (int columns : columnCounts) scalar.push_back(perColumn(m.view(), x, columns));
            setKernelPath(KernelPath::Avx2);
            for (int threads : {1, 2}) {
                omp_set_num_threads(threads);
                for (int below : placements) {
                    detail::gMxfp4ScalePartsBelow = below;
                    for (std::size_t i = 0; i < std::size(columnCounts); ++i) {
                        const int columns = columnCounts[i];
                        const auto got = together(m.view(), x, columns);
                        QVERIFY2(sameBits(got, perColumn(m.view(), x, columns)),
                                 qPrintable(QString("%1x%2, %3 columns, scale parts below %4, %5 "
                                                    "threads: not the matvec bits")
                                                .arg(s[0])
                                                .arg(s[1])
                                                .arg(columns)
                                                .arg(below)
                                                .arg(threads)));
                        QVERIFY2(sameBits(got, scalar[i]),
                                 qPrintable(QString("%1x%2, %3 columns, scale parts below %4: not "
                                                    "the scalar bits")
                                                .arg(s[0])
                                                .arg(s[1])
                                                .arg(columns)
                                                .arg(below)));
                        ++compared;
                    }
                }
            }
        }
        QCOMPARE(compared,
                 int(std::size(shapes) * 2 * std::size(placements) * std::size(columnCounts)));
#else
        QSKIP("no AVX2 path on this architecture");
#endif
    }
};

QTEST_GUILESS_MAIN(TestKernelsMxfp4Tiles)
#include "tst_kernels_mxfp4_tiles.moc"
