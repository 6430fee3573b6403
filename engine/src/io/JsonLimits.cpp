#include "k3/json_limits.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstring>
#include <vector>

namespace k3 {

namespace {

// One open array or object on the way to a byte.
struct Frame {
    bool array = false;
    std::size_t index = 0;  // arrays: the element being read
    std::string_view key;   // objects: the key of the member being read
    bool expectKey = false; // objects: the next string is a key
};

struct ScanEnd {
    std::optional<std::size_t> tooDeepAt;
    std::vector<Frame> frames; // the outermost `keep` levels open where the scan ended
};

// The closing quote of the string whose text starts at `start`, or `end`. memchr finds
// the quotes: most of an index's 58 MB is inside strings.
std::size_t closingQuote(std::string_view text, std::size_t start, std::size_t end) {
    for (std::size_t from = start; from < end;) {
        const void* quote = std::memchr(text.data() + from, '"', end - from);
        if (!quote) break;
        const auto at = std::size_t(static_cast<const char*>(quote) - text.data());
        std::size_t slashes = 0;
        while (at > start + slashes && text[at - 1 - slashes] == '\\') ++slashes;
        if (slashes % 2 == 0) return at;
        from = at + 1; // an escaped quote
    }
    return end;
}

// Counts brackets outside strings up to byte `end` (or to the first one past the
// limit), keeping the outermost `keep` levels for naming the field. Iterative: any
// depth costs one counter.
ScanEnd scan(std::string_view text, std::size_t end, std::size_t keep) {
    ScanEnd out;
    std::vector<Frame>& frames = out.frames;
    std::size_t depth = 0;
    end = std::min(end, text.size());
    for (std::size_t i = 0; i < end; ++i) {
        const char c = text[i];
        switch (c) {
        case '"': {
            const std::size_t close = closingQuote(text, i + 1, end);
            if (close == end) return out; // `end` lies inside this string
            if (depth > 0 && depth == frames.size() && frames.back().expectKey)
                frames.back().key = text.substr(i + 1, close - i - 1);
            i = close;
            break;
        }
        case '[':
        case '{':
            if (depth == kMaxJsonDepth) {
                out.tooDeepAt = i;
                return out;
            }
            ++depth;
            if (frames.size() < keep && frames.size() + 1 == depth)
                frames.push_back({c == '[', 0, {}, c == '{'});
            break;
        case ']':
        case '}':
            if (depth == 0) break;
            if (depth == frames.size()) frames.pop_back();
            --depth;
            break;
        case ',':
            if (depth > 0 && depth == frames.size()) {
                Frame& f = frames.back();
                if (f.array) {
                    ++f.index;
                } else {
                    f.expectKey = true;
                    f.key = {};
                }
            }
            break;
        case ':':
            if (depth > 0 && depth == frames.size()) frames.back().expectKey = false;
            break;
        default:
            break;
        }
    }
    return out;
}

std::string printableKey(std::string_view key) {
    constexpr std::size_t kMaxKeyBytes = 64;
    std::string out;
    for (const char c : key.substr(0, kMaxKeyBytes)) {
        const auto u = static_cast<unsigned char>(c);
        out += u < 0x20 || u == 0x7f ? '?' : c;
    }
    if (key.size() > kMaxKeyBytes) out += "...";
    return out;
}

// Reports where the text stops being JSON; accepts everything else without keeping it.
class SyntaxLocator : public nlohmann::json_sax<nlohmann::json> {
public:
    std::optional<JsonSyntaxError> error;
    bool null() override { return true; }
    bool boolean(bool) override { return true; }
    bool number_integer(number_integer_t) override { return true; }
    bool number_unsigned(number_unsigned_t) override { return true; }
    bool number_float(number_float_t, const string_t&) override { return true; }
    bool string(string_t&) override { return true; }
    bool binary(binary_t&) override { return true; }
    bool start_object(std::size_t) override { return true; }
    bool key(string_t&) override { return true; }
    bool end_object() override { return true; }
    bool start_array(std::size_t) override { return true; }
    bool end_array() override { return true; }
    bool parse_error(std::size_t position, const std::string&,
                     const nlohmann::detail::exception& e) override {
        // Without nlohmann's "[json.exception.parse_error.101] ": its name, not the reason.
        std::string_view why = e.what();
        if (why.starts_with("[json.exception.")) why.remove_prefix(why.find(']') + 1);
        if (why.starts_with(' ')) why.remove_prefix(1);
        error = JsonSyntaxError{position, std::string(why)};
        return false;
    }
};

} // namespace

std::optional<std::size_t> jsonTooDeepAt(std::string_view text) {
    return scan(text, text.size(), 0).tooDeepAt;
}

std::optional<std::string> jsonDepthProblem(std::string_view text) {
    const auto at = jsonTooDeepAt(text);
    if (!at) return std::nullopt;
    return "JSON nested deeper than " + std::to_string(kMaxJsonDepth) +
           " levels of arrays and objects (at byte " + std::to_string(*at) + ")";
}

std::string jsonPathAt(std::string_view text, std::size_t offset, std::size_t maxParts) {
    const ScanEnd end = scan(text, offset, maxParts + 1);
    std::string path;
    for (std::size_t i = 0; i < end.frames.size(); ++i) {
        if (i == maxParts) {
            path += "...";
            break;
        }
        const Frame& f = end.frames[i];
        if (f.array) {
            path += "[" + std::to_string(f.index) + "]";
        } else {
            if (f.key.empty() && f.expectKey) break; // between members: the object itself
            if (!path.empty()) path += ".";
            path += printableKey(f.key);
        }
    }
    return path;
}

std::optional<JsonSyntaxError> jsonSyntaxError(std::string_view text) {
    SyntaxLocator locator;
    nlohmann::json::sax_parse(text.begin(), text.end(), &locator);
    return locator.error;
}

} // namespace k3
