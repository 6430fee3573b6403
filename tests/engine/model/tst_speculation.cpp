// Exact greedy speculation: a verification chunk rolled back to any accepted length
// leaves exactly the state a plain forward would (KDA replayed, MLA truncated), so the
// ids equal serial greedy decode at every width, budget and proposal outcome.
#include <QTemporaryDir>
#include <QTest>

#include <atomic>
#include <cmath>
#include <cstring>

#include <k3/model.hpp>
#include <k3/pack.hpp>
#include <k3/session.hpp>
#include <k3/speculation.hpp>

namespace {

std::string fixture(const char* name) {
    if (std::strcmp(name, "demo") == 0) return K3_SOURCE_DIR "/resources/demo";
    return std::string(K3_SOURCE_DIR "/tests/fixtures/models/") + name;
}

// A prompt that repeats itself, so prompt lookup has something to propose.
std::vector<k3::TokenId> repeatingPrompt(int vocab) {
    std::vector<k3::TokenId> base;
    for (int i = 0; i < 9; ++i) base.push_back((i * 41 + 5) % vocab);
    std::vector<k3::TokenId> p;
    for (int r = 0; r < 3; ++r) p.insert(p.end(), base.begin(), base.end());
    return p;
}

std::vector<float> logitsAfter(const k3::Model& m, k3::InferenceState& st, int id) {
    std::vector<float> l(std::size_t(m.config().vocabSize));
    m.forward(st, id, l);
    return l;
}

bool same(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

k3::GenerateResult run(k3::Session& s, const std::vector<k3::TokenId>& prompt, int n, int spec,
                       k3::SessionObserver* obs = nullptr, std::atomic<bool>* cancel = nullptr) {
    k3::GenerateOptions o;
    o.maxTokens = n;
    o.speculation = spec;
    return s.generateIds(prompt, o, obs, cancel);
}

k3::Session open(const std::string& dir, const std::string& trunk = {},
                 std::uint64_t trunkBytes = 0, int slotCount = 0) {
    k3::LaunchConfig o;
    o.modelDir = dir;
    k3::LaunchDiagnostics d;
    d.loadTokenizer = false;
    if (!trunk.empty()) {
        o.trunkDir = trunk;
        o.budget.trunkBytes = trunkBytes;
    }
    d.expertCacheSlots = slotCount;
    return k3::Session::open(o, d);
}

} // namespace

class TestSpeculation : public QObject {
    Q_OBJECT
private slots:
    void promptLookupProposesWhatFollowed();
    void widthAdapts();
    void timedWidthKeepsLossesInBudget();
    void rollbackGivesThePlainState_data();
    void rollbackGivesThePlainState();
    void rejectedFirstMiddleAndLast();
    void everyProposalRejectedBacksOffToSerial();
    void sameIdsAsSerial_data();
    void sameIdsAsSerial();
    void cancelBetweenPasses();
};

void TestSpeculation::promptLookupProposesWhatFollowed() {
    const std::vector<k3::TokenId> h{1, 2, 3, 4, 9, 7, 1, 2, 3};
    QCOMPARE(k3::proposePromptLookup(h, 3), (std::vector<k3::TokenId>{4, 9, 7}));
    QCOMPARE(k3::proposePromptLookup(h, 1), (std::vector<k3::TokenId>{4}));
    // The latest earlier match wins, and the longest n first.
    const std::vector<k3::TokenId> h2{5, 6, 8, 0, 5, 6, 9, 0, 5, 6};
    QCOMPARE(k3::proposePromptLookup(h2, 2), (std::vector<k3::TokenId>{9, 0}));
    const std::vector<k3::TokenId> h3{1, 2, 3, 4, 5};
    QVERIFY(k3::proposePromptLookup(h3, 4).empty());
    QVERIFY(k3::proposePromptLookup(h, 0).empty());
    // A match near the end proposes only what exists after it.
    const std::vector<k3::TokenId> h4{7, 7, 7};
    QCOMPARE(k3::proposePromptLookup(h4, 5), (std::vector<k3::TokenId>{7}));
}

void TestSpeculation::widthAdapts() {
    k3::SpeculationWidth w(16, 4);
    QCOMPARE(w.width(), 4);
    w.record(4, 4);
    QCOMPARE(w.width(), 8);
    w.record(8, 8);
    w.record(16, 16);
    QCOMPARE(w.width(), 16); // capped
    w.record(16, 3);         // partly accepted: kept
    QCOMPARE(w.width(), 16);
    QVERIFY(w.propose());
    w.record(16, 0);
    QCOMPARE(w.width(), 8);
    // A fully rejected pass: no proposals for 2 steps, then 4 after the next one, ...
    QVERIFY(!w.propose());
    QVERIFY(!w.propose());
    QVERIFY(w.propose());
    w.record(8, 0);
    for (int i = 0; i < 4; ++i) QVERIFY(!w.propose());
    QVERIFY(w.propose());
    for (int i = 0; i < 6; ++i) {
        w.record(1, 0);
        while (!w.propose()) {
        }
    }
    QCOMPARE(w.width(), 1);
    w.record(1, 0); // at most 256 steps without proposals
    int idle = 0;
    while (!w.propose()) ++idle;
    QCOMPARE(idle, 256);
    w.record(1, 1); // an accepted guess ends the back-off
    QVERIFY(w.propose());
    w.record(2, 0);
    QVERIFY(!w.propose());
    QVERIFY(!w.propose());
    QVERIFY(w.propose());

    // Measured seconds: a pass slower per committed token than serial steps fails even
    // when its guesses held; one that pays grows the width.
    k3::SpeculationWidth t(16, 4);
    t.record(4, 4, 0.5); // no serial step measured yet: judged by acceptance only
    QCOMPARE(t.width(), 8);
    t.recordSerial(0.2);
    QCOMPARE(t.serialSeconds(), 0.2);
    t.recordSerial(0.4); // a moving average, 3/4 the old
    QCOMPARE(t.serialSeconds(), 0.25);
    t.record(8, 8, 0.2); // 0.2 s per token against 0.25 serial: pays
    QCOMPARE(t.width(), 16);
    QVERIFY(t.propose());
    t.record(16, 16, 0.3); // every guess held, but slower than serial decode
    QCOMPARE(t.width(), 8);
    QVERIFY(!t.propose());
    QVERIFY(!t.propose());
    QVERIFY(t.propose());
    t.record(8, 3, 0.26); // partly accepted and slower: a failure in a row, 4 idle steps
    QCOMPARE(t.width(), 4);
    for (int i = 0; i < 4; ++i) QVERIFY(!t.propose());
    QVERIFY(t.propose());
}

// Timed (greedy --spec auto): a serial step first, then the seconds lost against serial
// steps stay within 1% of the steps' seconds, after an allowance of one serial step.
void TestSpeculation::timedWidthKeepsLossesInBudget() {
    k3::SpeculationWidth t(16, 1, /*timed=*/true);
    QVERIFY(!t.propose()); // no serial step measured yet
    QCOMPARE(t.credit(), 0.0);
    t.recordSerial(1.0);
    QVERIFY(std::abs(t.credit() - 0.01) < 1e-12); // each step earns 1% of itself
    QVERIFY(t.propose());
    // Nothing accepted, 1.5 s for its one token: 0.5 lost, 0.015 earned.
    t.record(1, 0, 1.5);
    QCOMPARE(t.width(), 1);
    QVERIFY(std::abs(t.credit() - -0.475) < 1e-12);
    // The back-off (2 steps) passes inside the 48 serial steps that earn the loss back.
    int idle = 0;
    while (!t.propose()) {
        ++idle;
        t.recordSerial(1.0);
    }
    QCOMPARE(idle, 48);
    t.record(1, 1, 0.6); // paid: 2 tokens at 0.6 s, 0.8 saved
    QVERIFY(std::abs(t.credit() - (0.005 + 0.812)) < 1e-9);
    QCOMPARE(t.width(), 2);
    QVERIFY(t.propose());
    t.record(2, 2, 0.4);
    QCOMPARE(t.credit(), 1.0); // a good stretch does not bank more than one step
    QCOMPARE(t.width(), 4);
    // A long answer where nothing is accepted: 1000 steps of 1 s, every pass losing half a
    // step. Passes at steps 1, 50, 99, 148, 197 (the credit binds: ~49 steps each), then
    // 246, 310, 438, 694, 950 (back-offs of 64, 128, 256): 5 steps lost, 0.5%.
    k3::SpeculationWidth w(16, 1, /*timed=*/true);
    double lost = 0;
    int passes = 0;
    for (int step = 0; step < 1000; ++step) {
        if (w.propose()) {
            ++passes;
            lost += 0.5;
            w.record(1, 0, 1.5);
        } else {
            w.recordSerial(1.0);
        }
    }
    QCOMPARE(passes, 10);
    QCOMPARE(lost, 5.0);
}

void TestSpeculation::rollbackGivesThePlainState_data() {
    QTest::addColumn<QString>("name");
    QTest::newRow("k3_tiny_a") << QStringLiteral("k3_tiny_a");
    QTest::newRow("k3_tiny_b") << QStringLiteral("k3_tiny_b");
    QTest::newRow("demo") << QStringLiteral("demo");
}

// Across KDA and MLA layers: a chunk of 7 rolled back to every length, then the next
// position's logits equal those of a plain run that fed only that many.
void TestSpeculation::rollbackGivesThePlainState() {
    QFETCH(QString, name);
    const k3::Model m = k3::Model::load(fixture(name.toUtf8().constData()));
    const k3::ModelConfig& c = m.config();
    QVERIFY(c.countAttention(k3::AttentionKind::Kda) > 0);
    QVERIFY(c.countAttention(k3::AttentionKind::Mla) > 0);
    const std::size_t V = std::size_t(c.vocabSize);
    const std::vector<k3::TokenId> prompt = repeatingPrompt(c.vocabSize);
    const std::vector<int> chunk{11, 22, 33, 44, 55, 66, 77};
    k3::InferenceState base = m.newState();
    std::vector<float> l(V);
    m.forward(base, std::span<const int>(prompt.data(), 10), l);
    for (int keep = 0; keep <= int(chunk.size()); ++keep) {
        k3::InferenceState spec = base.clone();
        std::vector<float> all(chunk.size() * V);
        m.forward(spec, chunk, all, /*keepRollback=*/true);
        m.rollback(spec, 10 + keep);
        QCOMPARE(spec.length(), 10 + keep);
        k3::InferenceState plain = base.clone();
        for (int i = 0; i < keep; ++i) logitsAfter(m, plain, chunk[std::size_t(i)]);
        QCOMPARE(spec.cacheBytes(), plain.cacheBytes());
        // The next two positions from both states: the same bits.
        for (int id : {99, 100})
            QVERIFY2(same(logitsAfter(m, spec, id), logitsAfter(m, plain, id)),
                     qPrintable(QStringLiteral("kept %1").arg(keep)));
    }
    // Outside the recorded chunk, or a second time: refused.
    k3::InferenceState st = base.clone();
    std::vector<float> all(chunk.size() * V);
    m.forward(st, chunk, all, true);
    QVERIFY_THROWS_EXCEPTION(k3::ModelError, m.rollback(st, 9));
    QVERIFY_THROWS_EXCEPTION(k3::ModelError, m.rollback(st, 18));
    m.rollback(st, 12);
    QVERIFY_THROWS_EXCEPTION(k3::ModelError, m.rollback(st, 11));
}

// The verification step by hand with chosen proposals: wrong at the first token, in the
// middle and at the end; each time the committed ids are the serial ones.
void TestSpeculation::rejectedFirstMiddleAndLast() {
    const k3::Model m = k3::Model::load(fixture("k3_tiny_a"));
    const std::size_t V = std::size_t(m.config().vocabSize);
    const std::vector<k3::TokenId> prompt = repeatingPrompt(int(V));
    // Serial greedy: 8 ids.
    std::vector<int> serial;
    {
        k3::InferenceState st = m.newState();
        std::vector<float> l(V);
        m.forward(st, prompt, l);
        for (int i = 0; i < 8; ++i) {
            serial.push_back(k3::argmax(l));
            m.forward(st, serial.back(), l);
        }
    }
    const int wrong = (serial[1] + 1) % int(V);
    struct Case {
        const char* what;
        std::vector<int> proposals; // follow serial[0]
        int wantAccepted;
    };
    const std::vector<Case> cases{
        {"rejected at the first", {wrong, serial[2], serial[3]}, 0},
        {"rejected in the middle", {serial[1], wrong, serial[3]}, 1},
        {"rejected at the end", {serial[1], serial[2], (serial[3] + 1) % int(V)}, 2},
        {"all accepted", {serial[1], serial[2], serial[3]}, 3},
    };
    for (const Case& cs : cases) {
        k3::InferenceState st = m.newState();
        std::vector<float> l(V);
        m.forward(st, prompt, l);
        QCOMPARE(k3::argmax(l), serial[0]);
        std::vector<int> chunk{serial[0]};
        chunk.insert(chunk.end(), cs.proposals.begin(), cs.proposals.end());
        std::vector<float> all(chunk.size() * V);
        const int start = st.length();
        m.forward(st, chunk, all, true);
        int accepted = 0;
        while (accepted < 3 &&
               k3::argmax(std::span<const float>(all.data() + std::size_t(accepted) * V, V)) ==
                   cs.proposals[std::size_t(accepted)])
            ++accepted;
        QCOMPARE(accepted, cs.wantAccepted);
        m.rollback(st, start + 1 + accepted);
        std::vector<int> ids{serial[0]};
        for (int a = 0; a < accepted; ++a) ids.push_back(cs.proposals[std::size_t(a)]);
        std::copy_n(all.data() + std::size_t(accepted) * V, V, l.data());
        while (ids.size() < serial.size()) {
            ids.push_back(k3::argmax(l));
            m.forward(st, ids.back(), l);
        }
        QVERIFY2(ids == serial, cs.what);
    }
}

// The worst case bench_speculation measures: every proposal's first token is wrong. The
// ids stay serial's, and a fixed width backs off 2, 4, 8, 16, 32 steps after each failed
// pass, so 63 decode steps verify at steps 1, 4, 9, 18 and 35 only.
void TestSpeculation::everyProposalRejectedBacksOffToSerial() {
    k3::Session s = open(fixture("demo"));
    const int V = s.config().vocabSize;
    const std::vector<k3::TokenId> prompt = repeatingPrompt(V);
    const k3::GenerateResult serial = run(s, prompt, 64, 0);
    QCOMPARE(int(serial.ids.size()), 64);
    int filtered = 0;
    const k3::ProposalFilter reject = k3::rejectEveryProposal(serial.ids, prompt.size(), V);
    k3::setProposalFilterForBenchmarks(
        [&](std::span<const k3::TokenId> context, std::vector<k3::TokenId>& proposals) {
            reject(context, proposals);
            ++filtered;
        });
    k3::Session fresh = open(fixture("demo"));
    const k3::GenerateResult r = run(fresh, prompt, 64, 4);
    k3::setProposalFilterForBenchmarks({});
    QCOMPARE(r.ids, serial.ids);
    QCOMPARE(r.acceptedProposals, 0);
    QCOMPARE(filtered, 5);
    QCOMPARE(r.verifyPasses, 5);
    QCOMPARE(r.decodePasses, serial.decodePasses);
}

void TestSpeculation::sameIdsAsSerial_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<int>("budget"); // 0 resident, 1 streamed ring + 1 expert slot, 2 smallest ring
    for (const char* n : {"k3_tiny_a", "k3_tiny_b", "demo"})
        for (int b : {0, 1, 2})
            QTest::newRow(qPrintable(QStringLiteral("%1 budget %2").arg(QLatin1String(n)).arg(b)))
                << QString::fromLatin1(n) << b;
}

void TestSpeculation::sameIdsAsSerial() {
    QFETCH(QString, name);
    QFETCH(int, budget);
    const std::string dir = fixture(name.toUtf8().constData());
    QTemporaryDir tmp;
    std::string trunk;
    std::uint64_t trunkBytes = 0;
    if (budget > 0) {
        trunk = tmp.filePath(QStringLiteral("trunk")).toStdString();
        k3::packTrunk(dir, trunk);
        std::uint64_t largest = 0;
        for (const auto& r : k3::openTrunkIndex(trunk, dir).layers)
            largest = std::max(largest, r.bytes);
        trunkBytes = budget == 1 ? 2 * k3::alignUp(largest) : 0;
    }
    k3::Session serialSession = open(dir, trunk, trunkBytes, budget == 1 ? 1 : 0);
    const std::vector<k3::TokenId> prompt = repeatingPrompt(serialSession.config().vocabSize);
    const k3::GenerateResult serial = run(serialSession, prompt, 24, 0);
    QCOMPARE(serial.verifyPasses, 0);
    QCOMPARE(serial.decodePasses, 23); // the last id is never fed
    int acceptedSomewhere = 0;
    for (int width : {1, 2, 3, 8, 32, -1}) {
        k3::Session s = open(dir, trunk, trunkBytes, budget == 1 ? 1 : 0);
        const k3::GenerateResult r = run(s, prompt, 24, width);
        QVERIFY2(r.ids == serial.ids, qPrintable(QStringLiteral("width %1").arg(width)));
        QCOMPARE(r.droppedExperts, 0);
        QVERIFY(r.acceptedProposals <= r.proposed);
        // Each pass commits one token plus its accepted proposals: 23 fed ids (the last is
        // never fed) take 23 passes less one per accepted proposal that was fed.
        QVERIFY(r.decodePasses + r.acceptedProposals >= 23 &&
                r.decodePasses + r.acceptedProposals <= 24);
        QCOMPARE(r.verifyPasses > 0, r.proposed > 0);
        QCOMPARE(std::memcmp(s.lastLogits().data(), serialSession.lastLogits().data(),
                             s.lastLogits().size() * sizeof(float)),
                 0);
        QCOMPARE(s.positions(), serialSession.positions());
        acceptedSomewhere += r.acceptedProposals;
    }
    // The repeating prompt gives prompt lookup something to match. The trained demo model
    // goes on repeating it, so proposals are accepted there (the random tiny models do
    // not repeat: every pass is a rejection, the path the other rows cover).
    if (name == QLatin1String("demo")) QVERIFY(acceptedSomewhere >= 6);
    qInfo("%s budget %d: %d proposals accepted over the widths", qPrintable(name), budget,
          acceptedSomewhere);
}

// Cancel between passes: the ids so far are serial decode's, and the state matches them.
void TestSpeculation::cancelBetweenPasses() {
    struct Stopper : k3::SessionObserver {
        std::atomic<bool>* cancel = nullptr;
        int seen = 0;
        void onToken(const k3::TokenEvent&) override {
            if (++seen == 5) cancel->store(true);
        }
    };
    const std::string dir = fixture("demo");
    k3::Session plain = open(dir);
    const std::vector<k3::TokenId> prompt = repeatingPrompt(plain.config().vocabSize);
    const k3::GenerateResult serial = run(plain, prompt, 20, 0);
    k3::Session s = open(dir);
    std::atomic<bool> cancel{false};
    Stopper stop;
    stop.cancel = &cancel;
    const k3::GenerateResult r = run(s, prompt, 20, 8, &stop, &cancel);
    QVERIFY(r.cancelled);
    QVERIFY(r.ids.size() >= 5 && r.ids.size() < serial.ids.size());
    QVERIFY(std::equal(r.ids.begin(), r.ids.end(), serial.ids.begin()));
    // Every id but the last was fed: a follow-up reuses them and goes on as serial decode.
    QCOMPARE(s.positions(), int(prompt.size() + r.ids.size()));
}

QTEST_GUILESS_MAIN(TestSpeculation)
#include "tst_speculation.moc"
