#pragma once
// TrunkStreamer's state, shared by its two sources: TrunkStreamer.cpp (the plan, the
// ring, the reader thread's loop, acquire) and TrunkStreamerRead.cpp (reading and
// decoding a layer or a piece, and the compute thread's help with a decode).

#include "k3/trunk.hpp"

#include "k3/aligned_io.hpp"
#include "memory/AlignedBuffer.hpp"

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <deque>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace k3 {

namespace streaming {
using Clock = std::chrono::steady_clock;
// The staging buffer in parts: one decoded while the reads of the others are in flight.
inline constexpr std::size_t kStagingParts = 4;
inline double since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}
} // namespace streaming

struct TrunkStreamer::Impl {
    enum class State { Idle, Reading, Ready, Failed };
    struct Slot {
        memory::AlignedBuffer buf;
        int layer = -1;
        int piece = -1; // -1: the whole layer
        State state = State::Idle;
        std::string error;
    };

    TrunkIndex index;
    std::unique_ptr<AlignedFile> file;
    int pinnedCount = 0;
    memory::AlignedBuffer pinnedArena;
    std::vector<std::size_t> pinnedOffset;
    std::vector<bool> pinnedCoded;    // kept compressed in the arena
    memory::AlignedBuffer decodeSlot; // the compressed pinned layer in use, decoded
    int decodedLayer = -1;            // which one the decode slot holds

    // Reading and decoding (TrunkStreamerRead.cpp).
    void decodePinned(int L);

    std::vector<Slot> ring;
    int current = -1;
    // Per streamed layer: its two pieces when it is larger than the slot, else empty.
    std::vector<std::vector<TrunkPiece>> pieces;

    std::mutex m;
    std::condition_variable cv;
    std::deque<int> queue;
    bool stop = false;
    std::thread reader;
    TrunkStats stats;

    // Coded layers: blocks are read into `staging` (several per read) and decoded here.
    memory::AlignedBuffer staging;
    memory::AlignedBuffer scratch; // a block that straddles a piece's window

    struct ReadCost {
        double ioSeconds = 0, decodeSeconds = 0;
        std::uint64_t bytesRead = 0, bytesDecoded = 0;
    };

    // The blocks of one staged window, decoded by the reader and by a compute thread
    // that waits for them (each block claimed by one of them through `next`).
    struct DecodeJob {
        int L = 0;
        const TrunkRecord* r = nullptr;
        const std::byte* buf = nullptr; // the staged window, from fileLo
        std::uint64_t fileLo = 0;
        std::size_t first = 0, last = 0;
        std::uint64_t lo = 0, hi = 0; // the raw range asked for, written at dst
        std::byte* dst = nullptr;
        std::atomic<std::size_t> next{0};
        std::atomic<std::uint64_t> decoded{0};
        int helpers = 0; // compute threads inside runJob (guarded by m)
        std::mutex errorMutex;
        std::size_t errorBlock = ~std::size_t{0};
        std::string error; // the lowest block that failed
    };
    DecodeJob* job = nullptr; // the window being decoded (guarded by m)

    void decodeOne(const DecodeJob& jb, std::size_t j, std::byte* blockScratch);
    std::uint64_t runJob(DecodeJob& jb, std::byte* blockScratch);

    memory::AlignedBuffer helperScratch; // the helping compute thread's straddling block
    void waitHelping(std::unique_lock<std::mutex>& lock, int s);

    // A coded layer's blocks in aligned windows of the staging buffer.
    struct Window {
        std::size_t first, last;
        std::uint64_t fileLo, fileHi, need;
    };
    std::vector<Window> codedWindows(const TrunkRecord& r, std::uint64_t lo,
                                     std::uint64_t hi) const;
    void readCoded(int L, std::uint64_t lo, std::uint64_t hi, std::byte* dst, ReadCost& cost);
    void decodeWindow(int L, const Window& win, const std::byte* buf, std::uint64_t lo,
                      std::uint64_t hi, std::byte* dst, ReadCost& cost);
    void readLayer(int L, std::byte* dst, ReadCost& cost);
    void readPinnedCoded(int L, std::byte* dst, ReadCost& cost);
    void readPiece(int L, int P, std::byte* dst, ReadCost& cost);

    void account(const ReadCost& c) {
        stats.ioSeconds += c.ioSeconds;
        stats.decodeSeconds += c.decodeSeconds;
        stats.bytesRead += c.bytesRead;
        stats.bytesDecoded += c.bytesDecoded;
    }

    // The reader thread's loop and the compute side's bind (TrunkStreamer.cpp).
    void readerLoop();

    // Caller holds the lock; the slot is not Reading.
    void request(int s, int L, int P) {
        Slot& slot = ring[std::size_t(s)];
        slot.layer = L;
        slot.piece = P;
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
    bool split(int L) const { return !pieces[std::size_t(L)].empty(); }
    // The unit read after (L, P) in the cyclic order: the second piece, else the next layer.
    std::pair<int, int> nextUnit(int L, int P) const {
        if (P == 0) return {L, 1};
        const int next = nextStreamed(L);
        if (next < 0) return {-1, -1};
        return {next, split(next) ? 0 : -1};
    }

    const std::byte* acquireUnit(int L, int P);
};

} // namespace k3
