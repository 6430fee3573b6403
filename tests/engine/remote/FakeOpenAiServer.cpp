#include "FakeOpenAiServer.hpp"

#include <httplib.h>
#include <nlohmann/json.hpp>

#include <chrono>
#include <vector>

namespace {

using nlohmann::json;

std::string errorBody(const std::string& message, const std::string& type) {
    return json{{"error", {{"message", message}, {"type", type}, {"code", nullptr}}}}.dump();
}

std::string chunk(const std::string& model, const json& delta, const json& finish = nullptr) {
    json c = {
        {"id", "chatcmpl-test"},
        {"object", "chat.completion.chunk"},
        {"model", model},
        {"choices", json::array({{{"index", 0}, {"delta", delta}, {"finish_reason", finish}}})}};
    return "data: " + c.dump() + "\n\n";
}

// A delta and the running usage a server counting per chunk sends with it.
std::string countedChunk(const std::string& model, const json& delta, int prompt, int completion) {
    json c = json::parse(chunk(model, delta).substr(6));
    c["usage"] = {{"prompt_tokens", prompt},
                  {"completion_tokens", completion},
                  {"total_tokens", prompt + completion}};
    return "data: " + c.dump() + "\n\n";
}

std::string usageChunk(const std::string& model, int prompt, int completion) {
    json c = {{"id", "chatcmpl-test"},
              {"object", "chat.completion.chunk"},
              {"model", model},
              {"choices", json::array()},
              {"usage",
               {{"prompt_tokens", prompt},
                {"completion_tokens", completion},
                {"total_tokens", prompt + completion}}}};
    return "data: " + c.dump() + "\n\n";
}

struct Script {
    std::vector<std::string> events;
    int delayMs = 0;
    bool cut = false; // close after the events, without [DONE]
    // Then this delta again and again until the client closes the stream (at most
    // endlessCount times, so a client without a cap ends with a cut stream, not a hang).
    std::string endless;
    int endlessCount = 0;
};

Script scriptFor(const std::string& model) {
    Script s;
    if (model == "k3-think") {
        s.events = {chunk(model, {{"role", "assistant"}, {"content", ""}}),
                    chunk(model, {{"reasoning_content", "The user greets; "}}),
                    chunk(model, {{"reasoning_content", "answer briefly."}}),
                    chunk(model, {{"reasoning", " Done."}}),
                    chunk(model, {{"content", "Hello"}}),
                    chunk(model, {{"content", ", wörld"}}),
                    chunk(model, {{"content", "!"}}),
                    chunk(model, json::object(), "stop"),
                    usageChunk(model, 12, 6),
                    "data: [DONE]\n\n"};
    } else if (model == "k3-slow") {
        s.delayMs = 50;
        s.events = {chunk(model, {{"reasoning", "Counting"}}),
                    chunk(model, {{"reasoning", " slowly."}})};
        for (int i = 1; i <= 200; ++i)
            s.events.push_back(chunk(model, {{"content", std::to_string(i) + " "}}));
        s.events.push_back(chunk(model, json::object(), "stop"));
        s.events.push_back("data: [DONE]\n\n");
    } else if (model == "k3-batch") {
        // Several tokens per delta (a server streaming at an interval); usage at the end.
        s.delayMs = 20;
        s.events = {chunk(model, {{"content", "one two three"}}),
                    chunk(model, {{"content", " four five six"}}),
                    chunk(model, {{"content", " seven eight nine"}}),
                    chunk(model, {{"content", " ten eleven"}}),
                    chunk(model, json::object(), "stop"),
                    usageChunk(model, 5, 11),
                    "data: [DONE]\n\n"};
    } else if (model == "k3-batch-usage") {
        // The same, with a running usage on every chunk: 2, 3, 1 and 4 tokens.
        s.delayMs = 20;
        s.events = {countedChunk(model, {{"content", "one two"}}, 5, 2),
                    countedChunk(model, {{"content", " three four five"}}, 5, 5),
                    countedChunk(model, {{"content", " six"}}, 5, 6),
                    countedChunk(model, {{"content", " seven eight nine ten"}}, 5, 10),
                    chunk(model, json::object(), "stop"),
                    usageChunk(model, 5, 10),
                    "data: [DONE]\n\n"};
    } else if (model == "k3-tools") {
        // Two calls, the first's arguments in pieces, as vLLM streams them.
        const auto piece = [](int index, const json& fields) {
            json p = fields;
            p["index"] = index;
            return json{{"tool_calls", json::array({p})}};
        };
        s.events = {
            chunk(model, {{"reasoning_content", "Need the weather."}}),
            chunk(model, piece(0, {{"id", "call_a"},
                                   {"type", "function"},
                                   {"function", {{"name", "get_weather"}, {"arguments", ""}}}})),
            chunk(model, piece(0, {{"function", {{"arguments", "{\"city\":"}}}})),
            chunk(model, piece(0, {{"function", {{"arguments", "\"Oslo\"}"}}}})),
            chunk(model, piece(1, {{"id", "call_b"},
                                   {"type", "function"},
                                   {"function", {{"name", "clock"}}}})),
            chunk(model, json::object(), "tool_calls"),
            usageChunk(model, 20, 9),
            "data: [DONE]\n\n"};
    } else if (model == "k3-endless") {
        s.events = {chunk(model, {{"content", "again"}})};
        s.endless = chunk(model, {{"content", " and again"}});
        s.endlessCount = 200000;
        s.cut = true;
    } else if (model == "k3-endless-big") {
        // 1 MB deltas: the byte cap, whatever max_tokens said.
        s.events = {chunk(model, {{"role", "assistant"}, {"content", ""}})};
        s.endless = chunk(model, {{"content", std::string(1 << 20, 'x')}});
        s.endlessCount = 200;
        s.cut = true;
    } else if (model == "k3-cut") {
        s.events = {chunk(model, {{"reasoning_content", "Thinking"}}),
                    chunk(model, {{"content", "Partial"}}), chunk(model, {{"content", " answer"}})};
        s.cut = true;
    }
    return s;
}

} // namespace

FakeOpenAiServer::FakeOpenAiServer(std::string apiKey)
    : server_(std::make_unique<httplib::Server>()), apiKey_(std::move(apiKey)) {
    const auto authorized = [this](const httplib::Request& req, httplib::Response& res) {
        {
            std::lock_guard lock(mutex_);
            lastAuthorization_ = req.get_header_value("Authorization");
        }
        if (apiKey_.empty() || req.get_header_value("Authorization") == "Bearer " + apiKey_)
            return true;
        res.status = 401;
        res.set_content(errorBody("Invalid API key", "invalid_request_error"), "application/json");
        return false;
    };
    server_->Get(
        "/v1/models", [this, authorized](const httplib::Request& req, httplib::Response& res) {
            if (!authorized(req, res)) return;
            json data = json::array();
            for (const char* id : {"k3-think", "k3-slow", "k3-cut", "k3-batch", "k3-batch-usage"})
                data.push_back({{"id", id}, {"object", "model"}, {"owned_by", "test"}});
            res.set_content(json{{"object", "list"}, {"data", data}}.dump(), "application/json");
        });
    server_->Post("/v1/chat/completions", [this, authorized](const httplib::Request& req,
                                                             httplib::Response& res) {
        {
            std::lock_guard lock(mutex_);
            lastBody_ = req.body;
        }
        if (!authorized(req, res)) return;
        const json body = json::parse(req.body, nullptr, false);
        const std::string model = body.is_object() ? body.value("model", "") : "";
        if (model == "k3-busy") {
            res.status = 429;
            res.set_content(
                errorBody("Too many requests in the queue (8 waiting)", "rate_limit_error"),
                "application/json");
            return;
        }
        if (model == "k3-broken") {
            res.status = 500;
            res.set_content(errorBody("CUDA error: out of memory", "server_error"),
                            "application/json");
            return;
        }
        auto script = std::make_shared<Script>(scriptFor(model));
        if (script->events.empty()) {
            res.status = 404;
            res.set_content(errorBody("The model `" + model + "` does not exist.", "NotFoundError"),
                            "application/json");
            return;
        }
        ++started_;
        res.set_chunked_content_provider(
            "text/event-stream", [this, script](size_t, httplib::DataSink& sink) {
                for (const std::string& event : script->events) {
                    if (killed_.load()) return false; // the process died: no more bytes
                    // The script's pacing, part of what is tested (a slow server to stop
                    // or kill mid-answer, a server that batches at an interval): no test
                    // waits on it, they wait for the deltas and the close it leads to.
                    if (script->delayMs > 0)
                        std::this_thread::sleep_for(std::chrono::milliseconds(script->delayMs));
                    if (!sink.write(event.data(), event.size())) {
                        ++closedByClient_;
                        return false;
                    }
                }
                for (int i = 0; i < script->endlessCount; ++i) {
                    if (killed_.load()) return false;
                    if (!sink.write(script->endless.data(), script->endless.size())) {
                        ++closedByClient_;
                        return false;
                    }
                }
                if (script->cut) return false; // closed without the final chunk
                sink.done();
                return true;
            });
    });
    // Bound and listening on return: a connection made before listen_after_bind() runs
    // waits in the backlog.
    port_ = server_->bind_to_any_port("127.0.0.1");
    thread_ = std::thread([this] { server_->listen_after_bind(); });
    // stop() before the loop runs would be lost (it only acts on a running server).
    // httplib 0.11 (Debian 12) has no wait_until_ready(): the flag is polled, and the
    // loop sets it at once.
    while (!server_->is_running()) std::this_thread::sleep_for(std::chrono::milliseconds(1));
}

FakeOpenAiServer::~FakeOpenAiServer() {
    kill();
    if (thread_.joinable()) thread_.join();
}

std::string FakeOpenAiServer::url() const {
    return "http://127.0.0.1:" + std::to_string(port_) + "/v1";
}

void FakeOpenAiServer::kill() {
    killed_.store(true);
    server_->stop();
}

std::string FakeOpenAiServer::lastBody() const {
    std::lock_guard lock(mutex_);
    return lastBody_;
}

std::string FakeOpenAiServer::lastAuthorization() const {
    std::lock_guard lock(mutex_);
    return lastAuthorization_;
}
