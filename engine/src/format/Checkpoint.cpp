#include "k3/aligned_io.hpp"
#include "k3/name_map.hpp"
#include "k3/safetensors.hpp"

#include "format/SafetensorsJson.hpp"

#include <algorithm>
#include <map>
#include <regex>

namespace k3 {

namespace {

namespace fs = std::filesystem;

// rank of a tensor the index lists but no header has supplied yet (real ranks are <= 6).
constexpr std::uint8_t kNotYetInHeader = 0xff;

// Shard numbers follow the file names, not the order tensors happen to appear in.
void sortShards(std::vector<std::string>& shardFiles, std::vector<format::IndexEntry>& entries) {
    std::vector<std::uint32_t> order(shardFiles.size());
    for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](auto a, auto b) { return shardFiles[a] < shardFiles[b]; });
    std::vector<std::uint32_t> remap(order.size());
    std::vector<std::string> sorted(order.size());
    for (std::uint32_t i = 0; i < order.size(); ++i) {
        remap[order[i]] = i;
        sorted[i] = std::move(shardFiles[order[i]]);
    }
    shardFiles = std::move(sorted);
    for (auto& e : entries) e.shard = remap[e.shard];
}

// No index: every name must be unique across the shards.
void addShard(TensorMap& tensors, const std::vector<fs::path>& shards,
              std::span<const format::HeaderTensor> header, const std::string& path) {
    const auto shard = static_cast<std::uint32_t>(shards.size() - 1);
    for (const auto& t : header) {
        auto [slot, added] = tensors.try_emplace(std::string(t.name), t.info);
        if (!added)
            throw FormatError(path + ": tensor \"" + slot->first + "\" is also in " +
                              shards[slot->second.shard].string());
        slot.value().shard = shard;
    }
}

// With an index: `tensors` already holds every listed name; the header fills them in.
// A name met twice means a duplicate in this header: the index maps a name to one shard.
void fillFromHeader(TensorMap& tensors, const std::vector<std::string>& shardFiles,
                    std::uint32_t shard, std::span<const format::HeaderTensor> header,
                    const std::string& path) {
    for (const auto& t : header) {
        auto it = tensors.find(t.name);
        if (it == tensors.end())
            throw FormatError(path + ": tensor \"" + std::string(t.name) +
                              "\" is not listed in the index's weight_map");
        TensorInfo& info = it.value();
        if (info.shard != shard)
            throw FormatError(path + ": tensor \"" + std::string(t.name) +
                              "\" is here, but the index maps it to " + shardFiles[info.shard]);
        if (info.rank != kNotYetInHeader)
            throw FormatError(path + ": tensor \"" + std::string(t.name) +
                              "\": appears twice in the header");
        info = t.info;
        info.shard = shard;
    }
}

// model-NNNNN-of-MMMMM.safetensors in `dir`, complete and in order, or nothing.
std::vector<fs::path> numberedShards(const fs::path& dir) {
    static const std::regex pattern(R"(model-(\d{5})-of-(\d{5})\.safetensors)");
    std::map<int, fs::path> found;
    int total = -1;
    for (const auto& entry : fs::directory_iterator(dir)) {
        std::smatch m;
        const std::string name = entry.path().filename().string();
        if (!std::regex_match(name, m, pattern)) continue;
        const int of = std::stoi(m[2].str());
        if (total >= 0 && of != total)
            throw FormatError(dir.string() + ": shards disagree on the shard count (" +
                              std::to_string(total) + " and " + std::to_string(of) + ")");
        total = of;
        found.emplace(std::stoi(m[1].str()), entry.path());
    }
    if (found.empty()) return {};
    std::string missing;
    for (int i = 1; i <= total; ++i)
        if (!found.count(i)) missing += (missing.empty() ? "" : ", ") + std::to_string(i);
    if (!missing.empty() || static_cast<int>(found.size()) != total)
        throw FormatError(dir.string() + ": incomplete shard set of " + std::to_string(total) +
                          (missing.empty() ? "" : ", missing shard(s) " + missing));
    std::vector<fs::path> out;
    for (auto& [n, p] : found) out.push_back(p);
    return out;
}

} // namespace

ShardIndex parseShardIndex(std::string_view text, const std::string& path) {
    const format::PaddedText json = format::PaddedText::copyOf(text);
    format::JsonScanner scanner;
    ShardIndex index;
    std::vector<format::IndexEntry> entries;
    scanner.index(json, path, index.shardFiles, entries);
    sortShards(index.shardFiles, entries);
    index.tensorShard.reserve(entries.size());
    for (const auto& e : entries)
        if (!index.tensorShard.try_emplace(std::string(e.tensor), e.shard).second)
            throw FormatError(path + ": weight_map lists tensor \"" + std::string(e.tensor) +
                              "\" twice");
    return index;
}

struct Checkpoint::Tensors {
    TensorMap map;
};

Checkpoint::Checkpoint()
    : tensors_(std::make_unique<Tensors>()), filesMutex_(std::make_unique<std::mutex>()) {}
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;
Checkpoint::~Checkpoint() = default;

Checkpoint Checkpoint::fromShards(const std::vector<fs::path>& shardFiles) {
    Checkpoint c;
    format::JsonScanner scanner;
    for (const auto& path : shardFiles) {
        const std::string name = path.string();
        const format::HeaderText text = format::readHeaderText(path);
        const auto& header = scanner.header(text.json, text.fileSize, name);
        format::checkDuplicates(header, name);
        format::checkOverlaps(header, 8 + text.json.size(), name);
        c.shards_.push_back(path);
        addShard(c.tensors_->map, c.shards_, header, name);
    }
    c.description_ =
        shardFiles.size() == 1 ? shardFiles[0].string() : shardFiles[0].parent_path().string();
    return c;
}

Checkpoint Checkpoint::openIndexed(const fs::path& location, const fs::path& indexPath) {
    Checkpoint c;
    c.description_ = location.string();
    const std::string indexName = indexPath.string();
    format::JsonScanner scanner;
    std::vector<std::string> shardFiles;
    {
        std::vector<format::IndexEntry> entries; // views into the scanner: used up here
        scanner.index(format::readPaddedFile(indexPath), indexName, shardFiles, entries);
        sortShards(shardFiles, entries);
        c.tensors_->map.reserve(entries.size());
        TensorInfo pending;
        pending.rank = kNotYetInHeader;
        for (const auto& e : entries) {
            pending.shard = e.shard;
            if (!c.tensors_->map.try_emplace(std::string(e.tensor), pending).second)
                throw FormatError(indexName + ": weight_map lists tensor \"" +
                                  std::string(e.tensor) + "\" twice");
        }
    }
    std::size_t filled = 0;
    for (const auto& file : shardFiles) {
        const fs::path path = location / file;
        const std::string name = path.string();
        const format::HeaderText text = format::readHeaderText(path);
        const auto& header = scanner.header(text.json, text.fileSize, name);
        const auto shard = static_cast<std::uint32_t>(c.shards_.size());
        fillFromHeader(c.tensors_->map, shardFiles, shard, header, name);
        format::checkOverlaps(header, 8 + text.json.size(), name);
        c.shards_.push_back(path);
        filled += header.size();
    }
    if (filled != c.tensors_->map.size()) {
        for (const auto& [name, t] : c.tensors_->map)
            if (t.rank == kNotYetInHeader)
                throw FormatError(indexName + ": tensor \"" + name + "\" is mapped to " +
                                  shardFiles[t.shard] +
                                  " but that shard's header does not hold it");
    }
    return c;
}

Checkpoint Checkpoint::open(const fs::path& location) {
    std::error_code ec;
    if (fs::is_regular_file(location, ec)) return fromShards({location});
    if (!fs::is_directory(location, ec))
        throw FormatError(location.string() + ": no such checkpoint file or directory");

    const fs::path indexPath = location / "model.safetensors.index.json";
    if (fs::exists(indexPath, ec)) return openIndexed(location, indexPath);
    if (fs::exists(location / "model.safetensors", ec))
        return fromShards({location / "model.safetensors"});
    auto numbered = numberedShards(location);
    if (numbered.empty())
        throw FormatError(location.string() +
                          ": no model.safetensors.index.json, model.safetensors or "
                          "model-NNNNN-of-MMMMM.safetensors here");
    Checkpoint c = fromShards(numbered);
    c.description_ = location.string();
    return c;
}

const TensorInfo* Checkpoint::find(std::string_view name) const {
    auto it = tensors_->map.find(name);
    return it == tensors_->map.end() ? nullptr : &it->second;
}

const TensorInfo& Checkpoint::at(std::string_view name) const {
    if (const TensorInfo* t = find(name)) return *t;
    throw FormatError(description_ + ": no tensor named \"" + std::string(name) + "\"");
}

std::size_t Checkpoint::tensorCount() const {
    return tensors_->map.size();
}

std::span<const std::pair<std::string, TensorInfo>> Checkpoint::tensors() const {
    return tensors_->map.values_container();
}

std::uint64_t Checkpoint::totalTensorBytes() const {
    std::uint64_t total = 0;
    for (const auto& [name, t] : tensors_->map) total += t.nbytes;
    return total;
}

AlignedFile& Checkpoint::file(std::uint32_t shard) const {
    std::lock_guard lock(*filesMutex_);
    if (files_.size() < shards_.size()) files_.resize(shards_.size());
    auto& slot = files_[shard];
    if (!slot) slot = std::make_unique<AlignedFile>(shards_[shard]);
    return *slot;
}

std::vector<std::byte> Checkpoint::readRaw(std::string_view name) const {
    const TensorInfo& t = at(name);
    std::vector<std::byte> bytes(t.nbytes);
    file(t.shard).read(t.offset, bytes.data(), bytes.size());
    return bytes;
}

std::vector<float> Checkpoint::readFloats(std::string_view name) const {
    const TensorInfo& t = at(name);
    if (t.dtype == DType::U8)
        throw FormatError(description_ + ": tensor \"" + std::string(name) +
                          "\" is U8 (packed), not floats");
    const auto raw = readRaw(name);
    std::vector<float> out(t.numel());
    widenToFloat(t.dtype, raw, out);
    return out;
}

} // namespace k3
