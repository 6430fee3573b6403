#include "HttpServer.hpp"

#include "ChunkedBody.hpp"

#include <k3/api.hpp>
#include <k3/net.hpp>

#include <algorithm>
#include <array>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstring>
#include <list>
#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <thread>
#include <vector>

namespace k3cli {

namespace {

using Clock = std::chrono::steady_clock;
using k3::net::Socket;
namespace ready = k3::net::ready;

// The connection whose request this worker thread runs (LimitedHttpServer::serve).
thread_local Socket tlRequestSocket = k3::net::kNoSocket;

int milliseconds(time_t sec, time_t usec) {
    return int(sec * 1000 + usec / 1000);
}

int millisecondsUntil(Clock::time_point t) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(t - Clock::now());
    return int(std::max<std::int64_t>(0, left.count()));
}

// True when the socket has bytes in time (an error or hang-up counts: the next read says
// what it is).
bool readable(Socket fd, int timeoutMs) {
    return k3::net::waitSocket(fd, ready::Read, timeoutMs) != 0;
}

std::string peerOf(Socket fd) {
    std::string ip;
    int port = 0;
    k3::net::peerEndpoint(fd, ip, port);
    return ip;
}

// How far a request head has been read: resumable, so a head that arrives a byte at a
// time is scanned once, not once per byte.
struct HeadScan {
    std::size_t pos = 0;   // bytes looked at
    std::size_t lines = 0; // complete lines, the request line included
};

struct Refusal {
    int status = 0;
    std::string message;
};

struct Framing {
    std::size_t headBytes = 0;
    std::optional<std::uint64_t> contentLength;
    bool chunked = false;
    bool expectContinue = false; // the client waits for 100 before it sends the body
    bool http10 = false;
    bool connectionField = false; // a Connection field is present
    bool closeAsked = false;      // Connection: close (any case)
    bool keepAliveAsked = false;  // Connection: keep-alive (any case)
    // The library reads Connection case-sensitively ("Keep-Alive", "close") and would
    // decode a chunked body leniently: such a request is rewritten first (canonicalHead).
    bool needsRewrite() const { return chunked || connectionField || http10; }
};

Refusal headTooLarge() {
    return {431, "the request head is over " + std::to_string(kMaxHeadBytes / 1024) + " KB or " +
                     std::to_string(kMaxHeaderFields) + " header fields"};
}

// The head's end as the library finds it (the first line that is exactly CRLF after the
// request line), stricter: every line must end in CRLF (the library skips a line ending in
// a bare LF, which another reader of the same bytes may not).
enum class HeadState { Incomplete, Complete, Refused };
HeadState scanHead(std::string_view bytes, HeadScan& s, Refusal& refusal) {
    while (s.pos < bytes.size()) {
        const void* nl = std::memchr(bytes.data() + s.pos, '\n', bytes.size() - s.pos);
        if (!nl) {
            s.pos = bytes.size();
            break;
        }
        const std::size_t end = std::size_t(static_cast<const char*>(nl) - bytes.data()) + 1;
        const std::size_t lineStart = s.pos;
        s.pos = end;
        ++s.lines;
        if (end > kMaxHeadBytes || s.lines > kMaxHeaderFields + 2) {
            refusal = headTooLarge();
            return HeadState::Refused;
        }
        if (end - lineStart < 2 || bytes[end - 2] != '\r') {
            refusal = {400, "line " + std::to_string(s.lines) +
                                " of the request head ends in a bare LF (HTTP needs CRLF)"};
            return HeadState::Refused;
        }
        if (end - lineStart == 2 && s.lines > 1) {
            if (s.lines > kMaxHeaderFields + 2) { // request line + fields + blank line
                refusal = headTooLarge();
                return HeadState::Refused;
            }
            return HeadState::Complete;
        }
    }
    if (s.pos > kMaxHeadBytes) {
        refusal = headTooLarge();
        return HeadState::Refused;
    }
    return HeadState::Incomplete;
}

std::string trimmed(std::string_view v) {
    const std::size_t first = v.find_first_not_of(" \t");
    if (first == std::string_view::npos) return {};
    return std::string(v.substr(first, v.find_last_not_of(" \t") - first + 1));
}

std::string lower(std::string s) {
    std::transform(s.begin(), s.end(), s.begin(),
                   [](unsigned char c) { return char(std::tolower(c)); });
    return s;
}

// Content-Length and Transfer-Encoding, strictly: the library reads "+10", "0x10" and
// "1e3" as numbers (strtoull) and uses the first of two different lengths.
std::optional<Refusal> readFraming(std::string_view head, Framing& f) {
    f.headBytes = head.size();
    const std::size_t requestLineEnd = head.find("\r\n");
    f.http10 = head.substr(0, requestLineEnd).ends_with(" HTTP/1.0");
    std::size_t at = requestLineEnd + 2;
    while (at + 2 < head.size()) {
        const std::size_t end = head.find("\r\n", at);
        const std::string_view line = head.substr(at, end - at);
        at = end + 2;
        const std::size_t colon = line.find(':');
        if (colon == std::string_view::npos || colon == 0 ||
            line.substr(0, colon).find_first_of(" \t") != std::string_view::npos)
            return Refusal{400, "a request header line is not NAME: VALUE"};
        const std::string name = lower(std::string(line.substr(0, colon)));
        const std::string value = trimmed(line.substr(colon + 1));
        if (name == "content-length") {
            const bool decimal = !value.empty() && value.size() <= 18 &&
                                 std::all_of(value.begin(), value.end(),
                                             [](unsigned char c) { return std::isdigit(c); });
            if (!decimal)
                return Refusal{400, "Content-Length \"" + value.substr(0, 40) +
                                        "\" is not a decimal number of bytes"};
            const std::uint64_t length = std::stoull(value);
            if (f.contentLength && *f.contentLength != length)
                return Refusal{400, "two different Content-Length values (" +
                                        std::to_string(*f.contentLength) + " and " + value + ")"};
            f.contentLength = length;
        } else if (name == "connection") {
            f.connectionField = true;
            std::string tokens = lower(value);
            for (std::size_t start = 0; start <= tokens.size();) {
                std::size_t comma = tokens.find(',', start);
                if (comma == std::string::npos) comma = tokens.size();
                const std::string token =
                    trimmed(std::string_view(tokens).substr(start, comma - start));
                f.closeAsked = f.closeAsked || token == "close";
                f.keepAliveAsked = f.keepAliveAsked || token == "keep-alive";
                start = comma + 1;
            }
        } else if (name == "expect") {
            f.expectContinue = lower(value) == "100-continue";
        } else if (name == "transfer-encoding") {
            if (lower(value) != "chunked" || f.chunked)
                return Refusal{400, "Transfer-Encoding \"" + value.substr(0, 40) +
                                        "\" is not supported (only one chunked)"};
            f.chunked = true;
        }
    }
    if (f.chunked && f.contentLength)
        return Refusal{400, "a request with both Transfer-Encoding and Content-Length"};
    return std::nullopt;
}

// The head the library is given for a request with needsRewrite(): the same fields
// without Transfer-Encoding and Connection (and Expect when the 100 was sent here), the
// decoded body's Content-Length, and Connection spelled as the library compares it
// (HTTP/1.0 without keep-alive: close, which its answer then says).
std::string canonicalHead(std::string_view head, const Framing& f,
                          std::optional<std::size_t> bodyLength, bool continueSent) {
    const std::size_t requestLineEnd = head.find("\r\n") + 2;
    std::string out(head.substr(0, requestLineEnd));
    for (std::size_t at = requestLineEnd; at + 2 < head.size();) {
        const std::size_t end = head.find("\r\n", at) + 2;
        const std::string_view line = head.substr(at, end - at);
        at = end;
        const std::string name = lower(std::string(line.substr(0, line.find(':'))));
        if (name == "connection" || name == "transfer-encoding" ||
            (continueSent && name == "expect"))
            continue;
        out += line;
    }
    if (bodyLength) out += "Content-Length: " + std::to_string(*bodyLength) + "\r\n";
    if (f.closeAsked || (f.http10 && !f.keepAliveAsked))
        out += "Connection: close\r\n";
    else if (f.http10)
        out += "Connection: Keep-Alive\r\n";
    return out + "\r\n";
}

// A JSON error and Connection: close, sent without waiting (the socket's buffer is
// empty at this point; a client that reads nothing loses nothing else).
void answerAndClose(Socket fd, const Refusal& r, const std::string& peer) {
    static const std::map<int, const char*> reasons = {{400, "Bad Request"},
                                                       {408, "Request Timeout"},
                                                       {413, "Payload Too Large"},
                                                       {431, "Request Header Fields Too Large"},
                                                       {503, "Service Unavailable"}};
    const auto reason = reasons.find(r.status);
    const std::string body = k3::api::errorJson(k3::api::ApiError(
        r.status, r.message, r.status == 503 ? "server_error" : "invalid_request_error"));
    const std::string bytes =
        "HTTP/1.1 " + std::to_string(r.status) + " " +
        (reason == reasons.end() ? "Error" : reason->second) +
        "\r\nContent-Type: application/json\r\nContent-Length: " + std::to_string(body.size()) +
        "\r\nConnection: close\r\n\r\n" + body;
    k3::net::sendSome(fd, bytes.data(), bytes.size(), true);
    k3::net::shutdownSending(fd);
    std::fprintf(stderr, "k3 serve: request from %s refused: %d %s\n", peer.c_str(), r.status,
                 r.message.c_str());
}

} // namespace

// One client connection between requests, or while its request arrives.
struct LimitedHttpServer::Connection {
    enum class State {
        Idle,     // kept alive: waiting for a next request's first byte
        Head,     // reading a request head
        Body,     // the head is in; reading a body of at most kPrereadBodyBytes
        Draining, // answered with a refusal: reading and dropping until the client closes
    };
    Socket fd = k3::net::kNoSocket;
    std::string peer;
    std::string bytes; // received, from `offset` on not yet used
    std::size_t offset = 0;
    State state = State::Head;
    Clock::time_point deadline;
    HeadScan scan;
    std::size_t need = 0;    // bytes of the request (head and body) to hold before dispatch
    std::size_t dropped = 0; // while draining

    std::string_view pending() const { return std::string_view(bytes).substr(offset); }
    void consume(std::size_t n) {
        offset += n;
        if (offset == bytes.size()) {
            bytes.clear();
            offset = 0;
        } else if (offset > 65536 && offset > bytes.size() / 2) {
            bytes.erase(0, offset);
            offset = 0;
        }
    }
};

// The reader thread (every connection not running a request) and the worker pool.
class LimitedHttpServer::Connections {
public:
    Connections(LimitedHttpServer& server, std::size_t workers)
        : server_(server), workers_(workers), reader_([this] { readLoop(); }) {}
    ~Connections() { shutdown(); }

    // From the accept loop.
    void accept(Socket fd) {
        auto c = std::make_unique<Connection>();
        c->fd = fd;
        c->peer = peerOf(fd);
        c->deadline = Clock::now() + std::chrono::seconds(kHeadDeadlineSeconds);
        {
            std::lock_guard lock(m_);
            int& fromPeer = perAddress_[c->peer];
            if (stopping_ || fromPeer >= kMaxConnectionsPerAddress || total_ >= kMaxConnections) {
                const std::string why =
                    fromPeer >= kMaxConnectionsPerAddress
                        ? "too many connections from " + c->peer + " (at most " +
                              std::to_string(kMaxConnectionsPerAddress) + " at once)"
                        : "too many connections (at most " + std::to_string(kMaxConnections) +
                              " at once)";
                if (fromPeer == 0) perAddress_.erase(c->peer);
                answerAndClose(fd, {503, why}, c->peer);
                k3::net::closeSocket(fd);
                return;
            }
            ++fromPeer;
            ++total_;
        }
        handBack(std::move(c));
    }

    // A connection goes (back) to the reader: a new one, one kept alive, one draining.
    void handBack(std::unique_ptr<Connection> c) {
        {
            std::lock_guard lock(m_);
            if (stopping_) {
                closeCounted(*c);
                return;
            }
            incoming_.push_back(std::move(c));
        }
        wake_.wake();
    }

    void refuse(std::unique_ptr<Connection> c, const Refusal& r) {
        answerAndClose(c->fd, r, c->peer);
        c->state = Connection::State::Draining;
        // Closing with unread bytes resets the connection, and the reset can destroy the
        // answer before the client has read it: read and drop for a moment first.
        c->deadline = Clock::now() + std::chrono::seconds(1);
        c->bytes.clear();
        c->offset = 0;
        handBack(std::move(c));
    }

    void close(std::unique_ptr<Connection> c) {
        std::lock_guard lock(m_);
        closeCounted(*c);
    }

    void shutdown() {
        {
            std::lock_guard lock(m_);
            if (stopping_) return;
            stopping_ = true;
        }
        wake_.wake();
        reader_.join();
        workers_.shutdown(); // the running requests finish
    }

private:
    void closeCounted(Connection& c) {
        k3::net::closeSocket(c.fd);
        if (--perAddress_[c.peer] <= 0) perAddress_.erase(c.peer);
        --total_;
    }

    void dispatch(std::unique_ptr<Connection> c) {
        // std::function needs a copyable callable: the pool owns it through a shared_ptr.
        auto held = std::make_shared<std::unique_ptr<Connection>>(std::move(c));
        workers_.enqueue([this, held] { server_.serve(std::move(*held)); });
    }

    void readLoop() {
        std::list<std::unique_ptr<Connection>> waiting;
        std::vector<k3::net::SocketWait> fds;
        std::vector<std::list<std::unique_ptr<Connection>>::iterator> order; // of fds[1...]
        std::array<char, 16384> buf;
        for (;;) {
            {
                std::lock_guard lock(m_);
                if (stopping_) break;
                for (auto& c : incoming_) {
                    if (c->state == Connection::State::Idle)
                        c->deadline = Clock::now() + std::chrono::seconds(std::max<time_t>(
                                                         1, server_.keep_alive_timeout_sec_));
                    waiting.push_back(std::move(c));
                }
                incoming_.clear();
            }
            // A keep-alive connection may hand back a whole request already buffered.
            for (auto it = waiting.begin(); it != waiting.end();) {
                auto next = std::next(it);
                if (!(*it)->pending().empty() && (*it)->state != Connection::State::Draining)
                    advance(waiting, it);
                it = next;
            }
            fds.assign(1, {wake_.waitable(), ready::Read, 0});
            order.clear();
            auto soonest = Clock::now() + std::chrono::seconds(1);
            for (auto it = waiting.begin(); it != waiting.end(); ++it) {
                fds.push_back({(*it)->fd, ready::Read, 0});
                order.push_back(it);
                soonest = std::min(soonest, (*it)->deadline);
            }
            const int n =
                k3::net::waitSockets(fds.data(), fds.size(), millisecondsUntil(soonest) + 1);
            if (n < 0) break;
            if (fds[0].ready) wake_.drain();
            // List iterators stay valid while others are erased or appended.
            const auto now = Clock::now();
            for (std::size_t i = 1; i < fds.size(); ++i) {
                const auto it = order[i - 1];
                Connection& c = **it;
                if (fds[i].ready) {
                    const std::int64_t got = k3::net::receive(c.fd, buf.data(), buf.size(), true);
                    if (got == 0 || got == -1) {
                        std::lock_guard lock(m_);
                        closeCounted(c);
                        waiting.erase(it);
                    } else if (got > 0) {
                        received(waiting, it, std::string_view(buf.data(), std::size_t(got)));
                    }
                } else if (now >= c.deadline) {
                    expired(waiting, it);
                }
            }
        }
        std::lock_guard lock(m_);
        for (auto& c : waiting) closeCounted(*c);
        for (auto& c : incoming_) closeCounted(*c);
        incoming_.clear();
    }

    using List = std::list<std::unique_ptr<Connection>>;

    void received(List& waiting, List::iterator it, std::string_view data) {
        Connection& c = **it;
        if (c.state == Connection::State::Draining) {
            c.dropped += data.size();
            if (c.dropped > (4u << 20)) {
                std::lock_guard lock(m_);
                closeCounted(c);
                waiting.erase(it);
            }
            return;
        }
        c.bytes.append(data);
        advance(waiting, it);
    }

    // Moves a connection on with what it holds: a complete request to a worker, a bad head
    // to its refusal; otherwise it keeps waiting.
    void advance(List& waiting, List::iterator it) {
        Connection& c = **it;
        if (c.state == Connection::State::Idle) {
            // RFC 9112: empty lines before a request line are ignored.
            std::size_t skip = 0;
            const std::string_view p = c.pending();
            while (p.substr(skip, 2) == "\r\n") skip += 2;
            c.consume(skip);
            if (c.pending().empty()) return;
            c.state = Connection::State::Head;
            c.scan = {};
            c.deadline = Clock::now() + std::chrono::seconds(kHeadDeadlineSeconds);
        }
        if (c.state == Connection::State::Head) {
            Refusal refusal;
            const HeadState s = scanHead(c.pending(), c.scan, refusal);
            if (s == HeadState::Incomplete) return;
            std::unique_ptr<Connection> owned = std::move(*it);
            waiting.erase(it);
            if (s == HeadState::Refused) return refuse(std::move(owned), refusal);
            Framing f;
            if (auto bad = readFraming(owned->pending().substr(0, owned->scan.pos), f))
                return refuse(std::move(owned), *bad);
            owned->need = f.headBytes;
            if (f.contentLength && *f.contentLength <= kPrereadBodyBytes && !f.expectContinue)
                owned->need += std::size_t(*f.contentLength);
            owned->state = Connection::State::Body;
            owned->deadline = Clock::now() + std::chrono::seconds(kBodyDeadlineSeconds);
            if (owned->pending().size() >= owned->need) return dispatch(std::move(owned));
            waiting.push_back(std::move(owned));
            return;
        }
        if (c.state == Connection::State::Body && c.pending().size() >= c.need) {
            std::unique_ptr<Connection> owned = std::move(*it);
            waiting.erase(it);
            dispatch(std::move(owned));
        }
    }

    void expired(List& waiting, List::iterator it) {
        std::unique_ptr<Connection> c = std::move(*it);
        waiting.erase(it);
        switch (c->state) {
        case Connection::State::Idle: // an idle keep-alive connection: just closed
        case Connection::State::Draining:
            close(std::move(c));
            return;
        case Connection::State::Head:
            return refuse(std::move(c), {408, "the request head did not arrive within " +
                                                  std::to_string(kHeadDeadlineSeconds) + " s"});
        case Connection::State::Body:
            return refuse(std::move(c), {408, "the request body did not arrive within " +
                                                  std::to_string(kBodyDeadlineSeconds) + " s"});
        }
    }

    LimitedHttpServer& server_;
    k3::net::Wakeup wake_; // before reader_, which waits on it
    std::mutex m_;
    bool stopping_ = false;
    std::vector<std::unique_ptr<Connection>> incoming_;
    std::map<std::string, int> perAddress_;
    int total_ = 0;
    httplib::ThreadPool workers_;
    std::thread reader_; // last: it starts running in the constructor
};

namespace {

// The library's view of one connection on a worker: the request's buffered bytes first,
// then the socket, the body within its deadline and limit; writes fail only when the
// client is gone (an error or reset), not when it has only half-closed.
class BufferedStream final : public httplib::Stream {
public:
    using Connection = LimitedHttpServer::Connection;

    BufferedStream(Connection& c, int readTimeoutMs, int writeTimeoutMs)
        : c_(c), readTimeoutMs_(readTimeoutMs), writeTimeoutMs_(writeTimeoutMs) {}

    void startRequest(const Framing& f) {
        framing_ = f;
        headLeft_ = f.headBytes;
        bodyRead_ = 0;
        bodyDeadline_ = Clock::now() + std::chrono::seconds(kBodyDeadlineSeconds);
    }
    // False when the handler answered without reading a declared body (a refusal before
    // the body): its bytes would be read as the next request, so the connection ends.
    bool bodyConsumed() const { return bodyRead_ == framing_.contentLength.value_or(0); }

    bool is_readable() const override {
        return !c_.pending().empty() || readable(c_.fd, readTimeoutMs_);
    }
    bool is_writable() const override { return writable(writeTimeoutMs_); }

    ssize_t read(char* ptr, std::size_t size) override {
        if (headLeft_ > 0) { // the head is buffered whole
            const std::size_t n = std::min(size, headLeft_);
            std::memcpy(ptr, c_.pending().data(), n);
            c_.consume(n);
            headLeft_ -= n;
            return ssize_t(n);
        }
        // The body ends where its length says (no length: no body), whatever follows; a
        // chunked body was decoded before (decodeChunkedBody).
        const std::uint64_t left = framing_.contentLength.value_or(0) - bodyRead_;
        if (left == 0) return 0;
        const std::size_t allowed = std::size_t(std::min<std::uint64_t>(size, left));
        if (c_.pending().empty()) {
            const int wait = std::min(readTimeoutMs_, millisecondsUntil(bodyDeadline_));
            if (wait <= 0 || !readable(c_.fd, wait)) return -1;
            std::array<char, 16384> buf;
            const std::int64_t n = k3::net::receive(c_.fd, buf.data(), buf.size(), false);
            if (n <= 0) return n < 0 ? -1 : 0;
            c_.bytes.append(buf.data(), std::size_t(n));
        }
        const std::size_t n = std::min(allowed, c_.pending().size());
        std::memcpy(ptr, c_.pending().data(), n);
        c_.consume(n);
        bodyRead_ += n;
        return ssize_t(n);
    }

    ssize_t write(const char* ptr, std::size_t size) override {
        if (!writable(writeTimeoutMs_)) return -1;
        const std::int64_t n = k3::net::sendSome(c_.fd, ptr, size, false);
        return n < 0 ? -1 : ssize_t(n);
    }

    void get_remote_ip_and_port(std::string& ip, int& port) const override {
        k3::net::peerEndpoint(c_.fd, ip, port);
    }
    void get_local_ip_and_port(std::string& ip, int& port) const override {
        k3::net::localEndpoint(c_.fd, ip, port);
    }
    socket_t socket() const override { return socket_t(c_.fd); }

private:
    // A half-closed client (nc -N) still reads its answer: only an error or a reset means
    // it left.
    bool writable(int timeoutMs) const {
        const unsigned r = k3::net::waitSocket(c_.fd, ready::Write, timeoutMs);
        return (r & ready::Write) && !(r & ready::Failed);
    }

    Connection& c_;
    int readTimeoutMs_, writeTimeoutMs_;
    Framing framing_;
    std::size_t headLeft_ = 0;
    std::uint64_t bodyRead_ = 0;
    Clock::time_point bodyDeadline_;
};

enum class Rewrite { Done, Refused, Gone };

// Gives the library a request it reads as it was meant (Framing::needsRewrite): a chunked
// body is read here on the worker (the reader thread waits for heads only), decoded
// strictly within the body limit and deadline, and passed on with its Content-Length.
Rewrite rewriteRequest(LimitedHttpServer::Connection& c, std::size_t headBytes, const Framing& f,
                       std::size_t bodyLimit, int readTimeoutMs, Refusal& refusal) {
    const std::string head(c.pending().substr(0, headBytes));
    if (!f.chunked) {
        const std::string rest(c.pending().substr(headBytes));
        c.bytes = canonicalHead(head, f, std::nullopt, false) + rest;
        c.offset = 0;
        return Rewrite::Done;
    }
    const bool sendContinue = f.expectContinue && c.pending().size() == headBytes;
    if (sendContinue) {
        static constexpr std::string_view kContinue = "HTTP/1.1 100 Continue\r\n\r\n";
        const std::int64_t n = k3::net::sendSome(c.fd, kContinue.data(), kContinue.size(), false);
        if (n != std::int64_t(kContinue.size())) return Rewrite::Gone;
    }
    ChunkedBodyDecoder decoder(bodyLimit, kMaxHeadBytes);
    const auto deadline = Clock::now() + std::chrono::seconds(kBodyDeadlineSeconds);
    for (;;) {
        const auto status = decoder.decode(c.pending().substr(headBytes));
        if (status == ChunkedBodyDecoder::Status::Invalid) {
            refusal = {400, "the chunked body is malformed: " + decoder.error()};
            return Rewrite::Refused;
        }
        if (status == ChunkedBodyDecoder::Status::TooLarge) {
            refusal = {413, bodyOverLimitMessage(bodyLimit)};
            return Rewrite::Refused;
        }
        if (status == ChunkedBodyDecoder::Status::Done) break;
        const int wait = std::min(readTimeoutMs, millisecondsUntil(deadline));
        if (wait <= 0 || !readable(c.fd, wait)) {
            refusal = {408, "the request body did not arrive within " +
                                std::to_string(kBodyDeadlineSeconds) + " s"};
            return Rewrite::Refused;
        }
        std::array<char, 16384> buf;
        const std::int64_t n = k3::net::receive(c.fd, buf.data(), buf.size(), false);
        if (n <= 0) return Rewrite::Gone;
        c.bytes.append(buf.data(), std::size_t(n));
    }
    const std::string rest(c.pending().substr(headBytes + decoder.consumed()));
    c.bytes = canonicalHead(head, f, decoder.body().size(), sendContinue) + decoder.body() + rest;
    c.offset = 0;
    return Rewrite::Done;
}

// Runs each accepted connection's task at once on the accept thread: the task only hands
// the connection to the reader. Its shutdown (when listening ends) stops the reader and
// waits for the workers.
class HandOverQueue final : public httplib::TaskQueue {
public:
    explicit HandOverQueue(LimitedHttpServer::Connections& connections)
        : connections_(connections) {}
    void enqueue(std::function<void()> fn) override { fn(); }
    void shutdown() override { connections_.shutdown(); }

private:
    LimitedHttpServer::Connections& connections_;
};

} // namespace

LimitedHttpServer::LimitedHttpServer() {
    new_task_queue = [this]() -> httplib::TaskQueue* {
        connections_ =
            std::make_unique<Connections>(*this, std::max<std::size_t>(workerThreads_, 1));
        return new HandOverQueue(*connections_);
    };
}

LimitedHttpServer::~LimitedHttpServer() = default;

k3::net::Socket LimitedHttpServer::requestSocket() {
    return tlRequestSocket;
}

std::string bodyOverLimitMessage(std::size_t limitBytes) {
    return "the request body is over the " + std::to_string(limitBytes >> 20) +
           " MB limit (k3 serve --max-body-mb)";
}

bool LimitedHttpServer::process_and_close_socket(socket_t sock) {
    connections_->accept(Socket(sock));
    return true;
}

void LimitedHttpServer::serve(std::unique_ptr<Connection> c) {
    const int readTimeoutMs = milliseconds(read_timeout_sec_, read_timeout_usec_);
    BufferedStream stream(*c, readTimeoutMs, milliseconds(write_timeout_sec_, write_timeout_usec_));
    for (std::size_t left = keep_alive_max_count_; left > 0 && svr_sock_ != INVALID_SOCKET;
         --left) {
        // The first request's head is whole (the reader saw it); a pipelined next one may
        // not be yet: then the reader waits for it, not this thread.
        HeadScan scan;
        Refusal refusal;
        const HeadState s = scanHead(c->pending(), scan, refusal);
        if (s == HeadState::Incomplete) {
            c->state = c->pending().empty() ? Connection::State::Idle : Connection::State::Head;
            c->scan = scan;
            c->deadline = Clock::now() + std::chrono::seconds(kHeadDeadlineSeconds);
            return connections_->handBack(std::move(c));
        }
        if (s == HeadState::Refused) return connections_->refuse(std::move(c), refusal);
        Framing framing;
        if (auto bad = readFraming(c->pending().substr(0, scan.pos), framing))
            return connections_->refuse(std::move(c), *bad);
        if (framing.needsRewrite()) {
            const Rewrite r =
                rewriteRequest(*c, scan.pos, framing, payload_max_length_, readTimeoutMs, refusal);
            if (r == Rewrite::Refused) return connections_->refuse(std::move(c), refusal);
            if (r == Rewrite::Gone) break;
            scan = {};
            framing = {};
            // The rewritten head is whole and well formed.
            scanHead(c->pending(), scan, refusal);
            readFraming(c->pending().substr(0, scan.pos), framing);
        }
        stream.startRequest(framing);
        bool closed = false;
        tlRequestSocket = c->fd;
        const bool ok = process_request(stream, left == 1, closed, {});
        tlRequestSocket = k3::net::kNoSocket;
        if (!ok || closed || !stream.bodyConsumed()) break;
        if (c->pending().empty()) {
            c->state = Connection::State::Idle;
            return connections_->handBack(std::move(c));
        }
    }
    connections_->close(std::move(c));
}

} // namespace k3cli
