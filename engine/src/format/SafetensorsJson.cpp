#include "format/SafetensorsJson.hpp"
#include "k3/json_limits.hpp"
#include "k3/read_file.hpp"

#include <simdjson.h>

#include <algorithm>
#include <cstring>
#include <fstream>
#include <unordered_map>

namespace k3::format {

static_assert(kJsonPadding >= simdjson::SIMDJSON_PADDING);

namespace sj = simdjson::ondemand;

PaddedText::PaddedText(std::size_t size) : bytes_(new char[size + kJsonPadding]), size_(size) {
    std::memset(bytes_.get() + size, 0, kJsonPadding);
}

PaddedText PaddedText::copyOf(std::string_view text) {
    PaddedText out(text.size());
    if (!text.empty()) std::memcpy(out.data(), text.data(), text.size());
    return out;
}

PaddedText readPaddedFile(const std::filesystem::path& path) {
    try {
        requireRegularFile(path, "index");
    } catch (const FileReadError& e) {
        throw FormatError(e.what());
    }
    std::ifstream in(path, std::ios::binary);
    if (!in) throw FormatError(path.string() + ": cannot open");
    std::error_code ec;
    const std::uint64_t size = std::filesystem::file_size(path, ec);
    if (ec) throw FormatError(path.string() + ": cannot stat: " + ec.message());
    if (size > kMaxIndexBytes)
        throw FormatError(path.string() + ": " + std::to_string(size) + " bytes, over the " +
                          std::to_string(kMaxIndexBytes) + " an index may have");
    PaddedText text(size);
    if (!in.read(text.data(), static_cast<std::streamsize>(size)))
        throw FormatError(path.string() + ": read error");
    return text;
}

HeaderText readHeaderText(const std::filesystem::path& path) {
    const std::string name = path.string();
    try {
        requireRegularFile(path, "shard");
    } catch (const FileReadError& e) {
        throw FormatError(e.what());
    }
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
    HeaderText out{PaddedText(length), fileSize};
    if (!in.read(out.json.data(), static_cast<std::streamsize>(length)))
        throw FormatError(name + ": short read of the " + std::to_string(length) + "-byte header");
    return out;
}

namespace {

const char* typeWords(sj::json_type type) {
    switch (type) {
    case sj::json_type::array:
        return "an array";
    case sj::json_type::object:
        return "an object";
    case sj::json_type::number:
        return "a number";
    case sj::json_type::string:
        return "a string";
    case sj::json_type::boolean:
        return "a boolean";
    case sj::json_type::null:
        return "null";
    default: // newer simdjson has json_type::unknown
        return "something that is not JSON";
    }
}

// A shard name from the index becomes a path under the model directory, so it must
// be a plain file name: no separators, no "..", nothing that escapes the directory;
// and no control characters, which the downloader refuses too (isSafeFileName) and
// which would reach the terminal through every message that names the shard.
bool isPlainFileName(std::string_view name) {
    if (name.empty() || name == "." || name == "..") return false;
    for (const char c : name)
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) return false;
    return name.find_first_of("/\\") == std::string_view::npos &&
           name.find("..") == std::string_view::npos;
}

std::string_view trimRight(std::string_view s) {
    while (!s.empty() &&
           (s.back() == ' ' || s.back() == '\t' || s.back() == '\n' || s.back() == '\r'))
        s.remove_suffix(1);
    return s;
}

// One document being walked: turns simdjson errors into FormatErrors naming the file
// and the byte where the text stops being JSON.
class Walk {
public:
    Walk(sj::document& doc, const PaddedText& text, const std::string& path, const char* what)
        : doc_(doc), text_(text), path_(path), what_(what) {}

    [[noreturn]] void syntax(simdjson::error_code error) const {
        // simdjson says only that the text is not JSON; nlohmann says where and why.
        const std::string_view text = text_.view();
        if (const auto error = jsonSyntaxError(text))
            throw FormatError(path_ + ": " + what_ + "not valid JSON at byte " +
                              std::to_string(error->byte) + ": " + error->why);
        // Valid for nlohmann, not for simdjson.
        throw FormatError(path_ + ": " + what_ + "not valid JSON at byte " +
                          std::to_string(text.size()) + ": " + simdjson::error_message(error));
    }
    void check(simdjson::error_code error) const {
        if (error) syntax(error);
    }
    template <typename T, typename R> T get(R&& result) const {
        T value;
        check(std::forward<R>(result).get(value));
        return value;
    }
    sj::json_type typeOf(sj::value& v) const { return get<sj::json_type>(v.type()); }

    // Whatever `v` is, every byte of it must be JSON: free-form parts are validated
    // even though nothing reads them.
    void skip(sj::value v) const {
        switch (typeOf(v)) {
        case sj::json_type::object:
            for (auto field : get<sj::object>(v.get_object())) {
                get<std::string_view>(field.unescaped_key());
                skip(get<sj::value>(field.value()));
            }
            return;
        case sj::json_type::array:
            for (auto element : get<sj::array>(v.get_array())) skip(get<sj::value>(element));
            return;
        case sj::json_type::string:
            get<std::string_view>(v.get_string());
            return;
        case sj::json_type::number:
            get<double>(v.get_double());
            return;
        case sj::json_type::boolean:
            get<bool>(v.get_bool());
            return;
        case sj::json_type::null:
            if (!get<bool>(v.is_null())) syntax(simdjson::N_ATOM_ERROR);
            return;
        default:
            syntax(simdjson::TAPE_ERROR);
        }
    }

    // Nothing may follow the top-level value.
    void expectEnd() const {
        const char* at = nullptr;
        if (doc_.current_location().get(at) == simdjson::SUCCESS)
            syntax(simdjson::TRAILING_CONTENT);
    }

private:
    sj::document& doc_;
    const PaddedText& text_;
    const std::string& path_;
    std::string what_;
};

// Field bits of one header entry: which of dtype, shape, data_offsets were seen.
enum : int { kSawDType = 1, kSawShape = 2, kSawOffsets = 4, kSawAll = 7 };

class HeaderWalk {
public:
    HeaderWalk(const Walk& walk, const std::string& path, std::uint64_t dataStart,
               std::uint64_t dataSize, std::vector<HeaderTensor>& out)
        : walk_(walk), path_(path), dataStart_(dataStart), dataSize_(dataSize), out_(out) {}

    void tensor(std::string_view name, sj::value v) {
        name_ = name;
        const sj::json_type type = walk_.typeOf(v);
        if (type != sj::json_type::object) fail(std::string("unexpected ") + typeWords(type));
        TensorInfo info;
        std::uint64_t offsets[2] = {0, 0};
        int offsetCount = 0, seen = 0;
        for (auto field : walk_.get<sj::object>(v.get_object())) {
            const auto key = walk_.get<std::string_view>(field.unescaped_key());
            sj::value value = walk_.get<sj::value>(field.value());
            if (key == "dtype") {
                std::string_view dtype;
                if (value.get_string().get(dtype) != simdjson::SUCCESS)
                    fail(std::string("unexpected ") + typeWords(walk_.typeOf(value)) + " in dtype");
                const auto parsed = parseDType(dtype);
                if (!parsed)
                    fail("dtype \"" + std::string(dtype) +
                         "\" is not supported (expected F32, F16, BF16 or U8)");
                info.dtype = *parsed;
                seen |= kSawDType;
            } else if (key == "shape") {
                info.rank = 0;
                numbers(value, "shape", [&](std::uint64_t n) {
                    if (info.rank >= kMaxTensorRank)
                        fail("rank above " + std::to_string(kMaxTensorRank) + " is not supported");
                    info.shape[info.rank++] = n;
                });
                seen |= kSawShape;
            } else if (key == "data_offsets") {
                offsetCount = 0;
                numbers(value, "data_offsets", [&](std::uint64_t n) {
                    if (offsetCount >= 2) fail("data_offsets has more than 2 entries");
                    offsets[offsetCount++] = n;
                });
                seen |= kSawOffsets;
            } else {
                fail("unexpected key \"" + std::string(key) + "\"");
            }
        }
        finish(info, seen, offsets, offsetCount);
    }

private:
    [[noreturn]] void fail(const std::string& what) const {
        throw FormatError(path_ + ": tensor \"" + std::string(name_) + "\": " + what);
    }

    // An array of unsigned 64-bit integers; anything else is refused with its text.
    template <typename Sink> void numbers(sj::value& v, const char* field, Sink&& sink) {
        const sj::json_type type = walk_.typeOf(v);
        if (type != sj::json_type::array)
            fail(std::string("unexpected ") + typeWords(type) + " in " + field);
        for (auto element : walk_.get<sj::array>(v.get_array())) {
            sj::value x = walk_.get<sj::value>(element);
            std::uint64_t n;
            const auto error = x.get_uint64().get(n);
            if (error == simdjson::SUCCESS) {
                sink(n);
                continue;
            }
            const sj::json_type got = walk_.typeOf(x);
            if (got != sj::json_type::number)
                fail(std::string("unexpected ") + typeWords(got) + " in " + field);
            std::int64_t negative;
            if (x.get_int64().get(negative) == simdjson::SUCCESS)
                fail("negative value " + std::to_string(negative) + " in " + field);
            double real;
            if (x.get_double().get(real) == simdjson::SUCCESS)
                fail("non-integer or out-of-range value " +
                     std::string(trimRight(x.raw_json_token())) + " in " + field);
            walk_.syntax(error == simdjson::INCORRECT_TYPE ? simdjson::NUMBER_ERROR : error);
        }
    }

    void finish(TensorInfo& info, int seen, const std::uint64_t (&offsets)[2], int offsetCount) {
        if (seen != kSawAll) {
            std::string missing;
            if (!(seen & kSawDType)) missing += " dtype";
            if (!(seen & kSawShape)) missing += " shape";
            if (!(seen & kSawOffsets)) missing += " data_offsets";
            fail("missing" + missing);
        }
        if (offsetCount != 2)
            fail("data_offsets needs 2 entries, has " + std::to_string(offsetCount));
        const std::uint64_t begin = offsets[0], end = offsets[1];
        const auto range = [&] {
            return "data_offsets [" + std::to_string(begin) + ", " + std::to_string(end) + "]";
        };
        if (begin > end) fail(range() + " has begin after end");
        if (end > dataSize_)
            fail(range() + " run past the data section (" + std::to_string(dataSize_) +
                 " bytes): the file is cut short; download the model again (a download "
                 "resumes and checks every file)");
        std::uint64_t elements = 1;
        for (std::uint8_t i = 0; i < info.rank; ++i)
            if (__builtin_mul_overflow(elements, info.shape[i], &elements))
                fail("shape element count overflows 64 bits");
        std::uint64_t bytes = 0;
        if (__builtin_mul_overflow(elements, dtypeSize(info.dtype), &bytes))
            fail("byte size overflows 64 bits");
        if (bytes != end - begin)
            fail("shape needs " + std::to_string(bytes) + " bytes of " +
                 std::string(dtypeName(info.dtype)) + " but " + range() + " hold " +
                 std::to_string(end - begin));
        info.offset = dataStart_ + begin;
        info.nbytes = bytes;
        out_.push_back({name_, info});
    }

    const Walk& walk_;
    const std::string& path_;
    std::uint64_t dataStart_, dataSize_;
    std::vector<HeaderTensor>& out_;
    std::string_view name_;
};

} // namespace

struct JsonScanner::Impl {
    sj::parser parser;
    std::vector<HeaderTensor> tensors;
};

JsonScanner::JsonScanner() : impl_(std::make_unique<Impl>()) {}
JsonScanner::~JsonScanner() = default;

const std::vector<HeaderTensor>& JsonScanner::header(const PaddedText& json, std::uint64_t fileSize,
                                                     const std::string& path) {
    const std::uint64_t dataStart = 8 + json.size();
    if (dataStart > fileSize)
        throw FormatError(path + ": header of " + std::to_string(json.size()) +
                          " bytes does not fit in a file of " + std::to_string(fileSize) +
                          " bytes");
    auto& out = impl_->tensors;
    out.clear();
    // Before simdjson: skip() recurses once per level of __metadata__.
    if (const auto deep = jsonDepthProblem(json.view()))
        throw FormatError(path + ": header is " + *deep);
    sj::document doc;
    Walk walk(doc, json, path, "header is ");
    walk.check(
        impl_->parser.iterate(json.data(), json.size(), json.size() + kJsonPadding).get(doc));
    const auto type = walk.get<sj::json_type>(doc.type());
    if (type != sj::json_type::object)
        throw FormatError(path + ": header is " + typeWords(type) + ", expected an object");
    HeaderWalk tensors(walk, path, dataStart, fileSize - dataStart, out);
    for (auto field : walk.get<sj::object>(doc.get_object())) {
        const auto name = walk.get<std::string_view>(field.unescaped_key());
        sj::value value = walk.get<sj::value>(field.value());
        if (name == "__metadata__") // free-form, not a tensor
            walk.skip(value);
        else
            tensors.tensor(name, value);
    }
    walk.expectEnd();
    return out;
}

void JsonScanner::index(const PaddedText& json, const std::string& path,
                        std::vector<std::string>& shardFiles, std::vector<IndexEntry>& entries) {
    shardFiles.clear();
    entries.clear();
    if (const auto deep = jsonDepthProblem(json.view())) throw FormatError(path + ": " + *deep);
    sj::document doc;
    Walk walk(doc, json, path, "");
    walk.check(
        impl_->parser.iterate(json.data(), json.size(), json.size() + kJsonPadding).get(doc));
    const auto type = walk.get<sj::json_type>(doc.type());
    if (type != sj::json_type::object)
        throw FormatError(path + ": unexpected " + typeWords(type) + " at the top level");
    // ~117 bytes of JSON per entry in the released index; a guess, never a limit.
    entries.reserve(json.size() / 100 + 16);
    std::unordered_map<std::string_view, std::uint32_t> shardIds;
    std::string_view lastShard; // entries come in runs per shard: skip the hash then
    std::uint32_t lastId = 0;
    bool sawWeightMap = false;
    for (auto field : walk.get<sj::object>(doc.get_object())) {
        const auto key = walk.get<std::string_view>(field.unescaped_key());
        sj::value value = walk.get<sj::value>(field.value());
        if (key != "weight_map") { // "metadata" and anything else: not ours
            walk.skip(value);
            continue;
        }
        if (sawWeightMap) throw FormatError(path + ": weight_map appears twice");
        sawWeightMap = true;
        const auto mapType = walk.typeOf(value);
        if (mapType != sj::json_type::object)
            throw FormatError(path + ": unexpected " + std::string(typeWords(mapType)) +
                              " in weight_map");
        for (auto entry : walk.get<sj::object>(value.get_object())) {
            const auto tensor = walk.get<std::string_view>(entry.unescaped_key());
            sj::value shardValue = walk.get<sj::value>(entry.value());
            std::string_view shard;
            if (shardValue.get_string().get(shard) != simdjson::SUCCESS)
                throw FormatError(path + ": weight_map[\"" + std::string(tensor) + "\"] is " +
                                  typeWords(walk.typeOf(shardValue)) +
                                  ", expected a shard file name");
            if (shard != lastShard || lastShard.empty()) {
                if (!isPlainFileName(shard))
                    throw FormatError(path + ": weight_map[\"" + std::string(tensor) + "\"] = \"" +
                                      std::string(shard) +
                                      "\" is not a plain shard file name (no path separators, "
                                      "control characters or \"..\")");
                auto [it, added] =
                    shardIds.try_emplace(shard, static_cast<std::uint32_t>(shardFiles.size()));
                if (added) shardFiles.emplace_back(shard);
                lastShard = shard;
                lastId = it->second;
            }
            entries.push_back({tensor, lastId});
        }
    }
    walk.expectEnd();
    if (!sawWeightMap) throw FormatError(path + ": no weight_map");
}

void checkDuplicates(std::span<const HeaderTensor> tensors, const std::string& path) {
    // Sorting views is cheaper than hashing every name.
    std::vector<std::string_view> names;
    names.reserve(tensors.size());
    for (const auto& t : tensors) names.push_back(t.name);
    std::sort(names.begin(), names.end());
    const auto dup = std::adjacent_find(names.begin(), names.end());
    if (dup != names.end())
        throw FormatError(path + ": tensor \"" + std::string(*dup) +
                          "\": appears twice in the header");
}

void checkOverlaps(std::span<const HeaderTensor> tensors, std::uint64_t dataStart,
                   const std::string& path) {
    std::vector<std::uint32_t> order(tensors.size());
    for (std::uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    const auto byOffset = [&](std::uint32_t a, std::uint32_t b) {
        return tensors[a].info.offset < tensors[b].info.offset;
    };
    // Headers usually list tensors in file order: then there is nothing to sort.
    if (!std::is_sorted(order.begin(), order.end(), byOffset))
        std::stable_sort(order.begin(), order.end(), byOffset);
    std::uint64_t maxEnd = 0;
    std::uint32_t owner = 0;
    for (std::uint32_t i : order) {
        const TensorInfo& t = tensors[i].info;
        if (t.nbytes == 0) continue; // empty tensors share no bytes with anyone
        if (t.offset < maxEnd)
            throw FormatError(path + ": tensor \"" + std::string(tensors[i].name) + "\" [" +
                              std::to_string(t.offset - dataStart) + ", " +
                              std::to_string(t.offset - dataStart + t.nbytes) +
                              ") overlaps tensor \"" + std::string(tensors[owner].name) +
                              "\" (ends at " + std::to_string(maxEnd - dataStart) + ")");
        maxEnd = t.offset + t.nbytes;
        owner = i;
    }
}

} // namespace k3::format
