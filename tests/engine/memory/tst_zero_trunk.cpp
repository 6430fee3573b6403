// The sparse synthetic checkpoint and its trunk (tests/bench/SynthCheckpoint.hpp): the
// trunk writeZeroTrunk describes without reading is the one `k3 pack` writes for zero
// weights (same trunk.json, same trunk.bin size, accepted by openTrunkIndex), and the
// full-size model (93 layers x 896 experts, vision) is written as headers over holes in
// seconds and a few MB of disk, with the released size and tensor count give or take
// what the reference does not name.
#include <QElapsedTimer>
#include <QTemporaryDir>
#include <QTest>

#include <SynthCheckpoint.hpp>

#include <k3/config.hpp>
#include <k3/pack.hpp>
#include <k3/safetensors.hpp>

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>

#include <sys/stat.h>

namespace fs = std::filesystem;

class TestZeroTrunk : public QObject {
    Q_OBJECT
private slots:
    void matchesThePackerOnZeroWeights();
    void fullSizeIsHeadersOverHoles();
};

namespace {
nlohmann::json readJson(const fs::path& p) {
    std::ifstream in(p);
    return nlohmann::json::parse(in);
}
std::uint64_t diskBytes(const fs::path& dir) {
    std::uint64_t n = 0;
    for (const auto& e : fs::recursive_directory_iterator(dir)) {
        struct stat st {};
        if (::stat(e.path().c_str(), &st) == 0 && S_ISREG(st.st_mode))
            n += std::uint64_t(st.st_blocks) * 512;
    }
    return n;
}
} // namespace

// k3_tiny_a with every tensor byte set to zero, packed by the engine and described by
// writeZeroTrunk: the two trunk.json documents are equal, index checksum included.
void TestZeroTrunk::matchesThePackerOnZeroWeights() {
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    const fs::path src = K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a";
    const fs::path model = tmp.filePath(QStringLiteral("model")).toStdString();
    fs::create_directories(model);
    for (const auto& e : fs::directory_iterator(src))
        fs::copy_file(e.path(), model / e.path().filename());
    const k3::Checkpoint original = k3::Checkpoint::open(model);
    for (const fs::path& shard : original.shardPaths()) {
        std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
        for (const auto& [name, t] : original.tensors()) {
            if (original.shardPaths()[t.shard] != shard) continue;
            f.seekp(std::streamoff(t.offset));
            const std::string zeros(t.nbytes, '\0');
            f.write(zeros.data(), std::streamsize(zeros.size()));
        }
        QVERIFY(f.good());
    }
    const fs::path packed = tmp.filePath(QStringLiteral("packed")).toStdString();
    const fs::path described = tmp.filePath(QStringLiteral("described")).toStdString();
    const k3::PackResult pack = k3::packTrunk(model, packed);
    QCOMPARE(k3synth::writeZeroTrunk(model, described), pack.fileBytes);
    QCOMPARE(fs::file_size(described / "trunk.bin"), fs::file_size(packed / "trunk.bin"));
    const nlohmann::json a = readJson(packed / "trunk.json"),
                         b = readJson(described / "trunk.json");
    QCOMPARE(QString::fromStdString(b.dump()), QString::fromStdString(a.dump()));
    // The engine opens it with its model (the tensors hashed from the shards).
    const k3::TrunkIndex idx = k3::openTrunkIndex(described, model);
    QCOMPARE(idx.layers.size(),
             std::size_t(k3::readModelConfig(model / "config.json").numHiddenLayers));
}

// The full-size layout (93 layers x 896 experts, vision), counted without writing it (the
// written tree takes ~40 s and ~130 MB of headers and index: docs/make-screenshots.sh only):
// 1,560,838,262,528 bytes, the released 1,560,936,091,448 within 0.01%.
void TestZeroTrunk::fullSizeIsHeadersOverHoles() {
    k3synth::SynthOptions o;
    o.layers = 93;
    o.experts = 896;
    o.vision = true;
    o.sparse = true;
    QCOMPARE(k3synth::synthCheckpointBytes(o), 1'560'838'262'528ull);
}

QTEST_GUILESS_MAIN(TestZeroTrunk)
#include "tst_zero_trunk.moc"
