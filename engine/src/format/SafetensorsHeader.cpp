#include "k3/safetensors.hpp"

#include "format/SafetensorsJson.hpp"

#include <bit>
#include <cstring>

namespace k3 {

std::string_view dtypeName(DType dtype) {
    switch (dtype) {
    case DType::F32:
        return "F32";
    case DType::F16:
        return "F16";
    case DType::BF16:
        return "BF16";
    case DType::U8:
        return "U8";
    }
    return "?";
}

std::size_t dtypeSize(DType dtype) {
    switch (dtype) {
    case DType::F32:
        return 4;
    case DType::F16:
    case DType::BF16:
        return 2;
    case DType::U8:
        return 1;
    }
    return 0;
}

std::optional<DType> parseDType(std::string_view name) {
    if (name == "F32") return DType::F32;
    if (name == "F16") return DType::F16;
    if (name == "BF16") return DType::BF16;
    if (name == "U8") return DType::U8;
    return std::nullopt;
}

float f16ToFloat(std::uint16_t h) {
    const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
    std::uint32_t exponent = (h >> 10) & 0x1fu;
    std::uint32_t mantissa = h & 0x3ffu;
    std::uint32_t bits;
    if (exponent == 0x1f) {
        bits = sign | 0x7f800000u | (mantissa << 13); // inf, or NaN keeping its payload
    } else if (exponent != 0) {
        bits = sign | ((exponent + 112) << 23) | (mantissa << 13);
    } else if (mantissa == 0) {
        bits = sign; // signed zero
    } else {
        // Subnormal: renormalise; every f16 subnormal is a normal f32.
        exponent = 113;
        while ((mantissa & 0x400u) == 0) {
            mantissa <<= 1;
            --exponent;
        }
        bits = sign | (exponent << 23) | ((mantissa & 0x3ffu) << 13);
    }
    float f;
    std::memcpy(&f, &bits, sizeof f);
    return f;
}

void widenToFloat(DType dtype, std::span<const std::byte> raw, std::span<float> out) {
    const std::size_t n = out.size();
    if (dtype == DType::U8) throw FormatError("widenToFloat: U8 is packed data, not numbers");
    if (raw.size() != n * dtypeSize(dtype))
        throw FormatError("widenToFloat: " + std::to_string(raw.size()) + " bytes of " +
                          std::string(dtypeName(dtype)) + " for " + std::to_string(n) + " floats");
    const auto* p = reinterpret_cast<const unsigned char*>(raw.data());
    switch (dtype) {
    case DType::F32:
        for (std::size_t i = 0; i < n; ++i) {
            const std::uint32_t b = std::uint32_t(p[4 * i]) | std::uint32_t(p[4 * i + 1]) << 8 |
                                    std::uint32_t(p[4 * i + 2]) << 16 |
                                    std::uint32_t(p[4 * i + 3]) << 24;
            std::memcpy(&out[i], &b, 4);
        }
        break;
    case DType::F16:
        for (std::size_t i = 0; i < n; ++i)
            out[i] = f16ToFloat(static_cast<std::uint16_t>(p[2 * i] | p[2 * i + 1] << 8));
        break;
    case DType::BF16:
        for (std::size_t i = 0; i < n; ++i)
            out[i] = std::bit_cast<float>(static_cast<std::uint32_t>(p[2 * i] | p[2 * i + 1] << 8)
                                          << 16);
        break;
    case DType::U8:
        break;
    }
}

std::uint64_t TensorInfo::numel() const {
    std::uint64_t n = 1;
    for (std::uint8_t i = 0; i < rank; ++i) n *= shape[i]; // validated not to overflow
    return n;
}

namespace {

ShardHeader toShardHeader(const std::vector<format::HeaderTensor>& tensors,
                          std::uint64_t headerBytes, std::uint64_t fileSize,
                          const std::string& path) {
    ShardHeader out;
    out.path = path;
    out.fileSize = fileSize;
    out.dataStart = 8 + headerBytes;
    format::checkDuplicates(tensors, path);
    format::checkOverlaps(tensors, out.dataStart, path);
    out.tensors.reserve(tensors.size());
    for (const auto& t : tensors) out.tensors.emplace_back(std::string(t.name), t.info);
    return out;
}

} // namespace

ShardHeader parseShardHeader(std::string_view headerJson, std::uint64_t fileSize,
                             const std::string& path) {
    const format::PaddedText json = format::PaddedText::copyOf(headerJson);
    format::JsonScanner scanner;
    return toShardHeader(scanner.header(json, fileSize, path), json.size(), fileSize, path);
}

ShardHeader readShardHeader(const std::filesystem::path& path) {
    const std::string name = path.string();
    const format::HeaderText text = format::readHeaderText(path);
    format::JsonScanner scanner;
    return toShardHeader(scanner.header(text.json, text.fileSize, name), text.json.size(),
                         text.fileSize, name);
}

} // namespace k3
