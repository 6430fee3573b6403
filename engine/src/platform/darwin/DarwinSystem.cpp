// macOS's side of the platform layer: F_NOCACHE in place of O_DIRECT, F_RDADVISE,
// F_FULLFSYNC (fsync stops at the drive's cache there), the peak resident size from
// mach task_info, and memory from sysctl hw.memsize and the VM statistics. Not compiled
// on the Linux CI machine: kept small, reviewed against Apple's man pages (fcntl(2),
// sysctl(3), host_statistics64, task_info); its POSIX neighbours (posix/) are Linux's too.
#include "k3/system.hpp"
#include "platform/Platform.hpp"
#include "platform/posix/PosixHooks.hpp"

#include <fcntl.h>
#include <mach/mach.h>
#include <sys/sysctl.h>
#include <sys/types.h>
#include <unistd.h>

#include <climits>

namespace k3 {

namespace platform {

namespace posix {

int uncachedOpenFlag() {
    return 0; // macOS has no O_DIRECT: F_NOCACHE after the open instead
}

bool afterUncachedOpen(int fd) {
    return ::fcntl(fd, F_NOCACHE, 1) != -1;
}

int syncToDisk(int fd) {
    // F_FULLFSYNC asks the drive to flush its cache; some filesystems (SMB, FAT) refuse it.
    if (::fcntl(fd, F_FULLFSYNC) != -1) return 0;
    return ::fsync(fd);
}

void dropCachedPages(int fd) {
    // No posix_fadvise on macOS; later reads through this descriptor skip the cache.
    ::fcntl(fd, F_NOCACHE, 1);
}

void adviseWillRead(int fd, std::uint64_t offset, std::size_t length) {
    radvisory advice{};
    advice.ra_offset = static_cast<off_t>(offset);
    advice.ra_count = static_cast<int>(length > std::size_t(INT_MAX) ? INT_MAX : length);
    ::fcntl(fd, F_RDADVISE, &advice); // a hint; failure is harmless
}

std::int64_t modifiedNs(const struct stat& st) {
    return std::int64_t(st.st_mtimespec.tv_sec) * 1'000'000'000 + st.st_mtimespec.tv_nsec;
}

std::int64_t changedNs(const struct stat& st) {
    return std::int64_t(st.st_ctimespec.tv_sec) * 1'000'000'000 + st.st_ctimespec.tv_nsec;
}

} // namespace posix

void adviseHugePages(void*, std::size_t) {
    // Apple silicon pages are 16 KB and superpages are not offered to malloc'd memory.
}

std::uint64_t peakResidentBytes() {
    mach_task_basic_info_data_t info{};
    mach_msg_type_number_t count = MACH_TASK_BASIC_INFO_COUNT;
    if (::task_info(::mach_task_self(), MACH_TASK_BASIC_INFO, reinterpret_cast<task_info_t>(&info),
                    &count) != KERN_SUCCESS)
        return 0;
    return info.resident_size_max; // bytes (getrusage's ru_maxrss is bytes here too)
}

} // namespace platform

std::optional<MemoryInfo> readMemoryInfo() {
    std::uint64_t total = 0;
    std::size_t size = sizeof total;
    if (::sysctlbyname("hw.memsize", &total, &size, nullptr, 0) != 0 || total == 0)
        return std::nullopt;
    vm_statistics64_data_t vm{};
    mach_msg_type_number_t count = HOST_VM_INFO64_COUNT;
    vm_size_t page = 0;
    const mach_port_t host = ::mach_host_self();
    if (::host_page_size(host, &page) != KERN_SUCCESS ||
        ::host_statistics64(host, HOST_VM_INFO64, reinterpret_cast<host_info64_t>(&vm), &count) !=
            KERN_SUCCESS)
        return std::nullopt;
    // What Activity Monitor counts as reclaimable without swapping: free, inactive and
    // purgeable pages (file-backed pages the kernel drops first).
    const std::uint64_t available =
        (std::uint64_t(vm.free_count) + vm.inactive_count + vm.purgeable_count) * page;
    MemoryInfo info;
    info.totalBytes = total;
    info.availableBytes = available < total ? available : total;
    info.meminfoAvailableBytes = info.availableBytes;
    info.boundBy = "vm_statistics64 free + inactive + purgeable";
    return info;
}

} // namespace k3
