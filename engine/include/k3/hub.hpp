#pragma once
// Checkpoint download from a Hugging Face style hub: file list from the model API,
// parallel resumable transfers (NAME.partial + HTTP Range), size and sha256
// verification, and an observer for progress. Shared by `k3 download` and the
// app's setup wizard.
//
// Invariants (each tied to a test in tests/engine/hub/):
// - The token is sent only as "Authorization: Bearer" and never appears in any
//   message, error or result this module produces.
// - A file is renamed to its final name only after its size and sha256 match the
//   API; a mismatch is moved aside to NAME.corrupt.
// - A cancelled or interrupted transfer leaves NAME.partial, and the next run
//   continues it with a Range request; a server that ignores Range restarts it at 0.
// - A file name from the server never escapes the destination folder.

#include "k3/error.hpp"
#include <atomic>
#include <cstdint>
#include <filesystem>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace k3 {

inline constexpr const char* kDefaultHubEndpoint = "https://huggingface.co";
inline constexpr const char* kDefaultHubRepo = "moonshotai/Kimi-K3";
inline constexpr const char* kDefaultHubRevision = "f831ab66814297da540d832a5235f8e904f29d06";

// What went wrong, so the CLI can pick an exit code and the app a hint.
enum class HubErrorKind {
    None,
    Unauthorized, // 401: token missing or invalid
    Forbidden,    // 403: gated repo, the license must be accepted
    NotFound,     // 404: wrong repo, revision or file
    Http,         // another HTTP status
    Network,      // connection, timeout, reset (after retries)
    BadListing,   // the API answer is malformed or names an unsafe file
    DiskSpace,    // not enough free space
    Io,           // cannot write or rename a local file
    Verification, // size or sha256 mismatch
    Cancelled,
};

class HubError : public Error {
public:
    HubError(HubErrorKind kind, const std::string& message)
        : Error(ErrorKind::Hub, message), kind_(kind) {}
    HubErrorKind hubKind() const { return kind_; }

private:
    HubErrorKind kind_;
};

struct HubFile {
    std::string name; // relative to the repo root
    std::uint64_t size = 0;
    std::string sha256; // lowercase hex; empty when the hub gives none (non-LFS file)
    // A non-LFS file's git blob id (SHA-1 of "blob SIZE\0" + content, lowercase hex),
    // from the listing's "blobId"; the check for files without an LFS sha256.
    std::string gitBlobSha1;
};

struct DownloadOptions {
    std::string endpoint; // empty: $HF_ENDPOINT, else kDefaultHubEndpoint
    std::string repo = kDefaultHubRepo;
    std::string revision = kDefaultHubRevision;
    std::string token;                 // empty: $HF_TOKEN (may stay empty)
    std::filesystem::path destination; // created when missing
    int parallel = 4;                  // files transferred at once
    int maxRetries = 6;                // per file, consecutive attempts without progress
    double retryBaseSeconds = 1.0;     // backoff: base * 2^attempt, capped at 60 s
    long connectTimeoutSeconds = 30;
    long stallTimeoutSeconds = 60; // below 1 KiB/s for this long counts as a timeout
    int layers = 0;                // > 0: only the shards layers [0, layers) need
    bool checkDiskSpace = true;
    // Set: the free space the check plans against instead of the disk's (tests).
    std::optional<std::uint64_t> freeBytesForTests;
    std::vector<std::string> only; // non-empty: restrict to these names (tests, retries)
};

enum class FileState { Queued, Downloading, Verifying, Done, Failed };
const char* fileStateName(FileState state);

struct FileProgress {
    std::string name;
    FileState state = FileState::Queued;
    std::uint64_t bytesDone = 0;
    std::uint64_t bytesTotal = 0;
    double bytesPerSecond = 0.0;
};

struct OverallProgress {
    std::uint64_t bytesDone = 0; // on disk, including what earlier runs left
    std::uint64_t bytesTotal = 0;
    double bytesPerSecond = 0.0; // transferred in this run / wall time
    double etaSeconds = -1.0;    // -1 while unknown
    std::size_t filesDone = 0;
    std::size_t filesTotal = 0;
};

// Callbacks arrive on worker threads, one at a time (serialized by the
// downloader). They must not block for long; the app turns them into queued signals.
class DownloadObserver {
public:
    virtual ~DownloadObserver() = default;
    virtual void onFileList(const std::vector<HubFile>& /*files*/) {}
    virtual void onFileProgress(const FileProgress& /*progress*/) {}
    virtual void onOverallProgress(const OverallProgress& /*progress*/) {}
    // Human-readable log lines (retries, skips, resumes); the token is redacted.
    virtual void onMessage(const std::string& /*line*/) {}
};

struct FileResult {
    std::string name;
    FileState state = FileState::Queued;
    std::uint64_t expectedSize = 0;
    std::uint64_t actualSize = 0;
    std::string expectedSha256;
    std::string actualSha256;
    bool resumed = false;      // continued a .partial with a Range request
    bool rangeIgnored = false; // the server answered 200 to a Range request
    std::string error;
};

struct DownloadResult {
    bool ok = false;
    HubErrorKind errorKind = HubErrorKind::None;
    std::string error; // first fatal error, token redacted
    std::vector<FileResult> files;
    std::vector<std::string> skipped; // names in the listing that were not fetched, with why
    std::uint64_t bytesExpected = 0;
    std::uint64_t bytesOnDisk = 0;
    std::uint64_t bytesTransferred = 0; // in this run
    // "files 3/3, bytes 1234/1234 exact, every size and sha256 matches" or what failed.
    std::string summary() const;
};

// The endpoint, repo and revision after applying the environment defaults.
std::string resolveEndpoint(const DownloadOptions& options);
// The token (options.token, else HF_TOKEN). Throws HubError (Unauthorized) when it holds
// a control character (a CR/LF would inject an HTTP header), naming the byte and where.
std::string resolveToken(const DownloadOptions& options);

// GET {endpoint}/api/models/{repo}/revision/{rev}?blobs=true and parse the siblings.
// Throws HubError; refuses unsafe names (absolute, "..", backslash, control chars).
std::vector<HubFile> fetchFileList(const DownloadOptions& options);

// The most files a listing may name: a checkpoint is its shards and a few files (Kimi
// K3's 96 shards + about 10), so a listing of more is refused before anything is made.
inline constexpr std::size_t kMaxListedFiles = 2000;

// Parses the model API's JSON ("siblings": [{"rfilename","size","lfs":{"sha256","size"}}]).
// Refuses more than kMaxListedFiles entries (BadListing, naming the count and the cap).
// Throws HubError(BadListing) naming the offending entry.
std::vector<HubFile> parseFileList(const std::string& json);

// True for a plain file name that stays inside the destination folder when joined.
bool isSafeFileName(const std::string& name);

// Shard files that tensors of layers [0, layers) or outside any layer live in,
// from model.safetensors.index.json text. Throws HubError(BadListing).
std::vector<std::string> shardsForLayers(const std::string& indexJson, int layers);

// Replaces every occurrence of secret (when non-empty) with "***", and removes the
// userinfo of every URL in text (withoutUrlCredentials).
std::string redactSecret(std::string text, const std::string& secret);

// text with the "user:password@" part of every URL in it removed
// ("http://bob:pw@host/x" becomes "http://host/x"): a URL is printed and logged only so.
std::string withoutUrlCredentials(std::string text);

// Lowercase hex sha256 of a file. Throws HubError(Io).
std::string sha256OfFile(const std::filesystem::path& path);
// The git blob id of a file: SHA-1 of "blob SIZE\0" followed by its bytes.
std::string gitBlobSha1OfFile(const std::filesystem::path& path);

// Runs the whole job. Never throws: errors land in the result. cancel (may be null)
// stops every transfer promptly and leaves .partial files to resume later.
DownloadResult downloadCheckpoint(const DownloadOptions& options, DownloadObserver* observer,
                                  const std::atomic<bool>* cancel);

} // namespace k3
