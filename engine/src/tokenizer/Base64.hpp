#pragma once
// Strict RFC 4648 base64 (standard alphabet, '=' padding required). The engine links no
// crypto library, and each direction is a dozen lines, so they are written here.

#include <optional>
#include <string>
#include <string_view>

namespace k3::detail {

// Nothing when `text` is not canonical padded base64.
std::optional<std::string> decodeBase64(std::string_view text);
// Canonical padded base64 of `bytes` (decodeBase64's inverse): image data URLs.
std::string encodeBase64(std::string_view bytes);

} // namespace k3::detail
