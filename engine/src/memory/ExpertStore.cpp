#include "k3/aligned_io.hpp"
#include "k3/expert_cache.hpp"
#include "k3/kernels.hpp"
#include "k3/pack.hpp"

#include <algorithm>
#include <array>
#include <cstring>
#include <mutex>

namespace k3 {
namespace {

constexpr std::uint64_t kMask = kDirectIoAlignment - 1;

std::string shapeText(const TensorInfo& t) {
    std::string s = "[";
    for (std::size_t i = 0; i < t.rank; ++i) s += (i ? ", " : "") + std::to_string(t.shape[i]);
    return s + "]";
}

const TensorInfo& expectU8(const Checkpoint& c, const std::string& name, std::uint64_t rows,
                           std::uint64_t cols, bool check) {
    const TensorInfo& t = c.at(name);
    if (!check) return t;
    if (t.dtype != DType::U8 || t.rank != 2 || t.shape[0] != rows || t.shape[1] != cols)
        throw CacheError("tensor " + name + " is " + std::string(dtypeName(t.dtype)) + " " +
                         shapeText(t) + ", expected U8 [" + std::to_string(rows) + ", " +
                         std::to_string(cols) + "] from config.json");
    return t;
}

// A plain expert matrix (no quantization_config): BF16 or F32 [rows, cols], as declared.
const TensorInfo& expectFloat(const Checkpoint& c, const std::string& name, std::uint64_t rows,
                              std::uint64_t cols) {
    const TensorInfo* found = c.find(name);
    if (!found) {
        // The usual cause: MXFP4 shards under a config.json without its quantization_config.
        const std::string base = name.substr(0, name.size() - std::string(".weight").size());
        const std::string folder = c.shardPaths().empty()
                                       ? std::string()
                                       : c.shardPaths().front().parent_path().string() + ": ";
        throw CacheError(
            folder + "no tensor named \"" + name +
            "\": config.json has no quantization_config, so routed experts are read as plain "
            "BF16/F32 NAME.weight tensors" +
            (c.find(base + ".weight_packed") ? "; the checkpoint holds MXFP4 " + base +
                                                   ".weight_packed (is its config.json's "
                                                   "quantization_config missing?)"
                                             : std::string()));
    }
    const TensorInfo& t = *found;
    if ((t.dtype != DType::BF16 && t.dtype != DType::F32) || t.rank != 2 || t.shape[0] != rows ||
        t.shape[1] != cols)
        throw CacheError("tensor " + name + " is " + std::string(dtypeName(t.dtype)) + " " +
                         shapeText(t) + ", expected BF16 or F32 [" + std::to_string(rows) + ", " +
                         std::to_string(cols) +
                         "] from config.json (no quantization_config: plain routed experts)");
    return t;
}

} // namespace

struct CheckpointExpertStore::Files {
    std::vector<std::unique_ptr<AlignedFile>> files;
};

// Long on purpose: every expert tensor's name, shape and file offset is checked in one
// pass over the index, so a mismatch names the tensor before anything is read.
CheckpointExpertStore::CheckpointExpertStore(const Checkpoint& ckpt, const ModelConfig& c,
                                             int layerCount, bool checkShapes)
    : shardPaths_(ckpt.shardPaths()), numExperts_(c.numExperts), files_(std::make_unique<Files>()) {
    const int I = c.moeIntermediateSize, Lat = c.routedExpertHiddenSize;
    const bool mxfp4 = c.quantization.has_value() || !checkShapes;
    checkScales_ = checkShapes && mxfp4; // only E8M0 scales have a NaN byte
    scaleBytes13_ = std::size_t(I) * std::size_t(mxfp4ScalesPerRow(Lat));
    scaleBytes2_ = std::size_t(Lat) * std::size_t(mxfp4ScalesPerRow(I));
    entries_.resize(std::size_t(layerCount));
    std::vector<char> used(shardPaths_.size(), 0);
    for (int L = 0; L < layerCount && L < int(c.layers.size()); ++L) {
        if (c.layers[std::size_t(L)].mlp != MlpKind::Moe) continue;
        auto& row = entries_[std::size_t(L)];
        row.resize(std::size_t(numExperts_));
        for (int e = 0; e < numExperts_; ++e) {
            const std::string x = "language_model.model.layers." + std::to_string(L) +
                                  ".block_sparse_moe.experts." + std::to_string(e) + ".";
            // MXFP4 (config.json has a quantization_config; the byte fixtures of
            // checkShapes=false use its names too): six tensors, slot layout order w1
            // packed/scales, w3 packed/scales, w2 packed/scales. Otherwise three plain
            // BF16/F32 matrices w1, w3, w2, in the dtype each declares.
            std::vector<const TensorInfo*> ts;
            if (mxfp4)
                ts = {
                    &expectU8(ckpt, x + "w1.weight_packed", I, mxfp4RowBytes(Lat), checkShapes),
                    &expectU8(ckpt, x + "w1.weight_scale", I, mxfp4ScalesPerRow(Lat), checkShapes),
                    &expectU8(ckpt, x + "w3.weight_packed", I, mxfp4RowBytes(Lat), checkShapes),
                    &expectU8(ckpt, x + "w3.weight_scale", I, mxfp4ScalesPerRow(Lat), checkShapes),
                    &expectU8(ckpt, x + "w2.weight_packed", Lat, mxfp4RowBytes(I), checkShapes),
                    &expectU8(ckpt, x + "w2.weight_scale", Lat, mxfp4ScalesPerRow(I), checkShapes)};
            else
                ts = {&expectFloat(ckpt, x + "w1.weight", I, Lat),
                      &expectFloat(ckpt, x + "w3.weight", I, Lat),
                      &expectFloat(ckpt, x + "w2.weight", Lat, I)};
            const std::size_t n = ts.size();
            Entry& en = row[std::size_t(e)];
            en.shard = ts[0]->shard;
            std::uint64_t lo = ts[0]->offset, hi = 0, sum = 0;
            bool oneShard = true;
            for (const TensorInfo* t : ts) {
                lo = std::min(lo, t->offset);
                hi = std::max(hi, t->offset + t->nbytes);
                sum += t->nbytes;
                oneShard = oneShard && t->shard == en.shard;
                used[t->shard] = 1;
            }
            // A slot starts on a 4096 boundary, so a matrix sits in it at its file offset
            // modulo 4096: a plain BF16/F32 matrix at an odd offset is read on its own, to an
            // aligned place, rather than handed to the kernels misaligned.
            bool elementAligned = true;
            if (!mxfp4)
                for (const TensorInfo* t : ts)
                    elementAligned = elementAligned && t->offset % dtypeSize(t->dtype) == 0;
            // headers never overlap, so equal sizes mean no gap
            en.contiguous = oneShard && hi - lo == sum && elementAligned;
            std::array<std::size_t, 6> off{};
            std::size_t window = 0;
            if (en.contiguous) {
                en.lo = lo;
                en.hi = hi;
                for (std::size_t i = 0; i < n; ++i) off[i] = std::size_t(ts[i]->offset - lo);
                window = std::size_t(alignUp(hi) - (lo & ~kMask));
            } else {
                std::size_t at = 0;
                for (std::size_t i = 0; i < n; ++i) {
                    // Plain F32 matrices start on a 4-byte boundary in the slot.
                    if (!mxfp4) at = (at + 3) & ~std::size_t(3);
                    en.pieces.push_back({ts[i]->offset, ts[i]->nbytes, at, ts[i]->shard});
                    off[i] = at;
                    at += std::size_t(ts[i]->nbytes);
                }
                en.lo = ts[0]->offset;
                window = std::size_t(alignUp(at));
            }
            if (mxfp4)
                en.layout = {off[0], off[1], off[2], off[3], off[4], off[5]};
            else
                en.layout = {off[0],       0,           off[1], 0, off[2], 0, ts[0]->dtype,
                             ts[1]->dtype, ts[2]->dtype};
            en.bytes = sum;
            slotBytes_ = std::max(slotBytes_, window);
        }
    }
    slotBytes_ = std::size_t(alignUp(std::max<std::size_t>(slotBytes_, 1)));
    files_->files.resize(shardPaths_.size());
    for (std::size_t s = 0; s < shardPaths_.size(); ++s)
        if (used[s])
            files_->files[s] = std::make_unique<AlignedFile>(
                shardPaths_[s], AlignedFile::Mode::Auto, IoKind::Expert);
}

CheckpointExpertStore::~CheckpointExpertStore() = default;

bool CheckpointExpertStore::hasLayer(int layer) const {
    return layer >= 0 && std::size_t(layer) < entries_.size() &&
           !entries_[std::size_t(layer)].empty();
}

std::uint64_t CheckpointExpertStore::totalExperts() const {
    std::uint64_t n = 0;
    for (const auto& r : entries_) n += r.size();
    return n;
}

const CheckpointExpertStore::Entry& CheckpointExpertStore::entry(int layer, int expert) const {
    if (!hasLayer(layer) || expert < 0 || expert >= numExperts_)
        throw CacheError("no routed expert " + std::to_string(expert) + " in layer " +
                         std::to_string(layer));
    return entries_[std::size_t(layer)][std::size_t(expert)];
}

const ExpertLayout& CheckpointExpertStore::layout(int layer, int expert) const {
    return entry(layer, expert).layout;
}

std::uint64_t CheckpointExpertStore::expertBytes(int layer, int expert) const {
    return entry(layer, expert).bytes;
}

std::uint64_t CheckpointExpertStore::diskOrder(int layer, int expert) const {
    const Entry& en = entry(layer, expert);
    return (std::uint64_t(en.shard) << 44) | en.lo;
}

namespace {
// An E8M0 scale byte 0xFF is NaN: the kernels would decode it as 0 and skip the group,
// a different expert output with no word. The expert is refused (dropped) instead.
void refuseNanScales(const std::byte* payload, const ExpertLayout& lay, std::size_t bytes13,
                     std::size_t bytes2, int layer, int expert) {
    const std::pair<const char*, std::pair<std::size_t, std::size_t>> scales[] = {
        {"w1", {lay.w1Scales, bytes13}},
        {"w3", {lay.w3Scales, bytes13}},
        {"w2", {lay.w2Scales, bytes2}}};
    for (const auto& [w, range] : scales) {
        const void* hit = std::memchr(payload + range.first, 0xFF, range.second);
        if (hit)
            throw CacheError("tensor language_model.model.layers." + std::to_string(layer) +
                             ".block_sparse_moe.experts." + std::to_string(expert) + "." + w +
                             ".weight_scale has scale byte 0xFF (NaN in E8M0) at index " +
                             std::to_string(static_cast<const std::byte*>(hit) - payload -
                                            std::ptrdiff_t(range.first)) +
                             ": expert dropped");
    }
}
} // namespace

std::size_t CheckpointExpertStore::read(int layer, int expert, std::byte* slot) const {
    const std::size_t at = readBytes(layer, expert, slot);
    if (checkScales_)
        refuseNanScales(slot + at, entry(layer, expert).layout, scaleBytes13_, scaleBytes2_, layer,
                        expert);
    return at;
}

bool CheckpointExpertStore::window(int layer, int expert, ExpertWindow& out) const {
    const Entry& en = entry(layer, expert);
    if (!en.contiguous) return false;
    const std::uint64_t start = en.lo & ~kMask;
    out.file = files_->files[en.shard].get();
    out.offset = start;
    out.length = std::size_t(alignUp(en.hi) - start);
    out.needed = std::size_t(en.hi - start);
    out.payloadOffset = std::size_t(en.lo - start);
    return true;
}

void CheckpointExpertStore::checkArrived(int layer, int expert, const std::byte* slot) const {
    const Entry& en = entry(layer, expert);
    if (checkScales_ && en.contiguous)
        refuseNanScales(slot + (en.lo - (en.lo & ~kMask)), en.layout, scaleBytes13_, scaleBytes2_,
                        layer, expert);
}

std::size_t CheckpointExpertStore::readBytes(int layer, int expert, std::byte* slot) const {
    const Entry& en = entry(layer, expert);
    const FaultExpertScope faultScope(layer, expert); // lets a test hook rule name the expert
    if (en.contiguous) {
        // The aligned window around the run goes straight into the slot: no bounce copy.
        const AlignedFile& f = *files_->files[en.shard];
        const std::uint64_t start = en.lo & ~kMask;
        const std::size_t len = std::size_t(alignUp(en.hi) - start);
        const std::size_t got = f.readWindow(start, slot, len);
        if (got < en.hi - start)
            throw IoError(f.path() + ": short read of layer " + std::to_string(layer) + " expert " +
                          std::to_string(expert) + ": got " + std::to_string(got) + " of " +
                          std::to_string(en.hi - start) + " bytes");
        return std::size_t(en.lo - start);
    }
    for (const Piece& p : en.pieces)
        files_->files[p.shard]->read(p.fileOffset, slot + p.slotOffset, std::size_t(p.nbytes));
    return 0;
}

} // namespace k3
