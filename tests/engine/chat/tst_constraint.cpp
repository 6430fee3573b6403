// Constrained decoding (k3/constraint.hpp): the schema compiler's subset and refusals, the
// automaton on texts, the token mask over the demo's vocabulary, and generation under a
// constraint on the demo model (the exactness rule, JSON answers, the think channel).
#include <QTest>

#include <nlohmann/json.hpp>

#include <k3/constraint.hpp>
#include <k3/grammar.hpp>
#include <k3/session.hpp>

#include <optional>

using k3::JsonGrammar;
using k3::grammar::ConstraintState;

namespace {

const std::string kDemo = K3_SOURCE_DIR "/resources/demo";

const k3::Tokenizer& demoTokenizer() {
    static const k3::Tokenizer tok = k3::Tokenizer::fromDirectory(kDemo);
    return tok;
}

k3::Session& demoSession() {
    static std::optional<k3::Session> s;
    if (!s) {
        k3::LaunchConfig o;
        o.modelDir = kDemo;
        s.emplace(k3::Session::open(o));
    }
    return *s;
}

std::vector<k3::ChatMessage> ask(const std::string& question) {
    return {{k3::ChatRole::User, question}};
}

k3::GenerateOptions options(bool thinking, int maxTokens) {
    k3::GenerateOptions g;
    g.render.thinking = thinking;
    g.maxTokens = maxTokens;
    return g;
}

// The exact symbols of `text`, then the end of the turn (the test's own answer shape).
std::shared_ptr<const k3::OutputConstraint>
exactAnswer(const std::string& text, const std::vector<k3::grammar::Symbol>& end) {
    using namespace k3::grammar;
    auto impl = std::make_unique<k3::OutputConstraint::Impl>();
    Grammar& g = impl->grammar;
    Node& answer = g.add(Node::Kind::Literal);
    for (const char c : text) answer.literal.push_back(Symbol(static_cast<unsigned char>(c)));
    answer.literal.insert(answer.literal.end(), end.begin(), end.end());
    impl->thinkFirstRoot = impl->answerFirstRoot = &answer;
    bindVocabulary(*impl, demoTokenizer());
    return std::make_shared<const k3::OutputConstraint>(std::move(impl));
}

std::string schemaErrorPath(const std::string& schema) {
    try {
        JsonGrammar::fromSchema(schema);
    } catch (const k3::SchemaError& e) {
        return e.path() + " | " + e.reason();
    }
    return "accepted";
}

} // namespace

class TestConstraint : public QObject {
    Q_OBJECT
private slots:
    void refusalsNameTheKeyword_data();
    void refusalsNameTheKeyword();
    void textsMatchTheSchema_data();
    void textsMatchTheSchema();
    void maskAtTheStartOfAnObject();
    void thinkChannelIsFree();
    void budgetEndsEveryWalk();
    void admittingThePlainAnswerChangesNoId();
    void jsonAnswerParsesAndValidates();
    void toolCallIsTheNamedFunction();
    void vocabularyIsBuiltOncePerTokenizer();
};

void TestConstraint::refusalsNameTheKeyword_data() {
    QTest::addColumn<QString>("schema");
    QTest::addColumn<QString>("path");
    QTest::newRow("keyword")
        << R"({"type":"object","properties":{"age":{"type":"integer","minimum":0}}})"
        << "properties.age.minimum";
    QTest::newRow("nested items") << R"({"type":"array","items":{"type":"strin"}})"
                                  << "items.type";
    QTest::newRow("anyOf member") << R"({"anyOf":[{"type":"string"},{"pattern":"x"}]})"
                                  << "anyOf[1].pattern";
    QTest::newRow("beside anyOf") << R"({"type":"string","anyOf":[{"type":"string"}]})"
                                  << "type";
    QTest::newRow("required unknown")
        << R"({"type":"object","properties":{},"required":["a"],"additionalProperties":false})"
        << "required[0]";
    QTest::newRow("wrong type's keyword") << R"({"type":"string","items":{}})"
                                          << "items";
    QTest::newRow("tuple") << R"({"type":"array","items":[{}]})"
                           << "items";
    QTest::newRow("min above max") << R"({"type":"string","minLength":3,"maxLength":2})"
                                   << "minLength";
    QTest::newRow("enum none fits") << R"({"type":"integer","enum":["a",1.5]})"
                                    << "enum";
    QTest::newRow("false") << R"({"properties":{"x":false}})"
                           << "properties.x";
    QTest::newRow("not json") << R"({"type":)"
                              << "";
    QTest::newRow("oneOf") << R"({"oneOf":[{}]})"
                           << "oneOf";
}

void TestConstraint::refusalsNameTheKeyword() {
    QFETCH(QString, schema);
    QFETCH(QString, path);
    const std::string got = schemaErrorPath(schema.toStdString());
    QVERIFY2(got != "accepted", qPrintable(schema));
    QCOMPARE(QString::fromStdString(got.substr(0, got.find(" | "))), path);
}

void TestConstraint::textsMatchTheSchema_data() {
    QTest::addColumn<QString>("schema");
    QTest::addColumn<QByteArray>("text");
    QTest::addColumn<bool>("matches");
    const QString person =
        R"({"type":"object","properties":{"name":{"type":"string","maxLength":5},)"
        R"("age":{"type":"integer"},"tags":{"type":"array","items":{"enum":["a","b"]},"maxItems":2}},)"
        R"("required":["name","age"],"additionalProperties":false})";
    QTest::newRow("person") << person << QByteArray(R"({"name":"Ann","age":41})") << true;
    QTest::newRow("any order, spaces")
        << person << QByteArray("{ \"age\" : -3 ,\n \"name\":\"\\u00e9\" }") << true;
    QTest::newRow("missing required") << person << QByteArray(R"({"name":"Ann"})") << false;
    QTest::newRow("extra key") << person << QByteArray(R"({"name":"A","age":1,"x":1})") << false;
    QTest::newRow("key twice") << person << QByteArray(R"({"name":"A","age":1,"age":2})") << false;
    QTest::newRow("too long") << person << QByteArray(R"({"name":"Annabel","age":1})") << false;
    QTest::newRow("integer not float")
        << person << QByteArray(R"({"name":"A","age":1.5})") << false;
    QTest::newRow("enum items") << person << QByteArray(R"({"name":"A","age":1,"tags":["b","a"]})")
                                << true;
    QTest::newRow("enum refused") << person << QByteArray(R"({"name":"A","age":1,"tags":["c"]})")
                                  << false;
    QTest::newRow("maxItems") << person
                              << QByteArray(R"({"name":"A","age":1,"tags":["a","a","a"]})")
                              << false;
    const auto row = [](const char* name, const char* schema, const char* text, bool ok) {
        QTest::newRow(name) << QString(schema) << QByteArray(text) << ok;
    };
    row("nullable", R"({"type":["string","null"]})", "null", true);
    row("anyOf", R"({"anyOf":[{"type":"number"},{"const":{"k":[1,true]}}]})", R"({"k":[1,true]})",
        true);
    row("number forms", R"({"type":"number"})", "-0.5e+10", true);
    row("leading zero", R"({"type":"number"})", "01", false);
    // Every admitted number is a finite double (tst_k3responses once sampled 856E816).
    row("largest number", R"({"type":"number"})", "-9999999999999999.9999999999999999e+99", true);
    row("smallest number", R"({"type":"number"})", "0.0000000000000001e-99", true);
    row("exponent past a double", R"({"type":"number"})", "856E816", false);
    row("three-digit exponent", R"({"type":"number"})", "1e100", false);
    row("any object", R"({"type":"object"})", R"({"a":[{"b":null}],"c":"é"})", true);
    row("not an object", R"({"type":"object"})", "[]", false);
    row("bad utf-8", R"({"type":"string"})", "\"\xC3\x28\"", false);
    row("lone surrogate", R"({"type":"string"})", R"("\ud800")", false);
    row("control char", R"({"type":"string"})", "\"a\nb\"", false);
    row("additional schema", R"({"additionalProperties":{"type":"boolean"}})",
        R"({"x":true,"y":false})", true);
    row("additional refused", R"({"additionalProperties":{"type":"boolean"}})", R"({"x":1})",
        false);
}

void TestConstraint::textsMatchTheSchema() {
    QFETCH(QString, schema);
    QFETCH(QByteArray, text);
    QFETCH(bool, matches);
    const JsonGrammar g = JsonGrammar::fromSchema(schema.toStdString());
    QCOMPARE(k3::grammar::matches(g.data(), text.toStdString()), matches);
}

void TestConstraint::maskAtTheStartOfAnObject() {
    const k3::Tokenizer& tok = demoTokenizer();
    const auto c = k3::OutputConstraint::jsonAnswer(JsonGrammar::anyObject(), tok);
    const ConstraintState state(*c, /*thinkFirst=*/false);
    const std::vector<k3::TokenId> ids = state.allowed(100);
    QVERIFY(!ids.empty());
    for (const k3::TokenId id : ids) {
        QVERIFY(!tok.isAddedToken(id));
        const std::string_view bytes = tok.tokenBytes(id);
        QVERIFY2(bytes.find_first_not_of(" \t\r\n") != std::string_view::npos
                     ? bytes[bytes.find_first_not_of(" \t\r\n")] == '{'
                     : true,
                 std::string(bytes).c_str());
    }
    const k3::TokenId brace = tok.encode("{").at(0);
    QVERIFY(std::binary_search(ids.begin(), ids.end(), brace));
    QVERIFY(state.allows(brace, 100));
    // "{}" (2 tokens), <|close|>response<|sep|> (3: "response" is one token of the demo's
    // vocabulary) and an end marker.
    QCOMPARE(tok.encode("response").size(), std::size_t(1));
    QCOMPARE(state.minRemaining(), 2 + 3 + 1);
    QVERIFY(state.allows(brace, 5));
    QVERIFY(!state.allows(brace, 4));
}

void TestConstraint::thinkChannelIsFree() {
    const k3::Tokenizer& tok = demoTokenizer();
    const auto c = k3::OutputConstraint::jsonAnswer(JsonGrammar::anyObject(), tok);
    ConstraintState state(*c, /*thinkFirst=*/true);
    for (const k3::TokenId id : tok.encode("Let me think: \"{[\" is no JSON.")) {
        QVERIFY(state.allows(id, 100));
        state.advance(id);
    }
    QVERIFY(!state.allows(*tok.tokenId("[EOS]"), 100));
    QVERIFY(!state.allows(*tok.tokenId("<|open|>"), 100));
    const k3::TokenId close = *tok.tokenId("<|close|>");
    QVERIFY(state.allows(close, 100));
    state.advance(close);
    for (const k3::TokenId id : tok.encode("think")) state.advance(id);
    QVERIFY(!state.dead());
    QCOMPARE(state.allowed(100), std::vector<k3::TokenId>{*tok.tokenId("<|sep|>")});
}

// Random walks over the allowed tokens end the turn within the budget, and the answer is
// JSON of the schema.
void TestConstraint::budgetEndsEveryWalk() {
    const k3::Tokenizer& tok = demoTokenizer();
    const auto c = k3::OutputConstraint::jsonAnswer(
        JsonGrammar::fromSchema(R"({"type":"object","properties":{"a":{"type":"array","items":)"
                                R"({"type":"string"},"minItems":2},"b":{"type":"number"}},)"
                                R"("required":["a","b"]})"),
        tok);
    std::uint64_t seed = 12345;
    for (int walk = 0; walk < 20; ++walk) {
        const int budget = 40 + walk * 3;
        ConstraintState state(*c, walk % 2 == 1);
        std::vector<k3::TokenId> ids;
        for (int i = 0; i < budget && !state.dead(); ++i) {
            const std::vector<k3::TokenId> allowed = state.allowed(budget - i - 1);
            QVERIFY2(!allowed.empty(), qPrintable(QString("walk %1 step %2").arg(walk).arg(i)));
            // The mask (trie walk, plain tokens by arithmetic) is the one-by-one check's.
            std::vector<k3::TokenId> each;
            for (k3::TokenId id = 0; id < k3::TokenId(tok.vocabSize()); ++id)
                if (state.allows(id, budget - i - 1)) each.push_back(id);
            QCOMPARE(allowed, each);
            seed = seed * 6364136223846793005ull + 1442695040888963407ull;
            const k3::TokenId id = allowed[std::size_t(seed >> 33) % allowed.size()];
            ids.push_back(id);
            state.advance(id);
            if (id == *tok.tokenId("[EOS]") || id == *tok.tokenId("<|end_of_msg|>")) break;
        }
        QCOMPARE(state.minRemaining(), 0);
        k3::ChatRenderOptions render;
        render.thinking = walk % 2 == 1;
        k3::ReplyReader reader(tok, render);
        for (const k3::TokenId id : ids) reader.push(id);
        QVERIFY(reader.endOfTurn());
        std::vector<std::string> problems;
        const auto doc = nlohmann::json::parse(reader.reply(problems).content);
        QCOMPARE(doc.at("a").size() >= 2, true);
        QVERIFY(doc.at("b").is_number());
    }
}

void TestConstraint::admittingThePlainAnswerChangesNoId() {
    k3::Session& s = demoSession();
    const k3::Tokenizer& tok = s.tokenizer();
    for (const float temperature : {0.0f, 0.9f}) {
        k3::GenerateOptions g = options(false, 64);
        g.sampling.temperature = temperature;
        g.sampling.seed = 7;
        s.reset();
        const k3::GenerateResult plain = s.chat(ask("Hello!"), g);
        QVERIFY(plain.endOfTurn);
        // The plain answer's symbols exactly: every other token is refused at each step.
        std::vector<k3::grammar::Symbol> all;
        for (const k3::TokenId id : plain.ids) {
            const std::string_view bytes = tok.tokenBytes(id);
            if (tok.isAddedToken(id))
                all.push_back(bytes == "<|close|>"  ? k3::grammar::kClose
                              : bytes == "<|sep|>"  ? k3::grammar::kSep
                              : bytes == "[EOS]"    ? k3::grammar::kEos
                              : bytes == "<|open|>" ? k3::grammar::kOpen
                                                    : k3::grammar::kEndOfMessage);
            else
                for (const char ch : bytes)
                    all.push_back(k3::grammar::Symbol(static_cast<unsigned char>(ch)));
        }
        g.constraint = exactAnswer("", all);
        s.reset();
        const k3::GenerateResult constrained = s.chat(ask("Hello!"), g);
        QCOMPARE(constrained.ids, plain.ids);
        QCOMPARE(constrained.reply.content, plain.reply.content);
    }
}

void TestConstraint::jsonAnswerParsesAndValidates() {
    k3::Session& s = demoSession();
    const std::string schema =
        R"({"type":"object","properties":{"answer":{"type":"string","maxLength":40},)"
        R"("confidence":{"type":"integer"},"sure":{"type":"boolean"}},)"
        R"("required":["answer","confidence","sure"],"additionalProperties":false})";
    for (const bool thinking : {false, true})
        for (const float temperature : {0.0f, 1.0f}) {
            k3::GenerateOptions g = options(thinking, 80);
            g.sampling.temperature = temperature;
            g.sampling.seed = 3;
            g.constraint =
                k3::OutputConstraint::jsonAnswer(JsonGrammar::fromSchema(schema), s.tokenizer());
            s.reset();
            const k3::GenerateResult r = s.chat(ask("What is MXFP4?"), g);
            QVERIFY(r.endOfTurn);
            QVERIFY(r.reply.toolCalls.empty());
            const auto doc = nlohmann::json::parse(r.reply.content);
            QCOMPARE(doc.size(), std::size_t(3));
            QVERIFY(doc.at("answer").is_string());
            QVERIFY(doc.at("answer").get<std::string>().size() <= 80);
            QVERIFY(doc.at("confidence").is_number_integer());
            QVERIFY(doc.at("sure").is_boolean());
            QVERIFY(int(r.ids.size()) <= 80);
        }
}

void TestConstraint::toolCallIsTheNamedFunction() {
    k3::Session& s = demoSession();
    k3::ToolCallTarget weather{
        "get_weather",
        JsonGrammar::fromSchema(R"({"type":"object","properties":{"city":{"type":"string",)"
                                R"("maxLength":20}},"required":["city"],)"
                                R"("additionalProperties":false})")};
    for (const bool thinking : {false, true}) {
        // The call's markup alone is 78 tokens of the demo's small vocabulary.
        k3::GenerateOptions g = options(thinking, 120);
        g.constraint = k3::OutputConstraint::toolCall({weather}, s.tokenizer());
        s.reset();
        const k3::GenerateResult r = s.chat(ask("What is the weather in Paris?"), g);
        QVERIFY(r.endOfTurn);
        QCOMPARE(r.reply.toolCalls.size(), std::size_t(1));
        QCOMPARE(r.reply.toolCalls[0].name, std::string("get_weather"));
        QVERIFY(r.reply.content.empty());
        // Written as a json block, read as the object it holds.
        QVERIFY(!r.reply.toolCalls[0].argumentsAsJsonBlock);
        const auto args = nlohmann::json::parse(r.reply.toolCalls[0].arguments);
        QCOMPARE(args.size(), std::size_t(1));
        QVERIFY(args.at("city").is_string());
    }
}

// The vocabulary's tables (the byte tries, ~1.2 s at 160k tokens) are built once: a second
// constraint, even over another Tokenizer object loaded from the same files, shares them;
// its masks are the first one's.
void TestConstraint::vocabularyIsBuiltOncePerTokenizer() {
    const auto first = k3::OutputConstraint::jsonAnswer(JsonGrammar::anyObject(), demoTokenizer());
    const std::uint64_t builds = k3::grammar::vocabularyBuilds();
    QVERIFY(builds >= 1);
    const k3::Tokenizer again = k3::Tokenizer::fromDirectory(kDemo);
    const auto second = k3::OutputConstraint::jsonAnswer(JsonGrammar::anyObject(), again);
    const auto call = k3::OutputConstraint::toolCall({{"get_weather"}}, again);
    QCOMPARE(k3::grammar::vocabularyBuilds(), builds);
    QCOMPARE(second->impl().vocab.get(), first->impl().vocab.get());
    QCOMPARE(call->impl().vocab.get(), first->impl().vocab.get());
    ConstraintState a(*first, false), b(*second, false);
    const auto masks = a.allowed(100);
    QVERIFY(!masks.empty());
    QCOMPARE(b.allowed(100), masks);
}

QTEST_GUILESS_MAIN(TestConstraint)
#include "tst_constraint.moc"
