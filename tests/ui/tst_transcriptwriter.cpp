// TranscriptWriter (issue 32 step 4): the open conversation's saves on their own thread,
// in order, a save right behind another of the same conversation replaced by it; flush()
// returns with everything on disk; whenWritten() runs after what was queued before it;
// a failed save is reported (failed, queued) naming the file; destroying the writer
// writes what is still queued.
#include <QFile>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QThread>

#include "chat/ConversationStore.h"
#include "chat/TranscriptWriter.h"

namespace {

QVector<ChatTurn> turns(const QString& question, const QString& answer) {
    QVector<ChatTurn> t{{QStringLiteral("user"), question}};
    if (!answer.isEmpty()) t.push_back({QStringLiteral("assistant"), answer});
    return t;
}

} // namespace

class TestTranscriptWriter : public QObject {
    Q_OBJECT
private slots:
    void savesInOrderOffTheCallersThread();
    void whenWrittenComesAfterWhatWasQueued();
    void aFailedSaveIsReported();
    void destroyingTheWriterWritesWhatIsQueued();
};

void TestTranscriptWriter::savesInOrderOffTheCallersThread() {
    QTemporaryDir dir;
    ConversationStore store(dir.path());
    TranscriptWriter writer(&store);
    QThread* emitter = nullptr;
    QStringList titles;
    connect(
        &writer, &TranscriptWriter::written, this,
        [&](const ConversationStore::Summary& s) {
            emitter = QThread::currentThread();
            titles << s.title;
        },
        Qt::DirectConnection);
    const QString id = ConversationStore::newId();
    QVERIFY(!QFile::exists(store.pathFor(id))); // named without touching the disk
    for (int i = 0; i < 50; ++i)
        writer.saveTranscript(id, turns(QStringLiteral("Question"), QString::number(i)));
    ConversationSettings settings;
    settings.maxTokens = 77;
    writer.saveSettings(id, settings);
    writer.release();
    writer.flush();
    QVERIFY(writer.isIdle());
    QCOMPARE(store.load(id).size(), 2);
    QCOMPARE(store.load(id).at(1).content, QStringLiteral("49")); // the last one wins
    QCOMPARE(store.loadSettings(id).maxTokens, std::optional<int>(77));
    QCOMPARE(store.claimedId(), QString()); // released after the saves, not before
    QVERIFY(emitter != nullptr);
    QVERIFY(emitter != QThread::currentThread());
    QVERIFY(!titles.isEmpty());
    QVERIFY(titles.size() <= 50); // saves queued behind one another were merged
    QCOMPARE(titles.last(), QStringLiteral("Question"));
}

void TestTranscriptWriter::whenWrittenComesAfterWhatWasQueued() {
    QTemporaryDir dir;
    ConversationStore store(dir.path());
    TranscriptWriter writer(&store);
    const QString id = ConversationStore::newId();
    QStringList seen; // in the order they reach this thread
    connect(&writer, &TranscriptWriter::written, this,
            [&](const ConversationStore::Summary& s) { seen << s.id; });
    writer.saveTranscript(id, turns(QStringLiteral("Hello"), QStringLiteral("Hi")));
    bool done = false;
    int rowsWhenDone = -1;
    writer.whenWritten(this, [&] {
        done = true;
        rowsWhenDone = int(store.load(id).size());
        seen << QStringLiteral("done");
    });
    QTRY_VERIFY(done);
    QCOMPARE(rowsWhenDone, 2);
    QCOMPARE(seen, (QStringList{id, QStringLiteral("done")}));
    // A context gone before its turn: nothing is called.
    auto* context = new QObject;
    bool called = false;
    writer.saveTranscript(id, turns(QStringLiteral("Hello"), QStringLiteral("Again")));
    writer.whenWritten(context, [&] { called = true; });
    delete context;
    bool after = false;
    writer.whenWritten(this, [&] { after = true; });
    QTRY_VERIFY(after);
    QVERIFY(!called);
}

void TestTranscriptWriter::aFailedSaveIsReported() {
    QTemporaryDir dir;
    QFile blocker(dir.filePath(QStringLiteral("file")));
    QVERIFY(blocker.open(QIODevice::WriteOnly));
    blocker.close();
    // A folder inside a file cannot be made, whoever runs the test.
    ConversationStore store(blocker.fileName() + QStringLiteral("/conversations"));
    TranscriptWriter writer(&store);
    QSignalSpy failed(&writer, &TranscriptWriter::failed);
    QSignalSpy written(&writer, &TranscriptWriter::written);
    const QString id = ConversationStore::newId();
    writer.saveTranscript(id, turns(QStringLiteral("Hello"), {}));
    QVERIFY(failed.wait(10000));
    QCOMPARE(failed.at(0).at(0).toString(), id);
    QVERIFY2(failed.at(0).at(1).toString().contains(store.directory()),
             qPrintable(failed.at(0).at(1).toString()));
    QCOMPARE(written.count(), 0);
    writer.flush(); // a failure leaves the queue running
    QVERIFY(writer.isIdle());
}

void TestTranscriptWriter::destroyingTheWriterWritesWhatIsQueued() {
    QTemporaryDir dir;
    ConversationStore store(dir.path());
    const QString first = ConversationStore::newId();
    const QString second = first + QStringLiteral("-b");
    {
        TranscriptWriter writer(&store);
        writer.saveTranscript(first, turns(QStringLiteral("One"), QStringLiteral("1")));
        writer.release();
        writer.saveTranscript(second, turns(QStringLiteral("Two"), QStringLiteral("2")));
    }
    QCOMPARE(store.load(first).at(1).content, QStringLiteral("1"));
    QCOMPARE(store.load(second).at(1).content, QStringLiteral("2"));
    QCOMPARE(store.claimedId(), second);
}

QTEST_GUILESS_MAIN(TestTranscriptWriter)
#include "tst_transcriptwriter.moc"
