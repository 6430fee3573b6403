// The engine against the PyTorch reference on the committed tiny checkpoints (same
// tensor graph and file format as the release): teacher forcing, greedy decoding and
// the last prompt position's logits, for every checkpoint under tests/fixtures.
#include <QDir>
#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

#include <cmath>
#include <fstream>

#include <k3/kernels.hpp>
#include <k3/model.hpp>

using nlohmann::json;

class TestModelGates : public QObject {
    Q_OBJECT
private slots:
    void gates_data();
    void gates();
    void refusesMissingTensor();
    void layerLimitIsValidated();
};

static json readJson(const QString& path) {
    std::ifstream in(path.toStdString());
    return json::parse(in);
}

void TestModelGates::gates_data() {
    QTest::addColumn<QString>("dir");
    QTest::addColumn<bool>("scalar");
    int found = 0;
    for (const char* root : {"/tests/fixtures/models", "/resources/demo"}) {
        QDir base(QStringLiteral(K3_SOURCE_DIR) + QLatin1String(root));
        QStringList dirs = base.entryList(QDir::Dirs | QDir::NoDotAndDotDot, QDir::Name);
        if (QFile::exists(base.filePath(QStringLiteral("expected.json"))))
            dirs = {QStringLiteral(".")};
        for (const QString& d : dirs) {
            const QString path = QDir::cleanPath(base.filePath(d));
            if (!QFile::exists(path + QStringLiteral("/expected.json"))) continue;
            const QByteArray name = QDir(path).dirName().toUtf8();
            QTest::newRow(name + " simd") << path << false;
            QTest::newRow(name + " scalar") << path << true;
            ++found;
        }
    }
    QVERIFY2(found >= 2, "expected at least two committed tiny checkpoints");
}

void TestModelGates::gates() {
    QFETCH(QString, dir);
    QFETCH(bool, scalar);
    if (scalar)
        k3::setKernelPath(k3::KernelPath::Scalar);
    else
        k3::resetKernelPath();
    const json expected = readJson(dir + QStringLiteral("/expected.json"));
    const k3::Model model = k3::Model::load(dir.toStdString());
    const int vocab = model.config().vocabSize;
    std::vector<float> logits(static_cast<std::size_t>(vocab));

    // Teacher forcing over prompt + generated span: the argmax at every position.
    const std::vector<int> fullIds = expected.at("full_ids").get<std::vector<int>>();
    const std::vector<int> wantTf =
        expected.at("full_ids_teacher_forcing_argmax").get<std::vector<int>>();
    const std::vector<int> prompt = expected.at("prompt_ids").get<std::vector<int>>();
    QCOMPARE(wantTf.size(), fullIds.size());
    k3::InferenceState tf = model.newState();
    std::vector<float> lastPromptLogits;
    for (std::size_t i = 0; i < fullIds.size(); ++i) {
        const k3::TokenStats stats = model.forward(tf, fullIds[i], logits);
        QCOMPARE(stats.droppedExperts, 0);
        QVERIFY(!stats.nonFinite);
        QCOMPARE(k3::argmax(logits), wantTf[i]);
        if (i + 1 == prompt.size()) lastPromptLogits = logits;
    }

    // The last prompt position's logits, element by element.
    const json& fs = expected.at("first_step_logits");
    std::ifstream raw(
        (dir + QStringLiteral("/") + QString::fromStdString(fs.at("file").get<std::string>()))
            .toStdString(),
        std::ios::binary);
    std::vector<float> want(static_cast<std::size_t>(vocab));
    raw.read(reinterpret_cast<char*>(want.data()), std::streamsize(want.size() * sizeof(float)));
    QVERIFY(raw.good());
    double worst = 0;
    for (int i = 0; i < vocab; ++i) {
        const double err =
            std::fabs(double(lastPromptLogits[std::size_t(i)]) - want[std::size_t(i)]);
        // The reference accumulates in double; the engine's matvecs in double lanes, BF16
        // through float blocks (k3/kernels.hpp).
        worst = std::max(worst, err / (1e-4 + 1e-4 * std::fabs(want[std::size_t(i)])));
    }
    qInfo("worst last-prompt logit error: %.4fx tolerance", worst);
    QVERIFY2(worst <= 1.0,
             qPrintable(QStringLiteral("worst logit error %1x tolerance").arg(worst)));

    // Greedy decoding from a fresh state: prefill, then one token at a time.
    const std::vector<int> wantGreedy =
        expected.at("greedy").at("incremental").get<std::vector<int>>();
    k3::InferenceState inc = model.newState();
    for (int id : prompt) model.forward(inc, id, logits);
    std::vector<int> got;
    for (std::size_t i = 0; i < wantGreedy.size(); ++i) {
        const int next = k3::argmax(logits);
        got.push_back(next);
        model.forward(inc, next, logits);
    }
    QCOMPARE(got, wantGreedy);
    QCOMPARE(inc.length(), int(prompt.size() + wantGreedy.size()));

    // reset() gives a fresh conversation: the same first prediction again.
    inc.reset();
    for (int id : prompt) model.forward(inc, id, logits);
    QCOMPARE(k3::argmax(logits), wantGreedy.front());
    k3::resetKernelPath();
}

void TestModelGates::refusesMissingTensor() {
    QTemporaryDir dir;
    const QString src = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a");
    for (const QString& f : QDir(src).entryList(QDir::Files))
        QVERIFY(QFile::copy(src + QLatin1Char('/') + f, dir.filePath(f)));
    // Drop one tensor from the index: the model must name it instead of guessing.
    json index = readJson(dir.filePath(QStringLiteral("model.safetensors.index.json")));
    index["weight_map"].erase("language_model.model.layers.3.self_attn.kv_b_proj.weight");
    std::ofstream(dir.filePath(QStringLiteral("model.safetensors.index.json")).toStdString())
        << index.dump();
    try {
        k3::Model::load(dir.path().toStdString());
        QFAIL("a checkpoint without kv_b_proj loaded");
    } catch (const std::exception& e) {
        QVERIFY2(QString::fromUtf8(e.what()).contains(
                     QStringLiteral("layers.3.self_attn.kv_b_proj.weight")),
                 e.what());
    }
}

void TestModelGates::layerLimitIsValidated() {
    const std::string dir = K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a";
    const k3::LaunchConfig config{.modelDir = dir};
    const k3::Model two = k3::Model::load(config, {.layerLimit = 2});
    QCOMPARE(two.layersBound(), 2);
    try {
        k3::Model::load(config, {.layerLimit = 99});
        QFAIL("a layer limit past num_hidden_layers was accepted");
    } catch (const k3::ModelError& e) {
        // The engine's words, not a front end's flag (the CLI says --layers itself).
        QCOMPARE(QString::fromUtf8(e.what()),
                 QString("the layer limit 99 is outside 1..14 (num_hidden_layers in %1/config.json)")
                     .arg(QString::fromStdString(dir)));
    }
}

QTEST_GUILESS_MAIN(TestModelGates)
#include "tst_model_gates.moc"
