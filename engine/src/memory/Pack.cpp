#include "k3/pack.hpp"

#include "k3/aligned_io.hpp"
#include "k3/config.hpp"
#include "k3/fault_injection.hpp"
#include "memory/AlignedBuffer.hpp"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <limits>
#include <sstream>
#include <type_traits>

namespace k3 {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;

constexpr int kTrunkFormatVersion = 1;
constexpr std::size_t kCopyChunk = std::size_t{16} << 20;
const std::string kModelPrefix = "language_model.model.";

// The model-level tensors the forward needs, each its own record.
const std::vector<std::string>& modelLevelTensors() {
    static const std::vector<std::string> names{
        kModelPrefix + "embed_tokens.weight", kModelPrefix + "norm.weight",
        kModelPrefix + "output_attn_res_norm.weight", kModelPrefix + "output_attn_res_proj.weight",
        "language_model.lm_head.weight"};
    return names;
}

std::string readWholeFile(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw PackError(path.string() + ": cannot open");
    std::ostringstream s;
    s << in.rdbuf();
    return s.str();
}

std::string fnv1aHex(std::string_view bytes) {
    std::uint64_t h = 1469598103934665603ull;
    for (unsigned char c : bytes) {
        h ^= c;
        h *= 1099511628211ull;
    }
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(h));
    return buf;
}

// Which layer a tensor belongs to, or -1 when it is not under language_model.model.layers.
int layerOf(std::string_view name) {
    static const std::string p = kModelPrefix + "layers.";
    if (name.substr(0, p.size()) != p) return -1;
    std::size_t i = p.size();
    int v = 0;
    bool digits = false;
    while (i < name.size() && name[i] >= '0' && name[i] <= '9') {
        if (v > 1'000'000) return -1;
        v = v * 10 + (name[i] - '0');
        ++i;
        digits = true;
    }
    if (!digits || i >= name.size() || name[i] != '.') return -1;
    return v;
}

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

json identityJson(const CheckpointIdentity& id) {
    json shards = json::array();
    for (const auto& s : id.shards)
        shards.push_back({{"name", s.name}, {"size", s.size}, {"mtime_ns", s.mtimeNs}});
    return {{"shards", shards}, {"config_fnv1a64", id.configHash}, {"num_layers", id.numLayers}};
}

// nlohmann converts a floating-point number to an integer with a plain cast, which is
// undefined for e.g. 1e300 (the fuzzer's find), so every integer field is checked to be
// an integer within the target type's range first.
template <typename T> T integerValue(const json& v, const std::string& what) {
    static_assert(std::is_integral_v<T>);
    if (!v.is_number_integer()) throw PackError(what + " is not an integer");
    if (v.is_number_unsigned()) {
        const std::uint64_t u = v.get<std::uint64_t>();
        if (u > std::uint64_t(std::numeric_limits<T>::max()))
            throw PackError(what + " is out of range: " + std::to_string(u));
        return T(u);
    }
    const std::int64_t i = v.get<std::int64_t>();
    if (i < std::int64_t(std::numeric_limits<T>::min()) ||
        (i > 0 && std::uint64_t(i) > std::uint64_t(std::numeric_limits<T>::max())))
        throw PackError(what + " is out of range: " + std::to_string(i));
    return T(i);
}

template <typename T> T integerAt(const json& j, const char* key, const std::string& where) {
    return integerValue<T>(j.at(key), where + ": \"" + key + "\"");
}

CheckpointIdentity identityFromJson(const json& j) {
    CheckpointIdentity id;
    for (const auto& s : j.at("shards"))
        id.shards.push_back({s.at("name").get<std::string>(),
                             integerAt<std::uint64_t>(s, "size", "source shard"),
                             integerAt<std::int64_t>(s, "mtime_ns", "source shard")});
    id.configHash = j.at("config_fnv1a64").get<std::string>();
    id.numLayers = integerAt<int>(j, "num_layers", "source");
    return id;
}

json recordJson(const Run& r, std::uint64_t offset) {
    json tensors = json::object();
    for (const auto& [n, t] : r.tensors) {
        json shape = json::array();
        for (std::uint64_t d : t.dims()) shape.push_back(d);
        tensors[n] = {{"offset", t.offset - r.lo},
                      {"nbytes", t.nbytes},
                      {"dtype", std::string(dtypeName(t.dtype))},
                      {"shape", shape}};
    }
    return {{"name", r.name},
            {"layer", r.layer},
            {"offset", offset},
            {"bytes", r.hi - r.lo},
            {"tensors", tensors}};
}

TrunkRecord recordFromJson(const json& j, std::uint64_t fileBytes, const std::string& where) {
    TrunkRecord r;
    r.name = j.at("name").get<std::string>();
    r.layer = integerAt<int>(j, "layer", where + ": record " + r.name);
    r.offset = integerAt<std::uint64_t>(j, "offset", where + ": record " + r.name);
    r.bytes = integerAt<std::uint64_t>(j, "bytes", where + ": record " + r.name);
    if (r.offset % kTrunkAlignment != 0)
        throw PackError(where + ": record " + r.name + " offset " + std::to_string(r.offset) +
                        " is not 4096-aligned");
    if (r.offset > fileBytes || alignUp(r.bytes) > fileBytes - r.offset)
        throw PackError(where + ": record " + r.name + " [" + std::to_string(r.offset) + ", +" +
                        std::to_string(r.bytes) + ") runs past the end of trunk.bin (" +
                        std::to_string(fileBytes) + " bytes)");
    for (const auto& [n, t] : j.at("tensors").items()) {
        TrunkTensor tt;
        tt.offset = integerAt<std::uint64_t>(t, "offset", where + ": tensor " + n);
        tt.info.nbytes = integerAt<std::uint64_t>(t, "nbytes", where + ": tensor " + n);
        const auto dt = parseDType(t.at("dtype").get<std::string>());
        if (!dt) throw PackError(where + ": tensor " + n + " has an unknown dtype");
        tt.info.dtype = *dt;
        const auto& shape = t.at("shape");
        if (shape.size() > std::size_t(kMaxTensorRank))
            throw PackError(where + ": tensor " + n + " has rank " + std::to_string(shape.size()));
        tt.info.rank = std::uint8_t(shape.size());
        for (std::size_t i = 0; i < shape.size(); ++i)
            tt.info.shape[i] =
                integerValue<std::uint64_t>(shape[i], where + ": tensor " + n + " shape");
        if (tt.offset > r.bytes || tt.info.nbytes > r.bytes - tt.offset)
            throw PackError(where + ": tensor " + n + " lies outside record " + r.name);
        // Multiplied with a wrap check: a shape whose product wraps to nbytes would
        // otherwise pass and send kernels far past the record.
        std::uint64_t bytes = dtypeSize(tt.info.dtype);
        for (const std::uint64_t d : tt.info.dims()) {
            if (d != 0 && bytes > std::numeric_limits<std::uint64_t>::max() / d)
                throw PackError(where + ": tensor " + n + " has a shape too large to address");
            bytes *= d;
        }
        if (bytes != tt.info.nbytes)
            throw PackError(where + ": tensor " + n + " nbytes disagrees with its shape and dtype");
        r.tensors.emplace(n, tt);
    }
    return r;
}

void writeAll(int fd, const void* data, std::size_t n, std::uint64_t offset, const fs::path& path) {
    const auto* p = static_cast<const unsigned char*>(data);
    std::optional<IoFault> fault = faultFor(IoKind::Pack, path.string(), true);
    while (n > 0) {
        ssize_t w = -1;
        if (fault) { // the test hook: fail as a full (ENOSPC) or failing (EIO) disk would
            errno = *fault == IoFault::NoSpace ? ENOSPC : EIO;
            fault.reset();
        } else {
            w = ::pwrite(fd, p, n, static_cast<off_t>(offset));
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

void writeFileAtomically(const fs::path& path, const std::string& text) {
    const fs::path tmp = path.string() + ".partial";
    const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw PackError(tmp.string() + ": cannot create: " + std::strerror(errno));
    try {
        writeAll(fd, text.data(), text.size(), 0, tmp);
        if (::fsync(fd) != 0) throw PackError(tmp.string() + ": fsync failed");
    } catch (...) {
        ::close(fd);
        fs::remove(tmp); // a half-written trunk.json must not linger
        throw;
    }
    ::close(fd);
    fs::rename(tmp, path);
}

} // namespace

bool isRoutedExpertTensor(std::string_view name) {
    return name.find(".block_sparse_moe.experts.") != std::string_view::npos;
}

std::string CheckpointIdentity::differenceFrom(const CheckpointIdentity& o) const {
    if (configHash != o.configHash) return "config.json changed since the trunk was packed";
    if (numLayers != o.numLayers)
        return "the trunk has " + std::to_string(o.numLayers) + " layers, the model " +
               std::to_string(numLayers);
    if (shards.size() != o.shards.size())
        return "the model has " + std::to_string(shards.size()) +
               " shards, the trunk was packed from " + std::to_string(o.shards.size());
    for (std::size_t i = 0; i < shards.size(); ++i) {
        const auto& a = shards[i];
        const auto& b = o.shards[i];
        if (a.name != b.name) return "shard " + a.name + " is not among the trunk's sources";
        if (a.size != b.size)
            return "shard " + a.name + " is " + std::to_string(a.size) + " bytes, was " +
                   std::to_string(b.size) + " when the trunk was packed";
        if (a.mtimeNs != b.mtimeNs)
            return "shard " + a.name + " was modified after the trunk was packed";
    }
    return {};
}

CheckpointIdentity checkpointIdentity(const fs::path& modelDir) {
    CheckpointIdentity id;
    const Checkpoint ckpt = Checkpoint::open(modelDir);
    for (const fs::path& p : ckpt.shardPaths()) {
        struct stat st {};
        if (::stat(p.c_str(), &st) != 0) throw PackError(p.string() + ": cannot stat");
        id.shards.push_back({p.filename().string(), std::uint64_t(st.st_size),
                             std::int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec});
    }
    std::sort(id.shards.begin(), id.shards.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    id.configHash = fnv1aHex(readWholeFile(modelDir / "config.json"));
    id.numLayers = readModelConfig(modelDir / "config.json").numHiddenLayers;
    return id;
}

std::uint64_t TrunkIndex::largestLayerBytes() const {
    std::uint64_t m = 0;
    for (const auto& r : layers) m = std::max(m, r.bytes);
    return m;
}

std::uint64_t TrunkIndex::layerBytesTotal() const {
    std::uint64_t s = 0;
    for (const auto& r : layers) s += alignUp(r.bytes);
    return s;
}

const TrunkRecord* TrunkIndex::modelRecordFor(std::string_view tensor) const {
    for (const auto& r : modelRecords)
        if (r.tensors.find(tensor) != r.tensors.end()) return &r;
    return nullptr;
}

TrunkIndex parseTrunkIndex(std::string_view jsonText, std::uint64_t binBytes,
                           const fs::path& trunkDir) {
    const std::string where = (trunkDir / "trunk.json").string();
    TrunkIndex idx;
    idx.binPath = trunkDir / "trunk.bin";
    try {
        const json j = json::parse(jsonText);
        if (j.at("format").get<std::string>() != "k3-trunk" ||
            integerAt<int>(j, "version", where) != kTrunkFormatVersion)
            throw StaleTrunkError(where + ": not a version " + std::to_string(kTrunkFormatVersion) +
                                  " k3 trunk; re-pack it");
        idx.fileBytes = integerAt<std::uint64_t>(j, "file_bytes", where);
        if (idx.fileBytes != binBytes)
            throw PackError(where + " describes " + std::to_string(idx.fileBytes) +
                            " bytes but trunk.bin has " + std::to_string(binBytes) +
                            " (an interrupted pack?); re-pack it");
        idx.source = identityFromJson(j.at("source"));
        for (const auto& r : j.at("records")) {
            TrunkRecord rec = recordFromJson(r, idx.fileBytes, where);
            if (rec.layer >= 0) {
                if (rec.layer != int(idx.layers.size()))
                    throw PackError(where + ": layer records out of order at " + rec.name);
                idx.layers.push_back(std::move(rec));
            } else {
                idx.modelRecords.push_back(std::move(rec));
            }
        }
        if (int(idx.layers.size()) != idx.source.numLayers)
            throw PackError(where + ": " + std::to_string(idx.layers.size()) +
                            " layer records for a " + std::to_string(idx.source.numLayers) +
                            "-layer model");
    } catch (const json::exception& e) {
        throw PackError(where + ": malformed (" + e.what() + ")");
    }
    return idx;
}

TrunkIndex openTrunkIndex(const fs::path& trunkDir, const fs::path& modelDir) {
    const fs::path jsonPath = trunkDir / "trunk.json";
    if (!fs::exists(jsonPath))
        throw PackError(jsonPath.string() +
                        " does not exist: pack the trunk first (k3 pack MODEL_DIR " +
                        trunkDir.string() + ")");
    std::error_code ec;
    const fs::path binPath = trunkDir / "trunk.bin";
    const auto binSize = fs::file_size(binPath, ec);
    if (ec) throw PackError(binPath.string() + ": cannot stat (" + ec.message() + ")");
    TrunkIndex idx = parseTrunkIndex(readWholeFile(jsonPath), binSize, trunkDir);
    if (!modelDir.empty()) {
        const std::string diff = checkpointIdentity(modelDir).differenceFrom(idx.source);
        if (!diff.empty())
            throw StaleTrunkError("the trunk in " + trunkDir.string() + " is stale: " + diff +
                                  "; re-pack it (k3 pack " + modelDir.string() + " " +
                                  trunkDir.string() + ")");
    }
    return idx;
}

bool trunkIsCurrent(const fs::path& trunkDir, const fs::path& modelDir) {
    try {
        openTrunkIndex(trunkDir, modelDir);
        return true;
    } catch (const std::exception&) {
        return false;
    }
}

PackResult packTrunk(const fs::path& modelDir, const fs::path& trunkDir,
                     const PackObserver& observer, const std::atomic<bool>* cancel) {
    const auto t0 = std::chrono::steady_clock::now();
    const ModelConfig config = readModelConfig(modelDir / "config.json");
    const Checkpoint ckpt = Checkpoint::open(modelDir);
    const CheckpointIdentity identity = checkpointIdentity(modelDir);

    // Plan every record (and refuse) before a byte is written.
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
    std::uint64_t total = 0, payload = 0, largest = 0;
    for (const Run& r : runs) {
        total += alignUp(r.hi - r.lo);
        payload += r.hi - r.lo;
        if (r.layer >= 0) largest = std::max(largest, r.hi - r.lo);
    }

    fs::create_directories(trunkDir);
    const fs::path binPath = trunkDir / "trunk.bin";
    const fs::path partial = trunkDir / "trunk.bin.partial";
    fs::remove(trunkDir / "trunk.json"); // the old description must not vouch for new bytes
    // O_DIRECT writes: buffered ones ran at a tenth of the disk here (dirty-page
    // throttling) and would evict the page cache for bytes nobody reads back soon.
    // Records start 4096-aligned and own their padding, so every write can be aligned.
    int fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
    if (fd < 0 && errno == EINVAL) // no O_DIRECT here (tmpfs): the same writes, buffered
        fd = ::open(partial.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw PackError(partial.string() + ": cannot create: " + std::strerror(errno));

    json records = json::array();
    PackProgress progress;
    progress.recordsTotal = int(runs.size());
    progress.bytesTotal = payload;
    try {
        std::vector<std::unique_ptr<AlignedFile>> files(ckpt.shardPaths().size());
        memory::AlignedBuffer chunk(kCopyChunk);
        std::uint64_t out = 0;
        for (const Run& r : runs) {
            auto& f = files[r.shard];
            if (!f) f = std::make_unique<AlignedFile>(ckpt.shardPaths()[r.shard]);
            // One sequential range copy per record.
            for (std::uint64_t pos = r.lo; pos < r.hi;) {
                if (cancel && cancel->load()) throw PackError("packing cancelled");
                const std::size_t n = std::size_t(std::min<std::uint64_t>(kCopyChunk, r.hi - pos));
                f->read(pos, chunk.data(), n);
                // A record's last chunk is padded with zeros to its aligned footprint.
                const std::size_t padded = std::size_t(alignUp(n));
                std::memset(chunk.data() + n, 0, padded - n);
                writeAll(fd, chunk.data(), padded, out + (pos - r.lo), partial);
                pos += n;
                progress.bytesDone += n;
            }
            records.push_back(recordJson(r, out));
            out += alignUp(r.hi - r.lo);
            ++progress.recordsDone;
            progress.seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            progress.mbPerSecond =
                progress.seconds > 0 ? double(progress.bytesDone) / 1e6 / progress.seconds : 0;
            progress.record = r.name;
            if (observer) observer(progress);
        }
        // The tail of the last record is padded too, so aligned reads never overrun.
        if (::ftruncate(fd, static_cast<off_t>(total)) != 0)
            throw PackError(partial.string() + ": cannot size to " + std::to_string(total) +
                            " bytes");
        if (::fsync(fd) != 0) throw PackError(partial.string() + ": fsync failed");
    } catch (...) {
        ::close(fd);
        fs::remove(partial);
        throw;
    }
    ::close(fd);
    fs::rename(partial, binPath);

    const json doc{
        {"format", "k3-trunk"}, {"version", kTrunkFormatVersion},   {"alignment", kTrunkAlignment},
        {"file_bytes", total},  {"source", identityJson(identity)}, {"records", records}};
    writeFileAtomically(trunkDir / "trunk.json", doc.dump(1));

    PackResult res;
    res.fileBytes = total;
    res.payloadBytes = payload;
    res.largestLayerBytes = largest;
    res.layers = config.numHiddenLayers;
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
}

} // namespace k3
