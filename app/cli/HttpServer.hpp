#pragma once
// cpp-httplib's server with what Debian's libcpp-httplib 0.11 lacks (a compiled library:
// its CPPHTTPLIB_* limits cannot be changed by the includer). The library gives each
// accepted connection a pool thread that blocks reading the head, so 12 to 40 clients
// dripping a header line every 1-2 s held every thread and locked everyone out, and it
// keeps every header line it reads (8 KB each, no count or total limit).
//
// Here one reader thread polls every connection until its request head is complete
// (and a body of at most kPrereadBodyBytes with it), so a slow client costs a descriptor
// and its bytes, never a thread; only complete requests reach the worker threads, which
// run the library's parser and the handlers. Refused before that, each with a JSON error
// and a close: a head over kMaxHeadBytes or kMaxHeaderFields (431), a head or body not
// complete by its deadline (408), framing the library would read leniently (400: two
// different or non-decimal Content-Length values, Transfer-Encoding other than chunked or
// with a Content-Length, a header line ending in a bare LF), more than
// kMaxConnectionsPerAddress connections from one address or kMaxConnections in all (503).
// A chunked body is cut off once it passes the body limit (413), not read to its end.
// Pipelined requests are answered in order.

#include <k3/net.hpp>

#include <httplib.h>

#include <cstddef>
#include <memory>
#include <string>

namespace k3cli {

// Request line plus header lines plus the blank line.
inline constexpr std::size_t kMaxHeadBytes = 64 * 1024;
inline constexpr std::size_t kMaxHeaderFields = 100;
// From a request's first byte (a new connection: from its accept) to its blank line.
inline constexpr int kHeadDeadlineSeconds = 10;
// From the end of the head to the end of the body.
inline constexpr int kBodyDeadlineSeconds = 30;
inline constexpr int kMaxConnectionsPerAddress = 64;
inline constexpr int kMaxConnections = 512;
// Bodies up to this size (with a Content-Length) arrive whole before a worker sees them.
inline constexpr std::size_t kPrereadBodyBytes = 1 << 20;

// The 413 message for a body over `limitBytes` (chunked or with a Content-Length).
std::string bodyOverLimitMessage(std::size_t limitBytes);

class LimitedHttpServer : public httplib::Server {
public:
    LimitedHttpServer();
    ~LimitedHttpServer() override;

    // Threads that run complete requests (the handlers); set before listening.
    void setWorkerThreads(std::size_t count) { workerThreads_ = count; }

    // In a handler: the connection its request came on (cpp-httplib 0.11 gives a handler
    // no view of its socket); kNoSocket elsewhere.
    static k3::net::Socket requestSocket();

    class Connections; // the reader thread and the workers (HttpServer.cpp)
    struct Connection; // one client connection and its received bytes

private:
    // Called by the library's accept loop: hands the connection to the reader thread.
    bool process_and_close_socket(socket_t sock) override;
    // On a worker: the requests whose heads are buffered, in order; then the connection
    // goes back to the reader (keep-alive) or is closed.
    friend class Connections;
    void serve(std::unique_ptr<Connection> connection);

    std::size_t workerThreads_ = 8;
    std::unique_ptr<Connections> connections_;
};

} // namespace k3cli
