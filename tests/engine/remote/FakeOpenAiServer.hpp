#pragma once
// A scripted OpenAI-compatible server for tests (cpp-httplib on 127.0.0.1, a free port).
// The request's "model" picks the script:
//   k3-think  reasoning_content x2, reasoning x1, content x3, finish "stop", usage, [DONE]
//   k3-slow   reasoning x2 then content x200, one every 50 ms (cancel, stop)
//   k3-cut    reasoning x1, content x2, then the connection closes (no finish, no [DONE])
//   k3-batch  content x4 holding 11 tokens (several per delta), usage 11 at the end
//   k3-batch-usage  content x4 with a running usage on each chunk (2, 3, 1, 4 tokens)
//   k3-tools  reasoning, then two tool calls in pieces, finish "tool_calls" (not listed)
//   k3-endless  content " and again" without end (200,000 deltas, then a cut)
//   k3-endless-big  1 MB content deltas without end (200, then a cut)
//   k3-busy   429 with an OpenAI JSON error body
//   k3-broken 500 with an OpenAI JSON error body
//   anything else: 404 "The model `NAME` does not exist."
// With a key set, requests without "Authorization: Bearer KEY" get 401. kill() drops
// every stream mid-answer, as a server that dies does.

#include <atomic>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

namespace httplib {
class Server;
}

class FakeOpenAiServer {
public:
    explicit FakeOpenAiServer(std::string apiKey = {});
    ~FakeOpenAiServer();

    int port() const { return port_; }
    std::string url() const; // "http://127.0.0.1:PORT/v1"
    void kill();             // streams end at their next delta; the port closes

    std::string lastBody() const;
    std::string lastAuthorization() const;
    int streamsStarted() const { return started_.load(); }
    int streamsClosedByClient() const { return closedByClient_.load(); }

private:
    std::unique_ptr<httplib::Server> server_;
    std::thread thread_;
    int port_ = 0;
    std::string apiKey_;
    std::atomic<bool> killed_{false};
    std::atomic<int> started_{0};
    std::atomic<int> closedByClient_{0};
    mutable std::mutex mutex_;
    std::string lastBody_;
    std::string lastAuthorization_;
};
