// `k3 serve resources/demo` driven by the official `openai` npm client (installed by
// this test from the npm registry into the build folder, never committed) and compared
// with what the k3 CLI answers for the same conversation, seed and options.
#include "K3Process.hpp"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QTest>

#include <cstdio>

#include <fstream>
#include <memory>

#include <k3/chat.hpp>
#include <k3/tokenizer.hpp>
#include <nlohmann/json.hpp>

namespace {

const QString kDemo = QStringLiteral(K3_SOURCE_DIR "/resources/demo");
const QString kScripts = QStringLiteral(K3_SOURCE_DIR "/tests/app/serve");
const QString kScratch = QStringLiteral(K3_BINARY_DIR "/tests/app/serve-npm");

// The demo's greedy answers with thinking off (resources/demo/README.md).
const QList<QPair<QString, QString>> kAnswers = {
    {"What is k3chat?", "k3chat is a desktop app that runs the Kimi K3 model on your CPU by "
                        "streaming its weights from disk."},
    {"Hello!", "Hello! I am the tiny demo model of k3chat. Ask me about the app."},
    {"How do I pick a preset?", "Pick the preset that fits your RAM: laptop for 16 GB, desktop "
                                "for 32 GB, workstation for 96 GB."},
    {"What is MXFP4?", "MXFP4 stores each weight in 4 bits, with one shared power of two scale "
                       "for every 32 weights."},
};

struct Server {
    std::unique_ptr<QProcess> process;
    int port = 0;
    QString log; // stderr, read when stopped
    QString url() const { return QStringLiteral("http://127.0.0.1:%1/v1").arg(port); }
};

// Starts k3 serve on a free port; the port is read from its "listening" line.
Server startServe(const QStringList& extra = {}) {
    Server s;
    s.process = std::make_unique<QProcess>();
    s.process->start(QStringLiteral(K3_CLI_PATH),
                     QStringList{"serve", kDemo, "--port", "0"} + extra);
    QByteArray err;
    const QRegularExpression listening(QStringLiteral(R"(on http://\S+:(\d+)/v1)"));
    for (int i = 0; i < 200 && s.port == 0; ++i) {
        s.process->waitForReadyRead(100);
        err += s.process->readAllStandardError();
        const auto m = listening.match(QString::fromUtf8(err));
        if (m.hasMatch()) s.port = m.captured(1).toInt();
    }
    s.log = QString::fromUtf8(err);
    return s;
}

// SIGTERM, as a service manager stops it: exit 0 after a clean shutdown.
int stopServe(Server& s) {
    s.process->terminate();
    if (!s.process->waitForFinished(10000)) {
        s.process->kill();
        s.process->waitForFinished();
        return -1;
    }
    s.log += QString::fromUtf8(s.process->readAllStandardError());
    return s.process->exitStatus() == QProcess::NormalExit ? s.process->exitCode() : -2;
}

QJsonDocument runNode(const QString& script, const QJsonObject& spec) {
    QProcess p;
    p.setWorkingDirectory(kScratch);
    p.start(QStringLiteral("node"),
            {kScratch + "/" + script,
             QString::fromUtf8(QJsonDocument(spec).toJson(QJsonDocument::Compact))});
    if (!p.waitForFinished(120000)) p.kill();
    const QByteArray out = p.readAllStandardOutput();
    if (p.exitCode() != 0)
        qWarning("node %s failed: %s", qPrintable(script), p.readAllStandardError().constData());
    return QJsonDocument::fromJson(out);
}

QJsonObject call(const QJsonObject& params, int abortAfterChunks = 0, int delayMs = 0) {
    QJsonObject c{{"params", params}};
    if (abortAfterChunks) c["abortAfterChunks"] = abortAfterChunks;
    if (delayMs) c["delayMs"] = delayMs;
    return c;
}

QJsonArray chat(const Server& s, const QJsonArray& calls, bool concurrent = false,
                const QString& apiKey = {}) {
    QJsonObject spec{{"baseURL", s.url()}, {"calls", calls}, {"concurrent", concurrent}};
    if (!apiKey.isEmpty()) spec["apiKey"] = apiKey;
    return runNode("chat.mjs", spec).array();
}

QJsonObject raw(const QJsonObject& spec) {
    return runNode("raw.mjs", spec).object();
}

QJsonObject user(const QString& text) {
    return {{"role", "user"}, {"content", text}};
}

// What k3 --chat printed for each turn: the think channel, the answer, and the figures
// of its "[reused R of P positions, N tokens ...]" line.
struct CliTurn {
    QString reasoning, content;
    int reused = -1, prompt = -1, tokens = -1;
};

QList<CliTurn> cliChat(const QStringList& messages, const QStringList& flags) {
    const K3Run r =
        runK3(QStringList{kDemo, "--chat"} + flags, (messages.join('\n') + '\n').toUtf8());
    QList<CliTurn> turns;
    if (r.exitCode != 0) {
        qWarning("k3 --chat failed: %s", qPrintable(r.err));
        return turns;
    }
    // Pipe output per turn: ["<think>\n" R "\n</think>\n"] ANSWER "\n".
    QString out = r.out;
    const QRegularExpression figures(
        QStringLiteral(R"(\[reused (\d+) of (\d+) positions, (\d+) tokens)"));
    auto it = figures.globalMatch(r.err);
    for (int i = 0; i < messages.size(); ++i) {
        CliTurn t;
        if (out.startsWith("<think>\n")) {
            const int end = out.indexOf("\n</think>\n");
            t.reasoning = out.mid(8, end - 8);
            out = out.mid(end + 10);
        }
        const int nl = out.indexOf('\n');
        t.content = out.left(nl);
        out = out.mid(nl + 1);
        if (it.hasNext()) {
            const auto m = it.next();
            t.reused = m.captured(1).toInt();
            t.prompt = m.captured(2).toInt();
            t.tokens = m.captured(3).toInt();
        }
        turns.push_back(t);
    }
    return turns;
}

} // namespace

class TestK3Serve : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void answersAndUsageEqualTheCli();
    void reasoningArrivesSeparately();
    void toolConversationsRenderAsTheTemplate();
    void disconnectFreesTheServer();
    void nonStreamedDisconnectCancels();
    void concurrentClientsAreServedInTurn();
    void refusals();
    void apiKeyAndBinding();
};

// The official client, from the npm registry, once per build folder.
void TestK3Serve::initTestCase() {
    QVERIFY(QDir().mkpath(kScratch));
    if (!QFile::exists(kScratch + "/node_modules/openai/package.json")) {
        QProcess npm;
        npm.start(QStringLiteral("npm"),
                  {"install", "--prefix", kScratch, "--no-audit", "--no-fund", "openai@4"});
        const bool finished = npm.waitForFinished(300000);
        if (!finished || npm.exitStatus() != QProcess::NormalExit || npm.exitCode() != 0)
            QFAIL(qPrintable("npm install --prefix " + kScratch +
                             " openai@4 failed (this test needs the npm registry): " +
                             QString::fromUtf8(npm.readAllStandardError())));
    }
    // ESM resolves `openai` from the script's folder: the scripts run from the scratch.
    // Copied beside and renamed over: tst_k3serveapi, tst_k3constrained and tst_k3responses
    // run chat.mjs from the same folder at the same time (ctest -j2), and a remove-then-copy
    // here made their node fail with MODULE_NOT_FOUND (seen with --repeat until-fail).
    for (const QString& name : {"chat.mjs", "raw.mjs"}) {
        const QString temp =
            kScratch + "/" + name + "." + QString::number(QCoreApplication::applicationPid());
        QFile::remove(temp);
        QVERIFY(QFile::copy(kScripts + "/" + name, temp));
        QCOMPARE(std::rename(QFile::encodeName(temp).constData(),
                             QFile::encodeName(kScratch + "/" + name).constData()),
                 0); // replaces the old copy in one step (QFile::rename would refuse)
    }
}

// Greedy, thinking off, two turns: the answers, the prompt and completion token counts
// and the reused prefix are the CLI's, turn for turn (the second turn reuses the first's
// state, as k3 --chat does).
void TestK3Serve::answersAndUsageEqualTheCli() {
    const QList<CliTurn> cli = cliChat({kAnswers[0].first, kAnswers[1].first}, {"--no-think"});
    QCOMPARE(cli.size(), 2);
    QCOMPARE(cli[0].content, kAnswers[0].second);
    QVERIFY(!cli[1].content.isEmpty()); // after a turn the demo may pick another sentence

    Server s = startServe();
    QVERIFY2(s.port > 0, qPrintable(s.log));
    const QJsonObject off{{"type", "disabled"}};
    const QJsonArray first = chat(s, {call({{"model", "demo"},
                                            {"messages", QJsonArray{user(kAnswers[0].first)}},
                                            {"thinking", off}})});
    QCOMPARE(first.size(), 1);
    const QJsonObject a = first[0].toObject();
    QCOMPARE(a["object"].toString(), QString("chat.completion"));
    QCOMPARE(a["model"].toString(), QString("demo"));
    QCOMPARE(a["content"].toString(), cli[0].content);
    QCOMPARE(a["reasoning"].toString(), QString());
    QCOMPARE(a["finish_reason"].toString(), QString("stop"));
    QCOMPARE(a["usage"]["prompt_tokens"].toInt(), cli[0].prompt);
    QCOMPARE(a["usage"]["completion_tokens"].toInt(), cli[0].tokens);
    QCOMPARE(a["usage"]["total_tokens"].toInt(), cli[0].prompt + cli[0].tokens);
    QCOMPARE(a["usage"]["prompt_tokens_details"]["cached_tokens"].toInt(), 0);

    // The continued conversation, streamed.
    const QJsonArray history{user(kAnswers[0].first),
                             QJsonObject{{"role", "assistant"}, {"content", a["content"]}},
                             user(kAnswers[1].first)};
    const QJsonArray second =
        chat(s, {call({{"model", "demo"},
                       {"messages", history},
                       {"thinking", off},
                       {"stream", true},
                       {"stream_options", QJsonObject{{"include_usage", true}}}})});
    const QJsonObject b = second[0].toObject();
    QCOMPARE(b["object"].toString(), QString("chat.completion.chunk"));
    QCOMPARE(b["content"].toString(), cli[1].content);
    QCOMPARE(b["finish_reason"].toString(), QString("stop"));
    QCOMPARE(b["usage"]["prompt_tokens"].toInt(), cli[1].prompt);
    QCOMPARE(b["usage"]["completion_tokens"].toInt(), cli[1].tokens);
    // The prefix the first turn left in the state is not computed again.
    QCOMPARE(b["usage"]["prompt_tokens_details"]["cached_tokens"].toInt(), cli[1].reused);
    QVERIFY(cli[1].reused >= cli[0].prompt);

    QCOMPARE(stopServe(s), 0);
    QVERIFY2(s.log.contains("k3 serve: POST /v1/chat/completions 200 tokens=" +
                            QString::number(cli[0].prompt) + "+" + QString::number(cli[0].tokens) +
                            " "),
             qPrintable(s.log));
    QVERIFY2(s.log.contains("k3 serve: stopping (SIGTERM)"), qPrintable(s.log));
}

// Thinking on, sampled with a seed: the think channel comes as reasoning_content deltas,
// all before the content deltas, and both equal the CLI's channels for the same seed.
void TestK3Serve::reasoningArrivesSeparately() {
    const QList<CliTurn> cli =
        cliChat({"Hello!"}, {"--temperature", "2", "--seed", "6", "--max-tokens", "40"});
    QCOMPARE(cli.size(), 1);
    QVERIFY(!cli[0].reasoning.isEmpty() && !cli[0].content.isEmpty());

    Server s = startServe();
    QVERIFY2(s.port > 0, qPrintable(s.log));
    const QJsonObject params{{"model", "demo"},
                             {"messages", QJsonArray{user("Hello!")}},
                             {"temperature", 2},
                             {"seed", 6},
                             {"max_tokens", 40}};
    QJsonObject streamed = params;
    streamed["stream"] = true;
    const QJsonArray r = chat(s, {call(params), call(streamed)});
    QCOMPARE(r.size(), 2);
    for (const auto& v : r) {
        const QJsonObject o = v.toObject();
        QCOMPARE(o["reasoning"].toString(), cli[0].reasoning);
        QCOMPARE(o["content"].toString(), cli[0].content);
        QCOMPARE(o["finish_reason"].toString(), QString("length"));
    }
    const QJsonObject st = r[1].toObject();
    QVERIFY(st["reasoningChunks"].toInt() > 0);
    QVERIFY(st["contentChunks"].toInt() > 0);
    QCOMPARE(st["reasoningAfterContent"].toBool(), false);
    QCOMPARE(stopServe(s), 0);
}

// The template fixtures with tools, tool_choice, assistant tool_calls and tool results
// sent through the openai client: the server's prompt is exactly the official
// template's render (its token count, encoded with the demo's tokenizer).
void TestK3Serve::toolConversationsRenderAsTheTemplate() {
    std::ifstream in(K3_SOURCE_DIR "/tests/fixtures/chat/tool_renders.json");
    QVERIFY(in.good());
    const auto doc = nlohmann::ordered_json::parse(in);
    const k3::Tokenizer tok = k3::Tokenizer::fromDirectory(kDemo.toStdString());
    Server s = startServe();
    QVERIFY2(s.port > 0, qPrintable(s.log));
    int checked = 0;
    for (const auto& c : doc.at("cases")) {
        const std::string name = c.at("name").get<std::string>();
        if (name != "calls_and_results_by_id" && name != "string_arguments" &&
            name != "tool_choice_required")
            continue;
        // Arguments the template took as a string (a json block) travel as a JSON string
        // holding that text, as k3 serve sends such a call (a mapping as its object).
        nlohmann::ordered_json messages = c.at("messages");
        for (auto& m : messages)
            if (m.contains("tool_calls"))
                for (auto& tc : m["tool_calls"])
                    if (tc["function"]["arguments"].is_string())
                        tc["function"]["arguments"] =
                            nlohmann::ordered_json(tc["function"]["arguments"]).dump();
        nlohmann::ordered_json params = {
            {"model", "demo"}, {"messages", messages}, {"max_tokens", 1}};
        const auto& o = c.at("options");
        if (o.contains("tools")) params["tools"] = o.at("tools");
        if (o.contains("tool_choice")) params["tool_choice"] = o.at("tool_choice");
        const QJsonObject p =
            QJsonDocument::fromJson(QByteArray::fromStdString(params.dump())).object();
        // The same request streamed, as tools-using clients stream it.
        QJsonObject streamed = p;
        streamed["stream"] = true;
        streamed["stream_options"] = QJsonObject{{"include_usage", true}};
        const QJsonArray r = chat(s, {call(p), call(streamed)});
        QCOMPARE(r.size(), 2);
        const auto ids = tok.encodeWithSpecial(c.at("expected").get<std::string>());
        for (const auto& v : r) {
            const QJsonObject got = v.toObject();
            QVERIFY2(!got.contains("error"), qPrintable(QJsonDocument(got).toJson()));
            QCOMPARE(got["usage"]["prompt_tokens"].toInt(), int(ids.size()));
            QCOMPARE(got["usage"]["completion_tokens"].toInt(), 1);
            // One token is no call: the answer's shape says so (tst_api covers calls).
            QCOMPARE(got["finish_reason"].toString(), QString("length"));
            QVERIFY(got["tool_calls"].isNull());
        }
        ++checked;
    }
    QCOMPARE(checked, 3);
    QCOMPARE(stopServe(s), 0);
}

// A long sampled answer (1063 tokens with this seed) dropped after three chunks: the
// next request is answered within a second, not after the rest of the first, and the
// state is still warm: the same conversation reuses its rendered history (the
// positions up to the generation prompt, where the session keeps its snapshot).
void TestK3Serve::disconnectFreesTheServer() {
    Server s = startServe();
    QVERIFY2(s.port > 0, qPrintable(s.log));
    QJsonObject longAnswer{{"model", "demo"},    {"messages", QJsonArray{user("Hello!")}},
                           {"temperature", 2},   {"seed", 3},
                           {"max_tokens", 3000}, {"stream", true}};
    QJsonObject again = longAnswer;
    again["stream"] = false;
    again["max_tokens"] = 1;
    const QJsonObject next{{"model", "demo"},
                           {"messages", QJsonArray{user(kAnswers[1].first)}},
                           {"thinking", QJsonObject{{"type", "disabled"}}}};
    const QJsonArray r = chat(s, {call(longAnswer, 3), call(again), call(next)});
    QCOMPARE(r.size(), 3);
    QCOMPARE(r[0].toObject()["chunks"].toInt(), 3);
    const QJsonObject b = r[1].toObject();
    QVERIFY2(!b.contains("error"), qPrintable(QJsonDocument(b).toJson()));
    QVERIFY2(b["ms"].toDouble() < 1000, qPrintable(QString::number(b["ms"].toDouble())));
    const k3::Tokenizer tok = k3::Tokenizer::fromDirectory(kDemo.toStdString());
    const auto history =
        k3::encodeChatSegments(tok, k3::renderChatSegments({{k3::ChatRole::User, "Hello!"}},
                                                           {.addGenerationPrompt = false}));
    QCOMPARE(b["usage"]["prompt_tokens_details"]["cached_tokens"].toInt(), int(history.size()));
    QCOMPARE(r[2].toObject()["content"].toString(), kAnswers[1].second);
    QCOMPARE(stopServe(s), 0);
    // The dropped request generated far fewer than its 1063 tokens.
    const QRegularExpression dropped(
        QStringLiteral(R"(POST /v1/chat/completions 200 tokens=192\+(\d+) )"));
    const auto m = dropped.match(s.log);
    QVERIFY2(m.hasMatch(), qPrintable(s.log));
    QVERIFY2(m.captured(1).toInt() < 1063, qPrintable(s.log));
}

// A client that gives up on a non-streamed answer (it writes nothing until the end):
// the server notices the closed connection and stops generating.
void TestK3Serve::nonStreamedDisconnectCancels() {
    Server s = startServe();
    QVERIFY2(s.port > 0, qPrintable(s.log));
    QJsonObject longAnswer{{"model", "demo"},    {"messages", QJsonArray{user("Hello!")}},
                           {"temperature", 2},   {"seed", 3},
                           {"max_tokens", 3000}, {"stream", false}};
    QJsonObject abandoned = call(longAnswer);
    abandoned["abortAfterMs"] = 100;
    const QJsonObject next{{"model", "demo"},
                           {"messages", QJsonArray{user(kAnswers[1].first)}},
                           {"thinking", QJsonObject{{"type", "disabled"}}}};
    const QJsonArray r = chat(s, {abandoned, call(next)});
    QCOMPARE(r.size(), 2);
    QVERIFY2(r[0].toObject().contains("error"),
             qPrintable(QJsonDocument(r[0].toObject()).toJson()));
    QCOMPARE(r[1].toObject()["content"].toString(), kAnswers[1].second);
    QCOMPARE(stopServe(s), 0);
    // Uncancelled, this answer is 1063 tokens (disconnectFreesTheServer's stream).
    const QRegularExpression dropped(
        QStringLiteral(R"(POST /v1/chat/completions 200 tokens=192\+(\d+) )"));
    const auto m = dropped.match(s.log);
    QVERIFY2(m.hasMatch(), qPrintable(s.log));
    QVERIFY2(m.captured(1).toInt() < 1063, qPrintable(s.log));
}

// Four clients at once (two streaming): each gets its own whole answer.
void TestK3Serve::concurrentClientsAreServedInTurn() {
    Server s = startServe();
    QVERIFY2(s.port > 0, qPrintable(s.log));
    QJsonArray calls;
    for (int i = 0; i < 4; ++i) {
        QJsonObject p{{"model", "demo"},
                      {"messages", QJsonArray{user(kAnswers[i].first)}},
                      {"thinking", QJsonObject{{"type", "disabled"}}},
                      {"stream", i % 2 == 1}};
        calls.append(call(p, 0, i * 20));
    }
    const QJsonArray r = chat(s, calls, true);
    QCOMPARE(r.size(), 4);
    for (int i = 0; i < 4; ++i) {
        const QJsonObject o = r[i].toObject();
        QVERIFY2(!o.contains("error"), qPrintable(QJsonDocument(o).toJson()));
        QCOMPARE(o["content"].toString(), kAnswers[i].second);
        QCOMPARE(o["finish_reason"].toString(), QString("stop"));
    }
    QCOMPARE(stopServe(s), 0);
    QCOMPARE(s.log.count("POST /v1/chat/completions 200 tokens="), 4);
}

void TestK3Serve::refusals() {
    Server s = startServe({"--max-body-mb", "1", "--queue", "0"});
    QVERIFY2(s.port > 0, qPrintable(s.log));
    const QString chatUrl = s.url() + "/chat/completions";

    const QJsonObject malformed = raw({{"url", chatUrl}, {"body", "{\"messages\": ["}});
    QCOMPARE(malformed["status"].toInt(), 400);
    QVERIFY(malformed["body"]["error"]["message"].toString().startsWith(
        "the request body is not valid JSON: "));
    QCOMPARE(malformed["body"]["error"]["type"].toString(), QString("invalid_request_error"));

    // A body over --max-body-mb 1.
    const QJsonObject big =
        raw({{"url", chatUrl}, {"repeat", QJsonObject{{"text", "xxxxxxxx"}, {"times", 160000}}}});
    QCOMPARE(big["status"].toInt(), 413);
    QCOMPARE(big["body"]["error"]["message"].toString(),
             QString("the request body is over the 1 MB limit (k3 serve --max-body-mb)"));

    const QJsonObject missing = raw({{"url", s.url() + "/embeddings"}, {"body", "{}"}});
    QCOMPARE(missing["status"].toInt(), 404);
    QCOMPARE(missing["body"]["error"]["message"].toString(),
             QString("no route POST /v1/embeddings (GET /v1/models, GET /v1/models/{id}, POST "
                     "/v1/chat/completions, POST /v1/completions, POST /v1/messages, POST "
                     "/v1/responses, POST /tokenize, POST /detokenize, GET /metrics, GET "
                     "/health)"));

    // Through the official client: a field of the wrong type, an unknown role.
    const QJsonArray r = chat(
        s, {call({{"model", "demo"}, {"messages", QJsonArray{user("x")}}, {"temperature", "hot"}}),
            call({{"model", "demo"},
                  {"messages", QJsonArray{QJsonObject{{"role", "bot"}, {"content", "x"}}}}})});
    QCOMPARE(r.size(), 2);
    QCOMPARE(r[0]["error"]["status"].toInt(), 400);
    QCOMPARE(r[0]["error"]["message"].toString(),
             QString("temperature: expected a number, got a string"));
    QCOMPARE(r[0]["error"]["param"].toString(), QString("temperature"));
    QCOMPARE(r[1]["error"]["status"].toInt(), 400);
    QCOMPARE(r[1]["error"]["message"].toString(),
             QString("messages[0].role: unknown role \"bot\" (system, developer, user, assistant "
                     "or tool)"));

    // --queue 0: while one answer runs, the next request is refused at once; the running
    // one goes on to its end (1063 tokens with this seed).
    const QJsonObject longAnswer{{"model", "demo"},    {"messages", QJsonArray{user("Hello!")}},
                                 {"temperature", 2},   {"seed", 3},
                                 {"max_tokens", 3000}, {"stream", true}};
    QJsonObject whileBusy =
        call({{"model", "demo"}, {"messages", QJsonArray{user("Hello!")}}, {"max_tokens", 1}});
    whileBusy["afterFirstChunkOf"] = 0; // sent while the long answer streams
    const QJsonArray busy = chat(s, {call(longAnswer), whileBusy}, true);
    QCOMPARE(busy.size(), 2);
    QVERIFY(!busy[0].toObject().contains("error"));
    QCOMPARE(busy[0]["finish_reason"].toString(), QString("stop"));
    QCOMPARE(busy[0]["content"].toString().isEmpty() && busy[0]["reasoning"].toString().isEmpty(),
             false);
    QCOMPARE(busy[1]["error"]["status"].toInt(), 429);
    QCOMPARE(busy[1]["error"]["retryAfter"].toString(), QString("1"));
    QCOMPARE(
        busy[1]["error"]["message"].toString(),
        QString("the server is busy: 0 requests already wait (k3 serve --queue); retry later"));
    QCOMPARE(stopServe(s), 0);
    QVERIFY(s.log.contains("POST /v1/chat/completions 413 tokens=- "));
    QVERIFY(s.log.contains("POST /v1/chat/completions 429 tokens=- "));
}

void TestK3Serve::apiKeyAndBinding() {
    const K3Run refused = runK3({"serve", kDemo, "--host", "0.0.0.0", "--port", "0"});
    QCOMPARE(refused.exitCode, 2);
    QVERIFY2(refused.err.contains("--host 0.0.0.0 is not a loopback address: serving beyond this "
                                  "machine needs --api-key-file FILE (clients then send "
                                  "Authorization: Bearer KEY)"),
             qPrintable(refused.err));

    QTemporaryDir dir;
    const QString keyFile = dir.filePath("key");
    const QString key = QStringLiteral("k3-test-key-5f2a9c");
    QFile f(keyFile);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write((key + "\n").toUtf8());
    f.close();
    Server s = startServe({"--host", "0.0.0.0", "--api-key-file", keyFile});
    QVERIFY2(s.port > 0, qPrintable(s.log));
    const QJsonObject p{{"model", "demo"},
                        {"messages", QJsonArray{user(kAnswers[1].first)}},
                        {"thinking", QJsonObject{{"type", "disabled"}}}};
    const QJsonArray good = chat(s, {call(p)}, false, key);
    QCOMPARE(good[0]["content"].toString(), kAnswers[1].second);
    const QJsonArray bad = chat(s, {call(p)}, false, key + "x");
    QCOMPARE(bad[0]["error"]["status"].toInt(), 401);
    QCOMPARE(bad[0]["error"]["message"].toString(),
             QString("invalid or missing API key: send the key given to k3 serve --api-key-file "
                     "as Authorization: Bearer KEY (or x-api-key: KEY)"));
    // The scheme is case-insensitive (issue 31 item 7).
    const QJsonObject lower =
        raw({{"url", QStringLiteral("http://127.0.0.1:%1/v1/models").arg(s.port)},
             {"method", "GET"},
             {"headers", QJsonObject{{"Authorization", "bearer " + key}}}});
    QCOMPARE(lower["status"].toInt(), 200);
    QCOMPARE(raw({{"url", QStringLiteral("http://127.0.0.1:%1/v1/models").arg(s.port)},
                  {"method", "GET"},
                  {"headers", QJsonObject{{"Authorization", "Basic " + key}}}})["status"]
                 .toInt(),
             401);
    QCOMPARE(raw({{"url", QStringLiteral("http://127.0.0.1:%1/health").arg(s.port)},
                  {"method", "GET"},
                  {"headers", QJsonObject{}}})["status"]
                 .toInt(),
             200);
    QCOMPARE(stopServe(s), 0);
    QVERIFY(s.log.contains("POST /v1/chat/completions 401 tokens=- "));
    QVERIFY(!s.log.contains(key)); // the key never reaches the log
}

QTEST_GUILESS_MAIN(TestK3Serve)
#include "tst_k3serve.moc"
