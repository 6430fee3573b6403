#pragma once
// The nesting limit for JSON read from outside (requests, model files, trunk and draft
// descriptions, transcripts, hub and remote answers): one source of truth. nlohmann's
// dump(), the prompt renderer's walks and simdjson's skip recurse once per level, so a
// deep text runs a thread out of stack; the limit is checked on the text, before any
// parser builds a value from it.

#include <cstddef>
#include <optional>
#include <string>
#include <string_view>

namespace k3 {

// Arrays and objects nested deeper than this are refused. A tool's JSON Schema needs a
// few dozen levels; every file and answer the engine reads needs fewer than ten.
inline constexpr std::size_t kMaxJsonDepth = 64;

// The byte of `text` that opens an array or object deeper than kMaxJsonDepth, counting
// brackets outside strings; nothing when the text stays within the limit. Not a
// validator: the parser that runs next says whether the text is JSON.
std::optional<std::size_t> jsonTooDeepAt(std::string_view text);

// "JSON nested deeper than 64 levels of arrays and objects (at byte N)", or nothing when
// `text` is within the limit: for messages that already name the file or field.
std::optional<std::string> jsonDepthProblem(std::string_view text);

// The field that byte `offset` of `text` lies in, spelled as a client writes it
// (messages[1].tool_calls[0].function.arguments); at most `maxParts` parts, then "...".
// Empty at the top level. Keys are cut to 64 bytes, control characters shown as '?'.
std::string jsonPathAt(std::string_view text, std::size_t offset, std::size_t maxParts = 8);

// Where `text` stops being JSON and why, as nlohmann's parser says it (without building
// a value, so any depth is safe); nothing when it is JSON. For error paths.
struct JsonSyntaxError {
    std::size_t byte;
    std::string why;
};
std::optional<JsonSyntaxError> jsonSyntaxError(std::string_view text);

} // namespace k3
