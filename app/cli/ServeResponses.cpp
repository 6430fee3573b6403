// POST /v1/responses: the OpenAI Responses API. As for the Messages API, the request is
// read into the chat completions request it means (template, constraints and checks are
// the chat route's); the answer is a response object with reasoning, message and
// function_call output items, streamed as the API's typed events.
#include "ServeJson.hpp"
#include "ServeServer.hpp"

#include <k3/remote.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <ctime>

namespace k3cli::serve {

namespace {

using namespace json; // Json, dump, bad, need, text, objectBody, partsText

// The input items as chat messages: function_call items join the assistant message
// before them (or make one), a reasoning item gives the next assistant message its
// reasoning, function_call_output items become tool messages.
Json readInput(const Json& input) {
    Json out = Json::array();
    if (input.is_string()) {
        out.push_back({{"role", "user"}, {"content", input}});
        return out;
    }
    if (!input.is_array() || input.empty())
        throw bad("input", "expected a string or a non-empty array of items");
    std::string reasoning;
    auto assistant = [&]() -> Json& {
        if (out.empty() || out.back()["role"] != "assistant" || !reasoning.empty()) {
            Json a = {{"role", "assistant"}, {"content", ""}};
            if (!reasoning.empty()) a["reasoning_content"] = std::exchange(reasoning, {});
            out.push_back(std::move(a));
        }
        return out.back();
    };
    for (std::size_t i = 0; i < input.size(); ++i) {
        const std::string at = "input[" + std::to_string(i) + "]";
        const Json& item = input[i];
        if (!item.is_object()) throw bad(at, "expected an object");
        const std::string type =
            item.contains("type") ? text(item["type"], at + ".type") : std::string("message");
        if (type == "message") {
            const std::string role = text(need(item, "role", at), at + ".role");
            if (role != "user" && role != "system" && role != "developer" && role != "assistant")
                throw bad(at + ".role",
                          "\"" + role + "\" is not user, system, developer or assistant");
            const std::string content = partsText(need(item, "content", at), at + ".content",
                                                  "content parts", {"input_text", "output_text"});
            if (role == "assistant") {
                Json& a = assistant();
                if (a.contains("tool_calls")) {
                    out.push_back({{"role", "assistant"}, {"content", content}});
                } else {
                    a["content"] = a["content"].get<std::string>() + content;
                }
            } else {
                out.push_back({{"role", role}, {"content", content}});
            }
        } else if (type == "reasoning") {
            if (item.contains("content") && item["content"].is_array())
                for (std::size_t j = 0; j < item["content"].size(); ++j)
                    reasoning += text(need(item["content"][j], "text",
                                           at + ".content[" + std::to_string(j) + "]"),
                                      at + ".content[" + std::to_string(j) + "].text");
            else if (item.contains("summary") && item["summary"].is_array())
                for (std::size_t j = 0; j < item["summary"].size(); ++j)
                    reasoning += text(need(item["summary"][j], "text",
                                           at + ".summary[" + std::to_string(j) + "]"),
                                      at + ".summary[" + std::to_string(j) + "].text");
        } else if (type == "function_call") {
            Json& a = assistant();
            a["tool_calls"].push_back(
                {{"id", text(need(item, "call_id", at), at + ".call_id")},
                 {"type", "function"},
                 {"function",
                  {{"name", text(need(item, "name", at), at + ".name")},
                   {"arguments", text(need(item, "arguments", at), at + ".arguments")}}}});
        } else if (type == "function_call_output") {
            const Json& output = need(item, "output", at);
            out.push_back(
                {{"role", "tool"},
                 {"tool_call_id", text(need(item, "call_id", at), at + ".call_id")},
                 {"content", output.is_string() ? output.get<std::string>()
                                                : partsText(output, at + ".output", "content parts",
                                                            {"input_text", "output_text"})}});
        } else {
            throw bad(at + ".type", "\"" + type +
                                        "\" is not supported (message, reasoning, "
                                        "function_call, function_call_output)");
        }
    }
    return out;
}

Json readTools(const Json& tools) {
    if (!tools.is_array()) throw bad("tools", "expected an array");
    Json out = Json::array();
    for (std::size_t i = 0; i < tools.size(); ++i) {
        const std::string at = "tools[" + std::to_string(i) + "]";
        const Json& t = tools[i];
        if (!t.is_object()) throw bad(at, "expected an object");
        const std::string type = text(need(t, "type", at), at + ".type");
        if (type != "function")
            throw bad(at + ".type", "\"" + type + "\" is not supported (function tools only)");
        Json fn = {{"name", text(need(t, "name", at), at + ".name")}};
        if (t.contains("description") && !t["description"].is_null())
            fn["description"] = text(t["description"], at + ".description");
        if (t.contains("parameters") && !t["parameters"].is_null())
            fn["parameters"] = t["parameters"];
        out.push_back({{"type", "function"}, {"function", fn}});
    }
    return out;
}

Json readToolChoice(const Json& c) {
    if (c.is_string()) return c; // none, auto, required: the chat parser checks
    if (!c.is_object()) throw bad("tool_choice", "expected a string or an object");
    const std::string type = text(need(c, "type", "tool_choice"), "tool_choice.type");
    if (type != "function")
        throw bad("tool_choice.type", "\"" + type + "\" is not supported (function only)");
    return {{"type", "function"},
            {"function", {{"name", text(need(c, "name", "tool_choice"), "tool_choice.name")}}}};
}

Json readTextFormat(const Json& t) {
    if (!t.is_object()) throw bad("text", "expected an object");
    if (t.contains("verbosity") && !t["verbosity"].is_null())
        throw bad("text.verbosity", "not supported");
    if (!t.contains("format") || t["format"].is_null()) return nullptr;
    const Json& f = t["format"];
    if (!f.is_object()) throw bad("text.format", "expected an object");
    const std::string type = text(need(f, "type", "text.format"), "text.format.type");
    if (type != "json_schema") return {{"type", type}};
    Json js = {{"name", f.value("name", "answer")}, {"schema", need(f, "schema", "text.format")}};
    if (f.contains("strict")) js["strict"] = f["strict"];
    return {{"type", "json_schema"}, {"json_schema", js}};
}

// A field of a chat error named as the Responses request names it.
std::string responsesField(const std::string& chatField) {
    auto swap = [&](const std::string& from, const std::string& to) -> std::optional<std::string> {
        if (!chatField.starts_with(from)) return std::nullopt;
        return to + chatField.substr(from.size());
    };
    if (auto f = swap("response_format.json_schema", "text.format")) return *f;
    if (auto f = swap("response_format", "text.format")) return *f;
    if (auto f = swap("max_tokens", "max_output_tokens")) return *f;
    if (auto f = swap("reasoning_effort", "reasoning.effort")) return *f;
    if (auto f = swap("tool_choice.function.name", "tool_choice.name")) return *f;
    if (chatField.starts_with("tools[")) {
        std::string f = chatField;
        const auto at = f.find(".function.");
        if (at != std::string::npos) f.replace(at, 10, ".");
        return f;
    }
    if (chatField.starts_with("messages")) return "input";
    return chatField;
}

} // namespace

// Over 80 lines: the one place the Responses fields are read, each named in its refusal.
std::string Server::responsesToChat(const std::string& body, bool& stream) {
    Json doc = objectBody(body);
    // Accepted and not used: nothing is stored (store, metadata, user), and one call at a
    // time is what the template's tool channel holds anyway (parallel_tool_calls).
    static const char* known[] = {"model",
                                  "input",
                                  "instructions",
                                  "max_output_tokens",
                                  "temperature",
                                  "top_p",
                                  "tools",
                                  "tool_choice",
                                  "text",
                                  "reasoning",
                                  "stream",
                                  "store",
                                  "metadata",
                                  "user",
                                  "parallel_tool_calls",
                                  "truncation",
                                  "seed",
                                  "top_logprobs",
                                  "include"};
    for (const auto& [key, value] : doc.items())
        if (std::find(std::begin(known), std::end(known), key) == std::end(known))
            throw bad(key, key == "previous_response_id"
                               ? "not supported: responses are not stored; send the whole input"
                               : "not a Responses API field this server knows");
    if (doc.contains("truncation") && doc["truncation"] != "disabled" &&
        !doc["truncation"].is_null())
        throw bad("truncation", "only \"disabled\" is supported (an over-long input is a 400)");
    Json chat = Json::object();
    if (doc.contains("model")) chat["model"] = text(doc["model"], "model");
    Json messages = Json::array();
    if (doc.contains("instructions") && !doc["instructions"].is_null())
        messages.push_back(
            {{"role", "system"}, {"content", text(doc["instructions"], "instructions")}});
    for (Json& m : readInput(need(doc, "input", "body"))) messages.push_back(std::move(m));
    chat["messages"] = std::move(messages);
    if (doc.contains("max_output_tokens") && !doc["max_output_tokens"].is_null())
        chat["max_tokens"] = doc["max_output_tokens"];
    // seed is k3's own (the API has none): sampled answers repeat with the same seed.
    for (const char* key : {"temperature", "top_p", "seed"})
        if (doc.contains(key)) chat[key] = doc[key];
    if (doc.contains("tools")) chat["tools"] = readTools(doc["tools"]);
    if (doc.contains("tool_choice")) chat["tool_choice"] = readToolChoice(doc["tool_choice"]);
    if (doc.contains("text")) {
        const Json format = readTextFormat(doc["text"]);
        if (!format.is_null()) chat["response_format"] = format;
    }
    if (doc.contains("reasoning") && !doc["reasoning"].is_null()) {
        const Json& r = doc["reasoning"];
        if (!r.is_object()) throw bad("reasoning", "expected an object");
        // summary is not produced: the whole reasoning is given (reasoning_text parts).
        if (r.contains("effort") && !r["effort"].is_null()) chat["reasoning_effort"] = r["effort"];
    }
    // Log-probabilities of the output text: asked for with include
    // ["message.output_text.logprobs"], or by asking for alternatives (top_logprobs).
    bool logprobs = doc.contains("top_logprobs") && !doc["top_logprobs"].is_null();
    if (doc.contains("include") && !doc["include"].is_null()) {
        const Json& include = doc["include"];
        if (!include.is_array()) throw bad("include", "expected an array of strings");
        for (std::size_t i = 0; i < include.size(); ++i) {
            const std::string at = "include[" + std::to_string(i) + "]";
            const std::string what = text(include[i], at);
            if (what != "message.output_text.logprobs")
                throw bad(at,
                          "\"" + what + "\" is not supported (message.output_text.logprobs only)");
            logprobs = true;
        }
    }
    if (logprobs) {
        chat["logprobs"] = true;
        chat["top_logprobs"] = doc.contains("top_logprobs") && !doc["top_logprobs"].is_null()
                                   ? doc["top_logprobs"]
                                   : Json(0);
    }
    if (doc.contains("stream")) {
        if (!doc["stream"].is_boolean()) throw bad("stream", "expected a boolean");
        stream = doc["stream"].get<bool>();
    }
    return dump(chat);
}

// Over 80 lines: the request, then the answer's parts (Generation's fields).
void Server::responses(const httplib::Request& req, httplib::Response& res) {
    namespace api = k3::api;
    if (refusedBeforeParsing(req, res)) return;
    api::ChatRequest request;
    k3::GenerateOptions options;
    bool stream = false;
    try {
        try {
            request = api::parseChatRequest(responsesToChat(req.body, stream));
        } catch (const api::ApiError& e) {
            if (e.param().empty()) throw;
            const std::string field = responsesField(e.param());
            std::string message = e.what();
            if (message.starts_with(e.param())) message = field + message.substr(e.param().size());
            throw api::ApiError(e.status(), message, e.type(), field, e.code());
        }
        options = generateOptions(request);
        const k3::Tokenizer& tok = session_->tokenizer();
        checkPromptFits(
            k3::encodeChatSegments(tok, k3::renderChatSegments(request.messages, request.render))
                .size(),
            "input");
    } catch (const api::ApiError& e) {
        return sendError(res, e);
    } catch (const k3::ChatError& e) {
        return sendError(res, api::ApiError(400, std::string("input: ") + e.what(),
                                            "invalid_request_error", "input"));
    }
    const std::string id = newId("resp_");
    const std::string suffix = id.substr(5);
    const std::int64_t created = std::time(nullptr);
    // The parts of the response object that do not depend on the answer.
    Json base = {{"id", id},
                 {"object", "response"},
                 {"created_at", created},
                 {"status", "in_progress"},
                 {"error", nullptr},
                 {"incomplete_details", nullptr},
                 {"model", modelId_},
                 {"output", Json::array()},
                 {"parallel_tool_calls", false},
                 {"tool_choice", "auto"},
                 {"tools", Json::array()}};
    {
        const Json doc = Json::parse(req.body, nullptr, false);
        for (const char* key :
             {"instructions", "max_output_tokens", "temperature", "top_p", "tool_choice", "tools",
              "text", "reasoning", "metadata", "top_logprobs"})
            if (doc.contains(key)) base[key] = doc[key];
    }
    const bool withLogprobs = request.topLogprobs >= 0;
    struct Item {
        std::string kind; // "reasoning" or "message"
        std::string text;
        Json logprobs = Json::array(); // a message's tokens, when asked for
    };
    auto itemJson = [suffix, withLogprobs](const Item& item, std::size_t index, bool done) {
        const std::string n = std::to_string(index);
        if (item.kind == "reasoning")
            return Json{
                {"id", "rs_" + n + "_" + suffix},
                {"type", "reasoning"},
                {"summary", Json::array()},
                {"content", done ? Json::array({{{"type", "reasoning_text"}, {"text", item.text}}})
                                 : Json::array()},
                {"status", done ? "completed" : "in_progress"}};
        Json part = {{"type", "output_text"}, {"text", item.text}, {"annotations", Json::array()}};
        if (withLogprobs) part["logprobs"] = item.logprobs;
        return Json{{"id", "msg_" + n + "_" + suffix},
                    {"type", "message"},
                    {"role", "assistant"},
                    {"status", done ? "completed" : "in_progress"},
                    {"content", done ? Json::array({std::move(part)}) : Json::array()}};
    };
    auto callJson = [suffix](const k3::ChatToolCall& call, std::size_t index, bool done) {
        const std::string n = std::to_string(index);
        return Json{{"id", "fc_" + n + "_" + suffix},
                    {"type", "function_call"},
                    {"status", done ? "completed" : "in_progress"},
                    {"call_id", "call_" + n + "_" + suffix},
                    {"name", call.name},
                    {"arguments", done ? k3::toolArgumentsJson(call) : std::string()}};
    };
    // The finished response: its items, then the calls, status and usage.
    auto finished = [base, itemJson, callJson](const std::vector<Item>& items,
                                               const k3::GenerateResult& r,
                                               const ReplyObserver& o) {
        Json out = base;
        for (std::size_t i = 0; i < items.size(); ++i)
            out["output"].push_back(itemJson(items[i], i, true));
        for (std::size_t i = 0; i < r.reply.toolCalls.size(); ++i)
            out["output"].push_back(callJson(r.reply.toolCalls[i], items.size() + i, true));
        const bool complete = r.endOfTurn || o.stoppedByString() || !r.reply.toolCalls.empty();
        out["status"] = complete ? "completed" : "incomplete";
        if (!complete) out["incomplete_details"] = {{"reason", "max_output_tokens"}};
        const int output = int(r.ids.size());
        out["usage"] = {{"input_tokens", r.promptTokens},
                        {"input_tokens_details", {{"cached_tokens", r.reusedPositions}}},
                        {"output_tokens", output},
                        {"output_tokens_details", {{"reasoning_tokens", o.thinkingTokens()}}},
                        {"total_tokens", r.promptTokens + output}};
        return out;
    };
    Generation g;
    g.stream = stream;
    g.stops = request.stop;
    g.run = [messages = request.messages, options](k3::Session& s, ReplyObserver& o,
                                                   const std::atomic<bool>* cancel) {
        return s.chat(messages, options, &o, cancel);
    };
    auto logprobJson = [this](k3::TokenId id, const k3::TokenLogprobs& lp) {
        return Json::parse(api::tokenLogprobJson(tokenLogprob(id, lp)));
    };
    g.body = [finished, logprobJson](const k3::GenerateResult& r, const ReplyObserver& o) {
        std::vector<Item> items;
        if (!r.reply.reasoningContent.empty())
            items.push_back({"reasoning", r.reply.reasoningContent});
        if (!o.content().empty()) {
            items.push_back({"message", o.content()});
            for (const auto& [id, lp] : o.answerLogprobs())
                items.back().logprobs.push_back(logprobJson(id, lp));
        }
        return dump(finished(items, r, o));
    };
    // Streamed: one open item at a time; a change of channel closes it and opens the next.
    struct StreamState {
        std::vector<Item> items;
        bool open = false;
        int sequence = 0;
        std::string heldReasoning, heldText;
        Json heldLogprobs = Json::array(); // the answer's tokens not yet in a delta
    };
    auto st = std::make_shared<StreamState>();
    auto event = [st](const char* type, Json data) {
        Json e = {{"type", type}, {"sequence_number", st->sequence++}};
        e.update(data);
        return std::string("event: ") + type + "\ndata: " + dump(e) + "\n\n";
    };
    auto closeItem = [st, event, itemJson]() {
        std::string out;
        if (!st->open) return out;
        st->open = false;
        const std::size_t index = st->items.size() - 1;
        const Item& item = st->items.back();
        const Json done = itemJson(item, index, true);
        const Json where = {{"item_id", done["id"]}, {"output_index", index}, {"content_index", 0}};
        if (item.kind == "reasoning") {
            Json e = where;
            e["text"] = item.text;
            out += event("response.reasoning_text.done", e);
        } else {
            Json e = where;
            e["text"] = item.text;
            if (done["content"][0].contains("logprobs")) e["logprobs"] = item.logprobs;
            out += event("response.output_text.done", e);
            e = where;
            e["part"] = done["content"][0];
            out += event("response.content_part.done", e);
        }
        return out + event("response.output_item.done", {{"output_index", index}, {"item", done}});
    };
    auto piece = [st, event, itemJson, closeItem, withLogprobs](const std::string& kind,
                                                                const std::string& delta) {
        std::string out;
        if (delta.empty()) return out;
        if (!st->open || st->items.back().kind != kind) {
            out += closeItem();
            st->items.push_back({kind, ""});
            st->open = true;
            const std::size_t index = st->items.size() - 1;
            const Json item = itemJson(st->items.back(), index, false);
            out += event("response.output_item.added", {{"output_index", index}, {"item", item}});
            if (kind == "message")
                out += event(
                    "response.content_part.added",
                    {{"item_id", item["id"]},
                     {"output_index", index},
                     {"content_index", 0},
                     {"part",
                      {{"type", "output_text"}, {"text", ""}, {"annotations", Json::array()}}}});
        }
        st->items.back().text += delta;
        const std::size_t index = st->items.size() - 1;
        Json e = {{"item_id", itemJson(st->items.back(), index, false)["id"]},
                  {"output_index", index},
                  {"content_index", 0},
                  {"delta", delta}};
        if (kind == "message" && withLogprobs) {
            // The tokens whose text this delta completes (a character split over tokens
            // waits for its last one).
            for (Json& lp : st->heldLogprobs) st->items.back().logprobs.push_back(lp);
            e["logprobs"] = std::exchange(st->heldLogprobs, Json::array());
        }
        return out + event(kind == "reasoning" ? "response.reasoning_text.delta"
                                               : "response.output_text.delta",
                           std::move(e));
    };
    g.start = [event, base] {
        std::string out = event("response.created", {{"response", base}});
        return out + event("response.in_progress", {{"response", base}}); // numbered in order
    };
    g.delta = [st, piece, logprobJson](const k3::TokenEvent* ev, const std::string& reasoning,
                                       const std::string& content) {
        // As ReplyObserver::answerLogprobs counts them: the tokens of the answer's text.
        if (ev && ev->logprobs && !ev->responseDelta.empty())
            st->heldLogprobs.push_back(logprobJson(ev->id, *ev->logprobs));
        // Two statements: the reasoning's events first (operands of + are unordered).
        std::string out = piece("reasoning", api::takeCompleteUtf8(st->heldReasoning, reasoning));
        return out + piece("message", api::takeCompleteUtf8(st->heldText, content));
    };
    g.finish = [st, piece, closeItem, event, callJson, finished](const k3::GenerateResult& r,
                                                                 const ReplyObserver& o) {
        std::string out = piece("reasoning", std::exchange(st->heldReasoning, {}));
        out += piece("message", std::exchange(st->heldText, {}));
        // Tokens whose text a stop string cut: in the response, as when not streamed.
        if (st->open && st->items.back().kind == "message")
            for (Json& lp : std::exchange(st->heldLogprobs, Json::array()))
                st->items.back().logprobs.push_back(std::move(lp));
        out += closeItem();
        for (std::size_t i = 0; i < r.reply.toolCalls.size(); ++i) {
            const std::size_t index = st->items.size() + i;
            const Json done = callJson(r.reply.toolCalls[i], index, true);
            out += event(
                "response.output_item.added",
                {{"output_index", index}, {"item", callJson(r.reply.toolCalls[i], index, false)}});
            out += event(
                "response.function_call_arguments.delta",
                {{"item_id", done["id"]}, {"output_index", index}, {"delta", done["arguments"]}});
            out +=
                event("response.function_call_arguments.done", {{"item_id", done["id"]},
                                                                {"output_index", index},
                                                                {"arguments", done["arguments"]}});
            out += event("response.output_item.done", {{"output_index", index}, {"item", done}});
        }
        const Json response = finished(st->items, r, o);
        return out + event(response["status"] == "completed" ? "response.completed"
                                                             : "response.incomplete",
                           {{"response", response}});
    };
    g.errorEvent = [event](const api::ApiError& e) {
        return event("error", {{"code", e.code().empty() ? Json(nullptr) : Json(e.code())},
                               {"message", e.what()},
                               {"param", e.param().empty() ? Json(nullptr) : Json(e.param())}});
    };
    answer(req, res, std::move(g));
}

} // namespace k3cli::serve
