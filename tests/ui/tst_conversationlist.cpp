#include <QAction>
#include <QApplication>
#include <QContextMenuEvent>
#include <QDir>
#include <QFile>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QLocale>
#include <QMenu>
#include <QPushButton>
#include <QScrollBar>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTest>

#include "AppSettings.h"
#include "MainWindow.h"
#include "chat/ConversationListDelegate.h"
#include "chat/ConversationListPanel.h"
#include "chat/ConversationModel.h"
#include "chat/ConversationStore.h"
#include "chat/ConversationView.h"

// The sidebar as users meet it (issue 21 point 6), through the real main window.
class TestConversationList : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void init();
    void f2RenamesAndTheTitleIsStored();
    void deleteThenUndoBringsTheConversationBack();
    void deletionIsFinalAfterTheUndoPeriodAndAtClose();
    void searchFindsAnswerTextAndSaysWhenNothingMatches();
    void highlightIsAlwaysTheShownConversation();
    void entriesSayHowLongAgo();
    void reopenedChatStartsAtItsEnd();
    void pinAndDuplicateFromTheMenu();
};

namespace {
QString conversationsDir() {
    return QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) +
           QStringLiteral("/conversations");
}

// A saved conversation whose transcript was last written `secondsAgo` ago.
QString seed(MainWindow& window, const QString& question, const QString& answer, qint64 secondsAgo,
             int pairs = 1) {
    QVector<ChatTurn> turns;
    for (int i = 0; i < pairs; ++i)
        turns << ChatTurn{QStringLiteral("user"), question}
              << ChatTurn{QStringLiteral("assistant"), answer};
    const QString id = window.store()->save({}, turns);
    window.store()->release();
    QFile file(window.store()->pathFor(id));
    if (!file.open(QIODevice::ReadWrite) ||
        !file.setFileTime(QDateTime::currentDateTime().addSecs(-secondsAgo),
                          QFileDevice::FileModificationTime))
        qFatal("could not date %s", qPrintable(file.fileName()));
    return id;
}

QString idAt(QListWidget* list, int row) {
    return list->item(row)->data(ConversationListDelegate::IdRole).toString();
}

QString trashed(const MainWindow& window, const QString& id) {
    return window.store()->trashDirectory() + QLatin1Char('/') + id + QStringLiteral(".jsonl");
}

void showActive(MainWindow& window) {
    window.show();
    QVERIFY(QTest::qWaitForWindowActive(&window));
}

// Right-clicks `row` the way the platform does (a context menu event) and returns the menu.
QMenu* contextMenuAt(QListWidget* list, int row) {
    const QPoint at = list->visualItemRect(list->item(row)).center();
    QContextMenuEvent event(QContextMenuEvent::Mouse, at, list->viewport()->mapToGlobal(at));
    QApplication::sendEvent(list->viewport(), &event);
    return list->window()->findChild<QMenu*>(QStringLiteral("conversationMenu"));
}

QAction* actionStartingWith(QMenu* menu, const QString& text) {
    for (QAction* action : menu->actions())
        if (action->text().startsWith(text)) return action;
    return nullptr;
}
} // namespace

void TestConversationList::initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("k3chat-tests"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_conversationlist"));
    QStandardPaths::setTestModeEnabled(true); // never the user's settings or conversations
}

void TestConversationList::init() {
    QDir(conversationsDir()).removeRecursively();
    AppSettings::setPinnedConversations({});
}

// Issue 37 point 9: users of GPT4All, LM Studio and Jan pin and duplicate conversations.
// A pinned one stays at the top (before newer ones, after a restart too) and says so; a
// duplicate is a copy under a new id named "TITLE (copy)", the original untouched.
void TestConversationList::pinAndDuplicateFromTheMenu() {
    QString older, newer;
    {
        MainWindow window;
        older = seed(window, QStringLiteral("older question"), QStringLiteral("a"), 7200);
        newer = seed(window, QStringLiteral("newer question"), QStringLiteral("b"), 60);
        window.refreshConversationList();
        showActive(window);
        QListWidget* list = window.conversationList();
        QCOMPARE(idAt(list, 0), newer);
        QMenu* menu = contextMenuAt(list, 1);
        QVERIFY(menu);
        QAction* pin = menu->findChild<QAction*>(QStringLiteral("pinConversationAction"));
        QVERIFY(pin);
        QCOMPARE(pin->text(), QStringLiteral("Pin to the top"));
        pin->trigger();
        menu->close();
        QCOMPARE(idAt(list, 0), older);
        QCOMPARE(idAt(list, 1), newer);
        QVERIFY2(
            list->item(0)
                ->data(ConversationListDelegate::DateTextRole)
                .toString()
                .startsWith(QStringLiteral("pinned · ")),
            qPrintable(list->item(0)->data(ConversationListDelegate::DateTextRole).toString()));

        QTRY_VERIFY(!window.findChild<QMenu*>(QStringLiteral("conversationMenu")));
        menu = contextMenuAt(list, 1); // the newer one
        QVERIFY(menu);
        QSignalSpy duplicated(window.findChild<ConversationListPanel*>(),
                              &ConversationListPanel::conversationDuplicated);
        menu->findChild<QAction*>(QStringLiteral("duplicateConversationAction"))->trigger();
        menu->close();
        QCOMPARE(duplicated.count(), 1);
        const QString copy = duplicated.first().at(0).toString();
        QVERIFY(copy != newer);
        QCOMPARE(window.store()->storedTitle(copy), QStringLiteral("newer question (copy)"));
        QCOMPARE(window.store()->load(copy).size(), 2);
        QCOMPARE(window.store()->load(copy).at(1).content, QStringLiteral("b"));
        QCOMPARE(window.store()->load(newer).size(), 2);
        QCOMPARE(list->count(), 3);
        QCOMPARE(idAt(list, 0), older); // still first: pinned
        QCOMPARE(list->item(1)->text(), QStringLiteral("newer question (copy)"));
    }
    MainWindow again; // pinned after a restart too
    QCOMPARE(idAt(again.conversationList(), 0), older);
    QMenu* menu = contextMenuAt(again.conversationList(), 0);
    QVERIFY(menu);
    QAction* unpin = menu->findChild<QAction*>(QStringLiteral("pinConversationAction"));
    QCOMPARE(unpin->text(), QStringLiteral("Unpin"));
    unpin->trigger();
    menu->close();
    QVERIFY(idAt(again.conversationList(), 0) != older);
    QCOMPARE(idAt(again.conversationList(), 2), older);
}

void TestConversationList::f2RenamesAndTheTitleIsStored() {
    {
        MainWindow window;
        const QString id = seed(window, QStringLiteral("first question"), QStringLiteral("ok"), 60);
        window.refreshConversationList();
        showActive(window);
        window.openConversation(id);
        QListWidget* list = window.conversationList();
        list->setFocus();
        QTest::keyClick(list, Qt::Key_F2);
        auto* editor = qobject_cast<QLineEdit*>(QApplication::focusWidget());
        QVERIFY(editor);
        QVERIFY(list->isAncestorOf(editor));
        QCOMPARE(editor->text(), QStringLiteral("first question"));
        editor->selectAll();
        QTest::keyClicks(editor, QStringLiteral("Trip to Kyoto"));
        QTest::keyClick(editor, Qt::Key_Return);
        // The delegate commits after the editor has seen the key (a queued call).
        QTRY_COMPARE(window.store()->storedTitle(id), QStringLiteral("Trip to Kyoto"));
        QCOMPARE(list->item(0)->text(), QStringLiteral("Trip to Kyoto"));
        QCOMPARE(window.currentConversationId(), id); // renaming opened nothing else
        ConversationStore reopened(window.store()->directory());
        QCOMPARE(reopened.list().front().title, QStringLiteral("Trip to Kyoto"));
    }
    MainWindow again; // the next start lists the new title
    QCOMPARE(again.conversationList()->count(), 1);
    QCOMPARE(again.conversationList()->item(0)->text(), QStringLiteral("Trip to Kyoto"));
}

void TestConversationList::deleteThenUndoBringsTheConversationBack() {
    MainWindow window;
    const QString older =
        seed(window, QStringLiteral("alpha question"), QStringLiteral("alpha answer"), 120);
    const QString newer = seed(window, QStringLiteral("beta"), QStringLiteral("b"), 60);
    window.refreshConversationList();
    showActive(window);
    window.openConversation(older);
    QListWidget* list = window.conversationList();
    ConversationListPanel* panel = window.conversationPanel();
    auto* bar = window.findChild<QWidget*>(QStringLiteral("undoDeleteBar"));
    QVERIFY(bar);
    QVERIFY(!bar->isVisible());
    list->setFocus();
    QTest::keyClick(list, Qt::Key_Delete);
    QCOMPARE(list->count(), 1);
    QCOMPARE(idAt(list, 0), newer);
    QVERIFY(!QFile::exists(window.store()->pathFor(older)));
    QVERIFY(QFile::exists(trashed(window, older)));
    // The shown conversation went: a new empty chat is shown, and nothing is highlighted.
    QCOMPARE(window.currentConversationId(), QString());
    QCOMPARE(window.conversationView()->messageCount(), 0);
    QVERIFY(list->selectedItems().isEmpty());
    QVERIFY(list->hasFocus()); // for Ctrl+Z, or the next Delete
    QVERIFY(bar->isVisible());
    QCOMPARE(bar->findChild<QLabel*>()->text(), QStringLiteral("Deleted “alpha question”"));
    QCOMPARE(panel->pendingDeletions(), QStringList{older});

    QTest::keySequence(list, QKeySequence::Undo);
    QCOMPARE(list->count(), 2);
    QCOMPARE(idAt(list, 1), older); // back in its place: its date did not change
    QCOMPARE(window.store()->load(older).size(), 2);
    QCOMPARE(window.store()->load(older).at(1).content, QStringLiteral("alpha answer"));
    QCOMPARE(window.currentConversationId(), older); // shown again
    QCOMPARE(window.conversationView()->messageCount(), 2);
    QCOMPARE(list->selectedItems().size(), 1);
    QCOMPARE(list->selectedItems().front(), list->item(1));
    QVERIFY(!bar->isVisible());

    // The button does the same for one that was not shown; the shown one stays.
    window.openConversation(newer);
    window.conversationPanel()->deleteConversation(older);
    QCOMPARE(list->count(), 1);
    QCOMPARE(window.currentConversationId(), newer);
    QTest::mouseClick(bar->findChild<QPushButton*>(QStringLiteral("undoDeleteButton")),
                      Qt::LeftButton);
    QCOMPARE(list->count(), 2);
    QCOMPARE(window.currentConversationId(), newer);
    QCOMPARE(list->selectedItems().front(), list->item(0));
    QVERIFY(panel->pendingDeletions().isEmpty());
}

void TestConversationList::deletionIsFinalAfterTheUndoPeriodAndAtClose() {
    QString first, second;
    {
        MainWindow window;
        first = seed(window, QStringLiteral("first"), QStringLiteral("a"), 120);
        second = seed(window, QStringLiteral("second"), QStringLiteral("b"), 60);
        window.refreshConversationList();
        showActive(window);
        ConversationListPanel* panel = window.conversationPanel();
        panel->setUndoPeriod(50);
        QListWidget* list = window.conversationList();
        QCOMPARE(idAt(list, 1), first);
        QMenu* menu = contextMenuAt(list, 1); // right-click: Delete from the menu
        QVERIFY(menu);
        // "Delete\tDel", not "Delete saved state" (disabled: no state saved here).
        QAction* remove = actionStartingWith(menu, QStringLiteral("Delete\t"));
        QVERIFY(remove);
        remove->trigger();
        QCOMPARE(list->count(), 1);
        QVERIFY(QFile::exists(trashed(window, first)));
        QTRY_VERIFY(!QFile::exists(trashed(window, first))); // the period is over
        QVERIFY(panel->pendingDeletions().isEmpty());
        QVERIFY(!window.findChild<QWidget*>(QStringLiteral("undoDeleteBar"))->isVisible());
        panel->undoDelete(); // nothing left to undo
        QCOMPARE(list->count(), 1);
        QVERIFY(!QFile::exists(window.store()->pathFor(first)));

        panel->setUndoPeriod(60000);
        panel->deleteConversation(second);
        QVERIFY(QFile::exists(trashed(window, second)));
    } // closing the window ends the period
    QVERIFY(!QFile::exists(conversationsDir() + QStringLiteral("/trash/") + second +
                           QStringLiteral(".jsonl")));
    QVERIFY(
        !QFile::exists(conversationsDir() + QLatin1Char('/') + second + QStringLiteral(".jsonl")));
    QVERIFY(ConversationStore(conversationsDir()).list().isEmpty());
}

void TestConversationList::searchFindsAnswerTextAndSaysWhenNothingMatches() {
    MainWindow window;
    seed(window, QStringLiteral("Airships"), QStringLiteral("The Zeppelin hangar"), 180);
    seed(window, QStringLiteral("Trains"), QStringLiteral("Rails"), 120);
    seed(window, QStringLiteral("Boats"), QStringLiteral("Hulls"), 60);
    window.refreshConversationList();
    ConversationListPanel* panel = window.conversationPanel();
    QListWidget* list = window.conversationList();
    QCOMPARE(list->count(), 3);
    auto* label = window.findChild<QLabel*>(QStringLiteral("noConversationsLabel"));
    QVERIFY(label);
    QSignalSpy finished(panel, &ConversationListPanel::searchFinished);
    QTest::keyClicks(panel->searchField(), QStringLiteral("zeppelin"));
    QVERIFY(finished.wait());
    QCOMPARE(finished.count(), 1); // one search per pause in typing
    QCOMPARE(list->count(), 1);
    QCOMPARE(list->item(0)->text(), QStringLiteral("Airships")); // found in the answer
    QCOMPARE(panel->noResultsText(), QString());

    panel->searchField()->clear(); // the whole list at once
    QCOMPARE(list->count(), 3);

    QTest::keyClicks(panel->searchField(), QStringLiteral("xyzzy"));
    QVERIFY(finished.wait());
    QCOMPARE(list->count(), 0);
    QCOMPARE(panel->noResultsText(), QStringLiteral("No conversations match “xyzzy”"));
    QCOMPARE(label->text(), QStringLiteral("No conversations match “xyzzy”"));
    QVERIFY(label->isVisibleTo(&window));
    panel->searchField()->clear();
    QCOMPARE(list->count(), 3);
    QVERIFY(!label->isVisibleTo(&window));
    QCOMPARE(panel->noResultsText(), QString());
}

void TestConversationList::highlightIsAlwaysTheShownConversation() {
    MainWindow window;
    const QString c = seed(window, QStringLiteral("c"), QStringLiteral("c"), 180, 1);
    const QString b = seed(window, QStringLiteral("b"), QStringLiteral("b"), 120, 2);
    const QString a = seed(window, QStringLiteral("a"), QStringLiteral("a"), 60, 3);
    window.refreshConversationList();
    showActive(window);
    QListWidget* list = window.conversationList();
    QCOMPARE((QStringList{idAt(list, 0), idAt(list, 1), idAt(list, 2)}), (QStringList{a, b, c}));
    window.openConversation(a);
    QCOMPARE(list->selectedItems(), QList<QListWidgetItem*>{list->item(0)});
    list->setFocus();
    QTest::keyClick(list, Qt::Key_Down);
    QCOMPARE(window.currentConversationId(), b);
    QCOMPARE(window.conversationView()->messageCount(), 4);
    QCOMPARE(list->selectedItems(), QList<QListWidgetItem*>{list->item(1)});
    QTest::keyClick(list, Qt::Key_Down);
    QCOMPARE(window.currentConversationId(), c);
    QCOMPARE(window.conversationView()->messageCount(), 2);
    QTest::keyClick(list, Qt::Key_Up);
    QCOMPARE(window.currentConversationId(), b);

    // A right-click leaves the highlight on the shown conversation...
    QTest::mouseClick(list->viewport(), Qt::RightButton, {},
                      list->visualItemRect(list->item(0)).center());
    QCOMPARE(list->selectedItems(), QList<QListWidgetItem*>{list->item(1)});
    QCOMPARE(window.currentConversationId(), b);
    // ...and its menu acts on the entry under the mouse.
    QMenu* menu = contextMenuAt(list, 0);
    QVERIFY(menu);
    QStringList texts;
    for (QAction* action : menu->actions()) texts << action->text();
    QCOMPARE(texts,
             (QStringList{QStringLiteral("Open"), QStringLiteral("Rename…\tF2"),
                          QStringLiteral("Pin to the top"), QStringLiteral("Duplicate"),
                          QStringLiteral("Delete saved state"), QStringLiteral("Delete\tDel")}));
    QCOMPARE(list->selectedItems(), QList<QListWidgetItem*>{list->item(1)});
    actionStartingWith(menu, QStringLiteral("Open"))->trigger();
    menu->close();
    QCOMPARE(window.currentConversationId(), a);
    QCOMPARE(list->selectedItems(), QList<QListWidgetItem*>{list->item(0)});

    window.newChat(); // nothing shown from the list: nothing highlighted
    QVERIFY(list->selectedItems().isEmpty());
    QCOMPARE(list->currentItem(), nullptr);
}

void TestConversationList::entriesSayHowLongAgo() {
    MainWindow window;
    const QString tenDays = seed(window, QStringLiteral("old"), QStringLiteral("x"), 10 * 86400);
    const QString twoHours = seed(window, QStringLiteral("earlier"), QStringLiteral("x"), 7200);
    const QString now = seed(window, QStringLiteral("fresh"), QStringLiteral("x"), 30);
    window.refreshConversationList();
    QListWidget* list = window.conversationList();
    QCOMPARE((QStringList{idAt(list, 0), idAt(list, 1), idAt(list, 2)}),
             (QStringList{now, twoHours, tenDays})); // newest first
    const auto dateAt = [list](int row) {
        return list->item(row)->data(ConversationListDelegate::DateTextRole).toString();
    };
    QCOMPARE(dateAt(0), QStringLiteral("just now"));
    QCOMPARE(dateAt(1), QStringLiteral("2 h ago"));
    QCOMPARE(dateAt(2),
             QLocale().toString(QDate::currentDate().addDays(-10), QLocale::ShortFormat));
    QCOMPARE(list->item(1)->data(Qt::AccessibleTextRole).toString(),
             QStringLiteral("earlier, 2 h ago"));
    // The entry is two lines high: the date has its own line under the title.
    QVERIFY(list->visualItemRect(list->item(0)).height() >=
            2 * QFontMetrics(list->font()).height());
}

void TestConversationList::reopenedChatStartsAtItsEnd() {
    MainWindow window;
    const QString id =
        seed(window, QStringLiteral("Tell me more\nand more\nand more"),
             QStringLiteral("A long answer.\n\nWith paragraphs.\n\nAnd more."), 60, 20);
    window.refreshConversationList();
    showActive(window);
    window.openConversation(id);
    QCOMPARE(window.conversationView()->messageCount(), 40);
    QScrollBar* bar = window.conversationView()->verticalScrollBar();
    QVERIFY(bar->maximum() > 0);
    QCOMPARE(bar->value(), bar->maximum());
    // And still there once the view has laid itself out and painted, done here rather than
    // waited for: what the open posted is delivered, visualRect() runs the view's pending
    // layout and repaint() paints at once.
    ConversationView* view = window.conversationView();
    QCoreApplication::sendPostedEvents();
    QVERIFY(view->visualRect(view->conversation()->index(39)).isValid());
    view->viewport()->repaint();
    QCoreApplication::sendPostedEvents();
    QCOMPARE(bar->value(), bar->maximum());
}

QTEST_MAIN(TestConversationList)
#include "tst_conversationlist.moc"
