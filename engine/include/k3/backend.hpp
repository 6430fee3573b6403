#pragma once
// What a front end chats with: a local k3::Session, or an OpenAI-compatible server
// through k3::RemoteClient, behind one interface. Both report tokens to the same
// SessionObserver, so the app's worker and the CLI's REPL do not know which one runs.
// Used from one thread at a time; cancel is the only thing another thread touches.

#include "k3/remote.hpp"
#include "k3/session.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace k3 {

struct BackendInfo {
    bool remote = false;
    std::string location;  // the model folder, or the server's URL
    std::string modelName; // the folder's name, or the model the server is asked for
    std::string summary;   // config summary (local) or "remote: URL"
    int layers = 0;        // local only (0 remote)
    int vocabSize = 0;
    std::uint64_t weightBytes = 0;
};

class ChatBackend {
public:
    virtual ~ChatBackend() = default;
    virtual BackendInfo info() const = 0;
    // Session::chat's contract. A remote backend sends each arriving delta to
    // observer->onToken as one TokenEvent (id 0; timing.computeSeconds: the time since
    // the previous delta, the whole wait for the first), never calls onMemory, and
    // returns a stream that broke after some text as a result with `interruption` set.
    virtual GenerateResult chat(const std::vector<ChatMessage>& history,
                                const GenerateOptions& options, SessionObserver* observer,
                                const std::atomic<bool>* cancel) = 0;
    virtual void reset() = 0;
    // Session::forgetSavedStates; a server keeps its own states (0).
    virtual int forgetSavedStates(const std::vector<ChatMessage>&) { return 0; }
    // Session::savedStateUsage; nothing kept here for a server.
    virtual StateCacheUsage savedStateUsage(const std::vector<ChatMessage>&) const { return {}; }
    // The memory figures of a local session; nothing for a server (it plans its own).
    virtual std::optional<MemoryReport> memoryReport() const = 0;
    // The prompt positions `history` renders to with `render`, generation prompt
    // included: what reading it costs when nothing of it is held. Nothing for a server
    // (its tokenizer is not here), nor without a tokenizer. Throws ChatError as rendering.
    virtual std::optional<int> promptPositions(const std::vector<ChatMessage>&,
                                               const ChatRenderOptions&) const {
        return std::nullopt;
    }
    // Session::positionsToRead; nothing for a server (its cache is its own).
    virtual std::optional<int> positionsToRead(const std::vector<ChatMessage>&,
                                               const ChatRenderOptions&) const {
        return std::nullopt;
    }
};

std::unique_ptr<ChatBackend> openLocalBackend(const LaunchConfig& config);
// Sessions already opened (the CLI checks and opens its own) are wrapped as they are.
std::unique_ptr<ChatBackend> wrapSession(Session session, std::string location);
// Checks the URL and the model name (RemoteError Usage); connects only when chatting.
std::unique_ptr<ChatBackend> openRemoteBackend(const RemoteOptions& options);

} // namespace k3
