// The index at the released size: 497,220 names over 96 shards, opened and looked up.
#include "SyntheticIndex.hpp"
#include "k3/safetensors.hpp"

#include <QElapsedTimer>
#include <QTemporaryDir>
#include <QtTest>

class TestCheckpointIndex : public QObject {
    Q_OBJECT

private slots:
    void fullSizeIndex() {
        QTemporaryDir dir;
        QVERIFY(dir.isValid());
        const auto names = k3::test::writeSyntheticCheckpoint(dir.path().toStdString());
        QCOMPARE(names.size(), k3::test::kReleasedTensorCount);

        QElapsedTimer timer;
        timer.start();
        const k3::Checkpoint ckpt = k3::Checkpoint::open(dir.path().toStdString());
        qInfo("opened %zu tensors from %zu shards in %lld ms", ckpt.tensorCount(),
              ckpt.shardPaths().size(), static_cast<long long>(timer.elapsed()));
        QCOMPARE(ckpt.tensorCount(), std::size_t{497'220});
        QCOMPARE(ckpt.shardPaths().size(), std::size_t{96});
        QCOMPARE(ckpt.shardPaths()[95].filename().string(),
                 std::string("model-00096-of-00096.safetensors"));

        // A few lookups against what the generator placed: shard, offset, size, shape.
        for (std::size_t i : {std::size_t{0}, std::size_t{1}, std::size_t{5180}, std::size_t{5181},
                              std::size_t{250'000}, names.size() - 1}) {
            const k3::TensorInfo* t = ckpt.find(names[i]);
            QVERIFY2(t, names[i].c_str());
            const int shard = k3::test::syntheticShardOf(i, names.size());
            QCOMPARE(int(t->shard), shard);
            std::size_t firstInShard = i;
            while (firstInShard > 0 &&
                   k3::test::syntheticShardOf(firstInShard - 1, names.size()) == shard)
                --firstInShard;
            const k3::ShardHeader h = k3::readShardHeader(ckpt.shardPaths()[t->shard]);
            QCOMPARE(t->offset, h.dataStart + (i - firstInShard) * k3::test::kSyntheticTensorBytes);
            QCOMPARE(t->nbytes, std::uint64_t{6});
            QCOMPARE(t->dtype, k3::DType::U8);
            QCOMPARE(std::vector<std::uint64_t>(t->dims().begin(), t->dims().end()),
                     (std::vector<std::uint64_t>{2, 3}));
        }
        const std::string last =
            "language_model.model.layers.92.block_sparse_moe.experts.895.w2.weight_scale";
        QVERIFY(ckpt.find(last) != nullptr);
        QCOMPARE(int(ckpt.at(last).shard), 95);
        QCOMPARE(int(ckpt.at("language_model.model.embed_tokens.weight").shard), 0);
        QVERIFY(
            ckpt.find(
                "language_model.model.layers.92.block_sparse_moe.experts.896.w2.weight_scale") ==
            nullptr);
        QVERIFY(ckpt.find(
                    "language_model.model.layers.0.block_sparse_moe.experts.0.w1.weight_packed") ==
                nullptr); // layer 0 is dense
        QCOMPARE(ckpt.readRaw(last).size(), std::size_t{6});
        QCOMPARE(std::to_integer<int>(ckpt.readRaw(last)[5]), 0x5a);
    }
};

QTEST_GUILESS_MAIN(TestCheckpointIndex)
#include "tst_checkpointindex.moc"
