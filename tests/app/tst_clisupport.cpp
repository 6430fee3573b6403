// The k3 CLI's helpers that need no process: id lists, sampling defaults, terminal-safe
// text, and the report formatters.
#include <QTest>

#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <future>
#include <pthread.h>
#include <string>
#include <sys/syscall.h>
#include <thread>
#include <unistd.h>
#include <vector>

#include "cli/CliSupport.hpp"
#include "cli/Commands.hpp"
#include "cli/MemoryFlagAdvice.hpp"

#include <k3/launch.hpp>
#include <k3/memory_plan.hpp>

class TestCliSupport : public QObject {
    Q_OBJECT
private slots:
    void idListParses();
    void idListRefusesNamingTheItem();
    void samplingFollowsTheSeed();
    void terminalSafeEscapesControls();
    void formatters();
    void pinModeParsesAndRefusesNamingTheValue();
    void memoryRefusalNamesTheSettingAndTheCliTheFlag();
    void interruptHandledOnAnotherThreadEndsThePromptWait();
    void interruptBeforeTheWaitIsSeen();
    void promptReadsLinesThenTheEnd();
};

namespace {
// stdin replaced by a pipe for one test; the write end is the test's keyboard.
struct PipedStdin {
    int keys = -1;
    int saved = -1;
    PipedStdin() {
        int fds[2];
        if (pipe(fds) != 0) return;
        saved = dup(STDIN_FILENO);
        dup2(fds[0], STDIN_FILENO);
        close(fds[0]);
        keys = fds[1];
    }
    void type(const char* text) const {
        const ssize_t n = write(keys, text, std::strlen(text));
        QCOMPARE(n, ssize_t(std::strlen(text)));
    }
    ~PipedStdin() {
        if (keys >= 0) close(keys);
        if (saved >= 0) dup2(saved, STDIN_FILENO), close(saved);
    }
};

// Whether thread `tid` of this process sleeps in poll(): /proc names the system call a
// blocked thread is in ("running" while it runs). Yes where /proc cannot say.
bool sleepsInPoll(pid_t tid) {
    std::ifstream file("/proc/self/task/" + std::to_string(tid) + "/syscall");
    std::string first;
    if (!(file >> first)) return true;
    if (first == "running") return false;
    const long number = std::strtol(first.c_str(), nullptr, 10);
#ifdef SYS_poll
    if (number == SYS_poll) return true;
#endif
    return number == SYS_ppoll;
}
} // namespace

void TestCliSupport::idListParses() {
    QCOMPARE(k3cli::parseIdList("1008,10484, 318 ,0"),
             (std::vector<std::int32_t>{1008, 10484, 318, 0}));
    QCOMPARE(k3cli::parseIdList("7"), (std::vector<std::int32_t>{7}));
}

void TestCliSupport::idListRefusesNamingTheItem() {
    const auto refused = [](const std::string& text) -> std::string {
        try {
            k3cli::parseIdList(text);
        } catch (const k3cli::CommandError& e) {
            if (e.exitCode != k3cli::kExitUsage) return "wrong exit code";
            return e.message;
        }
        return "accepted";
    };
    QVERIFY(refused("1,-2").find("\"-2\" (item 2)") != std::string::npos);
    QVERIFY(refused("1,2,").find("\"\" (item 3)") != std::string::npos);
    QVERIFY(refused("").find("(item 1)") != std::string::npos);
    QVERIFY(refused("1;2").find("\"1;2\" (item 1)") != std::string::npos);
    QVERIFY(refused("99999999999").find("(item 1)") != std::string::npos); // overflows int32
}

// --pin-mode (k3, k3 --chat, k3 serve): the three words, and a refusal naming the value.
void TestCliSupport::pinModeParsesAndRefusesNamingTheValue() {
    QVERIFY(k3cli::parsePinMode("raw") == k3::PinMode::Raw);
    QVERIFY(k3cli::parsePinMode("compressed") == k3::PinMode::Compressed);
    QVERIFY(k3cli::parsePinMode("measured") == k3::PinMode::Measured);
    QCOMPARE(std::string(k3::pinModeName(k3::PinMode::Compressed)), std::string("compressed"));
    for (const std::string bad : {"fast", "Raw", "", "raw "}) {
        try {
            k3cli::parsePinMode(bad);
            QFAIL(("accepted --pin-mode \"" + bad + "\"").c_str());
        } catch (const k3cli::CommandError& e) {
            QCOMPARE(e.exitCode, k3cli::kExitUsage);
            QCOMPARE(e.message,
                     "--pin-mode \"" + bad +
                         "\" is not a pin mode: use raw (pinned layers decoded once, at load), "
                         "compressed (kept compressed, decoded at each use: a budget pins more "
                         "layers) or measured (compressed where a measurement at load says it "
                         "pays; the default)");
        }
    }
}

void TestCliSupport::samplingFollowsTheSeed() {
    k3cli::SamplingArgs a;
    QCOMPARE(k3cli::resolveSampling(a).sampling, false); // greedy by default
    a.seed = 5;                                          // any sampling flag turns it on
    k3cli::ResolvedSampling r = k3cli::resolveSampling(a);
    QCOMPARE(r.sampling, true);
    QCOMPARE(r.temperature, 1.0f);
    QCOMPARE(r.topP, 0.95f);
    QCOMPARE(r.seed, std::uint64_t(5));
    a.topP = 0.5;
    QCOMPARE(k3cli::resolveSampling(a).topP, 0.5f);
    a.greedy = true; // --greedy wins
    QCOMPARE(k3cli::resolveSampling(a).sampling, false);
    k3cli::SamplingArgs t;
    t.temperature = 0.0; // temperature 0 is argmax
    QCOMPARE(k3cli::resolveSampling(t).sampling, false);
}

void TestCliSupport::terminalSafeEscapesControls() {
    QCOMPARE(k3cli::terminalSafe("a\x1b[2Jb\n\tc"), std::string("a\\x1b[2Jb\n\tc"));
    QCOMPARE(k3cli::terminalSafe("\r\x7f"), std::string("\\x0d\\x7f"));
    QCOMPARE(k3cli::terminalSafe("x\xc2\x9b"
                                 "31m"),
             std::string("x\\u009b31m")); // C1 CSI
    QCOMPARE(k3cli::terminalSafe("caf\xc3\xa9 \xc2\xa0"), std::string("caf\xc3\xa9 \xc2\xa0"));
    // Issue 35 item 21: hidden format characters in a hub file name: U+202E shows
    // "model-evil\u202Ensafetensors.exe" as if it ended in ".safetensors".
    QCOMPARE(k3cli::terminalSafe("evil\xe2\x80\xae"
                                 "exe.safetensors"),
             std::string("evil\\u202eexe.safetensors"));
    QCOMPARE(k3cli::terminalSafe("a\xe2\x81\xa6"
                                 "b\xe2\x81\xa9"
                                 "c\xe2\x80\x8b"
                                 "d\xef\xbb\xbf"
                                 "e\xe2\x80\xa8"
                                 "f\xd8\x9c"),
             std::string("a\\u2066b\\u2069c\\u200bd\\ufeffe\\u2028f\\u061c"));
    QCOMPARE(k3cli::terminalSafe("tag\xf3\xa0\x81\x81"), std::string("tag\\U000e0041"));
    // Joiners stay (scripts and emoji need them), as do other letters and invalid bytes.
    const std::string family =
        "\xf0\x9f\x91\xa9\xe2\x80\x8d\xf0\x9f\x91\xa7 \xe0\xa4\x95\xe2\x80\x8c";
    QCOMPARE(k3cli::terminalSafe(family), family);
    QCOMPARE(k3cli::terminalSafe("x\xe2\x80"), std::string("x\xe2\x80"));
}

void TestCliSupport::formatters() {
    // The CLI writes sizes with the engine's formatter (one format for the plan, the
    // advice and the download progress): two decimals from KB up.
    QCOMPARE(k3::formatBytes(8'240'000'000ull), std::string("8.24 GB"));
    QCOMPARE(k3::formatBytes(1'500'000ull), std::string("1.50 MB"));
    QCOMPARE(k3::formatBytes(12'000ull), std::string("12.00 KB"));
    QCOMPARE(k3::formatBytes(17ull), std::string("17 B"));
    QCOMPARE(k3cli::cliAdvice(
                 k3::MemoryRefusal("x", k3::MemoryRefusal::Reason::TrunkTooSmall, 25'500'000ull)),
             std::string(" Raise --trunk-gb to at least 25.50 MB (or choose a larger --preset)."));
    QCOMPARE(k3cli::formatDuration(0.42), std::string("0.42 s"));
    QCOMPARE(k3cli::formatDuration(192), std::string("3 min 12 s"));
    QCOMPARE(k3cli::formatDuration(3840), std::string("1 h 04 min"));
    QVERIFY(k3cli::peakRssBytes() > 100000);
}

void TestCliSupport::memoryRefusalNamesTheSettingAndTheCliTheFlag() {
    // The engine words its refusal without the CLI's flags (the app shows it too); the CLI
    // adds the flag that asked for it, found by applying the flags in order.
    using Kind = k3::MemoryFlag::Kind;
    struct Case {
        std::vector<k3::MemoryFlag> flags;
        std::uint64_t available;
        std::string setting;
        std::string advice;
    };
    const Case cases[] = {
        {{{Kind::CacheGB, "", 2}, {Kind::Preset, "auto", 0}},
         2'000'000'000ull,
         "the automatic preset finds under 4 GB available on this machine; no preset fits",
         " (--preset auto; k3 --list-presets shows the presets)"},
        {{{Kind::Preset, "auto", 0}},
         0,
         "the automatic preset needs the available memory, which is unknown here (no "
         "MemAvailable); pick a preset by name",
         " (--preset auto; k3 --list-presets shows the presets)"},
        {{{Kind::Preset, "laptop", 0}, {Kind::TrunkGB, "", -1}},
         0,
         "the trunk budget -1.000000 GB is not a size between 0 and 1e6 GB",
         " (--trunk-gb)"},
        {{{Kind::CacheGB, "", std::nan("")}},
         0,
         "the expert-cache budget nan GB is not a size between 0 and 1e6 GB",
         " (--cache-gb)"},
    };
    for (const Case& c : cases) {
        try {
            k3::resolveMemoryFlags(c.flags, c.available);
            QFAIL("the flags were accepted");
        } catch (const k3::MemoryRefusal& e) {
            QCOMPARE(std::string(e.what()), c.setting);
            QVERIFY2(std::string(e.what()).find("--") == std::string::npos, e.what());
        }
        QCOMPARE(k3cli::memoryFlagAdvice(c.flags, c.available), c.advice);
    }
    const std::vector<k3::MemoryFlag> fine{{Kind::Preset, "laptop", 0}};
    QCOMPARE(k3cli::memoryFlagAdvice(fine, 0), std::string());
}

void TestCliSupport::interruptHandledOnAnotherThreadEndsThePromptWait() {
    // The main thread blocks SIGINT, so the press is handled on another thread and the
    // prompt's read is never interrupted (EINTR): only the handler's pipe can end the wait.
    k3cli::installInterruptHandler(false);
    PipedStdin in;
    QVERIFY(in.keys >= 0);
    sigset_t sigint, old;
    sigemptyset(&sigint);
    sigaddset(&sigint, SIGINT);
    pthread_sigmask(SIG_BLOCK, &sigint, &old);
    const int seen = k3cli::interruptCount();
    const pid_t waiter = pid_t(::syscall(SYS_gettid));
    std::promise<void> returned;
    std::thread presser([&, done = returned.get_future()] {
        pthread_sigmask(SIG_UNBLOCK, &sigint, nullptr);
        // Pressed once the prompt waits (the main thread sleeps in poll()), not after a
        // guessed delay; the deadline is a hang guard.
        for (int i = 0; i < 30000 && !sleepsInPoll(waiter); ++i)
            std::this_thread::sleep_for(std::chrono::milliseconds(1));
        raise(SIGINT); // handled on this thread
        // Without the pipe the prompt would wait for this line instead: typed once the
        // prompt has returned (or after a 30 s hang guard, to fail rather than hang).
        done.wait_for(std::chrono::seconds(30));
        in.type("too late\n");
    });
    std::string line;
    const k3cli::PromptInput got = k3cli::readPromptLine(line, seen);
    returned.set_value();
    presser.join();
    pthread_sigmask(SIG_SETMASK, &old, nullptr);
    QCOMPARE(int(got), int(k3cli::PromptInput::Interrupted));
    QCOMPARE(k3cli::interruptCount(), seen + 1);
    QCOMPARE(int(k3cli::readPromptLine(line, seen + 1)), int(k3cli::PromptInput::Line));
    QCOMPARE(line, std::string("too late"));
}

void TestCliSupport::interruptBeforeTheWaitIsSeen() {
    k3cli::installInterruptHandler(false);
    PipedStdin in;
    const int seen = k3cli::interruptCount();
    raise(SIGINT); // pressed before the prompt waits
    std::string line;
    QCOMPARE(int(k3cli::readPromptLine(line, seen)), int(k3cli::PromptInput::Interrupted));
    in.type("next\n");
    QCOMPARE(int(k3cli::readPromptLine(line, seen + 1)), int(k3cli::PromptInput::Line));
    QCOMPARE(line, std::string("next"));
}

// Last: the end of stdin is remembered for the rest of the process.
void TestCliSupport::promptReadsLinesThenTheEnd() {
    PipedStdin in;
    in.type("first\nsecond\nno newline");
    close(in.keys);
    in.keys = -1;
    const int seen = k3cli::interruptCount();
    std::string line;
    QCOMPARE(int(k3cli::readPromptLine(line, seen)), int(k3cli::PromptInput::Line));
    QCOMPARE(line, std::string("first"));
    QCOMPARE(int(k3cli::readPromptLine(line, seen)), int(k3cli::PromptInput::Line));
    QCOMPARE(line, std::string("second"));
    QCOMPARE(int(k3cli::readPromptLine(line, seen)), int(k3cli::PromptInput::Line));
    QCOMPARE(line, std::string("no newline"));
    QCOMPARE(int(k3cli::readPromptLine(line, seen)), int(k3cli::PromptInput::End));
}

QTEST_GUILESS_MAIN(TestCliSupport)
#include "tst_clisupport.moc"
