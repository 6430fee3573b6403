#include "ChunkedBody.hpp"

#include <algorithm>
#include <cctype>

namespace k3cli {

namespace {

// The longest chunk-size line accepted: 16 hex digits and a short extension.
constexpr std::size_t kMaxSizeLineBytes = 4096;

// A field name is an RFC 9110 token.
bool isTokenChar(unsigned char c) {
    return std::isalnum(c) ||
           std::string_view("!#$%&'*+-.^_`|~").find(char(c)) != std::string_view::npos;
}

// Field values and chunk extensions: visible ASCII, space, tab and obs-text; no control
// character (a NUL or a bare CR could end the line for another reader).
bool isFieldText(std::string_view v) {
    return std::all_of(v.begin(), v.end(),
                       [](unsigned char c) { return c == '\t' || (c >= 0x20 && c != 0x7f); });
}

std::string shown(std::string_view v) {
    std::string out;
    for (const unsigned char c : v.substr(0, 40)) out += (c >= 0x20 && c < 0x7f) ? char(c) : '?';
    return out;
}

} // namespace

ChunkedBodyDecoder::ChunkedBodyDecoder(std::size_t limit, std::size_t trailerLimit)
    : limit_(limit), trailerLimit_(trailerLimit) {}

ChunkedBodyDecoder::Status ChunkedBodyDecoder::fail(std::string why) {
    error_ = std::move(why);
    return status_ = Status::Invalid;
}

ChunkedBodyDecoder::Status ChunkedBodyDecoder::sizeLine(std::string_view line) {
    // chunk-size [ BWS ";" chunk-ext ]: hex digits only (no sign, no 0x, no space first).
    std::size_t digits = 0;
    std::uint64_t size = 0;
    while (digits < line.size() && std::isxdigit(static_cast<unsigned char>(line[digits]))) {
        if (size >> 59)
            return fail("chunk " + std::to_string(chunks_ + 1) + ": its size \"" + shown(line) +
                        "\" is too large");
        const char c = char(std::tolower(static_cast<unsigned char>(line[digits])));
        size = size * 16 + std::uint64_t(c <= '9' ? c - '0' : c - 'a' + 10);
        ++digits;
    }
    std::string_view rest = line.substr(digits);
    while (!rest.empty() && (rest.front() == ' ' || rest.front() == '\t')) rest.remove_prefix(1);
    if (digits == 0 || (!rest.empty() && (rest.front() != ';' || !isFieldText(rest))))
        return fail("chunk " + std::to_string(chunks_ + 1) + ": the size line \"" + shown(line) +
                    "\" is not HEX[;extension]");
    ++chunks_;
    if (size == 0) {
        part_ = Part::Trailer;
        return status_;
    }
    if (size > limit_ - body_.size()) return status_ = Status::TooLarge;
    dataLeft_ = size;
    part_ = Part::Data;
    return status_;
}

ChunkedBodyDecoder::Status ChunkedBodyDecoder::trailerLine(std::string_view line) {
    if (line.empty()) {
        part_ = Part::End;
        return status_ = Status::Done;
    }
    // Trailer fields are read and dropped: nothing in a request depends on them.
    const std::size_t colon = line.find(':');
    const std::string_view name = line.substr(0, colon);
    if (colon == std::string_view::npos || name.empty() ||
        !std::all_of(name.begin(), name.end(), [](unsigned char c) { return isTokenChar(c); }) ||
        !isFieldText(line.substr(colon + 1)))
        return fail("the trailer line \"" + shown(line) + "\" is not NAME: VALUE");
    return status_;
}

ChunkedBodyDecoder::Status ChunkedBodyDecoder::decode(std::string_view input) {
    while (status_ == Status::NeedMore && pos_ < input.size()) {
        if (part_ == Part::Data) {
            const std::size_t n =
                std::size_t(std::min<std::uint64_t>(dataLeft_, input.size() - pos_));
            body_.append(input.substr(pos_, n));
            pos_ += n;
            dataLeft_ -= n;
            if (dataLeft_ == 0) part_ = Part::DataEnd;
            continue;
        }
        if (part_ == Part::DataEnd) {
            if (input.size() - pos_ < 2) break;
            if (input.substr(pos_, 2) != "\r\n")
                return fail("chunk " + std::to_string(chunks_) +
                            ": its data is not followed by CRLF");
            pos_ += 2;
            part_ = Part::SizeLine;
            continue;
        }
        // A line: a chunk size or a trailer field.
        const std::size_t lineLimit =
            part_ == Part::SizeLine ? kMaxSizeLineBytes : trailerLimit_ - trailerBytes_ + 2;
        const std::size_t nl = input.find('\n', pos_);
        const std::size_t seen = (nl == std::string_view::npos ? input.size() : nl + 1) - pos_;
        if (seen > lineLimit)
            return fail(part_ == Part::SizeLine
                            ? "chunk " + std::to_string(chunks_ + 1) + ": its size line is over " +
                                  std::to_string(kMaxSizeLineBytes) + " bytes"
                            : "the trailer section is over " + std::to_string(trailerLimit_) +
                                  " bytes");
        if (nl == std::string_view::npos) break;
        if (nl == pos_ || input[nl - 1] != '\r')
            return fail(part_ == Part::SizeLine
                            ? "chunk " + std::to_string(chunks_ + 1) +
                                  ": its size line ends in a bare LF (HTTP needs CRLF)"
                            : "a trailer line ends in a bare LF (HTTP needs CRLF)");
        const std::string_view line = input.substr(pos_, nl - 1 - pos_);
        pos_ = nl + 1;
        if (part_ == Part::SizeLine) {
            sizeLine(line);
        } else {
            trailerBytes_ += seen;
            trailerLine(line);
        }
    }
    return status_;
}

} // namespace k3cli
