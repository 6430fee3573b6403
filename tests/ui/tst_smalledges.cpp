#include <QApplication>
#include <QDir>
#include <QFile>
#include <QListWidget>
#include <QScreen>
#include <QSettings>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>

#include "AppSettings.h"
#include "MainWindow.h"
#include "chat/ConversationStore.h"
#include "wizard/SetupWizard.h"

// Issue 37 point 11: the conversation list showed no focus frame, and on the very first
// run the wizard was not centred on the main window. main() gives the test a 1920x1200
// screen, room for the main window to be placed somewhere else than where it opened.
class TestSmallEdges : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void conversationListShowsAFocusFrame();
    void firstRunWizardStaysCentredOnThePlacedWindow();
};

void TestSmallEdges::initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("k3chat-tests"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_smalledges"));
    QStandardPaths::setTestModeEnabled(true); // never the user's settings or conversations
    // Every run starts without saved conversation states (the engine would restore them).
    QDir(AppSettings::stateCacheDirectory()).removeRecursively();
    QSettings().clear();
    QCOMPARE(QGuiApplication::primaryScreen()->availableGeometry(), QRect(0, 0, 1920, 1200));
}

void TestSmallEdges::conversationListShowsAFocusFrame() {
    QSettings().setValue(QStringLiteral("setup/firstRunDone"), true);
    MainWindow window;
    const QString id = window.store()->save({}, {{QStringLiteral("user"), QStringLiteral("hi")}});
    window.store()->release();
    window.refreshConversationList();
    window.show();
    QVERIFY(QTest::qWaitForWindowActive(&window));
    QListWidget* list = window.conversationList();
    const QColor highlight = list->palette().color(QPalette::Highlight);
    QVERIFY(QColor(list->grab().toImage().pixel(1, 1)) != highlight);
    list->setFocus(Qt::TabFocusReason);
    QTRY_VERIFY(list->hasFocus());
    // The frame runs round the whole list, past the rows.
    const QImage focused = list->grab().toImage();
    for (const QPoint p : {QPoint(1, 1), QPoint(list->width() - 2, list->height() / 2),
                           QPoint(list->width() / 2, list->height() - 2)})
        QCOMPARE(QColor(focused.pixel(p)), highlight);
    window.store()->remove(id);
}

// The window manager places the main window after the wizard opened over it; the wizard
// goes with it, until the user moves the wizard.
void TestSmallEdges::firstRunWizardStaysCentredOnThePlacedWindow() {
    QSettings().clear(); // the very first run
    MainWindow window;
    window.resize(1100, 720);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    window.loadStartupModel();
    QTRY_VERIFY(window.findChild<SetupWizard*>() && window.findChild<SetupWizard*>()->isVisible());
    SetupWizard* wizard = window.findChild<SetupWizard*>();
    // Opened over the window where it was shown; taller than it, kept on the screen.
    QTRY_COMPARE(wizard->frameGeometry().center().x(), window.frameGeometry().center().x());
    window.move(700, 300); // placed
    QTRY_COMPARE(wizard->frameGeometry().center(), window.frameGeometry().center());
    const QPoint put(20, 30);
    wizard->move(put); // the user's place is kept
    window.move(100, 100);
    QTRY_COMPARE(window.pos(), QPoint(100, 100));
    QCOMPARE(wizard->pos(), put);
    wizard->reject();
}

int main(int argc, char** argv) {
    QTemporaryDir dir;
    const QString config = dir.filePath(QStringLiteral("screens.json"));
    QFile file(config);
    if (!file.open(QIODevice::WriteOnly)) return 1;
    file.write(R"({"screens": [{"name": "big", "x": 0, "y": 0, "width": 1920, "height": 1200,
                   "logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]})");
    file.close();
    qputenv("QT_QPA_PLATFORM", QByteArray("offscreen:configfile=") + config.toUtf8());
    QApplication app(argc, argv);
    TestSmallEdges test;
    return QTest::qExec(&test, argc, argv);
}

#include "tst_smalledges.moc"
