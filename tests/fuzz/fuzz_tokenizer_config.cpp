// tokenizer_config.json (the added tokens), with the tiny model's rank file. Every
// added token accepted must encode to its own id and decode back to its spelling.
#include "FuzzFiles.hpp"

#include <k3/tokenizer.hpp>

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    static const std::string ranks = k3fuzz::fixture("models/k3_tiny_a/tiktoken.model");
    try {
        const k3::Tokenizer t = k3::Tokenizer::fromText(ranks, k3fuzz::asText(data, size));
        k3fuzz::check(t.vocabSize() == t.numRanks() + t.addedTokens().size(), "vocab size");
        std::size_t checked = 0;
        for (const k3::AddedToken& a : t.addedTokens()) {
            if (++checked > 64) break; // enough: a config may hold thousands
            k3fuzz::check(t.tokenId(a.content) == a.id, "tokenId(content) != id");
            k3fuzz::check(t.tokenBytes(a.id) == a.content, "tokenBytes(id) != content");
            const auto ids = t.encodeWithSpecial("a" + a.content + "b");
            k3fuzz::check(t.decode(ids) == "a" + a.content + "b", "special round trip");
        }
        const std::string text = "plain <|open|> text";
        k3fuzz::check(t.decode(t.encode(text)) == text, "decode(encode(text)) != text");
    } catch (const k3::TokenizerError&) {
    }
    return 0;
}
