// Same bits everywhere: the AVX2 and scalar matvec paths agree bit for bit, the
// OpenMP thread count changes nothing, and both follow the reduction order documented
// in k3/kernels.hpp (re-implemented here independently).

#include "k3/kernels.hpp"

#include <QTest>

#include <omp.h>

#include <atomic>
#include <cmath>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <random>
#include <thread>
#include <vector>

using namespace k3;

namespace {

const int kRows[] = {1, 2, 3, 5, 8, 13, 31, 33, 64, 67};
const int kCols[] = {1, 3, 7, 8, 9, 15, 31, 32, 33, 63, 65, 100, 128, 257, 384, 1000, 1031};

// A random matrix in all three formats whose decoded values are identical.
struct Matrix {
    int rows = 0, cols = 0;
    std::vector<float> f32;           // arbitrary floats
    std::vector<std::uint16_t> bf16;  // arbitrary bf16
    std::vector<float> bf16Wide;      // bf16 widened
    std::vector<std::uint8_t> packed; // MXFP4
    std::vector<std::uint8_t> scales;
    std::vector<float> mxfp4Decoded; // MXFP4 decoded, 255-scale groups as 0
};

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
        m.bf16Wide.push_back(bf16ToFloat(m.bf16.back()));
    }
    const std::size_t rb = mxfp4RowBytes(cols), rs = mxfp4ScalesPerRow(cols);
    m.packed.resize(rows * rb);
    m.scales.resize(rows * rs);
    for (auto& b : m.packed) b = std::uint8_t(byte(rng));
    for (auto& s : m.scales) s = std::uint8_t(rare(rng) == 0 ? 255 : scale(rng));
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c)
            m.mxfp4Decoded.push_back(mxfp4Decode(&m.packed[r * rb], &m.scales[r * rs], c));
    return m;
}

std::vector<float> randomVector(int n, std::mt19937& rng) {
    std::normal_distribution<float> normal(0.0f, 1.0f);
    std::vector<float> x(n);
    for (auto& v : x) v = normal(rng);
    return x;
}

// The three matvecs of one matrix on the path in force, concatenated.
std::vector<float> runAll(const Matrix& m, const std::vector<float>& x) {
    std::vector<float> y(3 * m.rows);
    matvecF32(y.data(), x.data(), m.f32.data(), m.rows, m.cols);
    matvecBf16(y.data() + m.rows, x.data(), m.bf16.data(), m.rows, m.cols);
    matvecMxfp4(y.data() + 2 * m.rows, x.data(), m.packed.data(), m.scales.data(), m.rows, m.cols);
    return y;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// The documented order, written out independently of the engine: 8 double lanes by
// i % 8 (std::fma of two widened floats: the product is exact), a fixed fold, one
// rounding to float.
float foldDocumented(const double* l) {
    return float(((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7])));
}

float documentedDot(const float* x, const double* w, int n) {
    double lanes[8] = {};
    for (int i = 0; i < n; ++i) lanes[i % 8] = std::fma(double(x[i]), w[i], lanes[i % 8]);
    return foldDocumented(lanes);
}

float documentedDot(const float* x, const float* w, int n) {
    const std::vector<double> wd(w, w + n);
    return documentedDot(x, wd.data(), n);
}

// The documented BF16 order, written out independently: blocks of 128 elements, 16 float
// lanes by i % 16 each taking std::fma(w, x, lane) from +0, then per block double lane L
// += lane L, += lane L + 8; the same fold. w is the bf16 weights widened to float.
float documentedBf16Dot(const float* x, const float* w, int n) {
    double lanes[8] = {};
    for (int b = 0; b < n; b += 128) {
        float f[16] = {};
        for (int i = b; i < n && i < b + 128; ++i) f[i % 16] = std::fma(w[i], x[i], f[i % 16]);
        for (int l = 0; l < 8; ++l) lanes[l] = (lanes[l] + double(f[l])) + double(f[l + 8]);
    }
    return foldDocumented(lanes);
}

// E2M1 by nibble (bit 3 = sign), independent of the engine's table.
double e2m1(unsigned nib) {
    const double mag[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
    return (nib & 8) ? -mag[nib & 7] : mag[nib & 7];
}

// The documented MXFP4 order, written out independently: per 32-weight group and lane,
// the exact products e2m1 * x summed from +0 in increasing i, then that sum times
// 2^(s - 127) (exact) added to the lane; scale-255 groups skipped.
float documentedMxfp4Dot(const float* x, const std::uint8_t* packed, const std::uint8_t* scales,
                         int n) {
    double lanes[8] = {};
    for (int g = 0; g * 32 < n; ++g) {
        if (scales[g] == 255) continue;
        double part[8] = {};
        for (int c = g * 32; c < n && c < g * 32 + 32; ++c) {
            const unsigned nib = (packed[c / 2] >> (4 * (c % 2))) & 0xFu;
            part[c % 8] = std::fma(double(x[c]), e2m1(nib), part[c % 8]);
        }
        const double s = std::ldexp(1.0, scales[g] - 127);
        for (int l = 0; l < 8; ++l) lanes[l] = std::fma(part[l], s, lanes[l]);
    }
    return foldDocumented(lanes);
}

} // namespace

class TestKernelsDeterminism : public QObject {
    Q_OBJECT

private slots:
    void cleanup() {
        resetKernelPath();
        omp_set_num_threads(omp_get_num_procs());
    }

    void avx2MatchesScalarBitForBit() {
        if (!kernelPathAvailable(KernelPath::Avx2))
            QSKIP("this CPU has no AVX2+FMA (or the OS does not save YMM registers): only the "
                  "scalar path exists, there is nothing to compare it with");
        std::mt19937 rng(20240607);
        for (int rows : kRows)
            for (int cols : kCols) {
                const Matrix m = randomMatrix(rows, cols, rng);
                const auto x = randomVector(cols, rng);
                setKernelPath(KernelPath::Scalar);
                const auto scalar = runAll(m, x);
                setKernelPath(KernelPath::Avx2);
                const auto avx2 = runAll(m, x);
                QVERIFY2(sameBits(scalar, avx2),
                         qPrintable(QString("rows=%1 cols=%2").arg(rows).arg(cols)));
            }
        // Agreeing is not enough (both could be wrong alike): with weights 1 and x = 0, 1,
        // ..., 1030 every sum is exact in every format, so each path gives 530965 in each
        // row, through the partial blocks of 8, 16, 32 and 128 elements at the tail.
        const int rows = 5, cols = 1031;
        Matrix ones;
        ones.rows = rows;
        ones.cols = cols;
        ones.f32.assign(std::size_t(rows) * cols, 1.0f);
        ones.bf16.assign(std::size_t(rows) * cols, std::uint16_t(0x3F80));     // 1.0
        ones.packed.assign(rows * mxfp4RowBytes(cols), std::uint8_t(0x22));    // E2M1 1.0, 1.0
        ones.scales.assign(rows * mxfp4ScalesPerRow(cols), std::uint8_t(127)); // 2^0
        std::vector<float> x(cols);
        for (int c = 0; c < cols; ++c) x[c] = float(c);
        for (KernelPath p : {KernelPath::Scalar, KernelPath::Avx2}) {
            setKernelPath(p);
            QCOMPARE(runAll(ones, x), std::vector<float>(3 * rows, 530965.0f));
        }
    }

    void bothPathsFollowTheDocumentedOrder() {
        std::mt19937 rng(7);
        for (int cols : kCols) {
            const int rows = 3;
            const Matrix m = randomMatrix(rows, cols, rng);
            const auto x = randomVector(cols, rng);
            std::vector<float> want(3 * rows);
            for (int r = 0; r < rows; ++r) {
                want[r] = documentedDot(x.data(), &m.f32[r * cols], cols);
                want[rows + r] = documentedBf16Dot(x.data(), &m.bf16Wide[r * cols], cols);
                want[2 * rows + r] =
                    documentedMxfp4Dot(x.data(), &m.packed[r * mxfp4RowBytes(cols)],
                                       &m.scales[r * mxfp4ScalesPerRow(cols)], cols);
            }
            for (KernelPath p : {KernelPath::Scalar, KernelPath::Avx2}) {
                if (!kernelPathAvailable(p)) continue;
                setKernelPath(p);
                QVERIFY2(sameBits(runAll(m, x), want),
                         qPrintable(QString("%1 cols=%2").arg(kernelPathName(p)).arg(cols)));
            }
            // ... and the order is a good dot product, not just a repeatable one.
            for (int r = 0; r < rows; ++r) {
                double ref = 0;
                for (int c = 0; c < cols; ++c) ref += double(x[c]) * m.f32[r * cols + c];
                QVERIFY(std::fabs(want[r] - ref) <= 1e-5 * (1 + std::sqrt(double(cols))));
                // BF16's float blocks: each float lane sums at most 8 products per block,
                // so the error is at most about 8 float roundings of the magnitudes plus
                // the final one: 9 * 2^-24 * sum |w x| (10 for second-order terms).
                double refb = 0, magb = 0;
                for (int c = 0; c < cols; ++c) {
                    refb += double(x[c]) * m.bf16Wide[r * cols + c];
                    magb += std::fabs(double(x[c]) * m.bf16Wide[r * cols + c]);
                }
                QVERIFY2(std::fabs(want[rows + r] - refb) <= 10 * 0x1p-24 * magb,
                         qPrintable(QString("bf16 cols=%1 error %2 of sum |wx| %3")
                                        .arg(cols)
                                        .arg(std::fabs(want[rows + r] - refb))
                                        .arg(magb)));
                // MXFP4's per-group order is as good: within a few float ulps of the
                // exact dot product over the decoded weights.
                double refq = 0, mag = 0;
                for (int c = 0; c < cols; ++c) {
                    refq += double(x[c]) * m.mxfp4Decoded[r * cols + c];
                    mag += std::fabs(double(x[c]) * m.mxfp4Decoded[r * cols + c]);
                }
                QVERIFY(std::fabs(want[2 * rows + r] - refq) <= 2e-7 * mag + 1e-30);
            }
        }
    }

    void threadCountChangesNothing() {
        std::mt19937 rng(99);
        // Large enough that the row loop really forks (see forRows in Matvec.cpp).
        const Matrix m = randomMatrix(67, 1031, rng);
        const auto x = randomVector(1031, rng);
        for (KernelPath p : {KernelPath::Scalar, KernelPath::Avx2}) {
            if (!kernelPathAvailable(p)) continue;
            setKernelPath(p);
            omp_set_num_threads(1);
            const auto one = runAll(m, x);
            omp_set_num_threads(2);
            const auto two = runAll(m, x);
            omp_set_num_threads(4);
            const auto four = runAll(m, x);
            QVERIFY2(sameBits(one, two), kernelPathName(p));
            QVERIFY2(sameBits(one, four), kernelPathName(p));
        }
    }

    // The widened x lives in a reused per-thread buffer: callers on different threads
    // (each with its own x) must never see each other's copy. The two callers start each
    // round together so their matvecs overlap whenever both get a core.
    void concurrentCallersKeepTheirOwnX() {
        std::mt19937 rng(4242);
        const Matrix a = randomMatrix(96, 2048, rng), b = randomMatrix(96, 2048, rng);
        const auto xa = randomVector(2048, rng), xb = randomVector(2048, rng);
        omp_set_num_threads(1);
        const auto wantA = runAll(a, xa), wantB = runAll(b, xb);
        QVERIFY(!sameBits(wantA, wantB));
        constexpr int kRounds = 300;
        std::atomic<int> bad{0}, started[kRounds] = {};
        auto loop = [&](const Matrix& m, const std::vector<float>& x,
                        const std::vector<float>& want) {
            for (int i = 0; i < kRounds; ++i) {
                started[i].fetch_add(1);
                while (started[i].load() < 2) std::this_thread::yield();
                if (!sameBits(runAll(m, x), want)) bad.fetch_add(1);
            }
        };
        std::thread ta(loop, std::cref(a), std::cref(xa), std::cref(wantA));
        std::thread tb(loop, std::cref(b), std::cref(xb), std::cref(wantB));
        ta.join();
        tb.join();
        QCOMPARE(bad.load(), 0);
    }

    void edgeValuesKeepBitIdentity() {
        // Signed zero: every lane holds a tiny negative double (negative x times the
        // weight 0.5 * 2^-127 does not underflow in double), then meets the weight -0
        // (nibble 8); the sum is rounded once to float, where it becomes -0: the sign of
        // a sum too small for a float must survive the final conversion.
        const int cols = 64;
        std::vector<std::uint8_t> packed(mxfp4RowBytes(cols));
        for (std::size_t b = 0; b < packed.size(); ++b) packed[b] = b < 16 ? 0x11 : 0x88;
        const std::uint8_t zeroScales[2] = {0, 127}; // 2^-127 (subnormal), 1
        std::vector<float> xz(cols, 1.0f);
        for (int i = 0; i < 32; ++i) xz[i] = -1e-30f;
        for (KernelPath p : {KernelPath::Scalar, KernelPath::Avx2}) {
            if (!kernelPathAvailable(p)) continue;
            setKernelPath(p);
            float y = 1;
            matvecMxfp4(&y, xz.data(), packed.data(), zeroScales, 1, cols);
            QVERIFY2(y == 0.0f && std::signbit(y), kernelPathName(p));
        }

        // Extreme scales (subnormal 2^-127, 2^127 where 6 * 2^127 would overflow a float),
        // every non-NaN bf16 pattern class, and x with zeros of both signs, subnormals,
        // huge values and infinities (inf * 0 makes the default NaN on both paths).
        std::mt19937 rng(424242);
        std::uniform_int_distribution<int> byte(0, 255), pick(0, 9);
        std::uniform_int_distribution<std::uint32_t> bits16(0, 0xFFFF);
        const std::uint8_t edgeScales[] = {0, 1, 2, 100, 127, 150, 253, 254, 255};
        const float edgeX[] = {0.0f, -0.0f, 1e-40f, -1e-45f, 1e30f, -1e38f, INFINITY, 3.5f};
        for (int cols2 : {31, 64, 100, 256, 1031}) {
            const int rows = 7;
            std::vector<float> x(cols2);
            std::normal_distribution<float> normal(0.0f, 1.0f);
            for (auto& v : x) v = pick(rng) < 2 ? edgeX[byte(rng) % std::size(edgeX)] : normal(rng);
            std::vector<std::uint16_t> wb(std::size_t(rows) * cols2);
            std::vector<float> wbWide(wb.size());
            for (std::size_t i = 0; i < wb.size(); ++i) {
                std::uint16_t h;
                do h = std::uint16_t(bits16(rng));
                while ((h & 0x7F80) == 0x7F80 && (h & 0x7F) != 0); // no NaN payloads
                wb[i] = h;
                wbWide[i] = bf16ToFloat(h);
            }
            const std::size_t rb = mxfp4RowBytes(cols2), rs = mxfp4ScalesPerRow(cols2);
            std::vector<std::uint8_t> mp(rows * rb), ms(rows * rs);
            for (auto& b : mp) b = std::uint8_t(byte(rng));
            for (auto& sc : ms) sc = edgeScales[byte(rng) % std::size(edgeScales)];
            std::vector<float> want(2 * rows);
            for (int r = 0; r < rows; ++r) {
                want[r] = documentedBf16Dot(x.data(), &wbWide[std::size_t(r) * cols2], cols2);
                // The documented MXFP4 order: E2M1 * x exact in double, 2^(s - 127)
                // exact on each group's partial sums (6 * 2^127 stays finite there).
                want[rows + r] = documentedMxfp4Dot(x.data(), &mp[r * rb], &ms[r * rs], cols2);
            }
            for (KernelPath p : {KernelPath::Scalar, KernelPath::Avx2}) {
                if (!kernelPathAvailable(p)) continue;
                setKernelPath(p);
                std::vector<float> got(2 * rows);
                matvecBf16(got.data(), x.data(), wb.data(), rows, cols2);
                matvecMxfp4(got.data() + rows, x.data(), mp.data(), ms.data(), rows, cols2);
                QVERIFY2(sameBits(got, want),
                         qPrintable(QString("%1 cols=%2").arg(kernelPathName(p)).arg(cols2)));
            }
        }
    }

    void nanScaleZeroesOnlyItsGroup() {
        // 40 columns: one full group plus a partial group of 8.
        const int cols = 40;
        std::vector<std::uint8_t> packed(mxfp4RowBytes(cols), 0x22); // every weight 1.0
        std::vector<std::uint8_t> scales = {255, 127};               // group 0 is NaN
        std::vector<float> x(cols, 1.0f);
        x[3] = INFINITY; // inside the dropped group: must not poison the row
        for (KernelPath p : {KernelPath::Scalar, KernelPath::Avx2}) {
            if (!kernelPathAvailable(p)) continue;
            setKernelPath(p);
            float y = -1;
            matvecMxfp4(&y, x.data(), packed.data(), scales.data(), 1, cols);
            QCOMPARE(y, 8.0f); // only the 8 weights of the partial group count
        }
        for (int s = 0; s < 255; ++s)
            QCOMPARE(e8m0Scale(std::uint8_t(s)), std::ldexp(1.0f, s - 127));
        QCOMPARE(e8m0Scale(127), 1.0f);
        QCOMPARE(e8m0Scale(128), 2.0f);
        QCOMPARE(e8m0Scale(0), std::ldexp(1.0f, -127));
        QCOMPARE(e8m0Scale(255), 0.0f);
        // Odd row length: the last byte's high nibble is padding, never read as a weight.
        const std::uint8_t odd[2] = {0x71, 0xF3}; // elements 0.5, 6.0, 1.5, (pad -6)
        const std::uint8_t one = 127;
        const float xo[3] = {1.0f, 1.0f, 1.0f};
        float yo = 0;
        matvecMxfp4(&yo, xo, odd, &one, 1, 3);
        QCOMPARE(yo, 8.0f);
    }

    void l2normIsASumOfSquares() {
        float v[2] = {3.0f, 4.0f};
        l2norm(v, 2, 0.0f);
        QCOMPARE(v[0], 0.6f); // a mean of squares would give 0.8485
        QCOMPARE(v[1], 0.8f);
        float z[3] = {0.0f, 0.0f, 0.0f};
        l2norm(z, 3); // eps 1e-6 keeps a zero vector finite
        QCOMPARE(z[0], 0.0f);
        float r[2] = {3.0f, 4.0f};
        rmsnorm(r, r, nullptr, 2, 0.0f); // in place, mean of squares 12.5
        QVERIFY(std::fabs(r[0] - 3.0f / std::sqrt(12.5f)) < 1e-6f);
        QCOMPARE(sigmoid(-1000.0f), 0.0f);
        QCOMPARE(sigmoid(1000.0f), 1.0f);
    }

    void forcedScalarByEnvironment() {
        qputenv("K3_FORCE_SCALAR", "1");
        resetKernelPath();
        QCOMPARE(kernelPath(), KernelPath::Scalar);
        qputenv("K3_FORCE_SCALAR", "0");
        const KernelPath widest = kernelPathAvailable(KernelPath::Avx512) ? KernelPath::Avx512
                                  : kernelPathAvailable(KernelPath::Avx2) ? KernelPath::Avx2
                                                                          : KernelPath::Scalar;
        QCOMPARE(kernelPath(), widest);
        // K3_FORCE_AVX2 turns the AVX-512 kernel off and nothing else.
        qputenv("K3_FORCE_AVX2", "1");
        QCOMPARE(kernelPath(), widest == KernelPath::Avx512 ? KernelPath::Avx2 : widest);
        qunsetenv("K3_FORCE_AVX2");
        qunsetenv("K3_FORCE_SCALAR");
    }

    void badArgumentsThrow() {
        float y = 0, x = 0, w = 0;
        QVERIFY_THROWS_EXCEPTION(KernelError, matvecF32(&y, &x, &w, -1, 1));
        QVERIFY_THROWS_EXCEPTION(KernelError, matvecF32(&y, nullptr, &w, 1, 1));
        const WeightView v = WeightView::f32(&w, 1, 1);
        QVERIFY_THROWS_EXCEPTION(KernelError, v.rowSlice(0, 2));
    }
};

QTEST_GUILESS_MAIN(TestKernelsDeterminism)
#include "tst_kernels_determinism.moc"
