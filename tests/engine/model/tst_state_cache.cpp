// The prefix cache on disk (issue 28): a conversation continued in a new session (a
// restart) reads only its new positions, a new conversation with the same settings
// reads only its own message after the cached preamble, and both give the logits and
// ids of a session that never had a cache, at two memory budgets. The budget removes
// the least recently used state; a damaged state is removed and the prompt read.
#include <QDir>
#include <QTemporaryDir>
#include <QTest>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>

#include <k3/pack.hpp>
#include <k3/session.hpp>
#include <k3/state_cache.hpp>

namespace fs = std::filesystem;

namespace {

const QString kTiny = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a");
const QString kDemo = QStringLiteral(K3_SOURCE_DIR "/resources/demo");

struct Turn {
    k3::GenerateResult result;
    std::vector<float> logits; // after the last fed position
};

std::vector<fs::path> stateFiles(const fs::path& dir) {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.path().extension() == ".k3state") out.push_back(e.path());
    std::sort(out.begin(), out.end());
    return out;
}

} // namespace

class TestStateCache : public QObject {
    Q_OBJECT
private:
    QTemporaryDir tmp_;
    std::map<std::string, std::string> trunks_; // model folder -> its packed trunk

    k3::LaunchConfig options(const std::string& model, const fs::path& cache, bool streamed) const {
        k3::LaunchConfig o;
        o.modelDir = model;
        o.contextLength = 1024;
        o.prefillChunk = 16;
        o.stateCacheDir = cache;
        if (streamed) {
            o.trunkDir = trunks_.at(model);
            o.budget.trunkBytes = 0; // the smallest ring
        }
        return o;
    }
    k3::LaunchConfig options(const fs::path& cache, bool streamed) const {
        return options(kTiny.toStdString(), cache, streamed);
    }
    // Streamed: one expert cache slot.
    static k3::LaunchDiagnostics diagnostics(bool streamed) {
        k3::LaunchDiagnostics d;
        if (streamed) d.expertCacheSlots = 1;
        return d;
    }
    static Turn chat(k3::Session& s, const std::vector<k3::ChatMessage>& history, bool thinking,
                     int maxTokens = 12) {
        k3::GenerateOptions g;
        g.render.thinking = thinking;
        g.maxTokens = maxTokens;
        Turn t;
        t.result = s.chat(history, g);
        const auto l = s.lastLogits();
        t.logits.assign(l.begin(), l.end());
        return t;
    }
    static bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
        return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * 4) == 0;
    }

private slots:
    void initTestCase() {
        QVERIFY(tmp_.isValid());
        for (const QString& model : {kTiny, kDemo}) {
            const std::string trunk =
                (fs::path(tmp_.path().toStdString()) /
                 ("trunk-" + fs::path(model.toStdString()).filename().string()))
                    .string();
            k3::packTrunk(model.toStdString(), trunk);
            trunks_[model.toStdString()] = trunk;
        }
    }

    void restartedConversationReadsOnlyItsNewMessage_data() {
        QTest::addColumn<QString>("model");
        QTest::addColumn<bool>("streamed");
        QTest::addColumn<bool>("thinking");
        QTest::addColumn<int>("maxTokens");
        QTest::addColumn<bool>("ended");
        // The trained demo ends its answers: the state with the answer is kept.
        QTest::newRow("demo, resident, ended") << kDemo << false << false << 64 << true;
        QTest::newRow("demo, streamed, ended") << kDemo << true << false << 64 << true;
        // Cut at the token limit: the answer is re-rendered closed, so the state up to the
        // question is kept and the follow-up reads the answer and itself.
        QTest::newRow("tiny, resident, thinking, cut") << kTiny << false << true << 12 << false;
        QTest::newRow("tiny, streamed, thinking, cut") << kTiny << true << true << 12 << false;
        QTest::newRow("tiny, resident, answer, cut") << kTiny << false << false << 12 << false;
    }
    // Turn 1 in one session, turn 2 in another (a restart): turn 2 restores what turn 1
    // kept and reads only the rest; ids and logits equal a session without a cache.
    void restartedConversationReadsOnlyItsNewMessage() {
        QFETCH(QString, model);
        QFETCH(bool, streamed);
        QFETCH(bool, thinking);
        QFETCH(int, maxTokens);
        QFETCH(bool, ended);
        const std::string dir = model.toStdString();
        const fs::path cache = fs::path(tmp_.path().toStdString()) /
                               (std::string("restart-") + QTest::currentDataTag());
        std::vector<k3::ChatMessage> history{{k3::ChatRole::User, "What is MXFP4?", "", ""}};

        // The reference: no cache, both turns in one session.
        k3::Session reference =
            k3::Session::open(options(dir, {}, streamed), diagnostics(streamed));
        const Turn ref1 = chat(reference, history, thinking, maxTokens);
        QCOMPARE(ref1.result.endOfTurn, ended);
        std::vector<k3::ChatMessage> second = history;
        second.push_back(ref1.result.reply);
        second.push_back({k3::ChatRole::User, "And the trunk?", "", ""});
        const Turn ref2 = chat(reference, second, thinking, maxTokens);

        int kept = 0;
        {
            k3::Session first =
                k3::Session::open(options(dir, cache, streamed), diagnostics(streamed));
            const Turn t1 = chat(first, history, thinking, maxTokens);
            QCOMPARE(t1.result.ids, ref1.result.ids);
            QCOMPARE(t1.result.restoredPositions, 0);
            QCOMPARE(t1.result.prefillPositions, t1.result.promptTokens);
            k3::ChatRenderOptions closed;
            closed.thinking = thinking;
            closed.addGenerationPrompt = false;
            const int question = int(
                k3::encodeChatSegments(first.tokenizer(), k3::renderChatSegments(history, closed))
                    .size());
            kept = ended ? first.positions() : question;
            // The conversation, and with thinking on the preamble (the effort message).
            QCOMPARE(t1.result.statesSaved, thinking ? 2 : 1);
            QCOMPARE(int(stateFiles(cache).size()), thinking ? 2 : 1);
        }
        k3::Session restarted =
            k3::Session::open(options(dir, cache, streamed), diagnostics(streamed));
        const Turn t2 = chat(restarted, second, thinking, maxTokens);
        QCOMPARE(t2.result.restoredPositions, kept);
        QCOMPARE(t2.result.reusedPositions, kept);
        QCOMPARE(t2.result.prefillPositions, t2.result.promptTokens - kept);
        QCOMPARE(t2.result.ids, ref2.result.ids);
        QVERIFY(sameBits(t2.logits, ref2.logits));
        // Turn 2's state replaced turn 1's (the preamble stays).
        QCOMPARE(int(stateFiles(cache).size()), thinking ? 2 : 1);
    }

    // A second new conversation with the same settings restores the preamble: only its
    // own message and the assistant header are read.
    void newConversationRestoresThePreamble() {
        const fs::path cache = fs::path(tmp_.path().toStdString()) / "preamble";
        const std::vector<k3::ChatMessage> a{{k3::ChatRole::System, "You are terse.", "", ""},
                                             {k3::ChatRole::User, "Hello!", "", ""}};
        const std::vector<k3::ChatMessage> b{{k3::ChatRole::System, "You are terse.", "", ""},
                                             {k3::ChatRole::User, "What is MXFP4?", "", ""}};
        k3::Session reference = k3::Session::open(options({}, false), diagnostics(false));
        const Turn refB = chat(reference, b, true);
        // The preamble: the prompt of the system messages alone.
        const std::vector<k3::ChatMessage> systemOnly(a.begin(), a.begin() + 1);
        k3::ChatRenderOptions closed;
        closed.thinking = true;
        closed.addGenerationPrompt = false;
        const int preamble = int(k3::encodeChatSegments(reference.tokenizer(),
                                                        k3::renderChatSegments(systemOnly, closed))
                                     .size());
        QVERIFY(preamble > 10);
        {
            k3::Session s = k3::Session::open(options(cache, false), diagnostics(false));
            const Turn t = chat(s, a, true);
            QCOMPARE(t.result.statesSaved, 2);
        }
        k3::Session s = k3::Session::open(options(cache, false), diagnostics(false));
        const Turn t = chat(s, b, true);
        QCOMPARE(t.result.restoredPositions, preamble);
        QCOMPARE(t.result.prefillPositions, t.result.promptTokens - preamble);
        QCOMPARE(t.result.ids, refB.result.ids);
        QVERIFY(sameBits(t.logits, refB.logits));
    }

    // Over the budget, the least recently used state goes; a damaged state is removed
    // and the prompt is read instead, with the same ids.
    void budgetAndDamage() {
        const fs::path cache = fs::path(tmp_.path().toStdString()) / "budget";
        const auto ask = [](const char* text) {
            return std::vector<k3::ChatMessage>{{k3::ChatRole::User, text, "", ""}};
        };
        const auto files = [&] {
            std::set<std::string> names;
            for (const fs::path& f : stateFiles(cache)) names.insert(f.filename().string());
            return names;
        };
        k3::Session s = k3::Session::open(options(cache, false), diagnostics(false));
        std::vector<k3::ChatMessage> a = ask("first question");
        const Turn ta = chat(s, a, false);
        const std::set<std::string> afterA = files();
        QCOMPARE(int(afterA.size()), 1);
        QVERIFY(fs::file_size(stateFiles(cache)[0]) > 40 * 1024);
        s.reset();
        chat(s, ask("second question"), false);
        std::set<std::string> afterB = files();
        QCOMPARE(int(afterB.size()), 2);
        for (const std::string& n : afterA) afterB.erase(n);
        const std::string bFile = *afterB.begin();
        // A follow-up in the first conversation restores it, and its new state replaces it.
        s.reset();
        a.push_back(ta.result.reply);
        a.push_back({k3::ChatRole::User, "more", "", ""});
        const Turn ta2 = chat(s, a, false);
        QVERIFY(ta2.result.restoredPositions > 0);
        const std::set<std::string> afterA2 = files();
        QCOMPARE(int(afterA2.size()), 2);
        QVERIFY(afterA2.count(bFile) == 1);
        QVERIFY(afterA2.count(*afterA.begin()) == 0);
        // A third conversation, with room for two states of these sizes and not three:
        // the second one's state, least recently used, goes.
        k3::LaunchConfig o = options(cache, false);
        o.stateCacheBytes = k3::stateCacheUsage(cache).bytes + fs::file_size(cache / bFile) / 2;
        s = k3::Session::open(o, diagnostics(false));
        chat(s, ask("third question"), false);
        const std::set<std::string> afterC = files();
        QCOMPARE(int(afterC.size()), 2);
        QVERIFY(afterC.count(bFile) == 0);
        QVERIFY(k3::stateCacheUsage(cache).bytes <= o.stateCacheBytes);

        // Damage every state: the follow-up reads its whole prompt, the files go.
        for (const fs::path& f : stateFiles(cache)) {
            std::fstream io(f, std::ios::in | std::ios::out | std::ios::binary);
            io.seekp(-1, std::ios::end);
            io.put('\x55');
        }
        k3::Session fresh = k3::Session::open(o);
        k3::Session reference = k3::Session::open(options({}, false), diagnostics(false));
        std::vector<k3::ChatMessage> third = ask("third question");
        const Turn r = chat(reference, third, false);
        third.push_back(r.result.reply);
        third.push_back({k3::ChatRole::User, "more", "", ""});
        const Turn refNext = chat(reference, third, false);
        const Turn next = chat(fresh, third, false);
        QCOMPARE(next.result.restoredPositions, 0);
        QCOMPARE(next.result.prefillPositions, next.result.promptTokens);
        QCOMPARE(next.result.ids, refNext.result.ids);
        QVERIFY(sameBits(next.logits, refNext.logits));
        // The damaged state that was tried is gone.
        std::set<std::string> cFile = afterC;
        for (const std::string& n : afterA2) cFile.erase(n);
        QCOMPARE(int(cFile.size()), 1);
        QVERIFY(files().count(*cFile.begin()) == 0);
    }

    void clearRemovesOnlyStates() {
        const fs::path cache = fs::path(tmp_.path().toStdString()) / "clear";
        {
            k3::Session s = k3::Session::open(options(cache, false), diagnostics(false));
            chat(s, {{k3::ChatRole::User, "Hello!", "", ""}}, true);
        }
        std::ofstream(cache / "notes.txt") << "kept";
        const k3::StateCacheUsage before = k3::stateCacheUsage(cache);
        QCOMPARE(before.files, 2);
        const k3::StateCacheUsage removed = k3::clearStateCache(cache);
        QCOMPARE(removed.files, 2);
        QCOMPARE(removed.bytes, before.bytes);
        QCOMPARE(k3::stateCacheUsage(cache).files, 0);
        QVERIFY(fs::exists(cache / "notes.txt"));
        // The folder holds what users wrote: owner-only.
        QCOMPARE(fs::status(cache).permissions() & fs::perms::all, fs::perms::owner_all);
    }
};

QTEST_GUILESS_MAIN(TestStateCache)
#include "tst_state_cache.moc"
