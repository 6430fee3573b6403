// `k3 pack` over a working trunk, stopped half way: by SIGTERM (handled: the new files
// are removed), by SIGKILL (not handled: the next pack removes what it left) and by the
// file size limit (`ulimit -f`: the write fails instead of SIGXFSZ killing k3). Each time
// the old trunk keeps working, giving the same ids.
#include "K3Process.hpp"

#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

#include <csignal>
#include <fstream>

#include <fcntl.h>
#include <poll.h>
#include <spawn.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

extern char** environ;

namespace {

const QString kDemo = QStringLiteral(K3_SOURCE_DIR "/resources/demo");

// `k3 pack` whose stderr is a pipe the test filled: its first progress line blocks until
// the test drains the pipe, so a signal sent once trunk.bin.partial exists lands in the
// middle of the pack however fast the machine is.
class BlockedPack {
public:
    explicit BlockedPack(const QStringList& args) {
        int fds[2];
        if (::pipe2(fds, O_CLOEXEC) != 0) return;
        read_ = fds[0];
        ::fcntl(fds[1], F_SETFL, O_NONBLOCK);
        const std::string filler(4096, '.');
        for (ssize_t n = 0; (n = ::write(fds[1], filler.data(), filler.size())) > 0;) filled_ += n;
        ::fcntl(fds[1], F_SETFL, 0); // shared with the child's stderr: it must block

        std::vector<std::string> argv{K3_CLI_PATH};
        for (const QString& a : args) argv.push_back(a.toStdString());
        std::vector<char*> cargv;
        for (std::string& a : argv) cargv.push_back(a.data());
        cargv.push_back(nullptr);
        posix_spawn_file_actions_t actions;
        posix_spawn_file_actions_init(&actions);
        posix_spawn_file_actions_addopen(&actions, 0, "/dev/null", O_RDONLY, 0);
        posix_spawn_file_actions_addopen(&actions, 1, "/dev/null", O_WRONLY, 0);
        posix_spawn_file_actions_adddup2(&actions, fds[1], 2);
        if (::posix_spawn(&pid_, K3_CLI_PATH, &actions, nullptr, cargv.data(), environ) != 0)
            pid_ = -1;
        posix_spawn_file_actions_destroy(&actions);
        ::close(fds[1]);
    }
    ~BlockedPack() {
        if (pid_ > 0) {
            ::kill(pid_, SIGKILL);
            ::waitpid(pid_, nullptr, 0);
        }
        if (read_ >= 0) ::close(read_);
    }
    BlockedPack(const BlockedPack&) = delete;
    BlockedPack& operator=(const BlockedPack&) = delete;

    bool started() const { return pid_ > 0; }
    void signal(int sig) const { ::kill(pid_, sig); }

    // Reads stderr until k3 closes it (it exited), then reaps it: the wait status, or -1
    // when it did not end within 20 s. `err` gets what k3 wrote after the filler.
    int finish(QByteArray& err) {
        QByteArray all;
        char buf[4096];
        for (;;) {
            pollfd p{read_, POLLIN, 0};
            if (::poll(&p, 1, 20000) <= 0) return -1;
            const ssize_t n = ::read(read_, buf, sizeof buf);
            if (n <= 0) break;
            all.append(buf, qsizetype(n));
        }
        int status = 0;
        if (::waitpid(pid_, &status, 0) != pid_) return -1;
        pid_ = -1;
        err = all.mid(filled_);
        return status;
    }

private:
    pid_t pid_ = -1;
    int read_ = -1;
    qsizetype filled_ = 0;
};

std::vector<int> reportIds(const QString& path) {
    std::ifstream in(path.toStdString());
    const nlohmann::json j = nlohmann::json::parse(in, nullptr, false);
    return j.is_object() ? j.at("ids").get<std::vector<int>>() : std::vector<int>{};
}

// The demo's first greedy ids through the trunk in `trunk` (exit 0 expected).
std::vector<int> idsThrough(const QString& trunk, const QString& out) {
    const K3Run r = runK3({kDemo, "--trunk", trunk, "--trunk-gb", "0", "--ids", "954,261,268",
                           "--gen", "6", "--out", out});
    if (r.exitCode != 0) qWarning("%s", qPrintable(r.err));
    return r.exitCode == 0 ? reportIds(out) : std::vector<int>{};
}

QStringList trunkFiles(const QString& trunk) {
    return QDir(trunk).entryList(QDir::Files | QDir::Hidden, QDir::Name);
}

const QStringList kTrunkFiles{QStringLiteral("trunk.bin"), QStringLiteral("trunk.checked.json"),
                              QStringLiteral("trunk.json")};

} // namespace

class TestK3Repack : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void sigtermKeepsTheOldTrunk();
    void sigkillKeepsTheOldTrunkAndTheNextPackClearsUp();
    void fileSizeLimitKeepsTheOldTrunk();

private:
    QTemporaryDir m_tmp;
    QString m_trunk;
    std::vector<int> m_ids;
    QByteArray m_json;
};

void TestK3Repack::initTestCase() {
    m_trunk = m_tmp.filePath(QStringLiteral("trunk"));
    const K3Run packed = runK3({"pack", kDemo, m_trunk});
    QVERIFY2(packed.exitCode == 0, qPrintable(packed.err));
    m_ids = idsThrough(m_trunk, m_tmp.filePath(QStringLiteral("before.json")));
    QCOMPARE(int(m_ids.size()), 6);
    QFile f(m_trunk + "/trunk.json");
    QVERIFY(f.open(QIODevice::ReadOnly));
    m_json = f.readAll();
    QCOMPARE(trunkFiles(m_trunk), kTrunkFiles);
}

void TestK3Repack::sigtermKeepsTheOldTrunk() {
    BlockedPack pack({"pack", kDemo, m_trunk});
    QVERIFY(pack.started());
    QTRY_VERIFY_WITH_TIMEOUT(QFile::exists(m_trunk + "/trunk.bin.partial"), 20000);
    pack.signal(SIGTERM);
    QByteArray err;
    const int status = pack.finish(err);
    QVERIFY2(WIFEXITED(status), qPrintable(QString::number(status)));
    QCOMPARE(WEXITSTATUS(status), 128 + SIGTERM);
    QVERIFY2(err.contains("k3 pack: packing cancelled"), err.constData());
    QCOMPARE(trunkFiles(m_trunk), kTrunkFiles); // the new files removed
    QFile f(m_trunk + "/trunk.json");
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(f.readAll(), m_json);
    QCOMPARE(idsThrough(m_trunk, m_tmp.filePath(QStringLiteral("term.json"))), m_ids);
}

void TestK3Repack::sigkillKeepsTheOldTrunkAndTheNextPackClearsUp() {
    {
        BlockedPack pack({"pack", kDemo, m_trunk});
        QVERIFY(pack.started());
        QTRY_VERIFY_WITH_TIMEOUT(QFile::exists(m_trunk + "/trunk.bin.partial"), 20000);
        pack.signal(SIGKILL);
        QByteArray err;
        const int status = pack.finish(err);
        QVERIFY(WIFSIGNALED(status));
        QCOMPARE(WTERMSIG(status), SIGKILL);
    }
    QVERIFY(QFile::exists(m_trunk + "/trunk.bin.partial")); // nothing can remove it now
    QCOMPARE(idsThrough(m_trunk, m_tmp.filePath(QStringLiteral("killed.json"))), m_ids);
    // The next pack starts by removing what the killed one left.
    const K3Run again = runK3({"pack", kDemo, m_trunk});
    QVERIFY2(again.exitCode == 0, qPrintable(again.err));
    QCOMPARE(trunkFiles(m_trunk), kTrunkFiles);
    QCOMPARE(idsThrough(m_trunk, m_tmp.filePath(QStringLiteral("again.json"))), m_ids);
}

void TestK3Repack::fileSizeLimitKeepsTheOldTrunk() {
    const qint64 binBytes = QFileInfo(m_trunk + "/trunk.bin").size();
    QVERIFY(binBytes > 8 * 4096);
    QProcess p;
    // `ulimit -f`: writes past half the trunk's size fail (SIGXFSZ by default).
    const rlim_t limit = rlim_t(binBytes / 2 / 4096 * 4096);
    p.setChildProcessModifier([limit] {
        const rlimit r{limit, limit};
        ::setrlimit(RLIMIT_FSIZE, &r);
    });
    p.start(QStringLiteral(K3_CLI_PATH), {"pack", kDemo, m_trunk});
    QVERIFY(p.waitForFinished(20000));
    const QString err = QString::fromUtf8(p.readAllStandardError());
    QCOMPARE(p.exitStatus(), QProcess::NormalExit);
    QCOMPARE(p.exitCode(), 1);
    QVERIFY2(err.contains("k3 pack: " + m_trunk + "/trunk.bin.partial: write failed at offset ") &&
                 err.contains("File too large"),
             qPrintable(err));
    QCOMPARE(trunkFiles(m_trunk), kTrunkFiles);
    QCOMPARE(idsThrough(m_trunk, m_tmp.filePath(QStringLiteral("limit.json"))), m_ids);
}

QTEST_GUILESS_MAIN(TestK3Repack)
#include "tst_k3repack.moc"
