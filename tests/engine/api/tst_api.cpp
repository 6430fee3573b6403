// The OpenAI chat-completions protocol as data (engine/src/api): requests in, exact JSON
// and server-sent events out.
#include <QTest>

#include <fstream>
#include <tuple>

#include <k3/api.hpp>
#include <k3/tokenizer.hpp>
#include <nlohmann/json.hpp>

using namespace k3::api;
using Json = nlohmann::ordered_json;

namespace {

// The 400's message for `body`, or "" when it was accepted.
std::string refusal(const std::string& body) {
    try {
        parseChatRequest(body);
    } catch (const ApiError& e) {
        if (e.status() != 400) return "status " + std::to_string(e.status());
        return e.what();
    }
    return {};
}

const std::string kUser = R"("messages":[{"role":"user","content":"Hi"}])";

// The fixtures' messages as an OpenAI client sends them back to k3 serve: arguments the
// template took as a string (a json block) travel as a JSON string holding that text
// (toolArgumentsJson); a mapping travels as its object.
Json asClientsSendThem(Json messages) {
    for (Json& m : messages)
        if (m.contains("tool_calls"))
            for (Json& call : m["tool_calls"])
                if (call["function"]["arguments"].is_string())
                    call["function"]["arguments"] = Json(call["function"]["arguments"]).dump();
    return messages;
}

} // namespace

class TestApi : public QObject {
    Q_OBJECT
private slots:
    void parsesEveryField();
    void openAiSpellingsAreAccepted();
    void imageUrlDataIsDecoded();
    void refusalsNameTheField_data();
    void refusalsNameTheField();
    void errorJsonIsOpenAis();
    void deepJsonIsRefusedNamingTheField();
    void jsonErrorsNameTheField();
    void duplicateKeysAreRefused();
    void completionJsonExact();
    void completionWithToolCalls();
    void stringArgumentsAreReadAsJsonText();
    void chunksNeverSplitUtf8();
    void finishUsageAndDone();
    void stopStringsAreNeverSent();
    void toolFixturesRenderThroughTheApi();
    void generatedToolCallsBecomeToolCalls();
    void finishReasons();
    void modelList();
};

// Issue 31 item 7: what OpenAI clients send that a strict reading refused.
void TestApi::openAiSpellingsAreAccepted() {
    const ChatRequest f = parseChatRequest("{" + kUser + R"(,"max_tokens":5.0})");
    QCOMPARE(*f.maxTokens, 5);
    const ChatRequest none = parseChatRequest("{" + kUser + R"(,"reasoning_effort":"none"})");
    QCOMPARE(none.render.thinking, false);
    const ChatRequest minimal = parseChatRequest("{" + kUser + R"(,"reasoning_effort":"minimal"})");
    QCOMPARE(minimal.render.thinking, true);
    QCOMPARE(*minimal.render.thinkingEffort, std::string("low"));
}

void TestApi::parsesEveryField() {
    const ChatRequest r = parseChatRequest(R"({
      "model": "k3-demo",
      "messages": [
        {"role": "system", "content": "Be brief."},
        {"role": "user", "content": [{"type": "text", "text": "Wea"}, {"type": "text", "text": "ther?"}]},
        {"role": "assistant", "content": null, "reasoning_content": "call it",
         "tool_calls": [{"id": "c1", "type": "function",
                         "function": {"name": "w", "arguments": "{\"city\":\"Oslo\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "-3"},
        {"role": "developer", "content": "dev"}],
      "max_tokens": 7, "max_completion_tokens": 9, "temperature": 0.5, "top_p": 0.9,
      "seed": 42, "stop": ["END", "STOP"], "thinking": {"type": "disabled"},
      "reasoning_effort": "low", "tool_choice": "required",
      "tools": [{"type": "function", "function": {"name": "w", "parameters": {}}}],
      "stream": true, "stream_options": {"include_usage": true}, "n": 1, "user": "ignored"})");
    QCOMPARE(r.model, std::string("k3-demo"));
    QCOMPARE(r.messages.size(), std::size_t(5));
    QCOMPARE(r.messages[1].content, std::string("Weather?"));
    QCOMPARE(r.messages[2].reasoningContent, std::string("call it"));
    QCOMPARE(r.messages[2].toolCalls.size(), std::size_t(1));
    QCOMPARE(r.messages[2].toolCalls[0].id, std::string("c1"));
    QCOMPARE(r.messages[2].toolCalls[0].arguments, std::string(R"({"city":"Oslo"})"));
    // A JSON object text is read as the object (vLLM's reading): argument tags.
    QCOMPARE(r.messages[2].toolCalls[0].argumentsAsJsonBlock, false);
    QCOMPARE(r.messages[3].toolCallId, std::string("c1"));
    QVERIFY(r.messages[4].role == k3::ChatRole::System);
    QCOMPARE(*r.maxTokens, 9); // max_completion_tokens wins
    QCOMPARE(*r.temperature, 0.5);
    QCOMPARE(*r.topP, 0.9);
    QCOMPARE(*r.seed, std::uint64_t(42));
    QCOMPARE(r.stop, (std::vector<std::string>{"END", "STOP"}));
    QCOMPARE(r.render.thinking, false);
    QCOMPARE(*r.render.thinkingEffort, std::string("low"));
    QCOMPARE(r.render.toolChoice, std::string("required"));
    QCOMPARE(r.render.toolsJson,
             std::string(R"([{"type":"function","function":{"name":"w","parameters":{}}}])"));
    QVERIFY(r.stream && r.includeUsage && r.render.addGenerationPrompt);

    const ChatRequest d = parseChatRequest("{" + kUser + "}");
    QVERIFY(!d.maxTokens && !d.temperature && !d.topP && !d.seed && !d.stream && d.stop.empty());
    QCOMPARE(d.render.thinking, true);
    QCOMPARE(*d.render.thinkingEffort, std::string("max")); // the template's default
}

// An image_url part with a data: URL: the image, preprocessed, and its placeholder in
// the content where the part was (the template's order).
void TestApi::imageUrlDataIsDecoded() {
    std::ifstream in(K3_SOURCE_DIR "/tests/fixtures/vision/images/rgb_1x1.png", std::ios::binary);
    const std::string png{std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
    static const char* alphabet =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string b64;
    for (std::size_t i = 0; i < png.size(); i += 3) {
        const unsigned n = (unsigned char)png[i] << 16 |
                           (i + 1 < png.size() ? (unsigned char)png[i + 1] << 8 : 0) |
                           (i + 2 < png.size() ? (unsigned char)png[i + 2] : 0);
        b64 += alphabet[n >> 18 & 63];
        b64 += alphabet[n >> 12 & 63];
        b64 += i + 1 < png.size() ? alphabet[n >> 6 & 63] : '=';
        b64 += i + 2 < png.size() ? alphabet[n & 63] : '=';
    }
    const std::string body =
        R"({"messages":[{"role":"user","content":[{"type":"text","text":"A "},)"
        R"({"type":"image_url","image_url":{"url":"data:image/png;base64,)" +
        b64 + R"("}},{"type":"text","text":" and?"}]}]})";
    const k3::api::ChatRequest r = k3::api::parseChatRequest(body);
    QCOMPARE(r.messages.size(), std::size_t(1));
    QCOMPARE(r.messages[0].content, std::string("A <|kimi_image_placeholder|> and?"));
    QCOMPARE(r.messages[0].images.size(), std::size_t(1));
    QCOMPARE(r.messages[0].images[0].image->plan.width, 1);
    QCOMPARE(r.messages[0].images[0].image->plan.tokens(), 1);
    QCOMPARE(
        k3::renderChat(r.messages, {.thinking = false})
            .find("A <|media_begin|>image 1x1<|media_content|><|media_pad|><|media_end|> and?"),
        std::string("<|open|>message role=\"user\"<|sep|>").size());
}

void TestApi::refusalsNameTheField_data() {
    QTest::addColumn<QString>("body");
    QTest::addColumn<QString>("message");
    auto row = [](const char* name, const std::string& body, const char* message) {
        QTest::newRow(name) << QString::fromStdString(body) << QString::fromUtf8(message);
    };
    row("not an object", "[1]", "the request body must be a JSON object, got an array");
    row("no messages", "{}", "messages: required");
    row("messages not array", R"({"messages":"hi"})", "messages: expected an array, got a string");
    row("empty messages", R"({"messages":[]})", "messages: must hold at least one message");
    row("unknown role", R"({"messages":[{"role":"bot","content":"x"}]})",
        "messages[0].role: unknown role \"bot\" (system, developer, user, assistant or tool)");
    row("role missing", R"({"messages":[{"content":"x"}]})", "messages[0].role: required");
    row("content number", R"({"messages":[{"role":"user","content":5}]})",
        "messages[0].content: expected a string or an array of text parts, got a number");
    row("image part without url",
        R"({"messages":[{"role":"user","content":[{"type":"image_url"}]}]})",
        "messages[0].content[0].image_url: required");
    row("image part type", R"({"messages":[{"role":"user","content":[{"type":"input_audio"}]}]})",
        "messages[0].content[0].type: \"input_audio\" is not supported (only text parts)");
    row("image http url",
        R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"https://x/a.png"}}]}]})",
        "messages[0].content[0].image_url.url: k3 serve does not fetch images: send the image "
        "inline as a data:image/...;base64 URL");
    row("image bad base64",
        R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,@@"}}]}]})",
        "messages[0].content[0].image_url.url: the data URL's base64 is not valid");
    row("image not an image",
        R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":"data:image/png;base64,aGVsbG8="}}]}]})",
        "messages[0].content[0].image_url.url: not a PNG, JPEG or WebP image (its first bytes "
        "match none of them)");
    row("image in a system message",
        R"({"messages":[{"role":"system","content":[{"type":"image_url","image_url":{"url":"data:,"}}]}]})",
        "messages[0].content[0]: images are accepted in user messages only");
    row("call without name",
        R"({"messages":[{"role":"assistant","content":"","tool_calls":[{"id":"a","function":{}}]}]})",
        "messages[0].tool_calls[0].function.name: required");
    row("arguments number",
        R"({"messages":[{"role":"assistant","tool_calls":[{"function":{"name":"f","arguments":3}}]}]})",
        "messages[0].tool_calls[0].function.arguments: expected a string or an object, got a "
        "number");
    row("temperature string", "{" + kUser + R"(,"temperature":"hot"})",
        "temperature: expected a number, got a string");
    row("temperature range", "{" + kUser + R"(,"temperature":3})",
        "temperature: 3 is outside 0.0..2.0");
    row("top_p zero", "{" + kUser + R"(,"top_p":0})",
        "top_p: must be above 0 (1 keeps every token)");
    row("max_tokens zero", "{" + kUser + R"(,"max_tokens":0})",
        "max_tokens: 0 is outside 1..1000000");
    row("max_tokens float", "{" + kUser + R"(,"max_tokens":2.5})",
        "max_tokens: expected an integer, got a number");
    row("seed string", "{" + kUser + R"(,"seed":"1"})", "seed: expected an integer, got a string");
    row("n two", "{" + kUser + R"(,"n":2})", "n: only 1 choice per request is supported");
    row("stop number", "{" + kUser + R"(,"stop":7})",
        "stop: expected a string or an array of strings, got a number");
    row("stop item", "{" + kUser + R"(,"stop":["a",1]})",
        "stop[1]: expected a string, got a number");
    row("thinking bool", "{" + kUser + R"(,"thinking":true})",
        "thinking: expected an object, got a boolean");
    row("thinking type", "{" + kUser + R"(,"thinking":{"type":"on"}})",
        "thinking.type: \"on\" is not enabled or disabled");
    row("effort", "{" + kUser + R"(,"reasoning_effort":"extreme"})",
        "reasoning_effort: \"extreme\" is not none, minimal, low, medium, high or max");
    row("max_tokens 1e300", "{" + kUser + R"(,"max_tokens":1e300})",
        "max_tokens: expected an integer, got a number");
    row("tools object", "{" + kUser + R"(,"tools":{}})", "tools: expected an array, got an object");
    row("tool type", "{" + kUser + R"(,"tools":[{"type":"web"}]})",
        "tools[0].type: required, \"function\"");
    row("tool_choice", "{" + kUser + R"(,"tool_choice":"any"})",
        "tool_choice: \"any\" is not none, auto or required");
    row("stream string", "{" + kUser + R"(,"stream":"yes"})",
        "stream: expected a boolean, got a string");
    row("stream_options alone", "{" + kUser + R"(,"stream_options":{"include_usage":true}})",
        "stream_options: only allowed with stream: true");
    row("tool_call_id unknown",
        R"({"messages":[{"role":"user","content":"q"},{"role":"assistant","tool_calls":)"
        R"([{"id":"c1","function":{"name":"f"}}]},)"
        R"({"role":"tool","tool_call_id":"c9","content":"r"}]})",
        "messages[2].tool_call_id: \"c9\" matches no tool call id of an earlier assistant "
        "message (and the message gives no name)");
    row("unresolvable tool",
        R"({"messages":[{"role":"user","content":"q"},{"role":"tool","content":"r"}]})",
        "messages: chat render: message 1 (role tool) has no tool name: give it a name, or a "
        "tool_call_id or position matching a call of the assistant message before it");
    // Constrained answers (issue 31 items 1 and 2): the schema's keyword path.
    row("response_format type", "{" + kUser + R"(,"response_format":{"type":"xml"}})",
        "response_format.type: \"xml\" is not text, json_object or json_schema");
    row("json_schema missing", "{" + kUser + R"(,"response_format":{"type":"json_schema"}})",
        "response_format.json_schema: required");
    row("schema missing",
        "{" + kUser + R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x"}}})",
        "response_format.json_schema.schema: required");
    row("schema keyword",
        "{" + kUser +
            R"(,"response_format":{"type":"json_schema","json_schema":{"name":"x","schema":)"
            R"({"type":"object","properties":{"x":{"type":"strin"}}}}}})",
        "response_format.json_schema.schema.properties.x.type: \"strin\" is not object, "
        "array, string, number, integer, boolean or null");
    row("schema unsupported",
        "{" + kUser +
            R"(,"response_format":{"type":"json_schema","json_schema":{"schema":)"
            R"({"type":"array","items":{"type":"string","pattern":"^a"}}}}})",
        "response_format.json_schema.schema.items.pattern: not supported (the subset: type, "
        "properties, required, additionalProperties, items, minItems, maxItems, minLength, "
        "maxLength, enum, const, anyOf)");
    row("required without tools", "{" + kUser + R"(,"tool_choice":"required"})",
        "tool_choice: a call is required but the request declares no tools");
    row("named tool unknown",
        "{" + kUser +
            R"(,"tools":[{"type":"function","function":{"name":"f"}}],)"
            R"("tool_choice":{"type":"function","function":{"name":"g"}}})",
        "tool_choice.function.name: \"g\" is not among the declared tools");
    row("tool parameters",
        "{" + kUser +
            R"(,"tools":[{"type":"function","function":{"name":"f","parameters":)"
            R"({"type":"object","properties":{"n":{"type":"integer","minimum":1}}}}}],)"
            R"("tool_choice":"required"})",
        "tools[0].function.parameters.properties.n.minimum: not supported (the subset: type, "
        "properties, required, additionalProperties, items, minItems, maxItems, minLength, "
        "maxLength, enum, const, anyOf)");
}

void TestApi::refusalsNameTheField() {
    QFETCH(QString, body);
    QFETCH(QString, message);
    QCOMPARE(QString::fromStdString(refusal(body.toStdString())), message);
}

void TestApi::errorJsonIsOpenAis() {
    try {
        parseChatRequest(R"({"messages":[{"role":"user","content":"x"}],"temperature":"a"})");
        QFAIL("accepted");
    } catch (const ApiError& e) {
        QCOMPARE(e.param(), std::string("temperature"));
        QCOMPARE(errorJson(e),
                 std::string(R"({"error":{"message":"temperature: expected a number, got a )"
                             R"(string","type":"invalid_request_error","param":"temperature",)"
                             R"("code":null}})"));
    }
    const std::string malformed = refusal("{\"messages\": [");
    QVERIFY2(malformed.starts_with("the request body is not valid JSON: "), malformed.c_str());
    QCOMPARE(
        errorJson(ApiError(401, "invalid API key", "authentication_error", {}, "invalid_api_key")),
        std::string(R"({"error":{"message":"invalid API key","type":"authentication_error",)"
                    R"("param":null,"code":"invalid_api_key"}})"));
}

// Issue 35 item 1: 20,000 levels in a tool's parameters or a tool call's arguments ran
// dump() out of stack on a server thread. Past 64 levels (the whole body counted) the
// request is refused before anything is built from it, naming the field.
void TestApi::deepJsonIsRefusedNamingTheField() {
    const auto refused = [](const std::string& body) -> std::pair<std::string, std::string> {
        try {
            parseChatRequest(body);
        } catch (const ApiError& e) {
            return {e.param(), std::to_string(e.status()) + " " + e.what()};
        }
        return {"(accepted)", {}};
    };
    const auto nested = [](std::size_t depth, const std::string& inner = {}) {
        return std::string(depth, '[') + inner + std::string(depth, ']');
    };
    const auto withParameters = [&](const std::string& parameters) {
        return "{" + kUser + R"(,"tools":[{"type":"function","function":{"name":"f",)" +
               R"("parameters":)" + parameters + "}}]}";
    };
    const auto withArguments = [](const std::string& arguments) {
        return R"({"messages":[{"role":"user","content":"x"},{"role":"assistant",)"
               R"("tool_calls":[{"id":"c","type":"function","function":{"name":"f",)"
               R"("arguments":)" +
               arguments + "}}]}]}";
    };
    const std::string tooDeep = "nested deeper than 64 levels of arrays and objects";

    auto [param, message] = refused(withParameters(nested(20000)));
    QCOMPARE(param, std::string("tools[0].function.parameters[0][0][0][0]..."));
    QCOMPARE(message, "400 " + param + ": " + tooDeep);
    // The body's own object, tools, the tool and its function are 4 of the 64 levels.
    QCOMPARE(refused(withParameters(nested(60))).first, std::string("(accepted)"));
    QCOMPARE(refused(withParameters(nested(61))).first,
             std::string("tools[0].function.parameters[0][0][0][0]..."));

    std::tie(param, message) = refused(withArguments(R"({"a":)" + nested(20000, "1") + "}"));
    QCOMPARE(param, std::string("messages[1].tool_calls[0].function.arguments.a[0]..."));
    QCOMPARE(message, "400 " + param + ": " + tooDeep);

    // As a JSON string (how OpenAI clients send arguments): its own text is checked.
    std::tie(param, message) = refused(withArguments("\"{\\\"a\\\":" + nested(20000, "1") + "}\""));
    QCOMPARE(param, std::string("messages[1].tool_calls[0].function.arguments"));
    QCOMPARE(message, "400 " + param + ": a JSON text " + tooDeep);
    QCOMPARE(refused(withArguments("\"{\\\"a\\\":" + nested(63, "1") + "}\"")).first,
             std::string("(accepted)"));
}

// Issue 35 item 13: "temperature": 1e400 escaped the parser as nlohmann's out_of_range
// and became a 500 with the exception's text in a header. Every JSON error is a 400
// naming the field it is in.
void TestApi::jsonErrorsNameTheField() {
    try {
        parseChatRequest("{" + kUser + R"(,"temperature":1e400})");
        QFAIL("accepted");
    } catch (const ApiError& e) {
        QCOMPARE(e.status(), 400);
        QCOMPARE(e.param(), std::string("temperature"));
        QCOMPARE(std::string(e.what()),
                 std::string("temperature: number overflow parsing '1e400'"));
    }
    try {
        parseChatRequest("{" + kUser + R"(,"stop":["a",tru]})");
        QFAIL("accepted");
    } catch (const ApiError& e) {
        QCOMPARE(e.status(), 400);
        QCOMPARE(e.param(), std::string("stop[1]"));
        QCOMPARE(std::string(e.what()),
                 std::string("the request body is not valid JSON: stop[1]: parse error at line 1, "
                             "column 61: syntax error while parsing value - invalid literal; "
                             "last read: '\"a\",tru]'"));
    }
}

// Issue 35 item 19: {"model":"a",...,"model":"b"} was read as the last; another reader
// (a proxy in front) may read the first. Refused naming the key.
void TestApi::duplicateKeysAreRefused() {
    try {
        parseChatRequest("{" + kUser + R"(,"max_tokens":4,"max_tokens":4000})");
        QFAIL("accepted");
    } catch (const ApiError& e) {
        QCOMPARE(e.status(), 400);
        QCOMPARE(e.param(), std::string("max_tokens"));
        QCOMPARE(std::string(e.what()), std::string("the request body is ambiguous: key "
                                                    "\"max_tokens\" appears twice in one object"));
    }
}

void TestApi::completionJsonExact() {
    Completion c;
    c.id = "chatcmpl-7";
    c.model = "demo";
    c.created = 1700000000;
    c.message.role = k3::ChatRole::Assistant;
    c.message.content = "Hi \"you\"";
    c.message.reasoningContent = "greet";
    c.finishReason = "stop";
    c.usage = {12, 5, 3};
    QCOMPARE(completionJson(c),
             std::string(R"({"id":"chatcmpl-7","object":"chat.completion","created":1700000000,)"
                         R"("model":"demo","choices":[{"index":0,"message":{"role":"assistant",)"
                         R"("content":"Hi \"you\"","reasoning_content":"greet"},"logprobs":null,)"
                         R"("finish_reason":"stop"}],"usage":{"prompt_tokens":12,)"
                         R"("completion_tokens":5,"total_tokens":17,"prompt_tokens_details":)"
                         R"({"cached_tokens":3}}})"));
}

void TestApi::completionWithToolCalls() {
    Completion c;
    c.id = "chatcmpl-ab";
    c.model = "demo";
    c.created = 1;
    c.message.toolCalls = {{"", "get_weather", R"({"city":"Oslo"})", false}};
    c.finishReason = "tool_calls";
    const Json j = Json::parse(completionJson(c));
    QCOMPARE(j["choices"][0]["message"].dump(),
             std::string(R"({"role":"assistant","content":null,"tool_calls":[{"id":"call_0_ab",)"
                         R"("type":"function","function":{"name":"get_weather","arguments":)"
                         R"("{\"city\":\"Oslo\"}"}}]})"));
    QCOMPARE(j["choices"][0]["finish_reason"].get<std::string>(), std::string("tool_calls"));
}

// function.arguments strings, read as the JSON text OpenAI's API says they are: an object
// is the mapping (argument tags), a JSON string the json block it holds, other text a
// verbatim json block; and a json-block call goes out as a JSON string, so it comes back
// as the same block.
void TestApi::stringArgumentsAreReadAsJsonText() {
    auto argumentsOf = [](const std::string& arguments) {
        const Json body = {
            {"messages",
             {{{"role", "assistant"},
               {"tool_calls", {{{"function", {{"name", "f"}, {"arguments", arguments}}}}}}}}}};
        return parseChatRequest(body.dump()).messages[0].toolCalls[0];
    };
    const k3::ChatToolCall object = argumentsOf(R"({"b": 1, "a": [2]})");
    QCOMPARE(object.arguments, std::string(R"({"b": 1, "a": [2]})")); // key order kept
    QCOMPARE(object.argumentsAsJsonBlock, false);
    const k3::ChatToolCall block = argumentsOf(R"("{\"city\": \"Bergen\"}")");
    QCOMPARE(block.arguments, std::string(R"({"city": "Bergen"})"));
    QCOMPARE(block.argumentsAsJsonBlock, true);
    const k3::ChatToolCall text = argumentsOf("city=Bergen");
    QCOMPARE(text.arguments, std::string("city=Bergen"));
    QCOMPARE(text.argumentsAsJsonBlock, true);

    Completion c;
    c.id = "chatcmpl-cd";
    c.message.toolCalls = {{"", "f", R"({"city": "Bergen"})", true}};
    c.finishReason = "tool_calls";
    const Json sent = Json::parse(completionJson(c))["choices"][0]["message"]["tool_calls"][0];
    const std::string arguments = sent["function"]["arguments"].get<std::string>();
    QCOMPARE(arguments, std::string(R"("{\"city\": \"Bergen\"}")"));
    const k3::ChatToolCall back = argumentsOf(arguments);
    QCOMPARE(back.arguments, c.message.toolCalls[0].arguments);
    QCOMPARE(back.argumentsAsJsonBlock, true);
}

void TestApi::chunksNeverSplitUtf8() {
    ChunkWriter w("chatcmpl-1", "demo", 5);
    QCOMPARE(w.start(),
             std::string("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\","
                         "\"created\":5,\"model\":\"demo\",\"choices\":[{\"index\":0,"
                         "\"delta\":{\"role\":\"assistant\",\"content\":\"\"},"
                         "\"logprobs\":null,\"finish_reason\":null}]}\n\n"));
    // "你" is E4 BD A0: its first two bytes alone send nothing.
    QCOMPARE(w.delta("", "\xE4\xBD"), std::string());
    QCOMPARE(w.delta("ok\xF0\x9F", "\xA0!"),
             std::string("data: {\"id\":\"chatcmpl-1\",\"object\":\"chat.completion.chunk\","
                         "\"created\":5,\"model\":\"demo\",\"choices\":[{\"index\":0,\"delta\":{"
                         "\"reasoning_content\":\"ok\",\"content\":\"你!\"},\"logprobs\":null,"
                         "\"finish_reason\":null}]}\n\n"));
    const std::string rest = w.delta("\x98\x80", "");
    QVERIFY2(rest.find("\"reasoning_content\":\"😀\"") != std::string::npos, rest.c_str());

    std::string held;
    QCOMPARE(takeCompleteUtf8(held, "a\xE4"), std::string("a"));
    QCOMPARE(held, std::string("\xE4"));
    QCOMPARE(takeCompleteUtf8(held, "\xBD"), std::string());
    QCOMPARE(takeCompleteUtf8(held, "\xA0"), std::string("你"));
    QCOMPARE(held, std::string());
    QCOMPARE(takeCompleteUtf8(held, "\x80\x80"), std::string("\x80\x80")); // malformed: passed on
}

void TestApi::finishUsageAndDone() {
    ChunkWriter w("chatcmpl-x", "m", 9);
    QCOMPARE(w.delta("", "\xE4"), std::string());
    const std::string prefix = "data: {\"id\":\"chatcmpl-x\",\"object\":\"chat.completion.chunk\","
                               "\"created\":9,\"model\":\"m\",";
    // A byte that never completed is released at the finish (as U+FFFD), then the reason.
    QCOMPARE(w.finish({}, "length"),
             prefix +
                 "\"choices\":[{\"index\":0,\"delta\":{\"content\":\"\xEF\xBF\xBD\"},"
                 "\"logprobs\":null,\"finish_reason\":null}]}\n\n" +
                 prefix +
                 "\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,"
                 "\"finish_reason\":\"length\"}]}\n\n");
    ChunkWriter t("chatcmpl-x", "m", 9);
    QCOMPARE(t.finish({{"", "f", "{}", false}}, "tool_calls"),
             prefix +
                 "\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{\"index\":0,"
                 "\"id\":\"call_0_x\",\"type\":\"function\",\"function\":{\"name\":\"f\","
                 "\"arguments\":\"{}\"}}]},\"logprobs\":null,\"finish_reason\":null}]}\n\n" +
                 prefix +
                 "\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,"
                 "\"finish_reason\":\"tool_calls\"}]}\n\n");
    QCOMPARE(w.usage({10, 4, 0}),
             prefix + "\"choices\":[],\"usage\":{\"prompt_tokens\":10,\"completion_tokens\":4,"
                      "\"total_tokens\":14,\"prompt_tokens_details\":{\"cached_tokens\":0}}}\n\n");
    QCOMPARE(ChunkWriter::done(), std::string("data: [DONE]\n\n"));
}

void TestApi::stopStringsAreNeverSent() {
    StopFilter f({"world", "xyz"});
    QCOMPARE(f.feed("Hello wo"), std::string("Hello "));
    QCOMPARE(f.feed("r"), std::string());
    QCOMPARE(f.feed("ld and more"), std::string());
    QVERIFY(f.stopped());
    QCOMPARE(f.feed("later"), std::string());

    StopFilter g({"world"});
    QCOMPARE(g.feed("Hello wo"), std::string("Hello "));
    QCOMPARE(g.feed("nder"), std::string("wonder"));
    QCOMPARE(g.feed(" w"), std::string(" "));
    QCOMPARE(g.flush(), std::string("w"));
    QVERIFY(!g.stopped());

    StopFilter none({});
    QCOMPARE(none.feed("abc"), std::string("abc"));
}

// The OpenAI-shaped fixture conversations (tool_calls with mapping arguments, results
// by tool_call_id, tools, tool_choice) go through parseChatRequest and render exactly
// as the official template rendered them.
void TestApi::toolFixturesRenderThroughTheApi() {
    std::ifstream in(K3_SOURCE_DIR "/tests/fixtures/chat/tool_renders.json");
    QVERIFY(in.good());
    const Json doc = Json::parse(in);
    int checked = 0;
    for (const Json& c : doc.at("cases")) {
        const Json& o = c.at("options");
        if (!c.contains("expected") || !o.value("add_generation_prompt", false)) continue;
        Json body = {{"model", "m"}, {"messages", asClientsSendThem(c.at("messages"))}};
        if (o.contains("tools") && !o["tools"].empty()) body["tools"] = o["tools"];
        if (o.contains("tool_choice")) body["tool_choice"] = o["tool_choice"];
        if (o.contains("response_format")) body["response_format"] = o["response_format"];
        if (o.contains("thinking"))
            body["thinking"] = {{"type", o["thinking"].get<bool>() ? "enabled" : "disabled"}};
        const ChatRequest r = parseChatRequest(body.dump());
        QCOMPARE(k3::renderChat(r.messages, r.render), c.at("expected").get<std::string>());
        ++checked;
    }
    QCOMPARE(checked, 13);
}

// The template's own tool-call turns, as a model generates them: the text after the
// generation prompt, encoded with the demo's tokenizer and read back id by id by the
// session's ReplyReader, becomes what k3 serve sends: finish_reason tool_calls, each call
// with its id, name and arguments (JSON text), in one message or in the stream's one
// tool_calls chunk before the finish chunk. (A tiny random model never calls a tool on
// its own; this is the same path from its ids.)
void TestApi::generatedToolCallsBecomeToolCalls() {
    std::ifstream in(K3_SOURCE_DIR "/tests/fixtures/chat/tool_renders.json");
    QVERIFY(in.good());
    const Json doc = Json::parse(in);
    const k3::Tokenizer tok = k3::Tokenizer::fromDirectory(K3_SOURCE_DIR "/resources/demo");
    int checked = 0;
    for (const Json& c : doc.at("cases")) {
        const std::string name = c.at("name").get<std::string>();
        if (name != "assistant_calls_nogen" && name != "calls_and_results_by_id_nothink" &&
            name != "string_arguments")
            continue;
        // The conversation up to its (first) assistant turn with calls, as the API reads it.
        Json messages = Json::array();
        Json turn;
        for (const Json& m : c.at("messages")) {
            messages.push_back(m);
            if (m.contains("tool_calls")) {
                turn = m;
                break;
            }
        }
        QVERIFY2(!turn.is_null(), name.c_str());
        Json body = {{"model", "demo"}, {"messages", asClientsSendThem(messages)}};
        if (c.at("options").contains("thinking"))
            body["thinking"] = {
                {"type", c.at("options").at("thinking").get<bool>() ? "enabled" : "disabled"}};
        ChatRequest request = parseChatRequest(body.dump());
        const std::vector<k3::ChatMessage> asked(request.messages.begin(),
                                                 request.messages.end() - 1);
        const std::string prompt = k3::renderChat(asked, request.render);
        k3::ChatRenderOptions closed = request.render;
        closed.addGenerationPrompt = false;
        const std::string whole = k3::renderChat(request.messages, closed);
        if (name == "assistant_calls_nogen") QCOMPARE(whole, c.at("expected").get<std::string>());
        QVERIFY2(whole.starts_with(prompt), name.c_str());
        const std::vector<k3::TokenId> ids = tok.encodeWithSpecial(whole.substr(prompt.size()));

        k3::ReplyReader reader(tok, request.render);
        ChunkWriter writer("chatcmpl-t7", "demo", 1);
        std::string events = writer.start();
        std::size_t fed = 0;
        while (fed < ids.size() && !reader.done()) {
            const k3::ChatParseDelta d = reader.push(ids[fed++]);
            events += writer.delta(d.thinking, d.response);
        }
        QCOMPARE(fed, ids.size()); // the turn ends at its last id, <|end_of_msg|>
        QVERIFY(reader.endOfTurn());
        std::vector<std::string> problems;
        const k3::ChatMessage reply = reader.reply(problems);
        QCOMPARE(problems, std::vector<std::string>());
        QCOMPARE(reply.content, turn.at("content").get<std::string>());
        QCOMPARE(reply.reasoningContent, request.render.thinking
                                             ? turn.value("reasoning_content", std::string())
                                             : std::string());
        const Json& calls = turn.at("tool_calls");
        QCOMPARE(reply.toolCalls.size(), calls.size());
        const std::string reason = finishReason(reply, true, false);
        QCOMPARE(reason, std::string("tool_calls"));

        Completion completion{"chatcmpl-t7", "demo", 1, reply, reason, {}};
        const Json j = Json::parse(completionJson(completion));
        const Json& message = j["choices"][0]["message"];
        QCOMPARE(j["choices"][0]["finish_reason"].get<std::string>(), reason);
        QVERIFY(message["content"].is_null() == reply.content.empty());
        events += writer.finish(reply.toolCalls, reason);
        Json streamedCalls, finish;
        std::string streamedReasoning;
        int callChunks = 0;
        for (std::size_t at = 0; (at = events.find("data: ", at)) != std::string::npos;) {
            const std::size_t end = events.find("\n\n", at);
            const Json chunk = Json::parse(events.substr(at + 6, end - at - 6));
            at = end;
            const Json& choice = chunk["choices"][0];
            if (choice["delta"].contains("reasoning_content"))
                streamedReasoning += choice["delta"]["reasoning_content"].get<std::string>();
            if (choice["delta"].contains("tool_calls")) {
                streamedCalls = choice["delta"]["tool_calls"];
                ++callChunks;
                QVERIFY(choice["finish_reason"].is_null());
            }
            if (!choice["finish_reason"].is_null()) finish = choice["finish_reason"];
        }
        QCOMPARE(callChunks, 1);
        QCOMPARE(finish.get<std::string>(), reason);
        QCOMPARE(streamedReasoning, reply.reasoningContent);
        for (std::size_t i = 0; i < calls.size(); ++i) {
            const Json& fn = calls[i].at("function");
            // What the turn said: an object in its key order, or the string verbatim.
            const std::string arguments = fn.at("arguments").is_string()
                                              ? fn.at("arguments").get<std::string>()
                                              : fn.at("arguments").dump();
            QCOMPARE(reply.toolCalls[i].name, fn.at("name").get<std::string>());
            QCOMPARE(reply.toolCalls[i].arguments, arguments);
            QCOMPARE(reply.toolCalls[i].argumentsAsJsonBlock, fn.at("arguments").is_string());
            for (const Json& got : {message["tool_calls"][i], streamedCalls[i]}) {
                QCOMPARE(got["id"].get<std::string>(), "call_" + std::to_string(i) + "_t7");
                QCOMPARE(got["type"].get<std::string>(), std::string("function"));
                QCOMPARE(got["function"]["name"].get<std::string>(),
                         fn.at("name").get<std::string>());
                // Sent as a JSON text: the object, or a JSON string holding the block.
                QCOMPARE(got["function"]["arguments"].get<std::string>(),
                         fn.at("arguments").is_string() ? Json(arguments).dump() : arguments);
            }
            QCOMPARE(streamedCalls[i]["index"].get<int>(), int(i));
        }
        ++checked;
    }
    QCOMPARE(checked, 3);
}

void TestApi::finishReasons() {
    k3::ChatMessage m;
    QCOMPARE(finishReason(m, true, false), std::string("stop"));
    QCOMPARE(finishReason(m, false, true), std::string("stop"));
    QCOMPARE(finishReason(m, false, false), std::string("length"));
    m.toolCalls.push_back({"", "f", "{}", false});
    QCOMPARE(finishReason(m, true, false), std::string("tool_calls"));
}

void TestApi::modelList() {
    QCOMPARE(modelsJson("demo", 3),
             std::string(R"({"object":"list","data":[{"id":"demo","object":"model","created":3,)"
                         R"("owned_by":"k3"}]})"));
}

QTEST_GUILESS_MAIN(TestApi)
#include "tst_api.moc"
