// Reads the tools channel the model writes (the shape render_assistant gives it) back
// into calls: <|open|>tools<|sep|> then per call <|open|>call tool="NAME" index="N"<|sep|>
// with <|open|>argument key="K" type="T"<|sep|>VALUE<|close|>argument<|sep|> tags or one
// <|open|>json type="object"<|sep|>TEXT<|close|>json<|sep|> block, <|close|>call<|sep|>.
#include "k3/chat.hpp"

#include "chat/XtmlJson.hpp"

#include <map>

namespace k3 {

namespace {

struct Tag {
    std::string name;
    std::map<std::string, std::string> attrs;
};

// The template's escape_attr undone (only &amp; and &quot; are written).
std::string unescapeAttr(std::string_view v) {
    std::string out;
    for (std::size_t i = 0; i < v.size();) {
        if (v.substr(i, 5) == "&amp;") {
            out += '&';
            i += 5;
        } else if (v.substr(i, 6) == "&quot;") {
            out += '"';
            i += 6;
        } else {
            out += v[i++];
        }
    }
    return out;
}

// `name key="v" key2="w"`; false when an attribute is malformed.
bool parseHeader(std::string_view header, Tag& tag) {
    std::size_t i = header.find(' ');
    tag.name = std::string(header.substr(0, i));
    while (i != std::string_view::npos && i < header.size()) {
        while (i < header.size() && header[i] == ' ') ++i;
        if (i >= header.size()) break;
        const std::size_t eq = header.find("=\"", i);
        if (eq == std::string_view::npos) return false;
        const std::size_t close = header.find('"', eq + 2);
        if (close == std::string_view::npos) return false;
        tag.attrs[std::string(header.substr(i, eq - i))] =
            unescapeAttr(header.substr(eq + 2, close - eq - 2));
        i = close + 1;
    }
    return true;
}

class Reader {
public:
    explicit Reader(std::string_view text) : s_(text) {}

    bool atEnd() const { return at_ >= s_.size(); }
    bool startsWith(std::string_view what) const { return s_.substr(at_).starts_with(what); }

    // <|open|>HEADER<|sep|>
    bool openTag(Tag& tag) {
        if (!startsWith(chatmarker::openMark)) return false;
        const std::size_t h = at_ + chatmarker::openMark.size();
        const std::size_t sep = s_.find(chatmarker::sepMark, h);
        if (sep == std::string_view::npos || !parseHeader(s_.substr(h, sep - h), tag)) return false;
        at_ = sep + chatmarker::sepMark.size();
        return true;
    }
    // <|close|>NAME<|sep|>
    bool closeTag(std::string_view name) {
        const std::string want = std::string(chatmarker::closeMark) + std::string(name) +
                                 std::string(chatmarker::sepMark);
        if (!startsWith(want)) return false;
        at_ += want.size();
        return true;
    }
    // Text up to the close of `name` (which is consumed); false when it never closes.
    bool textUntilClose(std::string_view name, std::string& text) {
        const std::string want = std::string(chatmarker::closeMark) + std::string(name) +
                                 std::string(chatmarker::sepMark);
        const std::size_t end = s_.find(want, at_);
        if (end == std::string_view::npos) return false;
        text = std::string(s_.substr(at_, end - at_));
        at_ = end + want.size();
        return true;
    }
    void skipBlank() {
        while (at_ < s_.size() &&
               (s_[at_] == ' ' || s_[at_] == '\n' || s_[at_] == '\t' || s_[at_] == '\r'))
            ++at_;
    }
    void skipTo(std::string_view what) {
        const std::size_t next = s_.find(what, at_);
        at_ = next == std::string_view::npos ? s_.size() : next;
    }
    void skipToEnd() { at_ = s_.size(); }

private:
    std::string_view s_;
    std::size_t at_ = 0;
};

// One call's body up to its <|close|>call<|sep|>; false when malformed.
bool readCall(Reader& r, ChatToolCall& call, std::string& why) {
    xtml::Json args = xtml::Json::object();
    bool jsonBlock = false;
    for (;;) {
        r.skipBlank();
        if (r.closeTag("call")) break;
        Tag tag;
        if (!r.openTag(tag))
            return why = "expected an argument, a json block or the call's close", false;
        std::string value;
        if (!r.textUntilClose(tag.name, value))
            return why = "the " + tag.name + " tag is never closed", false;
        if (tag.name == "json") {
            call.arguments = value;
            jsonBlock = true;
        } else if (tag.name == "argument") {
            const auto key = tag.attrs.find("key");
            if (key == tag.attrs.end()) return why = "an argument without a key", false;
            const auto type = tag.attrs.find("type");
            if (type == tag.attrs.end() || type->second == "string") {
                args[key->second] = value;
            } else {
                xtml::Json parsed = xtml::parseJson(value);
                if (parsed.is_discarded())
                    return why = "argument " + key->second + " of type " + type->second +
                                 " is not JSON",
                           false;
                args[key->second] = std::move(parsed);
            }
        } else {
            return why = "unexpected tag " + tag.name + " inside a call", false;
        }
    }
    if (jsonBlock) {
        call.argumentsAsJsonBlock = true; // rendered back as the block it was
    } else {
        call.arguments = args.dump(-1, ' ', false, xtml::Json::error_handler_t::replace);
    }
    return true;
}

} // namespace

std::vector<ChatToolCall> parseToolCalls(std::string_view otherChannels,
                                         std::vector<std::string>* problems) {
    std::vector<ChatToolCall> calls;
    auto problem = [&](std::string text) {
        if (problems) problems->push_back("tool call: " + std::move(text));
    };
    Reader r(otherChannels);
    while (!r.atEnd()) {
        Tag channel;
        if (!r.openTag(channel)) {
            problem("unreadable channel text");
            break;
        }
        if (channel.name != "tools") { // another uninterpreted channel: not ours
            r.skipTo(std::string(chatmarker::closeMark) + channel.name +
                     std::string(chatmarker::sepMark));
            r.closeTag(channel.name);
            continue;
        }
        for (;;) {
            r.skipBlank();
            if (r.atEnd() || r.closeTag("tools")) break;
            Tag tag;
            if (!r.openTag(tag) || tag.name != "call") {
                problem("expected a call inside the tools channel");
                r.skipToEnd();
                break;
            }
            ChatToolCall call;
            call.name = tag.attrs.count("tool") ? tag.attrs["tool"] : std::string();
            std::string why;
            if (call.name.empty()) {
                problem("a call without a tool name (skipped)");
                r.skipTo(std::string(chatmarker::closeMark) + "call");
                r.closeTag("call");
                continue;
            }
            if (!readCall(r, call, why)) {
                problem("call of " + call.name + " skipped: " + why);
                r.skipTo(std::string(chatmarker::closeMark) + "call");
                r.closeTag("call");
                continue;
            }
            calls.push_back(std::move(call));
        }
    }
    return calls;
}

} // namespace k3
