// A hostile hub (issue 22, point 6), served by a real nginx on 127.0.0.1: a file listed
// as 10 bytes served as 3 MB, redirects to file:// and in a loop, a listing of more files
// than a checkpoint may have, and a CR/LF in HF_TOKEN.

#include "NginxServer.hpp"

#include "k3/hub.hpp"

#include <QCryptographicHash>
#include <QDir>
#include <QDirIterator>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QTemporaryDir>
#include <QTest>

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <chrono>
#include <future>

namespace {

const char* kRevision = "0123456789abcdef0123456789abcdef01234567";

const char* kServer = R"(
    absolute_redirect off;
    location /api/ { default_type application/json; }
    location ~ ^/k3/big/resolve/ { return 302 /blobs/big.bin; }
    location ~ ^/k3/wrap/resolve/ { return 302 /blobs/big.bin; }
    location ~ ^/k3/fileredir/resolve/ { return 302 file:///etc/passwd; }
    location ~ ^/k3/loop/resolve/ { return 302 $uri; }
    location ~ ^/k3/blob(ok|bad)/resolve/ { return 302 /blobs/config.json; }
    location /blobs/ { }
)";

void writeFile(const QString& path, const QByteArray& bytes) {
    QDir().mkpath(QFileInfo(path).absolutePath());
    QFile file(path);
    QVERIFY2(file.open(QIODevice::WriteOnly | QIODevice::Truncate), qPrintable(path));
    file.write(bytes);
}

QByteArray listing(const QJsonArray& siblings) {
    return QJsonDocument(QJsonObject{{"siblings", siblings}}).toJson();
}

qint64 bytesUnder(const QString& dir) {
    qint64 n = 0;
    QDirIterator it(dir, QDir::Files | QDir::Hidden, QDirIterator::Subdirectories);
    while (it.hasNext()) n += QFileInfo(it.next()).size();
    return n;
}

int entriesIn(const QString& dir) {
    return int(QDir(dir).entryList(QDir::AllEntries | QDir::NoDotAndDotDot | QDir::Hidden).size());
}

// The same size, other bytes: only a content check tells them apart.
const QByteArray kConfigBody = QByteArrayLiteral("{\"hidden_size\": 7168}\n");
const QByteArray kOtherBody = QByteArrayLiteral("{\"hidden_size\": 7169}\n");

// git's blob id: SHA-1 of "blob SIZE\0" and the bytes.
QString gitBlobId(const QByteArray& body) {
    QByteArray all = "blob " + QByteArray::number(body.size());
    all.append('\0');
    all += body;
    return QString::fromLatin1(QCryptographicHash::hash(all, QCryptographicHash::Sha1).toHex());
}

} // namespace

class TestHubHostile : public QObject {
    Q_OBJECT
    QTemporaryDir tmp_;
    NginxServer nginx_;

    k3::DownloadOptions options(const char* repo, const QString& dest) const {
        k3::DownloadOptions o;
        o.endpoint = nginx_.baseUrl().toStdString();
        o.repo = repo;
        o.revision = kRevision;
        o.destination = dest.toStdString();
        o.retryBaseSeconds = 2; // a retry would show in the access log
        o.connectTimeoutSeconds = 5;
        o.parallel = 1;
        o.checkDiskSpace = false;
        return o;
    }
    // Counted once nginx has written every line (see NginxServer::settledAccessLog).
    int settledRequestsFor(const QString& part) const {
        int n = 0;
        for (const QString& line : nginx_.settledAccessLog()) n += line.contains(part) ? 1 : 0;
        return n;
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
        const QString www = tmp_.path() + "/www";
        writeFile(www + "/blobs/big.bin", QByteArray(3 << 20, 'x'));
        const QString api = www + "/api/models/k3/";
        writeFile(api + "big/revision/" + kRevision,
                  listing({QJsonObject{{"rfilename", "small.bin"}, {"size", 10}}}));
        // Two sizes of 2^63: 0 bytes in 64 bits, so the space check used to pass.
        writeFile(api + "wrap/revision/" + kRevision,
                  R"({"siblings":[{"rfilename":"a.bin","size":9223372036854775808},)"
                  R"({"rfilename":"b.bin","size":9223372036854775808}]})");
        for (const char* repo : {"fileredir", "loop"})
            writeFile(api + repo + "/revision/" + kRevision,
                      listing({QJsonObject{{"rfilename", "a.bin"}, {"size", 5}}}));
        QJsonArray many;
        for (std::size_t i = 0; i <= k3::kMaxListedFiles; ++i)
            many.append(QJsonObject{{"rfilename", QString("empty-%1.txt").arg(i)}, {"size", 0}});
        writeFile(api + "many/revision/" + kRevision, listing(many));
        // A non-LFS file: the listing gives only its git blob id.
        writeFile(www + "/blobs/config.json", kConfigBody);
        for (const auto& [repo, body] :
             {std::pair{"blobok", kConfigBody}, std::pair{"blobbad", kOtherBody}})
            writeFile(api + repo + "/revision/" + kRevision,
                      listing({QJsonObject{{"rfilename", "config.json"},
                                           {"size", int(kConfigBody.size())},
                                           {"blobId", gitBlobId(body)}}}));
        const QString error = nginx_.start(tmp_.path(), QString::fromLatin1(kServer));
        if (!error.isEmpty()) QFAIL(qPrintable(error));
    }
    void cleanupTestCase() { nginx_.stop(); }

    // Listed as 10 bytes, served as 3 MB: not one byte past 10 reaches the disk, the
    // error names the file and both sizes, and nothing is left to "resume".
    void serverSendingTooMuchIsCutOff() {
        const QString dest = tmp_.path() + "/big";
        const k3::DownloadResult r =
            k3::downloadCheckpoint(options("k3/big", dest), nullptr, nullptr);
        QVERIFY(!r.ok);
        QCOMPARE(int(r.errorKind), int(k3::HubErrorKind::Verification));
        QVERIFY2(QString::fromStdString(r.error).startsWith(
                     "small.bin: the server sent too much: the hub lists 10 bytes, the server "
                     "sent more than that ("),
                 r.error.c_str());
        QVERIFY2(QString::fromStdString(r.error).endsWith(
                     "stopped the transfer and removed small.bin.partial"),
                 r.error.c_str());
        QVERIFY(!QString::fromStdString(r.error).contains("resume"));
        QVERIFY(r.bytesTransferred <= 10);
        QVERIFY(bytesUnder(dest) <= 10);
        QVERIFY(!QFile::exists(dest + "/small.bin"));
        QVERIFY(!QFile::exists(dest + "/small.bin.partial"));
        QCOMPARE(settledRequestsFor("/k3/big/resolve/"), 1); // not retried
    }

    // Issue 35 item 9: listed sizes that wrap past 2^64 are a listing not to believe:
    // refused before any file is asked for, nothing written.
    void sizesThatWrapAreRefused() {
        const QString dest = tmp_.path() + "/wrap";
        k3::DownloadOptions o = options("k3/wrap", dest);
        o.checkDiskSpace = true;
        o.freeBytesForTests = 1u << 20;
        const k3::DownloadResult r = k3::downloadCheckpoint(o, nullptr, nullptr);
        QVERIFY(!r.ok);
        QCOMPARE(int(r.errorKind), int(k3::HubErrorKind::BadListing));
        QVERIFY2(QString::fromStdString(r.error).endsWith(
                     "model API answer lists sizes that add up to more than 2^64 bytes (at "
                     "\"b.bin\", 9223372036854775808 bytes); the listing is not believable, "
                     "refusing it"),
                 r.error.c_str());
        QCOMPARE(settledRequestsFor("/k3/wrap/resolve/"), 0);
        QCOMPARE(entriesIn(dest), 0);
    }

    // Issue 22 point 11: a non-LFS file used to be checked by its size only. Its git blob
    // id from the listing is checked: the right bytes pass, other bytes of the same size
    // are moved aside and named.
    void nonLfsFilesAreCheckedByTheirBlobId() {
        QCOMPARE(gitBlobId(QByteArrayLiteral("hello\n")),
                 QStringLiteral("ce013625030ba8dba906f756967f9e9ca394464a")); // git hash-object
        const QString good = tmp_.path() + "/blobok";
        const k3::DownloadResult ok =
            k3::downloadCheckpoint(options("k3/blobok", good), nullptr, nullptr);
        QVERIFY2(ok.ok, ok.error.c_str());
        QVERIFY(QFile::exists(good + "/config.json"));
        // A second run checks the file on disk by its blob id and keeps it.
        QVERIFY(k3::downloadCheckpoint(options("k3/blobok", good), nullptr, nullptr).ok);
        QCOMPARE(k3::gitBlobSha1OfFile((good + "/config.json").toStdString()),
                 gitBlobId(kConfigBody).toStdString());

        const QString bad = tmp_.path() + "/blobbad";
        const k3::DownloadResult r =
            k3::downloadCheckpoint(options("k3/blobbad", bad), nullptr, nullptr);
        QVERIFY(!r.ok);
        QCOMPARE(int(r.errorKind), int(k3::HubErrorKind::Verification));
        QCOMPARE(QString::fromStdString(r.error),
                 QStringLiteral("config.json: verification failed (git blob id %1, the hub "
                                "lists %2); moved aside to config.json.corrupt")
                     .arg(gitBlobId(kConfigBody), gitBlobId(kOtherBody)));
        QVERIFY(!QFile::exists(bad + "/config.json"));
        QVERIFY(QFile::exists(bad + "/config.json.corrupt"));
    }

    // Issue 35 item 16: NAME.partial is written only when it is a regular file. A link
    // planted there (to a file elsewhere) used to have its target written from the resume
    // offset; a FIFO used to block the open for good.
    void partialThatIsALinkOrAFifoIsRefused() {
        const QString dest = tmp_.path() + "/partial-link";
        QVERIFY(QDir().mkpath(dest));
        const QString victim = tmp_.path() + "/victim.txt";
        writeFile(victim, "precious");
        QVERIFY(QFile::link(victim, dest + "/config.json.partial"));
        k3::DownloadResult r = k3::downloadCheckpoint(options("k3/blobok", dest), nullptr, nullptr);
        QVERIFY(!r.ok);
        QCOMPARE(int(r.errorKind), int(k3::HubErrorKind::Io));
        QCOMPARE(QString::fromStdString(r.error),
                 "cannot write " + dest +
                     "/config.json.partial: it is a symbolic link; k3 writes only regular files "
                     "(remove it)");
        QFile in(victim);
        QVERIFY(in.open(QIODevice::ReadOnly));
        QCOMPARE(in.readAll(), QByteArray("precious"));
        QVERIFY(QFileInfo(dest + "/config.json.partial").isSymLink()); // left as it was
        QVERIFY(!QFile::exists(dest + "/config.json"));

        const QString fifoDest = tmp_.path() + "/partial-fifo";
        QVERIFY(QDir().mkpath(fifoDest));
        const QByteArray fifo = (fifoDest + "/config.json.partial").toLocal8Bit();
        QCOMPARE(::mkfifo(fifo.constData(), 0600), 0);
        auto running = std::async(std::launch::async, [&] {
            return k3::downloadCheckpoint(options("k3/blobok", fifoDest), nullptr, nullptr);
        });
        // A hang guard, not a timing: a download blocked in open() is let go by a reader.
        if (running.wait_for(std::chrono::seconds(60)) != std::future_status::ready) {
            const int reader = ::open(fifo.constData(), O_RDONLY | O_NONBLOCK);
            running.wait();
            ::close(reader);
            QFAIL("opening the FIFO blocked the download");
        }
        r = running.get();
        QVERIFY(!r.ok);
        QCOMPARE(int(r.errorKind), int(k3::HubErrorKind::Io));
        QCOMPARE(QString::fromStdString(r.error),
                 "cannot write " + fifoDest +
                     "/config.json.partial: it is not a regular file (a FIFO); k3 writes only "
                     "regular files (remove it)");
        QVERIFY(!QFile::exists(fifoDest + "/config.json"));
    }

    void redirectToFileIsNotRetried() {
        const QString dest = tmp_.path() + "/fileredir";
        const k3::DownloadResult r =
            k3::downloadCheckpoint(options("k3/fileredir", dest), nullptr, nullptr);
        QVERIFY(!r.ok);
        // Counted, not timed: every request was made before downloadCheckpoint returned.
        QCOMPARE(settledRequestsFor("/k3/fileredir/resolve/"), 1);
        QCOMPARE(int(r.errorKind), int(k3::HubErrorKind::Http));
        QVERIFY2(QString::fromStdString(r.error).startsWith("a.bin (" + nginx_.baseUrl() +
                                                            "/k3/fileredir/resolve/"),
                 r.error.c_str());
        QVERIFY2(
            QString::fromStdString(r.error).endsWith("(a redirect to a refused URL); not retried"),
            r.error.c_str());
        QVERIFY(!QFile::exists(dest + "/a.bin"));
    }

    // curl follows 10 redirects (11 requests), then gives up once: not 6 more times.
    void redirectLoopIsNotRetried() {
        const QString dest = tmp_.path() + "/loop";
        const k3::DownloadResult r =
            k3::downloadCheckpoint(options("k3/loop", dest), nullptr, nullptr);
        QVERIFY(!r.ok);
        // Counted, not timed: every request was made before downloadCheckpoint returned.
        QCOMPARE(settledRequestsFor("/k3/loop/resolve/"), 11);
        QVERIFY2(QString::fromStdString(r.error).endsWith("(a redirect loop); not retried"),
                 r.error.c_str());
    }

    void listingOfTooManyFilesIsRefused() {
        const QString dest = tmp_.path() + "/many";
        const k3::DownloadResult r =
            k3::downloadCheckpoint(options("k3/many", dest), nullptr, nullptr);
        QVERIFY(!r.ok);
        QCOMPARE(int(r.errorKind), int(k3::HubErrorKind::BadListing));
        QVERIFY2(QString::fromStdString(r.error).endsWith(
                     "model API answer lists 2001 files, more than the 2000 a checkpoint may "
                     "have; refusing it (nothing was created)"),
                 r.error.c_str());
        QCOMPARE(entriesIn(dest), 0);
        // Exactly the cap is a listing like any other.
        QJsonArray cap;
        for (std::size_t i = 0; i < k3::kMaxListedFiles; ++i)
            cap.append(QJsonObject{{"rfilename", QString("f%1").arg(i)}, {"size", 1}});
        QCOMPARE(k3::parseFileList(listing(cap).toStdString()).size(), k3::kMaxListedFiles);
    }

    // A CR/LF in HF_TOKEN would add a header line: refused before any request.
    void tokenWithControlCharactersIsRefused() {
        const int before = int(nginx_.settledAccessLog().size());
        qputenv("HF_TOKEN", "hf_abc\r\nX-Injected: 1");
        const k3::DownloadResult r =
            k3::downloadCheckpoint(options("k3/big", tmp_.path() + "/token"), nullptr, nullptr);
        qunsetenv("HF_TOKEN");
        QVERIFY(!r.ok);
        QCOMPARE(int(r.errorKind), int(k3::HubErrorKind::Unauthorized));
        QCOMPARE(QString::fromStdString(r.error),
                 QStringLiteral("HF_TOKEN holds a control character (byte 0x0d at position 6); "
                                "refusing to send it in an HTTP header: set the token without "
                                "line breaks or other control characters"));
        QCOMPARE(int(nginx_.settledAccessLog().size()), before);
        // The same from the options (the app's keychain), named as such.
        k3::DownloadOptions o = options("k3/big", tmp_.path() + "/token");
        o.token = std::string("hf_\x1b]0;title\x07", 12);
        try {
            k3::resolveToken(o);
            QFAIL("a token with ESC was accepted");
        } catch (const k3::HubError& e) {
            QVERIFY2(
                QString(e.what()).startsWith(
                    "the Hugging Face token holds a control character (byte 0x1b at position 3)"),
                e.what());
        }
    }
};

QTEST_GUILESS_MAIN(TestHubHostile)
#include "tst_hub_hostile.moc"
