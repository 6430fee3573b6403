#include "k3/read_file.hpp"

#include "platform/Platform.hpp"

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace k3 {

namespace {

using platform::FileType;

std::string typeName(FileType type) {
    switch (type) {
    case FileType::Directory:
        return "a folder";
    case FileType::Fifo:
        return "a FIFO (named pipe)";
    case FileType::CharDevice:
        return "a character device";
    case FileType::BlockDevice:
        return "a block device";
    case FileType::Socket:
        return "a socket";
    default:
        return "not a regular file";
    }
}

std::string notRegular(const std::filesystem::path& path, const std::string& what, FileType type) {
    return path.string() + ": it is " + typeName(type) +
           ", not a regular file; refusing to read it as the " + what;
}

} // namespace

void requireRegularFile(const std::filesystem::path& path, const std::string& what) {
    platform::FileInfo info;
    if (!platform::fileInfo(path, info))
        throw FileReadError(path.string() + ": cannot open: " + std::strerror(errno));
    if (info.type != FileType::Regular) throw FileReadError(notRegular(path, what, info.type));
}

std::string readRegularFile(const std::filesystem::path& path, std::uint64_t maxBytes,
                            const std::string& what) {
    // NoWaitOnOpen: opening a FIFO must not wait for a writer; it is refused just below.
    platform::File file =
        platform::File::open(path, platform::open::Read | platform::open::NoWaitOnOpen);
    if (!file.valid())
        throw FileReadError(path.string() + ": cannot open: " + std::strerror(errno));
    platform::FileInfo info;
    if (!file.info(info))
        throw FileReadError(path.string() + ": cannot read: " + std::strerror(errno));
    if (info.type != FileType::Regular) throw FileReadError(notRegular(path, what, info.type));
    if (info.size > maxBytes)
        throw FileReadError(path.string() + ": " + std::to_string(info.size) + " bytes, over the " +
                            std::to_string(maxBytes) + " bytes a " + what + " may have");
    std::string text;
    text.reserve(std::size_t(info.size));
    char buffer[65536];
    for (;;) {
        const std::int64_t n = file.read(buffer, sizeof buffer);
        if (n < 0) {
            if (errno == EINTR) continue;
            throw FileReadError(path.string() + ": read error: " + std::strerror(errno));
        }
        if (n == 0) break;
        if (text.size() + std::size_t(n) > maxBytes) // it grew while being read
            throw FileReadError(path.string() + ": it grew past the " + std::to_string(maxBytes) +
                                " bytes a " + what + " may have");
        text.append(buffer, std::size_t(n));
    }
    return text;
}

std::string readApiKeyFile(const std::filesystem::path& path) {
    const std::string text = readRegularFile(path, kMaxApiKeyFileBytes, "key file");
    const char* space = " \t\r\n";
    const std::size_t first = text.find_first_not_of(space);
    if (first == std::string::npos)
        throw FileReadError(path.string() +
                            ": the API key file is empty (it should hold the API key)");
    const std::string key = text.substr(first, text.find_last_not_of(space) - first + 1);
    for (std::size_t i = 0; i < key.size(); ++i) {
        const auto c = static_cast<unsigned char>(key[i]);
        if (c == '\n' || c == '\r')
            throw FileReadError(path.string() +
                                ": the API key file holds more than one line; it should hold "
                                "only the key");
        if (c < 0x20 || c == 0x7f) {
            char byte[8];
            std::snprintf(byte, sizeof byte, "0x%02x", c);
            throw FileReadError(path.string() + ": the API key holds a control character (byte " +
                                byte + " at position " + std::to_string(i) + ")");
        }
    }
    return key;
}

} // namespace k3
