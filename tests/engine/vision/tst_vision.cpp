// Image input against its references: the preprocessing against Pillow's canvases byte
// for byte (tests/fixtures/vision/preprocess.json), the tower, merge and projector
// against the PyTorch reference on the tiny vision checkpoint (k3_tiny_vl), and bad
// images refused with a message naming the file and the problem.
#include <QTest>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <fstream>

#include <k3/kernels.hpp>
#include <k3/model.hpp>
#include <k3/safetensors.hpp>
#include <k3/session.hpp>
#include <k3/vision.hpp>

using nlohmann::json;

namespace {

const std::string kVisionDir = K3_SOURCE_DIR "/tests/fixtures/vision/";

json readJson(const std::string& path) {
    std::ifstream in(path);
    return json::parse(in);
}

std::vector<char> readBytes(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

std::vector<float> readF32(const std::string& path) {
    const std::vector<char> b = readBytes(path);
    std::vector<float> out(b.size() / sizeof(float));
    std::memcpy(out.data(), b.data(), out.size() * sizeof(float));
    return out;
}

std::uint64_t fnv1a64(const std::vector<std::uint8_t>& data) {
    std::uint64_t h = 0xcbf29ce484222325ull;
    for (std::uint8_t b : data) h = (h ^ b) * 0x100000001b3ull;
    return h;
}

std::span<const std::byte> asBytes(const std::vector<char>& v) {
    return std::as_bytes(std::span<const char>(v.data(), v.size()));
}

// The message of the ImageError `f` throws ("" when it throws none).
template <typename F> QString imageErrorOf(F&& f) {
    try {
        f();
    } catch (const k3::ImageError& e) {
        return QString::fromStdString(e.what());
    }
    return {};
}

// A PNG chunk with its CRC (the bomb's header must pass libpng's CRC check).
std::string pngChunk(const char* type, const std::string& body) {
    std::string data = std::string(type, 4) + body;
    std::uint32_t crc = 0xFFFFFFFFu;
    for (unsigned char c : data) {
        crc ^= c;
        for (int k = 0; k < 8; ++k) crc = (crc >> 1) ^ (0xEDB88320u & (0u - (crc & 1u)));
    }
    crc ^= 0xFFFFFFFFu;
    const auto be32 = [](std::uint32_t v) {
        return std::string{char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
    };
    return be32(std::uint32_t(body.size())) + data + be32(crc);
}

} // namespace

class TestVision : public QObject {
    Q_OBJECT
private slots:
    void sizePlanMatchesTheReleaseVectors();
    void preprocessingMatchesPillow_data();
    void preprocessingMatchesPillow();
    void towerMatchesReference_data();
    void towerMatchesReference();
    void imagePromptCarriesTheOriginalSize();
    void promptWithImagesMatchesReference_data();
    void promptWithImagesMatchesReference();
    void imagesNeedATowerAndOnePadEach();
    void chatWithImagesMatchesReference();
    void badImagesAreRefusedByName();
    void configIsCheckedAndTextOnlyIsSaid();
    void memoryPlanCountsTheTower();
    void towerIsReleasedWhenThePlanCannotHoldIt();
    void heldStateIsReusedOnlyForTheSameImage();
};

void TestVision::sizePlanMatchesTheReleaseVectors() {
    // vision.md section 6 (rtp-llm's vectors and the formula).
    struct Case {
        int w, h, limit, rw, rh, pw, ph, tokens;
    };
    const Case cases[] = {
        {3585, 3585, 65536, 3585, 3585, 3612, 3612, 16641},
        {28, 28, 3, 24, 24, 28, 28, 1},
        {100000, 100, 65536, 7167, 7, 7168, 28, 256}, // 100000 * 0.07168 = 7167.999...
        {225, 223, 65536, 225, 223, 252, 224, 72},
        {640, 480, 65536, 640, 480, 644, 504, 414},
        {1920, 1080, 65536, 1920, 1080, 1932, 1092, 2691},
        {3024, 4032, 65536, 3024, 4032, 3024, 4032, 15552},
        {1, 1, 65536, 1, 1, 28, 28, 1},
    };
    for (const Case& c : cases) {
        const k3::ImagePlan p = k3::planImage(c.w, c.h, c.limit);
        QCOMPARE(p.resizedWidth, c.rw);
        QCOMPARE(p.resizedHeight, c.rh);
        QCOMPARE(p.paddedWidth, c.pw);
        QCOMPARE(p.paddedHeight, c.ph);
        QCOMPARE(p.tokens(), c.tokens);
    }
}

void TestVision::preprocessingMatchesPillow_data() {
    QTest::addColumn<int>("index");
    const json cases = readJson(kVisionDir + "preprocess.json").at("cases");
    for (std::size_t i = 0; i < cases.size(); ++i) {
        const std::string name = cases[i].at("image").get<std::string>() + " limit " +
                                 std::to_string(cases[i].at("patch_limit").get<int>());
        QTest::newRow(name.c_str()) << int(i);
    }
}

void TestVision::preprocessingMatchesPillow() {
    QFETCH(int, index);
    const json c = readJson(kVisionDir + "preprocess.json").at("cases").at(std::size_t(index));
    const k3::DecodedImage image =
        k3::readImageFile(kVisionDir + "images/" + c.at("image").get<std::string>());
    QCOMPARE(image.width, c.at("size")[0].get<int>());
    QCOMPARE(image.height, c.at("size")[1].get<int>());
    const k3::PreparedImage p = k3::prepareImage(image, c.at("patch_limit").get<int>());
    QCOMPARE(p.plan.resizedWidth, c.at("resized")[0].get<int>());
    QCOMPARE(p.plan.resizedHeight, c.at("resized")[1].get<int>());
    QCOMPARE(p.plan.paddedWidth, c.at("padded")[0].get<int>());
    QCOMPARE(p.plan.paddedHeight, c.at("padded")[1].get<int>());
    QCOMPARE(p.plan.tokens(), c.at("tokens").get<int>());
    if (c.contains("canvas_fnv1a64")) {
        char hex[17];
        std::snprintf(hex, sizeof hex, "%016llx",
                      static_cast<unsigned long long>(fnv1a64(p.canvas)));
        QCOMPARE(QString::fromLatin1(hex), QString::fromStdString(c.at("canvas_fnv1a64")));
        return;
    }
    const std::vector<char> want = readBytes(kVisionDir + c.at("canvas").get<std::string>());
    QCOMPARE(p.canvas.size(), want.size());
    for (std::size_t i = 0; i < want.size(); ++i)
        if (p.canvas[i] != std::uint8_t(want[i])) {
            const std::size_t px = i / 3, w = std::size_t(p.plan.paddedWidth);
            QFAIL(qPrintable(QStringLiteral("canvas differs from Pillow's at x %1 y %2 channel %3: "
                                            "%4, Pillow %5")
                                 .arg(px % w)
                                 .arg(px / w)
                                 .arg(i % 3)
                                 .arg(p.canvas[i])
                                 .arg(std::uint8_t(want[i]))));
        }
}

void TestVision::towerMatchesReference_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<bool>("scalar");
    for (const char* name : {"one", "two"}) {
        QTest::newRow((std::string(name) + " simd").c_str()) << QString::fromLatin1(name) << false;
        QTest::newRow((std::string(name) + " scalar").c_str()) << QString::fromLatin1(name) << true;
    }
}

void TestVision::towerMatchesReference() {
    QFETCH(QString, name);
    QFETCH(bool, scalar);
    if (scalar)
        k3::setKernelPath(k3::KernelPath::Scalar);
    else
        k3::resetKernelPath();
    const std::string dir = kVisionDir + "k3_tiny_vl/";
    json testCase;
    const json expected = readJson(dir + "vision_expected.json");
    for (const json& c : expected.at("cases"))
        if (c.at("name") == name.toStdString()) testCase = c;
    QVERIFY(!testCase.is_null());
    const auto file = [&](const char* key) {
        return dir + testCase.at("files").at(key).get<std::string>();
    };

    std::vector<k3::PreparedImage> images;
    std::vector<float> pixels;
    for (const json& im : testCase.at("images")) {
        images.push_back(k3::prepareImage(
            k3::readImageFile(kVisionDir + "images/" + im.at("image").get<std::string>()),
            im.at("patch_limit").get<int>()));
        pixels.insert(pixels.end(), images.back().patches.begin(), images.back().patches.end());
    }
    // The pixels the tower reads are the reference's, bit for bit.
    const std::vector<float> wantPixels = readF32(file("pixel_values"));
    QCOMPARE(pixels.size(), wantPixels.size());
    QVERIFY(std::memcmp(pixels.data(), wantPixels.data(), pixels.size() * sizeof(float)) == 0);

    const auto tower = k3::VisionTower::loadFromDirectory(dir);
    QVERIFY(tower.has_value());
    const k3::VisionOutputs out = tower->run(images);
    int rows = 0;
    for (int r : testCase.at("image_rows").get<std::vector<int>>()) rows += r;
    QCOMPARE(out.projectorRows.size(), std::size_t(rows) * std::size_t(tower->config().textHidden));
    QCOMPARE(tower->encode(images), out.projectorRows);

    // Tolerance: 16 units of 2^-24 (8 float ulp) of the reference row's largest value.
    // The only step whose order differs from the reference is the BF16 product: the
    // reference rounds each dot product once from float64, the engine's BF16 matmat sums
    // float blocks first (2-4 ulp from exact, k3/kernels.hpp); everything else (RoPE,
    // softmax, GELUs, norms, the position grid) is computed in the reference's stated
    // order. Measured: at most 4.8 units on these cases; a RoPE x/y swap gives 1.9e6.
    const auto compare = [&](const char* key, const std::vector<float>& got, int width,
                             double ulps) {
        const std::vector<float> want = readF32(file(key));
        if (got.size() != want.size()) {
            qWarning("%s: %zu values, the reference has %zu", key, got.size(), want.size());
            return false;
        }
        double worst = 0, worstAbs = 0;
        for (std::size_t r = 0; r < want.size() / std::size_t(width); ++r) {
            double rowMax = 0;
            for (int i = 0; i < width; ++i)
                rowMax = std::max(rowMax, std::fabs(double(want[r * width + i])));
            for (int i = 0; i < width; ++i) {
                const double err = std::fabs(double(got[r * width + i]) - want[r * width + i]);
                worstAbs = std::max(worstAbs, err);
                worst = std::max(worst, err / (rowMax * std::ldexp(1.0, -24)));
            }
        }
        qInfo("%s: max abs error %.3g, worst %.1f units of 2^-24 x row max (bound %.0f)", key,
              worstAbs, worst, ulps);
        return worst <= ulps;
    };
    const int C = tower->config().hidden;
    constexpr double kUnits = 16;
    QVERIFY(compare("tower_rows", out.towerRows, C, kUnits));
    QVERIFY(compare("merged_rows", out.mergedRows, 4 * C, kUnits));
    QVERIFY(compare("projector_rows", out.projectorRows, tower->config().textHidden, kUnits));
    k3::resetKernelPath();
}

void TestVision::imagePromptCarriesTheOriginalSize() {
    const k3::ImagePlan p = k3::planImage(3024, 4032);
    QCOMPARE(
        k3::imagePrompt(p),
        std::string("<|media_begin|>image 3024x4032<|media_content|><|media_pad|><|media_end|>"));
}

namespace {

struct ImageCase {
    json expected;
    std::vector<k3::PreparedImage> images;
};

ImageCase imageCase(const QString& name) {
    ImageCase c;
    const json all = readJson(kVisionDir + "k3_tiny_vl/vision_expected.json");
    for (const json& t : all.at("cases"))
        if (t.at("name") == name.toStdString()) c.expected = t;
    for (const json& im : c.expected.at("images"))
        c.images.push_back(k3::prepareImage(
            k3::readImageFile(kVisionDir + "images/" + im.at("image").get<std::string>()),
            im.at("patch_limit").get<int>()));
    return c;
}

} // namespace

void TestVision::promptWithImagesMatchesReference_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<int>("chunk");
    QTest::addColumn<bool>("expertCache");
    for (const char* name : {"one", "two"})
        for (const auto& [chunk, cache] :
             {std::pair{0, false}, std::pair{1, false}, std::pair{5, true}, std::pair{16, false}})
            QTest::newRow(qPrintable(QStringLiteral("%1 chunk %2%3")
                                         .arg(QLatin1String(name))
                                         .arg(chunk)
                                         .arg(cache ? QStringLiteral(" expert cache") : QString())))
                << QString::fromLatin1(name) << chunk << cache;
}

// The language model fed the projector's rows at the pad positions, against the
// reference's logits and greedy ids; the same ids and logit bits at every chunk size and
// with the routed experts behind a 2-slot cache.
void TestVision::promptWithImagesMatchesReference() {
    QFETCH(QString, name);
    QFETCH(int, chunk);
    QFETCH(bool, expertCache);
    const ImageCase c = imageCase(name);
    const std::string dir = kVisionDir + "k3_tiny_vl";
    k3::LaunchConfig o;
    o.modelDir = dir;
    o.prefillChunk = chunk;
    k3::LaunchDiagnostics d;
    if (expertCache) d.expertCacheSlots = 2;
    k3::Session session = k3::Session::open(o, d);
    const auto prompt = c.expected.at("prompt_ids").get<std::vector<k3::TokenId>>();
    // The template's render, re-encoded by the engine's tokenizer, is the reference's.
    QCOMPARE(session.tokenizer().encodeWithSpecial(c.expected.at("prompt_text").get<std::string>()),
             prompt);
    k3::GenerateOptions g;
    g.maxTokens = 0; // the prompt only: its last logits stay in lastLogits()
    g.images = c.images;
    const k3::GenerateResult prefilled = session.generateIds(prompt, g);
    QVERIFY(prefilled.valid());
    QCOMPARE(prefilled.promptTokens, c.expected.at("expanded_length").get<int>());
    const std::vector<float> sessionLast(session.lastLogits().begin(), session.lastLogits().end());
    g.maxTokens = 8;
    const k3::GenerateResult r = session.generateIds(prompt, g);
    QCOMPARE(r.reusedPositions, 0); // the whole prompt was held: not a strict prefix
    QCOMPARE(r.ids, c.expected.at("greedy").get<std::vector<k3::TokenId>>());

    // Feeding the expanded prompt through the model in one chunk: the argmax at every
    // position and the last logits against the reference.
    const k3::Model& model = session.model();
    const int V = model.config().vocabSize, E = model.config().hiddenSize;
    const auto tower = k3::VisionTower::loadFromDirectory(dir);
    const std::vector<float> rows = tower->encode(c.images);
    const int pad = tower->config().mediaPadId;
    std::vector<int> expanded, positions;
    std::size_t image = 0;
    for (const int id : prompt) {
        const int n = id == pad ? c.images[image++].plan.tokens() : 1;
        for (int k = 0; k < n; ++k) {
            if (id == pad) positions.push_back(int(expanded.size()));
            expanded.push_back(id);
        }
    }
    QCOMPARE(positions.size() * std::size_t(E), rows.size());
    k3::InferenceState state = model.newState();
    std::vector<float> logits(expanded.size() * std::size_t(V));
    QVERIFY(
        !model.forward(state, expanded, logits, false, k3::InputRows{positions, rows}).nonFinite);
    const auto wantArgmax = c.expected.at("teacher_forcing_argmax").get<std::vector<int>>();
    QCOMPARE(wantArgmax.size(), expanded.size());
    for (std::size_t t = 0; t < expanded.size(); ++t)
        QCOMPARE(k3::argmax(std::span<const float>(logits).subspan(t * V, std::size_t(V))),
                 wantArgmax[t]);
    const std::vector<float> want =
        readF32(dir + "/" + c.expected.at("files").at("last_logits").get<std::string>());
    QCOMPARE(want.size(), std::size_t(V));
    double worst = 0;
    const float* last = logits.data() + (expanded.size() - 1) * std::size_t(V);
    for (int i = 0; i < V; ++i)
        // tst_model_gates' tolerance: the reference accumulates in double, the engine's
        // BF16 products through float blocks (k3/kernels.hpp).
        worst = std::max(worst, std::fabs(double(last[i]) - want[std::size_t(i)]) /
                                    (1e-4 + 1e-4 * std::fabs(want[std::size_t(i)])));
    qInfo("worst last-prompt logit error: %.4fx tolerance", worst);
    QVERIFY(worst <= 1.0);
    // The session's chunked prefill (any chunk size, experts resident or cached) gave the
    // one-chunk pass's last-prompt logits bit for bit.
    QCOMPARE(sessionLast.size(), std::size_t(V));
    QVERIFY(std::memcmp(sessionLast.data(), last, std::size_t(V) * sizeof(float)) == 0);
}

void TestVision::imagesNeedATowerAndOnePadEach() {
    const ImageCase c = imageCase(QStringLiteral("two"));
    k3::GenerateOptions g;
    g.maxTokens = 1;
    g.images = c.images;
    {
        k3::LaunchConfig o;
        o.modelDir = K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a";
        k3::LaunchDiagnostics d;
        d.loadTokenizer = false;
        k3::Session textOnly = k3::Session::open(o, d);
        try {
            textOnly.generateIds(std::vector<k3::TokenId>{1, 2, 3}, g);
            QFAIL("a text-only checkpoint read images");
        } catch (const k3::ImageError& e) {
            QVERIFY2(QString::fromUtf8(e.what()).contains(QStringLiteral("text-only")), e.what());
        }
    }
    k3::LaunchConfig o;
    o.modelDir = kVisionDir + "k3_tiny_vl";
    k3::Session session = k3::Session::open(o);
    auto prompt = c.expected.at("prompt_ids").get<std::vector<k3::TokenId>>();
    g.images.pop_back(); // two pads, one image
    try {
        session.generateIds(prompt, g);
        QFAIL("two pads were read with one image");
    } catch (const k3::ModelError& e) {
        QVERIFY2(QString::fromUtf8(e.what()).contains(QStringLiteral("2 <|media_pad|>")) &&
                     QString::fromUtf8(e.what()).contains(QStringLiteral("1 image")),
                 e.what());
    }
    // A text-only follow-up after an image prompt is read whole, not continued from the
    // image's state: the same ids as a fresh session.
    g.images = c.images;
    g.maxTokens = 4;
    session.generateIds(prompt, g);
    const std::vector<k3::TokenId> text(prompt.begin(), prompt.begin() + 5);
    g.images.clear();
    const k3::GenerateResult again = session.generateIds(text, g);
    QCOMPARE(again.reusedPositions, 0);
    k3::Session fresh = k3::Session::open(o);
    QCOMPARE(fresh.generateIds(text, g).ids, again.ids);
}

// A user message carrying the images (placeholders where the parts were): the official
// template's render, and the reference's greedy answer.
void TestVision::chatWithImagesMatchesReference() {
    for (const char* name : {"one", "two"}) {
        const ImageCase c = imageCase(QString::fromLatin1(name));
        k3::ChatMessage user;
        user.role = k3::ChatRole::User;
        for (const k3::PreparedImage& image : c.images) {
            user.images.push_back({std::make_shared<const k3::PreparedImage>(image)});
            user.content += k3::kImagePlaceholder;
        }
        user.content +=
            c.expected.at("prompt_text")
                .get<std::string>()
                .substr(c.expected.at("prompt_text").get<std::string>().rfind("<|media_end|>") +
                        13);
        user.content.erase(user.content.find("<|close|>"));
        k3::GenerateOptions g;
        g.render.thinking = false;
        g.maxTokens = 8;
        QCOMPARE(k3::renderChat({user}, g.render), c.expected.at("prompt_text").get<std::string>());
        k3::LaunchConfig o;
        o.modelDir = kVisionDir + "k3_tiny_vl";
        k3::Session session = k3::Session::open(o);
        const k3::GenerateResult r = session.chat({user}, g);
        QCOMPARE(r.promptTokens, c.expected.at("expanded_length").get<int>());
        QCOMPARE(r.ids, c.expected.at("greedy").get<std::vector<k3::TokenId>>());
    }
}

void TestVision::badImagesAreRefusedByName() {
    const std::string images = kVisionDir + "images/";
    // Not an image at all: the config file.
    QString e = imageErrorOf([&] { k3::readImageFile(kVisionDir + "preprocess.json"); });
    QVERIFY2(e.contains(QStringLiteral("preprocess.json: not a PNG, JPEG or WebP image")),
             qPrintable(e));
    e = imageErrorOf([&] { k3::decodeImage({}, "empty.png"); });
    QVERIFY2(e.contains(QStringLiteral("empty.png")) && e.contains(QStringLiteral("empty")),
             qPrintable(e));

    // Truncated: each format cut in the middle of its image data.
    for (const char* name : {"rgb_97x61.png", "photo_83x67.jpg", "photo_60x44.webp"}) {
        std::vector<char> bytes = readBytes(images + name);
        bytes.resize(bytes.size() / 2);
        e = imageErrorOf([&] { k3::decodeImage(asBytes(bytes), name); });
        QVERIFY2(
            e.startsWith(QString::fromLatin1(name) + QStringLiteral(": ")) &&
                (e.contains(QStringLiteral("truncated")) || e.contains(QStringLiteral("damaged"))),
            qPrintable(e));
    }
    // Corrupt: a flipped byte inside the PNG's compressed data (CRC check).
    {
        std::vector<char> bytes = readBytes(images + "rgb_97x61.png");
        bytes[bytes.size() / 2] ^= 0x5a;
        e = imageErrorOf([&] { k3::decodeImage(asBytes(bytes), "flipped.png"); });
        QVERIFY2(e.startsWith(QStringLiteral("flipped.png: damaged PNG")), qPrintable(e));
    }
    // A decompression bomb: a valid header claiming 100000 x 100000 pixels, refused before
    // a pixel is decoded (the data that follows would be a few KB of zlib).
    {
        std::string ihdr;
        for (std::uint32_t v : {100000u, 100000u})
            ihdr += std::string{char(v >> 24), char(v >> 16), char(v >> 8), char(v)};
        ihdr += std::string{8, 2, 0, 0, 0}; // 8-bit RGB
        const std::string png = "\x89PNG\r\n\x1a\n" + pngChunk("IHDR", ihdr);
        const std::vector<char> bytes(png.begin(), png.end());
        e = imageErrorOf([&] { k3::decodeImage(asBytes(bytes), "bomb.png"); });
        QVERIFY2(e.startsWith(QStringLiteral("bomb.png: 100000x100000 pixels")) &&
                     e.contains(QStringLiteral("decompression bomb")),
                 qPrintable(e));
    }
    // A 1x1 image and a 100000 x 100 one are valid (preprocessingMatchesPillow checks
    // their pixels); a zero-size plan is not.
    e = imageErrorOf([] { k3::planImage(0, 10); });
    QVERIFY2(e.contains(QStringLiteral("0x10")), qPrintable(e));
    e = imageErrorOf([] { k3::planImage(10, 10, 0); });
    QVERIFY2(e.contains(QStringLiteral("patch limit")), qPrintable(e));
}

// Issue 33: a held state is reused for a prompt with images only where its image rows
// are the prompt's. Two images of one size give the same ids (the same pads): the other
// image's state is not continued, the same image's is.
void TestVision::heldStateIsReusedOnlyForTheSameImage() {
    const ImageCase c = imageCase(QStringLiteral("one")); // photo_83x67.jpg: 9 positions
    k3::DecodedImage inverted = k3::readImageFile(
        kVisionDir + "images/" + c.expected.at("images")[0].at("image").get<std::string>());
    for (std::uint8_t& v : inverted.pixels) v = std::uint8_t(255 - v);
    const k3::PreparedImage other = k3::prepareImage(inverted);
    QCOMPARE(other.plan.tokens(), c.images[0].plan.tokens());
    QVERIFY(other.patches != c.images[0].patches);

    const auto prompt = c.expected.at("prompt_ids").get<std::vector<k3::TokenId>>();
    std::vector<k3::TokenId> longer = prompt; // a follow-up: the prompt and three ids more
    longer.insert(longer.end(), prompt.begin(), prompt.begin() + 3);
    k3::LaunchConfig o;
    o.modelDir = kVisionDir + "k3_tiny_vl";
    k3::GenerateOptions a, b;
    a.maxTokens = b.maxTokens = 6;
    a.images = c.images;
    b.images = {other};
    const auto fresh = [&](const std::vector<k3::TokenId>& ids, const k3::GenerateOptions& g) {
        k3::Session alone = k3::Session::open(o);
        return alone.generateIds(ids, g).ids;
    };
    const std::vector<k3::TokenId> wantA = fresh(longer, a), wantB = fresh(longer, b);
    QVERIFY(wantA != wantB); // the test tells the images apart

    k3::Session session = k3::Session::open(o);
    const k3::GenerateResult first = session.generateIds(prompt, a);
    QCOMPARE(first.promptTokens, 54); // 46 ids, the pad expanded to 9
    QCOMPARE(first.reusedPositions, 0);
    // The same image: the prompt's snapshot (54 positions) is continued.
    const k3::GenerateResult same = session.generateIds(longer, a);
    QCOMPARE(same.promptTokens, 57);
    QCOMPARE(same.reusedPositions, 54);
    QCOMPARE(same.prefillPositions, 3);
    QCOMPARE(same.ids, wantA);
    // The other image, the same ids: read again, and the other image's answer.
    const k3::GenerateResult swapped = session.generateIds(longer, b);
    QCOMPARE(swapped.promptTokens, 57);
    QCOMPARE(swapped.reusedPositions, 0);
    QCOMPARE(swapped.prefillPositions, 57);
    QCOMPARE(swapped.ids, wantB);
    // And back: the first image's state is gone, so it is read again too.
    const k3::GenerateResult back = session.generateIds(longer, a);
    QCOMPARE(back.reusedPositions, 0);
    QCOMPARE(back.ids, wantA);
    // The same image once more: its snapshot (the whole 57-position prompt) holds it.
    std::vector<k3::TokenId> third = longer;
    third.push_back(prompt[3]);
    const k3::GenerateResult again = session.generateIds(third, a);
    QCOMPARE(again.reusedPositions, 57);
    QCOMPARE(again.ids, fresh(third, a));
}

// Issue 33: the memory plan left out the tower's weights (0.85 GiB in the release).
void TestVision::memoryPlanCountsTheTower() {
    // BF16 matrices as stored: patch_embed 32x3x14x14 (37,632 B), per block wqkv 144x32,
    // wo 32x48, fc0 64x32, fc1 32x64 (20,480 B, 2 blocks), projector 128x128 and 32x128
    // (40,960 B): 119,552 B; widened to F32: the 6x5x32 position grid (3,840 B) and six
    // 32-wide norms (768 B). 124,160 B in all.
    const k3::Checkpoint ckpt = k3::Checkpoint::open(kVisionDir + "k3_tiny_vl");
    QCOMPARE(k3::VisionTower::plannedBytes(ckpt), std::uint64_t(124160));
    const auto tower = k3::VisionTower::loadFromDirectory(kVisionDir + "k3_tiny_vl");
    QVERIFY(tower.has_value());
    QCOMPARE(tower->weightBytes(), std::uint64_t(124160)); // what it holds, loaded

    k3::LaunchConfig o;
    o.modelDir = kVisionDir + "k3_tiny_vl";
    const k3::Model vl = k3::Model::load(o);
    const k3::MemoryPlan& plan = vl.memoryPlan();
    QCOMPARE(plan.visionBytes, std::uint64_t(124160));
    QCOMPARE(plan.total(), plan.trunkBytes() + plan.trunkDecodeBytes + plan.modelBytes +
                               plan.residentExpertBytes + plan.cacheBytes() + plan.stateBytes +
                               plan.bufferBytes + plan.kvBytes + plan.draftBytes + 124160);
    const std::string text = plan.format();
    QVERIFY2(text.find("vision tower") != std::string::npos &&
                 text.find("tower + projector, loaded on the first image") != std::string::npos,
             text.c_str());

    // A text-only checkpoint: nothing counted, no line.
    o.modelDir = K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a";
    const k3::Model textOnly = k3::Model::load(o);
    QCOMPARE(textOnly.memoryPlan().visionBytes, std::uint64_t(0));
    QVERIFY(textOnly.memoryPlan().format().find("vision tower") == std::string::npos);
}

// Issue 33's release rule (MemoryPlan::visionResident): at a memory that holds the tower
// next to everything but the prefill chunk's state, the tower takes turns with the chunk:
// loaded for each image prompt, released once its rows are computed. The chunk keeps its
// size, the plan counts max(tower, chunk) instead of their sum, and the answers are the
// bits of a session whose tower stayed resident.
void TestVision::towerIsReleasedWhenThePlanCannotHoldIt() {
    k3::LaunchConfig o;
    o.modelDir = kVisionDir + "k3_tiny_vl";
    o.prefillChunk = 16;
    k3::Session resident = k3::Session::open(o);
    const k3::MemoryPlan& kept = resident.model().memoryPlan();
    QVERIFY(kept.visionResident); // this machine holds it all
    QCOMPARE(kept.visionBytes, std::uint64_t(124160));
    QCOMPARE(kept.chunkPositions, 16);
    QVERIFY(kept.chunkBytes > 0 && kept.chunkBytes < kept.visionBytes);

    // 95% of the memory available one byte short of the resident plan.
    k3::LaunchDiagnostics d;
    d.availableBytes = std::uint64_t(double(kept.total() - 1) / k3::kPlanMaxShareOfAvailable);
    const auto limit = std::uint64_t(double(d.availableBytes) * k3::kPlanMaxShareOfAvailable);
    QVERIFY(limit < kept.total());
    k3::Session transient = k3::Session::open(o, d); // not refused: the plan fits
    const k3::MemoryPlan& plan = transient.model().memoryPlan();
    QVERIFY(!plan.visionResident);
    QCOMPARE(plan.available, d.availableBytes);
    QCOMPARE(plan.chunkPositions, 16); // the chunk kept its size: it uses the tower's turn
    QCOMPARE(plan.chunkBytes, kept.chunkBytes);
    QCOMPARE(plan.visionBytes, std::uint64_t(124160));
    QCOMPARE(plan.visionPlanBytes(), plan.visionBytes - plan.chunkBytes);
    QCOMPARE(plan.total(), kept.total() - plan.chunkBytes); // max(tower, chunk), not the sum
    QVERIFY(plan.total() <= limit);
    QVERIFY2(plan.format().find("TRANSIENT: 124.16 KB loaded per image prompt") !=
                 std::string::npos,
             plan.format().c_str());

    // Nothing is loaded before the first image.
    QCOMPARE(transient.memoryReport().vision.loads, 0);
    QCOMPARE(transient.memoryReport().vision.heldBytes, std::uint64_t(0));

    const auto run = [](k3::Session& session, const ImageCase& c, int maxTokens) {
        k3::GenerateOptions g;
        g.maxTokens = maxTokens;
        g.images = c.images;
        const k3::GenerateResult r =
            session.generateIds(c.expected.at("prompt_ids").get<std::vector<k3::TokenId>>(), g);
        return std::pair{
            r.ids, std::vector<float>(session.lastLogits().begin(), session.lastLogits().end())};
    };
    const auto sameBits = [](const std::vector<float>& a, const std::vector<float>& b) {
        return a.size() == b.size() && !a.empty() &&
               std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
    };
    int image = 0;
    for (const char* name : {"one", "two"}) { // the second prompt reloads the tower
        const ImageCase c = imageCase(QString::fromLatin1(name));
        image += 1;
        // The prompt's last logits, then 8 greedy ids: bit for bit the resident run's.
        const auto [idsKept, logitsKept] = run(resident, c, 0);
        const auto [idsFreed, logitsFreed] = run(transient, c, 0);
        QVERIFY(sameBits(logitsKept, logitsFreed));
        const auto [genKept, lastKept] = run(resident, c, 8);
        const auto [genFreed, lastFreed] = run(transient, c, 8);
        QCOMPARE(genFreed, c.expected.at("greedy").get<std::vector<k3::TokenId>>());
        QCOMPARE(genFreed, genKept);
        QVERIFY(sameBits(lastKept, lastFreed));

        const k3::MemoryReport freed = transient.memoryReport();
        QCOMPARE(freed.vision.heldBytes, std::uint64_t(0)); // released after use
        QCOMPARE(freed.vision.peakBytes, plan.visionBytes); // held whole while used
        QCOMPARE(freed.vision.loads, 2 * image);            // two prompts per image case
        QCOMPARE(freed.vision.releases, 2 * image);
        const k3::MemoryReport held = resident.memoryReport();
        QCOMPARE(held.vision.heldBytes, kept.visionBytes);
        QCOMPARE(held.vision.peakBytes, kept.visionBytes);
        QCOMPARE(held.vision.loads, 1);
        QCOMPARE(held.vision.releases, 0);
        QVERIFY2(freed.format().find("TRANSIENT (released after each image prompt's rows): 0 B "
                                     "held now, peak 124.16 KB") != std::string::npos,
                 freed.format().c_str());
        QVERIFY2(held.format().find("RESIDENT (kept after its first image): 124.16 KB held now") !=
                     std::string::npos,
                 held.format().c_str());
    }
}

void TestVision::configIsCheckedAndTextOnlyIsSaid() {
    // A checkpoint without vision_config has no tower (text-only).
    QVERIFY(!k3::VisionTower::loadFromDirectory(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a"));
    json cfg = readJson(kVisionDir + "k3_tiny_vl/config.json");
    const auto config = k3::parseVisionConfig(cfg.dump(), "config.json");
    QVERIFY(config.has_value());
    QCOMPARE(config->headDim, 16);
    QCOMPARE(config->qkvWidth, 48);
    QCOMPARE(config->hidden, 32);
    QCOMPARE(config->posHeight, 6);
    QCOMPARE(config->posWidth, 5);
    QVERIFY(config->mediaPadId > 0);
    // K2.5's projector and interpolation are refused by name, not run as K3's.
    for (const auto& [key, value] : {std::pair{"mm_projector_type", "patchmerger"},
                                     std::pair{"pos_emb_interpolation_mode", "bicubic"},
                                     std::pair{"norm_type", "layernorm"}}) {
        json bad = cfg;
        bad["vision_config"][key] = value;
        const QString e = imageErrorOf([&] { k3::parseVisionConfig(bad.dump(), "config.json"); });
        QVERIFY2(e.contains(QString::fromLatin1(key)) && e.contains(QString::fromLatin1(value)),
                 qPrintable(e));
    }
    // A missing tensor is named.
    const k3::Checkpoint ckpt = k3::Checkpoint::open(kVisionDir + "k3_tiny_vl");
    k3::VisionConfig wrong = *config;
    wrong.layers = 3;
    const QString e = imageErrorOf([&] { k3::VisionTower::load(ckpt, wrong); });
    QVERIFY2(e.contains(QStringLiteral("vision_tower.encoder.blocks.2.norm0.weight")),
             qPrintable(e));
}

QTEST_GUILESS_MAIN(TestVision)
#include "tst_vision.moc"
