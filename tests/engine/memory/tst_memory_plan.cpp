// The memory plan: the pinned-prefix fixed point and the refusals (numbers, options, the
// KV cache called a memory limit). The flag resolver is tst_launch's.
#include <QTest>

#include <k3/config.hpp>
#include <k3/memory_plan.hpp>
#include <k3/pack.hpp>
#include <k3/presets.hpp>

class TestMemoryPlan : public QObject {
    Q_OBJECT
private slots:
    void fixedPointShrinksTheSlot();
    void everythingPinnedNeedsNoRing();
    void ringOfOneWhenTwoDoNotFit();
    void refusesBelowOneSlot();
    void piecesWhenALayerExceedsTheShare();
    void everyPresetPlansTheRealShapes();
    void refusalHasNumbersAndOptions();
    void kvRefusalIsAMemoryLimit();
    void autoPutsTrunkFirst();
    void pinnedCompressedPinsMore();
    void pinnedCompressedPaysByMeasurement();
    void prefillChunkAtTheRealWidths();
};

static const std::uint64_t MB = 1'000'000;

void TestMemoryPlan::fixedPointShrinksTheSlot() {
    // The big layer 0 sizes the slot only while it is unpinned: pinning it lets the
    // slot shrink to 8 MB, which frees room for more pinned layers.
    const std::vector<std::uint64_t> layers{100 * MB, 8 * MB, 8 * MB, 8 * MB, 8 * MB, 8 * MB};
    k3::MemoryPlan p;
    k3::planTrunk(p, layers, 140 * MB);
    QCOMPARE(p.ringSlots, 2);
    QCOMPARE(p.ringSlotBytes, k3::alignUp(8 * MB));
    // 140 MB - 2 x 8.004 MB ring = 123.99 MB: layer 0 (100.004) + two 8.004 MB layers.
    QCOMPARE(p.pinnedLayers, 3);
    QCOMPARE(p.pinnedBytes, k3::alignUp(100 * MB) + 2 * k3::alignUp(8 * MB));
    QVERIFY(p.trunkBytes() <= 140 * MB); // the plan stays within the budget asked for
}

void TestMemoryPlan::everythingPinnedNeedsNoRing() {
    const std::vector<std::uint64_t> layers{5000, 7000, 3000};
    k3::MemoryPlan p;
    k3::planTrunk(p, layers, 3 * 8192);
    QCOMPARE(p.pinnedLayers, 3);
    QCOMPARE(p.ringSlots, 0);
    QCOMPARE(p.pinnedBytes, std::uint64_t(8192 + 8192 + 4096));
}

void TestMemoryPlan::ringOfOneWhenTwoDoNotFit() {
    const std::vector<std::uint64_t> layers{10 * MB, 10 * MB};
    k3::MemoryPlan p;
    k3::planTrunk(p, layers, 15 * MB);
    QCOMPARE(p.pinnedLayers, 0);
    QCOMPARE(p.ringSlots, 1);
    QCOMPARE(p.ringSlotBytes, k3::alignUp(10 * MB));
}

void TestMemoryPlan::refusesBelowOneSlot() {
    const std::vector<std::uint64_t> layers{10 * MB, 20 * MB};
    k3::MemoryPlan p;
    try {
        k3::planTrunk(p, layers, 5 * MB);
        QFAIL("a budget below one layer was accepted");
    } catch (const k3::MemoryRefusal& e) {
        const std::string m = e.what();
        QVERIFY2(m.find("5.00 MB") != std::string::npos, e.what());
        QVERIFY2(m.find("20.00 MB") != std::string::npos, e.what());
        QCOMPARE(e.kind(), k3::ErrorKind::Memory);
        QCOMPARE(e.reason(), k3::MemoryRefusal::Reason::TrunkTooSmall);
        QCOMPARE(e.minTrunkBytes(), (20 * MB + 4095) / 4096 * 4096); // one aligned slot
        // The engine says what is wrong; each front end adds its own flag or setting.
        QVERIFY2(m.find("--") == std::string::npos, e.what());
    }
}

void TestMemoryPlan::piecesWhenALayerExceedsTheShare() {
    // Layer 1 (50 MB) exceeds any slot a 45 MB budget allows; its larger piece is 20 MB.
    // Order: two whole slots, two slots with pieces, one whole slot, one slot with pieces.
    const std::vector<std::uint64_t> layers{10 * MB, 50 * MB, 10 * MB};
    const std::vector<std::uint64_t> pieces{6 * MB, 20 * MB, 6 * MB};
    k3::MemoryPlan p;
    k3::planTrunk(p, layers, 45 * MB, pieces);
    QVERIFY(p.piecewise);
    QCOMPARE(p.pinnedLayers, 0); // pinning layer 0 would leave 17.5 MB slots
    QCOMPARE(p.ringSlots, 2);
    QCOMPARE(p.ringSlotBytes, 45 * MB / 2 / 4096 * 4096);
    QVERIFY(p.trunkBytes() <= 45 * MB); // within the budget, never overshooting it
    k3::planTrunk(p, layers, 24 * MB, pieces);
    QVERIFY(p.piecewise);
    QCOMPARE(p.ringSlots, 1); // two 20 MB slots do not fit in 24 MB
    QCOMPARE(p.ringSlotBytes, 24 * MB / 4096 * 4096);
    QVERIFY(p.trunkBytes() <= 24 * MB);
    // Below the largest piece: refused with the piece's size.
    try {
        k3::planTrunk(p, layers, 17 * MB, pieces);
        QFAIL("a budget below the largest piece was accepted");
    } catch (const k3::MemoryRefusal& e) {
        QVERIFY2(std::string(e.what()).find("largest piece") != std::string::npos, e.what());
        QVERIFY2(std::string(e.what()).find("20.00 MB") != std::string::npos, e.what());
        QCOMPARE(e.reason(), k3::MemoryRefusal::Reason::TrunkTooSmall);
        QCOMPARE(e.minTrunkBytes(), (20 * MB + 4095) / 4096 * 4096); // one aligned slot
    }
    // 51 MB holds the big layer whole in ONE slot, but two 25.5 MB slots overlap every
    // read with compute, the big layer's in two pieces: overlap wins.
    k3::planTrunk(p, layers, 51 * MB, pieces);
    QVERIFY(p.piecewise);
    QCOMPARE(p.ringSlots, 2);
    // Without pieces to fall back on, the same budget is one whole slot (no overlap).
    k3::planTrunk(p, layers, 51 * MB);
    QVERIFY(!p.piecewise);
    QCOMPARE(p.ringSlots, 1);
    QCOMPARE(p.ringSlotBytes, k3::alignUp(50 * MB));
    // Pinning the big layer leaves two whole 10 MB slots: no pieces.
    const std::vector<std::uint64_t> five{10 * MB, 50 * MB, 10 * MB, 10 * MB, 10 * MB};
    const std::vector<std::uint64_t> fivePieces{6 * MB, 20 * MB, 6 * MB, 6 * MB, 6 * MB};
    k3::planTrunk(p, five, 85 * MB, fivePieces); // 60 pinned + 2 x 10 of ring
    QVERIFY(!p.piecewise);
    QCOMPARE(p.pinnedLayers, 2);
    QCOMPARE(p.ringSlots, 2);
    QCOMPARE(p.ringSlotBytes, k3::alignUp(10 * MB));
}

// The released checkpoint's trunk, layer by layer, from reference/README.md: hidden
// 7168, KDA 96 x 128, MLA (q 1536, kv 512, nope 128, rope 64, v 128), layer 0 dense
// (33792), MoE router over 896 experts, latent 3584, two shared experts of 3072.
static void realTrunk(std::vector<std::uint64_t>& layers, std::vector<std::uint64_t>& pieces) {
    const std::uint64_t E = 7168, P = 96 * 128, D = 128, H = 96, bf = 2;
    const std::uint64_t norms = 6 * E * bf;
    const std::uint64_t kda =
        (4 * P * E + E * P + D * E + P * D + H * E + 3 * P * 4 + P + D) * bf + 128 * 4;
    const std::uint64_t mla = (1536 * E + 1536 + H * 192 * 1536 + 576 * E + 512 + H * 256 * 512 +
                               H * 128 * E + E * H * 128) *
                              bf;
    const std::uint64_t dense = 3 * 33792 * E * bf;
    const std::uint64_t moe = (896 * E + 2 * 3584 * E + 3584 + 3 * 6144 * E) * bf + 896 * 4;
    for (int L = 0; L < 93; ++L) {
        const bool mlaLayer = (L + 1) % 4 == 0 || L == 92; // full_attn_layers 4,8,...,92,93
        const std::uint64_t attn = norms + (mlaLayer ? mla : kda);
        const std::uint64_t mlp = L == 0 ? dense : moe;
        layers.push_back(attn + mlp);
        pieces.push_back(k3::alignUp(std::max(attn, mlp)) + 8 * 4096); // window slack
    }
}

void TestMemoryPlan::everyPresetPlansTheRealShapes() {
    std::vector<std::uint64_t> layers, pieces;
    realTrunk(layers, pieces);
    QCOMPARE(layers[0], std::uint64_t(2'340'893'440)); // the seed: "largest layer run: 2.341 GB"
    for (const k3::Preset& preset : k3::presets()) {
        k3::MemoryPlan p;
        const auto budget = std::uint64_t(preset.trunkGB * 1e9);
        k3::planTrunk(p, layers, budget, pieces);
        QVERIFY2(p.trunkBytes() <= budget, preset.name.data());
        QVERIFY2(p.pinnedLayers < 93 || p.ringSlots == 0, preset.name.data());
    }
    // laptop (3 GB): two 1.5 GB slots, layer 0 (2.34 GB) in two pieces (the dense MLP,
    // 1.45 GB, is its larger piece), every other layer whole and overlapped.
    k3::MemoryPlan l;
    k3::planTrunk(l, layers, 3'000'000'000ull, pieces);
    QCOMPARE(l.ringSlots, 2);
    QVERIFY(l.piecewise);
    QCOMPARE(l.pinnedLayers, 0);
    // ultra (2.5 GB) holds the 2.34 GB layer 0 whole in a ring of one.
    k3::MemoryPlan u;
    k3::planTrunk(u, layers, 2'500'000'000ull, pieces);
    QCOMPARE(u.ringSlots, 1);
    QVERIFY(!u.piecewise);
    // 1.6 GB: below the largest layer, so layer 0 (and every layer over 1.6 GB) arrives in
    // two pieces through a ring of one 1.6 GB slot; the dense MLP (1.45 GB) is the largest
    // piece, so 1.4 GB is refused.
    k3::MemoryPlan small;
    k3::planTrunk(small, layers, 1'600'000'000ull, pieces);
    QVERIFY(small.piecewise);
    QCOMPARE(small.ringSlots, 1);
    QVERIFY(small.trunkBytes() <= 1'600'000'000ull);
    QVERIFY_THROWS_EXCEPTION(k3::MemoryRefusal,
                             k3::planTrunk(small, layers, 1'400'000'000ull, pieces));
}

static k3::PlanInputs inputs() {
    k3::PlanInputs in;
    in.layerBytes.assign(10, 100 * MB);
    in.modelBytes = 50 * MB;
    in.expertSlotBytes = 4 * MB;
    in.expertCount = 1000;
    in.topK = 4;
    in.stateBytes = 10 * MB;
    in.kvBytesPerPosition = 1 * MB;
    in.contextLength = 0;
    in.bufferBytes = 1 * MB;
    return in;
}

void TestMemoryPlan::refusalHasNumbersAndOptions() {
    k3::MemoryBudget b;
    b.trunkBytes = 1000 * MB;
    b.cacheBytes = 40 * MB;
    const k3::MemoryPlan p = k3::planMemory(inputs(), b, 500 * MB);
    QCOMPARE(p.pinnedLayers, 7); // 1000 - 2 x 100.0 ring = 799.9 MB: 7 layers
    QCOMPARE(p.cacheSlots, 10);
    QCOMPARE(p.total(), p.trunkBytes() + 50 * MB + 40 * MB + 10 * MB + 1 * MB);
    try {
        k3::enforceMemoryPlan(p);
        QFAIL("over-budget plan accepted");
    } catch (const k3::MemoryRefusal& e) {
        const std::string m = e.what();
        QVERIFY2(m.find("REFUSING TO START") != std::string::npos, e.what());
        QVERIFY2(m.find("500.00 MB") != std::string::npos, e.what());
        QCOMPARE(e.reason(), k3::MemoryRefusal::Reason::OverAvailable);
        QVERIFY2(m.find("--") == std::string::npos, e.what());
        QVERIFY2(m.find("not an engine ceiling") == std::string::npos, e.what());
    }
    // Within 95%: accepted.
    const k3::MemoryPlan ok = k3::planMemory(inputs(), b, p.total() * 100 / 94);
    k3::enforceMemoryPlan(ok);
}

void TestMemoryPlan::kvRefusalIsAMemoryLimit() {
    k3::PlanInputs in = inputs();
    in.contextLength = 2000; // 2 GB of KV cache
    k3::MemoryBudget b;
    b.trunkBytes = 300 * MB;
    b.cacheBytes = 16 * MB;
    const k3::MemoryPlan p = k3::planMemory(in, b, 1500 * MB);
    QCOMPARE(p.kvBytes, 2000 * MB);
    try {
        k3::enforceMemoryPlan(p);
        QFAIL("KV cache over budget accepted");
    } catch (const k3::MemoryRefusal& e) {
        const std::string m = e.what();
        QVERIFY2(m.find("memory limit of this machine, not an engine ceiling") != std::string::npos,
                 e.what());
        QVERIFY2(m.find("2000 positions") != std::string::npos, e.what());
        // 95% of 1500 = 1425 MB; the rest: a 2 x 100.004 MB ring + 50 + 16 + 10 + 1 MB.
        QVERIFY2(m.find("about 1147 positions fit") != std::string::npos, e.what());
        QCOMPARE(e.reason(), k3::MemoryRefusal::Reason::ContextTooBig);
        QCOMPARE(e.fitPositions(), std::uint64_t(1147));
    }
}

void TestMemoryPlan::autoPutsTrunkFirst() {
    k3::MemoryBudget b;
    b.automatic = true;
    // 0.9 x 1000 = 900 MB spendable, minus 61 MB fixed = 839 MB; trunk first.
    const k3::MemoryPlan p = k3::planMemory(inputs(), b, 1000 * MB);
    QVERIFY(p.pinnedLayers >= 5);
    QVERIFY(p.cacheSlots >= 4);
    QVERIFY(p.total() <= 900 * MB);
    // With room for everything, everything is pinned.
    const k3::MemoryPlan big = k3::planMemory(inputs(), b, 100'000 * MB);
    QCOMPARE(big.pinnedLayers, 10);
    QCOMPARE(big.ringSlots, 0);
    QCOMPARE(big.cacheSlots, 1000);
}

void TestMemoryPlan::pinnedCompressedPinsMore() {
    // Twenty 8 MB layers stored in 6 MB: at 110 MB raw pins 11 (+ a ring of 2 x 8 MB);
    // kept compressed, 14 pinned layers cost 14 x 6 MB plus one 8 MB decode slot, and the
    // ring.
    const std::vector<std::uint64_t> layers(20, 8 * MB), stored(20, 6 * MB);
    k3::MemoryPlan raw, coded;
    k3::planTrunk(raw, layers, 110 * MB);
    k3::planTrunk(coded, layers, 110 * MB, {}, stored);
    QCOMPARE(raw.pinnedLayers, 11);
    QCOMPARE(raw.pinnedCompressedLayers, 0);
    QCOMPARE(coded.pinnedLayers, 14);
    QCOMPARE(coded.pinnedCompressedLayers, 14);
    QVERIFY(coded.pinCompressed);
    QCOMPARE(coded.pinnedBytes, 14 * k3::alignUp(6 * MB));
    QCOMPARE(coded.pinDecodeSlotBytes, k3::alignUp(8 * MB));
    QCOMPARE(coded.ringSlots, 2);
    QCOMPARE(coded.ringSlotBytes, k3::alignUp(8 * MB));
    QCOMPARE(coded.trunkBytes(), 14 * k3::alignUp(6 * MB) + 3 * k3::alignUp(8 * MB));
    QVERIFY(coded.trunkBytes() <= 110 * MB);
    // 130 MB holds all twenty compressed and the decode slot: no ring.
    k3::planTrunk(coded, layers, 130 * MB, {}, stored);
    QCOMPARE(coded.pinnedLayers, 20);
    QCOMPARE(coded.ringSlots, 0);
    QCOMPARE(coded.trunkBytes(), 20 * k3::alignUp(6 * MB) + k3::alignUp(8 * MB));
    // A layer stored raw (stored == bytes) is pinned raw and needs no decode slot.
    const std::vector<std::uint64_t> two(2, 8 * MB), mixed{8 * MB, 6 * MB};
    k3::planTrunk(coded, two, 30 * MB, {}, mixed);
    QCOMPARE(coded.pinnedLayers, 2);
    QCOMPARE(coded.pinnedCompressedLayers, 1);
    QCOMPARE(coded.pinnedBytes, k3::alignUp(8 * MB) + k3::alignUp(6 * MB));
    QCOMPARE(coded.pinDecodeSlotBytes, k3::alignUp(8 * MB));
    // The format names the layers kept compressed and the decode slot.
    k3::planTrunk(coded, layers, 110 * MB, {}, stored);
    const std::string f = coded.format();
    QVERIFY2(f.find("14 of the 14 pinned layers kept compressed") != std::string::npos, f.c_str());
}

void TestMemoryPlan::pinnedCompressedPaysByMeasurement() {
    // Decoding 1 GB at 10 GB/s (0.1 s) against reading 0.5 GB at 3 GB/s (0.167 s): pays.
    QVERIFY(k3::pinCompressedPays(1'000'000'000, 500'000'000, 10e9, 3e9));
    // At 5 GB/s the decode (0.2 s) costs more than the reads it saves.
    QVERIFY(!k3::pinCompressedPays(1'000'000'000, 500'000'000, 5e9, 3e9));
    // Nothing pinned raw: the extra pinned layers are free.
    QVERIFY(k3::pinCompressedPays(0, 500'000'000, 5e9, 3e9));
    // Nothing saved, or no measurement: never.
    QVERIFY(!k3::pinCompressedPays(0, 0, 5e9, 3e9));
    QVERIFY(!k3::pinCompressedPays(1'000'000'000, 500'000'000, 0, 3e9));
}

// The prefill plan at the released widths (the real config.json): what a chunk holds per
// position for its whole pass, the fixed tile buffers, and the chunk the laptop preset
// (3 GB trunk, 1 GB cache) gets on a machine where its plan fits with room to spare.
void TestMemoryPlan::prefillChunkAtTheRealWidths() {
    const k3::ModelConfig c =
        k3::readModelConfig(K3_SOURCE_DIR "/tests/fixtures/config/kimi-k3-config.json");
    QCOMPARE(c.numHiddenLayers, 93);
    const std::uint64_t perPosition = k3::chunkBytesPerPosition(c, 93);
    // 8 block snapshots (layers 0, 12, ..., 84) and the running block of 7168 floats;
    // 16 latent rows of 3584 floats (the routed input holds the last expert's output)
    // with their ids, weights, flags and uses; the slot that runs last.
    QCOMPARE(perPosition, std::uint64_t(9 * 7168 * 4 + 16 * (3584 * 4 + 21) + 4));
    QCOMPARE(perPosition, std::uint64_t(487'764));
    QVERIFY(perPosition <= 500'000); // at most 0.5 MB (issue 29; was 2,244,096)
    // 64 tile positions of 4 hidden rows, 10 of the widest product (the dense 33792),
    // the router's 896 logits and 2 latent rows; the union's expert list.
    QCOMPARE(k3::prefillTileBytes(c),
             std::uint64_t(64 * 4 * (4 * 7168 + 10 * 33792 + 896 + 2 * 3584) + 896 * 12));

    k3::PlanInputs in;
    std::vector<std::uint64_t> pieces;
    realTrunk(in.layerBytes, pieces);
    in.layerPieceBytes = pieces;
    in.modelBytes = 2ull * 163840 * 7168 * 2; // embed_tokens and lm_head, BF16
    in.expertSlotBytes = k3::alignUp(17'547'264);
    in.expertCount = 92 * 896;
    in.topK = 16;
    // 69 KDA layers: the live state and the prompt snapshot, a rollback record for 16
    // proposals; 24 MLA layers: latent and rope, twice, per context position.
    const std::uint64_t P = 96 * 128, kdaState = (P * 128 + 3 * P * 3) * 4;
    in.stateBytes = 69 * (3 * kdaState + (6 * P + 96) * 4 * 17);
    in.kvBytesPerPosition = 24 * 2 * (512 + 64) * 4;
    in.contextLength = 4096;
    in.bufferBytes = (163840 + 64 * 7168 + 8 * 33792) * 4 + k3::prefillTileBytes(c);
    in.chunkBytesPerPosition = perPosition;
    k3::MemoryBudget laptop;
    laptop.trunkBytes = 3'000'000'000ull;
    laptop.cacheBytes = 1'000'000'000ull;
    // The cache's 56 slots (982,646,784 bytes) pay for 2014 positions: a 1,024-position
    // prompt is one chunk (at the former 2,244,096 bytes a position it would be 437).
    const k3::MemoryPlan p = k3::planMemory(in, laptop, 13'000'000'000ull);
    QCOMPARE(p.cacheSlots, 56);
    QCOMPARE(p.chunkPositions, 2014);
    QVERIFY(p.chunkPositions >= 1024);
    QCOMPARE(p.bufferBytes, in.bufferBytes + 2014 * perPosition);
    k3::enforceMemoryPlan(p); // 11.95 GB of 95% of 13 GB
    // The plan is the budget's, whatever the machine has free; less free memory shrinks it.
    QCOMPARE(k3::planMemory(in, laptop, 100'000'000'000ull).chunkPositions, 2014);
    QVERIFY(k3::planMemory(in, laptop, 12'000'000'000ull).chunkPositions < 1024);
    // An asked chunk is what was asked; a cache of 10 GB pays for the whole context.
    in.requestedChunk = 16;
    QCOMPARE(k3::planMemory(in, laptop, 13'000'000'000ull).chunkPositions, 16);
    in.requestedChunk = 0;
    laptop.cacheBytes = 10'000'000'000ull;
    QCOMPARE(k3::planMemory(in, laptop, 100'000'000'000ull).chunkPositions, 4096);
}

QTEST_GUILESS_MAIN(TestMemoryPlan)
#include "tst_memory_plan.moc"
