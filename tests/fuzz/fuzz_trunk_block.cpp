// One block of a compressed trunk (trunk format 3), as the streamer's reader decodes it.
// Input: byte 0 picks the mode, bytes 1-2 the block's raw size (little endian), the rest
// is the block.
//   decode (bit 7 clear): the rest is a stored block, decoded as it is (the checksum
//     refuses nearly every mutation) and re-sealed (its checksum made to match, as an
//     attacker would), which reaches the checks behind it. A decode writes exactly the
//     raw size (ASan: the output is exactly that long) or throws CodecError, and the
//     scalar and AVX2 paths give the same bytes.
//   encode (bit 7 set): the rest is raw bytes, encoded (bits 0-2: k, 0 = the smallest;
//     bit 3: raw) and decoded on both paths: the original bytes, always.
#include "FuzzSupport.hpp"

#include "memory/TrunkCodec.hpp"

#include <cstring>
#include <vector>

namespace {

using namespace k3::codec;

// Decodes on both paths; both refuse or both give the same bytes. True when accepted.
bool decodeBoth(const std::byte* stored, std::size_t n, std::size_t rawBytes,
                std::vector<std::byte>& out) {
    std::vector<std::byte> scalar(rawBytes), simd(rawBytes);
    bool okScalar = true, okSimd = true;
    try {
        decodeBlock(stored, n, scalar.data(), rawBytes, DecodePath::Scalar);
    } catch (const CodecError&) {
        okScalar = false;
    }
    if (avx2DecodeAvailable()) {
        try {
            decodeBlock(stored, n, simd.data(), rawBytes, DecodePath::Avx2);
        } catch (const CodecError&) {
            okSimd = false;
        }
        k3fuzz::check(okScalar == okSimd, "scalar and AVX2 decode disagree on refusing");
        if (okScalar && rawBytes > 0) // memcmp of an empty vector's null data is UB
            k3fuzz::check(std::memcmp(scalar.data(), simd.data(), rawBytes) == 0,
                          "scalar and AVX2 decode give different bytes");
    }
    out = std::move(scalar);
    return okScalar;
}

} // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size < 3) return 0;
    const std::uint8_t mode = data[0];
    const std::size_t rawBytes = std::size_t(data[1]) | std::size_t(data[2]) << 8;
    const auto* rest = reinterpret_cast<const std::byte*>(data + 3);
    const std::size_t n = size - 3;
    std::vector<std::byte> out;
    if (mode & 0x80) {
        const std::size_t len = std::min(n, kMaxBlockBytes);
        EncodeChoice choice;
        choice.forceBits = (mode & 7) <= 4 ? mode & 7 : 0;
        choice.forceRaw = (mode & 8) != 0;
        std::vector<std::byte> stored;
        const std::size_t s = encodeBlock(rest, len, stored, choice);
        k3fuzz::check(s == stored.size(), "encodeBlock size is not what it appended");
        k3fuzz::check(s <= maxStoredBytes(len) || choice.forceBits != 0,
                      "a chosen encoding larger than raw");
        k3fuzz::check(decodeBoth(stored.data(), s, len, out), "an encoded block is refused");
        k3fuzz::check(len == 0 || std::memcmp(out.data(), rest, len) == 0,
                      "a block does not decode to its original bytes");
        return 0;
    }
    decodeBoth(rest, n, rawBytes, out);
    std::vector<std::byte> sealed(rest, rest + n);
    sealBlock(sealed.data(), sealed.size());
    decodeBoth(sealed.data(), sealed.size(), rawBytes, out);
    return 0;
}
