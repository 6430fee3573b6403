#pragma once
// A chunked request body (RFC 9112 section 7.1) decoded strictly, resumable as its bytes
// arrive: k3 serve decodes it before cpp-httplib sees the request, because the library
// takes a chunk without its closing CRLF as the body's end, reads "+a" and "0x10" as
// sizes and refuses every trailer section.

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace k3cli {

class ChunkedBodyDecoder {
public:
    enum class Status {
        NeedMore, // the body is not complete yet
        Done,     // body() is the whole body; consumed() bytes of input were used
        Invalid,  // error() says what is wrong
        TooLarge, // the body passes `limit` bytes (found as soon as a chunk size says so)
    };

    // `limit`: the most body bytes accepted; `trailerLimit`: the most trailer bytes.
    ChunkedBodyDecoder(std::size_t limit, std::size_t trailerLimit);

    // Reads on from `input`, the body's bytes from its first one (a longer view each
    // call; bytes already decoded are not looked at again).
    Status decode(std::string_view input);

    const std::string& body() const { return body_; }
    std::size_t consumed() const { return pos_; }
    const std::string& error() const { return error_; }

private:
    enum class Part { SizeLine, Data, DataEnd, Trailer, End };
    Status fail(std::string why);
    Status sizeLine(std::string_view line);
    Status trailerLine(std::string_view line);

    std::size_t limit_, trailerLimit_;
    Part part_ = Part::SizeLine;
    std::uint64_t dataLeft_ = 0;
    std::size_t pos_ = 0;
    std::size_t trailerBytes_ = 0;
    int chunks_ = 0;
    std::string body_;
    std::string error_;
    Status status_ = Status::NeedMore;
};

} // namespace k3cli
