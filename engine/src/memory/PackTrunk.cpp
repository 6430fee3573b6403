// k3 pack: the trunk's records copied (or coded, with --compress) from the checkpoint
// into trunk.bin, then trunk.json written last (include/k3/pack.hpp).

#include "k3/pack.hpp"

#include "k3/aligned_io.hpp"
#include "k3/chat.hpp"
#include "k3/config.hpp"
#include "k3/fault_injection.hpp"
#include "memory/AlignedBuffer.hpp"
#include "memory/PackInternal.hpp"
#include "memory/TrunkCodec.hpp"
#include "platform/Platform.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstring>
#include <memory>

namespace k3 {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace packing;

constexpr std::size_t kCopyChunk = std::size_t{16} << 20;

struct Run {
    std::string name;
    int layer = -1;
    std::uint32_t shard = 0;
    std::uint64_t lo = 0, hi = 0; // absolute range in the shard
    std::vector<std::pair<std::string, TensorInfo>> tensors;
};

// One contiguous run in one shard, or a PackError naming the record and the gap.
Run planRun(const std::string& name, int layer, std::vector<std::pair<std::string, TensorInfo>> ts,
            const Checkpoint& ckpt) {
    if (ts.empty()) throw PackError("trunk record " + name + " has no tensors in the checkpoint");
    std::sort(ts.begin(), ts.end(),
              [](const auto& a, const auto& b) { return a.second.offset < b.second.offset; });
    Run r;
    r.name = name;
    r.layer = layer;
    r.shard = ts.front().second.shard;
    for (const auto& [n, t] : ts)
        if (t.shard != r.shard)
            throw PackError(
                name + " spans two shards (" + ckpt.shardPaths()[r.shard].filename().string() +
                " has " + ts.front().first + ", " + ckpt.shardPaths()[t.shard].filename().string() +
                " has " + n + "); refusing to pack a scattered layer");
    r.lo = ts.front().second.offset;
    std::uint64_t end = r.lo;
    for (std::size_t i = 0; i < ts.size(); ++i) {
        const TensorInfo& t = ts[i].second;
        if (t.offset != end)
            throw PackError(name + " is not contiguous in " +
                            ckpt.shardPaths()[r.shard].filename().string() + ": " +
                            std::to_string(t.offset - end) + " bytes of gap between " +
                            ts[i - 1].first + " (ends at " + std::to_string(end) + ") and " +
                            ts[i].first + " (starts at " + std::to_string(t.offset) +
                            "); copying the span would drag other bytes (experts) into the trunk");
        end = t.offset + t.nbytes;
    }
    r.hi = end;
    r.tensors = std::move(ts);
    return r;
}

json recordJson(const Run& r, std::uint64_t offset, std::uint64_t checksum,
                const std::vector<std::uint64_t>& tensorChecksums,
                const std::vector<std::uint64_t>& blockSizes) {
    json tensors = json::object();
    for (std::size_t i = 0; i < r.tensors.size(); ++i) {
        const auto& [n, t] = r.tensors[i];
        json shape = json::array();
        for (std::uint64_t d : t.dims()) shape.push_back(d);
        tensors[n] = {{"offset", t.offset - r.lo},
                      {"nbytes", t.nbytes},
                      {"dtype", std::string(dtypeName(t.dtype))},
                      {"shape", shape},
                      {"xxh3", hex64(tensorChecksums[i])}};
    }
    json j = {{"name", r.name},       {"layer", r.layer},        {"offset", offset},
              {"bytes", r.hi - r.lo}, {"xxh3", hex64(checksum)}, {"tensors", tensors}};
    if (!blockSizes.empty()) {
        std::uint64_t stored = 0;
        for (std::uint64_t b : blockSizes) stored += b;
        j["stored_bytes"] = stored;
        j["blocks"] = blockSizes;
    }
    return j;
}

void writeAll(const platform::File& file, const void* data, std::size_t n, std::uint64_t offset,
              const fs::path& path) {
    const auto* p = static_cast<const unsigned char*>(data);
    std::optional<IoFault> fault = faultFor(IoKind::Pack, path.string(), true);
    while (n > 0) {
        std::int64_t w = -1;
        if (fault) { // the test hook: fail as a full (ENOSPC) or failing (EIO) disk would
            errno = *fault == IoFault::NoSpace ? ENOSPC : EIO;
            fault.reset();
        } else {
            w = file.writeAt(p, n, offset);
        }
        if (w < 0) {
            if (errno == EINTR) continue;
            throw PackError(path.string() + ": write failed at offset " + std::to_string(offset) +
                            ": " + std::strerror(errno));
        }
        p += w;
        n -= std::size_t(w);
        offset += std::uint64_t(w);
    }
}

// Every record planned (and refused) before a byte is written: one run per layer (its
// non-expert tensors), then one per model-level tensor.
std::vector<Run> planRuns(const ModelConfig& config, const Checkpoint& ckpt,
                          const fs::path& modelDir) {
    std::vector<std::vector<std::pair<std::string, TensorInfo>>> perLayer(
        std::size_t(config.numHiddenLayers));
    for (const auto& [name, info] : ckpt.tensors()) {
        const int L = layerOf(name);
        if (L < 0 || L >= config.numHiddenLayers || isRoutedExpertTensor(name)) continue;
        perLayer[std::size_t(L)].emplace_back(name, info);
    }
    std::vector<Run> runs;
    for (int L = 0; L < config.numHiddenLayers; ++L)
        runs.push_back(
            planRun("layer " + std::to_string(L), L, std::move(perLayer[std::size_t(L)]), ckpt));
    for (const std::string& n : modelLevelTensors()) {
        const TensorInfo* t = ckpt.find(n);
        if (!t) throw PackError("the checkpoint in " + modelDir.string() + " has no tensor " + n);
        runs.push_back(planRun(n, -1, {{n, *t}}, ckpt));
    }
    return runs;
}

void checkBlockBytes(const PackOptions& options) {
    if (options.compress &&
        (options.blockBytes < 64 || options.blockBytes > codec::kMaxBlockBytes ||
         options.blockBytes % 64 != 0 || kCopyChunk % options.blockBytes != 0))
        throw PackError("block size " + std::to_string(options.blockBytes) +
                        " is not a multiple of 64 in [64, " +
                        std::to_string(codec::kMaxBlockBytes) + "] dividing the copy chunk");
}

// The old trunk stays in place until the new one is complete, so the new one needs its
// whole size free (the raw size: a compressed trunk needs less, never more).
void requireFreeSpace(const fs::path& trunkDir, std::uint64_t total) {
    std::error_code spaceError;
    const fs::space_info space = fs::space(trunkDir, spaceError);
    if (!spaceError && space.available < total)
        throw PackError("packing needs " + std::to_string(total) + " bytes free in " +
                        trunkDir.string() + " but " + std::to_string(space.available) +
                        " are available; nothing was changed (free some space, or pack to "
                        "another folder)");
}

// The new trunk's files before they are put in place.
struct StagedTrunk {
    fs::path bin, json;
    explicit StagedTrunk(const fs::path& trunkDir)
        : bin(trunkDir / "trunk.bin.partial"), json(trunkDir / "trunk.json.next") {}
    // What a killed pack left (a stop that can be handled removes them itself).
    void removeLeftovers() const {
        std::error_code ec;
        fs::remove(bin, ec);
        fs::remove(json, ec);
        removeAtomicWriteLeftovers(json);
    }
};

// O_DIRECT writes: buffered ones ran at a tenth of the disk here (dirty-page
// throttling) and would evict the page cache for bytes nobody reads back soon.
// Records start 4096-aligned and own their padding, so every write can be aligned.
platform::File createPartial(const fs::path& partial) {
    const unsigned create =
        platform::open::Write | platform::open::Create | platform::open::Truncate;
    platform::File file = platform::File::open(partial, create | platform::open::Uncached, 0644);
    if (!file.valid() && errno == EINVAL) // no O_DIRECT here (tmpfs): the same writes, buffered
        file = platform::File::open(partial, create, 0644);
    if (!file.valid())
        throw PackError(partial.string() + ": cannot create: " + std::strerror(errno));
    return file;
}

// A record as copied: its entry for trunk.json and the bytes it takes in trunk.bin
// before padding (its blocks' sizes when coded, else its raw size).
struct CopiedRecord {
    json record;
    std::uint64_t stored = 0;
};

// Copies the planned runs, one record at a time in plan order, into the partial file:
// the shards stay open, the chunk buffer and the coded buffer are reused.
class RecordCopier {
public:
    RecordCopier(const platform::File& file, const fs::path& partial, const Checkpoint& ckpt,
                 const PackOptions& options, const std::atomic<bool>* cancel)
        : file_(file), partial_(partial), ckpt_(ckpt), options_(options), cancel_(cancel),
          files_(ckpt.shardPaths().size()), chunk_(kCopyChunk),
          // Coded output is gathered here and written in aligned prefixes; a record's tail
          // is padded to 4096 so the next record starts aligned.
          coded_(options.compress
                     ? kCopyChunk + kCopyChunk / options.blockBytes * codec::kBlockHeaderBytes +
                           2 * kTrunkAlignment
                     : 0) {}

    // Run r written at offset `out` of the partial file.
    CopiedRecord copy(const Run& r, std::uint64_t out, PackProgress& progress) {
        auto& f = files_[r.shard];
        if (!f) f = std::make_unique<AlignedFile>(ckpt_.shardPaths()[r.shard]);
        const bool code = options_.compress && r.layer >= 0 && r.hi > r.lo;
        // A layer is coded first; when that does not pay it is copied again, raw.
        std::vector<std::uint64_t> blockSizes;
        std::uint64_t stored = 0;
        for (int pass = code ? 0 : 1; pass < 2; ++pass) {
            copyPass(r, *f, pass == 0, out, progress, blockSizes, stored);
            if (pass == 0 && (stored < r.hi - r.lo || options_.keepBlocksWhenLarger)) break;
            if (pass == 0) { // coding did not pay: the same record, raw
                progress.bytesDone -= r.hi - r.lo;
                blockSizes.clear();
                stored = 0;
            }
        }
        CopiedRecord c;
        c.record = recordJson(r, out, sums_.record(), sums_.tensors(), blockSizes);
        c.stored = blockSizes.empty() ? r.hi - r.lo : stored;
        return c;
    }

private:
    // Coded bytes of the record in progress: waiting in coded_, and already written.
    struct CodedTail {
        std::size_t used = 0;
        std::uint64_t done = 0;
    };

    // One sequential range copy of the record: coded (pass 0) or raw.
    void copyPass(const Run& r, AlignedFile& f, bool coding, std::uint64_t out,
                  PackProgress& progress, std::vector<std::uint64_t>& blockSizes,
                  std::uint64_t& stored) {
        // The checksums are of the bytes as read for the copy (one pass): the
        // record's, and each tensor's in turn (they tile the run in offset order).
        std::vector<std::uint64_t> ends;
        for (const auto& [n, t] : r.tensors) ends.push_back(t.offset + t.nbytes);
        sums_.start(r.lo, std::move(ends));
        blockSizes.clear();
        CodedTail tail;
        for (std::uint64_t pos = r.lo; pos < r.hi;) {
            if (cancel_ && cancel_->load()) throw PackError("packing cancelled");
            const std::size_t n = std::size_t(std::min<std::uint64_t>(kCopyChunk, r.hi - pos));
            f.read(pos, chunk_.data(), n);
            sums_.update(chunk_.data(), n);
            if (coding) {
                codeChunk(r, pos, n, out, tail, blockSizes, stored);
            } else {
                // A record's last chunk is padded with zeros to its aligned footprint.
                const std::size_t padded = std::size_t(alignUp(n));
                std::memset(chunk_.data() + n, 0, padded - n);
                writeAll(file_, chunk_.data(), padded, out + (pos - r.lo), partial_);
            }
            pos += n;
            progress.bytesDone += n;
        }
    }

    // The chunk's blocks coded and appended to coded_; its aligned prefix written (all of
    // it, padded, after the record's last chunk).
    void codeChunk(const Run& r, std::uint64_t pos, std::size_t n, std::uint64_t out,
                   CodedTail& tail, std::vector<std::uint64_t>& blockSizes, std::uint64_t& stored) {
        // kCopyChunk is a multiple of the block size: blocks never straddle.
        // The blocks of a chunk are coded in parallel (each on its own), then
        // appended in order: the file does not depend on the thread count.
        const auto count = std::ptrdiff_t((n + options_.blockBytes - 1) / options_.blockBytes);
        blocks_.resize(std::size_t(count));
        std::atomic<bool> failed{false}; // no exception may leave the region
#pragma omp parallel for schedule(dynamic, 8)
        for (std::ptrdiff_t i = 0; i < count; ++i) {
            const std::size_t b = std::size_t(i) * options_.blockBytes;
            auto& blk = blocks_[std::size_t(i)];
            blk.clear();
            try {
                codec::encodeBlock(chunk_.data() + b,
                                   std::min<std::size_t>(options_.blockBytes, n - b), blk);
            } catch (...) {
                failed.store(true);
            }
        }
        if (failed.load()) throw PackError(r.name + ": coding a block failed (out of memory?)");
        for (const auto& blk : blocks_) {
            std::memcpy(coded_.data() + tail.used, blk.data(), blk.size());
            tail.used += blk.size();
            blockSizes.push_back(blk.size());
            stored += blk.size();
        }
        const std::size_t flush = std::size_t(tail.used / kTrunkAlignment * kTrunkAlignment);
        if (pos + n < r.hi && flush > 0) {
            writeAll(file_, coded_.data(), flush, out + tail.done, partial_);
            tail.done += flush;
            std::memmove(coded_.data(), coded_.data() + flush, tail.used - flush);
            tail.used -= flush;
        } else if (pos + n == r.hi && tail.used > 0) {
            const std::size_t padded = std::size_t(alignUp(tail.used));
            std::memset(coded_.data() + tail.used, 0, padded - tail.used);
            writeAll(file_, coded_.data(), padded, out + tail.done, partial_);
            tail.done += padded;
            tail.used = 0;
        }
    }

    const platform::File& file_;
    const fs::path& partial_;
    const Checkpoint& ckpt_;
    const PackOptions& options_;
    const std::atomic<bool>* cancel_;
    std::vector<std::unique_ptr<AlignedFile>> files_;
    memory::AlignedBuffer chunk_;
    RunChecksums sums_;
    memory::AlignedBuffer coded_;
    std::vector<std::vector<std::byte>> blocks_; // one chunk's coded blocks
};

// trunk.json as staged beside the old one (the mode of the new trunk.bin, so a trunk
// others may read stays readable): what the records are, where they came from, sealed by
// its checksum, which is returned.
std::uint64_t stageTrunkJson(const StagedTrunk& staged, std::uint64_t total,
                             const CheckpointIdentity& identity, json records,
                             const PackOptions& options) {
    json doc{{"format", "k3-trunk"},
             {"version", options.compress ? kCompressedFormatVersion : kTrunkFormatVersion},
             {"alignment", kTrunkAlignment},
             {"file_bytes", total},
             {"source", identityJson(identity)},
             {"records", std::move(records)}};
    if (options.compress)
        doc["codec"] = {{"name", kCodecName}, {"block_bytes", options.blockBytes}};
    const std::uint64_t checksum = indexChecksum(doc);
    doc[kIndexChecksumKey] = hex64(checksum);
    try {
        writeFileAtomically(staged.json, doc.dump(1));
    } catch (const Error& e) {
        throw PackError(e.what());
    }
    fs::permissions(staged.json, fs::status(staged.bin).permissions());
    return checksum;
}

// The tuples of the shards the runs come from, for the side file of checked shards.
std::vector<std::pair<fs::path, ShardStat>> runShardStats(const Checkpoint& ckpt,
                                                          const std::vector<Run>& runs) {
    std::vector<std::pair<fs::path, ShardStat>> out;
    std::vector<bool> seen(ckpt.shardPaths().size());
    for (const Run& r : runs) {
        if (seen[r.shard]) continue;
        seen[r.shard] = true;
        out.emplace_back(ckpt.shardPaths()[r.shard], statShard(ckpt.shardPaths()[r.shard]));
    }
    return out;
}

// A durable rename (platform::replaceFile: the folder's entry synced too).
void replaceOrThrow(const fs::path& from, const fs::path& to) {
    if (!platform::replaceFile(from, to))
        throw PackError("cannot rename " + from.string() + " to " + to.string() + ": " +
                        std::strerror(errno));
}

// What the records came to in trunk.bin.
struct CopiedRecords {
    json records = json::array();
    std::uint64_t fileBytes = 0;        // padded: the file's size
    std::uint64_t layerBytes = 0;       // the layers' payload
    std::uint64_t layerStoredBytes = 0; // ... as stored (coded or raw)
};

// Every record into the staged trunk.bin, which is then padded, sized and synced; the
// observer hears of each record.
CopiedRecords copyRecords(const StagedTrunk& staged, const Checkpoint& ckpt,
                          const std::vector<Run>& runs, const PackOptions& options,
                          const std::atomic<bool>* cancel, const PackObserver& observer,
                          PackProgress& progress, std::chrono::steady_clock::time_point t0) {
    CopiedRecords copied;
    platform::File file = createPartial(staged.bin);
    try {
        RecordCopier copier(file, staged.bin, ckpt, options, cancel);
        std::uint64_t out = 0;
        for (const Run& r : runs) {
            CopiedRecord c = copier.copy(r, out, progress);
            copied.records.push_back(std::move(c.record));
            out += alignUp(c.stored);
            if (r.layer >= 0) {
                copied.layerBytes += r.hi - r.lo;
                copied.layerStoredBytes += c.stored;
            }
            ++progress.recordsDone;
            progress.seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            progress.mbPerSecond =
                progress.seconds > 0 ? double(progress.bytesDone) / 1e6 / progress.seconds : 0;
            progress.record = r.name;
            if (observer) observer(progress);
        }
        copied.fileBytes = out;
        // The tail of the last record is padded too, so aligned reads never overrun.
        if (!file.truncate(out))
            throw PackError(staged.bin.string() + ": cannot size to " + std::to_string(out) +
                            " bytes");
        if (!file.syncToDisk()) throw PackError(staged.bin.string() + ": fsync failed");
    } catch (...) {
        file.close();
        throw;
    }
    file.close();
    return copied;
}

} // namespace

PackResult packTrunk(const fs::path& modelDir, const fs::path& trunkDir,
                     const PackObserver& observer, const std::atomic<bool>* cancel,
                     const PackOptions& options) {
    const auto t0 = std::chrono::steady_clock::now();
    const ModelConfig config = readModelConfig(modelDir / "config.json");
    const Checkpoint ckpt = Checkpoint::open(modelDir);
    const CheckpointIdentity identity = identityOf(ckpt, modelDir);

    // Plan every record (and refuse) before a byte is written.
    const std::vector<Run> runs = planRuns(config, ckpt, modelDir);
    checkBlockBytes(options);
    std::uint64_t total = 0, payload = 0, largest = 0;
    for (const Run& r : runs) {
        total += alignUp(r.hi - r.lo);
        payload += r.hi - r.lo;
        if (r.layer >= 0) largest = std::max(largest, r.hi - r.lo);
    }

    fs::create_directories(trunkDir);
    const StagedTrunk staged(trunkDir);
    staged.removeLeftovers();
    requireFreeSpace(trunkDir, total);
    // Taken before the bytes are read: a shard changed during the pack is not remembered.
    const auto shardStats = runShardStats(ckpt, runs);

    PackProgress progress;
    progress.recordsTotal = int(runs.size());
    progress.bytesTotal = payload;
    std::uint64_t indexXxh3 = 0;
    CopiedRecords copied;
    try {
        copied = copyRecords(staged, ckpt, runs, options, cancel, observer, progress, t0);
        indexXxh3 =
            stageTrunkJson(staged, copied.fileBytes, identity, std::move(copied.records), options);
        // The last moment a stop keeps the old trunk: after it, two renames.
        if (cancel && cancel->load()) throw PackError("packing cancelled");
    } catch (...) {
        staged.removeLeftovers();
        throw;
    }
    // trunk.json last: until it is replaced, the old one describes the old trunk.bin, so
    // a kill between the renames leaves a pair its sizes and checksums refuse.
    replaceOrThrow(staged.bin, trunkDir / "trunk.bin");
    replaceOrThrow(staged.json, trunkDir / "trunk.json");
    std::vector<std::pair<std::string, ShardStat>> unchanged;
    for (const auto& [path, before] : shardStats)
        if (statShard(path) == before) unchanged.emplace_back(path.filename().string(), before);
    rememberCheckedShards(trunkDir, indexXxh3, unchanged);

    PackResult res;
    res.fileBytes = copied.fileBytes;
    res.payloadBytes = payload;
    res.layerBytes = copied.layerBytes;
    res.layerStoredBytes = copied.layerStoredBytes;
    res.largestLayerBytes = largest;
    res.layers = config.numHiddenLayers;
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
}

} // namespace k3
