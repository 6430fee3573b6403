// trunk.json (the packed trunk's record table). Every accepted record and tensor must
// lie inside trunk.bin, and every tensor's bytes must match its shape and dtype. The
// trunk.bin size is fixed to the seed's (k3_tiny_a packed) so seeds parse fully.
#include "FuzzSupport.hpp"

#include <k3/pack.hpp>

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

void checkRecord(const k3::TrunkRecord& r) {
    k3fuzz::check(r.offset % k3::kTrunkAlignment == 0, "record offset not aligned");
    k3fuzz::check(r.offset <= kBinBytes && k3::alignUp(r.bytes) <= kBinBytes - r.offset,
                  "record runs past trunk.bin");
    for (const auto& [name, t] : r.tensors) {
        k3fuzz::check(t.offset <= r.bytes && t.info.nbytes <= r.bytes - t.offset,
                      "tensor outside its record");
        std::uint64_t bytes = 0;
        k3fuzz::check(exactBytes(t.info, bytes) && bytes == t.info.nbytes,
                      "tensor nbytes disagrees with its shape and dtype");
    }
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    try {
        const k3::TrunkIndex idx =
            k3::parseTrunkIndex(k3fuzz::asText(data, size), kBinBytes, "trunk");
        k3fuzz::check(int(idx.layers.size()) == idx.source.numLayers, "layer count");
        for (const auto& r : idx.layers) checkRecord(r);
        for (const auto& r : idx.modelRecords) checkRecord(r);
        (void)idx.largestLayerBytes();
        (void)idx.layerBytesTotal();
    } catch (const k3::PackError&) {
    }
    return 0;
}
