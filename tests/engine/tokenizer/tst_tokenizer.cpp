// Unit tests of the tokenizer on small hand-made vocabularies (loading errors, merge order,
// bytes-not-code-points, added tokens, UTF-8 handling, the streaming decoder) and round trips
// on the real-size fixture vocabulary.
#include <QTest>

#include <k3/tokenizer.hpp>

#include <optional>

using k3::TokenId;
using Ids = std::vector<TokenId>;

namespace {

const std::string kFixtureDir = K3_SOURCE_DIR "/tests/fixtures/tokenizer";

std::string base64(std::string_view bytes) {
    static const char* a = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    for (std::size_t i = 0; i < bytes.size(); i += 3) {
        unsigned v = static_cast<unsigned char>(bytes[i]) << 16;
        if (i + 1 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 1]) << 8;
        if (i + 2 < bytes.size()) v |= static_cast<unsigned char>(bytes[i + 2]);
        out += a[(v >> 18) & 63];
        out += a[(v >> 12) & 63];
        out += i + 1 < bytes.size() ? a[(v >> 6) & 63] : '=';
        out += i + 2 < bytes.size() ? a[v & 63] : '=';
    }
    return out;
}

// Ranks 0..255 are the single bytes in byte order, then `merges` from rank 256 on.
std::string model(const std::vector<std::string>& merges) {
    std::string text;
    int rank = 0;
    for (int b = 0; b < 256; ++b)
        text += base64(std::string(1, char(b))) + " " + std::to_string(rank++) + "\n";
    for (const auto& m : merges) text += base64(m) + " " + std::to_string(rank++) + "\n";
    return text;
}

std::string config(const std::vector<std::pair<int, std::string>>& added) {
    std::string json = "{\"added_tokens_decoder\": {";
    for (std::size_t i = 0; i < added.size(); ++i) {
        if (i) json += ",";
        json += "\"" + std::to_string(added[i].first) + "\": {\"content\": \"" + added[i].second +
                "\", \"special\": true}";
    }
    return json + "}}";
}

// Loading must fail, and the message must contain `needle` (file, line, value).
void expectLoadError(const std::string& modelText, const std::string& configText,
                     const std::string& needle) {
    try {
        k3::Tokenizer::fromText(modelText, configText, "m.model", "c.json");
    } catch (const k3::TokenizerError& e) {
        const std::string what = e.what();
        QVERIFY2(what.find(needle) != std::string::npos, ("message was: " + what).c_str());
        return;
    }
    QFAIL(("no error; expected one containing: " + needle).c_str());
}

TokenId byteId(char c) {
    return static_cast<unsigned char>(c);
}

} // namespace

class TestTokenizer : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void loadErrors();
    void missingFileIsNamed();
    void addedTokensFollowRanksAndGapsAreReserved();
    void lowestRankMergesFirst();
    void tiesMergeLeftmost();
    void outOfOrderMergesStillFollowRanks();
    void mergesAreOverBytes();
    void specialTokensOnlyWhenAsked();
    void preTokenizerSplits();
    void invalidUtf8IsReplacedLikeTextDecoder();
    void streamDecoderHoldsBackSplitCharacters();
    void streamDecoderReplacesInvalidBytes();
    void roundTrips_data();
    void roundTrips();
    void decodeRejectsUnknownIds();
    void randomBytesComeBackSanitized();

private:
    std::optional<k3::Tokenizer> real_; // the cl100k fixture vocabulary
};

void TestTokenizer::initTestCase() {
    real_ = k3::Tokenizer::fromDirectory(kFixtureDir);
}

void TestTokenizer::loadErrors() {
    const std::string good = model({"ab"});
    const std::string cfg = config({{257, "<|open|>"}});
    QVERIFY(k3::Tokenizer::fromText(good, cfg).vocabSize() == 258);

    expectLoadError(good + "@@@@ 257\n", cfg, "m.model:258: bad base64 '@@@@'");
    expectLoadError(good + "YQ 257\n", cfg, "m.model:258: bad base64");   // unpadded
    expectLoadError(good + "YR== 257\n", cfg, "m.model:258: bad base64"); // stray bits
    expectLoadError(good + base64("xy") + " 12\n", cfg,
                    "m.model:258: duplicate rank 12 (first on line 13)");
    expectLoadError(good + base64("xy") + " 260\n", cfg,
                    "ranks are not contiguous: rank 257 is missing");
    expectLoadError(good + base64("xy") + " -1\n", cfg, "m.model:258: bad rank '-1'");
    expectLoadError(good + base64("xy") + " 2x\n", cfg, "m.model:258: bad rank '2x'");
    expectLoadError(good + base64("xy") + "\n", cfg, "m.model:258: expected 'base64 rank'");
    expectLoadError(good + base64("ab") + " 257\n", cfg,
                    "m.model:258: token bytes repeat rank 256 (line 257)");
    expectLoadError(good + base64("xy") + " 999999999\n", cfg, "m.model:258: rank 999999999");
    expectLoadError("", cfg, "m.model: no ranks");
    {
        std::string noByte41 = model({});
        const std::string line = base64("A") + " 65\n";
        noByte41.replace(noByte41.find(line), line.size(), base64("zz") + " 65\n");
        expectLoadError(noByte41, config({}), "m.model: byte 0x41 has no rank");
    }
    expectLoadError(good, "{", "c.json: not valid JSON");
    expectLoadError(good, "{}", "c.json: missing object 'added_tokens_decoder'");
    expectLoadError(good, config({{200, "<|open|>"}}), "id 200 collides with a BPE rank");
    expectLoadError(good, config({{257, "<|a|>"}, {258, "<|a|>"}}),
                    "added token '<|a|>' appears twice");
    expectLoadError(good, config({{99999999, "<|a|>"}}), "implausibly far");
    expectLoadError(good, "{\"added_tokens_decoder\": {\"x\": {\"content\": \"a\"}}}",
                    "the key is not a token id");
    expectLoadError(good, "{\"added_tokens_decoder\": {\"257\": {\"special\": true}}}",
                    "c.json: added_tokens_decoder[\"257\"]: missing string 'content'");
    // Issue 35 item 19: an eos_token (or bos_token) that names no token was accepted.
    const std::string named = "{\"added_tokens_decoder\": {\"257\": {\"content\": \"[EOS]\"}}, ";
    QCOMPARE(k3::Tokenizer::fromText(good, named + "\"eos_token\": \"[EOS]\"}").vocabSize(),
             std::size_t(258));
    QCOMPARE(k3::Tokenizer::fromText(good, named + "\"eos_token\": {\"content\": \"[EOS]\"}}")
                 .vocabSize(),
             std::size_t(258));
    expectLoadError(good, named + "\"eos_token\": \"<|im_end|>\"}",
                    "c.json: eos_token \"<|im_end|>\" names no token of added_tokens_decoder");
    expectLoadError(good, named + "\"bos_token\": 7}",
                    "c.json: 'bos_token' must be a string or an object with a string 'content'");
}

void TestTokenizer::missingFileIsNamed() {
    try {
        k3::Tokenizer::fromDirectory("/nonexistent/k3-model");
        QFAIL("loaded a missing directory");
    } catch (const k3::TokenizerError& e) {
        const std::string what = e.what();
        QVERIFY2(what.find("/nonexistent/k3-model/tiktoken.model") != std::string::npos,
                 what.c_str());
    }
}

void TestTokenizer::addedTokensFollowRanksAndGapsAreReserved() {
    // The real K3 layout in miniature: added ids start right after the ranks, with gaps.
    const auto tok =
        k3::Tokenizer::fromText(model({"ab"}), config({{257, "[BOS]"}, {260, "<|open|>"}}));
    QCOMPARE(tok.numRanks(), std::size_t(257));
    QCOMPARE(tok.vocabSize(), std::size_t(261));
    QCOMPARE(tok.tokenId("[BOS]"), std::optional<TokenId>(257));
    QCOMPARE(tok.tokenId("<|open|>"), std::optional<TokenId>(260));
    QCOMPARE(tok.tokenId("<|reserved_token_258|>"), std::optional<TokenId>(258));
    QCOMPARE(std::string(tok.tokenBytes(259)), std::string("<|reserved_token_259|>"));
    QVERIFY(tok.isAddedToken(257) && !tok.isAddedToken(256));

    // On the fixture: the names from the reference, at numRanks + index.
    QCOMPARE(real_->tokenId("[BOS]"), std::optional<TokenId>(100256));
    QCOMPARE(real_->tokenId("[EOS]"), std::optional<TokenId>(100257));
    QCOMPARE(real_->tokenId("<|open|>"), std::optional<TokenId>(100259));
    QCOMPARE(real_->tokenId("[PAD]"), std::optional<TokenId>(100256 + 255));
}

void TestTokenizer::lowestRankMergesFirst() {
    // "bc" has the lower rank, so "abc" is a|bc even though "ab" comes first in the text.
    const auto tok = k3::Tokenizer::fromText(model({"bc", "ab"}), config({}));
    QCOMPARE(tok.encode("abc"), (Ids{97, 256}));
    const auto tok2 = k3::Tokenizer::fromText(model({"ab", "bc"}), config({}));
    QCOMPARE(tok2.encode("abc"), (Ids{256, 99}));
    // A merge is only possible through its parts: "abcd" needs "ab"+"cd" first.
    const auto tok3 = k3::Tokenizer::fromText(model({"cd", "ab", "abcd"}), config({}));
    QCOMPARE(tok3.encode("abcdabcd"), (Ids{258, 258}));
}

void TestTokenizer::tiesMergeLeftmost() {
    const auto tok = k3::Tokenizer::fromText(model({"aa"}), config({}));
    QCOMPARE(tok.encode("aaa"), (Ids{256, 97}));
    QCOMPARE(tok.encode("aaaaa"), (Ids{256, 256, 97}));
    const auto tok2 = k3::Tokenizer::fromText(model({"aa", "aaaa"}), config({}));
    QCOMPARE(tok2.encode("aaaaaaaaaaa"), (Ids{257, 257, 256, 97}));
    // Pieces longer than 48 bytes take the bucketed merge; it must agree.
    Ids longRun;
    for (int i = 0; i < 25; ++i) longRun.push_back(257);
    longRun.push_back(97);
    QCOMPARE(tok2.encode(std::string(101, 'a')), longRun);
}

void TestTokenizer::outOfOrderMergesStillFollowRanks() {
    // "bcb" (256) ranks below its own part "bc" (257): after joining b+c, the new pair bc+b
    // must go before the next "bc" to its right, in short and long pieces alike.
    const auto tok = k3::Tokenizer::fromText(model({"bcb", "bc"}), config({}));
    QCOMPARE(tok.encode("bcbc"), (Ids{256, 99}));
    std::string text;
    Ids want;
    for (int i = 0; i < 15; ++i) {
        text += "bcbc";
        want.insert(want.end(), {256, 99});
    }
    QCOMPARE(tok.encode(text), want);
}

void TestTokenizer::mergesAreOverBytes() {
    // "中" is E4 B8 AD. A merge of its first two bytes (not a character) must be used.
    const auto tok = k3::Tokenizer::fromText(model({"\xE4\xB8"}), config({}));
    QCOMPARE(tok.encode("中"), (Ids{256, 0xAD}));
    QCOMPARE(tok.decode(Ids{256}), std::string("\xE4\xB8"));
}

void TestTokenizer::specialTokensOnlyWhenAsked() {
    const std::string text = "say <|open|> now[EOS]";
    const Ids plain = real_->encode(text);
    QVERIFY(std::find(plain.begin(), plain.end(), 100259) == plain.end());
    QVERIFY(std::find(plain.begin(), plain.end(), 100257) == plain.end());
    QCOMPARE(real_->decode(plain), text);

    const Ids chat = real_->encodeWithSpecial(text);
    QCOMPARE(std::count(chat.begin(), chat.end(), 100259), std::ptrdiff_t(1));
    QCOMPARE(chat.back(), TokenId(100257));
    QCOMPARE(real_->decode(chat), text);
    // Ids from npm tiktoken: encode(text, "all") and encode_ordinary(text). "say " is followed
    // by a special token, so its " " stays a piece of its own.
    QCOMPARE(chat, (Ids{37890, 220, 100259, 1457, 100257}));
    QCOMPARE(plain, (Ids{37890, 83739, 2569, 91, 29, 1457, 58, 57040, 60}));
}

void TestTokenizer::preTokenizerSplits() {
    // Merges never cross a piece: "a " exists but "a b" splits as "a" + " b".
    const auto tok = k3::Tokenizer::fromText(model({"a ", " b", "中文", "文,"}), config({}));
    QCOMPARE(tok.encode("a b"), (Ids{97, 257}));
    // Han runs are their own pieces: "中文," splits after the Han run, so 文, cannot merge.
    QCOMPARE(tok.encode("中文,"), (Ids{258, ','}));
}

void TestTokenizer::invalidUtf8IsReplacedLikeTextDecoder() {
    // Expected strings are what WHATWG TextDecoder gives (one U+FFFD per maximal subpart).
    const std::string r = "\xEF\xBF\xBD";
    QCOMPARE(k3::sanitizeUtf8("a\x80z"), "a" + r + "z");
    QCOMPARE(k3::sanitizeUtf8("\xE0\x80\xAF"), r + r + r);
    QCOMPARE(k3::sanitizeUtf8("\xF0\x9F\x98 x"), r + " x");
    QCOMPARE(k3::sanitizeUtf8("\xED\xA0\x80"), r + r + r);
    QCOMPARE(k3::sanitizeUtf8("\xF4\x90\x80\x80"), r + r + r + r);
    QCOMPARE(k3::sanitizeUtf8("\xC0\xAF"), r + r);
    QCOMPARE(k3::sanitizeUtf8("x\xE4\xB8"), "x" + r);
    QCOMPARE(k3::sanitizeUtf8("ok 中 😀"), std::string("ok 中 😀"));
    QVERIFY(k3::isValidUtf8("ok 中 😀"));
    QVERIFY(!k3::isValidUtf8("x\xE4\xB8"));
    QVERIFY(!k3::isValidUtf8("\xED\xA0\x80"));
    // Encoding bytes equals encoding the replaced text.
    QCOMPARE(real_->encode("caf\xC3 \xFF!"), real_->encode("caf" + r + " " + r + "!"));
}

void TestTokenizer::streamDecoderHoldsBackSplitCharacters() {
    const auto tok = k3::Tokenizer::fromText(model({}), config({}));
    k3::StreamDecoder d(tok);
    QCOMPARE(d.push(byteId('h')), std::string("h"));
    // "😀" is F0 9F 98 80: nothing may appear until the fourth byte.
    QCOMPARE(d.push(0xF0), std::string());
    QCOMPARE(d.push(0x9F), std::string());
    QCOMPARE(d.push(0x98), std::string());
    QCOMPARE(d.pendingBytes(), std::size_t(3));
    QCOMPARE(d.push(0x80), std::string("😀"));
    QCOMPARE(d.pendingBytes(), std::size_t(0));
    // A 3-byte character split 1+2, then ASCII.
    QCOMPARE(d.push(0xE4), std::string());
    QCOMPARE(d.push(Ids{0xB8, 0xAD, byteId('!')}), std::string("中!"));
    // A stream that ends inside a character flushes one U+FFFD.
    QCOMPARE(d.push(0xE4), std::string());
    QCOMPARE(d.flush(), std::string("\xEF\xBF\xBD"));
    QCOMPARE(d.flush(), std::string());

    // On the real vocabulary: pushing the ids of a ZWJ emoji sequence one at a time never
    // emits a partial character, and the pieces add up to the text.
    const std::string text = "家族👨‍👩‍👧‍👦 ok é";
    k3::StreamDecoder s(*real_);
    std::string shown;
    for (const TokenId id : real_->encode(text)) {
        const std::string part = s.push(id);
        QVERIFY(k3::isValidUtf8(part));
        shown += part;
    }
    shown += s.flush();
    QCOMPARE(shown, text);
}

void TestTokenizer::streamDecoderReplacesInvalidBytes() {
    const auto tok = k3::Tokenizer::fromText(model({}), config({}));
    k3::StreamDecoder d(tok);
    // A lone continuation byte can never become valid: replaced at once, not held.
    QCOMPARE(d.push(0x80), std::string("\xEF\xBF\xBD"));
    // A lead byte interrupted by ASCII: the lead becomes U+FFFD, the ASCII is kept.
    QCOMPARE(d.push(0xE4), std::string());
    QCOMPARE(d.push(byteId('a')), std::string("\xEF\xBF\xBD"
                                              "a"));
}

void TestTokenizer::roundTrips_data() {
    QTest::addColumn<QByteArray>("text");
    QTest::newRow("ascii") << QByteArray("Hello, world!\n");
    QTest::newRow("cjk") << QByteArray("日本語と中文と한국어");
    QTest::newRow("emoji zwj") << QByteArray("👩🏽‍💻 and 🏳️‍🌈");
    QTest::newRow("combining") << QByteArray("e\xCC\x81\xCC\x82 n\xCC\x83");
    QTest::newRow("whitespace") << QByteArray(" \t\r\n  \n\n\t x  ");
    QTest::newRow("nul byte") << QByteArray("a\0b", 3);
    QTest::newRow("literal specials") << QByteArray("<|open|>[EOS]<|sep|>");
    QTest::newRow("code") << QByteArray("for (int i = 0; i < n; ++i) { s += a[i]; }\n");
}

void TestTokenizer::roundTrips() {
    QFETCH(QByteArray, text);
    const std::string s(text.constData(), std::size_t(text.size()));
    QCOMPARE(real_->decode(real_->encode(s)), s);
    QCOMPARE(real_->decode(real_->encodeWithSpecial(s)), s);
}

void TestTokenizer::decodeRejectsUnknownIds() {
    QVERIFY_THROWS_EXCEPTION(k3::TokenizerError, real_->decode(Ids{100512}));
    QVERIFY_THROWS_EXCEPTION(k3::TokenizerError, real_->decode(Ids{-1}));
    QCOMPARE(std::string(real_->tokenBytes(100511)), std::string("[PAD]"));
}

void TestTokenizer::randomBytesComeBackSanitized() {
    // Arbitrary bytes never crash and come back as their TextDecoder replacement, through
    // both merge paths (pieces shorter and longer than 48 bytes).
    std::uint32_t seed = 7;
    auto next = [&] { return seed = seed * 1664525u + 1013904223u; };
    for (int round = 0; round < 300; ++round) {
        std::string bytes(next() % 300, '\0');
        // Mostly letters and high bytes, so long pieces and broken sequences are common.
        for (char& c : bytes) {
            const std::uint32_t r = next() >> 8;
            c = static_cast<char>(r % 3 == 0 ? 0x80 + r % 0x80 : r % 3 == 1 ? 'a' + r % 5 : r);
        }
        const std::string clean = k3::sanitizeUtf8(bytes);
        QVERIFY(k3::isValidUtf8(clean));
        QCOMPARE(real_->decode(real_->encode(bytes)), clean);
        QCOMPARE(real_->decode(real_->encodeWithSpecial(bytes)), clean);
    }
}

QTEST_GUILESS_MAIN(TestTokenizer)
#include "tst_tokenizer.moc"
