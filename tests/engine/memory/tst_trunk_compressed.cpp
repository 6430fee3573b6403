// The compressed trunk (format 3, `k3 pack --compress`): every tiny checkpoint and the demo
// decode to the raw trunk's bytes (memcmp) through every way the streamer reads a layer
// (pinned, ring, pieces), give the same logits bit for bit at every budget, read fewer
// bytes, and a damaged, truncated or unknown block is refused naming the layer and block.
#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

#include "memory/TrunkCodec.hpp"

#include <cstring>
#include <fstream>
#include <iterator>

#include <omp.h>

#include <k3/model.hpp>
#include <k3/pack.hpp>
#include <k3/trunk.hpp>

#include <unistd.h>

using nlohmann::json;

namespace {

std::string fixture(const QString& name) {
    if (name == QLatin1String("demo")) return K3_SOURCE_DIR "/resources/demo";
    return (QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/") + name).toStdString();
}

std::vector<char> readRange(const std::string& path, std::uint64_t off, std::uint64_t n) {
    std::ifstream in(path, std::ios::binary);
    in.seekg(std::streamoff(off));
    std::vector<char> b(n);
    in.read(b.data(), std::streamsize(n));
    return b;
}

// 8192-byte blocks: a tiny layer spans several, and the 4096-aligned windows of a piece
// start in the middle of a block (the straddling path).
constexpr std::uint64_t kSmallBlocks = 8192;

struct Trunks {
    QTemporaryDir tmp;
    std::string raw, coded;
    explicit Trunks(const std::string& model, std::uint64_t blockBytes = kSmallBlocks) {
        raw = tmp.filePath(QStringLiteral("raw")).toStdString();
        coded = tmp.filePath(QStringLiteral("coded")).toStdString();
        k3::packTrunk(model, raw);
        k3::PackOptions o;
        o.compress = true;
        o.blockBytes = blockBytes;
        // 64-byte blocks never pay (header and table): kept anyway, to stress the decoder.
        o.keepBlocksWhenLarger = blockBytes < 1024;
        k3::packTrunk(model, coded, {}, nullptr, o);
    }
};

k3::MemoryPlan planFor(const k3::TrunkIndex& idx, int pinned, int ringSlots,
                       std::uint64_t slotBytes, bool piecewise) {
    k3::MemoryPlan p;
    p.totalLayers = int(idx.layers.size());
    p.pinnedLayers = pinned;
    p.ringSlots = ringSlots;
    p.ringSlotBytes = slotBytes;
    p.piecewise = piecewise;
    return p;
}

std::vector<float> logitsOf(const k3::Model& m, const std::vector<int>& ids) {
    const std::size_t V = std::size_t(m.config().vocabSize);
    std::vector<float> all, logits(V);
    k3::InferenceState st = m.newState();
    for (int id : ids) {
        m.forward(st, id, logits);
        all.insert(all.end(), logits.begin(), logits.end());
    }
    return all;
}

bool has(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

void flipByte(const std::string& path, std::uint64_t offset) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(offset));
    char c = 0;
    f.read(&c, 1);
    c = char(c ^ 0x10);
    f.seekp(std::streamoff(offset));
    f.write(&c, 1);
}

// The error of streaming every layer of `trunk` through a ring of one (or "accepted").
std::string streamError(const std::string& model, const std::string& trunk, int pinned = 0) {
    try {
        const k3::TrunkIndex idx = k3::openTrunkIndex(trunk, model);
        std::uint64_t largest = 0;
        for (const auto& r : idx.layers) largest = std::max(largest, k3::alignUp(r.bytes));
        k3::TrunkStreamer s(idx, planFor(idx, pinned, 1, largest, false));
        for (int L = pinned; L < int(idx.layers.size()); ++L) s.acquire(L);
    } catch (const std::exception& e) {
        return e.what();
    }
    return "accepted";
}

void writeJson(const std::string& trunk, const json& j) {
    std::ofstream(trunk + "/trunk.json", std::ios::trunc) << k3::sealTrunkJson(j.dump());
}

json readJson(const std::string& trunk) {
    std::ifstream in(trunk + "/trunk.json");
    return json::parse(in);
}

} // namespace

class TestTrunkCompressed : public QObject {
    Q_OBJECT
private slots:
    void decodesToTheRawBytes_data();
    void decodesToTheRawBytes();
    void sameLogitsAtEveryBudget_data();
    void sameLogitsAtEveryBudget();
    void pinnedCompressedSameLogits_data();
    void pinnedCompressedSameLogits();
    void pinnedCompressedBitFlipNamesLayerAndBlock();
    void defaultBlocksCompressTheDemo();
    void packedBytesDoNotDependOnThreads();
    void bitFlippedBlockNamesLayerAndBlock();
    void truncatedBlockNamesLayerAndBlock();
    void unknownBlockCodecNamesLayerAndBlock();
    void truncatedTrunkBinIsRefused();
    void wrongFormatVersionsAreRefused();
};

void TestTrunkCompressed::decodesToTheRawBytes_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<qulonglong>("blockBytes");
    for (const char* n : {"k3_tiny_a", "k3_tiny_b", "demo"}) {
        QTest::newRow((std::string(n) + " 8 KiB blocks").c_str())
            << QString::fromLatin1(n) << qulonglong(kSmallBlocks);
        QTest::newRow((std::string(n) + " 64 B blocks").c_str())
            << QString::fromLatin1(n) << qulonglong(64);
    }
}

// Pinned, a ring of 2, and two pieces: each way of reading gives the raw trunk's bytes.
void TestTrunkCompressed::decodesToTheRawBytes() {
    QFETCH(QString, name);
    QFETCH(qulonglong, blockBytes);
    const std::string model = fixture(name);
    const Trunks t(model, blockBytes);
    const k3::TrunkIndex raw = k3::openTrunkIndex(t.raw, model);
    const k3::TrunkIndex coded = k3::openTrunkIndex(t.coded, model);
    QCOMPARE(raw.version, 2);
    QCOMPARE(coded.version, 3);
    QCOMPARE(coded.blockBytes, std::uint64_t(blockBytes));
    QVERIFY(coded.compressed());
    const int n = int(coded.layers.size());
    std::uint64_t largest = 0, maxPiece = 0;
    for (const auto& r : coded.layers) {
        largest = std::max(largest, k3::alignUp(r.bytes));
        maxPiece = std::max(maxPiece, k3::largestPieceBytes(r));
        QCOMPARE(r.blockCount(), std::size_t((r.bytes + blockBytes - 1) / blockBytes));
    }
    // Model records stay raw, at the same bytes.
    for (std::size_t i = 0; i < coded.modelRecords.size(); ++i)
        QVERIFY(!coded.modelRecords[i].compressed());
    auto rawLayer = [&](int L) {
        const auto& r = raw.layers[std::size_t(L)];
        return readRange(raw.binPath.string(), r.offset, r.bytes);
    };

    k3::TrunkStreamer pinned(coded, planFor(coded, n, 0, 0, false));
    for (int L = 0; L < n; ++L)
        QVERIFY2(std::memcmp(pinned.pinnedData(L), rawLayer(L).data(),
                             coded.layers[std::size_t(L)].bytes) == 0,
                 qPrintable(QStringLiteral("pinned layer %1").arg(L)));
    // Each tiny layer's blocks come in one read: exactly its stored bytes.
    std::uint64_t stored = 0, bytes = 0;
    for (const auto& r : coded.layers) {
        stored += r.storedBytes;
        bytes += r.bytes;
    }
    QCOMPARE(pinned.stats().bytesRead, stored);
    QCOMPARE(pinned.stats().bytesDecoded, bytes);
    QCOMPARE(stored < bytes, blockBytes >= 1024);

    k3::TrunkStreamer ring(coded, planFor(coded, 0, 2, largest, false));
    for (int pass = 0; pass < 2; ++pass)
        for (int L = 0; L < n; ++L)
            QVERIFY2(std::memcmp(ring.acquire(L), rawLayer(L).data(),
                                 coded.layers[std::size_t(L)].bytes) == 0,
                     qPrintable(QStringLiteral("ring layer %1").arg(L)));

    QVERIFY(maxPiece < largest);
    k3::TrunkStreamer pieces(coded, planFor(coded, 0, 2, maxPiece, true));
    int piecewise = 0;
    for (int L = 0; L < n; ++L) {
        const auto bytes = rawLayer(L);
        if (!pieces.piecewise(L)) {
            QVERIFY(std::memcmp(pieces.acquire(L), bytes.data(), bytes.size()) == 0);
            continue;
        }
        ++piecewise;
        for (int p = 0; p < 2; ++p) {
            const std::byte* slot = pieces.acquirePiece(L, p);
            for (const auto& [tensor, at] : pieces.piece(L, p).tensorAt) {
                const k3::TrunkTensor& tt = coded.layers[std::size_t(L)].tensors.at(tensor);
                QVERIFY2(std::memcmp(slot + at, bytes.data() + tt.offset, tt.info.nbytes) == 0,
                         qPrintable(QStringLiteral("layer %1 piece %2 tensor %3")
                                        .arg(L)
                                        .arg(p)
                                        .arg(QString::fromStdString(tensor))));
            }
        }
    }
    QVERIFY(piecewise > 0);
}

void TestTrunkCompressed::sameLogitsAtEveryBudget_data() {
    QTest::addColumn<QString>("name");
    QTest::newRow("k3_tiny_a") << QStringLiteral("k3_tiny_a");
    QTest::newRow("k3_tiny_b") << QStringLiteral("k3_tiny_b");
    QTest::newRow("demo") << QStringLiteral("demo");
}

// Resident (no trunk), every layer pinned, one pinned + a ring of 2, a ring of one, two
// pieces, and the smallest ring: the compressed trunk's logits are the raw one's bits.
void TestTrunkCompressed::sameLogitsAtEveryBudget() {
    QFETCH(QString, name);
    const std::string model = fixture(name);
    const Trunks t(model);
    const k3::TrunkIndex idx = k3::openTrunkIndex(t.coded, model);
    std::uint64_t all = 0, largest = 0, largestAfter0 = 0, maxPiece = 0;
    for (int L = 0; L < int(idx.layers.size()); ++L) {
        const std::uint64_t b = idx.layers[std::size_t(L)].bytes;
        all += k3::alignUp(b);
        largest = std::max(largest, b);
        if (L > 0) largestAfter0 = std::max(largestAfter0, b);
        maxPiece = std::max(maxPiece, k3::largestPieceBytes(idx.layers[std::size_t(L)]));
    }
    const k3::Model resident = k3::Model::load({.modelDir = model});
    std::vector<int> ids;
    for (int i = 0; i < 6; ++i) ids.push_back((i * 37 + 11) % resident.config().vocabSize);
    const std::vector<float> ref = logitsOf(resident, ids);
    const std::uint64_t a0 = k3::alignUp(idx.layers[0].bytes);
    // Staging, two scratch blocks (reader, helping compute thread) and the block index (8 bytes a
    // block start).
    std::uint64_t starts = 0;
    for (const auto& r : idx.layers) starts += r.blockCount() + 1;
    const std::uint64_t decodeBytes = k3::kTrunkStagingBytes + 2 * kSmallBlocks + 8 * starts;
    QCOMPARE(k3::trunkDecodeBufferBytes(idx), decodeBytes);
    struct Budget {
        const char* what;
        std::uint64_t trunk;
        bool pieces;
    };
    const Budget budgets[] = {{"all pinned", all, false},
                              {"1 pinned + ring of 2", a0 + 2 * k3::alignUp(largestAfter0), false},
                              {"ring of 1", k3::alignUp(largest), false},
                              {"2 pieces, ring of 2", 2 * maxPiece, true},
                              {"the smallest ring", 0, true}};
    for (const Budget& b : budgets) {
        std::uint64_t read[2] = {0, 0};
        for (int c = 0; c < 2; ++c) {
            k3::LaunchConfig o;
            o.modelDir = model;
            o.trunkDir = c ? t.coded : t.raw;
            o.budget.trunkBytes = b.trunk;
            o.pinMode = k3::PinMode::Raw; // the same plan as raw (pinnedCompressedSameLogits)
            const k3::Model m = k3::Model::load(o);
            QCOMPARE(m.memoryPlan().piecewise, b.pieces);
            QCOMPARE(m.memoryPlan().trunkDecodeBytes, c ? decodeBytes : 0);
            const std::vector<float> got = logitsOf(m, ids);
            QCOMPARE(got.size(), ref.size());
            QVERIFY2(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)) == 0,
                     qPrintable(QStringLiteral("%1, %2 trunk: logits differ")
                                    .arg(QLatin1String(b.what))
                                    .arg(QLatin1String(c ? "compressed" : "raw"))));
            read[c] = m.memoryStats().trunk.bytesRead;
        }
        QVERIFY2(read[1] < read[0], qPrintable(QStringLiteral("%1: %2 bytes read, raw %3")
                                                   .arg(QLatin1String(b.what))
                                                   .arg(read[1])
                                                   .arg(read[0])));
    }
}

void TestTrunkCompressed::pinnedCompressedSameLogits_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<bool>("pinsMore");
    QTest::newRow("k3_tiny_a") << QStringLiteral("k3_tiny_a") << true;
    QTest::newRow("k3_tiny_b") << QStringLiteral("k3_tiny_b") << true;
    // 4 layers, the first the largest: its decode slot costs more than compression saves
    // on the others, so no budget pins more; the logits are checked all the same.
    QTest::newRow("demo") << QStringLiteral("demo") << false;
}

// Pinned layers kept compressed in RAM (decoded into the decode slot before each use):
// at several budgets the logits are the resident model's bits, the plan stays within
// the budget with the decode slot counted, and some budget pins more layers than raw.
void TestTrunkCompressed::pinnedCompressedSameLogits() {
    QFETCH(QString, name);
    QFETCH(bool, pinsMore);
    const std::string model = fixture(name);
    const Trunks t(model);
    const k3::TrunkIndex idx = k3::openTrunkIndex(t.coded, model);
    const int n = int(idx.layers.size());
    std::uint64_t rawAll = 0, storedAll = 0, decodeSlot = 0, largest = 0;
    int coded = 0;
    for (const auto& r : idx.layers) {
        rawAll += k3::alignUp(r.bytes);
        storedAll += k3::alignUp(r.stored());
        largest = std::max(largest, k3::alignUp(r.bytes));
        if (r.compressed()) {
            decodeSlot = std::max(decodeSlot, k3::alignUp(r.bytes));
            ++coded;
        }
    }
    QVERIFY(coded > 0);
    QCOMPARE(storedAll + decodeSlot < rawAll, pinsMore);
    const k3::Model resident = k3::Model::load({.modelDir = model});
    std::vector<int> ids;
    for (int i = 0; i < 6; ++i) ids.push_back((i * 37 + 11) % resident.config().vocabSize);
    const std::vector<float> ref = logitsOf(resident, ids);
    const std::uint64_t budgets[] = {storedAll + decodeSlot, (storedAll + decodeSlot + rawAll) / 2,
                                     decodeSlot + 2 * largest + storedAll / 2, 2 * largest};
    int pinnedMore = 0;
    for (const std::uint64_t budget : budgets) {
        int pinned[2] = {0, 0};
        for (const k3::PinMode mode : {k3::PinMode::Raw, k3::PinMode::Compressed}) {
            const bool c = mode == k3::PinMode::Compressed;
            k3::LaunchConfig o;
            o.modelDir = model;
            o.trunkDir = t.coded;
            o.budget.trunkBytes = budget;
            o.pinMode = mode;
            const k3::Model m = k3::Model::load(o);
            const k3::MemoryPlan& plan = m.memoryPlan();
            const QString what = QStringLiteral("budget %1, %2 pinned (%3 compressed)")
                                     .arg(budget)
                                     .arg(plan.pinnedLayers)
                                     .arg(plan.pinnedCompressedLayers);
            QVERIFY2(plan.trunkBytes() <= budget, qPrintable(what));
            pinned[c] = plan.pinnedLayers;
            const std::vector<float> got = logitsOf(m, ids);
            QCOMPARE(got.size(), ref.size());
            QVERIFY2(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)) == 0,
                     qPrintable(what + QStringLiteral(": logits differ")));
            const k3::TrunkStats s = m.memoryStats().trunk;
            QCOMPARE(s.pinnedCompressedLayers, plan.pinnedCompressedLayers);
            QCOMPARE(plan.pinCompressed, c);
            if (!c) {
                QCOMPARE(plan.pinnedCompressedLayers, 0);
                QCOMPARE(plan.pinDecodeSlotBytes, std::uint64_t(0));
                continue;
            }
            if (budget == budgets[0]) { // every layer pinned, the coded ones compressed
                QCOMPARE(plan.pinnedLayers, n);
                QCOMPARE(plan.ringSlots, 0);
                QCOMPARE(plan.pinnedCompressedLayers, coded);
                QCOMPARE(plan.pinnedBytes, storedAll);
                QCOMPARE(plan.pinDecodeSlotBytes, decodeSlot);
            }
            if (plan.pinnedCompressedLayers > 0) {
                // 6 tokens: every compressed pinned layer decoded once per token (the
                // decode slot holds one layer; with one such layer it stays decoded).
                const std::uint64_t per = plan.pinnedCompressedLayers > 1 ? 6 : 0;
                std::uint64_t bytes = 0;
                for (int L = 0; L < plan.pinnedLayers; ++L)
                    if (idx.layers[std::size_t(L)].compressed())
                        bytes += idx.layers[std::size_t(L)].bytes;
                QCOMPARE(s.pinnedBytesDecoded, per * bytes);
            }
        }
        pinnedMore += pinned[1] > pinned[0];
        if (pinned[1] <= pinned[0]) continue;
        // Left to the measurement: it says what it measured and picks one of the two plans.
        k3::LaunchConfig o;
        o.modelDir = model;
        o.trunkDir = t.coded;
        o.budget.trunkBytes = budget;
        const k3::Model m = k3::Model::load(o);
        const k3::MemoryPlan& plan = m.memoryPlan();
        QVERIFY2(has(plan.pinChoice, "measured decode") && has(plan.pinChoice, "GB/s, disk"),
                 plan.pinChoice.c_str());
        QCOMPARE(plan.pinnedLayers, plan.pinCompressed ? pinned[1] : pinned[0]);
        QVERIFY2(has(plan.format(), plan.pinChoice), plan.format().c_str());
        const std::vector<float> got = logitsOf(m, ids);
        QVERIFY(std::memcmp(got.data(), ref.data(), ref.size() * sizeof(float)) == 0);
    }
    QCOMPARE(pinnedMore > 0, pinsMore);
}

// A damaged block of a layer pinned compressed is refused at load, naming layer and block.
void TestTrunkCompressed::pinnedCompressedBitFlipNamesLayerAndBlock() {
    const std::string model = fixture(QStringLiteral("k3_tiny_a"));
    const Trunks t(model);
    const k3::TrunkIndex idx = k3::openTrunkIndex(t.coded, model);
    const k3::TrunkRecord& r = idx.layers[0];
    QVERIFY(r.blockCount() >= 3);
    flipByte(t.coded + "/trunk.bin", r.offset + (r.blockStarts[1] + r.blockStarts[2]) / 2);
    k3::LaunchConfig o;
    o.modelDir = model;
    o.trunkDir = t.coded;
    o.pinMode = k3::PinMode::Compressed;
    try {
        const k3::Model m = k3::Model::load(o);
        QFAIL("a bit-flipped block was accepted");
    } catch (const std::exception& e) {
        const std::string msg = e.what();
        QVERIFY2(has(msg, "trunk layer 0 block 1 of " + std::to_string(r.blockCount())) &&
                     has(msg, "block checksum mismatch"),
                 e.what());
    }
}

// At the default 64 KiB blocks the demo's BF16 layers take well under 0.9 of their bytes.
void TestTrunkCompressed::defaultBlocksCompressTheDemo() {
    const std::string model = fixture(QStringLiteral("demo"));
    QTemporaryDir tmp;
    k3::PackOptions o;
    o.compress = true;
    const k3::PackResult r =
        k3::packTrunk(model, tmp.filePath(QStringLiteral("t")).toStdString(), {}, nullptr, o);
    const double ratio = double(r.layerStoredBytes) / double(r.layerBytes);
    QVERIFY2(ratio > 0.5 && ratio < 0.9, qPrintable(QString::number(ratio)));
    const k3::TrunkIndex idx = k3::openTrunkIndex(tmp.filePath(QStringLiteral("t")).toStdString());
    QCOMPARE(idx.layerStoredTotal() < idx.layerBytesTotal(), true);
    QCOMPARE(idx.blockBytes, std::uint64_t(65536));
}

// Blocks are coded in parallel and appended in order: one thread or two, the same file.
void TestTrunkCompressed::packedBytesDoNotDependOnThreads() {
    const std::string model = fixture(QStringLiteral("demo"));
    QTemporaryDir tmp;
    std::vector<char> bins[2];
    for (int threads : {1, 2}) {
        omp_set_num_threads(threads);
        const std::string dir = tmp.filePath(QString::number(threads)).toStdString();
        k3::PackOptions o;
        o.compress = true;
        o.blockBytes = 1024;
        k3::packTrunk(model, dir, {}, nullptr, o);
        QVERIFY(k3::openTrunkIndex(dir).layers[0].blockCount() > 8);
        std::ifstream in(dir + "/trunk.bin", std::ios::binary);
        bins[threads - 1].assign(std::istreambuf_iterator<char>(in), {});
    }
    QVERIFY(!bins[0].empty());
    QVERIFY(bins[0] == bins[1]);
}

void TestTrunkCompressed::bitFlippedBlockNamesLayerAndBlock() {
    const std::string model = fixture(QStringLiteral("k3_tiny_a"));
    for (const int pinned : {0, 1}) {
        const Trunks t(model);
        const k3::TrunkIndex idx = k3::openTrunkIndex(t.coded, model);
        const k3::TrunkRecord& r = idx.layers[0];
        QVERIFY(r.blockCount() >= 3);
        flipByte(t.coded + "/trunk.bin", r.offset + (r.blockStarts[1] + r.blockStarts[2]) / 2);
        const std::string e = streamError(model, t.coded, pinned);
        QVERIFY2(has(e, "trunk layer 0 block 1 of " + std::to_string(r.blockCount()) + " (") &&
                     has(e, "block checksum mismatch"),
                 e.c_str());
    }
}

// Block 1 made one byte shorter (block 2 one longer, so the record still adds up): block
// 1 no longer holds what its checksum covers.
void TestTrunkCompressed::truncatedBlockNamesLayerAndBlock() {
    const std::string model = fixture(QStringLiteral("k3_tiny_b"));
    const Trunks t(model);
    json j = readJson(t.coded);
    for (json& r : j["records"])
        if (r["layer"] == 1) {
            r["blocks"][1] = r["blocks"][1].get<std::uint64_t>() - 1;
            r["blocks"][2] = r["blocks"][2].get<std::uint64_t>() + 1;
        }
    writeJson(t.coded, j);
    const std::string e = streamError(model, t.coded);
    QVERIFY2(has(e, "trunk layer 1 block 1 of ") && has(e, "block checksum mismatch"), e.c_str());
}

// A block of another codec version, with a checksum made to match: refused by name.
void TestTrunkCompressed::unknownBlockCodecNamesLayerAndBlock() {
    const std::string model = fixture(QStringLiteral("demo"));
    const Trunks t(model);
    const k3::TrunkIndex idx = k3::openTrunkIndex(t.coded, model);
    const int L = int(idx.layers.size()) - 1;
    const k3::TrunkRecord& r = idx.layers[std::size_t(L)];
    const std::size_t b = r.blockCount() - 1;
    const std::uint64_t at = r.offset + r.blockStarts[b];
    auto block = readRange(t.coded + "/trunk.bin", at, r.blockStarts[b + 1] - r.blockStarts[b]);
    block[0] = char(9);
    k3::codec::sealBlock(reinterpret_cast<std::byte*>(block.data()), block.size());
    {
        std::fstream f(t.coded + "/trunk.bin", std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(std::streamoff(at));
        f.write(block.data(), std::streamsize(block.size()));
    }
    const std::string e = streamError(model, t.coded);
    QVERIFY2(has(e, "trunk layer " + std::to_string(L) + " block " + std::to_string(b) + " of " +
                        std::to_string(r.blockCount())) &&
                 has(e, "unknown block codec 9"),
             e.c_str());
}

// trunk.bin cut inside the last layer's blocks, trunk.json re-sealed to the new size: the
// record is refused at open, by name.
void TestTrunkCompressed::truncatedTrunkBinIsRefused() {
    const std::string model = fixture(QStringLiteral("k3_tiny_a"));
    const Trunks t(model);
    const k3::TrunkIndex idx = k3::openTrunkIndex(t.coded, model);
    const k3::TrunkRecord& last = idx.layers.back();
    const std::uint64_t cut = last.offset + last.blockStarts[1] + 10;
    json j = readJson(t.coded);
    j["file_bytes"] = cut;
    writeJson(t.coded, j);
    QCOMPARE(::truncate((t.coded + "/trunk.bin").c_str(), off_t(cut)), 0);
    try {
        k3::openTrunkIndex(t.coded, model);
        QFAIL("a truncated trunk.bin was accepted");
    } catch (const k3::PackError& e) {
        QVERIFY2(has(e.what(), "record " + last.name + " [") &&
                     has(e.what(), "runs past the end of trunk.bin"),
                 e.what());
    }
}

void TestTrunkCompressed::wrongFormatVersionsAreRefused() {
    const std::string model = fixture(QStringLiteral("k3_tiny_a"));
    const Trunks t(model);
    auto openError = [&] {
        try {
            k3::openTrunkIndex(t.coded, model);
        } catch (const std::exception& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    const json original = readJson(t.coded);
    json j = original;
    j["version"] = 4;
    writeJson(t.coded, j);
    QVERIFY2(has(openError(), "trunk format version 4, this k3 reads versions 2"),
             openError().c_str());
    // A version 2 description cannot carry blocks.
    j = original;
    j["version"] = 2;
    writeJson(t.coded, j);
    QVERIFY2(has(openError(), "lists blocks in a trunk format that has none"), openError().c_str());
    j = original;
    j["codec"]["name"] = "k3-other-codec";
    writeJson(t.coded, j);
    QVERIFY2(has(openError(), "block codec"), openError().c_str());
    j = original;
    j["codec"]["block_bytes"] = 100;
    writeJson(t.coded, j);
    QVERIFY2(has(openError(), "block_bytes 100 is not a multiple of 64"), openError().c_str());
    // A block list that does not add up to stored_bytes.
    j = original;
    j["records"][0]["stored_bytes"] = j["records"][0]["stored_bytes"].get<std::uint64_t>() + 1;
    writeJson(t.coded, j);
    QVERIFY2(has(openError(), "its blocks add up to"), openError().c_str());
    writeJson(t.coded, original);
    QCOMPARE(openError(), std::string("accepted"));
}

QTEST_GUILESS_MAIN(TestTrunkCompressed)
#include "tst_trunk_compressed.moc"
