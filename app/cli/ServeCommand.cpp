// `k3 serve MODEL_DIR`: the OpenAI chat-completions protocol (engine/src/api) on
// cpp-httplib. One Session, one generation at a time; the others wait their turn in a
// bounded FIFO queue. Streaming writes each token's delta as it is committed, and a
// failed write (the client left) cancels the generation through the session's flag.
#include "CliSupport.hpp"
#include "Commands.hpp"
#include "HostPolicy.hpp"
#include "HttpServer.hpp"
#include "ServeServer.hpp"
#include "SessionLoader.hpp"

#include <k3/api.hpp>
#include <k3/net.hpp>
#include <k3/process.hpp>
#include <k3/read_file.hpp>
#include <k3/session.hpp>

#include <httplib.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <list>
#include <memory>
#include <mutex>
#include <random>
#include <sstream>
#include <thread>

namespace k3cli {

namespace {

using Clock = std::chrono::steady_clock;

// Whether the client of a non-streamed request left (it writes nothing until the end).
// Its end of the stream alone does not say: a client that half-closed after its request
// (nc -N) still reads the answer. So at the first end of stream an interim answer is sent
// (HTTP/1.1 100, which clients skip); a client that left answers it with a reset, which
// the next look sees as an error.
class ClientWatch {
public:
    ClientWatch(k3::net::Socket fd, bool http11) : fd_(fd), http11_(http11) {}
    bool left() {
        namespace ready = k3::net::ready;
        if (fd_ == k3::net::kNoSocket) return false;
        const unsigned r = k3::net::waitSocket(fd_, ready::Read | ready::PeerClosed, 0);
        if (r & ready::Failed) return true;
        if (!(r & ready::PeerClosed) || probed_ || !http11_) return false;
        probed_ = true;
        static constexpr char kInterim[] = "HTTP/1.1 100 Continue\r\n\r\n";
        return k3::net::sendSome(fd_, kInterim, sizeof kInterim - 1, true) == -1;
    }

private:
    k3::net::Socket fd_;
    bool http11_;
    bool probed_ = false;
};

bool isLoopback(const std::string& host) {
    if (host == "localhost" || host == "::1") return true;
    const auto a = k3::net::parseIpv4(host);
    return a && (*a >> 24) == 127;
}

// Same time whatever the first differing byte, so the key cannot be guessed byte by byte.
bool sameKey(std::string_view given, std::string_view key) {
    unsigned diff = unsigned(given.size() ^ key.size());
    for (std::size_t i = 0; i < key.size(); ++i)
        diff |= unsigned(static_cast<unsigned char>(key[i]) ^
                         static_cast<unsigned char>(i < given.size() ? given[i] : 0));
    return diff == 0;
}

std::string readApiKey(const std::string& path) {
    std::string key;
    try {
        key = k3::readApiKeyFile(path); // the one reader, also k3 --remote's
    } catch (const std::exception& e) {
        throw usageError(std::string("--api-key-file: ") + e.what());
    }
    if (key.size() < 8)
        throw usageError("--api-key-file " + path + ": the key must be at least 8 characters");
    return key;
}

// What the access log line needs from the handler (it runs on the same thread, after
// the response, streamed or not, has been written).
struct RequestLog {
    Clock::time_point start{};
    bool started = false;
    int promptTokens = -1;
    int completionTokens = 0;
};
thread_local RequestLog tlLog;

// The request's key, as Authorization: Bearer KEY or (Anthropic's clients) x-api-key.
bool carriesKey(const httplib::Request& req, const std::string& key) {
    if (req.has_header("x-api-key") && sameKey(req.get_header_value("x-api-key"), key)) return true;
    const std::string auth = req.get_header_value("Authorization");
    // RFC 9110: the scheme is case-insensitive ("bearer KEY" is as good as "Bearer KEY").
    const std::string_view bearer = "bearer ";
    const bool isBearer =
        auth.size() > bearer.size() &&
        std::equal(bearer.begin(), bearer.end(), auth.begin(),
                   [](char a, char b) { return a == std::tolower(static_cast<unsigned char>(b)); });
    return isBearer && sameKey(std::string_view(auth).substr(bearer.size()), key);
}

// The access log's line of this thread's request: method, path, status, tokens
// (prompt+completion), seconds. Never headers: the key.
std::string accessLogLine(const httplib::Request& req, const httplib::Response& res) {
    const double seconds =
        tlLog.started ? std::chrono::duration<double>(Clock::now() - tlLog.start).count() : 0;
    std::string tokens = tlLog.promptTokens < 0 ? std::string("-")
                                                : std::to_string(tlLog.promptTokens) + "+" +
                                                      std::to_string(tlLog.completionTokens);
    return terminalSafe(req.method + " " + req.path, false) + " " + std::to_string(res.status) +
           " tokens=" + tokens + " " +
           std::to_string(seconds).substr(0, std::to_string(seconds).find('.') + 4) + " s";
}

} // namespace

namespace serve {

std::shared_ptr<TurnQueue::Place> TurnQueue::join() {
    std::lock_guard lock(m_);
    if (int(line_.size()) > limit_) return nullptr; // the running one plus `limit` waiting
    line_.push_back(next_);
    return std::make_shared<Place>(*this, next_++);
}

void TurnQueue::shutdown() {
    std::lock_guard lock(m_);
    closing_ = true;
    cv_.notify_all();
}

bool TurnQueue::waitTurn(std::uint64_t id) {
    std::unique_lock lock(m_);
    cv_.wait(lock, [&] { return closing_ || line_.front() == id; });
    return !closing_;
}

void TurnQueue::leave(std::uint64_t id) {
    std::lock_guard lock(m_);
    line_.remove(id);
    cv_.notify_all();
}

void ReplyObserver::onToken(const k3::TokenEvent& ev) {
    if (failed_ || stop_.stopped()) return;
    if (ev.logprobs) logprobs_.emplace_back(ev.id, *ev.logprobs);
    if (ev.logprobs && !ev.responseDelta.empty()) answerLogprobs_.emplace_back(ev.id, *ev.logprobs);
    raw_ += ev.responseDelta;
    thinkingTokens_ += !ev.thinkingDelta.empty();
    const std::string content = stop_.feed(ev.responseDelta);
    content_ += content;
    if (!sink_(&ev, ev.thinkingDelta, content)) failed_ = true;
    if (failed_ || stop_.stopped()) cancel_ = true;
}

void ReplyObserver::finish() {
    if (failed_ || stop_.stopped()) return;
    const std::string rest = stop_.flush();
    content_ += rest;
    if (!rest.empty() && !sink_(nullptr, {}, rest)) failed_ = true;
}

std::string ReplyObserver::matchedStop() const {
    if (!stop_.stopped()) return {};
    // The answer sent stops where the string began; the earliest listed one that is there.
    for (const std::string& s : stops_)
        if (raw_.compare(content_.size(), s.size(), s) == 0) return s;
    return {};
}

std::string invalidReason(const k3::GenerateResult& r) {
    if (r.nonFinite) return "a NaN or Inf reached the logits";
    return std::to_string(r.droppedExperts) + " routed expert(s) could not be loaded";
}

k3::api::ApiError invalidRun(const k3::GenerateResult& r) {
    return k3::api::ApiError(
        500, "RUN INVALID: " + invalidReason(r) + "; the output is not the model's answer",
        "server_error", {}, "invalid_run");
}

k3::api::ApiError shuttingDown() {
    return k3::api::ApiError(503, "the server is shutting down; the answer was cut short",
                             "server_error", {}, "server_shutdown");
}

Server::Server(const ServeArgs& args, HostPolicy policy, std::string modelId, std::string key)
    : args_(args), policy_(std::move(policy)), modelId_(std::move(modelId)), key_(std::move(key)),
      queue_(args.queue), created_(std::time(nullptr)) {}

void Server::stop() {
    stopping_ = true;
    cancel_ = true;
    queue_.shutdown();
    http_.stop();
}

std::string Server::newId(const char* prefix) {
    std::lock_guard lock(idMutex_);
    char buf[48];
    std::snprintf(buf, sizeof buf, "%s%016llx", prefix, (unsigned long long)idRandom_());
    return buf;
}

void Server::sendError(httplib::Response& res, const k3::api::ApiError& e,
                       const std::function<std::string(const k3::api::ApiError&)>& body) {
    res.status = e.status();
    res.set_content(body ? body(e) : k3::api::errorJson(e), "application/json");
}

std::string Server::tokenText(k3::TokenId id) const {
    const k3::Tokenizer& tok = session_->tokenizer();
    return std::size_t(id) < tok.vocabSize() ? std::string(tok.tokenBytes(id)) : std::string();
}

k3::api::TokenLogprob Server::tokenLogprob(k3::TokenId id, const k3::TokenLogprobs& lp) const {
    k3::api::TokenLogprob out{tokenText(id), lp.logprob, {}};
    for (const auto& [alt, logprob] : lp.top) out.top.emplace_back(tokenText(alt), logprob);
    return out;
}

void Server::checkPromptFits(std::size_t promptTokens, const std::string& field) const {
    const int context = session_->contextLength();
    if (context > 0 && promptTokens >= std::size_t(context))
        throw k3::api::ApiError(400,
                                field + ": " + k3::ContextFull(int(promptTokens), context).what(),
                                "invalid_request_error", field, "context_length_exceeded");
}

k3::GenerateOptions Server::sampling(std::optional<double> temperature, std::optional<double> topP,
                                     std::optional<std::uint64_t> seedAsked,
                                     std::size_t turn) const {
    // Sampled exactly as k3 --chat samples: greedy unless temperature, top_p or seed is
    // given, one seed stream per assistant turn.
    SamplingArgs asked;
    asked.temperature = temperature;
    asked.topP = topP;
    asked.seed = seedAsked;
    const ResolvedSampling s = resolveSampling(asked);
    std::uint64_t seed = s.seed;
    if (s.sampling && !s.seedGiven) seed = std::random_device{}();
    k3::GenerateOptions o;
    o.sampling.temperature = s.sampling ? s.temperature : 0.0f;
    o.sampling.topP = s.sampling ? s.topP : 1.0f;
    o.sampling.seed = turnSeed(seed, turn);
    o.speculation = args_.model.speculation;
    return o;
}

k3::GenerateOptions Server::generateOptions(const k3::api::ChatRequest& r) const {
    std::size_t turns = 0;
    for (const auto& m : r.messages) turns += m.role == k3::ChatRole::Assistant;
    k3::GenerateOptions o = sampling(r.temperature, r.topP, r.seed, turns);
    o.render = r.render;
    o.maxTokens = r.maxTokens.value_or(4096);
    o.logprobs = r.topLogprobs;
    o.logitBias = r.logitBias;
    o.presencePenalty = float(r.presencePenalty);
    o.frequencyPenalty = float(r.frequencyPenalty);
    checkLogitBias(r.logitBias);
    o.constraint = k3::api::answerConstraint(r, session_->tokenizer());
    return o;
}

void Server::checkLogitBias(const std::vector<std::pair<k3::TokenId, float>>& bias) const {
    const std::size_t vocab = std::size_t(session_->config().vocabSize);
    for (const auto& entry : bias)
        if (std::size_t(entry.first) >= vocab)
            throw k3::api::ApiError(400,
                                    "logit_bias." + std::to_string(entry.first) +
                                        ": the token id is outside the vocabulary (0.." +
                                        std::to_string(vocab - 1) + ")",
                                    "invalid_request_error",
                                    "logit_bias." + std::to_string(entry.first));
}

bool Server::refusedBeforeParsing(
    const httplib::Request& req, httplib::Response& res,
    const std::function<std::string(const k3::api::ApiError&)>& errorBody) {
    namespace api = k3::api;
    if (!ready_) {
        res.set_header("Retry-After", "1");
        sendError(res,
                  api::ApiError(503, "the model is loading; retry when GET /health says ready",
                                "server_error", {}, "model_loading"),
                  errorBody);
        return true;
    }
    // A web page can POST text/plain to 127.0.0.1 without a CORS preflight; application/json
    // it cannot. Parameters (charset) may follow, in any case.
    std::string type = req.get_header_value("Content-Type");
    type = type.substr(0, type.find(';'));
    type.erase(type.find_last_not_of(" \t") + 1);
    std::transform(type.begin(), type.end(), type.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
    if (type == "application/json") return false;
    sendError(res,
              api::ApiError(415,
                            "Content-Type must be application/json, got \"" +
                                terminalSafe(type, false) + "\"",
                            "invalid_request_error", {}, "unsupported_media_type"),
              errorBody);
    return true;
}

void Server::chatCompletions(const httplib::Request& req, httplib::Response& res) {
    namespace api = k3::api;
    if (refusedBeforeParsing(req, res)) return;
    api::ChatRequest request;
    k3::GenerateOptions options;
    try {
        request = api::parseChatRequest(req.body);
        options = generateOptions(request);
        // Known before anything is generated: refused before the headers go out.
        const k3::Tokenizer& tok = session_->tokenizer();
        checkPromptFits(
            k3::encodeChatSegments(tok, k3::renderChatSegments(request.messages, request.render))
                .size(),
            "messages");
    } catch (const api::ApiError& e) {
        return sendError(res, e);
    } catch (const k3::ChatError& e) {
        return sendError(res, api::ApiError(400, std::string("messages: ") + e.what(),
                                            "invalid_request_error", "messages"));
    }
    const std::string id = newId("chatcmpl-");
    const std::int64_t created = std::time(nullptr);
    auto writer = std::make_shared<api::ChunkWriter>(id, modelId_, created);
    const bool withLogprobs = request.topLogprobs >= 0;
    Generation g;
    g.stream = request.stream;
    g.stops = request.stop;
    g.run = [messages = request.messages, options](k3::Session& s, ReplyObserver& o,
                                                   const std::atomic<bool>* cancel) {
        return s.chat(messages, options, &o, cancel);
    };
    g.start = [writer] { return writer->start(); };
    g.delta = [this, writer, withLogprobs](const k3::TokenEvent* ev, const std::string& reasoning,
                                           const std::string& content) {
        if (!withLogprobs || !ev || !ev->logprobs) return writer->delta(reasoning, content);
        const api::TokenLogprob lp = tokenLogprob(ev->id, *ev->logprobs);
        return writer->delta(reasoning, content, &lp);
    };
    auto usageOf = [](const k3::GenerateResult& r) {
        return api::Usage{r.promptTokens, int(r.ids.size()), r.reusedPositions};
    };
    g.finish = [writer, usageOf, includeUsage = request.includeUsage](const k3::GenerateResult& r,
                                                                      const ReplyObserver& o) {
        std::string out = writer->finish(
            r.reply.toolCalls, api::finishReason(r.reply, r.endOfTurn, o.stoppedByString()));
        if (includeUsage) out += writer->usage(usageOf(r));
        return out + api::ChunkWriter::done();
    };
    g.errorEvent = [](const api::ApiError& e) { return "data: " + api::errorJson(e) + "\n\n"; };
    g.body = [this, id, created, usageOf, withLogprobs](const k3::GenerateResult& r,
                                                        const ReplyObserver& o) {
        api::Completion c;
        c.id = id;
        c.model = modelId_;
        c.created = created;
        c.message = r.reply;
        c.message.content = o.content();
        c.finishReason = api::finishReason(r.reply, r.endOfTurn, o.stoppedByString());
        c.usage = usageOf(r);
        if (withLogprobs) {
            c.logprobs.emplace();
            for (const auto& [tokenId, lp] : o.logprobs())
                c.logprobs->push_back(tokenLogprob(tokenId, lp));
        }
        return api::completionJson(c);
    };
    answer(req, res, std::move(g));
}

k3::GenerateResult Server::runTurn(const std::string& owner, const Generation& g,
                                   ReplyObserver& observer) {
    namespace api = k3::api;
    cancel_ = stopping_.load();
    // Whose prefix the session may reuse: the key holders' (one key, one principal), else
    // this client address's. Another client's prefix is dropped first, so cached_tokens
    // (and the prefill's time) never tells a client what someone else asked.
    if (owner != stateOwner_) {
        session_->reset();
        session_->setStateOwner(owner); // --state-cache: each client's own states
        stateOwner_ = owner;
    }
    k3::GenerateResult out;
    try {
        out = g.run(*session_, observer, &cancel_);
    } catch (const k3::ContextFull& e) {
        throw api::ApiError(400, std::string("messages: ") + e.what(), "invalid_request_error",
                            "messages", "context_length_exceeded");
    } catch (const k3::ChatError& e) {
        throw api::ApiError(400, std::string("messages: ") + e.what(), "invalid_request_error",
                            "messages");
    } catch (const k3::ImageError& e) { // images sent to a text-only checkpoint
        throw api::ApiError(400, std::string("messages: ") + e.what(), "invalid_request_error",
                            "messages");
    } catch (const api::ApiError&) {
        throw;
    } catch (const std::exception& e) { // a failed read or forward: this answer only
        std::fprintf(stderr, "k3 serve: the forward pass failed: %s\n",
                     terminalSafe(e.what()).c_str());
        session_->reset(); // the state may be half-written
        // The details (file paths among them) are for the server's log only.
        throw api::ApiError(500, "the forward pass failed (the server's log says why)",
                            "server_error");
    }
    observer.finish();
    tlLog.promptTokens = out.promptTokens;
    tlLog.completionTokens = int(out.ids.size());
    if (!out.valid())
        std::fprintf(stderr, "k3 serve: RUN INVALID: %s\n", invalidReason(out).c_str());
    std::lock_guard lock(metrics_.m);
    ++metrics_.generations;
    metrics_.promptTokens += std::uint64_t(out.promptTokens);
    metrics_.completionTokens += out.ids.size();
    metrics_.cachedTokens += std::uint64_t(out.reusedPositions);
    metrics_.prefillSeconds += out.prefillSeconds;
    metrics_.decodeSeconds += out.decodeSeconds;
    metrics_.memory = session_->memoryReport();
    metrics_.memoryKnown = true;
    return out;
}

// Over 80 lines: the queue, then the non-streamed and the streamed answer side by side.
void Server::answer(const httplib::Request& req, httplib::Response& res, Generation g) {
    namespace api = k3::api;
    auto place = queue_.join();
    if (!place) {
        // Clients that honour it (the openai SDKs) wait this long before they retry.
        res.set_header("Retry-After", "1");
        return sendError(res,
                         api::ApiError(429,
                                       "the server is busy: " + std::to_string(args_.queue) +
                                           " requests already wait (k3 serve --queue); "
                                           "retry later",
                                       "rate_limit_error", {}, "queue_full"),
                         g.errorBody);
    }
    const std::string owner = key_.empty() ? "address " + req.remote_addr : "key";
    if (!g.stream) {
        if (!place->waitTurn()) return sendError(res, shuttingDown(), g.errorBody);
        // Nothing is written until the end, so each token looks whether the client left.
        ClientWatch client(LimitedHttpServer::requestSocket(), req.version == "HTTP/1.1");
        ReplyObserver observer(g.stops, cancel_,
                               [&client](const k3::TokenEvent*, const std::string&,
                                         const std::string&) { return !client.left(); });
        k3::GenerateResult r;
        try {
            r = runTurn(owner, g, observer);
        } catch (const api::ApiError& e) {
            return sendError(res, e, g.errorBody);
        }
        if (observer.clientLeft()) return; // nobody to answer
        if (!r.valid()) return sendError(res, invalidRun(r), g.errorBody);
        if (r.cancelled && stopping_) return sendError(res, shuttingDown(), g.errorBody);
        res.set_content(g.body(r, observer), "application/json");
        return;
    }
    res.set_header("Cache-Control", "no-cache");
    auto gen = std::make_shared<Generation>(std::move(g));
    res.set_chunked_content_provider(
        "text/event-stream", [this, place, gen, owner](std::size_t, httplib::DataSink& sink) {
            auto send = [&sink](const std::string& text) {
                return text.empty() || sink.write(text.data(), text.size());
            };
            auto end = [&](const api::ApiError& e) {
                send(gen->errorEvent(e));
                sink.done();
                return true;
            };
            if (!place->waitTurn()) return end(shuttingDown());
            if (!send(gen->start())) return false;
            ReplyObserver observer(gen->stops, cancel_,
                                   [&](const k3::TokenEvent* ev, const std::string& reasoning,
                                       const std::string& content) {
                                       return send(gen->delta(ev, reasoning, content));
                                   });
            k3::GenerateResult r;
            try {
                r = runTurn(owner, *gen, observer);
            } catch (const api::ApiError& e) {
                return end(e);
            }
            if (observer.clientLeft()) return false; // nobody to finish for
            // What was sent is not the model's (whole) answer: an error ends the stream,
            // with no finish reason and no end marker that would make it look complete.
            if (!r.valid() || (r.cancelled && stopping_))
                return end(r.valid() ? shuttingDown() : invalidRun(r));
            send(gen->finish(r, observer));
            sink.done();
            return true;
        });
}

bool Server::refusedByPolicy(const httplib::Request& req, httplib::Response& res) {
    namespace api = k3::api;
    if (const auto why = policy_.refuseHost(req.get_header_value("Host"), req.has_header("Host"))) {
        sendError(res, api::ApiError(403, *why, "permission_error", {}, "host_not_allowed"));
        return true;
    }
    if (!req.has_header("Origin")) return false; // no web page: curl, the SDKs
    const std::string origin = req.get_header_value("Origin");
    if (!policy_.originAllowed(origin)) {
        sendError(res, api::ApiError(403,
                                     "Origin \"" + terminalSafe(origin, false) +
                                         "\" is not allowed: web pages are answered only from "
                                         "origins given with k3 serve --cors-origin ORIGIN",
                                     "permission_error", {}, "origin_not_allowed"));
        return true;
    }
    res.set_header("Access-Control-Allow-Origin", origin);
    res.set_header("Vary", "Origin");
    if (req.method != "OPTIONS") return false;
    // The browser's preflight carries no key: it asks what the real request may send.
    res.set_header("Access-Control-Allow-Methods", "GET, POST, OPTIONS");
    res.set_header("Access-Control-Allow-Headers",
                   "Authorization, Content-Type, x-api-key, anthropic-version");
    res.set_header("Access-Control-Max-Age", "600");
    res.status = 204;
    return true;
}

void Server::routes() {
    namespace api = k3::api;
    http_.set_payload_max_length(std::size_t(args_.maxBodyMB) << 20);
    http_.set_keep_alive_timeout(1); // an idle kept-alive connection closes after 1 s
    // Each token is a small write: without this, Nagle holds it for the client's ACK.
    http_.set_tcp_nodelay(true);
    // Workers run complete requests only (slow clients wait in the reader thread): the
    // running generation, the queue, and a few for /health and refusals.
    http_.setWorkerThreads(std::size_t(args_.queue) + 4);

    http_.set_pre_routing_handler([this](const httplib::Request& req, httplib::Response& res) {
        tlLog = {};
        tlLog.start = Clock::now();
        tlLog.started = true;
        if (refusedByPolicy(req, res)) return httplib::Server::HandlerResponse::Handled;
        // Everything but /health needs the key (the token counts in /metrics are private).
        if (key_.empty() || req.path == "/health")
            return httplib::Server::HandlerResponse::Unhandled;
        if (carriesKey(req, key_)) return httplib::Server::HandlerResponse::Unhandled;
        sendError(res,
                  api::ApiError(401,
                                "invalid or missing API key: send the key given to k3 serve "
                                "--api-key-file as Authorization: Bearer KEY (or x-api-key: KEY)",
                                "authentication_error", {}, "invalid_api_key"),
                  req.path == "/v1/messages" ? anthropicErrorJson
                                             : std::function<std::string(const api::ApiError&)>());
        return httplib::Server::HandlerResponse::Handled;
    });
    http_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
        chatCompletions(req, res);
    });
    moreRoutes();
    // 404, 405, 413 and the like from the library get an OpenAI-style body too.
    http_.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return;
        std::string message;
        if (res.status == 404)
            message = "no route " + req.method + " " + req.path + " (" + kRouteList + ")";
        else if (res.status == 413)
            message = bodyOverLimitMessage(std::size_t(args_.maxBodyMB) << 20);
        else
            message = "HTTP " + std::to_string(res.status) + " for " + req.method + " " + req.path;
        sendError(res,
                  api::ApiError(res.status, message,
                                res.status == 404 ? "not_found_error" : "invalid_request_error"));
    });
    // A handler that throws: a generic 500 for the client (never the exception's text,
    // which cpp-httplib would put in an EXCEPTION_WHAT header), the text in the log.
    http_.set_exception_handler(
        [this](const httplib::Request& req, httplib::Response& res, std::exception_ptr ep) {
            std::string what = "an exception that is no std::exception";
            try {
                std::rethrow_exception(ep);
            } catch (const std::exception& e) {
                what = e.what();
            } catch (...) {
            }
            std::fprintf(stderr, "k3 serve: %s failed: %s\n",
                         terminalSafe(req.method + " " + req.path, false).c_str(),
                         terminalSafe(what).c_str());
            res.headers.clear();
            res.status = 500;
            sendError(res, api::ApiError(500, "internal server error (the server's log says why)",
                                         "server_error"));
        });
    // One access log line per request (accessLogLine).
    http_.set_logger([this](const httplib::Request& req, const httplib::Response& res) {
        std::fprintf(stderr, "k3 serve: %s\n", accessLogLine(req, res).c_str());
        tlLog = {};
        countRequest(req, res.status);
    });
}

void Server::bind() {
    routes();
    int port = args_.port;
    if (port == 0) {
        port = http_.bind_to_any_port(args_.host);
        if (port < 0) port = 0;
    } else if (!http_.bind_to_port(args_.host, port)) {
        port = 0;
    }
    if (port <= 0)
        throw CommandError{kExitFailure, "cannot listen on " + args_.host + ":" +
                                             std::to_string(args_.port) +
                                             " (in use, or not an address of this machine); "
                                             "pick another --port or --host"};
    port_ = port;
}

std::string Server::address() const {
    const bool v6 = args_.host.find(':') != std::string::npos;
    return "http://" + (v6 ? "[" + args_.host + "]" : args_.host) + ":" + std::to_string(port_);
}

} // namespace serve

int runServe(const ServeArgs& args) {
    if (!isLoopback(args.host) && args.apiKeyFile.empty())
        throw usageError("--host " + args.host +
                         " is not a loopback address: serving beyond this machine needs "
                         "--api-key-file FILE (clients then send Authorization: Bearer KEY)");
    const std::string key = args.apiKeyFile.empty() ? std::string() : readApiKey(args.apiKeyFile);
    HostPolicy policy(args.host, args.allowHosts, args.corsOrigins);

    // SIGINT and SIGTERM go to one thread that stops the server (constructed before any
    // other thread, which all inherit the blocked signals); a client that left is a
    // failed write, not a dead server (SIGPIPE ignored).
    k3::process::StopRequests stops;

    // string(): on Windows a path is wide and does not convert by itself.
    std::string modelId =
        std::filesystem::path(args.model.modelDir).lexically_normal().filename().string();
    if (modelId.empty())
        modelId = std::filesystem::path(args.model.modelDir).parent_path().filename().string();
    serve::Server server(args, std::move(policy), modelId, key);
    server.bind();
    stops.watch([&server](const std::string& signal) {
        std::fprintf(stderr, "k3 serve: stopping (%s)\n", signal.c_str());
        server.stop();
    });
    // GET /health answers while the model loads ("loading"); the "on http://..." line
    // comes once requests are served.
    std::fprintf(stderr, "k3 serve: loading %s (%s/health answers meanwhile)\n", modelId.c_str(),
                 server.address().c_str());
    std::fflush(stderr);
    std::thread listener([&] { server.listen(); });
    auto stopAll = [&] {
        server.stop();
        listener.join();
        stops.unwatch();
    };
    std::optional<LoadedSession> loaded;
    try {
        loaded.emplace(openModel(args.model, TokenizerNeed::Required));
    } catch (...) {
        stopAll();
        throw;
    }
    server.ready(loaded->session);
    std::fprintf(stderr, "k3 serve: %s on %s/v1 (%s; queue %d, %s)\n", modelId.c_str(),
                 server.address().c_str(), key.empty() ? "no API key" : "API key required",
                 args.queue, "Ctrl-C stops");
    std::fflush(stderr);
    // Until a signal stops the server; then the watcher is ended if it still waits.
    listener.join();
    stops.unwatch();
    return kExitOk;
}

} // namespace k3cli
