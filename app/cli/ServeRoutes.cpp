// k3 serve's small routes: GET /health (loading or ready), GET /v1/models and
// /v1/models/{id}, POST /tokenize and /detokenize (vLLM's shapes), GET /metrics
// (Prometheus text), and POST /v1/completions (ServeCompletions.cpp).
#include "CliSupport.hpp"
#include "ServeJson.hpp"
#include "ServeServer.hpp"

#include <nlohmann/json.hpp>

#include <cstdio>
#include <sstream>

namespace k3cli::serve {

namespace {

using namespace json; // Json, dump, bad, need, text, objectBody, partsText

// The routes metrics count by name; anything else is "other" (paths are the client's).
std::string routeName(const std::string& path) {
    static const char* known[] = {"/v1/chat/completions", "/v1/completions", "/v1/messages",
                                  "/v1/responses",        "/v1/models",      "/tokenize",
                                  "/detokenize",          "/metrics",        "/health"};
    for (const char* k : known)
        if (path == k) return k;
    if (path.starts_with("/v1/models/")) return "/v1/models/{id}";
    return "other";
}

} // namespace

void Server::countRequest(const httplib::Request& req, int status) {
    std::lock_guard lock(metrics_.m);
    ++metrics_.requests[routeName(req.path) + "\t" + std::to_string(status)];
}

// Prometheus text format 0.0.4: counters end in _total, seconds are seconds.
void Server::metrics(httplib::Response& res) {
    std::ostringstream out;
    auto metric = [&](const char* name, const char* type, const char* help, auto value) {
        out << "# HELP " << name << ' ' << help << "\n# TYPE " << name << ' ' << type << '\n'
            << name << ' ' << value << '\n';
    };
    std::lock_guard lock(metrics_.m);
    out << "# HELP k3_requests_total HTTP requests answered, by route and status.\n"
           "# TYPE k3_requests_total counter\n";
    for (const auto& [key, count] : metrics_.requests) {
        const auto tab = key.find('\t');
        out << "k3_requests_total{route=\"" << key.substr(0, tab) << "\",status=\""
            << key.substr(tab + 1) << "\"} " << count << '\n';
    }
    metric("k3_ready", "gauge", "1 once the model is loaded.", ready_ ? 1 : 0);
    metric("k3_generations_total", "counter", "Generations run.", metrics_.generations);
    metric("k3_prompt_tokens_total", "counter", "Prompt tokens of the generations.",
           metrics_.promptTokens);
    metric("k3_cached_prompt_tokens_total", "counter",
           "Prompt tokens reused from the state (not computed again).", metrics_.cachedTokens);
    metric("k3_completion_tokens_total", "counter", "Tokens generated.", metrics_.completionTokens);
    metric("k3_prefill_seconds_total", "counter", "Seconds spent reading prompts.",
           metrics_.prefillSeconds);
    metric("k3_decode_seconds_total", "counter", "Seconds spent generating.",
           metrics_.decodeSeconds);
    metric("k3_queue_limit", "gauge", "Requests that may wait (k3 serve --queue).", args_.queue);
    if (metrics_.memoryKnown) {
        const k3::CacheStats& c = metrics_.memory.cache;
        metric("k3_expert_cache_requests_total", "counter", "Routed experts asked for.",
               c.requests);
        metric("k3_expert_cache_resident_hits_total", "counter",
               "Experts in memory before the layer asked (true hits).", c.residentHits);
        metric("k3_expert_cache_misses_total", "counter", "Experts read on request.", c.misses);
        metric("k3_expert_cache_read_bytes_total", "counter", "Expert bytes read from disk.",
               c.bytesRead);
        metric("k3_trunk_read_bytes_total", "counter", "Trunk bytes read from disk.",
               metrics_.memory.trunk.bytesRead);
        metric("k3_peak_rss_bytes", "gauge", "Peak resident memory.", metrics_.memory.peakRssBytes);
    }
    res.set_content(out.str(), "text/plain; version=0.0.4; charset=utf-8");
}

// Over 80 lines: one short handler per route, registered in one place.
void Server::moreRoutes() {
    namespace api = k3::api;
    http_.Get("/health", [this](const httplib::Request&, httplib::Response& res) {
        res.status = ready_ ? 200 : 503;
        res.set_content(ready_ ? R"({"status":"ready"})" : R"({"status":"loading"})",
                        "application/json");
    });
    http_.Get("/metrics",
              [this](const httplib::Request&, httplib::Response& res) { metrics(res); });
    http_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
        res.set_content(api::modelsJson(modelId_, created_), "application/json");
    });
    http_.Get(R"(/v1/models/(.+))", [this](const httplib::Request& req, httplib::Response& res) {
        const std::string id = req.matches[1];
        if (id != modelId_)
            return sendError(res,
                             api::ApiError(404,
                                           "no model \"" + terminalSafe(id, false) +
                                               "\" (this server has \"" + modelId_ + "\")",
                                           "invalid_request_error", "model", "model_not_found"));
        res.set_content(
            dump(
                {{"id", modelId_}, {"object", "model"}, {"created", created_}, {"owned_by", "k3"}}),
            "application/json");
    });
    http_.Post("/tokenize", [this](const httplib::Request& req, httplib::Response& res) {
        if (refusedBeforeParsing(req, res)) return;
        try {
            const Json doc = objectBody(req.body);
            const k3::Tokenizer& tok = session_->tokenizer();
            std::vector<k3::TokenId> ids;
            if (doc.contains("messages")) { // the chat prompt, rendered as the chat route does
                const api::ChatRequest r = api::parseChatRequest(req.body);
                ids = k3::encodeChatSegments(tok, k3::renderChatSegments(r.messages, r.render));
            } else if (doc.contains("prompt") && doc["prompt"].is_string()) {
                ids = tok.encode(doc["prompt"].get<std::string>());
            } else {
                throw bad("prompt", "required, a string (or messages, a chat)");
            }
            res.set_content(dump({{"count", ids.size()},
                                  {"max_model_len", session_->contextLength()},
                                  {"tokens", ids}}),
                            "application/json");
        } catch (const api::ApiError& e) {
            sendError(res, e);
        } catch (const k3::ChatError& e) {
            sendError(res, bad("messages", e.what()));
        }
    });
    http_.Post("/detokenize", [this](const httplib::Request& req, httplib::Response& res) {
        if (refusedBeforeParsing(req, res)) return;
        try {
            const Json doc = objectBody(req.body);
            if (!doc.contains("tokens") || !doc["tokens"].is_array())
                throw bad("tokens", "required, an array of token ids");
            const k3::Tokenizer& tok = session_->tokenizer();
            std::vector<k3::TokenId> ids;
            for (std::size_t i = 0; i < doc["tokens"].size(); ++i) {
                const Json& v = doc["tokens"][i];
                if (!v.is_number_integer() || v.get<std::int64_t>() < 0 ||
                    v.get<std::uint64_t>() >= tok.vocabSize())
                    throw bad("tokens[" + std::to_string(i) + "]",
                              "not a token id (0.." + std::to_string(tok.vocabSize() - 1) + ")");
                ids.push_back(k3::TokenId(v.get<std::int64_t>()));
            }
            res.set_content(dump({{"prompt", tok.decode(ids)}}), "application/json");
        } catch (const api::ApiError& e) {
            sendError(res, e);
        }
    });
    http_.Post("/v1/completions", [this](const httplib::Request& req, httplib::Response& res) {
        completions(req, res);
    });
    http_.Post("/v1/messages",
               [this](const httplib::Request& req, httplib::Response& res) { messages(req, res); });
    http_.Post("/v1/responses", [this](const httplib::Request& req, httplib::Response& res) {
        responses(req, res);
    });
}

} // namespace k3cli::serve
