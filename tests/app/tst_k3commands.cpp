// The commands the README and the user guide show, run through the real `k3` binary
// (docs/user-guide.md "Which test runs each command" points here).
#include "JsonFile.hpp"
#include "K3Process.hpp"
#include "NginxServer.hpp"

#include "k3/session.hpp"

#include <QCryptographicHash>
#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QtTest>

#include <csignal>
#include <fstream>

namespace {

const QString kTiny = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a");
const QString kDemo = QStringLiteral(K3_SOURCE_DIR "/resources/demo");

QString joinIds(const std::vector<k3::TokenId>& ids) {
    QStringList parts;
    for (k3::TokenId id : ids) parts << QString::number(id);
    return parts.join(u',');
}

std::vector<k3::TokenId> idsOf(const nlohmann::json& run) {
    return run.at("ids").get<std::vector<k3::TokenId>>();
}

QProcessEnvironment envWithoutToken() {
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.remove(QStringLiteral("HF_TOKEN"));
    env.remove(QStringLiteral("HF_ENDPOINT"));
    return env;
}

} // namespace

class TestK3Commands : public QObject {
    Q_OBJECT

private slots:
    void initTestCase();
    void doctorTextReportRecommendsAndNamesTheNextCommand();
    void downloadFromAHubThenRunTheDownloadedModel();
    void downloadNeverPrintsTheEndpointsPassword();
    void packThenRunWithPresetLaptop();
    void presetAutoRunsTheReferenceIds();
    void samplingFlagsReachTheEngine();
    void thinkingEffortIsAcceptedAndCheckedByName();
    void demoChatInATerminalAnswers();
    void ctrlCStopsABatchRunWithExit130();

private:
    QTemporaryDir tmp_;
    std::vector<k3::TokenId> prompt_, greedy_;
};

void TestK3Commands::initTestCase() {
    QVERIFY(tmp_.isValid());
    const nlohmann::json expected = readJsonFile(kTiny + "/expected.json");
    prompt_ = expected.at("prompt_ids").get<std::vector<k3::TokenId>>();
    greedy_ = expected.at("greedy").at("incremental").get<std::vector<k3::TokenId>>();
    greedy_.resize(6);
}

// `k3 doctor DIR` (the text report of the Quick start's first real-model step).
void TestK3Commands::doctorTextReportRecommendsAndNamesTheNextCommand() {
    const QString dir = tmp_.path() + "/doctor";
    QVERIFY(QDir().mkpath(dir));
    const K3Run r = runK3({"doctor", dir, "--disk-seconds", "0.2"});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err + r.out));
    QVERIFY2(r.out.contains(QRegularExpression(R"(\[ok\]\s+CPU: )")), qPrintable(r.out));
    QVERIFY2(r.out.contains(QRegularExpression(R"(RAM: [0-9.]+ GB available -> preset \w+)")),
             qPrintable(r.out));
    // The disk line has two forms: the figure at depth 16, or (when depth 1 measured faster,
    // e.g. another program read the disk meanwhile) a disturbed measurement with both.
    QVERIFY2(
        r.out.contains(QRegularExpression(
            R"(Disk speed: ([0-9.]+ [GM]B/s at queue depth 16|the measurement was )"
            R"(disturbed \([0-9.]+ [GM]B/s at queue depth 1 but [0-9.]+ [GM]B/s at depth 16))")),
        qPrintable(r.out));
    QVERIFY2(r.out.contains(QRegularExpression(
                 R"(Recommendation: preset (ultra|laptop|desktop|workstation|server|max)\.)")),
             qPrintable(r.out));
    QVERIFY2(r.out.contains("Next: k3 download " + dir), qPrintable(r.out));
}

// `k3 download DIR` against a local nginx that serves the tiny checkpoint the way the hub
// does (listing with sizes and sha256, resolve/ redirects), then `k3 DIR --ids ...` on it.
void TestK3Commands::downloadFromAHubThenRunTheDownloadedModel() {
    if (NginxServer::findNginx().isEmpty())
        QSKIP("nginx is not installed (packaging/debian-packages.txt lists it)");
    const QString rev = QStringLiteral("89abcdef0123456789abcdef0123456789abcdef");
    const QString www = tmp_.path() + "/hub/www"; // NginxServer serves DIR/www
    QJsonArray siblings;
    QDirIterator it(kTiny, QDir::Files);
    std::map<QString, QByteArray> files;
    while (it.hasNext()) {
        const QString path = it.next();
        const QString name = QFileInfo(path).fileName();
        QFile f(path);
        QVERIFY(f.open(QIODevice::ReadOnly));
        files[name] = f.readAll();
        QJsonObject entry{{"rfilename", name}, {"size", qint64(files[name].size())}};
        if (name.endsWith(".safetensors"))
            entry["lfs"] = QJsonObject{
                {"sha256",
                 QString::fromLatin1(
                     QCryptographicHash::hash(files[name], QCryptographicHash::Sha256).toHex())},
                {"size", qint64(files[name].size())}};
        siblings.append(entry);
        QVERIFY(QDir().mkpath(www + "/blobs"));
        QFile out(www + "/blobs/" + name);
        QVERIFY(out.open(QIODevice::WriteOnly));
        out.write(files[name]);
    }
    QVERIFY(files.count("config.json") == 1);
    QVERIFY(QDir().mkpath(www + "/api/models/k3/tiny/revision"));
    QFile listing(www + "/api/models/k3/tiny/revision/" + rev);
    QVERIFY(listing.open(QIODevice::WriteOnly));
    listing.write(
        QJsonDocument(QJsonObject{{"id", "k3/tiny"}, {"sha", rev}, {"siblings", siblings}})
            .toJson());
    listing.close();

    NginxServer nginx;
    const QString started = nginx.start(tmp_.path() + "/hub", QStringLiteral(R"(
        absolute_redirect off;
        location /api/ { default_type application/json; }
        location ~ ^/k3/[^/]+/resolve/[^/]+/(?<f>.+)$ { return 302 /blobs/$f; }
        location /blobs/ { }
    )"));
    QVERIFY2(started.isEmpty(), qPrintable(started));

    const QString dest = tmp_.path() + "/downloaded";
    const K3Run d = runK3(
        {"download", dest, "--endpoint", nginx.baseUrl(), "--repo", "k3/tiny", "--revision", rev},
        {}, envWithoutToken());
    QVERIFY2(d.exitCode == 0, qPrintable(d.err + d.out));
    for (const auto& [name, bytes] : files) {
        QFile f(dest + "/" + name);
        QVERIFY2(f.open(QIODevice::ReadOnly), qPrintable(name));
        QVERIFY2(f.readAll() == bytes, qPrintable(name + " differs after download"));
    }

    const QString out = tmp_.path() + "/downloaded-run.json";
    const K3Run r = runK3({dest, "--ids", joinIds(prompt_), "--gen", "6", "--out", out});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err + r.out));
    QCOMPARE(idsOf(readJsonFile(out)), greedy_);
}

// Issue 35 item 21: a password in the endpoint's userinfo used to be printed three times
// (the banner, the summary and the error). Port 1 on loopback refuses at once.
void TestK3Commands::downloadNeverPrintsTheEndpointsPassword() {
    const K3Run d = runK3({"download", tmp_.path() + "/userinfo", "--endpoint",
                           "http://bob:s3cret-pw@127.0.0.1:1", "--revision", "main"},
                          {}, envWithoutToken());
    QCOMPARE(d.exitCode, 1);
    QVERIFY2(!(d.out + d.err).contains("s3cret-pw") && !(d.out + d.err).contains("bob"),
             qPrintable(d.out + d.err));
    QVERIFY2(d.out.contains("downloading moonshotai/Kimi-K3 at main from http://127.0.0.1:1 into "),
             qPrintable(d.out));
    QVERIFY2(d.err.contains("k3: error: download failed: http://127.0.0.1:1/api/models/"),
             qPrintable(d.err));
}

// `k3 pack MODEL TRUNK` then `k3 MODEL --trunk TRUNK --preset laptop ... --out run.json`.
void TestK3Commands::packThenRunWithPresetLaptop() {
    const QString trunk = tmp_.path() + "/laptop-trunk";
    const K3Run p = runK3({"pack", kTiny, trunk});
    QVERIFY2(p.exitCode == 0, qPrintable(p.err + p.out));
    QVERIFY(QFile::exists(trunk + "/trunk.json"));
    const QString out = tmp_.path() + "/laptop-run.json";
    const K3Run r = runK3({kTiny, "--trunk", trunk, "--preset", "laptop", "--ids", joinIds(prompt_),
                           "--gen", "6", "--out", out});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err + r.out));
    const nlohmann::json run = readJsonFile(out);
    QCOMPARE(idsOf(run), greedy_);
    QVERIFY2(r.out.contains("PEAK RSS"), qPrintable(r.out));
    QCOMPARE(QString::fromStdString(run.at("plan").at("preset").get<std::string>()),
             QStringLiteral("laptop"));
    // The run report: the plan before, a line per token with its cache hit % and GB read,
    // the cache and trunk summaries and the I/O share after.
    QVERIFY2(
        r.out.contains(QRegularExpression(
            R"((?s)memory plan.*\n\s+expert cache\s+[0-9.]+ [KMG]?B.*\n\s+KV cache\s+[0-9.]+ [KMG]?B)")),
        qPrintable(r.out));
    QVERIFY2(r.out.contains("STEP   TOKEN      SECONDS    TRUE %  GB READ"), qPrintable(r.out));
    QVERIFY2(r.out.contains(QRegularExpression(
                 R"(\n  TRUE hits    : \d+ \([0-9.]+%\) served without a read\n)")),
             qPrintable(r.out));
    QVERIFY2(r.out.contains(QRegularExpression(
                 R"(\n  expert I/O   : (uring|threads), up to 16 reads in flight)")),
             qPrintable(r.out));
    QVERIFY2(r.out.contains("I/O share of wall clock"), qPrintable(r.out));
    QVERIFY2(r.out.contains(QRegularExpression(R"(pinned 14/14 layers)")), qPrintable(r.out));
    const auto& tokens = run.at("tokens");
    QCOMPARE(tokens.size(), std::size_t(6));
    QVERIFY(tokens.at(0).at("gb_read").get<double>() > 0);
    QVERIFY(tokens.at(0).at("cache_true_hit_percent").get<double>() >= 0);
    QVERIFY(tokens.at(0).at("cache_true_hit_percent").get<double>() <= 100);
    QCOMPARE(run.at("trunk").at("pinned_layers").get<int>(), 14);
    QCOMPARE(run.at("trunk").at("total_layers").get<int>(), 14);
    QVERIFY(run.at("cache").at("requests").get<int>() > 0);
    QCOMPARE(run.at("cache").at("true_hits"), run.at("cache").at("resident_hits"));
    QVERIFY(run.at("cache").at("position_uses").get<int>() >=
            run.at("cache").at("requests").get<int>());
    const std::string io = run.at("cache").at("expert_io").at("mode").get<std::string>();
    QVERIFY2(io == "uring" || io == "threads", io.c_str());
    const double share = run.at("io_share").get<double>();
    QVERIFY(share >= 0 && share <= 1);
}

void TestK3Commands::presetAutoRunsTheReferenceIds() {
    const QString out = tmp_.path() + "/auto-run.json";
    const K3Run r =
        runK3({kTiny, "--preset", "auto", "--ids", joinIds(prompt_), "--gen", "6", "--out", out});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err + r.out));
    const nlohmann::json run = readJsonFile(out);
    QCOMPARE(idsOf(run), greedy_);
    // auto resolves to a named preset from the RAM it finds.
    QCOMPARE(run.at("plan").at("preset").get<std::string>(), std::string("auto"));
    const std::string resolved = run.at("plan").at("preset_resolved").get<std::string>();
    QVERIFY2(resolved != "auto" && !resolved.empty(), resolved.c_str());
}

// --temperature/--top-p/--seed give exactly what the engine gives for the same options;
// --greedy overrides them and gives the reference ids.
void TestK3Commands::samplingFlagsReachTheEngine() {
    k3::LaunchConfig so;
    so.modelDir = kTiny.toStdString();
    k3::LaunchDiagnostics sd;
    sd.loadTokenizer = false;
    k3::Session session = k3::Session::open(so, sd);
    k3::GenerateOptions g;
    g.maxTokens = 6;
    g.sampling.temperature = 0.8f;
    g.sampling.topP = 0.9f;
    g.sampling.seed = 7;
    const std::vector<k3::TokenId> expected = session.generateIds(prompt_, g).ids;
    QCOMPARE(expected.size(), std::size_t(6));

    const QString out = tmp_.path() + "/sampled.json";
    const K3Run r = runK3({kTiny, "--ids", joinIds(prompt_), "--gen", "6", "--temperature", "0.8",
                           "--top-p", "0.9", "--seed", "7", "--out", out});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err + r.out));
    const nlohmann::json run = readJsonFile(out);
    QCOMPARE(idsOf(run), expected);
    QCOMPARE(run.at("options").at("sampling").at("seed").get<int>(), 7);

    const QString greedyOut = tmp_.path() + "/greedy.json";
    const K3Run gr = runK3({kTiny, "--ids", joinIds(prompt_), "--gen", "6", "--temperature", "0.8",
                            "--seed", "7", "--greedy", "--out", greedyOut});
    QVERIFY2(gr.exitCode == 0, qPrintable(gr.err + gr.out));
    QCOMPARE(idsOf(readJsonFile(greedyOut)), greedy_);
}

void TestK3Commands::thinkingEffortIsAcceptedAndCheckedByName() {
    const K3Run ok = runK3({kTiny, "--chat", "--thinking-effort", "low", "--max-tokens", "4"},
                           "What is k3chat?\n/exit\n");
    QVERIFY2(ok.exitCode == 0, qPrintable(ok.err + ok.out));
    const K3Run bad = runK3({kTiny, "--chat", "--thinking-effort", "extreme"}, "/exit\n");
    QCOMPARE(bad.exitCode, 2);
    QVERIFY2(bad.err.contains("extreme"), qPrintable(bad.err));
}

// `k3 resources/demo --chat --no-think`, exactly as the README shows it.
void TestK3Commands::demoChatInATerminalAnswers() {
    const nlohmann::json expected = readJsonFile(kDemo + "/expected.json");
    const auto& first = expected.at("prompts").at(0);
    const QString question = QString::fromStdString(first.at("question").get<std::string>());
    const QString answer = QString::fromStdString(first.at("answer_text").get<std::string>());
    QVERIFY(!answer.isEmpty());
    const K3Run r = runK3({kDemo, "--chat", "--no-think"}, (question + "\n/exit\n").toUtf8());
    QVERIFY2(r.exitCode == 0, qPrintable(r.err + r.out));
    QVERIFY2(r.out.contains(answer),
             qPrintable("expected the demo's answer \"" + answer + "\" in:\n" + r.out));
}

// Ctrl-C during a batch run stops it after the current token: exit 130, report kept.
void TestK3Commands::ctrlCStopsABatchRunWithExit130() {
    const QString out = tmp_.path() + "/interrupted.json";
    QProcess p;
    p.start(QStringLiteral(K3_CLI_PATH),
            {kTiny, "--ids", joinIds(prompt_), "--gen", "4096", "--out", out});
    QVERIFY(p.waitForStarted(10000));
    // Wait until it is generating (the per-token table has started).
    QByteArray seen;
    QElapsedTimer clock;
    clock.start();
    while (!seen.contains("\n1 ") && clock.elapsed() < 20000) {
        p.waitForReadyRead(200);
        seen += p.readAllStandardOutput();
    }
    QVERIFY2(seen.contains("\n1 "), seen.constData());
    ::kill(pid_t(p.processId()), SIGINT);
    QVERIFY(p.waitForFinished(20000));
    seen += p.readAllStandardOutput();
    QCOMPARE(p.exitStatus(), QProcess::NormalExit);
    QCOMPARE(p.exitCode(), 130);
    const nlohmann::json run = readJsonFile(out);
    QCOMPARE(run.at("cancelled").get<bool>(), true);
    QVERIFY(idsOf(run).size() < 4096);
    QVERIFY2(seen.contains("PEAK RSS"), seen.constData());
}

QTEST_GUILESS_MAIN(TestK3Commands)
#include "tst_k3commands.moc"
