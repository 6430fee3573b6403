// JSON schemas (response_format, tool parameters, --json-schema) through the schema
// compiler, then a text through the compiled grammar. The input is the schema, a NUL
// byte, and the text. The compiler promises to refuse with SchemaError only (nesting,
// size and counts bounded); the grammar promises to accept only JSON: what it accepts,
// nlohmann parses.
#include "FuzzSupport.hpp"

#include <k3/constraint.hpp>
#include <k3/grammar.hpp>

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view input = k3fuzz::asText(data, size);
    const std::size_t split = input.find('\0');
    const std::string_view schema = input.substr(0, split);
    const std::string_view text =
        split == std::string_view::npos ? std::string_view() : input.substr(split + 1);
    std::optional<k3::JsonGrammar> grammar;
    try {
        grammar = k3::JsonGrammar::fromSchema(schema);
    } catch (const k3::SchemaError&) {
        return 0;
    }
    if (!k3::grammar::matches(grammar->data(), text)) return 0;
    const auto parsed = nlohmann::json::parse(text, nullptr, false);
    k3fuzz::check(!parsed.is_discarded(), "the grammar accepted a text that is no JSON");
    return 0;
}
