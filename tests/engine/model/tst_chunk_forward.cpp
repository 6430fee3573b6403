// The multi-position forward: a prompt fed in chunks of 1, 2, 3, 7 and 64 positions
// gives every position's logits bit for bit (memcmp) as one-position calls do, at every
// budget of the memory ladder (resident, pinned, ring, pieces, ultra, expert caches of
// 1 slot / top-k / every expert), on both tiny checkpoints and the demo; decoding after
// a chunked prefill continues with the same ids; a chunk reads each streamed layer once
// and each unique expert once; 1 and 2 threads give the same bits; chunks of several
// tiles give the same bits.
#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

#include <omp.h>

#include <cstring>
#include <fstream>
#include <numeric>

#include <k3/memory_plan.hpp>
#include <k3/model.hpp>
#include <k3/pack.hpp>
#include <k3/trunk.hpp>

using nlohmann::json;

namespace {

std::string fixture(const QString& name) {
    if (name == QLatin1String("demo")) return K3_SOURCE_DIR "/resources/demo";
    return (QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/") + name).toStdString();
}

// A prompt of `n` ids: the fixture's reference prompt, extended by a fixed pattern.
std::vector<int> promptFor(const std::string& dir, int vocab, int n) {
    std::ifstream in(dir + "/expected.json");
    const json expected = json::parse(in);
    std::vector<int> ids;
    if (expected.contains("prompt_ids")) ids = expected.at("prompt_ids").get<std::vector<int>>();
    for (int i = 0; int(ids.size()) < n; ++i) ids.push_back((i * 37 + 11) % vocab);
    ids.resize(std::size_t(n));
    return ids;
}

// Every position's logits, one position per forward call.
std::vector<float> onePositionAtATime(const k3::Model& m, const std::vector<int>& ids) {
    const std::size_t V = std::size_t(m.config().vocabSize);
    std::vector<float> all(ids.size() * V);
    k3::InferenceState st = m.newState();
    for (std::size_t t = 0; t < ids.size(); ++t) {
        const k3::TokenStats s = m.forward(st, ids[t], std::span<float>(all.data() + t * V, V));
        if (s.droppedExperts != 0 || s.nonFinite) qFatal("reference run invalid");
    }
    return all;
}

struct Chunked {
    std::vector<float> logits; // [positions][vocab]
    std::vector<int> decoded;  // greedy ids after the prompt
    int dropped = 0;
};

Chunked inChunks(const k3::Model& m, const std::vector<int>& ids, int chunk, int decode) {
    const std::size_t V = std::size_t(m.config().vocabSize);
    Chunked r;
    r.logits.resize(ids.size() * V);
    k3::InferenceState st = m.newState();
    for (std::size_t t = 0; t < ids.size(); t += std::size_t(chunk)) {
        const std::size_t n = std::min(std::size_t(chunk), ids.size() - t);
        const k3::TokenStats s = m.forward(st, std::span<const int>(ids.data() + t, n),
                                           std::span<float>(r.logits.data() + t * V, n * V));
        r.dropped += s.droppedExperts;
    }
    if (st.length() != int(ids.size())) qFatal("state length %d", st.length());
    std::vector<float> logits(r.logits.end() - std::ptrdiff_t(V), r.logits.end());
    for (int i = 0; i < decode; ++i) {
        r.decoded.push_back(k3::argmax(logits));
        r.dropped += m.forward(st, r.decoded.back(), logits).droppedExperts;
    }
    return r;
}

std::vector<int> greedyAfter(const k3::Model& m, const std::vector<int>& ids, int decode) {
    std::vector<float> logits(std::size_t(m.config().vocabSize));
    k3::InferenceState st = m.newState();
    for (int id : ids) m.forward(st, id, logits);
    std::vector<int> out;
    for (int i = 0; i < decode; ++i) {
        out.push_back(k3::argmax(logits));
        m.forward(st, out.back(), logits);
    }
    return out;
}

struct Budget {
    const char* what;
    std::uint64_t trunk = 0; // 0: the checkpoint's trunk, resident
    int cacheSlots = 0;
    bool tables = false;
    bool wantPieces = false;
    bool smallestRing = false; // a trunk budget of 0: every layer through one slot
};

} // namespace

class TestChunkForward : public QObject {
    Q_OBJECT
private slots:
    void sameBitsAsOnePosition_data();
    void sameBitsAsOnePosition();
    void lastLogitsOnly();
    void threadCountChangesNoBit();
    void chunkReadsTrunkOnceAndExpertsOnce();
    void badChunksAreRefused();
    void tilesChangeNoBit_data();
    void tilesChangeNoBit();
    void stopWithinAChunk_data();
    void stopWithinAChunk();
};

void TestChunkForward::sameBitsAsOnePosition_data() {
    QTest::addColumn<QString>("name");
    QTest::newRow("k3_tiny_a") << QStringLiteral("k3_tiny_a");
    QTest::newRow("k3_tiny_b") << QStringLiteral("k3_tiny_b");
    QTest::newRow("k3_tiny_f32") << QStringLiteral("k3_tiny_f32"); // plain F32 experts
    QTest::newRow("demo") << QStringLiteral("demo");
}

void TestChunkForward::sameBitsAsOnePosition() {
    QFETCH(QString, name);
    const std::string dir = fixture(name);
    QTemporaryDir tmp;
    const std::string trunkDir = tmp.filePath(QStringLiteral("trunk")).toStdString();
    k3::packTrunk(dir, trunkDir);
    const k3::TrunkIndex idx = k3::openTrunkIndex(trunkDir, dir);
    const int n = int(idx.layers.size());
    std::uint64_t all = 0, largest = 0, largestAfter0 = 0, maxPiece = 0;
    for (int L = 0; L < n; ++L) {
        const std::uint64_t b = idx.layers[std::size_t(L)].bytes;
        all += k3::alignUp(b);
        largest = std::max(largest, b);
        if (L > 0) largestAfter0 = std::max(largestAfter0, b);
        maxPiece = std::max(maxPiece, k3::largestPieceBytes(idx.layers[std::size_t(L)]));
    }
    const k3::Model resident = k3::Model::load(dir);
    const int vocab = resident.config().vocabSize;
    const int topK = resident.config().numExpertsPerToken;
    const int experts = resident.config().numExperts;
    const std::vector<int> prompt = promptFor(dir, vocab, 66); // past the largest chunk
    const std::vector<float> ref = onePositionAtATime(resident, prompt);
    const std::vector<int> refDecoded = greedyAfter(resident, prompt, 3);
    const std::uint64_t a0 = k3::alignUp(idx.layers[0].bytes);

    const bool pieces = maxPiece < k3::alignUp(largest);
    std::vector<Budget> budgets{
        {"resident"},
        {"all pinned", all},
        {"1 pinned + ring of 2", a0 + 2 * k3::alignUp(largestAfter0)},
        {"nothing pinned, ring of 1", k3::alignUp(largest)},
        {"nothing pinned, 1 expert slot", 2 * k3::alignUp(largest), 1},
        {"1 pinned, top-k expert slots", a0 + 2 * k3::alignUp(largestAfter0), topK},
        {"all pinned, every expert cached", all, experts * (n - 1)},
        {"checkpoint trunk, 1 expert slot", 0, 1},
    };
    budgets.push_back({"trunk budget 0: the smallest ring", 0, 0, false, pieces, true});
    if (pieces) {
        budgets.push_back({"nothing pinned, 2 pieces, ring of 2", 2 * maxPiece, 0, false, true});
        budgets.push_back(
            {"ultra: pieces, ring of 1, tables streamed, 1 expert slot", maxPiece, 1, true, true});
    }
    const std::size_t V = std::size_t(vocab);
    for (const Budget& b : budgets) {
        k3::LaunchConfig o;
        o.modelDir = dir;
        if (b.trunk || b.smallestRing) {
            o.trunkDir = trunkDir;
            o.budget.trunkBytes = b.trunk;
        }
        o.budget.modelTablesOnDisk = b.tables;
        k3::LaunchDiagnostics d;
        d.expertCacheSlots = b.cacheSlots;
        d.tableBlockBytes = 3 * 4096;
        const k3::Model m = k3::Model::load(o, d);
        if (b.trunk || b.smallestRing) QCOMPARE(m.memoryPlan().piecewise, b.wantPieces);
        if (b.smallestRing) {
            QCOMPARE(m.memoryPlan().pinnedLayers, 0);
            QCOMPARE(m.memoryPlan().ringSlots, 1);
        }
        // Small chunks on a prefix (each pass re-reads the streamed trunk from disk with
        // O_DIRECT, so 66 one-position passes per budget would dominate the suite), the
        // larger ones on the whole prompt: a full chunk of 64, then a partial one.
        for (int chunk : {1, 2, 3, 7, 64}) {
            const std::vector<int> ids(prompt.begin(), prompt.begin() + (chunk < 7 ? 16 : 66));
            const Chunked r = inChunks(m, ids, chunk, chunk < 7 ? 0 : 3);
            QCOMPARE(r.dropped, 0);
            for (std::size_t t = 0; t < ids.size(); ++t)
                if (std::memcmp(r.logits.data() + t * V, ref.data() + t * V, V * sizeof(float)) !=
                    0)
                    QFAIL(qPrintable(QStringLiteral("%1, chunk %2: position %3 differs")
                                         .arg(QLatin1String(b.what))
                                         .arg(chunk)
                                         .arg(t)));
            QVERIFY2(chunk < 7 || r.decoded == refDecoded,
                     qPrintable(QStringLiteral("%1, chunk %2: decode after the chunked prefill")
                                    .arg(QLatin1String(b.what))
                                    .arg(chunk)));
        }
    }
}

// A chunk asked for the last position's logits only gives the bits of the full run's last row.
void TestChunkForward::lastLogitsOnly() {
    const std::string dir = fixture(QStringLiteral("k3_tiny_a"));
    const k3::Model m = k3::Model::load(dir);
    const std::size_t V = std::size_t(m.config().vocabSize);
    const std::vector<int> prompt = promptFor(dir, int(V), 11);
    const std::vector<float> ref = onePositionAtATime(m, prompt);
    k3::InferenceState st = m.newState();
    std::vector<float> last(V);
    m.forward(st, std::span<const int>(prompt.data(), 5), last);
    m.forward(st, std::span<const int>(prompt.data() + 5, 6), last);
    QCOMPARE(st.length(), 11);
    QVERIFY(std::memcmp(last.data(), ref.data() + 10 * V, V * sizeof(float)) == 0);
    QVERIFY(std::memcmp(last.data(), ref.data() + 9 * V, V * sizeof(float)) != 0);
}

void TestChunkForward::threadCountChangesNoBit() {
    const std::string dir = fixture(QStringLiteral("demo"));
    const k3::Model m = k3::Model::load(dir);
    const std::vector<int> prompt = promptFor(dir, m.config().vocabSize, 40);
    const int before = omp_get_max_threads();
    omp_set_num_threads(1);
    const Chunked one = inChunks(m, prompt, 16, 2);
    omp_set_num_threads(2);
    const Chunked two = inChunks(m, prompt, 16, 2);
    omp_set_num_threads(before);
    QCOMPARE(one.logits.size(), prompt.size() * std::size_t(m.config().vocabSize));
    QVERIFY(std::memcmp(one.logits.data(), two.logits.data(), one.logits.size() * sizeof(float)) ==
            0);
    QCOMPARE(one.decoded, two.decoded);
}

// One chunk binds every streamed layer once and requests each unique expert once.
void TestChunkForward::chunkReadsTrunkOnceAndExpertsOnce() {
    const std::string dir = fixture(QStringLiteral("k3_tiny_a"));
    QTemporaryDir tmp;
    const std::string trunkDir = tmp.filePath(QStringLiteral("trunk")).toStdString();
    k3::packTrunk(dir, trunkDir);
    const k3::TrunkIndex idx = k3::openTrunkIndex(trunkDir, dir);
    std::uint64_t largest = 0;
    for (const auto& r : idx.layers) largest = std::max(largest, r.bytes);
    const k3::Model resident = k3::Model::load(dir);
    const int n = resident.layersBound();
    const int topK = resident.config().numExpertsPerToken;
    const int experts = resident.config().numExperts;

    k3::LaunchConfig o;
    o.modelDir = dir;
    o.trunkDir = trunkDir;
    o.budget.trunkBytes = k3::alignUp(largest); // nothing pinned, a ring of 1: every layer read
    k3::LaunchDiagnostics d;
    d.expertCacheSlots = experts * (n - 1); // room for every expert: the union in one wave
    const k3::Model m = k3::Model::load(o, d);
    QCOMPARE(m.memoryPlan().pinnedLayers, 0);
    QCOMPARE(m.memoryPlan().ringSlots, 1);
    const std::vector<int> prompt = promptFor(dir, m.config().vocabSize, 24);
    std::vector<float> logits(std::size_t(m.config().vocabSize));
    k3::InferenceState st = m.newState();
    m.forward(st, std::span<const int>(prompt.data(), prompt.size()), logits);
    const k3::MemoryStats s = m.memoryStats();
    QCOMPARE(s.trunk.reads, std::uint64_t(n)); // one pass for 24 positions
    std::uint64_t payload = 0;
    for (const auto& r : idx.layers) payload += r.bytes;
    QVERIFY2(
        s.trunk.bytesRead >= payload && s.trunk.bytesRead <= payload + std::uint64_t(n) * 8192,
        qPrintable(
            QStringLiteral("%1 bytes read for %2 of layers").arg(s.trunk.bytesRead).arg(payload)));
    // Each unique expert once: at most every expert of every MoE layer, at least top-k a layer,
    // never the 24 x top-k the positions asked for; the cache was empty, so each was read.
    const std::uint64_t moeLayers = std::uint64_t(n - 1);
    QVERIFY(s.cache.requests >= moeLayers * std::uint64_t(topK));
    QVERIFY(s.cache.requests <= moeLayers * std::uint64_t(experts));
    QCOMPARE(s.cache.diskReads, s.cache.requests);
    // The cache holds every expert, so a second request for one would be a resident hit.
    QCOMPARE(s.cache.residentHits, std::uint64_t(0));
    QCOMPARE(s.cache.misses, std::uint64_t(0)); // the wave held the union: all prefetched
}

void TestChunkForward::badChunksAreRefused() {
    const k3::Model m = k3::Model::load(fixture(QStringLiteral("demo")));
    k3::InferenceState st = m.newState();
    std::vector<float> logits(std::size_t(m.config().vocabSize) * 2 + 1);
    const int ids[2] = {1, 2};
    QVERIFY_THROWS_EXCEPTION(k3::ModelError, m.forward(st, std::span<const int>(ids, 2), logits));
    QVERIFY_THROWS_EXCEPTION(k3::ModelError, m.forward(st, std::span<const int>(), logits));
    const int bad[2] = {1, m.config().vocabSize};
    logits.resize(std::size_t(m.config().vocabSize));
    QVERIFY_THROWS_EXCEPTION(k3::ModelError, m.forward(st, std::span<const int>(bad, 2), logits));
    QCOMPARE(st.length(), 0); // nothing was fed
}

void TestChunkForward::stopWithinAChunk_data() {
    QTest::addColumn<bool>("streamed");
    QTest::newRow("resident") << false;
    QTest::newRow("every layer through one ring slot") << true;
}

// Issue 37 point 2: Stop waited for the end of the chunk (on the real model a whole
// prompt is one chunk). The forward asks `stop` before each layer: stopped before the
// first layer the state is untouched, after it the state is empty; either way the next
// forward gives the bits of a run that never stopped (the trunk ring read ahead in the
// layer order and is then asked for layer 0 again).
void TestChunkForward::stopWithinAChunk() {
    QFETCH(bool, streamed);
    const std::string dir = fixture(QStringLiteral("k3_tiny_a"));
    QTemporaryDir tmp;
    k3::LaunchConfig o;
    o.modelDir = dir;
    if (streamed) {
        o.trunkDir = tmp.filePath(QStringLiteral("trunk")).toStdString();
        k3::packTrunk(dir, o.trunkDir);
        o.budget.trunkBytes = 0; // nothing pinned, one slot
    }
    const k3::Model m = k3::Model::load(o);
    const int layers = m.layersBound();
    QVERIFY(layers >= 3);
    const std::size_t V = std::size_t(m.config().vocabSize);
    const std::vector<int> prompt = promptFor(dir, m.config().vocabSize, 20);
    const std::span<const int> head(prompt.data(), 12), tail(prompt.data() + 12, 8);
    std::vector<float> expected(V), logits(V);
    {
        k3::InferenceState st = m.newState();
        m.forward(st, head, expected);
        m.forward(st, tail, expected);
    }
    for (const int stopAt : {0, 2, layers - 1}) {
        k3::InferenceState st = m.newState();
        m.forward(st, head, logits);
        std::vector<int> asked;
        const std::vector<float> before = logits;
        const k3::TokenStats s =
            m.forward(st, tail, logits, false, {}, [&asked, stopAt](int layer) {
                asked.push_back(layer);
                return layer == stopAt;
            });
        QVERIFY(s.stopped);
        std::vector<int> expectedAsks(std::size_t(stopAt) + 1);
        std::iota(expectedAsks.begin(), expectedAsks.end(), 0);
        QCOMPARE(asked, expectedAsks); // asked before each layer in order, then it stopped
        QVERIFY(std::memcmp(logits.data(), before.data(), V * sizeof(float)) == 0);
        if (stopAt == 0) {
            QCOMPARE(st.length(), 12); // no layer had run: the 12 positions are kept
        } else {
            QCOMPARE(st.length(), 0);
            m.forward(st, head, logits);
        }
        const k3::TokenStats again = m.forward(st, tail, logits);
        QVERIFY(!again.stopped);
        QCOMPARE(st.length(), 20);
        QVERIFY2(std::memcmp(logits.data(), expected.data(), V * sizeof(float)) == 0,
                 qPrintable(QStringLiteral("stopped before layer %1").arg(stopAt)));
    }
}

void TestChunkForward::tilesChangeNoBit_data() {
    QTest::addColumn<QString>("name");
    QTest::newRow("k3_tiny_a") << QStringLiteral("k3_tiny_a");
    QTest::newRow("demo") << QStringLiteral("demo");
}

// Chunks longer than a tile (k3::kPrefillTilePositions): 150 positions as one chunk (two
// whole tiles and a partial one), and as 100 + 50, give every position's logits and the
// last-only logits with the bits of one-position calls, resident and streamed (nothing
// pinned, one expert slot: the union in many waves, each expert over several tiles).
void TestChunkForward::tilesChangeNoBit() {
    QFETCH(QString, name);
    const std::string dir = fixture(name);
    static_assert(k3::kPrefillTilePositions < 75);
    QTemporaryDir tmp;
    const std::string trunkDir = tmp.filePath(QStringLiteral("trunk")).toStdString();
    k3::packTrunk(dir, trunkDir);
    const k3::TrunkIndex idx = k3::openTrunkIndex(trunkDir, dir);
    std::uint64_t largest = 0;
    for (const auto& r : idx.layers) largest = std::max(largest, r.bytes);
    const k3::Model resident = k3::Model::load(dir);
    const std::size_t V = std::size_t(resident.config().vocabSize);
    const std::vector<int> prompt = promptFor(dir, int(V), 150);
    const std::vector<float> ref = onePositionAtATime(resident, prompt);
    const std::vector<int> refDecoded = greedyAfter(resident, prompt, 3);
    k3::LaunchConfig streamed;
    streamed.modelDir = dir;
    streamed.trunkDir = trunkDir;
    streamed.budget.trunkBytes = k3::alignUp(largest);
    k3::LaunchDiagnostics oneSlot;
    oneSlot.expertCacheSlots = 1;
    for (const bool stream : {false, true}) {
        const k3::Model m = stream ? k3::Model::load(streamed, oneSlot) : k3::Model::load(dir);
        for (int chunk : {150, 100}) {
            const Chunked r = inChunks(m, prompt, chunk, 3);
            QCOMPARE(r.dropped, 0);
            for (std::size_t t = 0; t < prompt.size(); ++t)
                if (std::memcmp(r.logits.data() + t * V, ref.data() + t * V, V * sizeof(float)) !=
                    0)
                    QFAIL(qPrintable(QStringLiteral("streamed %1, chunk %2: position %3 differs")
                                         .arg(stream)
                                         .arg(chunk)
                                         .arg(t)));
            QCOMPARE(r.decoded, refDecoded);
        }
        k3::InferenceState st = m.newState();
        std::vector<float> last(V);
        m.forward(st, std::span<const int>(prompt.data(), prompt.size()), last);
        QVERIFY(std::memcmp(last.data(), ref.data() + (prompt.size() - 1) * V, V * sizeof(float)) ==
                0);
    }
}

QTEST_GUILESS_MAIN(TestChunkForward)
#include "tst_chunk_forward.moc"
