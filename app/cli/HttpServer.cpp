#include "HttpServer.hpp"

#include <k3/api.hpp>

#include <arpa/inet.h>
#include <netdb.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <string>

namespace k3cli {

namespace {

thread_local bool tlRefusingHead = false;

int milliseconds(time_t sec, time_t usec) {
    return int(sec * 1000 + usec / 1000);
}

// poll() for `events`, retried on EINTR: true when the socket is ready in time.
bool ready(int fd, short events, int timeoutMs) {
    pollfd p{fd, events, 0};
    int n;
    do n = poll(&p, 1, timeoutMs);
    while (n < 0 && errno == EINTR);
    return n > 0;
}

// As cpp-httplib spells a socket's endpoint: numeric address, port.
void ipAndPort(const sockaddr_storage& a, socklen_t len, std::string& ip, int& port) {
    if (a.ss_family == AF_INET)
        port = ntohs(reinterpret_cast<const sockaddr_in&>(a).sin_port);
    else if (a.ss_family == AF_INET6)
        port = ntohs(reinterpret_cast<const sockaddr_in6&>(a).sin6_port);
    else
        return;
    char host[NI_MAXHOST];
    if (getnameinfo(reinterpret_cast<const sockaddr*>(&a), len, host, sizeof host, nullptr, 0,
                    NI_NUMERICHOST) == 0)
        ip = host;
}

// cpp-httplib's SocketStream (buffered reads, the same timeouts, a write fails once the
// peer has closed) that also counts each request head as the library reads it.
class HeadLimitedStream final : public httplib::Stream {
public:
    HeadLimitedStream(int fd, int readTimeoutMs, int writeTimeoutMs)
        : fd_(fd), readTimeoutMs_(readTimeoutMs), writeTimeoutMs_(writeTimeoutMs) {}

    // A request starts: its head is counted from its first byte.
    void startHead() {
        inHead_ = true;
        headBytes_ = lines_ = lineBytes_ = 0;
        lastWasCR_ = false;
    }
    bool refused() const { return refused_; }
    bool buffered() const { return off_ < end_; }

    bool is_readable() const override { return buffered() || ready(fd_, POLLIN, readTimeoutMs_); }
    bool is_writable() const override {
        return !refused_ && ready(fd_, POLLOUT, writeTimeoutMs_) && peerOpen();
    }

    ssize_t read(char* ptr, std::size_t size) override {
        if (refused_) return -1;
        if (!buffered()) {
            if (!ready(fd_, POLLIN, readTimeoutMs_)) return -1;
            ssize_t n;
            do n = recv(fd_, buf_.data(), buf_.size(), 0);
            while (n < 0 && errno == EINTR);
            if (n <= 0) return n;
            off_ = 0;
            end_ = std::size_t(n);
        }
        std::size_t n = std::min(size, end_ - off_);
        if (inHead_) n = countHead(n);
        if (refused_) return -1;
        std::memcpy(ptr, buf_.data() + off_, n);
        off_ += n;
        return ssize_t(n);
    }

    ssize_t write(const char* ptr, std::size_t size) override {
        if (!is_writable()) return -1;
        ssize_t n;
        do n = send(fd_, ptr, size, MSG_NOSIGNAL);
        while (n < 0 && errno == EINTR);
        return n;
    }

    void get_remote_ip_and_port(std::string& ip, int& port) const override {
        sockaddr_storage a{};
        socklen_t len = sizeof a;
        if (getpeername(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0)
            ipAndPort(a, len, ip, port);
    }
    void get_local_ip_and_port(std::string& ip, int& port) const override {
        sockaddr_storage a{};
        socklen_t len = sizeof a;
        if (getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) == 0)
            ipAndPort(a, len, ip, port);
    }
    socket_t socket() const override { return fd_; }

private:
    // Of the next `n` buffered bytes, how many the head may still take (the rest belongs
    // to the body); refuses past a limit.
    std::size_t countHead(std::size_t n) {
        for (std::size_t i = 0; i < n; ++i) {
            const char c = buf_[off_ + i];
            if (++headBytes_ > kMaxHeadBytes) return refuse();
            if (c != '\n') {
                ++lineBytes_;
                lastWasCR_ = c == '\r';
                continue;
            }
            // The library ends the head at a line that is exactly CRLF, after the request
            // line; every other line it reads is stored (or skipped) as a header.
            const bool blank = lineBytes_ == 1 && lastWasCR_;
            lineBytes_ = 0;
            lastWasCR_ = false;
            if (blank && lines_ > 0) {
                inHead_ = false;
                return i + 1;
            }
            if (++lines_ > kMaxHeaderFields + 1) return refuse(); // + the request line
        }
        return n;
    }
    std::size_t refuse() {
        refused_ = true;
        tlRefusingHead = true;
        return 0;
    }
    // As the library's is_socket_alive: readable with nothing to read means closed.
    bool peerOpen() const {
        if (!ready(fd_, POLLIN, 0)) return true;
        char byte;
        return recv(fd_, &byte, 1, MSG_PEEK) > 0;
    }

    int fd_;
    int readTimeoutMs_, writeTimeoutMs_;
    std::array<char, 4096> buf_{};
    std::size_t off_ = 0, end_ = 0;
    bool inHead_ = false, refused_ = false, lastWasCR_ = false;
    std::size_t headBytes_ = 0, lines_ = 0, lineBytes_ = 0;
};

bool sendAll(int fd, const std::string& bytes, int timeoutMs) {
    std::size_t sent = 0;
    while (sent < bytes.size()) {
        if (!ready(fd, POLLOUT, timeoutMs)) return false;
        const ssize_t n = send(fd, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) return false;
        sent += std::size_t(n);
    }
    return true;
}

// 431 and close. The client may still be sending: its bytes are read and dropped for a
// moment after the answer, because closing with unread bytes resets the connection, and
// the reset can destroy the answer before the client has read it.
void refuseHead(int fd, int writeTimeoutMs) {
    const std::string body = k3::api::errorJson(k3::api::ApiError(
        431, "the request head is over " + std::to_string(kMaxHeadBytes / 1024) + " KB or " +
                 std::to_string(kMaxHeaderFields) + " header fields"));
    sendAll(fd,
            "HTTP/1.1 431 Request Header Fields Too Large\r\nContent-Type: application/json\r\n"
            "Content-Length: " +
                std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n" + body,
            writeTimeoutMs);
    std::string peer;
    int port = 0;
    sockaddr_storage a{};
    socklen_t len = sizeof a;
    if (getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len) == 0) ipAndPort(a, len, peer, port);
    std::fprintf(stderr,
                 "k3 serve: request head from %s:%d refused: 431 (over %zu bytes or %zu "
                 "header fields)\n",
                 peer.c_str(), port, kMaxHeadBytes, kMaxHeaderFields);
    shutdown(fd, SHUT_WR);
    constexpr auto kLinger = std::chrono::seconds(1);
    constexpr std::size_t kLingerBytes = 4 << 20;
    const auto until = std::chrono::steady_clock::now() + kLinger;
    std::array<char, 16384> scratch;
    for (std::size_t dropped = 0; dropped < kLingerBytes;) {
        const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
            until - std::chrono::steady_clock::now());
        if (left.count() <= 0 || !ready(fd, POLLIN, int(left.count()))) break;
        const ssize_t n = recv(fd, scratch.data(), scratch.size(), 0);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) break;
        dropped += std::size_t(n);
    }
}

} // namespace

bool LimitedHttpServer::refusingHead() {
    return tlRefusingHead;
}

bool LimitedHttpServer::process_and_close_socket(socket_t sock) {
    HeadLimitedStream stream(sock, milliseconds(read_timeout_sec_, read_timeout_usec_),
                             milliseconds(write_timeout_sec_, write_timeout_usec_));
    bool ok = false;
    for (std::size_t left = keep_alive_max_count_; left > 0 && svr_sock_ != INVALID_SOCKET;
         --left) {
        // Keep-alive: wait for the next request's first byte (a pipelined one may be here).
        if (!stream.buffered() && !ready(sock, POLLIN, milliseconds(keep_alive_timeout_sec_, 0)))
            break;
        stream.startHead();
        bool closed = false;
        ok = process_request(stream, left == 1, closed, {});
        if (stream.refused()) {
            refuseHead(sock, milliseconds(write_timeout_sec_, write_timeout_usec_));
            tlRefusingHead = false;
            ok = false;
            break;
        }
        if (!ok || closed) break;
    }
    shutdown(sock, SHUT_RDWR);
    close(sock);
    return ok;
}

} // namespace k3cli
