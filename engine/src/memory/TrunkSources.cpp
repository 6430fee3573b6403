// A trunk knows its weights by their bytes: each trunk tensor's XXH3-64 in trunk.json is
// the hash of the source tensor as packed. A shard whose identity on disk (device, inode,
// size, mtime, ctime) is not one seen holding those bytes has its trunk tensors hashed
// again and compared; the tuples seen are remembered in trunk.checked.json.

#include "k3/chat.hpp"
#include "k3/pack.hpp"
#include "k3/read_file.hpp"
#include "k3/safetensors.hpp"

#include "k3/aligned_io.hpp"
#include "memory/AlignedBuffer.hpp"
#include "memory/PackInternal.hpp"
#include "platform/Platform.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <map>
#include <optional>

namespace k3::packing {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr const char* kCheckedFile = "trunk.checked.json";
constexpr const char* kCheckedFormat = "k3-trunk-checked";
// Far above a real trunk's needs (64 shards, a few copies each); the oldest go first.
constexpr std::size_t kMaxRememberedTuples = 1024;
constexpr std::uint64_t kMaxCheckedFileBytes = std::uint64_t{1} << 20;
constexpr std::size_t kReadChunk = std::size_t{16} << 20;
// A change within one timestamp tick of the check would keep the tuple checked (the
// racy-git problem), so a shard changed this recently is checked again next time. Ticks
// are milliseconds on Linux file systems, 2 s on FAT.
constexpr std::int64_t kSettledNs = 2'000'000'000;

json tupleJson(const std::string& name, const ShardStat& s) {
    return {{"name", name},   {"device", s.device},    {"inode", s.inode},
            {"size", s.size}, {"mtime_ns", s.mtimeNs}, {"ctime_ns", s.ctimeNs}};
}

// The tuples remembered for this trunk.json; none when the file is missing, unreadable,
// malformed or written for another trunk.json (a cache: the worst case is a re-check).
std::vector<std::pair<std::string, ShardStat>> rememberedTuples(const fs::path& trunkDir,
                                                                std::uint64_t indexXxh3) {
    std::vector<std::pair<std::string, ShardStat>> out;
    const fs::path file = trunkDir / kCheckedFile;
    std::error_code ec;
    if (!fs::exists(file, ec)) return out;
    try {
        const json j = json::parse(readRegularFile(file, kMaxCheckedFileBytes, "trunk file"));
        if (j.at("format") != kCheckedFormat || j.at("index_xxh3") != hex64(indexXxh3)) return out;
        for (const json& t : j.at("shards")) {
            ShardStat s;
            s.device = integerAt<std::uint64_t>(t, "device", kCheckedFile);
            s.inode = integerAt<std::uint64_t>(t, "inode", kCheckedFile);
            s.size = integerAt<std::uint64_t>(t, "size", kCheckedFile);
            s.mtimeNs = integerAt<std::int64_t>(t, "mtime_ns", kCheckedFile);
            s.ctimeNs = integerAt<std::int64_t>(t, "ctime_ns", kCheckedFile);
            out.emplace_back(t.at("name").get<std::string>(), s);
        }
    } catch (const std::exception&) {
        out.clear();
    }
    return out;
}

// A trunk record's run in its shard: where it starts, and its tensors in offset order.
struct SourceRun {
    const TrunkRecord* record = nullptr;
    std::uint64_t lo = 0;
    std::vector<std::pair<std::string, const TrunkTensor*>> tensors;
};

// The first tensor of a run whose bytes in the shard differ from the trunk's, and their
// hash.
struct Difference {
    std::size_t tensor = 0;
    std::uint64_t hash = 0;
};

// Reads one run from the shard and compares each tensor's hash with the trunk's.
std::optional<Difference> checkRun(const SourceRun& run, const AlignedFile& file,
                                   memory::AlignedBuffer& buffer, RunChecksums& sums,
                                   const std::function<void(std::size_t)>& advanced) {
    std::vector<std::uint64_t> ends;
    for (const auto& [name, t] : run.tensors) ends.push_back(run.lo + t->offset + t->info.nbytes);
    sums.start(run.lo, ends);
    const std::uint64_t hi = run.lo + run.record->bytes;
    for (std::uint64_t pos = run.lo; pos < hi;) {
        const std::size_t n = std::size_t(std::min<std::uint64_t>(kReadChunk, hi - pos));
        file.read(pos, buffer.data(), n);
        sums.update(buffer.data(), n);
        pos += n;
        advanced(n);
    }
    const std::vector<std::uint64_t> got = sums.tensors();
    for (std::size_t i = 0; i < run.tensors.size(); ++i)
        if (got[i] != run.tensors[i].second->checksum) return Difference{i, got[i]};
    return std::nullopt;
}

} // namespace

ShardStat statShard(const fs::path& shard) {
    platform::FileInfo st;
    if (!platform::fileInfo(shard, st)) throw PackError(shard.string() + ": cannot stat");
    ShardStat s;
    s.device = st.device;
    s.inode = st.inode;
    s.size = st.size;
    s.mtimeNs = st.modifiedNs;
    s.ctimeNs = st.changedNs;
    return s;
}

void rememberCheckedShards(const fs::path& trunkDir, std::uint64_t indexXxh3,
                           std::vector<std::pair<std::string, ShardStat>> seen) {
    const std::int64_t now = std::chrono::duration_cast<std::chrono::nanoseconds>(
                                 std::chrono::system_clock::now().time_since_epoch())
                                 .count();
    std::erase_if(seen, [&](const auto& s) {
        return std::max(s.second.mtimeNs, s.second.ctimeNs) > now - kSettledNs;
    });
    if (seen.empty()) return;
    auto tuples = rememberedTuples(trunkDir, indexXxh3);
    // One tuple per file (name, device, inode): the newest replaces an older one.
    std::erase_if(tuples, [&](const auto& old) {
        return std::any_of(seen.begin(), seen.end(), [&](const auto& fresh) {
            return fresh.first == old.first && fresh.second.device == old.second.device &&
                   fresh.second.inode == old.second.inode;
        });
    });
    tuples.insert(tuples.end(), seen.begin(), seen.end());
    if (tuples.size() > kMaxRememberedTuples)
        tuples.erase(tuples.begin(), tuples.end() - std::ptrdiff_t(kMaxRememberedTuples));
    json shards = json::array();
    for (const auto& [name, s] : tuples) shards.push_back(tupleJson(name, s));
    const json doc{
        {"format", kCheckedFormat}, {"index_xxh3", hex64(indexXxh3)}, {"shards", shards}};
    try {
        writeFileAtomically(trunkDir / kCheckedFile, doc.dump(1) + "\n");
        // Readable by whoever may read trunk.json, so they need not check again.
        std::error_code ec;
        const fs::file_status index = fs::status(trunkDir / "trunk.json", ec);
        if (!ec) fs::permissions(trunkDir / kCheckedFile, index.permissions(), ec);
    } catch (const std::exception&) {
        // A read-only trunk folder: the check is repeated at each open, nothing is wrong.
    }
}

void checkTrunkSources(const TrunkIndex& idx, const Checkpoint& ckpt, const fs::path& trunkDir,
                       const fs::path& modelDir, const TrunkCheckObserver& observer) {
    // Each record's run, grouped by shard (checkRecordsAgainst has matched every record's
    // tensors with the checkpoint's, so the header says where each run starts).
    std::map<std::uint32_t, std::vector<SourceRun>> byShard;
    const auto addRecord = [&](const TrunkRecord& r) {
        if (r.tensors.empty()) return;
        SourceRun run;
        run.record = &r;
        for (const auto& [name, t] : r.tensors) run.tensors.emplace_back(name, &t);
        std::sort(run.tensors.begin(), run.tensors.end(),
                  [](const auto& a, const auto& b) { return a.second->offset < b.second->offset; });
        const auto& [firstName, first] = run.tensors.front();
        const TensorInfo& src = ckpt.at(firstName);
        run.lo = src.offset - first->offset;
        byShard[src.shard].push_back(std::move(run));
    };
    for (const TrunkRecord& r : idx.layers) addRecord(r);
    for (const TrunkRecord& r : idx.modelRecords) addRecord(r);

    const auto remembered = rememberedTuples(trunkDir, idx.indexChecksum);
    std::vector<std::pair<std::uint32_t, ShardStat>> toCheck;
    TrunkCheckProgress progress;
    for (const auto& [shard, runs] : byShard) {
        const fs::path& path = ckpt.shardPaths()[shard];
        const ShardStat now = statShard(path);
        const std::string name = path.filename().string();
        if (std::find(remembered.begin(), remembered.end(), std::make_pair(name, now)) !=
            remembered.end())
            continue;
        toCheck.emplace_back(shard, now);
        for (const SourceRun& run : runs) progress.bytesTotal += run.record->bytes;
    }
    if (toCheck.empty()) return;

    const auto t0 = std::chrono::steady_clock::now();
    memory::AlignedBuffer buffer(kReadChunk);
    RunChecksums sums;
    std::vector<std::pair<std::string, ShardStat>> checked;
    for (const auto& [shard, before] : toCheck) {
        const fs::path& path = ckpt.shardPaths()[shard];
        progress.shard = path.filename().string();
        std::vector<SourceRun>& runs = byShard[shard];
        std::sort(runs.begin(), runs.end(),
                  [](const auto& a, const auto& b) { return a.lo < b.lo; });
        const AlignedFile file(path);
        for (const SourceRun& run : runs) {
            const auto difference = checkRun(run, file, buffer, sums, [&](std::size_t n) {
                progress.bytesDone += n;
                progress.seconds =
                    std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
                if (observer) observer(progress);
            });
            if (!difference) continue;
            const auto& [tensor, t] = run.tensors[difference->tensor];
            // Into a new folder, never over this one: it may be another model's trunk.
            throw StaleTrunkError(
                "the trunk in " + trunkDir.string() +
                    ": this trunk was packed from different weights: re-pack it into a new "
                    "folder; shard " +
                    progress.shard + ", tensor " + tensor + " (offset " +
                    std::to_string(run.lo + t->offset) + ", " + std::to_string(t->info.nbytes) +
                    " bytes) has XXH3 " + hex64(difference->hash) + " now, " + hex64(t->checksum) +
                    " when packed",
                PackRemedy{modelDir, freshTrunkFolder(modelDir)});
        }
        // Read while it changed: not remembered, so the next open checks it again.
        if (statShard(path) == before) checked.emplace_back(progress.shard, before);
    }
    rememberCheckedShards(trunkDir, idx.indexChecksum, checked);
}

} // namespace k3::packing
