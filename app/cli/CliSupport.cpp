#include "CliSupport.hpp"
#include "MemoryFlagAdvice.hpp"

#include "k3/console.hpp"
#include "k3/launch.hpp"
#include "k3/memory_plan.hpp"
#include "k3/pack.hpp"
#include "k3/process_memory.hpp"

#include <chrono>
#include <cstdio>
#include <string>

namespace k3cli {
namespace {

std::atomic<bool> gCancel{false};

std::string gPromptBuffer; // bytes read from stdin after the last full line returned
bool gPromptEnd = false;   // stdin reached its end (or failed)

// In the signal handler (k3::console::watchInterrupts): a lock-free store only.
void onInterrupt(int) {
    gCancel.store(true);
}

} // namespace

void printError(const std::string& message) {
    std::fflush(stdout);
    std::fprintf(stderr, "k3: error: %s\n", terminalSafe(message).c_str());
}

void printWarning(const std::string& message) {
    std::fflush(stdout);
    std::fprintf(stderr, "k3: warning: %s\n", terminalSafe(message).c_str());
}

void printNote(const std::string& message) {
    std::fflush(stdout);
    std::fprintf(stderr, "%s\n", terminalSafe(message).c_str());
}

bool stdoutIsTty() {
    return k3::console::isTerminal(k3::console::Stream::Out);
}
bool stderrIsTty() {
    return k3::console::isTerminal(k3::console::Stream::Err);
}
bool stdinIsTty() {
    return k3::console::isTerminal(k3::console::Stream::In);
}

void installInterruptHandler(bool hardExitOnSecond) {
    k3::console::watchInterrupts(onInterrupt, hardExitOnSecond ? kExitInterrupted : 0);
}

const std::atomic<bool>& cancelFlag() {
    return gCancel;
}
void clearCancel() {
    gCancel.store(false);
}
int interruptCount() {
    return k3::console::interruptCount();
}

std::string cliAdvice(const std::exception& error) {
    if (const auto* pack = dynamic_cast<const k3::PackError*>(&error); pack && pack->remedy()) {
        const k3::PackRemedy& r = *pack->remedy();
        return std::string(" (k3 pack") + (r.compress ? " --compress" : "") +
               (r.draft ? " --draft" : "") + " " +
               (r.modelDir.empty() ? std::string("MODEL_DIR") : r.modelDir.string()) + " " +
               r.trunkDir.string() + ")";
    }
    const auto* refusal = dynamic_cast<const k3::MemoryRefusal*>(&error);
    if (refusal == nullptr) return {};
    switch (refusal->reason()) {
    case k3::MemoryRefusal::Reason::TrunkTooSmall:
        return " Raise --trunk-gb to at least " + k3::formatBytes(refusal->minTrunkBytes()) +
               " (or choose a larger --preset).";
    case k3::MemoryRefusal::Reason::ContextTooBig:
        return " Options: --context " + std::to_string(refusal->fitPositions()) +
               " or less, a smaller --cache-gb or --trunk-gb, or a machine with more memory.";
    case k3::MemoryRefusal::Reason::OverAvailable:
        return " Options: a smaller --preset or --trunk-gb/--cache-gb (the output is the same "
               "at every budget, only slower), close other programs, or a machine with more "
               "memory.";
    case k3::MemoryRefusal::Reason::Setting:
        break;
    }
    return {};
}

std::string memoryFlagAdvice(std::span<const k3::MemoryFlag> flags, std::uint64_t availableBytes) {
    // The flags apply in order, so the refused one ends the shortest refused prefix.
    for (std::size_t n = 1; n <= flags.size(); ++n) {
        try {
            k3::resolveMemoryFlags(flags.first(n), availableBytes);
        } catch (const k3::MemoryRefusal&) {
            const k3::MemoryFlag& flag = flags[n - 1];
            switch (flag.kind) {
            case k3::MemoryFlag::Kind::Preset:
                return " (--preset " + flag.preset + "; k3 --list-presets shows the presets)";
            case k3::MemoryFlag::Kind::TrunkGB:
                return " (--trunk-gb)";
            case k3::MemoryFlag::Kind::CacheGB:
                return " (--cache-gb)";
            }
        }
    }
    return {};
}

PromptInput readPromptLine(std::string& line, int seenInterrupts) {
    for (;;) {
        const std::size_t newline = gPromptBuffer.find('\n');
        if (newline != std::string::npos) {
            line.assign(gPromptBuffer, 0, newline);
            gPromptBuffer.erase(0, newline + 1);
            return PromptInput::Line;
        }
        if (gPromptEnd) {
            if (gPromptBuffer.empty()) return PromptInput::End;
            line = std::move(gPromptBuffer);
            gPromptBuffer.clear();
            return PromptInput::Line;
        }
        switch (k3::console::readInput(gPromptBuffer, seenInterrupts)) {
        case k3::console::Input::Data:
            break;
        case k3::console::Input::Interrupted:
            return PromptInput::Interrupted;
        case k3::console::Input::End:
            gPromptEnd = true;
            break;
        }
    }
}

std::uint64_t peakRssBytes() {
    return k3::peakResidentBytes();
}

namespace {

// Invisible characters that change how the text around them is shown: the bidi controls
// (U+202E makes "gpj.exe" of "exe.jpg"), zero-width and word-joiner marks, the BOM, the
// line and paragraph separators, interlinear annotations and the tag characters. ZWNJ
// and ZWJ (U+200C, U+200D) are kept: scripts and emoji sequences need them.
bool isHiddenFormatCharacter(char32_t c) {
    return c == 0x00ad || c == 0x061c || c == 0x180e || c == 0x200b ||
           (c >= 0x200e && c <= 0x200f) || (c >= 0x2028 && c <= 0x202e) ||
           (c >= 0x2060 && c <= 0x2064) || (c >= 0x2066 && c <= 0x206f) || c == 0xfeff ||
           (c >= 0xfff9 && c <= 0xfffb) || c == 0xe0001 || (c >= 0xe0020 && c <= 0xe007f);
}

// The code point of the well-formed UTF-8 sequence at text[i] and its length; 0 when
// the bytes there are not one.
std::size_t decodeUtf8(const std::string& text, std::size_t i, char32_t& c) {
    const auto byte = [&](std::size_t k) { return static_cast<unsigned char>(text[i + k]); };
    const unsigned char b0 = byte(0);
    std::size_t n = b0 >= 0xf0 && b0 <= 0xf4 ? 4 : b0 >= 0xe0 ? 3 : b0 >= 0xc2 ? 2 : 0;
    if (n == 0 || b0 > 0xf4 || i + n > text.size()) return 0;
    c = b0 & (0x7f >> n);
    for (std::size_t k = 1; k < n; ++k) {
        if ((byte(k) & 0xc0) != 0x80) return 0;
        c = (c << 6) | (byte(k) & 0x3f);
    }
    const char32_t least[] = {0, 0, 0x80, 0x800, 0x10000};
    if (c < least[n] || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
    return n;
}

} // namespace

std::string terminalSafe(const std::string& text, bool keepLines) {
    std::string out;
    out.reserve(text.size());
    char escape[16];
    for (std::size_t i = 0; i < text.size(); ++i) {
        const auto c = static_cast<unsigned char>(text[i]);
        char32_t cp = 0;
        std::size_t length = 0;
        if ((c < 0x20 && !(keepLines && (c == '\n' || c == '\t'))) || c == 0x7f) {
            std::snprintf(escape, sizeof escape, "\\x%02x", c);
            out += escape;
        } else if (c >= 0x80 && (length = decodeUtf8(text, i, cp)) > 0 &&
                   ((cp >= 0x80 && cp <= 0x9f) || isHiddenFormatCharacter(cp))) {
            // C1 controls (0x9b is CSI) and hidden format characters, shown by number.
            std::snprintf(escape, sizeof escape, cp > 0xffff ? "\\U%08x" : "\\u%04x", unsigned(cp));
            out += escape;
            i += length - 1;
        } else {
            out += char(c);
        }
    }
    return out;
}

bool progressDue(bool last) {
    using Clock = std::chrono::steady_clock;
    static Clock::time_point previous{};
    const auto now = Clock::now();
    if (!last && now - previous < std::chrono::milliseconds(100)) return false;
    previous = now;
    return true;
}

k3::PinMode parsePinMode(const std::string& text) {
    if (const auto mode = k3::pinModeNamed(text)) return *mode;
    throw usageError("--pin-mode \"" + text +
                     "\" is not a pin mode: use raw (pinned layers decoded once, at load), "
                     "compressed (kept compressed, decoded at each use: a budget pins more "
                     "layers) or measured (compressed where a measurement at load says it "
                     "pays; the default)");
}

std::string formatDuration(double seconds) {
    char text[64];
    if (seconds < 0) return "?";
    if (seconds < 60)
        std::snprintf(text, sizeof text, "%.2f s", seconds);
    else if (seconds < 3600)
        std::snprintf(text, sizeof text, "%d min %02d s", int(seconds) / 60, int(seconds) % 60);
    else
        std::snprintf(text, sizeof text, "%d h %02d min", int(seconds) / 3600,
                      (int(seconds) % 3600) / 60);
    return text;
}

} // namespace k3cli
