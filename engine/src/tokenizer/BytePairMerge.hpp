#pragma once
// Byte-level BPE over one pre-tokenized piece: repeatedly join the adjacent pair whose
// concatenated BYTES have the lowest rank (leftmost on a tie), exactly as tiktoken does,
// but in O(n log n) with per-rank buckets and a linked list, so a megabyte-long piece
// stays fast.

#include "k3/tokenizer.hpp"

#include <string_view>
#include <unordered_map>
#include <vector>

namespace k3::detail {

struct RankTable {
    std::unordered_map<std::string_view, TokenId> ranks; // views into the vocabulary arena
    TokenId byteRank[256] = {};                          // every single byte is a token
    std::size_t maxTokenBytes = 0;

    TokenId find(std::string_view bytes) const {
        if (bytes.size() > maxTokenBytes) return -1;
        const auto it = ranks.find(bytes);
        return it == ranks.end() ? -1 : it->second;
    }
};

// Appends the ids of `piece` to `out`.
void bytePairEncode(std::string_view piece, const RankTable& table, std::vector<TokenId>& out);

} // namespace k3::detail
