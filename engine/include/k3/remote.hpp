#pragma once
// A streaming client of any OpenAI-compatible chat-completions server (vLLM, SGLang,
// `k3 serve`, ...). One request at a time per call; calls may run on any thread, and
// cancel is the only thing another thread touches. The API key is sent as a Bearer
// header and never appears in a message or a log.

#include "k3/chat.hpp"
#include "k3/error.hpp"

#include <atomic>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace k3 {

enum class RemoteErrorKind {
    Usage,        // a malformed base URL or option (nothing was sent)
    Connection,   // refused, unresolved host, timeout
    Tls,          // certificate or handshake failure
    Unauthorized, // 401: the API key
    NotFound,     // 404: the URL or the model name
    RateLimited,  // 429
    Server,       // 5xx
    Http,         // another non-2xx status
    Protocol,     // a body that is not the protocol (bad JSON, no choices)
    EarlyClose,   // the stream ended before finish_reason / [DONE]
};

class RemoteError : public Error {
public:
    RemoteError(RemoteErrorKind kind, const std::string& message, long status = 0)
        : Error(ErrorKind::Remote, message), kind_(kind), status_(status) {}
    RemoteErrorKind remoteKind() const { return kind_; }
    long httpStatus() const { return status_; } // 0 when no response came

private:
    RemoteErrorKind kind_;
    long status_;
};

struct RemoteOptions {
    // "http://host:8000" or "http://host:8000/v1" (both mean the same server).
    std::string baseUrl;
    std::string model;  // the "model" field of each request
    std::string apiKey; // empty: no Authorization header
    double connectTimeoutSeconds = 10;
};

// One chunk of the stream as it arrived.
struct RemoteDelta {
    int index = 0;         // 0-based among the deltas that carried text
    std::string reasoning; // think channel ("reasoning_content" or "reasoning")
    std::string content;   // the answer
    double secondsSinceStart = 0;
    double secondsSincePrevious = 0; // since the previous text delta (the request for the first)
    // The tokens this delta carried, when the server counts them per chunk (a usage
    // object on every chunk, as vLLM's continuous_usage_stats sends); 0 when it did not
    // say. Servers that batch tokens send several per delta.
    int tokens = 0;
};

struct RemoteRequest {
    std::vector<ChatMessage> messages;
    int maxTokens = 0; // 0: the server's default
    std::optional<float> temperature;
    std::optional<float> topP;
    std::optional<std::uint64_t> seed;
    // Sent as Moonshot's "thinking" object and as chat_template_kwargs.thinking (vLLM,
    // SGLang); effort goes out as "reasoning_effort" when set.
    std::optional<bool> thinking;
    std::optional<std::string> reasoningEffort;
};

struct RemoteReply {
    std::string content;
    std::string reasoning;
    std::string model;        // as the server named it in its chunks
    std::string finishReason; // "stop", "length", ...; empty when cancelled
    int deltas = 0;           // text deltas received
    // The calls the answer makes (finish_reason "tool_calls"), assembled from the
    // streamed pieces by index: arguments are the server's JSON text.
    std::vector<ChatToolCall> toolCalls;
    int promptTokens = -1; // usage; -1 when the server sent none
    int completionTokens = -1;
    bool cancelled = false;
    double firstDeltaSeconds = 0; // request to first text delta
    double totalSeconds = 0;
};

// The stream broke after some text arrived: the message, and what came before it.
class RemoteStreamError : public RemoteError {
public:
    RemoteStreamError(RemoteErrorKind kind, const std::string& message, RemoteReply partial)
        : RemoteError(kind, message), partial_(std::move(partial)) {}
    const RemoteReply& partial() const { return partial_; }

private:
    RemoteReply partial_;
};

// A call's function.arguments as sent to a server: always a JSON text, as OpenAI's API
// requires. A call in the mapping form (the local model's argument tags; arguments a JSON
// object) sends that object's text; a call in the string form (a json block, or text that
// is no JSON object) sends a JSON string holding the text, so a server that decodes the
// arguments before rendering (vLLM's json.loads) gives the template the same mapping or
// string the local renderer used. Blank arguments send "{}" (no arguments either way).
std::string toolArgumentsJson(const ChatToolCall& call);

// The inverse, for a server's function.arguments: a JSON string becomes the string form
// (argumentsAsJsonBlock, the text it holds); anything else is kept as the text it is
// (a JSON object renders as argument tags); empty means "{}".
void readToolArgumentsJson(const std::string& text, ChatToolCall& call);

class RemoteClient {
public:
    // Throws RemoteError(Usage) when the URL is not http(s)://host[:port][/path].
    explicit RemoteClient(RemoteOptions options);

    const RemoteOptions& options() const { return options_; }
    // The base URL with any trailing "/" or "/v1" removed: what the UI shows.
    const std::string& serverUrl() const { return root_; }

    // GET /v1/models: the ids the server offers.
    std::vector<std::string> listModels(const std::atomic<bool>* cancel = nullptr) const;

    // POST /v1/chat/completions with stream:true. onDelta runs on the calling thread for
    // each text delta as it arrives. A set cancel flag closes the stream within ~0.1 s and
    // returns what came (cancelled = true). Errors throw RemoteError; a stream that broke
    // after text arrived throws RemoteStreamError carrying that text.
    RemoteReply chat(const RemoteRequest& request,
                     const std::function<void(const RemoteDelta&)>& onDelta = {},
                     const std::atomic<bool>* cancel = nullptr) const;

    // The JSON body chat() sends (tests and the CLI's --verbose read it).
    std::string requestBody(const RemoteRequest& request) const;

private:
    RemoteOptions options_;
    std::string root_;
    std::string shownRoot_; // root_ without user:password@, for messages
    std::string hostPort_;  // for "connection refused by host:port"
};

} // namespace k3
