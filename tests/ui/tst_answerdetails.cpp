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
#include "chat/ConversationListPanel.h"
#include "chat/ConversationModel.h"
#include "chat/ConversationStore.h"
#include "chat/ConversationView.h"
#include "chat/MessageComposer.h"
#include "panels/TokenTimingPanel.h"

// Issue 37 point 8: what an answer says about how it ended.
class TestAnswerDetails : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void init();
    void answerCutAtTheTokenLimitSaysSo();

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
    window.loadModelFolder(dir);
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
} // namespace

void TestAnswerDetails::initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("k3chat-tests"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_answerdetails"));
    QStandardPaths::setTestModeEnabled(true); // never the user's settings or conversations
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
    window.sendMessage(QStringLiteral("Tell me about KDA."));
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

QTEST_MAIN(TestAnswerDetails)
#include "tst_answerdetails.moc"
