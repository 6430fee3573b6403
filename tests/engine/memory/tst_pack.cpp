// Packing the trunk: records at 4096-aligned offsets holding exactly the source bytes,
// progress and cancellation, atomicity, and the refusal of a non-contiguous layer.
#include <QDir>
#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

#include <cstring>
#include <fstream>
#include <functional>

#include <k3/model.hpp>
#include <k3/pack.hpp>
#include <k3/trunk.hpp>

#include <fcntl.h>
#include <sys/stat.h>

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
    void cancelKeepsTheOldTrunk();
    void truncatedBinIsRefused();
    void wrappingShapeIsRefused();
    void nonIntegerNumbersAreRefused();
    void editedTrunkJsonFailsItsChecksum();
    void oldFormatVersionSaysRepack();
    void swappedTensorOffsetsAreRefused();
    void overlappingOffsetsAreRefused();
    void dtypeEditIsRefused();
    void recordOffsetEditNamesTheRecordWhenRead();
    void bitFlipInARecordNamesTheRecordWhenRead();
    void bitFlipInAStreamedLayerNamesTheLayer();
    void bitFlipInAStreamedPieceNamesTheTensor();
    void anotherModelWithTheSameNamesSizesAndMtimesIsRefused();
    void otherWeightsWithTheSameHeadersAreRefused();
    void aTrunkWithoutCheckedShardsIsCheckedOnce();
};

namespace {

const char* kQ = "language_model.model.layers.0.self_attn.q_proj.weight";
const char* kK = "language_model.model.layers.0.self_attn.k_proj.weight";

struct Packed {
    QTemporaryDir tmp;
    std::string trunk;
    json doc;
    std::uint64_t binBytes = 0;
    Packed() {
        trunk = tmp.filePath(QStringLiteral("t")).toStdString();
        k3::packTrunk(kTinyA, trunk);
        std::ifstream in(trunk + "/trunk.json");
        doc = json::parse(in);
        binBytes = doc.at("file_bytes").get<std::uint64_t>();
    }
    // Writes an edited trunk.json, with its own checksum made to match (as an attacker
    // who knows the format would), so the checks behind the checksum are reached.
    void write(const json& j, bool seal = true) const {
        std::ofstream out(trunk + "/trunk.json", std::ios::trunc);
        out << (seal ? k3::sealTrunkJson(j.dump()) : j.dump(1));
    }
    std::string openError() const {
        try {
            k3::openTrunkIndex(trunk, kTinyA);
        } catch (const std::exception& e) {
            return e.what();
        }
        return "accepted";
    }
    // Every layer pinned: each record is read (and checked) at load.
    std::string loadError(std::uint64_t trunkBytes = 0) const {
        return loadErrorOf(trunk, kTinyA, trunkBytes);
    }
    static std::string loadErrorOf(const std::string& trunk, const std::string& model,
                                   std::uint64_t trunkBytes = 0) {
        try {
            k3::LaunchConfig o;
            o.modelDir = model;
            o.trunkDir = trunk;
            if (trunkBytes) o.budget.trunkBytes = trunkBytes;
            const k3::Model m = k3::Model::load(o);
            if (trunkBytes) { // streamed: the forward reads each layer
                std::vector<float> logits(std::size_t(m.config().vocabSize));
                k3::InferenceState st = m.newState();
                m.forward(st, 5, logits);
            }
        } catch (const std::exception& e) {
            return e.what();
        }
        return "accepted";
    }
};

json& layerRecord(json& doc, int layer) {
    for (json& r : doc["records"])
        if (r["layer"] == layer) return r;
    throw std::runtime_error("no layer record");
}

void flipByte(const std::string& path, std::uint64_t offset) {
    std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
    f.seekg(std::streamoff(offset));
    char c = 0;
    f.read(&c, 1);
    c = char(c ^ 0x10);
    f.seekp(std::streamoff(offset));
    f.write(&c, 1);
}

bool has(const std::string& text, const std::string& part) {
    return text.find(part) != std::string::npos;
}

} // namespace

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

void TestPack::cancelKeepsTheOldTrunk() {
    QTemporaryDir tmp;
    const std::string trunk = tmp.filePath(QStringLiteral("t")).toStdString();
    k3::packTrunk(kTinyA, trunk);
    QVERIFY(k3::trunkIsCurrent(trunk, kTinyA));
    const QByteArray oldJson = [&] {
        QFile f(QString::fromStdString(trunk + "/trunk.json"));
        return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
    }();
    // A re-pack cancelled half way: the new trunk is written beside the old one, which
    // stays as it was.
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
    QVERIFY(k3::trunkIsCurrent(trunk, kTinyA));
    QFile json(QString::fromStdString(trunk + "/trunk.json"));
    QVERIFY(json.open(QIODevice::ReadOnly));
    QCOMPARE(json.readAll(), oldJson);
    QCOMPARE(QDir(QString::fromStdString(trunk)).entryList(QDir::Files | QDir::Hidden),
             QStringList({QStringLiteral("trunk.bin"), QStringLiteral("trunk.checked.json"),
                          QStringLiteral("trunk.json")}));
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
        k3::parseTrunkIndex(k3::sealTrunkJson(j.dump()), binBytes, trunk);
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
            k3::parseTrunkIndex(k3::sealTrunkJson(j.dump()), binBytes, trunk);
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

// One digit changed in trunk.json, not re-sealed: its own checksum refuses it.
void TestPack::editedTrunkJsonFailsItsChecksum() {
    Packed p;
    QCOMPARE(p.openError(), std::string("accepted"));
    json j = p.doc;
    layerRecord(j, 0)["tensors"][kQ]["offset"] = 4096 * 3;
    p.write(j, /*seal=*/false);
    const std::string e = p.openError();
    QVERIFY2(has(e, p.trunk + "/trunk.json: checksum ") &&
                 has(e, "trunk.json was changed or damaged: re-pack it"),
             e.c_str());
}

void TestPack::oldFormatVersionSaysRepack() {
    Packed p;
    json j = p.doc;
    j["version"] = 1;
    p.write(j);
    const std::string e = p.openError();
    QVERIFY2(has(e, "trunk format version 1, this k3 reads versions 2 (record checksums) and 3 "
                    "(compressed); re-pack it"),
             e.c_str());
    QVERIFY2(!has(e, "k3 pack"), e.c_str()); // the front ends say how, in their words
    try {
        k3::openTrunkIndex(p.trunk, kTinyA);
    } catch (const k3::StaleTrunkError& stale) {
        // The class the app and CLI offer a re-pack for, into the same folder.
        QVERIFY(stale.remedy().has_value());
        QCOMPARE(stale.remedy()->trunkDir.string(), p.trunk);
        QVERIFY(!stale.remedy()->compress && !stale.remedy()->draft);
        return;
    } catch (...) {
    }
    QFAIL("an old version is not a StaleTrunkError");
}

// q_proj and k_proj are both BF16 [32, 64]: swapped, everything still tiles and bounds
// hold; the checkpoint's header says where each really is.
void TestPack::swappedTensorOffsetsAreRefused() {
    Packed p;
    json j = p.doc;
    json& t = layerRecord(j, 0)["tensors"];
    const json q = t[kQ]["offset"];
    t[kQ]["offset"] = t[kK]["offset"];
    t[kK]["offset"] = q;
    p.write(j);
    const std::string e = p.openError();
    // q_proj comes first in the file: it is the first difference named.
    QVERIFY2(has(e, std::string("the trunk's record layer 0: tensor ") + kQ + " has offset " +
                        std::to_string(t[kQ]["offset"].get<std::uint64_t>()) +
                        " in the record, the checkpoint's " +
                        std::to_string(q.get<std::uint64_t>())),
             e.c_str());
    QVERIFY2(has(e, "trunk.json was changed: re-pack it"), e.c_str());
    // Without the model to compare with, the bytes as read disagree with the tensor's checksum.
    const k3::TrunkIndex idx =
        k3::parseTrunkIndex(k3::sealTrunkJson(j.dump()), p.binBytes, p.trunk);
    const k3::TrunkRecord& r = idx.layers[0];
    const auto bytes = readRange(idx.binPath.string(), r.offset, r.bytes);
    try {
        k3::verifyTrunkTensor(
            r, kQ, reinterpret_cast<const std::byte*>(bytes.data()) + r.tensors.at(kQ).offset,
            idx.binPath);
        QFAIL("a tensor read from another tensor's place passed its checksum");
    } catch (const k3::PackError& err) {
        QVERIFY2(has(err.what(), std::string("trunk record layer 0, tensor ") + kQ) &&
                     has(err.what(), "trunk.bin is damaged or was changed: re-pack it"),
                 err.what());
    }
}

void TestPack::overlappingOffsetsAreRefused() {
    Packed p;
    {
        json j = p.doc;
        json& t = layerRecord(j, 0)["tensors"];
        t[kK]["offset"] = t[kQ]["offset"].get<std::uint64_t>() + 2048; // half over q_proj
        p.write(j);
        const std::string e = p.openError();
        QVERIFY2(has(e, "record layer 0: tensor ") && has(e, " overlaps "), e.c_str());
    }
    {
        // Two records at one offset of trunk.bin.
        json j = p.doc;
        layerRecord(j, 2)["offset"] = layerRecord(j, 1)["offset"];
        p.write(j);
        const std::string e = p.openError();
        QVERIFY2(has(e, "records layer 1 [") && has(e, ") and layer 2 (at ") && has(e, ") overlap"),
                 e.c_str());
    }
}

void TestPack::dtypeEditIsRefused() {
    Packed p;
    json j = p.doc;
    layerRecord(j, 0)["tensors"][kQ]["dtype"] = "F16"; // same size, other numbers
    p.write(j);
    const std::string e = p.openError();
    QVERIFY2(
        has(e, std::string("the trunk's record layer 0: tensor ") + kQ +
                   " has dtype F16, the checkpoint's BF16; trunk.json was changed: re-pack it"),
        e.c_str());
}

// A layer's record pointed at another same-size layer's bytes (bounds and the header
// comparison hold: trunk.bin offsets are not in the checkpoint): the read's checksum
// names the record.
void TestPack::recordOffsetEditNamesTheRecordWhenRead() {
    Packed p;
    json j = p.doc;
    int a = -1, b = -1;
    for (int x = 0; x < 14 && a < 0; ++x)
        for (int y = x + 1; y < 14 && a < 0; ++y)
            if (layerRecord(j, x)["bytes"] == layerRecord(j, y)["bytes"]) {
                a = x;
                b = y;
            }
    QVERIFY(a >= 0);
    const json offA = layerRecord(j, a)["offset"];
    layerRecord(j, a)["offset"] = layerRecord(j, b)["offset"];
    layerRecord(j, b)["offset"] = offA;
    p.write(j);
    QCOMPARE(p.openError(), std::string("accepted"));
    const std::string e = p.loadError();
    const std::string name = "layer " + std::to_string(a);
    QVERIFY2(has(e, "trunk " + name + ": trunk record " + name + " (" + p.trunk +
                        "/trunk.bin offset " +
                        std::to_string(layerRecord(j, a)["offset"].get<std::uint64_t>())) &&
                 has(e, "trunk.bin is damaged or was changed: re-pack it"),
             e.c_str());
}

void TestPack::bitFlipInARecordNamesTheRecordWhenRead() {
    Packed p;
    QCOMPARE(p.loadError(), std::string("accepted"));
    const json& r = layerRecord(p.doc, 2);
    flipByte(p.trunk + "/trunk.bin", r["offset"].get<std::uint64_t>() + 1000);
    QCOMPARE(p.openError(), std::string("accepted")); // trunk.json itself is intact
    const std::string e = p.loadError();
    QVERIFY2(has(e, "trunk layer 2: trunk record layer 2 (" + p.trunk + "/trunk.bin offset " +
                        std::to_string(r["offset"].get<std::uint64_t>()) + ", " +
                        std::to_string(r["bytes"].get<std::uint64_t>()) + " bytes): checksum "),
             e.c_str());
}

// The same damage in a layer that streams through the ring during the forward.
void TestPack::bitFlipInAStreamedLayerNamesTheLayer() {
    Packed p;
    const k3::TrunkIndex idx = k3::openTrunkIndex(p.trunk, kTinyA);
    const std::uint64_t ring = 2 * k3::alignUp(idx.largestLayerBytes());
    QCOMPARE(p.loadError(ring), std::string("accepted"));
    const json& r = layerRecord(p.doc, 6);
    flipByte(p.trunk + "/trunk.bin",
             r["offset"].get<std::uint64_t>() + r["bytes"].get<std::uint64_t>() - 1);
    const std::string e = p.loadError(ring);
    QVERIFY2(has(e, "trunk layer 6") && has(e, "trunk record layer 6") &&
                 has(e, "trunk.bin is damaged or was changed: re-pack it"),
             e.c_str());
}

// A layer larger than the ring slot streams in two pieces (windows of whole tensors):
// each tensor is checked against its own checksum, and the error names it.
void TestPack::bitFlipInAStreamedPieceNamesTheTensor() {
    Packed p;
    const k3::TrunkIndex idx = k3::openTrunkIndex(p.trunk, kTinyA);
    std::uint64_t maxPiece = 0;
    int largest = 0;
    for (int L = 0; L < int(idx.layers.size()); ++L) {
        maxPiece = std::max(maxPiece, k3::largestPieceBytes(idx.layers[std::size_t(L)]));
        if (idx.layers[std::size_t(L)].bytes > idx.layers[std::size_t(largest)].bytes) largest = L;
    }
    QVERIFY(maxPiece < k3::alignUp(idx.layers[std::size_t(largest)].bytes));
    QCOMPARE(p.loadError(2 * maxPiece), std::string("accepted"));
    const k3::TrunkRecord& r = idx.layers[std::size_t(largest)];
    std::string mlp;
    for (const auto& [name, t] : r.tensors)
        if (k3::isMlpPieceTensor(name) && t.info.nbytes > 0) mlp = name;
    QVERIFY(!mlp.empty());
    const k3::TrunkTensor& t = r.tensors.at(mlp);
    flipByte(p.trunk + "/trunk.bin", r.offset + t.offset + t.info.nbytes / 2);
    const std::string e = p.loadError(2 * maxPiece);
    QVERIFY2(has(e, "trunk layer " + std::to_string(largest) + " piece 1: trunk record layer " +
                        std::to_string(largest) + ", tensor " + mlp + " (" + p.trunk +
                        "/trunk.bin offset " + std::to_string(r.offset + t.offset) + ", " +
                        std::to_string(t.info.nbytes) + " bytes): checksum "),
             e.c_str());
}

// A second model whose shards keep the first one's file names, sizes and mtimes (and
// its config.json), but whose header differs: two same-size tensors trade places.
void TestPack::anotherModelWithTheSameNamesSizesAndMtimesIsRefused() {
    QTemporaryDir tmp;
    const QString a = tmp.filePath(QStringLiteral("a")), b = tmp.filePath(QStringLiteral("b"));
    QDir().mkpath(a);
    QDir().mkpath(b);
    for (const QString& f : QDir(QString::fromStdString(kTinyA)).entryList(QDir::Files)) {
        QVERIFY(QFile::copy(QString::fromStdString(kTinyA) + "/" + f, a + "/" + f));
        QVERIFY(QFile::copy(QString::fromStdString(kTinyA) + "/" + f, b + "/" + f));
    }
    const std::string trunk = tmp.filePath(QStringLiteral("t")).toStdString();
    k3::packTrunk(a.toStdString(), trunk);
    QVERIFY(k3::trunkIsCurrent(trunk, a.toStdString()));
    // In b's first shard, q_proj and k_proj of layer 0 swap data_offsets (same length).
    const std::string shard = b.toStdString() + "/model-00001-of-00003.safetensors";
    std::string bytes;
    {
        std::ifstream in(shard, std::ios::binary);
        bytes.assign(std::istreambuf_iterator<char>(in), {});
    }
    std::uint64_t n = 0;
    std::memcpy(&n, bytes.data(), 8);
    json h = json::parse(bytes.substr(8, n));
    std::swap(h[kQ]["data_offsets"], h[kK]["data_offsets"]);
    std::string text = h.dump();
    QVERIFY(text.size() <= n);
    text.resize(n, ' ');
    bytes.replace(8, n, text);
    {
        std::ofstream out(shard, std::ios::binary | std::ios::trunc);
        out.write(bytes.data(), std::streamsize(bytes.size()));
    }
    for (const char* f : {"model-00001-of-00003.safetensors", "model-00002-of-00003.safetensors",
                          "model-00003-of-00003.safetensors", "config.json"}) {
        struct stat st {};
        QCOMPARE(::stat((a.toStdString() + "/" + f).c_str(), &st), 0);
        const struct timespec times[2] = {st.st_atim, st.st_mtim};
        QCOMPARE(::utimensat(AT_FDCWD, (b.toStdString() + "/" + f).c_str(), times, 0), 0);
    }
    try {
        k3::openTrunkIndex(trunk, b.toStdString());
        QFAIL("another model's trunk was accepted");
    } catch (const k3::StaleTrunkError& e) {
        QVERIFY2(has(e.what(), "was packed from another checkpoint (shard "
                               "model-00001-of-00003.safetensors's header") &&
                     has(e.what(), "another model"),
                 e.what());
        // The suggestion packs into a new folder of b, never over a's trunk.
        QVERIFY(e.remedy().has_value());
        QCOMPARE(e.remedy()->modelDir.string(), b.toStdString());
        QCOMPARE(e.remedy()->trunkDir.string(), b.toStdString() + "/trunk");
        QVERIFY2(has(e.what(), "pack one into a new folder") && !has(e.what(), "k3 pack"),
                 e.what());
    }
    QVERIFY(!k3::trunkIsCurrent(trunk, b.toStdString()));
}

namespace {

// A copy of tiny A with new inodes (as `cp -r` makes).
QString copyOfTinyA(const QTemporaryDir& tmp, const QString& name) {
    const QString to = tmp.filePath(name);
    QDir().mkpath(to);
    for (const QString& f : QDir(QString::fromStdString(kTinyA)).entryList(QDir::Files))
        QFile::copy(QString::fromStdString(kTinyA) + "/" + f, to + "/" + f);
    return to;
}

// Every BF16 value of a tensor negated in place (its sign bit, the high byte's top bit);
// the header is untouched.
void negateBf16Tensor(const std::string& modelDir, const std::string& tensor) {
    const k3::Checkpoint ckpt = k3::Checkpoint::open(modelDir);
    const k3::TensorInfo& t = ckpt.at(tensor);
    QCOMPARE(t.dtype, k3::DType::BF16);
    const std::string shard = ckpt.shardPaths()[t.shard].string();
    std::vector<char> bytes = readRange(shard, t.offset, t.nbytes);
    for (std::size_t i = 1; i < bytes.size(); i += 2) bytes[i] = char(bytes[i] ^ 0x80);
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(t.offset));
    f.write(bytes.data(), std::streamsize(bytes.size()));
}

std::uint64_t trunkPayload(const k3::TrunkIndex& idx) {
    std::uint64_t n = 0;
    for (const auto& r : idx.layers) n += r.bytes;
    for (const auto& r : idx.modelRecords) n += r.bytes;
    return n;
}

} // namespace

// The same headers, other weights (a fine-tune of the same layout, a new revision in the
// same folder): the trunk's tensors no longer match the shard's bytes, and it is refused.
void TestPack::otherWeightsWithTheSameHeadersAreRefused() {
    QTemporaryDir tmp;
    const std::string trunk = tmp.filePath(QStringLiteral("t")).toStdString();
    k3::packTrunk(kTinyA, trunk);
    std::uint64_t read = 0, total = 0;
    const k3::TrunkCheckObserver count = [&](const k3::TrunkCheckProgress& p) {
        read = p.bytesDone;
        total = p.bytesTotal;
    };
    // The pack remembered the shards it read: opening with them reads nothing.
    const k3::TrunkIndex idx = k3::openTrunkIndex(trunk, kTinyA, count);
    QCOMPARE(read, std::uint64_t(0));

    // A copy holding the same bytes (new inodes, just written): each trunk tensor is read
    // from it and matches.
    const std::string same = copyOfTinyA(tmp, QStringLiteral("same")).toStdString();
    k3::openTrunkIndex(trunk, same, count);
    QCOMPARE(total, trunkPayload(idx));
    QCOMPARE(read, total);

    const std::string other = copyOfTinyA(tmp, QStringLiteral("other")).toStdString();
    negateBf16Tensor(other, "language_model.lm_head.weight");
    const k3::TensorInfo head = k3::Checkpoint::open(other).at("language_model.lm_head.weight");
    const std::string shard =
        k3::Checkpoint::open(other).shardPaths()[head.shard].filename().string();
    const std::string expected =
        "the trunk in " + trunk +
        ": this trunk was packed from different weights: re-pack it into a new folder; shard " +
        shard + ", tensor language_model.lm_head.weight (offset " + std::to_string(head.offset) +
        ", " + std::to_string(head.nbytes) + " bytes) has XXH3 ";
    for (int attempt = 0; attempt < 2; ++attempt) { // a refusal is never remembered
        try {
            k3::openTrunkIndex(trunk, other);
            QFAIL("a trunk packed from other weights was accepted");
        } catch (const k3::StaleTrunkError& e) {
            QVERIFY2(has(e.what(), expected), e.what());
            QVERIFY(e.remedy().has_value());
            QCOMPARE(e.remedy()->trunkDir.string(), other + "/trunk");
        }
    }
    QVERIFY(!k3::trunkIsCurrent(trunk, other));
    QVERIFY(has(Packed::loadErrorOf(trunk, other), expected));
    QVERIFY(k3::trunkIsCurrent(trunk, kTinyA));
}

// A trunk packed before trunk.checked.json existed (or whose file was lost): the first
// open with its model reads the trunk tensors from the shards, later opens do not.
void TestPack::aTrunkWithoutCheckedShardsIsCheckedOnce() {
    Packed p;
    const QString checked = QString::fromStdString(p.trunk + "/trunk.checked.json");
    QVERIFY(QFile::remove(checked));
    std::uint64_t read = 0;
    const k3::TrunkCheckObserver count = [&](const k3::TrunkCheckProgress& pr) {
        read = pr.bytesDone;
    };
    const k3::TrunkIndex idx = k3::openTrunkIndex(p.trunk, kTinyA, count);
    QCOMPARE(read, trunkPayload(idx));
    QVERIFY(QFile::exists(checked));
    read = 0;
    k3::openTrunkIndex(p.trunk, kTinyA, count);
    QCOMPARE(read, std::uint64_t(0));
    // Bound to trunk.json: another trunk's list (here: a damaged one) counts for nothing.
    QFile f(checked);
    QVERIFY(f.open(QIODevice::ReadWrite));
    const QByteArray text = f.readAll();
    const qint64 digit = text.indexOf("\"index_xxh3\": \"") + 15;
    f.seek(digit);
    f.write(text[digit] == '0' ? "1" : "0");
    f.close();
    k3::openTrunkIndex(p.trunk, kTinyA, count);
    QCOMPARE(read, trunkPayload(idx));
}

QTEST_GUILESS_MAIN(TestPack)
#include "tst_pack.moc"
