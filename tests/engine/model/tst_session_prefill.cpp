// Session prefill in chunks: progress after every chunk, cancel between chunks leaving a
// state the next turn reuses (the same ids as an uninterrupted run), follow-up turns
// computing only their new positions, and the same ids at every chunk size.
#include <QTest>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <thread>

#include <k3/session.hpp>

namespace {

const char* kModel = K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a";

k3::Session openSession(int chunk) {
    k3::LaunchConfig o;
    o.modelDir = kModel;
    o.prefillChunk = chunk;
    k3::LaunchDiagnostics d;
    d.loadTokenizer = false;
    return k3::Session::open(o, d);
}

std::vector<k3::TokenId> promptIds(int n) {
    std::vector<k3::TokenId> ids;
    for (int i = 0; i < n; ++i) ids.push_back((i * 53 + 7) % 800);
    return ids;
}

class Recorder : public k3::SessionObserver {
public:
    void onProgress(const k3::SessionProgress& p) override {
        events.push_back(p);
        if (cancelAfter > 0 && int(events.size()) == cancelAfter) cancel->store(true);
    }
    std::vector<k3::SessionProgress> events;
    int cancelAfter = 0;
    std::atomic<bool>* cancel = nullptr;
};

} // namespace

class TestSessionPrefill : public QObject {
    Q_OBJECT
private slots:
    void progressAfterEveryChunk();
    void cancelThenSamePromptGivesTheSameIds();
    void progressAndStopInsideAChunk();
    void followUpComputesOnlyNewPositions();
    void sameIdsAtEveryChunkSize();
    void stateHeldIsThePlans();
    void contextLengthIsEnforced();
    void followUpAfterStopReadsOnlyNewPositions();
    void followUpAfterStopWhileThinkingReadsOnlyNewPositions();
    void regenerateComputesOnlyTheAssistantHeader();
    void hiWithThinkingIsTheEffortPreambleAndTheQuestion();
};

void TestSessionPrefill::progressAfterEveryChunk() {
    k3::Session s = openSession(3);
    QCOMPARE(s.prefillChunk(), 3);
    Recorder rec;
    k3::GenerateOptions opt;
    opt.maxTokens = 2;
    const k3::GenerateResult r = s.generateIds(promptIds(17), opt, &rec);
    QCOMPARE(r.prefillPositions, 17);
    QCOMPARE(r.prefillChunks, 6);        // 5 chunks of 3, then 2
    QCOMPARE(int(rec.events.size()), 7); // before the first chunk, then after each
    const std::vector<std::int64_t> want{0, 3, 6, 9, 12, 15, 17};
    for (std::size_t i = 0; i < want.size(); ++i) {
        QCOMPARE(rec.events[i].stage, std::string("prefill"));
        QCOMPARE(rec.events[i].done, want[i]);
        QCOMPARE(rec.events[i].total, std::int64_t(17));
        QCOMPARE(rec.events[i].chunks, int(i));
        QCOMPARE(rec.events[i].seconds > 0, i > 0);
    }
    QCOMPARE(rec.events.back().trunkBytes, std::uint64_t(0)); // resident: nothing read
    QCOMPARE(s.positions(), 17 + 1);                          // the last sampled id is not fed
}

void TestSessionPrefill::cancelThenSamePromptGivesTheSameIds() {
    const std::vector<k3::TokenId> prompt = promptIds(17);
    k3::GenerateOptions opt;
    opt.maxTokens = 6;
    k3::Session plain = openSession(3);
    const k3::GenerateResult want = plain.generateIds(prompt, opt);
    QCOMPARE(int(want.ids.size()), 6);

    k3::Session s = openSession(3);
    std::atomic<bool> cancel{false};
    Recorder rec;
    rec.cancel = &cancel;
    rec.cancelAfter = 3; // the start, then stop after the second chunk
    const k3::GenerateResult stopped = s.generateIds(prompt, opt, &rec, &cancel);
    QVERIFY(stopped.cancelled);
    QVERIFY(stopped.ids.empty());
    QCOMPARE(s.positions(), 6); // two whole chunks held
    cancel = false;
    const k3::GenerateResult again = s.generateIds(prompt, opt, nullptr, &cancel);
    QVERIFY(!again.cancelled);
    QCOMPARE(again.reusedPositions, 6);
    QCOMPARE(again.prefillPositions, 11);
    QCOMPARE(again.ids, want.ids);
    QCOMPARE(std::memcmp(s.lastLogits().data(), plain.lastLogits().data(),
                         s.lastLogits().size() * sizeof(float)),
             0);
}

// Issue 37 points 1 and 2: a one-chunk prompt (the usual case on the real model) said
// "0 of N" until it ended and Stop waited for its end. Layers inside the chunk are
// reported (at most 4 times a second: the observer here answers its first report slowly,
// as a busy window would, so the next layer is past that interval), and Stop is heard
// before the next layer: the state is then empty and the same prompt gives the ids of a
// run that never stopped.
void TestSessionPrefill::progressAndStopInsideAChunk() {
    const std::vector<k3::TokenId> prompt = promptIds(17);
    k3::GenerateOptions opt;
    opt.maxTokens = 6;
    k3::Session plain = openSession(64);
    const k3::GenerateResult want = plain.generateIds(prompt, opt);

    class SlowFirstReport : public k3::SessionObserver {
    public:
        void onProgress(const k3::SessionProgress& p) override {
            events.push_back(p);
            if (events.size() == 1) std::this_thread::sleep_for(std::chrono::milliseconds(300));
            if (p.chunkLayersDone > 0 && cancel) cancel->store(true);
        }
        std::vector<k3::SessionProgress> events;
        std::atomic<bool>* cancel = nullptr;
    };
    for (const bool stop : {false, true}) {
        k3::Session s = openSession(64);
        std::atomic<bool> cancel{false};
        SlowFirstReport rec;
        if (stop) rec.cancel = &cancel;
        const k3::GenerateResult r = s.generateIds(prompt, opt, &rec, &cancel);
        QVERIFY(rec.events.size() >= 2);
        const k3::SessionProgress& inside = rec.events[1];
        QCOMPARE(inside.done, std::int64_t(0)); // the only chunk is being read
        QCOMPARE(inside.chunkPositions, 17);
        QCOMPARE(inside.chunkLayersDone, 1); // reported before layer 1: layer 0 is done
        QCOMPARE(inside.layers, s.model().layersBound());
        QCOMPARE(inside.fraction(), 17.0 * 1 / inside.layers / 17);
        QVERIFY(inside.seconds >= 0.3);
        if (!stop) {
            QVERIFY(!r.cancelled);
            QCOMPARE(r.ids, want.ids);
            QCOMPARE(rec.events.back().fraction(), 1.0);
            continue;
        }
        QVERIFY(r.cancelled);
        QVERIFY(r.ids.empty());
        QCOMPARE(int(rec.events.size()), 2); // stopped before layer 2: no chunk ended
        QCOMPARE(s.positions(), 0);          // the partly read chunk was dropped
        cancel = false;
        const k3::GenerateResult again = s.generateIds(prompt, opt, nullptr, &cancel);
        QCOMPARE(again.reusedPositions, 0);
        QCOMPARE(again.prefillPositions, 17);
        QCOMPARE(again.ids, want.ids);
        QCOMPARE(std::memcmp(s.lastLogits().data(), plain.lastLogits().data(),
                             s.lastLogits().size() * sizeof(float)),
                 0);
    }
}

void TestSessionPrefill::followUpComputesOnlyNewPositions() {
    k3::Session s = openSession(4);
    k3::GenerateOptions opt;
    opt.maxTokens = 3;
    std::vector<k3::TokenId> prompt = promptIds(9);
    const k3::GenerateResult first = s.generateIds(prompt, opt);
    // The next turn: the conversation so far (the last sampled id was never fed) + 5 new ids.
    std::vector<k3::TokenId> next = prompt;
    next.insert(next.end(), first.ids.begin(), first.ids.end());
    for (int i = 0; i < 5; ++i) next.push_back(100 + i);
    const k3::GenerateResult second = s.generateIds(next, opt);
    QCOMPARE(second.reusedPositions, 9 + 2);
    QCOMPARE(second.prefillPositions, int(next.size()) - 11);
    QCOMPARE(second.prefillChunks, 2); // 6 new positions in chunks of 4

    k3::Session fresh = openSession(4);
    QCOMPARE(fresh.generateIds(next, opt).ids, second.ids);
}

void TestSessionPrefill::sameIdsAtEveryChunkSize() {
    const std::vector<k3::TokenId> prompt = promptIds(21);
    k3::GenerateOptions opt;
    opt.maxTokens = 5;
    k3::Session one = openSession(1);
    const k3::GenerateResult ref = one.generateIds(prompt, opt);
    QCOMPARE(ref.prefillChunks, 21);
    for (int chunk : {2, 5, 64}) {
        k3::Session s = openSession(chunk);
        const k3::GenerateResult r = s.generateIds(prompt, opt);
        QCOMPARE(r.ids, ref.ids);
        QCOMPARE(r.prefillChunks, (21 + chunk - 1) / chunk);
        QCOMPARE(std::memcmp(s.lastLogits().data(), one.lastLogits().data(),
                             one.lastLogits().size() * sizeof(float)),
                 0);
    }
}

// The plan counts every copy of the conversation's state (live, prompt snapshot, the
// speculation rollback record): what the session holds at a full context is that line.
void TestSessionPrefill::stateHeldIsThePlans() {
    k3::LaunchConfig o;
    o.modelDir = K3_SOURCE_DIR "/resources/demo"; // KDA and MLA layers
    o.contextLength = 64;
    o.maxSpeculation = 4;
    k3::LaunchDiagnostics d;
    d.loadTokenizer = false;
    k3::Session s = k3::Session::open(o, d);
    const k3::MemoryPlan& plan = s.model().memoryPlan();
    QCOMPARE(plan.maxSpeculation, 4);
    std::vector<k3::TokenId> prompt;
    for (int i = 0; i < 27; ++i) prompt.push_back((i % 9) * 41 + 5); // repeats: lookups match
    k3::GenerateOptions opt;
    opt.maxTokens = 24;
    opt.speculation = 4;
    const k3::GenerateResult r = s.generateIds(prompt, opt);
    QVERIFY(r.verifyPasses > 0); // the rollback record exists
    const double planned = double(plan.stateBytes + plan.kvBytes);
    const double held = double(s.stateBytesHeld());
    QVERIFY2(std::abs(held - planned) <= 0.05 * planned,
             qPrintable(QStringLiteral("held %1 bytes, planned %2").arg(held).arg(planned)));
    QVERIFY(held <= planned);
}

void TestSessionPrefill::contextLengthIsEnforced() {
    k3::LaunchConfig o;
    o.modelDir = kModel;
    o.contextLength = 20;
    k3::LaunchDiagnostics d;
    d.loadTokenizer = false;
    k3::Session s = k3::Session::open(o, d);
    k3::GenerateOptions opt;
    opt.maxTokens = 10;
    try {
        s.generateIds(promptIds(20), opt);
        QFAIL("a prompt as long as the context was accepted");
    } catch (const k3::ContextFull& e) {
        QCOMPARE(e.tokens(), 20);
        QCOMPARE(e.context(), 20);
        QVERIFY2(std::string(e.what()).find("the conversation is 20 tokens and the context holds "
                                            "20 positions") != std::string::npos,
                 e.what());
    }
    QCOMPARE(s.positions(), 0); // nothing was computed
    // An answer stops where the context is full, and says so.
    const k3::GenerateResult r = s.generateIds(promptIds(15), opt);
    QVERIFY(r.contextFull);
    QCOMPARE(s.positions(), 20);
    QCOMPARE(int(r.ids.size()), 6); // 5 fed after the prompt, the 6th has no place
}

// A follow-up after Stop (the partial answer kept, or dropped) reads only what is new:
// the state before the first answer's assistant header is reused.
void TestSessionPrefill::followUpAfterStopReadsOnlyNewPositions() {
    k3::LaunchConfig o;
    o.modelDir = K3_SOURCE_DIR "/resources/demo";
    k3::Session s = k3::Session::open(o);
    const k3::Tokenizer& tok = s.tokenizer();
    k3::GenerateOptions g;
    g.render.thinking = false;
    g.maxTokens = 64;
    struct StopAfter : k3::SessionObserver {
        std::atomic<bool>* cancel = nullptr;
        int tokens = 0;
        void onToken(const k3::TokenEvent&) override {
            if (++tokens == 3) cancel->store(true);
        }
    } stop;
    std::atomic<bool> cancel{false};
    stop.cancel = &cancel;
    std::vector<k3::ChatMessage> history{{k3::ChatRole::User, "Hello!", "", "", ""}};
    k3::ChatRenderOptions closed = g.render;
    closed.addGenerationPrompt = false;
    const std::size_t head =
        k3::encodeChatSegments(tok, k3::renderChatSegments(history, closed)).size();
    const k3::GenerateResult first = s.chat(history, g, &stop, &cancel);
    QVERIFY(first.cancelled);
    QCOMPARE(int(first.ids.size()), 3);
    cancel = false;

    // The partial answer kept (as the app keeps it), then a new question.
    std::vector<k3::ChatMessage> kept = history;
    kept.push_back(first.reply);
    kept.push_back({k3::ChatRole::User, "What is MXFP4?", "", "", ""});
    const auto keptPrompt = k3::encodeChatSegments(tok, k3::renderChatSegments(kept, g.render));
    const k3::GenerateResult second = s.chat(kept, g);
    // The live state still holds the prompt and the 3 answer tokens, which the template
    // renders the same way: all of it is reused.
    QCOMPARE(second.reusedPositions, first.promptTokens + 3);
    QCOMPARE(second.prefillPositions, int(keptPrompt.size()) - second.reusedPositions);

    // Or dropped (stopped before an answer worth keeping): the same reuse.
    k3::Session t = k3::Session::open(o);
    cancel = false;
    stop.tokens = 0;
    t.chat(history, g, &stop, &cancel);
    cancel = false;
    std::vector<k3::ChatMessage> dropped = history;
    dropped.push_back({k3::ChatRole::User, "What is MXFP4?", "", "", ""});
    const k3::GenerateResult third = t.chat(dropped, g);
    QCOMPARE(third.reusedPositions, int(head));
    const auto droppedPrompt =
        k3::encodeChatSegments(tok, k3::renderChatSegments(dropped, g.render));
    QCOMPARE(third.prefillPositions, int(droppedPrompt.size() - head));
}

namespace {
std::size_t tokensOf(const k3::Tokenizer& tok, const std::vector<k3::ChatMessage>& history,
                     k3::ChatRenderOptions render, bool generationPrompt) {
    render.addGenerationPrompt = generationPrompt;
    return k3::encodeChatSegments(tok, k3::renderChatSegments(history, render)).size();
}
} // namespace

// The same with Think on: the stopped answer is all reasoning, which the template renders
// back (earlier turns keep their reasoning while thinking is on) with the tokens fed.
void TestSessionPrefill::followUpAfterStopWhileThinkingReadsOnlyNewPositions() {
    // The tiny random model writes into the think channel until stopped (the demo closes
    // it at once).
    k3::LaunchConfig o;
    o.modelDir = kModel;
    k3::Session s = k3::Session::open(o);
    const k3::Tokenizer& tok = s.tokenizer();
    k3::GenerateOptions g;
    g.render.thinking = true;
    g.render.thinkingEffort = "max";
    g.maxTokens = 64;
    struct StopAfter : k3::SessionObserver {
        std::atomic<bool>* cancel = nullptr;
        int tokens = 0;
        void onToken(const k3::TokenEvent&) override {
            if (++tokens == 4) cancel->store(true);
        }
    } stop;
    std::atomic<bool> cancel{false};
    stop.cancel = &cancel;
    std::vector<k3::ChatMessage> history{{k3::ChatRole::User, "Hello!", "", "", ""}};
    const k3::GenerateResult first = s.chat(history, g, &stop, &cancel);
    QVERIFY(first.cancelled);
    QCOMPARE(int(first.ids.size()), 4);
    QVERIFY(!first.reply.reasoningContent.empty());
    cancel = false;
    history.push_back(first.reply);
    history.push_back({k3::ChatRole::User, "What is MXFP4?", "", "", ""});
    const k3::GenerateResult second = s.chat(history, g);
    QCOMPARE(second.reusedPositions, first.promptTokens + 4);
    // What is new: the answer's closing tags, the question, the header. With the answer
    // empty the render is the first prompt followed by exactly these.
    std::vector<k3::ChatMessage> blank = history;
    blank[1].reasoningContent.clear();
    const int fresh = int(tokensOf(tok, blank, g.render, true)) - first.promptTokens;
    QCOMPARE(second.prefillPositions, fresh);
    QCOMPARE(second.promptTokens, first.promptTokens + 4 + fresh);
    // The random model's "ad\xEF\xBF\xBD ans" (a byte that is no UTF-8) does not encode
    // back to its 4 ids: the prompt spells the answer with the ids the state holds.
    QVERIFY(int(tokensOf(tok, history, g.render, true)) != second.promptTokens);

    // A third turn still spells the stopped answer that way. The second answer ran to the
    // token limit (its last token never fed) and its random text does not encode back
    // either, so the state before its header (13 tokens with Think on) is reused.
    QVERIFY(!second.cancelled && !second.endOfTurn);
    history.push_back(second.reply);
    history.push_back({k3::ChatRole::User, "Thanks.", "", "", ""});
    const k3::GenerateResult third = s.chat(history, g);
    QCOMPARE(third.reusedPositions, second.promptTokens - 13);
}

// Regenerate sends the same history again: the state before the answer's assistant
// header is reused, so only the header (the generation prompt) is computed: the open
// marker, `message role="assistant"`, the separator, the open marker, `response`, the
// separator.
void TestSessionPrefill::regenerateComputesOnlyTheAssistantHeader() {
    k3::LaunchConfig o;
    o.modelDir = K3_SOURCE_DIR "/resources/demo";
    k3::Session s = k3::Session::open(o);
    const k3::Tokenizer& tok = s.tokenizer();
    k3::GenerateOptions g;
    g.render.thinking = false;
    g.maxTokens = 8;
    const std::vector<k3::ChatMessage> history{{k3::ChatRole::User, "Hello!", "", "", ""}};
    const k3::GenerateResult first = s.chat(history, g);
    QCOMPARE(first.reusedPositions, 0);
    const int head = int(tokensOf(tok, history, g.render, false));
    const k3::GenerateResult again = s.chat(history, g);
    QCOMPARE(again.promptTokens, first.promptTokens);
    QCOMPARE(again.reusedPositions, head);
    QCOMPARE(again.prefillPositions, 10); // the demo tokenizer's count for the header
    QCOMPARE(again.ids, first.ids);       // greedy: the same answer from the reused state
}

// Issue 21: "Hi" with Think on was 226 prompt tokens. The template puts the
// thinking-effort system message before the conversation whenever thinking is on; "Hi"
// itself is a handful of tokens.
void TestSessionPrefill::hiWithThinkingIsTheEffortPreambleAndTheQuestion() {
    const k3::Tokenizer tok = k3::Tokenizer::fromDirectory(K3_SOURCE_DIR "/resources/demo");
    k3::ChatRenderOptions think;
    think.thinking = true;
    think.thinkingEffort = "max";
    const std::vector<k3::ChatMessage> hi{{k3::ChatRole::User, "Hi", "", "", ""}};
    const std::size_t preamble = tokensOf(tok, {}, think, false);
    const std::size_t withHi = tokensOf(tok, hi, think, false);
    const std::size_t prompt = tokensOf(tok, hi, think, true);
    k3::ChatRenderOptions plain;
    plain.thinking = false;
    const std::size_t plainPrompt = tokensOf(tok, hi, plain, true);
    // With the demo's tokenizer: 166 of the 191 are the preamble, 12 the message (its
    // tags), 13 the header opening the think channel; without thinking: 12 + 10.
    QCOMPARE(int(preamble), 166);
    QCOMPARE(int(withHi - preamble), 12);
    QCOMPARE(int(prompt), 166 + 12 + 13);
    QCOMPARE(int(plainPrompt), 12 + 10);
}

QTEST_GUILESS_MAIN(TestSessionPrefill)
#include "tst_session_prefill.moc"
