// Checkpoint download against a real nginx laid out like the hub: model API JSON,
// resolve/ URLs redirected (302) to blobs, plus locations that ignore Range, stall,
// refuse (401/403) or miss (404).

#include "NginxServer.hpp"

#include "k3/hub.hpp"

#include <QCryptographicHash>
#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRandomGenerator>
#include <QTemporaryDir>
#include <QTest>

#include <atomic>
#include <chrono>
#include <future>
#include <map>
#include <mutex>
#include <set>
#include <thread>

namespace {

const char* kRevision = "0123456789abcdef0123456789abcdef01234567";
const char* kGoodToken = "hf_test_good_token_7531";
const char* kWrongToken = "hf_WRONG_secret_token_4242";

const char* kServer = R"(
    absolute_redirect off;
    location /api/models/k3/private/ {
        if ($http_authorization != "Bearer hf_test_good_token_7531") { return 401; }
        default_type application/json;
    }
    location /api/ { default_type application/json; }
    location ~ ^/k3/private/resolve/[^/]+/(?<f>.+)$ {
        if ($http_authorization != "Bearer hf_test_good_token_7531") { return 401; }
        return 302 /blobs/$f;
    }
    location ~ ^/k3/gated/resolve/ { return 403; }
    location ~ ^/k3/norange/resolve/[^/]+/(?<f>.+)$ { return 302 /norange/$f; }
    location /norange/ { alias @ROOT@/blobs/; max_ranges 0; }
    location ~ ^/k3/slow/resolve/[^/]+/(?<f>.+)$ { return 302 /slow/$f; }
    location /slow/ { alias @ROOT@/blobs/; limit_rate_after 32k; limit_rate 16k; }
    location ~ ^/k3/stall/resolve/[^/]+/(?<f>.+)$ { return 302 /stall/$f; }
    location /stall/ { alias @ROOT@/blobs/; limit_rate_after 160k; limit_rate 1; }
    location ~ ^/k3/[^/]+/resolve/[^/]+/(?<f>.+)$ { return 302 /blobs/$f; }
    location /blobs/ { }
)";

const char* kShard1 = "model-00001-of-00004.safetensors";
const char* kShard2 = "model-00002-of-00004.safetensors";
const char* kShard3 = "model-00003-of-00004.safetensors";
const char* kShard4 = "model-00004-of-00004.safetensors";

QByteArray randomBytes(int size, quint32 seed) {
    QRandomGenerator rng(seed);
    QByteArray bytes(size, Qt::Uninitialized);
    for (int i = 0; i < size; ++i) bytes[i] = char(rng.bounded(256));
    return bytes;
}

QString sha256Hex(const QByteArray& bytes) {
    return QString::fromLatin1(QCryptographicHash::hash(bytes, QCryptographicHash::Sha256).toHex());
}

QByteArray readAll(const QString& path) {
    QFile file(path);
    return file.open(QIODevice::ReadOnly) ? file.readAll() : QByteArray();
}

void writeFile(const QString& path, const QByteArray& bytes) {
    QDir().mkpath(QFileInfo(path).absolutePath());
    QFile file(path);
    QVERIFY2(file.open(QIODevice::WriteOnly | QIODevice::Truncate), qPrintable(path));
    file.write(bytes);
}

// Records what the downloader reports; cancels once a file passes cancelAfterBytes.
class Recorder : public k3::DownloadObserver {
public:
    explicit Recorder(QString logPath) : logPath_(std::move(logPath)) {}
    std::atomic<bool> cancel{false};
    std::uint64_t cancelAfterBytes = 0;
    std::set<k3::FileState> states;
    std::uint64_t lastOverallTotal = 0;
    bool sawSpeed = false;

    void onFileProgress(const k3::FileProgress& p) override {
        states.insert(p.state);
        if (cancelAfterBytes > 0 && p.bytesDone >= cancelAfterBytes && !cancel.load())
            cancel = true;
    }
    void onOverallProgress(const k3::OverallProgress& p) override {
        lastOverallTotal = p.bytesTotal;
        if (p.bytesPerSecond > 0 && p.etaSeconds >= 0) sawSpeed = true;
    }
    void onMessage(const std::string& line) override {
        QFile file(logPath_);
        if (file.open(QIODevice::Append)) file.write(QByteArray::fromStdString(line) + '\n');
    }

private:
    QString logPath_;
};

} // namespace

class TestHub : public QObject {
    Q_OBJECT

private:
    QTemporaryDir tmp_;
    NginxServer nginx_;
    std::map<QString, QByteArray> files_;
    int destCount_ = 0;

    QString www() const { return tmp_.path() + QStringLiteral("/www"); }
    QString logPath() const { return tmp_.path() + QStringLiteral("/download.log"); }
    QString newDest() { return tmp_.path() + QStringLiteral("/dest%1").arg(++destCount_); }

    void writeListing(const QString& repo, const QJsonArray& siblings) {
        QJsonObject root{{"id", repo}, {"sha", kRevision}, {"siblings", siblings}};
        writeFile(www() + "/api/models/" + repo + "/revision/" + kRevision,
                  QJsonDocument(root).toJson());
    }
    QJsonArray siblings(const QString& wrongShaFor = {}) const {
        QJsonArray list;
        for (const auto& [name, bytes] : files_) {
            QJsonObject entry{{"rfilename", name}, {"size", qint64(bytes.size())}};
            if (name.endsWith(".safetensors")) {
                QString sha = name == wrongShaFor ? sha256Hex("not the content") : sha256Hex(bytes);
                entry["lfs"] = QJsonObject{{"sha256", sha}, {"size", qint64(bytes.size())}};
            }
            list.append(entry);
        }
        return list;
    }
    k3::DownloadOptions options(const QString& repo, const QString& dest) const {
        k3::DownloadOptions o;
        o.endpoint = nginx_.baseUrl().toStdString();
        o.repo = repo.toStdString();
        o.revision = kRevision;
        o.destination = dest.toStdString();
        o.retryBaseSeconds = 0.05;
        o.stallTimeoutSeconds = 1;
        o.connectTimeoutSeconds = 5;
        return o;
    }
    void verifySame(const QString& dest, const QString& name) {
        QByteArray got = readAll(dest + "/" + name);
        QCOMPARE(got.size(), files_.at(name).size());
        QVERIFY2(got == files_.at(name), qPrintable(name + " differs"));
    }
    bool logHas(const QString& uriPart, const QString& status, const QString& range = {}) const {
        for (const QString& line : nginx_.settledAccessLog()) {
            QStringList parts = line.split(' ');
            if (parts.size() >= 3 && parts[0].contains(uriPart) && parts[1] == status &&
                (range.isEmpty() || parts[2] == "\"" + range + "\""))
                return true;
        }
        return false;
    }

private slots:
    void initTestCase() {
        // ctest label needs:nginx: without it the whole test is reported skipped.
        if (NginxServer::findNginx().isEmpty())
            QSKIP("nginx is not installed: these tests download from a real HTTP server "
                  "(apt-get install nginx; packaging/debian-packages.txt lists it)");
        QVERIFY(tmp_.isValid());
        qunsetenv("HF_TOKEN");
        qputenv("NO_PROXY", "127.0.0.1,localhost");
        qputenv("no_proxy", "127.0.0.1,localhost");
        files_["config.json"] = R"({"num_hidden_layers": 4, "hidden_size": 64})";
        files_["tokenizer.json"] = randomBytes(20000, 7).toBase64();
        files_[kShard1] = randomBytes(300000, 11);
        files_[kShard2] = randomBytes(200000, 12);
        files_[kShard3] = randomBytes(250000, 13);
        files_[kShard4] = randomBytes(120000, 14);
        QJsonObject map;
        map["language_model.model.embed_tokens.weight"] = kShard1;
        map["language_model.model.layers.0.input_layernorm.weight"] = kShard1;
        map["language_model.model.layers.1.mlp.gate_proj.weight"] = kShard2;
        map["language_model.model.layers.2.self_attn.q_proj.weight"] = kShard3;
        map["language_model.model.layers.3.self_attn.q_proj.weight"] = kShard3;
        map["language_model.model.norm.weight"] = kShard4;
        map["language_model.lm_head.weight"] = kShard4;
        files_["model.safetensors.index.json"] =
            QJsonDocument(QJsonObject{{"weight_map", map}}).toJson();
        for (const auto& [name, bytes] : files_) writeFile(www() + "/blobs/" + name, bytes);

        for (const char* repo :
             {"k3/good", "k3/private", "k3/gated", "k3/norange", "k3/slow", "k3/stall"})
            writeListing(repo, siblings());
        writeListing("k3/badsha", siblings(kShard3));
        // The listing promises 100 bytes more than the server has: a short file.
        QJsonArray shortList;
        for (const QJsonValue& v : siblings()) {
            QJsonObject entry = v.toObject();
            if (entry["rfilename"].toString() == "tokenizer.json")
                entry["size"] = entry["size"].toInteger() + 100;
            shortList.append(entry);
        }
        writeListing("k3/short", shortList);
        QJsonArray lost = siblings();
        lost.append(QJsonObject{{"rfilename", "missing.bin"}, {"size", 10}});
        writeListing("k3/lost", lost);
        QJsonArray evil = siblings();
        evil.append(QJsonObject{{"rfilename", "../evil.bin"}, {"size", 10}});
        writeListing("k3/evil", evil);
        QJsonArray huge = siblings();
        huge.append(QJsonObject{{"rfilename", "huge.bin"}, {"size", qint64(4) << 50}});
        writeListing("k3/huge", huge);

        QString error = nginx_.start(tmp_.path(), QString::fromLatin1(kServer));
        if (!error.isEmpty()) QFAIL(qPrintable(error));
    }

    void cleanupTestCase() { nginx_.stop(); }

    void fileNamesAndListing() {
        QVERIFY(k3::isSafeFileName("model-00001-of-00096.safetensors"));
        QVERIFY(k3::isSafeFileName("figures/logo.png"));
        QVERIFY(!k3::isSafeFileName("../evil"));
        QVERIFY(!k3::isSafeFileName("a/../../evil"));
        QVERIFY(!k3::isSafeFileName("/etc/passwd"));
        QVERIFY(!k3::isSafeFileName("a\\b"));
        QVERIFY(!k3::isSafeFileName(""));
        QVERIFY(!k3::isSafeFileName("a//b"));
        QVERIFY(!k3::isSafeFileName("bad\nname"));

        auto files = k3::parseFileList(
            R"({"siblings":[{"rfilename":"a.json","size":5},)"
            R"({"rfilename":"b.safetensors","size":7,"lfs":{"sha256":"ABCDEF0123456789abcdef0123456789abcdef0123456789abcdef0123456789","size":7}}]})");
        QCOMPARE(files.size(), size_t(2));
        QCOMPARE(files[0].size, std::uint64_t(5));
        QVERIFY(files[0].sha256.empty());
        QCOMPARE(files[1].sha256,
                 std::string("abcdef0123456789abcdef0123456789abcdef0123456789abcdef0123456789"));
        auto refuses = [](const char* json, const char* needle) {
            try {
                k3::parseFileList(json);
            } catch (const k3::HubError& e) {
                return std::string(e.what()).find(needle) != std::string::npos &&
                       e.hubKind() == k3::HubErrorKind::BadListing;
            }
            return false;
        };
        QVERIFY(refuses("[1,2]", "not a JSON object"));
        QVERIFY(refuses(R"({"siblings":[{"rfilename":"x"}]})", "\"x\" has no \"size\""));
        QVERIFY(refuses(R"({"siblings":[{"rfilename":"x","size":-3}]})", "size of \"x\""));
        QVERIFY(refuses(R"({"siblings":[{"rfilename":"x","size":3,"lfs":{"sha256":"zz"}}]})",
                        "64 hex"));
        QVERIFY(refuses(R"({"siblings":[{"rfilename":"x","size":3,"lfs":{"size":4}}]})",
                        "disagrees with lfs.size 4"));
        QVERIFY(refuses(R"({"siblings":[{"rfilename":"../../x","size":3}]})", "\"../../x\""));
        // Issue 35 item 9: two sizes of 2^63 add up to 0 in 64 bits.
        try {
            k3::parseFileList(R"({"siblings":[{"rfilename":"a","size":9223372036854775808},)"
                              R"({"rfilename":"b","size":9223372036854775808}]})");
            QFAIL("sizes that wrap were accepted");
        } catch (const k3::HubError& e) {
            QCOMPARE(int(e.hubKind()), int(k3::HubErrorKind::BadListing));
            QCOMPARE(std::string(e.what()),
                     std::string("model API answer lists sizes that add up to more than 2^64 "
                                 "bytes (at \"b\", 9223372036854775808 bytes); the listing is "
                                 "not believable, refusing it"));
        }
        QCOMPARE(k3::parseFileList(R"({"siblings":[{"rfilename":"a","size":9223372036854775808},)"
                                   R"({"rfilename":"b","size":9223372036854775807}]})")
                     .size(),
                 size_t(2)); // 2^64 - 1: the largest sum that fits

        auto shards = k3::shardsForLayers(
            readAll(www() + "/blobs/model.safetensors.index.json").toStdString(), 2);
        QCOMPARE(shards, (std::vector<std::string>{kShard1, kShard2, kShard4}));
        shards = k3::shardsForLayers(
            R"({"weight_map":{"nlayers.5.x":"a","model.layers.9.x":"b","layers.0.y":"c"}})", 1);
        QCOMPARE(shards, (std::vector<std::string>{"a", "c"}));

        QCOMPARE(k3::redactSecret("Bearer abc and abcabc", "abc"),
                 std::string("Bearer *** and ******"));
        QCOMPARE(k3::redactSecret("nothing", ""), std::string("nothing"));
        // Issue 35 item 21: a URL's user:password@ never reaches a message.
        QCOMPARE(k3::withoutUrlCredentials("http://bob:pw@127.0.0.1:9/api/x?y=a@b: failed"),
                 std::string("http://127.0.0.1:9/api/x?y=a@b: failed"));
        QCOMPARE(k3::withoutUrlCredentials("at https://u@h and \"http://a:b@c\""),
                 std::string("at https://h and \"http://c\""));
        QCOMPARE(k3::withoutUrlCredentials("mail a@b, see http://host/p@q"),
                 std::string("mail a@b, see http://host/p@q"));
        QCOMPARE(k3::redactSecret("GET https://x:tok@hub/f with tok", "tok"),
                 std::string("GET https://hub/f with ***"));
    }

    void fullDownload() {
        QString dest = newDest();
        Recorder recorder(logPath());
        auto result = k3::downloadCheckpoint(options("k3/good", dest), &recorder, nullptr);
        QVERIFY2(result.ok, result.error.c_str());
        QCOMPARE(result.files.size(), files_.size());
        std::uint64_t total = 0;
        for (const auto& [name, bytes] : files_) {
            verifySame(dest, name);
            total += std::uint64_t(bytes.size());
            QVERIFY(!QFile::exists(dest + "/" + name + ".partial"));
        }
        for (const auto& file : result.files) {
            QCOMPARE(int(file.state), int(k3::FileState::Done));
            QCOMPARE(file.actualSize, file.expectedSize);
            if (QString::fromStdString(file.name).endsWith(".safetensors"))
                QCOMPARE(QString::fromStdString(file.actualSha256),
                         sha256Hex(files_.at(QString::fromStdString(file.name))));
        }
        QCOMPARE(result.bytesExpected, total);
        QCOMPARE(result.bytesOnDisk, total);
        QCOMPARE(recorder.lastOverallTotal, total);
        QVERIFY(recorder.states.count(k3::FileState::Downloading));
        QVERIFY(recorder.states.count(k3::FileState::Verifying));
        QVERIFY(recorder.states.count(k3::FileState::Done));
        QVERIFY2(QString::fromStdString(result.summary())
                     .startsWith("files 7/7, bytes " + QString::number(total) + "/" +
                                 QString::number(total) + " exact"),
                 result.summary().c_str());
        QVERIFY(logHas(QString("/k3/good/resolve/%1/%2").arg(kRevision, kShard1), "302"));
        QVERIFY(logHas(QString("/blobs/") + kShard1, "200"));

        // A second run finds every file complete and transfers nothing.
        auto again = k3::downloadCheckpoint(options("k3/good", dest), nullptr, nullptr);
        QVERIFY2(again.ok, again.error.c_str());
        QCOMPARE(again.bytesTransferred, std::uint64_t(0));
    }

    void resumeUsesRange() {
        QString dest = newDest();
        writeFile(dest + "/" + kShard1 + ".partial", files_.at(kShard1).left(100000));
        auto o = options("k3/good", dest);
        o.only = {kShard1};
        auto result = k3::downloadCheckpoint(o, nullptr, nullptr);
        QVERIFY2(result.ok, result.error.c_str());
        QCOMPARE(result.files.size(), size_t(1));
        QVERIFY(result.files[0].resumed);
        QVERIFY(!result.files[0].rangeIgnored);
        QCOMPARE(result.bytesTransferred, std::uint64_t(files_.at(kShard1).size() - 100000));
        verifySame(dest, kShard1);
        QVERIFY(logHas(QString("/blobs/") + kShard1, "206", "bytes=100000-"));
    }

    void cancelThenResume() {
        QString dest = newDest();
        Recorder recorder(logPath());
        recorder.cancelAfterBytes = 40000;
        auto o = options("k3/slow", dest);
        o.parallel = 2;
        o.only = {kShard1, kShard2};
        auto result = k3::downloadCheckpoint(o, &recorder, &recorder.cancel);
        QVERIFY(recorder.cancel.load());
        QVERIFY(!result.ok);
        QCOMPARE(int(result.errorKind), int(k3::HubErrorKind::Cancelled));
        qint64 partial1 = QFileInfo(dest + "/" + kShard1 + ".partial").size();
        QVERIFY2(partial1 >= 40000 && partial1 < files_.at(kShard1).size(),
                 qPrintable(QString::number(partial1)));
        QVERIFY(!QFile::exists(dest + "/" + kShard1));
        // Neither file ran on to its end (16 KB/s: seconds away) after the cancel.
        QVERIFY(!QFile::exists(dest + "/" + kShard2));
        QVERIFY(files_.at(kShard1).startsWith(readAll(dest + "/" + kShard1 + ".partial")));

        auto resumed = k3::downloadCheckpoint(options("k3/good", dest), nullptr, nullptr);
        QVERIFY2(resumed.ok, resumed.error.c_str());
        for (const auto& [name, bytes] : files_) verifySame(dest, name);
        bool anyResumed = false;
        for (const auto& file : resumed.files) anyResumed |= file.resumed;
        QVERIFY(anyResumed);
        QVERIFY(logHas(QString("/blobs/") + kShard1, "206", QString("bytes=%1-").arg(partial1)));
    }

    void serverIgnoringRange() {
        QString dest = newDest();
        // Wrong bytes in the partial: they must all be replaced, not kept as a prefix.
        writeFile(dest + "/" + kShard2 + ".partial", QByteArray(5000, char(0xAA)));
        Recorder recorder(logPath());
        auto o = options("k3/norange", dest);
        o.only = {kShard2};
        auto result = k3::downloadCheckpoint(o, &recorder, nullptr);
        QVERIFY2(result.ok, result.error.c_str());
        QVERIFY(result.files[0].rangeIgnored);
        verifySame(dest, kShard2);
        QVERIFY(logHas(QString("/norange/") + kShard2, "200", "bytes=5000-"));
    }

    void stallingServerRetriesWithRange() {
        QString dest = newDest();
        auto o = options("k3/stall", dest);
        o.only = {kShard1};
        // A hang guard only (the stall time-out is 1 s; the stalled server sends a byte a
        // second): a download still running after 60 s is cancelled and fails here.
        std::atomic<bool> hung{false};
        std::promise<void> finished;
        std::thread watchdog([&hung, done = finished.get_future()] {
            if (done.wait_for(std::chrono::seconds(60)) == std::future_status::timeout) hung = true;
        });
        auto result = k3::downloadCheckpoint(o, nullptr, &hung);
        finished.set_value();
        watchdog.join();
        QVERIFY2(result.ok, result.error.c_str());
        verifySame(dest, kShard1);
        // Each connection stalls after 160 KiB, so the 300 kB file needs two requests or more,
        // every later one a Range request answered 206.
        int ranged = 0;
        const QStringList log = nginx_.settledAccessLog();
        for (const QString& line : log)
            if (line.startsWith(QString("/stall/") + kShard1 + " 206 \"bytes=")) ++ranged;
        QVERIFY2(ranged >= 1, qPrintable(log.join('\n')));
    }

    void shaMismatchMovedAside() {
        QString dest = newDest();
        auto result = k3::downloadCheckpoint(options("k3/badsha", dest), nullptr, nullptr);
        QVERIFY(!result.ok);
        QCOMPARE(int(result.errorKind), int(k3::HubErrorKind::Verification));
        QVERIFY2(result.error.find(kShard3) != std::string::npos, result.error.c_str());
        QVERIFY(!QFile::exists(dest + "/" + kShard3));
        QCOMPARE(readAll(dest + "/" + kShard3 + ".corrupt"), files_.at(kShard3));
        for (const auto& file : result.files) {
            bool bad = file.name == kShard3;
            QCOMPARE(int(file.state), int(bad ? k3::FileState::Failed : k3::FileState::Done));
        }
        verifySame(dest, kShard1);
        QVERIFY(result.summary().find("files 6/7") == 0);
    }

    void shortFileDetectedBySize() {
        QString dest = newDest();
        auto result = k3::downloadCheckpoint(options("k3/short", dest), nullptr, nullptr);
        QVERIFY(!result.ok);
        QVERIFY2(result.error.find("tokenizer.json") != std::string::npos, result.error.c_str());
        bool sawFailed = false;
        for (const auto& file : result.files)
            if (file.name == "tokenizer.json") sawFailed = file.state == k3::FileState::Failed;
        QVERIFY(sawFailed);
        QVERIFY(!QFile::exists(dest + "/tokenizer.json")); // never looks complete
        verifySame(dest, kShard1);
    }

    void httpErrorsAreClear() {
        struct Case {
            const char* repo;
            k3::HubErrorKind kind;
            const char* needle;
        };
        for (const Case& c :
             {Case{"k3/private", k3::HubErrorKind::Unauthorized, "401 for http://127.0.0.1"},
              Case{"k3/gated", k3::HubErrorKind::Forbidden, "accept its license"},
              Case{"k3/nosuchrepo", k3::HubErrorKind::NotFound, "HTTP 404"},
              Case{"k3/lost", k3::HubErrorKind::NotFound, "missing.bin"}}) {
            auto result = k3::downloadCheckpoint(options(c.repo, newDest()), nullptr, nullptr);
            QVERIFY(!result.ok);
            QCOMPARE(int(result.errorKind), int(c.kind));
            QVERIFY2(result.error.find(c.needle) != std::string::npos, result.error.c_str());
        }
        auto result = k3::downloadCheckpoint(options("k3/private", newDest()), nullptr, nullptr);
        QVERIFY2(result.error.find("token missing or invalid") != std::string::npos,
                 result.error.c_str());
    }

    void tokenNeverLeaks() {
        QString dest = newDest();
        Recorder recorder(logPath());
        auto o = options("k3/private", dest);
        o.token = kWrongToken;
        auto result = k3::downloadCheckpoint(o, &recorder, nullptr);
        QCOMPARE(int(result.errorKind), int(k3::HubErrorKind::Unauthorized));
        QVERIFY(result.error.find(kWrongToken) == std::string::npos);

        // With the right token the server lets the files through: it was sent.
        o.token = kGoodToken;
        o.only = {"config.json", kShard4};
        Recorder recorder2(logPath());
        result = k3::downloadCheckpoint(o, &recorder2, nullptr);
        QVERIFY2(result.ok, result.error.c_str());
        verifySame(dest, kShard4);

        // Via the environment too, and into a Forbidden error.
        qputenv("HF_TOKEN", kGoodToken);
        auto gated = k3::downloadCheckpoint(options("k3/gated", newDest()), &recorder, nullptr);
        qunsetenv("HF_TOKEN");
        QCOMPARE(int(gated.errorKind), int(k3::HubErrorKind::Forbidden));

        for (const auto* r : {&result, &gated}) {
            QVERIFY(r->error.find(kGoodToken) == std::string::npos);
            for (const auto& file : r->files)
                QVERIFY(file.error.find(kGoodToken) == std::string::npos);
        }
        QByteArray log = readAll(logPath());
        QVERIFY(!log.isEmpty());
        QVERIFY(!log.contains(kGoodToken));
        QVERIFY(!log.contains(kWrongToken));
        QDirIterator it(tmp_.path() + "/", QDir::Files, QDirIterator::Subdirectories);
        while (it.hasNext()) {
            QString path = it.next();
            if (path.contains("/www/") || path.endsWith("nginx.conf")) continue;
            QByteArray bytes = readAll(path);
            QVERIFY2(!bytes.contains(kGoodToken) && !bytes.contains(kWrongToken), qPrintable(path));
        }
    }

    void pathTraversalRefused() {
        QString dest = newDest();
        auto result = k3::downloadCheckpoint(options("k3/evil", dest), nullptr, nullptr);
        QVERIFY(!result.ok);
        QCOMPARE(int(result.errorKind), int(k3::HubErrorKind::BadListing));
        QVERIFY2(result.error.find("\"../evil.bin\"") != std::string::npos, result.error.c_str());
        QVERIFY(!QFile::exists(tmp_.path() + "/evil.bin"));
        QVERIFY(QDir(dest).entryList(QDir::Files).isEmpty());
    }

    void partialModelFetchesOnlyNeededShards() {
        QString dest = newDest();
        auto o = options("k3/good", dest);
        o.layers = 2;
        auto result = k3::downloadCheckpoint(o, nullptr, nullptr);
        QVERIFY2(result.ok, result.error.c_str());
        QStringList got = QDir(dest).entryList(QDir::Files, QDir::Name);
        QCOMPARE(got, QStringList({"config.json", kShard1, kShard2, kShard4,
                                   "model.safetensors.index.json", "tokenizer.json"}));
        for (const QString& name : got) verifySame(dest, name);
        QCOMPARE(result.skipped.size(), size_t(1));
        QVERIFY(result.skipped[0].find(kShard3) == 0);
    }

    void diskSpaceShortfallInGb() {
        auto result = k3::downloadCheckpoint(options("k3/huge", newDest()), nullptr, nullptr);
        QVERIFY(!result.ok);
        QCOMPARE(int(result.errorKind), int(k3::HubErrorKind::DiskSpace));
        QVERIFY2(result.error.find("short by") != std::string::npos &&
                     result.error.find(" GB") != std::string::npos,
                 result.error.c_str());
    }
};

QTEST_GUILESS_MAIN(TestHub)
#include "tst_hub.moc"
