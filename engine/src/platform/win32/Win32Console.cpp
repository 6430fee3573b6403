// The console, Ctrl-C and stop requests on Windows (k3/console.hpp and k3/process.hpp):
// _isatty, a console control handler (it runs on a thread the system starts, so no
// signal-handler limits apply to it), ReadFile of stdin, which a Ctrl-C ends for a
// console, and _dup/_dup2 for the diverted stdout.
#include "k3/console.hpp"
#include "k3/process.hpp"

#include "platform/win32/Win32Lean.hpp"
#include <windows.h>

#include <io.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <mutex>

namespace k3 {

namespace console {

namespace {

std::atomic<int> gInterrupts{0};
std::atomic<void (*)(int)> gOnPress{nullptr};
std::atomic<int> gExitCodeOnSecond{0};

BOOL WINAPI onConsoleInterrupt(DWORD event) {
    if (event != CTRL_C_EVENT && event != CTRL_BREAK_EVENT) return FALSE;
    const int n = gInterrupts.fetch_add(1) + 1;
    if (auto* onPress = gOnPress.load()) onPress(n);
    if (gExitCodeOnSecond.load() > 0 && n >= 2) ::ExitProcess(UINT(gExitCodeOnSecond.load()));
    return TRUE;
}

int descriptorOf(Stream stream) {
    return stream == Stream::In ? 0 : stream == Stream::Out ? 1 : 2;
}

} // namespace

bool isTerminal(Stream stream) {
    return ::_isatty(descriptorOf(stream)) != 0;
}

void watchInterrupts(void (*onPress)(int), int exitCodeOnSecond) {
    gOnPress.store(onPress);
    gExitCodeOnSecond.store(exitCodeOnSecond);
    static std::once_flag installed;
    std::call_once(installed, [] { ::SetConsoleCtrlHandler(onConsoleInterrupt, TRUE); });
}

int interruptCount() {
    return gInterrupts.load();
}

Input readInput(std::string& buffer, int seenInterrupts) {
    const HANDLE in = ::GetStdHandle(STD_INPUT_HANDLE);
    for (;;) {
        if (interruptCount() != seenInterrupts) return Input::Interrupted;
        char chunk[4096];
        DWORD got = 0;
        // A Ctrl-C ends a console's read with no bytes (ERROR_OPERATION_ABORTED); a pipe's
        // read is not ended by it: the count is looked at when the read returns.
        const BOOL ok = ::ReadFile(in, chunk, sizeof chunk, &got, nullptr);
        if (got > 0) {
            buffer.append(chunk, std::size_t(got));
            return Input::Data;
        }
        if (interruptCount() != seenInterrupts) return Input::Interrupted;
        if (!ok && ::GetLastError() == ERROR_OPERATION_ABORTED) continue;
        return Input::End; // end of input, a broken pipe or another failure
    }
}

std::intptr_t divertStdout() {
    std::fflush(stdout);
    const int saved = ::_dup(1);
    if (saved < 0) return -1;
    if (::_dup2(2, 1) != 0) {
        const int error = errno;
        ::_close(saved);
        errno = error;
        return -1;
    }
    return saved;
}

bool writeDiverted(std::intptr_t handle, std::string_view bytes) {
    std::size_t done = 0;
    while (done < bytes.size()) {
        const std::size_t chunk = std::min<std::size_t>(bytes.size() - done, 1u << 30);
        const int n = ::_write(int(handle), bytes.data() + done, unsigned(chunk));
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
    ::_dup2(int(handle), 1);
    ::_close(int(handle));
}

} // namespace console

namespace process {

void catchStopSignals(void (*onStop)(int)) {
    // The C runtime raises SIGINT for Ctrl-C and SIGBREAK for Ctrl-Break; Windows has no
    // SIGHUP or SIGXFSZ (a write over a quota fails with an error).
    for (const int sig : {SIGINT, SIGTERM, SIGBREAK}) std::signal(sig, onStop);
}

struct StopRequests::State {
    std::mutex m;
    std::function<void(const std::string&)> onStop;
    bool ending = false;
};

namespace {

std::atomic<StopRequests::State*> gStopState{nullptr};

// On the thread the system starts for the event, where onStop may do anything. For a
// close, the process ends when this returns: the stop is at least begun.
BOOL WINAPI onStopRequest(DWORD event) {
    StopRequests::State* s = gStopState.load();
    if (s == nullptr) return FALSE;
    // Under the lock, so that unwatch() waits for a running onStop.
    std::lock_guard lock(s->m);
    if (s->ending || !s->onStop) return TRUE;
    const auto onStop = std::move(s->onStop);
    s->onStop = nullptr; // once
    onStop(event == CTRL_C_EVENT ? "SIGINT" : "SIGTERM");
    return TRUE;
}

} // namespace

StopRequests::StopRequests() : state_(std::make_unique<State>()) {
    gStopState.store(state_.get());
    ::SetConsoleCtrlHandler(onStopRequest, TRUE);
}

StopRequests::~StopRequests() {
    unwatch();
    ::SetConsoleCtrlHandler(onStopRequest, FALSE);
    gStopState.store(nullptr);
}

void StopRequests::unwatch() {
    std::lock_guard lock(state_->m);
    state_->ending = true;
}

void StopRequests::watch(std::function<void(const std::string&)> onStop) {
    std::lock_guard lock(state_->m);
    state_->onStop = std::move(onStop);
}

} // namespace process

} // namespace k3
