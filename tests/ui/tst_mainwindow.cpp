#include <QAction>
#include <QApplication>
#include <QDir>
#include <QDockWidget>
#include <QFile>
#include <QFileDialog>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMenu>
#include <QMenuBar>
#include <QMessageBox>
#include <QPlainTextEdit>
#include <QSet>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTemporaryDir>
#include <QTest>
#include <QTimer>

#include "AboutDialog.h"
#include "AppSettings.h"
#include "MainWindow.h"
#include "ModelLoader.h"
#include "chat/ChatController.h"
#include "chat/ConversationModel.h"
#include "chat/ConversationStore.h"
#include "chat/ConversationView.h"
#include "chat/FindBar.h"
#include "chat/MessageComposer.h"
#include "chat/MessageDelegate.h"
#include "panels/DiskIoPanel.h"
#include "panels/ExpertCachePanel.h"
#include "panels/MemoryPlanPanel.h"
#include "panels/TokenTimingPanel.h"
#include "wizard/SetupWizard.h"
#include "worker/EngineWorker.h"

#include <k3/chat.hpp>

#include <unistd.h>

class TestMainWindow : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void opensWithTitleAndEmptyConversation();
    void menusArePresent();
    void newChatShortcutClearsComposer();
    void aboutNamesTheHighlightingState();
    void remembersGeometry();
    void answerIsSavedAndListed();
    void markdownExport();
    void editMenuListsShortcuts();
    void findBarCountsAndCloses();
    void keepThinkingExpandedSetting();
    void escapeStopsTheAnswerMidway();
    void sidebarSearchFiltersByTitle();
    void firstRunOpensTheWizardOverTheDemo();
    void importErrorIsPlainText();
    void importKeepsEveryFieldAndReopens();
    void fileMenuImportsAConversation();
    void conversationInUseElsewhereIsNotOpened();
    void typingAfterUpGoesIntoTheComposer();
    void fitsIn800x600();
    void everyPanelIsATabStop();
    void thinkIsDecidedByTheModelNotItsFolder();
};

namespace {
QAction* actionNamed(const MainWindow& window, const char* name) {
    return window.findChild<QAction*>(QString::fromLatin1(name));
}
} // namespace

void TestMainWindow::initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("k3chat-tests"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_mainwindow"));
    QStandardPaths::setTestModeEnabled(true); // never touch the user's settings
    // Every run starts without saved conversation states (the engine would restore them).
    QDir(AppSettings::stateCacheDirectory()).removeRecursively();
    QSettings().clear();
    // Conversations left by an earlier run (one that failed before cleaning up) would
    // change every count below.
    QDir(QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) +
         QStringLiteral("/conversations"))
        .removeRecursively();
}

void TestMainWindow::opensWithTitleAndEmptyConversation() {
    MainWindow window;
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QCOMPARE(window.windowTitle(), QStringLiteral("k3chat"));
    QCOMPARE(window.conversationView()->messageCount(), 0);
    QVERIFY(window.conversationView()->isVisible());
    QCOMPARE(window.conversationList()->count(), 0);
    QCOMPARE(window.statusBar()->currentMessage(), QStringLiteral("No model loaded"));
    QVERIFY(!window.composer()->isReady());
    QVERIFY(window.close());
}

void TestMainWindow::menusArePresent() {
    MainWindow window;
    QStringList titles;
    for (QAction* action : window.menuBar()->actions()) titles << action->text();
    QCOMPARE(titles, (QStringList{"&File", "&Edit", "&View", "&Model", "&Help"}));
}

void TestMainWindow::newChatShortcutClearsComposer() {
    MainWindow window;
    window.show();
    QVERIFY(QTest::qWaitForWindowActive(&window));
    auto* editor = window.findChild<QPlainTextEdit*>(QStringLiteral("composerEditor"));
    QVERIFY(editor);
    editor->setFocus();
    QTest::keyClicks(editor, QStringLiteral("draft"));
    QCOMPARE(window.composer()->text(), QStringLiteral("draft"));
    QTest::keySequence(&window, QKeySequence::New);
    QCOMPARE(window.composer()->text(), QString());
}

void TestMainWindow::aboutNamesTheHighlightingState() {
    const QString summary = AboutDialog::buildSummary();
#ifdef K3_HAVE_KSYNTAXHIGHLIGHTING
    QVERIFY(
        summary.contains(QStringLiteral("Code highlighting: KSyntaxHighlighting is available")));
#else
    QVERIFY(summary.contains(QStringLiteral("no KSyntaxHighlighting")));
#endif
    QVERIFY(summary.contains(QStringLiteral("CPU kernels: ")));
}

void TestMainWindow::remembersGeometry() {
    {
        MainWindow window;
        window.show();
        QVERIFY(QTest::qWaitForWindowExposed(&window));
        window.resize(760,
                      580); // fits the offscreen screen (800x600), which restoreGeometry clamps to
        QVERIFY(window.close());
    }
    MainWindow again;
    QCOMPARE(again.size(), QSize(760, 580));
}

// A whole turn through the real window: load, send, stream, save, list, reopen.
void TestMainWindow::answerIsSavedAndListed() {
    MainWindow window;
    QSignalSpy ready(&window, &MainWindow::modelReady);
    window.loader()->loadModelFolder(
        QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a"));
    QVERIFY(ready.wait(30000));
    QVERIFY(window.composer()->isReady());
    QCOMPARE(window.conversationList()->count(), 0);
    window.composer()->setThinking(false);
    QSignalSpy finished(&window, &MainWindow::answerFinished);
    window.chat()->send(QStringLiteral("What is MXFP4?"));
    QVERIFY(window.composer()->isGenerating());
    QVERIFY(finished.wait(60000));
    QVERIFY(!window.composer()->isGenerating());
    QCOMPARE(window.conversationView()->messageCount(), 2);
    QCOMPARE(window.conversationList()->count(), 1);
    QCOMPARE(window.conversationList()->item(0)->text(), QStringLiteral("What is MXFP4?"));
    const QString id = window.currentConversationId();
    QCOMPARE(window.store()->load(id).size(), 2);
    // A new chat empties the view; opening the saved one brings both messages back.
    window.newChat();
    QCOMPARE(window.conversationView()->messageCount(), 0);
    window.openConversation(id);
    QCOMPARE(window.conversationView()->messageCount(), 2);
    QCOMPARE(window.conversationView()
                 ->conversation()
                 ->index(0)
                 .data(ConversationModel::ContentRole)
                 .toString(),
             QStringLiteral("What is MXFP4?"));
    // Regenerate replaces the last answer with a new one (same prompt, greedy: same text).
    const QString first = window.conversationView()
                              ->conversation()
                              ->index(1)
                              .data(ConversationModel::ContentRole)
                              .toString();
    QSignalSpy again(&window, &MainWindow::answerFinished);
    window.chat()->regenerate();
    QVERIFY(again.wait(60000));
    QCOMPARE(window.conversationView()->messageCount(), 2);
    QCOMPARE(window.conversationView()
                 ->conversation()
                 ->index(1)
                 .data(ConversationModel::ContentRole)
                 .toString(),
             first);
    window.store()->remove(id);
}

void TestMainWindow::markdownExport() {
    const QString md = MainWindow::conversationMarkdown(
        {{QStringLiteral("user"), QStringLiteral("What is MXFP4?"), {}},
         {QStringLiteral("assistant"), QStringLiteral("Four-bit **weights**."),
          QStringLiteral("think\nmore")}});
    QCOMPARE(md, QStringLiteral(
                     "# What is MXFP4?\n\n## You\n\nWhat is MXFP4?\n\n## K3\n\n> think\n> more\n\n"
                     "Four-bit **weights**.\n"));
}

void TestMainWindow::editMenuListsShortcuts() {
    MainWindow window;
    QCOMPARE(actionNamed(window, "findAction")->shortcut(), QKeySequence(QKeySequence::Find));
    QCOMPARE(actionNamed(window, "findNextAction")->shortcut(), QKeySequence(Qt::Key_F3));
    QCOMPARE(actionNamed(window, "findPreviousAction")->shortcut(),
             QKeySequence(Qt::SHIFT | Qt::Key_F3));
    QCOMPARE(actionNamed(window, "copyMessageAction")->shortcut(),
             QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_C));
    QVERIFY(actionNamed(window, "editLastAction")->text().endsWith(QStringLiteral("\tUp")));
    QMenu* edit = window.menuBar()->actions().at(1)->menu();
    QVERIFY(edit->actions().contains(actionNamed(window, "copyMessageAction")));
    QVERIFY(edit->actions().contains(actionNamed(window, "findAction")));
    QMenu* view = window.menuBar()->actions().at(2)->menu();
    QVERIFY(view->actions().contains(actionNamed(window, "keepThinkingExpandedAction")));
    QVERIFY(!window.findBar()->field()->accessibleName().isEmpty());
    QVERIFY(!window.findBar()
                 ->findChild<QWidget*>(QStringLiteral("findNext"))
                 ->accessibleName()
                 .isEmpty());
}

void TestMainWindow::findBarCountsAndCloses() {
    MainWindow window;
    window.show();
    QVERIFY(QTest::qWaitForWindowActive(&window));
    window.conversationView()->conversation()->setTurns(
        {{QStringLiteral("user"), QStringLiteral("Explain cache locality."), {}},
         {QStringLiteral("assistant"),
          QStringLiteral("A **cache** line holds 64 bytes.\n\n```cpp\nint cache = 0;\n```"),
          {}}});
    FindBar* bar = window.findBar();
    QVERIFY(!bar->isVisible());
    QTest::keySequence(&window, QKeySequence::Find);
    QVERIFY(bar->isVisible());
    QTRY_VERIFY(bar->field()->hasFocus());
    QTest::keyClicks(bar->field(), QStringLiteral("cache"));
    QCOMPARE(bar->resultText(), QStringLiteral("1 of 3"));
    QTest::keyClick(bar->field(), Qt::Key_Return);
    QCOMPARE(bar->resultText(), QStringLiteral("2 of 3"));
    QCOMPARE(window.conversationView()->currentIndex().row(), 1);
    QTest::keyClick(bar->field(), Qt::Key_Return, Qt::ShiftModifier);
    QCOMPARE(bar->resultText(), QStringLiteral("1 of 3"));
    QTest::keyClick(bar->field(), Qt::Key_F3);
    QTest::keyClick(bar->field(), Qt::Key_F3);
    QCOMPARE(bar->resultText(), QStringLiteral("3 of 3"));
    QTest::keyClick(bar->field(), Qt::Key_F3, Qt::ShiftModifier);
    QCOMPARE(bar->resultText(), QStringLiteral("2 of 3"));
    QTest::keyClicks(bar->field(), QStringLiteral("z"));
    QCOMPARE(bar->resultText(), QStringLiteral("No matches"));
    QTest::keyClick(bar->field(), Qt::Key_Escape);
    QVERIFY(!bar->isVisible());
    QCOMPARE(window.conversationView()->matchCount(), 0);
    // Opening again keeps the text selected for a new search.
    QTest::keySequence(&window, QKeySequence::Find);
    QCOMPARE(bar->field()->selectedText(), QStringLiteral("cachez"));
}

void TestMainWindow::keepThinkingExpandedSetting() {
    const QVector<ChatTurn> turns{
        {QStringLiteral("user"), QStringLiteral("q"), {}},
        {QStringLiteral("assistant"), QStringLiteral("a"), QStringLiteral("reasoning")}};
    QSettings().remove(QStringLiteral("chat/keepThinkingExpanded"));
    {
        MainWindow window; // default: collapsed
        QVERIFY(!actionNamed(window, "keepThinkingExpandedAction")->isChecked());
        window.conversationView()->conversation()->setTurns(turns);
        QVERIFY(!window.conversationView()
                     ->conversation()
                     ->index(1)
                     .data(ConversationModel::ThinkingExpandedRole)
                     .toBool());
        actionNamed(window, "keepThinkingExpandedAction")->trigger();
        QVERIFY(window.conversationView()
                    ->conversation()
                    ->index(1)
                    .data(ConversationModel::ThinkingExpandedRole)
                    .toBool());
    }
    QCOMPARE(QSettings().value(QStringLiteral("chat/keepThinkingExpanded")).toBool(), true);
    MainWindow window;
    QVERIFY(actionNamed(window, "keepThinkingExpandedAction")->isChecked());
    window.conversationView()->conversation()->setTurns(turns);
    const QModelIndex answer = window.conversationView()->conversation()->index(1);
    QVERIFY(answer.data(ConversationModel::ThinkingExpandedRole).toBool());
    QVERIFY(MessageDelegate::thinkingLabel(answer).startsWith(QStringLiteral("▾ Thoughts")));
    actionNamed(window, "keepThinkingExpandedAction")->trigger();
    QVERIFY(!answer.data(ConversationModel::ThinkingExpandedRole).toBool());
    QCOMPARE(QSettings().value(QStringLiteral("chat/keepThinkingExpanded")).toBool(), false);
}

// Esc in the window stops a running answer within a token; the footer says "stopped".
void TestMainWindow::escapeStopsTheAnswerMidway() {
    MainWindow window;
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QSignalSpy ready(&window, &MainWindow::modelReady);
    window.loader()->loadModelFolder(
        QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a"));
    QVERIFY(ready.wait(30000));
    window.composer()->setThinking(false);
    QSignalSpy finished(&window, &MainWindow::answerFinished);
    window.chat()->send(QStringLiteral("Tell me about KDA."));
    // The tiny model never ends its turn by itself: only the 512-token limit would.
    QTRY_VERIFY_WITH_TIMEOUT(
        window.statusBar()->currentMessage().contains(QStringLiteral("generating")), 30000);
    QTest::keyClick(&window, Qt::Key_Escape);
    QVERIFY(finished.wait(10000));
    const QModelIndex answer = window.conversationView()->conversation()->index(1);
    const QString stats = answer.data(ConversationModel::StatsRole).toString();
    QVERIFY2(stats.contains(QStringLiteral("stopped")), qPrintable(stats));
    const int tokens = stats.section(QLatin1Char(' '), 0, 0).toInt();
    QVERIFY2(tokens >= 1 && tokens < 512, qPrintable(stats));
    QVERIFY(!window.composer()->isGenerating());
    window.store()->remove(window.currentConversationId());
}

// The sidebar's search field keeps the conversations whose title contains the text
// (tst_conversationlist: message text too).
void TestMainWindow::sidebarSearchFiltersByTitle() {
    MainWindow window;
    const QStringList titles{QStringLiteral("Packing the trunk"), QStringLiteral("MXFP4 scales"),
                             QStringLiteral("Why pack twice?")};
    QStringList ids;
    for (const QString& title : titles) {
        const QString id =
            window.store()->save({}, {{QStringLiteral("user"), title, {}},
                                      {QStringLiteral("assistant"), QStringLiteral("ok"), {}}});
        QVERIFY(!id.isEmpty());
        ids << id;
    }
    window.refreshConversationList();
    QCOMPARE(window.conversationList()->count(), 3);
    auto* search = window.findChild<QLineEdit*>(QStringLiteral("conversationSearch"));
    QVERIFY(search);
    QTest::keyClicks(search, QStringLiteral("PACK"));
    QTRY_COMPARE(window.conversationList()->count(), 2); // searched on a worker
    QStringList shown;
    for (int i = 0; i < window.conversationList()->count(); ++i)
        shown << window.conversationList()->item(i)->text();
    shown.sort();
    QCOMPARE(shown,
             QStringList({QStringLiteral("Packing the trunk"), QStringLiteral("Why pack twice?")}));
    search->clear();
    QCOMPARE(window.conversationList()->count(), 3);
    for (const QString& id : ids) window.store()->remove(id);
}

// The first start opens the setup wizard over the demo (loading behind it); later
// starts do not, and asking again raises the open wizard instead of a second one.
void TestMainWindow::firstRunOpensTheWizardOverTheDemo() {
    QSettings().remove(QStringLiteral("setup/firstRunDone"));
    QSettings().remove(QStringLiteral("model/directory"));
    {
        MainWindow window;
        window.show();
        QSignalSpy ready(&window, &MainWindow::modelReady);
        window.loadStartupModel();
        QTRY_COMPARE_WITH_TIMEOUT(window.findChildren<SetupWizard*>().size(), 1, 5000);
        QVERIFY(window.findChild<SetupWizard*>()->isVisible());
        window.showSetupWizard();
        QCOMPARE(window.findChildren<SetupWizard*>().size(), 1);
        QVERIFY(ready.count() > 0 || ready.wait(30000)); // the demo loaded behind the wizard
        window.close();
        QTRY_VERIFY(!window.findChild<SetupWizard*>() ||
                    !window.findChild<SetupWizard*>()->isVisible());
    }
    MainWindow again;
    again.show();
    QSignalSpy againReady(&again, &MainWindow::modelReady);
    again.loadStartupModel();
    // The first run asks for the wizard with a posted call; the demo's load answers with a
    // queued signal posted later, so once the model is ready a request would have run.
    QVERIFY(againReady.wait(30000));
    QVERIFY(again.findChildren<SetupWizard*>().isEmpty());
}

namespace {
void writeFile(const QString& path, const QByteArray& data) {
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
    f.write(data);
}
} // namespace

void TestMainWindow::importErrorIsPlainText() {
    // The import error quotes the transcript; as rich text, <img src=/dev/zero> made the
    // dialog read /dev/zero until it crashed. It is shown as the characters it is.
    QTemporaryDir tmp;
    const QString file = tmp.filePath("bad.jsonl");
    writeFile(file, "{\"role\":\"user\",\"content\":\"hi\"}\n"
                    "{\"role\":\"<img src=/dev/zero>\",\"content\":\"x\"}\n");
    MainWindow window;
    window.show();
    QVERIFY(!window.importConversation(file));
    auto* box = window.findChild<QMessageBox*>(QStringLiteral("importErrorBox"));
    QVERIFY(box);
    QCOMPARE(box->textFormat(), Qt::PlainText);
    QCOMPARE(box->text(), file + QStringLiteral(":2: field \"role\" has unknown value \"<img "
                                                "src=/dev/zero>\" (expected system, user, "
                                                "assistant or tool)"));
    auto* label = box->findChild<QLabel*>(QStringLiteral("qt_msgbox_label"));
    QVERIFY(label);
    QCOMPARE(label->textFormat(), Qt::PlainText);
    QVERIFY(!box->grab().isNull()); // drawn at once: nothing is loaded
    box->close();
    QCOMPARE(window.conversationView()->messageCount(), 0);

    // The same message on stderr shows an escape sequence as text.
    const QString escaped = tmp.filePath("escape.jsonl");
    writeFile(escaped, "{\"role\":\"\\u001b[2J\",\"content\":\"x\"}\n");
    QTest::ignoreMessage(QtWarningMsg,
                         qPrintable(QStringLiteral("k3chat: ") + escaped +
                                    QStringLiteral(":1: field \"role\" has unknown value "
                                                   "\"\\x1b[2J\" (expected system, user, "
                                                   "assistant or tool)")));
    QVERIFY(!window.importConversation(escaped));
}

// Issue 37 point 9: importing was only `k3chat --conversation FILE`. File > Import
// conversation… (Ctrl+Shift+O) opens a file dialog without blocking the window; the file
// chosen is imported and opened.
void TestMainWindow::fileMenuImportsAConversation() {
    QTemporaryDir tmp;
    const QString file = tmp.filePath("saved.jsonl");
    writeFile(file, "{\"role\":\"user\",\"content\":\"imported question\"}\n"
                    "{\"role\":\"assistant\",\"content\":\"imported answer\"}\n");
    MainWindow window;
    auto* action = window.findChild<QAction*>(QStringLiteral("importAction"));
    QVERIFY(action);
    QCOMPARE(action->shortcut(), QKeySequence(QStringLiteral("Ctrl+Shift+O")));
    action->trigger();
    QFileDialog* dialog = nullptr;
    QTRY_VERIFY((dialog = window.findChild<QFileDialog*>(QStringLiteral("importDialog"))));
    QVERIFY(!dialog->isModal() || dialog->windowModality() == Qt::WindowModal);
    QCOMPARE(dialog->fileMode(), QFileDialog::ExistingFile);
    emit dialog->fileSelected(file);
    const QString id = window.currentConversationId();
    QVERIFY(!id.isEmpty());
    QCOMPARE(window.conversationView()->messageCount(), 2);
    QCOMPARE(window.store()->load(id).at(1).content, QStringLiteral("imported answer"));
    QVERIFY(window.store()->remove(id));
}

void TestMainWindow::importKeepsEveryFieldAndReopens() {
    // A tool message's name used to be dropped on import, so the app's own copy could not
    // be read back ("field name is required for role tool").
    QTemporaryDir tmp;
    const QString file = tmp.filePath("tools.jsonl");
    writeFile(file, "{\"role\":\"user\",\"content\":\"time?\"}\n"
                    "{\"role\":\"tool\",\"name\":\"clock\",\"content\":\"12:00\"}\n"
                    "{\"role\":\"assistant\",\"content\":\"noon\",\"reasoning_content\":\"\","
                    "\"invalid\":\"a NaN or Inf reached the logits\"}\n");
    const std::vector<k3::ChatMessage> original = k3::readTranscript(file.toStdString());
    MainWindow window;
    QVERIFY(window.importConversation(file));
    const QString id = window.currentConversationId();
    QVERIFY(!id.isEmpty());
    QCOMPARE(window.conversationView()->messageCount(), 3);
    const QVector<ChatTurn> reopened = window.store()->load(id);
    QCOMPARE(reopened.size(), 3);
    QCOMPARE(reopened.at(1).name, QStringLiteral("clock"));
    QCOMPARE(reopened.at(2).invalid, QStringLiteral("a NaN or Inf reached the logits"));
    QVERIFY(k3::readTranscript(window.store()->pathFor(id).toStdString()) == original);
    QCOMPARE(window.conversationView()
                 ->conversation()
                 ->index(2)
                 .data(ConversationModel::StatsRole)
                 .toString(),
             QStringLiteral("RUN INVALID: a NaN or Inf reached the logits"));
    QVERIFY(window.store()->remove(id));
}

void TestMainWindow::conversationInUseElsewhereIsNotOpened() {
    // Another session (here this test, as `k3 --chat --history` would) writes the
    // conversation: the window says so instead of opening it to overwrite that session.
    MainWindow window;
    const QString id =
        window.store()->save({}, {{QStringLiteral("user"), QStringLiteral("shared")},
                                  {QStringLiteral("assistant"), QStringLiteral("ok")}});
    window.store()->release();
    k3::OutputLock other(window.store()->pathFor(id).toStdString());
    QString title, text, details;
    QTimer::singleShot(0, &window, [&] {
        auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget());
        if (!box) return;
        title = box->windowTitle();
        text = box->text();
        details = box->detailedText();
        QCOMPARE(box->textFormat(), Qt::PlainText);
        box->accept();
    });
    window.openConversation(id);
    QCOMPARE(title, QStringLiteral("The conversation is in use"));
    QVERIFY2(text.startsWith(QStringLiteral("Another k3chat window or k3 session")),
             qPrintable(text));
    QCOMPARE(details, window.store()->pathFor(id) +
                          QStringLiteral(" is in use by another session (pid %1): two sessions "
                                         "writing one conversation would overwrite each other's "
                                         "turns; close the other one or choose another file")
                              .arg(::getpid()));
    QCOMPARE(window.currentConversationId(), QString());
    QCOMPARE(window.conversationView()->messageCount(), 0);
    QVERIFY(window.store()->remove(id));
}

// Issue 21: after Up (edit the last message) typed keys went nowhere until the composer
// was clicked.
void TestMainWindow::typingAfterUpGoesIntoTheComposer() {
    MainWindow window;
    window.show();
    QVERIFY(QTest::qWaitForWindowActive(&window));
    ConversationModel* conversation = window.conversationView()->conversation();
    conversation->appendMessage(QStringLiteral("user"), QStringLiteral("First question"));
    conversation->appendMessage(QStringLiteral("assistant"), QStringLiteral("An answer"));
    auto* editor = window.findChild<QPlainTextEdit*>(QStringLiteral("composerEditor"));
    editor->setFocus();
    QTest::keyClick(editor, Qt::Key_Up);
    QVERIFY(window.composer()->isEditing());
    QTRY_COMPARE(QApplication::focusWidget(), editor);
    QTest::keyClicks(QApplication::focusWidget(), QStringLiteral(", again"));
    QCOMPARE(window.composer()->text(), QStringLiteral("First question, again"));
    // The same from the Edit menu while the conversation has the focus.
    window.chat()->cancelEdit();
    window.conversationView()->setFocus();
    actionNamed(window, "editLastAction")->trigger();
    QTRY_COMPARE(QApplication::focusWidget(), editor);
    QTest::keyClicks(QApplication::focusWidget(), QStringLiteral("!"));
    QCOMPARE(window.composer()->text(), QStringLiteral("First question!"));
}

// Issue 21: the docks' panels held the window at 649 px or more (their minimum heights
// added up). Offscreen fonts are smaller than a desktop's, so the panels are made as tall
// as large fonts make them: the docks scroll instead of holding the window up.
void TestMainWindow::fitsIn800x600() {
    MainWindow window;
    const QList<QWidget*> panels{
        window.findChild<MemoryPlanPanel*>(), window.findChild<ExpertCachePanel*>(),
        window.findChild<DiskIoPanel*>(), window.findChild<TokenTimingPanel*>()};
    for (QWidget* panel : panels) {
        QVERIFY(panel);
        panel->setMinimumHeight(200);
    }
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    const QSize least = window.minimumSizeHint().expandedTo(window.minimumSize());
    QVERIFY2(least.height() <= 600 && least.width() <= 800,
             qPrintable(QStringLiteral("%1x%2").arg(least.width()).arg(least.height())));
    window.resize(800, 600);
    QCOMPARE(window.size(), QSize(800, 600));
    // Every dock is still open, and the conversation keeps room to read.
    for (QDockWidget* dock : window.findChildren<QDockWidget*>()) QVERIFY(dock->isVisible());
    QVERIFY(window.conversationView()->height() >= 150);
}

// Issue 21: the panels could not be reached by keyboard. Each dock is a Tab stop (its
// scroll area, named after the dock) with a visible focus frame.
void TestMainWindow::everyPanelIsATabStop() {
    MainWindow window;
    window.show();
    QVERIFY(QTest::qWaitForWindowActive(&window));
    const QList<QDockWidget*> docks = window.findChildren<QDockWidget*>();
    QCOMPARE(docks.size(), 4);
    QSet<QDockWidget*> reached;
    QWidget* start = QApplication::focusWidget();
    QVERIFY(start);
    for (int i = 0; i < 40; ++i) {
        QTest::keyClick(QApplication::focusWidget(), Qt::Key_Tab);
        QWidget* focus = QApplication::focusWidget();
        for (QDockWidget* dock : docks)
            if (dock->isAncestorOf(focus)) {
                reached.insert(dock);
                QCOMPARE(focus->accessibleName(), dock->windowTitle());
                const QColor frame(focus->grab().toImage().pixel(1, 1));
                QCOMPARE(frame, focus->palette().color(QPalette::Highlight));
            }
        if (focus == start) break;
    }
    QCOMPARE(reached.size(), 4);
}

// Think is decided from the model's files, never its folder: a copy of the demo elsewhere
// gets Think unticked and disabled as the original does (issue 37 point 10); a model
// whose template reads `thinking` (or that has none, as k3_tiny_a) gets it.
void TestMainWindow::thinkIsDecidedByTheModelNotItsFolder() {
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    const QString copy = tmp.path() + QStringLiteral("/my-demo-copy");
    QVERIFY(QDir().mkpath(copy));
    const QDir demo(QStringLiteral(K3_SOURCE_DIR "/resources/demo"));
    for (const QString& name : demo.entryList(QDir::Files))
        QVERIFY(QFile::copy(demo.filePath(name), copy + QLatin1Char('/') + name));
    QCOMPARE(EngineWorker::modelThinks(copy), false);
    QCOMPARE(
        EngineWorker::modelThinks(QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a")),
        true);
    // A template that never reads `thinking` has no think channel; one that does has.
    const QString templated = tmp.path() + QStringLiteral("/templated");
    QVERIFY(QDir().mkpath(templated));
    writeFile(templated + QStringLiteral("/chat_template.jinja"), "{{ messages }}");
    QCOMPARE(EngineWorker::modelThinks(templated), false);
    writeFile(templated + QStringLiteral("/chat_template.jinja"),
              "{%- if thinking -%}<think>{%- endif -%}");
    QCOMPARE(EngineWorker::modelThinks(templated), true);

    QSettings().remove(QStringLiteral("thinking/perModel"));
    MainWindow window;
    window.show();
    QSignalSpy ready(&window, &MainWindow::modelReady);
    window.loader()->loadModelFolder(copy);
    QVERIFY(ready.wait(30000));
    QCOMPARE(window.composer()->isThinkingAvailable(), false);
    QCOMPARE(window.composer()->thinking(), false);
    window.loader()->loadModelFolder(
        QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a"));
    QVERIFY(ready.wait(30000));
    QCOMPARE(window.composer()->isThinkingAvailable(), true);
}

QTEST_MAIN(TestMainWindow)
#include "tst_mainwindow.moc"
