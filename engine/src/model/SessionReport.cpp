// The session's memory report: the plan, the trunk's and the cache's counters, the
// draft's share and the peak RSS, and its text (k3 prints it in its run report).

#include "k3/process_memory.hpp"
#include "k3/session.hpp"
#include "model/SessionImpl.hpp"
#include "platform/Platform.hpp"

#include <cstdio>

namespace k3 {

std::uint64_t peakResidentBytes() {
    return platform::peakResidentBytes();
}

MemoryReport Session::memoryReport() const {
    MemoryReport r;
    const Model& m = impl_->model;
    r.plan = m.memoryPlan();
    static_cast<MemoryStats&>(r) = m.memoryStats();
    r.peakRssBytes = peakResidentBytes();
    if (impl_->draft) {
        r.draftBytes =
            impl_->draft->weightBytes() + (impl_->draftState ? impl_->draftState->heldBytes() : 0);
        r.draftFileBytes = impl_->draftFileBytes;
    }
    r.wallSeconds = impl_->wallSeconds;
    r.vision = impl_->visionMemory;
    r.vision.heldBytes = impl_->vision ? impl_->vision->weightBytes() : 0;
    return r;
}

double MemoryReport::ioShare() const {
    return wallSeconds > 0 ? (trunk.waitSeconds + cache.readSeconds) / wallSeconds : 0;
}

std::string MemoryReport::format() const {
    std::string out;
    char buf[512];
    if (expertsCached) {
        const auto pct = [&](std::uint64_t n) {
            return cache.requests ? 100.0 * double(n) / double(cache.requests) : 0.0;
        };
        // Only TRUE hits were served without a read: a batch read just before use and an
        // expert shared by the positions of a chunk both came off the disk.
        std::snprintf(buf, sizeof buf,
                      "cache\n  slots        : %d of %s = %s arena\n"
                      "  requests     : %llu (experts per layer and chunk; %llu position uses, "
                      "%llu of them chunk reuse)\n"
                      "  TRUE hits    : %llu (%.2f%%) served without a read\n",
                      cacheSlots, formatBytes(cacheSlotBytes).c_str(),
                      formatBytes(std::uint64_t(cacheSlots) * cacheSlotBytes).c_str(),
                      (unsigned long long)cache.requests, (unsigned long long)cache.positionUses,
                      (unsigned long long)cache.chunkReuse(),
                      (unsigned long long)cache.residentHits, pct(cache.residentHits));
        out += buf;
        std::snprintf(buf, sizeof buf,
                      "  off the disk : %llu (%.2f%%): %llu read by the layer's batch, %llu on "
                      "request; evictions %llu\n",
                      (unsigned long long)(cache.prefetchHits + cache.misses),
                      pct(cache.prefetchHits + cache.misses),
                      (unsigned long long)cache.prefetchHits, (unsigned long long)cache.misses,
                      (unsigned long long)cache.evictions);
        out += buf;
        std::snprintf(buf, sizeof buf,
                      "  read from disk: %s in %llu reads (%llu failed); waited %.2f s, reads in "
                      "flight %.2f s\n",
                      formatBytes(cache.bytesRead).c_str(), (unsigned long long)cache.diskReads,
                      (unsigned long long)cache.failedReads, cache.readSeconds,
                      cache.ioBusySeconds);
        out += buf;
        std::snprintf(buf, sizeof buf, "  expert I/O   : %s, up to %d reads in flight%s%s\n",
                      expertIo.mode.c_str(), expertIo.depth, expertIo.note.empty() ? "" : " - ",
                      expertIo.note.c_str());
        out += buf;
    } else {
        out += "cache\n  routed experts resident (no cache)\n";
    }
    std::snprintf(buf, sizeof buf,
                  "I/O share of wall clock: %.1f%%  (trunk %.2f s + experts %.2f s of %.2f s)\n",
                  100.0 * ioShare(), trunk.waitSeconds, cache.readSeconds, wallSeconds);
    out += buf;
    if (trunkStreamed) {
        const double mbps =
            trunk.ioSeconds > 0 ? double(trunk.bytesRead) / 1e6 / trunk.ioSeconds : 0;
        std::snprintf(
            buf, sizeof buf,
            "trunk\n  pinned %d/%d layers (%d kept compressed), ring %d slots of %s\n"
            "  binds %llu, pinned hits %llu, reads %llu\n  read %s in %.2f s (%.0f MB/s)\n",
            trunk.pinnedLayers, trunk.totalLayers, trunk.pinnedCompressedLayers, trunk.ringSlots,
            formatBytes(trunk.ringSlotBytes).c_str(), (unsigned long long)trunk.binds,
            (unsigned long long)trunk.pinnedHits, (unsigned long long)trunk.reads,
            formatBytes(trunk.bytesRead).c_str(), trunk.ioSeconds, mbps);
        out += buf;
        if (trunk.piecewiseLayers > 0) {
            std::snprintf(
                buf, sizeof buf,
                "  %d layers larger than the slot, streamed in 2 pieces (%llu piece reads)\n",
                trunk.piecewiseLayers, (unsigned long long)trunk.pieceReads);
            out += buf;
        }
    } else {
        out += "trunk\n  resident (no packed trunk)\n";
    }
    if (draftBytes > 0) {
        std::snprintf(buf, sizeof buf, "draft\n  %s in memory (weights and state), %s on disk\n",
                      formatBytes(draftBytes).c_str(), formatBytes(draftFileBytes).c_str());
        out += buf;
    }
    if (plan.visionBytes > 0) {
        std::snprintf(buf, sizeof buf,
                      "vision tower\n  %s: %s held now, peak %s; loaded %d times, released %d\n",
                      plan.visionResident ? "RESIDENT (kept after its first image)"
                                          : "TRANSIENT (released after each image prompt's rows)",
                      formatBytes(vision.heldBytes).c_str(), formatBytes(vision.peakBytes).c_str(),
                      vision.loads, vision.releases);
        out += buf;
    }
    std::snprintf(buf, sizeof buf, "PEAK RSS for the whole run: %s   <- quote this, not the plan\n",
                  formatBytes(peakRssBytes).c_str());
    out += buf;
    return out;
}

} // namespace k3
