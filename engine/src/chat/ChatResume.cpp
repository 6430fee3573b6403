#include "chat/ChatResume.hpp"

#include <algorithm>

namespace k3::chat {

std::optional<ResumePoint>
resumeAfterStoppedAnswer(const Tokenizer& tokenizer, const std::vector<ChatMessage>& history,
                         const ChatMessage& reply, const ChatRenderOptions& options,
                         std::span<const TokenId> prompt, std::span<const TokenId> fed,
                         std::span<const TokenId> answerIds) {
    if (answerIds.empty() || !reply.toolCalls.empty()) return std::nullopt;
    if (fed.size() != prompt.size() + answerIds.size() ||
        !std::equal(prompt.begin(), prompt.end(), fed.begin()) ||
        !std::equal(answerIds.begin(), answerIds.end(),
                    fed.begin() + std::ptrdiff_t(prompt.size())))
        return std::nullopt;
    ChatRenderOptions closed = options;
    closed.addGenerationPrompt = false;
    const std::size_t before = renderChatSegments(history, closed).size();
    std::vector<ChatMessage> withReply = history;
    withReply.push_back(reply);
    ResumePoint point;
    point.segments = renderChatSegments(withReply, closed);
    // Where the answer stopped: still thinking (no tag generated yet), or in the response.
    // The response channel is reached through generated tags, the last one a separator.
    const bool thinking = options.thinking && reply.content.empty();
    // Other added tokens (reserved ones a model should not write) are text to the parser.
    const auto special = std::find_if(answerIds.rbegin(), answerIds.rend(), [&](TokenId id) {
        if (!tokenizer.isAddedToken(id)) return false;
        const std::string_view b = tokenizer.tokenBytes(id);
        return b == chatmarker::openMark || b == chatmarker::closeMark ||
               b == chatmarker::sepMark || b == chatmarker::endOfMessage;
    });
    if (thinking || !options.thinking) {
        if (special != answerIds.rend()) return std::nullopt;
    } else if (special == answerIds.rend() || special == answerIds.rbegin() ||
               tokenizer.tokenBytes(*special) != chatmarker::sepMark) {
        return std::nullopt; // a response must have text after its opening tag
    }
    // The message's closing tags from that channel's close tag on.
    const std::string_view channel = thinking ? "think" : "response";
    std::size_t close = point.segments.size();
    for (std::size_t i = before; i + 1 < point.segments.size(); ++i)
        if (point.segments[i] ==
                ChatSegment{ChatSegment::Kind::Special, std::string(chatmarker::closeMark)} &&
            point.segments[i + 1] == ChatSegment{ChatSegment::Kind::Text, std::string(channel)}) {
            close = i;
            break;
        }
    if (close == point.segments.size()) return std::nullopt;
    point.ids.assign(prompt.begin(), prompt.end());
    point.ids.insert(point.ids.end(), answerIds.begin(), answerIds.end());
    const std::vector<ChatSegment> closing(point.segments.begin() + std::ptrdiff_t(close),
                                           point.segments.end());
    const std::vector<TokenId> closingIds = encodeChatSegments(tokenizer, closing);
    point.ids.insert(point.ids.end(), closingIds.begin(), closingIds.end());
    ChatRenderOptions open = options;
    open.continueChannel = std::string(channel);
    point.openSegments = renderChatSegments(withReply, open);
    point.openIds.assign(fed.begin(), fed.end());
    point.promptSize = prompt.size();
    return point;
}

std::vector<TokenId> encodeResuming(const Tokenizer& tokenizer,
                                    const std::vector<ChatMessage>& history,
                                    const ChatRenderOptions& options,
                                    std::span<const ResumePoint> points) {
    const std::vector<ChatSegment> segments = renderChatSegments(history, options);
    if (!options.continueChannel.empty())
        for (const ResumePoint& p : points)
            if (!p.openIds.empty() && p.openSegments == segments) return p.openIds;
    const ResumePoint* resume = nullptr;
    for (const ResumePoint& p : points)
        if (p.segments.size() <= segments.size() &&
            std::equal(p.segments.begin(), p.segments.end(), segments.begin()) &&
            (!resume || p.segments.size() > resume->segments.size()))
            resume = &p;
    if (!resume) return encodeChatSegments(tokenizer, segments);
    std::vector<TokenId> ids = resume->ids;
    const std::vector<ChatSegment> rest(segments.begin() + std::ptrdiff_t(resume->segments.size()),
                                        segments.end());
    const std::vector<TokenId> restIds = encodeChatSegments(tokenizer, rest);
    ids.insert(ids.end(), restIds.begin(), restIds.end());
    return ids;
}

} // namespace k3::chat
