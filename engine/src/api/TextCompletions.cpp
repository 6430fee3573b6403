// POST /v1/completions: the request's fields and the text_completion object.
#include "api/RequestFields.hpp"
#include "k3/api.hpp"

namespace k3::api {

using namespace detail;

namespace {

void prompt(const Json& v, CompletionRequest& r) {
    if (v.is_string()) {
        r.prompt = v.get<std::string>();
    } else if (v.is_array() && v.size() == 1 && v[0].is_string()) {
        r.prompt = v[0].get<std::string>();
    } else if (v.is_array() && !v.empty() && v[0].is_number()) {
        for (std::size_t i = 0; i < v.size(); ++i) {
            if (!v[i].is_number_integer() || v[i].get<std::int64_t>() < 0 ||
                v[i].get<std::int64_t>() > 0x7fffffff)
                throw bad("prompt[" + std::to_string(i) + "]", "not a token id");
            r.promptIds.push_back(TokenId(v[i].get<std::int64_t>()));
        }
    } else {
        throw bad("prompt", "a string, or an array of token ids (one prompt per request)");
    }
    if (r.prompt.empty() && r.promptIds.empty()) throw bad("prompt", "empty");
}

void refuseUnsupported(const Json& doc) {
    if (has(doc, "echo") && (!doc["echo"].is_boolean() || doc["echo"].get<bool>()))
        throw bad("echo", "not supported (only false)");
    if (has(doc, "suffix")) throw bad("suffix", "not supported (insertion is not offered)");
    for (const char* key : {"n", "best_of"})
        if (has(doc, key) && (!doc[key].is_number_integer() || doc[key].get<std::int64_t>() != 1))
            throw bad(key, "only 1 is supported");
}

} // namespace

// long: one line or two per field, in the order OpenAI documents them.
CompletionRequest parseCompletionRequest(std::string_view body) {
    Json doc = parseBody(body);
    CompletionRequest r;
    if (has(doc, "model")) r.model = stringField(doc["model"], "model");
    if (!has(doc, "prompt")) throw bad("prompt", "required");
    prompt(doc["prompt"], r);
    refuseUnsupported(doc);
    if (has(doc, "max_tokens")) r.maxTokens = positiveInt(doc["max_tokens"], "max_tokens");
    samplingFields(doc, r);
    if (has(doc, "stop")) stopSequences(doc["stop"], r.stop);
    if (has(doc, "logprobs")) {
        const Json& l = doc["logprobs"];
        if (!l.is_number_integer() || l.get<std::int64_t>() < 0 || l.get<std::int64_t>() > 20)
            throw bad("logprobs", "an integer 0..20 (alternatives per token)");
        r.logprobs = int(l.get<std::int64_t>());
    }
    penaltiesAndStreaming(doc, r);
    return r;
}

std::string legacyLogprobsJson(const std::vector<TokenLogprob>& tokens, std::size_t textOffset) {
    Json out = {{"tokens", Json::array()},
                {"token_logprobs", Json::array()},
                {"top_logprobs", Json::array()},
                {"text_offset", Json::array()}};
    for (const TokenLogprob& t : tokens) {
        out["tokens"].push_back(t.token);
        out["token_logprobs"].push_back(t.logprob);
        Json top = Json::object();
        for (const auto& [token, logprob] : t.top)
            if (!top.contains(token)) top[token] = logprob; // two ids may spell the same
        out["top_logprobs"].push_back(std::move(top));
        out["text_offset"].push_back(textOffset);
        textOffset += t.token.size();
    }
    return out.dump(-1, ' ', false, Json::error_handler_t::replace);
}

std::string textCompletionJson(const TextCompletion& c) {
    Json choice = {
        {"text", c.text},
        {"index", 0},
        {"logprobs", c.logprobsJson.empty() ? Json(nullptr) : Json::parse(c.logprobsJson)},
        {"finish_reason", c.finishReason.empty() ? Json(nullptr) : Json(c.finishReason)}};
    Json out = {{"id", c.id},
                {"object", "text_completion"},
                {"created", c.created},
                {"model", c.model},
                {"choices", c.usageOnly ? Json::array() : Json::array({std::move(choice)})}};
    if (c.usage)
        out["usage"] = {{"prompt_tokens", c.usage->promptTokens},
                        {"completion_tokens", c.usage->completionTokens},
                        {"total_tokens", c.usage->promptTokens + c.usage->completionTokens},
                        {"prompt_tokens_details", {{"cached_tokens", c.usage->cachedTokens}}}};
    return out.dump(-1, ' ', false, Json::error_handler_t::replace);
}

} // namespace k3::api
