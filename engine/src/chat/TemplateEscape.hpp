#pragma once
// The chat template's escape_attr (Kimi-K3.jinja): only & and " are escaped in attribute
// values. One definition for the renderer and the output constraint, which must write
// the same bytes the renderer does.

#include <string>
#include <string_view>

namespace k3::chat {

inline std::string escapeTemplateAttribute(std::string_view value) {
    std::string out;
    out.reserve(value.size());
    for (const char c : value) {
        if (c == '&')
            out += "&amp;";
        else if (c == '"')
            out += "&quot;";
        else
            out += c;
    }
    return out;
}

} // namespace k3::chat
