#pragma once
// Socket calls for a front end's server (`k3 serve` on cpp-httplib): waiting on
// connections, reading and writing without blocking, closing, endpoints, and address
// literals. Defined by the platform layer (engine/src/platform: posix/ and win32/), so no
// front end includes an OS header. No call raises SIGPIPE; an interrupted call is retried.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>

namespace k3::net {

// A connected socket: a descriptor on POSIX, a SOCKET on Windows.
using Socket = std::intptr_t;
inline constexpr Socket kNoSocket = -1;

namespace ready {
enum : unsigned {
    Read = 1u,  // bytes to read, or the end of the stream
    Write = 2u, // room to write
    // The connection failed or was hung up: the next read or write says which.
    Failed = 4u,
    // The peer shut its sending side (it may still read). Only reported when asked for.
    PeerClosed = 8u,
};
}

struct SocketWait {
    Socket socket = kNoSocket;
    unsigned want = 0;  // ready:: bits
    unsigned ready = 0; // set by waitSockets
};
// Waits until one of `count` sockets is ready for what it wants (Failed is always
// reported), or timeoutMs pass (-1: no limit). The number ready; 0 when the time ran out or
// a signal interrupted the wait; -1 on failure.
int waitSockets(SocketWait* waits, std::size_t count, int timeoutMs);
// One socket, the wait retried when interrupted: its ready bits, 0 when the time ran out.
unsigned waitSocket(Socket socket, unsigned want, int timeoutMs);

// What receive() and sendSome() return when noWait and the socket is not ready.
inline constexpr std::int64_t kWouldBlock = -2;
// Bytes read (> 0), 0 when the peer closed, kWouldBlock, or -1 when the connection failed.
std::int64_t receive(Socket socket, void* buffer, std::size_t size, bool noWait);
// Bytes sent, kWouldBlock, or -1 when the connection failed (the peer left).
std::int64_t sendSome(Socket socket, const void* bytes, std::size_t size, bool noWait);
// No more sending (the peer reads the end of the stream); reading goes on.
void shutdownSending(Socket socket);
// Both directions shut, then the socket closed.
void closeSocket(Socket socket);

// The numeric address and port of the peer's or this end, as cpp-httplib writes them
// ("127.0.0.1", "::1"): false when the socket has none.
bool peerEndpoint(Socket socket, std::string& address, int& port);
bool localEndpoint(Socket socket, std::string& address, int& port);

// A dotted IPv4 literal as a number in host order ("127.0.0.1" -> 0x7f000001).
std::optional<std::uint32_t> parseIpv4(const std::string& text);
// An IPv6 literal without brackets ("::1", "fe80::1").
bool isIpv6Literal(const std::string& text);

// Wakes a thread that waits in waitSockets(): its waitable() is one more socket to wait on
// for ready::Read. A pipe on POSIX; on Windows, whose wait takes sockets only, a loopback
// UDP socket that sends to itself.
class Wakeup {
public:
    Wakeup();
    ~Wakeup();
    Wakeup(const Wakeup&) = delete;
    Wakeup& operator=(const Wakeup&) = delete;

    bool valid() const { return read_ != kNoSocket; }
    Socket waitable() const { return read_; }
    // Any thread; the wake-up is kept until drain().
    void wake();
    // On the waiting thread, after it woke: takes the wake-ups so the next wait blocks.
    void drain();

private:
    Socket read_ = kNoSocket, write_ = kNoSocket;
};

} // namespace k3::net
