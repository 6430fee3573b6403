// Sockets on Linux and macOS (k3/net.hpp): poll, recv and send without SIGPIPE, shutdown,
// getpeername/getsockname through getnameinfo, inet_pton, and a pipe as the wake-up.
#include "k3/net.hpp"
#include "platform/posix/PosixHooks.hpp"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <cerrno>
#include <vector>

namespace k3::net {

namespace {

// macOS has no MSG_NOSIGNAL; there `k3 serve` ignores SIGPIPE (process::StopRequests).
#ifdef MSG_NOSIGNAL
constexpr int kNoSignal = MSG_NOSIGNAL;
#else
constexpr int kNoSignal = 0;
#endif

short eventsOf(unsigned want) {
    short events = 0;
    if (want & (ready::Read | ready::PeerClosed)) events |= POLLIN;
    if (want & ready::Write) events |= POLLOUT;
#ifdef POLLRDHUP
    if (want & ready::PeerClosed) events |= POLLRDHUP;
#endif
    return events;
}

unsigned readyOf(int fd, short revents, unsigned want) {
    unsigned r = 0;
    if (revents & POLLIN) r |= ready::Read;
    if (revents & POLLOUT) r |= ready::Write;
    if (revents & (POLLERR | POLLHUP | POLLNVAL)) r |= ready::Failed;
#ifdef POLLRDHUP
    if (revents & POLLRDHUP) r |= ready::PeerClosed;
#else
    // macOS has no POLLRDHUP: readable with nothing to read is the peer's end of stream.
    char byte;
    if ((want & ready::PeerClosed) && (revents & POLLIN) &&
        ::recv(fd, &byte, 1, MSG_PEEK | MSG_DONTWAIT) == 0)
        r |= ready::PeerClosed;
#endif
    (void)fd;
    return r & (want | ready::Failed);
}

bool endpointOf(const sockaddr_storage& a, socklen_t length, std::string& address, int& port) {
    if (a.ss_family == AF_INET)
        port = ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
    else if (a.ss_family == AF_INET6)
        port = ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
    else
        return false;
    char host[NI_MAXHOST];
    if (::getnameinfo(reinterpret_cast<const sockaddr*>(&a), length, host, sizeof host, nullptr, 0,
                      NI_NUMERICHOST) != 0)
        return false;
    address = host;
    return true;
}

} // namespace

int waitSockets(SocketWait* waits, std::size_t count, int timeoutMs) {
    std::vector<pollfd> fds(count);
    for (std::size_t i = 0; i < count; ++i)
        fds[i] = {int(waits[i].socket), eventsOf(waits[i].want), 0};
    const int n = ::poll(fds.data(), nfds_t(count), timeoutMs);
    int readyCount = 0;
    for (std::size_t i = 0; i < count; ++i) {
        waits[i].ready = n > 0 ? readyOf(fds[i].fd, fds[i].revents, waits[i].want) : 0;
        readyCount += waits[i].ready != 0;
    }
    if (n < 0) return errno == EINTR ? 0 : -1;
    return readyCount;
}

unsigned waitSocket(Socket socket, unsigned want, int timeoutMs) {
    pollfd p{int(socket), eventsOf(want), 0};
    int n;
    do n = ::poll(&p, 1, timeoutMs);
    while (n < 0 && errno == EINTR);
    return n > 0 ? readyOf(p.fd, p.revents, want) : 0;
}

std::int64_t receive(Socket socket, void* buffer, std::size_t size, bool noWait) {
    for (;;) {
        const ssize_t n = ::recv(int(socket), buffer, size, noWait ? MSG_DONTWAIT : 0);
        if (n >= 0) return n;
        if (errno == EINTR) continue;
        // Also a blocking socket's SO_RCVTIMEO running out.
        if (errno == EAGAIN || errno == EWOULDBLOCK) return kWouldBlock;
        return -1;
    }
}

std::int64_t sendSome(Socket socket, const void* bytes, std::size_t size, bool noWait) {
    for (;;) {
        const ssize_t n = ::send(int(socket), bytes, size, kNoSignal | (noWait ? MSG_DONTWAIT : 0));
        if (n >= 0) return n;
        if (errno == EINTR) continue;
        if (errno == EAGAIN || errno == EWOULDBLOCK) return kWouldBlock;
        return -1;
    }
}

void shutdownSending(Socket socket) {
    ::shutdown(int(socket), SHUT_WR);
}

void closeSocket(Socket socket) {
    ::shutdown(int(socket), SHUT_RDWR);
    ::close(int(socket));
}

bool peerEndpoint(Socket socket, std::string& address, int& port) {
    sockaddr_storage a{};
    socklen_t length = sizeof a;
    return ::getpeername(int(socket), reinterpret_cast<sockaddr*>(&a), &length) == 0 &&
           endpointOf(a, length, address, port);
}

bool localEndpoint(Socket socket, std::string& address, int& port) {
    sockaddr_storage a{};
    socklen_t length = sizeof a;
    return ::getsockname(int(socket), reinterpret_cast<sockaddr*>(&a), &length) == 0 &&
           endpointOf(a, length, address, port);
}

std::optional<std::uint32_t> parseIpv4(const std::string& text) {
    in_addr a{};
    if (::inet_pton(AF_INET, text.c_str(), &a) != 1) return std::nullopt;
    return ntohl(a.s_addr);
}

bool isIpv6Literal(const std::string& text) {
    in6_addr a{};
    return ::inet_pton(AF_INET6, text.c_str(), &a) == 1;
}

Wakeup::Wakeup() {
    int fds[2];
    if (platform::posix::makeNonBlockingPipe(fds)) {
        read_ = fds[0];
        write_ = fds[1];
    }
}

Wakeup::~Wakeup() {
    if (read_ != kNoSocket) ::close(int(read_));
    if (write_ != kNoSocket) ::close(int(write_));
}

void Wakeup::wake() {
    if (write_ == kNoSocket) return;
    [[maybe_unused]] const ssize_t n = ::write(int(write_), "!", 1); // full: already woken
}

void Wakeup::drain() {
    char bytes[64];
    while (read_ != kNoSocket && ::read(int(read_), bytes, sizeof bytes) > 0) {
    }
}

} // namespace k3::net
