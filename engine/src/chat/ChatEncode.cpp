// The one place chat text meets token ids: specials only from the renderer's segments.
#include "k3/chat.hpp"

namespace k3 {

std::vector<TokenId> encodeChatSegments(const Tokenizer& tokenizer,
                                        const std::vector<ChatSegment>& segments) {
    std::vector<TokenId> ids;
    for (const ChatSegment& s : segments) {
        if (s.kind == ChatSegment::Kind::Special) {
            const auto id = tokenizer.tokenId(s.text);
            if (!id)
                throw ChatError("chat encode: the tokenizer has no special token " + s.text +
                                " (check added_tokens_decoder in tokenizer_config.json)");
            ids.push_back(*id);
        } else {
            const auto text = tokenizer.encode(s.text);
            ids.insert(ids.end(), text.begin(), text.end());
        }
    }
    return ids;
}

} // namespace k3
