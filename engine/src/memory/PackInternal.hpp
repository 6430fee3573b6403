#pragma once
// Shared by the trunk sources only (Pack.cpp: identity and checksums, PackIndex.cpp:
// reading trunk.json, PackTrunk.cpp: writing trunk.bin and trunk.json).

#include "k3/pack.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <filesystem>
#include <limits>
#include <memory>
#include <string>
#include <string_view>
#include <type_traits>
#include <vector>

struct XXH3_state_s;

namespace k3::packing {

// 2: XXH3-64 checksums (trunk.json itself, every record, every tensor) and the source
// named by its shard headers' bytes, not by mtimes. Version 1 trunks are refused.
// 3: as 2, with layer records coded per block (`k3 pack --compress`); 2 is still read and
// still written by a plain pack, so an older k3 reads it.
inline constexpr int kTrunkFormatVersion = 2;
inline constexpr int kCompressedFormatVersion = 3;
inline constexpr const char* kCodecName = "k3-bf16-high-planes";
inline constexpr const char* kIndexChecksumKey = "index_xxh3";

// The model-level tensors the forward needs, each its own record.
const std::vector<std::string>& modelLevelTensors();

// A file read whole (at most kMaxIndexBytes); a read error is a PackError.
std::string readWholeFile(const std::filesystem::path& path);

// 16 lowercase hex digits, and back (exactly 16, else a PackError naming `what`).
std::string hex64(std::uint64_t v);
std::uint64_t parseHex64(const nlohmann::json& v, const std::string& what);

// The checksum of trunk.json: XXH3-64 of the document without its own checksum field,
// in nlohmann's compact dump (object keys sorted, so the text is canonical).
std::uint64_t indexChecksum(nlohmann::json j);

// Which layer a tensor belongs to, or -1 when it is not under language_model.model.layers.
int layerOf(std::string_view name);

// The source identity as trunk.json and draft.json hold it, and as read from the model.
nlohmann::json identityJson(const CheckpointIdentity& id);
CheckpointIdentity identityFromJson(const nlohmann::json& j);
CheckpointIdentity identityOf(const Checkpoint& ckpt, const std::filesystem::path& modelDir);

// The XXH3-64 of a record's run and of each tensor in it, fed the run's bytes in file
// order in one pass: what packing records, and what checking a shard against the trunk
// computes again.
class RunChecksums {
public:
    RunChecksums();
    ~RunChecksums();
    RunChecksums(const RunChecksums&) = delete;
    RunChecksums& operator=(const RunChecksums&) = delete;

    // A run starting at byte `lo` of its shard whose tensors, in offset order, end at
    // `tensorEnds` (absolute offsets; the tensors tile the run).
    void start(std::uint64_t lo, std::vector<std::uint64_t> tensorEnds);
    void update(const std::byte* data, std::size_t n);
    std::uint64_t record() const;
    // One per tensor, in offset order, once the whole run was fed.
    std::vector<std::uint64_t> tensors() const;

private:
    struct FreeState {
        void operator()(XXH3_state_s* s) const;
    };
    std::unique_ptr<XXH3_state_s, FreeState> record_, tensor_;
    std::vector<std::uint64_t> ends_, sums_;
    std::uint64_t pos_ = 0;
};

// What a shard's identity on disk is: a shard whose tuple was seen when its trunk
// tensors matched the trunk's checksums is not read again (TrunkSources.cpp).
struct ShardStat {
    std::uint64_t device = 0, inode = 0, size = 0;
    std::int64_t mtimeNs = 0, ctimeNs = 0;
    bool operator==(const ShardStat&) const = default;
};
ShardStat statShard(const std::filesystem::path& shard);

// The trunk's side file of shards known to hold the bytes trunk.json (its checksum
// indexXxh3) was packed from: `seen` (shard name and its tuple, taken before the bytes
// were read and unchanged after) added, except shards changed in the last 2 s; written
// atomically. A failure to write it only means the next open checks again.
void rememberCheckedShards(const std::filesystem::path& trunkDir, std::uint64_t indexXxh3,
                           std::vector<std::pair<std::string, ShardStat>> seen);

// Every trunk tensor whose shard is not remembered as checked is hashed from the shard and
// compared with trunk.json's checksum; a StaleTrunkError names the first that differs.
void checkTrunkSources(const TrunkIndex& idx, const Checkpoint& ckpt,
                       const std::filesystem::path& trunkDir, const std::filesystem::path& modelDir,
                       const TrunkCheckObserver& observer);

// nlohmann converts a floating-point number to an integer with a plain cast, which is
// undefined for e.g. 1e300 (the fuzzer's find), so every integer field is checked to be
// an integer within the target type's range first.
template <typename T> T integerValue(const nlohmann::json& v, const std::string& what) {
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

template <typename T>
T integerAt(const nlohmann::json& j, const char* key, const std::string& where) {
    return integerValue<T>(j.at(key), where + ": \"" + key + "\"");
}

} // namespace k3::packing
