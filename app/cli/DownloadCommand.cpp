// `k3 download DIR`: a front end over k3::downloadCheckpoint. On a terminal one updating
// line per file in flight plus an overall line (speed, ETA); in a pipe, plain lines at a
// steady pace. The token comes from $HF_TOKEN and is never printed.
#include "CliSupport.hpp"
#include "Commands.hpp"

#include <k3/hub.hpp>
#include <k3/memory_plan.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string>

namespace k3cli {

namespace {

using Clock = std::chrono::steady_clock;

std::string bar(double fraction, int width = 24) {
    const int full = int(std::clamp(fraction, 0.0, 1.0) * width + 0.5);
    return "[" + std::string(std::size_t(full), '#') + std::string(std::size_t(width - full), '.') +
           "]";
}

double fractionOf(std::uint64_t done, std::uint64_t total) {
    return total == 0 ? 0.0 : double(done) / double(total);
}

std::string speed(double bytesPerSecond) {
    return k3::formatBytes(std::uint64_t(std::llround(bytesPerSecond))) + "/s";
}

class DownloadPrinter : public k3::DownloadObserver {
public:
    explicit DownloadPrinter(bool tty) : tty_(tty), lastPlain_(Clock::now()) {}

    void onFileList(const std::vector<k3::HubFile>& files) override {
        std::lock_guard lock(mutex_);
        std::uint64_t total = 0;
        for (const auto& f : files) total += f.size;
        printAbove(std::to_string(files.size()) + " files, " + k3::formatBytes(total));
    }

    void onFileProgress(const k3::FileProgress& p) override {
        std::lock_guard lock(mutex_);
        if (p.state == k3::FileState::Downloading || p.state == k3::FileState::Verifying) {
            files_[p.name] = p;
        } else {
            files_.erase(p.name);
            if (p.state == k3::FileState::Done)
                printAbove("done   " + p.name + " (" + k3::formatBytes(p.bytesTotal) + ")");
            else if (p.state == k3::FileState::Failed)
                printAbove("failed " + p.name);
        }
        redraw(false);
    }

    void onOverallProgress(const k3::OverallProgress& p) override {
        std::lock_guard lock(mutex_);
        overall_ = p;
        haveOverall_ = true;
        if (tty_) {
            redraw(false);
        } else if (Clock::now() - lastPlain_ > std::chrono::seconds(10)) {
            lastPlain_ = Clock::now();
            std::printf("%s\n", overallLine().c_str());
            std::fflush(stdout);
        }
    }

    void onMessage(const std::string& line) override {
        std::lock_guard lock(mutex_);
        printAbove(line);
    }

    void finish() {
        std::lock_guard lock(mutex_);
        files_.clear();
        redraw(true);
    }

private:
    std::string overallLine() const {
        const auto& o = overall_;
        std::string eta = o.etaSeconds < 0 ? "?" : formatDuration(o.etaSeconds);
        char text[256];
        std::snprintf(text, sizeof text, "total %s %5.1f%%  %s / %s  files %zu/%zu  %s  ETA %s",
                      bar(fractionOf(o.bytesDone, o.bytesTotal)).c_str(),
                      100.0 * fractionOf(o.bytesDone, o.bytesTotal),
                      k3::formatBytes(o.bytesDone).c_str(), k3::formatBytes(o.bytesTotal).c_str(),
                      o.filesDone, o.filesTotal, speed(o.bytesPerSecond).c_str(), eta.c_str());
        return text;
    }

    static std::string fileLine(const k3::FileProgress& p) {
        char text[512];
        std::snprintf(text, sizeof text, "  %s %5.1f%%  %s / %s  %s  %s",
                      bar(fractionOf(p.bytesDone, p.bytesTotal), 16).c_str(),
                      100.0 * fractionOf(p.bytesDone, p.bytesTotal),
                      k3::formatBytes(p.bytesDone).c_str(), k3::formatBytes(p.bytesTotal).c_str(),
                      p.state == k3::FileState::Verifying ? "verifying"
                                                          : speed(p.bytesPerSecond).c_str(),
                      terminalSafe(p.name).c_str());
        return text;
    }

    void clearBlock() {
        for (int i = 0; i < drawn_; ++i) std::fputs("\033[1A\033[2K", stdout);
        drawn_ = 0;
    }

    // A log line goes above the live block, which is then drawn again below it. Lines
    // carry hub file names and server messages: never terminal commands.
    void printAbove(const std::string& line) {
        if (tty_) clearBlock();
        std::printf("%s\n", terminalSafe(line).c_str());
        if (tty_) redraw(true);
        std::fflush(stdout);
    }

    void redraw(bool force) {
        if (!tty_) return;
        const auto now = Clock::now();
        if (!force && now - lastDraw_ < std::chrono::milliseconds(200)) return;
        lastDraw_ = now;
        clearBlock();
        for (const auto& [name, p] : files_) {
            std::printf("\033[2K%s\n", fileLine(p).c_str());
            ++drawn_;
        }
        if (haveOverall_) {
            std::printf("\033[2K%s\n", overallLine().c_str());
            ++drawn_;
        }
        std::fflush(stdout);
    }

    bool tty_;
    std::mutex mutex_;
    std::map<std::string, k3::FileProgress> files_;
    k3::OverallProgress overall_;
    bool haveOverall_ = false;
    int drawn_ = 0;
    Clock::time_point lastDraw_{};
    Clock::time_point lastPlain_;
};

} // namespace

int runDownload(const DownloadArgs& args) {
    k3::DownloadOptions options;
    options.destination = args.dir;
    if (!args.repo.empty()) options.repo = args.repo;
    if (!args.revision.empty()) options.revision = args.revision;
    options.endpoint = args.endpoint;
    options.layers = args.layers;
    options.parallel = args.parallel;

    const bool haveToken = std::getenv("HF_TOKEN") && *std::getenv("HF_TOKEN");
    // The endpoint without user:password@: a URL is printed only so.
    std::printf("downloading %s at %s from %s into %s%s\n", terminalSafe(options.repo).c_str(),
                terminalSafe(options.revision).c_str(),
                terminalSafe(k3::withoutUrlCredentials(k3::resolveEndpoint(options))).c_str(),
                terminalSafe(args.dir).c_str(),
                haveToken ? " (using HF_TOKEN from the environment)" : "");
    if (args.layers > 0)
        std::printf("only the shards layers 0..%d need (a layer prefix is not the model)\n",
                    args.layers - 1);
    std::fflush(stdout);

    installInterruptHandler(true);
    DownloadPrinter printer(stdoutIsTty());
    const k3::DownloadResult result = k3::downloadCheckpoint(options, &printer, &cancelFlag());
    printer.finish();
    if (result.ok) return kExitOk;
    if (result.errorKind == k3::HubErrorKind::Cancelled) {
        printError("download stopped; run the same command again to resume");
        return kExitInterrupted;
    }
    std::string hint;
    switch (result.errorKind) {
    case k3::HubErrorKind::Unauthorized:
        hint = " Set HF_TOKEN to a Hugging Face access token.";
        break;
    case k3::HubErrorKind::Forbidden:
        hint = " Accept the model's license on its Hugging Face page, then retry.";
        break;
    case k3::HubErrorKind::Network:
        hint = " Check the network (or --endpoint), then run the same command again: "
               "finished files are kept and partial ones resume.";
        break;
    default:
        break;
    }
    printError("download failed: " + result.error + "." + hint);
    return kExitFailure;
}

} // namespace k3cli
