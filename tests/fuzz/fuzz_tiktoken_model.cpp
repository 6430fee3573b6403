// tiktoken.model (base64 token bytes and a rank per line). An accepted rank file must
// give a tokenizer whose decode(encode(text)) is the text.
#include "FuzzSupport.hpp"

#include <k3/tokenizer.hpp>

namespace {

constexpr std::string_view kConfig = R"({"added_tokens_decoder": {}})";

void roundTrip(const k3::Tokenizer& t, std::string_view text) {
    const auto ids = t.encode(text);
    for (k3::TokenId id : ids)
        k3fuzz::check(id >= 0 && std::size_t(id) < t.numRanks(), "encode gave an id out of range");
    k3fuzz::check(t.decode(ids) == text, "decode(encode(text)) != text");
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    try {
        const k3::Tokenizer t = k3::Tokenizer::fromText(k3fuzz::asText(data, size), kConfig);
        roundTrip(t, "Hello, world! 123 \xe4\xbd\xa0\xe5\xa5\xbd");
        roundTrip(t, "  \n\t<|open|> x");
    } catch (const k3::TokenizerError&) {
    }
    return 0;
}
