#pragma once
// k3 serve's server: one Session, one generation at a time, the others waiting their turn
// in a bounded FIFO queue. ServeCommand.cpp has the chat completions route and the
// plumbing; ServeRoutes.cpp the small routes (models, tokenize, metrics, health);
// ServeCompletions.cpp the text completions.
#include "Commands.hpp"
#include "HostPolicy.hpp"
#include "HttpServer.hpp"

#include <k3/api.hpp>
#include <k3/session.hpp>

#include <httplib.h>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <list>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace k3cli::serve {

using Clock = std::chrono::steady_clock;

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
    std::shared_ptr<Place> join();
    void shutdown();

private:
    bool waitTurn(std::uint64_t id);
    void leave(std::uint64_t id);

    std::mutex m_;
    std::condition_variable cv_;
    std::list<std::uint64_t> line_;
    std::uint64_t next_ = 0;
    int limit_;
    bool closing_ = false;
};

// Every token's text, through the stop strings, to a sink (the SSE stream, or the
// collected reply). A false sink (the client left) or a stop string raises the flag.
// The sink sees the token's event (nullptr for text released at the end).
class ReplyObserver : public k3::SessionObserver {
public:
    using Sink = std::function<bool(const k3::TokenEvent*, const std::string& reasoning,
                                    const std::string& content)>;
    ReplyObserver(std::vector<std::string> stops, std::atomic<bool>& cancel, Sink sink)
        : stop_(stops), cancel_(cancel), sink_(std::move(sink)), stops_(std::move(stops)) {}

    void onToken(const k3::TokenEvent& ev) override;
    // The end: text held back for a stop string that never came.
    void finish();
    bool clientLeft() const { return failed_; }
    bool stoppedByString() const { return stop_.stopped(); }
    const std::string& content() const { return content_; }
    // Tokens whose text went to the think channel (usage's reasoning_tokens).
    int thinkingTokens() const { return thinkingTokens_; }
    // The stop string that ended the answer ("" when none did).
    std::string matchedStop() const;
    // Each token's log-probabilities, in order, when they were asked for.
    const std::vector<std::pair<k3::TokenId, k3::TokenLogprobs>>& logprobs() const {
        return logprobs_;
    }
    // Those of the tokens whose text went to the answer (not the think channel, not a
    // template tag): what the Responses API gives for an output_text.
    const std::vector<std::pair<k3::TokenId, k3::TokenLogprobs>>& answerLogprobs() const {
        return answerLogprobs_;
    }

private:
    k3::api::StopFilter stop_;
    std::atomic<bool>& cancel_;
    Sink sink_;
    bool failed_ = false;
    std::string content_; // the answer as sent (cut at a stop string)
    std::string raw_;     // the answer as generated (the stop string and after included)
    std::vector<std::string> stops_;
    int thinkingTokens_ = 0;
    std::vector<std::pair<k3::TokenId, k3::TokenLogprobs>> logprobs_;
    std::vector<std::pair<k3::TokenId, k3::TokenLogprobs>> answerLogprobs_;
};

// What a route's generation is: the call on the session, and how its answer is written.
struct Generation {
    bool stream = false;
    std::vector<std::string> stops;
    std::function<k3::GenerateResult(k3::Session&, ReplyObserver&, const std::atomic<bool>*)> run;
    // Streamed: the events before the first token.
    std::function<std::string()> start;
    // Streamed: a token's text after the stop strings (event nullptr: the end's).
    std::function<std::string(const k3::TokenEvent*, const std::string& reasoning,
                              const std::string& content)>
        delta;
    // Streamed: the events after the last token (finish reason, usage, end marker).
    std::function<std::string(const k3::GenerateResult&, const ReplyObserver&)> finish;
    // Streamed: the event that ends a stream with an error.
    std::function<std::string(const k3::api::ApiError&)> errorEvent;
    // Not streamed: the JSON body.
    std::function<std::string(const k3::GenerateResult&, const ReplyObserver&)> body;
    // Not streamed: the JSON body of an error (OpenAI's by default).
    std::function<std::string(const k3::api::ApiError&)> errorBody;
};

// The figures GET /metrics gives (Prometheus counters), updated after each generation.
struct Metrics {
    std::mutex m;
    std::map<std::string, std::uint64_t> requests; // "route\tstatus" -> count
    std::uint64_t generations = 0, promptTokens = 0, completionTokens = 0, cachedTokens = 0;
    double prefillSeconds = 0, decodeSeconds = 0;
    k3::MemoryReport memory; // after the last generation
    bool memoryKnown = false;
};

// What a 404 lists.
inline constexpr const char* kRouteList =
    "GET /v1/models, GET /v1/models/{id}, POST /v1/chat/completions, POST /v1/completions, "
    "POST /v1/messages, POST /v1/responses, POST /tokenize, POST /detokenize, GET /metrics, "
    "GET /health";

class Server {
public:
    Server(const ServeArgs& args, HostPolicy policy, std::string modelId, std::string key);

    // Binds and says where (the "k3 serve: ... on http://HOST:PORT/v1" line); throws when
    // the address cannot be had.
    void bind();
    // Answers until stop(); /health says "loading" until ready() was given the session.
    void listen() { http_.listen_after_bind(); }
    void ready(k3::Session& session) {
        session_ = &session;
        ready_ = true;
    }
    void stop();
    std::string address() const; // "http://HOST:PORT"

private:
    void routes();
    void moreRoutes(); // ServeRoutes.cpp
    void chatCompletions(const httplib::Request& req, httplib::Response& res);
    void completions(const httplib::Request& req, httplib::Response& res); // ServeCompletions
    // The Anthropic Messages API (ServeMessages.cpp): the body read as the chat request it
    // means (its fields named as the Messages API names them), and the route.
    std::string messagesToChat(const std::string& body, bool& stream);
    void messages(const httplib::Request& req, httplib::Response& res);
    // The OpenAI Responses API (ServeResponses.cpp), read the same way.
    std::string responsesToChat(const std::string& body, bool& stream);
    void responses(const httplib::Request& req, httplib::Response& res);
    void metrics(httplib::Response& res);
    void countRequest(const httplib::Request& req, int status);

    // The refusals every generating route shares: not ready (503), not JSON (415).
    bool refusedBeforeParsing(
        const httplib::Request& req, httplib::Response& res,
        const std::function<std::string(const k3::api::ApiError&)>& errorBody = {});
    // Takes a place in the queue (429 when full) and answers: streamed, the 200 and the
    // headers go first and the turn is waited for in the provider.
    void answer(const httplib::Request& req, httplib::Response& res, Generation g);
    // Runs `g` in this request's turn; ApiError for a refusal or a failed forward.
    k3::GenerateResult runTurn(const std::string& owner, const Generation& g,
                               ReplyObserver& observer);
    void sendError(httplib::Response& res, const k3::api::ApiError& e,
                   const std::function<std::string(const k3::api::ApiError&)>& body = {});
    // Refuses a prompt the context cannot hold before anything is sent (400).
    void checkPromptFits(std::size_t promptTokens, const std::string& field) const;
    // The sampling options every route shares (greedy unless temperature, top_p or seed).
    k3::GenerateOptions sampling(std::optional<double> temperature, std::optional<double> topP,
                                 std::optional<std::uint64_t> seed, std::size_t turn) const;
    k3::GenerateOptions generateOptions(const k3::api::ChatRequest& r) const;
    void checkLogitBias(const std::vector<std::pair<k3::TokenId, float>>& bias) const;
    std::string newId(const char* prefix);
    std::string tokenText(k3::TokenId id) const;
    k3::api::TokenLogprob tokenLogprob(k3::TokenId id, const k3::TokenLogprobs& lp) const;

    // Host and Origin checks, then CORS headers and preflights for the allowed origins.
    bool refusedByPolicy(const httplib::Request& req, httplib::Response& res);

    const ServeArgs& args_;
    HostPolicy policy_;
    k3::Session* session_ = nullptr;
    std::atomic<bool> ready_{false};
    std::string modelId_;
    std::string key_;
    TurnQueue queue_;
    std::int64_t created_;
    int port_ = 0;
    LimitedHttpServer http_;
    std::atomic<bool> cancel_{false}; // the running generation's flag (one runs at a time)
    std::atomic<bool> stopping_{false};
    std::string stateOwner_; // whose conversation the session's state holds (see runTurn)
    std::mutex idMutex_;
    std::mt19937_64 idRandom_{std::random_device{}()};
    Metrics metrics_;
};

// Why a run's output is not the model's, as k3 --chat says it.
std::string invalidReason(const k3::GenerateResult& r);
// An invalid run is a server failure, never an answer: a 500 naming the reason.
k3::api::ApiError invalidRun(const k3::GenerateResult& r);
k3::api::ApiError shuttingDown();
// {"type":"error","error":{"type","message"}}: the Messages API's error body.
std::string anthropicErrorJson(const k3::api::ApiError& e);

} // namespace k3cli::serve
