// Issues 28 and 37 in the window (offscreen, the real MainWindow, the demo): before a
// message is sent the composer can say what it will read (only the new message when the
// conversation's state is on disk, the whole conversation when it is gone), and the
// bubble says when a conversation is read again.
#include <QAction>
#include <QDir>
#include <QDirIterator>
#include <QFileInfo>
#include <QListWidget>
#include <QSemaphore>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTest>

#include "AppSettings.h"
#include "MainWindow.h"
#include "ModelLoader.h"
#include "Settings.h"
#include "SettingsTable.h"
#include "chat/ChatController.h"
#include "chat/ConversationListDelegate.h"
#include "chat/ConversationListPanel.h"
#include "chat/ConversationModel.h"
#include "chat/ConversationStore.h"
#include "chat/ConversationView.h"
#include "chat/MessageComposer.h"
#include "chat/MessageDelegate.h"
#include "worker/EngineController.h"
#include "worker/EngineWorker.h"

#include <k3/chat.hpp>
#include <k3/tokenizer.hpp>

namespace {

const QString kDemo = QStringLiteral(K3_SOURCE_DIR "/resources/demo");
const QString kSystemPrompt = QStringLiteral("You are a terse assistant.");

bool loadDemo(MainWindow& window) {
    QSignalSpy ready(&window, &MainWindow::modelReady);
    window.loader()->loadModelFolder(kDemo);
    return ready.wait(30000);
}

EngineWorker* workerOf(const MainWindow& window) {
    return window.findChild<EngineController*>()->worker();
}

GenerationSummary ask(MainWindow& window, const QString& text) {
    QSignalSpy summaries(workerOf(window), &EngineWorker::generationFinished);
    QSignalSpy finished(&window, &MainWindow::answerFinished);
    window.chat()->send(text);
    if (!finished.wait(60000) || summaries.isEmpty()) return {};
    return summaries.last().at(0).value<GenerationSummary>();
}

// The prompt positions of the open conversation and `text` as the engine renders them
// (thinking off, with the generation prompt): what a follow-up reads when nothing is held.
int wholePromptPositions(const MainWindow& window, const QString& text) {
    std::vector<k3::ChatMessage> messages;
    for (const ChatTurn& t : window.conversationView()->conversation()->turns())
        messages.push_back({k3::parseChatRole(t.role.toStdString()).value(),
                            t.content.toStdString(), t.reasoning.toStdString(), ""});
    messages.push_back({k3::ChatRole::User, text.toStdString(), "", ""});
    k3::ChatRenderOptions render;
    render.thinking = false;
    const k3::Tokenizer tok = k3::Tokenizer::fromDirectory(kDemo.toStdString());
    return int(k3::encodeChatSegments(tok, k3::renderChatSegments(messages, render)).size());
}

// Types `text` into the composer and waits for the engine's count of what it will read.
QList<QVariant> typeAndMeasure(MainWindow& window, const QString& text) {
    QSignalSpy measured(workerOf(window), &EngineWorker::readingPositions);
    window.composer()->setText(text);
    if (!measured.wait(10000)) return {};
    return measured.last();
}

// The state files in the states folder whose kind is `kind` ('c' conversation, 'p'
// preamble): their count and bytes, as the file system says.
QPair<int, quint64> statesOnDisk(char kind) {
    QPair<int, quint64> found{0, 0};
    QDirIterator it(AppSettings::stateCacheDirectory(), {QStringLiteral("*.k3state")}, QDir::Files);
    while (it.hasNext()) {
        const QFileInfo file(it.next());
        if (!file.fileName().contains(QStringLiteral("-%1-").arg(QLatin1Char(kind)))) continue;
        ++found.first;
        found.second += quint64(file.size());
    }
    return found;
}

void startAfresh() {
    QVERIFY(QDir(AppSettings::conversationsDirectory()).removeRecursively());
}

} // namespace

class TestStatesInWindow : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() {
        QCoreApplication::setOrganizationName(QStringLiteral("k3chat-tests"));
        QCoreApplication::setApplicationName(QStringLiteral("tst_statesinwindow"));
        QStandardPaths::setTestModeEnabled(true); // never the user's settings or chats
        QDir(AppSettings::conversationsDirectory()).removeRecursively();
        QSettings().clear();
        QSettings().setValue(QStringLiteral("setup/firstRunDone"), true);
        QSettings().setValue(QStringLiteral("thinking/enabled"), false);
        QSettings().setValue(QStringLiteral("generation/maxTokens"), 64);
        QSettings().setValue(QStringLiteral("generation/systemPrompt"), kSystemPrompt);
        QSettings().setValue(QStringLiteral("sampling/greedy"), true);
    }

    // Issue 28: each conversation's saved state in the list, and a way to delete it that
    // keeps the transcript.
    void listShowsAndDeletesSavedStates() {
        startAfresh();
        MainWindow window;
        Settings::setValue(SettingsTable::askBeforeQuittingMidAnswer, false);
        QVERIFY(loadDemo(window));
        EngineWorker* worker = workerOf(window);
        QSignalSpy measured(worker, &EngineWorker::savedStateMeasured);
        QVERIFY(ask(window, QStringLiteral("Hello!")).endOfTurn);
        const QString id = window.currentConversationId();
        ConversationListPanel* panel = window.findChild<ConversationListPanel*>();
        QVERIFY(panel);
        QListWidgetItem* item = panel->list()->item(0);
        QCOMPARE(item->data(ConversationListDelegate::IdRole).toString(), id);
        // Measured after the answer (the spy hears it on the engine thread, the list once
        // the queued signal arrives): the one conversation file, its size on disk.
        QTRY_VERIFY_WITH_TIMEOUT(
            item->data(ConversationListDelegate::StateBytesRole).toULongLong() > 0, 10000);
        const QPair<int, quint64> disk = statesOnDisk('c');
        QCOMPARE(disk.first, 1);
        QVERIFY(disk.second > 0);
        QCOMPARE(measured.last().at(1).toInt(), 1);
        QCOMPARE(measured.last().at(2).toULongLong(), disk.second);
        QCOMPARE(item->data(ConversationListDelegate::StateBytesRole).toULongLong(), disk.second);
        const QString figure = ConversationListPanel::savedStateText(disk.second);
        QVERIFY(figure.startsWith(QStringLiteral("saved state ")));
        QVERIFY2(item->data(ConversationListDelegate::DateTextRole)
                     .toString()
                     .endsWith(QStringLiteral(" · ") + figure),
                 qPrintable(item->data(ConversationListDelegate::DateTextRole).toString()));
        QVERIFY(item->toolTip().contains(figure));

        // Deleted: the conversation's file goes, the preamble and the transcript stay.
        QSignalSpy forgotten(worker, &EngineWorker::statesForgotten);
        measured.clear();
        panel->deleteSavedState(id);
        QVERIFY(forgotten.wait(10000));
        QCOMPARE(forgotten.first().at(0).toInt(), 1);
        QCOMPARE(statesOnDisk('c').first, 0);
        QCOMPARE(statesOnDisk('p').first, 1);
        QVERIFY(QFileInfo::exists(window.store()->pathFor(id)));
        QTRY_COMPARE_WITH_TIMEOUT(
            item->data(ConversationListDelegate::StateBytesRole).toULongLong(), quint64(0), 10000);
        QCOMPARE(measured.last().at(0).toString(), id);
        QCOMPARE(measured.last().at(2).toULongLong(), quint64(0));
        QVERIFY(!item->data(ConversationListDelegate::DateTextRole)
                     .toString()
                     .contains(QStringLiteral("saved state")));
        window.closeWithoutAsking();
    }

    // Issue 28: a conversation deleted while it is answering stops first, then its states
    // go; nothing of it is written back.
    void deletedWhileAnsweringLeavesNothing() {
        startAfresh();
        MainWindow window;
        Settings::setValue(SettingsTable::askBeforeQuittingMidAnswer, false);
        QVERIFY(loadDemo(window));
        QVERIFY(ask(window, QStringLiteral("Hello!")).endOfTurn);
        const QString id = window.currentConversationId();
        QCOMPARE(statesOnDisk('c').first, 1);
        EngineWorker* worker = workerOf(window);
        // The engine waits after its second token until the conversation is deleted, so
        // the deletion comes mid-answer however fast the demo is.
        QSemaphore reached, deleted;
        const QMetaObject::Connection gate = connect(
            worker, &EngineWorker::tokenGenerated, worker,
            [&reached, &deleted](int index) {
                if (index != 1) return;
                reached.release();
                deleted.tryAcquire(1, 30000);
            },
            Qt::DirectConnection);
        QSignalSpy summaries(worker, &EngineWorker::generationFinished);
        QSignalSpy forgotten(worker, &EngineWorker::statesForgotten);
        window.chat()->send(QStringLiteral("Tell me about the trunk."));
        QVERIFY(reached.tryAcquire(1, 30000)); // the engine waits at its second token
        auto* remove = window.findChild<QAction*>(QStringLiteral("deleteConversationAction"));
        QVERIFY(remove);
        QCOMPARE(window.conversationPanel()->currentConversation(), id);
        remove->trigger();
        deleted.release();
        QVERIFY(forgotten.wait(30000));
        disconnect(gate);
        // The answer ended (stopped) before the states were forgotten.
        QCOMPARE(summaries.size(), 1);
        QVERIFY(summaries.first().at(0).value<GenerationSummary>().cancelled);
        QCOMPARE(forgotten.first().at(0).toInt(), 1);
        QCOMPARE(statesOnDisk('c').first, 0); // the stopped answer's state went too
        QCOMPARE(statesOnDisk('p').first, 1);
        QVERIFY(!QFileInfo::exists(window.store()->pathFor(id)));
        QVERIFY(window.currentConversationId().isEmpty());
        QCOMPARE(window.conversationView()->conversation()->rowCount(), 0);
        QVERIFY(!window.conversationPanel()->listedIds().contains(id));
        // Undo brings it back as it was when deleted.
        window.conversationPanel()->undoDelete();
        QVERIFY(QFileInfo::exists(window.store()->pathFor(id)));
        window.closeWithoutAsking();
    }

    // Issue 28: Continue on an answer cut by Stop carries it on from the state the engine
    // holds: nothing is read again, and the text is the uninterrupted greedy answer.
    void continueCarriesOnACutAnswer() {
        MainWindow window;
        Settings::setValue(SettingsTable::askBeforeQuittingMidAnswer, false);
        QVERIFY(loadDemo(window));
        const QString question = QStringLiteral("Tell me about the trunk.");
        const GenerationSummary whole = ask(window, question);
        QVERIFY(whole.endOfTurn);
        QVERIFY(whole.generatedTokens > 4);

        window.newChat();
        EngineWorker* worker = workerOf(window);
        // Stopped on the engine thread after the third token: a queued stop could come
        // after the whole (short) answer.
        const QMetaObject::Connection stopper = connect(
            worker, &EngineWorker::tokenGenerated, worker,
            [worker](int index) {
                if (index == 2) worker->requestStop();
            },
            Qt::DirectConnection);
        const GenerationSummary cut = ask(window, question);
        disconnect(stopper);
        QVERIFY(cut.cancelled);
        QVERIFY(cut.generatedTokens >= 3 && cut.generatedTokens < whole.generatedTokens);
        ConversationModel* model = window.conversationView()->conversation();
        QCOMPARE(model->rowCount(), 2);
        const QModelIndex last = model->index(1);
        QVERIFY(last.data(ConversationModel::StoppedRole).toBool());
        QVERIFY(whole.content.startsWith(last.data(ConversationModel::ContentRole).toString()));

        auto* action = window.findChild<QAction*>(QStringLiteral("continueAnswerAction"));
        QVERIFY(action);
        QVERIFY(action->isEnabled());
        QSignalSpy summaries(worker, &EngineWorker::generationFinished);
        QSignalSpy finished(&window, &MainWindow::answerFinished);
        action->trigger();
        QVERIFY(finished.wait(60000));
        const GenerationSummary more = summaries.last().at(0).value<GenerationSummary>();
        QVERIFY(more.endOfTurn);
        // The prompt is the question and the answer's ids as generated: all held.
        QCOMPARE(more.promptTokens, whole.promptTokens + cut.generatedTokens);
        QCOMPARE(more.prefillPositions, 0);
        QCOMPARE(more.reusedPositions, more.promptTokens);
        QCOMPARE(cut.generatedTokens + more.generatedTokens, whole.generatedTokens);
        // One answer, the uninterrupted one, no longer marked cut.
        QCOMPARE(model->rowCount(), 2);
        QCOMPARE(model->index(1).data(ConversationModel::ContentRole).toString(), whole.content);
        QVERIFY(!model->index(1).data(ConversationModel::StoppedRole).toBool());
        QVERIFY(!action->isEnabled());
        window.closeWithoutAsking();
    }

    // Issue 37 point 1: what a follow-up will read is known before it is sent.
    void followUpCostIsSaidBeforeSending() {
        QString id;
        GenerationSummary first;
        {
            MainWindow window;
            Settings::setValue(SettingsTable::askBeforeQuittingMidAnswer, false);
            QVERIFY(loadDemo(window));
            first = ask(window, QStringLiteral("Hello!"));
            QVERIFY(first.endOfTurn);
            id = window.currentConversationId();
            window.closeWithoutAsking();
        }
        const QString followUp = QStringLiteral("And the trunk?");
        {
            // Restarted, the state on disk: only the new message is to be read.
            MainWindow window;
            Settings::setValue(SettingsTable::askBeforeQuittingMidAnswer, false);
            QVERIFY(loadDemo(window));
            window.openConversation(id);
            const int whole = wholePromptPositions(window, followUp);
            const QList<QVariant> m = typeAndMeasure(window, followUp);
            QVERIFY(!m.isEmpty());
            const int held = first.promptTokens + first.generatedTokens - 1; // EOT not fed
            QCOMPARE(m.at(0).toInt(), whole - held);
            QVERIFY(m.at(0).toInt() < held); // the message and its tags, not the conversation
            // The demo reads in milliseconds (no rate yet in this run: -1): nothing is said.
            QVERIFY(m.at(1).toDouble() < MessageComposer::kCostShownSeconds);
            QCOMPARE(window.composer()->readingCostText(), QString());
            // The count is what the engine then reads.
            const GenerationSummary s = ask(window, followUp);
            QCOMPARE(s.prefillPositions, m.at(0).toInt());
            QCOMPARE(s.restoredPositions, held);
            window.closeWithoutAsking();
        }
        // The states folder removed: the whole conversation is read again, and said so.
        QVERIFY(QDir(AppSettings::stateCacheDirectory()).removeRecursively());
        MainWindow window;
        Settings::setValue(SettingsTable::askBeforeQuittingMidAnswer, false);
        QVERIFY(loadDemo(window));
        window.openConversation(id);
        const QString again = QStringLiteral("Thanks.");
        const int whole = wholePromptPositions(window, again);
        const QList<QVariant> m = typeAndMeasure(window, again);
        QVERIFY(!m.isEmpty());
        QCOMPARE(m.at(0).toInt(), whole);
        // At a budget where it takes half a minute, the composer says so, in these words.
        MessageComposer* composer = window.composer();
        composer->setReadingPositions(m.at(0).toInt(), 30.2);
        QCOMPARE(composer->readingCostText(),
                 QStringLiteral("this message will read %1 positions (about 31 s at your budget)")
                     .arg(whole));
        composer->setReadingPositions(m.at(0).toInt(), 130);
        QCOMPARE(composer->readingCostText(),
                 QStringLiteral("this message will read %1 positions (about 2 min at your budget)")
                     .arg(whole));
        composer->setReadingPositions(m.at(0).toInt(), m.at(1).toDouble());
        QCOMPARE(composer->readingCostText(), QString());
        // While it is read, the bubble says the conversation is read again.
        ConversationModel* model = window.conversationView()->conversation();
        QStringList labels;
        connect(workerOf(window), &EngineWorker::prefillProgress, this, [&] {
            labels << MessageDelegate::readingLabel(model->index(model->rowCount() - 1));
        });
        const GenerationSummary s = ask(window, again);
        QCOMPARE(s.prefillPositions, whole);
        QVERIFY(!labels.isEmpty());
        QCOMPARE(labels.first(),
                 QStringLiteral("Reading this conversation again: 0 of %1 positions").arg(whole));
        window.closeWithoutAsking();
    }
};

QTEST_MAIN(TestStatesInWindow)
#include "tst_statesinwindow.moc"
