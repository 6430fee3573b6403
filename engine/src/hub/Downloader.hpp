#pragma once
// The download job's internals, shared by Downloader.cpp (planning, workers, reporting)
// and DownloadTransfer.cpp (one resumable curl transfer of one file).

#include "hub/HubInternal.hpp"

#include <atomic>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <mutex>
#include <string>
#include <vector>

namespace k3::download {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

struct Job {
    HubFile file;
    FileResult result;
    std::uint64_t bytesOnDisk = 0; // partial or final, as last seen
    Clock::time_point lastReport{};
    Clock::time_point started{};
    std::uint64_t transferred = 0; // in this run
};

enum class Outcome { Done, Retry, Fatal, Cancelled };

struct Transfer;

class Downloader {
public:
    Downloader(const DownloadOptions& options, DownloadObserver* observer,
               const std::atomic<bool>* cancel);

    DownloadResult run();

private:
    // Planning.
    std::vector<HubFile> selectFiles(std::vector<HubFile> listing, DownloadResult& result);
    void checkDiskSpace();
    void removeIfNothingFetched();
    // Transfers.
    void worker();
    void runJob(Job& job);
    Outcome attempt(Job& job, hub::Sha256& hash, std::uint64_t& hashedBytes, std::string& error,
                    bool& progressed);
    std::FILE* openPartial(Job& job, const fs::path& partial, hub::Sha256& hash,
                           std::uint64_t& hashedBytes, std::uint64_t& offset, Outcome& early);
    Outcome judgeTransfer(Job& job, const Transfer& t, int curlCode, long status,
                          const std::string& url, const char* curlError, bool closed,
                          std::string& error);
    void finish(Job& job, hub::Sha256& hash);
    // Reporting.
    void message(const std::string& line);
    void report(Job& job, bool force);
    void setState(Job& job, FileState state, std::uint64_t bytesOnDisk);
    void fail(Job& job, HubErrorKind kind, const std::string& error, bool fatal);
    bool stopping() const {
        return fatal_.load() || (cancel_ && cancel_->load(std::memory_order_relaxed));
    }
    bool sleepUnlessStopped(double seconds);
    std::string fileUrl(const std::string& name) const {
        return endpoint_ + "/" + hub::escapePath(options_.repo) + "/resolve/" +
               hub::escapePath(options_.revision) + "/" + hub::escapePath(name);
    }

    friend struct Transfer; // the curl callbacks of one attempt (DownloadTransfer.cpp)

    DownloadOptions options_;
    fs::path createdFrom_; // the outermost folder this run created; empty: none
    DownloadObserver* observer_;
    const std::atomic<bool>* cancel_;
    std::string token_;
    std::string endpoint_;
    fs::path dest_;

    std::vector<Job> jobs_;
    std::mutex mutex_; // guards next_, counters, observer calls, firstError_
    std::size_t next_ = 0;
    std::atomic<bool> fatal_{false};
    HubErrorKind firstKind_ = HubErrorKind::None;
    std::string firstError_;
    std::uint64_t bytesTotal_ = 0;
    std::uint64_t transferred_ = 0;
    Clock::time_point start_ = Clock::now();
    Clock::time_point lastOverall_{};
};

} // namespace k3::download
