// The synthetic full-width checkpoint (tests/bench/SynthCheckpoint.*): 2 layers x 4
// experts at the REAL widths (hidden 7168, vocab 163840, 96 KDA heads, the MLA latent,
// 17,547,264-byte experts). The engine's reader indexes it and its config validation
// accepts it, the packer packs it, and one token decodes through the streamer with
// layer 0 (2.34 GB) larger than the ring share (two pieces), embeddings and lm_head
// streamed from disk (ultra) and a two-slot expert cache.
#include <QElapsedTimer>
#include <QTemporaryDir>
#include <QTest>

#include <SynthCheckpoint.hpp>

#include <k3/config.hpp>
#include <k3/draft.hpp>
#include <k3/model.hpp>
#include <k3/pack.hpp>
#include <k3/safetensors.hpp>
#include <k3/session.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

class TestSynthCheckpoint : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void writesIndexesPacksAndDecodes();
    void compressedTrunkGivesTheSameBits();
    void speculationGivesSerialIds();
    void changedShardsAreCheckedByTheirTrunkTensorsOnly();

private:
    // One checkpoint (its layers fresh N(0, 0.02) BF16 draws, so the codec's ratio means
    // something) and its raw trunk, shared by every test: ~11 GB written once, not three times.
    QTemporaryDir m_tmp{QStringLiteral(K3_BINARY_DIR "/synth-XXXXXX")};
    k3synth::SynthOptions m_options;
    k3synth::SynthResult m_written;
    std::filesystem::path m_dir;
    std::filesystem::path m_trunk;
    k3::PackResult m_packed;
};

void TestSynthCheckpoint::initTestCase() {
    QVERIFY(m_tmp.isValid());
    m_options.layers = 2;
    m_options.experts = 4;
    m_options.gaussianTrunk = true;
    const std::uint64_t bytes = k3synth::synthCheckpointBytes(m_options);
    // The checkpoint, its raw trunk, then a compressed trunk or a draft (each smaller).
    const auto space = std::filesystem::space(m_tmp.path().toStdString());
    if (space.available < 3 * bytes + (4ull << 30))
        QSKIP(qPrintable(QStringLiteral("needs %1 GB free next to the build, has %2 GB")
                             .arg(double(3 * bytes + (4ull << 30)) / 1e9)
                             .arg(double(space.available) / 1e9)));
    QElapsedTimer clock;
    clock.start();
    m_dir = m_tmp.filePath(QStringLiteral("model")).toStdString();
    m_written = k3synth::writeSynthCheckpoint(m_dir, m_options);
    m_trunk = m_tmp.filePath(QStringLiteral("trunk")).toStdString();
    m_packed = k3::packTrunk(m_dir, m_trunk);
    qInfo("written and packed in %.1f s", clock.elapsed() / 1e3);
}

void TestSynthCheckpoint::writesIndexesPacksAndDecodes() {
    const std::filesystem::path& dir = m_dir;
    const k3synth::SynthResult& w = m_written;
    const std::uint64_t bytes = k3synth::synthCheckpointBytes(m_options);
    QCOMPARE(w.bytes, bytes);
    QCOMPARE(w.shards, 4); // embeddings, layer 0, layer 1, the head

    // The reader and the config validation: the released shape, the real widths.
    const k3::ModelConfig c = k3::readModelConfig(dir / "config.json");
    QCOMPARE(c.shape, k3::ConfigShape::Nested);
    QCOMPARE(c.hiddenSize, 7168);
    QCOMPARE(c.vocabSize, 163840);
    QCOMPARE(c.numHiddenLayers, 2);
    QCOMPARE(c.numExperts, 4);
    QCOMPARE(c.kdaNumHeads, 96);
    QVERIFY(c.layers[0].attention == k3::AttentionKind::Kda);
    QVERIFY(c.layers[0].mlp == k3::MlpKind::Dense);
    QVERIFY(c.layers[1].attention == k3::AttentionKind::Mla);
    QVERIFY(c.layers[1].mlp == k3::MlpKind::Moe);
    const k3::Checkpoint ckpt = k3::Checkpoint::open(dir);
    QCOMPARE(int(ckpt.tensorCount()), w.tensors);
    QCOMPARE(ckpt.totalTensorBytes(), bytes);
    std::uint64_t expert = 0;
    for (const char* m : {"w1", "w2", "w3"})
        for (const char* part : {".weight_packed", ".weight_scale"})
            expert +=
                ckpt.at(std::string("language_model.model.layers.1.block_sparse_moe.experts.3.") +
                        m + part)
                    .nbytes;
    QCOMPARE(expert, std::uint64_t(17'547'264)); // one released expert

    // Packed: layer 0 (KDA + the dense MLP) is the seed's 2.341 GB largest layer run.
    const std::filesystem::path& trunk = m_trunk;
    const k3::PackResult& pr = m_packed;
    QCOMPARE(pr.layers, 2);
    QCOMPARE(pr.largestLayerBytes, std::uint64_t(2'340'893'440));

    // One decode step: a 1.6 GB trunk budget (below layer 0), tables on disk, 2 slots.
    k3::LaunchConfig o;
    o.modelDir = dir;
    o.trunkDir = trunk;
    o.budget.trunkBytes = 1'600'000'000;
    o.budget.modelTablesOnDisk = true;
    k3::LaunchDiagnostics d;
    d.expertCacheSlots = 2;
    d.enforceMemoryPlan = false;
    const k3::Model model = k3::Model::load(o, d);
    const k3::MemoryPlan& plan = model.memoryPlan();
    QVERIFY(plan.piecewise);
    QCOMPARE(plan.pinnedLayers, 0);
    QCOMPARE(plan.ringSlots, 1);
    QVERIFY(plan.trunkBytes() <= *o.budget.trunkBytes);
    QVERIFY(plan.modelTablesStreamed);
    QVERIFY2(plan.modelBytes < (200ull << 20), plan.format().c_str()); // not 4.7 GB of tables
    std::vector<float> logits(std::size_t(c.vocabSize));
    k3::InferenceState st = model.newState();
    const k3::TokenStats ts = model.forward(st, 163584, logits);
    QCOMPARE(ts.droppedExperts, 0);
    QVERIFY(!ts.nonFinite);
    const int next = k3::argmax(logits);
    QVERIFY(next >= 0 && next < c.vocabSize);
    const k3::MemoryStats ms = model.memoryStats();
    QCOMPARE(ms.trunk.piecewiseLayers, 1); // layer 0 only: layer 1 (0.84 GB) fits whole
    QCOMPARE(ms.trunk.pieceReads, std::uint64_t(2));
    QCOMPARE(ms.trunk.reads, std::uint64_t(1));
    QCOMPARE(ms.cache.requests, std::uint64_t(4)); // top-k = all 4 experts of layer 1
    QCOMPARE(ms.tableBytesRead, std::uint64_t(7168) * 2 * (1 + 163840));
}

// The layers as fresh N(0, 0.02) BF16 draws, packed raw and with --compress: the coded
// layers take ~0.717 of the bytes and every budget gives the raw trunk's logits, bit for bit.
void TestSynthCheckpoint::compressedTrunkGivesTheSameBits() {
    const std::filesystem::path& dir = m_dir;
    const std::string raw = m_trunk.string();
    const std::string coded = m_tmp.filePath(QStringLiteral("coded")).toStdString();
    k3::PackOptions po;
    po.compress = true;
    const k3::PackResult pr = k3::packTrunk(dir, coded, {}, nullptr, po);
    const double ratio = double(pr.layerStoredBytes) / double(pr.layerBytes);
    QVERIFY2(ratio > 0.71 && ratio < 0.725, qPrintable(QString::number(ratio, 'f', 4)));
    const k3::TrunkIndex idx = k3::openTrunkIndex(coded, dir);
    QVERIFY(idx.layers[0].compressed() && idx.layers[1].compressed());

    // Pieces through one slot, all pinned, the smallest ring (tables on disk throughout).
    for (const std::uint64_t budget : {1'600'000'000ull, 3'300'000'000ull, 0ull}) {
        std::vector<float> logits[2];
        std::uint64_t read[2] = {0, 0};
        for (int c = 0; c < 2; ++c) {
            k3::LaunchConfig o;
            o.modelDir = dir;
            o.trunkDir = c ? coded : raw;
            o.budget.trunkBytes = budget;
            o.budget.modelTablesOnDisk = true;
            k3::LaunchDiagnostics d;
            d.expertCacheSlots = 2;
            d.enforceMemoryPlan = false;
            const k3::Model model = k3::Model::load(o, d);
            logits[c].resize(std::size_t(model.config().vocabSize));
            k3::InferenceState st = model.newState();
            model.forward(st, 163584, logits[c]);
            model.forward(st, 7, logits[c]);
            read[c] = model.memoryStats().trunk.bytesRead;
        }
        QVERIFY2(std::memcmp(logits[0].data(), logits[1].data(), logits[0].size() * 4) == 0,
                 qPrintable(QStringLiteral("budget %1: logits differ").arg(budget)));
        QVERIFY2(
            read[1] < read[0] * 0.73,
            qPrintable(
                QStringLiteral("budget %1: %2 vs %3 bytes").arg(budget).arg(read[1]).arg(read[0])));
    }
    std::filesystem::remove_all(coded); // room for the draft
}

// Greedy speculation at the real widths (a KDA layer then an MLA + MoE layer, so a
// rejected draft proposal rolls back both kinds of state): prompt lookup (width 4) and the
// draft trunk (k3 pack --draft; adaptive width) give serial decode's ids and last logits
// at two budgets (all pinned; layer 0 in two pieces through one slot), tables on disk,
// a 2-slot expert cache.
void TestSynthCheckpoint::speculationGivesSerialIds() {
    const std::filesystem::path& dir = m_dir;
    const std::string trunk = m_trunk.string();
    QElapsedTimer clock;
    clock.start();
    const std::string draft = m_tmp.filePath(QStringLiteral("draft")).toStdString();
    const k3::DraftPackResult dr = k3::packDraft(dir, draft);
    QVERIFY(dr.quantised > 0);
    qInfo("drafted in %.1f s", clock.restart() / 1e3);

    const auto open = [&](std::uint64_t trunkBytes, const std::string& draftDir) {
        k3::LaunchConfig o;
        o.modelDir = dir;
        o.trunkDir = trunk;
        o.budget.trunkBytes = trunkBytes;
        o.budget.modelTablesOnDisk = true;
        o.maxSpeculation = 8;
        o.draftDir = draftDir;
        k3::LaunchDiagnostics d;
        d.loadTokenizer = false;
        d.expertCacheSlots = 2;
        d.enforceMemoryPlan = false;
        return k3::Session::open(o, d);
    };
    const std::vector<k3::TokenId> prompt = {163584, 11, 12, 13, 14, 11, 12, 13, 14, 11, 12};
    k3::GenerateOptions g;
    g.maxTokens = 4;
    k3::Session serialSession = open(3'300'000'000ull, {});
    const k3::GenerateResult serial = serialSession.generateIds(prompt, g);
    QCOMPARE(int(serial.ids.size()), 4);
    QCOMPARE(serial.droppedExperts, 0);
    qInfo("serial decode in %.1f s", clock.restart() / 1e3);
    for (const std::uint64_t budget : {3'300'000'000ull, 1'600'000'000ull})
        for (const bool useDraft : {false, true}) {
            k3::Session s = open(budget, useDraft ? draft : std::string());
            QCOMPARE(s.memoryReport().plan.piecewise, budget < 2'000'000'000ull);
            g.speculation = useDraft ? -1 : 4;
            const k3::GenerateResult r = s.generateIds(prompt, g);
            const QString what = QStringLiteral("budget %1, %2")
                                     .arg(budget)
                                     .arg(QLatin1String(useDraft ? "draft" : "prompt lookup"));
            QVERIFY2(r.ids == serial.ids, qPrintable(what));
            // The draft always proposes; random weights never repeat the prompt, so prompt
            // lookup has nothing to propose here (its rejections are tst_speculation's).
            if (useDraft) QVERIFY2(r.proposed > 0, qPrintable(what));
            QCOMPARE(r.droppedExperts, 0);
            QCOMPARE(std::memcmp(s.lastLogits().data(), serialSession.lastLogits().data(),
                                 s.lastLogits().size() * sizeof(float)),
                     0);
            qInfo("%s: %d proposed, %d accepted, %d passes, %.1f s", qPrintable(what), r.proposed,
                  r.acceptedProposals, r.decodePasses, clock.restart() / 1e3);
        }
}

namespace {

std::uint64_t residentBytes() {
    std::ifstream statm("/proc/self/statm");
    std::uint64_t pages = 0, resident = 0;
    statm >> pages >> resident;
    return resident * std::uint64_t(::sysconf(_SC_PAGESIZE));
}

} // namespace

// Every shard touched (new mtime and ctime, as a download or a copy gives): opening the
// trunk reads the trunk tensors from the shards again, only those (not the experts), in
// bounded memory, and they match. The time is the figure docs/security.md quotes.
void TestSynthCheckpoint::changedShardsAreCheckedByTheirTrunkTensorsOnly() {
    const k3::Checkpoint ckpt = k3::Checkpoint::open(m_dir);
    for (const std::filesystem::path& shard : ckpt.shardPaths())
        QCOMPARE(::utimensat(AT_FDCWD, shard.c_str(), nullptr, 0), 0);
    const std::uint64_t before = residentBytes();
    std::uint64_t peak = before, read = 0, total = 0;
    QElapsedTimer clock;
    clock.start();
    const k3::TrunkIndex idx =
        k3::openTrunkIndex(m_trunk, m_dir, [&](const k3::TrunkCheckProgress& p) {
            read = p.bytesDone;
            total = p.bytesTotal;
            peak = std::max(peak, residentBytes());
        });
    const double seconds = double(clock.elapsed()) / 1e3;
    std::uint64_t trunkBytes = 0;
    for (const auto& r : idx.layers) trunkBytes += r.bytes;
    for (const auto& r : idx.modelRecords) trunkBytes += r.bytes;
    QCOMPARE(total, trunkBytes);
    QCOMPARE(read, trunkBytes);
    QVERIFY(trunkBytes < ckpt.totalTensorBytes());
    QVERIFY2(peak - before < (64ull << 20), qPrintable(QString::number(peak - before)));
    qInfo("checked %.2f GB of trunk tensors (of a %.2f GB checkpoint) in %.1f s: %.2f GB/s, "
          "resident memory +%.1f MB",
          double(trunkBytes) / 1e9, double(ckpt.totalTensorBytes()) / 1e9, seconds,
          double(trunkBytes) / 1e9 / seconds, double(peak - before) / 1e6);
}

QTEST_GUILESS_MAIN(TestSynthCheckpoint)
#include "tst_synth_checkpoint.moc"
