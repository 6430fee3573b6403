#pragma once
// JSON spelled the way Kimi-K3.jinja spells it (Python's json.dumps through jinja2), for
// tool declarations and tool-call arguments. Shared by the renderer and the tool-call
// parser so both read and write the same text.

#include <nlohmann/json.hpp>

#include <string>
#include <string_view>

namespace k3::xtml {

// Key order kept as written: the template walks arguments in insertion order.
using Json = nlohmann::ordered_json;

// Parses `text`; nothing (a discarded value) when it is not JSON.
Json parseJson(std::string_view text);

// tojson(ensure_ascii=false): Python's default separators ", " and ": ", keys in order.
std::string pythonJson(const Json& value);

// json_sorted(): "," and ":" separators, every mapping level sorted as jinja's dictsort
// sorts (case-insensitively, ties in insertion order).
std::string sortedJson(const Json& value);

// xtml_type(): boolean, null, number, string, object or array.
std::string_view xtmlType(const Json& value);

} // namespace k3::xtml
