// A small state machine over streamed pieces. Every decision that could depend on
// where the stream was cut (tag names, whether stray text is only whitespace, the
// problems recorded) waits for the next special marker or finish(), so any split of the
// same text gives the same result; text known to be response is given out at once.
#include "k3/chat.hpp"

namespace k3 {

namespace {

// Headers are short ("think", "call tool=\"x\" index=\"1\""); past this the stream is
// not XTML and the text is given back rather than held.
constexpr std::size_t kMaxHeader = 1024;

std::string_view channelName(ChatOutputParser::Channel c) {
    switch (c) {
    case ChatOutputParser::Channel::Think:
        return "think";
    case ChatOutputParser::Channel::Response:
        return "response";
    case ChatOutputParser::Channel::Other:
        return "other";
    case ChatOutputParser::Channel::None:
        break;
    }
    return "none";
}

bool isAsciiBlank(std::string_view s) {
    for (char c : s)
        if (c != ' ' && c != '\n' && c != '\r' && c != '\t') return false;
    return true;
}

// Problems quote what was seen; long text is cut so a report stays readable.
std::string quoteText(std::string_view s) {
    constexpr std::size_t kMax = 40;
    std::string out = "\"";
    out += s.substr(0, kMax);
    if (s.size() > kMax) out += "...";
    out += "\"";
    return out;
}

std::string_view tagName(std::string_view header) {
    const auto space = header.find(' ');
    return space == std::string_view::npos ? header : header.substr(0, space);
}

} // namespace

ChatOutputParser::ChatOutputParser(Start start) {
    switch (start) {
    case Start::Think:
        mode_ = Mode::Channel, channel_ = Channel::Think;
        break;
    case Start::Response:
        mode_ = Mode::Channel, channel_ = Channel::Response;
        break;
    case Start::Message:
        mode_ = Mode::Message, channel_ = Channel::None;
        break;
    }
}

ChatOutputParser ChatOutputParser::forOptions(const ChatRenderOptions& options) {
    if (!options.continueChannel.empty())
        return ChatOutputParser(options.continueChannel == "think" ? Start::Think
                                                                   : Start::Response);
    return ChatOutputParser(options.thinking ? Start::Think : Start::Response);
}

ChatOutputParser::Channel ChatOutputParser::channel() const {
    return mode_ == Mode::Channel ? channel_ : Channel::None;
}

void ChatOutputParser::problem(std::string text) {
    problems_.push_back(std::move(text));
}

void ChatOutputParser::appendToChannel(std::string_view text, ChatParseDelta& delta) {
    switch (channel_) {
    case Channel::Think:
        thinking_ += text;
        delta.thinking += text;
        break;
    case Channel::Response:
    case Channel::None: // stray text is shown as response rather than lost
        response_ += text;
        delta.response += text;
        break;
    case Channel::Other:
        other_ += text;
        break;
    }
}

// Stray text that is not only whitespace is response whatever follows, so it streams as
// it comes (a model that answers outside any channel is not held to the end of the turn);
// whitespace alone waits, as it may be the harmless gap between two tags.
void ChatOutputParser::showStray(ChatParseDelta& delta) {
    if (strayShown_ == stray_.size() || isAsciiBlank(stray_)) return;
    const std::string_view unseen = std::string_view(stray_).substr(strayShown_);
    response_ += unseen;
    delta.response += unseen;
    strayShown_ = stray_.size();
}

// The problem is recorded here, at the marker, so it quotes the whole run however the
// stream was split.
void ChatOutputParser::flushStray(ChatParseDelta& delta) {
    if (stray_.empty()) return;
    showStray(delta);
    if (!isAsciiBlank(stray_))
        problem("text outside any channel " + quoteText(stray_) + " (kept as response)");
    stray_.clear();
    strayShown_ = 0;
}

ChatParseDelta ChatOutputParser::feed(const ChatSegment& piece) {
    return piece.kind == ChatSegment::Kind::Special ? feedSpecial(piece.text)
                                                    : feedText(piece.text);
}

ChatParseDelta ChatOutputParser::feedText(std::string_view text) {
    ChatParseDelta delta;
    if (text.empty()) return delta;
    switch (mode_) {
    case Mode::Channel:
        appendToChannel(text, delta);
        break;
    case Mode::Message:
    case Mode::AfterMessage:
        stray_ += text;
        showStray(delta);
        break;
    case Mode::OpenHeader:
    case Mode::CloseHeader:
        header_ += text;
        if (header_.size() > kMaxHeader) abandonHeader("no <|sep|> within 1024 bytes", delta);
        break;
    case Mode::Done:
        if (!fedAfterEnd_) problem("output after the end of the turn ignored");
        fedAfterEnd_ = true;
        break;
    }
    return delta;
}

// A header that never completed: its text goes back out as stray text.
void ChatOutputParser::abandonHeader(std::string_view why, ChatParseDelta& delta) {
    const std::string_view marker =
        mode_ == Mode::OpenHeader ? chatmarker::openMark : chatmarker::closeMark;
    problem("malformed tag " + std::string(marker) + quoteText(header_) + ": " + std::string(why));
    if (mode_ == Mode::CloseHeader && closing_ != Channel::None) {
        // The close was for an open channel: the text after it still belongs there.
        mode_ = Mode::Channel;
        channel_ = closing_;
        std::string text = std::move(header_);
        header_.clear();
        appendToChannel(text, delta);
        return;
    }
    stray_ += header_;
    header_.clear();
    mode_ = Mode::Message;
    channel_ = Channel::None;
    showStray(delta);
}

void ChatOutputParser::finishHeader(ChatParseDelta& delta) {
    const std::string header = std::move(header_);
    header_.clear();
    const std::string_view tag = tagName(header);
    if (mode_ == Mode::OpenHeader) {
        mode_ = Mode::Channel;
        otherDepth_ = 0;
        if (tag == "think") {
            channel_ = Channel::Think;
        } else if (tag == "response") {
            channel_ = Channel::Response;
        } else if (tag == "message") {
            problem("unexpected " + std::string(chatmarker::openMark) + header +
                    " inside the assistant message (ignored)");
            mode_ = Mode::Message;
            channel_ = Channel::None;
        } else {
            channel_ = Channel::Other;
            otherTag_ = std::string(tag);
            other_ += std::string(chatmarker::openMark) + header + std::string(chatmarker::sepMark);
        }
        return;
    }
    // CloseHeader
    const Channel closed = closing_;
    closing_ = Channel::None;
    if (closed == Channel::None) {
        if (tag == "message") {
            mode_ = Mode::AfterMessage;
        } else {
            problem("unexpected " + std::string(chatmarker::closeMark) + header +
                    " with no channel open (ignored)");
            mode_ = Mode::Message;
        }
        return;
    }
    const std::string expected =
        closed == Channel::Other ? otherTag_ : std::string(channelName(closed));
    if (closed == Channel::Other)
        other_ += std::string(chatmarker::closeMark) + header + std::string(chatmarker::sepMark);
    if (tag == expected) {
        mode_ = Mode::Message;
    } else if (tag == "message") {
        problem("message closed while the " + expected + " channel was open");
        mode_ = Mode::AfterMessage;
    } else {
        problem("channel " + expected + " closed as " + quoteText(tag));
        mode_ = Mode::Message;
    }
    channel_ = Channel::None;
    (void)delta;
}

void ChatOutputParser::endTurn(std::string_view marker, ChatParseDelta& delta) {
    if (mode_ == Mode::OpenHeader || mode_ == Mode::CloseHeader)
        abandonHeader("turn ended inside the tag", delta);
    flushStray(delta);
    if (mode_ == Mode::Channel && channel_ == Channel::Think)
        problem("turn ended inside the think channel (no response)");
    else if (mode_ == Mode::Channel && channel_ == Channel::Other)
        problem("turn ended inside the " + otherTag_ + " channel");
    mode_ = Mode::Done;
    channel_ = Channel::None;
    endMarker_ = std::string(marker);
    delta.endOfTurn = !marker.empty();
}

ChatParseDelta ChatOutputParser::feedSpecial(std::string_view marker) {
    ChatParseDelta delta;
    if (mode_ == Mode::Done) {
        if (!fedAfterEnd_) problem("output after the end of the turn ignored");
        fedAfterEnd_ = true;
        return delta;
    }
    if (marker == chatmarker::eos || marker == chatmarker::endOfMessage) {
        endTurn(marker, delta);
        return delta;
    }
    if (mode_ == Mode::OpenHeader || mode_ == Mode::CloseHeader) {
        if (marker == chatmarker::sepMark) {
            finishHeader(delta);
            return delta;
        }
        abandonHeader("interrupted by " + std::string(marker), delta);
        // fall through: the marker is handled in the state the header left
    }
    if (mode_ == Mode::Channel && channel_ == Channel::Other) {
        // Nested tags of an uninterpreted channel (tool calls) are kept verbatim.
        if (marker == chatmarker::openMark) ++otherDepth_;
        if (marker == chatmarker::closeMark && otherDepth_ > 0) {
            --otherDepth_;
            other_ += marker;
            return delta;
        }
        if (marker != chatmarker::closeMark) {
            other_ += marker;
            return delta;
        }
    }
    if (marker == chatmarker::openMark) {
        flushStray(delta);
        if (mode_ == Mode::Channel) {
            problem(std::string(channelName(channel_)) + " channel not closed before " +
                    std::string(chatmarker::openMark));
            mode_ = Mode::Message;
        } else if (mode_ == Mode::AfterMessage) {
            problem(std::string(chatmarker::openMark) + " after the message was closed");
        }
        mode_ = Mode::OpenHeader;
        channel_ = Channel::None;
        closing_ = Channel::None;
        return delta;
    }
    if (marker == chatmarker::closeMark) {
        flushStray(delta);
        closing_ = mode_ == Mode::Channel ? channel_ : Channel::None;
        if (mode_ == Mode::AfterMessage)
            problem(std::string(chatmarker::closeMark) + " after the message was closed");
        mode_ = Mode::CloseHeader;
        channel_ = Channel::None;
        return delta;
    }
    problem("unexpected special marker " + std::string(marker) + " (ignored)");
    return delta;
}

ChatParseDelta ChatOutputParser::finish() {
    ChatParseDelta delta;
    if (mode_ == Mode::Done) return delta;
    if (mode_ == Mode::OpenHeader || mode_ == Mode::CloseHeader)
        abandonHeader("stream ended inside the tag", delta);
    flushStray(delta);
    if (mode_ == Mode::Channel && channel_ == Channel::Think)
        problem("stream ended inside the think channel (no end of turn)");
    else
        problem("stream ended without [EOS] or <|end_of_msg|>");
    mode_ = Mode::Done;
    channel_ = Channel::None;
    return delta;
}

} // namespace k3
