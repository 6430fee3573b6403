#include <QTest>

#include <nlohmann/json.hpp>

#include <fstream>

#include <k3/session.hpp>

class TestSession : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void greedyIdsMatchReference();
    void promptReuseGivesSameTokens();
    void samplingIsSeeded();
    void tinyTopPIsGreedy();
    void cancelStopsBeforeWork();
    void observerSeesEveryToken();

private:
    std::string dir_ = K3_SOURCE_DIR "/tests/fixtures/tiny/tiny";
    std::vector<k3::TokenId> prompt_, greedy_;
    k3::TokenId tfLast_ = -1;
};

void TestSession::initTestCase() {
    std::ifstream in(dir_ + "/expected.json");
    const auto j = nlohmann::json::parse(in);
    prompt_ = j.at("prompt_ids").get<std::vector<k3::TokenId>>();
    greedy_ = j.at("greedy").at("incremental").get<std::vector<k3::TokenId>>();
    QCOMPARE(greedy_.size(), std::size_t(8));
    tfLast_ = j.at("full_ids_teacher_forcing_argmax").back().get<k3::TokenId>();
}

static k3::Session openTiny(const std::string& dir) {
    k3::SessionOptions o;
    o.modelDir = dir;
    o.loadTokenizer = false;
    return k3::Session::open(o);
}

void TestSession::greedyIdsMatchReference() {
    k3::Session s = openTiny(dir_);
    k3::GenerateOptions g;
    g.maxTokens = 8;
    const k3::GenerateResult r = s.generateIds(prompt_, g);
    QCOMPARE(r.ids, greedy_);
    QCOMPARE(r.reusedPositions, 0);
    QVERIFY(r.valid());
    QCOMPARE(s.positions(), int(prompt_.size()) + 7); // the last id is never fed
}

void TestSession::promptReuseGivesSameTokens() {
    k3::Session s = openTiny(dir_);
    k3::GenerateOptions g;
    g.maxTokens = 8;
    s.generateIds(prompt_, g);
    // Continue from prompt + the first 4 generated ids: the snapshot after the prompt
    // is reused, and the continuation is the reference's.
    std::vector<k3::TokenId> longer = prompt_;
    longer.insert(longer.end(), greedy_.begin(), greedy_.begin() + 4);
    g.maxTokens = 4;
    const k3::GenerateResult r = s.generateIds(longer, g);
    QCOMPARE(r.reusedPositions, int(prompt_.size()));
    QCOMPARE(r.ids, std::vector<k3::TokenId>(greedy_.begin() + 4, greedy_.end()));
    // Extending what the live state holds reuses all of it.
    // all = prompt + 8 greedy ids; the state holds all but the last one.
    std::vector<k3::TokenId> all = longer;
    all.insert(all.end(), r.ids.begin(), r.ids.end());
    g.maxTokens = 1;
    const k3::GenerateResult r2 = s.generateIds(all, g);
    QCOMPARE(r2.reusedPositions, int(all.size()) - 1);
    QCOMPARE(r2.ids.front(), tfLast_); // the reference's prediction after all 18 ids
    // A different prompt starts over.
    const k3::GenerateResult r3 = s.generateIds(std::vector<k3::TokenId>{7, 8, 9}, g);
    QCOMPARE(r3.reusedPositions, 0);
}

void TestSession::samplingIsSeeded() {
    k3::Session s = openTiny(dir_);
    k3::GenerateOptions g;
    g.maxTokens = 8;
    g.sampling.temperature = 1.5f;
    g.sampling.seed = 7;
    const auto a = s.generateIds(prompt_, g).ids;
    s.reset();
    const auto b = s.generateIds(prompt_, g).ids;
    QCOMPARE(a, b);
    g.sampling.seed = 8;
    s.reset();
    const auto c = s.generateIds(prompt_, g).ids;
    QVERIFY(a != c);
    QVERIFY(a != greedy_);
}

void TestSession::tinyTopPIsGreedy() {
    k3::Session s = openTiny(dir_);
    k3::GenerateOptions g;
    g.maxTokens = 8;
    g.sampling.temperature = 1.0f;
    g.sampling.topP = 1e-9f; // only the most likely token survives
    g.sampling.seed = 123;
    QCOMPARE(s.generateIds(prompt_, g).ids, greedy_);
}

void TestSession::cancelStopsBeforeWork() {
    k3::Session s = openTiny(dir_);
    std::atomic<bool> cancel{true};
    const k3::GenerateResult r = s.generateIds(prompt_, {}, nullptr, &cancel);
    QVERIFY(r.cancelled);
    QVERIFY(r.ids.empty());
    QCOMPARE(s.positions(), 0);
}

void TestSession::observerSeesEveryToken() {
    struct Recorder : k3::SessionObserver {
        std::vector<k3::TokenId> ids;
        std::int64_t lastDone = 0, lastTotal = 0;
        void onProgress(const k3::SessionProgress& p) override {
            lastDone = p.done;
            lastTotal = p.total;
        }
        void onToken(const k3::TokenEvent& e) override {
            QCOMPARE(e.index, int(ids.size()));
            QVERIFY(e.timing.computeSeconds >= 0);
            ids.push_back(e.id);
        }
    } rec;
    k3::Session s = openTiny(dir_);
    k3::GenerateOptions g;
    g.maxTokens = 8;
    s.generateIds(prompt_, g, &rec);
    QCOMPARE(rec.ids, greedy_);
    QCOMPARE(rec.lastDone, std::int64_t(prompt_.size()));
    QCOMPARE(rec.lastTotal, std::int64_t(prompt_.size()));
}

QTEST_GUILESS_MAIN(TestSession)
#include "tst_session.moc"
