#include "k3/trunk.hpp"

#include "memory/TrunkStreamerImpl.hpp"

#include <algorithm>

namespace k3 {

using streaming::Clock;
using streaming::since;

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

void TrunkStreamer::Impl::readerLoop() {
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
