// Prefill in chunks against the same prompt fed one position at a time, on the synthetic
// full-width checkpoint (tests/bench/synth_checkpoint + k3 pack), in one run:
//   - trunk GB read during the prefill next to (chunks x streamed trunk bytes per pass),
//   - expert GB read next to the bytes of the chunks' expert unions,
//   - seconds per prompt position, chunked and one at a time, and their ratio,
//   - a memcmp of the last position's logits (the two must be the same bits).
//
//   bench_prefill SYNTH_DIR TRUNK_DIR [--prompts 8,32,128] [--one-at-a-time-max 32]
//                 [--trunk-gb 1.5] [--cache-gb 0.5] [--pinned-cache-gb 0] [--chunk N]
//                 [--pinned-layers 4] [--only streamed|pinned]
//
// Two budgets: the streamed one (--trunk-gb / --cache-gb) and everything pinned (the
// whole trunk and the routed experts resident; --pinned-cache-gb X serves them through a
// cache instead, whose first run then pays the cold reads). Not a test: run by
// hand; docs/measurements.md keeps the figures.
#include <k3/memory_plan.hpp>
#include <k3/model.hpp>
#include <k3/pack.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Pass {
    double seconds = 0;
    std::uint64_t trunkBytes = 0, expertBytes = 0, expertRequests = 0, expertReads = 0;
    int chunks = 0;
    std::vector<float> lastLogits;
};

Pass prefill(const k3::Model& m, const std::vector<int>& ids, int chunk) {
    Pass p;
    std::vector<float> logits(std::size_t(m.config().vocabSize));
    k3::InferenceState st = m.newState();
    const k3::MemoryStats before = m.memoryStats();
    const auto t0 = Clock::now();
    for (std::size_t i = 0; i < ids.size(); i += std::size_t(chunk)) {
        const std::size_t n = std::min(std::size_t(chunk), ids.size() - i);
        const k3::TokenStats s = m.forward(st, std::span<const int>(ids.data() + i, n), logits);
        if (s.droppedExperts || s.nonFinite) {
            std::fprintf(stderr, "bench_prefill: the run is invalid (dropped %d, non-finite %d)\n",
                         s.droppedExperts, int(s.nonFinite));
            std::exit(4);
        }
        ++p.chunks;
    }
    p.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
    const k3::MemoryStats after = m.memoryStats();
    p.trunkBytes = after.trunk.bytesRead - before.trunk.bytesRead;
    p.expertBytes = after.cache.bytesRead - before.cache.bytesRead;
    p.expertRequests = after.cache.requests - before.cache.requests;
    p.expertReads = after.cache.diskReads - before.cache.diskReads;
    p.lastLogits = logits;
    return p;
}

std::vector<int> parseList(const std::string& s) {
    std::vector<int> out;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, ',');) out.push_back(std::atoi(item.c_str()));
    return out;
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: bench_prefill SYNTH_DIR TRUNK_DIR [--prompts 8,32,128] "
                             "[--one-at-a-time-max 32] [--trunk-gb 1.5] [--cache-gb 0.5] "
                             "[--pinned-cache-gb 0] [--chunk N] [--only streamed|pinned]\n");
        return 2;
    }
    const std::string dir = argv[1], trunk = argv[2];
    std::vector<int> prompts{8, 32, 128};
    int oneMax = 32, chunk = 0, pinnedLayers = 4;
    double trunkGB = 1.5, cacheGB = 0.5, pinnedCacheGB = 0.0; // 0: resident experts
    std::string only;
    for (int i = 3; i + 1 < argc; i += 2) {
        const std::string a = argv[i], v = argv[i + 1];
        if (a == "--prompts")
            prompts = parseList(v);
        else if (a == "--one-at-a-time-max")
            oneMax = std::atoi(v.c_str());
        else if (a == "--trunk-gb")
            trunkGB = std::atof(v.c_str());
        else if (a == "--cache-gb")
            cacheGB = std::atof(v.c_str());
        else if (a == "--pinned-cache-gb")
            pinnedCacheGB = std::atof(v.c_str());
        else if (a == "--chunk")
            chunk = std::atoi(v.c_str());
        else if (a == "--pinned-layers")
            pinnedLayers = std::atoi(v.c_str());
        else if (a == "--only")
            only = v; // "streamed" or "pinned"
        else {
            std::fprintf(stderr, "bench_prefill: unknown option %s\n", a.c_str());
            return 2;
        }
    }
    struct Budget {
        const char* name;
        std::optional<std::uint64_t> trunkBytes; // none: every layer pinned
        std::uint64_t cacheBytes;
        int layers; // 0: all
    };
    // Everything pinned must fit in RAM, so that budget runs the first layers only.
    const Budget budgets[] = {
        {"streamed", std::uint64_t(trunkGB * 1e9), std::uint64_t(cacheGB * 1e9), 0},
        {"pinned", std::nullopt, std::uint64_t(pinnedCacheGB * 1e9), pinnedLayers},
    };
    std::printf("bench_prefill %s (trunk %s)\n", dir.c_str(), trunk.c_str());
    for (const Budget& b : budgets) {
        if (!only.empty() && only != b.name) continue;
        k3::LaunchConfig o;
        o.modelDir = dir;
        o.trunkDir = trunk;
        o.budget.trunkBytes = b.trunkBytes;
        o.budget.cacheBytes = b.cacheBytes;
        o.prefillChunk = chunk;
        // Room for the longest prompt: an unasked chunk is at most the context.
        o.contextLength = std::max(256, *std::max_element(prompts.begin(), prompts.end()));
        k3::LaunchDiagnostics d;
        d.layerLimit = b.layers;
        d.enforceMemoryPlan = false;
        const k3::Model m = k3::Model::load(o, d);
        const k3::MemoryPlan& plan = m.memoryPlan();
        // Bytes one pass over the trunk reads: every layer not pinned.
        std::uint64_t perPass = 0;
        const k3::TrunkIndex idx = k3::openTrunkIndex(trunk, dir);
        for (int L = plan.pinnedLayers; L < plan.totalLayers; ++L)
            perPass += idx.layers[std::size_t(L)].bytes;
        const int T = plan.chunkPositions;
        std::printf("\n== %s: %d/%d layers pinned, ring %d x %.2f GB, cache %d slots; chunk %d "
                    "positions; one trunk pass reads %.2f GB\n",
                    b.name, plan.pinnedLayers, plan.totalLayers, plan.ringSlots,
                    double(plan.ringSlotBytes) / 1e9, plan.cacheSlots, T, double(perPass) / 1e9);
        std::printf("%-7s %-9s %7s %10s %10s %8s %10s %10s %9s %11s %11s %8s %s\n", "prompt",
                    "mode", "chunks", "trunk GB", "chunks*GB", "ratio", "expert GB", "union GB",
                    "ratio", "s/position", "1-at-a-time", "speedup", "logits");
        for (int P : prompts) {
            std::vector<int> ids;
            for (int i = 0; i < P; ++i) ids.push_back((i * 7919 + 13) % m.config().vocabSize);
            const Pass c = prefill(m, ids, T);
            const double perRead =
                c.expertReads ? double(c.expertBytes) / double(c.expertReads) : 0.0;
            const double unionBytes = double(c.expertRequests) * perRead;
            const double want = double(c.chunks) * double(perPass);
            std::printf("%-7d %-9s %7d %10.2f %10.2f %8.3f %10.2f %10.2f %9.3f %11.3f", P,
                        "chunked", c.chunks, double(c.trunkBytes) / 1e9, want / 1e9,
                        want > 0 ? double(c.trunkBytes) / want : 0.0, double(c.expertBytes) / 1e9,
                        unionBytes / 1e9, unionBytes > 0 ? double(c.expertBytes) / unionBytes : 0.0,
                        c.seconds / P);
            if (P <= oneMax) {
                const Pass one = prefill(m, ids, 1);
                const bool same = std::memcmp(one.lastLogits.data(), c.lastLogits.data(),
                                              c.lastLogits.size() * sizeof(float)) == 0;
                std::printf(" %11.3f %8.2fx %s\n", one.seconds / P, one.seconds / c.seconds,
                            same ? "same bits" : "DIFFERENT");
                std::printf("%-7d %-9s %7d %10.2f %10s %8s %10.2f\n", P, "1-by-1", one.chunks,
                            double(one.trunkBytes) / 1e9, "", "", double(one.expertBytes) / 1e9);
                if (!same) return 1;
            } else {
                std::printf(" %11s %9s %s\n", "-", "-", "-");
            }
            std::fflush(stdout);
        }
    }
    return 0;
}
