// POST /v1/messages, the Anthropic Messages API, over raw HTTP (issue 31 item 6): the
// message's shape and usage, a streamed answer's typed events in order with text_deltas
// that add up to the non-streamed text, a tool_use round trip, stop_sequences, refusals
// in Anthropic's error shape naming the field, and x-api-key.
#include "ServeTestSupport.hpp"

#include <QJsonArray>
#include <QTemporaryDir>
#include <QTest>

#include <k3/chat.hpp>
#include <k3/tokenizer.hpp>

using namespace servetest;

namespace {

QByteArray compact(const QJsonObject& o) {
    return QJsonDocument(o).toJson(QJsonDocument::Compact);
}

QJsonObject userSays(const QString& text) {
    return QJsonObject{{"role", "user"}, {"content", text}};
}

// The events of an SSE body: (event name, data object), checking each name matches its
// data's type.
QList<QPair<QString, QJsonObject>> events(const QByteArray& body) {
    QList<QPair<QString, QJsonObject>> out;
    for (const QByteArray& chunk : body.split('\n')) {
        if (chunk.startsWith("event: ")) out.append({QString::fromUtf8(chunk.mid(7)), {}});
        if (chunk.startsWith("data: ") && !out.isEmpty())
            out.back().second = QJsonDocument::fromJson(chunk.mid(6)).object();
    }
    return out;
}

const QJsonArray kWeatherTool{QJsonObject{
    {"name", "get_weather"},
    {"description", "The weather in a city"},
    {"input_schema",
     QJsonObject{
         {"type", "object"},
         {"properties", QJsonObject{{"city", QJsonObject{{"type", "string"}, {"maxLength", 8}}}}},
         {"required", QJsonArray{"city"}}}}}};

} // namespace

class TestK3Messages : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void cleanupTestCase();
    void messageShapeMatchesTheChatRoute();
    void streamedEventsAddUpToTheMessage();
    void toolUseRoundTrip();
    void stopSequence();
    void refusalsNameTheField();
    void xApiKeyIsAccepted();

private:
    Server s_;
};

void TestK3Messages::initTestCase() {
    s_ = startServe();
    QVERIFY2(s_.port > 0, qPrintable(s_.log));
}

void TestK3Messages::cleanupTestCase() {
    QCOMPARE(stopServe(s_), 0);
}

// Greedy, thinking off (the Messages API's default): the chat route's answer to the same
// conversation (system given as text blocks), as one text block; input_tokens the
// rendered prompt's tokens.
void TestK3Messages::messageShapeMatchesTheChatRoute() {
    const Answer chat = exchange(
        s_.port, "POST", "/v1/chat/completions",
        compact({{"messages", QJsonArray{QJsonObject{{"role", "system"}, {"content", "Be brief."}},
                                         userSays("Hello")}},
                 {"thinking", QJsonObject{{"type", "disabled"}}},
                 {"max_tokens", 40}}));
    QCOMPARE(chat.status, 200);
    const QString expected = chat.json()["choices"][0][u"message"][u"content"].toString();
    QVERIFY(!expected.isEmpty());
    const int outputTokens = chat.json()["usage"][u"completion_tokens"].toInt();

    const Answer a = exchange(
        s_.port, "POST", "/v1/messages",
        compact({{"model", "demo"},
                 {"max_tokens", 40},
                 {"system", QJsonArray{QJsonObject{{"type", "text"}, {"text", "Be brief."}}}},
                 {"messages", QJsonArray{userSays("Hello")}}}));
    QCOMPARE(a.status, 200);
    const QJsonObject m = a.json();
    QVERIFY2(m["id"].toString().startsWith("msg_"), a.body.constData());
    QCOMPARE(m["type"].toString(), QString("message"));
    QCOMPARE(m["role"].toString(), QString("assistant"));
    QCOMPARE(m["model"].toString(), QString("demo"));
    QCOMPARE(m["content"].toArray(),
             (QJsonArray{QJsonObject{{"type", "text"}, {"text", expected}}}));
    QCOMPARE(m["stop_reason"].toString(), QString("end_turn"));
    QVERIFY(m["stop_sequence"].isNull());
    const QJsonObject usage = m["usage"].toObject();
    QCOMPARE(usage["output_tokens"].toInt(), outputTokens);
    const k3::Tokenizer tok = k3::Tokenizer::fromDirectory(kDemo.toStdString());
    const auto ids = k3::encodeChatSegments(
        tok,
        k3::renderChatSegments({{k3::ChatRole::System, "Be brief."}, {k3::ChatRole::User, "Hello"}},
                               {.thinking = false}));
    QCOMPARE(usage["input_tokens"].toInt() + usage["cache_read_input_tokens"].toInt(),
             int(ids.size()));
    QCOMPARE(usage["cache_creation_input_tokens"].toInt(), 0);
}

void TestK3Messages::streamedEventsAddUpToTheMessage() {
    const QJsonObject request{{"max_tokens", 40}, {"messages", QJsonArray{userSays("Thanks")}}};
    const Answer plain = exchange(s_.port, "POST", "/v1/messages", compact(request));
    QCOMPARE(plain.status, 200);
    const QString text = plain.json()["content"][0][u"text"].toString();
    QCOMPARE(text, QString("You are welcome! Enjoy k3chat."));
    QJsonObject streamed = request;
    streamed["stream"] = true;
    const Answer a = exchange(s_.port, "POST", "/v1/messages", compact(streamed));
    QCOMPARE(a.status, 200);
    QVERIFY2(a.head.contains("Content-Type: text/event-stream"), a.head.constData());
    const auto ev = events(a.body);
    QStringList names;
    QString deltas;
    int textDeltas = 0;
    for (const auto& [name, data] : ev) {
        QCOMPARE(data["type"].toString(), name);
        if (names.isEmpty() || names.back() != name) names << name;
        if (name == "content_block_delta") {
            QCOMPARE(data["index"].toInt(), 0);
            QCOMPARE(data["delta"][u"type"].toString(), QString("text_delta"));
            deltas += data["delta"][u"text"].toString();
            ++textDeltas;
        }
    }
    QCOMPARE(names,
             (QStringList{"message_start", "ping", "content_block_start", "content_block_delta",
                          "content_block_stop", "message_delta", "message_stop"}));
    QCOMPARE(deltas, text);
    QVERIFY2(textDeltas > 1, a.body.constData());
    const QJsonObject start = ev[0].second["message"].toObject();
    QCOMPARE(start["content"].toArray(), QJsonArray());
    QVERIFY(start["stop_reason"].isNull());
    QCOMPARE(ev[2].second["content_block"].toObject(),
             (QJsonObject{{"type", "text"}, {"text", ""}}));
    const QJsonObject delta = ev[ev.size() - 2].second;
    QCOMPARE(delta["delta"][u"stop_reason"].toString(), QString("end_turn"));
    QCOMPARE(delta["usage"][u"output_tokens"].toInt(),
             plain.json()["usage"][u"output_tokens"].toInt());
}

// tool_choice {type: tool}: the call is enforced; its input validates against the schema;
// the streamed call's input_json_delta is the same object; the result sent back as a
// tool_result gets a text answer.
void TestK3Messages::toolUseRoundTrip() {
    const QJsonObject request{
        {"max_tokens", 300},
        {"tools", kWeatherTool},
        {"tool_choice", QJsonObject{{"type", "tool"}, {"name", "get_weather"}}},
        {"messages", QJsonArray{userSays("Weather in Paris?")}}};
    const Answer a = exchange(s_.port, "POST", "/v1/messages", compact(request));
    QCOMPARE(a.status, 200);
    const QJsonObject m = a.json();
    QCOMPARE(m["stop_reason"].toString(), QString("tool_use"));
    const QJsonArray content = m["content"].toArray();
    QCOMPARE(content.size(), 1);
    const QJsonObject use = content[0].toObject();
    QCOMPARE(use["type"].toString(), QString("tool_use"));
    QCOMPARE(use["name"].toString(), QString("get_weather"));
    QVERIFY(use["id"].toString().startsWith("toolu_"));
    const QJsonObject input = use["input"].toObject();
    QCOMPARE(input.keys(), QStringList{"city"});
    QVERIFY(input["city"].isString() && input["city"].toString().size() <= 8);

    QJsonObject streamed = request;
    streamed["stream"] = true;
    const Answer s = exchange(s_.port, "POST", "/v1/messages", compact(streamed));
    QCOMPARE(s.status, 200);
    QString partial;
    QJsonObject started;
    for (const auto& [name, data] : events(s.body)) {
        if (name == "content_block_start") started = data["content_block"].toObject();
        if (name == "content_block_delta" &&
            data["delta"][u"type"].toString() == "input_json_delta")
            partial += data["delta"][u"partial_json"].toString();
        if (name == "message_delta")
            QCOMPARE(data["delta"][u"stop_reason"].toString(), QString("tool_use"));
    }
    QCOMPARE(started["type"].toString(), QString("tool_use"));
    QCOMPARE(started["name"].toString(), QString("get_weather"));
    QCOMPARE(started["input"].toObject(), QJsonObject());
    QCOMPARE(QJsonDocument::fromJson(partial.toUtf8()).object(), input);

    const QJsonObject next{
        {"max_tokens", 60},
        {"tools", kWeatherTool},
        {"messages",
         QJsonArray{
             userSays("Weather in Paris?"),
             QJsonObject{{"role", "assistant"}, {"content", QJsonArray{use}}},
             QJsonObject{{"role", "user"},
                         {"content", QJsonArray{QJsonObject{{"type", "tool_result"},
                                                            {"tool_use_id", use["id"]},
                                                            {"content", "Sunny, 21 C"}}}}}}}};
    const Answer r = exchange(s_.port, "POST", "/v1/messages", compact(next));
    QCOMPARE(r.status, 200);
    QCOMPARE(r.json()["stop_reason"].toString(), QString("end_turn"));
    QCOMPARE(r.json()["content"][0][u"type"].toString(), QString("text"));
    QVERIFY(!r.json()["content"][0][u"text"].toString().isEmpty());
    // The same conversation through the chat route (tool_calls, a tool message, no user
    // message after it): the same prompt and answer.
    const QJsonObject chatTool{
        {"type", "function"},
        {"function", QJsonObject{{"name", "get_weather"},
                                 {"description", "The weather in a city"},
                                 {"parameters", kWeatherTool[0][u"input_schema"]}}}};
    const QJsonObject chatCall{
        {"id", use["id"]},
        {"type", "function"},
        {"function", QJsonObject{{"name", "get_weather"},
                                 {"arguments", QString::fromUtf8(QJsonDocument(input).toJson(
                                                   QJsonDocument::Compact))}}}};
    const Answer c =
        exchange(s_.port, "POST", "/v1/chat/completions",
                 compact({{"max_tokens", 60},
                          {"thinking", QJsonObject{{"type", "disabled"}}},
                          {"tools", QJsonArray{chatTool}},
                          {"messages", QJsonArray{userSays("Weather in Paris?"),
                                                  QJsonObject{{"role", "assistant"},
                                                              {"content", ""},
                                                              {"tool_calls", QJsonArray{chatCall}}},
                                                  QJsonObject{{"role", "tool"},
                                                              {"tool_call_id", use["id"]},
                                                              {"content", "Sunny, 21 C"}}}}}));
    QCOMPARE(c.status, 200);
    QCOMPARE(r.json()["content"][0][u"text"].toString(),
             c.json()["choices"][0][u"message"][u"content"].toString());
    QCOMPARE(r.json()["usage"][u"input_tokens"].toInt() +
                 r.json()["usage"][u"cache_read_input_tokens"].toInt(),
             c.json()["usage"][u"prompt_tokens"].toInt());

    // A tool_result for no earlier tool_use is refused.
    QJsonObject stray = next;
    QJsonArray msgs = stray["messages"].toArray();
    msgs.removeAt(1);
    stray["messages"] = msgs;
    const Answer e = exchange(s_.port, "POST", "/v1/messages", compact(stray));
    QCOMPARE(e.status, 400);
    QVERIFY2(e.json()["error"][u"message"].toString().startsWith(
                 "messages[1].tool_call_id: \"" + use["id"].toString() + "\" matches no"),
             e.body.constData());
}

void TestK3Messages::stopSequence() {
    const Answer a = exchange(s_.port, "POST", "/v1/messages",
                              compact({{"max_tokens", 40},
                                       {"stop_sequences", QJsonArray{"model", "demo"}},
                                       {"messages", QJsonArray{userSays("Hello")}}}));
    QCOMPARE(a.status, 200);
    QCOMPARE(a.json()["content"][0][u"text"].toString(), QString("Hello! I am the tiny "));
    QCOMPARE(a.json()["stop_reason"].toString(), QString("stop_sequence"));
    QCOMPARE(a.json()["stop_sequence"].toString(), QString("demo"));
}

void TestK3Messages::refusalsNameTheField() {
    const auto refused = [&](const QJsonObject& body, const QString& message) {
        const Answer a = exchange(s_.port, "POST", "/v1/messages", compact(body));
        QCOMPARE(a.status, 400);
        QCOMPARE(a.json(), (QJsonObject{{"type", "error"},
                                        {"error", QJsonObject{{"type", "invalid_request_error"},
                                                              {"message", message}}}}));
    };
    const QJsonArray hello{userSays("Hello")};
    refused({{"messages", hello}}, "max_tokens: required");
    refused({{"max_tokens", 0}, {"messages", hello}}, "max_tokens: 0 is outside 1..1000000");
    refused({{"max_tokens", 9}, {"top_k", 5}, {"messages", hello}},
            "top_k: not supported: the sampler has temperature and top_p only");
    refused({{"max_tokens", 9}, {"temperature", 1.5}, {"messages", hello}},
            "temperature: expected a number 0..1");
    refused({{"max_tokens", 9},
             {"stop_sequences", QJsonArray{"a", "b", "c", "d", "e"}},
             {"messages", hello}},
            "stop_sequences: at most 4 sequences");
    refused({{"max_tokens", 9},
             {"messages", QJsonArray{QJsonObject{{"role", "system"}, {"content", "x"}}}}},
            "messages[0].role: \"system\" is not user or assistant");
    refused({{"max_tokens", 9},
             {"messages",
              QJsonArray{QJsonObject{{"role", "user"},
                                     {"content", QJsonArray{QJsonObject{{"type", "image"}}}}}}}},
            "messages[0].content[0].type: \"image\" is not supported in a user message (text, "
            "thinking, tool_use, tool_result)");
    refused({{"max_tokens", 9},
             {"tool_choice", QJsonObject{{"type", "tool"}, {"name", "nope"}}},
             {"tools", kWeatherTool},
             {"messages", hello}},
            "tool_choice.name: \"nope\" is not among the declared tools");
    QJsonArray patterned = kWeatherTool;
    QJsonObject tool = patterned[0].toObject();
    tool["input_schema"] = QJsonObject{
        {"type", "object"},
        {"properties", QJsonObject{{"city", QJsonObject{{"type", "string"}, {"pattern", "x"}}}}}};
    patterned[0] = tool;
    refused({{"max_tokens", 9},
             {"tools", patterned},
             {"tool_choice", QJsonObject{{"type", "any"}}},
             {"messages", hello}},
            "tools[0].input_schema.properties.city.pattern: not supported (the subset: type, "
            "properties, required, additionalProperties, items, minItems, maxItems, minLength, "
            "maxLength, enum, const, anyOf)");
    refused({{"max_tokens", 9}, {"thinking", QJsonObject{{"type", "auto"}}}, {"messages", hello}},
            "thinking.type: \"auto\" is not enabled or disabled");
    refused({{"max_tokens", 9}, {"frequency_penalty", 1}, {"messages", hello}},
            "frequency_penalty: not a Messages API field this server knows");
}

// Anthropic's clients send the key as x-api-key; a wrong key is a 401 in its error shape.
void TestK3Messages::xApiKeyIsAccepted() {
    QTemporaryDir dir;
    const QString keyFile = dir.filePath("key");
    QFile f(keyFile);
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write("sk-test-123456\n");
    f.close();
    Server s = startServe({"--api-key-file", keyFile});
    QVERIFY2(s.port > 0, qPrintable(s.log));
    const QByteArray body = compact({{"max_tokens", 3}, {"messages", QJsonArray{userSays("Hi")}}});
    QCOMPARE(exchange(s.port, "POST", "/v1/messages", body, "x-api-key: sk-test-123456\r\n").status,
             200);
    QCOMPARE(
        exchange(s.port, "POST", "/v1/messages", body, "Authorization: Bearer sk-test-123456\r\n")
            .status,
        200);
    const Answer a = exchange(s.port, "POST", "/v1/messages", body, "x-api-key: sk-wrong\r\n");
    QCOMPARE(a.status, 401);
    QCOMPARE(a.json()["type"].toString(), QString("error"));
    QCOMPARE(a.json()["error"][u"type"].toString(), QString("authentication_error"));
    QCOMPARE(stopServe(s), 0);
}

QTEST_GUILESS_MAIN(TestK3Messages)
#include "tst_k3messages.moc"
