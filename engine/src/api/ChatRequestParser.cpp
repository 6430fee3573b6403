// POST /v1/chat/completions body -> ChatRequest. Each check names the field as a client
// wrote it (messages[2].tool_calls[0].function.name), so a 400 says what to fix.
#include "api/ImageParts.hpp"
#include "api/RequestFields.hpp"
#include "k3/api.hpp"
#include "k3/json_duplicates.hpp"
#include "k3/json_limits.hpp"
#include "k3/remote.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>

namespace k3::api {

namespace detail {

ApiError bad(const std::string& field, const std::string& what) {
    return ApiError(400, field + ": " + what, "invalid_request_error", field);
}

const char* typeName(const Json& v) {
    if (v.is_null()) return "null";
    if (v.is_boolean()) return "a boolean";
    if (v.is_number()) return "a number";
    if (v.is_string()) return "a string";
    if (v.is_array()) return "an array";
    return "an object";
}

ApiError wrongType(const std::string& field, const char* expected, const Json& v) {
    return bad(field, std::string("expected ") + expected + ", got " + typeName(v));
}

std::string stringField(const Json& v, const std::string& field) {
    if (!v.is_string()) throw wrongType(field, "a string", v);
    return v.get<std::string>();
}

bool has(const Json& obj, const char* key) {
    const auto it = obj.find(key);
    return it != obj.end() && !it->is_null();
}

// content: a string, null, or text parts ([{"type":"text","text":"..."}]); image_url
// parts too when `m` is given (their images go to m->images, ImageParts.cpp).
std::string contentText(const Json& v, const std::string& field, ChatMessage* m = nullptr) {
    if (v.is_null()) return {};
    if (v.is_string()) return v.get<std::string>();
    if (!v.is_array()) throw wrongType(field, "a string or an array of text parts", v);
    std::string text;
    for (std::size_t i = 0; i < v.size(); ++i) {
        const std::string part = field + "[" + std::to_string(i) + "]";
        if (!v[i].is_object()) throw wrongType(part, "an object", v[i]);
        const auto type = v[i].find("type");
        if (type == v[i].end() || !type->is_string())
            throw bad(part + ".type", "required, a string");
        if (*type == "image_url" && m) {
            text += imagePart(v[i], part, *m);
            continue;
        }
        if (*type != "text")
            throw bad(part + ".type",
                      "\"" + type->get<std::string>() + "\" is not supported (only text parts)");
        if (!v[i].contains("text")) throw bad(part + ".text", "required");
        text += stringField(v[i]["text"], part + ".text");
    }
    return text;
}

ChatToolCall toolCall(const Json& v, const std::string& field) {
    if (!v.is_object()) throw wrongType(field, "an object", v);
    ChatToolCall call;
    if (has(v, "id")) call.id = stringField(v["id"], field + ".id");
    if (has(v, "type") && stringField(v["type"], field + ".type") != "function")
        throw bad(field + ".type", "only \"function\" is supported");
    if (!has(v, "function")) throw bad(field + ".function", "required");
    const Json& fn = v["function"];
    if (!fn.is_object()) throw wrongType(field + ".function", "an object", fn);
    if (!has(fn, "name")) throw bad(field + ".function.name", "required");
    call.name = stringField(fn["name"], field + ".function.name");
    if (!has(fn, "arguments")) {
        call.arguments = "{}";
    } else if (fn["arguments"].is_string()) {
        // OpenAI clients send a JSON text (as k3 serve answered it, toolArgumentsJson):
        // read as vLLM reads it, an object renders as argument tags and a JSON string as
        // the json block it holds, so a call comes back in the form the model wrote it.
        // Text that is no JSON stays verbatim in a json block.
        const std::string text = fn["arguments"].get<std::string>();
        if (jsonTooDeepAt(text))
            throw bad(field + ".function.arguments", "a JSON text nested deeper than " +
                                                         std::to_string(kMaxJsonDepth) +
                                                         " levels of arrays and objects");
        const Json parsed = Json::parse(text, nullptr, false);
        if (parsed.is_object() || parsed.is_string()) {
            readToolArgumentsJson(text, call);
        } else {
            call.arguments = text;
            call.argumentsAsJsonBlock = true;
        }
    } else if (fn["arguments"].is_object()) {
        call.arguments = fn["arguments"].dump();
    } else {
        throw wrongType(field + ".function.arguments", "a string or an object", fn["arguments"]);
    }
    return call;
}

ChatMessage message(const Json& v, const std::string& field) {
    if (!v.is_object()) throw wrongType(field, "an object", v);
    if (!v.contains("role")) throw bad(field + ".role", "required");
    const std::string roleName = stringField(v["role"], field + ".role");
    // OpenAI's newer clients send instructions as "developer": the system role here.
    const auto role =
        roleName == "developer" ? std::optional(ChatRole::System) : parseChatRole(roleName);
    if (!role)
        throw bad(field + ".role",
                  "unknown role \"" + roleName + "\" (system, developer, user, assistant or tool)");
    ChatMessage m;
    m.role = *role;
    if (v.contains("content")) m.content = contentText(v["content"], field + ".content", &m);
    if (has(v, "name")) m.name = stringField(v["name"], field + ".name");
    if (m.role == ChatRole::Assistant) {
        // Moonshot's field; some servers call it "reasoning".
        for (const char* key : {"reasoning_content", "reasoning"})
            if (has(v, key) && m.reasoningContent.empty())
                m.reasoningContent = stringField(v[key], field + "." + key);
        if (has(v, "tool_calls")) {
            const Json& calls = v["tool_calls"];
            if (!calls.is_array()) throw wrongType(field + ".tool_calls", "an array", calls);
            for (std::size_t i = 0; i < calls.size(); ++i)
                m.toolCalls.push_back(
                    toolCall(calls[i], field + ".tool_calls[" + std::to_string(i) + "]"));
        }
    }
    if (m.role == ChatRole::Tool && has(v, "tool_call_id"))
        m.toolCallId = stringField(v["tool_call_id"], field + ".tool_call_id");
    return m;
}

int positiveInt(const Json& v, const std::string& field) {
    // Clients written in JavaScript or Python may send 5.0 for 5: accept integral floats.
    const bool integral =
        v.is_number_integer() ||
        (v.is_number_float() && std::isfinite(v.get<double>()) &&
         std::trunc(v.get<double>()) == v.get<double>() && std::fabs(v.get<double>()) < 1e15);
    if (!integral) throw wrongType(field, "an integer", v);
    const auto n = v.is_number_integer() ? v.get<std::int64_t>() : std::int64_t(v.get<double>());
    if (n < 1 || n > 1'000'000) throw bad(field, std::to_string(n) + " is outside 1..1000000");
    return int(n);
}

double number(const Json& v, const std::string& field, double lo, double hi) {
    if (!v.is_number()) throw wrongType(field, "a number", v);
    const double x = v.get<double>();
    if (!(x >= lo && x <= hi))
        throw bad(field, v.dump() + " is outside " + Json(lo).dump() + ".." + Json(hi).dump());
    return x;
}

void tools(const Json& v, ChatRequest& r) {
    if (!v.is_array()) throw wrongType("tools", "an array", v);
    for (std::size_t i = 0; i < v.size(); ++i) {
        const std::string field = "tools[" + std::to_string(i) + "]";
        if (!v[i].is_object()) throw wrongType(field, "an object", v[i]);
        if (!has(v[i], "type") || stringField(v[i]["type"], field + ".type") != "function")
            throw bad(field + ".type", "required, \"function\"");
        if (!has(v[i], "function") || !v[i]["function"].is_object())
            throw bad(field + ".function", "required, an object");
        if (!has(v[i]["function"], "name")) throw bad(field + ".function.name", "required");
        stringField(v[i]["function"]["name"], field + ".function.name");
    }
    r.render.toolsJson = v.dump();
}

void toolChoice(const Json& v, ChatRequest& r) {
    if (v.is_string()) {
        const std::string s = v.get<std::string>();
        if (s != "none" && s != "auto" && s != "required")
            throw bad("tool_choice", "\"" + s + "\" is not none, auto or required");
        r.render.toolChoice = s;
        return;
    }
    if (!v.is_object()) throw wrongType("tool_choice", "a string or an object", v);
    // A named function: the template can only say that a call is required.
    if (!has(v, "function") || !v["function"].is_object() || !has(v["function"], "name"))
        throw bad("tool_choice.function.name", "required");
    stringField(v["function"]["name"], "tool_choice.function.name");
    r.render.toolChoice = "required";
}

// "stop": one string or up to 4, none empty.
void stopSequences(const Json& stop, std::vector<std::string>& out, const std::string& field,
                   std::size_t most) {
    if (stop.is_string()) {
        out.push_back(stop.get<std::string>());
    } else if (stop.is_array()) {
        if (stop.size() > most) throw bad(field, "at most " + std::to_string(most) + " sequences");
        for (std::size_t i = 0; i < stop.size(); ++i)
            out.push_back(stringField(stop[i], field + "[" + std::to_string(i) + "]"));
    } else {
        throw wrongType(field, "a string or an array of strings", stop);
    }
    for (std::size_t i = 0; i < out.size(); ++i)
        if (out[i].empty()) throw bad(field, "an empty stop sequence");
}

// "thinking": {"type": "enabled" | "disabled"}.
void thinking(const Json& t, ChatRequest& r) {
    if (!t.is_object()) throw wrongType("thinking", "an object", t);
    if (!has(t, "type")) throw bad("thinking.type", "required");
    const std::string type = stringField(t["type"], "thinking.type");
    if (type != "enabled" && type != "disabled")
        throw bad("thinking.type", "\"" + type + "\" is not enabled or disabled");
    r.render.thinking = type == "enabled";
}

// logit_bias: {"TOKEN_ID": bias}, bias -100..100.
void logitBias(const Json& v, std::vector<std::pair<TokenId, float>>& out) {
    if (!v.is_object()) throw wrongType("logit_bias", "an object", v);
    for (const auto& [key, bias] : v.items()) {
        const std::string field = "logit_bias." + key;
        const bool digits = !key.empty() && key.size() <= 10 &&
                            key.find_first_not_of("0123456789") == std::string::npos;
        if (!digits || std::stoll(key) > 0x7fffffff)
            throw bad(field, "a key must be a token id (a non-negative integer)");
        out.emplace_back(TokenId(std::stoll(key)), float(number(bias, field, -100, 100)));
    }
}

// Legacy functions / function_call: the same as tools / tool_choice with each function
// wrapped as {"type":"function","function":...}.
void legacyFunctions(const Json& doc, ChatRequest& r) {
    if (has(doc, "functions")) {
        if (has(doc, "tools")) throw bad("functions", "give tools or functions, not both");
        const Json& f = doc["functions"];
        if (!f.is_array()) throw wrongType("functions", "an array", f);
        Json wrapped = Json::array();
        for (std::size_t i = 0; i < f.size(); ++i) {
            const std::string field = "functions[" + std::to_string(i) + "]";
            if (!f[i].is_object()) throw wrongType(field, "an object", f[i]);
            if (!has(f[i], "name")) throw bad(field + ".name", "required");
            stringField(f[i]["name"], field + ".name");
            wrapped.push_back({{"type", "function"}, {"function", f[i]}});
        }
        r.render.toolsJson = wrapped.dump();
    }
    if (has(doc, "function_call")) {
        if (has(doc, "tool_choice"))
            throw bad("function_call", "give tool_choice or function_call, not both");
        const Json& c = doc["function_call"];
        if (c.is_string() && c != "none" && c != "auto")
            throw bad("function_call", "\"" + c.get<std::string>() + "\" is not none or auto");
        if (c.is_string()) {
            r.render.toolChoice = c.get<std::string>();
        } else {
            if (!c.is_object() || !has(c, "name"))
                throw bad("function_call.name", "required (or \"none\" or \"auto\")");
            stringField(c["name"], "function_call.name");
            r.render.toolChoice = "required"; // the template can only say a call is required
        }
    }
}

// logprobs, top_logprobs.
void logprobs(const Json& doc, ChatRequest& r) {
    bool on = false;
    if (has(doc, "logprobs")) {
        if (!doc["logprobs"].is_boolean())
            throw wrongType("logprobs", "a boolean", doc["logprobs"]);
        on = doc["logprobs"].get<bool>();
    }
    if (on) r.topLogprobs = 0;
    if (has(doc, "top_logprobs")) {
        const Json& t = doc["top_logprobs"];
        if (!t.is_number_integer() || t.get<std::int64_t>() < 0 || t.get<std::int64_t>() > 20)
            throw bad("top_logprobs", "an integer 0..20");
        if (!on) throw bad("top_logprobs", "needs logprobs: true");
        r.topLogprobs = int(t.get<std::int64_t>());
    }
}

// An assistant message last: its answer is continued (its channel left open), as vLLM's
// continue_final_message; the think channel when it has no content yet and thinking is on.
// One with tool calls is closed as before: the model answers after its calls.
void continueFinalAssistant(ChatRequest& r) {
    const ChatMessage& last = r.messages.back();
    if (last.role != ChatRole::Assistant || !last.toolCalls.empty()) return;
    r.render.continueChannel = r.render.thinking && last.content.empty() ? "think" : "response";
}

Json parseBody(std::string_view body) {
    // Before anything is built from the body: dump() and the renderer recurse per level.
    if (const auto deep = jsonTooDeepAt(body))
        throw bad(jsonPathAt(body, *deep), "nested deeper than " + std::to_string(kMaxJsonDepth) +
                                               " levels of arrays and objects");
    Json doc;
    try {
        doc = parseJsonWithoutDuplicateKeys<Json>(body);
    } catch (const DuplicateJsonKey& e) {
        throw ApiError(400, std::string("the request body is ambiguous: ") + e.what(),
                       "invalid_request_error", e.key());
    } catch (const Json::exception& e) {
        // Syntax errors, and numbers out of range (1e400): named by the field they are in.
        const auto error = jsonSyntaxError(body);
        // nlohmann's position counts the offending character: the path is taken before it.
        const std::string field =
            error ? jsonPathAt(body, error->byte > 0 ? error->byte - 1 : 0) : std::string();
        const std::string why = error ? error->why : std::string("unreadable");
        const bool syntax = dynamic_cast<const Json::parse_error*>(&e) != nullptr;
        if (field.empty()) throw ApiError(400, "the request body is not valid JSON: " + why);
        throw ApiError(400,
                       (syntax ? "the request body is not valid JSON: " : "") + field + ": " + why,
                       "invalid_request_error", field);
    }
    if (!doc.is_object())
        throw ApiError(400,
                       std::string("the request body must be a JSON object, got ") + typeName(doc));
    return doc;
}

} // namespace detail

using namespace detail;

ApiError::ApiError(int status, const std::string& message, std::string type, std::string param,
                   std::string code)
    : Error(ErrorKind::Api, message), status_(status), type_(std::move(type)),
      param_(std::move(param)), code_(std::move(code)) {}

ChatRequest parseChatRequest(std::string_view body) {
    Json doc = parseBody(body);
    ChatRequest r;
    if (has(doc, "model")) r.model = stringField(doc["model"], "model");
    if (!doc.contains("messages")) throw bad("messages", "required");
    const Json& messages = doc["messages"];
    if (!messages.is_array()) throw wrongType("messages", "an array", messages);
    if (messages.empty()) throw bad("messages", "must hold at least one message");
    for (std::size_t i = 0; i < messages.size(); ++i) {
        const std::string field = "messages[" + std::to_string(i) + "]";
        ChatMessage m = message(messages[i], field);
        // Without a name the renderer would fall back to the call at the same position: a
        // stale or mistyped id would answer the wrong call without a word.
        if (m.role == ChatRole::Tool && !m.toolCallId.empty() && m.name.empty()) {
            const bool known = std::any_of(r.messages.begin(), r.messages.end(), [&](auto& prev) {
                return std::any_of(prev.toolCalls.begin(), prev.toolCalls.end(),
                                   [&](auto& c) { return c.id == m.toolCallId; });
            });
            if (!known)
                throw bad(field + ".tool_call_id",
                          "\"" + m.toolCallId +
                              "\" matches no tool call id of an earlier assistant message "
                              "(and the message gives no name)");
        }
        r.messages.push_back(std::move(m));
    }

    if (has(doc, "max_tokens")) r.maxTokens = positiveInt(doc["max_tokens"], "max_tokens");
    if (has(doc, "max_completion_tokens"))
        r.maxTokens = positiveInt(doc["max_completion_tokens"], "max_completion_tokens");
    samplingFields(doc, r);
    if (has(doc, "n") && (!doc["n"].is_number_integer() || doc["n"].get<std::int64_t>() != 1))
        throw bad("n", "only 1 choice per request is supported");
    if (has(doc, "stop")) stopSequences(doc["stop"], r.stop);
    if (has(doc, "thinking")) thinking(doc["thinking"], r);
    if (has(doc, "reasoning_effort")) {
        const std::string e = stringField(doc["reasoning_effort"], "reasoning_effort");
        // OpenAI's "none" turns reasoning off; "minimal" is the lowest effort K3 has.
        if (e == "none")
            r.render.thinking = false;
        else if (e == "minimal")
            r.render.thinkingEffort = "low";
        else if (e != "low" && e != "medium" && e != "high" && e != "max")
            throw bad("reasoning_effort",
                      "\"" + e + "\" is not none, minimal, low, medium, high or max");
        else
            r.render.thinkingEffort = e;
    }
    if (has(doc, "tools")) tools(doc["tools"], r);
    if (has(doc, "tool_choice")) toolChoice(doc["tool_choice"], r);
    legacyFunctions(doc, r);
    requiredCall(doc, r);
    responseFormat(doc, r);
    logprobs(doc, r);
    penaltiesAndStreaming(doc, r);
    r.render.addGenerationPrompt = true;
    continueFinalAssistant(r);
    // The conversation must render: a tool result whose name cannot be resolved is a
    // client error, said before anything is queued.
    try {
        renderChatSegments(r.messages, r.render);
    } catch (const ChatError& e) {
        throw ApiError(400, std::string("messages: ") + e.what(), "invalid_request_error",
                       "messages");
    }
    return r;
}

} // namespace k3::api
