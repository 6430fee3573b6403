// io_uring reads for the expert reader (k3/uring_reads.hpp), the platform layer's read
// queue. The only file that includes liburing; without it (K3_HAVE_LIBURING unset: no
// liburing found, or not Linux) open() says so and the expert reader uses its thread
// pool, as it does on macOS and Windows.
#include "k3/uring_reads.hpp"

#include <cerrno>
#include <cstring>

#if K3_HAVE_LIBURING
#include <liburing.h>
#endif

namespace k3 {

#if K3_HAVE_LIBURING

struct UringReads::Ring {
    io_uring ring{};
    bool live = false;
    ~Ring() {
        if (live) io_uring_queue_exit(&ring);
    }
};

UringReads::UringReads(unsigned depth) : ring_(std::make_unique<Ring>()), depth_(depth) {}

std::unique_ptr<UringReads> UringReads::open(unsigned depth, std::string& whyNot) {
    std::unique_ptr<UringReads> r(new UringReads(depth));
    const int rc = io_uring_queue_init(depth, &r->ring_->ring, 0);
    if (rc < 0) {
        whyNot = std::string("io_uring_queue_init: ") + std::strerror(-rc);
        return nullptr;
    }
    r->ring_->live = true;
    // Kernels before 5.6 have rings but no plain READ: every read would fail EINVAL.
    io_uring_probe* probe = io_uring_get_probe_ring(&r->ring_->ring);
    const bool canRead = probe && io_uring_opcode_supported(probe, IORING_OP_READ);
    if (probe) io_uring_free_probe(probe);
    if (!canRead) {
        whyNot = "io_uring without IORING_OP_READ (kernel before 5.6)";
        return nullptr;
    }
    return r;
}

UringReads::~UringReads() {
    // Reads still in flight write into memory the caller is about to free: wait for them.
    Completion c;
    while (inFlight_ > 0 && reap(c, true)) {
    }
}

void UringReads::queue(const AlignedFile& file, std::uint64_t offset, void* dst, std::size_t length,
                       std::uint64_t tag) {
    io_uring_sqe* sqe = io_uring_get_sqe(&ring_->ring);
    if (!sqe) {
        submit(); // the submission queue is full of reads not yet sent: send them
        sqe = io_uring_get_sqe(&ring_->ring);
    }
    if (!sqe) throw IoError(file.path() + ": io_uring submission queue full");
    io_uring_prep_read(sqe, static_cast<int>(file.asyncHandle()), dst, unsigned(length), offset);
    io_uring_sqe_set_data64(sqe, tag);
    ++inFlight_;
}

void UringReads::submit() {
    for (;;) {
        const int rc = io_uring_submit(&ring_->ring);
        if (rc >= 0) return;
        if (rc == -EINTR || rc == -EAGAIN || rc == -EBUSY) continue;
        throw IoError(std::string("io_uring_submit: ") + std::strerror(-rc));
    }
}

bool UringReads::reap(Completion& out, bool wait) {
    if (inFlight_ == 0) return false;
    io_uring_cqe* cqe = nullptr;
    for (;;) {
        const int rc =
            wait ? io_uring_wait_cqe(&ring_->ring, &cqe) : io_uring_peek_cqe(&ring_->ring, &cqe);
        if (rc == 0 && cqe) break;
        if (!wait && (rc == -EAGAIN || rc == 0)) return false;
        if (rc == -EINTR) continue;
        throw IoError(std::string("io_uring_wait_cqe: ") + std::strerror(-rc));
    }
    out.tag = io_uring_cqe_get_data64(cqe);
    out.result = cqe->res;
    io_uring_cqe_seen(&ring_->ring, cqe);
    --inFlight_;
    return true;
}

#else

struct UringReads::Ring {};

UringReads::UringReads(unsigned depth) : depth_(depth) {}
UringReads::~UringReads() = default;

std::unique_ptr<UringReads> UringReads::open(unsigned, std::string& whyNot) {
    whyNot = "built without liburing";
    return nullptr;
}

void UringReads::queue(const AlignedFile& file, std::uint64_t, void*, std::size_t, std::uint64_t) {
    throw IoError(file.path() + ": built without liburing");
}
void UringReads::submit() {}
bool UringReads::reap(Completion&, bool) {
    return false;
}

#endif

} // namespace k3
