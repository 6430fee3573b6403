// matmat (several columns against one weight matrix) gives every column exactly the bits
// matvec gives it: on both paths, at every column count (register tiles, the 32-column
// tiles of a row block and the 64-column passes over the weights all end somewhere), at
// every thread count, and through the edges of the reduction order (partial MXFP4 groups,
// BF16 partial blocks and tails, scale byte 255, non-finite x).

#include "k3/kernels.hpp"

#include <QTest>

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <thread>
#include <vector>

using namespace k3;

namespace {

const int kColumnCounts[] = {1, 2, 3, 5, 7, 8, 16, 33, 64, 70};
// Rows: 1, fewer than a row block (12), not a multiple of it, of the register tiles (2, 3)
// or of both. Cols: below and across 8, 16, 32 (MXFP4 group), 128 (BF16 block), odd.
const int kRows[] = {1, 5, 13, 26};
const int kCols[] = {1, 7, 16, 31, 33, 100, 128, 129, 257, 300};

struct Matrix {
    int rows = 0, cols = 0;
    std::vector<float> f32;
    std::vector<std::uint16_t> bf16;
    std::vector<std::uint8_t> packed, scales;

    WeightView view(WeightType t) const {
        switch (t) {
        case WeightType::F32:
            return WeightView::f32(f32.data(), rows, cols);
        case WeightType::BF16:
            return WeightView::bf16(bf16.data(), rows, cols);
        case WeightType::MXFP4:
            break;
        }
        return WeightView::mxfp4(packed.data(), scales.data(), rows, cols);
    }
};

// About one MXFP4 group in twenty has the NaN scale 255.
Matrix randomMatrix(int rows, int cols, std::mt19937& rng) {
    Matrix m;
    m.rows = rows;
    m.cols = cols;
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::uniform_int_distribution<int> byte(0, 255), scale(110, 135), rare(0, 19);
    const std::size_t n = std::size_t(rows) * cols;
    for (std::size_t i = 0; i < n; ++i) m.f32.push_back(normal(rng));
    for (std::size_t i = 0; i < n; ++i) {
        const float f = normal(rng);
        std::uint32_t u;
        std::memcpy(&u, &f, 4);
        m.bf16.push_back(std::uint16_t(u >> 16));
    }
    m.packed.resize(rows * mxfp4RowBytes(cols));
    m.scales.resize(rows * mxfp4ScalesPerRow(cols));
    for (auto& b : m.packed) b = std::uint8_t(byte(rng));
    for (auto& s : m.scales) s = std::uint8_t(rare(rng) == 0 ? 255 : scale(rng));
    return m;
}

std::vector<float> randomColumns(int n, int columns, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(std::size_t(n) * columns);
    for (auto& v : x) v = normal(rng);
    return x;
}

std::vector<float> runMatmat(const WeightView& w, const std::vector<float>& x, int columns) {
    std::vector<float> y(std::size_t(w.rows) * columns, -7.0f);
    matmat(y.data(), x.data(), w, columns);
    return y;
}

std::vector<float> runPerColumn(const WeightView& w, const std::vector<float>& x, int columns) {
    std::vector<float> y(std::size_t(w.rows) * columns, -7.0f);
    for (int t = 0; t < columns; ++t)
        matvec(y.data() + std::size_t(t) * w.rows, x.data() + std::size_t(t) * w.cols, w);
    return y;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

const char* typeName(WeightType t) {
    return t == WeightType::F32 ? "f32" : t == WeightType::BF16 ? "bf16" : "mxfp4";
}

QString where(KernelPath p, WeightType t, int rows, int cols, int columns) {
    return QString("%1 %2 rows=%3 cols=%4 columns=%5")
        .arg(kernelPathName(p))
        .arg(typeName(t))
        .arg(rows)
        .arg(cols)
        .arg(columns);
}

const WeightType kTypes[] = {WeightType::F32, WeightType::BF16, WeightType::MXFP4};
const KernelPath kPaths[] = {KernelPath::Scalar, KernelPath::Avx2, KernelPath::Avx512};

// `path` against the scalar path, bit for bit, over every type and odd shape.
void matchesScalarBitForBit(KernelPath path) {
    std::mt19937 rng(4711);
    int compared = 0;
    for (int rows : {1, 13, 40})
        for (int cols : {31, 129, 300, 1031}) {
            const Matrix m = randomMatrix(rows, cols, rng);
            const auto x = randomColumns(cols, 33, rng);
            for (WeightType t : kTypes)
                for (int columns : {2, 8, 33}) {
                    setKernelPath(KernelPath::Scalar);
                    const auto scalar = runMatmat(m.view(t), x, columns);
                    setKernelPath(path);
                    QVERIFY2(sameBits(scalar, runMatmat(m.view(t), x, columns)),
                             qPrintable(where(path, t, rows, cols, columns)));
                    ++compared;
                }
        }
    QCOMPARE(compared, 3 * 4 * 3 * 3);
}

} // namespace

class TestKernelsMatmat : public QObject {
    Q_OBJECT

private slots:
    void cleanup() {
        resetKernelPath();
        omp_set_num_threads(omp_get_num_procs());
    }

    // Hand-computable products: every weight 1 (F32, BF16 0x3F80, MXFP4 nibble 2 at scale
    // 127) and column t of x all (t + 1), so y[t][r] = cols * (t + 1) exactly.
    void knownValues() {
        const int rows = 13, cols = 100, columns = 5;
        std::vector<float> f32(rows * cols, 1.0f);
        std::vector<std::uint16_t> bf16(rows * cols, 0x3F80);
        std::vector<std::uint8_t> packed(rows * mxfp4RowBytes(cols), 0x22);
        std::vector<std::uint8_t> scales(rows * mxfp4ScalesPerRow(cols), 127);
        std::vector<float> x(cols * columns);
        for (int t = 0; t < columns; ++t)
            for (int i = 0; i < cols; ++i) x[t * cols + i] = float(t + 1);
        const WeightView views[] = {WeightView::f32(f32.data(), rows, cols),
                                    WeightView::bf16(bf16.data(), rows, cols),
                                    WeightView::mxfp4(packed.data(), scales.data(), rows, cols)};
        for (KernelPath p : kPaths) {
            if (!kernelPathAvailable(p)) continue;
            setKernelPath(p);
            for (const WeightView& w : views) {
                const auto y = runMatmat(w, x, columns);
                for (int t = 0; t < columns; ++t)
                    for (int r = 0; r < rows; ++r) QCOMPARE(y[t * rows + r], float(cols * (t + 1)));
            }
        }
    }

    void matchesMatvecPerColumn() {
        std::mt19937 rng(31337);
        int compared = 0;
        for (int rows : kRows)
            for (int cols : kCols) {
                const Matrix m = randomMatrix(rows, cols, rng);
                const auto x = randomColumns(cols, 70, rng);
                for (KernelPath p : kPaths) {
                    if (!kernelPathAvailable(p)) continue;
                    setKernelPath(p);
                    for (WeightType t : kTypes) {
                        const WeightView w = m.view(t);
                        for (int columns : kColumnCounts) {
                            const auto want = runPerColumn(w, x, columns);
                            QVERIFY2(sameBits(runMatmat(w, x, columns), want),
                                     qPrintable(where(p, t, rows, cols, columns)));
                            ++compared;
                        }
                    }
                }
            }
        const int paths = int(std::count_if(std::begin(kPaths), std::end(kPaths),
                                            [](KernelPath p) { return kernelPathAvailable(p); }));
        QCOMPARE(compared,
                 paths * 3 * int(std::size(kRows) * std::size(kCols) * std::size(kColumnCounts)));
    }

    void avx2MatchesScalarBitForBit() {
        if (!kernelPathAvailable(KernelPath::Avx2))
            QSKIP("this CPU has no AVX2+FMA (or the OS does not save YMM registers): only the "
                  "scalar path exists, there is nothing to compare it with");
        matchesScalarBitForBit(KernelPath::Avx2);
    }

    // Its own function, so a host without AVX-512 says so (ctest label host:avx512).
    void avx512MatchesScalarBitForBit() {
        if (!kernelPathAvailable(KernelPath::Avx512))
            QSKIP("this CPU has no AVX-512F (or the OS does not save ZMM registers): the "
                  "AVX-512 kernel cannot run here");
        matchesScalarBitForBit(KernelPath::Avx512);
    }

    void threadCountChangesNothing() {
        std::mt19937 rng(99);
        // Large enough that the row blocks really fork (67 rows: 5 blocks of 12 and 7).
        const Matrix m = randomMatrix(67, 1031, rng);
        const auto x = randomColumns(1031, 16, rng);
        for (KernelPath p : kPaths) {
            if (!kernelPathAvailable(p)) continue;
            setKernelPath(p);
            for (WeightType t : kTypes) {
                omp_set_num_threads(1);
                const auto one = runMatmat(m.view(t), x, 16);
                omp_set_num_threads(2);
                const auto two = runMatmat(m.view(t), x, 16);
                QVERIFY2(sameBits(one, two), qPrintable(where(p, t, 67, 1031, 16)));
                QVERIFY2(sameBits(one, runPerColumn(m.view(t), x, 16)),
                         qPrintable(where(p, t, 67, 1031, 16)));
            }
        }
    }

    // Infinities, NaN, huge and subnormal x, zeros of both signs; MXFP4 scale bytes at the
    // extremes (2^-127, 2^127) and 255 groups, some with an infinite x inside.
    void edgeValuesKeepColumnBits() {
        std::mt19937 rng(424242);
        std::uniform_int_distribution<int> byte(0, 255), pick(0, 9);
        std::uniform_int_distribution<std::uint32_t> bits16(0, 0xFFFF);
        const std::uint8_t edgeScales[] = {0, 1, 2, 100, 127, 150, 253, 254, 255};
        const float edgeX[] = {0.0f, -0.0f, 1e-40f, -1e-45f, 1e30f, -1e38f, INFINITY, -INFINITY};
        const int rows = 14, columns = 9;
        for (int cols : {31, 64, 100, 256, 1031}) {
            std::vector<float> x(std::size_t(cols) * columns);
            std::normal_distribution<float> normal(0.0f, 1.0f);
            for (auto& v : x) v = pick(rng) < 2 ? edgeX[byte(rng) % std::size(edgeX)] : normal(rng);
            // Column 3 holds a NaN among ordinary values (its only non-finite input).
            for (int i = 0; i < cols; ++i) x[3 * cols + i] = normal(rng);
            x[3 * cols + cols / 2] = std::numeric_limits<float>::quiet_NaN();
            Matrix m = randomMatrix(rows, cols, rng);
            for (std::size_t i = 0; i < m.bf16.size(); ++i) {
                std::uint16_t h;
                do h = std::uint16_t(bits16(rng));
                while ((h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0); // no NaN payloads
                m.bf16[i] = h;
            }
            for (auto& s : m.scales) s = edgeScales[byte(rng) % std::size(edgeScales)];
            for (KernelPath p : kPaths) {
                if (!kernelPathAvailable(p)) continue;
                setKernelPath(p);
                for (WeightType t : kTypes) {
                    const auto got = runMatmat(m.view(t), x, columns);
                    QVERIFY2(sameBits(got, runPerColumn(m.view(t), x, columns)),
                             qPrintable(where(p, t, rows, cols, columns)));
                    // Column 3's NaN reaches every row whose group of it is not dropped.
                    for (int r = 0; r < rows; ++r) {
                        const int g = (cols / 2) / kMxfp4Group;
                        const bool dropped = t == WeightType::MXFP4 &&
                                             m.scales[r * mxfp4ScalesPerRow(cols) + g] == 255;
                        QCOMPARE(std::isnan(got[3 * rows + r]), !dropped);
                    }
                }
            }
        }
    }

    void nanScaleDropsOnlyItsGroup() {
        // 40 columns: one full group plus a partial group of 8; group 0 of row 0 is NaN and
        // holds an infinite x in every column, row 1 has both groups.
        const int cols = 40, rows = 2, columns = 3;
        std::vector<std::uint8_t> packed(rows * mxfp4RowBytes(cols), 0x22); // weights 1.0
        std::vector<std::uint8_t> scales = {255, 127, 128, 127}; // row 1: group 0 times 2
        std::vector<float> x(cols * columns);
        for (int t = 0; t < columns; ++t)
            for (int i = 0; i < cols; ++i) x[t * cols + i] = i == 3 ? INFINITY : float(t + 1);
        for (KernelPath p : kPaths) {
            if (!kernelPathAvailable(p)) continue;
            setKernelPath(p);
            const auto y =
                runMatmat(WeightView::mxfp4(packed.data(), scales.data(), rows, cols), x, columns);
            for (int t = 0; t < columns; ++t) {
                QCOMPARE(y[t * rows], 8.0f * float(t + 1)); // only the partial group counts
                QCOMPARE(y[t * rows + 1], INFINITY);
            }
        }
    }

    // The x copies live in a reused per-thread buffer: callers on different threads (each
    // with its own x) must never see each other's copy.
    void concurrentCallersKeepTheirOwnX() {
        std::mt19937 rng(4242);
        const Matrix a = randomMatrix(48, 1000, rng), b = randomMatrix(48, 1000, rng);
        const auto xa = randomColumns(1000, 8, rng), xb = randomColumns(1000, 8, rng);
        omp_set_num_threads(1);
        for (WeightType t : kTypes) {
            const auto wantA = runPerColumn(a.view(t), xa, 8),
                       wantB = runPerColumn(b.view(t), xb, 8);
            QVERIFY(!sameBits(wantA, wantB));
            constexpr int kRounds = 100;
            std::atomic<int> bad{0}, started[kRounds] = {};
            auto loop = [&](const Matrix& m, const std::vector<float>& x,
                            const std::vector<float>& want) {
                for (int i = 0; i < kRounds; ++i) {
                    started[i].fetch_add(1);
                    while (started[i].load() < 2) std::this_thread::yield();
                    if (!sameBits(runMatmat(m.view(t), x, 8), want)) bad.fetch_add(1);
                }
            };
            std::thread ta(loop, std::cref(a), std::cref(xa), std::cref(wantA));
            std::thread tb(loop, std::cref(b), std::cref(xb), std::cref(wantB));
            ta.join();
            tb.join();
            QCOMPARE(bad.load(), 0);
        }
    }

    void zeroSizesAndBadArguments() {
        float y[4] = {1, 2, 3, 4}, x[4] = {1, 1, 1, 1}, w[2] = {1, 1};
        const WeightView v = WeightView::f32(w, 1, 2);
        QVERIFY_THROWS_EXCEPTION(KernelError, matmat(y, x, v, -1));
        QVERIFY_THROWS_EXCEPTION(KernelError, matmat(y, nullptr, v, 2));
        QVERIFY_THROWS_EXCEPTION(KernelError, matmat(nullptr, x, v, 2));
        const WeightView noScales =
            WeightView::mxfp4(reinterpret_cast<const std::uint8_t*>(w), nullptr, 1, 2);
        QVERIFY_THROWS_EXCEPTION(KernelError, matmat(y, x, noScales, 2));
        matmat(y, x, v, 0); // nothing to do, nothing written
        QCOMPARE(y[0], 1.0f);
        matmat(y, x, v, 2);
        QCOMPARE(y[0], 2.0f);
        QCOMPARE(y[1], 2.0f);
        QCOMPARE(y[2], 3.0f);
        // No columns of w: every product is the empty sum +0.
        float z[3] = {5, 5, 5};
        matmat(z, x, WeightView::f32(w, 1, 0), 3);
        QVERIFY(z[0] == 0.0f && !std::signbit(z[0]) && z[2] == 0.0f);
    }
};

QTEST_GUILESS_MAIN(TestKernelsMatmat)
#include "tst_kernels_matmat.moc"
