#include "tokenizer/BytePairMerge.hpp"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <queue>

namespace k3::detail {

namespace {

// A candidate join of the part starting at byte `start` with its right neighbour. Parts keep
// their start byte for life, so `start` both names the part and orders ties leftmost-first.
struct Candidate {
    TokenId rank;
    std::uint32_t start;
    std::uint32_t version; // stale when the part or its neighbour changed since
};

// Short pieces (nearly all of them in real text) take tiktoken's own scan: no allocation, and
// a linear pass over a few parts is cheaper than a heap.
constexpr std::uint32_t kShortPiece = 48;

void mergeShort(std::string_view piece, const RankTable& table, std::vector<TokenId>& out) {
    const auto n = static_cast<std::uint32_t>(piece.size());
    std::uint32_t start[kShortPiece + 1]; // part i is [start[i], start[i + 1])
    TokenId pairRank[kShortPiece];        // rank of part i joined with part i + 1, or -1
    std::uint32_t parts = n;
    for (std::uint32_t i = 0; i <= n; ++i) start[i] = i;
    for (std::uint32_t i = 0; i + 1 < n; ++i) pairRank[i] = table.find(piece.substr(i, 2));
    auto rankOf = [&](std::uint32_t i) {
        return i + 1 < parts ? table.find(piece.substr(start[i], start[i + 2] - start[i])) : -1;
    };
    for (;;) {
        std::uint32_t best = parts;
        for (std::uint32_t i = 0; i + 1 < parts; ++i)
            if (pairRank[i] >= 0 && (best == parts || pairRank[i] < pairRank[best])) best = i;
        if (best == parts) break;
        for (std::uint32_t i = best + 1; i < parts; ++i) start[i] = start[i + 1];
        for (std::uint32_t i = best + 1; i + 1 < parts; ++i) pairRank[i] = pairRank[i + 1];
        --parts;
        pairRank[best] = rankOf(best);
        if (best > 0) pairRank[best - 1] = rankOf(best - 1);
    }
    for (std::uint32_t i = 0; i < parts; ++i)
        out.push_back(table.find(piece.substr(start[i], start[i + 1] - start[i])));
}

} // namespace

void bytePairEncode(std::string_view piece, const RankTable& table, std::vector<TokenId>& out) {
    const auto n = static_cast<std::uint32_t>(piece.size());
    if (n == 0) return;
    // tiktoken emits a piece that is itself a token without merging; keep that behaviour.
    if (const TokenId whole = table.find(piece); whole >= 0) {
        out.push_back(whole);
        return;
    }
    if (n <= kShortPiece) {
        mergeShort(piece, table, out);
        return;
    }
    // Part i covers bytes [i, next[i]); next == n ends the list.
    std::vector<std::uint32_t> next(n), prev(n), version(n, 0);
    std::vector<TokenId> token(n);
    std::vector<char> alive(n, 1);
    for (std::uint32_t i = 0; i < n; ++i) {
        next[i] = i + 1;
        prev[i] = i == 0 ? n : i - 1;
        token[i] = table.byteRank[static_cast<unsigned char>(piece[i])];
    }

    // Candidates wait in one bucket per rank; the lowest rank's bucket is worked left to
    // right. Joining two parts only creates pairs that contain the new token, so never one of
    // the rank being worked; a LOWER rank can appear only in a vocabulary whose merges are out
    // of order, and then the bucket is put back so the lower rank goes first, as in tiktoken.
    std::unordered_map<TokenId, std::vector<Candidate>> buckets;
    std::priority_queue<TokenId, std::vector<TokenId>, std::greater<>> pendingRanks;
    TokenId lowestAdded = std::numeric_limits<TokenId>::max();
    auto add = [&](TokenId r, std::uint32_t i) {
        auto& bucket = buckets[r];
        if (bucket.empty()) pendingRanks.push(r);
        bucket.push_back({r, i, version[i]});
        lowestAdded = std::min(lowestAdded, r);
    };
    auto consider = [&](std::uint32_t i) {
        const std::uint32_t j = next[i];
        if (j >= n) return;
        const TokenId r = table.find(piece.substr(i, next[j] - i));
        if (r >= 0) add(r, i);
    };
    for (std::uint32_t i = 0; i + 1 < n; ++i)
        if (const TokenId r = table.find(piece.substr(i, 2)); r >= 0) add(r, i);

    while (!pendingRanks.empty()) {
        const TokenId rank = pendingRanks.top();
        pendingRanks.pop();
        const auto found = buckets.find(rank);
        if (found == buckets.end() || found->second.empty()) continue;
        std::vector<Candidate> work = std::move(found->second);
        buckets.erase(found);
        std::sort(work.begin(), work.end(),
                  [](const Candidate& a, const Candidate& b) { return a.start < b.start; });
        lowestAdded = std::numeric_limits<TokenId>::max();
        for (std::size_t w = 0; w < work.size(); ++w) {
            const std::uint32_t i = work[w].start;
            if (!alive[i] || version[i] != work[w].version || next[i] >= n) continue;
            const std::uint32_t j = next[i];
            const std::uint32_t k = next[j];
            next[i] = k;
            if (k < n) prev[k] = i;
            alive[j] = 0;
            token[i] = rank;
            ++version[i];
            consider(i);
            if (const std::uint32_t p = prev[i]; p < n) {
                ++version[p];
                consider(p);
            }
            if (lowestAdded < rank) {
                auto& rest = buckets[rank];
                if (rest.empty()) pendingRanks.push(rank);
                rest.insert(rest.end(), work.begin() + std::ptrdiff_t(w) + 1, work.end());
                break;
            }
        }
    }
    for (std::uint32_t i = 0; i < n; i = next[i]) out.push_back(token[i]);
}

} // namespace k3::detail
