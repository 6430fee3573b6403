#include "model/LoadPlan.hpp"

#include "k3/aligned_io.hpp"
#include "k3/pack.hpp"
#include "k3/vision.hpp"
#include "memory/AlignedBuffer.hpp"
#include "memory/TrunkCodec.hpp"
#include "model/StreamedTable.hpp"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <map>
#include <mutex>
#include <string>

namespace k3::model {
namespace {

const std::string kEmbedName = "language_model.model.embed_tokens.weight";
const std::string kHeadName = "language_model.lm_head.weight";

// Layer records (from the checkpoint, or the packed trunk with its pieces), the model
// tensors, and the routed experts resident or through the cache.
void addWeights(LoadPlan& lp, const LoadOptions& options, bool draft) {
    PlanInputs& in = lp.inputs;
    const int layers = lp.layers;
    const bool useTrunk = lp.trunk.has_value();
    in.layerBytes.assign(std::size_t(layers), 0);
    std::uint64_t expertBytes = 0;
    const std::string prefix = "language_model.model.layers.";
    for (const auto& [name, t] : lp.checkpoint.tensors()) {
        if (name.rfind(prefix, 0) != 0) continue;
        const int L = std::atoi(name.c_str() + prefix.size());
        if (L < 0 || L >= layers) continue;
        if (isRoutedExpertTensor(name))
            expertBytes += t.nbytes;
        else if (!useTrunk)
            in.layerBytes[std::size_t(L)] += t.nbytes;
    }
    if (useTrunk) {
        in.trunkDecodeBytes = trunkDecodeBufferBytes(*lp.trunk);
        for (int L = 0; L < layers; ++L) {
            in.layerBytes[std::size_t(L)] = lp.trunk->layers[std::size_t(L)].bytes;
            in.layerPieceBytes.push_back(largestPieceBytes(lp.trunk->layers[std::size_t(L)]));
        }
    }
    const bool streamTables = options.streamModelTables;
    for (const std::string& name :
         {kEmbedName, kHeadName, std::string("language_model.model.norm.weight"),
          std::string("language_model.model.output_attn_res_norm.weight"),
          std::string("language_model.model.output_attn_res_proj.weight")}) {
        const TensorInfo* t = lp.checkpoint.find(name);
        if (!t) continue;
        if ((name == kEmbedName || name == kHeadName) && streamTables) {
            const std::uint64_t rows = t->rank == 2 ? std::max<std::uint64_t>(1, t->shape[0]) : 1;
            // The embedding reads one row; only lm_head needs the two block buffers.
            in.modelBytes += StreamedTable::bufferBytes(
                t->nbytes / rows, name == kHeadName ? options.diagnostics.tableBlockBytes : 0);
        } else {
            in.modelBytes += t->nbytes;
        }
    }
    in.modelTablesStreamed = streamTables;
    if (!draft) in.visionBytes = VisionTower::plannedBytes(lp.checkpoint);
    if (lp.store) {
        in.expertSlotBytes = lp.store->slotBytes();
        in.expertCount = lp.store->totalExperts();
    } else if (!draft) {
        in.residentExpertBytes = expertBytes;
    }
}

} // namespace
} // namespace k3::model

namespace k3 {
namespace {

std::uint64_t nonNegative(int v) {
    return std::uint64_t(std::max(0, v));
}

} // namespace

std::uint64_t chunkBytesPerPosition(const ModelConfig& c, int layers) {
    // Model::forward's resident state: the running block and the completed snapshots
    // (one per attn_res_block_size layers, the first at layer 0). The MLA latents go to
    // the KV cache, counted per context position.
    const std::uint64_t blockSize = std::max<std::uint64_t>(1, nonNegative(c.attnResBlockSize));
    const std::uint64_t snapshots = (nonNegative(layers) + blockSize - 1) / blockSize;
    std::uint64_t bytes = (snapshots + 1) * nonNegative(c.hiddenSize) * 4;
    bool moe = false;
    for (int L = 0; L < layers && L < int(c.layers.size()); ++L)
        moe = moe || c.layers[std::size_t(L)].mlp == MlpKind::Moe;
    if (moe) { // MoeChunk: top-k latent rows (z holds the last), idx, wt, present, uses; last
        const std::uint64_t topK = nonNegative(c.numExpertsPerToken);
        bytes += topK * (nonNegative(c.routedExpertHiddenSize) * 4 + 4 + 4 + 1 + 12) + 4;
    }
    return bytes;
}

std::uint64_t prefillTileBytes(const ModelConfig& c) {
    // Per tile position, the widest step: x, xn, the layer's output and the shared
    // experts' (4 x hidden), the attention or MLP intermediates and the kernels' widened
    // x (10 x the widest product), the router logits, an expert's gathered input and
    // outputs; plus the union's list of experts.
    const std::uint64_t P = nonNegative(c.kdaNumHeads) * nonNegative(c.kdaHeadDim);
    const std::uint64_t widest =
        std::max({P, nonNegative(c.intermediateSize),
                  nonNegative(c.numAttentionHeads) * nonNegative(c.qkNopeHeadDim + c.qkRopeHeadDim),
                  nonNegative(c.numAttentionHeads) * nonNegative(c.vHeadDim),
                  2 * nonNegative(c.moeIntermediateSize)});
    const std::uint64_t perPosition =
        4 * (4 * nonNegative(c.hiddenSize) + 10 * widest + nonNegative(c.numExperts) +
             2 * nonNegative(c.routedExpertHiddenSize));
    return std::uint64_t(kPrefillTilePositions) * perPosition + nonNegative(c.numExperts) * 12;
}

} // namespace k3

namespace k3::model {
namespace {

// Session state (every copy a session holds), the KV cache per position, the buffers
// of one position and a chunk's tiles, and what a chunk holds per position.
void addState(PlanInputs& in, const ModelConfig& c, int layers, int maxSpec) {
    in.topK = c.numExpertsPerToken;
    const std::uint64_t P = std::uint64_t(c.kdaNumHeads) * std::uint64_t(c.kdaHeadDim);
    const std::uint64_t kdaState = (P * std::uint64_t(c.kdaHeadDim) +
                                    3 * P * std::uint64_t(std::max(0, c.shortConvKernelSize - 1))) *
                                   4;
    // Every copy a session holds: the live state and the prompt snapshot (KDA state and
    // the MLA cache each), and the rollback record of a verification chunk (the KDA state
    // before it and, per position, the delta rule's inputs and the raw conv inputs).
    const std::uint64_t replayPerPosition = (6 * P + std::uint64_t(std::max(0, c.kdaNumHeads))) * 4;
    for (int L = 0; L < layers; ++L) {
        if (c.layers[std::size_t(L)].attention == AttentionKind::Kda)
            in.stateBytes +=
                2 * kdaState +
                (maxSpec > 0 ? kdaState + replayPerPosition * std::uint64_t(maxSpec + 1) : 0);
        else
            in.kvBytesPerPosition += 2 * std::uint64_t(c.kvLoraRank + c.qkRopeHeadDim) * 4;
    }
    in.bufferBytes =
        (std::uint64_t(c.vocabSize) + 64ull * std::uint64_t(c.hiddenSize) +
         8ull * std::uint64_t(std::max<std::uint64_t>(P, std::uint64_t(c.intermediateSize)))) *
        4;
    in.chunkBytesPerPosition = chunkBytesPerPosition(c, layers);
    in.bufferBytes += prefillTileBytes(c);
}

struct PinRates {
    double decodeBytesPerSecond = 0, diskBytesPerSecond = 0;
};

// The decode and read rates pinning compressed trades: up to 32 MiB of the first coded
// layer's blocks read with O_DIRECT (the disk), then decoded the way a compressed pinned
// layer is (blocks shared among the OpenMP threads, raw bytes out per wall second).
// Measured once per trunk file in a process, so every plan of a run makes the same choice.
PinRates measurePinRates(const TrunkIndex& index) {
    static std::mutex m;
    static std::map<std::string, PinRates> seen;
    std::lock_guard lock(m);
    const std::string key = index.binPath.string() + ":" + std::to_string(index.fileBytes);
    if (auto it = seen.find(key); it != seen.end()) return it->second;
    PinRates rates;
    for (const TrunkRecord& r : index.layers) {
        if (!r.compressed()) continue;
        std::size_t blocks = 0;
        while (blocks < r.blockCount() && r.blockStarts[blocks + 1] <= (std::uint64_t{32} << 20))
            ++blocks;
        blocks = std::max<std::size_t>(blocks, 1);
        const std::uint64_t stored = r.blockStarts[blocks];
        const std::uint64_t raw = std::min(std::uint64_t(blocks) * index.blockBytes, r.bytes);
        memory::AlignedBuffer in(std::size_t(alignUp(stored))), out(std::size_t(alignUp(raw)));
        using Clock = std::chrono::steady_clock;
        try {
            AlignedFile file(index.binPath);
            const auto t0 = Clock::now();
            const std::size_t got = file.readWindow(r.offset, in.data(), in.size());
            const double readSecs = std::chrono::duration<double>(Clock::now() - t0).count();
            if (got < stored) break;
            const auto t1 = Clock::now();
            bool ok = true;
#pragma omp parallel for schedule(dynamic, 4)
            for (long j = 0; j < long(blocks); ++j) {
                const std::uint64_t lo = std::uint64_t(j) * index.blockBytes;
                try {
                    codec::decodeBlock(in.data() + r.blockStarts[std::size_t(j)],
                                       std::size_t(r.blockStarts[std::size_t(j) + 1] -
                                                   r.blockStarts[std::size_t(j)]),
                                       out.data() + lo,
                                       std::size_t(std::min(lo + index.blockBytes, r.bytes) - lo));
                } catch (const codec::CodecError&) {
#pragma omp critical(k3_pin_measure)
                    ok = false;
                }
            }
            const double decodeSecs = std::chrono::duration<double>(Clock::now() - t1).count();
            if (!ok) break; // a damaged block: the load names it; no measurement
            rates.diskBytesPerSecond = double(stored) / std::max(readSecs, 1e-9);
            rates.decodeBytesPerSecond = double(raw) / std::max(decodeSecs, 1e-9);
        } catch (const std::exception&) {
            // unreadable here: the load reports it; pinning stays raw
        }
        break;
    }
    seen[key] = rates;
    return rates;
}

// A compressed trunk's pinned layers kept compressed when asked, or when the measurement
// says the decode of the layers a raw plan pins costs less than the reads the extra
// pinned layers save.
void choosePinning(LoadPlan& lp, const LoadOptions& options, const MemoryBudget& budget,
                   std::uint64_t availableBytes) {
    if (!lp.trunk || !lp.trunk->compressed() || options.launch.pinMode == PinMode::Raw) return;
    PlanInputs coded = lp.inputs;
    for (const TrunkRecord& r : lp.trunk->layers)
        coded.layerStoredBytes.push_back(r.compressed() ? r.storedBytes : r.bytes);
    MemoryPlan alt = planMemory(coded, budget, availableBytes);
    const MemoryPlan& raw = lp.plan;
    char note[256];
    if (options.launch.pinMode == PinMode::Compressed) {
        alt.pinChoice = "pinned layers kept compressed (asked)";
        lp.inputs = std::move(coded);
        lp.plan = std::move(alt);
        return;
    }
    if (alt.pinnedLayers <= raw.pinnedLayers) {
        if (raw.pinnedLayers < raw.totalLayers) {
            std::snprintf(note, sizeof note,
                          "pinned layers raw: compressed, this budget pins no more (%d)",
                          alt.pinnedLayers);
            lp.plan.pinChoice = note;
        }
        return;
    }
    std::uint64_t rawPinned = 0, storedSaved = 0;
    for (int L = 0; L < alt.pinnedLayers; ++L) {
        const TrunkRecord& r = lp.trunk->layers[std::size_t(L)];
        if (L < raw.pinnedLayers && r.compressed()) rawPinned += r.bytes;
        if (L >= raw.pinnedLayers) storedSaved += r.stored();
    }
    const PinRates rates = measurePinRates(*lp.trunk);
    const bool pays = pinCompressedPays(rawPinned, storedSaved, rates.decodeBytesPerSecond,
                                        rates.diskBytesPerSecond);
    std::snprintf(note, sizeof note,
                  "pinned layers %s: compressed pins %d layers, raw %d; measured decode %.2f "
                  "GB/s, disk %.2f GB/s: decoding %s per token %s the %s reads it saves",
                  pays ? "kept compressed" : "raw", alt.pinnedLayers, raw.pinnedLayers,
                  rates.decodeBytesPerSecond / 1e9, rates.diskBytesPerSecond / 1e9,
                  formatBytes(rawPinned).c_str(), pays ? "costs less than" : "does not pay for",
                  formatBytes(storedSaved).c_str());
    if (!pays) {
        lp.plan.pinChoice = note;
        return;
    }
    alt.pinChoice = note;
    lp.inputs = std::move(coded);
    lp.plan = std::move(alt);
}

} // namespace

LoadPlan planLoad(const std::filesystem::path& dir, const LoadOptions& options,
                  std::uint64_t availableBytes) {
    LoadPlan lp{readModelConfig(dir / "config.json"), Checkpoint::open(dir), 0, {}, {}, {}, {}};
    const ModelConfig& c = lp.config;
    const int n = c.numHiddenLayers;
    if (options.diagnostics.layerLimit < 0 || options.diagnostics.layerLimit > n)
        throw ModelError("the layer limit " + std::to_string(options.diagnostics.layerLimit) +
                         " is outside 1.." + std::to_string(n) + " (num_hidden_layers in " +
                         (dir / "config.json").string() + ")");
    lp.layers = options.diagnostics.layerLimit == 0 ? n : options.diagnostics.layerLimit;
    const bool draft = options.draft;
    if (!draft && !options.launch.trunkDir.empty()) {
        lp.trunk = openTrunkIndex(options.launch.trunkDir, dir);
        lp.trunk->layers.resize(std::size_t(lp.layers));
    }
    if (!draft && (options.cacheBytes > 0 || options.diagnostics.expertCacheSlots > 0))
        lp.store = std::make_shared<CheckpointExpertStore>(lp.checkpoint, c, lp.layers);

    const int maxSpec = std::clamp(options.launch.maxSpeculation, 0, kMaxSpeculation);
    addWeights(lp, options, draft);
    addState(lp.inputs, c, lp.layers, maxSpec);
    lp.inputs.contextLength = options.launch.contextLength;
    lp.inputs.requestedChunk = options.launch.prefillChunk;
    lp.inputs.streamed = lp.trunk.has_value();
    if (!draft && !options.launch.draftDir.empty()) {
        // What the draft will hold, planned as Model::loadDraft loads it.
        const LoadOptions d = draftOptionsFor(options.launch, options.diagnostics);
        lp.inputs.draftBytes = planLoad(options.launch.draftDir, d, 0).plan.total();
    }

    MemoryBudget budget;
    budget.trunkBytes = lp.trunk ? options.trunkBytes : std::numeric_limits<std::uint64_t>::max();
    budget.cacheBytes =
        options.diagnostics.expertCacheSlots > 0
            ? std::uint64_t(options.diagnostics.expertCacheSlots) * lp.inputs.expertSlotBytes
            : options.cacheBytes;
    budget.source = options.budgetSource.empty() ? "options" : options.budgetSource;
    lp.plan = planMemory(lp.inputs, budget, availableBytes);
    choosePinning(lp, options, budget, availableBytes);
    lp.plan.maxSpeculation = maxSpec;
    return lp;
}

} // namespace k3::model
