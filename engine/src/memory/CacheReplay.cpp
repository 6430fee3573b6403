// k3/cache_replay.hpp over the cache's own replay (memory/ExpertCache.cpp).
#include "k3/cache_replay.hpp"

#include "k3/expert_cache.hpp"

namespace k3 {
namespace {

int countPasses(const std::vector<std::pair<std::int32_t, std::int32_t>>& records) {
    int passes = records.empty() ? 0 : 1;
    for (std::size_t i = 1; i < records.size(); ++i)
        if (records[i].first < records[i - 1].first) ++passes; // back to an earlier layer
    return passes;
}

} // namespace

ExpertTrace loadExpertTrace(const std::filesystem::path& fileOrDir) {
    const std::filesystem::path file =
        std::filesystem::is_directory(fileOrDir) ? fileOrDir / "expert_trace.bin" : fileOrDir;
    ExpertTrace t;
    t.records = readExpertTrace(file);
    if (t.records.empty()) throw CacheError(file.string() + ": an empty trace (no requests)");
    t.passes = countPasses(t.records);
    return t;
}

ExpertTrace firstPasses(const ExpertTrace& trace, int passes) {
    ExpertTrace t;
    int seen = trace.records.empty() ? 0 : 1;
    for (std::size_t i = 0; i < trace.records.size(); ++i) {
        if (i > 0 && trace.records[i].first < trace.records[i - 1].first && ++seen > passes) break;
        t.records.push_back(trace.records[i]);
    }
    t.passes = countPasses(t.records);
    return t;
}

CacheStats replayCacheCapacity(const ExpertTrace& trace, int slots) {
    if (slots < 1)
        throw CacheError("a cache of " + std::to_string(slots) +
                         " slots: at least one expert must fit");
    return replayLayerVisits(trace.records, slots).stats;
}

} // namespace k3
