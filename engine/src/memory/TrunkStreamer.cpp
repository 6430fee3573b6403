#include "k3/trunk.hpp"

#include "k3/aligned_io.hpp"
#include "memory/AlignedBuffer.hpp"
#include "memory/TrunkCodec.hpp"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <future>
#include <mutex>
#include <thread>
#include <vector>

namespace k3 {

namespace {
using Clock = std::chrono::steady_clock;
// The staging buffer in parts: one decoded while the reads of the others are in flight.
constexpr std::size_t kStagingParts = 4;
double since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}
} // namespace

bool isMlpPieceTensor(std::string_view name) {
    return name.find(".mlp.") != std::string_view::npos ||
           name.find(".block_sparse_moe.") != std::string_view::npos;
}

std::array<TrunkPiece, 2> splitLayerRecord(const TrunkRecord& r) {
    std::array<TrunkPiece, 2> pieces;
    // Tensors in file order; each widened to its aligned window, overlapping or touching
    // windows merged, the windows of a piece placed one after another in the slot.
    std::vector<std::pair<std::uint64_t, const std::string*>> order[2];
    for (const auto& [name, t] : r.tensors)
        order[isMlpPieceTensor(name) ? 1 : 0].emplace_back(t.offset, &name);
    for (int p = 0; p < 2; ++p) {
        TrunkPiece& piece = pieces[std::size_t(p)];
        std::sort(order[p].begin(), order[p].end());
        for (const auto& [off, name] : order[p]) {
            const TrunkTensor& t = r.tensors.find(*name)->second;
            const std::uint64_t lo = (r.offset + off) / kTrunkAlignment * kTrunkAlignment;
            const std::uint64_t hi = alignUp(r.offset + off + t.info.nbytes);
            if (piece.runs.empty() || lo > piece.runs.back().fileOffset + piece.runs.back().bytes) {
                piece.runs.push_back({lo, hi - lo, piece.slotBytes});
                piece.slotBytes += hi - lo;
            } else if (hi > piece.runs.back().fileOffset + piece.runs.back().bytes) {
                const std::uint64_t grow =
                    hi - (piece.runs.back().fileOffset + piece.runs.back().bytes);
                piece.runs.back().bytes += grow;
                piece.slotBytes += grow;
            }
            const TrunkPiece::Run& run = piece.runs.back();
            piece.tensorAt[*name] = run.slotOffset + (r.offset + off - run.fileOffset);
            piece.payloadBytes += t.info.nbytes;
        }
    }
    return pieces;
}

std::uint64_t trunkDecodeBufferBytes(const TrunkIndex& index) {
    if (!index.compressed()) return 0;
    // The block index (where each block starts) is held too: 8 bytes a block.
    std::uint64_t starts = 0;
    for (const TrunkRecord& r : index.layers) starts += r.blockStarts.size();
    // One scratch block for the reader and one for the compute thread that helps it.
    return kTrunkStagingBytes + 2 * alignUp(index.blockBytes) + 8 * starts;
}

std::uint64_t largestPieceBytes(const TrunkRecord& r) {
    const auto p = splitLayerRecord(r);
    return std::max(p[0].slotBytes, p[1].slotBytes);
}

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

    // A compressed pinned layer's blocks from the arena into the decode slot, the blocks
    // shared among the compute threads (they are idle until the layer is there).
    void decodePinned(int L) {
        const TrunkRecord& r = index.layers[std::size_t(L)];
        const std::byte* base = pinnedArena.data() + pinnedOffset[std::size_t(L)];
        std::byte* out = decodeSlot.data();
        const std::uint64_t B = index.blockBytes;
        const long blocks = long(r.blockCount());
        std::string error;
#pragma omp parallel for schedule(dynamic, 4)
        for (long j = 0; j < blocks; ++j) {
            const std::uint64_t rawLo = std::uint64_t(j) * B;
            const std::size_t size =
                std::size_t(r.blockStarts[std::size_t(j) + 1] - r.blockStarts[std::size_t(j)]);
            try {
                codec::decodeBlock(base + r.blockStarts[std::size_t(j)], size, out + rawLo,
                                   std::size_t(std::min(rawLo + B, r.bytes) - rawLo));
            } catch (const codec::CodecError& e) {
#pragma omp critical(k3_pinned_decode)
                if (error.empty())
                    error = "trunk layer " + std::to_string(L) + " block " + std::to_string(j) +
                            " of " + std::to_string(r.blockCount()) +
                            " (pinned compressed in memory): " + e.what();
            }
        }
        if (!error.empty()) {
            decodedLayer = -1;
            throw TrunkError(error);
        }
        decodedLayer = L;
    }
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

    void decodeOne(const DecodeJob& jb, std::size_t j, std::byte* blockScratch) {
        const TrunkRecord& r = *jb.r;
        const std::uint64_t B = index.blockBytes;
        const std::uint64_t rawLo = j * B, rawHi = std::min(rawLo + B, r.bytes);
        const std::byte* src = jb.buf + (r.offset + r.blockStarts[j] - jb.fileLo);
        const std::size_t size = std::size_t(r.blockStarts[j + 1] - r.blockStarts[j]);
        try {
            if (rawLo >= jb.lo && rawHi <= jb.hi) {
                codec::decodeBlock(src, size, jb.dst + (rawLo - jb.lo), std::size_t(rawHi - rawLo));
            } else {
                codec::decodeBlock(src, size, blockScratch, std::size_t(rawHi - rawLo));
                const std::uint64_t a = std::max(jb.lo, rawLo), z = std::min(jb.hi, rawHi);
                std::memcpy(jb.dst + (a - jb.lo), blockScratch + (a - rawLo), std::size_t(z - a));
            }
        } catch (const codec::CodecError& err) {
            throw TrunkError(
                "trunk layer " + std::to_string(jb.L) + " block " + std::to_string(j) + " of " +
                std::to_string(r.blockCount()) + " (" + index.binPath.string() + " offset " +
                std::to_string(r.offset + r.blockStarts[j]) + ", " + std::to_string(size) +
                " bytes): " + err.what() + "; trunk.bin is damaged or was changed: re-pack it");
        }
    }

    // Claims and decodes blocks of the job until none is left; returns the raw bytes
    // written. A failure stops the job (the reader throws it once the helpers are out).
    std::uint64_t runJob(DecodeJob& jb, std::byte* blockScratch) {
        std::uint64_t done = 0;
        for (;;) {
            const std::size_t j = jb.next.fetch_add(1);
            if (j > jb.last) break;
            try {
                decodeOne(jb, j, blockScratch);
            } catch (const std::exception& e) {
                // Blocks are claimed in order, so every block before j is claimed and
                // finishes: keeping the lowest failing one names the first damaged block.
                std::lock_guard lock(jb.errorMutex);
                if (j < jb.errorBlock) {
                    jb.errorBlock = j;
                    jb.error = e.what();
                }
                jb.next.store(jb.last + 1);
                break;
            }
            const std::uint64_t rawLo = j * index.blockBytes;
            const std::uint64_t rawHi = std::min(rawLo + index.blockBytes, jb.r->bytes);
            const std::uint64_t n = std::min(jb.hi, rawHi) - std::max(jb.lo, rawLo);
            done += n;
            jb.decoded.fetch_add(n);
        }
        return done;
    }

    // The compute thread's wait for slot s (lock held): while the reader decodes a window,
    // it takes blocks too.
    memory::AlignedBuffer helperScratch;
    void waitHelping(std::unique_lock<std::mutex>& lock, int s) {
        while (ring[std::size_t(s)].state == State::Reading) {
            DecodeJob* jb = job;
            if (jb && jb->next.load() <= jb->last) {
                ++jb->helpers;
                lock.unlock();
                const auto t0 = Clock::now();
                const std::uint64_t n = runJob(*jb, helperScratch.data());
                const double secs = since(t0);
                lock.lock();
                --jb->helpers;
                stats.helperDecodeSeconds += secs;
                stats.helperBytesDecoded += n;
                cv.notify_all();
                continue;
            }
            cv.wait(lock);
        }
    }

    // Raw bytes [lo, hi) of coded layer L into dst: the blocks covering them, read in
    // aligned windows of at most the staging buffer, each checked and decoded. A damaged
    // block is an error naming the layer and the block, before any of it is used.
    void readCoded(int L, std::uint64_t lo, std::uint64_t hi, std::byte* dst, ReadCost& cost) {
        const TrunkRecord& r = index.layers[std::size_t(L)];
        const std::uint64_t B = index.blockBytes;
        if (hi <= lo) return;
        // The blocks in windows of at most a quarter of the staging buffer: while one
        // quarter is decoded, the next windows are read into the others (helper threads'
        // preads, up to kInFlight at once), so the disk keeps a deep queue.
        struct Window {
            std::size_t first, last;
            std::uint64_t fileLo, fileHi, need;
        };
        const std::uint64_t part = staging.size() / kStagingParts;
        std::vector<Window> windows;
        const std::size_t lastBlock = std::size_t((hi - 1) / B);
        for (std::size_t b = std::size_t(lo / B); b <= lastBlock;) {
            const std::uint64_t fileLo =
                (r.offset + r.blockStarts[b]) / kTrunkAlignment * kTrunkAlignment;
            std::size_t e = b;
            while (e < lastBlock && alignUp(r.offset + r.blockStarts[e + 2]) - fileLo <= part) ++e;
            windows.push_back({b, e, fileLo, alignUp(r.offset + r.blockStarts[e + 1]),
                               r.offset + r.blockStarts[e + 1] - fileLo});
            b = e + 1;
        }
        auto startRead = [&](std::size_t w) {
            std::byte* buf = staging.data() + (w % kStagingParts) * part;
            const Window win = windows[w];
            return std::async(std::launch::async, [this, buf, win] {
                return file->readWindow(win.fileLo, buf, std::size_t(win.fileHi - win.fileLo));
            });
        };
        std::deque<std::future<std::size_t>> pending;
        std::size_t issued = 0;
        for (; issued < windows.size() && issued < kStagingParts - 1; ++issued)
            pending.push_back(startRead(issued));
        for (std::size_t w = 0; w < windows.size(); ++w) {
            const Window& win = windows[w];
            const auto t0 = Clock::now();
            std::size_t got = 0;
            try {
                got = pending.front().get();
                pending.pop_front();
            } catch (const std::exception& e) {
                throw TrunkError("trunk layer " + std::to_string(L) + " block " +
                                 std::to_string(win.first) + ": " + e.what());
            }
            cost.ioSeconds += since(t0); // the wait for the read (not hidden by the decode)
            // The part read by window w - 1 is free again (decoded): the next read goes there.
            if (issued < windows.size()) pending.push_back(startRead(issued++));
            cost.bytesRead += std::min<std::uint64_t>(got, win.need);
            if (got < win.need) {
                std::size_t cut = win.first; // the first block the read did not bring whole
                while (r.offset + r.blockStarts[cut + 1] <= win.fileLo + got) ++cut;
                throw TrunkError(
                    "trunk layer " + std::to_string(L) + " block " + std::to_string(cut) +
                    ": short read from " + index.binPath.string() + " at offset " +
                    std::to_string(win.fileLo) + ": got " + std::to_string(got) + " of " +
                    std::to_string(win.need) + " bytes (truncated trunk.bin? re-pack it)");
            }
            const auto t1 = Clock::now();
            DecodeJob job;
            job.L = L;
            job.r = &r;
            job.buf = staging.data() + (w % kStagingParts) * part;
            job.fileLo = win.fileLo;
            job.first = win.first;
            job.last = win.last;
            job.lo = lo;
            job.hi = hi;
            job.dst = dst;
            job.next.store(win.first);
            // Offered to a compute thread that waits for this unit: it decodes blocks
            // alongside the reader (claimed one at a time), so a waiting core is not idle.
            {
                std::lock_guard lock(m);
                this->job = &job;
            }
            cv.notify_all();
            runJob(job, scratch.data());
            {
                std::unique_lock lock(m);
                cv.wait(lock, [&] { return job.helpers == 0; });
                this->job = nullptr;
            }
            cost.bytesDecoded += job.decoded.load();
            cost.decodeSeconds += since(t1);
            if (!job.error.empty()) throw TrunkError(job.error);
        }
    }

    // One aligned O_DIRECT read of a whole layer record (a coded one: its blocks, decoded);
    // a short read is a corrupt layer.
    void readLayer(int L, std::byte* dst, ReadCost& cost) {
        const TrunkRecord& r = index.layers[std::size_t(L)];
        if (r.compressed()) {
            readCoded(L, 0, r.bytes, dst, cost);
        } else {
            const auto t0 = Clock::now();
            const std::size_t len = std::size_t(alignUp(r.bytes));
            std::size_t got = 0;
            try {
                got = file->readWindow(r.offset, dst, len);
            } catch (const std::exception& e) {
                throw TrunkError("trunk layer " + std::to_string(L) + ": " + e.what());
            }
            cost.ioSeconds += since(t0);
            if (got < r.bytes)
                throw TrunkError("trunk layer " + std::to_string(L) + ": short read from " +
                                 index.binPath.string() + " at offset " + std::to_string(r.offset) +
                                 ": got " + std::to_string(got) + " of " + std::to_string(r.bytes) +
                                 " bytes (truncated trunk.bin? re-pack it)");
            cost.bytesRead += r.bytes;
        }
        // The bytes are checked as they arrive, every time (a damaged or edited trunk.bin
        // is an error naming the record, never a run on other weights). For a coded layer
        // this checks the decode too: the checksum is of the original bytes.
        try {
            verifyTrunkRecord(r, dst, index.binPath);
        } catch (const PackError& e) {
            throw TrunkError("trunk layer " + std::to_string(L) + ": " + e.what());
        }
    }

    // A layer pinned compressed: its stored blocks as they are in trunk.bin, then decoded
    // once into the decode slot and checked against the record's checksum (each later
    // decode checks every block's own checksum).
    void readPinnedCoded(int L, std::byte* dst, ReadCost& cost) {
        const TrunkRecord& r = index.layers[std::size_t(L)];
        const auto t0 = Clock::now();
        std::size_t got = 0;
        try {
            got = file->readWindow(r.offset, dst, std::size_t(alignUp(r.storedBytes)));
        } catch (const std::exception& e) {
            throw TrunkError("trunk layer " + std::to_string(L) + ": " + e.what());
        }
        cost.ioSeconds += since(t0);
        if (got < r.storedBytes)
            throw TrunkError(
                "trunk layer " + std::to_string(L) + ": short read from " + index.binPath.string() +
                " at offset " + std::to_string(r.offset) + ": got " + std::to_string(got) + " of " +
                std::to_string(r.storedBytes) + " bytes (truncated trunk.bin? re-pack it)");
        cost.bytesRead += r.storedBytes;
        const auto t1 = Clock::now();
        decodePinned(L);
        cost.decodeSeconds += since(t1);
        cost.bytesDecoded += r.bytes;
        try {
            verifyTrunkRecord(r, decodeSlot.data(), index.binPath);
        } catch (const PackError& e) {
            throw TrunkError("trunk layer " + std::to_string(L) + ": " + e.what());
        }
    }

    // The aligned windows of one piece, each straight into its place in the slot (a coded
    // layer: the window's raw bytes, decoded from the blocks that cover it).
    void readPiece(int L, int P, std::byte* dst, ReadCost& cost) {
        const TrunkPiece& piece = pieces[std::size_t(L)][std::size_t(P)];
        const TrunkRecord& r = index.layers[std::size_t(L)];
        for (const TrunkPiece::Run& run : piece.runs) {
            if (r.compressed()) {
                const std::uint64_t lo = run.fileOffset - r.offset;
                readCoded(L, lo, std::min(lo + run.bytes, r.bytes), dst + run.slotOffset, cost);
                continue;
            }
            const auto t0 = Clock::now();
            std::size_t got = 0;
            try {
                got =
                    file->readWindow(run.fileOffset, dst + run.slotOffset, std::size_t(run.bytes));
            } catch (const std::exception& e) {
                throw TrunkError("trunk layer " + std::to_string(L) + " piece " +
                                 std::to_string(P) + ": " + e.what());
            }
            cost.ioSeconds += since(t0);
            // Only the file's last window may come back short (it runs past the end).
            if (got < run.bytes && run.fileOffset + got < index.fileBytes)
                throw TrunkError("trunk layer " + std::to_string(L) + " piece " +
                                 std::to_string(P) + ": short read from " + index.binPath.string() +
                                 " at offset " + std::to_string(run.fileOffset) + ": got " +
                                 std::to_string(got) + " of " + std::to_string(run.bytes) +
                                 " bytes (truncated trunk.bin? re-pack it)");
            cost.bytesRead += run.bytes;
        }
        // A piece holds whole tensors: each is checked against its own checksum.
        for (const auto& [name, at] : piece.tensorAt) {
            try {
                verifyTrunkTensor(r, name, dst + at, index.binPath);
            } catch (const PackError& e) {
                throw TrunkError("trunk layer " + std::to_string(L) + " piece " +
                                 std::to_string(P) + ": " + e.what());
            }
        }
    }

    void account(const ReadCost& c) {
        stats.ioSeconds += c.ioSeconds;
        stats.decodeSeconds += c.decodeSeconds;
        stats.bytesRead += c.bytesRead;
        stats.bytesDecoded += c.bytesDecoded;
    }

    void readerLoop() {
        std::unique_lock lock(m);
        for (;;) {
            cv.wait(lock, [&] { return stop || !queue.empty(); });
            if (stop) return;
            const int s = queue.front();
            queue.pop_front();
            const int L = ring[std::size_t(s)].layer;
            const int P = ring[std::size_t(s)].piece;
            std::byte* dst = ring[std::size_t(s)].buf.data();
            lock.unlock();
            ReadCost cost;
            std::string error;
            try {
                if (P < 0)
                    readLayer(L, dst, cost);
                else
                    readPiece(L, P, dst, cost);
            } catch (const std::exception& e) {
                error = e.what();
            }
            lock.lock();
            Slot& slot = ring[std::size_t(s)];
            slot.state = error.empty() ? State::Ready : State::Failed;
            slot.error = error;
            if (error.empty()) {
                account(cost);
                ++(P < 0 ? stats.reads : stats.pieceReads);
            } else {
                stats.ioSeconds += cost.ioSeconds;
            }
            cv.notify_all();
        }
    }

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
    bool split(int L) const {
        return !pieces[std::size_t(L)].empty();
    }
    // The unit read after (L, P) in the cyclic order: the second piece, else the next layer.
    std::pair<int, int> nextUnit(int L, int P) const {
        if (P == 0) return {L, 1};
        const int next = nextStreamed(L);
        if (next < 0) return {-1, -1};
        return {next, split(next) ? 0 : -1};
    }

    const std::byte* acquireUnit(int L, int P);
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
    d_->pieces.resize(std::size_t(n));
    for (int L = d_->pinnedCount; L < n; ++L) {
        const TrunkRecord& r = index.layers[std::size_t(L)];
        if (alignUp(r.bytes) <= plan.ringSlotBytes) continue;
        if (!plan.piecewise)
            throw TrunkError("trunk layer " + std::to_string(L) + " is " + std::to_string(r.bytes) +
                             " bytes, more than the ring slot of " +
                             std::to_string(plan.ringSlotBytes));
        const auto two = splitLayerRecord(r);
        for (int p = 0; p < 2; ++p)
            if (two[std::size_t(p)].slotBytes > plan.ringSlotBytes)
                throw TrunkError(
                    "trunk layer " + std::to_string(L) + " piece " + std::to_string(p) + " needs " +
                    std::to_string(two[std::size_t(p)].slotBytes) +
                    " bytes, more than the ring slot of " + std::to_string(plan.ringSlotBytes));
        d_->pieces[std::size_t(L)].assign(two.begin(), two.end());
        ++d_->stats.piecewiseLayers;
    }
    try {
        d_->file = std::make_unique<AlignedFile>(index.binPath);
    } catch (const std::exception& e) {
        throw TrunkError(e.what());
    }

    std::size_t pinnedBytes = 0;
    std::uint64_t decodeSlot = 0;
    for (int L = 0; L < d_->pinnedCount; ++L) {
        const TrunkRecord& r = index.layers[std::size_t(L)];
        const bool coded = plan.pinCompressed && r.compressed();
        d_->pinnedCoded.push_back(coded);
        d_->pinnedOffset.push_back(pinnedBytes);
        pinnedBytes += std::size_t(alignUp(coded ? r.storedBytes : r.bytes));
        if (coded) {
            decodeSlot = std::max(decodeSlot, alignUp(r.bytes));
            ++d_->stats.pinnedCompressedLayers;
        }
    }
    if (decodeSlot > plan.pinDecodeSlotBytes)
        throw TrunkError("the memory plan's decode slot for compressed pinned layers is " +
                         std::to_string(plan.pinDecodeSlotBytes) + " bytes; a pinned layer needs " +
                         std::to_string(decodeSlot));
    d_->pinnedArena = memory::AlignedBuffer(pinnedBytes);
    if (decodeSlot) d_->decodeSlot = memory::AlignedBuffer(std::size_t(decodeSlot));
    if (index.compressed()) {
        d_->staging = memory::AlignedBuffer(std::size_t(kTrunkStagingBytes));
        d_->scratch = memory::AlignedBuffer(std::size_t(alignUp(index.blockBytes)));
        d_->helperScratch = memory::AlignedBuffer(std::size_t(alignUp(index.blockBytes)));
    }
    for (int L = 0; L < d_->pinnedCount; ++L) {
        Impl::ReadCost cost;
        std::byte* at = d_->pinnedArena.data() + d_->pinnedOffset[std::size_t(L)];
        if (d_->pinnedCoded[std::size_t(L)])
            d_->readPinnedCoded(L, at, cost);
        else
            d_->readLayer(L, at, cost);
        d_->account(cost);
        ++d_->stats.reads;
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
bool TrunkStreamer::pinnedCompressed(int layer) const {
    return pinned(layer) && d_->pinnedCoded[std::size_t(layer)];
}
const std::byte* TrunkStreamer::pinnedData(int layer) const {
    if (!pinned(layer) || pinnedCompressed(layer)) return nullptr;
    return d_->pinnedArena.data() + d_->pinnedOffset[std::size_t(layer)];
}

const TrunkIndex& TrunkStreamer::index() const {
    return d_->index;
}

TrunkStats TrunkStreamer::stats() const {
    std::lock_guard lock(d_->m);
    return d_->stats;
}

bool TrunkStreamer::piecewise(int layer) const {
    return layer >= 0 && layer < int(d_->pieces.size()) && d_->split(layer);
}

const TrunkPiece& TrunkStreamer::piece(int layer, int p) const {
    if (!piecewise(layer) || p < 0 || p > 1)
        throw TrunkError("trunk layer " + std::to_string(layer) + " has no piece " +
                         std::to_string(p));
    return d_->pieces[std::size_t(layer)][std::size_t(p)];
}

const std::byte* TrunkStreamer::acquire(int L) {
    Impl& d = *d_;
    if (L < 0 || L >= int(d.index.layers.size()))
        throw TrunkError("trunk layer " + std::to_string(L) + " does not exist (the trunk has " +
                         std::to_string(d.index.layers.size()) + ")");
    if (d.split(L))
        throw TrunkError("trunk layer " + std::to_string(L) +
                         " is larger than the ring slot and streams in pieces: use acquirePiece");
    return d.acquireUnit(L, -1);
}

const std::byte* TrunkStreamer::acquirePiece(int L, int p) {
    if (!piecewise(L) || p < 0 || p > 1)
        throw TrunkError("trunk layer " + std::to_string(L) + " has no piece " + std::to_string(p));
    return d_->acquireUnit(L, p);
}

const std::byte* TrunkStreamer::Impl::acquireUnit(int L, int P) {
    Impl& d = *this;
    std::unique_lock lock(d.m);
    if (P <= 0) ++d.stats.binds; // one bind per layer, however many pieces
    if (L < d.pinnedCount) {
        ++d.stats.pinnedHits;
        if (!d.pinnedCoded[std::size_t(L)])
            return d.pinnedArena.data() + d.pinnedOffset[std::size_t(L)];
        if (d.decodedLayer == L) return d.decodeSlot.data();
        // Only the compute side touches the decode slot: the reader keeps reading.
        lock.unlock();
        const auto t0 = Clock::now();
        d.decodePinned(L);
        const double secs = since(t0);
        lock.lock();
        d.stats.pinnedDecodeSeconds += secs;
        d.stats.pinnedBytesDecoded += d.index.layers[std::size_t(L)].bytes;
        return d.decodeSlot.data();
    }
    using State = Impl::State;
    const int R = int(d.ring.size());
    int s = -1;
    for (int i = 0; i < R; ++i) {
        const auto& slot = d.ring[std::size_t(i)];
        if (slot.layer == L && slot.piece == P &&
            (slot.state == State::Reading || slot.state == State::Ready))
            s = i;
    }
    const auto t0 = Clock::now();
    if (s < 0) { // not prefetched (first layer of the run, or out-of-order access)
        s = (R == 1 || d.current != 0) ? 0 : 1;
        d.waitHelping(lock, s);
        d.request(s, L, P);
    }
    d.waitHelping(lock, s);
    d.stats.waitSeconds += since(t0);
    Impl::Slot& slot = d.ring[std::size_t(s)];
    if (slot.state == State::Failed) {
        const std::string err = slot.error;
        slot.state = State::Idle;
        slot.layer = -1;
        throw TrunkError(err);
    }
    d.current = s;
    // The next streamed unit goes into the other slot while this one computes.
    if (R >= 2) {
        const auto [nextL, nextP] = d.nextUnit(L, P);
        const int other = s == 0 ? 1 : 0;
        Impl::Slot& o = d.ring[std::size_t(other)];
        const bool same = nextL == L && nextP == P;
        if (nextL >= 0 && !same && o.state != State::Reading &&
            !(o.layer == nextL && o.piece == nextP && o.state == State::Ready))
            d.request(other, nextL, nextP);
    }
    return slot.buf.data();
}

} // namespace k3
