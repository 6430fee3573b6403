#pragma once
// The engine's one door to the operating system. Every OS call the engine makes (files,
// uncached reads, aligned memory, memory totals, peak RSS, disk space, durable renames)
// is defined under engine/src/platform: posix/ (Linux and macOS), linux/, darwin/ and
// win32/. No other engine file includes an OS header; tests/PlatformSeamCheck.cmake
// fails the build otherwise.
//
// Errors keep the POSIX convention on every OS, so callers read one vocabulary: a call
// that fails returns -1 (or false, or an invalid File) and leaves an errno value in
// errno (ENOENT, EINVAL, ENOSPC, ELOOP, EWOULDBLOCK, ...); win32 maps its error codes
// onto those. std::strerror(errno) is the text.
//
// Paths are std::filesystem::path: native narrow (UTF-8) on POSIX, wide on Windows,
// where every call goes through the W functions. pathFromUtf8()/utf8Path() convert.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <optional>
#include <string>
#include <string_view>

namespace k3::platform {

namespace fs = std::filesystem;

// Uncached (O_DIRECT, FILE_FLAG_NO_BUFFERING) reads need offset, length and buffer
// aligned to this; 4096 covers 512-byte and 4K-sector disks alike.
inline constexpr std::size_t kUncachedAlignment = 4096;

// ---- paths ---------------------------------------------------------------------------

fs::path pathFromUtf8(std::string_view utf8);
std::string utf8Path(const fs::path& path);

// ---- what a path or an open file is --------------------------------------------------

enum class FileType { Regular, Directory, Symlink, Fifo, CharDevice, BlockDevice, Socket, Other };

struct FileInfo {
    FileType type = FileType::Other;
    std::uint64_t size = 0;
    // The permission bits with setuid/setgid/sticky (07777). Windows: 0444 or 0666 from
    // the read-only attribute (0777 for folders).
    std::uint32_t permissions = 0;
    std::uint32_t owner = 0, group = 0; // 0 on Windows
    // Together the file's identity: st_dev/st_ino, or Windows' volume serial/file index.
    std::uint64_t device = 0, inode = 0;
    std::uint64_t links = 1;
    std::int64_t modifiedNs = 0, changedNs = 0; // since the epoch (Windows: its own)
};

// stat() (followLinks) or lstat(): false, errno set, when the path cannot be examined.
bool fileInfo(const fs::path& path, FileInfo& info, bool followLinks = true);
// The target a symbolic link names, as written in the link.
bool readLink(const fs::path& link, fs::path& target);
// access(W_OK): this user may open the file for writing.
bool canWrite(const fs::path& path);
// The effective user id (0 on Windows, where FileInfo::owner is 0 as well).
std::uint32_t effectiveUserId();
std::uint64_t processId();

// ---- open files ----------------------------------------------------------------------

namespace open {
enum : unsigned {
    Read = 1u,
    Write = 2u,
    ReadWrite = Read | Write,
    Create = 4u,
    Truncate = 8u,
    // A symbolic link is refused (ELOOP) instead of followed.
    NoFollow = 16u,
    // Bypass the page cache: O_DIRECT (Linux), F_NOCACHE (macOS), FILE_FLAG_NO_BUFFERING
    // + overlapped (Windows). Refused with EINVAL where the filesystem cannot (tmpfs);
    // reads and writes must then be aligned to kUncachedAlignment.
    Uncached = 32u,
    // The open itself never waits (a FIFO without a writer); I/O afterwards blocks.
    NoWaitOnOpen = 64u,
};
}

// An open file, closed when destroyed. Thread-safe for readAt/writeAt (positional);
// read/write use the file position and belong to one thread.
class File {
public:
    File() = default;
    // Invalid (errno set) when the open fails. createPermissions: POSIX mode bits of a
    // file that open::Create makes.
    static File open(const fs::path& path, unsigned flags, std::uint32_t createPermissions = 0644);
    // A new file named `pathTemplate` with its trailing "XXXXXX" replaced (mkstemp);
    // the name it got is written back into pathTemplate. Invalid (errno) on failure.
    static File createTemporary(fs::path& pathTemplate);

    ~File();
    File(File&& other) noexcept;
    File& operator=(File&& other) noexcept;
    File(const File&) = delete;
    File& operator=(const File&) = delete;

    bool valid() const;
    bool info(FileInfo& info) const; // fstat

    // Bytes moved (0 at end of file for reads), or -1 with errno.
    std::int64_t read(void* dst, std::size_t length);
    std::int64_t write(const void* src, std::size_t length);
    std::int64_t readAt(void* dst, std::size_t length, std::uint64_t offset) const;
    std::int64_t writeAt(const void* src, std::size_t length, std::uint64_t offset) const;

    bool truncate(std::uint64_t size);
    // The data and size on the disk itself: fsync; F_FULLFSYNC on macOS, whose fsync
    // stops at the drive's cache; FlushFileBuffers on Windows.
    bool syncToDisk();
    // The replacement of an existing file keeps its owner and mode (no-ops on Windows).
    bool setOwner(std::uint32_t owner, std::uint32_t group);
    bool setPermissions(std::uint32_t permissions);
    // An exclusive advisory lock, not waited for: false with EWOULDBLOCK while another
    // open file holds it. Released by close.
    bool lockExclusiveNoWait();
    // A hint that the file's cached pages will not be read again (they are dropped).
    void dropCachedPages();
    // A hint that [offset, offset + length) is read next (F_RDADVISE on macOS).
    void adviseWillRead(std::uint64_t offset, std::size_t length) const;

    // Closes now: false (errno) when the close reports a delayed write error.
    bool close();
    // Hands the file to C stdio (fdopen); the File is invalid after a success.
    std::FILE* releaseToStdio(const char* mode);
    // The descriptor (POSIX) or HANDLE (Windows), for an asynchronous reader.
    std::intptr_t nativeHandle() const { return handle_; }
    // Gives up the handle without closing it (invalid afterwards); adoptNative() takes
    // one back. For a holder that keeps the handle as a plain integer.
    std::intptr_t releaseNative();
    static File adoptNative(std::intptr_t handle);

private:
    explicit File(std::intptr_t handle, bool overlapped = false)
        : handle_(handle), overlapped_(overlapped) {}
    std::intptr_t handle_ = -1;
    bool overlapped_ = false;    // Windows: opened FILE_FLAG_OVERLAPPED
    std::uint64_t position_ = 0; // Windows overlapped handles keep no position
};

// std::fopen of a path: _wfopen on Windows, whose fopen reads the ANSI code page.
std::FILE* openStream(const fs::path& path, const char* mode);
// Sizes a stdio stream's file, after flushing what stdio holds (a download restarted
// from byte 0).
bool truncateStream(std::FILE* stream, std::uint64_t size);

// ---- names ---------------------------------------------------------------------------

// Renames `from` over `to` atomically, then makes the rename durable: the folder's entry
// fsynced (MoveFileExW with MOVEFILE_WRITE_THROUGH on Windows). The file's own bytes are
// the caller's to sync first (File::syncToDisk). False, errno set, when the rename fails.
bool replaceFile(const fs::path& from, const fs::path& to);
// fsync of a folder, so a rename or create in it survives a crash. Best effort.
void syncDirectory(const fs::path& dir);
bool removeFile(const fs::path& path);

// ---- memory and disk -----------------------------------------------------------------

// Memory aligned to `alignment` (a power of two), freed by freeAligned; null when out of
// memory. Not malloc's: Windows needs its own free for aligned blocks.
void* allocateAligned(std::size_t alignment, std::size_t bytes);
void freeAligned(void* p);
// Asks for transparent huge pages over a large buffer (a hint; failure is harmless).
void adviseHugePages(void* p, std::size_t bytes);

// The largest resident set this process has had, in bytes; 0 when unknown. The one
// source of the figure (getrusage on Linux, task_info on macOS, the peak working set on
// Windows).
std::uint64_t peakResidentBytes();

// Bytes an unprivileged user may still write on the filesystem holding `path`.
std::optional<std::uint64_t> freeDiskBytes(const fs::path& path);

} // namespace k3::platform
