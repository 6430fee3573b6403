#include "k3/model.hpp"

#include "k3/aligned_io.hpp"
#include "k3/kernels.hpp"
#include "k3/system.hpp"
#include "model/ChunkLayers.hpp"
#include "model/InferenceStateData.hpp"
#include "model/LoadPlan.hpp"
#include "model/ModelWeights.hpp"
#include "model/StreamedTable.hpp"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <limits>
#include <map>
#include <optional>

namespace k3 {

using model::LayerWeights;
using model::Matrix;

struct Model::Impl {
    ModelConfig config;
    model::ModelWeights w; // resident layers; with a trunk, the pinned prefix only
    float eps = 1e-5f;
    int layerCount = 0;
    MemoryPlan plan;
    // The streamed trunk: layers past the pinned prefix are bound as they arrive.
    std::unique_ptr<TrunkStreamer> trunk;
    std::vector<std::vector<std::byte>> modelRecordBytes;
    model::LayerWeights streamed;
    // Routed experts: resident per layer (a trunk without a cache), or the cache.
    std::vector<std::vector<model::ExpertWeightsStored>> residentExperts;
    std::shared_ptr<CheckpointExpertStore> store;
    std::unique_ptr<ExpertCache> cache;
    // Embeddings and lm_head left on disk (ultra); null when resident.
    std::unique_ptr<model::StreamedTable> embedTable, headTable;
    // A draft's exact model, whose in-memory routed experts the draft runs.
    const Impl* draftOf = nullptr;

    const model::LayerWeights& layer(int L);
    model::ExpertSource expertSource(int L) const;
    // A piecewise streamed layer's MLP arrives now (piece 1), over its attention.
    void enterMlp(int L);
    // h[T][hidden] = the embedding rows of `tokens`, widened exactly.
    void embed(std::span<const int> tokens, float* h) const;
    // With a packed trunk: the streamer, the model records read and checked, the pinned
    // layers bound, and (without a cache) the routed experts resident.
    void bindFromTrunk(const TrunkIndex& index, const model::CheckpointSource& ckptSource,
                       bool streamTables, bool useCache);
    // A verification chunk of T positions: checked against the plan, and the rollback
    // records sized once for the widest chunk the plan allows.
    void prepareRollback(InferenceState& state, int T) const;
};

namespace {

// A trunk record in memory as a tensor source: bytes are lent, not copied.
// One piece of a piecewise streamed layer in its ring slot.
class PieceSource : public model::TensorSource {
public:
    PieceSource(const TrunkRecord& r, const TrunkPiece& p, const std::byte* base)
        : record_(r), piece_(p), base_(base) {}
    const TensorInfo& info(const std::string& name) const override {
        const auto it = record_.tensors.find(name);
        if (it == record_.tensors.end())
            throw ModelError("tensor " + name + " is not in the packed trunk (record " +
                             record_.name + "); re-pack the trunk from this checkpoint");
        return it->second.info;
    }
    std::span<const std::byte> raw(const std::string& name,
                                   std::vector<std::byte>&) const override {
        const auto it = piece_.tensorAt.find(name);
        if (it == piece_.tensorAt.end())
            throw ModelError("tensor " + name + " is not in this piece of record " + record_.name);
        return {base_ + it->second, std::size_t(info(name).nbytes)};
    }
    bool has(const std::string& name) const override { return record_.tensors.count(name) > 0; }

private:
    const TrunkRecord& record_;
    const TrunkPiece& piece_;
    const std::byte* base_;
};

class RecordSource : public model::TensorSource {
public:
    RecordSource(std::vector<std::pair<const TrunkRecord*, const std::byte*>> records)
        : records_(std::move(records)) {}
    const TensorInfo& info(const std::string& name) const override {
        return find(name).first->info;
    }
    std::span<const std::byte> raw(const std::string& name,
                                   std::vector<std::byte>&) const override {
        const auto [t, base] = find(name);
        return {base + t->offset, std::size_t(t->info.nbytes)};
    }
    bool has(const std::string& name) const override {
        for (const auto& [r, base] : records_)
            if (r->tensors.count(name)) return true;
        return false;
    }

private:
    std::pair<const TrunkTensor*, const std::byte*> find(const std::string& name) const {
        for (const auto& [r, base] : records_)
            if (auto it = r->tensors.find(name); it != r->tensors.end()) return {&it->second, base};
        throw ModelError("tensor " + name + " is not in the packed trunk (record " +
                         (records_.empty() ? std::string("none") : records_.front().first->name) +
                         "); re-pack the trunk from this checkpoint");
    }
    std::vector<std::pair<const TrunkRecord*, const std::byte*>> records_;
};

} // namespace

model::ExpertSource Model::Impl::expertSource(int L) const {
    model::ExpertSource src;
    src.layer = L;
    const Impl& from = draftOf ? *draftOf : *this;
    if (!from.residentExperts.empty()) {
        src.resident = &from.residentExperts[std::size_t(L)];
    } else if (draftOf) {
        if (from.cache || from.trunk)
            src.skipRouted = true; // behind a cache: reading experts for a draft costs too much
        else
            src.resident = &from.w.layers[std::size_t(L)].moe.experts;
    } else {
        src.cache = cache.get();
        src.store = store.get();
    }
    return src;
}

const model::LayerWeights& Model::Impl::layer(int L) {
    if (!trunk) return w.layers[std::size_t(L)];
    if (trunk->pinned(L) && !trunk->pinnedCompressed(L)) {
        trunk->acquire(L); // counts the pinned hit; the binding is permanent
        return w.layers[std::size_t(L)];
    }
    std::uint64_t ignored = 0;
    const TrunkRecord& record = trunk->index().layers[std::size_t(L)];
    if (trunk->piecewise(L)) { // the attention first; enterMlp brings the MLP
        const PieceSource src(record, trunk->piece(L, 0), trunk->acquirePiece(L, 0));
        streamed = model::bindLayer(src, config, L, false, ignored, /*withMlp=*/false);
        return streamed;
    }
    // Views into the ring slot (or the decode slot of a compressed pinned layer): valid
    // until the next streamed layer is acquired.
    const RecordSource src({{&record, trunk->acquire(L)}});
    streamed = model::bindLayer(src, config, L, false, ignored);
    return streamed;
}

void Model::Impl::enterMlp(int L) {
    if (!trunk || !trunk->piecewise(L)) return;
    const TrunkRecord& record = trunk->index().layers[std::size_t(L)];
    const PieceSource src(record, trunk->piece(L, 1), trunk->acquirePiece(L, 1));
    std::uint64_t ignored = 0;
    model::bindLayerMlp(src, config, L, false, ignored, streamed);
}

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;
Model::Model(Model&&) noexcept = default;
Model& Model::operator=(Model&&) noexcept = default;

const ModelConfig& Model::config() const {
    return impl_->config;
}
int Model::layersBound() const {
    return impl_->layerCount;
}
std::uint64_t Model::weightBytes() const {
    return impl_->w.bytes;
}

namespace {

const std::string kEmbedName = "language_model.model.embed_tokens.weight";
const std::string kHeadName = "language_model.lm_head.weight";

// The embedding and lm_head tables left on disk: the checkpoint's tensor, or with a
// packed trunk its copy there (one file for the whole run). Shape and dtype are checked
// here as the resident binding would check them.
std::unique_ptr<model::StreamedTable> openStreamedTable(const Checkpoint& ckpt,
                                                        const ModelConfig& c,
                                                        const std::optional<TrunkIndex>& index,
                                                        const std::string& name,
                                                        std::uint64_t blockBytes) {
    const TensorInfo& t = ckpt.at(name);
    if (t.rank != 2 || t.shape[0] != std::uint64_t(c.vocabSize) ||
        t.shape[1] != std::uint64_t(c.hiddenSize))
        throw ModelError("tensor " + name + " is not [" + std::to_string(c.vocabSize) + ", " +
                         std::to_string(c.hiddenSize) + "] as config.json implies");
    std::filesystem::path file = ckpt.shardPaths()[t.shard];
    std::uint64_t offset = t.offset;
    if (index) { // the packed trunk's copy: one file for the whole run
        const TrunkRecord* r = index->modelRecordFor(name);
        if (!r || !r->tensors.count(name))
            throw ModelError("tensor " + name + " is not in the packed trunk; re-pack it");
        file = index->binPath;
        offset = r->offset + r->tensors.find(name)->second.offset;
    }
    return std::make_unique<model::StreamedTable>(file, offset, t.dtype, c.vocabSize, c.hiddenSize,
                                                  name, blockBytes);
}

} // namespace

void Model::Impl::bindFromTrunk(const TrunkIndex& index, const model::CheckpointSource& ckptSource,
                                bool streamTables, bool useCache) {
    const ModelConfig& c = config;
    trunk = std::make_unique<TrunkStreamer>(index, plan);
    const TrunkIndex& ti = trunk->index();
    {
        AlignedFile bin(ti.binPath);
        std::vector<std::pair<const TrunkRecord*, const std::byte*>> records;
        modelRecordBytes.resize(ti.modelRecords.size());
        for (std::size_t i = 0; i < ti.modelRecords.size(); ++i) {
            if (streamTables && (ti.modelRecords[i].tensors.count(kEmbedName) ||
                                 ti.modelRecords[i].tensors.count(kHeadName)))
                continue; // left on disk
            auto& bytes = modelRecordBytes[i];
            bytes.resize(std::size_t(ti.modelRecords[i].bytes));
            bin.read(ti.modelRecords[i].offset, bytes.data(), bytes.size());
            verifyTrunkRecord(ti.modelRecords[i], bytes.data(), ti.binPath);
            records.emplace_back(&ti.modelRecords[i], bytes.data());
            w.bytes += bytes.size();
        }
        model::bindModelTensors(RecordSource(records), c, w, !streamTables);
    }
    w.layers.resize(std::size_t(layerCount));
    for (int L = 0; L < layerCount && trunk->pinned(L); ++L) {
        if (trunk->pinnedCompressed(L)) continue; // bound at each use, once decoded
        const RecordSource src({{&ti.layers[std::size_t(L)], trunk->pinnedData(L)}});
        std::uint64_t lent = 0; // pinned bytes are counted by the streamer
        w.layers[std::size_t(L)] = model::bindLayer(src, c, L, false, lent);
    }
    if (!useCache) {
        residentExperts.resize(std::size_t(layerCount));
        for (int L = 0; L < layerCount; ++L)
            if (c.layers[std::size_t(L)].mlp == MlpKind::Moe)
                residentExperts[std::size_t(L)] =
                    model::bindRoutedExperts(ckptSource, c, L, w.bytes);
    }
}

Model Model::load(const LaunchConfig& config, const LaunchDiagnostics& diagnostics) {
    return loadResolved(model::loadOptionsFor(config, diagnostics));
}

Model Model::load(const std::filesystem::path& dir) {
    LaunchConfig config;
    config.modelDir = dir;
    return load(config);
}

Model Model::loadDraft(const std::filesystem::path& dir, const Model& target,
                       const LaunchConfig& config, const LaunchDiagnostics& diagnostics) {
    LaunchConfig withDraft = config;
    withDraft.draftDir = dir;
    model::LoadOptions options = model::draftOptionsFor(withDraft, diagnostics);
    options.draftOf = &target;
    return loadResolved(options);
}

Model Model::loadResolved(const model::LoadOptions& options) {
    const std::filesystem::path& dir = options.launch.modelDir;
    auto impl = std::make_unique<Impl>();
    // Everything is added up before anything is allocated (planLoad, as k3::planLaunch).
    auto mem = readMemoryInfo();
    if (options.diagnostics.availableBytes > 0) {
        if (!mem) mem.emplace();
        mem->availableBytes = options.diagnostics.availableBytes;
        mem->boundBy = "LaunchDiagnostics::availableBytes";
    }
    model::LoadPlan lp = model::planLoad(dir, options, mem ? mem->availableBytes : 0);
    impl->config = std::move(lp.config);
    const ModelConfig& c = impl->config;
    if (c.maxPositionEmbeddings && options.launch.contextLength > *c.maxPositionEmbeddings)
        throw ModelError((dir / "config.json").string() + ": max_position_embeddings is " +
                         std::to_string(*c.maxPositionEmbeddings) + ", a context of " +
                         std::to_string(options.launch.contextLength) +
                         " positions is longer than the model was trained for; use a context "
                         "of at most " +
                         std::to_string(*c.maxPositionEmbeddings) + " positions");
    const int layers = lp.layers;
    impl->layerCount = layers;
    impl->eps = float(c.rmsNormEps);
    const Checkpoint& ckpt = lp.checkpoint;
    const bool draft = options.draft && options.draftOf != nullptr;
    const bool useTrunk = lp.trunk.has_value();
    const bool useCache = lp.store != nullptr;
    if (draft) {
        const ModelConfig& x = options.draftOf->config();
        if (x.vocabSize != c.vocabSize || x.hiddenSize != c.hiddenSize ||
            x.numHiddenLayers != c.numHiddenLayers || x.numExperts != c.numExperts)
            throw ModelError("the draft in " + dir.string() +
                             " has another architecture than the model (vocab_size, hidden_size, "
                             "num_hidden_layers or n_routed_experts differ)");
        impl->draftOf = options.draftOf->impl_.get();
    }
    std::optional<TrunkIndex>& index = lp.trunk;
    impl->store = lp.store;
    impl->plan = std::move(lp.plan);
    if (mem) impl->plan.availableBoundBy = mem->boundBy;
    if (options.diagnostics.enforceMemoryPlan) enforceMemoryPlan(impl->plan);
    const bool streamTables = options.streamModelTables;

    if (useCache) {
        CacheOptions co;
        co.slotCount = std::max(1, impl->plan.cacheSlots);
        co.recordTrace = options.diagnostics.recordCacheTrace;
        impl->cache = std::make_unique<ExpertCache>(impl->store, co);
    }
    const model::CheckpointSource ckptSource(ckpt);
    if (streamTables) {
        impl->embedTable = openStreamedTable(ckpt, c, index, kEmbedName, 0);
        impl->headTable =
            openStreamedTable(ckpt, c, index, kHeadName, options.diagnostics.tableBlockBytes);
    }
    if (!useTrunk) {
        model::bindModelTensors(ckptSource, c, impl->w, !streamTables);
        for (int L = 0; L < layers; ++L)
            impl->w.layers.push_back(
                model::bindLayer(ckptSource, c, L, !useCache && !draft, impl->w.bytes));
        return Model(std::move(impl));
    }

    impl->bindFromTrunk(*index, ckptSource, streamTables, useCache);
    return Model(std::move(impl));
}

const MemoryPlan& Model::memoryPlan() const {
    return impl_->plan;
}

MemoryStats Model::memoryStats() const {
    MemoryStats m;
    m.trunkStreamed = impl_->trunk != nullptr;
    m.expertsCached = impl_->cache != nullptr;
    if (impl_->trunk) m.trunk = impl_->trunk->stats();
    m.modelTablesStreamed = impl_->headTable != nullptr;
    if (impl_->embedTable)
        m.tableBytesRead = impl_->embedTable->bytesRead() + impl_->headTable->bytesRead();
    if (impl_->cache) {
        m.cache = impl_->cache->stats();
        m.cacheSlots = impl_->cache->slotCount();
        m.cacheSlotBytes = impl_->cache->slotBytes();
        m.expertIo = impl_->cache->ioInfo();
    }
    return m;
}

void Model::resetCacheStats() {
    if (impl_->cache) impl_->cache->resetStats();
}

void Model::writeCacheTrace(const std::filesystem::path& dir) const {
    if (!impl_->cache)
        throw ModelError(
            "no expert cache trace: the routed experts are resident (give a cache budget)");
    impl_->cache->writeTrace(dir);
}

InferenceState Model::newState() const {
    const ModelConfig& c = impl_->config;
    auto d = std::make_unique<InferenceState::Data>();
    d->layers.resize(std::size_t(impl_->layerCount));
    for (std::size_t L = 0; L < d->layers.size(); ++L) {
        model::LayerState& s = d->layers[L];
        if (c.layers[L].attention != AttentionKind::Kda) {
            // The whole context at once, as the plan counts it: growing by doubling
            // would overshoot the plan by up to 2x.
            const std::size_t ctx = std::size_t(std::max(0, impl_->plan.contextLength));
            s.latent.reserve(ctx * std::size_t(c.kvLoraRank));
            s.rope.reserve(ctx * std::size_t(c.qkRopeHeadDim));
            continue;
        }
        const std::size_t P = std::size_t(c.kdaNumHeads) * std::size_t(c.kdaHeadDim);
        s.S.assign(P * std::size_t(c.kdaHeadDim), 0.0f);
        const std::size_t hist = P * std::size_t(c.shortConvKernelSize - 1);
        s.qConv.assign(hist, 0.0f);
        s.kConv.assign(hist, 0.0f);
        s.vConv.assign(hist, 0.0f);
    }
    return InferenceState(std::move(d));
}

namespace {

void checkChunk(const ModelConfig& c, std::span<const int> tokens, std::span<float> logits) {
    if (tokens.empty()) throw ModelError("forward: an empty chunk (give at least one token id)");
    for (int token : tokens)
        if (token < 0 || token >= c.vocabSize)
            throw ModelError("token id " + std::to_string(token) + " is outside 0.." +
                             std::to_string(c.vocabSize - 1) + " (vocab_size)");
    const std::size_t V = std::size_t(c.vocabSize);
    if (logits.size() != V && logits.size() != V * tokens.size())
        throw ModelError("logits buffer holds " + std::to_string(logits.size()) +
                         " floats; a chunk of " + std::to_string(tokens.size()) +
                         " positions needs vocab_size (" + std::to_string(V) + ") or " +
                         std::to_string(tokens.size()) + " x vocab_size");
}

} // namespace

void Model::Impl::embed(std::span<const int> tokens, float* h) const {
    const int E = config.hiddenSize;
    for (std::size_t t = 0; t < tokens.size(); ++t) {
        float* row = h + t * std::size_t(E);
        if (embedTable) { // the embedding row, widened exactly
            embedTable->row(tokens[t], row);
            continue;
        }
        const WeightView ev = w.embed.view().rowSlice(tokens[t], 1);
        for (int i = 0; i < E; ++i)
            row[i] = ev.type == WeightType::BF16
                         ? bf16ToFloat(static_cast<const std::uint16_t*>(ev.data)[i])
                         : static_cast<const float*>(ev.data)[i];
    }
}

TokenStats Model::forward(InferenceState& state, int token, std::span<float> logits) const {
    return forward(state, std::span<const int>(&token, 1), logits);
}

void Model::rollback(InferenceState& state, int length) const {
    InferenceState::Data& d = *state.d_;
    if (d.replayFrom < 0 || length < d.replayFrom || length > d.length)
        throw ModelError("rollback to " + std::to_string(length) + " positions: the state holds " +
                         std::to_string(d.length) + " and can return only as far as " +
                         std::to_string(d.replayFrom) + " (the start of its last kept chunk)");
    const ModelConfig& c = impl_->config;
    const int keep = length - d.replayFrom;
    for (std::size_t L = 0; L < d.layers.size(); ++L) {
        model::LayerState& s = d.layers[L];
        if (c.layers[L].attention == AttentionKind::Kda) {
            model::rollbackKda(s, d.replay[L], keep, c);
        } else { // the latent cache is per position: drop the tail
            s.latent.resize(std::size_t(length) * std::size_t(c.kvLoraRank));
            s.rope.resize(std::size_t(length) * std::size_t(c.qkRopeHeadDim));
        }
    }
    d.length = length;
    d.replayFrom = -1; // a second rollback would need the records of the new tail
}

void Model::Impl::prepareRollback(InferenceState& state, int T) const {
    const ModelConfig& c = config;
    if (T > plan.maxSpeculation + 1)
        throw ModelError("a verification chunk of " + std::to_string(T) +
                         " positions; the plan holds rollback records for " +
                         std::to_string(plan.maxSpeculation + 1) +
                         " (LaunchConfig::maxSpeculation)");
    if (state.d_->replay.empty()) {
        // Sized once for the widest chunk the plan allows: what the plan counted.
        state.d_->replay.resize(state.d_->layers.size());
        const std::size_t P = std::size_t(c.kdaNumHeads) * std::size_t(c.kdaHeadDim);
        const std::size_t n = std::size_t(plan.maxSpeculation + 1);
        for (std::size_t L = 0; L < state.d_->layers.size(); ++L) {
            if (c.layers[L].attention != AttentionKind::Kda) continue;
            model::KdaReplay& r = state.d_->replay[L];
            r.raw.reserve(3 * P * n);
            r.k.reserve(P * n);
            r.v.reserve(P * n);
            r.alpha.reserve(P * n);
            r.beta.reserve(std::size_t(c.kdaNumHeads) * n);
        }
    }
}

// Long on purpose: one chunk's pass in the model's order (embedding, per layer the
// AttnRes aggregation, attention, MLP and residual, then the output aggregation and the
// logits); the block snapshots and the tile buffers are shared by every step.
//
// Only the per-position state stays resident for the whole chunk: the running AttnRes
// block (the residual stream), the completed block snapshots, and inside a MoE layer
// each position's routing, routed input and expert outputs (MoeChunk). Everything else
// (aggregations, norms, projections, attention, MLP products) runs over tiles of at most
// kPrefillTilePositions positions: every product's column has the bits of a one-position
// matvec and the recurrent parts advance position by position, so tiles change no bit.
TokenStats Model::forward(InferenceState& state, std::span<const int> tokens,
                          std::span<float> logits, bool keepRollback, const InputRows& replaced,
                          const std::function<bool(int layer)>& beforeLayer) const {
    const ModelConfig& c = impl_->config;
    Impl& impl = *impl_;
    const auto& W = impl.w;
    const float eps = impl.eps;
    checkChunk(c, tokens, logits);
    const int E = c.hiddenSize, T = int(tokens.size());
    const std::size_t TE = std::size_t(T) * std::size_t(E);
    TokenStats stats;
    const int first = state.d_->length;
    if (impl.cache) impl.cache->nextStep(); // the request trace's step column
    state.d_->replayFrom = keepRollback ? first : -1;
    if (keepRollback) impl.prepareRollback(state, T);

    // The running block [T][E]: the embeddings, then each layer's residual stream.
    std::vector<float> partial(TE);
    impl.embed(tokens, partial.data());
    if (replaced.rows.size() != replaced.positions.size() * std::size_t(E))
        throw ModelError("input rows: " + std::to_string(replaced.rows.size()) + " floats for " +
                         std::to_string(replaced.positions.size()) + " positions of width " +
                         std::to_string(E));
    for (std::size_t i = 0; i < replaced.positions.size(); ++i) {
        const int p = replaced.positions[i];
        if (p < 0 || p >= T)
            throw ModelError("input row at position " + std::to_string(p) + " of a chunk of " +
                             std::to_string(T));
        std::copy_n(replaced.rows.data() + i * std::size_t(E), E,
                    partial.data() + std::size_t(p) * E);
    }
    std::vector<std::vector<float>> blocks; // completed block snapshots, [T][E] each
    // A verification chunk's KDA rollback record covers one call, so its attention runs
    // untiled (prepareRollback bounds it to maxSpeculation + 1 positions).
    const int tile = keepRollback ? T : std::min(T, kPrefillTilePositions);
    const std::size_t tileE = std::size_t(tile) * std::size_t(E);
    std::vector<float> x(tileE), xn(tileE), out(tileE);
    model::MoeChunk moe;
    std::vector<const float*> sources;
    // x[n][E] = the aggregation of the first `nBlocks` snapshots and `part` at positions
    // [t0, t0 + n) of the chunk.
    auto aggregate = [&](std::size_t nBlocks, const float* part, const std::vector<float>& fold,
                         int t0, int n) {
        for (int t = 0; t < n; ++t) {
            const std::size_t row = std::size_t(t0 + t) * E;
            sources.clear();
            for (std::size_t b = 0; b < nBlocks; ++b) sources.push_back(blocks[b].data() + row);
            sources.push_back(part + row);
            attnRes(x.data() + std::size_t(t) * E, sources.data(), int(sources.size()), fold.data(),
                    E, eps);
        }
    };
    auto norm = [&](const std::vector<float>& weight, int n) {
        for (int t = 0; t < n; ++t)
            rmsnorm(xn.data() + std::size_t(t) * E, x.data() + std::size_t(t) * E, weight.data(), E,
                    eps);
    };
    auto addTo = [&](float* rows, std::size_t count) {
        for (std::size_t i = 0; i < count; ++i) rows[i] += out[i];
    };

    for (std::size_t L = 0; L < std::size_t(impl.layerCount); ++L) {
        if (beforeLayer && beforeLayer(int(L))) {
            if (L > 0) state.reset();
            stats.stopped = true;
            return stats;
        }
        const LayerWeights& lw = impl.layer(int(L)); // bound once for the whole chunk
        model::LayerState& ls = state.d_->layers[L];
        // The blocks before this layer; at a block boundary the running block (this
        // layer's input) becomes a snapshot and the attention output starts a new one.
        const std::size_t before = blocks.size();
        const bool boundary = int(L) % c.attnResBlockSize == 0;
        if (boundary) {
            blocks.push_back(std::move(partial));
            partial.clear();
            partial.resize(TE);
        }
        const float* input = boundary ? blocks.back().data() : partial.data();
        for (int t0 = 0; t0 < T; t0 += tile) {
            const int n = std::min(tile, T - t0);
            const std::size_t off = std::size_t(t0) * E, nE = std::size_t(n) * E;
            // Pre-attention aggregation is skipped while no block exists.
            if (before > 0)
                aggregate(before, input, lw.attnResFold, t0, n);
            else
                std::copy_n(input + off, nE, x.data());
            norm(lw.inputNorm, n);
            if (lw.spec.attention == AttentionKind::Kda)
                model::kdaChunk(out.data(), xn.data(), n, lw.kda, ls, c, eps,
                                keepRollback ? &state.d_->replay[L] : nullptr);
            else
                model::mlaChunk(out.data(), xn.data(), n, lw.mla, ls, c, eps, first + t0);
            if (boundary)
                std::copy_n(out.data(), nE, partial.data() + off);
            else
                addTo(partial.data() + off, nE);
        }
        impl.enterMlp(int(L));
        // Pre-MLP aggregation always runs: the partial block alone is a valid source set.
        const auto mlpInput = [&](int t0, int n) {
            aggregate(blocks.size(), partial.data(), lw.mlpResFold, t0, n);
            norm(lw.postNorm, n);
        };
        const model::ExpertSource src =
            lw.spec.mlp == MlpKind::Dense ? model::ExpertSource{} : impl.expertSource(int(L));
        if (lw.spec.mlp != MlpKind::Dense && !src.skipRouted) {
            // Routed over the whole chunk first: each expert of the union runs once.
            model::moeBegin(moe, T, c);
            for (int t0 = 0; t0 < T; t0 += tile) {
                const int n = std::min(tile, T - t0);
                mlpInput(t0, n);
                model::moeRoute(moe, xn.data(), t0, n, lw.moe, c);
            }
            model::moeExperts(moe, lw.moe, c, src, kPrefillTilePositions);
            if (moe.nonFiniteScores && !impl.draftOf) stats.nonFinite = true;
        }
        for (int t0 = 0; t0 < T; t0 += tile) {
            const int n = std::min(tile, T - t0);
            mlpInput(t0, n); // again for a MoE layer: the shared experts take it
            if (lw.spec.mlp == MlpKind::Dense) {
                model::gluChunk(out.data(), xn.data(), n, lw.dense.gate, lw.dense.up, lw.dense.down,
                                c);
            } else {
                const int drops =
                    model::moeCombine(out.data(), xn.data(), t0, n, moe, lw.moe, c, eps, src);
                if (!impl.draftOf) stats.droppedExperts += drops; // a draft only proposes
            }
            addTo(partial.data() + std::size_t(t0) * E, std::size_t(n) * E);
        }
    }

    // The logits of every position, or of the last one only. Every position's logits
    // are the caller's [T][vocab] buffer, so their inputs are one pass too (a streamed
    // lm_head is read once per call).
    const bool all = logits.size() != std::size_t(c.vocabSize) || T == 1;
    const int from = all ? 0 : T - 1, count = T - from;
    x.resize(std::size_t(count) * E);
    xn.resize(std::size_t(count) * E);
    aggregate(blocks.size(), partial.data(), W.outputResFold, from, count);
    for (int t = 0; t < count; ++t)
        rmsnorm(xn.data() + std::size_t(t) * E, x.data() + std::size_t(t) * E, W.finalNorm.data(),
                E, eps);
    if (impl.headTable)
        impl.headTable->matmat(logits.data(), xn.data(), count);
    else
        matmat(logits.data(), xn.data(), W.lmHead.view(), count);
    for (float v : logits)
        if (!std::isfinite(v)) {
            stats.nonFinite = true;
            break;
        }
    state.d_->length = first + T;
    return stats;
}

int argmax(std::span<const float> logits) {
    if (logits.empty()) return -1;
    return int(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

} // namespace k3
