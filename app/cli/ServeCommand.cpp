// `k3 serve MODEL_DIR`: the OpenAI chat-completions protocol (engine/src/api) on
// cpp-httplib. One Session, one generation at a time; the others wait their turn in a
// bounded FIFO queue. Streaming writes each token's delta as it is committed, and a
// failed write (the client left) cancels the generation through the session's flag.
#include "CliSupport.hpp"
#include "Commands.hpp"
#include "HostPolicy.hpp"
#include "HttpServer.hpp"
#include "SessionLoader.hpp"

#include <k3/api.hpp>
#include <k3/read_file.hpp>
#include <k3/session.hpp>

#include <httplib.h>

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/stat.h>

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

// "ADDRESS:PORT" of a socket address, as cpp-httplib formats a request's endpoints.
std::string endpoint(const sockaddr_storage& a, socklen_t len) {
    char host[NI_MAXHOST], port[NI_MAXSERV];
    if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof host, port,
                    sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) != 0)
        return {};
    return std::string(host) + ":" + port;
}

// The descriptor of the connection a request came on, or -1. cpp-httplib 0.11 gives a
// handler no view of its socket, so it is found among this process's descriptors by its
// two endpoints (both are unique while the connection is open). A non-streamed
// generation needs it to notice that its client left: it writes nothing until the end.
int requestSocket(const httplib::Request& req) {
    const std::string peer = req.remote_addr + ":" + std::to_string(req.remote_port);
    const std::string local = req.local_addr + ":" + std::to_string(req.local_port);
    std::error_code ec;
    for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
        const std::string name = entry.path().filename().string();
        if (name.empty() || name.find_first_not_of("0123456789") != std::string::npos) continue;
        const int fd = std::stoi(name);
        struct stat st {};
        if (fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
        sockaddr_storage a{};
        socklen_t len = sizeof a;
        if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0 || endpoint(a, len) != peer)
            continue;
        len = sizeof a;
        if (getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0 &&
            endpoint(a, len) == local)
            return fd;
    }
    return -1;
}

// Whether the client of a non-streamed request left (it writes nothing until the end).
// Its end of the stream alone does not say: a client that half-closed after its request
// (nc -N) still reads the answer. So at the first end of stream an interim answer is sent
// (HTTP/1.1 100, which clients skip); a client that left answers it with a reset, which
// the next look sees as an error.
class ClientWatch {
public:
    ClientWatch(int fd, bool http11) : fd_(fd), http11_(http11) {}
    bool left() {
        pollfd p{fd_, POLLIN | POLLRDHUP, 0};
        if (fd_ < 0 || poll(&p, 1, 0) <= 0) return false;
        if (p.revents & (POLLERR | POLLHUP)) return true;
        if (!(p.revents & POLLRDHUP) || probed_ || !http11_) return false;
        probed_ = true;
        static constexpr char kInterim[] = "HTTP/1.1 100 Continue\r\n\r\n";
        return send(fd_, kInterim, sizeof kInterim - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0 &&
               errno != EAGAIN;
    }

private:
    int fd_;
    bool http11_;
    bool probed_ = false;
};

// FIFO turns for the one session: a request takes a place when it arrives (refused
// when `limit` already wait), runs when it is first in line, and gives the place up
// when its response is gone (served, failed or abandoned).
class TurnQueue {
public:
    explicit TurnQueue(int limit) : limit_(limit) {}

    class Place {
    public:
        Place(TurnQueue& q, std::uint64_t id) : q_(q), id_(id) {}
        ~Place() { q_.leave(id_); }
        Place(const Place&) = delete;
        Place& operator=(const Place&) = delete;
        // Blocks until this place is first; false when the server is shutting down.
        bool waitTurn() { return q_.waitTurn(id_); }

    private:
        TurnQueue& q_;
        std::uint64_t id_;
    };

    // Nothing when the queue is full.
    std::shared_ptr<Place> join() {
        std::lock_guard lock(m_);
        if (int(line_.size()) > limit_) return nullptr; // the running one plus `limit` waiting
        line_.push_back(next_);
        return std::make_shared<Place>(*this, next_++);
    }

    void shutdown() {
        std::lock_guard lock(m_);
        closing_ = true;
        cv_.notify_all();
    }

private:
    bool waitTurn(std::uint64_t id) {
        std::unique_lock lock(m_);
        cv_.wait(lock, [&] { return closing_ || line_.front() == id; });
        return !closing_;
    }
    void leave(std::uint64_t id) {
        std::lock_guard lock(m_);
        line_.remove(id);
        cv_.notify_all();
    }

    std::mutex m_;
    std::condition_variable cv_;
    std::list<std::uint64_t> line_;
    std::uint64_t next_ = 0;
    int limit_;
    bool closing_ = false;
};

bool isLoopback(const std::string& host) {
    if (host == "localhost" || host == "::1") return true;
    in_addr a{};
    return inet_pton(AF_INET, host.c_str(), &a) == 1 && (ntohl(a.s_addr) >> 24) == 127;
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

class Server {
public:
    Server(const ServeArgs& args, HostPolicy policy, k3::Session& session, std::string modelId,
           std::string key)
        : args_(args), policy_(std::move(policy)), session_(session), modelId_(std::move(modelId)),
          key_(std::move(key)), queue_(args.queue), created_(std::time(nullptr)) {}

    int run();
    void stop() {
        stopping_ = true;
        cancel_ = true;
        queue_.shutdown();
        http_.stop();
    }

private:
    void routes();
    void chatCompletions(const httplib::Request& req, httplib::Response& res);
    void sendError(httplib::Response& res, const k3::api::ApiError& e) {
        res.status = e.status();
        res.set_content(k3::api::errorJson(e), "application/json");
    }
    k3::GenerateOptions generateOptions(const k3::api::ChatRequest& r) const;
    std::string completionId() {
        std::lock_guard lock(idMutex_);
        char buf[32];
        std::snprintf(buf, sizeof buf, "chatcmpl-%016llx", (unsigned long long)idRandom_());
        return buf;
    }

    // Host and Origin checks, then CORS headers and preflights for the allowed origins.
    bool refusedByPolicy(const httplib::Request& req, httplib::Response& res);

    const ServeArgs& args_;
    HostPolicy policy_;
    k3::Session& session_;
    std::string modelId_;
    std::string key_;
    TurnQueue queue_;
    std::int64_t created_;
    LimitedHttpServer http_;
    std::atomic<bool> cancel_{false}; // the running generation's flag (one runs at a time)
    std::atomic<bool> stopping_{false};
    std::string stateOwner_; // whose conversation the session's state holds (see generate)
    std::mutex idMutex_;
    std::mt19937_64 idRandom_{std::random_device{}()};
};

// Every token's text, through the stop strings, to a sink (the SSE stream, or the
// collected reply). A false sink (the client left) or a stop string raises the flag.
class ReplyObserver : public k3::SessionObserver {
public:
    ReplyObserver(std::vector<std::string> stops, std::atomic<bool>& cancel,
                  std::function<bool(const std::string&, const std::string&)> sink)
        : stop_(std::move(stops)), cancel_(cancel), sink_(std::move(sink)) {}

    void onToken(const k3::TokenEvent& ev) override {
        if (failed_ || stop_.stopped()) return;
        const std::string content = stop_.feed(ev.responseDelta);
        content_ += content;
        if (!sink_(ev.thinkingDelta, content)) failed_ = true;
        if (failed_ || stop_.stopped()) cancel_ = true;
    }
    // The end: text held back for a stop string that never came.
    void finish() {
        if (failed_ || stop_.stopped()) return;
        const std::string rest = stop_.flush();
        content_ += rest;
        if (!rest.empty() && !sink_({}, rest)) failed_ = true;
    }
    bool clientLeft() const { return failed_; }
    bool stoppedByString() const { return stop_.stopped(); }
    const std::string& content() const { return content_; }

private:
    k3::api::StopFilter stop_;
    std::atomic<bool>& cancel_;
    std::function<bool(const std::string&, const std::string&)> sink_;
    bool failed_ = false;
    std::string content_; // the answer as sent (cut at a stop string)
};

// Why a run's output is not the model's, as k3 --chat says it.
std::string invalidReason(const k3::GenerateResult& r) {
    if (r.nonFinite) return "a NaN or Inf reached the logits";
    return std::to_string(r.droppedExperts) + " routed expert(s) could not be loaded";
}

// An invalid run is a server failure, never an answer: a 500 naming the reason.
k3::api::ApiError invalidRun(const k3::GenerateResult& r) {
    return k3::api::ApiError(
        500, "RUN INVALID: " + invalidReason(r) + "; the output is not the model's answer",
        "server_error", {}, "invalid_run");
}

k3::api::ApiError shuttingDown() {
    return k3::api::ApiError(503, "the server is shutting down; the answer was cut short",
                             "server_error", {}, "server_shutdown");
}

k3::GenerateOptions Server::generateOptions(const k3::api::ChatRequest& r) const {
    // Sampled exactly as k3 --chat samples: greedy unless temperature, top_p or seed is
    // given, one seed stream per assistant turn.
    SamplingArgs asked;
    asked.temperature = r.temperature;
    asked.topP = r.topP;
    asked.seed = r.seed;
    const ResolvedSampling s = resolveSampling(asked);
    std::uint64_t seed = s.seed;
    if (s.sampling && !s.seedGiven) seed = std::random_device{}();
    std::size_t turns = 0;
    for (const auto& m : r.messages) turns += m.role == k3::ChatRole::Assistant;
    k3::GenerateOptions o;
    o.render = r.render;
    o.sampling.temperature = s.sampling ? s.temperature : 0.0f;
    o.sampling.topP = s.sampling ? s.topP : 1.0f;
    o.sampling.seed = turnSeed(seed, turns);
    o.maxTokens = r.maxTokens.value_or(4096);
    o.speculation = args_.model.speculation;
    return o;
}

void Server::chatCompletions(const httplib::Request& req, httplib::Response& res) {
    namespace api = k3::api;
    // A web page can POST text/plain to 127.0.0.1 without a CORS preflight; application/json
    // it cannot. Parameters (charset) may follow, in any case.
    std::string type = req.get_header_value("Content-Type");
    type = type.substr(0, type.find(';'));
    type.erase(type.find_last_not_of(" \t") + 1);
    std::transform(type.begin(), type.end(), type.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
    if (type != "application/json")
        return sendError(res, api::ApiError(415,
                                            "Content-Type must be application/json, got \"" +
                                                terminalSafe(type, false) + "\"",
                                            "invalid_request_error", {}, "unsupported_media_type"));
    api::ChatRequest request;
    try {
        request = api::parseChatRequest(req.body);
    } catch (const api::ApiError& e) {
        return sendError(res, e);
    }
    auto place = queue_.join();
    if (!place) {
        // Clients that honour it (the openai SDKs) wait this long before they retry.
        res.set_header("Retry-After", "1");
        return sendError(res, api::ApiError(429,
                                            "the server is busy: " + std::to_string(args_.queue) +
                                                " requests already wait (k3 serve --queue); "
                                                "retry later",
                                            "rate_limit_error", {}, "queue_full"));
    }
    const std::string id = completionId();
    const std::int64_t created = std::time(nullptr);
    const k3::GenerateOptions options = generateOptions(request);

    // Whose prefix the session may reuse: the key holders' (one key, one principal), else
    // this client address's. Another client's prefix is dropped first, so cached_tokens
    // (and the prefill's time) never tells a client what someone else asked.
    const std::string owner = key_.empty() ? "address " + req.remote_addr : "key";
    // Runs the generation in this request's turn; the sink sees each delta.
    auto generate = [this, request, options, owner](ReplyObserver& observer,
                                                    k3::GenerateResult& out) {
        cancel_ = stopping_.load();
        if (owner != stateOwner_) {
            session_.reset();
            session_.setStateOwner(owner); // --state-cache: each client's own states
            stateOwner_ = owner;
        }
        try {
            out = session_.chat(request.messages, options, &observer, &cancel_);
        } catch (const k3::ContextFull& e) {
            throw api::ApiError(400, std::string("messages: ") + e.what(), "invalid_request_error",
                                "messages", "context_length_exceeded");
        } catch (const k3::ChatError& e) {
            throw api::ApiError(400, std::string("messages: ") + e.what(), "invalid_request_error",
                                "messages");
        } catch (const std::exception& e) { // a failed read or forward: this answer only
            std::fprintf(stderr, "k3 serve: the forward pass failed: %s\n",
                         terminalSafe(e.what()).c_str());
            session_.reset(); // the state may be half-written
            // The details (file paths among them) are for the server's log only.
            throw api::ApiError(500, "the forward pass failed (the server's log says why)",
                                "server_error");
        }
        observer.finish();
        tlLog.promptTokens = out.promptTokens;
        tlLog.completionTokens = int(out.ids.size());
        if (!out.valid())
            std::fprintf(stderr, "k3 serve: RUN INVALID: %s\n", invalidReason(out).c_str());
    };
    auto usageOf = [](const k3::GenerateResult& r) {
        return api::Usage{r.promptTokens, int(r.ids.size()), r.reusedPositions};
    };

    if (!request.stream) {
        if (!place->waitTurn()) return sendError(res, shuttingDown());
        // Nothing is written until the end, so each token looks whether the client left.
        ClientWatch client(requestSocket(req), req.version == "HTTP/1.1");
        ReplyObserver observer(
            request.stop, cancel_,
            [&client](const std::string&, const std::string&) { return !client.left(); });
        k3::GenerateResult r;
        try {
            generate(observer, r);
        } catch (const api::ApiError& e) {
            return sendError(res, e);
        }
        if (observer.clientLeft()) return; // nobody to answer
        if (!r.valid()) return sendError(res, invalidRun(r));
        if (r.cancelled && stopping_) return sendError(res, shuttingDown());
        api::Completion c;
        c.id = id;
        c.model = modelId_;
        c.created = created;
        c.message = r.reply;
        c.message.content = observer.content();
        c.finishReason = api::finishReason(r.reply, r.endOfTurn, observer.stoppedByString());
        c.usage = usageOf(r);
        res.set_content(api::completionJson(c), "application/json");
        return;
    }

    // Streamed: the 200 and the headers go first; the turn is waited for in the provider.
    res.set_header("Cache-Control", "no-cache");
    res.set_chunked_content_provider("text/event-stream", [this, place, id, created, request,
                                                           generate,
                                                           usageOf](std::size_t,
                                                                    httplib::DataSink& sink) {
        api::ChunkWriter writer(id, modelId_, created);
        auto send = [&sink](const std::string& text) {
            return text.empty() || sink.write(text.data(), text.size());
        };
        if (!place->waitTurn()) {
            send("data: " + api::errorJson(shuttingDown()) + "\n\n");
            sink.done();
            return true;
        }
        if (!send(writer.start())) return false;
        ReplyObserver observer(request.stop, cancel_,
                               [&](const std::string& reasoning, const std::string& content) {
                                   return send(writer.delta(reasoning, content));
                               });
        k3::GenerateResult r;
        try {
            generate(observer, r);
        } catch (const api::ApiError& e) {
            send("data: " + api::errorJson(e) + "\n\n");
            sink.done();
            return true;
        }
        if (observer.clientLeft()) return false; // nobody to finish for
        // What was sent is not the model's (whole) answer: an error ends the stream,
        // with no finish_reason and no [DONE] that would make it look complete.
        if (!r.valid() || (r.cancelled && stopping_)) {
            send("data: " + api::errorJson(r.valid() ? shuttingDown() : invalidRun(r)) + "\n\n");
            sink.done();
            return true;
        }
        send(writer.finish(r.reply.toolCalls,
                           api::finishReason(r.reply, r.endOfTurn, observer.stoppedByString())));
        if (request.includeUsage) send(writer.usage(usageOf(r)));
        send(api::ChunkWriter::done());
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
    res.set_header("Access-Control-Allow-Headers", "Authorization, Content-Type");
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
        if (key_.empty() || !req.path.starts_with("/v1/"))
            return httplib::Server::HandlerResponse::Unhandled;
        const std::string auth = req.get_header_value("Authorization");
        // RFC 9110: the scheme is case-insensitive ("bearer KEY" is as good as "Bearer KEY").
        const std::string_view bearer = "bearer ";
        const bool isBearer =
            auth.size() > bearer.size() &&
            std::equal(bearer.begin(), bearer.end(), auth.begin(), [](char a, char b) {
                return a == std::tolower(static_cast<unsigned char>(b));
            });
        if (isBearer && sameKey(std::string_view(auth).substr(bearer.size()), key_))
            return httplib::Server::HandlerResponse::Unhandled;
        sendError(res, api::ApiError(401,
                                     "invalid or missing API key: send the key given to k3 serve "
                                     "--api-key-file as Authorization: Bearer KEY",
                                     "authentication_error", {}, "invalid_api_key"));
        return httplib::Server::HandlerResponse::Handled;
    });
    http_.Get("/health", [](const httplib::Request&, httplib::Response& res) {
        res.set_content("{\"status\":\"ok\"}", "application/json");
    });
    http_.Get("/v1/models", [this](const httplib::Request&, httplib::Response& res) {
        res.set_content(api::modelsJson(modelId_, created_), "application/json");
    });
    http_.Post("/v1/chat/completions", [this](const httplib::Request& req, httplib::Response& res) {
        chatCompletions(req, res);
    });
    // 404, 405, 413 and the like from the library get an OpenAI-style body too.
    http_.set_error_handler([this](const httplib::Request& req, httplib::Response& res) {
        if (!res.body.empty()) return;
        std::string message;
        // A chunked body cut off at the limit: the library calls the failed read a 400.
        if (LimitedHttpServer::bodyOverLimit()) res.status = 413;
        if (res.status == 404)
            message = "no route " + req.method + " " + req.path +
                      " (GET /v1/models, GET /health, POST /v1/chat/completions)";
        else if (res.status == 413)
            message = "the request body is over the " + std::to_string(args_.maxBodyMB) +
                      " MB limit (k3 serve --max-body-mb)";
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
    // method, path, status, tokens (prompt+completion), seconds. Never headers: the key.
    http_.set_logger([](const httplib::Request& req, const httplib::Response& res) {
        const double seconds =
            tlLog.started ? std::chrono::duration<double>(Clock::now() - tlLog.start).count() : 0;
        std::string tokens = tlLog.promptTokens < 0 ? std::string("-")
                                                    : std::to_string(tlLog.promptTokens) + "+" +
                                                          std::to_string(tlLog.completionTokens);
        const std::string line =
            terminalSafe(req.method + " " + req.path, false) + " " + std::to_string(res.status) +
            " tokens=" + tokens + " " +
            std::to_string(seconds).substr(0, std::to_string(seconds).find('.') + 4) + " s";
        std::fprintf(stderr, "k3 serve: %s\n", line.c_str());
        tlLog = {};
    });
}

int Server::run() {
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
    std::fprintf(stderr, "k3 serve: %s on http://%s:%d/v1 (%s; queue %d, %s)\n", modelId_.c_str(),
                 args_.host.find(':') != std::string::npos ? ("[" + args_.host + "]").c_str()
                                                           : args_.host.c_str(),
                 port, key_.empty() ? "no API key" : "API key required", args_.queue,
                 "Ctrl-C stops");
    std::fflush(stderr);
    http_.listen_after_bind();
    return kExitOk;
}

} // namespace

int runServe(const ServeArgs& args) {
    if (!isLoopback(args.host) && args.apiKeyFile.empty())
        throw usageError("--host " + args.host +
                         " is not a loopback address: serving beyond this machine needs "
                         "--api-key-file FILE (clients then send Authorization: Bearer KEY)");
    const std::string key = args.apiKeyFile.empty() ? std::string() : readApiKey(args.apiKeyFile);
    HostPolicy policy(args.host, args.allowHosts, args.corsOrigins);

    // SIGINT and SIGTERM go to one thread that stops the server; every other thread,
    // the pool's included, inherits the blocked mask.
    sigset_t stopSignals;
    sigemptyset(&stopSignals);
    sigaddset(&stopSignals, SIGINT);
    sigaddset(&stopSignals, SIGTERM);
    pthread_sigmask(SIG_BLOCK, &stopSignals, nullptr);
    signal(SIGPIPE, SIG_IGN); // a client that left is a failed write, not a dead server

    LoadedSession loaded = openModel(args.model, TokenizerNeed::Required);
    std::string modelId = std::filesystem::path(args.model.modelDir).lexically_normal().filename();
    if (modelId.empty())
        modelId = std::filesystem::path(args.model.modelDir).parent_path().filename();
    Server server(args, std::move(policy), loaded.session, modelId, key);
    std::thread signals([&] {
        int sig = 0;
        sigwait(&stopSignals, &sig);
        if (sig == SIGINT || sig == SIGTERM) {
            std::fprintf(stderr, "k3 serve: stopping (%s)\n", sig == SIGINT ? "SIGINT" : "SIGTERM");
            server.stop();
        }
    });
    int code = kExitOk;
    try {
        code = server.run();
    } catch (...) {
        pthread_kill(signals.native_handle(), SIGTERM);
        signals.join();
        throw;
    }
    // listen() returned: stopped by a signal (or failed); wake the signal thread if needed.
    pthread_kill(signals.native_handle(), SIGTERM);
    signals.join();
    return code;
}

} // namespace k3cli
