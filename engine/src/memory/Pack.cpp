// The trunk's shared pieces: the source checkpoint's identity, the checksums and their
// hex form, and the verification of bytes as read. Reading trunk.json is PackIndex.cpp,
// packing is PackTrunk.cpp.

#include "k3/pack.hpp"
#include "k3/read_file.hpp"

#include "io/Xxh3.hpp"
#include "k3/config.hpp"
#include "memory/PackInternal.hpp"
#include "platform/Platform.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>

namespace k3 {
namespace {
namespace fs = std::filesystem;
using nlohmann::json;
} // namespace

namespace packing {
namespace {

const std::string kModelPrefix = "language_model.model.";

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

} // namespace

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

void RunChecksums::FreeState::operator()(XXH3_state_s* s) const {
    XXH3_freeState(s);
}

RunChecksums::RunChecksums() : record_(XXH3_createState()), tensor_(XXH3_createState()) {
    if (!record_ || !tensor_) throw std::bad_alloc();
}

RunChecksums::~RunChecksums() = default;

void RunChecksums::start(std::uint64_t lo, std::vector<std::uint64_t> tensorEnds) {
    XXH3_64bits_reset(record_.get());
    XXH3_64bits_reset(tensor_.get());
    ends_ = std::move(tensorEnds);
    sums_.clear();
    pos_ = lo;
}

void RunChecksums::update(const std::byte* data, std::size_t n) {
    XXH3_64bits_update(record_.get(), data, n);
    const std::uint64_t end = pos_ + n;
    for (std::uint64_t at = pos_; at < end && sums_.size() < ends_.size();) {
        const std::uint64_t upto = std::min(end, ends_[sums_.size()]);
        XXH3_64bits_update(tensor_.get(), data + (at - pos_), std::size_t(upto - at));
        at = upto;
        if (at == ends_[sums_.size()]) {
            sums_.push_back(XXH3_64bits_digest(tensor_.get()));
            XXH3_64bits_reset(tensor_.get());
        }
    }
    pos_ = end;
}

std::uint64_t RunChecksums::record() const {
    return XXH3_64bits_digest(record_.get());
}

std::vector<std::uint64_t> RunChecksums::tensors() const {
    // Zero-byte tensors at the run's end (none in a real checkpoint) hash the empty input.
    std::vector<std::uint64_t> out = sums_;
    while (out.size() < ends_.size()) out.push_back(XXH3_64bits(nullptr, 0));
    return out;
}

json identityJson(const CheckpointIdentity& id) {
    json shards = json::array();
    for (const auto& s : id.shards)
        shards.push_back({{"name", s.name}, {"size", s.size}, {"header_xxh3", s.headerHash}});
    return {{"shards", shards}, {"config_fnv1a64", id.configHash}, {"num_layers", id.numLayers}};
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

CheckpointIdentity identityOf(const Checkpoint& ckpt, const fs::path& modelDir) {
    CheckpointIdentity id;
    for (const fs::path& p : ckpt.shardPaths()) {
        platform::FileInfo st;
        if (!platform::fileInfo(p, st)) throw PackError(p.string() + ": cannot stat");
        id.shards.push_back({p.filename().string(), st.size, shardHeaderHash(p)});
    }
    std::sort(id.shards.begin(), id.shards.end(),
              [](const auto& a, const auto& b) { return a.name < b.name; });
    id.configHash = fnv1aHex(readWholeFile(modelDir / "config.json"));
    id.numLayers = readModelConfig(modelDir / "config.json").numHiddenLayers;
    return id;
}

} // namespace packing

using namespace packing;

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

CheckpointIdentity checkpointIdentity(const fs::path& modelDir) {
    return identityOf(Checkpoint::open(modelDir), modelDir);
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
