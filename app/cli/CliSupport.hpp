#pragma once
// What every `k3` command shares: exit codes, the one-paragraph error, terminal
// detection, Ctrl-C, and the small formatters the reports use.

#include <k3/memory_plan.hpp>

#include <atomic>
#include <cstdint>
#include <string>
#include <utility>

namespace k3cli {

// DESIGN.md "CLI": scripts rely on these.
inline constexpr int kExitOk = 0;
inline constexpr int kExitFailure = 1;       // load or forward failure, download failure
inline constexpr int kExitUsage = 2;         // usage error or a config that cannot be read
inline constexpr int kExitInvalid = 4;       // the run finished but is not the model's output
inline constexpr int kExitInterrupted = 130; // stopped with Ctrl-C (shell convention)

// A command's failure: main prints the message as one paragraph and exits with the code.
struct CommandError {
    int exitCode = kExitFailure;
    std::string message;
};
inline CommandError usageError(std::string message) {
    return {kExitUsage, std::move(message)};
}

// Every message k3 prints on stderr goes through these three, and each passes the
// message through terminalSafe() (below), terminal or not: messages carry file names,
// tensor names, tokenizer lines, transcript values, JSON excerpts and hub file names,
// and none of them may move the cursor, clear the screen or set the window title.
// "k3: error: MESSAGE" on stderr, as one paragraph (no stack of nested causes).
void printError(const std::string& message);
// "k3: warning: MESSAGE".
void printWarning(const std::string& message);
// "MESSAGE" on its own line.
void printNote(const std::string& message);

bool stdoutIsTty();
bool stderrIsTty();
bool stdinIsTty();

// Ctrl-C: the first press sets the cancel flag (the current job stops at its next
// check). With hardExitOnSecond, a second press ends the process at once.
void installInterruptHandler(bool hardExitOnSecond);
const std::atomic<bool>& cancelFlag();
void clearCancel();
int interruptCount();

// One line of the chat prompt from stdin. A Ctrl-C ends the wait whenever it lands
// (before the wait, during it, or handled on another thread): the handler also writes
// to a pipe that the wait polls beside stdin. A last line without a newline is a line.
enum class PromptInput { Line, Interrupted, End };
PromptInput readPromptLine(std::string& line, int seenInterrupts);

// What to do about an engine error, in the CLI's words (its flags), to follow the
// engine's message; empty when the message says it all.
std::string cliAdvice(const std::exception& error);

// Model output is text, never terminal commands: control characters (C0 except tab and
// newline, DEL, and UTF-8 encoded C1) become visible escapes like "\x1b", and hidden
// format characters (bidi controls such as U+202E, zero-width marks, tags) "\u202e".
// Model text on stdout passes it on a terminal; messages on stderr always (printError
// and friends).
// keepLines=false escapes tab and newline too: a field of a one-line log record (a
// request path with %0A decoded) must not start a forged record.
std::string terminalSafe(const std::string& text, bool keepLines = true);

// Progress lines on a terminal are drawn at most this often (and at the end).
bool progressDue(bool last);

// Peak resident set of this process, 0 when unknown (k3::peakResidentBytes()).
std::uint64_t peakRssBytes();

// Sizes are written with k3::formatBytes (k3/memory_plan.hpp), the engine's one format:
// "1.23 GB", "456.70 MB", "12.00 KB", "17 B".

// --pin-mode: "raw", "compressed" or "measured"; anything else is a usage error naming
// the value and the three choices.
k3::PinMode parsePinMode(const std::string& text);

// "0.42 s", "3 min 12 s", "1 h 04 min".
std::string formatDuration(double seconds);

} // namespace k3cli
