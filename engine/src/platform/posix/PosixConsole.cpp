// The terminal, Ctrl-C and stop signals on Linux and macOS (k3/console.hpp and
// k3/process.hpp): isatty, a SIGINT handler that also writes to a pipe the stdin wait
// polls, dup/dup2 for the diverted stdout, and sigwait on a thread of its own for a server.
#include "k3/console.hpp"
#include "k3/process.hpp"
#include "platform/posix/PosixHooks.hpp"

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <thread>

namespace k3 {

namespace platform::posix {

bool makeNonBlockingPipe(int fds[2]) {
    if (::pipe(fds) != 0) return false;
    for (int i = 0; i < 2; ++i) {
        ::fcntl(fds[i], F_SETFD, FD_CLOEXEC);
        ::fcntl(fds[i], F_SETFL, ::fcntl(fds[i], F_GETFL) | O_NONBLOCK);
    }
    return true;
}

} // namespace platform::posix

namespace console {

namespace {

std::atomic<int> gInterrupts{0};
std::atomic<void (*)(int)> gOnPress{nullptr};
volatile std::sig_atomic_t gExitCodeOnSecond = 0;
int gInterruptPipe[2] = {-1, -1}; // the handler writes a byte; readInput polls the read end

void onInterrupt(int) {
    const int saved = errno;
    const int n = gInterrupts.fetch_add(1) + 1;
    if (auto* onPress = gOnPress.load()) onPress(n);
    if (gInterruptPipe[1] >= 0) {
        const ssize_t wrote = ::write(gInterruptPipe[1], "!", 1); // full: a wake-up is queued
        (void)wrote;
    }
    errno = saved;
    if (gExitCodeOnSecond > 0 && n >= 2) ::_exit(gExitCodeOnSecond);
}

int descriptorOf(Stream stream) {
    return stream == Stream::In    ? STDIN_FILENO
           : stream == Stream::Out ? STDOUT_FILENO
                                   : STDERR_FILENO;
}

} // namespace

bool isTerminal(Stream stream) {
    return ::isatty(descriptorOf(stream)) == 1;
}

void watchInterrupts(void (*onPress)(int), int exitCodeOnSecond) {
    gOnPress.store(onPress);
    gExitCodeOnSecond = exitCodeOnSecond;
    if (gInterruptPipe[0] < 0 && !platform::posix::makeNonBlockingPipe(gInterruptPipe))
        gInterruptPipe[0] = gInterruptPipe[1] = -1; // no pipe: readInput falls back to EINTR
    struct sigaction action {};
    action.sa_handler = onInterrupt;
    sigemptyset(&action.sa_mask);
    // No SA_RESTART: a blocked read of the chat prompt returns so the caller can react.
    action.sa_flags = 0;
    ::sigaction(SIGINT, &action, nullptr);
}

int interruptCount() {
    return gInterrupts.load();
}

Input readInput(std::string& buffer, int seenInterrupts) {
    for (;;) {
        // Drain old wake-ups first, then look at the count: a press after this check
        // leaves a byte in the pipe, so the poll below returns at once.
        char drain[64];
        while (gInterruptPipe[0] >= 0 && ::read(gInterruptPipe[0], drain, sizeof drain) > 0) {
        }
        if (interruptCount() != seenInterrupts) return Input::Interrupted;
        pollfd fds[2] = {{STDIN_FILENO, POLLIN, 0}, {gInterruptPipe[0], POLLIN, 0}};
        const int ready = ::poll(fds, gInterruptPipe[0] >= 0 ? 2 : 1, -1);
        if (ready < 0) {
            if (errno == EINTR) continue; // the handler ran: the count says so above
            return Input::End;
        }
        if (fds[0].revents == 0) continue; // only the pipe: the count says so above
        char chunk[4096];
        const ssize_t got = ::read(STDIN_FILENO, chunk, sizeof chunk);
        if (got > 0) {
            buffer.append(chunk, std::size_t(got));
            return Input::Data;
        }
        if (got < 0 && (errno == EINTR || errno == EAGAIN)) continue;
        return Input::End;
    }
}

std::intptr_t divertStdout() {
    std::fflush(stdout);
    const int saved = ::dup(STDOUT_FILENO);
    if (saved < 0) return -1;
    if (::dup2(STDERR_FILENO, STDOUT_FILENO) < 0) {
        const int error = errno;
        ::close(saved);
        errno = error;
        return -1;
    }
    return saved;
}

bool writeDiverted(std::intptr_t handle, std::string_view bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
        const ssize_t n = ::write(int(handle), bytes.data() + done, bytes.size() - done);
        if (n < 0 && errno == EINTR) continue;
        if (n <= 0) {
            if (n == 0) errno = EIO;
            return false;
        }
        done += std::size_t(n);
    }
    return true;
}

void restoreStdout(std::intptr_t handle) {
    if (handle < 0) return;
    std::fflush(stdout);
    ::dup2(int(handle), STDOUT_FILENO);
    ::close(int(handle));
}

} // namespace console

namespace process {

void catchStopSignals(void (*onStop)(int)) {
    for (const int sig : {SIGINT, SIGTERM, SIGHUP}) std::signal(sig, onStop);
    std::signal(SIGXFSZ, SIG_IGN);
}

struct StopRequests::State {
    sigset_t signals{};
    std::atomic<bool> ending{false};
    std::thread watcher;
};

StopRequests::StopRequests() : state_(std::make_unique<State>()) {
    sigemptyset(&state_->signals);
    sigaddset(&state_->signals, SIGINT);
    sigaddset(&state_->signals, SIGTERM);
    ::pthread_sigmask(SIG_BLOCK, &state_->signals, nullptr);
    ::signal(SIGPIPE, SIG_IGN);
}

StopRequests::~StopRequests() {
    unwatch();
}

void StopRequests::unwatch() {
    if (!state_->watcher.joinable()) return;
    state_->ending.store(true);
    // Wakes the sigwait if it still waits; a watcher that already returned ignores it.
    ::pthread_kill(state_->watcher.native_handle(), SIGTERM);
    state_->watcher.join();
}

void StopRequests::watch(std::function<void(const std::string&)> onStop) {
    State& s = *state_;
    s.watcher = std::thread([&s, onStop = std::move(onStop)] {
        int sig = 0;
        ::sigwait(&s.signals, &sig);
        if (s.ending.load()) return;
        onStop(sig == SIGINT ? "SIGINT" : "SIGTERM");
    });
}

} // namespace process

} // namespace k3
