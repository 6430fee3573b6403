// The OpenAI chat-completions protocol over libcurl: a POST whose answer is a stream of
// server-sent events ("data: {json}" lines, then "data: [DONE]"), read as it arrives.

#include "k3/hub.hpp"
#include "k3/json_limits.hpp"
#include "k3/read_file.hpp"
#include "k3/remote.hpp"
#include "k3/vision.hpp"
#include "tokenizer/Base64.hpp"

#include <curl/curl.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <climits>
#include <memory>
#include <mutex>

namespace k3 {

namespace {

// A server's text as JSON; too deep (dump() recurses) counts as no JSON.
nlohmann::json parseJsonWithinLimit(std::string_view text) {
    if (jsonTooDeepAt(text)) return nlohmann::json(nlohmann::json::value_t::discarded);
    return nlohmann::json::parse(text, nullptr, false);
}

using Clock = std::chrono::steady_clock;

// The media type of an image file's bytes, from its signature (what `k3 serve` decodes).
const char* imageMediaType(std::string_view bytes) {
    if (bytes.starts_with("\x89PNG\r\n\x1a\n")) return "image/png";
    if (bytes.starts_with("\xff\xd8\xff")) return "image/jpeg";
    if (bytes.size() >= 12 && bytes.starts_with("RIFF") && bytes.substr(8, 4) == "WEBP")
        return "image/webp";
    return nullptr;
}

// A user message with images as OpenAI's content parts: the text between placeholders
// as text parts, each placeholder as the next image's file in a data URL (the server
// preprocesses the original, as it would a client's upload).
nlohmann::ordered_json contentParts(const ChatMessage& m) {
    nlohmann::ordered_json parts = nlohmann::ordered_json::array();
    const auto addText = [&parts](std::string_view text) {
        if (!text.empty()) parts.push_back({{"type", "text"}, {"text", std::string(text)}});
    };
    std::size_t at = 0, used = 0;
    for (std::size_t next = m.content.find(kImagePlaceholder); next != std::string::npos;
         next = m.content.find(kImagePlaceholder, at)) {
        addText(std::string_view(m.content).substr(at, next - at));
        if (used == m.images.size())
            throw RemoteError(RemoteErrorKind::Usage,
                              "a user message holds more image places than images");
        const ChatImage& image = m.images[used++];
        if (image.file.empty())
            throw RemoteError(RemoteErrorKind::Usage,
                              "an image without its file cannot be sent to a server");
        std::string bytes;
        try {
            bytes = readRegularFile(image.file, kMaxImageFileBytes, "image");
        } catch (const FileReadError& e) {
            throw RemoteError(RemoteErrorKind::Usage, e.what());
        }
        const char* type = imageMediaType(bytes);
        if (!type)
            throw RemoteError(RemoteErrorKind::Usage,
                              image.file + " is not a PNG, JPEG or WebP image");
        parts.push_back(
            {{"type", "image_url"},
             {"image_url",
              {{"url", std::string("data:") + type + ";base64," + detail::encodeBase64(bytes)}}}});
        at = next + kImagePlaceholder.size();
    }
    addText(std::string_view(m.content).substr(at));
    if (used != m.images.size())
        throw RemoteError(RemoteErrorKind::Usage,
                          "a user message holds " + std::to_string(m.images.size()) +
                              " images for " + std::to_string(used) + " image places");
    return parts;
}

void ensureCurl() {
    static std::once_flag once;
    std::call_once(once, [] { curl_global_init(CURL_GLOBAL_DEFAULT); });
}

const char* reasonPhrase(long status) {
    switch (status) {
    case 400:
        return "Bad Request";
    case 401:
        return "Unauthorized";
    case 403:
        return "Forbidden";
    case 404:
        return "Not Found";
    case 413:
        return "Payload Too Large";
    case 422:
        return "Unprocessable Entity";
    case 429:
        return "Too Many Requests";
    case 500:
        return "Internal Server Error";
    case 502:
        return "Bad Gateway";
    case 503:
        return "Service Unavailable";
    case 504:
        return "Gateway Timeout";
    default:
        return "";
    }
}

// The server's own words from an error body: OpenAI's {"error":{"message"}}, vLLM's
// {"message"}, FastAPI's {"detail"}; empty when the body says nothing readable.
std::string serverMessage(const std::string& body) {
    const nlohmann::json j = parseJsonWithinLimit(body);
    if (!j.is_object()) return {};
    if (auto e = j.find("error"); e != j.end()) {
        if (e->is_string()) return e->get<std::string>();
        if (e->is_object())
            if (auto m = e->find("message"); m != e->end() && m->is_string())
                return m->get<std::string>();
    }
    for (const char* key : {"message", "detail"})
        if (auto m = j.find(key); m != j.end() && m->is_string()) return m->get<std::string>();
    return {};
}

struct Transfer {
    // Filled by the write callback.
    CURL* curl = nullptr;
    bool sse = false;    // parse the body as events (else keep it whole)
    long status = 0;     // known once the first body bytes arrive
    std::string body;    // a non-2xx body, or the whole body when !sse
    std::string pending; // an event line not yet complete
    std::string error;   // set by the parser to stop the transfer
    RemoteErrorKind errorKind = RemoteErrorKind::Protocol;
    bool done = false; // [DONE] seen
    RemoteReply reply;
    Clock::time_point start;
    Clock::time_point lastDelta;
    int countedTokens = 0; // the last per-chunk usage.completion_tokens
    const std::function<void(const RemoteDelta&)>* onDelta = nullptr;
    // What an answer may hold before the stream is closed (answerLimits()): a server
    // that streams forever must not grow this process without bound.
    int askedTokens = 0; // the request's max_tokens; 0: the server's default
    int maxDeltas = 0;   // 0: no count limit (max_tokens not given)
    std::size_t maxBytes = 0;
    std::size_t answerBytes = 0; // reasoning, content and tool-call text received
    std::string root;            // the server, for the message
};

constexpr std::size_t kMaxAnswerBytes = std::size_t{64} << 20;
// A server sends about one text delta per token; a few more (a token's text split in
// pieces, an empty role delta) are allowed, a stream that never ends is not.
constexpr int kDeltasPerAskedToken = 4;
constexpr std::size_t kBytesPerAskedToken = 1024;

void answerLimits(Transfer& t, int maxTokens) {
    t.askedTokens = std::max(maxTokens, 0);
    t.maxBytes = kMaxAnswerBytes;
    if (maxTokens <= 0) return;
    t.maxDeltas = int(std::min<long long>(INT_MAX, (long long)maxTokens * kDeltasPerAskedToken));
    t.maxBytes = std::min<std::size_t>(kMaxAnswerBytes,
                                       std::size_t(maxTokens) * kBytesPerAskedToken + 65536);
}

// Set when the answer passed its limits: the transfer stops and the text so far is kept.
void checkAnswerLimits(Transfer& t) {
    const int maxTokens = t.askedTokens;
    if (t.maxDeltas > 0 && t.reply.deltas > t.maxDeltas)
        t.error = "the server at " + t.root + " sent more than " + std::to_string(t.maxDeltas) +
                  " text deltas for an answer of at most " + std::to_string(maxTokens) +
                  " tokens (max_tokens); closed the stream, the partial answer is kept";
    else if (t.answerBytes > t.maxBytes)
        t.error =
            "the server at " + t.root + " sent more than " + std::to_string(t.maxBytes) +
            " bytes of answer text" +
            (maxTokens > 0 ? " for at most " + std::to_string(maxTokens) + " tokens (max_tokens)"
                           : std::string()) +
            "; closed the stream, the partial answer is kept";
    if (!t.error.empty()) t.errorKind = RemoteErrorKind::Protocol;
}

std::string stringAt(const nlohmann::json& obj, const char* key) {
    if (auto it = obj.find(key); it != obj.end() && it->is_string()) return it->get<std::string>();
    return {};
}

// A streamed call comes in pieces: the first names its index, id and function, later
// ones add to its arguments text.
void readToolCallPieces(Transfer& t, const nlohmann::json& delta) {
    const auto calls = delta.find("tool_calls");
    if (calls == delta.end() || !calls->is_array()) return;
    for (const nlohmann::json& piece : *calls) {
        if (!piece.is_object()) continue;
        const auto at = piece.find("index");
        const std::size_t index = at != piece.end() && at->is_number_unsigned()
                                      ? at->get<std::size_t>()
                                      : t.reply.toolCalls.size();
        if (index > t.reply.toolCalls.size() || index >= 128) continue; // not a call we can place
        if (index == t.reply.toolCalls.size()) t.reply.toolCalls.push_back({"", "", ""});
        ChatToolCall& call = t.reply.toolCalls[index];
        if (std::string id = stringAt(piece, "id"); !id.empty()) call.id = id;
        if (auto fn = piece.find("function"); fn != piece.end() && fn->is_object()) {
            const std::string name = stringAt(*fn, "name");
            const std::string arguments = stringAt(*fn, "arguments");
            t.answerBytes += name.size() + arguments.size();
            call.name += name;
            call.arguments += arguments;
        }
    }
}

void handleEvent(Transfer& t, const std::string& data) {
    if (data == "[DONE]") {
        t.done = true;
        return;
    }
    const nlohmann::json chunk = parseJsonWithinLimit(data);
    if (!chunk.is_object()) {
        t.error = "the server sent an event that is not a JSON object: " + data.substr(0, 120);
        return;
    }
    if (chunk.contains("error")) { // an error reported inside the stream (vLLM, SGLang)
        const std::string why = serverMessage(data);
        t.errorKind = RemoteErrorKind::Server;
        t.error = "the server reported an error mid-answer: " + (why.empty() ? data : why);
        return;
    }
    if (std::string model = stringAt(chunk, "model"); !model.empty()) t.reply.model = model;
    int chunkTokens = 0; // this chunk's share of a running completion_tokens count
    if (auto usage = chunk.find("usage"); usage != chunk.end() && usage->is_object()) {
        t.reply.promptTokens = usage->value("prompt_tokens", -1);
        t.reply.completionTokens = usage->value("completion_tokens", -1);
        if (t.reply.completionTokens > t.countedTokens) {
            chunkTokens = t.reply.completionTokens - t.countedTokens;
            t.countedTokens = t.reply.completionTokens;
        }
    }
    auto choices = chunk.find("choices");
    if (choices == chunk.end() || !choices->is_array() || choices->empty()) return;
    const nlohmann::json& choice = choices->front();
    if (!choice.is_object()) return;
    if (auto delta = choice.find("delta"); delta != choice.end() && delta->is_object()) {
        RemoteDelta d;
        // vLLM and SGLang name the think channel reasoning_content; newer servers reasoning.
        d.reasoning = stringAt(*delta, "reasoning_content");
        if (d.reasoning.empty()) d.reasoning = stringAt(*delta, "reasoning");
        d.content = stringAt(*delta, "content");
        if (!d.reasoning.empty() || !d.content.empty()) {
            const Clock::time_point now = Clock::now();
            d.index = t.reply.deltas++;
            d.secondsSinceStart = std::chrono::duration<double>(now - t.start).count();
            d.secondsSincePrevious = std::chrono::duration<double>(now - t.lastDelta).count();
            d.tokens = chunkTokens;
            if (d.index == 0) t.reply.firstDeltaSeconds = d.secondsSinceStart;
            t.lastDelta = now;
            t.answerBytes += d.reasoning.size() + d.content.size();
            t.reply.reasoning += d.reasoning;
            t.reply.content += d.content;
            if (t.onDelta && *t.onDelta) (*t.onDelta)(d);
        }
    }
    if (auto delta = choice.find("delta"); delta != choice.end() && delta->is_object())
        readToolCallPieces(t, *delta);
    if (std::string finish = stringAt(choice, "finish_reason"); !finish.empty())
        t.reply.finishReason = finish;
}

constexpr std::size_t kMaxErrorBody = 64 * 1024;
constexpr std::size_t kMaxLine = 16 * 1024 * 1024;

size_t onBody(char* data, size_t size, size_t count, void* user) {
    auto& t = *static_cast<Transfer*>(user);
    const size_t n = size * count;
    if (t.status == 0) curl_easy_getinfo(t.curl, CURLINFO_RESPONSE_CODE, &t.status);
    if (t.status < 200 || t.status >= 300 || !t.sse) {
        // A model list or an error page is small; a server sending more is refused.
        if (!t.sse && t.body.size() + n > kMaxLine) {
            t.error = "the server sent over 16 MB where a model list was expected";
            return 0;
        }
        if (t.body.size() < kMaxErrorBody || !t.sse) t.body.append(data, n);
        return n;
    }
    t.pending.append(data, n);
    std::size_t start = 0;
    for (std::size_t nl; (nl = t.pending.find('\n', start)) != std::string::npos; start = nl + 1) {
        std::string line = t.pending.substr(start, nl - start);
        if (!line.empty() && line.back() == '\r') line.pop_back();
        // Only data lines matter; comments (": ping"), event: and id: lines are skipped.
        if (line.rfind("data:", 0) != 0) continue;
        std::string payload = line.substr(5);
        if (!payload.empty() && payload.front() == ' ') payload.erase(0, 1);
        handleEvent(t, payload);
        if (t.error.empty()) checkAnswerLimits(t);
        if (!t.error.empty()) return 0; // stops the transfer (CURLE_WRITE_ERROR)
    }
    t.pending.erase(0, start);
    if (t.pending.size() > kMaxLine) {
        t.error = "the server sent an event line over 16 MB";
        return 0;
    }
    return n;
}

struct CurlDeleter {
    void operator()(CURL* c) const { curl_easy_cleanup(c); }
};
struct SlistDeleter {
    void operator()(curl_slist* s) const { curl_slist_free_all(s); }
};
struct MultiDeleter {
    void operator()(CURLM* m) const { curl_multi_cleanup(m); }
};

} // namespace

std::string toolArgumentsJson(const ChatToolCall& call) {
    if (call.arguments.find_first_not_of(" \t\r\n") == std::string::npos) return "{}";
    if (!call.argumentsAsJsonBlock) {
        const nlohmann::json parsed = parseJsonWithinLimit(call.arguments);
        if (parsed.is_object()) return call.arguments; // the JSON text the tags were read into
    }
    return nlohmann::json(call.arguments)
        .dump(-1, ' ', false, nlohmann::json::error_handler_t::replace);
}

void readToolArgumentsJson(const std::string& text, ChatToolCall& call) {
    const nlohmann::json parsed = parseJsonWithinLimit(text);
    call.argumentsAsJsonBlock = false;
    if (text.empty())
        call.arguments = "{}";
    else if (&text != &call.arguments)
        call.arguments = text;
    if (parsed.is_string()) {
        call.arguments = parsed.get<std::string>();
        call.argumentsAsJsonBlock = true;
    }
}

RemoteClient::RemoteClient(RemoteOptions options) : options_(std::move(options)) {
    std::string url = options_.baseUrl;
    const std::size_t scheme = url.find("://");
    const std::string name = scheme == std::string::npos ? "" : url.substr(0, scheme);
    if (name != "http" && name != "https")
        throw RemoteError(RemoteErrorKind::Usage,
                          "the server URL \"" + withoutUrlCredentials(url) +
                              "\" must start with http:// or https:// (for example "
                              "http://127.0.0.1:8000/v1)");
    while (!url.empty() && url.back() == '/') url.pop_back();
    if (url.size() >= 3 && url.compare(url.size() - 3, 3, "/v1") == 0) url.resize(url.size() - 3);
    const std::size_t hostStart = scheme + 3;
    const std::size_t hostEnd = url.find('/', hostStart);
    std::string host = url.substr(hostStart, hostEnd == std::string::npos ? std::string::npos
                                                                          : hostEnd - hostStart);
    if (const std::size_t at = host.rfind('@'); at != std::string::npos) host.erase(0, at + 1);
    if (host.empty() || host.find_first_of(" \t\r\n") != std::string::npos)
        throw RemoteError(RemoteErrorKind::Usage, "the server URL \"" +
                                                      withoutUrlCredentials(options_.baseUrl) +
                                                      "\" names no host");
    const std::size_t closeBracket = host.rfind(']');
    const std::size_t colon = host.rfind(':');
    const bool hasPort =
        colon != std::string::npos && (closeBracket == std::string::npos || colon > closeBracket);
    hostPort_ = hasPort ? host : host + (name == "https" ? ":443" : ":80");
    if (options_.model.empty())
        throw RemoteError(RemoteErrorKind::Usage,
                          "no model name for the server at " + withoutUrlCredentials(url) +
                              " (the \"model\" of each request; Test lists the server's models)");
    if (options_.apiKey.find_first_of("\r\n") != std::string::npos)
        throw RemoteError(RemoteErrorKind::Usage, "the API key holds a line break");
    root_ = url;
    shownRoot_ = withoutUrlCredentials(url);
}

std::string RemoteClient::requestBody(const RemoteRequest& request) const {
    nlohmann::ordered_json body;
    body["model"] = options_.model;
    nlohmann::ordered_json messages = nlohmann::ordered_json::array();
    for (const ChatMessage& m : request.messages) {
        nlohmann::ordered_json msg;
        msg["role"] = std::string(chatRoleName(m.role));
        if (m.role == ChatRole::User && !m.images.empty())
            msg["content"] = contentParts(m);
        else
            msg["content"] = m.content;
        // Earlier thinking goes back to the server, which renders it as the template says.
        if (m.role == ChatRole::Assistant && !m.reasoningContent.empty())
            msg["reasoning_content"] = m.reasoningContent;
        if (m.role == ChatRole::Assistant && !m.toolCalls.empty()) {
            nlohmann::ordered_json calls = nlohmann::ordered_json::array();
            for (const ChatToolCall& call : m.toolCalls) {
                nlohmann::ordered_json c;
                if (!call.id.empty()) c["id"] = call.id;
                c["type"] = "function";
                // A JSON text, as OpenAI's API defines it (vLLM's takes nothing else).
                c["function"] = {{"name", call.name}, {"arguments", toolArgumentsJson(call)}};
                calls.push_back(std::move(c));
            }
            msg["tool_calls"] = std::move(calls);
        }
        if (m.role == ChatRole::Tool && !m.toolCallId.empty()) msg["tool_call_id"] = m.toolCallId;
        if (!m.name.empty()) msg["name"] = m.name;
        messages.push_back(std::move(msg));
    }
    body["messages"] = std::move(messages);
    body["stream"] = true;
    body["stream_options"] = {{"include_usage", true}};
    if (request.maxTokens > 0) body["max_tokens"] = request.maxTokens;
    if (request.temperature) body["temperature"] = *request.temperature;
    if (request.topP) body["top_p"] = *request.topP;
    if (request.seed) body["seed"] = *request.seed;
    if (request.thinking) {
        // Moonshot's API reads the "thinking" object; vLLM and SGLang pass
        // chat_template_kwargs to the Kimi template and their kimi_k2 reasoning parser.
        body["thinking"] = {{"type", *request.thinking ? "enabled" : "disabled"}};
        body["chat_template_kwargs"] = {{"thinking", *request.thinking}};
    }
    if (request.reasoningEffort) body["reasoning_effort"] = *request.reasoningEffort;
    return body.dump(-1, ' ', false, nlohmann::ordered_json::error_handler_t::replace);
}

namespace {

// Runs one transfer with the multi interface, so a cancel is seen within 50 ms even
// while the server is silent (the easy interface's progress callback can wait a second).
// Returns the curl code; cancelled is set when the flag stopped it.
CURLcode perform(CURL* curl, const std::atomic<bool>* cancel, bool& cancelled) {
    std::unique_ptr<CURLM, MultiDeleter> multi(curl_multi_init());
    curl_multi_add_handle(multi.get(), curl);
    CURLcode result = CURLE_OK;
    for (;;) {
        int running = 0;
        curl_multi_perform(multi.get(), &running);
        int queued = 0;
        while (CURLMsg* msg = curl_multi_info_read(multi.get(), &queued))
            if (msg->msg == CURLMSG_DONE) result = msg->data.result;
        if (running == 0) break;
        if (cancel && cancel->load()) {
            cancelled = true;
            break;
        }
        curl_multi_poll(multi.get(), nullptr, 0, 50, nullptr);
    }
    curl_multi_remove_handle(multi.get(), curl); // closes the stream when cancelled
    return result;
}

} // namespace

namespace {

struct Prepared {
    std::unique_ptr<CURL, CurlDeleter> curl;
    std::unique_ptr<curl_slist, SlistDeleter> headers;
    char errorBuffer[CURL_ERROR_SIZE] = {};
};

void prepare(Prepared& p, const RemoteOptions& o, const std::string& url, Transfer& t) {
    ensureCurl();
    p.curl.reset(curl_easy_init());
    if (!p.curl) throw RemoteError(RemoteErrorKind::Connection, "curl_easy_init failed");
    CURL* c = p.curl.get();
    t.curl = c;
    curl_slist* h = nullptr;
    h = curl_slist_append(h, "Content-Type: application/json");
    h = curl_slist_append(h, t.sse ? "Accept: text/event-stream" : "Accept: application/json");
    if (!o.apiKey.empty()) h = curl_slist_append(h, ("Authorization: Bearer " + o.apiKey).c_str());
    p.headers.reset(h);
    curl_easy_setopt(c, CURLOPT_URL, url.c_str());
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, h);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, onBody);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(c, CURLOPT_ERRORBUFFER, p.errorBuffer);
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT_MS, long(o.connectTimeoutSeconds * 1000));
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    // A proxy from the environment would see the key; the user names the server directly.
    curl_easy_setopt(c, CURLOPT_NOPROXY, "*");
    curl_easy_setopt(c, CURLOPT_TCP_KEEPALIVE, 1L);
}

std::string statusText(long status) {
    const std::string phrase = reasonPhrase(status);
    return std::to_string(status) + (phrase.empty() ? "" : " " + phrase);
}

} // namespace

// Turns a failed transfer or a non-2xx answer into a message naming the server and the
// next step. Never includes the key (curl's error buffer does not hold headers).
static void throwForTransfer(CURLcode code, const Transfer& t, const Prepared& p,
                             const std::string& root, const std::string& hostPort,
                             const std::string& path, const std::string& model) {
    if (code == CURLE_COULDNT_RESOLVE_HOST)
        throw RemoteError(RemoteErrorKind::Connection,
                          "could not resolve the host of " + root + "; check the URL");
    if (code == CURLE_COULDNT_CONNECT) {
        long osErrno = 0;
        curl_easy_getinfo(p.curl.get(), CURLINFO_OS_ERRNO, &osErrno);
        const std::string why = osErrno == ECONNREFUSED ? "connection refused" : p.errorBuffer;
        throw RemoteError(RemoteErrorKind::Connection,
                          "could not connect to " + hostPort + ": " + why +
                              "; check that the server is running and the URL " + root +
                              " is right");
    }
    if (code == CURLE_OPERATION_TIMEDOUT && t.status == 0)
        throw RemoteError(RemoteErrorKind::Connection, "timed out connecting to " + hostPort +
                                                           "; check the URL " + root +
                                                           " and the network");
    if (code == CURLE_SSL_CONNECT_ERROR || code == CURLE_PEER_FAILED_VERIFICATION ||
        code == CURLE_SSL_CERTPROBLEM || code == CURLE_SSL_CIPHER ||
        code == CURLE_SSL_CACERT_BADFILE || code == CURLE_SSL_ISSUER_ERROR ||
        code == CURLE_USE_SSL_FAILED)
        throw RemoteError(RemoteErrorKind::Tls,
                          "the TLS connection to " + hostPort + " failed: " + p.errorBuffer +
                              "; check the server's certificate, or use http:// if the server "
                              "does not speak TLS");
    if (t.status != 0 && (t.status < 200 || t.status >= 300)) {
        const std::string said = serverMessage(t.body);
        const std::string tail = said.empty() ? "" : ": " + said;
        const std::string answered = "the server at " + root + " answered " + statusText(t.status) +
                                     (t.status == 404 ? " for " + path : "") + tail;
        switch (t.status) {
        case 401:
            throw RemoteError(RemoteErrorKind::Unauthorized, answered + "; check the API key",
                              t.status);
        case 404:
            throw RemoteError(RemoteErrorKind::NotFound,
                              answered + "; check the URL" +
                                  (model.empty() ? "" : " and the model name \"" + model + "\""),
                              t.status);
        case 429:
            throw RemoteError(RemoteErrorKind::RateLimited,
                              answered + "; it is busy, try again in a moment", t.status);
        default:
            throw RemoteError(t.status >= 500 ? RemoteErrorKind::Server : RemoteErrorKind::Http,
                              answered, t.status);
        }
    }
}

std::vector<std::string> RemoteClient::listModels(const std::atomic<bool>* cancel) const {
    Transfer t;
    t.sse = false;
    Prepared p;
    prepare(p, options_, root_ + "/v1/models", t);
    curl_easy_setopt(p.curl.get(), CURLOPT_TIMEOUT_MS, 30000L);
    bool cancelled = false;
    const CURLcode code = perform(p.curl.get(), cancel, cancelled);
    // An answer without a body never reached the write callback.
    if (t.status == 0) curl_easy_getinfo(p.curl.get(), CURLINFO_RESPONSE_CODE, &t.status);
    if (cancelled) return {};
    if (!t.error.empty()) throw RemoteError(RemoteErrorKind::Protocol, t.error);
    throwForTransfer(code, t, p, shownRoot_, hostPort_, "/v1/models", {});
    if (code != CURLE_OK)
        throw RemoteError(RemoteErrorKind::Connection,
                          "reading " + shownRoot_ + "/v1/models failed: " + p.errorBuffer);
    const nlohmann::json j = parseJsonWithinLimit(t.body);
    auto data = j.is_object() ? j.find("data") : j.end();
    if (!j.is_object() || data == j.end() || !data->is_array())
        throw RemoteError(RemoteErrorKind::Protocol,
                          "the server at " + shownRoot_ +
                              " answered /v1/models without a \"data\" list; is it an "
                              "OpenAI-compatible server?");
    std::vector<std::string> ids;
    for (const auto& m : *data)
        if (m.is_object())
            if (std::string id = stringAt(m, "id"); !id.empty()) ids.push_back(id);
    return ids;
}

RemoteReply RemoteClient::chat(const RemoteRequest& request,
                               const std::function<void(const RemoteDelta&)>& onDelta,
                               const std::atomic<bool>* cancel) const {
    Transfer t;
    t.sse = true;
    t.onDelta = &onDelta;
    t.root = shownRoot_;
    answerLimits(t, request.maxTokens);
    Prepared p;
    prepare(p, options_, root_ + "/v1/chat/completions", t);
    const std::string body = requestBody(request);
    curl_easy_setopt(p.curl.get(), CURLOPT_POSTFIELDS, body.c_str());
    curl_easy_setopt(p.curl.get(), CURLOPT_POSTFIELDSIZE, long(body.size()));
    t.start = t.lastDelta = Clock::now();
    bool cancelled = false;
    const CURLcode code = perform(p.curl.get(), cancel, cancelled);
    // An answer without a body never reached the write callback.
    if (t.status == 0) curl_easy_getinfo(p.curl.get(), CURLINFO_RESPONSE_CODE, &t.status);
    t.reply.totalSeconds = std::chrono::duration<double>(Clock::now() - t.start).count();
    if (cancelled) {
        t.reply.cancelled = true;
        return t.reply;
    }
    if (!t.error.empty()) {
        if (t.reply.deltas > 0) throw RemoteStreamError(t.errorKind, t.error, t.reply);
        throw RemoteError(t.errorKind, t.error);
    }
    throwForTransfer(code, t, p, shownRoot_, hostPort_, "/v1/chat/completions", options_.model);
    // A finish_reason is the answer's end; [DONE] alone (no finish chunk) is accepted too.
    if (t.reply.finishReason.empty() && !t.done) {
        const std::string where = "the server at " + shownRoot_ + " closed the stream early";
        if (t.reply.deltas == 0)
            throw RemoteError(RemoteErrorKind::EarlyClose,
                              where + ", before any text (no finish_reason or [DONE])");
        throw RemoteStreamError(RemoteErrorKind::EarlyClose,
                                where + ", after " + std::to_string(t.reply.deltas) +
                                    " deltas (no finish_reason or [DONE]); the partial answer "
                                    "is kept",
                                t.reply);
    }
    return t.reply;
}

} // namespace k3
