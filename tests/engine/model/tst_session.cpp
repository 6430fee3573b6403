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
    void pcg32MatchesReference();
    void cancelStopsBeforeWork();
    void observerSeesEveryToken();
    void chatRendersEncodesAndGenerates();
    void demoAnswersAndReusesTheConversation();

private:
    std::string dir_ = K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a";
    std::vector<k3::TokenId> prompt_, greedy_, greedy20_;
    std::string promptText_;
    k3::TokenId tfLast_ = -1;
};

void TestSession::initTestCase() {
    std::ifstream in(dir_ + "/expected.json");
    const auto j = nlohmann::json::parse(in);
    prompt_ = j.at("prompt_ids").get<std::vector<k3::TokenId>>();
    greedy20_ = j.at("greedy").at("incremental").get<std::vector<k3::TokenId>>();
    QCOMPARE(greedy20_.size(), std::size_t(20));
    greedy_.assign(greedy20_.begin(), greedy20_.begin() + 8);
    // The reference's prediction after prompt + 8 greedy ids (teacher forcing).
    tfLast_ = j.at("full_ids_teacher_forcing_argmax").at(prompt_.size() + 8 - 1).get<k3::TokenId>();
    promptText_ = j.at("prompt_text").get<std::string>();
}

static k3::Session openTiny(const std::string& dir) {
    k3::LaunchConfig o;
    o.modelDir = dir;
    k3::LaunchDiagnostics d;
    d.loadTokenizer = false;
    return k3::Session::open(o, d);
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
    QCOMPARE(r2.ids.front(), tfLast_); // the reference's prediction after prompt + 8 ids
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

// pcg32-demo (pcg32_srandom_r(&rng, 42, 54)) prints these first six outputs.
void TestSession::pcg32MatchesReference() {
    k3::SamplingOptions o;
    o.seed = 42;
    k3::Sampler sampler(o);
    const std::uint32_t want[] = {0xa15c02b7u, 0x7b47f409u, 0xba1d3330u,
                                  0x83d2f293u, 0xbfa4784bu, 0xcbed606eu};
    for (std::uint32_t w : want) QCOMPARE(sampler.nextRandom32(), w);
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
        std::vector<k3::TokenTiming> timings;
        std::int64_t lastDone = 0, lastTotal = 0;
        void onProgress(const k3::SessionProgress& p) override {
            lastDone = p.done;
            lastTotal = p.total;
        }
        void onToken(const k3::TokenEvent& e) override {
            QCOMPARE(e.index, int(ids.size()));
            timings.push_back(e.timing);
            ids.push_back(e.id);
        }
    } rec;
    k3::Session s = openTiny(dir_);
    k3::GenerateOptions g;
    g.maxTokens = 8;
    const k3::GenerateResult r = s.generateIds(prompt_, g, &rec);
    QCOMPARE(rec.ids, greedy_);
    QCOMPARE(rec.lastDone, std::int64_t(prompt_.size()));
    QCOMPARE(rec.lastTotal, std::int64_t(prompt_.size()));
    // Every weight is resident: no token waits on I/O, so each token's time is compute,
    // and the tokens' times (disjoint intervals) fit in the decode's wall clock.
    QCOMPARE(rec.timings.size(), greedy_.size());
    double sum = 0;
    for (const k3::TokenTiming& t : rec.timings) {
        QCOMPARE(t.trunkIoSeconds, 0.0);
        QCOMPARE(t.expertIoSeconds, 0.0);
        QVERIFY(t.computeSeconds > 0);
        sum += t.totalSeconds();
    }
    QVERIFY2(sum <= r.decodeSeconds,
             qPrintable(QString("tokens %1 s, decode %2 s").arg(sum).arg(r.decodeSeconds)));
}

// The whole text path: the official template rendered in C++, encoded by our
// tokenizer, gives the reference's prompt ids; the reply is the reference's 20 ids.
void TestSession::chatRendersEncodesAndGenerates() {
    k3::LaunchConfig o;
    o.modelDir = dir_;
    k3::Session s = k3::Session::open(o);
    const std::vector<k3::ChatMessage> history{{k3::ChatRole::User, "What is MXFP4?", "", ""}};
    k3::GenerateOptions g;
    g.render.thinking = false;
    g.maxTokens = 20;
    QCOMPARE(k3::renderChat(history, g.render), promptText_);
    QCOMPARE(k3::encodeChatSegments(s.tokenizer(), k3::renderChatSegments(history, g.render)),
             prompt_);
    struct Collect : k3::SessionObserver {
        std::string response;
        void onToken(const k3::TokenEvent& e) override { response += e.responseDelta; }
    } collect;
    const k3::GenerateResult r = s.chat(history, g, &collect);
    QCOMPARE(r.promptTokens, int(prompt_.size()));
    QCOMPARE(r.ids, greedy20_);
    QVERIFY(!r.endOfTurn);
    QCOMPARE(r.reply.role, k3::ChatRole::Assistant);
    // Thinking off: the generated text is the answer, streamed piece by piece. This
    // random model also emits reserved special tokens (ids >= numRanks): they are
    // not text, so they are reported as problems and never shown.
    std::vector<k3::TokenId> textIds;
    int reserved = 0;
    for (k3::TokenId id : greedy20_) {
        if (std::size_t(id) < s.tokenizer().numRanks())
            textIds.push_back(id);
        else
            ++reserved;
    }
    QCOMPARE(reserved, 3); // ids 735, 824 and 847 are reserved special tokens
    QCOMPARE(r.reply.content, k3::sanitizeUtf8(s.tokenizer().decode(textIds)));
    int markerProblems = 0;
    for (const std::string& p : r.problems)
        if (p.find("<|reserved_token_") != std::string::npos) ++markerProblems;
    QCOMPARE(markerProblems, reserved);
    // ...and the turn did not end within 20 tokens, which the parser also reports.
    QCOMPARE(int(r.problems.size()), reserved + 1);
    QCOMPARE(collect.response, r.reply.content);
    QVERIFY(r.reply.reasoningContent.empty());
}

// The trained demo model: every prompt's answer is the reference's, the turn ends with
// [EOS], and a follow-up turn re-renders the history into ids that extend what the
// session already holds, so only the new tail is prefilled.
void TestSession::demoAnswersAndReusesTheConversation() {
    const std::string demo = K3_SOURCE_DIR "/resources/demo";
    std::ifstream in(demo + "/expected.json");
    const auto expected = nlohmann::json::parse(in);
    k3::LaunchConfig o;
    o.modelDir = demo;
    k3::Session s = k3::Session::open(o);
    k3::GenerateOptions g;
    g.render.thinking = false;
    g.maxTokens = 64;
    QVERIFY(expected.at("prompts").size() >= 3);
    for (const auto& p : expected.at("prompts")) {
        s.reset();
        const std::vector<k3::ChatMessage> history{
            {k3::ChatRole::User, p.at("question").get<std::string>(), "", ""}};
        const k3::GenerateResult r = s.chat(history, g);
        QVERIFY(r.endOfTurn);
        QCOMPARE(r.ids, p.at("greedy_ids").get<std::vector<k3::TokenId>>());
        QCOMPARE(r.reply.content, p.at("answer_text").get<std::string>());
        QVERIFY(r.problems.empty());
    }
    // Two turns: the second prompt holds the first answer as the template renders it.
    s.reset();
    std::vector<k3::ChatMessage> history{{k3::ChatRole::User, "Hello!", "", ""}};
    const k3::GenerateResult first = s.chat(history, g);
    QVERIFY(first.endOfTurn);
    const int held = s.positions();
    history.push_back(first.reply);
    history.push_back({k3::ChatRole::User, "What is MXFP4?", "", ""});
    const k3::GenerateResult second = s.chat(history, g);
    QCOMPARE(second.reusedPositions, held);
    QVERIFY(second.promptTokens > held);
}

QTEST_GUILESS_MAIN(TestSession)
#include "tst_session.moc"
