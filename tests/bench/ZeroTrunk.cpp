// writeZeroTrunk (SynthCheckpoint.hpp): the trunk `k3 pack` writes for a checkpoint whose
// tensor bytes are zero, through the engine's public API only; tst_synth_checkpoint
// checks it against packTrunk's own output on a sparse copy of a small checkpoint.
#include "SynthCheckpoint.hpp"

#include <k3/config.hpp>
#include <k3/pack.hpp>
#include <k3/safetensors.hpp>

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace k3synth {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using Tensors = std::vector<std::pair<std::string, k3::TensorInfo>>;

// The packer's model-level records, in its order (engine/src/memory/Pack.cpp).
const char* const kModelLevel[] = {
    "language_model.model.embed_tokens.weight", "language_model.model.norm.weight",
    "language_model.model.output_attn_res_norm.weight",
    "language_model.model.output_attn_res_proj.weight", "language_model.lm_head.weight"};

std::string hex64(std::uint64_t v) {
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
    return buf;
}

// XXH3-64 of n zero bytes, read from an anonymous read-only mapping (every page the one
// zero page: no memory), remembered per size (most records and tensors repeat one).
class ZeroChecksums {
public:
    explicit ZeroChecksums(std::uint64_t largest) : size_(std::max<std::uint64_t>(largest, 1)) {
        zeros_ =
            ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (zeros_ == MAP_FAILED) throw std::runtime_error("cannot map zero pages");
    }
    ~ZeroChecksums() { ::munmap(zeros_, size_); }
    ZeroChecksums(const ZeroChecksums&) = delete;
    ZeroChecksums& operator=(const ZeroChecksums&) = delete;
    std::string of(std::uint64_t n) {
        auto it = seen_.find(n);
        if (it == seen_.end()) it = seen_.emplace(n, hex64(k3::trunkChecksum(zeros_, n))).first;
        return it->second;
    }

private:
    std::uint64_t size_;
    void* zeros_;
    std::map<std::uint64_t, std::string> seen_;
};

// One record's tensors, sorted, as one gap-free run in one shard (the packer refuses
// anything else): its [lo, hi).
std::pair<std::uint64_t, std::uint64_t> runOf(const std::string& name, Tensors& ts) {
    if (ts.empty()) throw std::runtime_error("trunk record " + name + " has no tensors");
    std::sort(ts.begin(), ts.end(),
              [](const auto& a, const auto& b) { return a.second.offset < b.second.offset; });
    const std::uint64_t lo = ts.front().second.offset;
    std::uint64_t end = lo;
    for (const auto& [n, t] : ts) {
        if (t.shard != ts.front().second.shard || t.offset != end)
            throw std::runtime_error("trunk record " + name + " is not one run: " + n);
        end = t.offset + t.nbytes;
    }
    return {lo, end};
}

} // namespace

std::uint64_t writeZeroTrunk(const fs::path& modelDir, const fs::path& trunkDir) {
    const k3::ModelConfig config = k3::readModelConfig(modelDir / "config.json");
    const k3::Checkpoint ckpt = k3::Checkpoint::open(modelDir);
    const std::string prefix = "language_model.model.layers.";
    std::vector<std::pair<std::string, Tensors>> runs(std::size_t(config.numHiddenLayers));
    for (int L = 0; L < config.numHiddenLayers; ++L)
        runs[std::size_t(L)].first = "layer " + std::to_string(L);
    for (const auto& [name, info] : ckpt.tensors()) {
        if (name.rfind(prefix, 0) != 0 || k3::isRoutedExpertTensor(name)) continue;
        const int L = std::atoi(name.c_str() + prefix.size());
        if (L >= 0 && L < config.numHiddenLayers)
            runs[std::size_t(L)].second.emplace_back(name, info);
    }
    for (const char* n : kModelLevel) {
        const k3::TensorInfo* t = ckpt.find(n);
        if (!t) throw std::runtime_error(modelDir.string() + " has no tensor " + n);
        runs.push_back({n, {{n, *t}}});
    }
    std::uint64_t largest = 0;
    for (auto& [name, ts] : runs) {
        const auto [lo, hi] = runOf(name, ts);
        largest = std::max(largest, hi - lo);
    }
    ZeroChecksums zeros(largest);
    json records = json::array();
    std::uint64_t at = 0;
    for (std::size_t i = 0; i < runs.size(); ++i) {
        auto& [name, ts] = runs[i];
        const auto [lo, hi] = runOf(name, ts);
        json tensors = json::object();
        for (const auto& [n, t] : ts) {
            json shape = json::array();
            for (std::uint64_t d : t.dims()) shape.push_back(d);
            tensors[n] = {{"offset", t.offset - lo},
                          {"nbytes", t.nbytes},
                          {"dtype", std::string(k3::dtypeName(t.dtype))},
                          {"shape", shape},
                          {"xxh3", zeros.of(t.nbytes)}};
        }
        const int layer = i < std::size_t(config.numHiddenLayers) ? int(i) : -1;
        records.push_back({{"name", name},
                           {"layer", layer},
                           {"offset", at},
                           {"bytes", hi - lo},
                           {"xxh3", zeros.of(hi - lo)},
                           {"tensors", tensors}});
        at += k3::alignUp(hi - lo);
    }
    const json doc{
        {"format", "k3-trunk"},
        {"version", 2},
        {"alignment", k3::kTrunkAlignment},
        {"file_bytes", at},
        {"source", json::parse(k3::checkpointIdentityJson(k3::checkpointIdentity(modelDir)))},
        {"records", std::move(records)}};
    fs::create_directories(trunkDir);
    const fs::path bin = trunkDir / "trunk.bin";
    const int fd = ::open(bin.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0) throw std::runtime_error(bin.string() + ": cannot create: " + std::strerror(errno));
    const bool sized = ::ftruncate(fd, off_t(at)) == 0;
    const int err = errno;
    if (::close(fd) != 0 || !sized)
        throw std::runtime_error(bin.string() + ": cannot size: " + std::strerror(err));
    std::ofstream(trunkDir / "trunk.json") << k3::sealTrunkJson(doc.dump());
    return at;
}

} // namespace k3synth
