// Renders a conversation the way Kimi-K3.jinja does, restricted to what a text chat
// needs. Each branch below names the template macro it mirrors.
#include "k3/chat.hpp"

#include "chat/TemplateEscape.hpp"
#include "chat/XtmlJson.hpp"

#include <algorithm>
#include <array>
#include <cstdint>

namespace k3 {

std::string_view chatRoleName(ChatRole role) {
    switch (role) {
    case ChatRole::System:
        return "system";
    case ChatRole::User:
        return "user";
    case ChatRole::Assistant:
        return "assistant";
    case ChatRole::Tool:
        return "tool";
    }
    return "unknown";
}

std::optional<ChatRole> parseChatRole(std::string_view name) {
    for (ChatRole r : {ChatRole::System, ChatRole::User, ChatRole::Assistant, ChatRole::Tool})
        if (chatRoleName(r) == name) return r;
    return std::nullopt;
}

namespace {

// Python's str.isspace(): the set jinja's `trim` filter strips.
bool isPythonSpace(std::uint32_t cp) {
    if ((cp >= 0x09 && cp <= 0x0D) || (cp >= 0x1C && cp <= 0x20)) return true;
    if (cp == 0x85 || cp == 0xA0 || cp == 0x1680) return true;
    if (cp >= 0x2000 && cp <= 0x200A) return true;
    return cp == 0x2028 || cp == 0x2029 || cp == 0x202F || cp == 0x205F || cp == 0x3000;
}

// Decodes one UTF-8 sequence at s[i]; returns its length, or 0 when malformed.
std::size_t decodeUtf8(std::string_view s, std::size_t i, std::uint32_t& cp) {
    const auto b = static_cast<unsigned char>(s[i]);
    std::size_t len = b < 0x80           ? 1
                      : (b >> 5) == 0x6  ? 2
                      : (b >> 4) == 0xE  ? 3
                      : (b >> 3) == 0x1E ? 4
                                         : 0;
    if (len == 0 || i + len > s.size()) return 0;
    cp = len == 1 ? b : len == 2 ? (b & 0x1F) : len == 3 ? (b & 0x0F) : (b & 0x07);
    for (std::size_t k = 1; k < len; ++k) {
        const auto c = static_cast<unsigned char>(s[i + k]);
        if ((c & 0xC0) != 0x80) return 0;
        cp = (cp << 6) | (c & 0x3F);
    }
    return len;
}

// True when jinja's `value|string|trim` would be empty. Only leading characters need
// checking: the text is blank exactly when every character is a space.
bool isBlankAsPython(std::string_view s) {
    std::size_t i = 0;
    while (i < s.size()) {
        std::uint32_t cp = 0;
        const std::size_t len = decodeUtf8(s, i, cp);
        if (len == 0 || !isPythonSpace(cp)) return false;
        i += len;
    }
    return true;
}

class SegmentWriter {
public:
    void text(std::string_view t) {
        if (t.empty()) return;
        if (segments_.empty() || segments_.back().kind != ChatSegment::Kind::Text)
            segments_.push_back({ChatSegment::Kind::Text, {}});
        segments_.back().text += t;
    }
    void special(std::string_view marker) {
        segments_.push_back({ChatSegment::Kind::Special, std::string(marker)});
    }
    // open_tag(tag, attrs)
    void openTag(std::string_view tag,
                 std::initializer_list<std::pair<std::string_view, std::string>> attrs = {}) {
        special(chatmarker::openMark);
        text(tag);
        for (const auto& [key, value] : attrs) {
            text(" ");
            text(key);
            text("=\"");
            text(chat::escapeTemplateAttribute(value));
            text("\"");
        }
        special(chatmarker::sepMark);
    }
    // close_tag(tag)
    void closeTag(std::string_view tag) {
        special(chatmarker::closeMark);
        text(tag);
        special(chatmarker::sepMark);
    }
    void endOfMessage() { special(chatmarker::endOfMessage); }
    std::vector<ChatSegment> take() { return std::move(segments_); }

private:
    std::vector<ChatSegment> segments_;
};

constexpr std::array<std::string_view, 4> kEfforts = {"low", "medium", "high", "max"};

// A user message's content with each image placeholder replaced by the next image's
// prompt, as the template's next_image() does (the markers are special tokens).
void writeContentWithImages(SegmentWriter& w, const ChatMessage& m) {
    std::size_t at = 0, used = 0;
    for (;;) {
        const std::size_t next = m.content.find(kImagePlaceholder, at);
        w.text(std::string_view(m.content).substr(at, next - at));
        if (next == std::string::npos) break;
        if (used == m.images.size())
            throw ChatError("chat render: more image placeholders than images in a user message");
        if (!m.images[used].image) throw ChatError("chat render: an empty image in a user message");
        const ImagePlan& plan = m.images[used++].image->plan;
        w.special("<|media_begin|>");
        w.text("image " + std::to_string(plan.width) + "x" + std::to_string(plan.height));
        w.special("<|media_content|>");
        w.special(kMediaPadToken);
        w.special("<|media_end|>");
        at = next + kImagePlaceholder.size();
    }
    if (used != m.images.size())
        throw ChatError("chat render: image prompt count " + std::to_string(m.images.size()) +
                        " != consumed placeholder count " + std::to_string(used));
}

void writePlainMessage(SegmentWriter& w, const ChatMessage& m) {
    if (m.name.empty())
        w.openTag("message", {{"role", std::string(chatRoleName(m.role))}});
    else
        w.openTag("message", {{"role", std::string(chatRoleName(m.role))}, {"name", m.name}});
    if (!m.images.empty() && m.role != ChatRole::User)
        throw ChatError("chat render: only user messages carry images");
    if (m.images.empty())
        w.text(m.content);
    else
        writeContentWithImages(w, m);
    w.closeTag("message");
    w.endOfMessage();
}

// render_tool_declare(tools): the declarations as json_sorted writes them.
void writeToolDeclare(SegmentWriter& w, const std::string& toolsJson) {
    const xtml::Json tools = xtml::parseJson(toolsJson);
    if (tools.is_discarded()) throw ChatError("chat render: tools is not valid JSON");
    if (tools.empty()) return; // `tools is defined and tools`: an empty list declares nothing
    w.openTag("message", {{"role", "system"}, {"type", "tool-declare"}});
    w.text("# Tools\nHere are the available tools, described in JSONSchema.\n\n```json\n");
    w.text(xtml::sortedJson(tools));
    w.text("\n```");
    w.closeTag("message");
    w.endOfMessage();
}

// The tools channel of render_assistant.
void writeToolCalls(SegmentWriter& w, const std::vector<ChatToolCall>& calls) {
    w.openTag("tools");
    for (std::size_t i = 0; i < calls.size(); ++i) {
        const ChatToolCall& call = calls[i];
        w.openTag("call", {{"tool", call.name}, {"index", std::to_string(i + 1)}});
        const xtml::Json args = call.argumentsAsJsonBlock
                                    ? xtml::Json(xtml::Json::value_t::discarded)
                                    : xtml::parseJson(call.arguments);
        if (args.is_object()) {
            for (const auto& [key, value] : args.items()) {
                w.openTag("argument", {{"key", key}, {"type", std::string(xtml::xtmlType(value))}});
                w.text(value.is_string() ? value.get<std::string>() : xtml::pythonJson(value));
                w.closeTag("argument");
            }
        } else if (!isBlankAsPython(call.arguments)) {
            // A string that is not a mapping goes in verbatim, as the template's string form.
            w.openTag("json", {{"type", "object"}});
            w.text(call.arguments);
            w.closeTag("json");
        }
        w.closeTag("call");
    }
    w.closeTag("tools");
}

void writeInternalSystem(SegmentWriter& w, std::string_view type, std::string_view body) {
    w.openTag("message", {{"role", "system"}, {"type", std::string(type)}});
    w.text(body);
    w.closeTag("message");
    w.endOfMessage();
}

// The template's response-format message.
void writeResponseFormat(SegmentWriter& w, const ChatRenderOptions& options) {
    const std::string_view rawJson = "Your response must be raw JSON data without markdown code "
                                     "blocks (```json) or any additional formatting.";
    if (options.responseFormat == "json_object") {
        writeInternalSystem(w, "response-format",
                            "The system is invoked with `response_format=json_object`.\n" +
                                std::string(rawJson));
    } else if (options.responseFormat == "json_schema") {
        const xtml::Json schema = xtml::parseJson(options.responseSchemaJson);
        if (schema.is_discarded())
            throw ChatError("chat render: the response schema is not valid JSON");
        writeInternalSystem(w, "response-format",
                            "The system is invoked with `response_format=json_schema`.\n" +
                                std::string(rawJson) +
                                "\nThe JSON data must match the following schema:\n```json\n" +
                                xtml::sortedJson(schema) + "\n```");
    }
}

// render_tool_message: the name given, else the message's own, else the call at the
// same position of the last assistant message.
void writeToolMessage(SegmentWriter& w, const ChatMessage& m, std::size_t at, int& toolIndex,
                      const std::vector<ChatToolCall>* calls, const std::string* resolvedName) {
    ++toolIndex;
    std::string name = resolvedName ? *resolvedName : m.name;
    if (!resolvedName && name.empty() && calls && toolIndex <= int(calls->size()))
        name = (*calls)[std::size_t(toolIndex - 1)].name;
    if (name.empty())
        throw ChatError("chat render: message " + std::to_string(at) +
                        " (role tool) has no tool name: give it a name, or a tool_call_id "
                        "or position matching a call of the assistant message before it");
    w.openTag("message", {{"role", "tool"}, {"tool", name}, {"index", std::to_string(toolIndex)}});
    w.text(m.content);
    w.closeTag("message");
    w.endOfMessage();
}

bool callMatches(const std::vector<ChatToolCall>* calls, const std::string& id) {
    if (!calls || id.empty()) return false;
    for (const ChatToolCall& c : *calls)
        if (!c.id.empty() && c.id == id) return true;
    return false;
}

// A run of consecutive tool messages starting at `first`: in the order of the calls
// when every result names a call of the last assistant message, else as given.
std::size_t writeToolRun(SegmentWriter& w, const std::vector<ChatMessage>& messages,
                         std::size_t first, int& toolIndex,
                         const std::vector<ChatToolCall>* calls) {
    std::size_t end = first;
    std::size_t resolved = 0;
    while (end < messages.size() && messages[end].role == ChatRole::Tool) {
        resolved += callMatches(calls, messages[end].toolCallId);
        ++end;
    }
    if (resolved == end - first) {
        std::vector<std::string> emitted;
        for (const ChatToolCall& call : *calls) {
            if (call.id.empty() ||
                std::find(emitted.begin(), emitted.end(), call.id) != emitted.end())
                continue;
            emitted.push_back(call.id);
            for (std::size_t i = first; i < end; ++i)
                if (messages[i].toolCallId == call.id)
                    writeToolMessage(w, messages[i], i, toolIndex, calls, &call.name);
        }
    } else {
        for (std::size_t i = first; i < end; ++i)
            writeToolMessage(w, messages[i], i, toolIndex, calls, nullptr);
    }
    return end;
}

// render_assistant up to its response text, left open in `channel` ("think": the
// reasoning, to be continued; anything else: the response). Earlier turns keep their
// reasoning while thinking is on.
void writeOpenAssistantMessage(SegmentWriter& w, const ChatMessage& m, bool thinking,
                               const std::string& channel) {
    if (m.name.empty())
        w.openTag("message", {{"role", "assistant"}});
    else
        w.openTag("message", {{"role", "assistant"}, {"name", m.name}});
    if (thinking) {
        w.openTag("think");
        if (!isBlankAsPython(m.reasoningContent)) w.text(m.reasoningContent);
        if (channel == "think") return;
        w.closeTag("think");
    }
    w.openTag("response");
    w.text(m.content);
}

// The whole message: the open one, closed, with its tool calls.
void writeAssistantMessage(SegmentWriter& w, const ChatMessage& m, bool thinking) {
    writeOpenAssistantMessage(w, m, thinking, "response");
    w.closeTag("response");
    if (!m.toolCalls.empty()) writeToolCalls(w, m.toolCalls);
    w.closeTag("message");
    w.endOfMessage();
}

} // namespace

std::vector<ChatSegment> renderChatSegments(const std::vector<ChatMessage>& messages,
                                            const ChatRenderOptions& options) {
    const bool thinking = options.thinking;
    bool effortMessage = false;
    if (thinking && options.thinkingEffort) {
        const std::string& effort = *options.thinkingEffort;
        bool known = false;
        for (auto e : kEfforts) known = known || e == effort;
        if (!known)
            throw ChatError("chat render: unsupported thinking_effort=" + effort +
                            "; supported values are low, medium, high, and max");
        effortMessage = true;
    }

    SegmentWriter w;
    if (!options.toolsJson.empty()) writeToolDeclare(w, options.toolsJson);
    if (effortMessage) {
        // internal_system_message('thinking-effort', ...)
        w.openTag("message", {{"role", "system"}, {"type", "thinking-effort"}});
        w.text("`thinking_effort` guides on how much to think in your thinking channel (not "
               "including the response channel), supported values include `low`, `medium`, "
               "`high`, and `max`.\nNow the system is invoked with `thinking_effort=");
        w.text(*options.thinkingEffort);
        w.text("`.");
        w.closeTag("message");
        w.endOfMessage();
    }

    if (!options.continueChannel.empty() &&
        (messages.empty() || messages.back().role != ChatRole::Assistant ||
         !messages.back().toolCalls.empty()))
        throw ChatError("chat render: only a last assistant message without tool calls can be "
                        "continued");
    // state.tool_index and state.tool_calls: reset by each assistant message, read by
    // the tool messages after it.
    int toolIndex = 0;
    const std::vector<ChatToolCall>* calls = nullptr;
    for (std::size_t i = 0; i < messages.size();) {
        const ChatMessage& m = messages[i];
        switch (m.role) {
        case ChatRole::User:
        case ChatRole::System:
            writePlainMessage(w, m);
            break;
        case ChatRole::Assistant:
            toolIndex = 0;
            calls = m.toolCalls.empty() ? nullptr : &m.toolCalls;
            if (!options.continueChannel.empty() && i + 1 == messages.size()) {
                writeOpenAssistantMessage(w, m, thinking, options.continueChannel);
                return w.take();
            }
            writeAssistantMessage(w, m, thinking);
            break;
        case ChatRole::Tool:
            i = writeToolRun(w, messages, i, toolIndex, calls);
            continue;
        }
        ++i;
    }

    if (options.toolChoice == "required")
        writeInternalSystem(w, "tool-choice",
                            "The system is invoked with `tool_choice=required`.\nYou MUST call "
                            "tools in the next message.");
    else if (options.toolChoice == "none")
        writeInternalSystem(w, "tool-choice",
                            "The system is invoked with `tool_choice=none`.\nYou MUST NOT call "
                            "any tools in the next message.");

    writeResponseFormat(w, options);

    if (options.addGenerationPrompt) {
        w.openTag("message", {{"role", "assistant"}});
        w.openTag(thinking ? "think" : "response");
    }
    return w.take();
}

bool ChatImage::operator==(const ChatImage& other) const {
    if (!image || !other.image) return image == other.image && file == other.file;
    return image->plan.width == other.image->plan.width &&
           image->plan.height == other.image->plan.height && image->patches == other.image->patches;
}

std::string renderChat(const std::vector<ChatMessage>& messages, const ChatRenderOptions& options) {
    std::string out;
    for (const ChatSegment& s : renderChatSegments(messages, options)) out += s.text;
    return out;
}

} // namespace k3
