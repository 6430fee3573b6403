#include "k3/trunk.hpp"

#include "k3/aligned_io.hpp"
#include "memory/AlignedBuffer.hpp"

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

namespace k3 {

namespace {
using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}
} // namespace

struct TrunkStreamer::Impl {
    enum class State { Idle, Reading, Ready, Failed };
    struct Slot {
        memory::AlignedBuffer buf;
        int layer = -1;
        State state = State::Idle;
        std::string error;
    };

    TrunkIndex index;
    std::unique_ptr<AlignedFile> file;
    int pinnedCount = 0;
    memory::AlignedBuffer pinnedArena;
    std::vector<std::size_t> pinnedOffset;
    std::vector<Slot> ring;
    int current = -1;

    std::mutex m;
    std::condition_variable cv;
    std::deque<int> queue;
    bool stop = false;
    std::thread reader;
    TrunkStats stats;

    // One aligned O_DIRECT read of a whole layer record; a short read is a corrupt layer.
    void readLayer(int L, std::byte* dst, double& seconds) {
        const TrunkRecord& r = index.layers[std::size_t(L)];
        const auto t0 = Clock::now();
        const std::size_t len = std::size_t(alignUp(r.bytes));
        std::size_t got = 0;
        try {
            got = file->readWindow(r.offset, dst, len);
        } catch (const std::exception& e) {
            throw TrunkError("trunk layer " + std::to_string(L) + ": " + e.what());
        }
        seconds = since(t0);
        if (got < r.bytes)
            throw TrunkError("trunk layer " + std::to_string(L) + ": short read from " +
                             index.binPath.string() + " at offset " + std::to_string(r.offset) +
                             ": got " + std::to_string(got) + " of " + std::to_string(r.bytes) +
                             " bytes (truncated trunk.bin? re-pack it)");
    }

    void readerLoop() {
        std::unique_lock lock(m);
        for (;;) {
            cv.wait(lock, [&] { return stop || !queue.empty(); });
            if (stop) return;
            const int s = queue.front();
            queue.pop_front();
            const int L = ring[std::size_t(s)].layer;
            std::byte* dst = ring[std::size_t(s)].buf.data();
            lock.unlock();
            double secs = 0;
            std::string error;
            try {
                readLayer(L, dst, secs);
            } catch (const std::exception& e) {
                error = e.what();
            }
            lock.lock();
            Slot& slot = ring[std::size_t(s)];
            slot.state = error.empty() ? State::Ready : State::Failed;
            slot.error = error;
            stats.ioSeconds += secs;
            if (error.empty()) {
                ++stats.reads;
                stats.bytesRead += index.layers[std::size_t(L)].bytes;
            }
            cv.notify_all();
        }
    }

    // Caller holds the lock; the slot is not Reading.
    void request(int s, int L) {
        Slot& slot = ring[std::size_t(s)];
        slot.layer = L;
        slot.state = State::Reading;
        slot.error.clear();
        queue.push_back(s);
        cv.notify_all();
    }

    int nextStreamed(int L) const {
        const int n = int(index.layers.size());
        const int next = L + 1 < n ? L + 1 : pinnedCount; // the cycle restarts past the prefix
        return next < n ? next : -1;
    }
};

TrunkStreamer::TrunkStreamer(const TrunkIndex& index, const MemoryPlan& plan)
    : d_(std::make_unique<Impl>()) {
    d_->index = index;
    const int n = int(index.layers.size());
    if (plan.totalLayers != n)
        throw TrunkError("the memory plan covers " + std::to_string(plan.totalLayers) +
                         " layers, the trunk has " + std::to_string(n));
    d_->pinnedCount = std::min(plan.pinnedLayers, n);
    if (d_->pinnedCount < n && plan.ringSlots < 1)
        throw TrunkError("the memory plan streams layers " + std::to_string(d_->pinnedCount) +
                         ".." + std::to_string(n - 1) + " but has no ring slot");
    for (int L = d_->pinnedCount; L < n; ++L)
        if (alignUp(index.layers[std::size_t(L)].bytes) > plan.ringSlotBytes)
            throw TrunkError("trunk layer " + std::to_string(L) + " is " +
                             std::to_string(index.layers[std::size_t(L)].bytes) +
                             " bytes, more than the ring slot of " +
                             std::to_string(plan.ringSlotBytes));
    try {
        d_->file = std::make_unique<AlignedFile>(index.binPath);
    } catch (const std::exception& e) {
        throw TrunkError(e.what());
    }

    std::size_t pinnedBytes = 0;
    for (int L = 0; L < d_->pinnedCount; ++L) {
        d_->pinnedOffset.push_back(pinnedBytes);
        pinnedBytes += std::size_t(alignUp(index.layers[std::size_t(L)].bytes));
    }
    d_->pinnedArena = memory::AlignedBuffer(pinnedBytes);
    for (int L = 0; L < d_->pinnedCount; ++L) {
        double secs = 0;
        d_->readLayer(L, d_->pinnedArena.data() + d_->pinnedOffset[std::size_t(L)], secs);
        d_->stats.ioSeconds += secs;
        ++d_->stats.reads;
        d_->stats.bytesRead += index.layers[std::size_t(L)].bytes;
    }
    if (d_->pinnedCount < n) {
        d_->ring.resize(std::size_t(plan.ringSlots));
        for (auto& s : d_->ring) s.buf = memory::AlignedBuffer(std::size_t(plan.ringSlotBytes));
        d_->reader = std::thread([this] { d_->readerLoop(); });
    }
    d_->stats.totalLayers = n;
    d_->stats.pinnedLayers = d_->pinnedCount;
    d_->stats.ringSlots = int(d_->ring.size());
    d_->stats.pinnedBytes = pinnedBytes;
    d_->stats.ringSlotBytes = d_->ring.empty() ? 0 : plan.ringSlotBytes;
}

TrunkStreamer::~TrunkStreamer() {
    if (d_->reader.joinable()) {
        {
            std::lock_guard lock(d_->m);
            d_->stop = true;
        }
        d_->cv.notify_all();
        d_->reader.join();
    }
}

bool TrunkStreamer::pinned(int layer) const {
    return layer >= 0 && layer < d_->pinnedCount;
}
const std::byte* TrunkStreamer::pinnedData(int layer) const {
    if (!pinned(layer)) return nullptr;
    return d_->pinnedArena.data() + d_->pinnedOffset[std::size_t(layer)];
}

const TrunkIndex& TrunkStreamer::index() const {
    return d_->index;
}

TrunkStats TrunkStreamer::stats() const {
    std::lock_guard lock(d_->m);
    return d_->stats;
}

const std::byte* TrunkStreamer::acquire(int L) {
    Impl& d = *d_;
    if (L < 0 || L >= int(d.index.layers.size()))
        throw TrunkError("trunk layer " + std::to_string(L) + " does not exist (the trunk has " +
                         std::to_string(d.index.layers.size()) + ")");
    std::unique_lock lock(d.m);
    ++d.stats.binds;
    if (L < d.pinnedCount) {
        ++d.stats.pinnedHits;
        return d.pinnedArena.data() + d.pinnedOffset[std::size_t(L)];
    }
    using State = Impl::State;
    const int R = int(d.ring.size());
    int s = -1;
    for (int i = 0; i < R; ++i) {
        const auto& slot = d.ring[std::size_t(i)];
        if (slot.layer == L && (slot.state == State::Reading || slot.state == State::Ready)) s = i;
    }
    const auto t0 = Clock::now();
    if (s < 0) { // not prefetched (first layer of the run, or out-of-order access)
        s = (R == 1 || d.current != 0) ? 0 : 1;
        d.cv.wait(lock, [&] { return d.ring[std::size_t(s)].state != State::Reading; });
        d.request(s, L);
    }
    d.cv.wait(lock, [&] { return d.ring[std::size_t(s)].state != State::Reading; });
    d.stats.waitSeconds += since(t0);
    Impl::Slot& slot = d.ring[std::size_t(s)];
    if (slot.state == State::Failed) {
        const std::string err = slot.error;
        slot.state = State::Idle;
        slot.layer = -1;
        throw TrunkError(err);
    }
    d.current = s;
    // The next streamed layer goes into the other slot while this one computes.
    if (R >= 2) {
        const int next = d.nextStreamed(L);
        const int other = s == 0 ? 1 : 0;
        Impl::Slot& o = d.ring[std::size_t(other)];
        if (next >= 0 && next != L && o.state != State::Reading &&
            !(o.layer == next && o.state == State::Ready))
            d.request(other, next);
    }
    return slot.buf.data();
}

} // namespace k3
