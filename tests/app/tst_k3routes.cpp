// k3 serve's routes besides chat completions, and the refusals known before generating,
// over raw HTTP (issue 31 items 5 and 6): an over-context streamed request is a 400
// before any header of a stream, /tokenize and /detokenize give the demo tokenizer's
// ids, /metrics counts what was served, /health says ready, /v1/models/{id}.
#include "ServeTestSupport.hpp"

#include <QJsonArray>
#include <QTest>

#include <k3/chat.hpp>
#include <k3/tokenizer.hpp>

using namespace servetest;

class TestK3Routes : public QObject {
    Q_OBJECT
private slots:
    void overContextStreamIsA400BeforeTheHeaders();
    void tokenizeAndDetokenize();
    void metricsCountWhatWasServed();
    void modelsAndHealth();
};

// Item 5: a streamed request whose prompt the context cannot hold got 200, a role chunk
// and an error event. Now a plain 400 (no event stream), naming the token count.
void TestK3Routes::overContextStreamIsA400BeforeTheHeaders() {
    Server s = startServe({"--context", "300"});
    QVERIFY2(s.port > 0, qPrintable(s.log));
    const QString text = QString("word ").repeated(400);
    const std::vector<k3::ChatMessage> messages{{k3::ChatRole::User, text.toStdString()}};
    const k3::Tokenizer tok = k3::Tokenizer::fromDirectory(kDemo.toStdString());
    const auto ids = k3::encodeChatSegments(tok, k3::renderChatSegments(messages));
    QVERIFY(ids.size() > 300);
    const QByteArray body =
        QJsonDocument(
            QJsonObject{{"messages", QJsonArray{QJsonObject{{"role", "user"}, {"content", text}}}},
                        {"stream", true}})
            .toJson(QJsonDocument::Compact);
    const Answer a = exchange(s.port, "POST", "/v1/chat/completions", body);
    QCOMPARE(a.status, 400);
    QVERIFY2(a.head.contains("Content-Type: application/json"), a.head.constData());
    QVERIFY2(!a.body.contains("data:"), a.body.constData());
    const QJsonObject error = a.json()["error"].toObject();
    QCOMPARE(error["code"].toString(), QString("context_length_exceeded"));
    QCOMPARE(error["param"].toString(), QString("messages"));
    QCOMPARE(error["message"].toString(),
             QString("messages: the conversation is %1 tokens and the context holds 300 "
                     "positions (the KV cache the memory plan sized); start a new conversation "
                     "or raise the context length")
                 .arg(ids.size()));
    // The same for a text completion's prompt.
    const Answer c = exchange(s.port, "POST", "/v1/completions",
                              QJsonDocument(QJsonObject{{"prompt", text}, {"stream", true}})
                                  .toJson(QJsonDocument::Compact));
    QCOMPARE(c.status, 400);
    QCOMPARE(c.json()["error"].toObject()["code"].toString(), QString("context_length_exceeded"));
    QCOMPARE(c.json()["error"].toObject()["param"].toString(), QString("prompt"));
    QCOMPARE(stopServe(s), 0);
    QVERIFY2(s.log.contains("POST /v1/chat/completions 400 tokens=- "), qPrintable(s.log));
}

void TestK3Routes::tokenizeAndDetokenize() {
    Server s = startServe();
    QVERIFY2(s.port > 0, qPrintable(s.log));
    const k3::Tokenizer tok = k3::Tokenizer::fromDirectory(kDemo.toStdString());
    const std::string text = "What is k3chat?";
    const auto ids = tok.encode(text);
    Answer a = exchange(s.port, "POST", "/tokenize", R"({"prompt":"What is k3chat?"})");
    QCOMPARE(a.status, 200);
    QCOMPARE(a.json()["count"].toInt(), int(ids.size()));
    QCOMPARE(a.json()["max_model_len"].toInt(), 4096);
    QJsonArray expected;
    for (const auto id : ids) expected.append(int(id));
    QCOMPARE(a.json()["tokens"].toArray(), expected);

    // A chat: the prompt the chat route feeds (template, generation prompt).
    const auto chatIds = k3::encodeChatSegments(
        tok, k3::renderChatSegments({{k3::ChatRole::User, text}}, {.thinking = false}));
    a = exchange(s.port, "POST", "/tokenize",
                 R"({"messages":[{"role":"user","content":"What is k3chat?"}],)"
                 R"("thinking":{"type":"disabled"}})");
    QCOMPARE(a.status, 200);
    QCOMPARE(a.json()["count"].toInt(), int(chatIds.size()));

    a = exchange(s.port, "POST", "/detokenize",
                 QJsonDocument(QJsonObject{{"tokens", expected}}).toJson(QJsonDocument::Compact));
    QCOMPARE(a.status, 200);
    QCOMPARE(a.json()["prompt"].toString(), QString::fromStdString(text));

    a = exchange(s.port, "POST", "/detokenize", R"({"tokens":[1,-4]})");
    QCOMPARE(a.status, 400);
    QCOMPARE(a.json()["error"].toObject()["param"].toString(), QString("tokens[1]"));
    a = exchange(s.port, "POST", "/tokenize", R"({"text":"x"})");
    QCOMPARE(a.status, 400);
    QCOMPARE(a.json()["error"].toObject()["message"].toString(),
             QString("prompt: required, a string (or messages, a chat)"));
    QCOMPARE(stopServe(s), 0);
}

void TestK3Routes::metricsCountWhatWasServed() {
    Server s = startServe();
    QVERIFY2(s.port > 0, qPrintable(s.log));
    const Answer chat = exchange(s.port, "POST", "/v1/chat/completions",
                                 R"({"messages":[{"role":"user","content":"Hello!"}],)"
                                 R"("thinking":{"type":"disabled"},"max_tokens":3})");
    QCOMPARE(chat.status, 200);
    const int prompt = chat.json()["usage"].toObject()["prompt_tokens"].toInt();
    QVERIFY(prompt > 0);
    QCOMPARE(exchange(s.port, "POST", "/v1/chat/completions", R"({"messages":[]})").status, 400);
    const Answer m = exchange(s.port, "GET", "/metrics");
    QCOMPARE(m.status, 200);
    QVERIFY2(m.head.contains("Content-Type: text/plain; version=0.0.4"), m.head.constData());
    const QString text = QString::fromUtf8(m.body);
    for (const QString& line :
         {QString(R"(k3_requests_total{route="/v1/chat/completions",status="200"} 1)"),
          QString(R"(k3_requests_total{route="/v1/chat/completions",status="400"} 1)"),
          QString("k3_generations_total 1"), QString("k3_prompt_tokens_total %1").arg(prompt),
          QString("k3_completion_tokens_total 3"), QString("k3_cached_prompt_tokens_total 0"),
          QString("k3_ready 1"), QString("# TYPE k3_prefill_seconds_total counter"),
          QString("# TYPE k3_expert_cache_requests_total counter")})
        QVERIFY2(text.contains("\n" + line + "\n"), qPrintable(line + " in:\n" + text));
    QCOMPARE(stopServe(s), 0);
}

void TestK3Routes::modelsAndHealth() {
    Server s = startServe();
    QVERIFY2(s.port > 0, qPrintable(s.log));
    QVERIFY2(s.log.contains("k3 serve: loading demo (http://127.0.0.1:"), qPrintable(s.log));
    Answer a = exchange(s.port, "GET", "/health");
    QCOMPARE(a.status, 200);
    QCOMPARE(a.json()["status"].toString(), QString("ready"));
    a = exchange(s.port, "GET", "/v1/models/demo");
    QCOMPARE(a.status, 200);
    QCOMPARE(a.json()["id"].toString(), QString("demo"));
    QCOMPARE(a.json()["object"].toString(), QString("model"));
    QCOMPARE(a.json()["owned_by"].toString(), QString("k3"));
    a = exchange(s.port, "GET", "/v1/models/other");
    QCOMPARE(a.status, 404);
    QCOMPARE(a.json()["error"].toObject()["code"].toString(), QString("model_not_found"));
    QCOMPARE(stopServe(s), 0);
}

QTEST_GUILESS_MAIN(TestK3Routes)
#include "tst_k3routes.moc"
