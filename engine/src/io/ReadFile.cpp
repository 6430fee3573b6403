#include "k3/read_file.hpp"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdio>
#include <cstring>

namespace k3 {

namespace {

std::string typeName(mode_t mode) {
    if (S_ISDIR(mode)) return "a folder";
    if (S_ISFIFO(mode)) return "a FIFO (named pipe)";
    if (S_ISCHR(mode)) return "a character device";
    if (S_ISBLK(mode)) return "a block device";
    if (S_ISSOCK(mode)) return "a socket";
    return "not a regular file";
}

std::string notRegular(const std::filesystem::path& path, const std::string& what, mode_t mode) {
    return path.string() + ": it is " + typeName(mode) +
           ", not a regular file; refusing to read it as the " + what;
}

} // namespace

void requireRegularFile(const std::filesystem::path& path, const std::string& what) {
    struct stat st {};
    if (::stat(path.c_str(), &st) != 0)
        throw FileReadError(path.string() + ": cannot open: " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) throw FileReadError(notRegular(path, what, st.st_mode));
}

std::string readRegularFile(const std::filesystem::path& path, std::uint64_t maxBytes,
                            const std::string& what) {
    // O_NONBLOCK: opening a FIFO must not wait for a writer; it is refused just below.
    const int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) throw FileReadError(path.string() + ": cannot open: " + std::strerror(errno));
    struct Closer {
        int fd;
        ~Closer() { ::close(fd); }
    } closer{fd};
    struct stat st {};
    if (::fstat(fd, &st) != 0)
        throw FileReadError(path.string() + ": cannot read: " + std::strerror(errno));
    if (!S_ISREG(st.st_mode)) throw FileReadError(notRegular(path, what, st.st_mode));
    if (std::uint64_t(st.st_size) > maxBytes)
        throw FileReadError(path.string() + ": " + std::to_string(st.st_size) +
                            " bytes, over the " + std::to_string(maxBytes) + " bytes a " + what +
                            " may have");
    std::string text;
    text.reserve(std::size_t(st.st_size));
    char buffer[65536];
    for (;;) {
        const ssize_t n = ::read(fd, buffer, sizeof buffer);
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
