// One resumable transfer of one file: the partial on disk re-hashed, a Range request,
// the curl callbacks that write and hash the body, and what the result means.

#include "hub/Downloader.hpp"

#include "k3/fault_injection.hpp"
#include "platform/Platform.hpp"

#include <curl/curl.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

namespace k3::download {

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

    // libcurl's callbacks (C function pointers), with `user` this Transfer.
    static size_t onHeader(char* data, size_t size, size_t count, void* user);
    static size_t onWrite(char* data, size_t size, size_t count, void* user);
    static int onXfer(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t);
};

size_t Transfer::onHeader(char* data, size_t size, size_t count, void* user) {
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

size_t Transfer::onWrite(char* data, size_t size, size_t count, void* user) {
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
            if (!platform::truncateStream(t->out, 0) || std::fseek(t->out, 0, SEEK_SET) != 0) {
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

int Transfer::onXfer(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
    auto* t = static_cast<Transfer*>(user);
    return t->downloader->stopping() ? 1 : 0;
}

namespace {

// Why the opened partial file is not one to write (empty: it is a regular file, whose
// facts are then in `st`).
std::string notWritableBecause(const platform::File& file, platform::FileInfo& st) {
    using platform::FileType;
    if (!file.valid())
        return errno == ELOOP ? "it is a symbolic link; k3 writes only regular files (remove it)"
                              : std::strerror(errno);
    if (!file.info(st)) return std::strerror(errno);
    if (st.type != FileType::Regular)
        return std::string("it is not a regular file (") +
               (st.type == FileType::Fifo         ? "a FIFO"
                : st.type == FileType::Directory  ? "a directory"
                : st.type == FileType::CharDevice ? "a character device"
                                                  : "a special file") +
               "); k3 writes only regular files (remove it)";
    return {};
}

} // namespace

// The partial file opened for appending, the hash brought up to the bytes already on
// disk. Null with `early` set when the attempt ends here (done, retry, cancelled, fatal).
std::FILE* Downloader::openPartial(Job& job, const fs::path& partial, hub::Sha256& hash,
                                   std::uint64_t& hashedBytes, std::uint64_t& offset,
                                   Outcome& early) {
    // Only a regular file is written: NoFollow refuses a planted symlink (its target
    // would be written from the resume offset), NoWaitOnOpen keeps a FIFO from blocking
    // the open, and the file's type refuses it and any other non-regular file before a
    // byte is written.
    platform::File file =
        platform::File::open(partial,
                             platform::open::ReadWrite | platform::open::Create |
                                 platform::open::NoFollow | platform::open::NoWaitOnOpen,
                             0666);
    platform::FileInfo st;
    const std::string refusal = notWritableBecause(file, st);
    if (!refusal.empty()) {
        file.close();
        fail(job, HubErrorKind::Io, "cannot write " + partial.string() + ": " + refusal, true);
        early = Outcome::Fatal;
        return nullptr;
    }
    offset = st.size;
    if (offset > job.file.size) {
        message(job.file.name + ": partial file is larger than the file, starting over");
        if (!file.truncate(0)) {
            const std::string why = std::strerror(errno);
            file.close();
            fail(job, HubErrorKind::Io, "cannot write " + partial.string() + ": " + why, true);
            early = Outcome::Fatal;
            return nullptr;
        }
        offset = 0;
    }
    std::FILE* out = file.releaseToStdio("r+b");
    if (!out) {
        file.close();
        fail(job, HubErrorKind::Io, "cannot write " + partial.string(), true);
        early = Outcome::Fatal;
        return nullptr;
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
                early = stopping() ? Outcome::Cancelled : Outcome::Retry;
                return nullptr;
            }
        }
    }
    std::fseek(out, 0, SEEK_END);
    setState(job, FileState::Downloading, offset);
    if (offset == job.file.size) {
        std::fclose(out);
        early = Outcome::Done;
        return nullptr;
    }
    if (offset > 0) {
        job.result.resumed = true;
        message(job.file.name + ": resuming at byte " + std::to_string(offset));
    }
    return out;
}

Outcome Downloader::attempt(Job& job, hub::Sha256& hash, std::uint64_t& hashedBytes,
                            std::string& error, bool& progressed) {
    const fs::path partial = dest_ / (job.file.name + ".partial");
    std::uint64_t offset = 0;
    Outcome early = Outcome::Done;
    std::FILE* out = openPartial(job, partial, hash, hashedBytes, offset, early);
    if (out == nullptr) return early;

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
    char errorBuffer[CURL_ERROR_SIZE] = {0};
    hub::configureCurl(curl, url, token_, errorBuffer);
    curl_easy_setopt(curl, CURLOPT_CONNECTTIMEOUT, options_.connectTimeoutSeconds);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_LIMIT, 1024L);
    curl_easy_setopt(curl, CURLOPT_LOW_SPEED_TIME, options_.stallTimeoutSeconds);
    curl_easy_setopt(curl, CURLOPT_HEADERFUNCTION, Transfer::onHeader);
    curl_easy_setopt(curl, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(curl, CURLOPT_WRITEFUNCTION, Transfer::onWrite);
    curl_easy_setopt(curl, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(curl, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(curl, CURLOPT_XFERINFOFUNCTION, Transfer::onXfer);
    curl_easy_setopt(curl, CURLOPT_XFERINFODATA, &t);
    if (offset > 0) curl_easy_setopt(curl, CURLOPT_RANGE, range.c_str());
    CURLcode rc = curl_easy_perform(curl);
    long status = 0;
    curl_easy_getinfo(curl, CURLINFO_RESPONSE_CODE, &status);
    curl_easy_cleanup(curl);
    bool closed = std::fclose(out) == 0;
    if (!closed && !t.writeErrno) t.writeErrno = errno;
    progressed = t.written > 0;
    return judgeTransfer(job, t, int(rc), status, url, errorBuffer, closed, error);
}

// What a finished transfer means: done, worth another attempt, or a failure to report.
// Long on purpose: one case per way a transfer ends, judged in this order (the first
// that applies decides); split, that order would be spread over several functions.
Outcome Downloader::judgeTransfer(Job& job, const Transfer& t, int curlCode, long status,
                                  const std::string& url, const char* curlError, bool closed,
                                  std::string& error) {
    const fs::path partial = dest_ / (job.file.name + ".partial");
    const auto rc = CURLcode(curlCode);
    std::error_code ec;
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
                 "): " + (curlError[0] ? std::string(curlError) : curl_easy_strerror(rc)) +
                 (rc == CURLE_TOO_MANY_REDIRECTS ? " (a redirect loop)"
                                                 : " (a redirect to a refused URL)") +
                 "; not retried",
             false);
        return Outcome::Fatal;
    }
    if (rc != CURLE_OK) {
        error = url + ": " + (curlError[0] ? std::string(curlError) : curl_easy_strerror(rc));
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

} // namespace k3::download
