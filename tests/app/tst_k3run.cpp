// `k3 MODEL_DIR ...` batch runs and `k3 download` usage, on the committed tiny checkpoints.
#include "JsonFile.hpp"
#include "K3Process.hpp"

#include <QDir>
#include <QFile>
#include <QRegularExpression>
#include <QTemporaryDir>
#include <QTest>

#include <cmath>
#include <filesystem>
#include <fstream>
#include <sys/stat.h>
#include <unistd.h>

#include <k3/safetensors.hpp>
#include <k3/tokenizer.hpp>

namespace fs = std::filesystem;

namespace {

const QString kModels = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/");

QString idList(const std::vector<int>& ids) {
    QStringList parts;
    for (int id : ids) parts << QString::number(id);
    return parts.join(QLatin1Char(','));
}

// A writable copy of a tiny checkpoint, to break one file of it.
QString copyModel(const QTemporaryDir& tmp, const QString& name) {
    const fs::path to = fs::path(tmp.path().toStdString()) / name.toStdString();
    fs::copy(fs::path((kModels + name).toStdString()), to, fs::copy_options::recursive);
    return QString::fromStdString(to.string());
}

} // namespace

class TestK3Run : public QObject {
    Q_OBJECT
private slots:
    void idsRunGivesReferenceGreedyIds_data();
    void idsRunGivesReferenceGreedyIds();
    void dumpLogitsMatchesReference();
    void promptTextIsTokenizedAsIs();
    void usageErrorsExitTwo_data();
    void usageErrorsExitTwo();
    void unreadableConfigExitsTwoNamingFile();
    void missingTensorExitsOne();
    void laterMemoryFlagWins();
    void downloadUsageErrors();
    void packThenRunFromTheTrunk_data();
    void packThenRunFromTheTrunk();
    void packRefusesAFolderWithoutCheckpoint();
    void downloadUnreachableEndpointFailsClearly();
    void outRefusesDevicesFifosFoldersAndReadOnlyFiles();
    void outThroughASymlinkReplacesTheTargetAndKeepsItsMode();
    void outDashWritesOnlyTheReportToStdout();
    void contextPastMaxPositionEmbeddingsIsRefused();
    void outNeverFollowsAnotherUsersLinkInASharedFolder();
    void messagesNeverCarryEscapeSequences();
    void aTrunkOfOtherWeightsIsRefused();
};

void TestK3Run::idsRunGivesReferenceGreedyIds_data() {
    QTest::addColumn<QString>("model");
    QTest::newRow("k3_tiny_a") << QStringLiteral("k3_tiny_a");
    QTest::newRow("k3_tiny_b") << QStringLiteral("k3_tiny_b");
}

void TestK3Run::packThenRunFromTheTrunk_data() {
    QTest::addColumn<bool>("compress");
    QTest::newRow("raw (format 2)") << false;
    QTest::newRow("--compress (format 3)") << true;
}

// k3 pack (raw or --compress), then the same ids when the trunk streams from trunk.bin
// and the routed experts go through the cache.
void TestK3Run::packThenRunFromTheTrunk() {
    QFETCH(bool, compress);
    const QString dir = kModels + QStringLiteral("k3_tiny_b");
    const nlohmann::json expected = readJsonFile(dir + "/expected.json");
    QTemporaryDir tmp;
    const QString trunk = tmp.filePath("trunk");
    const K3Run packed =
        compress ? runK3({"pack", "--compress", dir, trunk}) : runK3({"pack", dir, trunk});
    QVERIFY2(packed.exitCode == 0, qPrintable(packed.err));
    QVERIFY2(packed.out.startsWith("packed 9 layers into " + trunk + "/trunk.bin"),
             qPrintable(packed.out));
    QCOMPARE(packed.out.contains(QRegularExpression(
                 QStringLiteral("compressed: the layers take [0-9.]+ MB of [0-9.]+ MB raw "
                                "\\(0\\.[0-8][0-9]{3} of the size\\)"))),
             compress);
    QCOMPARE(readJsonFile(trunk + "/trunk.json").at("version").get<int>(), compress ? 3 : 2);
    QVERIFY(QFile::exists(trunk + "/trunk.json"));
    const QString out = tmp.filePath("run.json");
    const K3Run r = runK3({dir, "--trunk", trunk, "--trunk-gb", "0.1", "--cache-gb", "0.1", "--ids",
                           idList(expected.at("prompt_ids").get<std::vector<int>>()), "--gen", "20",
                           "--out", out});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    QCOMPARE(readJsonFile(out).at("ids").get<std::vector<int>>(),
             expected.at("greedy").at("incremental").get<std::vector<int>>());
    QCOMPARE(readJsonFile(out).at("plan").at("pin_mode").get<std::string>(),
             std::string("measured"));
    // --pin-mode reaches the plan: "compressed" keeps a compressed trunk's pinned layers
    // compressed (the plan says it was asked); the ids are the same either way.
    for (const char* mode : {"raw", "compressed"}) {
        const K3Run pinned =
            runK3({dir, "--trunk", trunk, "--trunk-gb", "0.1", "--pin-mode", mode, "--ids",
                   idList(expected.at("prompt_ids").get<std::vector<int>>()), "--gen", "20",
                   "--out", out});
        QVERIFY2(pinned.exitCode == 0, qPrintable(pinned.err));
        const nlohmann::json report = readJsonFile(out);
        QCOMPARE(report.at("ids").get<std::vector<int>>(),
                 expected.at("greedy").at("incremental").get<std::vector<int>>());
        QCOMPARE(report.at("plan").at("pin_mode").get<std::string>(), std::string(mode));
        const bool asked = compress && std::string(mode) == "compressed";
        QCOMPARE(pinned.out.contains("pinned layers kept compressed (asked)"), asked);
    }
    // A budget below one layer: the engine's numbers, then the CLI's own advice (its flag).
    const K3Run small = runK3({dir, "--trunk", trunk, "--trunk-gb", "0.00001", "--ids", "5"});
    QCOMPARE(small.exitCode, 1);
    QVERIFY2(small.err.contains(QRegularExpression(QStringLiteral(
                 "cannot hold one ring slot .* Raise --trunk-gb to at least [0-9.]+ [kKM]B"))),
             qPrintable(small.err));
}

void TestK3Run::packRefusesAFolderWithoutCheckpoint() {
    QTemporaryDir tmp;
    const K3Run r = runK3({"pack", tmp.path(), tmp.filePath("trunk")});
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(r.err.startsWith("k3 pack: "), qPrintable(r.err));
    QVERIFY(!QFile::exists(tmp.filePath("trunk/trunk.json")));
}

void TestK3Run::idsRunGivesReferenceGreedyIds() {
    QFETCH(QString, model);
    const QString dir = kModels + model;
    const nlohmann::json expected = readJsonFile(dir + "/expected.json");
    const auto prompt = expected.at("prompt_ids").get<std::vector<int>>();
    const auto greedy = expected.at("greedy").at("incremental").get<std::vector<int>>();
    QCOMPARE(greedy.size(), std::size_t(20));

    QTemporaryDir tmp;
    const QString out = tmp.filePath("run.json");
    const K3Run r =
        runK3({dir, "--ids", idList(prompt), "--gen", "20", "--incremental", "--out", out});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    QVERIFY2(r.out.contains("PEAK RSS for the whole run"), qPrintable(r.out));

    const nlohmann::json report = readJsonFile(out);
    QVERIFY(report.is_object());
    QCOMPARE(report.at("ids").get<std::vector<int>>(), greedy);
    QCOMPARE(report.at("prompt").at("ids").get<std::vector<int>>(), prompt);
    QCOMPARE(report.at("prompt").at("tokens").get<int>(), int(prompt.size()));
    QCOMPARE(report.at("valid").get<bool>(), true);
    QCOMPARE(report.at("dropped_experts").get<int>(), 0);
    QCOMPARE(report.at("non_finite").get<bool>(), false);
    QCOMPARE(report.at("cancelled").get<bool>(), false);
    QCOMPARE(report.at("options").at("gen").get<int>(), 20);
    QCOMPARE(report.at("options").at("prompt_source").get<std::string>(), std::string("ids"));
    QCOMPARE(report.at("options").at("sampling").at("greedy").get<bool>(), true);
    QCOMPARE(report.at("model").at("layer_map").get<std::string>(),
             expected.at("layer_map").get<std::string>());
    QCOMPARE(report.at("model").at("layers_bound").get<int>(),
             int(expected.at("layer_map").get<std::string>().size()));
    QCOMPARE(report.at("plan").at("streaming").get<bool>(), false);
    QVERIFY(report.at("plan").at("resident_weight_bytes").get<std::uint64_t>() > 100000);
    QVERIFY(report.at("peak_rss_bytes").get<std::uint64_t>() > 1000000);
    // One row per generated token, in order, and their pieces make up the text.
    const auto& tokens = report.at("tokens");
    QCOMPARE(tokens.size(), std::size_t(20));
    std::string pieces;
    double seconds = 0;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
        QCOMPARE(tokens[i].at("step").get<std::size_t>(), i);
        QCOMPARE(tokens[i].at("id").get<int>(), greedy[i]);
        // Every token takes time, and the tokens' (disjoint) times fit in the decode's.
        QVERIFY(tokens[i].at("seconds").get<double>() > 0.0);
        seconds += tokens[i].at("seconds").get<double>();
        pieces += tokens[i].at("text").get<std::string>();
    }
    QVERIFY(seconds <= report.at("timing").at("decode_seconds").get<double>());
    const k3::Tokenizer tok = k3::Tokenizer::fromDirectory(dir.toStdString());
    const std::vector<k3::TokenId> ids(greedy.begin(), greedy.end());
    const std::string text = k3::sanitizeUtf8(tok.decode(ids));
    QCOMPARE(report.at("text").get<std::string>(), text);
    QCOMPARE(pieces, text);
}

void TestK3Run::dumpLogitsMatchesReference() {
    const QString dir = kModels + "k3_tiny_a";
    const nlohmann::json expected = readJsonFile(dir + "/expected.json");
    const auto prompt = expected.at("prompt_ids").get<std::vector<int>>();
    QTemporaryDir tmp;
    const QString logits = tmp.filePath("logits.f32");
    const K3Run r = runK3({dir, "--ids", idList(prompt), "--gen", "3", "--out",
                           tmp.filePath("run.json"), "--dump-logits", logits});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    QFile got(logits), want(dir + "/first_step_logits.f32");
    QVERIFY(got.open(QIODevice::ReadOnly));
    QVERIFY(want.open(QIODevice::ReadOnly));
    const QByteArray g = got.readAll(), w = want.readAll();
    QCOMPARE(g.size(), qsizetype(896 * sizeof(float)));
    QCOMPARE(g.size(), w.size());
    const auto* gf = reinterpret_cast<const float*>(g.constData());
    const auto* wf = reinterpret_cast<const float*>(w.constData());
    float maxAbs = 0;
    for (int i = 0; i < 896; ++i) maxAbs = std::max(maxAbs, std::fabs(wf[i]));
    for (int i = 0; i < 896; ++i)
        QVERIFY2(std::fabs(gf[i] - wf[i]) <= 1e-4f * maxAbs,
                 qPrintable(QString("logit %1: %2 vs reference %3").arg(i).arg(gf[i]).arg(wf[i])));
    // The first step's argmax is the first greedy id.
    QCOMPARE(int(std::max_element(gf, gf + 896) - gf),
             expected.at("greedy").at("incremental").at(0).get<int>());
}

void TestK3Run::promptTextIsTokenizedAsIs() {
    const QString dir = kModels + "k3_tiny_b";
    // Marker spellings typed in a prompt stay text; non-ASCII comes verbatim from a file.
    const std::string text = "What is MXFP4? <|open|> caf\xc3\xa9";
    const k3::Tokenizer tok = k3::Tokenizer::fromDirectory(dir.toStdString());
    const std::vector<k3::TokenId> want = tok.encode(text);
    QVERIFY(want.size() > 5);
    QTemporaryDir tmp;
    QFile file(tmp.filePath("prompt.txt"));
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.write(QByteArray::fromStdString(text));
    file.close();
    const QString out1 = tmp.filePath("a.json"), out2 = tmp.filePath("b.json");
    const K3Run a =
        runK3({dir, "--prompt", QString::fromStdString(text), "--gen", "2", "--out", out1});
    QVERIFY2(a.exitCode == 0, qPrintable(a.err));
    const K3Run b =
        runK3({dir, "--prompt-file", file.fileName(), "--tok", dir, "--gen", "2", "--out", out2});
    QVERIFY2(b.exitCode == 0, qPrintable(b.err));
    for (const QString& out : {out1, out2}) {
        const nlohmann::json report = readJsonFile(out);
        QCOMPARE(report.at("prompt").at("ids").get<std::vector<k3::TokenId>>(), want);
        QCOMPARE(report.at("prompt").at("text").get<std::string>(), text);
        QCOMPARE(report.at("ids").size(), std::size_t(2));
    }
    QCOMPARE(readJsonFile(out1).at("options").at("prompt_source").get<std::string>(),
             std::string("prompt"));
    QCOMPARE(readJsonFile(out2).at("options").at("prompt_source").get<std::string>(),
             std::string("prompt-file"));
    QVERIFY2(a.out.contains("--- generated text ---"), qPrintable(a.out));
}

void TestK3Run::usageErrorsExitTwo_data() {
    QTest::addColumn<QStringList>("args");
    QTest::addColumn<QString>("message");
    const QString dir = kModels + "k3_tiny_a";
    QTest::newRow("no prompt") << QStringList{dir, "--gen", "2"} << "no prompt given";
    QTest::newRow("two prompts") << QStringList{dir, "--prompt", "hi", "--ids", "1,2"}
                                 << "more than one prompt";
    QTest::newRow("bad ids") << QStringList{dir, "--ids", "1,x,3"} << "\"x\" (item 2)";
    QTest::newRow("empty id") << QStringList{dir, "--ids", "1,,3"} << "(item 2)";
    QTest::newRow("id outside vocab") << QStringList{dir, "--ids", "1,896"} << "896 (item 2)";
    QTest::newRow("gen 0") << QStringList{dir, "--ids", "1", "--gen", "0"} << "--gen";
    QTest::newRow("gen too large") << QStringList{dir, "--ids", "1", "--gen", "4097"} << "--gen";
    QTest::newRow("layers too many")
        << QStringList{dir, "--ids", "1", "--layers", "99"} << "--layers 99 is outside 1..14";
    QTest::newRow("no model dir") << QStringList{"--ids", "1"} << "MODEL_DIR is required";
    QTest::newRow("prompt longer than the context")
        << QStringList{dir, "--ids", "1,2,3,4,5,6,7,8,9,10,11,12,13,14,15,16,17,18,19,20",
                       "--context", "16"}
        << "the conversation is 20 tokens and the context holds 16 positions";
    QTest::newRow("spec not a number") << QStringList{dir, "--ids", "1", "--spec", "many"}
                                       << "--spec many is not auto or a number";
    // 0 is the plan's chunk (k3::kPrefillChunkRange, as the app's setting).
    QTest::newRow("prefill chunk 4097")
        << QStringList{dir, "--ids", "1", "--prefill-chunk", "4097"} << "--prefill-chunk";
    QTest::newRow("model dir missing")
        << QStringList{"/nonexistent/k3", "--ids", "1"} << "/nonexistent/k3 is not a folder";
    QTest::newRow("missing prompt file")
        << QStringList{dir, "--prompt-file", "/nonexistent/p.txt"} << "/nonexistent/p.txt";
    QTest::newRow("unknown preset")
        << QStringList{dir, "--ids", "1", "--preset", "huge"} << "--preset";
    QTest::newRow("unknown pin mode")
        << QStringList{dir, "--ids", "1", "--pin-mode", "fast"}
        << "--pin-mode \"fast\" is not a pin mode: use raw (pinned layers decoded once, at "
           "load), compressed";
    QTest::newRow("unknown pin mode (chat)") << QStringList{dir, "--chat", "--pin-mode", "zstd"}
                                             << "--pin-mode \"zstd\" is not a pin mode";
    QTest::newRow("unknown pin mode (serve)")
        << QStringList{"serve", dir, "--pin-mode", "RAW"} << "--pin-mode \"RAW\" is not a pin mode";
    QTest::newRow("history without chat")
        << QStringList{dir, "--ids", "1", "--history", "h.jsonl"} << "--history needs --chat";
    QTest::newRow("prompt with chat")
        << QStringList{dir, "--chat", "--prompt", "hi"} << "--prompt is for a batch run";
    QTest::newRow("tokenizer dir without files")
        << QStringList{dir, "--prompt", "hi", "--tok", "/tmp"} << "lacks tiktoken.model";
}

void TestK3Run::usageErrorsExitTwo() {
    QFETCH(QStringList, args);
    QFETCH(QString, message);
    QTemporaryDir tmp;
    const K3Run r = runK3(args, {}, QProcessEnvironment::systemEnvironment(), tmp.path());
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains(message), qPrintable(r.err));
    QVERIFY2(r.err.count(QLatin1Char('\n')) <= 2, qPrintable(r.err)); // one paragraph
    QVERIFY(!QFile::exists(tmp.filePath("k3_run.json")));
}

void TestK3Run::unreadableConfigExitsTwoNamingFile() {
    QTemporaryDir tmp;
    const QString dir = copyModel(tmp, "k3_tiny_a");
    QFile config(dir + "/config.json");
    QVERIFY(config.open(QIODevice::WriteOnly | QIODevice::Truncate));
    config.write("{\"text_config\": {\"hidden_size\": 64}}");
    config.close();
    const K3Run r = runK3({dir, "--ids", "1,2", "--out", tmp.filePath("run.json")});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains(dir + "/config.json"), qPrintable(r.err));
    QVERIFY2(r.err.contains("num_hidden_layers"), qPrintable(r.err));
    QVERIFY(!QFile::exists(tmp.filePath("run.json")));
}

void TestK3Run::missingTensorExitsOne() {
    QTemporaryDir tmp;
    const QString dir = copyModel(tmp, "k3_tiny_a");
    // Drop one tensor from the index: the binder must name it, not guess.
    const std::string indexPath = (dir + "/model.safetensors.index.json").toStdString();
    nlohmann::json index = readJsonFile(QString::fromStdString(indexPath));
    const std::string name = "language_model.model.norm.weight";
    QVERIFY(index.at("weight_map").contains(name));
    index["weight_map"].erase(name);
    std::ofstream(indexPath) << index.dump();
    const K3Run r = runK3({dir, "--ids", "1,2", "--out", tmp.filePath("run.json")});
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(r.err.contains("cannot load the model in " + dir), qPrintable(r.err));
    QVERIFY2(r.err.contains(QString::fromStdString(name)), qPrintable(r.err));
}

void TestK3Run::laterMemoryFlagWins() {
    const QString dir = kModels + "k3_tiny_a";
    QTemporaryDir tmp;
    const QString out1 = tmp.filePath("a.json"), out2 = tmp.filePath("b.json");
    const QString trunk = tmp.filePath("trunk");
    QCOMPARE(runK3({"pack", dir, trunk}).exitCode, 0);
    K3Run r = runK3({dir, "--ids", "1,2", "--gen", "1", "--preset", "desktop", "--cache-gb", "40",
                     "--trunk", trunk, "--out", out1});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    r = runK3({dir, "--ids", "1,2", "--gen", "1", "--cache-gb", "40", "--preset", "desktop",
               "--out", out2});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    const nlohmann::json a = readJsonFile(out1).at("plan"), b = readJsonFile(out2).at("plan");
    QCOMPARE(a.at("preset").get<std::string>(), std::string("desktop"));
    QCOMPARE(a.at("trunk_gb").get<double>(), 16.0);
    QCOMPARE(a.at("cache_gb").get<double>(), 40.0);
    QCOMPARE(a.at("trunk_dir").get<std::string>(), trunk.toStdString());
    QCOMPARE(a.at("streaming").get<bool>(), true);
    QCOMPARE(b.at("trunk_gb").get<double>(), 16.0);
    QCOMPARE(b.at("cache_gb").get<double>(), 10.0);
    QCOMPARE(b.at("streaming").get<bool>(), false);
}

void TestK3Run::downloadUsageErrors() {
    K3Run r = runK3({"download"});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("DIR"), qPrintable(r.err));
    r = runK3({"download", "/tmp/x", "--parallel", "0"});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("--parallel"), qPrintable(r.err));
    r = runK3({"download", "/tmp/x", "--layers", "-3"});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("--layers"), qPrintable(r.err));
}

void TestK3Run::downloadUnreachableEndpointFailsClearly() {
    QTemporaryDir tmp;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert("HF_TOKEN", "hf_secretTokenValue123");
    const K3Run r =
        runK3({"download", tmp.filePath("model"), "--endpoint", "http://127.0.0.1:1"}, {}, env);
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(r.err.startsWith("k3: error: download failed: "), qPrintable(r.err));
    QVERIFY2(r.err.contains("127.0.0.1:1"), qPrintable(r.err));
    QVERIFY2(r.out.contains("using HF_TOKEN from the environment"), qPrintable(r.out));
    QVERIFY(!r.out.contains("hf_secretTokenValue123"));
    QVERIFY(!r.err.contains("hf_secretTokenValue123"));
}

void TestK3Run::outRefusesDevicesFifosFoldersAndReadOnlyFiles() {
    // --out used to write a temp file and rename it over the path: a device (as root,
    // /dev/null became a regular file holding the report), a FIFO or a read-only file was
    // replaced. Stand-ins the test creates: a link to /dev/null, a FIFO, a folder, a
    // read-only file. Each is refused before the model loads (exit 2), naming the path.
    QTemporaryDir tmp;
    const QString dir = kModels + "k3_tiny_a";
    const QString devLink = tmp.filePath("null.json");
    QVERIFY(QFile::link(QStringLiteral("/dev/null"), devLink));
    const QString fifo = tmp.filePath("pipe.json");
    QCOMPARE(::mkfifo(QFile::encodeName(fifo).constData(), 0600), 0);
    const QString folder = tmp.filePath("folder");
    QVERIFY(QDir().mkpath(folder));
    const QString readOnly = tmp.filePath("ro.json");
    {
        QFile f(readOnly);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("keep");
    }
    QVERIFY(QFile::setPermissions(readOnly, QFileDevice::ReadOwner | QFileDevice::ReadGroup |
                                                QFileDevice::ReadOther));
    const QList<std::pair<QString, QString>> cases{
        {devLink, devLink + " (a link to /dev/null): it is a character device; k3 writes only "
                            "regular files"},
        {fifo, fifo + ": it is a FIFO (named pipe); k3 writes only regular files"},
        {folder, folder + ": it is a directory; k3 writes only regular files; give a file name"},
        {readOnly, readOnly + ": the file is read-only (mode 0444); make it writable or choose "
                              "another file"},
    };
    for (const auto& [out, why] : cases) {
        const K3Run r = runK3({dir, "--ids", "1,2", "--gen", "1", "--out", out});
        QCOMPARE(r.exitCode, 2);
        QCOMPARE(r.err, "k3: error: --out: cannot write " + why + "\n");
        QVERIFY2(!r.out.contains("STEP"), qPrintable(r.out)); // refused before the run
    }
    // --dump-logits follows the same rule.
    const K3Run logits = runK3({dir, "--ids", "1,2", "--gen", "1", "--out",
                                tmp.filePath("run.json"), "--dump-logits", fifo});
    QCOMPARE(logits.exitCode, 2);
    QCOMPARE(logits.err, "k3: error: --dump-logits: cannot write " + fifo +
                             ": it is a FIFO (named pipe); k3 writes only regular files\n");
    struct stat st {};
    QCOMPARE(::lstat(QFile::encodeName(devLink).constData(), &st), 0);
    QVERIFY(S_ISLNK(st.st_mode));
    QCOMPARE(::stat("/dev/null", &st), 0);
    QVERIFY(S_ISCHR(st.st_mode));
    QCOMPARE(::stat(QFile::encodeName(fifo).constData(), &st), 0);
    QVERIFY(S_ISFIFO(st.st_mode));
    QFile ro(readOnly);
    QVERIFY(ro.open(QIODevice::ReadOnly));
    QCOMPARE(ro.readAll(), QByteArray("keep"));
    QCOMPARE(QDir(folder).entryList(QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden),
             QStringList());
}

void TestK3Run::outThroughASymlinkReplacesTheTargetAndKeepsItsMode() {
    QTemporaryDir tmp;
    QVERIFY(QDir().mkpath(tmp.filePath("reports")));
    const QString target = tmp.filePath("reports/run.json");
    {
        QFile f(target);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("old");
    }
    QCOMPARE(::chmod(QFile::encodeName(target).constData(), 0644), 0);
    const QString link = tmp.filePath("latest.json");
    QVERIFY(QFile::link(QStringLiteral("reports/run.json"), link));
    const K3Run r = runK3({kModels + "k3_tiny_a", "--ids", "1,2", "--gen", "2", "--out", link});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    struct stat st {};
    QCOMPARE(::lstat(QFile::encodeName(link).constData(), &st), 0);
    QVERIFY(S_ISLNK(st.st_mode)); // still the link
    QCOMPARE(::stat(QFile::encodeName(target).constData(), &st), 0);
    QCOMPARE(int(st.st_mode & 07777), 0644); // the target's mode kept
    const nlohmann::json report = readJsonFile(target);
    QVERIFY(report.is_object());
    QCOMPARE(report["ids"].size(), std::size_t(2));
    QCOMPARE(QDir(tmp.filePath("reports")).entryList(QDir::Files | QDir::Hidden),
             QStringList{"run.json"});
}

// Issue 35 item 10: another user's link planted in a sticky world-writable folder (/tmp)
// is not followed: refused before the model loads (exit 2), its target unchanged.
void TestK3Run::outNeverFollowsAnotherUsersLinkInASharedFolder() {
    if (::geteuid() != 0) QSKIP("needs root: the test gives a link to another user (lchown)");
    QTemporaryDir tmp;
    const QString shared = tmp.filePath("sticky");
    QVERIFY(QDir().mkpath(shared));
    QCOMPARE(::chmod(QFile::encodeName(shared).constData(), 01777), 0);
    const QString victim = tmp.filePath("victim.conf");
    {
        QFile f(victim);
        QVERIFY(f.open(QIODevice::WriteOnly));
        f.write("root's own\n");
    }
    const QString planted = shared + "/run.json";
    QVERIFY(QFile::link(victim, planted));
    QCOMPARE(::lchown(QFile::encodeName(planted).constData(), 65534, 65534), 0);
    const K3Run r = runK3({kModels + "k3_tiny_a", "--ids", "1,2", "--gen", "2", "--out", planted});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("--out: cannot write " + planted + ": " + planted +
                            " is a symbolic link owned by another user (uid 65534) in the shared "
                            "folder " +
                            shared),
             qPrintable(r.err));
    QFile f(victim);
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(f.readAll(), QByteArray("root's own\n"));
}

// Issue 35 item 19: max_position_embeddings (4096 in the tiny model) bounds --context.
void TestK3Run::contextPastMaxPositionEmbeddingsIsRefused() {
    const K3Run r =
        runK3({kModels + "k3_tiny_a", "--ids", "1,2", "--gen", "2", "--context", "4097"});
    QCOMPARE(r.exitCode, 1);
    QVERIFY2(r.err.contains("k3_tiny_a/config.json: max_position_embeddings is 4096, a context "
                            "of 4097 positions is longer than the model was trained for; use a "
                            "context of at most 4096 positions"),
             qPrintable(r.err));
    const K3Run ok =
        runK3({kModels + "k3_tiny_a", "--ids", "1,2", "--gen", "2", "--context", "4096"});
    QVERIFY2(ok.exitCode == 0, qPrintable(ok.err));
}

void TestK3Run::outDashWritesOnlyTheReportToStdout() {
    QTemporaryDir tmp;
    const K3Run r = runK3({kModels + "k3_tiny_a", "--ids", "1,2", "--gen", "2", "--out", "-"}, {},
                          QProcessEnvironment::systemEnvironment(), tmp.path());
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    const nlohmann::json report = nlohmann::json::parse(r.out.toStdString(), nullptr, false);
    QVERIFY2(report.is_object(), qPrintable(r.out));
    QCOMPARE(report["ids"].size(), std::size_t(2));
    QCOMPARE(report["options"]["out"].get<std::string>(), std::string("-"));
    QVERIFY2(r.err.contains("STEP"), qPrintable(r.err)); // the table went to stderr
    QVERIFY(!QFile::exists(tmp.filePath("-")));
    QVERIFY(!QFile::exists(tmp.filePath("k3_run.json")));
}

void TestK3Run::messagesNeverCarryEscapeSequences() {
    // A path (or any value) holding an escape sequence is shown, not obeyed: OSC 0 would
    // set the terminal's title, CSI 2J clear the screen.
    QTemporaryDir tmp;
    const QString evil = tmp.filePath(QString::fromUtf8("\x1b]0;pwned\x07\x1b[2J/run.json"));
    const K3Run r = runK3({kModels + "k3_tiny_a", "--ids", "1", "--gen", "1", "--out", evil});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(!r.err.contains(QChar(0x1b)) && !r.err.contains(QChar(0x07)), qPrintable(r.err));
    QVERIFY2(r.err.contains(tmp.path() + "/\\x1b]0;pwned\\x07\\x1b[2J/run.json"),
             qPrintable(r.err));
    // The command-line parser's own errors quote the argument too.
    const K3Run usage = runK3(
        {kModels + "k3_tiny_a", "--ids", "1", "--preset", QString::fromUtf8("\x1b]0;pwned\x07")});
    QCOMPARE(usage.exitCode, 2);
    QVERIFY2(!usage.err.contains(QChar(0x1b)) && !usage.err.contains(QChar(0x07)),
             qPrintable(usage.err));
    QVERIFY2(usage.err.contains("\\x1b]0;pwned\\x07"), qPrintable(usage.err));
}

// The demo's trunk run with a copy of the demo whose lm_head was negated in place (the
// headers untouched): the copy alone gives other ids; with the demo's trunk it is refused,
// not run with the demo's dense weights.
void TestK3Run::aTrunkOfOtherWeightsIsRefused() {
    const QString demo = QStringLiteral(K3_SOURCE_DIR "/resources/demo");
    QTemporaryDir tmp;
    const QString trunk = tmp.filePath("A");
    QCOMPARE(runK3({"pack", demo, trunk}).exitCode, 0);
    const fs::path copy = fs::path(tmp.path().toStdString()) / "b";
    fs::copy(fs::path(demo.toStdString()), copy, fs::copy_options::recursive);
    const k3::Checkpoint ckpt = k3::Checkpoint::open(copy);
    const k3::TensorInfo& head = ckpt.at("language_model.lm_head.weight");
    QCOMPARE(head.dtype, k3::DType::BF16);
    {
        std::fstream f(ckpt.shardPaths()[head.shard],
                       std::ios::in | std::ios::out | std::ios::binary);
        std::vector<char> bytes(head.nbytes);
        f.seekg(std::streamoff(head.offset));
        f.read(bytes.data(), std::streamsize(bytes.size()));
        for (std::size_t i = 1; i < bytes.size(); i += 2) bytes[i] = char(bytes[i] ^ 0x80);
        f.seekp(std::streamoff(head.offset));
        f.write(bytes.data(), std::streamsize(bytes.size()));
        QVERIFY(f.good());
    }
    const QString b = QString::fromStdString(copy.string());
    const QStringList ids{"--ids", "954,261,268,269", "--gen", "8", "--trunk-gb", "0"};
    const auto run = [&](const QStringList& model, const QString& out) {
        const K3Run r = runK3(model + ids + QStringList{"--out", out});
        const nlohmann::json report = readJsonFile(out);
        return std::make_pair(r, report.is_object() ? report.at("ids").get<std::vector<int>>()
                                                    : std::vector<int>{});
    };
    const auto [a, aIds] = run({demo, "--trunk", trunk}, tmp.filePath("a.json"));
    QVERIFY2(a.exitCode == 0, qPrintable(a.err));
    const auto [alone, bIds] = run({b}, tmp.filePath("b.json"));
    QVERIFY2(alone.exitCode == 0, qPrintable(alone.err));
    QCOMPARE(aIds.size(), std::size_t(8));
    QVERIFY(bIds != aIds);

    const auto [mixed, mixedIds] = run({b, "--trunk", trunk}, tmp.filePath("mixed.json"));
    QCOMPARE(mixed.exitCode, 1);
    QVERIFY(mixedIds.empty());
    const QString shard = QString::fromStdString(ckpt.shardPaths()[head.shard].filename().string());
    QVERIFY2(mixed.err.contains("cannot load the model in " + b + ": the trunk in " + trunk +
                                ": this trunk was packed from different weights: re-pack it into a "
                                "new folder; shard " +
                                shard + ", tensor language_model.lm_head.weight (offset " +
                                QString::number(head.offset) + ", " + QString::number(head.nbytes) +
                                " bytes) has XXH3 "),
             qPrintable(mixed.err));
    // The CLI's own words for the remedy: the command, into a new folder of b.
    QVERIFY2(mixed.err.contains(" when packed (k3 pack " + b + " " + b + "/trunk)\n"),
             qPrintable(mixed.err));
}

QTEST_GUILESS_MAIN(TestK3Run)
#include "tst_k3run.moc"
