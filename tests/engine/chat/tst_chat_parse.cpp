// The output parser: well-formed turns, malformed streams, and the same result however
// the text between special tokens is cut into pieces.
#include <QTest>

#include <k3/chat.hpp>

using k3::ChatOutputParser;
using k3::ChatSegment;
using Start = ChatOutputParser::Start;

namespace {

ChatSegment sp(std::string_view m) {
    return {ChatSegment::Kind::Special, std::string(m)};
}
ChatSegment tx(std::string_view t) {
    return {ChatSegment::Kind::Text, std::string(t)};
}

struct Result {
    std::string thinking, response, other, endMarker;
    std::vector<std::string> problems;
    bool finished = false;
    std::string deltaThinking, deltaResponse;
    int endSignals = 0;

    bool operator==(const Result&) const = default;
};

Result run(Start start, const std::vector<ChatSegment>& pieces, bool callFinish) {
    ChatOutputParser p(start);
    Result r;
    for (const auto& piece : pieces) {
        const auto d = p.feed(piece);
        r.deltaThinking += d.thinking;
        r.deltaResponse += d.response;
        r.endSignals += d.endOfTurn;
    }
    if (callFinish) {
        const auto d = p.finish();
        r.deltaThinking += d.thinking;
        r.deltaResponse += d.response;
    }
    r.thinking = p.thinking();
    r.response = p.response();
    r.other = p.otherChannels();
    r.endMarker = p.endMarker();
    r.problems = p.problems();
    r.finished = p.finished();
    return r;
}

// Joins adjacent text pieces, then re-cuts the text of the whole stream at `cuts`
// (offsets into the concatenated text bytes, ascending).
std::vector<ChatSegment> recut(const std::vector<ChatSegment>& pieces,
                               const std::vector<std::size_t>& cuts) {
    std::vector<ChatSegment> merged;
    for (const auto& piece : pieces) {
        if (piece.kind == ChatSegment::Kind::Text && !merged.empty() &&
            merged.back().kind == ChatSegment::Kind::Text)
            merged.back().text += piece.text;
        else
            merged.push_back(piece);
    }
    std::vector<ChatSegment> out;
    std::size_t offset = 0;
    for (const auto& piece : merged) {
        if (piece.kind == ChatSegment::Kind::Special) {
            out.push_back(piece);
            continue;
        }
        std::size_t from = 0;
        for (std::size_t cut : cuts) {
            if (cut <= offset + from || cut >= offset + piece.text.size()) continue;
            out.push_back(tx(piece.text.substr(from, cut - offset - from)));
            from = cut - offset;
        }
        out.push_back(tx(piece.text.substr(from)));
        offset += piece.text.size();
    }
    return out;
}

std::size_t textBytes(const std::vector<ChatSegment>& pieces) {
    std::size_t n = 0;
    for (const auto& p : pieces)
        if (p.kind == ChatSegment::Kind::Text) n += p.text.size();
    return n;
}

struct Scenario {
    const char* name;
    Start start;
    std::vector<ChatSegment> pieces;
    bool callFinish;
};

std::vector<Scenario> scenarios() {
    using namespace k3::chatmarker;
    return {
        {"normal_eom",
         Start::Think,
         {tx("Let me think."), sp(closeMark), tx("think"), sp(sepMark), sp(openMark),
          tx("response"), sp(sepMark), tx("Answer: 4"), sp(closeMark), tx("response"), sp(sepMark),
          sp(closeMark), tx("message"), sp(sepMark), sp(endOfMessage)},
         false},
        {"missing_think_close",
         Start::Think,
         {tx("R1"), sp(openMark), tx("response"), sp(sepMark), tx("A1"), sp(eos)},
         false},
        {"stray_text_and_marker",
         Start::Think,
         {tx("R"), sp(closeMark), tx("think"), sp(sepMark), tx(" junk "), sp(openMark),
          tx("response"), sp(sepMark), tx("A"), sp("[BOS]"), tx("B"), sp(sepMark),
          sp(endOfMessage)},
         false},
        {"tools_channel",
         Start::Response,
         {tx("Calling."), sp(closeMark), tx("response"),
          sp(sepMark),    sp(openMark),  tx("tools"),
          sp(sepMark),    sp(openMark),  tx("call tool=\"clock\" index=\"1\""),
          sp(sepMark),    tx("{}"),      sp(closeMark),
          tx("call"),     sp(sepMark),   sp(closeMark),
          tx("tools"),    sp(sepMark),   sp(closeMark),
          tx("message"),  sp(sepMark),   sp(eos)},
         false},
        {"cut_in_close_header", Start::Think, {tx("abc"), sp(closeMark), tx("thi")}, true},
        {"mismatched_close",
         Start::Think,
         {tx("R"), sp(closeMark), tx("response"), sp(sepMark), tx("\n"), sp(openMark),
          tx("response"), sp(sepMark), tx("A"), sp(closeMark), tx("message"), sp(sepMark), sp(eos),
          tx("late"), sp(eos)},
         false},
        {"marker_text_is_text", Start::Response, {tx("x<|open|>y<|close|>[EOS]"), sp(eos)}, false},
    };
}

} // namespace

class TestChatParse : public QObject {
    Q_OBJECT
private slots:
    void wellFormedTurn();
    void eosEndsResponse();
    void malformedStreamsAreReported();
    void splitsGiveTheSameResult();
    void channelTracksTheStream();
    void parsesWhatTheRendererWrites();
    void overlongHeaderIsGivenBack();
    void startInsideMessage();
    void finishReleasesHeldText();
    void answerOutsideAnyChannelStreams();
};

void TestChatParse::wellFormedTurn() {
    const auto r = run(Start::Think, scenarios()[0].pieces, false);
    QCOMPARE(r.thinking, std::string("Let me think."));
    QCOMPARE(r.response, std::string("Answer: 4"));
    QCOMPARE(r.deltaThinking, r.thinking);
    QCOMPARE(r.deltaResponse, r.response);
    QCOMPARE(r.endMarker, std::string("<|end_of_msg|>"));
    QCOMPARE(r.endSignals, 1);
    QVERIFY(r.problems.empty());
}

void TestChatParse::eosEndsResponse() {
    const auto r = run(Start::Response, {tx("Hi "), tx("there"), sp("[EOS]")}, false);
    QCOMPARE(r.response, std::string("Hi there"));
    QCOMPARE(r.thinking, std::string());
    QCOMPARE(r.endMarker, std::string("[EOS]"));
    QVERIFY(r.problems.empty());
}

void TestChatParse::malformedStreamsAreReported() {
    const auto all = scenarios();
    {
        const auto r = run(Start::Think, all[1].pieces, false);
        QCOMPARE(r.thinking, std::string("R1"));
        QCOMPARE(r.response, std::string("A1"));
        QCOMPARE(r.problems, std::vector<std::string>{"think channel not closed before <|open|>"});
    }
    {
        const auto r = run(Start::Think, all[2].pieces, false);
        QCOMPARE(r.thinking, std::string("R"));
        QCOMPARE(r.response, std::string(" junk AB"));
        const std::vector<std::string> expected = {
            "text outside any channel \" junk \" (kept as response)",
            "unexpected special marker [BOS] (ignored)",
            "unexpected special marker <|sep|> (ignored)"};
        QCOMPARE(r.problems, expected);
        QCOMPARE(r.endMarker, std::string("<|end_of_msg|>"));
    }
    {
        const auto r = run(Start::Response, all[3].pieces, false);
        QCOMPARE(r.response, std::string("Calling."));
        QCOMPARE(r.other,
                 std::string("<|open|>tools<|sep|><|open|>call tool=\"clock\" "
                             "index=\"1\"<|sep|>{}<|close|>call<|sep|><|close|>tools<|sep|>"));
        QVERIFY(r.problems.empty());
        QCOMPARE(r.endMarker, std::string("[EOS]"));
    }
    {
        const auto r = run(Start::Think, all[4].pieces, true);
        // The unfinished close goes back to the channel it was closing.
        QCOMPARE(r.thinking, std::string("abcthi"));
        const std::vector<std::string> expected = {
            "malformed tag <|close|>\"thi\": stream ended inside the tag",
            "stream ended inside the think channel (no end of turn)"};
        QCOMPARE(r.problems, expected);
        QVERIFY(r.finished);
        QCOMPARE(r.endMarker, std::string());
    }
    {
        const auto r = run(Start::Think, all[5].pieces, false);
        QCOMPARE(r.thinking, std::string("R"));
        QCOMPARE(r.response, std::string("A"));
        const std::vector<std::string> expected = {
            "channel think closed as \"response\"",
            "message closed while the response channel was open",
            "output after the end of the turn ignored"};
        QCOMPARE(r.problems, expected);
        QCOMPARE(r.endSignals, 1);
    }
    {
        const auto r = run(Start::Response, all[6].pieces, false);
        QCOMPARE(r.response, std::string("x<|open|>y<|close|>[EOS]"));
        QVERIFY(r.problems.empty());
    }
    {
        // [EOS] while still thinking: no response at all.
        const auto r = run(Start::Think, {tx("hmm"), sp("[EOS]")}, false);
        QCOMPARE(r.thinking, std::string("hmm"));
        QCOMPARE(r.problems,
                 std::vector<std::string>{"turn ended inside the think channel (no response)"});
    }
    {
        const auto r = run(Start::Response, {tx("cut")}, true);
        QCOMPARE(r.response, std::string("cut"));
        QCOMPARE(r.problems,
                 std::vector<std::string>{"stream ended without [EOS] or <|end_of_msg|>"});
    }
}

void TestChatParse::splitsGiveTheSameResult() {
    for (const auto& s : scenarios()) {
        const Result reference = run(s.start, recut(s.pieces, {}), s.callFinish);
        const std::size_t n = textBytes(s.pieces);
        QVERIFY2(n < 200, s.name);
        // Every single cut and every pair of cuts, then one byte per piece.
        for (std::size_t a = 1; a < n; ++a) {
            QVERIFY2(run(s.start, recut(s.pieces, {a}), s.callFinish) == reference, s.name);
            for (std::size_t b = a + 1; b < n; ++b)
                QVERIFY2(run(s.start, recut(s.pieces, {a, b}), s.callFinish) == reference, s.name);
        }
        std::vector<std::size_t> every;
        for (std::size_t a = 1; a < n; ++a) every.push_back(a);
        const auto bytes = recut(s.pieces, every);
        QCOMPARE(textBytes(bytes), n);
        QVERIFY2(run(s.start, bytes, s.callFinish) == reference, s.name);
        // The original piece boundaries too.
        QVERIFY2(run(s.start, s.pieces, s.callFinish) == reference, s.name);
    }
}

void TestChatParse::channelTracksTheStream() {
    using namespace k3::chatmarker;
    ChatOutputParser p(Start::Think);
    QCOMPARE(p.channel(), ChatOutputParser::Channel::Think);
    p.feedText("r");
    p.feedSpecial(closeMark);
    QCOMPARE(p.channel(), ChatOutputParser::Channel::None);
    p.feedText("thi");
    p.feedText("nk");
    p.feedSpecial(sepMark);
    p.feedSpecial(openMark);
    p.feedText("resp");
    p.feedText("onse");
    const auto d = p.feedSpecial(sepMark);
    QCOMPARE(p.channel(), ChatOutputParser::Channel::Response);
    QVERIFY(!d.endOfTurn);
    QCOMPARE(p.feedText("ok").response, std::string("ok"));
    QVERIFY(p.feedSpecial(eos).endOfTurn);
    QVERIFY(p.endOfTurn());
    QCOMPARE(p.channel(), ChatOutputParser::Channel::None);
    QVERIFY(p.problems().empty());
}

void TestChatParse::parsesWhatTheRendererWrites() {
    // An assistant turn as rendered into history, minus the generation prompt, is
    // exactly what the model should emit: it must parse back cleanly.
    const std::vector<k3::ChatMessage> prompt = {{k3::ChatRole::User, "2+2?", {}, {}}};
    auto full = prompt;
    full.push_back({k3::ChatRole::Assistant, "4, <|sep|> literal", "  add them\n", {}});
    for (bool thinking : {true, false}) {
        const k3::ChatRenderOptions genOpts{.thinking = thinking, .addGenerationPrompt = true};
        const auto head = k3::renderChatSegments(prompt, genOpts);
        const auto all =
            k3::renderChatSegments(full, {.thinking = thinking, .addGenerationPrompt = false});
        QVERIFY(all.size() > head.size());
        QVERIFY(std::equal(head.begin(), head.end(), all.begin()));
        auto p = ChatOutputParser::forOptions(genOpts);
        for (std::size_t i = head.size(); i < all.size(); ++i) p.feed(all[i]);
        QCOMPARE(p.response(), std::string("4, <|sep|> literal"));
        QCOMPARE(p.thinking(), std::string(thinking ? "  add them\n" : ""));
        QCOMPARE(p.endMarker(), std::string("<|end_of_msg|>"));
        QVERIFY(p.problems().empty());
    }
}

void TestChatParse::overlongHeaderIsGivenBack() {
    const std::string junk(2000, 'a');
    const auto r = run(Start::Response,
                       {tx("A"), sp("<|close|>"), tx("response"), sp("<|sep|>"), sp("<|open|>"),
                        tx(junk), sp("<|end_of_msg|>")},
                       false);
    QCOMPARE(r.response, "A" + junk);
    QCOMPARE(r.problems.size(), std::size_t(2));
    QVERIFY(r.problems[0].starts_with("malformed tag <|open|>\"aaaa"));
    QVERIFY(r.problems[0].ends_with("no <|sep|> within 1024 bytes"));
    QVERIFY(r.problems[1].starts_with("text outside any channel"));
}

void TestChatParse::startInsideMessage() {
    using namespace k3::chatmarker;
    const auto r = run(Start::Message,
                       {tx("\n"), sp(openMark), tx("think"), sp(sepMark), tx("t"), sp(closeMark),
                        tx("think"), sp(sepMark), sp(openMark), tx("response"), sp(sepMark),
                        tx("Hi"), sp(closeMark), tx("response"), sp(sepMark), sp(closeMark),
                        tx("message"), sp(sepMark), sp(endOfMessage)},
                       false);
    QCOMPARE(r.thinking, std::string("t"));
    QCOMPARE(r.response, std::string("Hi"));
    QVERIFY(r.problems.empty());
}

// Found by fuzz_chat_parse: text held back as stray (or an unfinished tag) reached
// response() at finish() without a delta, so a streaming view missed it.
void TestChatParse::finishReleasesHeldText() {
    ChatOutputParser p(Start::Message);
    QVERIFY(p.feedText("]").response == "]"); // stray text that is not blank streams
    QVERIFY(p.finish().response.empty());     // and is not given twice
    QCOMPARE(p.response(), std::string("]"));

    ChatOutputParser q(Start::Response);
    QCOMPARE(q.feedText("ok").response, std::string("ok"));
    q.feedSpecial(k3::chatmarker::closeMark);
    q.feedText("respo"); // an unfinished close tag: given back to the channel at the end
    QCOMPARE(q.finish().response, std::string("respo"));
    QCOMPARE(q.response(), std::string("okrespo"));
    QVERIFY(q.finish().response.empty()); // a second finish releases nothing
}

// Issue 31: with thinking on, the demo answers after closing the think channel without
// opening response; that text used to be held until the end of the turn (one delta).
void TestChatParse::answerOutsideAnyChannelStreams() {
    using namespace k3::chatmarker;
    ChatOutputParser p(Start::Think);
    QCOMPARE(p.feedText("plan").thinking, std::string("plan"));
    p.feedSpecial(closeMark);
    p.feedText("think");
    p.feedSpecial(sepMark);
    QVERIFY(p.feedText("\n\n").response.empty()); // whitespace alone may sit between tags
    QCOMPARE(p.feedText("The").response, std::string("\n\nThe"));
    QCOMPARE(p.feedText(" answer").response, std::string(" answer"));
    QCOMPARE(p.feedText("  ").response, std::string("  "));
    const auto end = p.feedSpecial(eos);
    QVERIFY(end.endOfTurn);
    QVERIFY(end.response.empty());
    QCOMPARE(p.response(), std::string("\n\nThe answer  "));
    QCOMPARE(p.problems().size(), std::size_t(1));
    QCOMPARE(p.problems()[0],
             std::string("text outside any channel \"\n\nThe answer  \" (kept as response)"));

    // Whitespace between two tags is still dropped, and never shown.
    ChatOutputParser q(Start::Think);
    q.feedSpecial(closeMark);
    q.feedText("think");
    q.feedSpecial(sepMark);
    QVERIFY(q.feedText("\n").response.empty());
    QVERIFY(q.feedSpecial(openMark).response.empty());
    q.feedText("response");
    q.feedSpecial(sepMark);
    QCOMPARE(q.feedText("Hi").response, std::string("Hi"));
    q.feedSpecial(endOfMessage);
    QCOMPARE(q.response(), std::string("Hi"));
    QVERIFY(q.problems().empty());
}

QTEST_GUILESS_MAIN(TestChatParse)
#include "tst_chat_parse.moc"
