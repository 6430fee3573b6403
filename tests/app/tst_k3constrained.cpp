// k3 serve's constrained answers (issue 31 items 1 and 2) through the official `openai`
// npm client: response_format json_schema over 50 generated schemas (greedy and sampled,
// thinking off and on), each answer validated by python3-jsonschema; json_object always
// parses; tool_choice required or named always gives a call of that function whose
// arguments validate against its parameters; an unsupported keyword is a 400 naming it.
#include "ServeTestSupport.hpp"

#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QStandardPaths>
#include <QTest>

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
    if (!p.waitForFinished(600000)) p.kill();
    if (p.exitCode() != 0) qWarning("node failed: %s", p.readAllStandardError().constData());
    return QJsonDocument::fromJson(p.readAllStandardOutput()).array();
}

QJsonObject user(const QString& text) {
    return {{"role", "user"}, {"content", text}};
}

// [{schema, instance}] -> the validator's first error for each ("" when valid), from
// python3-jsonschema (Draft 2020-12).
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
    if (errors.size() != pairs.size()) qWarning("python3: %s", p.readAllStandardError().data());
    return errors;
}

// A small deterministic generator of schemas in the supported subset.
class SchemaMaker {
public:
    explicit SchemaMaker(std::uint64_t seed) : state_(seed) {}

    QJsonObject object(int depth) {
        QJsonObject properties;
        QJsonArray required;
        const int n = 1 + int(next() % 3);
        for (int i = 0; i < n; ++i) {
            const QString name = QStringLiteral("k%1").arg(i) + (next() % 2 ? "_x" : "");
            properties[name] = value(depth);
            if (next() % 3 != 0) required.append(name);
        }
        QJsonObject o{{"type", "object"}, {"properties", properties}, {"required", required}};
        if (next() % 2) o["additionalProperties"] = false;
        return o;
    }

private:
    QJsonObject value(int depth) {
        switch (next() % (depth > 0 ? 9 : 7)) {
        case 0:
            return {{"type", "string"}, {"maxLength", int(4 + next() % 8)}};
        case 1:
            return {{"type", "integer"}};
        case 2:
            return {{"type", "number"}, {"description", "a measure"}};
        case 3:
            return {{"type", "boolean"}};
        case 4:
            return {{"enum", QJsonArray{"red", "green", 3, QJsonValue::Null}}};
        case 5:
            return {{"type", QJsonArray{"string", "null"}}, {"maxLength", 6}};
        case 6:
            return {{"anyOf",
                     QJsonArray{QJsonObject{{"type", "integer"}}, QJsonObject{{"const", "none"}}}}};
        case 7:
            return {
                {"type", "array"}, {"items", value(depth - 1)}, {"minItems", 1}, {"maxItems", 3}};
        default:
            return object(depth - 1);
        }
    }
    std::uint64_t next() {
        state_ = state_ * 6364136223846793005ull + 1442695040888963407ull;
        return state_ >> 33;
    }
    std::uint64_t state_;
};

const QJsonObject kNoThinking{{"type", "disabled"}};

const QJsonObject kWeather{
    {"type", "function"},
    {"function",
     QJsonObject{
         {"name", "get_weather"},
         {"parameters",
          QJsonObject{{"type", "object"},
                      {"properties",
                       QJsonObject{{"city", QJsonObject{{"type", "string"}, {"maxLength", 12}}},
                                   {"days", QJsonObject{{"type", "integer"}}}}},
                      {"required", QJsonArray{"city", "days"}},
                      {"additionalProperties", false}}}}}};
const QJsonObject kTime{
    {"type", "function"},
    {"function",
     QJsonObject{
         {"name", "get_time"},
         {"parameters",
          QJsonObject{{"type", "object"},
                      {"properties",
                       QJsonObject{{"zone", QJsonObject{{"enum", QJsonArray{"UTC", "CET"}}}}}},
                      {"required", QJsonArray{"zone"}}}}}}};

} // namespace

class TestK3Constrained : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void jsonSchemaAnswersValidate();
    void jsonObjectAlwaysParses();
    void requiredToolCallsAreValid();
    void unsupportedKeywordIsRefused();
};

void TestK3Constrained::initTestCase() {
    if (QStandardPaths::findExecutable("npm").isEmpty() ||
        QStandardPaths::findExecutable("node").isEmpty())
        QSKIP("needs node and npm (the official openai client is installed with npm)");
    if (QProcess::execute("/usr/bin/python3", {"-c", "import jsonschema"}) != 0)
        QSKIP("needs python3-jsonschema (packaging/install-deps.sh installs it)");
    if (const QString why = prepareOpenAiClient(kScratch, kScripts); !why.isEmpty())
        QSKIP(qPrintable(why));
}

// 50 schemas: even ones greedy, odd ones sampled (temperature 1, their own seed); every
// fifth with thinking on; one in four streamed. Every answer parses and validates, and
// ends the turn (finish_reason "stop").
void TestK3Constrained::jsonSchemaAnswersValidate() {
    Server s = startServe();
    QVERIFY2(s.port > 0, qPrintable(s.log));
    SchemaMaker maker(2026);
    QJsonArray calls, schemas;
    const QStringList questions{"Hello!", "What is MXFP4?", "How do I pick a preset?",
                                "What is k3chat?"};
    for (int i = 0; i < 50; ++i) {
        const QJsonObject schema = maker.object(2);
        schemas.append(schema);
        QJsonObject params{
            {"model", "demo"},
            {"messages", QJsonArray{user(questions[i % questions.size()])}},
            {"max_tokens", 160},
            {"response_format",
             QJsonObject{{"type", "json_schema"},
                         {"json_schema", QJsonObject{{"name", QStringLiteral("s%1").arg(i)},
                                                     {"strict", true},
                                                     {"schema", schema}}}}}};
        if (i % 5 != 0) params["thinking"] = kNoThinking;
        if (i % 2 == 1) {
            params["temperature"] = 1.0;
            params["seed"] = i;
        }
        if (i % 4 == 3) params["stream"] = true;
        calls.append(QJsonObject{{"params", params}});
    }
    const QJsonArray r = runCalls(s, calls);
    QCOMPARE(r.size(), 50);
    QJsonArray pairs;
    for (int i = 0; i < 50; ++i) {
        const QJsonObject a = r[i].toObject();
        QVERIFY2(!a.contains("error"), qPrintable(QJsonDocument(a).toJson()));
        QCOMPARE(a["finish_reason"].toString(), QString("stop"));
        QJsonParseError err;
        const QJsonDocument doc = QJsonDocument::fromJson(a["content"].toString().toUtf8(), &err);
        QVERIFY2(
            err.error == QJsonParseError::NoError && doc.isObject(),
            qPrintable(
                QString("answer %1 is no JSON object: %2").arg(i).arg(a["content"].toString())));
        pairs.append(QJsonObject{{"schema", schemas[i]}, {"instance", doc.object()}});
    }
    const QStringList errors = validate(pairs);
    QCOMPARE(errors.size(), 50);
    for (int i = 0; i < 50; ++i)
        QVERIFY2(errors[i].isEmpty(),
                 qPrintable(
                     QString("answer %1: %2\n%3")
                         .arg(i)
                         .arg(errors[i], QString::fromUtf8(QJsonDocument(pairs[i].toObject())
                                                               .toJson(QJsonDocument::Compact)))));
    QCOMPARE(stopServe(s), 0);
}

// json_object: greedy, sampled and streamed, thinking off and on: always a JSON object.
void TestK3Constrained::jsonObjectAlwaysParses() {
    Server s = startServe();
    QVERIFY2(s.port > 0, qPrintable(s.log));
    QJsonArray calls;
    for (int i = 0; i < 6; ++i) {
        QJsonObject params{{"model", "demo"},
                           {"messages", QJsonArray{user("Answer in JSON: what is MLA?")}},
                           {"max_tokens", 100},
                           {"response_format", QJsonObject{{"type", "json_object"}}}};
        if (i % 2 == 0) params["thinking"] = kNoThinking;
        if (i >= 2) {
            params["temperature"] = 0.8;
            params["seed"] = 100 + i;
        }
        if (i >= 4) params["stream"] = true;
        calls.append(QJsonObject{{"params", params}});
    }
    const QJsonArray r = runCalls(s, calls);
    QCOMPARE(r.size(), 6);
    for (const auto& v : r) {
        const QJsonObject a = v.toObject();
        QVERIFY2(!a.contains("error"), qPrintable(QJsonDocument(a).toJson()));
        QJsonParseError err;
        const QJsonDocument doc = QJsonDocument::fromJson(a["content"].toString().toUtf8(), &err);
        QVERIFY2(err.error == QJsonParseError::NoError && doc.isObject(),
                 qPrintable(a["content"].toString()));
        QCOMPARE(a["finish_reason"].toString(), QString("stop"));
    }
    QCOMPARE(stopServe(s), 0);
}

// tool_choice "required" (either tool) and a named function, greedy and sampled,
// streamed and not: one call, of the named function when one is named, its arguments
// valid against its parameters; finish_reason "tool_calls".
void TestK3Constrained::requiredToolCallsAreValid() {
    Server s = startServe();
    QVERIFY2(s.port > 0, qPrintable(s.log));
    const QJsonObject named{{"type", "function"}, {"function", QJsonObject{{"name", "get_time"}}}};
    QJsonArray calls;
    for (int i = 0; i < 6; ++i) {
        QJsonObject params{
            {"model", "demo"},
            {"messages", QJsonArray{user("Weather in Paris, and the time?")}},
            {"max_tokens", 200},
            {"tools", QJsonArray{kWeather, kTime}},
            {"tool_choice", i % 2 == 0 ? QJsonValue("required") : QJsonValue(named)}};
        if (i != 4) params["thinking"] = kNoThinking;
        if (i >= 2) {
            params["temperature"] = 1.0;
            params["seed"] = i;
        }
        if (i % 3 == 2) params["stream"] = true;
        calls.append(QJsonObject{{"params", params}});
    }
    const QJsonArray r = runCalls(s, calls);
    QCOMPARE(r.size(), 6);
    QJsonArray pairs;
    for (int i = 0; i < 6; ++i) {
        const QJsonObject a = r[i].toObject();
        QVERIFY2(!a.contains("error"), qPrintable(QJsonDocument(a).toJson()));
        QCOMPARE(a["finish_reason"].toString(), QString("tool_calls"));
        const QJsonArray toolCalls = a["tool_calls"].toArray();
        QCOMPARE(toolCalls.size(), 1);
        const QString name = toolCalls[0]["function"]["name"].toString();
        if (i % 2 == 1) QCOMPARE(name, QString("get_time"));
        QVERIFY(name == "get_time" || name == "get_weather");
        const QJsonDocument args =
            QJsonDocument::fromJson(toolCalls[0]["function"]["arguments"].toString().toUtf8());
        QVERIFY2(args.isObject(), QJsonDocument(a).toJson().constData());
        const QJsonObject tool = name == "get_time" ? kTime : kWeather;
        pairs.append(
            QJsonObject{{"schema", tool["function"]["parameters"]}, {"instance", args.object()}});
    }
    const QStringList errors = validate(pairs);
    QCOMPARE(errors, QStringList(6, QString()));
    QCOMPARE(stopServe(s), 0);
}

void TestK3Constrained::unsupportedKeywordIsRefused() {
    Server s = startServe();
    QVERIFY2(s.port > 0, qPrintable(s.log));
    const QJsonObject schema{
        {"type", "object"},
        {"properties", QJsonObject{{"age", QJsonObject{{"type", "integer"}, {"minimum", 0}}}}}};
    const QJsonArray r = runCalls(
        s, {QJsonObject{
               {"params",
                QJsonObject{{"model", "demo"},
                            {"messages", QJsonArray{user("Hi")}},
                            {"response_format",
                             QJsonObject{{"type", "json_schema"},
                                         {"json_schema",
                                          QJsonObject{{"name", "p"}, {"schema", schema}}}}}}}}});
    const QJsonObject error = r[0]["error"].toObject();
    QCOMPARE(error["status"].toInt(), 400);
    QCOMPARE(error["param"].toString(),
             QString("response_format.json_schema.schema.properties.age.minimum"));
    QCOMPARE(stopServe(s), 0);
}

QTEST_GUILESS_MAIN(TestK3Constrained)
#include "tst_k3constrained.moc"
