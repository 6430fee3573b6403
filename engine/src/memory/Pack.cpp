#include "k3/pack.hpp"
#include "k3/read_file.hpp"

#include "k3/aligned_io.hpp"
#include "k3/config.hpp"
#include "k3/fault_injection.hpp"
#include "memory/AlignedBuffer.hpp"
#include "memory/TrunkCodec.hpp"

#include <nlohmann/json.hpp>
// libxxhash's run-time dispatch (AVX2 where present, same hash values): the plain entry
// points are its portable build, ~1.4x slower here (bench_trunk_codec).
#include <xxh_x86dispatch.h>

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

// 2: XXH3-64 checksums (trunk.json itself, every record, every tensor) and the source
// named by its shard headers' bytes, not by mtimes. Version 1 trunks are refused.
// 3: as 2, with layer records coded per block (`k3 pack --compress`); 2 is still read and
// still written by a plain pack, so an older k3 reads it.
constexpr int kTrunkFormatVersion = 2;
constexpr int kCompressedFormatVersion = 3;
constexpr const char* kCodecName = "k3-bf16-high-planes";
constexpr const char* kIndexChecksumKey = "index_xxh3";
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
    try {
        return readRegularFile(path, kMaxIndexBytes, "trunk index");
    } catch (const FileReadError& e) {
        throw PackError(e.what());
    }
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

std::string hex64(std::uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
}

// Exactly 16 lowercase hex digits.
std::uint64_t parseHex64(const json& v, const std::string& what) {
    if (!v.is_string()) throw PackError(what + " is not a checksum string");
    const std::string& t = v.get_ref<const std::string&>();
    if (t.size() != 16) throw PackError(what + " is not 16 hex digits: \"" + t + "\"");
    std::uint64_t out = 0;
    for (char c : t) {
        int d = -1;
        if (c >= '0' && c <= '9') d = c - '0';
        if (c >= 'a' && c <= 'f') d = c - 'a' + 10;
        if (d < 0) throw PackError(what + " is not 16 hex digits: \"" + t + "\"");
        out = out << 4 | std::uint64_t(d);
    }
    return out;
}

// The checksum of trunk.json: XXH3-64 of the document without its own checksum field,
// in nlohmann's compact dump (object keys sorted, so the text is canonical).
std::uint64_t indexChecksum(json j) {
    j.erase(kIndexChecksumKey);
    const std::string text = j.dump();
    return XXH3_64bits(text.data(), text.size());
}

// The XXH3-64 of a shard's 8-byte header length and header JSON: what the shard says
// it holds (names, dtypes, shapes, offsets, metadata), read again here.
std::string shardHeaderHash(const fs::path& path) {
    try {
        requireRegularFile(path, "shard");
    } catch (const FileReadError& e) {
        throw PackError(e.what());
    }
    std::ifstream in(path, std::ios::binary);
    unsigned char len[8];
    if (!in || !in.read(reinterpret_cast<char*>(len), 8))
        throw PackError(path.string() + ": cannot read its safetensors header length");
    std::uint64_t n = 0;
    for (int i = 7; i >= 0; --i) n = n << 8 | len[i];
    if (n > kMaxHeaderBytes)
        throw PackError(path.string() + ": header of " + std::to_string(n) +
                        " bytes is over the limit of " + std::to_string(kMaxHeaderBytes));
    std::string bytes(8 + n, '\0');
    std::memcpy(bytes.data(), len, 8);
    if (!in.read(bytes.data() + 8, std::streamsize(n)))
        throw PackError(path.string() + ": header shorter than its length says");
    return hex64(XXH3_64bits(bytes.data(), bytes.size()));
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
        shards.push_back({{"name", s.name}, {"size", s.size}, {"header_xxh3", s.headerHash}});
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
        id.shards.push_back(
            {s.at("name").get<std::string>(), integerAt<std::uint64_t>(s, "size", "source shard"),
             hex64(parseHex64(s.at("header_xxh3"), "source shard \"header_xxh3\""))});
    id.configHash = j.at("config_fnv1a64").get<std::string>();
    id.numLayers = integerAt<int>(j, "num_layers", "source");
    return id;
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

// A coded record's block list: one stored size per blockBytes of the record (the last
// block may be shorter), each between a header and a raw block with its header, adding
// up to stored_bytes.
void blocksFromJson(TrunkRecord& r, const json& j, std::uint64_t blockBytes,
                    const std::string& where) {
    const std::string what = where + ": record " + r.name;
    r.storedBytes = integerAt<std::uint64_t>(j, "stored_bytes", what);
    const json& blocks = j.at("blocks");
    if (!blocks.is_array()) throw PackError(what + ": \"blocks\" is not an array");
    const std::uint64_t expected = (r.bytes + blockBytes - 1) / blockBytes;
    if (blocks.size() != expected)
        throw PackError(what + " lists " + std::to_string(blocks.size()) + " blocks, its " +
                        std::to_string(r.bytes) + " bytes make " + std::to_string(expected));
    r.blockStarts.reserve(blocks.size() + 1);
    std::uint64_t at = 0;
    for (std::size_t i = 0; i < blocks.size(); ++i) {
        const auto size =
            integerValue<std::uint64_t>(blocks[i], what + " block " + std::to_string(i));
        const std::uint64_t raw = std::min(blockBytes, r.bytes - i * blockBytes);
        if (size < codec::kBlockHeaderBytes || size > codec::maxStoredBytes(raw))
            throw PackError(what + " block " + std::to_string(i) + " is " + std::to_string(size) +
                            " bytes stored, outside [" + std::to_string(codec::kBlockHeaderBytes) +
                            ", " + std::to_string(codec::maxStoredBytes(raw)) + "]");
        r.blockStarts.push_back(at);
        at += size;
    }
    r.blockStarts.push_back(at);
    if (at != r.storedBytes)
        throw PackError(what + ": its blocks add up to " + std::to_string(at) +
                        " bytes, stored_bytes says " + std::to_string(r.storedBytes));
    if (r.blockStarts.size() == 1) r.blockStarts.clear(); // an empty record: nothing to decode
}

TrunkRecord recordFromJson(const json& j, std::uint64_t fileBytes, const std::string& where,
                           std::uint64_t blockBytes) {
    TrunkRecord r;
    r.name = j.at("name").get<std::string>();
    r.layer = integerAt<int>(j, "layer", where + ": record " + r.name);
    r.offset = integerAt<std::uint64_t>(j, "offset", where + ": record " + r.name);
    r.bytes = integerAt<std::uint64_t>(j, "bytes", where + ": record " + r.name);
    r.checksum = parseHex64(j.at("xxh3"), where + ": record " + r.name + " \"xxh3\"");
    r.storedBytes = r.bytes;
    if (j.contains("blocks")) {
        if (blockBytes == 0)
            throw PackError(where + ": record " + r.name +
                            " lists blocks in a trunk format that has none");
        blocksFromJson(r, j, blockBytes, where);
    }
    if (r.offset % kTrunkAlignment != 0)
        throw PackError(where + ": record " + r.name + " offset " + std::to_string(r.offset) +
                        " is not 4096-aligned");
    if (r.offset > fileBytes || alignUp(r.stored()) > fileBytes - r.offset)
        throw PackError(where + ": record " + r.name + " [" + std::to_string(r.offset) + ", +" +
                        std::to_string(r.stored()) + ") runs past the end of trunk.bin (" +
                        std::to_string(fileBytes) + " bytes)");
    for (const auto& [n, t] : j.at("tensors").items()) {
        TrunkTensor tt;
        tt.offset = integerAt<std::uint64_t>(t, "offset", where + ": tensor " + n);
        tt.checksum = parseHex64(t.at("xxh3"), where + ": tensor " + n + " \"xxh3\"");
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
    // Packing copies one contiguous run per record, so its tensors tile it exactly: a
    // gap or an overlap (two tensors at one offset, an edited offset) is an edit.
    std::vector<std::pair<std::uint64_t, const std::string*>> order;
    for (const auto& [n, t] : r.tensors) order.emplace_back(t.offset, &n);
    std::sort(order.begin(), order.end());
    std::uint64_t end = 0;
    const std::string* prev = nullptr;
    for (const auto& [off, n] : order) {
        if (off < end)
            throw PackError(where + ": record " + r.name + ": tensor " + *n + " at offset " +
                            std::to_string(off) + " overlaps " + *prev + " (ends at " +
                            std::to_string(end) + ")");
        if (off > end)
            throw PackError(where + ": record " + r.name + ": " + std::to_string(off - end) +
                            " bytes at offset " + std::to_string(end) +
                            " belong to no tensor (before " + *n + ")");
        end = off + r.tensors.find(*n)->second.info.nbytes;
        prev = n;
    }
    if (end != r.bytes)
        throw PackError(where + ": record " + r.name + " is " + std::to_string(r.bytes) +
                        " bytes but its tensors cover " + std::to_string(end));
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

std::uint64_t trunkChecksum(const void* data, std::size_t n) {
    return XXH3_64bits(data, n);
}

std::string sealTrunkJson(std::string_view text) {
    try {
        json j = json::parse(text);
        if (!j.is_object()) throw PackError("trunk.json text is not a JSON object");
        j[kIndexChecksumKey] = hex64(indexChecksum(j));
        return j.dump(1);
    } catch (const json::exception& e) {
        throw PackError(std::string("trunk.json text is malformed (") + e.what() + ")");
    }
}

void verifyTrunkRecord(const TrunkRecord& r, const std::byte* bytes, const fs::path& binPath) {
    const std::uint64_t got = XXH3_64bits(bytes, std::size_t(r.bytes));
    if (got != r.checksum)
        throw PackError("trunk record " + r.name + " (" + binPath.string() + " offset " +
                        std::to_string(r.offset) + ", " + std::to_string(r.bytes) +
                        " bytes): checksum " + hex64(got) + " as read, trunk.json says " +
                        hex64(r.checksum) + "; trunk.bin is damaged or was changed: re-pack it");
}

void verifyTrunkTensor(const TrunkRecord& r, const std::string& tensor, const std::byte* bytes,
                       const fs::path& binPath) {
    const auto it = r.tensors.find(tensor);
    if (it == r.tensors.end())
        throw PackError("trunk record " + r.name + " has no tensor " + tensor);
    const TrunkTensor& t = it->second;
    const std::uint64_t got = XXH3_64bits(bytes, std::size_t(t.info.nbytes));
    if (got != t.checksum)
        throw PackError("trunk record " + r.name + ", tensor " + tensor + " (" + binPath.string() +
                        " offset " + std::to_string(r.offset + t.offset) + ", " +
                        std::to_string(t.info.nbytes) + " bytes): checksum " + hex64(got) +
                        " as read, trunk.json says " + hex64(t.checksum) +
                        "; trunk.bin is damaged or was changed: re-pack it");
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
        if (a.headerHash != b.headerHash)
            return "shard " + a.name +
                   "'s header (tensor names, dtypes, shapes, offsets) is "
                   "not the one the trunk was packed from (header XXH3 " +
                   a.headerHash + ", the trunk's " + b.headerHash + "): another model";
    }
    return {};
}

namespace {
CheckpointIdentity identityOf(const Checkpoint& ckpt, const fs::path& modelDir) {
    CheckpointIdentity id;
    for (const fs::path& p : ckpt.shardPaths()) {
        struct stat st {};
        if (::stat(p.c_str(), &st) != 0) throw PackError(p.string() + ": cannot stat");
        id.shards.push_back({p.filename().string(), std::uint64_t(st.st_size), shardHeaderHash(p)});
    }
    std::sort(id.shards.begin(), id.shards.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    id.configHash = fnv1aHex(readWholeFile(modelDir / "config.json"));
    id.numLayers = readModelConfig(modelDir / "config.json").numHiddenLayers;
    return id;
}

// Every record must describe the checkpoint's own tensors: the same set of names (a
// layer record: the layer's non-expert tensors; a model record: its one tensor), each
// with the header's dtype, shape and size, at its place in the run the record copies.
void checkRecordsAgainst(const TrunkIndex& idx, const Checkpoint& ckpt, const fs::path& modelDir) {
    std::vector<std::vector<std::pair<std::string_view, const TensorInfo*>>> perLayer(
        idx.layers.size());
    for (const auto& [name, info] : ckpt.tensors()) {
        const int L = layerOf(name);
        if (L < 0 || std::size_t(L) >= perLayer.size() || isRoutedExpertTensor(name)) continue;
        perLayer[std::size_t(L)].emplace_back(name, &info);
    }
    const auto check = [&](const TrunkRecord& r,
                           const std::vector<std::pair<std::string_view, const TensorInfo*>>& src) {
        const std::string where = "the trunk's record " + r.name;
        if (src.empty()) throw PackError(where + " has no tensors in " + modelDir.string());
        // In file order, so the first difference named is the first in the record.
        auto sorted = src;
        std::sort(sorted.begin(), sorted.end(),
                  [](const auto& x, const auto& y) { return x.second->offset < y.second->offset; });
        std::uint64_t lo = src.front().second->offset, hi = 0;
        for (const auto& [n, t] : src) {
            lo = std::min(lo, t->offset);
            hi = std::max(hi, t->offset + t->nbytes);
            if (!r.tensors.count(n))
                throw PackError(where + " lacks tensor " + std::string(n) + " of " +
                                modelDir.string() + "; re-pack it");
        }
        if (r.tensors.size() != src.size())
            for (const auto& entry : r.tensors) {
                const std::string& n = entry.first; // a plain name: lambdas capture it (clang)
                if (std::none_of(src.begin(), src.end(),
                                 [&](const auto& s) { return s.first == n; }))
                    throw PackError(where + " holds tensor " + n + ", which is not one of its " +
                                    std::to_string(src.size()) + " tensors in " +
                                    modelDir.string());
            }
        if (r.bytes != hi - lo)
            throw PackError(where + " is " + std::to_string(r.bytes) +
                            " bytes, the checkpoint's run " + std::to_string(hi - lo));
        for (const auto& [n, t] : sorted) {
            const TrunkTensor& tt = r.tensors.find(n)->second;
            std::string what;
            if (tt.info.dtype != t->dtype)
                what = std::string("dtype ") + std::string(dtypeName(tt.info.dtype)) +
                       ", the checkpoint's " + std::string(dtypeName(t->dtype));
            else if (tt.info.rank != t->rank ||
                     !std::equal(t->dims().begin(), t->dims().end(), tt.info.dims().begin()))
                what = "a shape other than the checkpoint's";
            else if (tt.info.nbytes != t->nbytes)
                what = std::to_string(tt.info.nbytes) + " bytes, the checkpoint's " +
                       std::to_string(t->nbytes);
            else if (tt.offset != t->offset - lo)
                what = "offset " + std::to_string(tt.offset) + " in the record, the checkpoint's " +
                       std::to_string(t->offset - lo);
            if (!what.empty())
                throw PackError(where + ": tensor " + std::string(n) + " has " + what +
                                "; trunk.json was changed: re-pack it");
        }
    };
    for (std::size_t L = 0; L < idx.layers.size(); ++L) check(idx.layers[L], perLayer[L]);
    for (const TrunkRecord& r : idx.modelRecords) {
        if (r.tensors.size() != 1)
            throw PackError("the trunk's record " + r.name + " holds " +
                            std::to_string(r.tensors.size()) + " tensors, a model record one");
        const std::string& n = r.tensors.begin()->first;
        const TensorInfo* t = ckpt.find(n);
        if (!t)
            throw PackError("the trunk's record " + r.name + " holds " + n + ", which " +
                            modelDir.string() + " does not have");
        check(r, {{n, t}});
    }
}
} // namespace

CheckpointIdentity checkpointIdentity(const fs::path& modelDir) {
    return identityOf(Checkpoint::open(modelDir), modelDir);
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

std::uint64_t TrunkIndex::layerStoredTotal() const {
    std::uint64_t s = 0;
    for (const auto& r : layers) s += alignUp(r.stored());
    return s;
}

bool TrunkIndex::compressed() const {
    return std::any_of(layers.begin(), layers.end(),
                       [](const TrunkRecord& r) { return r.compressed(); });
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
        if (!j.is_object() || !j.contains("format") || j.at("format") != "k3-trunk")
            throw StaleTrunkError(where + ": not a k3 trunk description; re-pack it");
        const int version = integerAt<int>(j, "version", where);
        if (version != kTrunkFormatVersion && version != kCompressedFormatVersion)
            throw StaleTrunkError(
                where + ": trunk format version " + std::to_string(version) +
                ", this k3 reads versions " + std::to_string(kTrunkFormatVersion) +
                " (record checksums) and " + std::to_string(kCompressedFormatVersion) +
                " (compressed); re-pack it (k3 pack MODEL_DIR " + trunkDir.string() + ")");
        idx.version = version;
        const std::uint64_t stored =
            parseHex64(j.at(kIndexChecksumKey), where + ": \"index_xxh3\"");
        if (const std::uint64_t actual = indexChecksum(j); actual != stored)
            throw PackError(where + ": checksum " + hex64(actual) + " of its text, it says " +
                            hex64(stored) + "; trunk.json was changed or damaged: re-pack it");
        idx.fileBytes = integerAt<std::uint64_t>(j, "file_bytes", where);
        if (idx.fileBytes != binBytes)
            throw PackError(where + " describes " + std::to_string(idx.fileBytes) +
                            " bytes but trunk.bin has " + std::to_string(binBytes) +
                            " (an interrupted pack?); re-pack it");
        idx.source = identityFromJson(j.at("source"));
        if (version == kCompressedFormatVersion) {
            const json& codec = j.at("codec");
            if (!codec.is_object() || codec.value("name", "") != kCodecName)
                throw StaleTrunkError(where + ": block codec " + codec.dump() + ", this k3 reads " +
                                      kCodecName + "; re-pack it (k3 pack --compress MODEL_DIR " +
                                      trunkDir.string() + ")");
            idx.blockBytes = integerAt<std::uint64_t>(codec, "block_bytes", where + ": codec");
            if (idx.blockBytes < 64 || idx.blockBytes > codec::kMaxBlockBytes ||
                idx.blockBytes % 64 != 0)
                throw PackError(where + ": codec block_bytes " + std::to_string(idx.blockBytes) +
                                " is not a multiple of 64 in [64, " +
                                std::to_string(codec::kMaxBlockBytes) + "]");
        }
        for (const auto& r : j.at("records")) {
            TrunkRecord rec = recordFromJson(r, idx.fileBytes, where, idx.blockBytes);
            if (rec.layer < 0 && rec.compressed())
                throw PackError(where + ": model record " + rec.name +
                                " is stored in blocks; model records are read in place, raw");
            if (rec.layer >= 0) {
                if (rec.layer != int(idx.layers.size()))
                    throw PackError(where + ": layer records out of order at " + rec.name);
                idx.layers.push_back(std::move(rec));
            } else {
                idx.modelRecords.push_back(std::move(rec));
            }
        }
        // Records never share bytes: sorted by offset, each ends (aligned) before the next.
        std::vector<const TrunkRecord*> all;
        for (const auto& r : idx.layers) all.push_back(&r);
        for (const auto& r : idx.modelRecords) all.push_back(&r);
        std::sort(all.begin(), all.end(),
                  [](const TrunkRecord* a, const TrunkRecord* b) { return a->offset < b->offset; });
        for (std::size_t i = 1; i < all.size(); ++i)
            if (all[i - 1]->offset + alignUp(all[i - 1]->stored()) > all[i]->offset)
                throw PackError(where + ": records " + all[i - 1]->name + " [" +
                                std::to_string(all[i - 1]->offset) + ", +" +
                                std::to_string(all[i - 1]->stored()) + ") and " + all[i]->name +
                                " (at " + std::to_string(all[i]->offset) + ") overlap");
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
        const Checkpoint ckpt = Checkpoint::open(modelDir);
        const std::string diff = identityOf(ckpt, modelDir).differenceFrom(idx.source);
        if (!diff.empty())
            // Never "re-pack it" in place: it may be another model's trunk, still in use.
            throw StaleTrunkError("the trunk in " + trunkDir.string() +
                                  " was packed from another checkpoint (" + diff +
                                  "); choose this model's trunk, or pack one into a new "
                                  "folder (k3 pack " +
                                  modelDir.string() + " " + freshTrunkFolder(modelDir).string() +
                                  ")");
        checkRecordsAgainst(idx, ckpt, modelDir);
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
                     const PackObserver& observer, const std::atomic<bool>* cancel,
                     const PackOptions& options) {
    const auto t0 = std::chrono::steady_clock::now();
    const ModelConfig config = readModelConfig(modelDir / "config.json");
    const Checkpoint ckpt = Checkpoint::open(modelDir);
    const CheckpointIdentity identity = identityOf(ckpt, modelDir);

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
    if (options.compress &&
        (options.blockBytes < 64 || options.blockBytes > codec::kMaxBlockBytes ||
         options.blockBytes % 64 != 0 || kCopyChunk % options.blockBytes != 0))
        throw PackError("block size " + std::to_string(options.blockBytes) +
                        " is not a multiple of 64 in [64, " +
                        std::to_string(codec::kMaxBlockBytes) + "] dividing the copy chunk");
    std::uint64_t total = 0, payload = 0, largest = 0, layerBytes = 0, layerStored = 0;
    for (const Run& r : runs) {
        total += alignUp(r.hi - r.lo);
        payload += r.hi - r.lo;
        if (r.layer >= 0) largest = std::max(largest, r.hi - r.lo);
    }

    fs::create_directories(trunkDir);
    const fs::path binPath = trunkDir / "trunk.bin";
    const fs::path partial = trunkDir / "trunk.bin.partial";
    // Checked before the old trunk.json goes: a re-pack that cannot fit keeps the valid
    // trunk usable. The old trunk.bin stays until the rename, so the new one needs its
    // whole size free (the raw size: a compressed trunk needs less, never more).
    {
        std::error_code spaceError, sizeError;
        const fs::space_info space = fs::space(trunkDir, spaceError);
        std::uint64_t reusable = 0; // a leftover .partial is truncated and rewritten
        if (fs::is_regular_file(partial, sizeError)) reusable = fs::file_size(partial, sizeError);
        if (sizeError) reusable = 0;
        if (!spaceError && space.available + reusable < total)
            throw PackError("packing needs " + std::to_string(total) + " bytes free in " +
                            trunkDir.string() + " but " +
                            std::to_string(space.available + reusable) +
                            " are available; nothing was changed (free some space, or pack to "
                            "another folder)");
    }
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
        std::vector<std::uint64_t> tensorSums;
        XXH3_state_t* recordState = XXH3_createState();
        XXH3_state_t* tensorState = XXH3_createState();
        if (!recordState || !tensorState) {
            XXH3_freeState(recordState);
            XXH3_freeState(tensorState);
            throw std::bad_alloc();
        }
        struct FreeStates {
            XXH3_state_t* a;
            XXH3_state_t* b;
            ~FreeStates() {
                XXH3_freeState(a);
                XXH3_freeState(b);
            }
        } freeStates{recordState, tensorState};
        // Coded output is gathered here and written in aligned prefixes; a record's tail is
        // padded to 4096 so the next record starts aligned.
        memory::AlignedBuffer coded(
            options.compress
                ? kCopyChunk + kCopyChunk / options.blockBytes * codec::kBlockHeaderBytes +
                      2 * kTrunkAlignment
                : 0);
        std::vector<std::vector<std::byte>> blocks; // one chunk's coded blocks
        for (const Run& r : runs) {
            auto& f = files[r.shard];
            if (!f) f = std::make_unique<AlignedFile>(ckpt.shardPaths()[r.shard]);
            const bool code = options.compress && r.layer >= 0 && r.hi > r.lo;
            // A layer is coded first; when that does not pay it is copied again, raw.
            std::vector<std::uint64_t> blockSizes;
            std::uint64_t stored = 0;
            for (int pass = code ? 0 : 1; pass < 2; ++pass) {
                // The checksums are of the bytes as read for the copy (one pass): the
                // record's, and each tensor's in turn (they tile the run in offset order).
                XXH3_64bits_reset(recordState);
                XXH3_64bits_reset(tensorState);
                tensorSums.clear();
                blockSizes.clear();
                std::size_t tensor = 0;
                std::size_t used = 0;   // coded bytes waiting in `coded`
                std::uint64_t done = 0; // coded bytes written
                // One sequential range copy per record.
                for (std::uint64_t pos = r.lo; pos < r.hi;) {
                    if (cancel && cancel->load()) throw PackError("packing cancelled");
                    const std::size_t n =
                        std::size_t(std::min<std::uint64_t>(kCopyChunk, r.hi - pos));
                    f->read(pos, chunk.data(), n);
                    XXH3_64bits_update(recordState, chunk.data(), n);
                    for (std::uint64_t at = pos; at < pos + n && tensor < r.tensors.size();) {
                        const TensorInfo& t = r.tensors[tensor].second;
                        const std::uint64_t upto =
                            std::min<std::uint64_t>(pos + n, t.offset + t.nbytes);
                        XXH3_64bits_update(tensorState, chunk.data() + (at - pos),
                                           std::size_t(upto - at));
                        at = upto;
                        if (at == t.offset + t.nbytes) {
                            tensorSums.push_back(XXH3_64bits_digest(tensorState));
                            XXH3_64bits_reset(tensorState);
                            ++tensor;
                        }
                    }
                    if (pass == 0) {
                        // kCopyChunk is a multiple of the block size: blocks never straddle.
                        // The blocks of a chunk are coded in parallel (each on its own), then
                        // appended in order: the file does not depend on the thread count.
                        const auto count =
                            std::ptrdiff_t((n + options.blockBytes - 1) / options.blockBytes);
                        blocks.resize(std::size_t(count));
                        std::atomic<bool> failed{false}; // no exception may leave the region
#pragma omp parallel for schedule(dynamic, 8)
                        for (std::ptrdiff_t i = 0; i < count; ++i) {
                            const std::size_t b = std::size_t(i) * options.blockBytes;
                            auto& blk = blocks[std::size_t(i)];
                            blk.clear();
                            try {
                                codec::encodeBlock(chunk.data() + b,
                                                   std::min<std::size_t>(options.blockBytes, n - b),
                                                   blk);
                            } catch (...) {
                                failed.store(true);
                            }
                        }
                        if (failed.load())
                            throw PackError(r.name + ": coding a block failed (out of memory?)");
                        for (const auto& blk : blocks) {
                            std::memcpy(coded.data() + used, blk.data(), blk.size());
                            used += blk.size();
                            blockSizes.push_back(blk.size());
                            stored += blk.size();
                        }
                        const std::size_t flush =
                            std::size_t(used / kTrunkAlignment * kTrunkAlignment);
                        if (pos + n < r.hi && flush > 0) {
                            writeAll(fd, coded.data(), flush, out + done, partial);
                            done += flush;
                            std::memmove(coded.data(), coded.data() + flush, used - flush);
                            used -= flush;
                        } else if (pos + n == r.hi && used > 0) {
                            const std::size_t padded = std::size_t(alignUp(used));
                            std::memset(coded.data() + used, 0, padded - used);
                            writeAll(fd, coded.data(), padded, out + done, partial);
                            done += padded;
                            used = 0;
                        }
                    } else {
                        // A record's last chunk is padded with zeros to its aligned footprint.
                        const std::size_t padded = std::size_t(alignUp(n));
                        std::memset(chunk.data() + n, 0, padded - n);
                        writeAll(fd, chunk.data(), padded, out + (pos - r.lo), partial);
                    }
                    pos += n;
                    progress.bytesDone += n;
                }
                if (pass == 0 && (stored < r.hi - r.lo || options.keepBlocksWhenLarger)) break;
                if (pass == 0) { // coding did not pay: the same record, raw
                    progress.bytesDone -= r.hi - r.lo;
                    blockSizes.clear();
                    stored = 0;
                }
            }
            // Zero-byte tensors (none in a real checkpoint) have the empty input's checksum.
            while (tensorSums.size() < r.tensors.size())
                tensorSums.push_back(XXH3_64bits(nullptr, 0));
            records.push_back(
                recordJson(r, out, XXH3_64bits_digest(recordState), tensorSums, blockSizes));
            const std::uint64_t footprint = alignUp(blockSizes.empty() ? r.hi - r.lo : stored);
            out += footprint;
            if (r.layer >= 0) {
                layerBytes += r.hi - r.lo;
                layerStored += blockSizes.empty() ? r.hi - r.lo : stored;
            }
            ++progress.recordsDone;
            progress.seconds =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            progress.mbPerSecond =
                progress.seconds > 0 ? double(progress.bytesDone) / 1e6 / progress.seconds : 0;
            progress.record = r.name;
            if (observer) observer(progress);
        }
        total = out;
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

    json doc{{"format", "k3-trunk"},
             {"version", options.compress ? kCompressedFormatVersion : kTrunkFormatVersion},
             {"alignment", kTrunkAlignment},
             {"file_bytes", total},
             {"source", identityJson(identity)},
             {"records", records}};
    if (options.compress)
        doc["codec"] = {{"name", kCodecName}, {"block_bytes", options.blockBytes}};
    doc[kIndexChecksumKey] = hex64(indexChecksum(doc));
    writeFileAtomically(trunkDir / "trunk.json", doc.dump(1));

    PackResult res;
    res.fileBytes = total;
    res.payloadBytes = payload;
    res.layerBytes = layerBytes;
    res.layerStoredBytes = layerStored;
    res.largestLayerBytes = largest;
    res.layers = config.numHiddenLayers;
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
}

std::string checkpointIdentityJson(const CheckpointIdentity& identity) {
    return identityJson(identity).dump();
}

CheckpointIdentity parseCheckpointIdentityJson(std::string_view text) {
    try {
        return identityFromJson(json::parse(text));
    } catch (const json::exception& e) {
        throw PackError(std::string("the source identity is malformed: ") + e.what());
    }
}

} // namespace k3
