// THE memory-dial test: on the committed tiny checkpoints, the same greedy ids and the
// same last logits, bit for bit, at every budget: everything resident, a packed trunk
// all pinned, one layer pinned + ring, half pinned, nothing pinned, a one-slot ring,
// layers larger than the ring share streamed in two pieces, the ultra shape (pieces, a
// ring of 1, embeddings and lm_head read from disk in small row blocks, one expert
// slot), and expert caches of 1 slot, top-k slots and every expert. Plus fault
// injection and a stale trunk.
#include <QDir>
#include <QTemporaryDir>
#include <QTest>

#include <atomic>

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>

#include <k3/fault_injection.hpp>
#include <k3/model.hpp>
#include <k3/pack.hpp>
#include <k3/session.hpp>
#include <k3/trunk.hpp>

using nlohmann::json;

namespace {

struct Run {
    std::vector<int> ids;
    std::vector<float> lastLogits;
    int dropped = 0;
};

Run greedy(const k3::Model& model, const std::vector<int>& prompt, int n) {
    Run r;
    std::vector<float> logits(std::size_t(model.config().vocabSize));
    k3::InferenceState st = model.newState();
    for (int id : prompt) r.dropped += model.forward(st, id, logits).droppedExperts;
    for (int i = 0; i < n; ++i) {
        const int next = k3::argmax(logits);
        r.ids.push_back(next);
        r.dropped += model.forward(st, next, logits).droppedExperts;
    }
    r.lastLogits = logits;
    return r;
}

QString modelDir(const char* name) {
    return QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/") + QLatin1String(name);
}

} // namespace

class TestMemoryModel : public QObject {
    Q_OBJECT
private slots:
    void sameBitsAtEveryBudget_data();
    void sameBitsAtEveryBudget();
    void plainBf16ExpertsSameBitsResidentAndCached();
    void failedExpertReadInvalidatesRun();
    void staleTrunkIsRefused();
    void sessionReportsMemory();
    void sameBitsThroughEveryExpertReader_data();
    void sameBitsThroughEveryExpertReader();
};

void TestMemoryModel::sameBitsAtEveryBudget_data() {
    QTest::addColumn<QString>("name");
    QTest::newRow("k3_tiny_a") << QStringLiteral("k3_tiny_a");
    QTest::newRow("k3_tiny_b") << QStringLiteral("k3_tiny_b");
    // Plain F32 experts (no quantization_config): slots and plan follow the dtype.
    QTest::newRow("k3_tiny_f32") << QStringLiteral("k3_tiny_f32");
}

void TestMemoryModel::sameBitsAtEveryBudget() {
    QFETCH(QString, name);
    const std::string dir = modelDir(name.toUtf8().constData()).toStdString();
    std::ifstream in(dir + "/expected.json");
    const json expected = json::parse(in);
    // A short prompt keeps this fast; tst_model_gates checks the full reference run.
    auto prompt = expected.at("prompt_ids").get<std::vector<int>>();
    prompt.resize(std::min<std::size_t>(prompt.size(), 12));
    const std::vector<int> want(6, 0); // six generated tokens (ids come from the resident run)

    QTemporaryDir tmp;
    const std::string trunkDir = tmp.filePath(QStringLiteral("trunk")).toStdString();
    k3::packTrunk(dir, trunkDir);
    const k3::TrunkIndex idx = k3::openTrunkIndex(trunkDir, dir);
    const int n = int(idx.layers.size());
    std::uint64_t all = 0, largest = 0, largestAfter0 = 0, maxPiece = 0;
    std::uint64_t half = 0, largestAfterHalf = 0;
    for (int L = 0; L < n; ++L) {
        const std::uint64_t b = idx.layers[std::size_t(L)].bytes;
        all += k3::alignUp(b);
        largest = std::max(largest, b);
        if (L > 0) largestAfter0 = std::max(largestAfter0, b);
        if (L < n / 2)
            half += k3::alignUp(b);
        else
            largestAfterHalf = std::max(largestAfterHalf, b);
        maxPiece = std::max(maxPiece, k3::largestPieceBytes(idx.layers[std::size_t(L)]));
    }
    // The piece budgets below are only meaningful if some layer exceeds the piece slot.
    QVERIFY2(maxPiece < k3::alignUp(largest),
             qPrintable(
                 QStringLiteral("largest piece %1, largest layer %2").arg(maxPiece).arg(largest)));

    const k3::Model resident = k3::Model::load({.modelDir = dir});
    const Run ref = greedy(resident, prompt, int(want.size()));
    QCOMPARE(ref.dropped, 0);
    const int topK = resident.config().numExpertsPerToken;
    const int experts = resident.config().numExperts;

    struct Budget {
        const char* what;
        std::uint64_t trunk;
        int cacheSlots;
        int wantPinned; // -1: don't check; -2: at least half the layers
        int wantRing;
        bool wantPieces = false; // some streamed layer arrives in two pieces
        bool tables = false;     // embeddings and lm_head streamed from disk (ultra)
    };
    const std::uint64_t a0 = k3::alignUp(idx.layers[0].bytes);
    const std::vector<Budget> budgets{
        {"all pinned, experts resident", all, 0, n, 0},
        {"1 pinned + ring of 2", a0 + 2 * k3::alignUp(largestAfter0), 0, 1, 2},
        {"nothing pinned, ring of 2", 2 * k3::alignUp(largest), 0, 0, 2},
        {"nothing pinned, ring of 1", k3::alignUp(largest), 0, 0, 1},
        {"nothing pinned, 1 expert slot", 2 * k3::alignUp(largest), 1, 0, 2},
        {"1 pinned, top-k expert slots", a0 + 2 * k3::alignUp(largestAfter0), topK, 1, 2},
        {"all pinned, every expert cached", all, experts * (n - 1), n, 0},
        {"checkpoint trunk, 1 expert slot", 0, 1, -1, -1},
        {"half pinned + ring of 2, top-k slots", half + 2 * k3::alignUp(largestAfterHalf), topK, -2,
         2},
        {"nothing pinned, layers in 2 pieces, ring of 2", 2 * maxPiece, 0, 0, 2, true},
        {"ultra: pieces through a ring of 1, tables streamed, 1 expert slot", maxPiece, 1, 0, 1,
         true, true},
        {"all pinned, every expert cached, tables streamed", all, experts * (n - 1), n, 0, false,
         true},
        {"checkpoint trunk, tables streamed, resident experts", 0, 0, -1, -1, false, true},
    };
    for (const Budget& b : budgets) {
        k3::LaunchConfig o;
        o.modelDir = dir;
        if (b.trunk) {
            o.trunkDir = trunkDir;
            o.budget.trunkBytes = b.trunk;
        }
        o.budget.modelTablesOnDisk = b.tables;
        k3::LaunchDiagnostics d;
        d.expertCacheSlots = b.cacheSlots;
        d.tableBlockBytes = 3 * 4096; // several lm_head blocks, the last one partial
        const k3::Model m = k3::Model::load(o, d);
        const k3::MemoryPlan& plan = m.memoryPlan();
        if (b.wantPinned >= 0) QCOMPARE(plan.pinnedLayers, b.wantPinned);
        if (b.wantPinned == -2) QVERIFY(plan.pinnedLayers >= n / 2 && plan.pinnedLayers < n);
        if (b.wantPinned != -1) QCOMPARE(plan.ringSlots, b.wantRing);
        if (b.trunk) {
            QCOMPARE(plan.piecewise, b.wantPieces);
            QVERIFY2(plan.trunkBytes() <= b.trunk, b.what); // never over the budget asked for
            QCOMPARE(m.memoryStats().trunk.piecewiseLayers > 0, b.wantPieces);
        }
        QCOMPARE(plan.modelTablesStreamed, b.tables);
        const Run r = greedy(m, prompt, int(want.size()));
        QVERIFY2(r.ids == ref.ids, b.what);
        QCOMPARE(r.dropped, 0);
        QVERIFY2(std::memcmp(r.lastLogits.data(), ref.lastLogits.data(),
                             r.lastLogits.size() * sizeof(float)) == 0,
                 b.what);
        const k3::MemoryStats s = m.memoryStats();
        QCOMPARE(s.trunkStreamed, b.trunk != 0);
        QCOMPARE(s.expertsCached, b.cacheSlots > 0);
        const int tokens = int(prompt.size() + want.size());
        if (b.trunk && plan.pinnedLayers < n) {
            // Every streamed layer is read once per token (a piecewise one as two piece
            // reads), plus the pinned prefix once; the read of the NEXT token's first
            // streamed unit may have landed too.
            const auto pinned = std::uint64_t(plan.pinnedLayers);
            const auto split = std::uint64_t(s.trunk.piecewiseLayers);
            const std::uint64_t whole = std::uint64_t(n) - pinned - split;
            const std::uint64_t reads = pinned + whole * std::uint64_t(tokens);
            const std::uint64_t pieceReads = 2 * split * std::uint64_t(tokens);
            const std::uint64_t extra = (s.trunk.reads - reads) + (s.trunk.pieceReads - pieceReads);
            QVERIFY2(s.trunk.reads >= reads && s.trunk.pieceReads >= pieceReads &&
                         (extra == 0 || (plan.ringSlots == 2 && extra == 1)),
                     qPrintable(QStringLiteral("%1 reads + %2 piece reads, expected %3 + %4")
                                    .arg(s.trunk.reads)
                                    .arg(s.trunk.pieceReads)
                                    .arg(reads)
                                    .arg(pieceReads)));
            QCOMPARE(s.trunk.pinnedHits, pinned * std::uint64_t(tokens));
        }
        // Streamed tables: one embedding row per token, the whole lm_head per token.
        const auto rowBytes = std::uint64_t(m.config().hiddenSize) * 2; // BF16 tables
        QCOMPARE(s.modelTablesStreamed, b.tables);
        QCOMPARE(s.tableBytesRead, b.tables ? std::uint64_t(tokens) * rowBytes *
                                                  (1 + std::uint64_t(m.config().vocabSize))
                                            : std::uint64_t(0));
        if (b.cacheSlots > 0) {
            const auto requests =
                std::uint64_t(tokens) * std::uint64_t(topK) * std::uint64_t(n - 1);
            QCOMPARE(s.cache.requests, requests);
            QCOMPARE(s.cache.hits + s.cache.misses, requests);
            QCOMPARE(s.cache.residentHits + s.cache.prefetchHits, s.cache.hits);
            QCOMPARE(s.cache.failedReads, std::uint64_t(0));
            // One slot: consecutive requests never repeat a key, so nothing is ever resident.
            if (b.cacheSlots == 1) QCOMPARE(s.cache.residentHits, std::uint64_t(0));
            if (b.cacheSlots >= topK) QCOMPARE(s.cache.misses, std::uint64_t(0)); // the batch fits
            if (b.cacheSlots == experts * (n - 1)) QCOMPARE(s.cache.evictions, std::uint64_t(0));
        }
    }
}

// Issue 22, point 10: BF16 routed experts (no quantization_config), resident and through
// the expert cache at several slot counts: the reference's greedy ids and the same bits.
// (k3_tiny_bf16's layers are too small for sameBitsAtEveryBudget's trunk plans; the
// F32 checkpoint runs there.)
void TestMemoryModel::plainBf16ExpertsSameBitsResidentAndCached() {
    const std::string dir = modelDir("k3_tiny_bf16").toStdString();
    std::ifstream in(dir + "/expected.json");
    const json expected = json::parse(in);
    const auto prompt = expected.at("prompt_ids").get<std::vector<int>>();
    auto want = expected.at("greedy").at("incremental").get<std::vector<int>>();
    want.resize(8);
    const k3::Model resident = k3::Model::load({.modelDir = dir});
    QVERIFY(!resident.config().quantization);
    // 2 MoE layers x 4 experts x 3 BF16 matrices of 24 x 20.
    QCOMPARE(resident.memoryPlan().residentExpertBytes, std::uint64_t(2 * 4 * 3 * 24 * 20 * 2));
    const Run ref = greedy(resident, prompt, int(want.size()));
    QCOMPARE(ref.ids, want);
    QCOMPARE(ref.dropped, 0);
    for (int slotCount : {1, 2, 8}) {
        k3::LaunchConfig o;
        o.modelDir = dir;
        k3::LaunchDiagnostics d;
        d.expertCacheSlots = slotCount;
        const k3::Model m = k3::Model::load(o, d);
        // 2880 bytes an expert, but some expert's aligned read window straddles a 4 KB
        // boundary: two pages.
        QCOMPARE(m.memoryPlan().expertSlotBytes, std::uint64_t(8192));
        QCOMPARE(m.memoryPlan().residentExpertBytes, std::uint64_t(0));
        const Run r = greedy(m, prompt, int(want.size()));
        QCOMPARE(r.ids, want);
        QCOMPARE(r.dropped, 0);
        QVERIFY(std::memcmp(r.lastLogits.data(), ref.lastLogits.data(),
                            r.lastLogits.size() * sizeof(float)) == 0);
        QVERIFY(m.memoryStats().cache.requests > 0);
    }
}

void TestMemoryModel::failedExpertReadInvalidatesRun() {
    const std::string dir = modelDir("k3_tiny_b").toStdString();
    k3::LaunchConfig o;
    o.modelDir = dir;
    k3::LaunchDiagnostics d;
    d.expertCacheSlots = 2;
    std::atomic<int> faults{0}; // called from the cache's reader threads
    k3::FaultRule rule;         // the engine's one fault hook, narrowed to some experts
    rule.kind = k3::IoKind::Expert;
    rule.expertFilter = [&faults](int layer, int expert) {
        const bool fail = layer == 3 && expert % 2 == 0;
        faults += fail ? 1 : 0;
        return fail;
    };
    const k3::ScopedFault armed(rule);
    const k3::Model m = k3::Model::load(o, d);
    std::vector<float> logits(std::size_t(m.config().vocabSize));
    k3::InferenceState st = m.newState();
    const k3::TokenStats ts = m.forward(st, 5, logits);
    QVERIFY(faults > 0);
    QVERIFY(ts.droppedExperts > 0); // never a silent token
    QVERIFY(m.memoryStats().cache.failedReads > 0);

    // Through a Session: the result says invalid and still carries every figure.
    k3::LaunchConfig so;
    so.modelDir = dir;
    k3::LaunchDiagnostics sd;
    sd.loadTokenizer = false;
    sd.expertCacheSlots = 2;
    k3::Session session = k3::Session::open(so, sd);
    const std::vector<k3::TokenId> prompt{5, 6, 7};
    k3::GenerateOptions go;
    go.maxTokens = 3;
    const k3::GenerateResult r = session.generateIds(prompt, go);
    QVERIFY(!r.valid());
    QCOMPARE(int(r.ids.size()), 3);
    QVERIFY(session.memoryReport().cache.failedReads > 0);
}

void TestMemoryModel::staleTrunkIsRefused() {
    QTemporaryDir tmp;
    const QString src = modelDir("k3_tiny_b");
    const QString copy = tmp.filePath(QStringLiteral("model"));
    QDir().mkpath(copy);
    for (const QString& f : QDir(src).entryList(QDir::Files))
        QVERIFY(QFile::copy(src + QLatin1Char('/') + f, copy + QLatin1Char('/') + f));
    const std::string trunk = tmp.filePath(QStringLiteral("trunk")).toStdString();
    k3::packTrunk(copy.toStdString(), trunk);
    QVERIFY(k3::trunkIsCurrent(trunk, copy.toStdString()));
    {
        std::ofstream cfg((copy + QStringLiteral("/config.json")).toStdString(), std::ios::app);
        cfg << "\n";
    }
    k3::LaunchConfig o;
    o.modelDir = copy.toStdString();
    o.trunkDir = trunk;
    try {
        k3::Model::load(o);
        QFAIL("a stale trunk was accepted");
    } catch (const k3::StaleTrunkError& e) {
        QVERIFY2(std::string(e.what()).find("config.json changed") != std::string::npos, e.what());
    }
}

void TestMemoryModel::sessionReportsMemory() {
    const std::string dir = modelDir("k3_tiny_a").toStdString();
    QTemporaryDir tmp;
    const std::string trunk = tmp.filePath(QStringLiteral("trunk")).toStdString();
    k3::packTrunk(dir, trunk);
    k3::LaunchConfig so;
    so.modelDir = dir;
    so.trunkDir = trunk;
    so.budget.trunkBytes =
        1; // smaller than one layer's piece: refused with numbers (0 asks for the smallest ring)
    k3::LaunchDiagnostics sd;
    sd.loadTokenizer = false;
    try {
        k3::Session::open(so, sd);
        QFAIL("a trunk budget below one layer was accepted");
    } catch (const k3::MemoryRefusal& e) {
        QVERIFY2(std::string(e.what()).find("cannot hold one ring slot") != std::string::npos,
                 e.what());
    }
    so.budget.trunkBytes = 3ull << 20;
    sd.expertCacheSlots = 4;
    k3::Session s = k3::Session::open(so, sd);
    struct Obs : k3::SessionObserver {
        std::vector<k3::TokenEvent> tokens;
        void onToken(const k3::TokenEvent& e) override { tokens.push_back(e); }
    } obs;
    const std::vector<k3::TokenId> prompt{3, 4, 5};
    k3::GenerateOptions go;
    go.maxTokens = 4;
    const auto r = s.generateIds(prompt, go, &obs);
    QVERIFY(r.valid());
    QCOMPARE(int(obs.tokens.size()), 4);
    const k3::MemoryReport rep = s.memoryReport();
    QVERIFY(rep.plan.total() > 0);
    QCOMPARE(rep.plan.cacheSlots, 4);
    QVERIFY(rep.trunk.bytesRead > 0);
    QVERIFY(rep.cache.requests > 0);
    QVERIFY(rep.peakRssBytes > 0);
    // Honest figures (issue 29): only TRUE hits were served without a read; an expert
    // shared by the 3 prompt positions is chunk reuse, reported apart.
    const k3::ModelConfig& c = s.config();
    int moeLayers = 0;
    for (const auto& l : c.layers) moeLayers += l.mlp == k3::MlpKind::Moe;
    // 3 prompt positions and 3 fed tokens (the 4th is sampled, never fed), each position
    // choosing top-k experts in every MoE layer.
    QCOMPARE(rep.cache.positionUses, std::uint64_t(6 * moeLayers * c.numExpertsPerToken));
    QCOMPARE(rep.cache.residentHits + rep.cache.prefetchHits + rep.cache.misses,
             rep.cache.requests);
    QCOMPARE(rep.cache.chunkReuse(), rep.cache.positionUses - rep.cache.requests);
    QVERIFY(rep.cache.chunkReuse() > 0); // 3 positions of a 12-expert top-4 layer share some
    const std::string text = rep.format();
    QVERIFY2(text.find("TRUE hits    : " + std::to_string(rep.cache.residentHits) + " (") !=
                 std::string::npos,
             text.c_str());
    QVERIFY2(text.find(std::to_string(rep.cache.chunkReuse()) + " of them chunk reuse") !=
                 std::string::npos,
             text.c_str());
    QVERIFY2(text.find("expert I/O   : " + rep.expertIo.mode + ", up to 16 reads in flight") !=
                 std::string::npos,
             text.c_str());
    // No flattering "hits N (100%)" counting the batch's own reads as hits.
    QVERIFY(text.find("hits " + std::to_string(rep.cache.hits) + " (") == std::string::npos);
}

void TestMemoryModel::sameBitsThroughEveryExpertReader_data() {
    QTest::addColumn<QString>("name");
    QTest::newRow("k3_tiny_a") << QStringLiteral("k3_tiny_a");
    QTest::newRow("k3_tiny_b") << QStringLiteral("k3_tiny_b");
}

// Issue 29: the experts a layer needs are read several at a time (io_uring, or the
// thread pool K3_EXPERT_IO=threads forces) while the layer computes on those already
// in memory. Either way, at every cache budget: the resident run's ids and logits, bit
// for bit, and the same cache counters (the cache evolves the same whichever read ends
// first). The prompt goes in as one chunk (its union of experts in one batch), then
// one position at a time.
void TestMemoryModel::sameBitsThroughEveryExpertReader() {
    QFETCH(QString, name);
    const std::string dir = modelDir(name.toUtf8().constData()).toStdString();
    std::ifstream in(dir + "/expected.json");
    auto prompt = json::parse(in).at("prompt_ids").get<std::vector<int>>();
    prompt.resize(std::min<std::size_t>(prompt.size(), 12));
    auto run = [&](const k3::Model& m) {
        Run r;
        std::vector<float> logits(std::size_t(m.config().vocabSize));
        k3::InferenceState st = m.newState();
        r.dropped += m.forward(st, std::span<const int>(prompt), logits).droppedExperts;
        for (int i = 0; i < 6; ++i) {
            r.ids.push_back(k3::argmax(logits));
            r.dropped += m.forward(st, r.ids.back(), logits).droppedExperts;
        }
        r.lastLogits = logits;
        return r;
    };
    const k3::Model resident = k3::Model::load({.modelDir = dir});
    const Run ref = run(resident);
    QCOMPARE(ref.dropped, 0);
    const k3::ModelConfig& c = resident.config();
    int moeLayers = 0;
    for (const auto& l : c.layers) moeLayers += l.mlp == k3::MlpKind::Moe;
    std::vector<QByteArray> readers{"threads"};
    {
        qputenv("K3_EXPERT_IO", "uring");
        k3::LaunchDiagnostics d;
        d.expertCacheSlots = 1;
        try {
            (void)k3::Model::load({.modelDir = dir}, d);
            readers.push_back("uring");
        } catch (const std::exception& e) {
            std::printf("io_uring not available here (%s): threads only\n", e.what());
        }
    }
    for (int capacity :
         {1, c.numExpertsPerToken, 3 * c.numExpertsPerToken, c.numExperts * moeLayers}) {
        std::vector<k3::CacheStats> stats;
        for (const QByteArray& reader : readers) {
            qputenv("K3_EXPERT_IO", reader);
            k3::LaunchDiagnostics d;
            d.expertCacheSlots = capacity;
            const k3::Model m = k3::Model::load({.modelDir = dir}, d);
            QCOMPARE(m.memoryStats().expertIo.mode, reader.toStdString());
            const Run r = run(m);
            const QByteArray what = reader + " at " + QByteArray::number(capacity) + " slots";
            QCOMPARE(r.dropped, 0);
            QVERIFY2(r.ids == ref.ids, what.constData());
            QVERIFY2(std::memcmp(r.lastLogits.data(), ref.lastLogits.data(),
                                 r.lastLogits.size() * sizeof(float)) == 0,
                     what.constData());
            stats.push_back(m.memoryStats().cache);
        }
        for (const k3::CacheStats& s : stats) {
            QCOMPARE(s.requests, stats[0].requests);
            QCOMPARE(s.residentHits, stats[0].residentHits);
            QCOMPARE(s.prefetchHits, stats[0].prefetchHits);
            QCOMPARE(s.misses, stats[0].misses);
            QCOMPARE(s.evictions, stats[0].evictions);
            QCOMPARE(s.bytesRead, stats[0].bytesRead);
            QCOMPARE(s.positionUses, std::uint64_t((prompt.size() + 6) * std::size_t(moeLayers) *
                                                   std::size_t(c.numExpertsPerToken)));
        }
    }
    qunsetenv("K3_EXPERT_IO");
}

QTEST_GUILESS_MAIN(TestMemoryModel)
#include "tst_memory_model.moc"
