// The remote side of k3::ChatBackend: each arriving delta becomes a TokenEvent, so the
// think block, the answer and the per-token timing fill exactly as with a local model.

#include "k3/backend.hpp"

namespace k3 {

namespace {

class RemoteBackend : public ChatBackend {
public:
    explicit RemoteBackend(const RemoteOptions& options) : client_(options) {}

    BackendInfo info() const override {
        BackendInfo i;
        i.remote = true;
        i.location = client_.serverUrl();
        i.modelName = client_.options().model;
        i.summary = "remote: " + client_.serverUrl();
        return i;
    }

    GenerateResult chat(const std::vector<ChatMessage>& history, const GenerateOptions& options,
                        SessionObserver* observer, const std::atomic<bool>* cancel) override {
        RemoteRequest request;
        request.messages = history;
        request.maxTokens = options.maxTokens;
        request.temperature = options.sampling.temperature;
        if (options.sampling.temperature > 0) {
            request.topP = options.sampling.topP;
            request.seed = options.sampling.seed;
        }
        request.thinking = options.render.thinking;
        if (options.render.thinking && options.render.thinkingEffort)
            request.reasoningEffort = *options.render.thinkingEffort;
        const auto onDelta = [observer](const RemoteDelta& d) {
            if (!observer) return;
            TokenEvent e;
            e.index = d.index;
            e.thinkingDelta = d.reasoning;
            e.responseDelta = d.content;
            // The server's compute and the network are one figure from here.
            e.timing.computeSeconds = d.secondsSincePrevious;
            e.tokens = d.tokens;
            observer->onToken(e);
        };
        GenerateResult r;
        RemoteReply reply;
        try {
            reply = client_.chat(request, onDelta, cancel);
        } catch (const RemoteStreamError& broken) {
            // The server itself said the answer failed (k3 serve's RUN INVALID among
            // others): what arrived is not an answer to keep, so it is an error.
            if (broken.remoteKind() == RemoteErrorKind::Server)
                throw RemoteError(broken.remoteKind(), broken.what());
            reply = broken.partial();
            r.interruption = broken.what();
        }
        r.reply.role = ChatRole::Assistant;
        r.reply.content = reply.content;
        r.reply.reasoningContent = reply.reasoning;
        r.reply.toolCalls = reply.toolCalls;
        for (ChatToolCall& call : r.reply.toolCalls) readToolArgumentsJson(call.arguments, call);
        r.model = reply.model.empty() ? client_.options().model : reply.model;
        r.reply.model = r.model;
        r.promptTokens = std::max(reply.promptTokens, 0);
        r.remoteTokens = reply.completionTokens >= 0 ? reply.completionTokens : reply.deltas;
        r.endOfTurn = reply.finishReason == "stop" || reply.finishReason == "tool_calls";
        r.cancelled = reply.cancelled;
        r.prefillSeconds = reply.firstDeltaSeconds;
        r.decodeSeconds = std::max(0.0, reply.totalSeconds - reply.firstDeltaSeconds);
        if (!reply.finishReason.empty() && reply.finishReason != "stop" &&
            reply.finishReason != "length" && reply.finishReason != "tool_calls")
            r.problems.push_back("the server finished with \"" + reply.finishReason + "\"");
        return r;
    }

    void reset() override {} // the server keeps no conversation of ours
    std::optional<MemoryReport> memoryReport() const override { return std::nullopt; }

private:
    RemoteClient client_;
};

} // namespace

std::unique_ptr<ChatBackend> openRemoteBackend(const RemoteOptions& options) {
    return std::make_unique<RemoteBackend>(options);
}

} // namespace k3
