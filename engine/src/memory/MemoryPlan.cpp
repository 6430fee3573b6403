#include "k3/memory_plan.hpp"

#include "k3/pack.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <tuple>

namespace k3 {
namespace {

struct FixedPoint {
    int pinned = 0;
    std::uint64_t pinnedBytes = 0;
    std::uint64_t decodeSlot = 0;
    std::uint64_t slot = 0;
    bool ok = false;
};

// What pinning the first k layers costs: their bytes as held (raw, or stored when pinned
// compressed), and for compressed ones the decode slot of the largest of them.
struct PinCosts {
    std::vector<std::uint64_t> prefix, decodeSlot;
    PinCosts(std::span<const std::uint64_t> layers, std::span<const std::uint64_t> stored) {
        const std::size_t n = layers.size();
        prefix.assign(n + 1, 0);
        decodeSlot.assign(n + 1, 0);
        codedCount.assign(n + 1, 0);
        for (std::size_t i = 0; i < n; ++i) {
            const bool coded = !stored.empty() && stored[i] != layers[i];
            codedCount[i + 1] = codedCount[i] + (coded ? 1 : 0);
            prefix[i + 1] = prefix[i] + alignUp(coded ? stored[i] : layers[i]);
            decodeSlot[i + 1] = std::max(decodeSlot[i], coded ? alignUp(layers[i]) : 0);
        }
    }
    std::uint64_t at(std::size_t k) const { return prefix[k] + decodeSlot[k]; }
    std::vector<int> codedCount; // coded layers among the first k
};

// Pinned count and slot size depend on each other: the ring slot must hold the largest
// layer NOT pinned, and the ring's size decides how many layers can be pinned. Rather
// than iterate from "nothing pinned" (which never discovers that pinning one big layer
// shrinks the slot enough to pin more), every prefix length is checked with a suffix
// maximum and the longest self-consistent one wins: that is the fixed point.
FixedPoint fixedPoint(std::span<const std::uint64_t> layers, const PinCosts& pin,
                      std::uint64_t budget, int ring) {
    const std::size_t n = layers.size();
    std::vector<std::uint64_t> suffixMax(n + 1, 0);
    for (std::size_t i = n; i-- > 0;) suffixMax[i] = std::max(suffixMax[i + 1], layers[i]);
    FixedPoint fp;
    for (std::size_t k = n; k-- > 0;) { // k pinned, layers k..n-1 streamed
        const std::uint64_t slot = alignUp(std::max<std::uint64_t>(suffixMax[k], 1));
        if (pin.at(k) + slot * std::uint64_t(ring) <= budget) {
            fp.pinned = int(k);
            fp.pinnedBytes = pin.prefix[k];
            fp.decodeSlot = pin.decodeSlot[k];
            fp.slot = slot;
            fp.ok = true;
            return fp;
        }
    }
    return fp;
}

// Piecewise: the slot must hold the larger piece of every streamed layer; the rest of
// the budget after the pinned prefix is the ring, so layers up to the slot stay whole.
// The longest prefix that leaves such a slot wins (a pinned layer saves a read).
FixedPoint piecewiseFixedPoint(std::span<const std::uint64_t> layers,
                               std::span<const std::uint64_t> pieces, const PinCosts& pin,
                               std::uint64_t budget, int ring) {
    const std::size_t n = layers.size();
    std::vector<std::uint64_t> suffixPiece(n + 1, 0), suffixLayer(n + 1, 0);
    for (std::size_t i = n; i-- > 0;) {
        suffixPiece[i] =
            std::max(suffixPiece[i + 1], alignUp(std::min(pieces[i], alignUp(layers[i]))));
        suffixLayer[i] = std::max(suffixLayer[i + 1], alignUp(layers[i]));
    }
    FixedPoint fp;
    for (std::size_t k = n; k-- > 0;) {
        if (pin.at(k) > budget) continue;
        const std::uint64_t share =
            (budget - pin.at(k)) / std::uint64_t(ring) / kTrunkAlignment * kTrunkAlignment;
        const std::uint64_t slot = std::min(share, suffixLayer[k]);
        if (slot >= std::max<std::uint64_t>(suffixPiece[k], kTrunkAlignment)) {
            fp.pinned = int(k);
            fp.pinnedBytes = pin.prefix[k];
            fp.decodeSlot = pin.decodeSlot[k];
            fp.slot = slot;
            fp.ok = true;
            return fp;
        }
    }
    return fp;
}

void line(std::string& out, const char* label, std::uint64_t bytes, const std::string& note = {}) {
    char buf[160];
    std::snprintf(buf, sizeof buf, "  %-18s %12s%s%s\n", label, formatBytes(bytes).c_str(),
                  note.empty() ? "" : "  ", note.c_str());
    out += buf;
}

} // namespace

std::string formatBytes(std::uint64_t bytes) {
    char buf[64];
    if (bytes >= 1'000'000'000ull)
        std::snprintf(buf, sizeof buf, "%.2f GB", double(bytes) / 1e9);
    else if (bytes >= 1'000'000ull)
        std::snprintf(buf, sizeof buf, "%.2f MB", double(bytes) / 1e6);
    else if (bytes >= 1'000ull)
        std::snprintf(buf, sizeof buf, "%.2f KB", double(bytes) / 1e3);
    else
        std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(bytes));
    return buf;
}

std::uint64_t MemoryPlan::total() const {
    return trunkBytes() + trunkDecodeBytes + modelBytes + residentExpertBytes + cacheBytes() +
           stateBytes + bufferBytes + kvBytes + draftBytes + visionPlanBytes();
}

bool pinCompressedPays(std::uint64_t rawPinnedBytes, std::uint64_t storedSavedBytes,
                       double decodeBytesPerSecond, double diskBytesPerSecond) {
    if (storedSavedBytes == 0 || !(decodeBytesPerSecond > 0) || !(diskBytesPerSecond > 0))
        return false;
    return double(rawPinnedBytes) / decodeBytesPerSecond <
           double(storedSavedBytes) / diskBytesPerSecond;
}

void planTrunk(MemoryPlan& plan, std::span<const std::uint64_t> layers, std::uint64_t budget,
               std::span<const std::uint64_t> pieces, std::span<const std::uint64_t> stored) {
    if (!stored.empty() && stored.size() != layers.size()) stored = {};
    const PinCosts pin(layers, stored);
    plan.totalLayers = int(layers.size());
    plan.piecewise = false;
    plan.pinCompressed = !stored.empty();
    plan.pinDecodeSlotBytes = 0;
    plan.pinnedCompressedLayers = 0;
    std::uint64_t largest = 0;
    for (auto b : layers) largest = std::max(largest, b);
    if (budget >= pin.at(layers.size())) { // everything pinned: no ring at all
        plan.pinnedLayers = int(layers.size());
        plan.pinnedBytes = pin.prefix.back();
        plan.pinDecodeSlotBytes = pin.decodeSlot.back();
        plan.pinnedCompressedLayers = pin.codedCount.back();
        plan.ringSlots = 0;
        plan.ringSlotBytes = 0;
        return;
    }
    // Overlap first: a ring of 2 whole slots, else a ring of 2 where layers over the
    // slot arrive in two pieces (every other layer still overlaps its read), and only
    // then a ring of 1 (no overlap at all): whole, else in pieces.
    const bool canSplit = pieces.size() == layers.size();
    std::uint64_t largestPiece = 0;
    if (canSplit)
        for (std::size_t i = 0; i < layers.size(); ++i)
            largestPiece = std::max(largestPiece, alignUp(std::min(pieces[i], alignUp(layers[i]))));
    if (budget == 0) { // "stream everything through the smallest ring": one slot, no overlap
        plan.pinnedLayers = 0;
        plan.pinnedBytes = 0;
        plan.pinCompressed = false;
        plan.ringSlots = 1;
        plan.piecewise = canSplit && largestPiece < alignUp(largest);
        plan.ringSlotBytes =
            plan.piecewise ? largestPiece : alignUp(std::max<std::uint64_t>(largest, 1));
        return;
    }
    for (int ring : {2, 1}) {
        FixedPoint fp = fixedPoint(layers, pin, budget, ring);
        bool split = false;
        if (!fp.ok && canSplit) {
            fp = piecewiseFixedPoint(layers, pieces, pin, budget, ring);
            split = fp.ok;
        }
        if (!fp.ok) continue;
        plan.pinnedLayers = fp.pinned;
        plan.pinnedBytes = fp.pinnedBytes;
        plan.pinDecodeSlotBytes = fp.decodeSlot;
        plan.pinnedCompressedLayers = pin.codedCount[std::size_t(fp.pinned)];
        plan.ringSlots = ring;
        plan.ringSlotBytes = fp.slot;
        plan.piecewise = split;
        return;
    }
    const std::uint64_t slot = canSplit ? largestPiece : alignUp(largest);
    throw MemoryRefusal("the trunk budget of " + formatBytes(budget) +
                            " cannot hold one ring slot for the largest " +
                            (canSplit ? "piece of a layer (" + formatBytes(slot) +
                                            ": a layer's attention or its MLP)"
                                      : "layer (" + formatBytes(slot) + ")") +
                            "; it needs at least " + formatBytes(slot) + " (two slots, " +
                            formatBytes(2 * slot) + ", also overlap the next read with compute)",
                        MemoryRefusal::Reason::TrunkTooSmall, slot);
}

namespace {

// An automatic budget's trunk and cache bytes: 90% of the available memory less what
// the plan holds anyway, the trunk first, the cache the rest.
std::pair<std::uint64_t, std::uint64_t>
automaticBudgets(const PlanInputs& in, const MemoryPlan& plan, std::uint64_t available) {
    const std::uint64_t fixed = plan.trunkDecodeBytes + plan.modelBytes + plan.residentExpertBytes +
                                plan.stateBytes + plan.bufferBytes + plan.kvBytes +
                                plan.draftBytes + plan.visionBytes;
    const auto spendable = std::uint64_t(double(available) * 0.9);
    const std::uint64_t rest = spendable > fixed ? spendable - fixed : 0;
    std::uint64_t allLayers = 0, decodeSlot = 0;
    for (std::size_t i = 0; i < in.layerBytes.size(); ++i) {
        const bool coded = in.layerStoredBytes.size() == in.layerBytes.size() &&
                           in.layerStoredBytes[i] != in.layerBytes[i];
        allLayers += alignUp(coded ? in.layerStoredBytes[i] : in.layerBytes[i]);
        if (coded) decodeSlot = std::max(decodeSlot, alignUp(in.layerBytes[i]));
    }
    allLayers += decodeSlot;
    // Trunk first: a pinned layer saves a read on every token, an expert slot only
    // on a repeat.
    const std::uint64_t minCache = in.expertSlotBytes * std::uint64_t(std::max(1, in.topK));
    const std::uint64_t trunkBudget = std::min(allLayers, rest > minCache ? rest - minCache : 0);
    MemoryPlan probe;
    try {
        planTrunk(probe, in.layerBytes, trunkBudget, in.layerPieceBytes, in.layerStoredBytes);
    } catch (const MemoryRefusal&) {
        probe.ringSlotBytes = 0;
    }
    return {trunkBudget, rest > probe.trunkBytes() ? rest - probe.trunkBytes() : 0};
}

} // namespace

MemoryPlan planMemory(const PlanInputs& in, const MemoryBudget& budget, std::uint64_t available) {
    MemoryPlan plan;
    plan.budget = budget;
    plan.available = available;
    plan.modelBytes = in.modelBytes;
    plan.trunkDecodeBytes = in.streamed ? in.trunkDecodeBytes : 0;
    plan.modelTablesStreamed = in.modelTablesStreamed;
    plan.residentExpertBytes = in.residentExpertBytes;
    plan.stateBytes = in.stateBytes;
    plan.requestedChunk = in.requestedChunk;
    plan.chunkPositions = in.requestedChunk > 0 ? in.requestedChunk : kDefaultPrefillChunk;
    // The requested chunk (else the default's) first, so an automatic budget leaves room
    // for it; an unasked chunk then grows into what the budgets leave.
    plan.chunkBytes = in.chunkBytesPerPosition * std::uint64_t(plan.chunkPositions);
    plan.bufferBytes = in.bufferBytes + plan.chunkBytes;
    plan.contextLength = in.contextLength;
    plan.kvBytes = in.kvBytesPerPosition * std::uint64_t(std::max(0, in.contextLength));
    plan.expertSlotBytes = in.expertSlotBytes;
    plan.draftBytes = in.draftBytes;
    plan.visionBytes = in.visionBytes;

    std::uint64_t trunkBudget = budget.trunkBytes, cacheBudget = budget.cacheBytes;
    if (budget.automatic)
        std::tie(trunkBudget, cacheBudget) = automaticBudgets(in, plan, available);
    if (!in.streamed) trunkBudget = ~std::uint64_t{0};
    planTrunk(plan, in.layerBytes, trunkBudget, in.layerPieceBytes, in.layerStoredBytes);

    if (in.expertSlotBytes > 0 && in.expertCount > 0) {
        std::uint64_t slots = cacheBudget / in.expertSlotBytes;
        slots = std::clamp<std::uint64_t>(slots, 1, in.expertCount);
        plan.cacheSlots = int(std::min<std::uint64_t>(slots, 1u << 30));
    }
    // An unasked chunk gets as much memory as the expert cache (at least the default,
    // at most the context: a prompt is never longer): both buy fewer reads, and the plan
    // stays what the budget says, whatever the machine has free.
    if (in.requestedChunk <= 0 && in.chunkBytesPerPosition > 0) {
        const std::uint64_t longest =
            std::uint64_t(std::max(kDefaultPrefillChunk, in.contextLength));
        plan.chunkPositions = int(std::clamp<std::uint64_t>(
            plan.cacheBytes() / in.chunkBytesPerPosition, kDefaultPrefillChunk, longest));
        plan.chunkBytes = in.chunkBytesPerPosition * std::uint64_t(plan.chunkPositions);
        plan.bufferBytes = in.bufferBytes + plan.chunkBytes;
    }
    // A bigger chunk never takes the plan past 95% of what is available: it shrinks to
    // what fits next to the budgets asked for (one position at worst). The tower stays
    // resident only when it costs the chunk nothing; else it takes turns with the chunk
    // (MemoryPlan::visionResident): a reload per image prompt (its weights, usually from
    // the page cache) costs less than a prefill of more, shorter chunks.
    if (available > 0) {
        const auto limit = std::uint64_t(double(available) * kPlanMaxShareOfAvailable);
        plan.visionResident = true;
        const std::uint64_t others = plan.total() - plan.chunkBytes - plan.visionBytes;
        if (plan.visionBytes > 0 && others + plan.chunkBytes + plan.visionBytes > limit)
            plan.visionResident = false;
        if (in.chunkBytesPerPosition > 0) {
            const std::uint64_t held = others + (plan.visionResident ? plan.visionBytes : 0);
            const std::uint64_t fits = limit > held ? (limit - held) / in.chunkBytesPerPosition : 0;
            plan.chunkPositions =
                int(std::clamp<std::uint64_t>(fits, 1, std::uint64_t(plan.chunkPositions)));
            plan.chunkBytes = in.chunkBytesPerPosition * std::uint64_t(plan.chunkPositions);
            plan.bufferBytes = in.bufferBytes + plan.chunkBytes;
        }
    }
    return plan;
}

std::string MemoryPlan::format() const {
    std::string out = "memory plan (" + budget.source + ")\n";
    char note[160];
    std::snprintf(note, sizeof note, "%d/%d layers pinned (%s), ring %d x %s%s", pinnedLayers,
                  totalLayers, formatBytes(pinnedBytes).c_str(), ringSlots,
                  formatBytes(ringSlotBytes).c_str(),
                  piecewise ? ", larger layers in 2 pieces" : "");
    line(out, ringSlots ? "trunk (STREAMED)" : "trunk (PINNED)", trunkBytes(), note);
    if (pinnedCompressedLayers > 0)
        line(out, "  pinned decode", pinDecodeSlotBytes,
             std::to_string(pinnedCompressedLayers) + " of the " + std::to_string(pinnedLayers) +
                 " pinned layers kept compressed, each decoded here before use");
    if (!pinChoice.empty()) out += "  " + pinChoice + "\n";
    if (trunkDecodeBytes)
        line(out, "trunk decode", trunkDecodeBytes,
             "compressed trunk: staging in 4 parts + 2 blocks");
    line(out, "embed + lm_head", modelBytes,
         modelTablesStreamed ? "STREAMED: one embedding row, lm_head in row blocks" : "");
    if (residentExpertBytes) line(out, "experts (RESIDENT)", residentExpertBytes);
    std::snprintf(note, sizeof note, "%d slots x %s", cacheSlots,
                  formatBytes(expertSlotBytes).c_str());
    line(out, "expert cache", cacheBytes(), note);
    line(out, "recurrent state", stateBytes);
    std::snprintf(note, sizeof note, "a prefill chunk holds %d positions%s", chunkPositions,
                  requestedChunk > chunkPositions ? " (fewer than asked: memory)" : "");
    line(out, "buffers", bufferBytes, note);
    std::snprintf(note, sizeof note, "%d positions", contextLength);
    line(out, "KV cache", kvBytes, note);
    if (draftBytes) line(out, "draft (RESIDENT)", draftBytes, "speculation's draft model");
    if (visionBytes)
        line(out, "vision tower", visionPlanBytes(),
             visionResident ? "tower + projector, loaded on the first image and kept"
                            : "TRANSIENT: " + formatBytes(visionBytes) +
                                  " loaded per image prompt, released before the prefill "
                                  "(takes turns with the chunk)");
    line(out, "TOTAL", total());
    line(out, "available", available, availableBoundBy);
    return out;
}

void enforceMemoryPlan(const MemoryPlan& plan) {
    if (plan.available == 0) return; // unknown (no memory figure from the system): not judged
    const double limit = double(plan.available) * kPlanMaxShareOfAvailable;
    if (double(plan.total()) <= limit) return;
    const auto limitBytes = std::uint64_t(limit);
    std::string msg = "REFUSING TO START: this plan needs " + formatBytes(plan.total()) +
                      " and 95% of the " + formatBytes(plan.available) + " available is " +
                      formatBytes(limitBytes) + ", a shortfall of " +
                      formatBytes(plan.total() - limitBytes) + ".\n" + plan.format();
    const std::uint64_t withoutKv = plan.total() - plan.kvBytes;
    if (plan.kvBytes > 0 && double(withoutKv) <= limit) {
        const std::uint64_t perPos =
            plan.contextLength > 0 ? plan.kvBytes / std::uint64_t(plan.contextLength) : 0;
        const std::uint64_t fitPositions = perPos ? (limitBytes - withoutKv) / perPos : 0;
        msg += "The KV cache for " + std::to_string(plan.contextLength) + " positions (" +
               formatBytes(perPos) +
               " each) is what does not fit. This is a memory limit of this "
               "machine, not an engine ceiling: about " +
               std::to_string(fitPositions) + " positions fit here.";
        throw MemoryRefusal(msg, MemoryRefusal::Reason::ContextTooBig, 0, fitPositions);
    }
    throw MemoryRefusal(msg, MemoryRefusal::Reason::OverAvailable);
}

} // namespace k3
