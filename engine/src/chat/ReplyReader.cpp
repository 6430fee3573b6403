// Generated ids -> channels and tool calls: the one reading of the model's output.
#include "k3/chat.hpp"

namespace k3 {

ReplyReader::ReplyReader(const Tokenizer& tokenizer, const ChatRenderOptions& options)
    : tokenizer_(&tokenizer), parser_(ChatOutputParser::forOptions(options)), decoder_(tokenizer) {}

ChatParseDelta ReplyReader::push(TokenId id) {
    if (!tokenizer_->isAddedToken(id)) return parser_.feedText(decoder_.push(id));
    // Text held back for an incomplete UTF-8 sequence belongs before the marker.
    const ChatParseDelta before = parser_.feedText(decoder_.flush());
    ChatParseDelta delta = parser_.feedSpecial(tokenizer_->tokenBytes(id));
    delta.thinking = before.thinking + delta.thinking;
    delta.response = before.response + delta.response;
    return delta;
}

ChatParseDelta ReplyReader::finish() {
    ChatParseDelta tail = parser_.feedText(decoder_.flush());
    const ChatParseDelta released = parser_.finish();
    tail.thinking += released.thinking;
    tail.response += released.response;
    return tail;
}

ChatMessage ReplyReader::reply(std::vector<std::string>& problems) {
    parser_.finish(); // nothing when the turn ended
    ChatMessage m;
    m.role = ChatRole::Assistant;
    m.content = parser_.response();
    m.reasoningContent = parser_.thinking();
    problems.insert(problems.end(), parser_.problems().begin(), parser_.problems().end());
    m.toolCalls = parseToolCalls(parser_.otherChannels(), &problems);
    return m;
}

} // namespace k3
