// POST /v1/messages: the Anthropic Messages API. The request is read into the chat
// completions request it means (so the template, constraints and checks are the chat
// route's), and the answer is written as a message: content blocks (thinking, text,
// tool_use), stop_reason, usage; streamed as Anthropic's typed events.
#include "ServeJson.hpp"
#include "ServeServer.hpp"

#include <k3/remote.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <ctime>

namespace k3cli::serve {

namespace {

using namespace json; // Json, dump, bad, need, text, objectBody, partsText

// One Anthropic message: its chat messages (tool results become tool messages, before
// the user's text, as the results come first in Anthropic's user turn).
void readMessage(const Json& m, const std::string& field, Json& out) {
    if (!m.is_object()) throw bad(field, "expected an object");
    const std::string role = text(need(m, "role", field), field + ".role");
    if (role != "user" && role != "assistant")
        throw bad(field + ".role", "\"" + role + "\" is not user or assistant");
    const Json& content = need(m, "content", field);
    if (content.is_string()) {
        out.push_back({{"role", role}, {"content", content}});
        return;
    }
    if (!content.is_array()) throw bad(field + ".content", "expected a string or an array");
    std::string body, thinking;
    Json calls = Json::array();
    bool hasResults = false;
    for (std::size_t i = 0; i < content.size(); ++i) {
        const std::string at = field + ".content[" + std::to_string(i) + "]";
        const Json& b = content[i];
        if (!b.is_object()) throw bad(at, "expected an object");
        const std::string type = text(need(b, "type", at), at + ".type");
        if (type == "text") {
            body += text(need(b, "text", at), at + ".text");
        } else if (type == "thinking" && role == "assistant") {
            thinking += text(need(b, "thinking", at), at + ".thinking");
        } else if (type == "redacted_thinking" && role == "assistant") {
            // Another model's encrypted reasoning: nothing this one can read.
        } else if (type == "tool_use" && role == "assistant") {
            const Json& input = need(b, "input", at);
            if (!input.is_object()) throw bad(at + ".input", "expected an object");
            calls.push_back({{"id", text(need(b, "id", at), at + ".id")},
                             {"type", "function"},
                             {"function",
                              {{"name", text(need(b, "name", at), at + ".name")},
                               {"arguments", input.dump()}}}});
        } else if (type == "tool_result" && role == "user") {
            const std::string id = text(need(b, "tool_use_id", at), at + ".tool_use_id");
            std::string result = b.contains("content") ? partsText(b["content"], at + ".content",
                                                                   "text blocks", {"text"})
                                                       : "";
            if (b.contains("is_error") && b["is_error"] == true) result = "Error: " + result;
            hasResults = true;
            out.push_back({{"role", "tool"}, {"tool_call_id", id}, {"content", result}});
        } else {
            throw bad(at + ".type", "\"" + type + "\" is not supported in a " + role +
                                        " message (text, thinking, tool_use, tool_result)");
        }
    }
    if (role == "user") {
        // A turn of tool results only is no user message (an empty one would be rendered).
        if (!body.empty() || !hasResults) out.push_back({{"role", "user"}, {"content", body}});
        return;
    }
    Json a = {{"role", "assistant"}, {"content", body}};
    if (!thinking.empty()) a["reasoning_content"] = thinking;
    if (!calls.empty()) a["tool_calls"] = calls;
    out.push_back(std::move(a));
}

Json readTools(const Json& tools) {
    if (!tools.is_array()) throw bad("tools", "expected an array");
    Json out = Json::array();
    for (std::size_t i = 0; i < tools.size(); ++i) {
        const std::string at = "tools[" + std::to_string(i) + "]";
        const Json& t = tools[i];
        if (!t.is_object()) throw bad(at, "expected an object");
        if (t.contains("type") && t["type"] != "custom")
            throw bad(at + ".type", "only client tools (custom, with input_schema) are supported");
        Json fn = {{"name", text(need(t, "name", at), at + ".name")}};
        if (t.contains("description"))
            fn["description"] = text(t["description"], at + ".description");
        const Json& schema = need(t, "input_schema", at);
        if (!schema.is_object()) throw bad(at + ".input_schema", "expected an object");
        fn["parameters"] = schema;
        out.push_back({{"type", "function"}, {"function", fn}});
    }
    return out;
}

Json readToolChoice(const Json& c) {
    if (!c.is_object()) throw bad("tool_choice", "expected an object");
    const std::string type = text(need(c, "type", "tool_choice"), "tool_choice.type");
    if (type == "auto" || type == "none") return type;
    if (type == "any") return "required";
    if (type == "tool")
        return {{"type", "function"},
                {"function", {{"name", text(need(c, "name", "tool_choice"), "tool_choice.name")}}}};
    throw bad("tool_choice.type", "\"" + type + "\" is not auto, any, tool or none");
}

// A field of a chat error named as the Messages request names it.
std::string anthropicField(const std::string& chatField) {
    if (chatField == "stop") return "stop_sequences";
    if (chatField.starts_with("tools[") &&
        chatField.find(".function.parameters") != std::string::npos) {
        std::string f = chatField;
        f.replace(f.find(".function.parameters"), 20, ".input_schema");
        return f;
    }
    if (chatField.starts_with("tool_choice.function.name")) return "tool_choice.name";
    return chatField;
}

} // namespace

// Over 80 lines: the one place the Messages fields are read, each named in its refusal.
std::string Server::messagesToChat(const std::string& body, bool& stream) {
    Json doc = objectBody(body);
    static const char* known[] = {"model",          "messages",    "system",   "max_tokens",
                                  "stop_sequences", "temperature", "top_p",    "top_k",
                                  "tools",          "tool_choice", "thinking", "stream",
                                  "metadata",       "service_tier"};
    for (const auto& [key, value] : doc.items())
        if (std::find(std::begin(known), std::end(known), key) == std::end(known))
            throw bad(key, "not a Messages API field this server knows");
    Json chat = Json::object();
    if (doc.contains("model")) chat["model"] = text(doc["model"], "model");
    if (!doc.contains("max_tokens")) throw bad("max_tokens", "required");
    chat["max_tokens"] = doc["max_tokens"];
    Json messages = Json::array();
    if (doc.contains("system"))
        messages.push_back(
            {{"role", "system"},
             {"content", partsText(doc["system"], "system", "text blocks", {"text"})}});
    const Json& in = need(doc, "messages", "body");
    if (!in.is_array() || in.empty()) throw bad("messages", "expected a non-empty array");
    for (std::size_t i = 0; i < in.size(); ++i)
        readMessage(in[i], "messages[" + std::to_string(i) + "]", messages);
    chat["messages"] = std::move(messages);
    if (doc.contains("stop_sequences")) {
        const Json& s = doc["stop_sequences"];
        if (!s.is_array()) throw bad("stop_sequences", "expected an array of strings");
        if (s.size() > 4) throw bad("stop_sequences", "at most 4 sequences");
        if (!s.empty()) chat["stop"] = s;
    }
    if (doc.contains("temperature")) {
        const Json& t = doc["temperature"];
        if (!t.is_number() || t.get<double>() < 0 || t.get<double>() > 1)
            throw bad("temperature", "expected a number 0..1");
        chat["temperature"] = t;
    }
    if (doc.contains("top_p")) chat["top_p"] = doc["top_p"];
    if (doc.contains("top_k"))
        throw bad("top_k", "not supported: the sampler has temperature and top_p only");
    if (doc.contains("tools")) chat["tools"] = readTools(doc["tools"]);
    if (doc.contains("tool_choice")) {
        const Json& c = doc["tool_choice"];
        chat["tool_choice"] = readToolChoice(c);
        // disable_parallel_tool_use is not enforced: a required call is one call anyway.
    }
    // Anthropic's default is no extended thinking; budget_tokens has no counterpart in
    // the template (its efforts are levels), so it is not used.
    bool thinking = false;
    if (doc.contains("thinking")) {
        const Json& t = doc["thinking"];
        if (!t.is_object()) throw bad("thinking", "expected an object");
        const std::string type = text(need(t, "type", "thinking"), "thinking.type");
        if (type != "enabled" && type != "disabled")
            throw bad("thinking.type", "\"" + type + "\" is not enabled or disabled");
        thinking = type == "enabled";
    }
    chat["thinking"] = {{"type", thinking ? "enabled" : "disabled"}};
    if (doc.contains("stream")) {
        if (!doc["stream"].is_boolean()) throw bad("stream", "expected a boolean");
        stream = doc["stream"].get<bool>();
    }
    return dump(chat);
}

std::string anthropicErrorJson(const k3::api::ApiError& e) {
    std::string type = e.type();
    if (type == "server_error") type = e.status() == 503 ? "overloaded_error" : "api_error";
    if (e.status() == 404) type = "not_found_error";
    return dump({{"type", "error"}, {"error", {{"type", type}, {"message", e.what()}}}});
}

// Over 80 lines: the request, then the answer's parts (Generation's fields).
void Server::messages(const httplib::Request& req, httplib::Response& res) {
    namespace api = k3::api;
    const auto errorBody = [](const api::ApiError& e) { return anthropicErrorJson(e); };
    if (refusedBeforeParsing(req, res, errorBody)) return;
    api::ChatRequest request;
    k3::GenerateOptions options;
    bool stream = false;
    std::size_t promptTokens = 0;
    try {
        try {
            request = api::parseChatRequest(messagesToChat(req.body, stream));
        } catch (const api::ApiError& e) {
            if (e.param().empty()) throw;
            const std::string field = anthropicField(e.param());
            std::string message = e.what();
            if (message.starts_with(e.param())) message = field + message.substr(e.param().size());
            throw api::ApiError(e.status(), message, e.type(), field, e.code());
        }
        options = generateOptions(request);
        const k3::Tokenizer& tok = session_->tokenizer();
        promptTokens =
            k3::encodeChatSegments(tok, k3::renderChatSegments(request.messages, request.render))
                .size();
        checkPromptFits(promptTokens, "messages");
    } catch (const api::ApiError& e) {
        return sendError(res, e, errorBody);
    } catch (const k3::ChatError& e) {
        return sendError(res,
                         api::ApiError(400, std::string("messages: ") + e.what(),
                                       "invalid_request_error", "messages"),
                         errorBody);
    }
    const std::string id = newId("msg_");
    auto stopReason = [](const k3::GenerateResult& r, const ReplyObserver& o) -> std::string {
        if (!r.reply.toolCalls.empty()) return "tool_use";
        if (o.stoppedByString()) return "stop_sequence";
        return r.endOfTurn ? "end_turn" : "max_tokens";
    };
    auto stopSequence = [](const ReplyObserver& o) {
        return o.stoppedByString() ? Json(o.matchedStop()) : Json(nullptr);
    };
    auto usage = [](const k3::GenerateResult& r) {
        return Json{{"input_tokens", r.promptTokens - r.reusedPositions},
                    {"cache_creation_input_tokens", 0},
                    {"cache_read_input_tokens", r.reusedPositions},
                    {"output_tokens", r.ids.size()}};
    };
    auto toolUse = [id](const k3::ChatToolCall& call, std::size_t i) {
        Json input = Json::parse(k3::toolArgumentsJson(call), nullptr, false);
        if (input.is_string()) input = Json::parse(input.get<std::string>(), nullptr, false);
        if (!input.is_object()) input = Json::object();
        return Json{{"type", "tool_use"},
                    {"id", "toolu_" + std::to_string(i) + "_" + id.substr(4)},
                    {"name", call.name},
                    {"input", input}};
    };
    Generation g;
    g.stream = stream;
    g.stops = request.stop;
    g.errorBody = errorBody;
    g.run = [messages = request.messages, options](k3::Session& s, ReplyObserver& o,
                                                   const std::atomic<bool>* cancel) {
        return s.chat(messages, options, &o, cancel);
    };
    g.body = [this, id, stopReason, stopSequence, usage, toolUse](const k3::GenerateResult& r,
                                                                  const ReplyObserver& o) {
        Json content = Json::array();
        if (!r.reply.reasoningContent.empty())
            content.push_back(
                {{"type", "thinking"}, {"thinking", r.reply.reasoningContent}, {"signature", ""}});
        if (!o.content().empty()) content.push_back({{"type", "text"}, {"text", o.content()}});
        for (std::size_t i = 0; i < r.reply.toolCalls.size(); ++i)
            content.push_back(toolUse(r.reply.toolCalls[i], i));
        return dump({{"id", id},
                     {"type", "message"},
                     {"role", "assistant"},
                     {"content", content},
                     {"model", modelId_},
                     {"stop_reason", stopReason(r, o)},
                     {"stop_sequence", stopSequence(o)},
                     {"usage", usage(r)}});
    };
    // Streamed: one open block at a time; a change of channel closes it and opens the next.
    struct StreamState {
        int index = -1;
        std::string open; // "thinking", "text" or ""
        std::string heldThinking, heldText;
    };
    auto st = std::make_shared<StreamState>();
    auto event = [](const char* name, const Json& data) {
        return std::string("event: ") + name + "\ndata: " + dump(data) + "\n\n";
    };
    auto block = [st, event](const std::string& kind, const std::string& piece) {
        std::string out;
        if (piece.empty()) return out;
        if (st->open != kind) {
            if (!st->open.empty())
                out += event("content_block_stop",
                             {{"type", "content_block_stop"}, {"index", st->index}});
            st->open = kind;
            ++st->index;
            out += event("content_block_start",
                         {{"type", "content_block_start"},
                          {"index", st->index},
                          {"content_block",
                           kind == "text"
                               ? Json{{"type", "text"}, {"text", ""}}
                               : Json{{"type", "thinking"}, {"thinking", ""}, {"signature", ""}}}});
        }
        const bool isText = kind == "text";
        return out +
               event("content_block_delta", {{"type", "content_block_delta"},
                                             {"index", st->index},
                                             {"delta",
                                              {{"type", isText ? "text_delta" : "thinking_delta"},
                                               {isText ? "text" : "thinking", piece}}}});
    };
    g.start = [this, id, event, promptTokens] {
        return event("message_start",
                     {{"type", "message_start"},
                      {"message",
                       {{"id", id},
                        {"type", "message"},
                        {"role", "assistant"},
                        {"content", Json::array()},
                        {"model", modelId_},
                        {"stop_reason", nullptr},
                        {"stop_sequence", nullptr},
                        {"usage", {{"input_tokens", promptTokens}, {"output_tokens", 0}}}}}}) +
               event("ping", {{"type", "ping"}});
    };
    g.delta = [st, block](const k3::TokenEvent*, const std::string& reasoning,
                          const std::string& content) {
        // Two statements: the thinking's events first (operands of + are unordered).
        std::string out = block("thinking", api::takeCompleteUtf8(st->heldThinking, reasoning));
        return out + block("text", api::takeCompleteUtf8(st->heldText, content));
    };
    g.finish = [st, block, event, stopReason, stopSequence, usage,
                toolUse](const k3::GenerateResult& r, const ReplyObserver& o) {
        std::string out = block("thinking", std::exchange(st->heldThinking, {}));
        out += block("text", std::exchange(st->heldText, {}));
        if (!st->open.empty())
            out +=
                event("content_block_stop", {{"type", "content_block_stop"}, {"index", st->index}});
        for (std::size_t i = 0; i < r.reply.toolCalls.size(); ++i) {
            Json use = toolUse(r.reply.toolCalls[i], i);
            const std::string args = use["input"].dump();
            use["input"] = Json::object();
            ++st->index;
            out += event(
                "content_block_start",
                {{"type", "content_block_start"}, {"index", st->index}, {"content_block", use}});
            out += event("content_block_delta",
                         {{"type", "content_block_delta"},
                          {"index", st->index},
                          {"delta", {{"type", "input_json_delta"}, {"partial_json", args}}}});
            out +=
                event("content_block_stop", {{"type", "content_block_stop"}, {"index", st->index}});
        }
        out += event(
            "message_delta",
            {{"type", "message_delta"},
             {"delta", {{"stop_reason", stopReason(r, o)}, {"stop_sequence", stopSequence(o)}}},
             {"usage", usage(r)}});
        return out + event("message_stop", {{"type", "message_stop"}});
    };
    g.errorEvent = [](const api::ApiError& e) {
        return "event: error\ndata: " + anthropicErrorJson(e) + "\n\n";
    };
    answer(req, res, std::move(g));
}

} // namespace k3cli::serve
