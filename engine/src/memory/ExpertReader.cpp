#include "memory/ExpertReader.hpp"

#include "k3/aligned_io.hpp"
#include "k3/uring_reads.hpp"

#include <cerrno>
#include <condition_variable>
#include <cstdlib>
#include <deque>
#include <mutex>
#include <thread>
#include <unordered_map>
#include <vector>

namespace k3::memory {
namespace {

ExpertReadDone readNow(const ExpertStore& store, const ExpertReadJob& job) {
    ExpertReadDone d;
    d.tag = job.tag;
    try {
        d.payloadOffset = store.read(job.layer, job.expert, job.slot);
        d.ok = true;
    } catch (const std::exception&) {
        d.ok = false; // counted by the cache; the expert is retried on request
    }
    return d;
}

class InlineReader : public ExpertReader {
public:
    explicit InlineReader(const ExpertStore& store) : store_(store) {}
    void submit(std::span<const ExpertReadJob> jobs) override {
        for (const ExpertReadJob& j : jobs) done_.push_back(readNow(store_, j));
    }
    bool next(ExpertReadDone& done) override {
        if (done_.empty()) return false;
        done = done_.front();
        done_.pop_front();
        return true;
    }

private:
    const ExpertStore& store_;
    std::deque<ExpertReadDone> done_;
};

// Workers take jobs in submission order; each is one blocking store.read().
class ThreadReader : public ExpertReader {
public:
    ThreadReader(const ExpertStore& store, int threads) : store_(store) {
        for (int i = 0; i < threads; ++i) workers_.emplace_back([this] { work(); });
    }
    ~ThreadReader() override {
        {
            std::lock_guard lock(mutex_);
            stop_ = true;
        }
        jobReady_.notify_all();
        for (auto& t : workers_) t.join(); // queued jobs are finished first
    }
    void submit(std::span<const ExpertReadJob> jobs) override {
        {
            std::lock_guard lock(mutex_);
            jobs_.insert(jobs_.end(), jobs.begin(), jobs.end());
            outstanding_ += jobs.size();
        }
        jobReady_.notify_all();
    }
    bool next(ExpertReadDone& done) override {
        std::unique_lock lock(mutex_);
        if (outstanding_ == 0) return false;
        doneReady_.wait(lock, [&] { return !done_.empty(); });
        done = done_.front();
        done_.pop_front();
        --outstanding_;
        return true;
    }

private:
    void work() {
        std::unique_lock lock(mutex_);
        for (;;) {
            jobReady_.wait(lock, [&] { return stop_ || !jobs_.empty(); });
            if (jobs_.empty()) return; // stop_ with nothing left to read
            const ExpertReadJob job = jobs_.front();
            jobs_.pop_front();
            lock.unlock();
            const ExpertReadDone d = readNow(store_, job);
            lock.lock();
            done_.push_back(d);
            doneReady_.notify_one();
        }
    }

    const ExpertStore& store_;
    std::mutex mutex_;
    std::condition_variable jobReady_, doneReady_;
    std::deque<ExpertReadJob> jobs_;
    std::deque<ExpertReadDone> done_;
    std::size_t outstanding_ = 0; // submitted, not yet returned by next()
    bool stop_ = false;
    std::vector<std::thread> workers_;
};

// One thread keeps up to depth windows in flight. An expert with no single window (its
// tensors apart in the file) is read with a blocking call when its turn comes.
class UringReader : public ExpertReader {
public:
    UringReader(const ExpertStore& store, std::unique_ptr<UringReads> ring)
        : store_(store), ring_(std::move(ring)) {}
    ~UringReader() override {
        ExpertReadDone d;
        while (next(d)) {
        } // the slots are written until the kernel is done with them
    }
    void submit(std::span<const ExpertReadJob> jobs) override {
        for (const ExpertReadJob& j : jobs) {
            ExpertWindow w;
            if (store_.window(j.layer, j.expert, w))
                waiting_.push_back({j, w, 0});
            else
                blocking_.push_back(j);
        }
        pump();
    }
    bool next(ExpertReadDone& done) override {
        for (;;) {
            if (!done_.empty()) {
                done = done_.front();
                done_.pop_front();
                return true;
            }
            UringReads::Completion c;
            if (ring_->inFlight() > 0) {
                ring_->reap(c, /*wait=*/true);
                arrived(c);
                pump();
                continue;
            }
            if (!blocking_.empty()) { // the ring is idle: nothing to overlap with
                const ExpertReadJob j = blocking_.front();
                blocking_.pop_front();
                done = readNow(store_, j);
                return true;
            }
            return false;
        }
    }

private:
    struct Read {
        ExpertReadJob job;
        ExpertWindow window;
        std::size_t got = 0; // bytes arrived so far
    };

    void fail(const Read& r) { done_.push_back({r.job.tag, false, 0}); }

    // Fills the ring up to its depth, in submission (disk) order.
    void pump() {
        bool queued = false;
        while (!waiting_.empty() && ring_->inFlight() < ring_->depth()) {
            Read r = waiting_.front();
            waiting_.pop_front();
            if (r.got == 0) { // the fault hook sees each expert read once, as readWindow does
                const FaultExpertScope scope(r.job.layer, r.job.expert);
                if (const auto fault =
                        faultFor(r.window.file->kind(), r.window.file->path(), false)) {
                    if (*fault == IoFault::ShortRead)
                        finish(r); // nothing arrived: a short read
                    else
                        fail(r); // EIO
                    continue;
                }
            }
            const std::uint64_t tag = nextTag_++;
            ring_->queue(*r.window.file, r.window.offset + r.got, r.job.slot + r.got,
                         r.window.length - r.got, tag);
            reads_.emplace(tag, r);
            queued = true;
        }
        if (queued) ring_->submit();
    }

    void arrived(const UringReads::Completion& c) {
        const auto it = reads_.find(c.tag);
        Read r = it->second;
        reads_.erase(it);
        if (c.result == -EINTR || c.result == -EAGAIN) {
            waiting_.push_front(r); // again, first in line
            return;
        }
        if (c.result == -EINVAL && r.got == 0 && r.window.file->direct()) {
            r.window.file->refuseDirect(); // this filesystem has no O_DIRECT: go buffered
            waiting_.push_front(r);
            return;
        }
        if (c.result < 0) {
            fail(r);
            return;
        }
        r.got += std::size_t(c.result);
        // Only end of file gives an unaligned (or zero) count; otherwise read on.
        if (c.result > 0 && r.got < r.window.length && r.got % kDirectIoAlignment == 0) {
            waiting_.push_front(r);
            return;
        }
        finish(r);
    }

    void finish(const Read& r) {
        if (r.got < r.window.needed) {
            fail(r); // a short read: the file changed or was truncated
            return;
        }
        try {
            store_.checkArrived(r.job.layer, r.job.expert, r.job.slot);
        } catch (const std::exception&) {
            fail(r);
            return;
        }
        done_.push_back({r.job.tag, true, r.window.payloadOffset});
    }

    const ExpertStore& store_;
    std::unique_ptr<UringReads> ring_;
    std::deque<Read> waiting_;
    std::deque<ExpertReadJob> blocking_;
    std::deque<ExpertReadDone> done_;
    std::unordered_map<std::uint64_t, Read> reads_; // in flight, by ring tag
    std::uint64_t nextTag_ = 0;
};

} // namespace

ExpertReaderChoice makeExpertReader(const ExpertStore& store, ExpertIo io, int depth) {
    ExpertReaderChoice c;
    c.info.depth = depth;
    bool forced = io != ExpertIo::Auto;
    if (io == ExpertIo::Auto) {
        const char* env = std::getenv("K3_EXPERT_IO");
        const std::string v = env ? env : "";
        if (v == "threads")
            io = ExpertIo::Threads;
        else if (v == "uring")
            io = ExpertIo::Uring;
        else if (!v.empty())
            throw CacheError("K3_EXPERT_IO=\"" + v +
                             "\": give threads or uring (or leave it unset)");
        if (!v.empty()) c.info.note = "K3_EXPERT_IO=" + v;
        forced = !v.empty();
    }
    if (io == ExpertIo::Inline) {
        c.info = {"inline", 1, "reads on the model thread"};
        c.reader = std::make_unique<InlineReader>(store);
        return c;
    }
    if (io == ExpertIo::Auto || io == ExpertIo::Uring) {
        std::string whyNot;
        if (auto ring = UringReads::open(unsigned(depth), whyNot)) {
            c.info.mode = "uring";
            c.reader = std::make_unique<UringReader>(store, std::move(ring));
            return c;
        }
        if (forced) throw CacheError("expert reads through io_uring were asked for: " + whyNot);
        c.info.note = "io_uring unavailable: " + whyNot;
    }
    c.info.mode = "threads";
    c.reader = std::make_unique<ThreadReader>(store, depth);
    return c;
}

} // namespace k3::memory
