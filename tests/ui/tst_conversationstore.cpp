#include <QDateTime>
#include <QDir>
#include <QFile>
#include <QFileInfo>
#include <QTemporaryDir>
#include <QTest>

#include "chat/ConversationModel.h"
#include "chat/ConversationStore.h"

#include <sys/stat.h>

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
    void titleIsStoredBesideTheTranscript();
    void trashedConversationIsRestoredAsItWas();
    void trashingAConversationInUseIsRefused();
    void searchMatchesMessageText();
    void foldersAreTheUsersOnly();
    void leftoverTrashIsPurgedAtStart();
    void imagesGoWithTheLastConversationUsingThem();
    void imageOnlyMessageIsTitledByItsSize();
};

namespace {
int modeOf(const QString& path) {
    struct stat st {};
    return ::stat(QFile::encodeName(path).constData(), &st) == 0 ? int(st.st_mode & 07777) : -1;
}
} // namespace

// Issue 35 item 22: conversations/ and trash/ were 0755 under umask 022 (and the
// configuration folder the same): every folder made for them is 0700, and an existing
// conversations folder is tightened.
void TestConversationStore::foldersAreTheUsersOnly() {
    const mode_t previous = ::umask(022);
    QTemporaryDir dir;
    const QString data = dir.filePath(QStringLiteral("share/k3chat"));
    ConversationStore store(data + QStringLiteral("/conversations"));
    const QString id = store.save({}, {{QStringLiteral("user"), QStringLiteral("secret"), {}}});
    QCOMPARE(modeOf(dir.filePath(QStringLiteral("share"))), 0700);
    QCOMPARE(modeOf(data), 0700);
    QCOMPARE(modeOf(store.directory()), 0700);
    store.trash(id);
    QCOMPARE(modeOf(store.trashDirectory()), 0700);
    QCOMPARE(modeOf(dir.path()), 0700); // QTemporaryDir's own, untouched
    const QString older = dir.filePath(QStringLiteral("older"));
    QVERIFY(QDir().mkpath(older));
    QCOMPARE(modeOf(older), 0755);
    ConversationStore::makePrivateFolder(older); // the configuration folder, at start
    QCOMPARE(modeOf(older), 0700);
    ::umask(previous);
}

// Issue 35 item 14: a conversation deleted just before a kill stayed in trash/ for good.
void TestConversationStore::leftoverTrashIsPurgedAtStart() {
    QTemporaryDir dir;
    const QString id = [&] {
        ConversationStore first(dir.filePath(QStringLiteral("conversations")));
        const QString saved =
            first.save({}, {{QStringLiteral("user"), QStringLiteral("forget me"), {}}});
        first.setTitle(saved, QStringLiteral("private"));
        first.trash(saved); // then the app is killed inside the undo period
        return saved;
    }();
    ConversationStore next(dir.filePath(QStringLiteral("conversations")));
    QCOMPARE(QDir(next.trashDirectory()).entryList(QDir::Files).size(), 2);
    next.purgeLeftoverTrash();
    QCOMPARE(QDir(next.trashDirectory()).entryList(QDir::Files | QDir::Hidden), QStringList());
    QVERIFY_THROWS_EXCEPTION(std::runtime_error, next.restore(id));
    QCOMPARE(next.list().size(), 0);
}

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
    // Issue 37: the sidebar showed "Show me \*\*bold\*\*, …": a title is what a reader sees.
    QCOMPARE(ConversationStore::titleFor({{QStringLiteral("user"),
                                           QStringLiteral("Show me **bold**, *italic*, `code` and "
                                                          "[a link](https://example.org)"),
                                           {}}}),
             QStringLiteral("Show me bold, italic, code and a link"));
    QCOMPARE(
        ConversationStore::titleFor(
            {{QStringLiteral("user"), QStringLiteral("# Why\n\n> is $E=mc^2$?\n\n- a\n- b"), {}}}),
        QStringLiteral("Why is E = mc²? a b"));
    QCOMPARE(ConversationStore::titleFor(
                 {{QStringLiteral("user"),
                   QStringLiteral("<b>hi</b> ![a cat](cat.png) costs $5 and $10"),
                   {}}}),
             QStringLiteral("<b>hi</b> a cat costs $5 and $10"));
}

void TestConversationStore::everyFieldSurvivesSaveAndLoad() {
    // A tool message's name (required to read the file back) and an invalid answer's
    // reason were dropped on the way through ChatTurn: the app could not reopen its own
    // copy of an imported conversation, and invalid answers came back as ordinary ones.
    QTemporaryDir dir;
    ConversationStore store(dir.path());
    // Tool calls and the results answering them went the same way (the view's model too).
    k3::ChatMessage calls{k3::ChatRole::Assistant, "", "which city?", {}};
    calls.toolCalls = {{"call_1", "get_weather", R"({"city":"Oslo"})"},
                       {"call_2", "clock", R"({"tz": "UTC"})", true}};
    k3::ChatMessage result{k3::ChatRole::Tool, "-3 C", {}, {}};
    result.toolCallId = "call_1";
    std::vector<k3::ChatMessage> messages = {
        {k3::ChatRole::User, "time?", {}, {}},
        {k3::ChatRole::Tool, "12:00", {}, "clock"},
        {k3::ChatRole::Assistant, "noon", "r", {}, "2 routed expert(s) could not be loaded"},
        calls,
        result};
    messages.back().name = "get_weather";
    const QVector<ChatTurn> turns = ConversationStore::toTurns(messages);
    QCOMPARE(turns.at(1).role, QStringLiteral("tool"));
    QCOMPARE(turns.at(1).name, QStringLiteral("clock"));
    QCOMPARE(turns.at(3).toolCalls.size(), std::size_t(2));
    QCOMPARE(turns.at(4).toolCallId, QStringLiteral("call_1"));
    ConversationModel view;
    view.setTurns(turns);
    const QString id = store.save({}, view.turns());
    const QVector<ChatTurn> back = store.load(id);
    QCOMPARE(back.size(), 5);
    QCOMPARE(back.at(1).name, QStringLiteral("clock"));
    QCOMPARE(back.at(2).invalid, QStringLiteral("2 routed expert(s) could not be loaded"));
    QVERIFY(back.at(3).toolCalls == calls.toolCalls);
    QCOMPARE(back.at(4).toolCallId, QStringLiteral("call_1"));
    QVERIFY(k3::readTranscript(store.pathFor(id).toStdString()) == messages);
    // The answer that only calls tools says so under it.
    view.setTurns(back);
    QCOMPARE(view.index(3).data(ConversationModel::StatsRole).toString(),
             QStringLiteral("calls get_weather, clock"));
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

void TestConversationStore::titleIsStoredBesideTheTranscript() {
    QTemporaryDir dir;
    ConversationStore store(dir.path());
    const QString id = store.save({}, {{QStringLiteral("user"), QStringLiteral("What is KDA?")},
                                       {QStringLiteral("assistant"), QStringLiteral("A delta.")}});
    QFile transcript(store.pathFor(id));
    QVERIFY(transcript.open(QIODevice::ReadOnly));
    const QByteArray before = transcript.readAll();
    transcript.close();
    QCOMPARE(store.storedTitle(id), QString()); // an old file: no title of its own
    store.setTitle(id, QStringLiteral("  Kimi\nattention  "));
    QCOMPARE(store.storedTitle(id), QStringLiteral("Kimi attention"));
    QVERIFY(QFile::exists(dir.filePath(id + QStringLiteral(".title"))));
    QVERIFY(transcript.open(QIODevice::ReadOnly));
    QCOMPARE(transcript.readAll(), before); // still the engine's format, byte for byte
    transcript.close();
    ConversationStore reopened(dir.path());
    QCOMPARE(reopened.list().front().title, QStringLiteral("Kimi attention"));
    QCOMPARE(reopened.summary(id).title, QStringLiteral("Kimi attention"));
    // An empty title gives the first question back.
    store.setTitle(id, QStringLiteral("   "));
    QVERIFY(!QFile::exists(dir.filePath(id + QStringLiteral(".title"))));
    QCOMPARE(reopened.list().front().title, QStringLiteral("What is KDA?"));
}

void TestConversationStore::trashedConversationIsRestoredAsItWas() {
    QTemporaryDir dir;
    ConversationStore store(dir.path());
    const QVector<ChatTurn> turns{{QStringLiteral("user"), QStringLiteral("keep me")},
                                  {QStringLiteral("assistant"), QStringLiteral("kept")}};
    const QString id = store.save({}, turns);
    store.setTitle(id, QStringLiteral("Precious"));
    const QDateTime lastWeek = QDateTime::currentDateTime().addDays(-7);
    {
        QFile file(store.pathFor(id));
        QVERIFY(file.open(QIODevice::ReadWrite));
        QVERIFY(file.setFileTime(lastWeek, QFileDevice::FileModificationTime));
    }
    store.trash(id);
    QCOMPARE(store.claimedId(), QString()); // the trashed conversation is let go
    QVERIFY(store.list().isEmpty());
    QVERIFY(!QFile::exists(store.pathFor(id)));
    QVERIFY(
        QFile::exists(store.trashDirectory() + QLatin1Char('/') + id + QStringLiteral(".jsonl")));
    store.restore(id);
    const auto list = store.list();
    QCOMPARE(list.size(), 1);
    QCOMPARE(list.front().title, QStringLiteral("Precious"));
    QCOMPARE(list.front().modified.toSecsSinceEpoch(), lastWeek.toSecsSinceEpoch());
    QCOMPARE(store.load(id).size(), 2);
    QCOMPARE(store.load(id).at(1).content, QStringLiteral("kept"));
    // Restoring twice names the file that is no longer in the trash.
    QVERIFY_THROWS_EXCEPTION(std::runtime_error, store.restore(id));
    store.trash(id);
    store.purge(id);
    QVERIFY(QDir(store.trashDirectory()).isEmpty());
    try {
        store.restore(id);
        QFAIL("a purged conversation came back");
    } catch (const std::exception& e) {
        QCOMPARE(QString::fromUtf8(e.what()),
                 store.trashDirectory() + QLatin1Char('/') + id +
                     QStringLiteral(".jsonl: not in the trash (deleted for good already)"));
    }
}

void TestConversationStore::trashingAConversationInUseIsRefused() {
    QTemporaryDir dir;
    ConversationStore first(dir.path());
    ConversationStore second(dir.path()); // another window writing the conversation
    const QString id = second.save({}, {{QStringLiteral("user"), QStringLiteral("busy")}});
    try {
        first.trash(id);
        QFAIL("a conversation in use was trashed");
    } catch (const std::exception& e) {
        QVERIFY2(QString::fromUtf8(e.what()).startsWith(first.pathFor(id) +
                                                        QStringLiteral(" is in use by another")),
                 e.what());
    }
    QVERIFY(QFile::exists(first.pathFor(id)));
    QCOMPARE(second.claimedId(), id);
}

void TestConversationStore::searchMatchesMessageText() {
    QTemporaryDir dir;
    ConversationStore store(dir.path());
    const QString zeppelin = store.save(
        {}, {{QStringLiteral("user"), QStringLiteral("Airships")},
             {QStringLiteral("assistant"), QStringLiteral("The Zeppelin LZ 129 hangar")}});
    const QString trains = store.save({}, {{QStringLiteral("user"), QStringLiteral("Trains")},
                                           {QStringLiteral("assistant"), QStringLiteral("Rails")}});
    store.setTitle(trains, QStringLiteral("Rail hangar notes"));
    const auto ids = [&](const QString& query) {
        QStringList out;
        for (const auto& s : ConversationStore::listDirectory(dir.path(), query)) out << s.id;
        out.sort();
        return out;
    };
    QCOMPARE(ids(QStringLiteral("zeppelin")), QStringList{zeppelin}); // the answer, not the title
    QStringList both{zeppelin, trains};
    both.sort();
    QCOMPARE(ids(QStringLiteral("HANGAR")), both); // a stored title is searched too
    QCOMPARE(ids(QStringLiteral("hangar  lz")), QStringList{zeppelin}); // every word
    QCOMPARE(ids(QStringLiteral("zeppelin rail")), QStringList());
    QCOMPARE(ids(QString()).size(), 2);
}

namespace {
const QString kVisionImages = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/vision/images/");

QByteArray bytesOf(const QString& path) {
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

QVector<ChatTurn> askAbout(const QString& image, const QString& text) {
    ChatTurn turn{QStringLiteral("user"), text, {}};
    turn.images << image;
    return {turn};
}
} // namespace

// Issue 33: images/ kept every picture ever attached. A conversation deleted for good
// (the undo period over, or left in the trash by a kill) takes the images no other
// conversation, saved or still undoable, refers to.
void TestConversationStore::imagesGoWithTheLastConversationUsingThem() {
    QTemporaryDir dir;
    ConversationStore store(dir.filePath(QStringLiteral("conversations")));
    const QString shared = ConversationStore::storeImage(
        store.directory(), bytesOf(kVisionImages + QStringLiteral("rgb_97x61.png")),
        QStringLiteral("png"));
    const QString own = ConversationStore::storeImage(
        store.directory(), bytesOf(kVisionImages + QStringLiteral("photo_83x67.jpg")),
        QStringLiteral("jpg"));
    const QString pending = ConversationStore::storeImage( // attached, not sent yet
        store.directory(), bytesOf(kVisionImages + QStringLiteral("grey_35x30.jpg")),
        QStringLiteral("jpg"));
    QVector<ChatTurn> firstTurns = askAbout(shared, QStringLiteral("first"));
    firstTurns.front().images << own;
    const QString first = store.save({}, firstTurns);
    const QString second = store.save({}, askAbout(shared, QStringLiteral("second")));
    const QString third = store.save({}, askAbout(shared, QStringLiteral("third")));
    QCOMPARE(QDir(store.directory() + QStringLiteral("/images")).entryList(QDir::Files).size(), 3);

    store.trash(first);
    QVERIFY(QFileInfo::exists(own)); // undoable: kept
    store.purge(first);
    QVERIFY(!QFileInfo::exists(own)); // only the first used it
    QVERIFY(QFileInfo::exists(shared));
    QVERIFY(QFileInfo::exists(pending)); // never referred to: not the purge's to delete

    store.trash(second);
    store.trash(third);
    store.purge(second);
    QVERIFY(QFileInfo::exists(shared)); // the third, in the trash, may still come back
    store.restore(third);
    QVERIFY(store.remove(third));
    QVERIFY(!QFileInfo::exists(shared));
    QCOMPARE(QDir(store.directory() + QStringLiteral("/images")).entryList(QDir::Files),
             QStringList{QFileInfo(pending).fileName()});

    // Left in the trash by a kill: purged at the next start, with its image.
    const QString again = ConversationStore::storeImage(
        store.directory(), bytesOf(kVisionImages + QStringLiteral("rgb_97x61.png")),
        QStringLiteral("png"));
    QCOMPARE(again, shared);
    const QString fourth = store.save({}, askAbout(again, QStringLiteral("fourth")));
    const QString fifth = store.save({}, askAbout(again, QStringLiteral("fifth")));
    store.trash(fourth);
    store.release(); // the app is gone
    ConversationStore next(store.directory());
    next.purgeLeftoverTrash();
    QVERIFY(QFileInfo::exists(again)); // the fifth uses it
    next.trash(fifth);
    next.purgeLeftoverTrash();
    QVERIFY(!QFileInfo::exists(again));
}

// Issue 33: a message with only an image gave the conversation an empty title.
void TestConversationStore::imageOnlyMessageIsTitledByItsSize() {
    QCOMPARE(ConversationStore::titleFor(
                 askAbout(kVisionImages + QStringLiteral("rgb_97x61.png"), QString())),
             QStringLiteral("Image 97×61"));
    QCOMPARE(ConversationStore::titleFor(
                 askAbout(kVisionImages + QStringLiteral("photo_83x67.jpg"), QStringLiteral(" "))),
             QStringLiteral("Image 83×67"));
    QVector<ChatTurn> two = askAbout(kVisionImages + QStringLiteral("rgb_97x61.png"), QString());
    two.front().images << kVisionImages + QStringLiteral("grey_40x90.png");
    QCOMPARE(ConversationStore::titleFor(two), QStringLiteral("2 images"));
    QCOMPARE(ConversationStore::titleFor(askAbout(QStringLiteral("/nonexistent/gone.png"), {})),
             QStringLiteral("Image"));
    // Text wins over the image.
    QCOMPARE(ConversationStore::titleFor(askAbout(kVisionImages + QStringLiteral("rgb_97x61.png"),
                                                  QStringLiteral("What is this?"))),
             QStringLiteral("What is this?"));
}

QTEST_GUILESS_MAIN(TestConversationStore)
#include "tst_conversationstore.moc"
