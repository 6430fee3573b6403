#include <QDir>
#include <QLineEdit>
#include <QListWidget>
#include <QMessageBox>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTest>

#include "AppSettings.h"
#include "MainWindow.h"
#include "ModelLoader.h"
#include "chat/ChatController.h"
#include "chat/ConversationListPanel.h"
#include "chat/ConversationModel.h"
#include "chat/ConversationStore.h"
#include "chat/ConversationView.h"
#include "chat/MessageComposer.h"
#include "chat/TranscriptWriter.h"
#include "panels/TokenTimingPanel.h"

// Issue 37 points 8 and 10: what an answer says about how it ended, and what the window
// keeps after a stop, a rename, a switch of chats and a restart.
class TestAnswerDetails : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void init();
    void answerCutAtTheTokenLimitSaysSo();
    void everyStoppedAnswerIsSavedWithItsModel();
    void renameShowsTheNewTitleInTheStatusBar();
    void switchingChatsClearsTheTimingChart();
    void lastOpenConversationIsReopenedAtStart();

private:
    const QString m_tiny = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a");
};

namespace {
QModelIndex lastMessage(const MainWindow& window) {
    ConversationModel* m = window.conversationView()->conversation();
    return m->index(m->rowCount() - 1);
}

bool loadTiny(MainWindow& window, const QString& dir) {
    QSignalSpy ready(&window, &MainWindow::modelReady);
    window.loader()->loadModelFolder(dir);
    return ready.wait(30000);
}

void setLongestAnswer(int tokens) {
    AppSettings settings = AppSettings::load();
    settings.maxTokens = tokens;
    settings.save();
}

// The tiny model never ends its turn: it writes until the limit or Stop.
bool waitForTokens(const MainWindow& window, int atLeast) {
    return QTest::qWaitFor(
        [&] {
            return lastMessage(window).data(ConversationModel::StreamingRole).toBool() &&
                   lastMessage(window).data(ConversationModel::ContentRole).toString().size() >=
                       atLeast;
        },
        30000);
}

// Sends `question`, lets a few tokens arrive and presses Stop.
bool askAndStop(MainWindow& window, const QString& question) {
    QSignalSpy finished(&window, &MainWindow::answerFinished);
    window.chat()->send(question);
    if (!waitForTokens(window, 2)) return false;
    window.chat()->stop();
    return finished.wait(30000);
}

QString seed(MainWindow& window, const QString& question) {
    const QString id =
        window.store()->save({}, {{QStringLiteral("user"), question},
                                  {QStringLiteral("assistant"), QStringLiteral("ok")}});
    window.store()->release();
    return id;
}
} // namespace

void TestAnswerDetails::initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("k3chat-tests"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_answerdetails"));
    QStandardPaths::setTestModeEnabled(true); // never the user's settings or conversations
    // Every run starts without saved conversation states (the engine would restore them).
    QDir(AppSettings::stateCacheDirectory()).removeRecursively();
}

void TestAnswerDetails::init() {
    QSettings().clear();
    QSettings().setValue(QStringLiteral("setup/firstRunDone"), true);
    QDir(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) +
         QStringLiteral("/conversations"))
        .removeRecursively();
}

// Point 8: with Longest answer = 5 the footer read "5 tokens · 96.8 tok/s" as if the model
// had finished.
void TestAnswerDetails::answerCutAtTheTokenLimitSaysSo() {
    setLongestAnswer(5);
    MainWindow window;
    QVERIFY(loadTiny(window, m_tiny));
    window.composer()->setThinking(false);
    QSignalSpy finished(&window, &MainWindow::answerFinished);
    window.chat()->send(QStringLiteral("Tell me about KDA."));
    QVERIFY(finished.wait(60000));
    const QString stats = lastMessage(window).data(ConversationModel::StatsRole).toString();
    QVERIFY2(stats.startsWith(QStringLiteral("5 tokens · ")), qPrintable(stats));
    QVERIFY2(stats.endsWith(QStringLiteral(" · stopped at the 5-token limit")), qPrintable(stats));
    QVERIFY(lastMessage(window).data(ConversationModel::StoppedRole).toBool());
    QCOMPARE(window.statusBar()->currentMessage(),
             QStringLiteral("k3_tiny_a · ready · the answer stopped at the 5-token limit "
                            "(Longest answer, in Settings)"));
    const QVector<ChatTurn> saved = window.store()->load(window.currentConversationId());
    QCOMPARE(saved.size(), 2);
    QVERIFY(saved[1].stopped); // cut before the model ended it
    QCOMPARE(saved[1].figures.tokens, 5);
}

// Point 10: the second of two stopped answers in a chat was saved without its model, so
// it had no "answered by" line when reopened.
void TestAnswerDetails::everyStoppedAnswerIsSavedWithItsModel() {
    setLongestAnswer(32768);
    MainWindow window;
    QVERIFY(loadTiny(window, m_tiny));
    window.composer()->setThinking(false);
    QVERIFY(askAndStop(window, QStringLiteral("Tell me about KDA.")));
    QVERIFY(askAndStop(window, QStringLiteral("And about MLA?")));
    // A third, kept by switching to a new chat mid-answer.
    window.chat()->send(QStringLiteral("And MXFP4?"));
    QVERIFY(waitForTokens(window, 2));
    const QString id = window.currentConversationId();
    window.newChat();
    window.transcriptWriter()->flush(); // the save newChat queued is written
    const QVector<ChatTurn> saved = window.store()->load(id);
    QCOMPARE(saved.size(), 6);
    for (int answer : {1, 3, 5}) {
        QVERIFY(saved[answer].stopped);
        QVERIFY2(
            saved[answer].model == QStringLiteral("k3_tiny_a"),
            qPrintable(QStringLiteral("answer %1: \"%2\"").arg(answer).arg(saved[answer].model)));
    }
    QTRY_VERIFY_WITH_TIMEOUT(!window.composer()->isGenerating(), 30000); // Stop took
    window.openConversation(id);
    for (int row : {1, 3, 5}) {
        const QString stats = window.conversationView()
                                  ->conversation()
                                  ->index(row)
                                  .data(ConversationModel::StatsRole)
                                  .toString();
        QVERIFY2(stats.endsWith(QStringLiteral(" · answered by k3_tiny_a")), qPrintable(stats));
    }
}

// Point 10: after a rename the status bar still said 'Opened "first question"'.
void TestAnswerDetails::renameShowsTheNewTitleInTheStatusBar() {
    MainWindow window;
    const QString id = seed(window, QStringLiteral("first question"));
    window.refreshConversationList();
    window.show();
    QVERIFY(QTest::qWaitForWindowActive(&window));
    window.openConversation(id);
    QCOMPARE(window.statusBar()->currentMessage(), QStringLiteral("Opened \"first question\""));
    QListWidget* list = window.conversationList();
    list->setFocus();
    QTest::keyClick(list, Qt::Key_F2);
    auto* editor = qobject_cast<QLineEdit*>(QApplication::focusWidget());
    QVERIFY(editor);
    editor->selectAll();
    QTest::keyClicks(editor, QStringLiteral("Trip to Kyoto"));
    QTest::keyClick(editor, Qt::Key_Return);
    QTRY_COMPARE(window.store()->storedTitle(id), QStringLiteral("Trip to Kyoto"));
    QCOMPARE(window.statusBar()->currentMessage(), QStringLiteral("Renamed to \"Trip to Kyoto\""));
}

// Point 10: after switching chats the timing dock kept the previous chat's chart.
void TestAnswerDetails::switchingChatsClearsTheTimingChart() {
    setLongestAnswer(6);
    MainWindow window;
    const QString other = seed(window, QStringLiteral("an older chat"));
    QVERIFY(loadTiny(window, m_tiny));
    window.composer()->setThinking(false);
    QSignalSpy finished(&window, &MainWindow::answerFinished);
    window.chat()->send(QStringLiteral("Tell me about KDA."));
    QVERIFY(finished.wait(60000));
    TokenTimingPanel* timing = window.timingPanel();
    QCOMPARE(timing->barCount(), 6);
    const QString answered = window.currentConversationId();
    window.openConversation(other);
    QCOMPARE(window.currentConversationId(), other);
    QCOMPARE(timing->barCount(), 0);
    QCOMPARE(timing->summaryText(), QStringLiteral("No tokens yet."));
    window.openConversation(answered);
    window.newChat();
    QCOMPARE(timing->barCount(), 0);
}

// Point 10: the conversation open at quit is open again at the next start, unless it
// has gone since.
void TestAnswerDetails::lastOpenConversationIsReopenedAtStart() {
    QString id;
    {
        MainWindow window;
        id = seed(window, QStringLiteral("remember me"));
        seed(window, QStringLiteral("not me"));
        window.show();
        window.openConversation(id);
        QVERIFY(window.close());
    }
    {
        MainWindow again;
        again.show();
        again.loadStartupModel();
        QCOMPARE(again.currentConversationId(), id);
        QCOMPARE(again.conversationView()->messageCount(), 2);
        QCOMPARE(again.conversationPanel()->currentConversation(), id);
        QVERIFY(again.close());
    }
    {
        MainWindow third; // deleted meanwhile: a new chat, and no message box
        QVERIFY(third.store()->remove(id));
        third.show();
        third.loadStartupModel();
        QCOMPARE(third.currentConversationId(), QString());
        QCOMPARE(third.conversationView()->messageCount(), 0);
        QVERIFY(third.findChildren<QMessageBox*>().isEmpty());
    }
}

QTEST_MAIN(TestAnswerDetails)
#include "tst_answerdetails.moc"
