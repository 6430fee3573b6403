// Files, names, aligned memory and disk space on Linux and macOS (platform/Platform.hpp).
// Where the two differ, posix/PosixHooks.hpp asks linux/ or darwin/.
#include "platform/Platform.hpp"
#include "platform/posix/PosixHooks.hpp"

#include <fcntl.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <unistd.h>

#include <cerrno>
#include <climits>
#include <cstdlib>
#include <utility>

namespace k3::platform {

namespace {

FileType typeOf(mode_t mode) {
    if (S_ISREG(mode)) return FileType::Regular;
    if (S_ISDIR(mode)) return FileType::Directory;
    if (S_ISLNK(mode)) return FileType::Symlink;
    if (S_ISFIFO(mode)) return FileType::Fifo;
    if (S_ISCHR(mode)) return FileType::CharDevice;
    if (S_ISBLK(mode)) return FileType::BlockDevice;
    if (S_ISSOCK(mode)) return FileType::Socket;
    return FileType::Other;
}

FileInfo infoOf(const struct stat& st) {
    FileInfo info;
    info.type = typeOf(st.st_mode);
    info.size = std::uint64_t(st.st_size);
    info.permissions = std::uint32_t(st.st_mode & 07777);
    info.owner = std::uint32_t(st.st_uid);
    info.group = std::uint32_t(st.st_gid);
    info.device = std::uint64_t(st.st_dev);
    info.inode = std::uint64_t(st.st_ino);
    info.links = std::uint64_t(st.st_nlink);
    info.modifiedNs = posix::modifiedNs(st);
    info.changedNs = posix::changedNs(st);
    return info;
}

int descriptor(std::intptr_t handle) {
    return static_cast<int>(handle);
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
    struct stat st {};
    const int rc = followLinks ? ::stat(path.c_str(), &st) : ::lstat(path.c_str(), &st);
    if (rc != 0) return false;
    info = infoOf(st);
    return true;
}

bool readLink(const fs::path& link, fs::path& target) {
    std::string text(std::size_t(PATH_MAX), '\0');
    const ssize_t n = ::readlink(link.c_str(), text.data(), text.size());
    if (n < 0) return false;
    text.resize(std::size_t(n));
    target = fs::path(text);
    return true;
}

bool canWrite(const fs::path& path) {
    return ::access(path.c_str(), W_OK) == 0;
}

std::uint32_t effectiveUserId() {
    return std::uint32_t(::geteuid());
}

std::uint64_t processId() {
    return std::uint64_t(::getpid());
}

File File::open(const fs::path& path, unsigned flags, std::uint32_t createPermissions) {
    int how = (flags & open::ReadWrite) == open::ReadWrite ? O_RDWR
              : (flags & open::Write)                      ? O_WRONLY
                                                           : O_RDONLY;
    how |= O_CLOEXEC;
    if (flags & open::Create) how |= O_CREAT;
    if (flags & open::Truncate) how |= O_TRUNC;
    if (flags & open::NoFollow) how |= O_NOFOLLOW;
    if (flags & open::NoWaitOnOpen) how |= O_NONBLOCK;
    if (flags & open::Uncached) how |= posix::uncachedOpenFlag();
    const int fd = ::open(path.c_str(), how, mode_t(createPermissions));
    if (fd < 0) return File();
    File file(fd);
    if ((flags & open::Uncached) && !posix::afterUncachedOpen(fd)) {
        const int err = errno;
        file.close();
        errno = err;
        return File();
    }
    // Back to blocking I/O once the open has not waited.
    if ((flags & open::NoWaitOnOpen) &&
        ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK) != 0) {
        const int err = errno;
        file.close();
        errno = err;
        return File();
    }
    return file;
}

File File::createTemporary(fs::path& pathTemplate) {
    std::string name = pathTemplate.string();
    const int fd = ::mkstemp(name.data());
    if (fd < 0) return File();
    pathTemplate = name;
    // mkstemp's descriptor is inherited by children; the engine's are not.
    ::fcntl(fd, F_SETFD, FD_CLOEXEC);
    return File(fd);
}

File::~File() {
    if (handle_ >= 0) ::close(descriptor(handle_));
}

File::File(File&& other) noexcept
    : handle_(std::exchange(other.handle_, -1)), overlapped_(other.overlapped_),
      position_(other.position_) {}

File& File::operator=(File&& other) noexcept {
    if (this != &other) {
        if (handle_ >= 0) ::close(descriptor(handle_));
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
    return handle_ >= 0;
}

bool File::info(FileInfo& info) const {
    struct stat st {};
    if (::fstat(descriptor(handle_), &st) != 0) return false;
    info = infoOf(st);
    return true;
}

std::int64_t File::read(void* dst, std::size_t length) {
    return ::read(descriptor(handle_), dst, length);
}

std::int64_t File::write(const void* src, std::size_t length) {
    return ::write(descriptor(handle_), src, length);
}

std::int64_t File::readAt(void* dst, std::size_t length, std::uint64_t offset) const {
    return ::pread(descriptor(handle_), dst, length, static_cast<off_t>(offset));
}

std::int64_t File::writeAt(const void* src, std::size_t length, std::uint64_t offset) const {
    return ::pwrite(descriptor(handle_), src, length, static_cast<off_t>(offset));
}

bool File::truncate(std::uint64_t size) {
    return ::ftruncate(descriptor(handle_), static_cast<off_t>(size)) == 0;
}

bool File::syncToDisk() {
    return posix::syncToDisk(descriptor(handle_)) == 0;
}

bool File::setOwner(std::uint32_t owner, std::uint32_t group) {
    return ::fchown(descriptor(handle_), uid_t(owner), gid_t(group)) == 0;
}

bool File::setPermissions(std::uint32_t permissions) {
    return ::fchmod(descriptor(handle_), mode_t(permissions & 07777)) == 0;
}

bool File::lockExclusiveNoWait() {
    return ::flock(descriptor(handle_), LOCK_EX | LOCK_NB) == 0;
}

void File::dropCachedPages() {
    posix::dropCachedPages(descriptor(handle_));
}

void File::adviseWillRead(std::uint64_t offset, std::size_t length) const {
    posix::adviseWillRead(descriptor(handle_), offset, length);
}

bool File::close() {
    if (handle_ < 0) return true;
    const int fd = descriptor(std::exchange(handle_, -1));
    return ::close(fd) == 0;
}

std::FILE* File::releaseToStdio(const char* mode) {
    std::FILE* stream = ::fdopen(descriptor(handle_), mode);
    if (stream) handle_ = -1;
    return stream;
}

std::FILE* openStream(const fs::path& path, const char* mode) {
    return std::fopen(path.c_str(), mode);
}

bool truncateStream(std::FILE* stream, std::uint64_t size) {
    std::fflush(stream); // what stdio still holds would land past the new end
    return ::ftruncate(::fileno(stream), static_cast<off_t>(size)) == 0;
}

void syncDirectory(const fs::path& dir) {
    const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
    if (fd < 0) return;
    ::fsync(fd);
    ::close(fd);
}

bool replaceFile(const fs::path& from, const fs::path& to) {
    if (::rename(from.c_str(), to.c_str()) != 0) return false;
    // The rename is durable only once the directory entry is on disk.
    syncDirectory(to.has_parent_path() ? to.parent_path() : fs::path("."));
    return true;
}

bool removeFile(const fs::path& path) {
    return ::unlink(path.c_str()) == 0;
}

void* allocateAligned(std::size_t alignment, std::size_t bytes) {
    void* p = nullptr;
    if (::posix_memalign(&p, alignment, bytes) != 0) return nullptr;
    return p;
}

void freeAligned(void* p) {
    std::free(p);
}

std::optional<std::uint64_t> freeDiskBytes(const fs::path& path) {
    struct statvfs info {};
    if (::statvfs(path.c_str(), &info) != 0) return std::nullopt;
    return std::uint64_t(info.f_bavail) * info.f_frsize;
}

} // namespace k3::platform
