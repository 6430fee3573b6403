// k3 serve's issue 31 features through the official `openai` npm client (installed into
// the build folder as tst_k3serve does): log-probabilities equal to the logits the CLI
// dumps, text completions, models.retrieve, logit_bias, penalties, legacy functions and
// a continued assistant message.
#include "K3Process.hpp"
#include "ServeTestSupport.hpp"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

#include <k3/chat.hpp>
#include <k3/tokenizer.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numeric>

using namespace servetest;

namespace {

const QString kScripts = QStringLiteral(K3_SOURCE_DIR "/tests/app/serve");
const QString kScratch = QStringLiteral(K3_BINARY_DIR "/tests/app/serve-npm");

QJsonArray runCalls(const Server& s, const QJsonArray& calls) {
    QProcess p;
    p.setWorkingDirectory(kScratch);
    const QJsonObject spec{{"baseURL", s.url()}, {"calls", calls}};
    p.start(QStringLiteral("node"),
            {kScratch + "/chat.mjs",
             QString::fromUtf8(QJsonDocument(spec).toJson(QJsonDocument::Compact))});
    if (!p.waitForFinished(120000)) p.kill();
    if (p.exitCode() != 0) qWarning("node failed: %s", p.readAllStandardError().constData());
    return QJsonDocument::fromJson(p.readAllStandardOutput()).array();
}

QJsonObject one(const Server& s, const QJsonObject& params, const QString& kind = "chat") {
    return runCalls(s, {QJsonObject{{"params", params}, {"kind", kind}}})[0].toObject();
}

QJsonObject user(const QString& text) {
    return {{"role", "user"}, {"content", text}};
}

const QJsonObject kNoThinking{{"type", "disabled"}};

} // namespace

class TestK3ServeApi : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void logprobsAreTheDumpedLogits();
    void textCompletions();
    void modelsRetrieve();
    void logitBiasAndPenalties();
    void legacyFunctionsAreTools();
    void lastAssistantMessageIsContinued();
};

void TestK3ServeApi::initTestCase() {
    if (QStandardPaths::findExecutable("npm").isEmpty() ||
        QStandardPaths::findExecutable("node").isEmpty())
        QSKIP("needs node and npm (the official openai client is installed with npm)");
    if (const QString why = prepareOpenAiClient(kScratch, kScripts); !why.isEmpty())
        QSKIP(qPrintable(why));
}

// Item 3: the first token's top_logprobs are the log-softmax of the logits `k3 --ids
// PROMPT --dump-logits` writes for the same prompt, token for token; greedy, the chosen
// token is the most likely. Streamed and not.
void TestK3ServeApi::logprobsAreTheDumpedLogits() {
    const k3::Tokenizer tok = k3::Tokenizer::fromDirectory(kDemo.toStdString());
    const auto ids = k3::encodeChatSegments(
        tok, k3::renderChatSegments({{k3::ChatRole::User, "Hello!"}}, {.thinking = false}));
    QStringList idText;
    for (const auto id : ids) idText << QString::number(id);
    QTemporaryDir dir;
    const QString dumpFile = dir.filePath("logits.f32");
    const K3Run run = runK3({kDemo, "--ids", idText.join(','), "--gen", "1", "--dump-logits",
                             dumpFile, "--out", dir.filePath("run.json")});
    QVERIFY2(run.exitCode == 0, qPrintable(run.err));
    QFile f(dumpFile);
    QVERIFY(f.open(QIODevice::ReadOnly));
    const QByteArray raw = f.readAll();
    std::vector<float> logits(std::size_t(raw.size()) / sizeof(float));
    std::memcpy(logits.data(), raw.constData(), logits.size() * sizeof(float));
    double maxLogit = *std::max_element(logits.begin(), logits.end());
    double sum = 0;
    for (const float l : logits) sum += std::exp(double(l) - maxLogit);
    const double logSum = maxLogit + std::log(sum);
    std::vector<int> order(logits.size());
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int a, int b) { return logits[std::size_t(a)] > logits[std::size_t(b)]; });

    Server s = startServe();
    QVERIFY2(s.port > 0, qPrintable(s.log));
    const QJsonObject params{{"model", "demo"},         {"messages", QJsonArray{user("Hello!")}},
                             {"thinking", kNoThinking}, {"logprobs", true},
                             {"top_logprobs", 5},       {"max_tokens", 1}};
    QJsonObject streamed = params;
    streamed["stream"] = true;
    const QJsonArray r =
        runCalls(s, {QJsonObject{{"params", params}}, QJsonObject{{"params", streamed}}});
    QCOMPARE(r.size(), 2);
    for (const auto& v : r) {
        const QJsonArray content = v.toObject()["logprobs"].toObject()["content"].toArray();
        QCOMPARE(content.size(), 1);
        const QJsonObject first = content[0].toObject();
        const QJsonArray top = first["top_logprobs"].toArray();
        QCOMPARE(top.size(), 5);
        for (int i = 0; i < 5; ++i) {
            const int id = order[std::size_t(i)];
            const double expected = double(logits[std::size_t(id)]) - logSum;
            const QJsonObject t = top[i].toObject();
            QCOMPARE(t["token"].toString(),
                     QString::fromUtf8(QByteArray::fromStdString(std::string(tok.tokenBytes(id)))));
            QVERIFY2(std::fabs(t["logprob"].toDouble() - expected) < 1e-6,
                     qPrintable(QString("%1 vs %2").arg(t["logprob"].toDouble()).arg(expected)));
        }
        // Greedy: the chosen token is the most likely one.
        QCOMPARE(first["token"].toString(), top[0].toObject()["token"].toString());
        QCOMPARE(first["logprob"].toDouble(), top[0].toObject()["logprob"].toDouble());
        QCOMPARE(v.toObject()["content"].toString(), first["token"].toString());
    }
    // top_logprobs without logprobs, and past 20, are refused naming the field.
    QJsonObject alone = params;
    alone.remove("logprobs");
    const QJsonObject refused = one(s, alone);
    QCOMPARE(refused["error"].toObject()["status"].toInt(), 400);
    QCOMPARE(refused["error"].toObject()["message"].toString(),
             QString("top_logprobs: needs logprobs: true"));
    QJsonObject many = params;
    many["top_logprobs"] = 21;
    QCOMPARE(one(s, many)["error"].toObject()["param"].toString(), QString("top_logprobs"));
    QCOMPARE(stopServe(s), 0);
}

// Item 6: client.completions.create, streamed and not: the demo continues its README
// sentence, greedy, and max_tokens defaults to 16.
void TestK3ServeApi::textCompletions() {
    Server s = startServe();
    QVERIFY2(s.port > 0, qPrintable(s.log));
    const QJsonObject params{{"model", "demo"}, {"prompt", "k3chat is"}, {"max_tokens", 8}};
    QJsonObject streamed = params;
    streamed["stream"] = true;
    streamed["stream_options"] = QJsonObject{{"include_usage", true}};
    const QJsonArray r = runCalls(s, {QJsonObject{{"params", params}, {"kind", "completions"}},
                                      QJsonObject{{"params", streamed}, {"kind", "completions"}}});
    QCOMPARE(r.size(), 2);
    for (const auto& v : r) {
        const QJsonObject o = v.toObject();
        QVERIFY2(!o.contains("error"), qPrintable(QJsonDocument(o).toJson()));
        QCOMPARE(o["object"].toString(), QString("text_completion"));
        QCOMPARE(o["content"].toString(), QString(" a desktop app that runs the Kimi K"));
        QCOMPARE(o["finish_reason"].toString(), QString("length"));
        QCOMPARE(o["usage"]["prompt_tokens"].toInt(), 4);
        QCOMPARE(o["usage"]["completion_tokens"].toInt(), 8);
    }
    QVERIFY(r[1].toObject()["chunks"].toInt() > 2);
    // Legacy logprobs: the tokens spell the text.
    QJsonObject withLogprobs = params;
    withLogprobs["logprobs"] = 2;
    const QJsonObject lp = one(s, withLogprobs, "completions");
    const QJsonArray tokens = lp["logprobs"]["tokens"].toArray();
    QCOMPARE(tokens.size(), 8);
    QString joined;
    for (const auto& t : tokens) joined += t.toString();
    QCOMPARE(joined, lp["content"].toString());
    QCOMPARE(lp["logprobs"]["text_offset"].toArray()[1].toInt(), 2);
    // The default max_tokens is 16; the end of the text is a stop.
    const QJsonObject whole = one(s, {{"model", "demo"}, {"prompt", "k3chat is"}}, "completions");
    QCOMPARE(whole["usage"]["completion_tokens"].toInt(), 16);
    QJsonObject echo = params;
    echo["echo"] = true;
    QCOMPARE(one(s, echo, "completions")["error"].toObject()["param"].toString(), QString("echo"));
    QCOMPARE(stopServe(s), 0);
}

void TestK3ServeApi::modelsRetrieve() {
    Server s = startServe();
    QVERIFY2(s.port > 0, qPrintable(s.log));
    const QJsonObject m = one(s, {{"model", "demo"}}, "retrieve");
    QCOMPARE(m["id"].toString(), QString("demo"));
    QCOMPARE(m["object"].toString(), QString("model"));
    const QJsonObject missing = one(s, {{"model", "gpt-4"}}, "retrieve");
    QCOMPARE(missing["error"].toObject()["status"].toInt(), 404);
    QCOMPARE(stopServe(s), 0);
}

// Item 7: logit_bias -100 on the greedy first token gives the runner-up (its log-
// probability then the log-softmax of the biased logits); penalties are deterministic
// and leave the first token (nothing generated yet) alone; a bias on an id outside the
// vocabulary is refused naming it.
void TestK3ServeApi::logitBiasAndPenalties() {
    const k3::Tokenizer tok = k3::Tokenizer::fromDirectory(kDemo.toStdString());
    Server s = startServe();
    QVERIFY2(s.port > 0, qPrintable(s.log));
    const QJsonObject base{{"model", "demo"},         {"messages", QJsonArray{user("Hello!")}},
                           {"thinking", kNoThinking}, {"logprobs", true},
                           {"top_logprobs", 2},       {"max_tokens", 1}};
    const QJsonObject plain = one(s, base);
    const QJsonArray content = plain["logprobs"]["content"].toArray();
    QCOMPARE(content.size(), 1); // indexing an empty array below would be a crash, not a failure
    const QJsonArray top = content[0].toObject()["top_logprobs"].toArray();
    QCOMPARE(top.size(), 2);
    const std::string firstToken = top[0].toObject()["token"].toString().toStdString();
    const auto firstIds = tok.encode(firstToken);
    QCOMPARE(firstIds.size(), std::size_t(1));
    QJsonObject biased = base;
    biased["logit_bias"] = QJsonObject{{QString::number(firstIds[0]), -100}};
    const QJsonObject b = one(s, biased);
    QCOMPARE(b["content"].toString(), top[1].toObject()["token"].toString());

    QJsonObject penalised = base;
    penalised["max_tokens"] = 20;
    penalised["frequency_penalty"] = 2;
    penalised["presence_penalty"] = 1.5;
    const QJsonArray twice =
        runCalls(s, {QJsonObject{{"params", penalised}}, QJsonObject{{"params", penalised}}});
    QCOMPARE(twice[0]["content"].toString(), twice[1]["content"].toString());
    QVERIFY(twice[0]["content"].toString().startsWith(QString::fromStdString(firstToken)));

    QJsonObject outside = base;
    outside["logit_bias"] = QJsonObject{{"99999999", 5}};
    const QJsonObject refused = one(s, outside);
    QCOMPARE(refused["error"].toObject()["status"].toInt(), 400);
    QCOMPARE(refused["error"].toObject()["param"].toString(), QString("logit_bias.99999999"));
    QJsonObject tooBig = base;
    tooBig["presence_penalty"] = 3;
    QCOMPARE(one(s, tooBig)["error"].toObject()["param"].toString(), QString("presence_penalty"));
    QCOMPARE(stopServe(s), 0);
}

// Item 7: functions / function_call render exactly as the same tools / tool_choice.
void TestK3ServeApi::legacyFunctionsAreTools() {
    Server s = startServe();
    QVERIFY2(s.port > 0, qPrintable(s.log));
    const QJsonObject fn{{"name", "get_weather"},
                         {"description", "The weather in a city"},
                         {"parameters", QJsonObject{{"type", "object"}}}};
    const QJsonObject legacy{{"model", "demo"},
                             {"messages", QJsonArray{user("Weather in Paris?")}},
                             {"functions", QJsonArray{fn}},
                             {"function_call", QJsonObject{{"name", "get_weather"}}},
                             {"max_tokens", 1}};
    const QJsonObject tools{
        {"model", "demo"},
        {"messages", QJsonArray{user("Weather in Paris?")}},
        {"tools", QJsonArray{QJsonObject{{"type", "function"}, {"function", fn}}}},
        {"tool_choice", "required"},
        {"max_tokens", 1}};
    const QJsonArray r =
        runCalls(s, {QJsonObject{{"params", legacy}}, QJsonObject{{"params", tools}}});
    QVERIFY2(!r[0].toObject().contains("error"), qPrintable(QJsonDocument(r).toJson()));
    QCOMPARE(r[0]["usage"]["prompt_tokens"].toInt(), r[1]["usage"]["prompt_tokens"].toInt());
    QVERIFY(r[0]["usage"]["prompt_tokens"].toInt() > 30);
    QCOMPARE(stopServe(s), 0);
}

// Item 7: an assistant message last is continued: greedy, the demo's answer to "Hello!"
// given its first words goes on with the rest of that answer.
void TestK3ServeApi::lastAssistantMessageIsContinued() {
    Server s = startServe();
    QVERIFY2(s.port > 0, qPrintable(s.log));
    const QJsonObject r =
        one(s, {{"model", "demo"},
                {"messages", QJsonArray{user("Hello!"), QJsonObject{{"role", "assistant"},
                                                                    {"content", "Hello! I am"}}}},
                {"thinking", kNoThinking}});
    QVERIFY2(!r.contains("error"), qPrintable(QJsonDocument(r).toJson()));
    QCOMPARE(r["content"].toString(),
             QString(" the tiny demo model of k3chat. Ask me about the app."));
    QCOMPARE(r["finish_reason"].toString(), QString("stop"));
    QCOMPARE(stopServe(s), 0);
}

QTEST_GUILESS_MAIN(TestK3ServeApi)
#include "tst_k3serveapi.moc"
