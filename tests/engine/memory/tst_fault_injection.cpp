// The fault-injection test hook (k3/fault_injection.hpp) and what each injected fault
// must lead to: an invalid run that still finishes (expert reads), an error naming the
// layer (trunk reads), no trunk that later looks valid (ENOSPC while packing), a clear
// error for a shard truncated after indexing, and an intact transcript (ENOSPC).
#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <unistd.h>

#include <k3/aligned_io.hpp>
#include <k3/chat.hpp>
#include <k3/fault_injection.hpp>
#include <k3/model.hpp>
#include <k3/pack.hpp>
#include <k3/safetensors.hpp>
#include <k3/session.hpp>
#include <k3/trunk.hpp>

namespace fs = std::filesystem;

namespace {

QString modelDir(const char* name) {
    return QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/") + QLatin1String(name);
}

// A writable copy of a tiny checkpoint (the truncation tests damage it).
QString copyModel(const QTemporaryDir& tmp, const char* name) {
    const QString src = modelDir(name);
    const QString copy = tmp.filePath(QStringLiteral("model"));
    QDir().mkpath(copy);
    for (const QString& f : QDir(src).entryList(QDir::Files))
        if (!QFile::copy(src + QLatin1Char('/') + f, copy + QLatin1Char('/') + f)) return {};
    return copy;
}

std::string what(const std::function<void()>& f) {
    try {
        f();
    } catch (const std::exception& e) {
        return e.what();
    }
    return "(no exception)";
}

bool has(const std::string& text, const char* part) {
    return text.find(part) != std::string::npos;
}

k3::FaultRule rule(k3::IoKind kind, k3::IoFault error, std::uint64_t after = 0) {
    k3::FaultRule r;
    r.kind = kind;
    r.error = error;
    r.after = after;
    return r;
}

// A greedy run of 3 tokens through a 2-slot expert cache.
k3::GenerateResult cachedRun(const std::string& dir) {
    k3::LaunchConfig so;
    so.modelDir = dir;
    k3::LaunchDiagnostics sd;
    sd.loadTokenizer = false;
    sd.expertCacheSlots = 2;
    k3::Session session = k3::Session::open(so, sd);
    const std::vector<k3::TokenId> prompt{5, 6, 7};
    k3::GenerateOptions go;
    go.maxTokens = 3;
    k3::GenerateResult r = session.generateIds(prompt, go);
    if (session.memoryReport().cache.failedReads < std::uint64_t(r.droppedExperts))
        r.problems.push_back("fewer failed reads than dropped experts");
    return r;
}

} // namespace

class TestFaultInjection : public QObject {
    Q_OBJECT
private slots:
    void cleanup() { k3::disarmFault(); }
    void parsesTheEnvironmentGrammar();
    void refusesAMalformedRule();
    void alignedFileActsOutEioAndShortRead();
    void expertReadFaultsInvalidateTheRun_data();
    void expertReadFaultsInvalidateTheRun();
    void trunkReadFaultNamesTheLayer();
    void oneTransientTrunkFaultNeverChangesALogit();
    void packOutOfSpaceKeepsTheOldTrunk();
    void packOutOfSpaceOnTheIndexKeepsTheOldTrunk();
    void shardTruncatedAfterIndexingIsAClearError();
    void trunkTruncatedAfterLoadNamesTheLayer();
    void transcriptOutOfSpaceKeepsThePreviousFile();
};

void TestFaultInjection::parsesTheEnvironmentGrammar() {
    const k3::FaultRule r =
        k3::parseFaultRule("kind:expert,error:short,after:3,times:2,path:00002,layer:1,expert:4");
    QCOMPARE(int(r.kind), int(k3::IoKind::Expert));
    QCOMPARE(int(r.error), int(k3::IoFault::ShortRead));
    QCOMPARE(r.after, std::uint64_t(3));
    QCOMPARE(r.times, std::uint64_t(2));
    QCOMPARE(r.pathContains, std::string("00002"));
    QCOMPARE(r.layer, 1);
    QCOMPARE(r.expert, 4);
    const k3::FaultRule d = k3::parseFaultRule("kind:pack,error:enospc");
    QCOMPARE(int(d.kind), int(k3::IoKind::Pack));
    QCOMPARE(int(d.error), int(k3::IoFault::NoSpace));
    QCOMPARE(d.after, std::uint64_t(0));
    QCOMPARE(k3::describeFaultRule(d), std::string("enospc on pack I/O, after 0 operation(s)"));
}

void TestFaultInjection::refusesAMalformedRule() {
    QVERIFY(has(what([] { k3::parseFaultRule("kind:disk"); }), "unknown kind \"disk\""));
    QVERIFY(
        has(what([] { k3::parseFaultRule("kind:expert,error:boom"); }), "unknown error \"boom\""));
    QVERIFY(has(what([] { k3::parseFaultRule("kind:expert,after:x"); }), "\"after:x\""));
    QVERIFY(has(what([] { k3::parseFaultRule("error:eio"); }), "no kind"));
    QVERIFY(
        has(what([] { k3::parseFaultRule("kind:expert,often"); }), "\"often\" is not KEY:VALUE"));
    QVERIFY(!k3::faultsArmed());
}

void TestFaultInjection::alignedFileActsOutEioAndShortRead() {
    QTemporaryDir tmp;
    const std::string path = tmp.filePath(QStringLiteral("data.bin")).toStdString();
    {
        std::ofstream out(path, std::ios::binary);
        for (int i = 0; i < 3 * 4096; ++i) out.put(char(i * 7));
    }
    const k3::AlignedFile f(path);
    QCOMPARE(int(f.kind()), int(k3::IoKind::Shard));
    std::vector<char> buf(100);
    {
        const k3::ScopedFault armed(rule(k3::IoKind::Shard, k3::IoFault::Eio, 1));
        f.read(10, buf.data(), buf.size()); // the first matching read passes
        QCOMPARE(buf[0], char(70));
        const std::string e = what([&] { f.read(5000, buf.data(), buf.size()); });
        QVERIFY2(has(e, "data.bin: read error at offset") && has(e, "Input/output error"),
                 e.c_str());
        QCOMPARE(k3::faultsInjected(), std::uint64_t(1));
    }
    {
        const k3::ScopedFault armed(rule(k3::IoKind::Shard, k3::IoFault::ShortRead));
        const std::string e = what([&] { f.read(5000, buf.data(), buf.size()); });
        QVERIFY2(has(e, "data.bin: short read at offset"), e.c_str());
        alignas(4096) static char window[4096];
        const k3::ScopedFault again(rule(k3::IoKind::Shard, k3::IoFault::ShortRead));
        QCOMPARE(f.readWindow(4096, window, 4096), std::size_t(0)); // the caller sees it short
    }
    {
        // Another kind, another file, or times used up: nothing is injected.
        const k3::ScopedFault trunkOnly(rule(k3::IoKind::Trunk, k3::IoFault::Eio));
        f.read(0, buf.data(), buf.size());
        k3::FaultRule other = rule(k3::IoKind::Any, k3::IoFault::Eio);
        other.pathContains = "trunk.bin";
        const k3::ScopedFault otherFile(std::move(other));
        f.read(0, buf.data(), buf.size());
        k3::FaultRule once = rule(k3::IoKind::Shard, k3::IoFault::Eio);
        once.times = 1;
        const k3::ScopedFault onlyOnce(std::move(once));
        QVERIFY(has(what([&] { f.read(0, buf.data(), buf.size()); }), "Input/output error"));
        f.read(0, buf.data(), buf.size());
        QCOMPARE(k3::faultsInjected(), std::uint64_t(1));
    }
    QVERIFY(!k3::faultsArmed());
}

void TestFaultInjection::expertReadFaultsInvalidateTheRun_data() {
    QTest::addColumn<int>("error");
    QTest::newRow("eio") << int(k3::IoFault::Eio);
    QTest::newRow("short read") << int(k3::IoFault::ShortRead);
}

// The run finishes every token it was asked for, and says it is invalid.
void TestFaultInjection::expertReadFaultsInvalidateTheRun() {
    QFETCH(int, error);
    const std::string dir = modelDir("k3_tiny_b").toStdString();
    const k3::GenerateResult clean = cachedRun(dir);
    QVERIFY(clean.valid());
    QCOMPARE(clean.droppedExperts, 0);

    const k3::ScopedFault armed(rule(k3::IoKind::Expert, k3::IoFault(error), 3));
    const k3::GenerateResult r = cachedRun(dir);
    QVERIFY(k3::faultsInjected() > 0);
    QVERIFY(!r.valid());
    QVERIFY(r.droppedExperts > 0);
    // A dropped expert may have failed twice (its batch read, then the retry on request).
    QVERIFY(std::uint64_t(r.droppedExperts) <= k3::faultsInjected());
    QCOMPARE(int(r.ids.size()), 3);
    QVERIFY2(r.problems.empty(), r.problems.empty() ? "" : r.problems[0].c_str());
}

void TestFaultInjection::trunkReadFaultNamesTheLayer() {
    QTemporaryDir tmp;
    const std::string dir = modelDir("k3_tiny_b").toStdString();
    const std::string trunk = tmp.filePath(QStringLiteral("trunk")).toStdString();
    k3::packTrunk(dir, trunk);
    k3::LaunchConfig o;
    o.modelDir = dir;
    o.trunkDir = trunk;
    {
        // Everything pinned: the first trunk read at load is layer 0's.
        const k3::ScopedFault armed(rule(k3::IoKind::Trunk, k3::IoFault::Eio));
        const std::string e = what([&] { k3::Model::load(o); });
        QVERIFY2(has(e, "trunk layer 0: ") && has(e, "trunk.bin: read error") &&
                     has(e, "Input/output error"),
                 e.c_str());
    }
    // Nothing pinned: the layers stream during the forward; the error names the layer.
    const k3::TrunkIndex idx = k3::openTrunkIndex(trunk, dir);
    o.budget.trunkBytes = 2 * k3::alignUp(idx.largestLayerBytes());
    const k3::Model m = k3::Model::load(o);
    QCOMPARE(m.memoryStats().trunk.pinnedLayers, 0);
    std::vector<float> logits(std::size_t(m.config().vocabSize));
    k3::InferenceState st = m.newState();
    m.forward(st, 5, logits); // reads layers 0..n-1 once
    // Every trunk read after the first two comes back short. A failed read-ahead is read
    // again when its layer is needed (a transient error heals), so how many reads fail
    // before the error reaches the forward depends on timing: one or two.
    const k3::ScopedFault armed(rule(k3::IoKind::Trunk, k3::IoFault::ShortRead, 2));
    const std::string e = what([&] {
        for (int i = 0; i < 3; ++i) m.forward(st, 6, logits);
    });
    QVERIFY2(has(e, "trunk layer ") && has(e, "short read from") && has(e, "trunk.bin"), e.c_str());
    QVERIFY(k3::faultsInjected() >= 1 && k3::faultsInjected() <= 2);
}

// One failed trunk read (times = 1) is either a read-ahead that is read again when its
// layer is needed, or the error above: never a wrong logit.
void TestFaultInjection::oneTransientTrunkFaultNeverChangesALogit() {
    QTemporaryDir tmp;
    const std::string dir = modelDir("k3_tiny_b").toStdString();
    const std::string trunk = tmp.filePath(QStringLiteral("trunk")).toStdString();
    k3::packTrunk(dir, trunk);
    k3::LaunchConfig o;
    o.modelDir = dir;
    o.trunkDir = trunk;
    o.budget.trunkBytes = 2 * k3::alignUp(k3::openTrunkIndex(trunk, dir).largestLayerBytes());
    const auto run = [&](bool fault) {
        const k3::Model m = k3::Model::load(o);
        std::vector<float> logits(std::size_t(m.config().vocabSize));
        k3::InferenceState st = m.newState();
        m.forward(st, 5, logits);
        k3::FaultRule once = rule(k3::IoKind::Trunk, k3::IoFault::ShortRead, 2);
        once.times = 1;
        std::optional<k3::ScopedFault> armed;
        if (fault) armed.emplace(once);
        for (int i = 0; i < 3; ++i) m.forward(st, 6 + i, logits);
        return logits;
    };
    const std::vector<float> clean = run(false);
    for (int attempt = 0; attempt < 5; ++attempt) {
        std::vector<float> faulted;
        try {
            faulted = run(true);
        } catch (const std::exception& e) {
            QVERIFY2(has(e.what(), "trunk layer ") && has(e.what(), "short read from"), e.what());
            continue; // the fault hit the read the forward was waiting for: a clear error
        }
        QCOMPARE(k3::faultsInjected(), std::uint64_t(1));
        QVERIFY(std::memcmp(faulted.data(), clean.data(), clean.size() * sizeof(float)) == 0);
    }
}

// A re-pack that fails writes nothing the old trunk uses: it stays current and loads.
void TestFaultInjection::packOutOfSpaceKeepsTheOldTrunk() {
    QTemporaryDir tmp;
    const std::string dir = modelDir("k3_tiny_b").toStdString();
    const QString trunk = tmp.filePath(QStringLiteral("trunk"));
    k3::packTrunk(dir, trunk.toStdString());
    QVERIFY(k3::trunkIsCurrent(trunk.toStdString(), dir));
    const QStringList files = QDir(trunk).entryList(QDir::Files | QDir::Hidden);
    {
        const k3::ScopedFault armed(rule(k3::IoKind::Pack, k3::IoFault::NoSpace, 3));
        const std::string e = what([&] { k3::packTrunk(dir, trunk.toStdString()); });
        QVERIFY2(has(e, "trunk.bin.partial: write failed at offset") &&
                     has(e, "No space left on device"),
                 e.c_str());
    }
    QCOMPARE(QDir(trunk).entryList(QDir::Files | QDir::Hidden), files);
    QVERIFY(k3::trunkIsCurrent(trunk.toStdString(), dir));
    k3::LaunchConfig o;
    o.modelDir = dir;
    o.trunkDir = trunk.toStdString();
    QCOMPARE(what([&] { k3::Model::load(o); }), std::string("(no exception)"));
}

// trunk.json is staged (the one atomic-write helper) before anything is renamed: when it
// cannot be written, the new trunk.bin is removed too and the old trunk stays.
void TestFaultInjection::packOutOfSpaceOnTheIndexKeepsTheOldTrunk() {
    QTemporaryDir tmp;
    const std::string dir = modelDir("k3_tiny_b").toStdString();
    const QString trunk = tmp.filePath(QStringLiteral("trunk"));
    k3::packTrunk(dir, trunk.toStdString());
    const QStringList files = QDir(trunk).entryList(QDir::Files | QDir::Hidden);
    k3::FaultRule r = rule(k3::IoKind::File, k3::IoFault::NoSpace);
    r.pathContains = "trunk.json";
    {
        const k3::ScopedFault armed(std::move(r));
        const std::string e = what([&] { k3::packTrunk(dir, trunk.toStdString()); });
        QVERIFY2(
            has(e,
                ("cannot write " + trunk.toStdString() + "/trunk.json.next: writing ").c_str()) &&
                has(e, "No space left on device"),
            e.c_str());
    }
    QCOMPARE(QDir(trunk).entryList(QDir::Files | QDir::Hidden), files);
    QVERIFY(k3::trunkIsCurrent(trunk.toStdString(), dir));
}

void TestFaultInjection::shardTruncatedAfterIndexingIsAClearError() {
    QTemporaryDir tmp;
    const QString dir = copyModel(tmp, "k3_tiny_b");
    QVERIFY(!dir.isEmpty());
    const k3::Checkpoint ckpt = k3::Checkpoint::open(dir.toStdString());
    const std::string name = "language_model.lm_head.weight";
    const k3::TensorInfo& t = ckpt.at(name);
    const fs::path shard = ckpt.shardPaths()[t.shard];
    QVERIFY(ckpt.readRaw(name).size() == t.nbytes); // indexed and readable
    QCOMPARE(::truncate(shard.c_str(), off_t(t.offset + t.nbytes / 2)), 0);
    const std::string e = what([&] { ckpt.readRaw(name); });
    QVERIFY2(has(e, shard.filename().c_str()) && has(e, "short read at offset") &&
                 has(e, "truncated?"),
             e.c_str());
}

// Routed experts read through the cache from a shard cut short after the model loaded:
// every token still comes, the run is invalid (never a token from missing bytes).
void TestFaultInjection::trunkTruncatedAfterLoadNamesTheLayer() {
    QTemporaryDir tmp;
    const QString dir = copyModel(tmp, "k3_tiny_b");
    QVERIFY(!dir.isEmpty());
    const std::string trunk = tmp.filePath(QStringLiteral("trunk")).toStdString();
    k3::packTrunk(dir.toStdString(), trunk);
    const k3::TrunkIndex idx = k3::openTrunkIndex(trunk, dir.toStdString());
    k3::LaunchConfig o;
    o.modelDir = dir.toStdString();
    o.trunkDir = trunk;
    o.budget.trunkBytes = 2 * k3::alignUp(idx.largestLayerBytes()); // every layer streams
    k3::LaunchDiagnostics d;
    d.expertCacheSlots = 2;
    const k3::Model m = k3::Model::load(o, d);
    const int last = int(idx.layers.size()) - 1;
    QCOMPARE(::truncate(idx.binPath.c_str(), off_t(idx.layers[std::size_t(last)].offset)), 0);
    std::vector<float> logits(std::size_t(m.config().vocabSize));
    k3::InferenceState st = m.newState();
    const std::string e = what([&] { m.forward(st, 5, logits); });
    QVERIFY2(has(e, ("trunk layer " + std::to_string(last) + ": short read").c_str()) &&
                 has(e, "truncated trunk.bin? re-pack it"),
             e.c_str());

    // The same for the experts' shard: the cache's reads come up short, the run is invalid.
    const k3::Model m2 = [&] {
        k3::LaunchConfig o2;
        o2.modelDir = dir.toStdString();
        k3::LaunchDiagnostics d2;
        d2.expertCacheSlots = 2;
        return k3::Model::load(o2, d2);
    }();
    const k3::Checkpoint ckpt = k3::Checkpoint::open(dir.toStdString());
    int moeLayer = -1;
    for (int L = 0; L < m2.config().numHiddenLayers && moeLayer < 0; ++L)
        if (m2.config().layers[std::size_t(L)].mlp == k3::MlpKind::Moe) moeLayer = L;
    QVERIFY(moeLayer >= 0);
    const k3::TensorInfo& first =
        ckpt.at("language_model.model.layers." + std::to_string(moeLayer) +
                ".block_sparse_moe.experts.0.w1.weight_packed");
    QCOMPARE(::truncate(ckpt.shardPaths()[first.shard].c_str(), off_t(first.offset)), 0);
    k3::InferenceState st2 = m2.newState();
    const k3::TokenStats ts = m2.forward(st2, 5, logits);
    QVERIFY(ts.droppedExperts > 0);
    QVERIFY(m2.memoryStats().cache.failedReads > 0);
}

void TestFaultInjection::transcriptOutOfSpaceKeepsThePreviousFile() {
    QTemporaryDir tmp;
    const std::string path = tmp.filePath(QStringLiteral("chat.jsonl")).toStdString();
    const std::vector<k3::ChatMessage> before{{k3::ChatRole::User, "hi", {}, {}},
                                              {k3::ChatRole::Assistant, "hello", "", {}}};
    k3::writeTranscript(path, before);
    std::vector<k3::ChatMessage> after = before;
    after.push_back({k3::ChatRole::User, "more", {}, {}});
    {
        const k3::ScopedFault armed(rule(k3::IoKind::Transcript, k3::IoFault::NoSpace));
        const std::string e = what([&] { k3::writeTranscript(path, after); });
        QVERIFY2(has(e, ("cannot write " + path).c_str()) && has(e, "No space left on device"),
                 e.c_str());
        // Other atomic writes (run.json) are kind "file", not "transcript".
        k3::writeFileAtomically(tmp.filePath(QStringLiteral("run.json")).toStdString(), "{}\n");
    }
    QCOMPARE(k3::readTranscript(path), before);
    QCOMPARE(QDir(tmp.path()).entryList(QDir::Files | QDir::Hidden).size(), 2); // no temp left
}

QTEST_GUILESS_MAIN(TestFaultInjection)
#include "tst_fault_injection.moc"
