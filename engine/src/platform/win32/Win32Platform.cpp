// Windows' side of the platform layer (platform/Platform.hpp): wide-path W calls,
// FILE_FLAG_NO_BUFFERING with overlapped positional reads, MoveFileExW write-through,
// GlobalMemoryStatusEx, the peak working set and GetDiskFreeSpaceExW. Failures map the
// Win32 error onto the errno values the rest of the engine reads.
#include "k3/system.hpp"
#include "platform/Platform.hpp"

#include "platform/win32/Win32Lean.hpp"
#include <windows.h>

#include <fcntl.h>
#include <io.h>
#include <psapi.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <random>
#include <system_error>
#include <utility>

namespace k3 {

namespace platform {

namespace {

int errnoOf(DWORD error) {
    switch (error) {
    case ERROR_FILE_NOT_FOUND:
    case ERROR_PATH_NOT_FOUND:
    case ERROR_INVALID_DRIVE:
    case ERROR_BAD_NETPATH:
        return ENOENT;
    case ERROR_ACCESS_DENIED:
    case ERROR_SHARING_VIOLATION:
        return EACCES;
    case ERROR_FILE_EXISTS:
    case ERROR_ALREADY_EXISTS:
        return EEXIST;
    case ERROR_DISK_FULL:
    case ERROR_HANDLE_DISK_FULL:
        return ENOSPC;
    case ERROR_INVALID_PARAMETER:
        return EINVAL; // e.g. a misaligned uncached read
    case ERROR_LOCK_VIOLATION:
        return EWOULDBLOCK;
    case ERROR_CANT_RESOLVE_FILENAME:
        return ELOOP;
    case ERROR_NOT_ENOUGH_MEMORY:
    case ERROR_OUTOFMEMORY:
        return ENOMEM;
    case ERROR_DIRECTORY:
        return ENOTDIR;
    case ERROR_DIR_NOT_EMPTY:
        return ENOTEMPTY;
    case ERROR_FILENAME_EXCED_RANGE:
        return ENAMETOOLONG;
    case ERROR_NOT_SAME_DEVICE:
        return EXDEV;
    default:
        return EIO;
    }
}

// Records the last Win32 error as errno; returns `result` for `return fail(...)`.
template <typename T> T fail(T result) {
    errno = errnoOf(::GetLastError());
    return result;
}

HANDLE handleOf(std::intptr_t handle) {
    return reinterpret_cast<HANDLE>(handle);
}

std::intptr_t handleValue(HANDLE handle) {
    return reinterpret_cast<std::intptr_t>(handle); // INVALID_HANDLE_VALUE is -1
}

// FILETIME (100 ns since 1601) as nanoseconds since 1970, as POSIX stat reports.
std::int64_t unixNs(LARGE_INTEGER t) {
    constexpr std::int64_t from1601To1970 = 116444736000000000LL;
    return (t.QuadPart - from1601To1970) * 100;
}

bool infoOfHandle(HANDLE h, FileInfo& info, bool reparseIsLink) {
    const DWORD kind = ::GetFileType(h);
    if (kind == FILE_TYPE_PIPE || kind == FILE_TYPE_CHAR) {
        info = FileInfo{};
        info.type = kind == FILE_TYPE_PIPE ? FileType::Fifo : FileType::CharDevice;
        return true;
    }
    BY_HANDLE_FILE_INFORMATION by{};
    FILE_BASIC_INFO basic{};
    if (!::GetFileInformationByHandle(h, &by) ||
        !::GetFileInformationByHandleEx(h, FileBasicInfo, &basic, sizeof basic))
        return fail(false);
    info = FileInfo{};
    const DWORD attributes = by.dwFileAttributes;
    info.type = (reparseIsLink && (attributes & FILE_ATTRIBUTE_REPARSE_POINT)) ? FileType::Symlink
                : (attributes & FILE_ATTRIBUTE_DIRECTORY)                      ? FileType::Directory
                                                                               : FileType::Regular;
    info.size = (std::uint64_t(by.nFileSizeHigh) << 32) | by.nFileSizeLow;
    info.permissions = info.type == FileType::Directory         ? 0777
                       : (attributes & FILE_ATTRIBUTE_READONLY) ? 0444
                                                                : 0666;
    info.device = by.dwVolumeSerialNumber;
    info.inode = (std::uint64_t(by.nFileIndexHigh) << 32) | by.nFileIndexLow;
    info.links = by.nNumberOfLinks;
    info.modifiedNs = unixNs(basic.LastWriteTime);
    info.changedNs = unixNs(basic.ChangeTime);
    return true;
}

// ReadFile/WriteFile at `offset`, waiting for the result: positional on any handle, and
// the only way to read an overlapped (FILE_FLAG_OVERLAPPED) one.
std::int64_t transferAt(HANDLE h, void* buffer, std::size_t length, std::uint64_t offset,
                        bool writing) {
    OVERLAPPED ov{};
    ov.Offset = DWORD(offset & 0xffffffffu);
    ov.OffsetHigh = DWORD(offset >> 32);
    ov.hEvent = ::CreateEventW(nullptr, TRUE, FALSE, nullptr);
    if (!ov.hEvent) return fail(std::int64_t(-1));
    // One call moves at most 2^31 bytes (rounded down to the uncached alignment).
    const DWORD chunk = DWORD(std::min<std::size_t>(length, std::size_t{1} << 31));
    const BOOL started = writing ? ::WriteFile(h, buffer, chunk, nullptr, &ov)
                                 : ::ReadFile(h, buffer, chunk, nullptr, &ov);
    DWORD moved = 0;
    DWORD error = ERROR_SUCCESS;
    if ((!started && ::GetLastError() != ERROR_IO_PENDING) ||
        !::GetOverlappedResult(h, &ov, &moved, TRUE))
        error = ::GetLastError();
    ::CloseHandle(ov.hEvent);
    if (error == ERROR_HANDLE_EOF && !writing) return 0;
    if (error != ERROR_SUCCESS) {
        errno = errnoOf(error);
        return -1;
    }
    return moved;
}

} // namespace

fs::path pathFromUtf8(std::string_view utf8) {
    return fs::path(std::u8string(utf8.begin(), utf8.end()));
}

std::string utf8Path(const fs::path& path) {
    const std::u8string text = path.u8string();
    return std::string(text.begin(), text.end());
}

bool fileInfo(const fs::path& path, FileInfo& info, bool followLinks) {
    // BACKUP_SEMANTICS opens folders too; OPEN_REPARSE_POINT examines a link itself.
    const DWORD flags =
        FILE_FLAG_BACKUP_SEMANTICS | (followLinks ? 0 : FILE_FLAG_OPEN_REPARSE_POINT);
    HANDLE h = ::CreateFileW(path.c_str(), FILE_READ_ATTRIBUTES,
                             FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, nullptr,
                             OPEN_EXISTING, flags, nullptr);
    if (h == INVALID_HANDLE_VALUE) return fail(false);
    const bool ok = infoOfHandle(h, info, !followLinks);
    const int err = errno;
    ::CloseHandle(h);
    errno = err;
    return ok;
}

bool readLink(const fs::path& link, fs::path& target) {
    std::error_code ec;
    target = fs::read_symlink(link, ec);
    if (ec) {
        errno = errnoOf(DWORD(ec.value()));
        return false;
    }
    return true;
}

bool canWrite(const fs::path& path) {
    const DWORD attributes = ::GetFileAttributesW(path.c_str());
    if (attributes == INVALID_FILE_ATTRIBUTES) return fail(false);
    if (attributes & FILE_ATTRIBUTE_READONLY) {
        errno = EACCES;
        return false;
    }
    return true;
}

std::uint32_t effectiveUserId() {
    return 0;
}

std::uint64_t processId() {
    return ::GetCurrentProcessId();
}

File File::open(const fs::path& path, unsigned flags, std::uint32_t createPermissions) {
    DWORD access = 0;
    if (flags & open::Read) access |= GENERIC_READ;
    if (flags & open::Write) access |= GENERIC_WRITE;
    const bool create = flags & open::Create, truncate = flags & open::Truncate;
    const DWORD disposition = create && truncate ? CREATE_ALWAYS
                              : create           ? OPEN_ALWAYS
                              : truncate         ? TRUNCATE_EXISTING
                                                 : OPEN_EXISTING;
    DWORD attributes = FILE_FLAG_BACKUP_SEMANTICS; // a folder opens, and is then refused by type
    attributes |= (createPermissions & 0222) ? FILE_ATTRIBUTE_NORMAL : FILE_ATTRIBUTE_READONLY;
    const bool uncached = flags & open::Uncached;
    if (uncached) attributes |= FILE_FLAG_NO_BUFFERING | FILE_FLAG_OVERLAPPED;
    if (flags & open::NoFollow) attributes |= FILE_FLAG_OPEN_REPARSE_POINT;
    // DELETE sharing: a lock file is removed while its holder still has it open.
    HANDLE h =
        ::CreateFileW(path.c_str(), access, FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE,
                      nullptr, disposition, attributes, nullptr);
    if (h == INVALID_HANDLE_VALUE) return fail(File());
    File file(handleValue(h), uncached);
    if (flags & open::NoFollow) {
        FILE_ATTRIBUTE_TAG_INFO tag{};
        if (::GetFileInformationByHandleEx(h, FileAttributeTagInfo, &tag, sizeof tag) &&
            (tag.FileAttributes & FILE_ATTRIBUTE_REPARSE_POINT) &&
            tag.ReparseTag == IO_REPARSE_TAG_SYMLINK) {
            file.close();
            errno = ELOOP;
            return File();
        }
    }
    return file;
}

File File::createTemporary(fs::path& pathTemplate) {
    std::wstring name = pathTemplate.native();
    const std::size_t suffix = name.size() >= 6 ? name.size() - 6 : name.size();
    if (name.compare(suffix, std::wstring::npos, L"XXXXXX") != 0) {
        errno = EINVAL;
        return File();
    }
    static const wchar_t letters[] = L"abcdefghijklmnopqrstuvwxyz0123456789";
    std::random_device seed;
    std::mt19937_64 random((std::uint64_t(seed()) << 32) ^ ::GetCurrentProcessId() ^
                           ::GetTickCount64());
    for (int attempt = 0; attempt < 100; ++attempt) {
        for (std::size_t i = suffix; i < name.size(); ++i) name[i] = letters[random() % 36];
        HANDLE h = ::CreateFileW(name.c_str(), GENERIC_READ | GENERIC_WRITE,
                                 FILE_SHARE_READ | FILE_SHARE_WRITE | FILE_SHARE_DELETE, nullptr,
                                 CREATE_NEW, FILE_ATTRIBUTE_NORMAL, nullptr);
        if (h != INVALID_HANDLE_VALUE) {
            pathTemplate = name;
            return File(handleValue(h));
        }
        if (::GetLastError() != ERROR_FILE_EXISTS) return fail(File());
    }
    errno = EEXIST;
    return File();
}

File::~File() {
    if (handle_ != -1) ::CloseHandle(handleOf(handle_));
}

File::File(File&& other) noexcept
    : handle_(std::exchange(other.handle_, -1)), overlapped_(other.overlapped_),
      position_(other.position_) {}

File& File::operator=(File&& other) noexcept {
    if (this != &other) {
        if (handle_ != -1) ::CloseHandle(handleOf(handle_));
        handle_ = std::exchange(other.handle_, -1);
        overlapped_ = other.overlapped_;
        position_ = other.position_;
    }
    return *this;
}

std::intptr_t File::releaseNative() {
    return std::exchange(handle_, -1);
}

File File::adoptNative(std::intptr_t handle) {
    return File(handle);
}

bool File::valid() const {
    return handle_ != -1;
}

bool File::info(FileInfo& info) const {
    return infoOfHandle(handleOf(handle_), info, false);
}

std::int64_t File::read(void* dst, std::size_t length) {
    if (overlapped_) { // no file position of its own: keep one
        const std::int64_t n = transferAt(handleOf(handle_), dst, length, position_, false);
        if (n > 0) position_ += std::uint64_t(n);
        return n;
    }
    DWORD got = 0;
    const DWORD chunk = DWORD(std::min<std::size_t>(length, std::size_t{1} << 31));
    if (!::ReadFile(handleOf(handle_), dst, chunk, &got, nullptr)) {
        if (::GetLastError() == ERROR_BROKEN_PIPE || ::GetLastError() == ERROR_HANDLE_EOF) return 0;
        return fail(std::int64_t(-1));
    }
    return got;
}

std::int64_t File::write(const void* src, std::size_t length) {
    if (overlapped_) {
        const std::int64_t n =
            transferAt(handleOf(handle_), const_cast<void*>(src), length, position_, true);
        if (n > 0) position_ += std::uint64_t(n);
        return n;
    }
    DWORD put = 0;
    const DWORD chunk = DWORD(std::min<std::size_t>(length, std::size_t{1} << 31));
    if (!::WriteFile(handleOf(handle_), src, chunk, &put, nullptr)) return fail(std::int64_t(-1));
    return put;
}

std::int64_t File::readAt(void* dst, std::size_t length, std::uint64_t offset) const {
    return transferAt(handleOf(handle_), dst, length, offset, false);
}

std::int64_t File::writeAt(const void* src, std::size_t length, std::uint64_t offset) const {
    return transferAt(handleOf(handle_), const_cast<void*>(src), length, offset, true);
}

bool File::truncate(std::uint64_t size) {
    FILE_END_OF_FILE_INFO end{};
    end.EndOfFile.QuadPart = static_cast<LONGLONG>(size);
    if (!::SetFileInformationByHandle(handleOf(handle_), FileEndOfFileInfo, &end, sizeof end))
        return fail(false);
    return true;
}

bool File::syncToDisk() {
    if (!::FlushFileBuffers(handleOf(handle_))) return fail(false);
    return true;
}

bool File::setOwner(std::uint32_t, std::uint32_t) {
    return true; // Windows files carry ACLs, which a replacement inherits from its folder
}

bool File::setPermissions(std::uint32_t) {
    return true;
}

bool File::lockExclusiveNoWait() {
    OVERLAPPED whole{};
    if (!::LockFileEx(handleOf(handle_), LOCKFILE_EXCLUSIVE_LOCK | LOCKFILE_FAIL_IMMEDIATELY, 0,
                      MAXDWORD, MAXDWORD, &whole))
        return fail(false);
    return true;
}

void File::dropCachedPages() {
    // No per-file eviction on Windows; uncached handles are the way around the cache.
}

void File::adviseWillRead(std::uint64_t, std::size_t) const {}

bool File::close() {
    if (handle_ == -1) return true;
    if (!::CloseHandle(handleOf(std::exchange(handle_, -1)))) return fail(false);
    return true;
}

std::FILE* File::releaseToStdio(const char* mode) {
    const int fd = ::_open_osfhandle(handle_, _O_RDWR | _O_BINARY);
    if (fd < 0) return nullptr;
    std::FILE* stream = ::_fdopen(fd, mode);
    if (!stream) {
        const int err = errno;
        ::_close(fd); // closes the handle too
        handle_ = -1;
        errno = err;
        return nullptr;
    }
    handle_ = -1;
    return stream;
}

std::FILE* openStream(const fs::path& path, const char* mode) {
    const std::string narrow(mode);
    return ::_wfopen(path.c_str(), std::wstring(narrow.begin(), narrow.end()).c_str());
}

bool truncateStream(std::FILE* stream, std::uint64_t size) {
    std::fflush(stream); // what stdio still holds would land past the new end
    return ::_chsize_s(::_fileno(stream), static_cast<long long>(size)) == 0;
}

void syncDirectory(const fs::path&) {
    // NTFS journals its metadata; MOVEFILE_WRITE_THROUGH makes a rename durable.
}

bool replaceFile(const fs::path& from, const fs::path& to) {
    if (!::MoveFileExW(from.c_str(), to.c_str(),
                       MOVEFILE_REPLACE_EXISTING | MOVEFILE_WRITE_THROUGH))
        return fail(false);
    return true;
}

bool removeFile(const fs::path& path) {
    if (!::DeleteFileW(path.c_str())) return fail(false);
    return true;
}

void* allocateAligned(std::size_t alignment, std::size_t bytes) {
    return ::_aligned_malloc(bytes, alignment);
}

void freeAligned(void* p) {
    ::_aligned_free(p);
}

void adviseHugePages(void*, std::size_t) {
    // Large pages need SeLockMemoryPrivilege and VirtualAlloc(MEM_LARGE_PAGES); not asked.
}

std::uint64_t peakResidentBytes() {
    PROCESS_MEMORY_COUNTERS counters{};
    if (!::GetProcessMemoryInfo(::GetCurrentProcess(), &counters, sizeof counters)) return 0;
    return counters.PeakWorkingSetSize;
}

std::optional<std::uint64_t> freeDiskBytes(const fs::path& path) {
    ULARGE_INTEGER available{}, total{}, free{};
    if (!::GetDiskFreeSpaceExW(path.c_str(), &available, &total, &free)) {
        errno = errnoOf(::GetLastError());
        return std::nullopt;
    }
    return available.QuadPart; // what this user may write (quotas included)
}

} // namespace platform

std::optional<MemoryInfo> readMemoryInfo() {
    MEMORYSTATUSEX status{};
    status.dwLength = sizeof status;
    if (!::GlobalMemoryStatusEx(&status)) return std::nullopt;
    MemoryInfo info;
    info.totalBytes = status.ullTotalPhys;
    info.availableBytes = status.ullAvailPhys;
    info.meminfoAvailableBytes = status.ullAvailPhys;
    info.boundBy = "GlobalMemoryStatusEx available physical memory";
    // A job object's memory limit is Windows' cgroup: the smaller of the two binds.
    JOBOBJECT_EXTENDED_LIMIT_INFORMATION job{};
    if (::QueryInformationJobObject(nullptr, JobObjectExtendedLimitInformation, &job, sizeof job,
                                    nullptr)) {
        const DWORD limits = job.BasicLimitInformation.LimitFlags;
        std::uint64_t limit = 0;
        if (limits & JOB_OBJECT_LIMIT_JOB_MEMORY) limit = job.JobMemoryLimit;
        if ((limits & JOB_OBJECT_LIMIT_PROCESS_MEMORY) &&
            (limit == 0 || job.ProcessMemoryLimit < limit))
            limit = job.ProcessMemoryLimit;
        if (limit > 0) {
            PROCESS_MEMORY_COUNTERS counters{};
            ::GetProcessMemoryInfo(::GetCurrentProcess(), &counters, sizeof counters);
            const std::uint64_t used = counters.PagefileUsage;
            const std::uint64_t left = limit > used ? limit - used : 0;
            if (left < info.availableBytes) {
                info.availableBytes = left;
                info.boundBy = "job object memory limit";
                info.cgroupLimitBytes = limit;
            }
        }
    }
    return info;
}

} // namespace k3
