// POST /v1/chat/completions bodies through the request parser, which also renders the
// prompt (tools, tool calls, arguments). The first byte picks where the rest goes: the
// whole body as sent, or nested N levels deep (N from the byte, up to 2,000, past
// kMaxJsonDepth) as a tool's parameters, a tool call's arguments object or its
// arguments JSON string, so deep inputs run on every input, not only when mutation
// finds them. The parser promises: refuse with ApiError only, never accept a body
// nested past the limit, and never run out of stack.
#include "FuzzSupport.hpp"

#include <k3/api.hpp>
#include <k3/json_limits.hpp>

#include <string>

namespace {

std::string nested(std::string_view inner, std::size_t depth) {
    return std::string(depth, '[') + std::string(inner) + std::string(depth, ']');
}

// `text` as the body of a JSON string.
std::string asJsonStringBody(std::string_view text) {
    std::string out;
    for (const char c : text) {
        if (c == '"' || c == '\\') out += '\\';
        if (static_cast<unsigned char>(c) < 0x20) {
            out += ' ';
            continue;
        }
        out += c;
    }
    return out;
}

std::string body(std::uint8_t mode, std::string_view rest) {
    const std::size_t depth = std::size_t(mode >> 2) * 32; // 0..2016
    const std::string deep = nested(rest, depth);
    const std::string user = R"({"role":"user","content":"x"})";
    switch (mode & 3) {
    case 1:
        return R"({"messages":[)" + user +
               R"(],"tools":[{"type":"function","function":{"name":"f","parameters":)" + deep +
               "}}]}";
    case 2:
        return R"({"messages":[)" + user +
               R"(,{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":)"
               R"({"name":"f","arguments":{"a":)" +
               deep + "}}}]}]}";
    case 3:
        return R"({"messages":[)" + user +
               R"(,{"role":"assistant","tool_calls":[{"id":"c","type":"function","function":)"
               R"({"name":"f","arguments":"{\"a\":)" +
               asJsonStringBody(deep) + R"(}"}}]}]})";
    default:
        return std::string(rest);
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 1) return 0;
    const std::string text = body(data[0], k3fuzz::asText(data + 1, size - 1));
    try {
        const k3::api::ChatRequest r = k3::api::parseChatRequest(text);
        k3fuzz::check(!k3::jsonTooDeepAt(text), "a body nested past the limit was accepted");
        for (const auto& m : r.messages)
            for (const auto& call : m.toolCalls) // a json block is text, never parsed
                k3fuzz::check(call.argumentsAsJsonBlock || !k3::jsonTooDeepAt(call.arguments),
                              "tool-call arguments nested past the limit were accepted");
    } catch (const k3::api::ApiError&) {
    }
    return 0;
}
