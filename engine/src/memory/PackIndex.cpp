// Reading trunk.json: every field checked (types, ranges, checksums, records that tile
// and do not overlap) and, given the model, every record against the checkpoint's header.

#include "k3/json_limits.hpp"
#include "k3/pack.hpp"

#include "memory/PackInternal.hpp"
#include "memory/TrunkCodec.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <limits>

namespace k3 {
namespace {

namespace fs = std::filesystem;
using nlohmann::json;
using namespace packing;

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
    if (const auto deep = jsonDepthProblem(jsonText))
        throw StaleTrunkError(where + ": " + *deep + "; re-pack it");
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
                    " (compressed); re-pack it",
                PackRemedy{{}, trunkDir});
        idx.version = version;
        const std::uint64_t stored =
            parseHex64(j.at(kIndexChecksumKey), where + ": \"index_xxh3\"");
        if (const std::uint64_t actual = indexChecksum(j); actual != stored)
            throw PackError(where + ": checksum " + hex64(actual) + " of its text, it says " +
                            hex64(stored) + "; trunk.json was changed or damaged: re-pack it");
        idx.indexChecksum = stored;
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
                                          kCodecName + "; re-pack it",
                                      PackRemedy{{}, trunkDir, true});
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

TrunkIndex openTrunkIndex(const fs::path& trunkDir, const fs::path& modelDir,
                          const TrunkCheckObserver& checkProgress) {
    const fs::path jsonPath = trunkDir / "trunk.json";
    if (!fs::exists(jsonPath))
        throw PackError(jsonPath.string() + " does not exist: pack the trunk first",
                        PackRemedy{modelDir, trunkDir});
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
                                      "folder",
                                  PackRemedy{modelDir, freshTrunkFolder(modelDir)});
        checkRecordsAgainst(idx, ckpt, modelDir);
        checkTrunkSources(idx, ckpt, trunkDir, modelDir, checkProgress);
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

} // namespace k3
