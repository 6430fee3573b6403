// Prefill in chunks against the same prompt fed one position at a time, on the synthetic
// full-width checkpoint (tests/bench/synth_checkpoint + k3 pack), in one run:
//   - trunk GB read during the prefill next to (chunks x streamed trunk bytes per pass),
//   - expert GB read next to the bytes of the chunks' expert unions,
//   - seconds per prompt position, chunked and one at a time, and their ratio,
//   - a memcmp of the last position's logits (the two must be the same bits).
//
//   bench_prefill SYNTH_DIR TRUNK_DIR [--prompts 8,32,128] [--one-at-a-time-max 32]
//                 [--trunk-gb 1.5] [--cache-gb 0.5] [--pinned-cache-gb 0] [--chunk N]
//                 [--pinned-layers 4] [--only streamed|pinned] [--decode N]
//                 [--fio 1] [--drop-caches 1]
//
// Two budgets: the streamed one (--trunk-gb / --cache-gb) and everything pinned (the
// whole trunk and the routed experts resident; --pinned-cache-gb X serves them through a
// cache instead: each prompt then runs once untimed first, so the timed run is compute
// alone, checked to read nothing). Not a test: run by hand; docs/measurements.md keeps
// the figures.
//
// Issue 29's run (--fio 1 --decode N, both budgets, one process): fio measures the disk
// before and after the streamed runs (the trunk as large sequential reads at queue depth
// 1, as the streamer reads a layer; the experts as random reads of one expert's window
// at the cache's queue depth, 16); the streamed rows then show their bytes against one
// trunk pass + one union, and their seconds against max(I/O at fio's rates, the pinned
// run's compute). --decode N decodes N positions after the first prompt: expert read
// GB/s (bytes over the time a read was in flight) against fio's random-read figure, and
// s/token against max(I/O, compute). Each model is loaded fresh, the page cache dropped
// first with --drop-caches 1 (root).
#include <k3/cache_replay.hpp>
#include <k3/memory_plan.hpp>
#include <k3/model.hpp>
#include <k3/pack.hpp>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;

struct Pass {
    double seconds = 0;
    std::uint64_t trunkBytes = 0, expertBytes = 0, expertRequests = 0, expertReads = 0;
    std::uint64_t tableBytes = 0, residentHits = 0;
    double expertBusySeconds = 0, expertWaitSeconds = 0, trunkWaitSeconds = 0;
    int maxInFlight = 0;
    int chunks = 0;
    std::vector<float> lastLogits;
};

Pass prefill(const k3::Model& m, const std::vector<int>& ids, int chunk,
             k3::InferenceState* keep = nullptr) {
    Pass p;
    std::vector<float> logits(std::size_t(m.config().vocabSize));
    k3::InferenceState fresh = m.newState();
    k3::InferenceState& st = keep ? *keep : fresh;
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
    p.tableBytes = after.tableBytesRead - before.tableBytesRead;
    p.residentHits = after.cache.residentHits - before.cache.residentHits;
    p.expertBusySeconds = after.cache.ioBusySeconds - before.cache.ioBusySeconds;
    p.expertWaitSeconds = after.cache.readSeconds - before.cache.readSeconds;
    p.trunkWaitSeconds = after.trunk.waitSeconds - before.trunk.waitSeconds;
    p.maxInFlight = after.cache.maxInFlight;
    p.lastLogits = logits;
    return p;
}

// N positions decoded one at a time after the state's prompt (ids chosen like the prompt's).
Pass decode(const k3::Model& m, k3::InferenceState& st, int n, int first) {
    std::vector<int> ids;
    for (int i = 0; i < n; ++i) ids.push_back(((first + i) * 7919 + 13) % m.config().vocabSize);
    return prefill(m, ids, 1, &st);
}

void dropPageCache() {
    ::sync();
    std::ofstream f("/proc/sys/vm/drop_caches");
    f << "3\n";
    if (!f.flush()) std::printf("(could not drop the page cache: not root?)\n");
}

// fio's read bandwidth (bytes/s) for one job, from its JSON; 0 when fio is missing or fails.
double fioReadBytesPerSecond(const std::string& file, const std::string& rw, std::uint64_t block,
                             int depth, int seconds) {
    const std::string cmd =
        "fio --name=k3bench --filename='" + file + "' --rw=" + rw +
        " --bs=" + std::to_string(block) + " --iodepth=" + std::to_string(depth) +
        " --ioengine=io_uring --direct=1 --time_based --runtime=" + std::to_string(seconds) +
        " --output-format=json 2>/dev/null";
    FILE* pipe = ::popen(cmd.c_str(), "r");
    if (!pipe) return 0;
    std::string out;
    char buf[4096];
    for (std::size_t n; (n = std::fread(buf, 1, sizeof buf, pipe)) > 0;) out.append(buf, n);
    ::pclose(pipe);
    const auto at = out.find("\"bw_bytes\""); // the read section comes first
    if (at == std::string::npos) return 0;
    const auto colon = out.find(':', at);
    return colon == std::string::npos ? 0 : std::atof(out.c_str() + colon + 1);
}

// The largest file in `dir` whose name ends with `suffix` (an MoE layer's shard).
std::string largestFile(const std::string& dir, const std::string& suffix) {
    std::string best;
    std::uintmax_t bestSize = 0;
    for (const auto& e : std::filesystem::directory_iterator(dir)) {
        const std::string n = e.path().filename().string();
        if (n.size() < suffix.size() || n.compare(n.size() - suffix.size(), suffix.size(), suffix))
            continue;
        if (e.file_size() > bestSize) bestSize = e.file_size(), best = e.path().string();
    }
    return best;
}

struct DiskRates {
    double trunk = 0, experts = 0; // bytes/s
};

std::vector<int> parseList(const std::string& s) {
    std::vector<int> out;
    std::stringstream in(s);
    for (std::string item; std::getline(in, item, ',');) out.push_back(std::atoi(item.c_str()));
    return out;
}

} // namespace

// Parses the options, then runs each budget's prompts on a freshly loaded model; with
// --fio the disk probes bracket the streamed runs and a summary sets the streamed rows
// against max(I/O at fio's rates, the pinned run's compute). Long: one run, in order.
int main(int argc, char** argv) {
    if (argc < 3) {
        std::fprintf(stderr, "usage: bench_prefill SYNTH_DIR TRUNK_DIR [--prompts 8,32,128] "
                             "[--one-at-a-time-max 32] [--trunk-gb 1.5] [--cache-gb 0.5] "
                             "[--pinned-cache-gb 0] [--chunk N] [--only streamed|pinned] "
                             "[--decode N] [--fio 1] [--drop-caches 1]\n");
        return 2;
    }
    const std::string dir = argv[1], trunk = argv[2];
    std::vector<int> prompts{8, 32, 128};
    int oneMax = 32, chunk = 0, pinnedLayers = 4, decodeN = 0;
    bool fio = false, drop = false;
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
        else if (a == "--decode")
            decodeN = std::atoi(v.c_str());
        else if (a == "--fio")
            fio = v != "0";
        else if (a == "--drop-caches")
            drop = v != "0";
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
    const k3::TrunkIndex idx = k3::openTrunkIndex(trunk, dir);
    // One expert's read window: its 4096-aligned span (an unaligned start adds a page).
    const std::uint64_t expertWindow = (k3::kK3ExpertBytes + 4095) / 4096 * 4096 + 4096;
    const std::string expertShard = largestFile(dir, ".safetensors");
    auto probe = [&](const char* when) {
        DiskRates r;
        if (drop) dropPageCache();
        r.trunk = fioReadBytesPerSecond(idx.binPath.string(), "read", 256ull << 20, 1, 8);
        r.experts = fioReadBytesPerSecond(expertShard, "randread", expertWindow, 16, 8);
        std::printf("fio %s: trunk.bin sequential 256 MB blocks QD1 %.2f GB/s; %s random %llu-byte "
                    "blocks QD16 %.2f GB/s\n",
                    when, r.trunk / 1e9, std::filesystem::path(expertShard).filename().c_str(),
                    (unsigned long long)expertWindow, r.experts / 1e9);
        std::fflush(stdout);
        return r;
    };
    DiskRates before, after;
    if (fio) before = probe("before");
    std::map<std::string, std::map<int, Pass>> rows;
    std::map<std::string, Pass> decodes;
    std::map<int, std::uint64_t> unions; // distinct (layer, expert) of each streamed prompt
    std::uint64_t streamedPass = 0;
    for (const Budget& b : budgets) {
        if (!only.empty() && only != b.name) continue;
        const bool warm = !b.trunkBytes && b.cacheBytes > 0; // timed run = compute alone
        bool header = false;
        for (int P : prompts) {
            if (drop) dropPageCache();
            k3::LaunchConfig o;
            o.modelDir = dir;
            o.trunkDir = trunk;
            o.budget.trunkBytes = b.trunkBytes;
            o.budget.cacheBytes = b.cacheBytes;
            o.prefillChunk = chunk;
            // Room for the longest prompt: an unasked chunk is at most the context.
            o.contextLength =
                std::max(256, *std::max_element(prompts.begin(), prompts.end()) + decodeN);
            k3::LaunchDiagnostics d;
            d.layerLimit = b.layers;
            d.enforceMemoryPlan = false;
            d.recordCacheTrace = b.trunkBytes.has_value(); // the prompt's expert union
            const k3::Model m = k3::Model::load(o, d);
            const k3::MemoryPlan& plan = m.memoryPlan();
            // Bytes one pass over the trunk reads: every layer not pinned.
            std::uint64_t perPass = 0;
            for (int L = plan.pinnedLayers; L < plan.totalLayers; ++L)
                perPass += idx.layers[std::size_t(L)].bytes;
            const int T = plan.chunkPositions;
            if (!header) {
                header = true;
                const k3::MemoryStats ms = m.memoryStats();
                std::printf("\n== %s: %d/%d layers pinned, ring %d x %.2f GB, cache %d slots "
                            "(expert reads: %s, depth %d); chunk %d positions; one trunk pass "
                            "reads %.2f GB; tables %s\n",
                            b.name, plan.pinnedLayers, plan.totalLayers, plan.ringSlots,
                            double(plan.ringSlotBytes) / 1e9, plan.cacheSlots,
                            ms.expertIo.mode.c_str(), ms.expertIo.depth, T, double(perPass) / 1e9,
                            ms.modelTablesStreamed ? "streamed" : "resident");
                std::printf("%-7s %-9s %7s %10s %10s %8s %10s %10s %9s %11s %11s %8s %s\n",
                            "prompt", "mode", "chunks", "trunk GB", "chunks*GB", "ratio",
                            "expert GB", "union GB", "ratio", "s/position", "1-at-a-time",
                            "speedup", "logits");
            }
            if (b.trunkBytes) streamedPass = perPass;
            std::vector<int> ids;
            for (int i = 0; i < P; ++i) ids.push_back((i * 7919 + 13) % m.config().vocabSize);
            if (warm) (void)prefill(m, ids, T); // the cache holds the prompt's experts after
            k3::InferenceState st = m.newState();
            const Pass c = prefill(m, ids, T, &st);
            rows[b.name][P] = c;
            if (b.trunkBytes) {
                const auto tdir = std::filesystem::temp_directory_path() /
                                  ("k3_bench_trace_" + std::to_string(::getpid()));
                m.writeCacheTrace(tdir);
                const k3::ExpertTrace tr = k3::loadExpertTrace(tdir / "expert_trace.bin");
                std::vector<std::pair<int, int>> keys(tr.records.begin(), tr.records.end());
                std::sort(keys.begin(), keys.end());
                unions[P] = std::uint64_t(std::unique(keys.begin(), keys.end()) - keys.begin());
                std::filesystem::remove_all(tdir);
            }
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
            std::printf("        %.2f s; tables %.2f GB; %llu expert requests, %llu reads, TRUE "
                        "hits %llu; waited %.2f s for the trunk, %.2f s for experts; expert "
                        "reads in flight %.2f s (at most %d at once)%s\n",
                        c.seconds, double(c.tableBytes) / 1e9, (unsigned long long)c.expertRequests,
                        (unsigned long long)c.expertReads, (unsigned long long)c.residentHits,
                        c.trunkWaitSeconds, c.expertWaitSeconds, c.expertBusySeconds, c.maxInFlight,
                        warm ? (c.trunkBytes + c.expertBytes + c.tableBytes == 0
                                    ? " (warm: read nothing, compute alone)"
                                    : " (warm run READ BYTES: not compute alone)")
                             : "");
            if (decodeN > 0 && P == prompts.front()) {
                const Pass dp = decode(m, st, decodeN, P);
                decodes[b.name] = dp;
                std::printf(
                    "decode  %d positions after %d: %.3f s/token; per token trunk %.2f "
                    "GB, tables %.2f GB, experts %.3f GB (%llu reads of %llu requests, "
                    "TRUE hits %llu); expert reads %.2f GB/s while in flight (%.2f s, "
                    "at most %d at once); waited %.2f s trunk, %.2f s experts\n",
                    decodeN, P, dp.seconds / decodeN, double(dp.trunkBytes) / 1e9 / decodeN,
                    double(dp.tableBytes) / 1e9 / decodeN, double(dp.expertBytes) / 1e9 / decodeN,
                    (unsigned long long)dp.expertReads, (unsigned long long)dp.expertRequests,
                    (unsigned long long)dp.residentHits,
                    dp.expertBusySeconds > 0 ? double(dp.expertBytes) / 1e9 / dp.expertBusySeconds
                                             : 0.0,
                    dp.expertBusySeconds, dp.maxInFlight, dp.trunkWaitSeconds,
                    dp.expertWaitSeconds);
            }
            std::fflush(stdout);
        }
        if (fio && b.trunkBytes) after = probe("after");
    }
    if (!fio || rows["streamed"].empty()) return 0;
    const DiskRates rate{(before.trunk + after.trunk) / 2, (before.experts + after.experts) / 2};
    if (rate.trunk <= 0 || rate.experts <= 0) {
        std::printf("\nfio gave no figure: no bound computed (is fio installed?)\n");
        return 0;
    }
    auto ioSeconds = [&](const Pass& p) {
        return double(p.trunkBytes + p.tableBytes) / rate.trunk +
               double(p.expertBytes) / rate.experts;
    };
    std::printf("\n== against the disk (fio means: trunk %.2f GB/s, experts %.2f GB/s) and the "
                "pinned run's compute\n",
                rate.trunk / 1e9, rate.experts / 1e9);
    std::printf("%-7s %12s %12s %7s %9s %9s %9s %9s %7s\n", "prompt", "read GB", "pass+union",
                "ratio", "seconds", "I/O s", "compute s", "bound s", "ratio");
    for (const auto& [P, s] : rows["streamed"]) {
        const double ideal = double(streamedPass) + double(unions[P]) * double(k3::kK3ExpertBytes);
        const double got = double(s.trunkBytes + s.expertBytes);
        const auto pinned = rows["pinned"].find(P);
        const double compute = pinned != rows["pinned"].end() ? pinned->second.seconds : 0.0;
        const double io = ioSeconds(s), bound = std::max(io, compute);
        std::printf("%-7d %12.2f %12.2f %7.3f %9.2f %9.2f %9.2f %9.2f %6.2fx   (union %llu "
                    "experts; tables %.2f GB beside)\n",
                    P, got / 1e9, ideal / 1e9, got / ideal, s.seconds, io, compute, bound,
                    s.seconds / bound, (unsigned long long)unions[P], double(s.tableBytes) / 1e9);
    }
    if (decodes.count("streamed")) {
        const Pass& dp = decodes["streamed"];
        const double compute = decodes.count("pinned") ? decodes["pinned"].seconds / decodeN : 0.0;
        const double io = ioSeconds(dp) / decodeN, bound = std::max(io, compute);
        const double gbs =
            dp.expertBusySeconds > 0 ? double(dp.expertBytes) / dp.expertBusySeconds : 0.0;
        std::printf("decode: %.3f s/token, I/O %.3f s, compute %.3f s, bound %.3f s: %.2fx; "
                    "expert reads %.2f GB/s = %.0f%% of fio's %.2f GB/s (before %.2f, after "
                    "%.2f)\n",
                    dp.seconds / decodeN, io, compute, bound, dp.seconds / decodeN / bound,
                    gbs / 1e9, 100 * gbs / rate.experts, rate.experts / 1e9, before.experts / 1e9,
                    after.experts / 1e9);
    }
    return 0;
}
