// TrunkStreamer's reads: a layer, a piece, a coded layer's blocks in staged windows
// (decoded by the reader with a waiting compute thread's help), a pinned compressed
// layer; every byte checked against trunk.json's checksums before it is used.

#include "memory/TrunkStreamerImpl.hpp"

#include "memory/TrunkCodec.hpp"

#include <algorithm>
#include <cstring>
#include <deque>
#include <future>

namespace k3 {

using streaming::Clock;
using streaming::kStagingParts;
using streaming::since;

// A compressed pinned layer's blocks from the arena into the decode slot, the blocks
// shared among the compute threads (they are idle until the layer is there).
void TrunkStreamer::Impl::decodePinned(int L) {
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

void TrunkStreamer::Impl::decodeOne(const DecodeJob& jb, std::size_t j, std::byte* blockScratch) {
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
        throw TrunkError("trunk layer " + std::to_string(jb.L) + " block " + std::to_string(j) +
                         " of " + std::to_string(r.blockCount()) + " (" + index.binPath.string() +
                         " offset " + std::to_string(r.offset + r.blockStarts[j]) + ", " +
                         std::to_string(size) + " bytes): " + err.what() +
                         "; trunk.bin is damaged or was changed: re-pack it");
    }
}

// Claims and decodes blocks of the job until none is left; returns the raw bytes
// written. A failure stops the job (the reader throws it once the helpers are out).
std::uint64_t TrunkStreamer::Impl::runJob(DecodeJob& jb, std::byte* blockScratch) {
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
void TrunkStreamer::Impl::waitHelping(std::unique_lock<std::mutex>& lock, int s) {
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

// The blocks covering raw bytes [lo, hi) of coded record r in windows of at most a
// quarter of the staging buffer: while one quarter is decoded, the next windows are read
// into the others (helper threads' preads, up to kInFlight at once), so the disk keeps a
// deep queue.
std::vector<TrunkStreamer::Impl::Window>
TrunkStreamer::Impl::codedWindows(const TrunkRecord& r, std::uint64_t lo, std::uint64_t hi) const {
    const std::uint64_t B = index.blockBytes;
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
    return windows;
}

// Raw bytes [lo, hi) of coded layer L into dst: the blocks covering them, read in
// aligned windows of at most the staging buffer, each checked and decoded. A damaged
// block is an error naming the layer and the block, before any of it is used.
void TrunkStreamer::Impl::readCoded(int L, std::uint64_t lo, std::uint64_t hi, std::byte* dst,
                                    ReadCost& cost) {
    const TrunkRecord& r = index.layers[std::size_t(L)];
    if (hi <= lo) return;
    const std::uint64_t part = staging.size() / kStagingParts;
    const std::vector<Window> windows = codedWindows(r, lo, hi);
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
            throw TrunkError("trunk layer " + std::to_string(L) + " block " + std::to_string(cut) +
                             ": short read from " + index.binPath.string() + " at offset " +
                             std::to_string(win.fileLo) + ": got " + std::to_string(got) + " of " +
                             std::to_string(win.need) + " bytes (truncated trunk.bin? re-pack it)");
        }
        decodeWindow(L, win, staging.data() + (w % kStagingParts) * part, lo, hi, dst, cost);
    }
}

// The blocks of one staged window (buf holds it from win.fileLo) decoded into dst, the
// raw range [lo, hi) of layer L.
void TrunkStreamer::Impl::decodeWindow(int L, const Window& win, const std::byte* buf,
                                       std::uint64_t lo, std::uint64_t hi, std::byte* dst,
                                       ReadCost& cost) {
    const auto t1 = Clock::now();
    DecodeJob job;
    job.L = L;
    job.r = &index.layers[std::size_t(L)];
    job.buf = buf;
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

// One aligned O_DIRECT read of a whole layer record (a coded one: its blocks, decoded);
// a short read is a corrupt layer.
void TrunkStreamer::Impl::readLayer(int L, std::byte* dst, ReadCost& cost) {
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
void TrunkStreamer::Impl::readPinnedCoded(int L, std::byte* dst, ReadCost& cost) {
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
        throw TrunkError("trunk layer " + std::to_string(L) + ": short read from " +
                         index.binPath.string() + " at offset " + std::to_string(r.offset) +
                         ": got " + std::to_string(got) + " of " + std::to_string(r.storedBytes) +
                         " bytes (truncated trunk.bin? re-pack it)");
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
void TrunkStreamer::Impl::readPiece(int L, int P, std::byte* dst, ReadCost& cost) {
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
            got = file->readWindow(run.fileOffset, dst + run.slotOffset, std::size_t(run.bytes));
        } catch (const std::exception& e) {
            throw TrunkError("trunk layer " + std::to_string(L) + " piece " + std::to_string(P) +
                             ": " + e.what());
        }
        cost.ioSeconds += since(t0);
        // Only the file's last window may come back short (it runs past the end).
        if (got < run.bytes && run.fileOffset + got < index.fileBytes)
            throw TrunkError("trunk layer " + std::to_string(L) + " piece " + std::to_string(P) +
                             ": short read from " + index.binPath.string() + " at offset " +
                             std::to_string(run.fileOffset) + ": got " + std::to_string(got) +
                             " of " + std::to_string(run.bytes) +
                             " bytes (truncated trunk.bin? re-pack it)");
        cost.bytesRead += run.bytes;
    }
    // A piece holds whole tensors: each is checked against its own checksum.
    for (const auto& [name, at] : piece.tensorAt) {
        try {
            verifyTrunkTensor(r, name, dst + at, index.binPath);
        } catch (const PackError& e) {
            throw TrunkError("trunk layer " + std::to_string(L) + " piece " + std::to_string(P) +
                             ": " + e.what());
        }
    }
}

} // namespace k3
