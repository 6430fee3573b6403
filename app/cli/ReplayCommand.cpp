// k3 replay TRACE: "what would more memory buy?" The expert trace of a run (or the
// peer's real one) replayed through the cache's LRU at each budget: TRUE hit rate,
// expert GB read per token, and the s/token the disk and compute rates predict.
#include "CliSupport.hpp"
#include "Commands.hpp"

#include <k3/cache_replay.hpp>
#include <k3/memory_plan.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <charconv>
#include <cstdio>
#include <fstream>

namespace k3cli {
namespace {

std::vector<double> parseBudgets(const std::string& text) {
    std::vector<double> out;
    std::size_t at = 0;
    while (at <= text.size()) {
        const std::size_t comma = std::min(text.find(',', at), text.size());
        std::string item = text.substr(at, comma - at);
        item.erase(0, item.find_first_not_of(' '));
        item.erase(item.find_last_not_of(' ') + 1);
        double v = 0;
        const auto [end, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
        if (item.empty() || ec != std::errc() || end != item.data() + item.size() || !(v > 0))
            throw usageError("--cache-gb \"" + text + "\": \"" + item +
                             "\" is not a positive number of GB");
        out.push_back(v);
        at = comma + 1;
    }
    return out;
}

// The rates a run measured, from its run.json (run with --cache-gb and --out).
struct Measured {
    std::optional<double> expertBytes, slotBytes, diskBytesPerSecond, computeSeconds;
};

Measured readReport(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw usageError("--report " + path + ": cannot open");
    const nlohmann::json r = nlohmann::json::parse(in, nullptr, false);
    if (!r.is_object()) throw usageError("--report " + path + ": not a JSON object");
    Measured m;
    const nlohmann::json cache = r.value("cache", nlohmann::json::object());
    const double bytes = cache.value("bytes_read", 0.0), reads = cache.value("disk_reads", 0.0);
    const double failed = cache.value("failed_reads", 0.0);
    if (reads - failed > 0 && bytes > 0) m.expertBytes = bytes / (reads - failed);
    if (cache.value("slot_bytes", 0.0) > 0) m.slotBytes = cache.value("slot_bytes", 0.0);
    if (cache.value("io_busy_seconds", 0.0) > 0 && bytes > 0)
        m.diskBytesPerSecond = bytes / cache.value("io_busy_seconds", 0.0);
    // Compute per forward pass: the wall clock less the time spent waiting for reads,
    // over the passes (prompt chunks and decode passes).
    const nlohmann::json timing = r.value("timing", nlohmann::json::object());
    const double wall = timing.value("total_seconds", 0.0);
    const double waits = cache.value("read_wait_seconds", 0.0) +
                         r.value("trunk", nlohmann::json::object()).value("wait_seconds", 0.0);
    const double passes =
        r.value("prefill", nlohmann::json::object()).value("chunks", 0.0) +
        r.value("speculation", nlohmann::json::object()).value("decode_passes", 0.0);
    if (wall > 0 && passes > 0) m.computeSeconds = std::max(0.0, wall - waits) / passes;
    return m;
}

} // namespace

int runReplay(const ReplayArgs& args) {
    const std::vector<double> budgets = parseBudgets(args.cacheGB);
    const k3::ExpertTrace trace = k3::loadExpertTrace(args.trace);
    Measured m;
    if (!args.report.empty()) m = readReport(args.report);
    auto pick = [](std::optional<double> flag, std::optional<double> measured, double fallback,
                   double scale, const char*& from) {
        from = flag ? "flag" : measured ? "report" : "default";
        return flag ? *flag * scale : measured ? *measured : fallback;
    };
    const char *expertFrom, *slotFrom, *diskFrom, *computeFrom;
    const double expertBytes =
        pick(args.expertMB, m.expertBytes, double(k3::kK3ExpertBytes), 1e6, expertFrom);
    // A slot holds the expert's aligned window, which may straddle one more page.
    const double derivedSlot = double((std::uint64_t(expertBytes) + 4095) / 4096 * 4096 + 4096);
    const double slotBytes = pick(args.slotMB, m.slotBytes, derivedSlot, 1e6, slotFrom);
    const double diskRate = pick(args.diskGBps, m.diskBytesPerSecond, 2e9, 1e9, diskFrom);
    const double compute = pick(args.computeSeconds, m.computeSeconds, 0.0, 1.0, computeFrom);
    const double tokens = args.tokens ? *args.tokens : double(trace.passes);
    if (!(tokens > 0)) throw usageError("--tokens must be above 0");

    std::printf("trace    : %s (%zu records, %d passes, %g tokens)\n",
                terminalSafe(args.trace).c_str(), trace.records.size(), trace.passes, tokens);
    std::printf("expert   : %s read (%s), slot %s (%s)\n",
                k3::formatBytes(std::uint64_t(expertBytes)).c_str(), expertFrom,
                k3::formatBytes(std::uint64_t(slotBytes)).c_str(), slotFrom);
    std::printf("rates    : disk %.2f GB/s (%s), compute %.3f s per pass (%s)\n", diskRate / 1e9,
                diskFrom, compute, computeFrom);
    std::printf("\n%-9s %-8s %-9s %-11s %-12s %-10s %s\n", "CACHE GB", "SLOTS", "TRUE HIT",
                "FROM DISK", "GB/TOKEN", "IO S/TOK", "PREDICTED S/TOK");
    for (double gb : budgets) {
        const int slots = int(std::min(gb * 1e9 / slotBytes, 1e9));
        if (slots < 1) {
            std::printf("%-9g %-8s (less than one expert slot)\n", gb, "0");
            continue;
        }
        const k3::CacheStats s = k3::replayCacheCapacity(trace, slots);
        const double gbPerToken = double(s.diskReads) * expertBytes / 1e9 / tokens;
        const double io = gbPerToken * 1e9 / diskRate;
        const double perToken = std::max(io, compute * double(trace.passes) / tokens);
        std::printf("%-9g %-8d %7.2f%%  %9.2f%%  %-12.3f %-10.3f %.3f\n", gb, slots,
                    100.0 * s.trueHitRate(),
                    s.requests ? 100.0 * double(s.diskReads) / double(s.requests) : 0.0, gbPerToken,
                    io, perToken);
    }
    std::printf("\nTRUE hit: served without a read. A request is one expert of one layer's "
                "visit; %s more selections were the same expert chosen again within a "
                "visit (chunk reuse, not counted as hits).\nPredicted s/token = max(expert "
                "reads / disk rate, compute): expert I/O overlapped with compute; the "
                "trunk's reads are not included.\n",
                std::to_string(k3::replayCacheCapacity(trace, 1).chunkReuse()).c_str());
    return kExitOk;
}

} // namespace k3cli
