// Sockets on Windows (k3/net.hpp): Winsock 2 with WSAPoll, recv/send (no SIGPIPE exists),
// closesocket, getnameinfo and inet_pton, and a loopback UDP socket sending to itself as
// the wake-up, since WSAPoll waits on sockets only.
#include "k3/net.hpp"

#include "platform/win32/Win32Lean.hpp"
#include <winsock2.h>
#include <ws2tcpip.h>

#include <algorithm>
#include <vector>

namespace k3::net {

namespace {

// Winsock needs WSAStartup once per process before any call (cpp-httplib does its own).
bool winsockStarted() {
    static const bool started = [] {
        WSADATA data;
        return ::WSAStartup(MAKEWORD(2, 2), &data) == 0;
    }();
    return started;
}

SOCKET socketOf(Socket socket) {
    return SOCKET(socket);
}

SHORT eventsOf(unsigned want) {
    SHORT events = 0;
    if (want & (ready::Read | ready::PeerClosed)) events |= POLLRDNORM;
    if (want & ready::Write) events |= POLLWRNORM;
    return events;
}

unsigned readyOf(SOCKET s, SHORT revents, unsigned want) {
    unsigned r = 0;
    if (revents & POLLRDNORM) r |= ready::Read;
    if (revents & POLLWRNORM) r |= ready::Write;
    if (revents & (POLLERR | POLLHUP | POLLNVAL)) r |= ready::Failed;
    // No POLLRDHUP: readable with nothing to read is the peer's end of stream.
    char byte;
    if ((want & ready::PeerClosed) && (revents & POLLRDNORM) && ::recv(s, &byte, 1, MSG_PEEK) == 0)
        r |= ready::PeerClosed;
    return r & (want | ready::Failed);
}

bool endpointOf(const sockaddr_storage& a, int length, std::string& address, int& port) {
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

bool wouldBlock() {
    return ::WSAGetLastError() == WSAEWOULDBLOCK || ::WSAGetLastError() == WSAETIMEDOUT;
}

} // namespace

int waitSockets(SocketWait* waits, std::size_t count, int timeoutMs) {
    if (!winsockStarted()) return -1;
    std::vector<WSAPOLLFD> fds(count);
    for (std::size_t i = 0; i < count; ++i)
        fds[i] = {socketOf(waits[i].socket), eventsOf(waits[i].want), 0};
    const int n = ::WSAPoll(fds.data(), ULONG(count), timeoutMs);
    int readyCount = 0;
    for (std::size_t i = 0; i < count; ++i) {
        waits[i].ready = n > 0 ? readyOf(fds[i].fd, fds[i].revents, waits[i].want) : 0;
        readyCount += waits[i].ready != 0;
    }
    return n < 0 ? -1 : readyCount;
}

unsigned waitSocket(Socket socket, unsigned want, int timeoutMs) {
    SocketWait wait{socket, want, 0};
    return waitSockets(&wait, 1, timeoutMs) > 0 ? wait.ready : 0;
}

// Windows' recv and send have no per-call "do not wait": a zero-time poll asks first (one
// thread reads a connection at a time, so what it saw is still there).
std::int64_t receive(Socket socket, void* buffer, std::size_t size, bool noWait) {
    if (noWait && !(waitSocket(socket, ready::Read, 0) & (ready::Read | ready::Failed)))
        return kWouldBlock;
    const int n = ::recv(socketOf(socket), static_cast<char*>(buffer),
                         int(std::min<std::size_t>(size, 1u << 30)), 0);
    if (n >= 0) return n;
    return wouldBlock() ? kWouldBlock : -1;
}

std::int64_t sendSome(Socket socket, const void* bytes, std::size_t size, bool noWait) {
    if (noWait && !(waitSocket(socket, ready::Write, 0) & (ready::Write | ready::Failed)))
        return kWouldBlock;
    const int n = ::send(socketOf(socket), static_cast<const char*>(bytes),
                         int(std::min<std::size_t>(size, 1u << 30)), 0);
    if (n >= 0) return n;
    return wouldBlock() ? kWouldBlock : -1;
}

void shutdownSending(Socket socket) {
    ::shutdown(socketOf(socket), SD_SEND);
}

void closeSocket(Socket socket) {
    ::shutdown(socketOf(socket), SD_BOTH);
    ::closesocket(socketOf(socket));
}

bool peerEndpoint(Socket socket, std::string& address, int& port) {
    sockaddr_storage a{};
    int length = sizeof a;
    return ::getpeername(socketOf(socket), reinterpret_cast<sockaddr*>(&a), &length) == 0 &&
           endpointOf(a, length, address, port);
}

bool localEndpoint(Socket socket, std::string& address, int& port) {
    sockaddr_storage a{};
    int length = sizeof a;
    return ::getsockname(socketOf(socket), reinterpret_cast<sockaddr*>(&a), &length) == 0 &&
           endpointOf(a, length, address, port);
}

std::optional<std::uint32_t> parseIpv4(const std::string& text) {
    winsockStarted();
    in_addr a{};
    if (::inet_pton(AF_INET, text.c_str(), &a) != 1) return std::nullopt;
    return ntohl(a.s_addr);
}

bool isIpv6Literal(const std::string& text) {
    winsockStarted();
    in6_addr a{};
    return ::inet_pton(AF_INET6, text.c_str(), &a) == 1;
}

Wakeup::Wakeup() {
    if (!winsockStarted()) return;
    const SOCKET s = ::socket(AF_INET, SOCK_DGRAM, IPPROTO_UDP);
    if (s == INVALID_SOCKET) return;
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    int length = sizeof a;
    u_long nonBlocking = 1;
    if (::bind(s, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 ||
        ::getsockname(s, reinterpret_cast<sockaddr*>(&a), &length) != 0 ||
        ::connect(s, reinterpret_cast<sockaddr*>(&a), length) != 0 ||
        ::ioctlsocket(s, FIONBIO, &nonBlocking) != 0) {
        ::closesocket(s);
        return;
    }
    read_ = write_ = Socket(s); // one socket: it sends to itself
}

Wakeup::~Wakeup() {
    if (read_ != kNoSocket) ::closesocket(socketOf(read_));
}

void Wakeup::wake() {
    if (write_ != kNoSocket) ::send(socketOf(write_), "!", 1, 0); // full: already woken
}

void Wakeup::drain() {
    char bytes[64];
    while (read_ != kNoSocket && ::recv(socketOf(read_), bytes, sizeof bytes, 0) > 0) {
    }
}

} // namespace k3::net
