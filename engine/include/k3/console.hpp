#pragma once
// The terminal and the standard streams, for a front end (the k3 CLI): whether a stream is
// a terminal, Ctrl-C, a read of stdin that a Ctrl-C ends, and stdout set aside for one
// report. Defined by the platform layer (engine/src/platform: posix/ and win32/), so no
// front end includes an OS header.

#include <cstdint>
#include <string>
#include <string_view>

namespace k3::console {

enum class Stream { In, Out, Err };

// isatty(): the stream is a terminal (a console on Windows), not a pipe or a file.
bool isTerminal(Stream stream);

// Ctrl-C (SIGINT; Ctrl-C and Ctrl-Break on Windows). Each press adds one to
// interruptCount(), calls onPress(count) and wakes a readInput() that waits. onPress runs
// in a signal handler (POSIX) or on the console's handler thread (Windows): it may only
// store to lock-free atomics. With exitCodeOnSecond > 0, a second press ends the process
// at once with that code. A blocked read is interrupted, not restarted. Calling it again
// replaces onPress and exitCodeOnSecond.
void watchInterrupts(void (*onPress)(int presses), int exitCodeOnSecond);
int interruptCount();

enum class Input { Data, Interrupted, End };
// Waits for stdin and appends what one read gives to `buffer` (Data). Interrupted as soon
// as interruptCount() differs from seenInterrupts, whether the press came before the wait,
// during it, or was handled on another thread. End at the end of input or a read error.
Input readInput(std::string& buffer, int seenInterrupts);

// stdout set aside for one report (`k3 --out -`): from divertStdout() on, what the process
// writes to stdout goes to stderr, and writeDiverted() writes to the real stdout.
// divertStdout gives the handle, or -1 (errno set) when it cannot.
std::intptr_t divertStdout();
// All of `bytes` to the real stdout: false (errno set) when the write fails.
bool writeDiverted(std::intptr_t handle, std::string_view bytes);
// Puts stdout back and closes the handle.
void restoreStdout(std::intptr_t handle);

} // namespace k3::console
