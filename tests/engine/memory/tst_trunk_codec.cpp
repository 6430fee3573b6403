// The trunk block codec: every block decodes to its original bytes (memcmp) on the scalar
// and the AVX2 path, the stored size is what the format says, and a damaged block is
// refused before a byte is written.
#include <QTest>

#include "memory/TrunkCodec.hpp"

#include <k3/system.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

using namespace k3::codec;

namespace {

std::vector<std::byte> gaussianBf16(std::size_t bytes, std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    std::normal_distribution<float> nd(0.0f, 0.02f);
    std::vector<std::byte> out(bytes);
    for (std::size_t i = 0; i + 1 < bytes; i += 2) {
        const std::uint32_t f = std::bit_cast<std::uint32_t>(nd(rng));
        const auto h = std::uint16_t((f + 0x7fff + ((f >> 16) & 1)) >> 16); // round to nearest even
        out[i] = std::byte(h & 0xff);
        out[i + 1] = std::byte(h >> 8);
    }
    if (bytes % 2) out[bytes - 1] = std::byte{0x5a};
    return out;
}

std::vector<std::byte> encode(const std::vector<std::byte>& raw, EncodeChoice c = {}) {
    std::vector<std::byte> out;
    const std::size_t n = encodeBlock(raw.data(), raw.size(), out, c);
    if (n != out.size()) qFatal("encodeBlock returned %zu for %zu bytes", n, out.size());
    return out;
}

// Decodes on every available path and compares with the original.
void roundTrip(const std::vector<std::byte>& raw, EncodeChoice c = {}) {
    const auto stored = encode(raw, c);
    for (DecodePath p : {DecodePath::Scalar, DecodePath::Avx2}) {
        if (p == DecodePath::Avx2 && !avx2DecodeAvailable()) continue;
        std::vector<std::byte> back(raw.size() + 1, std::byte{0xee});
        decodeBlock(stored.data(), stored.size(), back.data(), raw.size(), p);
        // memcmp must not see the null data() of an empty block (UBSan).
        QVERIFY2(raw.empty() || std::memcmp(back.data(), raw.data(), raw.size()) == 0,
                 qPrintable(QStringLiteral("%1 bytes, k %2, path %3")
                                .arg(raw.size())
                                .arg(blockBits(stored.data()))
                                .arg(int(p))));
        QCOMPARE(back[raw.size()], std::byte{0xee}); // nothing written past the block
    }
}

} // namespace

class TestTrunkCodec : public QObject {
    Q_OBJECT
private slots:
    void gaussianBlockCodesInThreeBits();
    void roundTripsEverySizeAndK();
    void adversarialBlocks();
    void incompressibleBlockIsStoredRaw();
    void damagedBlocksAreRefused();
    void vectorKernelPathsDecodeWithAvx2();
};

void TestTrunkCodec::gaussianBlockCodesInThreeBits() {
    const auto raw = gaussianBf16(kMaxBlockBytes, 1);
    const auto stored = encode(raw);
    // N(0, 0.02): the 8 most frequent high bytes (4 exponent pairs x 2 signs) cover ~99%.
    QCOMPARE(blockBits(stored.data()), 3);
    const double ratio = double(stored.size()) / double(raw.size());
    QVERIFY2(ratio > 0.69 && ratio < 0.72, qPrintable(QString::number(ratio)));
    roundTrip(raw);
}

void TestTrunkCodec::roundTripsEverySizeAndK() {
    // Sizes around the 32-element group and the 16/32-byte SIMD widths, odd sizes, empty.
    for (std::size_t n : {0, 1, 2, 3, 31, 62, 63, 64, 65, 66, 127, 128, 130, 1000, 4095, 4096,
                          65534, 65535, 65536}) {
        const auto raw = gaussianBf16(n, n + 7);
        roundTrip(raw);
        for (int k = 1; k <= 4; ++k) roundTrip(raw, {k, false});
        roundTrip(raw, {0, true});
    }
}

void TestTrunkCodec::adversarialBlocks() {
    // All equal: one table entry, no escapes.
    std::vector<std::byte> same(kMaxBlockBytes, std::byte{0x3c});
    const auto s = encode(same);
    QCOMPARE(blockBits(s.data()), 1);
    QCOMPARE(s.size(), std::size_t(16 + 16 + 4 + 1024 * 4 + 32768));
    roundTrip(same);
    // All 256 high-byte values equally often: every k escapes most elements.
    std::vector<std::byte> distinct(kMaxBlockBytes);
    for (std::size_t i = 0; i < distinct.size(); ++i)
        distinct[i] = std::byte(i % 2 ? (i / 2) % 256 : (i * 37) % 251);
    QCOMPARE(blockBits(encode(distinct).data()), 16); // raw
    for (int k = 1; k <= 4; ++k) roundTrip(distinct, {k, false});
    // Escapes at the first and last coded element, and in every position of a group.
    auto raw = gaussianBf16(4096 + 6, 3);
    raw[1] = std::byte{0x7f};
    raw[2 * 127 + 1] = std::byte{0x01};
    for (std::size_t e = 0; e < 32; ++e) raw[2 * (32 + e * 33 % 32) + 1] = std::byte(0xf0 + e % 8);
    for (int k = 1; k <= 4; ++k) roundTrip(raw, {k, false});
    roundTrip(raw);
}

void TestTrunkCodec::incompressibleBlockIsStoredRaw() {
    std::mt19937_64 rng(5);
    std::vector<std::byte> raw(kMaxBlockBytes);
    for (auto& b : raw) b = std::byte(rng() & 0xff);
    const auto stored = encode(raw);
    QCOMPARE(blockBits(stored.data()), 16);
    QCOMPARE(stored.size(), maxStoredBytes(raw.size()));
    roundTrip(raw);
}

void TestTrunkCodec::damagedBlocksAreRefused() {
    const auto raw = gaussianBf16(8192, 9);
    const auto stored = encode(raw);
    std::vector<std::byte> out(raw.size());
    auto refused = [&](std::vector<std::byte> b, std::size_t rawBytes, const char* what) {
        try {
            decodeBlock(b.data(), b.size(), out.data(), rawBytes);
        } catch (const CodecError& e) {
            if (!QString::fromUtf8(e.what()).contains(QString::fromUtf8(what)))
                qWarning("%s", e.what());
            return QString::fromUtf8(e.what()).contains(QString::fromUtf8(what));
        }
        return false;
    };
    // A flipped bit anywhere (header, table, planes, low bytes, escapes) fails the checksum.
    for (std::size_t at : {std::size_t(0), std::size_t(5), std::size_t(20), std::size_t(100),
                           stored.size() / 2, stored.size() - 1}) {
        auto b = stored;
        b[at] ^= std::byte{0x10};
        QVERIFY(refused(b, raw.size(), "checksum"));
    }
    // Truncated.
    QVERIFY(refused({stored.begin(), stored.end() - 1}, raw.size(), "checksum"));
    QVERIFY(refused({stored.begin(), stored.begin() + 8}, raw.size(), "shorter than its"));
    // Behind a valid checksum: another raw size, an unknown codec, k = 5, sizes that lie.
    QVERIFY(refused(stored, raw.size() - 2, "raw bytes, its place"));
    auto b = stored;
    b[0] = std::byte{7};
    sealBlock(b.data(), b.size());
    QVERIFY(refused(b, raw.size(), "unknown block codec 7"));
    b = stored;
    b[1] = std::byte{5};
    sealBlock(b.data(), b.size());
    QVERIFY(refused(b, raw.size(), "k = 5"));
    b = stored;
    b[32] = std::byte{0xff}; // the escape count
    sealBlock(b.data(), b.size());
    QVERIFY(refused(b, raw.size(), "escapes"));
    b = stored;
    b.push_back(std::byte{0});
    sealBlock(b.data(), b.size());
    QVERIFY(refused(b, raw.size(), "say"));
}

// The decode follows the kernel path: AVX2 and AVX-512 both decode with AVX2 (an AVX-512
// kernel path once sent the decode to the portable loop, 10x slower); scalar stays scalar.
void TestTrunkCodec::vectorKernelPathsDecodeWithAvx2() {
    if (!avx2DecodeAvailable()) QSKIP("this CPU or build has no AVX2 decode");
    for (const k3::KernelPath p :
         {k3::KernelPath::Scalar, k3::KernelPath::Avx2, k3::KernelPath::Avx512}) {
        if (!k3::kernelPathAvailable(p)) continue;
        k3::setKernelPath(p);
        QCOMPARE(QString::fromLatin1(decodePathName()),
                 QString::fromLatin1(p == k3::KernelPath::Scalar ? "scalar" : "AVX2"));
    }
    k3::resetKernelPath();
}

QTEST_GUILESS_MAIN(TestTrunkCodec)
#include "tst_trunk_codec.moc"
