#include "k3/aligned_io.hpp"
#include "k3/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>

namespace k3 {

namespace {

using nlohmann::json;
namespace fs = std::filesystem;

// A shard name from the index becomes a path under the model directory, so it must
// be a plain file name: no separators, no "..", nothing that escapes the directory.
bool isPlainFileName(std::string_view name) {
    if (name.empty() || name == "." || name == "..") return false;
    return name.find_first_of(std::string_view("/\\\0", 3)) == std::string_view::npos &&
           name.find("..") == std::string_view::npos;
}

// SAX walk of {"metadata": {...}, "weight_map": {"tensor": "shard file", ...}}: the
// real index has half a million entries.
class IndexHandler : public nlohmann::json_sax<json> {
public:
    IndexHandler(const std::string& path, ShardIndex& out) : path_(path), out_(out) {}

    std::string error;
    bool sawWeightMap = false;

    bool null() override { return scalar("null"); }
    bool boolean(bool) override { return scalar("a boolean"); }
    bool number_integer(number_integer_t) override { return scalar("a number"); }
    bool number_unsigned(number_unsigned_t) override { return scalar("a number"); }
    bool number_float(number_float_t, const string_t&) override { return scalar("a number"); }
    bool binary(binary_t&) override { return scalar("binary data"); }
    bool string(string_t& s) override {
        if (skipDepth_ || consumeSkip()) return true;
        if (depth_ != 2) return scalar("a string");
        if (!isPlainFileName(s))
            return fail("weight_map[\"" + tensor_ + "\"] = \"" + s +
                        "\" is not a plain shard file name (no path separators or \"..\")");
        auto [it, added] = shardIds_.try_emplace(s, static_cast<std::uint32_t>(shardIds_.size()));
        if (added) out_.shardFiles.push_back(s);
        if (!out_.tensorShard.try_emplace(std::move(tensor_), it->second).second)
            return fail("weight_map lists a tensor twice");
        return true;
    }
    bool start_object(std::size_t) override {
        if (skipDepth_) return ++skipDepth_, true;
        if (skipNext_) return beginSkip();
        if (depth_ == 0) return depth_ = 1, true;
        if (depth_ == 1 && inWeightMap_) return depth_ = 2, true;
        return scalar("an object");
    }
    bool end_object() override {
        if (skipDepth_) return --skipDepth_, true;
        --depth_;
        if (depth_ == 1) inWeightMap_ = false;
        return true;
    }
    bool start_array(std::size_t) override {
        if (skipDepth_) return ++skipDepth_, true;
        if (skipNext_) return beginSkip();
        return scalar("an array");
    }
    bool end_array() override {
        if (skipDepth_) --skipDepth_;
        return true;
    }
    bool key(string_t& k) override {
        if (skipDepth_) return true;
        if (depth_ == 1) {
            inWeightMap_ = k == "weight_map";
            if (inWeightMap_) {
                if (sawWeightMap) return fail("weight_map appears twice");
                sawWeightMap = true;
            }
            skipNext_ = !inWeightMap_; // "metadata" and anything else: not ours
            return true;
        }
        tensor_ = std::move(k);
        return true;
    }
    bool parse_error(std::size_t position, const std::string&,
                     const nlohmann::detail::exception& e) override {
        if (error.empty())
            error =
                path_ + ": not valid JSON at byte " + std::to_string(position) + ": " + e.what();
        return false;
    }

private:
    bool consumeSkip() {
        if (!skipNext_) return false;
        skipNext_ = false;
        return true;
    }
    bool beginSkip() {
        skipNext_ = false;
        skipDepth_ = 1;
        return true;
    }
    bool scalar(const char* what) {
        if (skipDepth_ || consumeSkip()) return true;
        if (depth_ == 2)
            return fail("weight_map[\"" + tensor_ + "\"] is " + what +
                        ", expected a shard file name");
        return fail(std::string("unexpected ") + what +
                    (depth_ == 0 ? " at the top level" : " in weight_map"));
    }
    bool fail(const std::string& what) {
        if (error.empty()) error = path_ + ": " + what;
        return false;
    }

    const std::string& path_;
    ShardIndex& out_;
    std::unordered_map<std::string, std::uint32_t> shardIds_;
    std::string tensor_;
    int depth_ = 0;
    int skipDepth_ = 0;
    bool skipNext_ = false;
    bool inWeightMap_ = false;
};

std::string readWholeFile(const fs::path& path) {
    std::ifstream in(path, std::ios::binary);
    if (!in) throw FormatError(path.string() + ": cannot open");
    std::ostringstream text;
    text << in.rdbuf();
    if (in.bad()) throw FormatError(path.string() + ": read error");
    return std::move(text).str();
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
    ShardIndex index;
    IndexHandler handler(path, index);
    const bool ok = json::sax_parse(text.begin(), text.end(), &handler);
    if (!ok || !handler.error.empty())
        throw FormatError(handler.error.empty() ? path + ": invalid index" : handler.error);
    if (!handler.sawWeightMap) throw FormatError(path + ": no weight_map");
    // Shard numbers follow the file names, not the order tensors happen to appear in.
    std::vector<std::uint32_t> order(index.shardFiles.size());
    for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(),
              [&](auto a, auto b) { return index.shardFiles[a] < index.shardFiles[b]; });
    std::vector<std::uint32_t> remap(order.size());
    std::vector<std::string> sorted(order.size());
    for (std::uint32_t i = 0; i < order.size(); ++i) {
        remap[order[i]] = i;
        sorted[i] = index.shardFiles[order[i]];
    }
    index.shardFiles = std::move(sorted);
    for (auto& [name, shard] : index.tensorShard) shard = remap[shard];
    return index;
}

Checkpoint::Checkpoint() : filesMutex_(std::make_unique<std::mutex>()) {}
Checkpoint::Checkpoint(Checkpoint&&) noexcept = default;
Checkpoint& Checkpoint::operator=(Checkpoint&&) noexcept = default;
Checkpoint::~Checkpoint() = default;

void Checkpoint::addShard(ShardHeader&& header, const ShardIndex* index) {
    const auto shard = static_cast<std::uint32_t>(shards_.size() - 1);
    for (auto& [name, info] : header.tensors) {
        if (index) {
            auto it = index->tensorShard.find(name);
            if (it == index->tensorShard.end())
                throw FormatError(header.path + ": tensor \"" + name +
                                  "\" is not listed in the index's weight_map");
            if (it->second != shard)
                throw FormatError(header.path + ": tensor \"" + name +
                                  "\" is here, but the index maps it to " +
                                  index->shardFiles[it->second]);
        }
        info.shard = shard;
        auto [slot, added] = tensors_.try_emplace(std::move(name), info);
        if (!added)
            throw FormatError(header.path + ": tensor \"" + slot->first + "\" is also in " +
                              shards_[slot->second.shard].string());
    }
}

Checkpoint Checkpoint::fromShards(const std::vector<fs::path>& shardFiles) {
    Checkpoint c;
    for (const auto& path : shardFiles) {
        ShardHeader header = readShardHeader(path);
        c.shards_.push_back(path);
        c.addShard(std::move(header), nullptr);
    }
    c.description_ =
        shardFiles.size() == 1 ? shardFiles[0].string() : shardFiles[0].parent_path().string();
    return c;
}

Checkpoint Checkpoint::open(const fs::path& location) {
    std::error_code ec;
    if (fs::is_regular_file(location, ec)) return fromShards({location});
    if (!fs::is_directory(location, ec))
        throw FormatError(location.string() + ": no such checkpoint file or directory");

    const fs::path indexPath = location / "model.safetensors.index.json";
    if (fs::exists(indexPath, ec)) {
        const ShardIndex index = parseShardIndex(readWholeFile(indexPath), indexPath.string());
        Checkpoint c;
        c.description_ = location.string();
        c.tensors_.reserve(index.tensorShard.size());
        for (const auto& file : index.shardFiles) {
            const fs::path path = location / file;
            ShardHeader header = readShardHeader(path);
            c.shards_.push_back(path);
            c.addShard(std::move(header), &index);
        }
        if (c.tensors_.size() != index.tensorShard.size()) {
            for (const auto& [name, shard] : index.tensorShard)
                if (!c.tensors_.count(name))
                    throw FormatError(indexPath.string() + ": tensor \"" + name +
                                      "\" is mapped to " + index.shardFiles[shard] +
                                      " but that shard's header does not hold it");
        }
        return c;
    }
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
    auto it = tensors_.find(name);
    return it == tensors_.end() ? nullptr : &it->second;
}

const TensorInfo& Checkpoint::at(std::string_view name) const {
    if (const TensorInfo* t = find(name)) return *t;
    throw FormatError(description_ + ": no tensor named \"" + std::string(name) + "\"");
}

std::uint64_t Checkpoint::totalTensorBytes() const {
    std::uint64_t total = 0;
    for (const auto& [name, t] : tensors_) total += t.nbytes;
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
