// Chunked request bodies through k3 serve's strict decoder (app/cli/ChunkedBody). The
// decoder promises: never read past its input, never a body over the limit, never a
// Done without the whole framing consumed, and the same result whether the bytes
// arrive whole or split in two at any point (the first byte picks the split).
#include "FuzzSupport.hpp"

#include "cli/ChunkedBody.hpp"

#include <string>

using k3cli::ChunkedBodyDecoder;

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
    if (size == 0) return 0;
    const std::size_t split = data[0] % size;
    const std::string_view input = k3fuzz::asText(data + 1, size - 1);
    constexpr std::size_t kLimit = 4096, kTrailerLimit = 256;

    ChunkedBodyDecoder whole(kLimit, kTrailerLimit);
    const auto status = whole.decode(input);
    k3fuzz::check(whole.consumed() <= input.size(), "consumed past the input");
    k3fuzz::check(whole.body().size() <= kLimit, "a body over the limit");
    k3fuzz::check(whole.body().size() <= whole.consumed(), "more body than input");
    k3fuzz::check((status == ChunkedBodyDecoder::Status::Invalid) == !whole.error().empty(),
                  "an error without Invalid or Invalid without an error");

    ChunkedBodyDecoder parts(kLimit, kTrailerLimit);
    auto partStatus = parts.decode(input.substr(0, std::min(split, input.size())));
    if (partStatus == ChunkedBodyDecoder::Status::NeedMore) partStatus = parts.decode(input);
    k3fuzz::check(partStatus == status, "a split input decoded to another status");
    k3fuzz::check(parts.body() == whole.body(), "a split input decoded to another body");
    if (status == ChunkedBodyDecoder::Status::Done)
        k3fuzz::check(parts.consumed() == whole.consumed(), "a split input consumed otherwise");
    return 0;
}
