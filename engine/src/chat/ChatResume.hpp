#pragma once
// A stopped answer in the next prompt. The app keeps a stopped answer in the history, and
// the template renders it back as text followed by its closing tags. Re-encoding that text
// need not give the ids the model generated (a character cut in half by Stop becomes
// U+FFFD, and BPE merges differently from what was sampled), and the state, which holds
// the generated ids, cannot be rewound to where they differ. So the answer's place in
// the next prompt is spelled with the ids the state holds, then the closing tags: the
// follow-up reads only what is new.

#include "k3/chat.hpp"
#include "k3/tokenizer.hpp"

#include <optional>
#include <span>
#include <vector>

namespace k3::chat {

struct ResumePoint {
    std::vector<ChatSegment> segments; // the conversation with the stopped answer, closed
    std::vector<TokenId> ids;          // the prompt and answer ids fed, the closing tags
    // The same answer continued (ChatRenderOptions::continueChannel, its channel left
    // open): the render, and the ids fed (the prompt, then the answer's, no closing tags);
    // the answer's ids start at promptSize.
    std::vector<ChatSegment> openSegments;
    std::vector<TokenId> openIds;
    std::size_t promptSize = 0;
};

// After an answer stopped mid-way: the resume point, or nothing when the state (`fed`)
// does not hold `prompt` then every id of `answerIds`, or when the answer's channel
// cannot be told from its ids (a tag cut in half, a tool call): the next prompt is then
// encoded as usual.
std::optional<ResumePoint>
resumeAfterStoppedAnswer(const Tokenizer& tokenizer, const std::vector<ChatMessage>& history,
                         const ChatMessage& reply, const ChatRenderOptions& options,
                         std::span<const TokenId> prompt, std::span<const TokenId> fed,
                         std::span<const TokenId> answerIds);

// `history` rendered and encoded, with a resume point's ids standing for its segments
// when the render begins with them (the longest such point of `points`). A continued
// answer (options.continueChannel) that is a point's stopped answer, as it stopped, is
// that point's openIds: the state holds them, so nothing is read again.
std::vector<TokenId> encodeResuming(const Tokenizer& tokenizer,
                                    const std::vector<ChatMessage>& history,
                                    const ChatRenderOptions& options,
                                    std::span<const ResumePoint> points);

} // namespace k3::chat
