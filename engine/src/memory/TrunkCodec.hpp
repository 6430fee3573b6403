#pragma once
// The compressed trunk's block codec (trunk format 3): lossless, chosen per block.
//
// A BF16 weight near N(0, 0.02) carries little information in its high byte (sign and
// the top 7 exponent bits: ~3 bits of order-0 entropy) and nearly 8 in its low byte (the
// exponent's last bit and the mantissa). So a block keeps the low bytes verbatim and codes
// each high byte as a k-bit index (k = 1..4) into a table of the block's 2^k most frequent
// high bytes; the few high bytes not in the table are listed as escapes (position, value).
// The k bits of 32 elements are stored as k 32-bit planes, which AVX2 expands to bytes
// with one shuffle + compare per plane and maps through the table with one pshufb.
// A block where no k pays is stored raw. Decoding gives the original bytes, always.
//
// Block layout (little endian), `stored` bytes in all:
//   u8 codec (0 raw, 1 planes) | u8 k (0 for raw) | u16 zero | u32 rawBytes
//   u64 XXH3-64 of the payload, seeded with the 8 bytes before it (so it covers them)
//   raw:    rawBytes bytes
//   planes: table[16] | u32 escapes | groups x k u32 planes (n / 32 full groups) |
//           low bytes[n] | high bytes of the n % 32 tail elements | odd last byte (0/1) |
//           escape positions u16[escapes] (increasing, < 32 x groups) | escape values u8[]
// where n = rawBytes / 2 elements (byte 2i is element i's low byte, 2i + 1 its high byte).

#include <cstddef>
#include <cstdint>
#include <stdexcept>
#include <string>
#include <vector>

namespace k3::codec {

class CodecError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

inline constexpr std::size_t kBlockHeaderBytes = 16;
// Escape positions are u16: a block holds at most 65536 bytes (32768 elements).
inline constexpr std::size_t kMaxBlockBytes = 65536;
inline constexpr std::uint8_t kCodecRaw = 0;
inline constexpr std::uint8_t kCodecPlanes = 1;

// The most bytes a block of rawBytes can be stored in (raw plus its header).
inline std::size_t maxStoredBytes(std::size_t rawBytes) {
    return kBlockHeaderBytes + rawBytes;
}

struct EncodeChoice {
    int forceBits = 0;     // 1..4: always that k (for the ratio/speed curve); 0: the smallest
    bool forceRaw = false; // store raw
};

// Appends the stored form of raw[0, rawBytes) to out and returns its size.
// rawBytes <= kMaxBlockBytes.
std::size_t encodeBlock(const std::byte* raw, std::size_t rawBytes, std::vector<std::byte>& out,
                        EncodeChoice choice = {});

enum class DecodePath { Auto, Scalar, Avx2 };

// Decodes one stored block into exactly rawBytes bytes at out. Checks the checksum and
// every size before writing; throws CodecError saying what is wrong (the caller names
// the layer and block).
// checksum false skips the block checksum (the benchmark's decode-only figure; the
// streamer always checks).
void decodeBlock(const std::byte* stored, std::size_t storedBytes, std::byte* out,
                 std::size_t rawBytes, DecodePath path = DecodePath::Auto, bool checksum = true);

// The codec byte and k of a stored block (for statistics); no checks.
int blockBits(const std::byte* stored);

// Re-computes a block's checksum after an edit (tests and the fuzzer use it to reach the
// checks behind the checksum).
void sealBlock(std::byte* stored, std::size_t storedBytes);

// True when the AVX2 decode runs on this CPU (and was compiled in).
bool avx2DecodeAvailable();
// "AVX2" or "scalar": what DecodePath::Auto uses (K3_FORCE_SCALAR forces scalar).
const char* decodePathName();

} // namespace k3::codec
