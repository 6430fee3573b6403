#pragma once
// Safetensors shards and the multi-shard index: the 1.56 TB checkpoint treated as a
// catalogue. Only headers are parsed at open; tensor bytes are read on demand.
// Every header is bounds-checked before anything trusts it: a header that points
// outside its file, overlaps, overflows or names an unknown dtype is refused with
// the file and the tensor named (FormatError).

#include "k3/error.hpp"
#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace k3 {

class AlignedFile;

class FormatError : public Error {
public:
    explicit FormatError(const std::string& message) : Error(ErrorKind::Format, message) {}
};

// Only what the checkpoint uses; anything else is refused by name (e.g. "I64").
enum class DType : std::uint8_t { F32, F16, BF16, U8 };

std::string_view dtypeName(DType dtype);
std::size_t dtypeSize(DType dtype);
std::optional<DType> parseDType(std::string_view name);

// Widening to f32 is exact (every f16 value, subnormals, infinities and NaN included,
// is a float; bf16 is the top half of one: k3::bf16ToFloat in kernels.hpp), so tests
// compare bits.
float f16ToFloat(std::uint16_t bits);

// Little-endian raw tensor bytes -> floats. U8 is refused (it is packed MXFP4, not numbers).
void widenToFloat(DType dtype, std::span<const std::byte> raw, std::span<float> out);

inline constexpr int kMaxTensorRank = 6;
// Upper bound on a header, as in the reference safetensors implementation.
inline constexpr std::uint64_t kMaxHeaderBytes = 100'000'000;

struct TensorInfo {
    std::uint64_t offset = 0; // ABSOLUTE byte offset in the shard file
    std::uint64_t nbytes = 0;
    std::array<std::uint64_t, kMaxTensorRank> shape{};
    std::uint32_t shard = 0; // index into Checkpoint::shardPaths()
    DType dtype = DType::F32;
    std::uint8_t rank = 0; // 0 = scalar (one element)

    std::span<const std::uint64_t> dims() const { return {shape.data(), rank}; }
    std::uint64_t numel() const;
};

struct ShardHeader {
    std::string path;
    std::uint64_t fileSize = 0;
    std::uint64_t dataStart = 0;                             // 8 + header length
    std::vector<std::pair<std::string, TensorInfo>> tensors; // header order, shard = 0
};

// Validate a header already in memory: `headerJson` is the JSON after the 8-byte
// length, `fileSize` the whole file's size, `path` names the file in messages.
ShardHeader parseShardHeader(std::string_view headerJson, std::uint64_t fileSize,
                             const std::string& path);
// Read and validate the header of one .safetensors file (reads only the header).
ShardHeader readShardHeader(const std::filesystem::path& path);

class Checkpoint {
public:
    // `location` is a directory holding model.safetensors.index.json, or
    // model.safetensors, or a complete set model-NNNNN-of-MMMMM.safetensors; or it is
    // one .safetensors file.
    static Checkpoint open(const std::filesystem::path& location);
    // Exactly these shard files, no index: names must be unique across them.
    static Checkpoint fromShards(const std::vector<std::filesystem::path>& shardFiles);

    Checkpoint(Checkpoint&&) noexcept;
    Checkpoint& operator=(Checkpoint&&) noexcept;
    ~Checkpoint();

    const TensorInfo* find(std::string_view name) const;
    const TensorInfo& at(std::string_view name) const; // FormatError naming the tensor
    std::size_t tensorCount() const;
    // Every tensor as (name, info), in the index's order (else the shards' header order).
    std::span<const std::pair<std::string, TensorInfo>> tensors() const;
    const std::vector<std::filesystem::path>& shardPaths() const { return shards_; }
    std::uint64_t totalTensorBytes() const;

    // The tensor's raw bytes (through aligned I/O), or widened to f32.
    std::vector<std::byte> readRaw(std::string_view name) const;
    std::vector<float> readFloats(std::string_view name) const;

private:
    Checkpoint();
    static Checkpoint openIndexed(const std::filesystem::path& location,
                                  const std::filesystem::path& indexPath);
    AlignedFile& file(std::uint32_t shard) const;

    struct Tensors; // the name table (k3/name_map.hpp), private to the engine
    std::vector<std::filesystem::path> shards_;
    std::unique_ptr<Tensors> tensors_;
    std::string description_; // the checkpoint's location, for messages
    mutable std::unique_ptr<std::mutex> filesMutex_;
    mutable std::vector<std::unique_ptr<AlignedFile>> files_;
};

} // namespace k3
