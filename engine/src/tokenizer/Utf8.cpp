#include "tokenizer/Utf8.hpp"

#include "k3/tokenizer.hpp"

namespace k3::detail {

namespace {

constexpr std::string_view kReplacement = "\xEF\xBF\xBD";

} // namespace

std::size_t decodeUtf8Replacing(std::string_view in, std::string& out, bool final) {
    out.reserve(out.size() + in.size());
    std::size_t i = 0;
    const std::size_t n = in.size();
    while (i < n) {
        const auto lead = static_cast<unsigned char>(in[i]);
        if (lead < 0x80) {
            out.push_back(static_cast<char>(lead));
            ++i;
            continue;
        }
        std::size_t needed = 0;
        unsigned char lower = 0x80;
        unsigned char upper = 0xBF;
        if (lead >= 0xC2 && lead <= 0xDF) {
            needed = 1;
        } else if (lead >= 0xE0 && lead <= 0xEF) {
            needed = 2;
            // Overlong forms and UTF-16 surrogates are refused at the second byte.
            if (lead == 0xE0) lower = 0xA0;
            if (lead == 0xED) upper = 0x9F;
        } else if (lead >= 0xF0 && lead <= 0xF4) {
            needed = 3;
            if (lead == 0xF0) lower = 0x90;
            if (lead == 0xF4) upper = 0x8F;
        } else {
            out += kReplacement;
            ++i;
            continue;
        }
        std::size_t seen = 0;
        bool bad = false;
        while (seen < needed) {
            const std::size_t at = i + 1 + seen;
            if (at >= n) break;
            const auto b = static_cast<unsigned char>(in[at]);
            if (b < lower || b > upper) {
                bad = true;
                break;
            }
            lower = 0x80;
            upper = 0xBF;
            ++seen;
        }
        if (seen == needed) {
            out.append(in.substr(i, needed + 1));
            i += needed + 1;
        } else if (bad) {
            // The maximal subpart becomes one U+FFFD; the offending byte is read again.
            out += kReplacement;
            i += 1 + seen;
        } else if (!final) {
            return i; // incomplete at the end: wait for more bytes
        } else {
            out += kReplacement;
            i = n;
        }
    }
    return n;
}

} // namespace k3::detail

namespace k3 {

bool isValidUtf8(std::string_view bytes) {
    std::size_t i = 0;
    const std::size_t n = bytes.size();
    while (i < n) {
        const auto lead = static_cast<unsigned char>(bytes[i]);
        if (lead < 0x80) {
            ++i;
            continue;
        }
        std::size_t needed = 0;
        unsigned char lower = 0x80;
        unsigned char upper = 0xBF;
        if (lead >= 0xC2 && lead <= 0xDF) {
            needed = 1;
        } else if (lead >= 0xE0 && lead <= 0xEF) {
            needed = 2;
            if (lead == 0xE0) lower = 0xA0;
            if (lead == 0xED) upper = 0x9F;
        } else if (lead >= 0xF0 && lead <= 0xF4) {
            needed = 3;
            if (lead == 0xF0) lower = 0x90;
            if (lead == 0xF4) upper = 0x8F;
        } else {
            return false;
        }
        if (i + needed >= n) return false;
        for (std::size_t k = 1; k <= needed; ++k) {
            const auto b = static_cast<unsigned char>(bytes[i + k]);
            if (b < lower || b > upper) return false;
            lower = 0x80;
            upper = 0xBF;
        }
        i += needed + 1;
    }
    return true;
}

std::string sanitizeUtf8(std::string_view bytes) {
    std::string out;
    detail::decodeUtf8Replacing(bytes, out, true);
    return out;
}

} // namespace k3
