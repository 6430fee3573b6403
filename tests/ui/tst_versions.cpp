#include <QAction>
#include <QDir>
#include <QFile>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QSettings>
#include <QSignalSpy>
#include <QSpinBox>
#include <QStandardPaths>
#include <QTest>

#include "AppSettings.h"
#include "MainWindow.h"
#include "ModelLoader.h"
#include "QueuedSpy.h"
#include "SettingsDialog.h"
#include "chat/ChatController.h"
#include "chat/ConversationModel.h"
#include "chat/ConversationStore.h"
#include "chat/ConversationView.h"
#include "chat/MessageComposer.h"
#include "chat/MessageDelegate.h"
#include "chat/SystemPromptDialog.h"
#include "chat/TranscriptWriter.h"
#include "worker/EngineController.h"

#include <k3/chat.hpp>
#include <k3/tokenizer.hpp>

// Issue 21 point 8 through the real window and the bundled demo: regenerated answers and
// edited questions kept as versions ("< 2/3 >"), the shown one continued and saved; a
// system prompt per conversation; the context length from Settings.
class TestVersions : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void init();
    void regenerateKeepsEveryAnswerAsAVersion();
    void editAndResendKeepsTheOldBranch();
    void oldTranscriptOpens();
    void systemPromptReachesTheRenderedPrompt();
    void contextLengthFromSettingsRefusesALongConversation();

private:
    const QString m_demo = QStringLiteral(K3_SOURCE_DIR "/resources/demo");
};

namespace {

bool loadDemo(MainWindow& window, const QString& dir) {
    QSignalSpy ready(&window, &MainWindow::modelReady);
    window.loader()->loadModelFolder(dir);
    return ready.wait(30000);
}

// The prompt tokens the worker's render gives for `messages` with thinking off (the demo
// has no think channel): the exact count the engine reports for that history.
int promptTokens(const std::vector<k3::ChatMessage>& messages) {
    const k3::Tokenizer tokenizer = k3::Tokenizer::fromDirectory(K3_SOURCE_DIR "/resources/demo");
    k3::ChatRenderOptions options;
    options.thinking = false;
    return int(k3::encodeChatSegments(tokenizer, k3::renderChatSegments(messages, options)).size());
}

// Runs `start` and returns the finished answer's summary once the chat controller has
// handled it (its answerFinished comes after the model and the store have the answer).
template <typename Start> GenerationSummary answer(MainWindow& window, Start start) {
    QueuedSpy finished(window.engine()->worker(), &EngineWorker::generationFinished);
    QSignalSpy handled(&window, &MainWindow::answerFinished);
    start();
    if (!handled.wait(60000) || !QTest::qWaitFor([&] { return !finished.isEmpty(); }, 5000))
        return {};
    const QVariantList call = finished.takeFirst();
    return call.at(0).value<GenerationSummary>();
}

QString text(const QModelIndex& index) {
    return index.data(ConversationModel::ContentRole).toString();
}

} // namespace

void TestVersions::initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("k3chat-tests"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_versions"));
    QStandardPaths::setTestModeEnabled(true); // never touch the user's settings or chats
    // Every run starts without saved conversation states (the engine would restore them).
    QDir(AppSettings::stateCacheDirectory()).removeRecursively();
    QDir(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) +
         QStringLiteral("/conversations"))
        .removeRecursively();
}

void TestVersions::init() {
    QSettings().clear();
    QSettings().setValue(QStringLiteral("setup/firstRunDone"), true);
    QSettings().setValue(QStringLiteral("generation/maxTokens"), 6); // short answers
}

// Regenerate twice: three versions, "3/3"; Alt+Left shows the first answer ("1/3"); a
// follow-up continues from it (the engine read exactly that history) and it is what
// the transcript's lines hold, the others beside it; all of it survives reopening.
void TestVersions::regenerateKeepsEveryAnswerAsAVersion() {
    MainWindow window;
    window.show();
    QVERIFY(loadDemo(window, m_demo));
    const QString id = window.store()->save(
        {}, {{QStringLiteral("user"), QStringLiteral("Hello")},
             {QStringLiteral("assistant"), QStringLiteral("First answer"), {}}});
    window.openConversation(id);
    ConversationModel* conversation = window.conversationView()->conversation();
    QVERIFY(!answer(window, [&] { window.chat()->regenerate(); }).content.isNull());
    QVERIFY(!answer(window, [&] { window.chat()->regenerate(); }).content.isNull());
    QCOMPARE(conversation->rowCount(), 2);
    const QModelIndex last = conversation->index(1);
    QCOMPARE(last.data(ConversationModel::VersionRole).toPoint(), QPoint(3, 3));
    QCOMPARE(MessageDelegate::versionText(last), QStringLiteral("3/3"));
    const QString third = text(last);
    QVERIFY(third != QStringLiteral("First answer"));

    ConversationView* view = window.conversationView();
    view->setFocus();
    view->setCurrentIndex(conversation->index(1));
    QTest::keyClick(view, Qt::Key_Left, Qt::AltModifier);
    QCOMPARE(MessageDelegate::versionText(conversation->index(1)), QStringLiteral("2/3"));
    QTest::keyClick(view, Qt::Key_Left, Qt::AltModifier);
    QCOMPARE(MessageDelegate::versionText(conversation->index(1)), QStringLiteral("1/3"));
    QCOMPARE(text(conversation->index(1)), QStringLiteral("First answer"));
    QCOMPARE(view->currentIndex().row(), 1);
    QTest::keyClick(view, Qt::Key_Left, Qt::AltModifier); // no version before the first
    QCOMPARE(MessageDelegate::versionText(conversation->index(1)), QStringLiteral("1/3"));
    // The mouse: ">" shows the next version, "<" the one before; nothing without versions.
    QVERIFY(view->versionButtonRect(0, true).isNull());
    const QRect next = view->versionButtonRect(1, true);
    QVERIFY(view->viewport()->rect().contains(next));
    QTest::mouseClick(view->viewport(), Qt::LeftButton, {}, next.center());
    QCOMPARE(MessageDelegate::versionText(conversation->index(1)), QStringLiteral("2/3"));
    QTest::mouseClick(view->viewport(), Qt::LeftButton, {},
                      view->versionButtonRect(1, false).center());
    QCOMPARE(MessageDelegate::versionText(conversation->index(1)), QStringLiteral("1/3"));
    QCOMPARE(text(conversation->index(1)), QStringLiteral("First answer"));

    const GenerationSummary followUp =
        answer(window, [&] { window.chat()->send(QStringLiteral("And then?")); });
    QCOMPARE(followUp.promptTokens, promptTokens({{k3::ChatRole::User, "Hello", {}, {}},
                                                  {k3::ChatRole::Assistant, "First answer", "", {}},
                                                  {k3::ChatRole::User, "And then?", {}, {}}}));
    QCOMPARE(conversation->rowCount(), 4);
    const QString followUpAnswer = text(conversation->index(3));

    const QVector<ChatTurn> saved = window.store()->load(id);
    QCOMPARE(saved.size(), 4);
    QCOMPARE(saved[1].content, QStringLiteral("First answer"));
    QCOMPARE(saved[1].versionIndex, 0);
    QCOMPARE(int(saved[1].otherVersions.size()), 2);
    QCOMPARE(saved[1].otherVersions[1].front().content, third);
    QCOMPARE(saved[2].content, QStringLiteral("And then?"));

    window.newChat();
    window.openConversation(id);
    QCOMPARE(conversation->rowCount(), 4);
    QCOMPARE(MessageDelegate::versionText(conversation->index(1)), QStringLiteral("1/3"));
    // The third version had no follow-up: showing it shows the conversation up to it.
    QVERIFY(window.chat()->showVersion(1, 2));
    QCOMPARE(conversation->rowCount(), 2);
    QCOMPARE(text(conversation->index(1)), third);
    QVERIFY(window.chat()->showVersion(1, 0));
    QCOMPARE(conversation->rowCount(), 4);
    QCOMPARE(text(conversation->index(3)), followUpAnswer);
}

// Edit-and-resend: the edited question is version 2/2 with its own answer; 1/2 brings
// back the old question and its answer, on screen and on disk.
void TestVersions::editAndResendKeepsTheOldBranch() {
    MainWindow window;
    window.show();
    QVERIFY(loadDemo(window, m_demo));
    const QString id = window.store()->save(
        {}, {{QStringLiteral("user"), QStringLiteral("First question")},
             {QStringLiteral("assistant"), QStringLiteral("First answer"), {}},
             {QStringLiteral("user"), QStringLiteral("Second question")},
             {QStringLiteral("assistant"), QStringLiteral("Second answer"), {}}});
    window.openConversation(id);
    ConversationModel* conversation = window.conversationView()->conversation();
    window.chat()->editLastMessage();
    QVERIFY(window.composer()->isEditing());
    answer(window, [&] { window.chat()->send(QStringLiteral("Edited question")); });
    QCOMPARE(conversation->rowCount(), 4);
    QCOMPARE(text(conversation->index(2)), QStringLiteral("Edited question"));
    QCOMPARE(MessageDelegate::versionText(conversation->index(2)), QStringLiteral("2/2"));
    QCOMPARE(MessageDelegate::versionText(conversation->index(3)), QString());
    const QString newAnswer = text(conversation->index(3));

    QVERIFY(window.chat()->showVersion(2, 0));
    QCOMPARE(conversation->rowCount(), 4);
    QCOMPARE(text(conversation->index(2)), QStringLiteral("Second question"));
    QCOMPARE(text(conversation->index(3)), QStringLiteral("Second answer"));
    QCOMPARE(MessageDelegate::versionText(conversation->index(2)), QStringLiteral("1/2"));
    window.transcriptWriter()->flush(); // the save showVersion queued is written
    const QVector<ChatTurn> saved = window.store()->load(id);
    QCOMPARE(saved.size(), 4);
    QCOMPARE(saved[2].content, QStringLiteral("Second question"));
    QCOMPARE(saved[2].versionIndex, 0);
    QCOMPARE(int(saved[2].otherVersions.size()), 1);
    QCOMPARE(int(saved[2].otherVersions[0].size()), 2);
    QCOMPARE(saved[2].otherVersions[0][0].content, QStringLiteral("Edited question"));
    QCOMPARE(saved[2].otherVersions[0][1].content, newAnswer);
}

// A transcript written before versions and system prompts opens as it was: a leading
// system line becomes the conversation's system prompt, no message has versions.
void TestVersions::oldTranscriptOpens() {
    MainWindow window;
    const QString dir = window.store()->directory();
    QDir().mkpath(dir);
    QFile file(dir + QStringLiteral("/old-one.jsonl"));
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.write("{\"role\":\"system\",\"content\":\"be brief\"}\n"
               "{\"role\":\"user\",\"content\":\"hi\"}\n"
               "{\"role\":\"assistant\",\"content\":\"hello\",\"reasoning_content\":\"\"}\n");
    file.close();
    window.openConversation(QStringLiteral("old-one"));
    ConversationModel* conversation = window.conversationView()->conversation();
    QCOMPARE(conversation->rowCount(), 2);
    QCOMPARE(text(conversation->index(1)), QStringLiteral("hello"));
    QCOMPARE(conversation->index(1).data(ConversationModel::VersionRole).toPoint(), QPoint(1, 1));
    QCOMPARE(MessageDelegate::versionText(conversation->index(1)), QString());
    QCOMPARE(window.chat()->systemPrompt(), QStringLiteral("be brief"));
    QCOMPARE(conversation->turns().size(), 3); // saved back with its system line first
    QCOMPARE(conversation->turns().first().role, QStringLiteral("system"));
}

// The Settings default starts a new conversation; the conversation's own prompt (Edit >
// System prompt…) replaces it. The engine reads exactly the render with the system
// message, and the transcript's first line holds it.
void TestVersions::systemPromptReachesTheRenderedPrompt() {
    QSettings().setValue(QStringLiteral("generation/systemPrompt"), QStringLiteral("Be brief."));
    MainWindow window;
    window.show();
    QVERIFY(loadDemo(window, m_demo));
    const GenerationSummary first =
        answer(window, [&] { window.chat()->send(QStringLiteral("Hello")); });
    QCOMPARE(first.promptTokens, promptTokens({{k3::ChatRole::System, "Be brief.", {}, {}},
                                               {k3::ChatRole::User, "Hello", {}, {}}}));
    QVERIFY(first.promptTokens > promptTokens({{k3::ChatRole::User, "Hello", {}, {}}}));
    const QString id = window.currentConversationId();
    QCOMPARE(window.store()->load(id).first().role, QStringLiteral("system"));
    QCOMPARE(window.store()->load(id).first().content, QStringLiteral("Be brief."));

    QAction* action = window.findChild<QAction*>(QStringLiteral("systemPromptAction"));
    QVERIFY(action);
    action->trigger();
    auto* dialog = window.findChild<SystemPromptDialog*>();
    QVERIFY(dialog);
    QCOMPARE(dialog->editor()->toPlainText(), QStringLiteral("Be brief."));
    dialog->editor()->setPlainText(QStringLiteral("You are a pirate."));
    dialog->accept();
    window.transcriptWriter()->flush(); // the save the new prompt queued is written
    QCOMPARE(window.store()->load(id).first().content, QStringLiteral("You are a pirate."));
    const GenerationSummary again = answer(window, [&] { window.chat()->regenerate(); });
    QCOMPARE(again.promptTokens, promptTokens({{k3::ChatRole::System, "You are a pirate.", {}, {}},
                                               {k3::ChatRole::User, "Hello", {}, {}}}));
    // The state after the first answer began with the old prompt: nothing of it is reused.
    QCOMPARE(again.reusedPositions, 0);
    QCOMPARE(again.prefillPositions, again.promptTokens);
    QCOMPARE(window.store()->load(id).first().content, QStringLiteral("You are a pirate."));
}

// Settings > Context length reaches the LaunchConfig the model is loaded with; a
// conversation longer than it is refused with both numbers, and the question is kept.
void TestVersions::contextLengthFromSettingsRefusesALongConversation() {
    MainWindow window;
    window.show();
    QVERIFY(loadDemo(window, m_demo));
    QCOMPARE(window.launchConfig().contextLength, 4096);
    window.showSettings();
    auto* dialog = window.findChild<SettingsDialog*>();
    QVERIFY(dialog);
    auto* context = dialog->findChild<QSpinBox*>(QStringLiteral("contextLength"));
    QVERIFY(context);
    QCOMPARE(context->value(), 4096);
    context->setValue(24);
    QSignalSpy ready(&window, &MainWindow::modelReady);
    dialog->accept(); // a new context applies when the model is loaded: OK reloads it
    QVERIFY(ready.wait(30000));
    QCOMPARE(window.launchConfig().contextLength, 24);
    QCOMPARE(AppSettings::loadLaunch().contextLength, 24);

    const QString question =
        QStringLiteral("Please tell me everything you know about caches, memory, disks, "
                       "experts, layers and tokens, in great detail.");
    window.chat()->send(question);
    QTRY_VERIFY_WITH_TIMEOUT(window.findChild<QMessageBox*>(QStringLiteral("answerFailedBox")),
                             30000);
    auto* box = window.findChild<QMessageBox*>(QStringLiteral("answerFailedBox"));
    const int tokens = promptTokens({{k3::ChatRole::User, question.toStdString(), {}, {}}});
    QVERIFY(tokens >= 24);
    QCOMPARE(box->informativeText(),
             QStringLiteral("The conversation is %1 tokens and the model was loaded with a "
                            "context of 24 tokens. Start a new conversation, or raise Context "
                            "length in Settings (applied when the model is loaded next).")
                 .arg(tokens));
    box->close();
    ConversationModel* conversation = window.conversationView()->conversation();
    QCOMPARE(conversation->rowCount(), 1); // the question stays, to be answered later
    QCOMPARE(text(conversation->index(0)), question);
    QVERIFY(!window.composer()->isGenerating());
}

QTEST_MAIN(TestVersions)
#include "tst_versions.moc"
