#pragma once
// The Kimi tokenizer: byte-level BPE read from the checkpoint's tiktoken.model, the Kimi
// pre-tokenizer regex, and the special tokens of tokenizer_config.json.
//
// Invariants that, when broken, give a tokenizer that works on ASCII and diverges elsewhere
// (each is tested against the real tiktoken in tests/engine/tokenizer/):
//  - merge keys are BYTES, never code points; a rank file line that decodes as valid UTF-8
//    is still only its bytes;
//  - ranks come from the file, lowest rank merges first (leftmost on a tie);
//  - special tokens follow the ranks (id = number of ranks + index) and are recognised only
//    by encodeWithSpecial(): "<|open|>" typed by a user is ordinary text.
//
// Input is UTF-8 bytes. Invalid sequences are replaced by U+FFFD exactly as the WHATWG
// TextDecoder does (one U+FFFD per maximal subpart), which is what a JavaScript string
// handed to tiktoken would contain.

#include "k3/error.hpp"
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace k3 {

using TokenId = std::int32_t;

// Any tokenizer failure: unreadable or malformed files (the message names file and line),
// an id outside the vocabulary.
class TokenizerError : public Error {
public:
    explicit TokenizerError(const std::string& message) : Error(ErrorKind::Tokenizer, message) {}
};

struct AddedToken {
    TokenId id;
    std::string content;
    bool special;
};

class Tokenizer {
public:
    // Reads DIR/tiktoken.model and DIR/tokenizer_config.json.
    static Tokenizer fromDirectory(const std::filesystem::path& dir);
    static Tokenizer fromFiles(const std::filesystem::path& tiktokenModel,
                               const std::filesystem::path& tokenizerConfig);
    // The same from memory; the names are only used in error messages.
    static Tokenizer fromText(std::string_view tiktokenModel, std::string_view configJson,
                              std::string_view modelName = "tiktoken.model",
                              std::string_view configName = "tokenizer_config.json");

    // Ordinary text: special-token spellings are encoded as the text they are.
    std::vector<TokenId> encode(std::string_view utf8) const;
    // Prompt text built by the chat renderer: every added token's spelling becomes its id.
    std::vector<TokenId> encodeWithSpecial(std::string_view utf8) const;

    // Raw bytes of the ids (may end inside a UTF-8 sequence). Throws on an unknown id.
    std::string decode(std::span<const TokenId> ids) const;
    std::string_view tokenBytes(TokenId id) const;

    std::optional<TokenId> tokenId(std::string_view addedTokenContent) const;
    const std::vector<AddedToken>& addedTokens() const;
    bool isAddedToken(TokenId id) const;
    std::size_t numRanks() const;  // ordinary BPE tokens: ids [0, numRanks)
    std::size_t vocabSize() const; // numRanks + added tokens (with reserved gaps filled)

    struct Impl;

private:
    explicit Tokenizer(std::shared_ptr<const Impl> impl) : impl_(std::move(impl)) {}
    std::shared_ptr<const Impl> impl_; // immutable, so copies are cheap and thread-safe
};

// Turns a stream of ids into text without ever showing half a character: an incomplete
// UTF-8 sequence at the end is held back until the next id completes it. Output is always
// valid UTF-8 (invalid bytes become U+FFFD, as a streaming TextDecoder would give).
class StreamDecoder {
public:
    explicit StreamDecoder(const Tokenizer& tokenizer) : tokenizer_(&tokenizer) {}
    std::string push(TokenId id);
    std::string push(std::span<const TokenId> ids);
    // The held-back tail (as U+FFFD if it never completed); the decoder is then empty.
    std::string flush();
    std::size_t pendingBytes() const { return pending_.size(); }

private:
    const Tokenizer* tokenizer_;
    std::string pending_;
};

// WHATWG UTF-8 decode-with-replacement, re-encoded as UTF-8. Valid input is returned as is.
std::string sanitizeUtf8(std::string_view bytes);
bool isValidUtf8(std::string_view bytes);

} // namespace k3
