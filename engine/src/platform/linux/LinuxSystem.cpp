// Linux's side of the platform layer: O_DIRECT, fsync, page-cache and huge-page hints,
// peak RSS from getrusage, and memory from /proc and the cgroups (ProcMemoryInfo.cpp).
#include "k3/system.hpp"
#include "platform/Platform.hpp"
#include "platform/posix/PosixHooks.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

namespace k3 {

namespace platform {

namespace posix {

int uncachedOpenFlag() {
    return O_DIRECT;
}

bool afterUncachedOpen(int) {
    return true;
}

int syncToDisk(int fd) {
    return ::fsync(fd);
}

void dropCachedPages(int fd) {
    ::posix_fadvise(fd, 0, 0, POSIX_FADV_DONTNEED);
}

void adviseWillRead(int, std::uint64_t, std::size_t) {
    // O_DIRECT reads bypass the readahead this would start.
}

std::int64_t modifiedNs(const struct stat& st) {
    return std::int64_t(st.st_mtim.tv_sec) * 1'000'000'000 + st.st_mtim.tv_nsec;
}

std::int64_t changedNs(const struct stat& st) {
    return std::int64_t(st.st_ctim.tv_sec) * 1'000'000'000 + st.st_ctim.tv_nsec;
}

} // namespace posix

void adviseHugePages(void* p, std::size_t bytes) {
    ::madvise(p, bytes, MADV_HUGEPAGE); // a hint; failure is harmless
}

std::uint64_t peakResidentBytes() {
    struct rusage ru {};
    if (::getrusage(RUSAGE_SELF, &ru) != 0) return 0;
    return std::uint64_t(ru.ru_maxrss) * 1024; // kilobytes on Linux
}

} // namespace platform

std::optional<MemoryInfo> readMemoryInfo() {
    return readMemoryInfo("/");
}

} // namespace k3
