#include <QDateTime>
#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include "chat/ConversationStore.h"

#include <k3/chat.hpp>

#include <unistd.h>

class TestConversationStore : public QObject {
    Q_OBJECT
private slots:
    void roundTripAndList();
    void badTranscriptIsRefusedAndKept();
    void titleIsTheFirstQuestion();
    void everyFieldSurvivesSaveAndLoad();
    void secondSessionOnOneConversationIsRefused();
};

void TestConversationStore::roundTripAndList() {
    QTemporaryDir dir;
    ConversationStore store(dir.filePath(QStringLiteral("conversations")));
    const QVector<ChatTurn> turns{
        {QStringLiteral("user"), QStringLiteral("Hi ✓"), {}},
        {QStringLiteral("assistant"), QStringLiteral("Hello!"), QStringLiteral("greet")}};
    const QString id = store.save({}, turns);
    QVERIFY(!id.isEmpty());
    const QVector<ChatTurn> back = store.load(id);
    QCOMPARE(back.size(), 2);
    QCOMPARE(back.at(0).content, QStringLiteral("Hi ✓"));
    QCOMPARE(back.at(1).reasoning, QStringLiteral("greet"));
    // Saving again under the same id replaces the file, never duplicates it.
    QCOMPARE(
        store.save(id,
                   turns + QVector<ChatTurn>{{QStringLiteral("user"), QStringLiteral("more"), {}}}),
        id);
    QCOMPARE(store.list().size(), 1);
    QCOMPARE(store.load(id).size(), 3);
    // Newest first means by modification time; two saves within the file system's clock
    // tick get the same time, so the first file is dated a minute back.
    {
        QFile first(store.directory() + QStringLiteral("/") + id + QStringLiteral(".jsonl"));
        QVERIFY(first.open(QIODevice::ReadWrite));
        QVERIFY(first.setFileTime(QDateTime::currentDateTime().addSecs(-60),
                                  QFileDevice::FileModificationTime));
    }
    const QString second = store.save({}, {{QStringLiteral("user"), QStringLiteral("Second"), {}}});
    QVERIFY(second != id);
    const auto list = store.list();
    QCOMPARE(list.size(), 2);
    QCOMPARE(list.front().title, QStringLiteral("Second")); // newest first
    QVERIFY(store.remove(second));
    QCOMPARE(store.list().size(), 1);
}

void TestConversationStore::badTranscriptIsRefusedAndKept() {
    QTemporaryDir dir;
    ConversationStore store(dir.path());
    const QByteArray bad =
        "{\"role\":\"user\",\"content\":\"ok\"}\n{\"role\":\"wizard\",\"content\":\"x\"}\n";
    QFile f(dir.filePath(QStringLiteral("broken.jsonl")));
    QVERIFY(f.open(QIODevice::WriteOnly));
    f.write(bad);
    f.close();
    try {
        store.load(QStringLiteral("broken"));
        QFAIL("an invalid transcript loaded");
    } catch (const std::exception& e) {
        QVERIFY2(
            QString::fromUtf8(e.what()).contains(QStringLiteral("broken.jsonl:2: field \"role\"")),
            e.what());
    }
    QVERIFY(f.open(QIODevice::ReadOnly));
    QCOMPARE(f.readAll(), bad); // untouched
    QCOMPARE(store.list().size(), 1);
    QVERIFY(store.list().front().title.contains(QStringLiteral("unreadable")));
}

void TestConversationStore::titleIsTheFirstQuestion() {
    QCOMPARE(ConversationStore::titleFor(
                 {{QStringLiteral("system"), QStringLiteral("be brief"), {}},
                  {QStringLiteral("user"), QStringLiteral("  What is\nMXFP4? "), {}}}),
             QStringLiteral("What is MXFP4?"));
    const QString longTitle =
        ConversationStore::titleFor({{QStringLiteral("user"), QString(80, QLatin1Char('a')), {}}});
    QCOMPARE(longTitle.size(), 48);
    QVERIFY(longTitle.endsWith(QStringLiteral("…")));
}

void TestConversationStore::everyFieldSurvivesSaveAndLoad() {
    // A tool message's name (required to read the file back) and an invalid answer's
    // reason were dropped on the way through ChatTurn: the app could not reopen its own
    // copy of an imported conversation, and invalid answers came back as ordinary ones.
    QTemporaryDir dir;
    ConversationStore store(dir.path());
    const std::vector<k3::ChatMessage> messages = {
        {k3::ChatRole::User, "time?", {}, {}},
        {k3::ChatRole::Tool, "12:00", {}, "clock"},
        {k3::ChatRole::Assistant, "noon", "r", {}, "2 routed expert(s) could not be loaded"}};
    const QVector<ChatTurn> turns = ConversationStore::toTurns(messages);
    QCOMPARE(turns.at(1).role, QStringLiteral("tool"));
    QCOMPARE(turns.at(1).name, QStringLiteral("clock"));
    const QString id = store.save({}, turns);
    const QVector<ChatTurn> back = store.load(id);
    QCOMPARE(back.size(), 3);
    QCOMPARE(back.at(1).name, QStringLiteral("clock"));
    QCOMPARE(back.at(2).invalid, QStringLiteral("2 routed expert(s) could not be loaded"));
    QVERIFY(k3::readTranscript(store.pathFor(id).toStdString()) == messages);
}

void TestConversationStore::secondSessionOnOneConversationIsRefused() {
    QTemporaryDir dir;
    ConversationStore first(dir.path());
    ConversationStore second(dir.path()); // another k3chat window on the same folder
    const QVector<ChatTurn> turns{{QStringLiteral("user"), QStringLiteral("mine"), {}}};
    const QString id = first.save({}, turns);
    QCOMPARE(first.claimedId(), id);
    QFile file(first.pathFor(id));
    QVERIFY(file.open(QIODevice::ReadOnly));
    const QByteArray before = file.readAll();
    file.close();
    QString error;
    try {
        second.save(id, {{QStringLiteral("user"), QStringLiteral("theirs"), {}}});
    } catch (const std::exception& e) {
        error = QString::fromUtf8(e.what());
    }
    QCOMPARE(error, first.pathFor(id) + QStringLiteral(" is in use by another session (pid %1): "
                                                       "two sessions writing one conversation "
                                                       "would overwrite each other's turns; close "
                                                       "the other one or choose another file")
                                            .arg(::getpid()));
    QVERIFY(file.open(QIODevice::ReadOnly));
    QCOMPARE(file.readAll(), before); // the last writer no longer silently wins
    file.close();
    QCOMPARE(second.claimedId(), QString());
    // Once the first moves on, the conversation is free.
    first.release();
    QCOMPARE(second.save(id, turns), id);
    QCOMPARE(second.claimedId(), id);
    QVERIFY_THROWS_EXCEPTION(std::runtime_error, first.claim(id));
}

QTEST_GUILESS_MAIN(TestConversationStore)
#include "tst_conversationstore.moc"
