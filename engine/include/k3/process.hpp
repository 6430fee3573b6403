#pragma once
// Requests from outside to stop the process, for a front end (the k3 CLI): a handler for a
// long job, or a thread of their own for a server. Defined by the platform layer
// (engine/src/platform: posix/ and win32/), so no front end includes an OS header.

#include <functional>
#include <memory>
#include <string>

namespace k3::process {

// SIGINT, SIGTERM and SIGHUP (Windows: Ctrl-C, Ctrl-Break and SIGTERM) call
// onStop(signalNumber) in a signal handler: it may only store to lock-free atomics and
// volatile sig_atomic_t. SIGXFSZ is ignored, so a write past `ulimit -f` fails (EFBIG)
// instead of killing the process with its files half written.
void catchStopSignals(void (*onStop)(int signalNumber));

// A server's stop requests (SIGINT, SIGTERM; Windows: Ctrl-C, Ctrl-Break, closing the
// console) delivered on a thread, where onStop may do anything. Construct it before any
// other thread starts: on POSIX the signals are blocked in this thread, so every thread
// started later inherits the block and only the watcher receives them; SIGPIPE is ignored
// (a write to a client that left fails instead of ending the server).
class StopRequests {
public:
    StopRequests();
    ~StopRequests(); // unwatch()
    StopRequests(const StopRequests&) = delete;
    StopRequests& operator=(const StopRequests&) = delete;

    // Starts watching: onStop("SIGINT") or onStop("SIGTERM") once, on the watcher thread.
    void watch(std::function<void(const std::string& signalName)> onStop);
    // Ends the watcher without calling onStop; waits for an onStop that is running. Call
    // it before what onStop uses goes away.
    void unwatch();

    struct State; // per OS (engine/src/platform)

private:
    std::unique_ptr<State> state_;
};

} // namespace k3::process
