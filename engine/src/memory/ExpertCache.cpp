#include "k3/expert_cache.hpp"

#include "memory/AlignedBuffer.hpp"
#include "memory/ExpertReader.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstring>
#include <fstream>
#include <iterator>
#include <map>
#include <set>

namespace k3 {
namespace {

using Clock = std::chrono::steady_clock;

class LruPolicy : public EvictionPolicy {
public:
    explicit LruPolicy(int slotCount) : tick_(std::size_t(slotCount), 0) {}
    void inserted(int s) override { touch(s); }
    void used(int s) override { touch(s); }
    void removed(int s) override {
        order_.erase({tick_[std::size_t(s)], s});
        tick_[std::size_t(s)] = 0;
    }
    int victim(const std::function<bool(int)>& evictable) override {
        for (const auto& [t, s] : order_) // oldest first; pinned slots are few (<= top-k)
            if (evictable(s)) return s;
        return -1;
    }

private:
    void touch(int s) {
        order_.erase({tick_[std::size_t(s)], s});
        tick_[std::size_t(s)] = ++now_;
        order_.insert({now_, s});
    }
    std::vector<std::uint64_t> tick_;
    std::set<std::pair<std::uint64_t, int>> order_;
    std::uint64_t now_ = 0;
};

// The replay moves no bytes: every read "arrives" at offset 0 of an empty slot.
class NullStore : public ExpertStore {
public:
    std::size_t slotBytes() const override { return 0; }
    std::uint64_t expertBytes(int, int) const override { return 0; }
    std::uint64_t diskOrder(int layer, int expert) const override {
        return std::uint64_t(ExpertCache::key(layer, expert));
    }
    std::size_t read(int, int, std::byte*) const override { return 0; }
};

std::byte gNoBytes[1];

} // namespace

struct ExpertCache::Arena {
    memory::AlignedBuffer buffer;
};

const char* cacheHitName(CacheHit hit) {
    switch (hit) {
    case CacheHit::Resident:
        return "resident";
    case CacheHit::Prefetch:
        return "prefetch";
    case CacheHit::Miss:
        return "miss";
    case CacheHit::Failed:
        return "failed";
    }
    return "?";
}

std::unique_ptr<EvictionPolicy> makeEvictionPolicy(CachePolicy policy, int slotCount) {
    switch (policy) {
    case CachePolicy::Lru:
        return std::make_unique<LruPolicy>(slotCount);
    }
    throw CacheError("unknown cache policy");
}

ExpertCache::ExpertCache(std::shared_ptr<const ExpertStore> store, const CacheOptions& options)
    : store_(std::move(store)) {
    if (!store_) throw CacheError("expert cache: no expert store");
    if (options.slotCount < 1)
        throw CacheError("expert cache: " + std::to_string(options.slotCount) +
                         " slots; at least one is needed");
    slotBytes_ = store_->slotBytes();
    if (slotBytes_ % 4096 != 0)
        throw CacheError("expert cache: slot size " + std::to_string(slotBytes_) +
                         " is not a multiple of 4096");
    policy_ = makeEvictionPolicy(options.policy, options.slotCount);
    arena_ = std::make_unique<Arena>();
    arena_->buffer = memory::AlignedBuffer(slotBytes_ * std::size_t(options.slotCount));
    const auto n = std::size_t(options.slotCount);
    keys_.assign(n, kEmpty);
    pins_.assign(n, 0);
    dataOffset_.assign(n, 0);
    prefetched_.assign(n, 0);
    batchPinned_.assign(n, 0);
    recordTrace_ = options.recordTrace;
    readThreads_ = options.readThreads > 0 ? options.readThreads : 16;
    pendingKey_.assign(n, kEmpty);
    memory::ExpertReaderChoice reader = memory::makeExpertReader(*store_, options.io, readThreads_);
    reader_ = std::move(reader.reader);
    ioInfo_ = std::move(reader.info);
}

ExpertCache::~ExpertCache() {
    try {
        drainReads(); // no read may outlive the arena it writes into
    } catch (...) {
    }
}

namespace {
double nowSeconds() {
    return std::chrono::duration<double>(Clock::now().time_since_epoch()).count();
}
} // namespace

void ExpertCache::takeCompletion() {
    memory::ExpertReadDone done;
    if (!reader_->next(done)) throw CacheError("expert cache: a read was lost by the reader");
    const int s = int(done.tag);
    const std::int64_t k = pendingKey_[std::size_t(s)];
    pendingKey_[std::size_t(s)] = kEmpty;
    pendingWhere_.erase(k);
    ++stats_.diskReads;
    const int layer = int(k >> 32), expert = int(std::uint32_t(k));
    if (done.ok) {
        keys_[std::size_t(s)] = k;
        where_[k] = s;
        dataOffset_[std::size_t(s)] = done.payloadOffset;
        prefetched_[std::size_t(s)] = 1;
        stats_.bytesRead += store_->expertBytes(layer, expert);
    } else { // the slot goes back; the expert is retried on request
        keys_[std::size_t(s)] = kEmpty;
        policy_->removed(s);
        --pins_[std::size_t(s)];
        batchPinned_[std::size_t(s)] = 0;
        ++stats_.failedReads;
    }
    if (--pendingReads_ == 0) stats_.ioBusySeconds += nowSeconds() - busySince_;
}

void ExpertCache::waitForRead(int slot) {
    const auto t0 = Clock::now();
    while (pendingKey_[std::size_t(slot)] != kEmpty) takeCompletion();
    stats_.readSeconds += std::chrono::duration<double>(Clock::now() - t0).count();
}

void ExpertCache::drainReads() {
    if (pendingReads_ == 0) return;
    const auto t0 = Clock::now();
    while (pendingReads_ > 0) takeCompletion();
    stats_.readSeconds += std::chrono::duration<double>(Clock::now() - t0).count();
}

std::uint64_t ExpertCache::arenaBytes() const {
    return std::uint64_t(slotBytes_) * keys_.size();
}

// INFLIGHT is never a candidate (a slot cannot be claimed twice); EMPTY is taken at
// once (a free slot beats evicting a live one); pinned slots are skipped.
int ExpertCache::pickVictim() {
    for (std::size_t i = 0; i < keys_.size(); ++i)
        if (keys_[i] == kEmpty) return int(i);
    return policy_->victim(
        [this](int s) { return keys_[std::size_t(s)] >= 0 && pins_[std::size_t(s)] == 0; });
}

void ExpertCache::evict(int s) {
    const std::int64_t k = keys_[std::size_t(s)];
    if (k < 0) return;
    where_.erase(k);
    policy_->removed(s);
    prefetched_[std::size_t(s)] = 0;
    ++stats_.evictions;
}

void ExpertCache::publish(int s, std::int64_t k, std::size_t dataOffset, bool byPrefetch) {
    keys_[std::size_t(s)] = k;
    where_[k] = s;
    dataOffset_[std::size_t(s)] = dataOffset;
    prefetched_[std::size_t(s)] = byPrefetch ? 1 : 0;
    policy_->inserted(s);
}

void ExpertCache::prefetch(int layer, std::span<const int> experts) {
    const std::size_t n = experts.size();
    std::vector<int> reserved(n, -1);
    // Phase 1, serial: pin what is resident, reserve a slot for what is not. A batch that
    // fits the cache (the forward's waves) pins all its resident experts first: reserving
    // as we went could evict an expert the same batch asks for later (a read thrown away,
    // then done again). A larger batch keeps the interleaved order, so that its first
    // experts still find room.
    std::vector<char> missing(n, 0);
    const bool fits = n <= keys_.size();
    auto reserve = [&](std::size_t j) {
        const int s = pickVictim();
        if (s < 0) return; // no room now: acquire() reads it when its turn comes
        evict(s);
        keys_[std::size_t(s)] = kInflight;
        ++pins_[std::size_t(s)];
        batchPinned_[std::size_t(s)] = 1;
        reserved[j] = s;
    };
    for (std::size_t j = 0; j < n; ++j) {
        const std::int64_t k = key(layer, experts[j]);
        bool duplicate = false;
        for (std::size_t i = 0; i < j; ++i) duplicate = duplicate || experts[i] == experts[j];
        if (duplicate) continue;
        if (pendingWhere_.count(k)) continue; // an earlier batch's read, pinned by it
        if (auto it = where_.find(k); it != where_.end()) {
            if (!batchPinned_[std::size_t(it->second)]) {
                batchPinned_[std::size_t(it->second)] = 1;
                ++pins_[std::size_t(it->second)];
            }
            continue;
        }
        if (fits)
            missing[j] = 1;
        else
            reserve(j);
    }
    for (std::size_t j = 0; j < n; ++j)
        if (missing[j]) reserve(j);
    // Phase 2: the reads go out together in disk-offset order; acquire() waits for each
    // only when its turn comes. The slots enter the eviction order now, in that order, so
    // the cache evolves the same whichever reader finishes first.
    std::vector<std::size_t> order;
    for (std::size_t j = 0; j < n; ++j)
        if (reserved[j] >= 0) order.push_back(j);
    if (order.empty()) return;
    std::sort(order.begin(), order.end(), [&](std::size_t a, std::size_t b) {
        return store_->diskOrder(layer, experts[a]) < store_->diskOrder(layer, experts[b]);
    });
    std::vector<memory::ExpertReadJob> jobs;
    jobs.reserve(order.size());
    for (std::size_t j : order) {
        const int s = reserved[j];
        const std::int64_t k = key(layer, experts[j]);
        policy_->inserted(s);
        pendingKey_[std::size_t(s)] = k;
        pendingWhere_[k] = s;
        jobs.push_back({layer, experts[j], slotData(s), std::uint64_t(s)});
    }
    if (pendingReads_ == 0) busySince_ = nowSeconds();
    pendingReads_ += int(jobs.size());
    stats_.maxInFlight =
        std::max(stats_.maxInFlight, std::min(pendingReads_, std::max(1, ioInfo_.depth)));
    reader_->submit(jobs);
}

ExpertCache::Handle ExpertCache::acquire(int layer, int expert) {
    const std::int64_t k = key(layer, expert);
    ++stats_.requests;
    if (recordTrace_) {
        trace_.emplace_back(layer, expert);
        requests_.push_back({std::max<std::int64_t>(step_, 0), layer, expert, CacheHit::Miss});
    }
    Handle h;
    if (auto it = pendingWhere_.find(k); it != pendingWhere_.end()) waitForRead(it->second);
    if (auto it = where_.find(k); it != where_.end()) {
        const int s = it->second;
        ++stats_.hits;
        const bool prefetched = prefetched_[std::size_t(s)] != 0;
        if (prefetched)
            ++stats_.prefetchHits;
        else
            ++stats_.residentHits;
        if (recordTrace_)
            requests_.back().hit = prefetched ? CacheHit::Prefetch : CacheHit::Resident;
        prefetched_[std::size_t(s)] = 0;
        if (batchPinned_[std::size_t(s)]) { // the request takes over the batch's pin
            batchPinned_[std::size_t(s)] = 0;
            --pins_[std::size_t(s)];
        }
        ++pins_[std::size_t(s)];
        policy_->used(s);
        h.slot = s;
        h.data = slotData(s) + dataOffset_[std::size_t(s)];
        return h;
    }
    ++stats_.misses;
    const int s = pickVictim();
    if (s < 0)
        throw CacheError("expert cache: all " + std::to_string(keys_.size()) +
                         " slots are pinned; release experts before acquiring more");
    evict(s);
    keys_[std::size_t(s)] = kInflight;
    const auto t0 = Clock::now();
    std::size_t off = 0;
    bool ok = true;
    try {
        off = store_->read(layer, expert, slotData(s));
    } catch (const std::exception&) {
        ok = false;
    }
    stats_.readSeconds += std::chrono::duration<double>(Clock::now() - t0).count();
    ++stats_.diskReads;
    if (!ok) {
        keys_[std::size_t(s)] = kEmpty;
        ++stats_.failedReads;
        if (recordTrace_) requests_.back().hit = CacheHit::Failed;
        return h; // data == nullptr: the caller drops the expert and the run is invalid
    }
    stats_.bytesRead += store_->expertBytes(layer, expert);
    publish(s, k, off, /*byPrefetch=*/false);
    ++pins_[std::size_t(s)];
    h.slot = s;
    h.data = slotData(s) + off;
    return h;
}

void ExpertCache::release(Handle& h) {
    if (h.slot >= 0 && pins_[std::size_t(h.slot)] > 0) --pins_[std::size_t(h.slot)];
    h = {};
}

void ExpertCache::releaseBatch() {
    drainReads();
    for (std::size_t s = 0; s < keys_.size(); ++s)
        if (batchPinned_[s]) {
            batchPinned_[s] = 0;
            --pins_[s];
        }
}

std::byte* ExpertCache::slotData(int slot) const {
    if (slotBytes_ == 0) return gNoBytes;
    return arena_->buffer.data() + std::size_t(slot) * slotBytes_;
}

void ExpertCache::writeTrace(const std::filesystem::path& dir) const {
    std::filesystem::create_directories(dir);
    {
        std::ofstream out(dir / "expert_requests.tsv", std::ios::trunc);
        out << "step\tlayer\texpert\thit\n";
        for (const CacheRequest& r : requests_)
            out << r.step << '\t' << r.layer << '\t' << r.expert << '\t' << cacheHitName(r.hit)
                << '\n';
        out.close();
        if (!out) throw CacheError((dir / "expert_requests.tsv").string() + ": write failed");
    }
    {
        std::ofstream out(dir / "expert_trace.bin", std::ios::binary | std::ios::trunc);
        for (const auto& [l, e] : trace_) {
            const std::int32_t rec[2] = {l, e}; // x86/ARM are little-endian, as the format
            out.write(reinterpret_cast<const char*>(rec), sizeof rec);
        }
        if (!out) throw CacheError((dir / "expert_trace.bin").string() + ": write failed");
    }
    std::map<std::int32_t, std::map<std::int32_t, std::uint64_t>> hist;
    for (const auto& [l, e] : trace_) ++hist[l][e];
    nlohmann::json layers = nlohmann::json::object();
    for (const auto& [l, m] : hist) {
        nlohmann::json row = nlohmann::json::object();
        for (const auto& [e, c] : m) row[std::to_string(e)] = c;
        layers[std::to_string(l)] = row;
    }
    const nlohmann::json doc{
        {"requests", trace_.size()},
        {"format", "expert_trace.bin: int32 little-endian (layer, expert) pairs"},
        {"layers", layers}};
    std::ofstream out(dir / "expert_hist.json", std::ios::trunc);
    out << doc.dump(1) << "\n";
    if (!out) throw CacheError((dir / "expert_hist.json").string() + ": write failed");
}

std::vector<std::pair<std::int32_t, std::int32_t>>
readExpertTrace(const std::filesystem::path& file) {
    std::ifstream in(file, std::ios::binary);
    if (!in) throw CacheError(file.string() + ": cannot open");
    std::vector<char> bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    if (bytes.size() % 8 != 0)
        throw CacheError(file.string() + ": " + std::to_string(bytes.size()) +
                         " bytes is not a whole number of 8-byte (layer, expert) records");
    std::vector<std::pair<std::int32_t, std::int32_t>> t(bytes.size() / 8);
    for (std::size_t i = 0; i < t.size(); ++i) {
        std::int32_t rec[2];
        std::memcpy(rec, bytes.data() + i * 8, 8);
        if (rec[0] < 0 || rec[1] < 0)
            throw CacheError(file.string() + ": record " + std::to_string(i) +
                             " has a negative index");
        t[i] = {rec[0], rec[1]};
    }
    return t;
}

TraceReplay replayExpertTrace(std::span<const std::pair<std::int32_t, std::int32_t>> trace,
                              int capacity, CachePolicy policy) {
    CacheOptions o;
    o.slotCount = capacity;
    o.policy = policy;
    o.readThreads = 1;
    o.io = ExpertIo::Inline;
    ExpertCache cache(std::make_shared<NullStore>(), o);
    std::vector<int> batch;
    for (std::size_t i = 0; i < trace.size();) {
        const std::int32_t layer = trace[i].first;
        batch.clear();
        // A batch ends at a layer change, or where an expert repeats (the next token
        // revisiting the same layer with a one-layer model).
        while (i < trace.size() && trace[i].first == layer &&
               std::find(batch.begin(), batch.end(), trace[i].second) == batch.end())
            batch.push_back(trace[i++].second);
        cache.prefetch(layer, batch);
        for (int e : batch) {
            ExpertCache::Handle h = cache.acquire(layer, e);
            cache.release(h);
        }
        cache.releaseBatch();
    }
    return {capacity, cache.stats()};
}

TraceReplay replayLayerVisits(std::span<const std::pair<std::int32_t, std::int32_t>> trace,
                              int capacity, CachePolicy policy) {
    CacheOptions o;
    o.slotCount = capacity;
    o.policy = policy;
    o.io = ExpertIo::Inline;
    ExpertCache cache(std::make_shared<NullStore>(), o);
    std::map<int, std::uint64_t> visit; // expert -> positions that chose it
    std::vector<int> order;
    const std::size_t wave = std::size_t(std::max(1, capacity));
    for (std::size_t i = 0; i < trace.size();) {
        const std::int32_t layer = trace[i].first;
        visit.clear();
        for (; i < trace.size() && trace[i].first == layer; ++i) ++visit[trace[i].second];
        order.clear();
        for (const auto& [e, n] : visit) order.push_back(e); // ascending: the disk order
        // As moeExperts: waves of at most the slot count, each expert acquired once.
        for (std::size_t first = 0; first < order.size(); first += wave) {
            const std::size_t n = std::min(wave, order.size() - first);
            cache.prefetch(layer, {order.data() + first, n});
            for (std::size_t j = first; j < first + n; ++j) {
                ExpertCache::Handle h = cache.acquire(layer, order[j]);
                cache.countPositionUses(visit[order[j]]);
                cache.release(h);
            }
            cache.releaseBatch();
        }
    }
    return {capacity, cache.stats()};
}

} // namespace k3
