// The disk fills up while a shard downloads (ENOSPC from the fault-injection test
// hook, against a real nginx): a clear error, the partial file is never taken for the
// complete one, and the next run resumes it with a Range request.

#include "NginxServer.hpp"

#include "k3/fault_injection.hpp"
#include "k3/hub.hpp"

#include <QCryptographicHash>
#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QRandomGenerator>
#include <QTemporaryDir>
#include <QTest>

namespace {

const char* kRevision = "0123456789abcdef0123456789abcdef01234567";
const char* kShard = "model-00001-of-00001.safetensors";

const char* kServer = R"(
    absolute_redirect off;
    location /api/ { default_type application/json; }
    location ~ ^/k3/[^/]+/resolve/[^/]+/(?<f>.+)$ { return 302 /blobs/$f; }
    location /blobs/ { }
)";

void writeFile(const QString& path, const QByteArray& bytes) {
    QDir().mkpath(QFileInfo(path).absolutePath());
    QFile file(path);
    QVERIFY2(file.open(QIODevice::WriteOnly | QIODevice::Truncate), qPrintable(path));
    file.write(bytes);
}

QByteArray readAll(const QString& path) {
    QFile file(path);
    return file.open(QIODevice::ReadOnly) ? file.readAll() : QByteArray();
}

} // namespace

class TestHubFaults : public QObject {
    Q_OBJECT
    QTemporaryDir tmp_;
    NginxServer nginx_;
    QByteArray shard_;

    k3::DownloadOptions options(const QString& dest) const {
        k3::DownloadOptions o;
        o.endpoint = nginx_.baseUrl().toStdString();
        o.repo = "k3/good";
        o.revision = kRevision;
        o.destination = dest.toStdString();
        o.retryBaseSeconds = 0.05;
        o.connectTimeoutSeconds = 5;
        o.parallel = 1;
        o.only = {kShard};
        return o;
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
        QRandomGenerator rng(21);
        shard_.resize(3 << 20);
        for (char& c : shard_) c = char(rng.bounded(256));
        const QString www = tmp_.path() + "/www";
        writeFile(www + "/blobs/" + kShard, shard_);
        const QString sha = QString::fromLatin1(
            QCryptographicHash::hash(shard_, QCryptographicHash::Sha256).toHex());
        const QJsonArray siblings{
            QJsonObject{{"rfilename", kShard},
                        {"size", qint64(shard_.size())},
                        {"lfs", QJsonObject{{"sha256", sha}, {"size", qint64(shard_.size())}}}}};
        writeFile(www + "/api/models/k3/good/revision/" + kRevision,
                  QJsonDocument(QJsonObject{{"siblings", siblings}}).toJson());
        const QString error = nginx_.start(tmp_.path(), QString::fromLatin1(kServer));
        if (!error.isEmpty()) QFAIL(qPrintable(error));
    }
    void cleanupTestCase() { nginx_.stop(); }

    void diskFullKeepsThePartialAndTheNextRunResumes() {
        const QString dest = tmp_.path() + "/dest";
        k3::DownloadResult full;
        {
            k3::FaultRule r;
            r.kind = k3::IoKind::Download;
            r.error = k3::IoFault::NoSpace;
            r.after = 4; // a few chunks reach the disk first
            const k3::ScopedFault armed(std::move(r));
            full = k3::downloadCheckpoint(options(dest), nullptr, nullptr);
            QCOMPARE(k3::faultsInjected(), std::uint64_t(1)); // fatal at once, no retry loop
        }
        QVERIFY(!full.ok);
        QCOMPARE(int(full.errorKind), int(k3::HubErrorKind::DiskSpace));
        QVERIFY2(QString::fromStdString(full.error)
                     .contains(QString("cannot write %1/%2.partial: No space left on device")
                                   .arg(dest, kShard)),
                 full.error.c_str());
        QVERIFY2(QString::fromStdString(full.error).contains("it resumes where it stopped"),
                 full.error.c_str());
        QCOMPARE(full.files.size(), std::size_t(1));
        QCOMPARE(int(full.files[0].state), int(k3::FileState::Failed));
        // Never renamed to the final name; what is on disk is a true prefix.
        QVERIFY(!QFile::exists(dest + "/" + kShard));
        const QByteArray partial = readAll(dest + "/" + kShard + ".partial");
        QVERIFY2(partial.size() > 0 && partial.size() < shard_.size(),
                 qPrintable(QString::number(partial.size())));
        QVERIFY(shard_.startsWith(partial));

        const k3::DownloadResult again = k3::downloadCheckpoint(options(dest), nullptr, nullptr);
        QVERIFY2(again.ok, again.error.c_str());
        QCOMPARE(again.files.size(), std::size_t(1));
        QVERIFY(again.files[0].resumed);
        QCOMPARE(again.bytesTransferred, std::uint64_t(shard_.size() - partial.size()));
        QCOMPARE(readAll(dest + "/" + kShard), shard_);
        QVERIFY(!QFile::exists(dest + "/" + kShard + ".partial"));
    }
};

QTEST_GUILESS_MAIN(TestHubFaults)
#include "tst_hub_faults.moc"
