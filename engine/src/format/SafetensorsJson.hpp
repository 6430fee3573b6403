#pragma once
// The JSON side of safetensors: shard headers and the index's weight_map, scanned with
// simdjson On-Demand (the real checkpoint has 497,220 tensors; a DOM or a per-token SAX
// callback costs seconds there). Only SafetensorsJson.cpp includes <simdjson.h>.
// Names handed out are views into the scanner's buffers: valid until its next scan.

#include "k3/safetensors.hpp"

#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace k3::format {

// simdjson reads up to this many bytes past the end of the text (checked in the .cpp).
inline constexpr std::size_t kJsonPadding = 64;

// Text followed by kJsonPadding readable bytes, so the scanner never copies it.
class PaddedText {
public:
    explicit PaddedText(std::size_t size);
    static PaddedText copyOf(std::string_view text);

    char* data() { return bytes_.get(); }
    const char* data() const { return bytes_.get(); }
    std::size_t size() const { return size_; }
    std::string_view view() const { return {bytes_.get(), size_}; }

private:
    std::unique_ptr<char[]> bytes_;
    std::size_t size_;
};

// A whole file (the index). FormatError naming the file when it cannot be read.
PaddedText readPaddedFile(const std::filesystem::path& path);

// The header JSON of one .safetensors file, after every check on the 8-byte length.
struct HeaderText {
    PaddedText json;
    std::uint64_t fileSize;
};
HeaderText readHeaderText(const std::filesystem::path& path);

struct HeaderTensor {
    std::string_view name;
    TensorInfo info; // offset absolute, shard = 0
};

struct IndexEntry {
    std::string_view tensor;
    std::uint32_t shard; // into the shardFiles list filled by the same scan
};

class JsonScanner {
public:
    JsonScanner();
    ~JsonScanner();
    JsonScanner(const JsonScanner&) = delete;
    JsonScanner& operator=(const JsonScanner&) = delete;

    // Every tensor of a header, in header order, each bounds- and size-checked against
    // the data section. Duplicates and overlaps are the caller's (checkDuplicates,
    // checkOverlaps): the index path finds duplicates while filling its map.
    const std::vector<HeaderTensor>& header(const PaddedText& json, std::uint64_t fileSize,
                                            const std::string& path);

    // weight_map of model.safetensors.index.json: `shardFiles` gets the distinct shard
    // names (plain file names) in first-seen order, `entries` every tensor.
    void index(const PaddedText& json, const std::string& path,
               std::vector<std::string>& shardFiles, std::vector<IndexEntry>& entries);

private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

void checkDuplicates(std::span<const HeaderTensor> tensors, const std::string& path);
void checkOverlaps(std::span<const HeaderTensor> tensors, std::uint64_t dataStart,
                   const std::string& path);

} // namespace k3::format
