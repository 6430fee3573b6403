// Crash safety of the chat transcript: `k3 MODEL --chat --history FILE` is killed with
// SIGKILL at varied moments while it answers and saves, again and again. After every
// kill the file on disk parses and is one of the complete states (whole user/assistant
// pairs), never a torn write: writeTranscript() replaces it with a rename. The app's
// conversations (ui/chat/ConversationStore) go through the same writeTranscript().
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QProcess>
#include <QRandomGenerator>
#include <QTemporaryDir>
#include <QTest>

#include <csignal>
#include <sys/types.h>

#include <k3/chat.hpp>

namespace {

const QString kModels = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/");
constexpr int kKills = 20;   // at most
constexpr int kMinKills = 6; // on a loaded machine the time bound stops earlier
constexpr qint64 kBudgetMs = 18000;

QByteArray readBytes(const QString& path) {
    QFile file(path);
    return file.open(QIODevice::ReadOnly) ? file.readAll() : QByteArray();
}

} // namespace

class TestK3Crash : public QObject {
    Q_OBJECT
private slots:
    void killNineNeverTearsTheTranscript();
};

void TestK3Crash::killNineNeverTearsTheTranscript() {
    QTemporaryDir tmp;
    const QString history = tmp.filePath("chat.jsonl");
    QRandomGenerator rng(1234); // fixed: the same kill moments on every run
    QByteArray turns;
    for (int i = 0; i < 40; ++i) turns += "message " + QByteArray::number(i) + "\n";

    std::size_t lastSize = 0;
    int grew = 0;
    QElapsedTimer clock;
    clock.start();
    int kill = 0;
    for (; kill < kKills && (kill < kMinKills || clock.elapsed() < kBudgetMs); ++kill) {
        // A long history slows the resume prefill; start over now and then.
        if (lastSize > 12) {
            QVERIFY(QFile::remove(history));
            lastSize = 0;
        }
        QProcess p;
        p.start(QStringLiteral(K3_CLI_PATH), {kModels + "k3_tiny_a", "--chat", "--no-think",
                                              "--max-tokens", "1", "--history", history});
        QVERIFY(p.waitForStarted(10000));
        p.write(turns); // stdin stays open: the REPL keeps answering and saving
        QVERIFY(p.waitForBytesWritten(10000));
        // Wait until this process has saved at least once (the file's bytes change: a
        // save replaces it with more turns), then kill it a varied moment later, mostly
        // while it is mid-turn. The deadline is a hang guard.
        const QByteArray before = readBytes(history);
        QVERIFY2(QTest::qWaitFor(
                     [&] { return readBytes(history) != before || p.state() != QProcess::Running; },
                     30000),
                 "no save within 30 s");
        QVERIFY2(p.state() == QProcess::Running, p.readAllStandardError().constData());
        // The kill's moment after that save, varied on purpose (seeded: the same on every
        // run); this sleep is what is tested, not a wait for something.
        QTest::qSleep(int(rng.bounded(40)));
        ::kill(pid_t(p.processId()), SIGKILL);
        QVERIFY(p.waitForFinished(10000));
        QCOMPARE(p.exitStatus(), QProcess::CrashExit);

        std::vector<k3::ChatMessage> saved;
        try {
            saved = k3::readTranscript(history.toStdString());
        } catch (const std::exception& e) {
            QFAIL(qPrintable(QStringLiteral("kill %1: the transcript is torn: %2")
                                 .arg(kill)
                                 .arg(QString::fromUtf8(e.what()))));
        }
        // Complete states only: user/assistant pairs, each user message one we sent.
        QVERIFY2(saved.size() % 2 == 0 && saved.size() >= 2,
                 qPrintable(QString::number(saved.size())));
        for (std::size_t i = 0; i < saved.size(); i += 2) {
            QCOMPARE(saved[i].role, k3::ChatRole::User);
            QVERIFY(QByteArray::fromStdString(saved[i].content).startsWith("message "));
            QCOMPARE(saved[i + 1].role, k3::ChatRole::Assistant);
        }
        if (saved.size() > lastSize) ++grew;
        lastSize = saved.size();
    }
    qInfo("%d kills in %lld ms, %d of them after a new save", kill, clock.elapsed(), grew);
    QVERIFY(grew >= kill / 2); // the kills really landed among saves
    // Killed writers may leave their private temp files and the history's lock file (the
    // kernel drops the lock itself; the next session takes the file over), never a second
    // transcript.
    for (const QString& f : QDir(tmp.path()).entryList(QDir::Files | QDir::Hidden))
        QVERIFY2(f == "chat.jsonl" || f == ".chat.jsonl.lock" || f.startsWith(".chat.jsonl.tmp."),
                 qPrintable(f));
}

QTEST_GUILESS_MAIN(TestK3Crash)
#include "tst_k3crash.moc"
