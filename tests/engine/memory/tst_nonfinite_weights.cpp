// Weights that would change the answer without a word (issue 22, point 4): a NaN router
// bias (ranked last), a non-finite norm, and an E8M0 scale byte 0xFF (NaN in the MX
// format, which the kernels decode as a zero scale). Refused at load by tensor name where
// that is cheap (vectors, resident experts); an expert read through the cache with one
// is a dropped expert: the run finishes and is invalid.
#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include <cstring>
#include <fstream>
#include <limits>

#include <k3/config.hpp>
#include <k3/kernels.hpp>
#include <k3/model.hpp>
#include <k3/pack.hpp>
#include <k3/safetensors.hpp>

namespace {

const QString kTinyA = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a");

QString copyModel(const QTemporaryDir& tmp) {
    const QString copy = tmp.filePath(QStringLiteral("model"));
    QDir().mkpath(copy);
    for (const QString& f : QDir(kTinyA).entryList(QDir::Files))
        if (!QFile::copy(kTinyA + QLatin1Char('/') + f, copy + QLatin1Char('/') + f)) return {};
    return copy;
}

// Overwrites element `index` of a float tensor (F32 or BF16) with `value`, or byte
// `index` of a U8 tensor with `byte`.
void patch(const QString& dir, const std::string& name, std::uint64_t index, float value,
           unsigned char byte = 0) {
    const k3::Checkpoint ckpt = k3::Checkpoint::open(dir.toStdString());
    const k3::TensorInfo& t = ckpt.at(name);
    std::string bytes;
    if (t.dtype == k3::DType::F32) {
        bytes.resize(4);
        std::memcpy(bytes.data(), &value, 4);
    } else if (t.dtype == k3::DType::BF16) {
        std::uint32_t bits = 0;
        std::memcpy(&bits, &value, 4);
        const std::uint16_t top = std::uint16_t(bits >> 16);
        bytes.resize(2);
        std::memcpy(bytes.data(), &top, 2);
    } else {
        bytes.assign(1, char(byte));
    }
    std::fstream f(ckpt.shardPaths()[t.shard], std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(std::streamoff(t.offset + index * bytes.size()));
    f.write(bytes.data(), std::streamsize(bytes.size()));
    QVERIFY(f.good());
}

std::string loadError(const QString& dir, k3::LaunchConfig o = {}) {
    o.modelDir = dir.toStdString();
    try {
        k3::Model::load(o);
    } catch (const std::exception& e) {
        return e.what();
    }
    return "loaded";
}

int firstMoeLayer(const k3::ModelConfig& c) {
    for (int L = 0; L < c.numHiddenLayers; ++L)
        if (c.layers[std::size_t(L)].mlp == k3::MlpKind::Moe) return L;
    return -1;
}

std::string moe(int L) {
    return "language_model.model.layers." + std::to_string(L) + ".block_sparse_moe.";
}

} // namespace

class TestNonFiniteWeights : public QObject {
    Q_OBJECT
private slots:
    void nanRouterBiasIsRefusedAtLoad();
    void infiniteNormIsRefusedAtLoad();
    void nanScaleInAResidentExpertIsRefusedAtLoad();
    void nanScaleInACachedExpertDropsIt();
};

void TestNonFiniteWeights::nanRouterBiasIsRefusedAtLoad() {
    QTemporaryDir tmp;
    const QString dir = copyModel(tmp);
    const k3::ModelConfig c = k3::readModelConfig((dir + "/config.json").toStdString());
    const int L = firstMoeLayer(c);
    QVERIFY(L >= 0);
    const std::string bias = moe(L) + "gate.e_score_correction_bias";
    patch(dir, bias, 2, std::numeric_limits<float>::quiet_NaN());
    QCOMPARE(loadError(dir), "tensor " + bias +
                                 " element 2 is NaN: refusing a non-finite norm, "
                                 "bias or vector weight");
    // The same through a packed trunk (the layer is bound from its pinned record).
    const std::string trunk = tmp.filePath(QStringLiteral("trunk")).toStdString();
    k3::packTrunk(dir.toStdString(), trunk);
    k3::LaunchConfig o;
    o.trunkDir = trunk;
    QCOMPARE(loadError(dir, o), "tensor " + bias +
                                    " element 2 is NaN: refusing a non-finite norm, bias or "
                                    "vector weight");
}

void TestNonFiniteWeights::infiniteNormIsRefusedAtLoad() {
    QTemporaryDir tmp;
    const QString dir = copyModel(tmp);
    const std::string norm = "language_model.model.layers.0.input_layernorm.weight";
    patch(dir, norm, 3, std::numeric_limits<float>::infinity());
    QCOMPARE(loadError(dir), "tensor " + norm +
                                 " element 3 is infinite: refusing a non-finite "
                                 "norm, bias or vector weight");
}

// Resident experts (no cache) are bound at load: the scale is refused by name and place.
void TestNonFiniteWeights::nanScaleInAResidentExpertIsRefusedAtLoad() {
    QTemporaryDir tmp;
    const QString dir = copyModel(tmp);
    const k3::ModelConfig c = k3::readModelConfig((dir + "/config.json").toStdString());
    const int L = firstMoeLayer(c);
    const std::string scale = moe(L) + "experts.1.w2.weight_scale";
    const std::size_t perRow = k3::mxfp4ScalesPerRow(c.moeIntermediateSize);
    const std::size_t at = perRow + perRow / 2; // row 1, the middle group
    patch(dir, scale, at, 0, 0xFF);
    QCOMPARE(loadError(dir), "tensor " + scale +
                                 " has scale byte 0xFF (NaN in E8M0) at row 1, group " +
                                 std::to_string(perRow / 2) + ": the checkpoint is damaged");
}

// Through the expert cache (read when routed), every expert of one layer carries a NaN
// scale: each token drops exactly its top-k there, and the cache counts the failed reads.
void TestNonFiniteWeights::nanScaleInACachedExpertDropsIt() {
    QTemporaryDir tmp;
    const QString dir = copyModel(tmp);
    const k3::ModelConfig c = k3::readModelConfig((dir + "/config.json").toStdString());
    const int L = firstMoeLayer(c);
    k3::LaunchConfig o;
    o.modelDir = dir.toStdString();
    k3::LaunchDiagnostics d;
    d.expertCacheSlots = 2 * c.numExpertsPerToken;
    {
        const k3::Model clean = k3::Model::load(o, d);
        std::vector<float> logits(std::size_t(c.vocabSize));
        k3::InferenceState st = clean.newState();
        QCOMPARE(clean.forward(st, 5, logits).droppedExperts, 0);
    }
    for (int e = 0; e < c.numExperts; ++e)
        patch(dir, moe(L) + "experts." + std::to_string(e) + ".w1.weight_scale", 0, 0, 0xFF);
    const k3::Model m = k3::Model::load(o, d); // nothing read yet
    std::vector<float> logits(std::size_t(c.vocabSize));
    k3::InferenceState st = m.newState();
    const k3::TokenStats ts = m.forward(st, 5, logits);
    QCOMPARE(ts.droppedExperts, c.numExpertsPerToken);
    QVERIFY(m.memoryStats().cache.failedReads >= std::uint64_t(c.numExpertsPerToken));
    // Resident, the same model does not load.
    QVERIFY(loadError(dir).find(".w1.weight_scale has scale byte 0xFF (NaN in E8M0) at row 0, "
                                "group 0") != std::string::npos);
}

QTEST_GUILESS_MAIN(TestNonFiniteWeights)
#include "tst_nonfinite_weights.moc"
