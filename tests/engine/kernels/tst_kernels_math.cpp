// The engine's transcendentals give the same bits on every machine: a hash over
// 400k inputs is pinned (libm's float exp/tanh differ between glibc 2.36 and 2.41,
// ours may not), they are the correctly rounded floats, and the edge cases hold.
// Inputs are built from bit patterns, so the test itself calls no libm to make them.

#include "k3/kernels.hpp"
#include "kernels/MathFunctions.hpp"

#include <QTest>

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

using namespace k3;

namespace {

// |x| from 2^-25 to about 2^8, both signs: every binade the kernels see, densely.
std::vector<float> sampleInputs() {
    std::vector<float> xs;
    const std::uint32_t lo = 0x33000000u, hi = 0x43800000u; // 2^-25 .. 256
    const std::uint32_t step = (hi - lo) / 200000u;
    for (std::uint32_t b = lo; b < hi; b += step) {
        xs.push_back(std::bit_cast<float>(b));
        xs.push_back(-std::bit_cast<float>(b));
    }
    return xs;
}

struct Fnv {
    std::uint64_t h = 1469598103934665603ull;
    void add(float v) {
        const std::uint32_t b = std::bit_cast<std::uint32_t>(v);
        for (int i = 0; i < 4; ++i) {
            h ^= (b >> (8 * i)) & 0xffu;
            h *= 1099511628211ull;
        }
    }
};

// tanh through the public kernel: gate huge and beta 1 make the gate factor exactly 1,
// so the output is linearBeta * tanh(u / linearBeta) with linearBeta 1.
std::vector<float> situTanh(const std::vector<float>& xs) {
    const std::vector<float> gate(xs.size(), 1e30f);
    std::vector<float> y(xs.size());
    situGlu(y.data(), gate.data(), xs.data(), int(xs.size()), 1.0f, 1.0f);
    return y;
}

} // namespace

class TestKernelsMath : public QObject {
    Q_OBJECT

private slots:
    void pinnedBits() {
        const std::vector<float> xs = sampleInputs();
        QVERIFY(xs.size() >= 400000);
        Fnv header, engine;
        for (float x : xs) {
            header.add(math::expF(x));
            header.add(math::tanhF(x));
            engine.add(sigmoid(x)); // compiled into the engine, not this test
        }
        for (float v : situTanh(xs)) engine.add(v);
        // Same values on Debian 12 (glibc 2.36, g++ 12) and Debian 13 (glibc 2.41, g++ 14).
        QCOMPARE(QString::number(header.h, 16), QStringLiteral("12d0f98490264552"));
        QCOMPARE(QString::number(engine.h, 16), QStringLiteral("168344d4f044753a"));
    }

    void correctlyRounded() {
        // Against long double libm rounded to float: a miss means our double evaluation
        // lost more than the float rounding hides.
        const std::vector<float> xs = sampleInputs();
        const std::vector<float> viaKernel = situTanh(xs);
        int expMiss = 0, tanhMiss = 0, kernelMiss = 0;
        for (std::size_t i = 0; i < xs.size(); ++i) {
            const long double x = xs[i];
            const float e = static_cast<float>(expl(x)), t = static_cast<float>(tanhl(x));
            expMiss += math::expF(xs[i]) != e;
            tanhMiss += math::tanhF(xs[i]) != t;
            kernelMiss += viaKernel[i] != t;
        }
        QCOMPARE(expMiss, 0);
        QCOMPARE(tanhMiss, 0);
        QCOMPARE(kernelMiss, 0);
    }

    void edgeCases() {
        const float inf = std::numeric_limits<float>::infinity();
        QCOMPARE(math::expF(0.0f), 1.0f);
        QCOMPARE(math::expF(1.0f), 2.71828182845904523536f);
        QCOMPARE(math::expF(-inf), 0.0f);
        QCOMPARE(math::expF(inf), inf);
        QVERIFY(std::isnan(math::expF(std::numeric_limits<float>::quiet_NaN())));
        QVERIFY(std::isfinite(math::expF(88.72f))); // FLT_MAX is e^88.7228
        QCOMPARE(math::expF(88.73f), inf);
        QCOMPARE(math::expF(-87.0f), 1.6458115e-38f);                     // smallest normals
        QCOMPARE(math::expF(-103.0f), std::bit_cast<float>(0x00000001u)); // min subnormal
        QCOMPARE(math::expF(-104.0f), 0.0f);
        QCOMPARE(math::tanhF(0.0f), 0.0f);
        QVERIFY(std::signbit(math::tanhF(-0.0f)));
        QCOMPARE(math::tanhF(1e-30f), 1e-30f); // no cancellation near 0
        QCOMPARE(math::tanhF(-1e-8f), -1e-8f);
        QCOMPARE(math::tanhF(inf), 1.0f);
        QCOMPARE(math::tanhF(-inf), -1.0f);
        QCOMPARE(math::tanhF(9.0f), 1.0f);
        QCOMPARE(math::tanhF(0.5f), 0.46211715726000974f);
        QVERIFY(std::isnan(math::tanhF(std::numeric_limits<float>::quiet_NaN())));
        QCOMPARE(math::expD(-1000.0), 0.0);
        QCOMPARE(math::expD(-745.0), 4.9406564584124654e-324); // subnormal double
        QCOMPARE(math::expD(710.0), HUGE_VAL);
        QCOMPARE(sigmoid(0.0f), 0.5f);
        QCOMPARE(sigmoid(-1000.0f), 0.0f);
        QCOMPARE(sigmoid(1000.0f), 1.0f);
    }
};

QTEST_GUILESS_MAIN(TestKernelsMath)
#include "tst_kernels_math.moc"
