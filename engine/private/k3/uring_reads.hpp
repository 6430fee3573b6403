#pragma once
// Aligned reads with several requests in flight through io_uring (liburing), for the
// expert reader. Optional twice over: a build without liburing, or a kernel or
// container that refuses io_uring (EPERM under seccomp, ENOSYS on old kernels), gets
// no ring and the caller falls back to its thread pool.
//
// Not thread-safe: one thread submits and reaps.

#include "k3/aligned_io.hpp"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace k3 {

class UringReads {
public:
    // A ring with room for `depth` reads in flight; null (and why in `whyNot`) when this
    // build or this kernel has no io_uring or no IORING_OP_READ.
    static std::unique_ptr<UringReads> open(unsigned depth, std::string& whyNot);
    ~UringReads();
    UringReads(const UringReads&) = delete;
    UringReads& operator=(const UringReads&) = delete;

    unsigned depth() const { return depth_; }
    unsigned inFlight() const { return inFlight_; }
    // Queues a read of [offset, offset + length) of `file` into dst (4096-aligned, as
    // AlignedFile::readWindow) through its O_DIRECT descriptor while it has one; sent to
    // the kernel at the next submit(). The caller keeps at most depth() in flight.
    void queue(const AlignedFile& file, std::uint64_t offset, void* dst, std::size_t length,
               std::uint64_t tag);
    void submit(); // hands the queued reads to the kernel; IoError if it refuses them
    struct Completion {
        std::uint64_t tag = 0;
        int result = 0; // bytes read, or -errno
    };
    // The next completed read, waiting for one when `wait` (false: none ready -> false).
    bool reap(Completion& out, bool wait);

private:
    explicit UringReads(unsigned depth);
    struct Ring;
    std::unique_ptr<Ring> ring_;
    unsigned depth_ = 0;
    unsigned inFlight_ = 0;
};

} // namespace k3
