#include "tokenizer/Base64.hpp"

#include <algorithm>
#include <array>

namespace k3::detail {

namespace {

constexpr std::array<signed char, 256> makeTable() {
    std::array<signed char, 256> t{};
    for (auto& v : t) v = -1;
    constexpr std::string_view alphabet =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    for (std::size_t i = 0; i < alphabet.size(); ++i)
        t[static_cast<unsigned char>(alphabet[i])] = static_cast<signed char>(i);
    return t;
}

constexpr auto kTable = makeTable();

} // namespace

std::optional<std::string> decodeBase64(std::string_view text) {
    if (text.empty() || text.size() % 4 != 0) return std::nullopt;
    std::size_t pad = 0;
    if (text.back() == '=') pad = text[text.size() - 2] == '=' ? 2 : 1;
    std::string out;
    out.reserve(text.size() / 4 * 3);
    for (std::size_t i = 0; i < text.size(); i += 4) {
        const bool last = i + 4 == text.size();
        const std::size_t dataChars = last ? 4 - pad : 4;
        unsigned v = 0;
        for (std::size_t k = 0; k < 4; ++k) {
            int d = 0;
            if (k < dataChars) {
                d = kTable[static_cast<unsigned char>(text[i + k])];
                if (d < 0) return std::nullopt;
            } else if (text[i + k] != '=') {
                return std::nullopt;
            }
            v = (v << 6) | static_cast<unsigned>(d);
        }
        // Non-zero bits hidden under the padding would make two spellings for one token.
        if ((pad == 1 && last && (v & 0xFF) != 0) || (pad == 2 && last && (v & 0xFFFF) != 0))
            return std::nullopt;
        out.push_back(static_cast<char>((v >> 16) & 0xFF));
        if (dataChars > 2) out.push_back(static_cast<char>((v >> 8) & 0xFF));
        if (dataChars > 3) out.push_back(static_cast<char>(v & 0xFF));
    }
    return out;
}

std::string encodeBase64(std::string_view bytes) {
    constexpr std::string_view alphabet =
        "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    std::string out;
    out.reserve((bytes.size() + 2) / 3 * 4);
    for (std::size_t i = 0; i < bytes.size(); i += 3) {
        const std::size_t n = std::min<std::size_t>(3, bytes.size() - i);
        unsigned v = 0;
        for (std::size_t k = 0; k < 3; ++k)
            v = (v << 8) | (k < n ? static_cast<unsigned char>(bytes[i + k]) : 0u);
        for (std::size_t k = 0; k < 4; ++k)
            out.push_back(k <= n ? alphabet[(v >> (18 - 6 * k)) & 0x3F] : '=');
    }
    return out;
}

} // namespace k3::detail
