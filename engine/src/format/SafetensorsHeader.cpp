#include "k3/safetensors.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <bit>
#include <cstring>
#include <fstream>

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

using nlohmann::json;

// SAX walk of {"name": {"dtype": .., "shape": [..], "data_offsets": [b, e]}, ...}:
// a real shard header holds thousands of entries and a DOM would copy all of them.
class HeaderHandler : public nlohmann::json_sax<json> {
public:
    HeaderHandler(const std::string& path, std::uint64_t dataSize, ShardHeader& out)
        : path_(path), dataSize_(dataSize), out_(out) {}

    std::string error;

    bool null() override { return scalar("null"); }
    bool boolean(bool) override { return scalar("a boolean"); }
    bool number_integer(number_integer_t v) override {
        if (skipDepth_ || consumeSkip()) return true;
        if (depth_ == 3) return fail("negative value " + std::to_string(v) + " in " + field_);
        return scalar("a number");
    }
    bool number_unsigned(number_unsigned_t v) override {
        if (skipDepth_ || consumeSkip()) return true;
        if (depth_ != 3) return scalar("a number");
        if (field_ == "shape") {
            if (cur_.rank >= kMaxTensorRank)
                return fail("rank above " + std::to_string(kMaxTensorRank) + " is not supported");
            cur_.shape[cur_.rank++] = v;
        } else {
            if (offsetCount_ >= 2) return fail("data_offsets has more than 2 entries");
            offsets_[offsetCount_++] = v;
        }
        return true;
    }
    bool number_float(number_float_t, const string_t& s) override {
        if (skipDepth_ || consumeSkip()) return true;
        return depth_ == 3 ? fail("non-integer or out-of-range value " + s + " in " + field_)
                           : scalar("a number");
    }
    bool string(string_t& s) override {
        if (skipDepth_ || consumeSkip()) return true;
        if (depth_ == 2 && field_ == "dtype") {
            const auto dtype = parseDType(s);
            if (!dtype)
                return fail("dtype \"" + s + "\" is not supported (expected F32, F16, BF16 or U8)");
            cur_.dtype = *dtype;
            seen_ |= 1;
            return true;
        }
        return scalar("a string");
    }
    bool binary(binary_t&) override { return scalar("binary data"); }

    bool start_object(std::size_t) override {
        if (skipDepth_) return ++skipDepth_, true;
        if (skipNext_) return beginSkip();
        if (depth_ == 0) return depth_ = 1, true;
        if (depth_ == 1) {
            depth_ = 2;
            cur_ = TensorInfo{};
            seen_ = 0;
            offsetCount_ = 0;
            return true;
        }
        return fail("unexpected object in " + field_);
    }
    bool end_object() override {
        if (skipDepth_) return --skipDepth_, true;
        if (depth_ == 2) {
            depth_ = 1;
            return finishTensor();
        }
        depth_ = 0;
        return true;
    }
    bool start_array(std::size_t) override {
        if (skipDepth_) return ++skipDepth_, true;
        if (skipNext_) return beginSkip();
        if (depth_ == 2 && (field_ == "shape" || field_ == "data_offsets")) {
            seen_ |= field_ == "shape" ? 2 : 4;
            if (field_ == "shape") cur_.rank = 0;
            depth_ = 3;
            return true;
        }
        return scalar("an array");
    }
    bool end_array() override {
        if (skipDepth_) return --skipDepth_, true;
        depth_ = 2;
        return true;
    }
    bool key(string_t& k) override {
        if (skipDepth_) return true;
        if (depth_ == 1) {
            name_ = k;
            skipNext_ = k == "__metadata__"; // a free-form string map, not a tensor
            return true;
        }
        if (k != "dtype" && k != "shape" && k != "data_offsets")
            return fail("unexpected key \"" + k + "\"");
        field_ = k;
        return true;
    }
    bool parse_error(std::size_t position, const std::string&,
                     const nlohmann::detail::exception& e) override {
        if (error.empty())
            error = path_ + ": header is not valid JSON at byte " + std::to_string(position) +
                    ": " + e.what();
        return false;
    }

private:
    // The value after "__metadata__" (free-form) is skipped whatever its shape.
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
        if (depth_ == 0) return failFile(std::string("header is ") + what + ", expected an object");
        return fail(std::string("unexpected ") + what +
                    (depth_ >= 2 ? " in " + field_ : std::string()));
    }
    bool fail(const std::string& what) {
        if (error.empty()) error = path_ + ": tensor \"" + name_ + "\": " + what;
        return false;
    }
    bool failFile(const std::string& what) {
        if (error.empty()) error = path_ + ": " + what;
        return false;
    }
    bool finishTensor() {
        if (seen_ != 7) {
            std::string missing;
            if (!(seen_ & 1)) missing += " dtype";
            if (!(seen_ & 2)) missing += " shape";
            if (!(seen_ & 4)) missing += " data_offsets";
            return fail("missing" + missing);
        }
        if (offsetCount_ != 2)
            return fail("data_offsets needs 2 entries, has " + std::to_string(offsetCount_));
        const std::uint64_t begin = offsets_[0], end = offsets_[1];
        if (begin > end)
            return fail("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                        "] has begin after end");
        if (end > dataSize_)
            return fail("data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) +
                        "] run past the data section (" + std::to_string(dataSize_) +
                        " bytes; file truncated?)");
        std::uint64_t elements = 1;
        for (std::uint8_t i = 0; i < cur_.rank; ++i)
            if (__builtin_mul_overflow(elements, cur_.shape[i], &elements))
                return fail("shape element count overflows 64 bits");
        std::uint64_t bytes = 0;
        if (__builtin_mul_overflow(elements, dtypeSize(cur_.dtype), &bytes))
            return fail("byte size overflows 64 bits");
        if (bytes != end - begin)
            return fail("shape needs " + std::to_string(bytes) + " bytes of " +
                        std::string(dtypeName(cur_.dtype)) + " but data_offsets [" +
                        std::to_string(begin) + ", " + std::to_string(end) + "] hold " +
                        std::to_string(end - begin));
        cur_.offset = out_.dataStart + begin;
        cur_.nbytes = bytes;
        out_.tensors.emplace_back(name_, cur_);
        return true;
    }

    const std::string& path_;
    std::uint64_t dataSize_;
    ShardHeader& out_;
    std::string name_, field_;
    TensorInfo cur_;
    std::uint64_t offsets_[2] = {0, 0};
    int offsetCount_ = 0;
    int seen_ = 0;
    int depth_ = 0;
    int skipDepth_ = 0;
    bool skipNext_ = false;
};

// Sorting views is cheaper than hashing a copy of every name while parsing.
void checkDuplicates(const ShardHeader& h) {
    std::vector<std::string_view> names;
    names.reserve(h.tensors.size());
    for (const auto& [name, t] : h.tensors) names.push_back(name);
    std::sort(names.begin(), names.end());
    const auto dup = std::adjacent_find(names.begin(), names.end());
    if (dup != names.end())
        throw FormatError(h.path + ": tensor \"" + std::string(*dup) +
                          "\": appears twice in the header");
}

void checkOverlaps(const ShardHeader& h) {
    std::vector<std::size_t> order(h.tensors.size());
    for (std::size_t i = 0; i < order.size(); ++i) order[i] = i;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return h.tensors[a].second.offset < h.tensors[b].second.offset;
    });
    std::uint64_t maxEnd = 0;
    std::size_t owner = 0;
    for (std::size_t i : order) {
        const auto& t = h.tensors[i].second;
        if (t.nbytes == 0) continue; // empty tensors share no bytes with anyone
        if (t.offset < maxEnd)
            throw FormatError(h.path + ": tensor \"" + h.tensors[i].first + "\" [" +
                              std::to_string(t.offset - h.dataStart) + ", " +
                              std::to_string(t.offset - h.dataStart + t.nbytes) +
                              ") overlaps tensor \"" + h.tensors[owner].first + "\" (ends at " +
                              std::to_string(maxEnd - h.dataStart) + ")");
        maxEnd = t.offset + t.nbytes;
        owner = i;
    }
}

} // namespace

ShardHeader parseShardHeader(std::string_view headerJson, std::uint64_t fileSize,
                             const std::string& path) {
    ShardHeader out;
    out.path = path;
    out.fileSize = fileSize;
    out.dataStart = 8 + headerJson.size();
    if (out.dataStart > fileSize)
        throw FormatError(path + ": header of " + std::to_string(headerJson.size()) +
                          " bytes does not fit in a file of " + std::to_string(fileSize) +
                          " bytes");
    HeaderHandler handler(path, fileSize - out.dataStart, out);
    const bool ok = json::sax_parse(headerJson.begin(), headerJson.end(), &handler);
    if (!ok || !handler.error.empty())
        throw FormatError(handler.error.empty() ? path + ": invalid header" : handler.error);
    checkDuplicates(out);
    checkOverlaps(out);
    return out;
}

ShardHeader readShardHeader(const std::filesystem::path& path) {
    const std::string name = path.string();
    std::ifstream in(path, std::ios::binary);
    if (!in) throw FormatError(name + ": cannot open");
    std::error_code ec;
    const std::uint64_t fileSize = std::filesystem::file_size(path, ec);
    if (ec) throw FormatError(name + ": cannot stat: " + ec.message());
    if (fileSize < 8)
        throw FormatError(name + ": " + std::to_string(fileSize) +
                          " bytes is too short for a safetensors file (8-byte length first)");
    unsigned char lengthBytes[8];
    if (!in.read(reinterpret_cast<char*>(lengthBytes), 8))
        throw FormatError(name + ": cannot read the header length");
    std::uint64_t length = 0;
    for (int i = 7; i >= 0; --i) length = length << 8 | lengthBytes[i];
    if (length > kMaxHeaderBytes)
        throw FormatError(name + ": header length " + std::to_string(length) +
                          " is absurd (limit " + std::to_string(kMaxHeaderBytes) + " bytes)");
    if (length > fileSize - 8)
        throw FormatError(name + ": header length " + std::to_string(length) +
                          " is larger than the file (" + std::to_string(fileSize) + " bytes)");
    std::string header(length, '\0');
    if (!in.read(header.data(), static_cast<std::streamsize>(length)))
        throw FormatError(name + ": short read of the " + std::to_string(length) + "-byte header");
    return parseShardHeader(header, fileSize, name);
}

} // namespace k3
