#pragma once
// The expert cache's reader: a batch of expert reads is handed over at once, in
// disk-offset order, and completions come back one by one while the model thread
// computes on the experts that already arrived. Three ways to move the bytes, the
// same bytes each way:
//   uring    io_uring, up to `depth` reads in flight from one thread (k3/uring_reads.hpp)
//   threads  `depth` worker threads, each a blocking read (any kernel)
//   inline   each read done at once on the submitting thread (the trace replay, which
//            moves no bytes)
// K3_EXPERT_IO=threads|uring forces one (tests compare them); unset, io_uring is used
// where this build and the kernel allow it, else the threads.
//
// Not thread-safe: the model thread submits and takes completions.

#include "k3/expert_cache.hpp"

#include <memory>
#include <span>
#include <string>

namespace k3::memory {

struct ExpertReadJob {
    int layer = 0;
    int expert = 0;
    std::byte* slot = nullptr;
    std::uint64_t tag = 0;
};

struct ExpertReadDone {
    std::uint64_t tag = 0;
    bool ok = false;
    std::size_t payloadOffset = 0; // where the expert starts in its slot
};

class ExpertReader {
public:
    virtual ~ExpertReader() = default;
    // Starts the reads (the order given is the order they are issued).
    virtual void submit(std::span<const ExpertReadJob> jobs) = 0;
    // The next finished read, waiting for one; false when none is outstanding.
    virtual bool next(ExpertReadDone& done) = 0;
};

struct ExpertReaderChoice {
    std::unique_ptr<ExpertReader> reader;
    ExpertIoInfo info;
};

// The reader `io` asks for (Auto: K3_EXPERT_IO, else io_uring when available, else
// threads). Throws CacheError when K3_EXPERT_IO is malformed or forces an io_uring the
// kernel refuses.
ExpertReaderChoice makeExpertReader(const ExpertStore& store, ExpertIo io, int depth);

} // namespace k3::memory
