#pragma once
// "What would more memory buy?": a recorded expert trace (k3 --dump-cache-trace's
// expert_trace.bin, or the peer's: little-endian int32 (layer, expert) pairs) replayed
// through the expert cache's own LRU logic at another capacity, no bytes moved.
//
// Consecutive records of one layer are one layer visit: its distinct experts are one
// request each, in ascending expert order (disk order), fetched in waves of at most the
// slot count, as the forward does; a repeat within the visit (another position of a
// chunk choosing the same expert) is chunk reuse, never a hit. A pass is a run of
// layer visits in rising layer order (one forward: a decode token, or a prompt chunk).
// Limit: a model with one MoE layer has no visible pass boundary.

#include "k3/memory_stats.hpp"

#include <cstdint>
#include <filesystem>
#include <utility>
#include <vector>

namespace k3 {

struct ExpertTrace {
    std::vector<std::pair<std::int32_t, std::int32_t>> records; // (layer, expert)
    int passes = 0;
};

// FILE, or a directory holding expert_trace.bin. Throws k3::Error (ErrorKind::Cache).
ExpertTrace loadExpertTrace(const std::filesystem::path& fileOrDir);
// The first `passes` passes of `trace` (a slice for quick runs and tests).
ExpertTrace firstPasses(const ExpertTrace& trace, int passes);

// The counters a cache of `slots` experts would have shown (bytesRead stays 0: the
// caller multiplies diskReads by its expert size).
CacheStats replayCacheCapacity(const ExpertTrace& trace, int slots);

// One routed expert of the real Kimi K3 in MXFP4: w1, w3 [3072 x 3584] and w2
// [3584 x 3072], 4-bit values plus one E8M0 scale byte per 32 (config.json's widths).
inline constexpr std::uint64_t kK3ExpertBytes = 3ull * 3072 * 3584 / 2 + 3ull * 3072 * 3584 / 32;

} // namespace k3
