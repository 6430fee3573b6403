// `k3 MODEL_DIR --image FILE ...`: images through the executable, against the PyTorch
// reference on the tiny vision checkpoint (tests/fixtures/vision/k3_tiny_vl).
#include "JsonFile.hpp"
#include "K3Process.hpp"
#include "ServeTestSupport.hpp"

#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include <cmath>
#include <fstream>

#include <k3/tokenizer.hpp>
#include <k3/vision.hpp>

namespace {

const QString kVision = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/vision/");
const QString kModel = kVision + QStringLiteral("k3_tiny_vl");

nlohmann::json testCase(const char* name) {
    const nlohmann::json expected = readJsonFile(kModel + "/vision_expected.json");
    for (const nlohmann::json& c : expected.at("cases"))
        if (c.at("name") == name) return c;
    return {};
}

QString idList(const std::vector<int>& ids) {
    QStringList parts;
    for (int id : ids) parts << QString::number(id);
    return parts.join(QLatin1Char(','));
}

} // namespace

class TestK3Image : public QObject {
    Q_OBJECT
private slots:
    void idsWithAnImageGiveReferenceIdsAndLogits();
    void promptTextFollowsTheImagePrompts();
    void badImagesAndTextOnlyModelsAreUsageErrors();
    void serveAcceptsImageDataUrls();
};

void TestK3Image::idsWithAnImageGiveReferenceIdsAndLogits() {
    const nlohmann::json c = testCase("one");
    QVERIFY(c.is_object());
    const auto prompt = c.at("prompt_ids").get<std::vector<int>>();
    const QString image =
        kVision + "images/" + QString::fromStdString(c.at("images")[0].at("image"));
    QTemporaryDir tmp;
    const QString logits = tmp.filePath("logits.f32");
    const K3Run r = runK3({kModel, "--image", image, "--ids", idList(prompt), "--gen", "8", "--out",
                           tmp.filePath("run.json"), "--dump-logits", logits});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    QVERIFY2(r.out.contains(QStringLiteral("83x67 read at 83x67: 9 prompt positions")),
             qPrintable(r.out));
    const nlohmann::json report = readJsonFile(tmp.filePath("run.json"));
    QCOMPARE(report.at("ids").get<std::vector<int>>(), c.at("greedy").get<std::vector<int>>());
    QCOMPARE(report.at("prompt").at("positions").get<int>(), c.at("expanded_length").get<int>());
    QCOMPARE(report.at("prompt").at("images")[0].at("positions").get<int>(), 9);
    // The tower's rule in the run report: this machine holds the tiny tower (124,160 B,
    // tst_vision::memoryPlanCountsTheTower) next to the chunk, so it was kept.
    const nlohmann::json& vision = report.at("vision");
    QCOMPARE(vision.at("tower_bytes").get<std::uint64_t>(), std::uint64_t(124160));
    QCOMPARE(vision.at("rule").get<std::string>(), std::string("resident"));
    QCOMPARE(vision.at("held_bytes").get<std::uint64_t>(), std::uint64_t(124160));
    QCOMPARE(vision.at("peak_bytes").get<std::uint64_t>(), std::uint64_t(124160));
    QCOMPARE(vision.at("loads").get<int>(), 1);
    QCOMPARE(vision.at("releases").get<int>(), 0);

    // The first step's logits against the reference (tst_model_gates' tolerance).
    QFile got(logits), want(kModel + "/" + QString::fromStdString(c.at("files").at("last_logits")));
    QVERIFY(got.open(QIODevice::ReadOnly) && want.open(QIODevice::ReadOnly));
    const QByteArray g = got.readAll(), w = want.readAll();
    QCOMPARE(g.size(), w.size());
    const auto* gf = reinterpret_cast<const float*>(g.constData());
    const auto* wf = reinterpret_cast<const float*>(w.constData());
    double worst = 0;
    for (qsizetype i = 0; i < w.size() / qsizetype(sizeof(float)); ++i)
        worst =
            std::max(worst, std::fabs(double(gf[i]) - wf[i]) / (1e-4 + 1e-4 * std::fabs(wf[i])));
    QVERIFY2(worst <= 1.0, qPrintable(QString::number(worst)));
}

void TestK3Image::promptTextFollowsTheImagePrompts() {
    const nlohmann::json c = testCase("two");
    QStringList args{kModel};
    std::vector<k3::ImagePlan> plans;
    // One limit for every image: 4 patches cuts the 97x61 image (48) and the 50x37 one.
    for (const nlohmann::json& im : c.at("images")) {
        args << "--image" << kVision + "images/" + QString::fromStdString(im.at("image"));
        plans.push_back(k3::planImage(im.at("size")[0], im.at("size")[1], 4));
    }
    args << "--image-patch-limit"
         << "4";
    QTemporaryDir tmp;
    args << "--prompt"
         << "Compare <|media_pad|>"
         << "--gen"
         << "2"
         << "--out" << tmp.filePath("run.json");
    const K3Run r = runK3(args);
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    const nlohmann::json report = readJsonFile(tmp.filePath("run.json"));
    // The image prompts with their markers, then the text as text: a typed
    // "<|media_pad|>" is not a pad.
    const k3::Tokenizer tok = k3::Tokenizer::fromDirectory(kModel.toStdString());
    std::vector<k3::TokenId> want;
    for (const k3::ImagePlan& p : plans) {
        const auto ids = tok.encodeWithSpecial(k3::imagePrompt(p));
        want.insert(want.end(), ids.begin(), ids.end());
    }
    const auto text = tok.encode("Compare <|media_pad|>");
    want.insert(want.end(), text.begin(), text.end());
    QCOMPARE(report.at("prompt").at("ids").get<std::vector<k3::TokenId>>(), want);
    QCOMPARE(report.at("prompt").at("positions").get<int>(),
             int(want.size()) - 2 + plans[0].tokens() + plans[1].tokens());
}

void TestK3Image::badImagesAndTextOnlyModelsAreUsageErrors() {
    K3Run r = runK3({kModel, "--image", kVision + "preprocess.json", "--prompt", "x"});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains(QStringLiteral("preprocess.json: not a PNG, JPEG or WebP image")),
             qPrintable(r.err));
    r = runK3({kModel, "--image", kVision + "images/missing.png", "--prompt", "x"});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains(QStringLiteral("missing.png")), qPrintable(r.err));
    r = runK3({QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a"), "--image",
               kVision + "images/rgb_1x1.png", "--prompt", "x"});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains(QStringLiteral("text-only checkpoint")), qPrintable(r.err));
    r = runK3({kModel, "--image", kVision + "images/rgb_1x1.png", "--chat"});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains(QStringLiteral("--image is for a batch run")), qPrintable(r.err));
}

// k3 serve: an image_url part with a data: URL is read like the CLI's image (the usage
// counts its positions); an http URL and a text-only model are 400s.
void TestK3Image::serveAcceptsImageDataUrls() {
    const nlohmann::json c = testCase("one");
    QFile file(kVision + "images/" + QString::fromStdString(c.at("images")[0].at("image")));
    QVERIFY(file.open(QIODevice::ReadOnly));
    const QByteArray dataUrl = "data:image/jpeg;base64," + file.readAll().toBase64();
    const auto request = [&](const QByteArray& url) {
        return R"({"messages":[{"role":"user","content":[{"type":"image_url","image_url":{"url":")" +
               url +
               R"("}},{"type":"text","text":"What is in this picture?"}]}],)"
               R"("thinking":{"type":"disabled"},"temperature":0,"max_tokens":8})";
    };
    servetest::Server s = servetest::startServe({}, kModel);
    QVERIFY2(s.port > 0, qPrintable(s.log));
    servetest::Answer a =
        servetest::exchange(s.port, "POST", "/v1/chat/completions", request(dataUrl));
    QVERIFY2(a.status == 200, a.body.constData());
    const QJsonObject usage = a.json().value("usage").toObject();
    // The reference's prompt: 45 ids with one pad, the pad expanded to the image's 9 rows.
    QCOMPARE(usage.value("prompt_tokens").toInt(), c.at("expanded_length").get<int>());
    QCOMPARE(usage.value("completion_tokens").toInt(), 8);
    a = servetest::exchange(s.port, "POST", "/v1/chat/completions",
                            request("https://example.com/a.jpg"));
    QCOMPARE(a.status, 400);
    QVERIFY2(a.body.contains("does not fetch images"), a.body.constData());
    QCOMPARE(servetest::stopServe(s), 0);

    servetest::Server textOnly = servetest::startServe();
    QVERIFY2(textOnly.port > 0, qPrintable(textOnly.log));
    a = servetest::exchange(textOnly.port, "POST", "/v1/chat/completions", request(dataUrl));
    QCOMPARE(a.status, 400);
    QVERIFY2(a.body.contains("text-only checkpoint"), a.body.constData());
    QCOMPARE(servetest::stopServe(textOnly), 0);
}

QTEST_GUILESS_MAIN(TestK3Image)
#include "tst_k3image.moc"
