#include "k3/model.hpp"

#include "k3/aligned_io.hpp"
#include "k3/kernels.hpp"
#include "k3/system.hpp"
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

// What one layer carries from token to token.
struct LayerState {
    // KDA: recurrent state [heads][dk][dv] and ShortConv history [channels][kernel-1].
    std::vector<float> S, qConv, kConv, vConv;
    // MLA: the whole per-position cache is the normed latent plus the unrotated rope.
    std::vector<float> latent, rope;
};

struct InferenceState::Data {
    std::vector<LayerState> layers;
    int length = 0;
    std::vector<LayerState> fresh; // the zero state, kept to reset without a model
};

InferenceState::InferenceState(std::unique_ptr<Data> data) : d_(std::move(data)) {}
InferenceState::~InferenceState() = default;
InferenceState::InferenceState(InferenceState&&) noexcept = default;
InferenceState& InferenceState::operator=(InferenceState&&) noexcept = default;
int InferenceState::length() const { return d_->length; }
void InferenceState::reset() {
    d_->layers = d_->fresh;
    d_->length = 0;
}
InferenceState InferenceState::clone() const {
    return InferenceState(std::make_unique<Data>(*d_));
}

std::uint64_t InferenceState::cacheBytes() const {
    std::uint64_t n = 0;
    for (const auto& l : d_->layers)
        n += (l.S.size() + l.qConv.size() + l.kConv.size() + l.vConv.size() + l.latent.size() +
              l.rope.size()) * sizeof(float);
    return n;
}

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

    const model::LayerWeights& layer(int L);
    // A piecewise streamed layer's MLP arrives now (piece 1), over its attention.
    void enterMlp(int L);
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

private:
    const TrunkRecord& record_;
    const TrunkPiece& piece_;
    const std::byte* base_;
};

class RecordSource : public model::TensorSource {
public:
    RecordSource(std::vector<std::pair<const TrunkRecord*, const std::byte*>> records)
        : records_(std::move(records)) {}
    const TensorInfo& info(const std::string& name) const override { return find(name).first->info; }
    std::span<const std::byte> raw(const std::string& name, std::vector<std::byte>&) const override {
        const auto [t, base] = find(name);
        return {base + t->offset, std::size_t(t->info.nbytes)};
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

const model::LayerWeights& Model::Impl::layer(int L) {
    if (!trunk) return w.layers[std::size_t(L)];
    if (trunk->pinned(L)) {
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
    // Views into the ring slot: valid until the next streamed layer is acquired.
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

const ModelConfig& Model::config() const { return impl_->config; }
int Model::layersBound() const { return impl_->layerCount; }
std::uint64_t Model::weightBytes() const { return impl_->w.bytes; }

Model Model::load(const std::filesystem::path& dir, const ModelOptions& options) {
    auto impl = std::make_unique<Impl>();
    impl->config = readModelConfig(dir / "config.json");
    const ModelConfig& c = impl->config;
    const int n = c.numHiddenLayers;
    if (options.layerLimit < 0 || options.layerLimit > n)
        throw ModelError("--layers " + std::to_string(options.layerLimit) + " is outside 1.." +
                         std::to_string(n) + " (num_hidden_layers in " + (dir / "config.json").string() + ")");
    const int layers = options.layerLimit == 0 ? n : options.layerLimit;
    impl->layerCount = layers;
    impl->eps = float(c.rmsNormEps);
    const Checkpoint ckpt = Checkpoint::open(dir);
    const bool useTrunk = !options.trunkDir.empty();
    const bool useCache = options.expertCacheBytes > 0 || options.expertCacheSlots > 0;

    // Everything is added up before anything is allocated.
    std::optional<TrunkIndex> index;
    if (useTrunk) {
        index = openTrunkIndex(options.trunkDir, dir);
        index->layers.resize(std::size_t(layers));
    }
    PlanInputs in;
    in.layerBytes.assign(std::size_t(layers), 0);
    std::uint64_t expertBytes = 0;
    for (const auto& [name, t] : ckpt.tensors()) {
        const std::string prefix = "language_model.model.layers.";
        if (name.rfind(prefix, 0) != 0) continue;
        const int L = std::atoi(name.c_str() + prefix.size());
        if (L < 0 || L >= layers) continue;
        if (isRoutedExpertTensor(name)) expertBytes += t.nbytes;
        else if (!useTrunk) in.layerBytes[std::size_t(L)] += t.nbytes;
    }
    if (useTrunk)
        for (int L = 0; L < layers; ++L) {
            in.layerBytes[std::size_t(L)] = index->layers[std::size_t(L)].bytes;
            in.layerPieceBytes.push_back(largestPieceBytes(index->layers[std::size_t(L)]));
        }
    const std::string embedName = "language_model.model.embed_tokens.weight";
    const std::string headName = "language_model.lm_head.weight";
    const bool streamTables = options.streamModelTables;
    for (const std::string& name :
         {embedName, headName, std::string("language_model.model.norm.weight"),
          std::string("language_model.model.output_attn_res_norm.weight"),
          std::string("language_model.model.output_attn_res_proj.weight")}) {
        const TensorInfo* t = ckpt.find(name);
        if (!t) continue;
        if ((name == embedName || name == headName) && streamTables) {
            const std::uint64_t rows = t->rank == 2 ? std::max<std::uint64_t>(1, t->shape[0]) : 1;
            // The embedding reads one row; only lm_head needs the two block buffers.
            in.modelBytes += model::StreamedTable::bufferBytes(
                t->nbytes / rows, name == headName ? options.tableBlockBytes : 0);
        } else {
            in.modelBytes += t->nbytes;
        }
    }
    in.modelTablesStreamed = streamTables;
    if (useCache) {
        impl->store = std::make_shared<CheckpointExpertStore>(ckpt, c, layers);
        in.expertSlotBytes = impl->store->slotBytes();
        in.expertCount = impl->store->totalExperts();
    } else {
        in.residentExpertBytes = expertBytes;
    }
    in.topK = c.numExpertsPerToken;
    const std::uint64_t P = std::uint64_t(c.kdaNumHeads) * std::uint64_t(c.kdaHeadDim);
    const std::uint64_t kdaState =
        (P * std::uint64_t(c.kdaHeadDim) + 3 * P * std::uint64_t(std::max(0, c.shortConvKernelSize - 1))) * 4;
    for (int L = 0; L < layers; ++L) {
        if (c.layers[std::size_t(L)].attention == AttentionKind::Kda) in.stateBytes += kdaState;
        else in.kvBytesPerPosition += std::uint64_t(c.kvLoraRank + c.qkRopeHeadDim) * 4;
    }
    in.contextLength = options.contextLength;
    in.bufferBytes = (std::uint64_t(c.vocabSize) + 64ull * std::uint64_t(c.hiddenSize) +
                      8ull * std::uint64_t(std::max<std::uint64_t>(P, std::uint64_t(c.intermediateSize)))) * 4;
    in.streamed = useTrunk;
    MemoryBudget budget;
    budget.trunkBytes = useTrunk ? options.trunkBytes : std::numeric_limits<std::uint64_t>::max();
    budget.cacheBytes = options.expertCacheSlots > 0
                            ? std::uint64_t(options.expertCacheSlots) * in.expertSlotBytes
                            : options.expertCacheBytes;
    budget.source = "options";
    const auto mem = readMemoryInfo();
    impl->plan = planMemory(in, budget, mem ? mem->availableBytes : 0);
    if (options.enforceMemoryPlan) enforceMemoryPlan(impl->plan);

    if (useCache) {
        CacheOptions co;
        co.slotCount = std::max(1, impl->plan.cacheSlots);
        co.recordTrace = options.recordCacheTrace;
        impl->cache = std::make_unique<ExpertCache>(impl->store, co);
    }
    const model::CheckpointSource ckptSource(ckpt);
    if (streamTables) {
        // Shape and dtype are checked here as the resident binding would check them.
        auto open = [&](const std::string& name, std::uint64_t blockBytes) {
            const TensorInfo& t = ckpt.at(name);
            if (t.rank != 2 || t.shape[0] != std::uint64_t(c.vocabSize) ||
                t.shape[1] != std::uint64_t(c.hiddenSize))
                throw ModelError("tensor " + name + " is not [" + std::to_string(c.vocabSize) +
                                 ", " + std::to_string(c.hiddenSize) + "] as config.json implies");
            std::filesystem::path file = ckpt.shardPaths()[t.shard];
            std::uint64_t offset = t.offset;
            if (useTrunk) { // the packed trunk's copy: one file for the whole run
                const TrunkRecord* r = index->modelRecordFor(name);
                if (!r || !r->tensors.count(name))
                    throw ModelError("tensor " + name + " is not in the packed trunk; re-pack it");
                file = index->binPath;
                offset = r->offset + r->tensors.find(name)->second.offset;
            }
            return std::make_unique<model::StreamedTable>(file, offset, t.dtype, c.vocabSize,
                                                          c.hiddenSize, name, blockBytes);
        };
        impl->embedTable = open(embedName, 0);
        impl->headTable = open(headName, options.tableBlockBytes);
    }
    if (!useTrunk) {
        model::bindModelTensors(ckptSource, c, impl->w, !streamTables);
        for (int L = 0; L < layers; ++L)
            impl->w.layers.push_back(model::bindLayer(ckptSource, c, L, !useCache, impl->w.bytes));
        return Model(std::move(impl));
    }

    impl->trunk = std::make_unique<TrunkStreamer>(*index, impl->plan);
    const TrunkIndex& ti = impl->trunk->index();
    {
        AlignedFile bin(ti.binPath);
        std::vector<std::pair<const TrunkRecord*, const std::byte*>> records;
        impl->modelRecordBytes.resize(ti.modelRecords.size());
        for (std::size_t i = 0; i < ti.modelRecords.size(); ++i) {
            if (streamTables && (ti.modelRecords[i].tensors.count(embedName) ||
                                 ti.modelRecords[i].tensors.count(headName)))
                continue; // left on disk
            auto& bytes = impl->modelRecordBytes[i];
            bytes.resize(std::size_t(ti.modelRecords[i].bytes));
            bin.read(ti.modelRecords[i].offset, bytes.data(), bytes.size());
            records.emplace_back(&ti.modelRecords[i], bytes.data());
            impl->w.bytes += bytes.size();
        }
        model::bindModelTensors(RecordSource(records), c, impl->w, !streamTables);
    }
    impl->w.layers.resize(std::size_t(layers));
    for (int L = 0; L < layers && impl->trunk->pinned(L); ++L) {
        const RecordSource src({{&ti.layers[std::size_t(L)], impl->trunk->pinnedData(L)}});
        std::uint64_t lent = 0; // pinned bytes are counted by the streamer
        impl->w.layers[std::size_t(L)] = model::bindLayer(src, c, L, false, lent);
    }
    if (!useCache) {
        impl->residentExperts.resize(std::size_t(layers));
        for (int L = 0; L < layers; ++L)
            if (c.layers[std::size_t(L)].mlp == MlpKind::Moe)
                impl->residentExperts[std::size_t(L)] =
                    model::bindRoutedExperts(ckptSource, c, L, impl->w.bytes);
    }
    return Model(std::move(impl));
}

const MemoryPlan& Model::memoryPlan() const { return impl_->plan; }

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
    }
    return m;
}

void Model::resetCacheStats() {
    if (impl_->cache) impl_->cache->resetStats();
}

void Model::writeCacheTrace(const std::filesystem::path& dir) const {
    if (!impl_->cache)
        throw ModelError("no expert cache trace: the routed experts are resident (give a cache budget)");
    impl_->cache->writeTrace(dir);
}

InferenceState Model::newState() const {
    const ModelConfig& c = impl_->config;
    auto d = std::make_unique<InferenceState::Data>();
    d->layers.resize(std::size_t(impl_->layerCount));
    for (std::size_t L = 0; L < d->layers.size(); ++L) {
        if (c.layers[L].attention != AttentionKind::Kda) continue;
        const std::size_t P = std::size_t(c.kdaNumHeads) * std::size_t(c.kdaHeadDim);
        LayerState& s = d->layers[L];
        s.S.assign(P * std::size_t(c.kdaHeadDim), 0.0f);
        const std::size_t hist = P * std::size_t(c.shortConvKernelSize - 1);
        s.qConv.assign(hist, 0.0f);
        s.kConv.assign(hist, 0.0f);
        s.vConv.assign(hist, 0.0f);
    }
    d->fresh = d->layers;
    return InferenceState(std::move(d));
}

namespace {

void mv(std::vector<float>& y, const Matrix& w, const float* x) {
    y.resize(std::size_t(w.rows));
    matvec(y.data(), x, w.view());
}

// down(situGlu(gate x, up x)): the dense layer 0 and the shared experts.
void gluMlp(float* out, const float* x, const Matrix& gate, const Matrix& up, const Matrix& down,
            const ModelConfig& c) {
    std::vector<float> g, u;
    mv(g, gate, x);
    mv(u, up, x);
    situGlu(g.data(), g.data(), u.data(), gate.rows, float(c.activationSituBeta),
            float(c.activationSituLinearBeta));
    matvec(out, g.data(), down.view());
}

void kdaToken(float* out, const float* xn, const model::KdaWeights& w, LayerState& s,
              const ModelConfig& c, float eps) {
    const int H = c.kdaNumHeads, D = c.kdaHeadDim, P = H * D, K = c.shortConvKernelSize;
    std::vector<float> q, k, v, z, a, beta, gate;
    mv(q, w.q, xn);
    mv(k, w.k, xn);
    mv(v, w.v, xn);
    shortConvSilu(q.data(), q.data(), w.qConv.data(), s.qConv.data(), P, K, 1);
    shortConvSilu(k.data(), k.data(), w.kConv.data(), s.kConv.data(), P, K, 1);
    shortConvSilu(v.data(), v.data(), w.vConv.data(), s.vConv.data(), P, K, 1);
    mv(beta, w.b, xn);
    mv(a, w.fa, xn);
    mv(z, w.fb, a.data());
    std::vector<float> alpha(static_cast<std::size_t>(P)), g(static_cast<std::size_t>(P));
    kdaDecay(g.data(), alpha.data(), z.data(), w.aLog.data(), w.dtBias.data(), H, D,
             float(c.gateLowerBound));
    const float qScale = 1.0f / std::sqrt(float(D));
    std::vector<float> o(static_cast<std::size_t>(P));
    for (int h = 0; h < H; ++h) {
        float* qh = q.data() + h * D;
        float* kh = k.data() + h * D;
        l2norm(qh, D);
        l2norm(kh, D);
        for (int i = 0; i < D; ++i) qh[i] *= qScale;
        kdaStep(s.S.data() + std::size_t(h) * D * D, o.data() + h * D, qh, kh, v.data() + h * D,
                alpha.data() + h * D, sigmoid(beta[std::size_t(h)]), D, D);
        // RMSNorm per head FIRST, then the output gate.
        rmsnorm(o.data() + h * D, o.data() + h * D, w.oNorm.data(), D, eps);
    }
    mv(gate, w.g, xn);
    for (int i = 0; i < P; ++i) o[std::size_t(i)] *= sigmoid(gate[std::size_t(i)]);
    matvec(out, o.data(), w.o.view());
}

void mlaToken(float* out, const float* xn, const model::MlaWeights& w, LayerState& s,
              const ModelConfig& c, float eps, int position) {
    const int H = c.numAttentionHeads, R = c.qkRopeHeadDim, C = c.kvLoraRank;
    std::vector<float> qa, q, kv, gate;
    mv(qa, w.qa, xn);
    rmsnorm(qa.data(), qa.data(), w.qaNorm.data(), c.qLoraRank, eps);
    mv(q, w.qb, qa.data());
    mv(kv, w.kva, xn);
    rmsnorm(kv.data(), kv.data(), w.kvaNorm.data(), C, eps); // the latent part only
    s.latent.insert(s.latent.end(), kv.begin(), kv.begin() + C);
    s.rope.insert(s.rope.end(), kv.begin() + C, kv.begin() + C + R);
    std::vector<float> o(std::size_t(H) * std::size_t(c.vHeadDim));
    const MlaShape shape{H, c.qkNopeHeadDim, R, C, c.vHeadDim};
    mlaAttend(o.data(), q.data(), s.latent.data(), s.rope.data(), position + 1, w.kvb.view(), shape);
    if (c.mlaUseOutputGate) {
        mv(gate, w.g, xn);
        for (std::size_t i = 0; i < o.size(); ++i) o[i] *= sigmoid(gate[i]);
    }
    matvec(out, o.data(), w.o.view());
}

// Routed experts come from the layer's own binding, the resident per-layer set, or
// the expert cache (a batch for the top-k, each expert pinned while it computes).
struct ExpertSourceRef {
    const std::vector<model::ExpertWeightsStored>* resident = nullptr;
    ExpertCache* cache = nullptr;
    const CheckpointExpertStore* store = nullptr;
    int layer = 0;
};

int moeToken(float* out, const float* xn, const model::MoeWeightsStored& w, const ModelConfig& c,
             float eps, const ExpertSourceRef& src) {
    LatentMoeWeights lw;
    lw.gate = w.gate.view();
    lw.selectionBias = w.bias.data();
    lw.down = w.down.view();
    lw.up = w.up.view();
    lw.latentNorm = w.norm.empty() ? nullptr : w.norm.data();
    if (w.hasShared) {
        lw.sharedW1 = w.sharedGate.view();
        lw.sharedW3 = w.sharedUp.view();
        lw.sharedW2 = w.sharedDown.view();
    }
    ExpertCache::Handle held;
    if (src.cache) {
        const int I = c.moeIntermediateSize, Lat = c.routedExpertHiddenSize;
        lw.prefetch = [&](const int* ex, int n) { src.cache->prefetch(src.layer, {ex, std::size_t(n)}); };
        lw.expert = [&src, &held, &c, I, Lat](int e, ExpertWeights& ex) {
            src.cache->release(held); // the previous expert is done computing
            if (e < 0 || e >= c.numExperts) return false;
            held = src.cache->acquire(src.layer, e);
            if (!held.data) return false; // a failed read: dropped, never silent
            const ExpertLayout& lay = src.store->layout(src.layer, e);
            const auto* b = reinterpret_cast<const std::uint8_t*>(held.data);
            ex.w1 = WeightView::mxfp4(b + lay.w1Packed, b + lay.w1Scales, I, Lat);
            ex.w3 = WeightView::mxfp4(b + lay.w3Packed, b + lay.w3Scales, I, Lat);
            ex.w2 = WeightView::mxfp4(b + lay.w2Packed, b + lay.w2Scales, Lat, I);
            return true;
        };
    } else {
        const auto& experts = src.resident ? *src.resident : w.experts;
        lw.expert = [&experts](int e, ExpertWeights& ex) {
            if (e < 0 || std::size_t(e) >= experts.size()) return false;
            const auto& s = experts[std::size_t(e)];
            ex.w1 = s.w1.view();
            ex.w3 = s.w3.view();
            ex.w2 = s.w2.view();
            return true;
        };
    }
    LatentMoeConfig cfg;
    cfg.topK = c.numExpertsPerToken;
    cfg.renormalise = c.moeRenormalize;
    cfg.routedScale = float(c.routedScalingFactor);
    cfg.rmsEps = eps;
    cfg.situBeta = float(c.activationSituBeta);
    cfg.situLinearBeta = float(c.activationSituLinearBeta);
    int drops = 0;
    try {
        drops = latentMoeForward(out, xn, lw, cfg);
    } catch (...) {
        if (src.cache) {
            src.cache->release(held);
            src.cache->releaseBatch();
        }
        throw;
    }
    if (src.cache) {
        src.cache->release(held);
        src.cache->releaseBatch();
    }
    return drops;
}

} // namespace

TokenStats Model::forward(InferenceState& state, int token, std::span<float> logits) const {
    const ModelConfig& c = impl_->config;
    Impl& impl = *impl_;
    const auto& W = impl.w;
    const float eps = impl_->eps;
    const int E = c.hiddenSize;
    if (token < 0 || token >= c.vocabSize)
        throw ModelError("token id " + std::to_string(token) + " is outside 0.." +
                         std::to_string(c.vocabSize - 1) + " (vocab_size)");
    if (logits.size() != std::size_t(c.vocabSize))
        throw ModelError("logits buffer holds " + std::to_string(logits.size()) + " floats, vocab_size is " +
                         std::to_string(c.vocabSize));
    TokenStats stats;
    const int position = state.d_->length;
    if (impl.cache) impl.cache->nextStep(); // the request trace's step column

    // The embedding row, widened exactly.
    std::vector<float> h(static_cast<std::size_t>(E));
    if (impl.embedTable) {
        impl.embedTable->row(token, h.data());
    } else {
        const WeightView ev = W.embed.view().rowSlice(token, 1);
        for (int i = 0; i < E; ++i)
            h[std::size_t(i)] = ev.type == WeightType::BF16
                                    ? bf16ToFloat(static_cast<const std::uint16_t*>(ev.data)[i])
                                    : static_cast<const float*>(ev.data)[i];
    }

    // Attention residuals: completed block snapshots plus the running partial block.
    std::vector<std::vector<float>> blocks;
    std::vector<float> x(static_cast<std::size_t>(E)), xn(static_cast<std::size_t>(E)), att(static_cast<std::size_t>(E)), mlp(static_cast<std::size_t>(E));
    std::vector<const float*> sources;
    auto aggregate = [&](float* out, const std::vector<float>* partial, const std::vector<float>& foldW) {
        sources.clear();
        for (const auto& b : blocks) sources.push_back(b.data());
        if (partial) sources.push_back(partial->data());
        attnRes(out, sources.data(), int(sources.size()), foldW.data(), E, eps);
    };

    for (std::size_t L = 0; L < std::size_t(impl.layerCount); ++L) {
        const LayerWeights& lw = impl.layer(int(L));
        LayerState& ls = state.d_->layers[L];
        std::vector<float> partial = h;
        bool hasPartial = true;
        // Pre-attention aggregation is skipped while no block exists.
        if (!blocks.empty()) aggregate(x.data(), &partial, lw.attnResFold);
        else x = h;
        if (int(L) % c.attnResBlockSize == 0) { // block boundary: snapshot, start afresh
            blocks.push_back(partial);
            hasPartial = false;
        }
        rmsnorm(xn.data(), x.data(), lw.inputNorm.data(), E, eps);
        if (lw.spec.attention == AttentionKind::Kda) kdaToken(att.data(), xn.data(), lw.kda, ls, c, eps);
        else mlaToken(att.data(), xn.data(), lw.mla, ls, c, eps, position);
        if (hasPartial)
            for (int i = 0; i < E; ++i) partial[std::size_t(i)] += att[std::size_t(i)];
        else
            partial = att;
        // Pre-MLP aggregation always runs: the partial block alone is a valid source set.
        aggregate(x.data(), &partial, lw.mlpResFold);
        rmsnorm(xn.data(), x.data(), lw.postNorm.data(), E, eps);
        impl.enterMlp(int(L));
        if (lw.spec.mlp == MlpKind::Dense)
            gluMlp(mlp.data(), xn.data(), lw.dense.gate, lw.dense.up, lw.dense.down, c);
        else {
            ExpertSourceRef src;
            src.layer = int(L);
            if (!impl.residentExperts.empty()) src.resident = &impl.residentExperts[L];
            src.cache = impl.cache.get();
            src.store = impl.store.get();
            stats.droppedExperts += moeToken(mlp.data(), xn.data(), lw.moe, c, eps, src);
        }
        for (int i = 0; i < E; ++i) h[std::size_t(i)] = partial[std::size_t(i)] + mlp[std::size_t(i)];
    }

    aggregate(x.data(), &h, W.outputResFold);
    rmsnorm(xn.data(), x.data(), W.finalNorm.data(), E, eps);
    if (impl.headTable)
        impl.headTable->matvec(logits.data(), xn.data());
    else
        matvec(logits.data(), xn.data(), W.lmHead.view());
    for (float v : logits)
        if (!std::isfinite(v)) {
            stats.nonFinite = true;
            break;
        }
    state.d_->length = position + 1;
    return stats;
}

int argmax(std::span<const float> logits) {
    if (logits.empty()) return -1;
    return int(std::max_element(logits.begin(), logits.end()) - logits.begin());
}

} // namespace k3
