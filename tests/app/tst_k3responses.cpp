// POST /v1/responses, the OpenAI Responses API, through the official openai npm client
// (issue 31 item 6): the response object and its usage against the chat route's answer
// to the same conversation, the streamed typed events in order adding up to it, reasoning
// items, a function call round trip, text.format json_schema answers that validate
// (python3-jsonschema), and refusals naming the Responses field.
#include "ServeTestSupport.hpp"

#include <QFile>
#include <QJsonArray>
#include <QStandardPaths>
#include <QTest>

using namespace servetest;

namespace {

const QString kScripts = QStringLiteral(K3_SOURCE_DIR "/tests/app/serve");
const QString kScratch = QStringLiteral(K3_BINARY_DIR "/tests/app/serve-npm");

QJsonArray runCalls(const Server& s, const QJsonArray& params) {
    QJsonArray calls;
    for (const auto& p : params) calls.append(QJsonObject{{"params", p}});
    QProcess p;
    p.setWorkingDirectory(kScratch);
    const QJsonObject spec{{"baseURL", s.url()}, {"calls", calls}};
    p.start(QStringLiteral("node"),
            {kScratch + "/responses.mjs",
             QString::fromUtf8(QJsonDocument(spec).toJson(QJsonDocument::Compact))});
    if (!p.waitForFinished(120000)) p.kill();
    if (p.exitCode() != 0) qWarning("node failed: %s", p.readAllStandardError().constData());
    return QJsonDocument::fromJson(p.readAllStandardOutput()).array();
}

QJsonObject one(const Server& s, const QJsonObject& params) {
    return runCalls(s, {params})[0].toObject();
}

QByteArray compact(const QJsonObject& o) {
    return QJsonDocument(o).toJson(QJsonDocument::Compact);
}

// [{schema, instance}] -> the validator's first error for each ("" when valid).
QStringList validate(const QJsonArray& pairs) {
    QProcess p;
    p.start(QStringLiteral("/usr/bin/python3"),
            {"-c", "import json, sys, jsonschema\n"
                   "out = []\n"
                   "for pair in json.load(sys.stdin):\n"
                   "    v = jsonschema.Draft202012Validator(pair['schema'])\n"
                   "    e = jsonschema.exceptions.best_match(v.iter_errors(pair['instance']))\n"
                   "    out.append('' if e is None else e.message)\n"
                   "print(json.dumps(out))\n"});
    p.write(QJsonDocument(pairs).toJson(QJsonDocument::Compact));
    p.closeWriteChannel();
    if (!p.waitForFinished(60000)) p.kill();
    QStringList errors;
    for (const auto& e : QJsonDocument::fromJson(p.readAllStandardOutput()).array())
        errors << e.toString();
    return errors;
}

// Output items without their ids (each response has its own).
QJsonArray withoutIds(const QJsonArray& items) {
    QJsonArray out;
    for (const auto& item : items) {
        QJsonObject o = item.toObject();
        o.remove("id");
        out.append(o);
    }
    return out;
}

const QJsonObject kWeatherTool{
    {"type", "function"},
    {"name", "get_weather"},
    {"description", "The weather in a city"},
    {"parameters", QJsonObject{{"type", "object"},
                               {"properties", QJsonObject{{"city", QJsonObject{{"type", "string"},
                                                                               {"maxLength", 8}}}}},
                               {"required", QJsonArray{"city"}}}}};

} // namespace

class TestK3Responses : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void cleanupTestCase();
    void responseMatchesTheChatRoute();
    void reasoningItemsStreamed();
    void functionCallRoundTrip();
    void jsonSchemaAnswersValidate();
    void outputTextLogprobsAreTheChatRoutes();
    void refusalsNameTheField();

private:
    Server s_;
};

void TestK3Responses::initTestCase() {
    if (QStandardPaths::findExecutable("npm").isEmpty() ||
        QStandardPaths::findExecutable("node").isEmpty())
        QSKIP("needs node and npm (the official openai client is installed with npm)");
    if (const QString why = prepareOpenAiClient(kScratch, kScripts); !why.isEmpty())
        QSKIP(qPrintable(why));
    QVERIFY(installScript(kScratch, kScripts, "responses.mjs"));
    s_ = startServe();
    QVERIFY2(s_.port > 0, qPrintable(s_.log));
}

void TestK3Responses::cleanupTestCase() {
    if (s_.process) QCOMPARE(stopServe(s_), 0);
}

// Greedy with reasoning off: one message item holding the chat route's answer, usage its
// figures; streamed, the typed events in order, numbered from 0, whose deltas add up to it.
void TestK3Responses::responseMatchesTheChatRoute() {
    const Answer chat = exchange(
        s_.port, "POST", "/v1/chat/completions",
        compact({{"messages",
                  QJsonArray{QJsonObject{{"role", "system"}, {"content", "Be brief."}},
                             QJsonObject{{"role", "user"}, {"content", "What is k3chat?"}}}},
                 {"reasoning_effort", "none"},
                 {"max_tokens", 80}}));
    QCOMPARE(chat.status, 200);
    const QString expected = chat.json()[u"choices"][0][u"message"][u"content"].toString();
    QVERIFY(!expected.isEmpty());
    const QJsonObject usage = chat.json()[u"usage"].toObject();

    const QJsonObject params{{"model", "demo"},
                             {"instructions", "Be brief."},
                             {"input", "What is k3chat?"},
                             {"reasoning", QJsonObject{{"effort", "none"}}},
                             {"max_output_tokens", 80}};
    QJsonObject streamed = params;
    streamed["stream"] = true;
    const QJsonArray r = runCalls(s_, {params, streamed});
    QCOMPARE(r.size(), 2);
    const QJsonObject plain = r[0].toObject();
    QVERIFY2(!plain.contains("error"), qPrintable(QJsonDocument(plain).toJson()));
    const QJsonObject resp = plain["response"].toObject();
    QVERIFY(resp["id"].toString().startsWith("resp_"));
    QCOMPARE(resp["object"].toString(), QString("response"));
    QCOMPARE(resp["status"].toString(), QString("completed"));
    QCOMPARE(resp["model"].toString(), QString("demo"));
    QCOMPARE(resp["instructions"].toString(), QString("Be brief."));
    QCOMPARE(plain["output_text"].toString(), expected); // the client's convenience
    const QJsonArray output = resp["output"].toArray();
    QCOMPARE(output.size(), 1);
    QCOMPARE(output[0][u"type"].toString(), QString("message"));
    QCOMPARE(output[0][u"role"].toString(), QString("assistant"));
    QCOMPARE(output[0][u"status"].toString(), QString("completed"));
    QCOMPARE(output[0][u"content"].toArray(),
             (QJsonArray{QJsonObject{
                 {"type", "output_text"}, {"text", expected}, {"annotations", QJsonArray()}}}));
    const QJsonObject u = resp["usage"].toObject();
    QCOMPARE(u["input_tokens"].toInt(), usage["prompt_tokens"].toInt());
    QCOMPARE(u["output_tokens"].toInt(), usage["completion_tokens"].toInt());
    QCOMPARE(u["total_tokens"].toInt(),
             usage["prompt_tokens"].toInt() + usage["completion_tokens"].toInt());
    // The same prompt as the request before: part of it reused from the state.
    const int cached = u[u"input_tokens_details"][u"cached_tokens"].toInt();
    QVERIFY(cached > 0 && cached < u["input_tokens"].toInt());
    QCOMPARE(u[u"output_tokens_details"][u"reasoning_tokens"].toInt(), 0);

    const QJsonObject st = r[1].toObject();
    QVERIFY2(!st.contains("error"), qPrintable(QJsonDocument(st).toJson()));
    QStringList names;
    for (const auto& e : st["events"].toArray())
        if (names.isEmpty() || names.back() != e.toString()) names << e.toString();
    QCOMPARE(names,
             (QStringList{"response.created", "response.in_progress", "response.output_item.added",
                          "response.content_part.added", "response.output_text.delta",
                          "response.output_text.done", "response.content_part.done",
                          "response.output_item.done", "response.completed"}));
    const QJsonArray sequence = st["sequence"].toArray();
    for (int i = 0; i < sequence.size(); ++i) QCOMPARE(sequence[i].toInt(), i);
    QCOMPARE(st["text"].toString(), expected);
    QVERIFY(st["textDeltas"].toInt() > 1);
    const QJsonObject final = st["response"].toObject();
    QCOMPARE(final["status"].toString(), QString("completed"));
    QCOMPARE(final[u"output"][0][u"content"][0][u"text"].toString(), expected);
    // After the same answer to the same prompt, the same reuse.
    QCOMPARE(final[u"usage"][u"input_tokens_details"][u"cached_tokens"].toInt(), cached);
}

// Thinking on (the default), sampled with k3's seed: a reasoning item (reasoning_text)
// then the message, both the chat route's channels for the same seed; cut at the limit,
// the response is incomplete.
void TestK3Responses::reasoningItemsStreamed() {
    const Answer chat = exchange(
        s_.port, "POST", "/v1/chat/completions",
        compact({{"messages", QJsonArray{QJsonObject{{"role", "user"}, {"content", "Hello!"}}}},
                 {"temperature", 2},
                 {"seed", 6},
                 {"max_tokens", 40}}));
    QCOMPARE(chat.status, 200);
    const QJsonObject message = chat.json()[u"choices"][0][u"message"].toObject();
    const QString reasoning = message["reasoning_content"].toString();
    const QString content = message["content"].toString();
    QVERIFY(!reasoning.isEmpty() && !content.isEmpty());

    const QJsonObject params{
        {"input", "Hello!"}, {"temperature", 2}, {"seed", 6}, {"max_output_tokens", 40}};
    QJsonObject streamed = params;
    streamed["stream"] = true;
    const QJsonArray r = runCalls(s_, {params, streamed});
    const QJsonObject resp = r[0][u"response"].toObject();
    QCOMPARE(resp["status"].toString(), QString("incomplete"));
    QCOMPARE(resp[u"incomplete_details"][u"reason"].toString(), QString("max_output_tokens"));
    const QJsonArray output = resp["output"].toArray();
    QCOMPARE(output.size(), 2);
    QCOMPARE(output[0][u"type"].toString(), QString("reasoning"));
    QCOMPARE(output[0][u"content"].toArray(),
             (QJsonArray{QJsonObject{{"type", "reasoning_text"}, {"text", reasoning}}}));
    QCOMPARE(output[1][u"content"][0][u"text"].toString(), content);
    QVERIFY(resp[u"usage"][u"output_tokens_details"][u"reasoning_tokens"].toInt() > 0);

    const QJsonObject st = r[1].toObject();
    QCOMPARE(st["reasoning"].toString(), reasoning);
    QCOMPARE(st["text"].toString(), content);
    QVERIFY(st["reasoningDeltas"].toInt() > 1);
    const QJsonArray events = st["events"].toArray();
    QCOMPARE(events.first().toString(), QString("response.created"));
    QCOMPARE(events.last().toString(), QString("response.incomplete"));
    const QVariantList list = events.toVariantList();
    QVERIFY(list.indexOf(QVariant("response.reasoning_text.done")) <
            list.indexOf(QVariant("response.output_text.delta")));
    QCOMPARE(withoutIds(st[u"response"][u"output"].toArray()), withoutIds(output));
}

// tool_choice required: a function_call item whose arguments validate; streamed, its
// arguments delta is the same text; the output sent back as function_call_output gets a
// message.
void TestK3Responses::functionCallRoundTrip() {
    const QJsonObject params{{"input", "Weather in Paris?"},
                             {"reasoning", QJsonObject{{"effort", "none"}}},
                             {"max_output_tokens", 300},
                             {"tools", QJsonArray{kWeatherTool}},
                             {"tool_choice", "required"}};
    QJsonObject streamed = params;
    streamed["stream"] = true;
    const QJsonArray r = runCalls(s_, {params, streamed});
    const QJsonObject resp = r[0][u"response"].toObject();
    QCOMPARE(resp["status"].toString(), QString("completed"));
    const QJsonArray output = resp["output"].toArray();
    QCOMPARE(output.size(), 1);
    const QJsonObject call = output[0].toObject();
    QCOMPARE(call["type"].toString(), QString("function_call"));
    QCOMPARE(call["name"].toString(), QString("get_weather"));
    QVERIFY(call["call_id"].toString().startsWith("call_"));
    const QJsonObject args =
        QJsonDocument::fromJson(call["arguments"].toString().toUtf8()).object();
    QCOMPARE(args.keys(), QStringList{"city"});
    QVERIFY(args["city"].toString().size() <= 8);
    QCOMPARE(r[1][u"arguments"].toString(), call["arguments"].toString());
    QCOMPARE(r[1][u"response"][u"output"][0][u"arguments"].toString(),
             call["arguments"].toString());

    const QJsonObject next{
        {"input", QJsonArray{QJsonObject{{"role", "user"}, {"content", "Weather in Paris?"}}, call,
                             QJsonObject{{"type", "function_call_output"},
                                         {"call_id", call["call_id"]},
                                         {"output", "Sunny, 21 C"}}}},
        {"reasoning", QJsonObject{{"effort", "none"}}},
        {"max_output_tokens", 60},
        {"tools", QJsonArray{kWeatherTool}}};
    const QJsonObject answer = one(s_, next);
    QVERIFY2(!answer.contains("error"), qPrintable(QJsonDocument(answer).toJson()));
    QCOMPARE(answer[u"response"][u"status"].toString(), QString("completed"));
    QVERIFY(!answer["output_text"].toString().isEmpty());
}

// text.format json_schema (the chat route's constraint path): greedy and sampled answers,
// thinking off and on, parse and validate.
void TestK3Responses::jsonSchemaAnswersValidate() {
    if (QProcess::execute("/usr/bin/python3", {"-c", "import jsonschema"}) != 0)
        QSKIP("needs python3-jsonschema (packaging/install-deps.sh installs it)");
    const QJsonArray schemas{
        QJsonObject{{"type", "object"},
                    {"properties",
                     QJsonObject{{"name", QJsonObject{{"type", "string"}, {"maxLength", 12}}},
                                 {"age", QJsonObject{{"type", "integer"}}},
                                 {"tags", QJsonObject{{"type", "array"},
                                                      {"items",
                                                       QJsonObject{{"enum", QJsonArray{"a", "b"}}}},
                                                      {"maxItems", 3}}}}},
                    {"required", QJsonArray{"name", "age", "tags"}},
                    {"additionalProperties", false}},
        QJsonObject{{"type", "object"},
                    {"properties",
                     QJsonObject{{"point",
                                  QJsonObject{{"type", "object"},
                                              {"properties",
                                               QJsonObject{{"x", QJsonObject{{"type", "number"}}}}},
                                              {"required", QJsonArray{"x"}}}},
                                 {"ok", QJsonObject{{"type", "boolean"}}}}},
                    {"required", QJsonArray{"point", "ok"}}}};
    QJsonArray params;
    for (int i = 0; i < 8; ++i) {
        QJsonObject p{{"input", "Describe it as JSON."},
                      {"max_output_tokens", 200},
                      {"text", QJsonObject{{"format", QJsonObject{{"type", "json_schema"},
                                                                  {"name", "answer"},
                                                                  {"strict", true},
                                                                  {"schema", schemas[i % 2]}}}}}};
        if (i & 2) { // sampled, with k3's seed: a failure repeats
            p["temperature"] = 1;
            p["seed"] = 100 + i;
        }
        if (!(i & 4)) p["reasoning"] = QJsonObject{{"effort", "none"}};
        if (i & 1) p["stream"] = true;
        params.append(p);
    }
    const QJsonArray r = runCalls(s_, params);
    QCOMPARE(r.size(), params.size());
    QJsonArray pairs;
    for (int i = 0; i < r.size(); ++i) {
        const QJsonObject o = r[i].toObject();
        QVERIFY2(!o.contains("error"), qPrintable(QJsonDocument(o).toJson()));
        const QString text =
            o[u"response"][u"output"].toArray().last()[u"content"][0][u"text"].toString();
        QJsonParseError err{};
        const QJsonDocument doc = QJsonDocument::fromJson(text.toUtf8(), &err);
        QVERIFY2(err.error == QJsonParseError::NoError && doc.isObject(), qPrintable(text));
        pairs.append(QJsonObject{{"schema", schemas[i % 2]}, {"instance", doc.object()}});
    }
    QCOMPARE(validate(pairs), QStringList(QList<QString>(pairs.size(), QString())));
}

// include ["message.output_text.logprobs"] with top_logprobs: the output text's tokens
// with the chat route's log-probabilities for the same greedy answer (the engine's own
// logits, as tst_k3serveapi checks against the dumped ones); streamed, the text deltas
// carry them in order and the final response holds them all.
void TestK3Responses::outputTextLogprobsAreTheChatRoutes() {
    const Answer chat =
        exchange(s_.port, "POST", "/v1/chat/completions",
                 compact({{"messages",
                           QJsonArray{QJsonObject{{"role", "user"}, {"content", "Name a fruit."}}}},
                          {"reasoning_effort", "none"},
                          {"logprobs", true},
                          {"top_logprobs", 3},
                          {"max_tokens", 12}}));
    QCOMPARE(chat.status, 200);
    const QJsonArray expected = chat.json()[u"choices"][0][u"logprobs"][u"content"].toArray();
    QCOMPARE(expected.size(), chat.json()[u"usage"][u"completion_tokens"].toInt());
    QVERIFY(expected.size() > 1);
    QCOMPARE(expected[0][u"top_logprobs"].toArray().size(), 3);

    const QJsonObject params{{"input", "Name a fruit."},
                             {"reasoning", QJsonObject{{"effort", "none"}}},
                             {"include", QJsonArray{"message.output_text.logprobs"}},
                             {"top_logprobs", 3},
                             {"max_output_tokens", 12}};
    QJsonObject streamed = params;
    streamed["stream"] = true;
    const QJsonArray r = runCalls(s_, {params, streamed});
    QCOMPARE(r.size(), 2);
    const QJsonObject part = r[0][u"response"][u"output"][0][u"content"][0].toObject();
    QVERIFY2(part.contains("logprobs"), qPrintable(compact(r[0].toObject())));
    const QJsonArray got = part["logprobs"].toArray();
    // Every token of the demo's answer here is text (no think tags, no end of turn within
    // 12 tokens), so the lists are the same, value for value.
    QCOMPARE(got, expected);
    QString spelled;
    for (const auto& t : got) spelled += t[u"token"].toString();
    QCOMPARE(spelled, part["text"].toString());

    const QJsonObject st = r[1].toObject();
    QVERIFY2(!st.contains("error"), qPrintable(compact(st)));
    QVERIFY(st["textDeltas"].toInt() > 1);
    QCOMPARE(st["deltaLogprobs"].toArray(), expected);
    QCOMPARE(st[u"response"][u"output"][0][u"content"][0][u"logprobs"].toArray(), expected);
    QCOMPARE(st[u"response"][u"top_logprobs"].toInt(), 3);

    // Without include or top_logprobs: no logprobs field at all.
    QJsonObject plain = params;
    plain.remove("include");
    plain.remove("top_logprobs");
    QVERIFY(
        !one(s_, plain)[u"response"][u"output"][0][u"content"][0].toObject().contains("logprobs"));
}

void TestK3Responses::refusalsNameTheField() {
    const auto refused = [&](const QJsonObject& params, const QString& param,
                             const QString& message) {
        const QJsonObject o = one(s_, params);
        QCOMPARE(o[u"error"][u"status"].toInt(), 400);
        QCOMPARE(o[u"error"][u"param"].toString(), param);
        QCOMPARE(o[u"error"][u"message"].toString(), message);
    };
    refused(
        {{"input", "x"},
         {"text", QJsonObject{{"format", QJsonObject{{"type", "json_schema"},
                                                     {"name", "a"},
                                                     {"schema", QJsonObject{{"type", "string"},
                                                                            {"pattern", "q"}}}}}}}},
        "text.format.schema.pattern",
        "text.format.schema.pattern: not supported (the subset: type, properties, required, "
        "additionalProperties, items, minItems, maxItems, minLength, maxLength, enum, const, "
        "anyOf)");
    refused({{"input", "x"}, {"previous_response_id", "resp_1"}}, "previous_response_id",
            "previous_response_id: not supported: responses are not stored; send the whole "
            "input");
    refused({{"input", QJsonArray{QJsonObject{{"type", "input_image"}}}}}, "input[0].type",
            "input[0].type: \"input_image\" is not supported (message, reasoning, "
            "function_call, function_call_output)");
    refused({{"input", "x"}, {"tools", QJsonArray{QJsonObject{{"type", "web_search"}}}}},
            "tools[0].type",
            "tools[0].type: \"web_search\" is not supported (function tools only)");
    refused({{"input", "x"}, {"max_output_tokens", 0}}, "max_output_tokens",
            "max_output_tokens: 0 is outside 1..1000000");
    refused({{"input", "x"}, {"reasoning", QJsonObject{{"effort", "huge"}}}}, "reasoning.effort",
            "reasoning.effort: \"huge\" is not none, minimal, low, medium, high or max");
    refused({{"input", "x"},
             {"tool_choice", QJsonObject{{"type", "function"}, {"name", "nope"}}},
             {"tools", QJsonArray{kWeatherTool}}},
            "tool_choice.name", "tool_choice.name: \"nope\" is not among the declared tools");
    refused({{"input", "x"}, {"include", QJsonArray{"reasoning.encrypted_content"}}}, "include[0]",
            "include[0]: \"reasoning.encrypted_content\" is not supported "
            "(message.output_text.logprobs only)");
    refused({{"input", "x"}, {"top_logprobs", 21}}, "top_logprobs",
            "top_logprobs: an integer 0..20");
}

QTEST_GUILESS_MAIN(TestK3Responses)
#include "tst_k3responses.moc"
