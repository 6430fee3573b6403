#include <QCoreApplication>
#include <QDir>
#include <QLabel>
#include <QPlainTextEdit>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTest>

#include "AppSettings.h"
#include "MainWindow.h"
#include "ModelLoader.h"
#include "chat/ConversationModel.h"
#include "chat/ConversationStore.h"
#include "chat/ConversationView.h"
#include "chat/MessageComposer.h"

// Edit-and-resend through the real window and the tiny checkpoint (its own executable:
// generating answers takes most of a test's time budget).
class TestChatEditing : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void editAndResendReplacesTheLastExchange();
    void editingAnEarlierQuestionStartsABranch();
};

void TestChatEditing::initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("k3chat-tests"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_chatediting"));
    QStandardPaths::setTestModeEnabled(true); // never touch the user's settings or chats
    // Every run starts without saved conversation states (the engine would restore them).
    QDir(AppSettings::stateCacheDirectory()).removeRecursively();
    QSettings().clear();
}

// Up in the empty composer brings the last question back; sending it replaces that
// question and its answer, and the transcript on disk says the same.
void TestChatEditing::editAndResendReplacesTheLastExchange() {
    MainWindow window;
    window.show();
    QVERIFY(QTest::qWaitForWindowActive(&window));
    QSignalSpy ready(&window, &MainWindow::modelReady);
    window.loader()->loadModelFolder(
        QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a"));
    QVERIFY(ready.wait(30000));
    window.composer()->setThinking(false);
    // A saved two-exchange conversation, opened as from the sidebar.
    const QString id =
        window.store()->save({}, {{QStringLiteral("user"), QStringLiteral("First question"), {}},
                                  {QStringLiteral("assistant"), QStringLiteral("First answer"), {}},
                                  {QStringLiteral("user"), QStringLiteral("Second question"), {}},
                                  {QStringLiteral("assistant"), QStringLiteral("Second answer"),
                                   QStringLiteral("old thoughts")}});
    const int savedChats = int(window.store()->list().size());
    window.openConversation(id);
    ConversationModel* conversation = window.conversationView()->conversation();
    QCOMPARE(conversation->rowCount(), 4);

    auto* editor = window.findChild<QPlainTextEdit*>(QStringLiteral("composerEditor"));
    editor->setFocus();
    QTest::keyClick(editor, Qt::Key_Up);
    QVERIFY(window.composer()->isEditing());
    QCOMPARE(window.composer()->text(), QStringLiteral("Second question"));
    // Esc cancels the edit and leaves the conversation alone.
    QTest::keyClick(editor, Qt::Key_Escape);
    QVERIFY(!window.composer()->isEditing());
    QCOMPARE(window.composer()->text(), QString());
    QCOMPARE(conversation->rowCount(), 4);
    // Up does nothing once the box holds text.
    QTest::keyClicks(editor, QStringLiteral("x"));
    QTest::keyClick(editor, Qt::Key_Up);
    QVERIFY(!window.composer()->isEditing());
    window.composer()->clear();

    QTest::keyClick(editor, Qt::Key_Up);
    editor->selectAll();
    QTest::keyClicks(editor, QStringLiteral("Edited question"));
    QSignalSpy finished(&window, &MainWindow::answerFinished);
    QTest::keyClick(editor, Qt::Key_Return);
    QVERIFY(window.composer()->isGenerating());
    QVERIFY(!window.composer()->isEditing());
    QCOMPARE(conversation->rowCount(), 4); // the old question and answer are gone already
    QVERIFY(finished.wait(60000));
    QCOMPARE(conversation->rowCount(), 4);
    QCOMPARE(conversation->index(0).data(ConversationModel::ContentRole).toString(),
             QStringLiteral("First question"));
    QCOMPARE(conversation->index(1).data(ConversationModel::ContentRole).toString(),
             QStringLiteral("First answer"));
    QCOMPARE(conversation->index(2).data(ConversationModel::ContentRole).toString(),
             QStringLiteral("Edited question"));
    QCOMPARE(conversation->index(3).data(ConversationModel::RoleNameRole).toString(),
             QStringLiteral("assistant"));
    QVERIFY(conversation->index(3).data(ConversationModel::ContentRole).toString() !=
            QStringLiteral("Second answer"));
    QVERIFY(conversation->index(3).data(ConversationModel::ReasoningRole).toString().isEmpty());
    QCOMPARE(window.currentConversationId(), id);
    const QVector<ChatTurn> onDisk = window.store()->load(id);
    const QVector<ChatTurn> shown = conversation->turns();
    QCOMPARE(onDisk.size(), 4);
    for (int i = 0; i < 4; ++i) {
        QCOMPARE(onDisk.at(i).role, shown.at(i).role);
        QCOMPARE(onDisk.at(i).content, shown.at(i).content);
        QCOMPARE(onDisk.at(i).reasoning, shown.at(i).reasoning);
    }
    QCOMPARE(int(window.store()->list().size()),
             savedChats); // replaced in place, not saved as a new chat
    window.store()->remove(id);
}

// Any earlier question can be edited (Ctrl+E on it in the conversation, or its context
// menu): sending it answers from there, and what followed is kept as the other version
// (issue 37 point 9).
void TestChatEditing::editingAnEarlierQuestionStartsABranch() {
    MainWindow window;
    window.show();
    QVERIFY(QTest::qWaitForWindowActive(&window));
    QSignalSpy ready(&window, &MainWindow::modelReady);
    window.loader()->loadModelFolder(
        QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a"));
    QVERIFY(ready.wait(30000));
    window.composer()->setThinking(false);
    const QString id = window.store()->save(
        {}, {{QStringLiteral("user"), QStringLiteral("First question"), {}},
             {QStringLiteral("assistant"), QStringLiteral("First answer"), {}},
             {QStringLiteral("user"), QStringLiteral("Second question"), {}},
             {QStringLiteral("assistant"), QStringLiteral("Second answer"), {}}});
    window.openConversation(id);
    ConversationView* view = window.conversationView();
    ConversationModel* conversation = view->conversation();
    QCOMPARE(conversation->rowCount(), 4);

    // Ctrl+E on an answer does nothing; on the first question it opens it for editing.
    view->setFocus();
    view->setCurrentIndex(conversation->index(1));
    QTest::keyClick(view, Qt::Key_E, Qt::ControlModifier);
    QVERIFY(!window.composer()->isEditing());
    view->setCurrentIndex(conversation->index(0));
    QTest::keyClick(view, Qt::Key_E, Qt::ControlModifier);
    QVERIFY(window.composer()->isEditing());
    QCOMPARE(window.composer()->text(), QStringLiteral("First question"));
    const auto* label = window.composer()->findChild<QLabel*>(QStringLiteral("editingLabel"));
    QVERIFY(label);
    QCOMPARE(label->text(),
             QStringLiteral("Editing an earlier message: Enter resends it and answers from there "
                            "(what followed stays as the other version), Esc cancels."));

    auto* editor = window.findChild<QPlainTextEdit*>(QStringLiteral("composerEditor"));
    QVERIFY(editor->hasFocus());
    editor->selectAll();
    QTest::keyClicks(editor, QStringLiteral("Edited first question"));
    QSignalSpy finished(&window, &MainWindow::answerFinished);
    QTest::keyClick(editor, Qt::Key_Return);
    QVERIFY(finished.wait(60000));
    QCOMPARE(conversation->rowCount(), 2);
    QCOMPARE(conversation->index(0).data(ConversationModel::ContentRole).toString(),
             QStringLiteral("Edited first question"));
    QCOMPARE(conversation->index(0).data(ConversationModel::VersionRole).toPoint(), QPoint(2, 2));
    QCOMPARE(conversation->index(1).data(ConversationModel::RoleNameRole).toString(),
             QStringLiteral("assistant"));
    // The old branch is a version away, whole, and the transcript on disk holds both.
    const QVector<ChatTurn> onDisk = window.store()->load(id);
    QCOMPARE(onDisk.size(), 2);
    QCOMPARE(onDisk.at(0).content, QStringLiteral("Edited first question"));
    QCOMPARE(int(onDisk.at(0).otherVersions.size()), 1);
    QCOMPARE(int(onDisk.at(0).otherVersions.at(0).size()), 4);
    QCOMPARE(onDisk.at(0).otherVersions.at(0).at(2).content, QStringLiteral("Second question"));
    view->setFocus();
    view->setCurrentIndex(conversation->index(0));
    QTest::keyClick(view, Qt::Key_Left, Qt::AltModifier);
    QCOMPARE(conversation->rowCount(), 4);
    QCOMPARE(conversation->index(2).data(ConversationModel::ContentRole).toString(),
             QStringLiteral("Second question"));
    QCOMPARE(conversation->index(3).data(ConversationModel::ContentRole).toString(),
             QStringLiteral("Second answer"));
    window.store()->remove(id);
}

QTEST_MAIN(TestChatEditing)
#include "tst_chatediting.moc"
