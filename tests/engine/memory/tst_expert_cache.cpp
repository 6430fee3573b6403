// The routed-expert cache against the peer's cache fixture (expert size 1632 bytes, not a
// multiple of 4096; content derived from the expert index, so returning expert a's
// bytes for expert b shows at once), and a replay of the peer's recorded expert trace.
#include <QDir>
#include <QTemporaryDir>
#include <QTest>

#include <mutex>

#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <random>
#include <set>

#include <k3/config.hpp>
#include <k3/expert_cache.hpp>
#include <k3/fault_injection.hpp>
#include <k3/model.hpp>

namespace {

const std::string kFixture = K3_PEER_DIR "/cache/model-00001-of-00001.safetensors";
constexpr int kExperts = 24;
constexpr std::size_t kExpertBytes = 1632;

k3::ModelConfig fixtureConfig() {
    k3::ModelConfig c;
    c.numExperts = kExperts;
    c.moeIntermediateSize = 8;
    c.routedExpertHiddenSize = 128;
    c.layers.resize(1);
    c.layers[0].mlp = k3::MlpKind::Moe;
    return c;
}

// Expert e's bytes straight from the file, through a plain stream (an independent path).
std::vector<std::byte> expected(const k3::Checkpoint& ckpt, int e) {
    const auto& t = ckpt.at("language_model.model.layers.0.block_sparse_moe.experts." +
                            std::to_string(e) + ".w1.weight_packed");
    std::ifstream in(kFixture, std::ios::binary);
    in.seekg(std::streamoff(t.offset));
    std::vector<std::byte> b(kExpertBytes);
    in.read(reinterpret_cast<char*>(b.data()), std::streamsize(b.size()));
    return b;
}

// Wraps the real store and checks, at every read, that the slot being read into is
// INFLIGHT (reserved) and that no other slot holds the same key.
class WatchingStore : public k3::ExpertStore {
public:
    WatchingStore(std::shared_ptr<k3::CheckpointExpertStore> s) : inner(std::move(s)) {}
    std::size_t slotBytes() const override { return inner->slotBytes(); }
    std::uint64_t expertBytes(int l, int e) const override { return inner->expertBytes(l, e); }
    std::uint64_t diskOrder(int l, int e) const override { return inner->diskOrder(l, e); }
    // Called from the cache's reader threads at once: the bookkeeping takes a lock.
    std::size_t read(int l, int e, std::byte* slot) const override {
        {
            std::lock_guard lock(mutex);
            readOrder.push_back(e);
            if (cache) {
                const auto base = reinterpret_cast<std::uintptr_t>(slot);
                bool inflight = false;
                for (int s = 0; s < cache->slotCount(); ++s) {
                    // Locate the slot by elimination: the reserved one is INFLIGHT.
                    if (cache->slotKey(s) == k3::ExpertCache::kInflight) inflight = true;
                    if (cache->slotKey(s) == k3::ExpertCache::key(l, e)) aliasing = true;
                }
                if (!inflight) readIntoNonInflight = true;
                if (base % 4096 != 0) misaligned = true;
            }
        }
        if (fail.count(e)) throw std::runtime_error("injected short read");
        return inner->read(l, e, slot);
    }
    std::shared_ptr<k3::CheckpointExpertStore> inner;
    const k3::ExpertCache* cache = nullptr;
    mutable std::mutex mutex;
    mutable std::vector<int> readOrder;
    mutable bool aliasing = false, readIntoNonInflight = false, misaligned = false;
    std::set<int> fail;
};

} // namespace

class TestExpertCache : public QObject {
    Q_OBJECT
private slots:
    void slotSizeIsAlignedNotAssumed();
    void noAliasingUnderEvictionPressure();
    void hitCountersSeparateResidentFromPrefetch();
    void failedReadIsReportedAndSlotFreed();
    void batchPublishesIntoReservedSlots();
    void traceRoundTrip();
    void replayPeerTrace();
    void plainF32ExpertsFollowTheirDtype();
    void misalignedPlainExpertIsReadToAnAlignedPlace();
    void readersGiveTheSameBytesAndCounters();
    void readFaultWithSeveralInFlightLeavesNoReadBehind();
    void expertIoSwitchChoosesTheReader();
};

void TestExpertCache::slotSizeIsAlignedNotAssumed() {
    const k3::Checkpoint ckpt = k3::Checkpoint::open(kFixture);
    k3::CheckpointExpertStore store(ckpt, fixtureConfig(), 1, /*checkShapes=*/false);
    QCOMPARE(store.expertBytes(0, 5), std::uint64_t(kExpertBytes));
    QVERIFY(kExpertBytes % 4096 != 0);
    QCOMPARE(store.slotBytes() % 4096, std::size_t(0));
    // An expert's aligned read window can straddle a 4 KB boundary: two pages.
    QCOMPARE(store.slotBytes(), std::size_t(8192));
    QCOMPARE(store.layout(0, 3).w1Scales, std::size_t(512));
    QCOMPARE(store.layout(0, 3).w2Packed, std::size_t(544)); // file order w1, w2, w3
    QCOMPARE(store.layout(0, 3).w3Packed, std::size_t(1088));
}

void TestExpertCache::noAliasingUnderEvictionPressure() {
    const k3::Checkpoint ckpt = k3::Checkpoint::open(kFixture);
    auto inner = std::make_shared<k3::CheckpointExpertStore>(ckpt, fixtureConfig(), 1, false);
    auto store = std::make_shared<WatchingStore>(inner);
    std::vector<std::vector<std::byte>> want;
    for (int e = 0; e < kExperts; ++e) want.push_back(expected(ckpt, e));
    for (int e = 1; e < kExperts; ++e) QVERIFY(want[std::size_t(e)] != want[0]); // visible
    k3::CacheOptions o;
    o.slotCount = 5;
    o.readThreads = 4;
    o.io = k3::ExpertIo::Inline; // the watching store reads the slot keys: no other thread
    k3::ExpertCache cache(store, o);
    store->cache = &cache;
    std::mt19937 rng(7);
    std::uint64_t checked = 0;
    for (int round = 0; round < 400; ++round) {
        std::vector<int> batch(static_cast<std::size_t>(kExperts));
        for (int e = 0; e < kExperts; ++e) batch[std::size_t(e)] = e;
        std::shuffle(batch.begin(), batch.end(), rng);
        batch.resize(std::size_t(1 + rng() % 7)); // sometimes more than the 5 slots
        cache.prefetch(0, batch);
        for (int e : batch) {
            k3::ExpertCache::Handle h = cache.acquire(0, e);
            QVERIFY(h.data);
            QVERIFY(std::memcmp(h.data, want[std::size_t(e)].data(), kExpertBytes) == 0);
            QCOMPARE(cache.slotKey(h.slot), k3::ExpertCache::key(0, e));
            ++checked;
            cache.release(h);
        }
        cache.releaseBatch();
        for (int s = 0; s < cache.slotCount(); ++s) {
            QVERIFY(cache.slotKey(s) != k3::ExpertCache::kInflight); // nothing left in flight
            QCOMPARE(cache.pins(s), 0);
        }
        // Every key lives in exactly one slot.
        std::vector<std::int64_t> keys;
        for (int s = 0; s < cache.slotCount(); ++s)
            if (cache.slotKey(s) >= 0) keys.push_back(cache.slotKey(s));
        std::sort(keys.begin(), keys.end());
        QVERIFY(std::adjacent_find(keys.begin(), keys.end()) == keys.end());
    }
    QVERIFY(checked > 1000);
    QVERIFY(cache.stats().evictions > 500);
    QVERIFY(cache.stats().misses > 0); // batches larger than the cache took the on-demand path
    QVERIFY(!store->aliasing);
    QVERIFY(!store->readIntoNonInflight);
    QVERIFY(!store->misaligned);
}

void TestExpertCache::hitCountersSeparateResidentFromPrefetch() {
    const k3::Checkpoint ckpt = k3::Checkpoint::open(kFixture);
    auto store = std::make_shared<k3::CheckpointExpertStore>(ckpt, fixtureConfig(), 1, false);
    k3::CacheOptions o;
    o.slotCount = 4;
    k3::ExpertCache cache(store, o);
    auto step = [&](std::vector<int> batch) {
        cache.prefetch(0, batch);
        for (int e : batch) {
            auto h = cache.acquire(0, e);
            QVERIFY(h.data);
            cache.release(h);
        }
        cache.releaseBatch();
    };
    step({1, 2});
    k3::CacheStats s = cache.stats();
    QCOMPARE(s.requests, std::uint64_t(2));
    QCOMPARE(s.hits, std::uint64_t(2)); // the raw counter flatters...
    QCOMPARE(s.prefetchHits, std::uint64_t(2));
    QCOMPARE(s.residentHits, std::uint64_t(0)); // ...the TRUE resident one does not
    step({2, 3});
    s = cache.stats();
    QCOMPARE(s.residentHits, std::uint64_t(1));
    QCOMPARE(s.prefetchHits, std::uint64_t(3));
    step({4, 5, 6}); // one empty slot, then the two least recently used (1, 2) give way
    s = cache.stats();
    QCOMPARE(s.evictions, std::uint64_t(2));
    QCOMPARE(s.misses, std::uint64_t(0));
    QCOMPARE(s.diskReads, std::uint64_t(6));
    QCOMPARE(s.bytesRead, std::uint64_t(6 * kExpertBytes));
    step({1});
    QCOMPARE(cache.stats().residentHits, std::uint64_t(1)); // 1 was evicted: not resident
    QCOMPARE(cache.stats().evictions, std::uint64_t(3));    // and 3 (now the LRU) gave way
}

void TestExpertCache::failedReadIsReportedAndSlotFreed() {
    const k3::Checkpoint ckpt = k3::Checkpoint::open(kFixture);
    auto inner = std::make_shared<k3::CheckpointExpertStore>(ckpt, fixtureConfig(), 1, false);
    auto store = std::make_shared<WatchingStore>(inner);
    store->fail = {7};
    k3::CacheOptions o;
    o.slotCount = 3;
    o.io = k3::ExpertIo::Inline;
    k3::ExpertCache cache(store, o);
    const std::vector<int> batch{6, 7, 8};
    cache.prefetch(0, batch);
    QCOMPARE(cache.stats().failedReads, std::uint64_t(0)); // not waited for yet
    auto h6 = cache.acquire(0, 6);
    QVERIFY(h6.data);
    QVERIFY(std::memcmp(h6.data, expected(ckpt, 6).data(), kExpertBytes) == 0);
    QCOMPARE(cache.stats().failedReads, std::uint64_t(0)); // 7 is next in disk order
    auto h7 = cache.acquire(0, 7); // retried on request, fails again: dropped, not faked
    QVERIFY(!h7.data);
    QCOMPARE(cache.stats().failedReads, std::uint64_t(2));
    auto h8 = cache.acquire(0, 8);
    QVERIFY(h8.data);
    QVERIFY(std::memcmp(h8.data, expected(ckpt, 8).data(), kExpertBytes) == 0);
    cache.release(h6);
    cache.release(h8);
    cache.releaseBatch();
    int empty = 0;
    for (int s = 0; s < cache.slotCount(); ++s)
        empty += cache.slotKey(s) == k3::ExpertCache::kEmpty;
    QCOMPARE(empty, 1); // the failed reservation went back to EMPTY
}

void TestExpertCache::batchPublishesIntoReservedSlots() {
    // Fill slots so the reservations of the next batch are NOT slots 0..n-1: a publish
    // into slot j (the seed's bug) instead of the reserved slot would alias here.
    const k3::Checkpoint ckpt = k3::Checkpoint::open(kFixture);
    auto store = std::make_shared<k3::CheckpointExpertStore>(ckpt, fixtureConfig(), 1, false);
    k3::CacheOptions o;
    o.slotCount = 6;
    k3::ExpertCache cache(store, o);
    const std::vector<int> first{10, 11, 12, 13};
    cache.prefetch(0, first);
    cache.releaseBatch();
    const std::vector<int> second{20, 21, 10};
    cache.prefetch(0, second);
    for (int e : {20, 21, 10, 11, 12, 13}) {
        auto h = cache.acquire(0, e);
        QVERIFY(h.data);
        QVERIFY2(std::memcmp(h.data, expected(ckpt, e).data(), kExpertBytes) == 0,
                 qPrintable(QStringLiteral("expert %1 holds other bytes").arg(e)));
        cache.release(h);
    }
    cache.releaseBatch();
    QCOMPARE(cache.stats().evictions, std::uint64_t(0));
}

void TestExpertCache::traceRoundTrip() {
    const k3::Checkpoint ckpt = k3::Checkpoint::open(kFixture);
    auto store = std::make_shared<k3::CheckpointExpertStore>(ckpt, fixtureConfig(), 1, false);
    k3::CacheOptions o;
    o.slotCount = 2;
    o.recordTrace = true;
    k3::ExpertCache cache(store, o);
    for (int e : {3, 9, 3, 23}) {
        auto h = cache.acquire(0, e);
        cache.release(h);
    }
    const std::string dir =
        QDir::tempPath().toStdString() + "/k3_trace_" + std::to_string(::getpid());
    cache.writeTrace(dir);
    const auto t = k3::readExpertTrace(dir + "/expert_trace.bin");
    QCOMPARE(t.size(), std::size_t(4));
    QCOMPARE(t[1], (std::pair<std::int32_t, std::int32_t>(0, 9)));
    QCOMPARE(t[3], (std::pair<std::int32_t, std::int32_t>(0, 23)));
    std::ifstream hist(dir + "/expert_hist.json");
    std::string text((std::istreambuf_iterator<char>(hist)), std::istreambuf_iterator<char>());
    QVERIFY(text.find("\"3\": 2") != std::string::npos);
    std::filesystem::remove_all(dir);
}

void TestExpertCache::replayPeerTrace() {
    const auto trace = k3::readExpertTrace(K3_PEER_DIR "/expert_trace.bin");
    QCOMPARE(trace.size(), std::size_t(100096)); // as README.peer.md says
    std::set<std::pair<int, int>> distinct(trace.begin(), trace.end());
    QCOMPARE(distinct.size(), std::size_t(10010));
    std::printf("capacity  requests  hits%%   TRUE resident%%  misses  evictions\n");
    double previousResident = -1;
    for (int cap : {16, 64, 256, 1024, 4096, 16384}) {
        const k3::TraceReplay r = k3::replayExpertTrace(trace, cap);
        const k3::CacheStats& s = r.stats;
        std::printf("%8d  %8llu  %6.2f  %13.2f  %6llu  %9llu\n", cap,
                    (unsigned long long)s.requests, 100 * double(s.hits) / double(s.requests),
                    100 * s.residentHitRate(), (unsigned long long)s.misses,
                    (unsigned long long)s.evictions);
        QCOMPARE(s.requests, std::uint64_t(100096));
        QCOMPARE(s.hits + s.misses, s.requests);
        QVERIFY(s.residentHitRate() >= previousResident); // more slots never hurt here
        previousResident = s.residentHitRate();
    }
    // With room for every distinct expert: each is read once, every repeat is resident.
    const k3::TraceReplay all = k3::replayExpertTrace(trace, 16384);
    QCOMPARE(all.stats.residentHits, std::uint64_t(100096 - 10010));
    QCOMPARE(all.stats.prefetchHits, std::uint64_t(10010));
    QCOMPARE(all.stats.evictions, std::uint64_t(0));
}

// Issue 22, point 10: without quantization_config the experts are plain NAME.weight
// tensors; the store reads them as the file declares (F32 here), and the slot size and
// the memory plan follow that dtype instead of MXFP4's.
void TestExpertCache::plainF32ExpertsFollowTheirDtype() {
    const std::string dir = K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_f32";
    const k3::ModelConfig c = k3::readModelConfig(dir + "/config.json");
    QVERIFY(!c.quantization);
    const k3::Checkpoint ckpt = k3::Checkpoint::open(dir);
    const auto shared = std::make_shared<k3::CheckpointExpertStore>(ckpt, c, c.numHiddenLayers);
    const k3::CheckpointExpertStore& store = *shared;
    const std::uint64_t I = 36, Lat = 40, matrix = I * Lat * 4; // F32 [36, 40] / [40, 36]
    QCOMPARE(store.totalExperts(), std::uint64_t(4 * 6));       // 4 MoE layers of 6
    QCOMPARE(store.expertBytes(1, 0), 3 * matrix);
    QCOMPARE(store.slotBytes() % 4096, std::size_t(0));
    QVERIFY(store.slotBytes() >= 3 * matrix);
    const k3::ExpertLayout& lay = store.layout(1, 0);
    QCOMPARE(lay.w1Type, k3::DType::F32);
    QCOMPARE(lay.w3Type, k3::DType::F32);
    QCOMPARE(lay.w2Type, k3::DType::F32);
    QCOMPARE(lay.w1Packed, std::size_t(0)); // file order w1, w2, w3
    QCOMPARE(lay.w2Packed, std::size_t(matrix));
    QCOMPARE(lay.w3Packed, std::size_t(2 * matrix));
    // Layer 2's experts sit in the last shard (another file); every expert's bytes arrive
    // exactly as the checkpoint holds them.
    k3::CacheOptions co;
    co.slotCount = 2;
    k3::ExpertCache cache(shared, co);
    for (int L : {1, 2, 4})
        for (int e : {0, 5}) {
            k3::ExpertCache::Handle h = cache.acquire(L, e);
            QVERIFY(h.data);
            const k3::ExpertLayout& l = store.layout(L, e);
            const std::string x = "language_model.model.layers." + std::to_string(L) +
                                  ".block_sparse_moe.experts." + std::to_string(e) + ".";
            for (const auto& [w, off] : {std::pair<const char*, std::size_t>{"w1", l.w1Packed},
                                         {"w3", l.w3Packed},
                                         {"w2", l.w2Packed}}) {
                const std::vector<std::byte> want = ckpt.readRaw(x + w + ".weight");
                QCOMPARE(want.size(), std::size_t(matrix));
                QVERIFY2(std::memcmp(h.data + off, want.data(), want.size()) == 0, (x + w).c_str());
            }
            cache.release(h);
        }
    QCOMPARE(cache.stats().failedReads, std::uint64_t(0));
    // The plan: resident experts count their F32 bytes; cache slots are the store's.
    const k3::Model resident = k3::Model::load({.modelDir = dir});
    QCOMPARE(resident.memoryPlan().residentExpertBytes, 24 * 3 * matrix);
    k3::LaunchDiagnostics d;
    d.expertCacheSlots = 2;
    const k3::Model cached = k3::Model::load({.modelDir = dir}, d);
    QCOMPARE(cached.memoryPlan().expertSlotBytes, std::uint64_t(store.slotBytes()));
    QCOMPARE(cached.memoryPlan().residentExpertBytes, std::uint64_t(0));
}

// A plain F32 expert whose data starts 2 bytes past a 4-byte boundary in the shard (a
// 1-element BF16 tensor before it): the store reads it piece by piece so every matrix
// starts 4-byte aligned in the slot, and the bytes are the file's.
void TestExpertCache::misalignedPlainExpertIsReadToAnAlignedPlace() {
    const int I = 4, Lat = 8, experts = 2;
    std::string header = "{";
    std::vector<std::byte> data;
    auto add = [&](const std::string& name, const char* dtype, int rows, int cols, int elem) {
        const std::size_t begin = data.size(), n = std::size_t(rows) * std::size_t(cols) * elem;
        for (std::size_t i = 0; i < n; ++i) data.push_back(std::byte((begin + i) * 7 % 251));
        if (header.size() > 1) header += ",";
        header += "\"" + name + "\":{\"dtype\":\"" + dtype + "\",\"shape\":[" +
                  std::to_string(rows) + "," + std::to_string(cols) + "],\"data_offsets\":[" +
                  std::to_string(begin) + "," + std::to_string(data.size()) + "]}";
    };
    add("pad", "BF16", 1, 1, 2);
    for (int e = 0; e < experts; ++e) {
        const std::string x =
            "language_model.model.layers.0.block_sparse_moe.experts." + std::to_string(e) + ".";
        add(x + "w1.weight", "F32", I, Lat, 4);
        add(x + "w3.weight", "F32", I, Lat, 4);
        add(x + "w2.weight", "F32", Lat, I, 4);
    }
    header += "}";
    while (header.size() % 8) header += ' ';
    QTemporaryDir dir;
    const std::string file = dir.filePath(QStringLiteral("model.safetensors")).toStdString();
    {
        std::ofstream out(file, std::ios::binary);
        const std::uint64_t n = header.size();
        for (int i = 0; i < 8; ++i) out.put(char((n >> (8 * i)) & 0xFF));
        out << header;
        out.write(reinterpret_cast<const char*>(data.data()), std::streamsize(data.size()));
    }
    const k3::Checkpoint ckpt = k3::Checkpoint::open(file);
    k3::ModelConfig c;
    c.numExperts = experts;
    c.moeIntermediateSize = I;
    c.routedExpertHiddenSize = Lat;
    c.layers.resize(1);
    c.layers[0].mlp = k3::MlpKind::Moe; // no quantization: plain experts
    const auto store = std::make_shared<k3::CheckpointExpertStore>(ckpt, c, 1);
    QCOMPARE(ckpt.at("language_model.model.layers.0.block_sparse_moe.experts.1.w1.weight").offset %
                 4,
             std::uint64_t(2));
    k3::CacheOptions co;
    co.slotCount = 1;
    k3::ExpertCache cache(store, co);
    for (int e = 0; e < experts; ++e) {
        const k3::ExpertLayout& l = store->layout(0, e);
        QCOMPARE(l.w1Packed, std::size_t(0)); // read on its own: slot order w1, w3, w2
        QCOMPARE(l.w3Packed, std::size_t(I * Lat * 4));
        QCOMPARE(l.w2Packed, std::size_t(2 * I * Lat * 4));
        k3::ExpertCache::Handle h = cache.acquire(0, e);
        QVERIFY(h.data);
        QCOMPARE(reinterpret_cast<std::uintptr_t>(h.data) % 4, std::uintptr_t(0));
        const std::string x =
            "language_model.model.layers.0.block_sparse_moe.experts." + std::to_string(e) + ".";
        for (const auto& [w, off] : {std::pair<const char*, std::size_t>{"w1", l.w1Packed},
                                     {"w3", l.w3Packed},
                                     {"w2", l.w2Packed}}) {
            const std::vector<std::byte> want = ckpt.readRaw(x + w + ".weight");
            QVERIFY2(std::memcmp(h.data + off, want.data(), want.size()) == 0, w);
        }
        cache.release(h);
    }
}

namespace {

// The readers this kernel can run: inline and threads always, io_uring where allowed.
std::vector<k3::ExpertIo> availableReaders(std::shared_ptr<const k3::ExpertStore> store) {
    std::vector<k3::ExpertIo> r{k3::ExpertIo::Inline, k3::ExpertIo::Threads};
    k3::CacheOptions o;
    o.io = k3::ExpertIo::Uring;
    try {
        k3::ExpertCache probe(store, o);
        r.push_back(k3::ExpertIo::Uring);
    } catch (const k3::CacheError& e) {
        std::printf("io_uring not available here (%s): threads and inline only\n", e.what());
    }
    return r;
}

struct Workload {
    k3::CacheStats stats;
    std::uint64_t checked = 0;
};

// Random batches, some larger than the cache, every expert's bytes checked on use.
Workload runWorkload(const k3::Checkpoint& ckpt, std::shared_ptr<const k3::ExpertStore> store,
                     k3::ExpertIo io, int capacity) {
    k3::CacheOptions o;
    o.slotCount = capacity;
    o.readThreads = 4;
    o.io = io;
    k3::ExpertCache cache(store, o);
    std::mt19937 rng(11);
    Workload w;
    for (int round = 0; round < 300; ++round) {
        std::vector<int> batch(static_cast<std::size_t>(kExperts));
        for (int e = 0; e < kExperts; ++e) batch[std::size_t(e)] = e;
        std::shuffle(batch.begin(), batch.end(), rng);
        batch.resize(std::size_t(1 + rng() % 9));
        cache.prefetch(0, batch);
        for (int e : batch) {
            k3::ExpertCache::Handle h = cache.acquire(0, e);
            if (!h.data || std::memcmp(h.data, expected(ckpt, e).data(), kExpertBytes) != 0)
                return w; // checked stays short: the caller's comparison fails
            ++w.checked;
            cache.release(h);
        }
        cache.releaseBatch();
    }
    w.stats = cache.stats();
    return w;
}

} // namespace

// Issue 29: the batch's reads go out together (io_uring or the thread pool) and are
// waited for one by one. Whichever reader moves them, the bytes and every counter are
// the ones the inline reader gives: the cache evolves the same.
void TestExpertCache::readersGiveTheSameBytesAndCounters() {
    const k3::Checkpoint ckpt = k3::Checkpoint::open(kFixture);
    auto store = std::make_shared<k3::CheckpointExpertStore>(ckpt, fixtureConfig(), 1, false);
    for (int capacity : {3, 8, 24}) {
        const Workload base = runWorkload(ckpt, store, k3::ExpertIo::Inline, capacity);
        QVERIFY(base.checked > 1000);
        for (k3::ExpertIo io : availableReaders(store)) {
            const Workload w = runWorkload(ckpt, store, io, capacity);
            QCOMPARE(w.checked, base.checked);
            QCOMPARE(w.stats.requests, base.stats.requests);
            QCOMPARE(w.stats.residentHits, base.stats.residentHits);
            QCOMPARE(w.stats.prefetchHits, base.stats.prefetchHits);
            QCOMPARE(w.stats.misses, base.stats.misses);
            QCOMPARE(w.stats.evictions, base.stats.evictions);
            QCOMPARE(w.stats.diskReads, base.stats.diskReads);
            QCOMPARE(w.stats.bytesRead, base.stats.bytesRead);
            QCOMPARE(w.stats.failedReads, std::uint64_t(0));
        }
        // 24 slots hold every expert: after the first reads, everything is a TRUE hit.
        if (capacity == 24) QCOMPARE(base.stats.diskReads, std::uint64_t(kExperts));
    }
}

// An injected EIO on one expert while the rest of its batch is in flight: that expert is
// dropped (its retry on request fails too), the others arrive intact, and no read is
// left behind (no INFLIGHT slot, no pin, the cache still serves).
void TestExpertCache::readFaultWithSeveralInFlightLeavesNoReadBehind() {
    const k3::Checkpoint ckpt = k3::Checkpoint::open(kFixture);
    auto store = std::make_shared<k3::CheckpointExpertStore>(ckpt, fixtureConfig(), 1, false);
    for (k3::ExpertIo io : availableReaders(store)) {
        for (k3::IoFault fault : {k3::IoFault::Eio, k3::IoFault::ShortRead}) {
            k3::CacheOptions o;
            o.slotCount = 12;
            o.readThreads = 8;
            o.io = io;
            k3::ExpertCache cache(store, o);
            const std::vector<int> batch{2, 5, 9, 11, 14, 17, 20, 23};
            {
                const k3::ScopedFault f({.kind = k3::IoKind::Expert, .error = fault, .expert = 14});
                cache.prefetch(0, batch);
                for (int e : batch) {
                    k3::ExpertCache::Handle h = cache.acquire(0, e);
                    if (e == 14) {
                        QVERIFY(!h.data); // dropped, never faked
                    } else {
                        QVERIFY(h.data);
                        QVERIFY(std::memcmp(h.data, expected(ckpt, e).data(), kExpertBytes) == 0);
                    }
                    cache.release(h);
                }
                cache.releaseBatch();
                QCOMPARE(k3::faultsInjected(), std::uint64_t(2)); // the batch read, the retry
            }
            const k3::CacheStats s = cache.stats();
            QCOMPARE(s.failedReads, std::uint64_t(2));
            QCOMPARE(s.diskReads, std::uint64_t(9));
            QCOMPARE(s.bytesRead, std::uint64_t(7 * kExpertBytes));
            for (int slot = 0; slot < cache.slotCount(); ++slot) {
                QVERIFY(cache.slotKey(slot) != k3::ExpertCache::kInflight);
                QCOMPARE(cache.pins(slot), 0);
            }
            // A batch abandoned with reads in flight (as when a layer throws): releaseBatch
            // waits for them, and the cache destructs with nothing in flight.
            const std::vector<int> next{0, 1, 3, 4};
            cache.prefetch(0, next);
            cache.releaseBatch();
            k3::ExpertCache::Handle h = cache.acquire(0, 14); // the fault is gone: it reads
            QVERIFY(h.data);
            QVERIFY(std::memcmp(h.data, expected(ckpt, 14).data(), kExpertBytes) == 0);
            cache.release(h);
        }
    }
}

void TestExpertCache::expertIoSwitchChoosesTheReader() {
    const k3::Checkpoint ckpt = k3::Checkpoint::open(kFixture);
    auto store = std::make_shared<k3::CheckpointExpertStore>(ckpt, fixtureConfig(), 1, false);
    k3::CacheOptions o;
    qputenv("K3_EXPERT_IO", "threads");
    {
        k3::ExpertCache cache(store, o);
        QCOMPARE(cache.ioInfo().mode, std::string("threads"));
        QCOMPARE(cache.ioInfo().depth, 16);
        QCOMPARE(cache.ioInfo().note, std::string("K3_EXPERT_IO=threads"));
    }
    qputenv("K3_EXPERT_IO", "aio");
    bool refused = false;
    try {
        k3::ExpertCache cache(store, o);
    } catch (const k3::CacheError& e) {
        refused = std::string(e.what()).find("K3_EXPERT_IO=\"aio\"") != std::string::npos;
    }
    QVERIFY(refused);
    qunsetenv("K3_EXPERT_IO");
    k3::ExpertCache cache(store, o); // unset: io_uring where the kernel allows it
    const bool uring = availableReaders(store).size() == 3;
    QCOMPARE(cache.ioInfo().mode, std::string(uring ? "uring" : "threads"));
}

QTEST_GUILESS_MAIN(TestExpertCache)
#include "tst_expert_cache.moc"
