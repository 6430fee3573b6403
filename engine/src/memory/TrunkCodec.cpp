#include "memory/TrunkCodec.hpp"

#include "k3/kernels.hpp"

#include "io/Xxh3.hpp"

#include <algorithm>
#include <array>
#include <cstring>

#if defined(__x86_64__)
#include <immintrin.h>
#define K3_CODEC_AVX2 1
#endif

namespace k3::codec {

namespace {

constexpr std::size_t kGroup = 32;      // elements per plane word
constexpr std::size_t kTableBytes = 16; // one pshufb table

// Inside a group, element e is stored at position perm(e): bytes 8-15 and 16-23 trade
// places (an involution). AVX2's byte unpack works within 128-bit lanes, so with this
// order unpacklo(low, high) is elements 0-15 and unpackhi 16-31, already in place: no
// lane-crossing permute per group.
constexpr std::size_t perm(std::size_t e) {
    return e >= 8 && e < 16 ? e + 8 : e >= 16 && e < 24 ? e - 8 : e;
}

std::uint32_t load32(const std::byte* p) {
    std::uint32_t v;
    std::memcpy(&v, p, 4);
    return v;
}
std::uint64_t load64(const std::byte* p) {
    std::uint64_t v;
    std::memcpy(&v, p, 8);
    return v;
}
void store32(std::byte* p, std::uint32_t v) {
    std::memcpy(p, &v, 4);
}
void store64(std::byte* p, std::uint64_t v) {
    std::memcpy(p, &v, 8);
}

std::uint64_t blockChecksum(const std::byte* stored, std::size_t storedBytes) {
    return XXH3_64bits_withSeed(stored + kBlockHeaderBytes, storedBytes - kBlockHeaderBytes,
                                load64(stored));
}

// The parts of a planes block, from its header and escape count.
struct Layout {
    std::size_t n = 0, groups = 0, tail = 0, odd = 0, escapes = 0;
    std::size_t planes = 0, low = 0, tailHigh = 0, oddAt = 0, escPos = 0, escVal = 0, end = 0;
};

Layout layoutOf(std::size_t rawBytes, int k, std::size_t escapes) {
    Layout l;
    l.n = rawBytes / 2;
    l.groups = l.n / kGroup;
    l.tail = l.n % kGroup;
    l.odd = rawBytes % 2;
    l.escapes = escapes;
    l.planes = kBlockHeaderBytes + kTableBytes + 4;
    l.low = l.planes + l.groups * std::size_t(k) * 4;
    l.tailHigh = l.low + l.n;
    l.oddAt = l.tailHigh + l.tail;
    l.escPos = l.oddAt + l.odd;
    l.escVal = l.escPos + 2 * escapes;
    l.end = l.escVal + escapes;
    return l;
}

void writeHeader(std::byte* h, std::uint8_t codec, int k, std::size_t rawBytes) {
    h[0] = std::byte{codec};
    h[1] = std::byte(std::uint8_t(k));
    h[2] = h[3] = std::byte{0};
    store32(h + 4, std::uint32_t(rawBytes));
}

// ---- decode ---------------------------------------------------------------------------

void decodeGroupsScalar(const std::byte* planes, const std::uint8_t* table, int k,
                        const std::uint8_t* low, std::uint8_t* out, std::size_t groups) {
    for (std::size_t g = 0; g < groups; ++g) {
        std::uint32_t w[4] = {0, 0, 0, 0};
        for (int j = 0; j < k; ++j)
            w[j] = load32(planes + (g * std::size_t(k) + std::size_t(j)) * 4);
        for (std::size_t p = 0; p < kGroup; ++p) {
            unsigned idx = 0;
            for (int j = 0; j < k; ++j) idx |= ((w[j] >> p) & 1u) << j;
            out[2 * perm(p)] = low[p];
            out[2 * perm(p) + 1] = table[idx];
        }
        low += kGroup;
        out += 2 * kGroup;
    }
}

#if defined(K3_CODEC_AVX2)
#define K3_CODEC_TARGET __attribute__((target("avx2")))

// 32 bits -> 32 bytes, byte e = (bit e set ? bitValue : 0).
K3_CODEC_TARGET inline __m256i expandPlane(std::uint32_t w, __m256i select, __m256i bits,
                                           __m256i bitValue) {
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(int(w)), select);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bits), bits), bitValue);
}

// Stream: non-temporal stores (the output is a ring slot or arena far larger than the
// caches, so it skips the read-for-ownership of each line).
template <int K, bool Stream>
K3_CODEC_TARGET void decodeGroupsAvx2K(const std::byte* planes, const std::uint8_t* table,
                                       const std::uint8_t* low, std::uint8_t* out,
                                       std::size_t groups) {
    // Byte e of the expanded word reads source byte e / 8 (lane 1 starts at byte 2).
    const __m256i select = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2,
                                            2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bits = _mm256_set1_epi64x(0x8040201008040201ll);
    const __m256i tbl =
        _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(table)));
    for (std::size_t g = 0; g < groups; ++g) {
        const std::byte* p = planes + g * K * 4;
        __m256i idx = expandPlane(load32(p), select, bits, _mm256_set1_epi8(1));
        if constexpr (K > 1)
            idx =
                _mm256_or_si256(idx, expandPlane(load32(p + 4), select, bits, _mm256_set1_epi8(2)));
        if constexpr (K > 2)
            idx =
                _mm256_or_si256(idx, expandPlane(load32(p + 8), select, bits, _mm256_set1_epi8(4)));
        if constexpr (K > 3)
            idx = _mm256_or_si256(idx,
                                  expandPlane(load32(p + 12), select, bits, _mm256_set1_epi8(8)));
        const __m256i high = _mm256_shuffle_epi8(tbl, idx);
        const __m256i lo = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(low + g * kGroup));
        // The stored order makes each unpack 16 whole elements (see perm).
        const __m256i first = _mm256_unpacklo_epi8(lo, high);
        const __m256i second = _mm256_unpackhi_epi8(lo, high);
        auto* o = reinterpret_cast<__m256i*>(out + g * 2 * kGroup);
        if constexpr (Stream) {
            _mm256_stream_si256(o, first);
            _mm256_stream_si256(o + 1, second);
        } else {
            _mm256_storeu_si256(o, first);
            _mm256_storeu_si256(o + 1, second);
        }
    }
    if constexpr (Stream) _mm_sfence();
}

void decodeGroupsAvx2(const std::byte* planes, const std::uint8_t* table, int k,
                      const std::uint8_t* low, std::uint8_t* out, std::size_t groups) {
    if (reinterpret_cast<std::uintptr_t>(out) % 32 == 0) {
        switch (k) {
        case 1:
            return decodeGroupsAvx2K<1, true>(planes, table, low, out, groups);
        case 2:
            return decodeGroupsAvx2K<2, true>(planes, table, low, out, groups);
        case 3:
            return decodeGroupsAvx2K<3, true>(planes, table, low, out, groups);
        default:
            return decodeGroupsAvx2K<4, true>(planes, table, low, out, groups);
        }
    }
    switch (k) {
    case 1:
        return decodeGroupsAvx2K<1, false>(planes, table, low, out, groups);
    case 2:
        return decodeGroupsAvx2K<2, false>(planes, table, low, out, groups);
    case 3:
        return decodeGroupsAvx2K<3, false>(planes, table, low, out, groups);
    default:
        return decodeGroupsAvx2K<4, false>(planes, table, low, out, groups);
    }
}
#endif

bool useAvx2(DecodePath path) {
#if defined(K3_CODEC_AVX2)
    if (path == DecodePath::Scalar) return false;
    if (path == DecodePath::Avx2) {
        if (!avx2DecodeAvailable()) throw CodecError("the AVX2 decode does not run on this CPU");
        return true;
    }
    // Every vector kernel path (AVX2, AVX-512) has the AVX2 decode; only a scalar kernel
    // path (K3_FORCE_SCALAR, or a CPU without AVX2) decodes with the portable loop.
    return kernelPath() != KernelPath::Scalar && avx2DecodeAvailable();
#else
    if (path == DecodePath::Avx2) throw CodecError("the AVX2 decode is not compiled in");
    return false;
#endif
}

} // namespace

bool avx2DecodeAvailable() {
#if defined(K3_CODEC_AVX2)
    return kernelPathAvailable(KernelPath::Avx2);
#else
    return false;
#endif
}

const char* decodePathName() {
    return useAvx2(DecodePath::Auto) ? "AVX2" : "scalar";
}

int blockBits(const std::byte* stored) {
    return stored[0] == std::byte{kCodecRaw} ? 16 : int(stored[1]);
}

void sealBlock(std::byte* stored, std::size_t storedBytes) {
    if (storedBytes < kBlockHeaderBytes) return;
    store64(stored + 8, blockChecksum(stored, storedBytes));
}

namespace {

// The index width k (1..4 bits: the 2^k most frequent high bytes get an index, the
// others are escapes) whose layout is smallest, 0 when none beats the raw block; or the
// width `choice` forces.
int chooseBits(const std::array<std::size_t, 256>& count,
               const std::array<std::uint8_t, 256>& byFrequency, std::size_t rawBytes,
               std::size_t groups, EncodeChoice choice) {
    int bestK = 0;
    std::size_t bestSize = maxStoredBytes(rawBytes);
    if (!choice.forceRaw && groups > 0) {
        std::size_t covered = 0;
        for (int k = 1; k <= 4; ++k) {
            for (std::size_t i = k == 1 ? 0 : std::size_t(1) << (k - 1); i < (std::size_t(1) << k);
                 ++i)
                covered += count[byFrequency[i]];
            const std::size_t size = layoutOf(rawBytes, k, groups * kGroup - covered).end;
            if (choice.forceBits == k || (choice.forceBits == 0 && size < bestSize)) {
                bestK = k;
                bestSize = size;
            }
        }
    }
    return bestK;
}

} // namespace

std::size_t encodeBlock(const std::byte* raw, std::size_t rawBytes, std::vector<std::byte>& out,
                        EncodeChoice choice) {
    if (rawBytes > kMaxBlockBytes)
        throw CodecError("a block of " + std::to_string(rawBytes) + " bytes is over the " +
                         std::to_string(kMaxBlockBytes) + "-byte limit");
    const auto* b = reinterpret_cast<const std::uint8_t*>(raw);
    const std::size_t n = rawBytes / 2, groups = n / kGroup;
    // Only the full groups' high bytes are coded (the tail is verbatim).
    std::array<std::size_t, 256> count{};
    for (std::size_t i = 0; i < groups * kGroup; ++i) ++count[b[2 * i + 1]];
    std::array<std::uint8_t, 256> byFrequency;
    for (int v = 0; v < 256; ++v) byFrequency[std::size_t(v)] = std::uint8_t(v);
    // Ties by value, so the encoding is a function of the bytes alone.
    std::stable_sort(byFrequency.begin(), byFrequency.end(),
                     [&](std::uint8_t x, std::uint8_t y) { return count[x] > count[y]; });

    const int bestK = chooseBits(count, byFrequency, rawBytes, groups, choice);
    const std::size_t start = out.size();
    if (bestK == 0) {
        out.resize(start + maxStoredBytes(rawBytes));
        std::byte* h = out.data() + start;
        writeHeader(h, kCodecRaw, 0, rawBytes);
        if (rawBytes) std::memcpy(h + kBlockHeaderBytes, raw, rawBytes);
        sealBlock(h, maxStoredBytes(rawBytes));
        return maxStoredBytes(rawBytes);
    }
    const int k = bestK;
    std::array<int, 256> index;
    index.fill(-1);
    std::uint8_t table[kTableBytes] = {};
    for (std::size_t i = 0; i < (std::size_t(1) << k); ++i) {
        table[i] = byFrequency[i];
        index[byFrequency[i]] = int(i);
    }
    std::size_t escapes = 0;
    for (std::size_t i = 0; i < groups * kGroup; ++i) escapes += index[b[2 * i + 1]] < 0;
    const Layout l = layoutOf(rawBytes, k, escapes);
    out.resize(start + l.end);
    std::byte* h = out.data() + start;
    std::memset(h, 0, l.end);
    writeHeader(h, kCodecPlanes, k, rawBytes);
    std::memcpy(h + kBlockHeaderBytes, table, kTableBytes);
    store32(h + kBlockHeaderBytes + kTableBytes, std::uint32_t(escapes));
    std::size_t e = 0;
    for (std::size_t g = 0; g < groups; ++g) {
        std::uint32_t w[4] = {0, 0, 0, 0};
        for (std::size_t i = 0; i < kGroup; ++i) {
            const std::size_t el = g * kGroup + i;
            int idx = index[b[2 * el + 1]];
            if (idx < 0) { // an escape: any index decodes, the value is patched afterwards
                const auto pos = std::uint16_t(el);
                std::memcpy(h + l.escPos + 2 * e, &pos, 2);
                h[l.escVal + e] = std::byte{b[2 * el + 1]};
                ++e;
                idx = 0;
            }
            for (int j = 0; j < k; ++j) w[j] |= std::uint32_t((idx >> j) & 1) << perm(i);
            h[l.low + g * kGroup + perm(i)] = std::byte{b[2 * el]};
        }
        for (int j = 0; j < k; ++j)
            store32(h + l.planes + (g * std::size_t(k) + std::size_t(j)) * 4, w[j]);
    }
    for (std::size_t i = groups * kGroup; i < n; ++i) h[l.low + i] = std::byte{b[2 * i]};
    for (std::size_t i = 0; i < l.tail; ++i)
        h[l.tailHigh + i] = std::byte{b[2 * (groups * kGroup + i) + 1]};
    if (l.odd) h[l.oddAt] = raw[rawBytes - 1];
    sealBlock(h, l.end);
    return l.end;
}

void decodeBlock(const std::byte* stored, std::size_t storedBytes, std::byte* out,
                 std::size_t rawBytes, DecodePath path, bool checksum) {
    if (storedBytes < kBlockHeaderBytes)
        throw CodecError("block of " + std::to_string(storedBytes) + " bytes, shorter than its " +
                         std::to_string(kBlockHeaderBytes) + "-byte header");
    if (checksum && blockChecksum(stored, storedBytes) != load64(stored + 8))
        throw CodecError("block checksum mismatch (damaged or edited bytes)");
    const auto codec = std::uint8_t(stored[0]);
    const int k = int(std::uint8_t(stored[1]));
    if (stored[2] != std::byte{0} || stored[3] != std::byte{0})
        throw CodecError("block header has non-zero reserved bytes");
    if (load32(stored + 4) != rawBytes)
        throw CodecError("block says " + std::to_string(load32(stored + 4)) +
                         " raw bytes, its place in the record " + std::to_string(rawBytes));
    if (codec == kCodecRaw) {
        if (k != 0 || storedBytes != maxStoredBytes(rawBytes))
            throw CodecError("raw block of " + std::to_string(storedBytes) + " bytes for " +
                             std::to_string(rawBytes) + " raw bytes");
        if (rawBytes) std::memcpy(out, stored + kBlockHeaderBytes, rawBytes);
        return;
    }
    if (codec != kCodecPlanes) throw CodecError("unknown block codec " + std::to_string(codec));
    if (k < 1 || k > 4) throw CodecError("planes block with k = " + std::to_string(k));
    if (rawBytes > kMaxBlockBytes)
        throw CodecError("block of " + std::to_string(rawBytes) + " raw bytes is over the limit");
    if (storedBytes < kBlockHeaderBytes + kTableBytes + 4)
        throw CodecError("planes block shorter than its table");
    const std::size_t escapes = load32(stored + kBlockHeaderBytes + kTableBytes);
    const Layout l = layoutOf(rawBytes, k, std::min<std::size_t>(escapes, kMaxBlockBytes));
    if (escapes > l.groups * kGroup || l.end != storedBytes)
        throw CodecError("planes block of " + std::to_string(storedBytes) + " bytes, its sizes (" +
                         std::to_string(escapes) + " escapes) say " + std::to_string(l.end));
    // Escapes increase strictly and lie in the coded groups: one stored form per block.
    std::uint16_t prev = 0;
    for (std::size_t e = 0; e < escapes; ++e) {
        std::uint16_t pos;
        std::memcpy(&pos, stored + l.escPos + 2 * e, 2);
        if (pos >= l.groups * kGroup || (e > 0 && pos <= prev))
            throw CodecError("escape " + std::to_string(e) + " at element " + std::to_string(pos) +
                             " is out of order or outside the coded elements");
        prev = pos;
    }
    const auto* table = reinterpret_cast<const std::uint8_t*>(stored + kBlockHeaderBytes);
    const auto* low = reinterpret_cast<const std::uint8_t*>(stored + l.low);
    auto* o = reinterpret_cast<std::uint8_t*>(out);
#if defined(K3_CODEC_AVX2)
    if (useAvx2(path))
        decodeGroupsAvx2(stored + l.planes, table, k, low, o, l.groups);
    else
#endif
        decodeGroupsScalar(stored + l.planes, table, k, low, o, l.groups);
    for (std::size_t i = l.groups * kGroup; i < l.n; ++i) {
        o[2 * i] = low[i];
        o[2 * i + 1] = std::uint8_t(stored[l.tailHigh + (i - l.groups * kGroup)]);
    }
    if (l.odd) out[rawBytes - 1] = stored[l.oddAt];
    for (std::size_t e = 0; e < escapes; ++e) {
        std::uint16_t pos;
        std::memcpy(&pos, stored + l.escPos + 2 * e, 2);
        o[2 * std::size_t(pos) + 1] = std::uint8_t(stored[l.escVal + e]);
    }
}

} // namespace k3::codec
