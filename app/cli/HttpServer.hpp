#pragma once
// cpp-httplib's server with a bounded request head. Debian's libcpp-httplib 0.11 is a
// compiled library, so its CPPHTTPLIB_* limits cannot be changed by the includer, and it
// keeps every header line it reads (8 KB each, no count or total limit): one connection
// sending header lines without end filled the server's memory. Here each connection is
// read through a stream that counts the head's bytes and lines before the library stores
// them, and answers 431 and closes past kMaxHeadBytes or kMaxHeaderFields.

#include <httplib.h>

#include <cstddef>

namespace k3cli {

// Request line plus header lines plus the blank line.
inline constexpr std::size_t kMaxHeadBytes = 64 * 1024;
inline constexpr std::size_t kMaxHeaderFields = 100;

class LimitedHttpServer : public httplib::Server {
public:
    // True on a pool thread while the library finishes a request whose head was refused:
    // its own answer (a 400) is not sent, so the access log must not show it either.
    static bool refusingHead();

private:
    // The library's keep-alive loop over one connection, with the counting stream.
    bool process_and_close_socket(socket_t sock) override;
};

} // namespace k3cli
