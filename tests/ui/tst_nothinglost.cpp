#include <QAbstractButton>
#include <QAction>
#include <QApplication>
#include <QCheckBox>
#include <QDir>
#include <QMessageBox>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

#include "AppSettings.h"
#include "MainWindow.h"
#include "ModelLoader.h"
#include "SettingsDialog.h"
#include "chat/ChatController.h"
#include "chat/ConversationModel.h"
#include "chat/ConversationStore.h"
#include "chat/ConversationView.h"
#include "chat/MessageComposer.h"

#include <k3/fault_injection.hpp>
#include <k3/pack.hpp>

#include <fstream>
#include <nlohmann/json.hpp>

// Issue 21: an answer is never lost, however it ends (Stop, quitting, an error, a crash
// between periodic saves); a question left without an answer can be answered; the
// figures under an answer are saved with it; Think is never forced on the demo.
class TestNothingLost : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void init();
    void quitMidAnswerKeepsThePartialAnswer();
    void stopKeepsThePartialAnswerMarkedStopped();
    void streamingAnswerIsSavedWhileItIsWritten();
    void failedTokenKeepsThePartialAnswer();
    void unansweredQuestionIsAnswered();
    void figuresAreSavedAndShownAfterReopening();
    void thinkIsRememberedPerModelAndNeverForcedOnTheDemo();

private:
    const QString m_tiny = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a");
    const QString m_demo = QStringLiteral(K3_SOURCE_DIR "/resources/demo");
};

namespace {

QModelIndex lastMessage(const MainWindow& window) {
    ConversationModel* m = window.conversationView()->conversation();
    return m->index(m->rowCount() - 1);
}

bool loadInto(MainWindow& window, const QString& dir, const QString& trunk = {},
              quint64 trunkBytes = 0) {
    QSignalSpy ready(&window, &MainWindow::modelReady);
    k3::LaunchConfig config;
    config.modelDir = dir.toStdString();
    config.trunkDir = trunk.toStdString();
    if (!trunk.isEmpty()) config.budget = k3::LaunchBudget::ofBytes(trunkBytes, 0);
    window.loader()->loadModel(config);
    return ready.wait(30000);
}

// The tiny model never ends its turn by itself: it writes until the token limit.
bool waitForTokens(const MainWindow& window, int atLeast) {
    return QTest::qWaitFor(
        [&] {
            return lastMessage(window).data(ConversationModel::StreamingRole).toBool() &&
                   lastMessage(window).data(ConversationModel::ContentRole).toString().size() >=
                       atLeast;
        },
        30000);
}

nlohmann::json demoPrompt(int i) {
    std::ifstream in(K3_SOURCE_DIR "/resources/demo/expected.json");
    return nlohmann::json::parse(in).at("prompts").at(i);
}

} // namespace

void TestNothingLost::initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("k3chat-tests"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_nothinglost"));
    QStandardPaths::setTestModeEnabled(true); // never touch the user's settings or chats
    // Every run starts without saved conversation states (the engine would restore them).
    QDir(AppSettings::stateCacheDirectory()).removeRecursively();
    QDir(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) +
         QStringLiteral("/conversations"))
        .removeRecursively();
}

void TestNothingLost::init() {
    QSettings().clear();
    QSettings().setValue(QStringLiteral("setup/firstRunDone"), true);
    QSettings().setValue(QStringLiteral("generation/maxTokens"), 32768); // long answers
}

// Quitting mid-answer asks once; "Quit" closes, and the reopened conversation holds the
// answer so far, marked stopped.
void TestNothingLost::quitMidAnswerKeepsThePartialAnswer() {
    QString id, kept;
    {
        MainWindow window;
        window.show();
        QVERIFY(loadInto(window, m_tiny));
        window.composer()->setThinking(false);
        window.chat()->send(QStringLiteral("Tell me about KDA."));
        QVERIFY(waitForTokens(window, 1));
        QVERIFY(!window.close()); // asks first
        auto* box = window.findChild<QMessageBox*>(QStringLiteral("quitDuringAnswerBox"));
        QVERIFY(box);
        QCOMPARE(box->text(), QStringLiteral("An answer is being written. Quit anyway? The "
                                             "answer so far is kept."));
        QVERIFY(!window.close()); // once: the same box, not a second one
        QCOMPARE(window.findChildren<QMessageBox*>(QStringLiteral("quitDuringAnswerBox")).size(),
                 1);
        QVERIFY(box->checkBox() && !box->checkBox()->isChecked()); // "Don't ask again"
        box->findChild<QAbstractButton*>(QStringLiteral("quit"))->click();
        QTRY_VERIFY(!window.isVisible());
        QVERIFY(!window.chat()->isAnswering());
        id = window.currentConversationId();
        QVERIFY(lastMessage(window).data(ConversationModel::StoppedRole).toBool());
        kept = lastMessage(window).data(ConversationModel::ContentRole).toString();
        QVERIFY(!kept.isEmpty());
        QVERIFY(
            QSettings().value(QStringLiteral("chat/askBeforeQuittingMidAnswer"), true).toBool());
    }
    MainWindow again;
    const QVector<ChatTurn> saved = again.store()->load(id);
    QCOMPARE(saved.size(), 2);
    QCOMPARE(saved[1].role, QStringLiteral("assistant"));
    QCOMPARE(saved[1].content, kept);
    QVERIFY(saved[1].stopped);
    QVERIFY(saved[1].figures.tokens >= 1);
    again.openConversation(id);
    QVERIFY(lastMessage(again).data(ConversationModel::StoppedRole).toBool());
    QVERIFY2(lastMessage(again)
                 .data(ConversationModel::StatsRole)
                 .toString()
                 .endsWith(QStringLiteral(" · stopped · answered by k3_tiny_a")),
             qPrintable(lastMessage(again).data(ConversationModel::StatsRole).toString()));
    QVERIFY(again.store()->remove(id));
}

void TestNothingLost::stopKeepsThePartialAnswerMarkedStopped() {
    MainWindow window;
    QVERIFY(loadInto(window, m_tiny));
    window.composer()->setThinking(false);
    QSignalSpy finished(&window, &MainWindow::answerFinished);
    window.chat()->send(QStringLiteral("Tell me about KDA."));
    QVERIFY(waitForTokens(window, 1));
    window.chat()->stop();
    QVERIFY(finished.wait(10000));
    const QModelIndex answer = lastMessage(window);
    QCOMPARE(answer.row(), 1);
    QVERIFY(answer.data(ConversationModel::StoppedRole).toBool());
    const QString stats = answer.data(ConversationModel::StatsRole).toString();
    QVERIFY2(stats.contains(QStringLiteral(" · stopped")), qPrintable(stats));
    const QVector<ChatTurn> saved = window.store()->load(window.currentConversationId());
    QCOMPARE(saved.size(), 2);
    QCOMPARE(saved[1].content, answer.data(ConversationModel::ContentRole).toString());
    QVERIFY(saved[1].stopped);
    QCOMPARE(saved[1].figures.tokens, stats.section(QLatin1Char(' '), 0, 0).toInt());
    QVERIFY(saved[1].figures.tokens >= 1 && saved[1].figures.tokens < 32768);
    QVERIFY(window.store()->remove(window.currentConversationId()));
}

// A crash mid-answer loses at most the last few seconds: the answer so far is on disk,
// marked stopped, while it is still being written.
void TestNothingLost::streamingAnswerIsSavedWhileItIsWritten() {
    MainWindow window;
    QVERIFY(loadInto(window, m_tiny));
    window.composer()->setThinking(false);
    QCOMPARE(window.chat()->partialSaveInterval(), 3000);
    window.chat()->setPartialSaveInterval(0); // every token
    window.chat()->send(QStringLiteral("Tell me about KDA."));
    QVERIFY(waitForTokens(window, 5));
    QVERIFY(window.chat()->isAnswering());
    // Transcript writes run off the GUI thread: the file follows the view a moment later.
    QVector<ChatTurn> onDisk;
    QTRY_VERIFY_WITH_TIMEOUT(
        (onDisk = window.store()->load(window.currentConversationId())).size() == 2 &&
            !onDisk[1].content.isEmpty(),
        10000);
    QVERIFY(window.chat()->isAnswering());
    QVERIFY(onDisk[1].stopped);
    QVERIFY(!onDisk[1].content.isEmpty());
    QVERIFY(lastMessage(window)
                .data(ConversationModel::ContentRole)
                .toString()
                .startsWith(onDisk[1].content));
    QVERIFY(onDisk[1].figures.tokens >= 1);
    QSignalSpy finished(&window, &MainWindow::answerFinished);
    window.chat()->stop();
    QVERIFY(finished.wait(10000));
    QVERIFY(window.store()->remove(window.currentConversationId()));
}

// A streamed trunk whose reads start failing mid-answer: the answer fails, what arrived
// is kept (marked stopped) and the box says the conversation is kept.
void TestNothingLost::failedTokenKeepsThePartialAnswer() {
    QTemporaryDir tmp;
    const QString trunk = tmp.filePath(QStringLiteral("trunk"));
    k3::packTrunk(m_tiny.toStdString(), trunk.toStdString());
    const k3::TrunkIndex index = k3::openTrunkIndex(trunk.toStdString(), m_tiny.toStdString());
    MainWindow window;
    // Nothing pinned: every token reads its layers from trunk.bin.
    QVERIFY(loadInto(window, m_tiny, trunk, 2 * k3::alignUp(index.largestLayerBytes())));
    window.composer()->setThinking(false);
    window.chat()->send(QStringLiteral("Tell me about KDA."));
    QVERIFY(waitForTokens(window, 1));
    k3::FaultRule rule;
    rule.kind = k3::IoKind::Trunk;
    rule.error = k3::IoFault::Eio;
    {
        const k3::ScopedFault armed(rule);
        QTRY_VERIFY_WITH_TIMEOUT(window.findChild<QMessageBox*>(QStringLiteral("answerFailedBox")),
                                 30000);
    }
    auto* box = window.findChild<QMessageBox*>(QStringLiteral("answerFailedBox"));
    QCOMPARE(box->text(),
             QStringLiteral("The engine stopped with an error; the conversation is kept."));
    QVERIFY2(box->detailedText().contains(QStringLiteral("trunk")),
             qPrintable(box->detailedText()));
    box->close();
    QVERIFY(!window.composer()->isGenerating());
    const QModelIndex answer = lastMessage(window);
    QCOMPARE(answer.row(), 1);
    QVERIFY(answer.data(ConversationModel::StoppedRole).toBool());
    QVERIFY2(answer.data(ConversationModel::StatsRole)
                 .toString()
                 .endsWith(QStringLiteral(" · stopped: the answer failed")),
             qPrintable(answer.data(ConversationModel::StatsRole).toString()));
    const QVector<ChatTurn> saved = window.store()->load(window.currentConversationId());
    QCOMPARE(saved.size(), 2);
    QVERIFY(!saved[1].content.isEmpty());
    QCOMPARE(saved[1].content, answer.data(ConversationModel::ContentRole).toString());
    QVERIFY(saved[1].stopped);
    QVERIFY(window.store()->remove(window.currentConversationId()));
}

// A conversation that ends with a question (the app quit before the first token):
// Edit offers "Answer the last question", and it answers it.
void TestNothingLost::unansweredQuestionIsAnswered() {
    const nlohmann::json prompt = demoPrompt(0);
    const QString question = QString::fromStdString(prompt.at("question").get<std::string>());
    MainWindow window;
    QVERIFY(loadInto(window, m_demo));
    const QString id = window.store()->save({}, {{QStringLiteral("user"), question, {}}});
    window.openConversation(id);
    auto* action = window.findChild<QAction*>(QStringLiteral("regenerateAction"));
    QCOMPARE(action->text(), QStringLiteral("&Answer the last question"));
    QSignalSpy finished(&window, &MainWindow::answerFinished);
    action->trigger();
    QVERIFY(finished.wait(60000));
    QCOMPARE(window.conversationView()->messageCount(), 2);
    const QString expected =
        QString::fromStdString(prompt.at("answer_text").get<std::string>()).trimmed();
    QCOMPARE(lastMessage(window).data(ConversationModel::ContentRole).toString().trimmed(),
             expected);
    QCOMPARE(action->text(), QStringLiteral("&Regenerate the last answer"));
    const QVector<ChatTurn> saved = window.store()->load(id);
    QCOMPARE(saved.size(), 2);
    QCOMPARE(saved[1].content.trimmed(), expected);
    QVERIFY(!saved[1].stopped);
    QVERIFY(window.store()->remove(id));
}

void TestNothingLost::figuresAreSavedAndShownAfterReopening() {
    MainWindow window;
    QVERIFY(loadInto(window, m_demo));
    QSignalSpy finished(&window, &MainWindow::answerFinished);
    window.chat()->send(QString::fromStdString(demoPrompt(1).at("question").get<std::string>()));
    QVERIFY(finished.wait(60000));
    const QString id = window.currentConversationId();
    const QString liveStats = lastMessage(window).data(ConversationModel::StatsRole).toString();
    const QVector<ChatTurn> saved = window.store()->load(id);
    QCOMPARE(saved.size(), 2);
    const k3::AnswerFigures f = saved[1].figures;
    QVERIFY(!saved[1].stopped);
    QVERIFY2(f.tokens > 1 && f.tokensPerSecond > 0 && f.firstTokenSeconds > 0,
             qPrintable(liveStats));
    const QString figures = QStringLiteral("%1 tokens · %2 tok/s · first token %3 s")
                                .arg(f.tokens)
                                .arg(f.tokensPerSecond, 0, 'f', 1)
                                .arg(f.firstTokenSeconds, 0, 'f', 2);
    QVERIFY2(liveStats.startsWith(figures + QStringLiteral(" · prompt ")), qPrintable(liveStats));
    window.newChat();
    window.openConversation(id);
    QCOMPARE(lastMessage(window).data(ConversationModel::StatsRole).toString(),
             figures + QStringLiteral(" · answered by demo"));
    QVERIFY(window.store()->remove(id));
}

// Think is remembered per model; the demo (no think channel) never has it ticked, not
// after Settings OK with "Think" as the default, not after a restart.
void TestNothingLost::thinkIsRememberedPerModelAndNeverForcedOnTheDemo() {
    {
        MainWindow window;
        QVERIFY(loadInto(window, m_tiny));
        auto* think = window.composer()->findChild<QCheckBox*>(QStringLiteral("thinkCheck"));
        QVERIFY(think->isEnabled());
        QVERIFY(think->isChecked()); // the Settings default
        think->click();              // the user's choice for this model
        QVERIFY(!window.composer()->thinking());
        QVERIFY(loadInto(window, m_demo));
        QVERIFY(!think->isChecked());
        QVERIFY(!think->isEnabled());
        QSettings().setValue(QStringLiteral("thinking/enabled"), false);
        window.showSettings();
        auto* dialog = window.findChild<SettingsDialog*>();
        QVERIFY(dialog);
        auto* defaultThink = dialog->findChild<QCheckBox*>(QStringLiteral("thinkingDefault"));
        QVERIFY(!defaultThink->isChecked());
        defaultThink->setChecked(true);
        dialog->accept();
        QCOMPARE(QSettings().value(QStringLiteral("thinking/enabled")).toBool(), true);
        QVERIFY(!think->isChecked());
        QVERIFY(!window.composer()->thinking());
        window.close();
    }
    {
        MainWindow restarted; // the demo was the last model
        QSignalSpy ready(&restarted, &MainWindow::modelReady);
        restarted.loadStartupModel();
        QVERIFY(ready.wait(30000));
        auto* think = restarted.composer()->findChild<QCheckBox*>(QStringLiteral("thinkCheck"));
        QVERIFY(!think->isChecked());
        QVERIFY(!think->isEnabled());
        // The tiny model keeps the choice made for it, not the default (now on).
        QVERIFY(loadInto(restarted, m_tiny));
        QVERIFY(think->isEnabled());
        QVERIFY(!think->isChecked());
        think->click();
        QVERIFY(loadInto(restarted, m_demo));
        QVERIFY(loadInto(restarted, m_tiny));
        QVERIFY(think->isChecked());
    }
}

QTEST_MAIN(TestNothingLost)
#include "tst_nothinglost.moc"
