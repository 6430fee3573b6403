// The download job: plan (listing, partial-model filter, disk space), then worker
// threads that each run one file at a time through resumable curl transfers.

#include "hub/Downloader.hpp"

#include "k3/fault_injection.hpp"
#include "k3/memory_plan.hpp"
#include "platform/Platform.hpp"

#include <curl/curl.h>
#include <openssl/crypto.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <mutex>
#include <set>
#include <sstream>
#include <thread>

namespace k3::download {
namespace {

constexpr const char* kIndexName = "model.safetensors.index.json";

// The outermost folder of `dir` that does not exist yet (empty: dir exists).
fs::path firstMissingAncestor(const fs::path& dir) {
    std::error_code ec;
    fs::path missing;
    for (fs::path p = fs::absolute(dir, ec); !p.empty() && !fs::exists(p, ec);
         p = p.parent_path()) {
        missing = p;
        if (p == p.parent_path()) break;
    }
    return missing;
}

std::string tokenOrEmpty(const DownloadOptions& options) {
    try {
        return resolveToken(options);
    } catch (const HubError&) {
        return {};
    }
}

} // namespace

// The constructor must not throw: a refused token is reported by run() (fetchFileList
// resolves it again and throws), so nothing is sent with it.
Downloader::Downloader(const DownloadOptions& options, DownloadObserver* observer,
                       const std::atomic<bool>* cancel)
    : options_(options), observer_(observer), cancel_(cancel), token_(tokenOrEmpty(options)),
      endpoint_(resolveEndpoint(options)) {}

void Downloader::message(const std::string& line) {
    if (!observer_) return;
    std::lock_guard lock(mutex_);
    observer_->onMessage(redactSecret(line, token_));
}

void Downloader::report(Job& job, bool force) {
    std::lock_guard lock(mutex_);
    auto now = Clock::now();
    if (!force && now - job.lastReport < std::chrono::milliseconds(100)) return;
    job.lastReport = now;
    if (!observer_) return;
    FileProgress file;
    file.name = job.file.name;
    file.state = job.result.state;
    file.bytesDone = job.bytesOnDisk;
    file.bytesTotal = job.file.size;
    double fileSeconds = std::chrono::duration<double>(now - job.started).count();
    if (fileSeconds > 0 && job.result.state == FileState::Downloading)
        file.bytesPerSecond = double(job.transferred) / fileSeconds;
    observer_->onFileProgress(file);
    if (!force && now - lastOverall_ < std::chrono::milliseconds(100)) return;
    lastOverall_ = now;
    OverallProgress all;
    all.bytesTotal = bytesTotal_;
    all.filesTotal = jobs_.size();
    for (const Job& j : jobs_) {
        all.bytesDone += j.bytesOnDisk;
        if (j.result.state == FileState::Done) ++all.filesDone;
    }
    double seconds = std::chrono::duration<double>(now - start_).count();
    if (seconds > 0) all.bytesPerSecond = double(transferred_) / seconds;
    if (all.bytesPerSecond > 0)
        all.etaSeconds =
            double(all.bytesTotal - std::min(all.bytesDone, all.bytesTotal)) / all.bytesPerSecond;
    observer_->onOverallProgress(all);
}

void Downloader::setState(Job& job, FileState state, std::uint64_t bytesOnDisk) {
    {
        std::lock_guard lock(mutex_);
        job.result.state = state;
        job.bytesOnDisk = bytesOnDisk;
    }
    report(job, true);
}

void Downloader::fail(Job& job, HubErrorKind kind, const std::string& error, bool fatal) {
    {
        std::lock_guard lock(mutex_);
        job.result.state = FileState::Failed;
        job.result.error = redactSecret(error, token_);
        if (firstError_.empty()) {
            firstError_ = job.result.error;
            firstKind_ = kind;
        }
    }
    if (fatal) fatal_ = true;
    message("failed: " + error);
    report(job, true);
}

bool Downloader::sleepUnlessStopped(double seconds) {
    auto until = Clock::now() + std::chrono::duration<double>(seconds);
    while (Clock::now() < until) {
        if (stopping()) return false;
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
    }
    return !stopping();
}

std::vector<HubFile> Downloader::selectFiles(std::vector<HubFile> listing, DownloadResult& result) {
    std::vector<HubFile> flat;
    for (auto& file : listing) {
        // The checkpoint is a flat folder; nested files (README figures) are not part of it.
        if (file.name.find('/') != std::string::npos) {
            result.skipped.push_back(file.name + " (not in the flat checkpoint layout)");
            continue;
        }
        flat.push_back(std::move(file));
    }
    if (!options_.only.empty()) {
        std::set<std::string> wanted(options_.only.begin(), options_.only.end());
        std::vector<HubFile> picked;
        for (auto& file : flat) {
            if (wanted.erase(file.name))
                picked.push_back(file);
            else
                result.skipped.push_back(file.name + " (not asked for)");
        }
        if (!wanted.empty())
            throw HubError(HubErrorKind::NotFound, "\"" + *wanted.begin() + "\" is not in " +
                                                       options_.repo + "@" + options_.revision);
        flat = std::move(picked);
    }
    if (options_.layers <= 0) return flat;

    // Partial model: fetch the index first, then keep only the shards it names.
    auto index = std::find_if(flat.begin(), flat.end(),
                              [](const HubFile& f) { return f.name == kIndexName; });
    if (index == flat.end())
        throw HubError(HubErrorKind::NotFound, std::string("a partial download needs ") +
                                                   kIndexName + ", which " + options_.repo +
                                                   " does not list");
    jobs_.clear();
    jobs_.push_back(Job{*index, {}, 0, {}, {}, 0});
    bytesTotal_ = index->size;
    next_ = 0;
    worker();
    if (jobs_[0].result.state != FileState::Done)
        throw HubError(firstKind_ == HubErrorKind::None ? HubErrorKind::Network : firstKind_,
                       firstError_.empty() ? "could not fetch the index" : firstError_);
    std::ifstream in(dest_ / kIndexName, std::ios::binary);
    std::stringstream text;
    text << in.rdbuf();
    std::vector<std::string> shards = shardsForLayers(text.str(), options_.layers);
    std::set<std::string> need(shards.begin(), shards.end());
    std::vector<HubFile> picked;
    for (auto& file : flat) {
        bool isShard = file.name.size() > 12 &&
                       file.name.compare(file.name.size() - 12, 12, ".safetensors") == 0;
        if (!isShard || need.erase(file.name))
            picked.push_back(file);
        else
            result.skipped.push_back(file.name + " (not needed for the first " +
                                     std::to_string(options_.layers) + " layers)");
    }
    if (!need.empty())
        throw HubError(HubErrorKind::BadListing, std::string(kIndexName) + " names shard \"" +
                                                     *need.begin() +
                                                     "\" that the repo does not list");
    return picked;
}

void Downloader::checkDiskSpace() {
    std::uint64_t needed = 0;
    for (const Job& job : jobs_) {
        std::error_code ec;
        fs::path final = dest_ / job.file.name;
        fs::path partial = dest_ / (job.file.name + ".partial");
        std::uint64_t have = 0;
        if (fs::file_size(final, ec) == job.file.size && !ec)
            have = job.file.size;
        else if (auto p = fs::file_size(partial, ec); !ec && p <= job.file.size)
            have = p;
        // parseFileList() refused listings whose sizes wrap; checked again all the same,
        // since a wrapped sum would pass the comparison below.
        if (__builtin_add_overflow(needed, job.file.size - have, &needed))
            throw HubError(HubErrorKind::BadListing,
                           "the listed sizes add up to more than 2^64 bytes; the listing is not "
                           "believable");
    }
    const std::optional<std::uint64_t> diskFree = platform::freeDiskBytes(dest_);
    if (!diskFree)
        throw HubError(HubErrorKind::Io, "cannot read the free space of " + dest_.string());
    std::uint64_t free = *diskFree;
    if (options_.freeBytesForTests) free = *options_.freeBytesForTests;
    if (free < needed) {
        auto size = [](std::uint64_t b) {
            char text[32];
            if (b < 1'000'000'000'000ull) return formatBytes(b);
            std::snprintf(text, sizeof text, "%.2f TB", double(b) / 1e12);
            return std::string(text);
        };
        throw HubError(HubErrorKind::DiskSpace, "not enough free space: the download needs " +
                                                    size(needed) + ", the disk at " +
                                                    dest_.string() + " has " + size(free) +
                                                    " free (short by " + size(needed - free) +
                                                    "); free some space or choose another folder");
    }
}

void Downloader::worker() {
    while (true) {
        Job* job = nullptr;
        {
            std::lock_guard lock(mutex_);
            if (next_ >= jobs_.size()) return;
            job = &jobs_[next_++];
        }
        if (stopping()) return;
        try {
            runJob(*job);
        } catch (const HubError& error) {
            fail(*job, error.hubKind(), job->file.name + ": " + error.what(), true);
        } catch (const std::exception& error) {
            fail(*job, HubErrorKind::Io, job->file.name + ": " + error.what(), true);
        }
    }
}

void Downloader::runJob(Job& job) {
    fs::path final = dest_ / job.file.name;
    fs::path partial = dest_ / (job.file.name + ".partial");
    fs::path corrupt = dest_ / (job.file.name + ".corrupt");
    job.result.name = job.file.name;
    job.result.expectedSize = job.file.size;
    job.result.expectedSha256 = job.file.sha256;
    job.started = Clock::now();
    std::error_code ec;
    if (fs::exists(final, ec)) {
        std::uint64_t size = fs::file_size(final, ec);
        if (!ec && size == job.file.size) {
            setState(job, FileState::Verifying, size);
            std::string sha = job.file.sha256.empty() ? "" : sha256OfFile(final);
            const bool blobOk =
                job.file.gitBlobSha1.empty() || gitBlobSha1OfFile(final) == job.file.gitBlobSha1;
            if (sha == job.file.sha256 && blobOk) {
                job.result.actualSize = size;
                job.result.actualSha256 = sha;
                setState(job, FileState::Done, size);
                return;
            }
        }
        fs::rename(final, corrupt, ec);
        setState(job, FileState::Queued, 0);
        message(job.file.name + ": the existing file does not match the hub, moved aside to " +
                corrupt.filename().string() + " and downloading again");
    }

    hub::Sha256 hash;
    std::uint64_t hashedBytes = 0;
    int failures = 0;
    while (true) {
        if (stopping()) {
            setState(job, FileState::Queued, job.bytesOnDisk);
            return;
        }
        std::string error;
        bool progressed = false;
        Outcome outcome = attempt(job, hash, hashedBytes, error, progressed);
        if (outcome == Outcome::Done) return finish(job, hash);
        if (outcome == Outcome::Cancelled) {
            setState(job, FileState::Queued, job.bytesOnDisk);
            return;
        }
        if (outcome == Outcome::Fatal) return; // attempt() already called fail()
        // A retry that moved bytes resets the budget: slow but steady links finish.
        failures = progressed ? 1 : failures + 1;
        if (failures > options_.maxRetries) {
            fail(job, HubErrorKind::Network,
                 job.file.name + ": giving up after " + std::to_string(options_.maxRetries) +
                     " retries: " + error,
                 false);
            return;
        }
        double wait = std::min(60.0, options_.retryBaseSeconds * std::pow(2.0, failures - 1));
        message(job.file.name + ": " + error + "; retrying in " +
                std::to_string(wait).substr(0, 4) + " s");
        if (!sleepUnlessStopped(wait)) continue;
    }
}

void Downloader::finish(Job& job, hub::Sha256& hash) {
    fs::path final = dest_ / job.file.name;
    fs::path partial = dest_ / (job.file.name + ".partial");
    fs::path corrupt = dest_ / (job.file.name + ".corrupt");
    std::error_code ec;
    setState(job, FileState::Verifying, job.bytesOnDisk);
    std::uint64_t size = fs::file_size(partial, ec);
    job.result.actualSize = ec ? 0 : size;
    job.result.actualSha256 = hash.hexDigest();
    std::string problem;
    if (ec || size != job.file.size)
        problem = "size " + std::to_string(job.result.actualSize) + " bytes, the hub lists " +
                  std::to_string(job.file.size);
    else if (!job.file.sha256.empty() && job.result.actualSha256 != job.file.sha256)
        problem = "sha256 " + job.result.actualSha256 + ", the hub lists " + job.file.sha256;
    else if (job.file.sha256.empty() && !job.file.gitBlobSha1.empty()) {
        const std::string blob = gitBlobSha1OfFile(partial); // small: non-LFS files
        if (blob != job.file.gitBlobSha1)
            problem = "git blob id " + blob + ", the hub lists " + job.file.gitBlobSha1;
    }
    if (!problem.empty()) {
        fs::rename(partial, corrupt, ec);
        fail(job, HubErrorKind::Verification,
             job.file.name + ": verification failed (" + problem + "); moved aside to " +
                 corrupt.filename().string(),
             false);
        return;
    }
    fs::rename(partial, final, ec);
    if (ec) {
        fail(job, HubErrorKind::Io, "cannot rename " + partial.string() + ": " + ec.message(),
             true);
        return;
    }
    setState(job, FileState::Done, size);
}

DownloadResult Downloader::run() {
    DownloadResult result;
    try {
        if (options_.destination.empty())
            throw HubError(HubErrorKind::Io, "no destination folder given");
        dest_ = options_.destination;
        std::error_code ec;
        createdFrom_ = firstMissingAncestor(dest_);
        fs::create_directories(dest_, ec);
        if (ec || !fs::is_directory(dest_))
            throw HubError(HubErrorKind::Io, "cannot create the folder " + dest_.string());
        std::vector<HubFile> listing = fetchFileList(options_);
        std::vector<HubFile> files = selectFiles(std::move(listing), result);
        if (observer_) observer_->onFileList(files);
        jobs_.clear();
        bytesTotal_ = 0;
        for (const HubFile& file : files) {
            jobs_.push_back(Job{file, {}, 0, {}, {}, 0});
            jobs_.back().result.name = file.name;
            jobs_.back().result.expectedSize = file.size;
            jobs_.back().result.expectedSha256 = file.sha256;
            if (__builtin_add_overflow(bytesTotal_, file.size, &bytesTotal_))
                throw HubError(HubErrorKind::BadListing,
                               "the listed sizes add up to more than 2^64 bytes; the listing is "
                               "not believable");
        }
        if (options_.checkDiskSpace) checkDiskSpace();
        next_ = 0;
        int threads = std::clamp(options_.parallel, 1, 64);
        threads = std::min<int>(threads, int(std::max<std::size_t>(jobs_.size(), 1)));
        std::vector<std::thread> pool;
        for (int i = 1; i < threads; ++i) pool.emplace_back([this] { worker(); });
        worker();
        for (auto& thread : pool) thread.join();
    } catch (const HubError& error) {
        if (firstError_.empty()) {
            firstError_ = error.what();
            firstKind_ = error.hubKind();
        }
    } catch (const std::exception& error) {
        if (firstError_.empty()) {
            firstError_ = error.what();
            firstKind_ = HubErrorKind::Io;
        }
    }
    bool cancelled = cancel_ && cancel_->load();
    result.bytesExpected = bytesTotal_;
    result.bytesTransferred = transferred_;
    bool allDone = !jobs_.empty() || firstError_.empty();
    for (Job& job : jobs_) {
        job.result.error = redactSecret(job.result.error, token_);
        if (job.result.state == FileState::Done)
            result.bytesOnDisk += job.result.actualSize;
        else
            allDone = false;
        result.files.push_back(job.result);
    }
    result.errorKind = firstKind_;
    result.error = redactSecret(firstError_, token_);
    if (result.error.empty() && cancelled) {
        result.errorKind = HubErrorKind::Cancelled;
        result.error = "cancelled; the .partial files resume on the next run";
    }
    result.ok = allDone && result.error.empty();
    if (!result.ok && result.errorKind == HubErrorKind::None) {
        result.errorKind = HubErrorKind::Network;
        result.error = "not every file finished";
    }
    if (!result.ok) removeIfNothingFetched();
    message(result.summary());
    return result;
}

// A run that fetched nothing leaves no folder it made: no empty k3model behind a typo.
void Downloader::removeIfNothingFetched() {
    if (createdFrom_.empty()) return;
    std::error_code ec;
    for (fs::path dir = dest_;; dir = dir.parent_path()) {
        if (!fs::is_directory(dir, ec) || !fs::is_empty(dir, ec) || !fs::remove(dir, ec)) return;
        if (dir == createdFrom_ || dir == dir.parent_path()) return;
    }
}

} // namespace k3::download

namespace k3 {

DownloadResult downloadCheckpoint(const DownloadOptions& options, DownloadObserver* observer,
                                  const std::atomic<bool>* cancel) {
    // libcurl and the sha256 leave OpenSSL state (its error queue) in the calling thread.
    // The caller's thread may be a pool thread that lives on (the app's wizard), so the
    // state is released here, not at thread exit; OpenSSL makes it again if needed.
    struct ReleaseOpenSslThreadState {
        ~ReleaseOpenSslThreadState() { OPENSSL_thread_stop(); }
    } release;
    download::Downloader downloader(options, observer, cancel);
    return downloader.run();
}

} // namespace k3
