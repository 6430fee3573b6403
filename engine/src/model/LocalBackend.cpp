// The local side of k3::ChatBackend: a Session, as it is.

#include "k3/backend.hpp"
#include "k3/chat.hpp"

#include <filesystem>

namespace k3 {

namespace {

class LocalBackend : public ChatBackend {
public:
    LocalBackend(Session session, std::string location)
        : session_(std::move(session)), location_(std::move(location)) {}

    BackendInfo info() const override {
        BackendInfo i;
        i.location = location_;
        i.modelName = std::filesystem::path(location_).filename().string();
        i.summary = session_.config().summary();
        i.layers = session_.model().layersBound();
        i.vocabSize = session_.config().vocabSize;
        i.weightBytes = session_.model().weightBytes();
        return i;
    }
    GenerateResult chat(const std::vector<ChatMessage>& history, const GenerateOptions& options,
                        SessionObserver* observer, const std::atomic<bool>* cancel) override {
        return session_.chat(history, options, observer, cancel);
    }
    void reset() override { session_.reset(); }
    int forgetSavedStates(const std::vector<ChatMessage>& history) override {
        return session_.forgetSavedStates(history);
    }
    StateCacheUsage savedStateUsage(const std::vector<ChatMessage>& history) const override {
        return session_.savedStateUsage(history);
    }
    std::optional<MemoryReport> memoryReport() const override { return session_.memoryReport(); }
    std::optional<int> promptPositions(const std::vector<ChatMessage>& history,
                                       const ChatRenderOptions& render) const override {
        if (!session_.hasTokenizer()) return std::nullopt;
        return int(
            encodeChatSegments(session_.tokenizer(), renderChatSegments(history, render)).size());
    }

    std::optional<int> positionsToRead(const std::vector<ChatMessage>& history,
                                       const ChatRenderOptions& render) const override {
        if (!session_.hasTokenizer()) return std::nullopt;
        return session_.positionsToRead(history, render);
    }

private:
    Session session_;
    std::string location_;
};

} // namespace

std::unique_ptr<ChatBackend> wrapSession(Session session, std::string location) {
    return std::make_unique<LocalBackend>(std::move(session), std::move(location));
}

std::unique_ptr<ChatBackend> openLocalBackend(const LaunchConfig& config) {
    return wrapSession(Session::open(config), config.modelDir.string());
}

} // namespace k3
