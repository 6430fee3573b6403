#pragma once
// WHATWG "UTF-8 decode" with replacement, as TextDecoder does it: one U+FFFD per maximal
// subpart of an ill-formed sequence. Shared by input sanitising and the streaming decoder.

#include <cstddef>
#include <string>
#include <string_view>

namespace k3::detail {

// Appends the well-formed text of `in` to `out`. With `final` false, an incomplete sequence
// at the very end is not consumed (it may be completed by the next bytes); the return value
// is the number of bytes consumed. With `final` true everything is consumed.
std::size_t decodeUtf8Replacing(std::string_view in, std::string& out, bool final);

} // namespace k3::detail
