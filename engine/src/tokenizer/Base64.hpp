#pragma once
// Strict RFC 4648 base64 (standard alphabet, '=' padding required). The engine links no
// crypto library, and the decoder is a dozen lines, so it is written here.

#include <optional>
#include <string>
#include <string_view>

namespace k3::detail {

// Nothing when `text` is not canonical padded base64.
std::optional<std::string> decodeBase64(std::string_view text);

} // namespace k3::detail
