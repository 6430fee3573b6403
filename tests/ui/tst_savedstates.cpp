// Issue 28 in the window (offscreen, the real MainWindow, the demo): what the engine read
// of a conversation is kept on disk, so coming back to it (after another conversation,
// after a restart) reads only the new message, a new conversation with the same system
// prompt reads only its own message, the bubble says what came from disk, and deleting a
// conversation deletes its states.
#include <QAction>
#include <QDir>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTest>

#include "AppSettings.h"
#include "MainWindow.h"
#include "ModelLoader.h"
#include "QueuedSpy.h"
#include "Settings.h"
#include "SettingsTable.h"
#include "chat/ChatController.h"
#include "chat/ConversationModel.h"
#include "chat/ConversationStore.h"
#include "chat/ConversationView.h"
#include "worker/EngineController.h"
#include "worker/EngineWorker.h"

#include <k3/chat.hpp>
#include <k3/state_cache.hpp>
#include <k3/tokenizer.hpp>

namespace {

const QString kDemo = QStringLiteral(K3_SOURCE_DIR "/resources/demo");
const QString kSystemPrompt = QStringLiteral("You are a terse assistant.");

bool loadDemo(MainWindow& window) {
    QSignalSpy ready(&window, &MainWindow::modelReady);
    window.loader()->loadModelFolder(kDemo);
    return ready.wait(30000);
}

// Sends `text` and waits for the answer's summary.
GenerationSummary ask(MainWindow& window, const QString& text) {
    EngineWorker* worker = window.findChild<EngineController*>()->worker();
    QueuedSpy summaries(worker, &EngineWorker::generationFinished);
    QSignalSpy finished(&window, &MainWindow::answerFinished);
    window.chat()->send(text);
    if (!finished.wait(60000)) return {};
    // The worker's queued call can land just after the window's.
    if (!QTest::qWaitFor([&] { return !summaries.isEmpty(); }, 10000)) return {};
    return summaries.last().at(0).value<GenerationSummary>();
}

// The positions of the system prompt alone as the engine renders it (thinking off).
int preamblePositions() {
    const k3::Tokenizer tok = k3::Tokenizer::fromDirectory(kDemo.toStdString());
    k3::ChatRenderOptions closed;
    closed.thinking = false;
    closed.addGenerationPrompt = false;
    const std::vector<k3::ChatMessage> system{
        {k3::ChatRole::System, kSystemPrompt.toStdString(), "", ""}};
    return int(k3::encodeChatSegments(tok, k3::renderChatSegments(system, closed)).size());
}

int stateFiles() {
    return k3::stateCacheUsage(AppSettings::stateCacheDirectory().toStdString()).files;
}

QString lastStats(const MainWindow& window) {
    ConversationModel* m = window.conversationView()->conversation();
    return m->index(m->rowCount() - 1).data(ConversationModel::StatsRole).toString();
}

} // namespace

class TestSavedStates : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() {
        QCoreApplication::setOrganizationName(QStringLiteral("k3chat-tests"));
        QCoreApplication::setApplicationName(QStringLiteral("tst_savedstates"));
        QStandardPaths::setTestModeEnabled(true); // never the user's settings or chats
        QDir(AppSettings::conversationsDirectory()).removeRecursively();
        QSettings().clear();
        QSettings().setValue(QStringLiteral("setup/firstRunDone"), true);
        QSettings().setValue(QStringLiteral("thinking/enabled"), false);
        QSettings().setValue(QStringLiteral("generation/maxTokens"), 64);
        QSettings().setValue(QStringLiteral("generation/systemPrompt"), kSystemPrompt);
    }

    void conversationsComeBackFromDisk() {
        QString idA;
        GenerationSummary a1, a2;
        {
            MainWindow window;
            Settings::setValue(SettingsTable::askBeforeQuittingMidAnswer, false);
            QVERIFY(loadDemo(window));
            QVERIFY(!window.launchConfig().stateCacheDir.empty());
            a1 = ask(window, QStringLiteral("Hello!"));
            QVERIFY(a1.endOfTurn);
            QCOMPARE(a1.restoredPositions, 0);
            QCOMPARE(a1.prefillPositions, a1.promptTokens);
            idA = window.currentConversationId();
            QVERIFY(!idA.isEmpty());
            // The system prompt's positions and the conversation are kept.
            QCOMPARE(stateFiles(), 2);

            // A new conversation with the same system prompt reads only its own message.
            window.newChat();
            const GenerationSummary b = ask(window, QStringLiteral("What is MXFP4?"));
            QCOMPARE(b.restoredPositions, preamblePositions());
            QCOMPARE(b.prefillPositions, b.promptTokens - preamblePositions());
            QVERIFY2(lastStats(window).contains(
                         QStringLiteral("%1 new prompt tokens read, %2 restored from disk")
                             .arg(b.prefillPositions)
                             .arg(b.restoredPositions)),
                     qPrintable(lastStats(window)));
            QCOMPARE(stateFiles(), 3);

            // Back to A: the engine holds B, A comes back from disk.
            window.openConversation(idA);
            a2 = ask(window, QStringLiteral("And the trunk?"));
            QVERIFY(a2.endOfTurn);
            // Everything A held: its prompt and answer (the end-of-turn marker is not fed).
            QCOMPARE(a2.restoredPositions, a1.promptTokens + a1.generatedTokens - 1);
            QCOMPARE(a2.reusedPositions, a2.restoredPositions);
            QCOMPARE(a2.prefillPositions, a2.promptTokens - a2.restoredPositions);
            QCOMPARE(stateFiles(), 3); // A's new state replaced its old one
            window.closeWithoutAsking();
        }
        // After a restart: A's follow-up reads only itself.
        MainWindow window;
        QVERIFY(loadDemo(window));
        window.openConversation(idA);
        const GenerationSummary a3 = ask(window, QStringLiteral("Thanks."));
        QCOMPARE(a3.restoredPositions, a2.promptTokens + a2.generatedTokens - 1);
        QCOMPARE(a3.prefillPositions, a3.promptTokens - a3.restoredPositions);

        // Deleting A deletes what was kept of it: B's state and the preamble stay.
        EngineWorker* worker = window.findChild<EngineController*>()->worker();
        QueuedSpy forgotten(worker, &EngineWorker::statesForgotten);
        QCOMPARE(stateFiles(), 3);
        auto* remove = window.findChild<QAction*>(QStringLiteral("deleteConversationAction"));
        QVERIFY(remove);
        remove->trigger();
        QVERIFY(forgotten.wait(10000));
        QCOMPARE(forgotten.first().at(0).toInt(), 1);
        QCOMPARE(stateFiles(), 2);
        window.closeWithoutAsking();
    }

    // The saved states' disk budget (Settings: launch/stateCacheBytes): over it, the least
    // recently used state goes. Three conversations A, B, C and the preamble are kept;
    // with a budget one byte under their total, C's follow-up evicts A (the oldest use),
    // so B still comes back whole and A reads all but the preamble again.
    void diskBudgetEvictsTheLeastRecentlyUsed() {
        QDir(AppSettings::conversationsDirectory()).removeRecursively();
        k3::clearStateCache(AppSettings::stateCacheDirectory().toStdString());
        QSettings().remove(QStringLiteral("launch/stateCacheBytes")); // the default budget
        QString idA, idB, idC;
        GenerationSummary b;
        std::uint64_t total = 0;
        {
            MainWindow window;
            Settings::setValue(SettingsTable::askBeforeQuittingMidAnswer, false);
            QVERIFY(loadDemo(window));
            QVERIFY(ask(window, QStringLiteral("Hello!")).endOfTurn);
            idA = window.currentConversationId();
            window.newChat();
            b = ask(window, QStringLiteral("What is MXFP4?"));
            QVERIFY(b.endOfTurn);
            idB = window.currentConversationId();
            window.newChat();
            QVERIFY(ask(window, QStringLiteral("What is a trunk?")).endOfTurn);
            idC = window.currentConversationId();
            QCOMPARE(stateFiles(), 4);
            total = k3::stateCacheUsage(AppSettings::stateCacheDirectory().toStdString()).bytes;
            window.closeWithoutAsking();
        }
        QSettings().setValue(QStringLiteral("launch/stateCacheBytes"), qulonglong(total - 1));
        MainWindow window;
        Settings::setValue(SettingsTable::askBeforeQuittingMidAnswer, false);
        QVERIFY(loadDemo(window));
        QCOMPARE(window.launchConfig().stateCacheBytes, total - 1);
        window.openConversation(idC);
        QVERIFY(ask(window, QStringLiteral("Thanks.")).endOfTurn);
        QCOMPARE(stateFiles(), 3); // C's grown state replaced C's, and A's went
        QVERIFY(k3::stateCacheUsage(AppSettings::stateCacheDirectory().toStdString()).bytes <
                total);

        window.openConversation(idB);
        const GenerationSummary b2 = ask(window, QStringLiteral("And the cache?"));
        QCOMPARE(b2.restoredPositions, b.promptTokens + b.generatedTokens - 1); // B whole
        window.openConversation(idA);
        const GenerationSummary a2 = ask(window, QStringLiteral("Again?"));
        QCOMPARE(a2.restoredPositions, preamblePositions()); // A's own state was evicted
        QCOMPARE(a2.prefillPositions, a2.promptTokens - preamblePositions());
        window.closeWithoutAsking();
        QSettings().remove(QStringLiteral("launch/stateCacheBytes"));
    }
};

QTEST_MAIN(TestSavedStates)
#include "tst_savedstates.moc"
