#pragma once
// Shared by the fuzz targets: a crash means a bug; an exception of the parser's own
// error type is the expected refusal of bad input. Anything else escapes and aborts.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <string_view>

namespace k3fuzz {

inline std::string_view asText(const std::uint8_t* data, std::size_t size) {
    return {reinterpret_cast<const char*>(data), size};
}

// An invariant the parser promised and broke: report it as a crash with the input.
[[noreturn]] inline void broken(const char* what) {
    std::fprintf(stderr, "fuzz invariant broken: %s\n", what);
    std::abort();
}

inline void check(bool ok, const char* what) {
    if (!ok) broken(what);
}

} // namespace k3fuzz
