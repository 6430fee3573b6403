#include "k3/tokenizer.hpp"
#include "k3/json_limits.hpp"
#include "k3/read_file.hpp"

#include "tokenizer/Base64.hpp"
#include "tokenizer/BytePairMerge.hpp"
#include "tokenizer/Pcre2Regex.hpp"
#include "tokenizer/Utf8.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cctype>
#include <charconv>
#include <fstream>
#include <limits>
#include <map>
#include <sstream>

namespace k3 {

// Added tokens may leave gaps (the Kimi loader fills them with reserved names) but a config
// that puts one absurdly far away is a broken file, not a reason to allocate gigabytes.
constexpr std::size_t kMaxAddedTokenSpan = 1 << 20;

struct Tokenizer::Impl {
    std::string arena;                  // every token's bytes, back to back
    std::vector<std::uint32_t> offsets; // token id -> [offsets[id], offsets[id + 1])
    std::size_t numRanks = 0;
    detail::RankTable table;
    std::vector<AddedToken> added;
    std::vector<char> isAdded; // indexed by id
    std::unordered_map<std::string, TokenId> addedByContent;
    std::unique_ptr<detail::Pcre2Regex> pieces;
    std::unique_ptr<detail::Pcre2Regex> specials; // null when there are no added tokens

    std::string_view bytes(TokenId id) const {
        return std::string_view(arena).substr(offsets[id], offsets[id + 1] - offsets[id]);
    }
    void encodeOrdinary(std::string_view text, std::vector<TokenId>& out) const {
        pieces->forEachMatch(text, [&](std::size_t b, std::size_t e) {
            detail::bytePairEncode(text.substr(b, e - b), table, out);
        });
    }
};

namespace {

std::string readFile(const std::filesystem::path& path) {
    try {
        return readRegularFile(path, kMaxTokenizerFileBytes, "tokenizer file");
    } catch (const FileReadError& e) {
        throw TokenizerError(std::string("tokenizer: ") + e.what());
    }
}

std::string where(std::string_view file, std::size_t line) {
    return std::string(file) + ":" + std::to_string(line) + ": ";
}

struct RankLine {
    std::string bytes;
    std::size_t line;
};

// Parses `base64 rank` lines. Returns the token bytes indexed by rank.
std::vector<RankLine> parseRanks(std::string_view text, std::string_view name) {
    std::vector<RankLine> byRank;
    std::vector<char> seen;
    std::size_t lineNo = 0;
    std::size_t pos = 0;
    while (pos < text.size()) {
        std::size_t eol = text.find('\n', pos);
        if (eol == std::string_view::npos) eol = text.size();
        std::string_view line = text.substr(pos, eol - pos);
        pos = eol + 1;
        ++lineNo;
        if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
        if (line.empty()) continue; // tiktoken skips blank lines too
        const std::size_t space = line.find(' ');
        if (space == std::string_view::npos || line.find(' ', space + 1) != std::string_view::npos)
            throw TokenizerError(where(name, lineNo) + "expected 'base64 rank', got '" +
                                 std::string(line.substr(0, 80)) + "'");
        const std::string_view b64 = line.substr(0, space);
        const std::string_view rankText = line.substr(space + 1);
        std::uint32_t rank = 0;
        const auto [end, ec] =
            std::from_chars(rankText.data(), rankText.data() + rankText.size(), rank);
        if (ec != std::errc() || end != rankText.data() + rankText.size() ||
            rank > static_cast<std::uint32_t>(std::numeric_limits<TokenId>::max() / 2))
            throw TokenizerError(where(name, lineNo) + "bad rank '" + std::string(rankText) + "'");
        auto bytes = detail::decodeBase64(b64);
        if (!bytes || bytes->empty())
            throw TokenizerError(where(name, lineNo) + "bad base64 '" +
                                 std::string(b64.substr(0, 80)) + "'");
        if (rank >= byRank.size()) {
            // Ranks are dense in a valid file, so growing to `rank` is bounded by the file size.
            if (rank > text.size())
                throw TokenizerError(
                    where(name, lineNo) + "rank " + std::to_string(rank) +
                    " is larger than the file could hold: ranks must be 0, 1, 2, ...");
            byRank.resize(rank + 1);
            seen.resize(rank + 1, 0);
        }
        if (seen[rank])
            throw TokenizerError(where(name, lineNo) + "duplicate rank " + std::to_string(rank) +
                                 " (first on line " + std::to_string(byRank[rank].line) + ")");
        seen[rank] = 1;
        byRank[rank] = {std::move(*bytes), lineNo};
    }
    if (byRank.empty()) throw TokenizerError(std::string(name) + ": no ranks");
    for (std::size_t r = 0; r < byRank.size(); ++r) {
        if (!seen[r]) {
            const std::size_t highest = byRank.size() - 1;
            throw TokenizerError(std::string(name) + ": ranks are not contiguous: rank " +
                                 std::to_string(r) + " is missing (rank " +
                                 std::to_string(highest) + " is on line " +
                                 std::to_string(byRank[highest].line) + ")");
        }
    }
    return byRank;
}

std::vector<AddedToken> parseAddedTokens(std::string_view text, std::string_view name,
                                         std::size_t numRanks) {
    if (const auto deep = jsonDepthProblem(text))
        throw TokenizerError(std::string(name) + ": " + *deep);
    nlohmann::json config;
    try {
        config = nlohmann::json::parse(text);
    } catch (const nlohmann::json::exception& e) {
        throw TokenizerError(std::string(name) + ": not valid JSON: " + e.what());
    }
    if (!config.is_object() || !config.contains("added_tokens_decoder") ||
        !config["added_tokens_decoder"].is_object())
        throw TokenizerError(std::string(name) + ": missing object 'added_tokens_decoder'");
    std::map<std::size_t, AddedToken> byId;
    for (const auto& [key, value] : config["added_tokens_decoder"].items()) {
        const std::string field = std::string(name) + ": added_tokens_decoder[\"" + key + "\"]";
        std::size_t id = 0;
        const auto [end, ec] = std::from_chars(key.data(), key.data() + key.size(), id);
        if (ec != std::errc() || end != key.data() + key.size())
            throw TokenizerError(field + ": the key is not a token id");
        if (id < numRanks)
            throw TokenizerError(field + ": id " + key + " collides with a BPE rank (the " +
                                 std::to_string(numRanks) + " ranks come first)");
        if (id - numRanks >= kMaxAddedTokenSpan)
            throw TokenizerError(field + ": id " + key + " is implausibly far past the ranks");
        if (!value.is_object() || !value.contains("content") || !value["content"].is_string())
            throw TokenizerError(field + ": missing string 'content'");
        const std::string content = value["content"].get<std::string>();
        if (content.empty() || !isValidUtf8(content))
            throw TokenizerError(field + ": 'content' must be non-empty UTF-8");
        bool special = true;
        if (value.contains("special")) {
            if (!value["special"].is_boolean())
                throw TokenizerError(field + ": 'special' must be true or false");
            special = value["special"].get<bool>();
        }
        byId[id] = {static_cast<TokenId>(id), content, special};
    }
    // The markers the config names (a string, or an object with "content") must be tokens
    // of this vocabulary: a name that is none would never be produced or recognised.
    for (const char* key : {"bos_token", "eos_token"}) {
        if (!config.contains(key) || config[key].is_null()) continue;
        const nlohmann::json& v = config[key];
        const nlohmann::json* content = v.is_object() && v.contains("content") ? &v["content"] : &v;
        if (!content->is_string())
            throw TokenizerError(std::string(name) + ": '" + key +
                                 "' must be a string or an object with a string 'content'");
        const std::string text = content->get<std::string>();
        const bool known = std::any_of(byId.begin(), byId.end(),
                                       [&](const auto& e) { return e.second.content == text; });
        if (!known)
            throw TokenizerError(std::string(name) + ": " + key + " \"" + text +
                                 "\" names no token of added_tokens_decoder");
    }
    std::vector<AddedToken> out;
    if (byId.empty()) return out;
    // Ids without an entry are reserved, named as the Kimi loader names them.
    const std::size_t last = byId.rbegin()->first;
    for (std::size_t id = numRanks; id <= last; ++id) {
        const auto it = byId.find(id);
        if (it != byId.end())
            out.push_back(it->second);
        else
            out.push_back(
                {static_cast<TokenId>(id), "<|reserved_token_" + std::to_string(id) + "|>", true});
    }
    return out;
}

std::string escapeLiteral(std::string_view text) {
    std::string out;
    for (const char c : text) {
        const auto u = static_cast<unsigned char>(c);
        if (u < 0x80 && !std::isalnum(u)) out.push_back('\\');
        out.push_back(c);
    }
    return out;
}

} // namespace

Tokenizer Tokenizer::fromDirectory(const std::filesystem::path& dir) {
    return fromFiles(dir / "tiktoken.model", dir / "tokenizer_config.json");
}

Tokenizer Tokenizer::fromFiles(const std::filesystem::path& tiktokenModel,
                               const std::filesystem::path& tokenizerConfig) {
    // Read in order, so a directory missing both names the rank file.
    const std::string model = readFile(tiktokenModel);
    const std::string config = readFile(tokenizerConfig);
    return fromText(model, config, tiktokenModel.string(), tokenizerConfig.string());
}

Tokenizer Tokenizer::fromText(std::string_view tiktokenModel, std::string_view configJson,
                              std::string_view modelName, std::string_view configName) {
    auto impl = std::make_shared<Impl>();
    const std::vector<RankLine> byRank = parseRanks(tiktokenModel, modelName);
    impl->numRanks = byRank.size();
    {
        // Checked before the config is read, so a broken rank file is reported first.
        std::unordered_map<std::string_view, std::size_t> firstRank;
        firstRank.reserve(byRank.size());
        for (std::size_t r = 0; r < byRank.size(); ++r) {
            const auto [it, inserted] = firstRank.emplace(byRank[r].bytes, r);
            if (!inserted)
                throw TokenizerError(where(modelName, byRank[r].line) + "token bytes repeat rank " +
                                     std::to_string(it->second) + " (line " +
                                     std::to_string(byRank[it->second].line) + ")");
        }
    }
    impl->added = parseAddedTokens(configJson, configName, impl->numRanks);

    std::size_t total = 0;
    for (const auto& r : byRank) total += r.bytes.size();
    for (const auto& a : impl->added) total += a.content.size();
    if (total > std::numeric_limits<std::uint32_t>::max())
        throw TokenizerError(std::string(modelName) + ": vocabulary larger than 4 GB");
    impl->arena.reserve(total);
    impl->offsets.reserve(byRank.size() + impl->added.size() + 1);
    for (const auto& r : byRank) {
        impl->offsets.push_back(static_cast<std::uint32_t>(impl->arena.size()));
        impl->arena += r.bytes;
    }
    for (const auto& a : impl->added) {
        impl->offsets.push_back(static_cast<std::uint32_t>(impl->arena.size()));
        impl->arena += a.content;
    }
    impl->offsets.push_back(static_cast<std::uint32_t>(impl->arena.size()));

    auto& table = impl->table;
    table.ranks.reserve(byRank.size());
    std::fill(std::begin(table.byteRank), std::end(table.byteRank), -1);
    for (std::size_t id = 0; id < byRank.size(); ++id) {
        const std::string_view bytes = impl->bytes(static_cast<TokenId>(id));
        table.ranks.emplace(bytes, static_cast<TokenId>(id));
        table.maxTokenBytes = std::max(table.maxTokenBytes, bytes.size());
        if (bytes.size() == 1)
            table.byteRank[static_cast<unsigned char>(bytes[0])] = static_cast<TokenId>(id);
    }
    for (int b = 0; b < 256; ++b) {
        if (table.byteRank[b] < 0)
            throw TokenizerError(std::string(modelName) + ": byte 0x" +
                                 std::string(1, "0123456789abcdef"[b >> 4]) +
                                 std::string(1, "0123456789abcdef"[b & 15]) +
                                 " has no rank; a byte-level BPE needs all 256 single bytes");
    }

    impl->isAdded.assign(impl->offsets.size() - 1, 0);
    std::vector<const AddedToken*> longestFirst;
    for (const auto& a : impl->added) {
        impl->isAdded[static_cast<std::size_t>(a.id)] = 1;
        if (!impl->addedByContent.emplace(a.content, a.id).second)
            throw TokenizerError(std::string(configName) + ": added token '" + a.content +
                                 "' appears twice (ids " +
                                 std::to_string(impl->addedByContent[a.content]) + " and " +
                                 std::to_string(a.id) + ")");
        longestFirst.push_back(&a);
    }
    impl->pieces = std::make_unique<detail::Pcre2Regex>(detail::kimiPattern());
    if (!longestFirst.empty()) {
        // Longest first, so a token that is a prefix of another never wins the overlap.
        std::stable_sort(longestFirst.begin(), longestFirst.end(),
                         [](auto* a, auto* b) { return a->content.size() > b->content.size(); });
        std::string alternation;
        for (const AddedToken* a : longestFirst) {
            if (!alternation.empty()) alternation += '|';
            alternation += escapeLiteral(a->content);
        }
        impl->specials = std::make_unique<detail::Pcre2Regex>(alternation);
    }
    return Tokenizer(std::move(impl));
}

std::vector<TokenId> Tokenizer::encode(std::string_view utf8) const {
    std::vector<TokenId> out;
    out.reserve(utf8.size() / 3 + 1);
    if (isValidUtf8(utf8)) {
        impl_->encodeOrdinary(utf8, out);
    } else {
        impl_->encodeOrdinary(sanitizeUtf8(utf8), out);
    }
    return out;
}

std::vector<TokenId> Tokenizer::encodeWithSpecial(std::string_view utf8) const {
    std::string clean;
    if (!isValidUtf8(utf8)) {
        clean = sanitizeUtf8(utf8);
        utf8 = clean;
    }
    std::vector<TokenId> out;
    out.reserve(utf8.size() / 3 + 1);
    if (!impl_->specials) {
        impl_->encodeOrdinary(utf8, out);
        return out;
    }
    // Text between added tokens is pre-tokenized on its own, as tiktoken does.
    std::size_t done = 0;
    impl_->specials->forEachMatch(utf8, [&](std::size_t b, std::size_t e) {
        impl_->encodeOrdinary(utf8.substr(done, b - done), out);
        out.push_back(impl_->addedByContent.at(std::string(utf8.substr(b, e - b))));
        done = e;
    });
    impl_->encodeOrdinary(utf8.substr(done), out);
    return out;
}

std::string_view Tokenizer::tokenBytes(TokenId id) const {
    if (id < 0 || static_cast<std::size_t>(id) + 1 >= impl_->offsets.size())
        throw TokenizerError("token id " + std::to_string(id) +
                             " is outside the vocabulary (size " + std::to_string(vocabSize()) +
                             ")");
    return impl_->bytes(id);
}

std::string Tokenizer::decode(std::span<const TokenId> ids) const {
    std::string out;
    for (const TokenId id : ids) out += tokenBytes(id);
    return out;
}

std::optional<TokenId> Tokenizer::tokenId(std::string_view addedTokenContent) const {
    const auto it = impl_->addedByContent.find(std::string(addedTokenContent));
    if (it == impl_->addedByContent.end()) return std::nullopt;
    return it->second;
}

const std::vector<AddedToken>& Tokenizer::addedTokens() const {
    return impl_->added;
}

bool Tokenizer::isAddedToken(TokenId id) const {
    return id >= 0 && static_cast<std::size_t>(id) < impl_->isAdded.size() &&
           impl_->isAdded[static_cast<std::size_t>(id)];
}

std::size_t Tokenizer::numRanks() const {
    return impl_->numRanks;
}
std::size_t Tokenizer::vocabSize() const {
    return impl_->offsets.size() - 1;
}

std::string StreamDecoder::push(TokenId id) {
    return push(std::span<const TokenId>(&id, 1));
}

std::string StreamDecoder::push(std::span<const TokenId> ids) {
    for (const TokenId id : ids) pending_ += tokenizer_->tokenBytes(id);
    std::string out;
    const std::size_t used = detail::decodeUtf8Replacing(pending_, out, false);
    pending_.erase(0, used);
    return out;
}

std::string StreamDecoder::flush() {
    std::string out;
    detail::decodeUtf8Replacing(pending_, out, true);
    pending_.clear();
    return out;
}

} // namespace k3
