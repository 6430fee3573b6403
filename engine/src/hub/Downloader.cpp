// The download job: plan (listing, partial-model filter, disk space), then worker
// threads that each run one file at a time through resumable curl transfers.

#include "hub/HubInternal.hpp"

#include "k3/fault_injection.hpp"
#include "k3/memory_plan.hpp"

#include <curl/curl.h>
#include <openssl/crypto.h>
#include <sys/statvfs.h>
#include <unistd.h>

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

namespace k3 {
namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

constexpr const char* kIndexName = "model.safetensors.index.json";

struct Job {
    HubFile file;
    FileResult result;
    std::uint64_t bytesOnDisk = 0; // partial or final, as last seen
    Clock::time_point lastReport{};
    Clock::time_point started{};
    std::uint64_t transferred = 0; // in this run
};

enum class Outcome { Done, Retry, Fatal, Cancelled };

// The constructor must not throw: a refused token is reported by run() (fetchFileList
// resolves it again and throws), so nothing is sent with it.
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

class Downloader {
public:
    Downloader(const DownloadOptions& options, DownloadObserver* observer,
               const std::atomic<bool>* cancel)
        : options_(options), observer_(observer), cancel_(cancel), token_(tokenOrEmpty(options)),
          endpoint_(resolveEndpoint(options)) {}

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

    friend size_t onWrite(char*, size_t, size_t, void*);
    friend size_t onHeader(char*, size_t, size_t, void*);
    friend int onXfer(void*, curl_off_t, curl_off_t, curl_off_t, curl_off_t);

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

// Per-attempt state the curl callbacks see.
struct Transfer {
    Downloader* downloader = nullptr;
    Job* job = nullptr;
    std::FILE* out = nullptr;
    hub::Sha256* hash = nullptr;
    std::uint64_t* hashedBytes = nullptr;
    CURL* curl = nullptr;
    std::uint64_t offset = 0; // where this attempt's body starts in the file
    std::uint64_t written = 0;
    bool rangeAsked = false;
    bool bodyStarted = false;
    bool rangeIgnored = false;
    bool rangeWrong = false;
    bool writeFailed = false;
    bool tooMuch = false; // the server sent more than the listed size (nothing past it written)
    int writeErrno = 0;   // why the write failed (ENOSPC: the disk is full)
    std::string path;     // the .partial file, for the fault-injection test hook
    std::string contentRange;
};

size_t onHeader(char* data, size_t size, size_t count, void* user) {
    auto* t = static_cast<Transfer*>(user);
    std::string line(data, size * count);
    // A redirect brings a second header block: only the last one counts.
    if (line.rfind("HTTP/", 0) == 0) t->contentRange.clear();
    std::string lower = line.substr(0, 14);
    std::transform(lower.begin(), lower.end(), lower.begin(), ::tolower);
    if (lower == "content-range:") {
        std::string value = line.substr(14);
        while (!value.empty() && (value.back() == '\r' || value.back() == '\n')) value.pop_back();
        t->contentRange = value;
    }
    return size * count;
}

size_t onWrite(char* data, size_t size, size_t count, void* user) {
    auto* t = static_cast<Transfer*>(user);
    size_t bytes = size * count;
    if (!t->bodyStarted) {
        t->bodyStarted = true;
        long status = 0;
        curl_easy_getinfo(t->curl, CURLINFO_RESPONSE_CODE, &status);
        if (t->rangeAsked && status == 200) {
            // The whole file is coming again: start the partial over from byte 0.
            t->rangeIgnored = true;
            std::fflush(t->out);
            if (ftruncate(fileno(t->out), 0) != 0 || std::fseek(t->out, 0, SEEK_SET) != 0) {
                t->writeFailed = true;
                return 0;
            }
            t->hash->reset();
            *t->hashedBytes = 0;
            t->offset = 0;
        } else if (t->rangeAsked) {
            unsigned long long first = 0;
            if (std::sscanf(t->contentRange.c_str(), " bytes %llu-", &first) != 1 ||
                first != t->offset) {
                t->rangeWrong = true;
                return 0;
            }
        }
    }
    // Never a byte past the size the listing gave: a server that sends more (a file
    // listed as 10 bytes served as 60 MB) is cut off here, before the disk fills.
    if (t->offset + t->written + bytes > t->job->file.size) {
        t->tooMuch = true;
        t->writeFailed = true;
        return 0;
    }
    if (const auto fault = faultFor(IoKind::Download, t->path, true)) {
        t->writeFailed = true; // the test hook: as if the disk were full (or failing)
        t->writeErrno = *fault == IoFault::NoSpace ? ENOSPC : EIO;
        return 0;
    }
    if (std::fwrite(data, 1, bytes, t->out) != bytes) {
        t->writeFailed = true;
        t->writeErrno = errno;
        return 0;
    }
    try {
        t->hash->update(data, bytes);
    } catch (const HubError&) {
        t->writeFailed = true; // never let an exception cross libcurl's C frames
        return 0;
    }
    *t->hashedBytes += bytes;
    t->written += bytes;
    Downloader* d = t->downloader;
    {
        std::lock_guard lock(d->mutex_);
        d->transferred_ += bytes;
        t->job->bytesOnDisk = t->offset + t->written;
        t->job->transferred += bytes;
    }
    d->report(*t->job, false);
    return bytes;
}

int onXfer(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    auto* t = static_cast<Transfer*>(user);
    return t->downloader->stopping() ? 1 : 0;
}

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
        needed += job.file.size - have;
    }
    struct statvfs info {};
    if (statvfs(dest_.c_str(), &info) != 0)
        throw HubError(HubErrorKind::Io, "cannot read the free space of " + dest_.string());
    std::uint64_t free = std::uint64_t(info.f_bavail) * info.f_frsize;
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
            fail(*job, error.kind(), job->file.name + ": " + error.what(), true);
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

Outcome Downloader::attempt(Job& job, hub::Sha256& hash, std::uint64_t& hashedBytes,
                            std::string& error, bool& progressed) {
    fs::path partial = dest_ / (job.file.name + ".partial");
    std::error_code ec;
    std::uint64_t offset = fs::exists(partial, ec) ? fs::file_size(partial, ec) : 0;
    if (ec) offset = 0;
    if (offset > job.file.size) {
        message(job.file.name + ": partial file is larger than the file, starting over");
        fs::remove(partial, ec);
        offset = 0;
    }
    std::FILE* out = std::fopen(partial.c_str(), offset > 0 ? "r+b" : "wb");
    if (!out) {
        fail(job, HubErrorKind::Io, "cannot write " + partial.string(), true);
        return Outcome::Fatal;
    }
    // The hash must cover exactly the bytes already on disk before more are appended.
    if (hashedBytes != offset) {
        hash.reset();
        hashedBytes = 0;
        if (offset > 0) {
            setState(job, FileState::Verifying, offset);
            std::vector<char> buffer(1 << 20);
            std::uint64_t left = offset;
            while (left > 0) {
                std::size_t want = std::size_t(std::min<std::uint64_t>(left, buffer.size()));
                if (std::fread(buffer.data(), 1, want, out) != want) break;
                hash.update(buffer.data(), want);
                left -= want;
                if (stopping()) break;
            }
            hashedBytes = offset - left;
            if (left > 0) {
                std::fclose(out);
                return stopping() ? Outcome::Cancelled : Outcome::Retry;
            }
        }
    }
    std::fseek(out, 0, SEEK_END);
    setState(job, FileState::Downloading, offset);
    if (offset == job.file.size) {
        std::fclose(out);
        return Outcome::Done;
    }
    if (offset > 0) {
        job.result.resumed = true;
        message(job.file.name + ": resuming at byte " + std::to_string(offset));
    }

    hub::ensureCurl();
    CURL* curl = curl_easy_init();
    Transfer t;
    t.downloader = this;
    t.job = &job;
    t.out = out;
    t.hash = &hash;
    t.hashedBytes = &hashedBytes;
    t.curl = curl;
    t.offset = offset;
    t.rangeAsked = offset > 0;
    t.path = partial.string();
    std::string url = fileUrl(job.file.name);
    std::string range = std::to_string(offset) + "-";
    std::string agent = hub::userAgent();
    char errorBuffer[CURL_ERROR_SIZE] = {0};
    curl_easy_setopt(curl, CURLOPT_URL, url.c_str());
    curl_easy_setopt(curl, CURLOPT_FOLLOWLOCATION, 1L);
    curl_easy_setopt(curl, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(curl, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(curl, CURLOPT_FAILONERROR, 1L);
    curl_easy_setopt(curl, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(curl, CURLOPT_USERAGENT, agent.c_str());
    curl_easy_setopt(curl, CURLOPT_ERRORBUFFER, errorBuffer);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, options_.connectTimeoutSeconds);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, options_.stallTimeoutSeconds);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, onHeader);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, onWrite);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, onXfer);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &t);
    if (offset > 0) curl_easy_setopt(curl, CURLOPT_RANGE, range.c_str());
    if (!token_.empty()) {
        // curl drops the bearer on a redirect to another host (the CDN's URL is signed).
        curl_easy_setopt(curl, CURLOPT_HTTPAUTH, CURLAUTH_BEARER);
        curl_easy_setopt(curl, CURLOPT_XOAUTH2_BEARER, token_.c_str());
    }
    CURLcode rc = curl_easy_perform(curl);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(curl);
    bool closed = std::fclose(out) == 0;
    if (!closed && !t.writeErrno) t.writeErrno = errno;
    progressed = t.written > 0;
    if (t.rangeIgnored) {
        job.result.rangeIgnored = true;
        message(job.file.name + ": the server ignored the Range request, restarted from byte 0");
    }
    if (t.tooMuch) {
        // The bytes written are a prefix of what the server sent, not known to be the
        // file's: they are removed, so no later run resumes from them.
        fs::remove(partial, ec);
        fail(job, HubErrorKind::Verification,
             job.file.name + ": the server sent too much: the hub lists " +
                 std::to_string(job.file.size) + " bytes, the server sent more than that (" +
                 std::to_string(t.offset + t.written) + " written, the next " +
                 "piece would pass the listed size); stopped the transfer and removed " +
                 partial.filename().string(),
             false);
        return Outcome::Fatal;
    }
    if (t.writeFailed || !closed) {
        // What reached the disk stays as NAME.partial (never renamed to NAME: it is
        // not verified); the next run hashes it and resumes with a Range request.
        const bool full = t.writeErrno == ENOSPC;
        fail(job, full ? HubErrorKind::DiskSpace : HubErrorKind::Io,
             "cannot write " + partial.string() + ": " +
                 (t.writeErrno ? std::strerror(t.writeErrno) : "write failed") +
                 (full ? "; free some space and run the download again, it resumes where it "
                         "stopped"
                       : ""),
             true);
        return Outcome::Fatal;
    }
    if (t.rangeWrong) {
        error = "server answered the Range request with \"" + t.contentRange +
                "\", starting the partial over";
        fs::remove(partial, ec);
        return Outcome::Retry;
    }
    if (rc == CURLE_ABORTED_BY_CALLBACK) return Outcome::Cancelled;
    if (rc == CURLE_HTTP_RETURNED_ERROR) {
        error = hub::describeStatus(status, job.file.name + " (" + url + ")");
        if (status == 416) {
            // The partial does not fit the file the server has now: start it over.
            fs::remove(partial, ec);
            return Outcome::Retry;
        }
        if (hub::isTransientStatus(status)) return Outcome::Retry;
        fail(job, hub::kindForStatus(status), error, true);
        return Outcome::Fatal;
    }
    if (rc == CURLE_UNSUPPORTED_PROTOCOL || rc == CURLE_TOO_MANY_REDIRECTS ||
        rc == CURLE_URL_MALFORMAT) {
        // A redirect to file:// (or another refused scheme), a redirect loop or a bad
        // Location is the server's answer, not a network hiccup: retrying gives the same.
        fail(job, HubErrorKind::Http,
             job.file.name + " (" + url +
                 "): " + (errorBuffer[0] ? std::string(errorBuffer) : curl_easy_strerror(rc)) +
                 (rc == CURLE_TOO_MANY_REDIRECTS ? " (a redirect loop)"
                                                 : " (a redirect to a refused URL)") +
                 "; not retried",
             false);
        return Outcome::Fatal;
    }
    if (rc != CURLE_OK) {
        error = url + ": " + (errorBuffer[0] ? std::string(errorBuffer) : curl_easy_strerror(rc));
        return Outcome::Retry;
    }
    std::uint64_t size = t.offset + t.written;
    if (size < job.file.size) {
        // curl said the response was complete (a cut connection is CURLE_PARTIAL_FILE or a
        // timeout, retried above), so the server's file itself is short: retrying would
        // fetch the same bytes forever.
        fail(job, HubErrorKind::Verification,
             job.file.name + ": the server's file ends at byte " + std::to_string(size) +
                 " but the hub lists " + std::to_string(job.file.size) +
                 " bytes (short file); the partial download is kept as " +
                 partial.filename().string(),
             false);
        return Outcome::Fatal;
    }
    return Outcome::Done;
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
            bytesTotal_ += file.size;
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
            firstKind_ = error.kind();
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

} // namespace

DownloadResult downloadCheckpoint(const DownloadOptions& options, DownloadObserver* observer,
                                  const std::atomic<bool>* cancel) {
    // libcurl and the sha256 leave OpenSSL state (its error queue) in the calling thread.
    // The caller's thread may be a pool thread that lives on (the app's wizard), so the
    // state is released here, not at thread exit; OpenSSL makes it again if needed.
    struct ReleaseOpenSslThreadState {
        ~ReleaseOpenSslThreadState() { OPENSSL_thread_stop(); }
    } release;
    Downloader downloader(options, observer, cancel);
    return downloader.run();
}

} // namespace k3
