// The real `k3` binary on a checkpoint an attacker edited (issue 22): an E8M0 scale byte
// 0xFF (NaN) in routed experts. Through the expert cache the experts are dropped: the
// full report, then exit 4 with "valid": false. Resident, the load refuses the tensor
// by name: exit 1, no report.
#include "JsonFile.hpp"
#include "K3Process.hpp"

#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

#include <fstream>

#include <k3/config.hpp>
#include <k3/safetensors.hpp>

namespace {

const QString kTinyA = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a");

// A copy of k3_tiny_a in `dir`, to damage.
bool copyOfTinyA(const QString& dir) {
    if (!QDir().mkpath(dir)) return false;
    for (const QString& f : QDir(kTinyA).entryList(QDir::Files))
        if (!QFile::copy(kTinyA + "/" + f, dir + "/" + f)) return false;
    return true;
}

int firstMoeLayer(const k3::ModelConfig& c) {
    for (int L = 0; L < c.numHiddenLayers; ++L)
        if (c.layers[std::size_t(L)].mlp == k3::MlpKind::Moe) return L;
    return -1;
}

} // namespace

class TestK3Hostile : public QObject {
    Q_OBJECT
private slots:
    void nanScalesDropExpertsAndExitFour();
    void infiniteRouterScoreMakesTheRunInvalid();
    void bf16RelabelledF16IsRefused();
    void repackWithoutRoomKeepsTheTrunk();
};

void TestK3Hostile::nanScalesDropExpertsAndExitFour() {
    QTemporaryDir tmp;
    const QString dir = tmp.filePath("model");
    QVERIFY(copyOfTinyA(dir));
    const k3::ModelConfig c = k3::readModelConfig((dir + "/config.json").toStdString());
    const int moe = firstMoeLayer(c);
    QVERIFY(moe >= 0);
    const std::string prefix =
        "language_model.model.layers." + std::to_string(moe) + ".block_sparse_moe.experts.";
    {
        const k3::Checkpoint ckpt = k3::Checkpoint::open(dir.toStdString());
        for (int e = 0; e < c.numExperts; ++e) {
            const k3::TensorInfo& t = ckpt.at(prefix + std::to_string(e) + ".w1.weight_scale");
            std::fstream f(ckpt.shardPaths()[t.shard],
                           std::ios::in | std::ios::out | std::ios::binary);
            f.seekp(std::streamoff(t.offset));
            f.put(char(0xFF));
            QVERIFY(f.good());
        }
    }
    const QString out = tmp.filePath("run.json");
    const K3Run r =
        runK3({dir, "--ids", "5,6,7", "--gen", "3", "--cache-gb", "0.0001", "--out", out});
    QVERIFY2(r.exitCode == 4, qPrintable(QString::number(r.exitCode) + " " + r.err));
    QVERIFY2(r.out.contains("3 tokens in ") && r.out.contains("run report: " + out),
             qPrintable(r.out));
    QVERIFY2(r.err.contains("RUN INVALID: "), qPrintable(r.err));
    const nlohmann::json report = readJsonFile(out);
    QVERIFY(report.is_object());
    QCOMPARE(report["valid"].get<bool>(), false);
    // Every token (3 prompt positions + 3 generated, the last not run) drops its top-k in
    // the poisoned layer.
    QVERIFY(report["dropped_experts"].get<int>() >= 3 * c.numExpertsPerToken);
    QCOMPARE(report["dropped_experts"].get<int>() % c.numExpertsPerToken, 0);

    const K3Run resident =
        runK3({dir, "--ids", "5,6", "--gen", "1", "--out", tmp.filePath("b.json")});
    QCOMPARE(resident.exitCode, 1);
    QVERIFY2(resident.err.contains(QString::fromStdString(
                 "tensor " + prefix +
                 "0.w1.weight_scale has scale byte 0xFF (NaN in E8M0) at row 0, "
                 "group 0: the checkpoint is damaged")),
             qPrintable(resident.err));
    QVERIFY(!QFile::exists(tmp.filePath("b.json")));
}

// Issue 35 item 19: a +Inf in a router gate row chose experts silently; once a
// non-finite value reaches the router scores the run is invalid (exit 4, the report says
// non_finite), as a non-finite logit makes it.
// Issue 35 item 19: BF16 bytes relabelled F16 in a shard header (same size) loaded as
// other numbers and ran with exit 0. Kimi K3 has no F16 tensor: a projection or a norm
// labelled F16 is refused at load, naming it.
void TestK3Hostile::bf16RelabelledF16IsRefused() {
    for (const std::string name :
         {"language_model.lm_head.weight", "language_model.model.norm.weight"}) {
        QTemporaryDir tmp;
        const QString dir = tmp.filePath("model");
        QVERIFY(copyOfTinyA(dir));
        std::string shard;
        {
            const k3::Checkpoint ckpt = k3::Checkpoint::open(dir.toStdString());
            QCOMPARE(int(ckpt.at(name).dtype), int(k3::DType::BF16));
            shard = ckpt.shardPaths()[ckpt.at(name).shard].string();
        }
        // The header rewritten with the same length (JSON may end in spaces).
        std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
        std::uint64_t headerBytes = 0;
        f.read(reinterpret_cast<char*>(&headerBytes), 8);
        std::string header(headerBytes, ' ');
        f.read(header.data(), std::streamsize(headerBytes));
        nlohmann::json j = nlohmann::json::parse(header);
        j[name]["dtype"] = "F16";
        std::string relabelled = j.dump();
        QVERIFY(relabelled.size() <= headerBytes);
        relabelled.resize(headerBytes, ' ');
        f.seekp(8);
        f.write(relabelled.data(), std::streamsize(relabelled.size()));
        f.close();
        QVERIFY(f.good() || !f.is_open());

        const K3Run r = runK3({dir, "--ids", "5,6,7", "--gen", "2"});
        QVERIFY2(r.exitCode == 1, qPrintable(QString::number(r.exitCode) + " " + r.err));
        QVERIFY2(r.err.contains(QString::fromStdString(
                     "tensor " + name +
                     " has dtype F16: Kimi K3's weights are BF16 or F32 (an F16 checkpoint, or "
                     "BF16 data relabelled F16 in a shard header, is refused)")),
                 qPrintable(r.err));
    }
}

void TestK3Hostile::infiniteRouterScoreMakesTheRunInvalid() {
    QTemporaryDir tmp;
    const QString dir = tmp.filePath("model");
    QVERIFY(copyOfTinyA(dir));
    const k3::ModelConfig c = k3::readModelConfig((dir + "/config.json").toStdString());
    const int moe = firstMoeLayer(c);
    QVERIFY(moe >= 0);
    {
        const k3::Checkpoint ckpt = k3::Checkpoint::open(dir.toStdString());
        const k3::TensorInfo& t = ckpt.at("language_model.model.layers." + std::to_string(moe) +
                                          ".block_sparse_moe.gate.weight");
        QCOMPARE(int(t.dtype), int(k3::DType::BF16));
        std::fstream f(ckpt.shardPaths()[t.shard], std::ios::in | std::ios::out | std::ios::binary);
        f.seekp(std::streamoff(t.offset)); // row 0, column 0: BF16 +Inf is 0x7F80
        f.put(char(0x80));
        f.put(char(0x7F));
        QVERIFY(f.good());
    }
    const QString out = tmp.filePath("run.json");
    const K3Run r = runK3({dir, "--ids", "5,6,7", "--gen", "3", "--out", out});
    QVERIFY2(r.exitCode == 4, qPrintable(QString::number(r.exitCode) + " " + r.err));
    QVERIFY2(r.err.contains("RUN INVALID: "), qPrintable(r.err));
    const nlohmann::json report = readJsonFile(out);
    QVERIFY(report.is_object());
    QCOMPARE(report["valid"].get<bool>(), false);
    QCOMPARE(report["non_finite"].get<bool>(), true);
}

QTEST_GUILESS_MAIN(TestK3Hostile)

// Issue 22 point 11: re-packing used to delete the valid trunk.json before finding out
// the disk was full. In a private mount namespace, a tmpfs that holds one trunk but not
// a second beside it: the re-pack is refused up front and the trunk still runs.
void TestK3Hostile::repackWithoutRoomKeepsTheTrunk() {
    if (QStandardPaths::findExecutable(QStringLiteral("unshare")).isEmpty())
        QSKIP("no unshare(1) here: the disk-full case needs a private tmpfs");
    QTemporaryDir tmp;
    const QString probe = tmp.filePath("probe");
    const K3Run first = runK3({QStringLiteral("pack"), kTinyA, probe});
    QCOMPARE(first.exitCode, 0);
    const qint64 bin = QFileInfo(probe + "/trunk.bin").size();
    QVERIFY(bin > 0);
    const QString mnt = tmp.filePath("mnt");
    QVERIFY(QDir().mkpath(mnt));
    const qint64 sizeKb = (bin + bin / 2) / 1024 + 64; // one trunk and its json, not two
    const QString script =
        QStringLiteral("mount -t tmpfs -o size=%1k k3test \"$1\" || exit 97; "
                       "\"$2\" pack \"$3\" \"$1/trunk\" >/dev/null 2>&1; echo first=$?; "
                       "\"$2\" pack \"$3\" \"$1/trunk\" 2>&1; echo second=$?; "
                       "test -f \"$1/trunk/trunk.json\" && echo kept; "
                       "\"$2\" \"$3\" --trunk \"$1/trunk\" --ids 1,2,3 --gen 2 >/dev/null 2>&1; "
                       "echo run=$?")
            .arg(sizeKb);
    QProcess p;
    p.start(QStringLiteral("unshare"),
            {QStringLiteral("--mount"), QStringLiteral("sh"), QStringLiteral("-c"), script,
             QStringLiteral("sh"), mnt, QStringLiteral(K3_CLI_PATH), kTinyA});
    QVERIFY(p.waitForFinished(120000));
    const QString out = QString::fromUtf8(p.readAllStandardOutput());
    if (p.exitCode() == 97 || out.isEmpty())
        QSKIP(qPrintable("no private mount namespace with a tmpfs here (needs root): " +
                         QString::fromUtf8(p.readAllStandardError())));
    QVERIFY2(out.contains(QStringLiteral("first=0\n")), qPrintable(out));
    QVERIFY2(out.contains(QStringLiteral("second=1\n")), qPrintable(out));
    QVERIFY2(out.contains(QStringLiteral("packing needs ")) &&
                 out.contains(QStringLiteral("nothing was changed")),
             qPrintable(out));
    QVERIFY2(out.contains(QStringLiteral("kept\n")), qPrintable(out));
    QVERIFY2(out.contains(QStringLiteral("run=0\n")), qPrintable(out));
}

#include "tst_k3hostile.moc"
