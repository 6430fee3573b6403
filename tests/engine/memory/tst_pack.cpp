// Packing the trunk: records at 4096-aligned offsets holding exactly the source bytes,
// progress and cancellation, atomicity, and the refusal of a non-contiguous layer.
#include <QDir>
#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <functional>

#include <k3/pack.hpp>

using nlohmann::json;

namespace {

const std::string kTinyA = K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a";

std::vector<char> readRange(const std::string& path, std::uint64_t off, std::uint64_t n) {
    std::ifstream in(path, std::ios::binary);
    in.seekg(std::streamoff(off));
    std::vector<char> b(n);
    in.read(b.data(), std::streamsize(n));
    return b;
}

// A one-shard checkpoint where a routed expert's tensor sits between two of layer 0's
// trunk tensors.
void writeGappyCheckpoint(const QString& dir) {
    QFile::copy(QString::fromStdString(kTinyA) + QStringLiteral("/config.json"),
                dir + QStringLiteral("/config.json"));
    const json header{{"language_model.model.layers.0.input_layernorm.weight",
                       {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {0, 16}}}},
                      {"language_model.model.layers.0.block_sparse_moe.experts.0.w1.weight_packed",
                       {{"dtype", "U8"}, {"shape", {8}}, {"data_offsets", {16, 24}}}},
                      {"language_model.model.layers.0.post_attention_layernorm.weight",
                       {{"dtype", "F32"}, {"shape", {4}}, {"data_offsets", {24, 40}}}}};
    std::string h = header.dump();
    while (h.size() % 8) h += ' ';
    std::ofstream out((dir + QStringLiteral("/model.safetensors")).toStdString(), std::ios::binary);
    const std::uint64_t n = h.size();
    out.write(reinterpret_cast<const char*>(&n), 8);
    out << h;
    const std::vector<char> data(40, 1);
    out.write(data.data(), 40);
}

} // namespace

class TestPack : public QObject {
    Q_OBJECT
private slots:
    void packsAlignedExactCopies();
    void refusesNonContiguousLayer();
    void cancelLeavesNothingValid();
    void truncatedBinIsRefused();
    void wrappingShapeIsRefused();
    void nonIntegerNumbersAreRefused();
};

void TestPack::packsAlignedExactCopies() {
    QTemporaryDir tmp;
    const std::string trunk = tmp.filePath(QStringLiteral("t")).toStdString();
    std::vector<k3::PackProgress> seen;
    const k3::PackResult res =
        k3::packTrunk(kTinyA, trunk, [&](const k3::PackProgress& p) { seen.push_back(p); });
    QCOMPARE(res.layers, 14);
    QCOMPARE(int(seen.size()), 14 + 5); // 14 layers + 5 model-level records
    QCOMPARE(seen.back().recordsDone, seen.back().recordsTotal);
    QCOMPARE(seen.back().bytesDone, res.payloadBytes);
    for (std::size_t i = 1; i < seen.size(); ++i)
        QVERIFY(seen[i].bytesDone > seen[i - 1].bytesDone);
    QVERIFY(!QFile::exists(QString::fromStdString(trunk + "/trunk.bin.partial")));

    const k3::TrunkIndex idx = k3::openTrunkIndex(trunk, kTinyA);
    QCOMPARE(int(idx.layers.size()), 14);
    QCOMPARE(idx.fileBytes, res.fileBytes);
    QCOMPARE(idx.fileBytes % 4096, std::uint64_t(0));
    // Layer 0's run in shard 1 is [180248, 242616), from the fixture's headers.
    QCOMPARE(idx.layers[0].bytes, std::uint64_t(242616 - 180248));
    QCOMPARE(idx.largestLayerBytes(), res.largestLayerBytes);
    QCOMPARE(int(idx.modelRecords.size()), 5);
    const k3::Checkpoint ckpt = k3::Checkpoint::open(kTinyA);
    for (const auto& r : idx.layers) {
        QCOMPARE(r.offset % 4096, std::uint64_t(0));
        for (const auto& [name, t] : r.tensors) {
            QVERIFY2(!k3::isRoutedExpertTensor(name), name.c_str());
            const k3::TensorInfo& src = ckpt.at(name);
            QCOMPARE(t.info.nbytes, src.nbytes);
            QCOMPARE(t.info.dtype, src.dtype);
            const auto a = readRange(idx.binPath.string(), r.offset + t.offset, t.info.nbytes);
            const auto b = readRange(ckpt.shardPaths()[src.shard].string(), src.offset, src.nbytes);
            QVERIFY2(a == b, name.c_str());
        }
    }
    QVERIFY(idx.layers[1].tensors.count(
        "language_model.model.layers.1.block_sparse_moe.shared_experts.up_proj.weight"));
    QVERIFY(idx.modelRecordFor("language_model.lm_head.weight"));
}

void TestPack::refusesNonContiguousLayer() {
    QTemporaryDir tmp;
    const QString model = tmp.filePath(QStringLiteral("m"));
    QDir().mkpath(model);
    writeGappyCheckpoint(model);
    const std::string trunk = tmp.filePath(QStringLiteral("t")).toStdString();
    try {
        k3::packTrunk(model.toStdString(), trunk);
        QFAIL("a non-contiguous layer was packed");
    } catch (const k3::PackError& e) {
        const std::string m = e.what();
        QVERIFY2(m.find("layer 0 is not contiguous") != std::string::npos, e.what());
        QVERIFY2(m.find("8 bytes of gap") != std::string::npos, e.what());
        QVERIFY2(m.find("post_attention_layernorm") != std::string::npos, e.what());
    }
    QVERIFY(!QFile::exists(QString::fromStdString(trunk + "/trunk.json")));
    QVERIFY(!QFile::exists(QString::fromStdString(trunk + "/trunk.bin")));
}

void TestPack::cancelLeavesNothingValid() {
    QTemporaryDir tmp;
    const std::string trunk = tmp.filePath(QStringLiteral("t")).toStdString();
    k3::packTrunk(kTinyA, trunk);
    QVERIFY(k3::trunkIsCurrent(trunk, kTinyA));
    // A re-pack cancelled half way: the old trunk.json must not vouch for new bytes.
    std::atomic<bool> cancel{false};
    try {
        k3::packTrunk(
            kTinyA, trunk,
            [&](const k3::PackProgress& p) {
                if (p.recordsDone == 5) cancel = true;
            },
            &cancel);
        QFAIL("cancel ignored");
    } catch (const k3::PackError& e) {
        QVERIFY2(std::string(e.what()).find("cancelled") != std::string::npos, e.what());
    }
    QVERIFY(!k3::trunkIsCurrent(trunk, kTinyA));
    QVERIFY(!QFile::exists(QString::fromStdString(trunk + "/trunk.json")));
    QVERIFY(!QFile::exists(QString::fromStdString(trunk + "/trunk.bin.partial")));
}

void TestPack::truncatedBinIsRefused() {
    QTemporaryDir tmp;
    const std::string trunk = tmp.filePath(QStringLiteral("t")).toStdString();
    k3::packTrunk(kTinyA, trunk);
    QFile bin(QString::fromStdString(trunk + "/trunk.bin"));
    QVERIFY(bin.resize(bin.size() - 4096));
    try {
        k3::openTrunkIndex(trunk, kTinyA);
        QFAIL("a truncated trunk.bin was accepted");
    } catch (const k3::PackError& e) {
        QVERIFY2(std::string(e.what()).find("re-pack") != std::string::npos, e.what());
    }
}

// A crafted trunk.json whose shape product wraps around 2^64 to its nbytes (here 0)
// must be refused: kernels trust the shape.
void TestPack::wrappingShapeIsRefused() {
    QTemporaryDir tmp;
    const std::string trunk = tmp.filePath(QStringLiteral("t")).toStdString();
    k3::packTrunk(kTinyA, trunk);
    std::ifstream in(trunk + "/trunk.json");
    json j = json::parse(in);
    const std::uint64_t binBytes = j.at("file_bytes").get<std::uint64_t>();
    const k3::TrunkIndex ok = k3::parseTrunkIndex(j.dump(), binBytes, trunk);
    QCOMPARE(ok.layers.size(), std::size_t(ok.source.numLayers));
    QCOMPARE(ok.binPath.string(), trunk + "/trunk.bin");

    auto& tensor = j["records"][0]["tensors"].begin().value();
    tensor["dtype"] = "F32";
    tensor["shape"] = {std::uint64_t{1} << 62, 4};
    tensor["nbytes"] = 0;
    try {
        k3::parseTrunkIndex(j.dump(), binBytes, trunk);
        QFAIL("a shape whose byte count wraps to 0 was accepted");
    } catch (const k3::PackError& e) {
        QVERIFY2(std::string(e.what()).find("has a shape too large to address") !=
                     std::string::npos,
                 e.what());
    }
}

// Numbers too large for an integer parse as floating point; converting one to an integer
// was undefined (the fuzzer's find): each field now says it is not an integer.
void TestPack::nonIntegerNumbersAreRefused() {
    QTemporaryDir tmp;
    const std::string trunk = tmp.filePath(QStringLiteral("t")).toStdString();
    k3::packTrunk(kTinyA, trunk);
    std::ifstream in(trunk + "/trunk.json");
    const json good = json::parse(in);
    const std::uint64_t binBytes = good.at("file_bytes").get<std::uint64_t>();
    const auto refusal = [&](const std::function<void(json&)>& edit) {
        json j = good;
        edit(j);
        try {
            k3::parseTrunkIndex(j.dump(), binBytes, trunk);
        } catch (const k3::PackError& e) {
            return std::string(e.what());
        }
        return std::string("accepted");
    };
    std::string e = refusal([](json& j) { j["source"]["shards"][0]["size"] = 7.5e300; });
    QVERIFY2(e.find("\"size\" is not an integer") != std::string::npos, e.c_str());
    e = refusal([](json& j) { j["records"][0]["offset"] = 1e30; });
    QVERIFY2(e.find("\"offset\" is not an integer") != std::string::npos, e.c_str());
    e = refusal([](json& j) { j["records"][0]["layer"] = std::int64_t{1} << 40; });
    QVERIFY2(e.find("\"layer\" is out of range") != std::string::npos, e.c_str());
    e = refusal([](json& j) { j["records"][0]["bytes"] = -4096; });
    QVERIFY2(e.find("\"bytes\" is out of range") != std::string::npos, e.c_str());
}

QTEST_GUILESS_MAIN(TestPack)
#include "tst_pack.moc"
