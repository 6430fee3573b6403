#pragma once
// What posix/ asks of linux/ or darwin/: the few calls where the two differ.

#include <sys/stat.h>

#include <cstddef>
#include <cstdint>

namespace k3::platform::posix {

// Added to open()'s flags for open::Uncached: O_DIRECT on Linux, 0 on macOS.
int uncachedOpenFlag();
// Called after an open::Uncached open: macOS turns caching off here (F_NOCACHE). False,
// errno set, refuses the open.
bool afterUncachedOpen(int fd);
// fsync (Linux); F_FULLFSYNC, else fsync (macOS). 0 or -1 with errno.
int syncToDisk(int fd);
void dropCachedPages(int fd);
void adviseWillRead(int fd, std::uint64_t offset, std::size_t length);
std::int64_t modifiedNs(const struct stat& st);
std::int64_t changedNs(const struct stat& st);
// Shared by posix/ (PosixConsole.cpp): a pipe whose two ends are close-on-exec and
// non-blocking (pipe2 is Linux-only).
bool makeNonBlockingPipe(int fds[2]);

} // namespace k3::platform::posix
