// trunk.json (the packed trunk's record table). Every accepted record and tensor must
// lie inside trunk.bin, records must not overlap, a record's tensors must tile it, and
// every tensor's bytes must match its shape and dtype. The trunk.bin size is fixed to
// the seed's (k3_tiny_a packed) so seeds parse fully.
//
// Each input is parsed twice: as it is (the checksum of trunk.json refuses nearly every
// mutation) and re-sealed with sealTrunkJson (its checksum made to match, as an attacker
// would), which reaches the checks behind the checksum. Each accepted record and tensor
// is then checksummed over a trunk.bin stand-in (zeros): the verification must read
// only inside the record and refuse with a PackError, never crash.
#include "FuzzSupport.hpp"

#include <k3/pack.hpp>

#include <algorithm>
#include <vector>

namespace {

constexpr std::uint64_t kBinBytes = K3_FUZZ_TRUNK_BIN_BYTES;

// numel * element size without wrapping, or nothing when it would wrap.
bool exactBytes(const k3::TensorInfo& t, std::uint64_t& bytes) {
    std::uint64_t n = k3::dtypeSize(t.dtype);
    for (std::uint64_t d : t.dims()) {
        if (d != 0 && n > UINT64_MAX / d) return false;
        n *= d;
    }
    bytes = n;
    return true;
}

const std::vector<std::byte>& zeroBin() {
    static const std::vector<std::byte> bin(kBinBytes);
    return bin;
}

void checkRecord(const k3::TrunkRecord& r) {
    k3fuzz::check(r.offset % k3::kTrunkAlignment == 0, "record offset not aligned");
    // A format 3 record occupies its stored (coded) bytes; its blocks add up to them.
    k3fuzz::check(r.offset <= kBinBytes && k3::alignUp(r.stored()) <= kBinBytes - r.offset,
                  "record runs past trunk.bin");
    if (r.compressed()) {
        k3fuzz::check(r.blockStarts.front() == 0 && r.blockStarts.back() == r.storedBytes,
                      "blocks do not tile the stored record");
        for (std::size_t i = 1; i < r.blockStarts.size(); ++i)
            k3fuzz::check(r.blockStarts[i] > r.blockStarts[i - 1], "an empty or backward block");
    }
    std::vector<std::pair<std::uint64_t, std::uint64_t>> spans;
    for (const auto& [name, t] : r.tensors) {
        k3fuzz::check(t.offset <= r.bytes && t.info.nbytes <= r.bytes - t.offset,
                      "tensor outside its record");
        std::uint64_t bytes = 0;
        k3fuzz::check(exactBytes(t.info, bytes) && bytes == t.info.nbytes,
                      "tensor nbytes disagrees with its shape and dtype");
        spans.emplace_back(t.offset, t.info.nbytes);
    }
    std::sort(spans.begin(), spans.end());
    std::uint64_t end = 0;
    for (const auto& [off, n] : spans) {
        k3fuzz::check(off == end, "tensors of a record overlap or leave a gap");
        end = off + n;
    }
    k3fuzz::check(end == r.bytes, "tensors do not cover their record");
    // The stand-in holds the file's bytes; a coded record's decoded bytes are not there.
    if (r.compressed()) return;
    const std::byte* at = zeroBin().data() + r.offset;
    try {
        k3::verifyTrunkRecord(r, at, "trunk/trunk.bin");
    } catch (const k3::PackError&) {
    }
    for (const auto& [name, t] : r.tensors) {
        try {
            k3::verifyTrunkTensor(r, name, at + t.offset, "trunk/trunk.bin");
        } catch (const k3::PackError&) {
        }
    }
}

void parse(std::string_view text) {
    try {
        const k3::TrunkIndex idx = k3::parseTrunkIndex(text, kBinBytes, "trunk");
        k3fuzz::check(int(idx.layers.size()) == idx.source.numLayers, "layer count");
        std::vector<const k3::TrunkRecord*> all;
        for (const auto& r : idx.layers) all.push_back(&r);
        for (const auto& r : idx.modelRecords) all.push_back(&r);
        for (const auto* r : all) checkRecord(*r);
        std::sort(all.begin(), all.end(), [](auto* a, auto* b) { return a->offset < b->offset; });
        for (std::size_t i = 1; i < all.size(); ++i)
            k3fuzz::check(all[i - 1]->offset + k3::alignUp(all[i - 1]->stored()) <= all[i]->offset,
                          "records overlap");
        (void)idx.largestLayerBytes();
        (void)idx.layerBytesTotal();
        (void)idx.layerStoredTotal();
    } catch (const k3::PackError&) {
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    const std::string_view text = k3fuzz::asText(data, size);
    parse(text);
    std::string sealed;
    try {
        sealed = k3::sealTrunkJson(text);
    } catch (const k3::PackError&) {
        return 0;
    }
    parse(sealed);
    return 0;
}
