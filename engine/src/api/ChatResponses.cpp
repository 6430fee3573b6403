// chat.completion, chat.completion.chunk events, errors and the model list, with the
// keys in the order OpenAI writes them.
#include "k3/api.hpp"
#include "k3/remote.hpp"

#include <nlohmann/json.hpp>

namespace k3::api {

namespace {

using Json = nlohmann::ordered_json;

// Model text may hold malformed UTF-8 (a random model): U+FFFD rather than a throw.
std::string dump(const Json& v) {
    return v.dump(-1, ' ', false, Json::error_handler_t::replace);
}

Json orNull(const std::string& s) {
    return s.empty() ? Json(nullptr) : Json(s);
}

Json toolCallsJson(std::string_view completionId, const std::vector<ChatToolCall>& calls,
                   bool streamed) {
    Json list = Json::array();
    for (std::size_t i = 0; i < calls.size(); ++i) {
        Json c;
        if (streamed) c["index"] = i;
        c["id"] = toolCallId(completionId, i);
        c["type"] = "function";
        c["function"] = {{"name", calls[i].name}, {"arguments", toolArgumentsJson(calls[i])}};
        list.push_back(std::move(c));
    }
    return list;
}

Json usageJson(const Usage& u) {
    return {{"prompt_tokens", u.promptTokens},
            {"completion_tokens", u.completionTokens},
            {"total_tokens", u.promptTokens + u.completionTokens},
            {"prompt_tokens_details", {{"cached_tokens", u.cachedTokens}}}};
}

Json bytesJson(const std::string& text) {
    Json bytes = Json::array();
    for (const char c : text) bytes.push_back(int(static_cast<unsigned char>(c)));
    return bytes;
}

Json logprobJson(const TokenLogprob& lp) {
    Json top = Json::array();
    for (const auto& [token, logprob] : lp.top)
        top.push_back({{"token", token}, {"logprob", logprob}, {"bytes", bytesJson(token)}});
    return {{"token", lp.token},
            {"logprob", lp.logprob},
            {"bytes", bytesJson(lp.token)},
            {"top_logprobs", std::move(top)}};
}

} // namespace

std::string tokenLogprobJson(const TokenLogprob& lp) {
    return dump(logprobJson(lp));
}

std::string errorJson(const ApiError& error) {
    return dump({{"error",
                  {{"message", error.what()},
                   {"type", error.type()},
                   {"param", orNull(error.param())},
                   {"code", orNull(error.code())}}}});
}

std::string finishReason(const ChatMessage& reply, bool endOfTurn, bool stoppedByString) {
    if (!reply.toolCalls.empty()) return "tool_calls";
    return endOfTurn || stoppedByString ? "stop" : "length";
}

std::string toolCallId(std::string_view completionId, std::size_t index) {
    std::string_view suffix = completionId;
    if (suffix.starts_with("chatcmpl-")) suffix.remove_prefix(9);
    return "call_" + std::to_string(index) + "_" + std::string(suffix);
}

std::string completionJson(const Completion& c) {
    Json message = {{"role", "assistant"}};
    message["content"] = c.message.content.empty() && !c.message.toolCalls.empty()
                             ? Json(nullptr)
                             : Json(c.message.content);
    if (!c.message.reasoningContent.empty())
        message["reasoning_content"] = c.message.reasoningContent;
    if (!c.message.toolCalls.empty())
        message["tool_calls"] = toolCallsJson(c.id, c.message.toolCalls, false);
    Json logprobs = nullptr;
    if (c.logprobs) {
        logprobs = {{"content", Json::array()}, {"refusal", nullptr}};
        for (const TokenLogprob& lp : *c.logprobs) logprobs["content"].push_back(logprobJson(lp));
    }
    Json choice = {{"index", 0},
                   {"message", std::move(message)},
                   {"logprobs", std::move(logprobs)},
                   {"finish_reason", c.finishReason}};
    return dump({{"id", c.id},
                 {"object", "chat.completion"},
                 {"created", c.created},
                 {"model", c.model},
                 {"choices", Json::array({std::move(choice)})},
                 {"usage", usageJson(c.usage)}});
}

std::string takeCompleteUtf8(std::string& held, std::string_view text) {
    std::string all = std::move(held);
    held.clear();
    all += text;
    // Walk back over at most 3 continuation bytes to the last lead byte.
    std::size_t i = all.size();
    std::size_t back = 0;
    while (i > 0 && back < 3 && (static_cast<unsigned char>(all[i - 1]) & 0xC0) == 0x80) {
        --i;
        ++back;
    }
    if (i == 0) return all;
    const auto lead = static_cast<unsigned char>(all[i - 1]);
    const std::size_t need = (lead >> 5) == 0x6    ? 2
                             : (lead >> 4) == 0xE  ? 3
                             : (lead >> 3) == 0x1E ? 4
                                                   : 1;
    const std::size_t have = all.size() - (i - 1);
    if (need > 1 && have < need) { // a lead byte whose sequence has not arrived whole
        held = all.substr(i - 1);
        all.resize(i - 1);
    }
    return all;
}

ChunkWriter::ChunkWriter(std::string id, std::string model, std::int64_t created)
    : id_(std::move(id)), model_(std::move(model)), created_(created) {
    // The head every chunk shares, built once (a chunk per token).
    Json head = {
        {"id", id_}, {"object", "chat.completion.chunk"}, {"created", created_}, {"model", model_}};
    head_ = "data: " + dump(head);
    head_.back() = ','; // the closing brace: the choices follow
}

std::string ChunkWriter::chunk(const std::string& choicesAndUsage) {
    return head_ + choicesAndUsage + "}\n\n";
}

std::string ChunkWriter::start() {
    Json choice = {{"index", 0},
                   {"delta", {{"role", "assistant"}, {"content", ""}}},
                   {"logprobs", nullptr},
                   {"finish_reason", nullptr}};
    return chunk("\"choices\":" + dump(Json::array({choice})));
}

std::string ChunkWriter::delta(std::string_view reasoning, std::string_view content,
                               const TokenLogprob* logprobs) {
    const std::string r = takeCompleteUtf8(heldReasoning_, reasoning);
    const std::string c = takeCompleteUtf8(heldContent_, content);
    if (r.empty() && c.empty() && !logprobs) return {};
    Json d = Json::object();
    if (!r.empty()) d["reasoning_content"] = r;
    if (!c.empty()) d["content"] = c;
    Json lp = nullptr;
    if (logprobs) lp = {{"content", Json::array({logprobJson(*logprobs)})}, {"refusal", nullptr}};
    Json choice = {
        {"index", 0}, {"delta", d}, {"logprobs", std::move(lp)}, {"finish_reason", nullptr}};
    return chunk("\"choices\":" + dump(Json::array({choice})));
}

std::string ChunkWriter::finish(const std::vector<ChatToolCall>& calls, std::string_view reason) {
    std::string out;
    // Bytes that never completed go out as they are (dump() shows them as U+FFFD).
    Json d = Json::object();
    if (!heldReasoning_.empty()) d["reasoning_content"] = std::exchange(heldReasoning_, {});
    if (!heldContent_.empty()) d["content"] = std::exchange(heldContent_, {});
    if (!calls.empty()) d["tool_calls"] = toolCallsJson(id_, calls, true);
    if (!d.empty()) {
        Json choice = {
            {"index", 0}, {"delta", d}, {"logprobs", nullptr}, {"finish_reason", nullptr}};
        out += chunk("\"choices\":" + dump(Json::array({choice})));
    }
    Json choice = {{"index", 0},
                   {"delta", Json::object()},
                   {"logprobs", nullptr},
                   {"finish_reason", std::string(reason)}};
    out += chunk("\"choices\":" + dump(Json::array({choice})));
    return out;
}

std::string ChunkWriter::usage(const Usage& u) {
    return chunk("\"choices\":[],\"usage\":" + dump(usageJson(u)));
}

StopFilter::StopFilter(std::vector<std::string> stops) : stops_(std::move(stops)) {}

std::string StopFilter::feed(std::string_view text) {
    if (stopped_) return {};
    held_ += text;
    std::size_t first = std::string::npos;
    for (const std::string& s : stops_) first = std::min(first, held_.find(s));
    if (first != std::string::npos) {
        stopped_ = true;
        std::string out = held_.substr(0, first);
        held_.clear();
        return out;
    }
    // Hold back the longest tail that is a proper prefix of some stop string.
    std::size_t keep = 0;
    for (const std::string& s : stops_)
        for (std::size_t n = std::min(s.size() - 1, held_.size()); n > keep; --n)
            if (held_.compare(held_.size() - n, n, s, 0, n) == 0) {
                keep = n;
                break;
            }
    std::string out = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
}

std::string StopFilter::flush() {
    return std::exchange(held_, {});
}

std::string modelsJson(std::string_view id, std::int64_t created) {
    Json model = {
        {"id", std::string(id)}, {"object", "model"}, {"created", created}, {"owned_by", "k3"}};
    return dump({{"object", "list"}, {"data", Json::array({model})}});
}

} // namespace k3::api
