#include <QApplication>
#include <QDataStream>
#include <QDir>
#include <QFile>
#include <QScreen>
#include <QSettings>
#include <QStandardPaths>
#include <QStyle>
#include <QTemporaryDir>
#include <QTest>

#include "AppSettings.h"
#include "MainWindow.h"
#include "chat/MessageComposer.h"

// Issue 37 point 4: with QT_SCALE_FACTOR=2 a 1600x1000 screen is 800x500 logical pixels.
// Qt refuses a geometry saved at scale 1 (the screen's width changed by more than 25%),
// and the window came back at its default 1100x720, composer and docks off the screen.
// main() below sets the scale and the screen before the application starts.
class TestWindowGeometry : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void init();
    void defaultSizeFitsTheScaledScreen();
    void geometrySavedAtScaleOneFitsAtScaleTwo();

private:
    // The window's client area on the 800x500 screen: the screen less a title bar and a
    // border, as MainWindow reserves them before it knows its frame.
    QSize fittedSize(const MainWindow& window) const;
    void verifyOnScreen(MainWindow& window);
};

namespace {
// What saveGeometry() wrote for a 1100x720 window on the 1600x1000 screen at scale 1
// (QWidget's format 3.0: frame, normal geometry, screen, states, screen width, geometry).
QByteArray geometrySavedAtScaleOne() {
    QByteArray bytes;
    QDataStream out(&bytes, QIODevice::WriteOnly);
    out.setVersion(QDataStream::Qt_4_0);
    const QRect client(250, 130, 1100, 720);
    out << quint32(0x1D9D0CB) << quint16(3) << quint16(0)
        << client.marginsAdded(QMargins(2, 24, 2, 2)) << client << qint32(0) << quint8(0)
        << quint8(0) << qint32(1600) << client;
    return bytes;
}
} // namespace

void TestWindowGeometry::initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("k3chat-tests"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_windowgeometry"));
    QStandardPaths::setTestModeEnabled(true); // never touch the user's settings
    // Every run starts without saved conversation states (the engine would restore them).
    QDir(AppSettings::stateCacheDirectory()).removeRecursively();
    QCOMPARE(QGuiApplication::primaryScreen()->availableGeometry(), QRect(0, 0, 800, 500));
}

void TestWindowGeometry::init() {
    QSettings().clear();
    QSettings().setValue(QStringLiteral("setup/firstRunDone"), true);
}

QSize TestWindowGeometry::fittedSize(const MainWindow& window) const {
    const int border = window.style()->pixelMetric(QStyle::PM_MdiSubWindowFrameWidth);
    const int titleBar = window.style()->pixelMetric(QStyle::PM_TitleBarHeight);
    return {800 - 2 * border, 500 - titleBar - border};
}

void TestWindowGeometry::verifyOnScreen(MainWindow& window) {
    QCOMPARE(window.size(), fittedSize(window));
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QCOMPARE(window.size(), fittedSize(window));
    // The composer, at the bottom, is inside the window, which is inside the screen.
    const QRect composer(window.composer()->mapTo(&window, QPoint(0, 0)),
                         window.composer()->size());
    QVERIFY(window.rect().contains(composer));
    QVERIFY(window.frameGeometry().width() <= 800);
    QVERIFY(window.frameGeometry().height() <= 500);
}

void TestWindowGeometry::defaultSizeFitsTheScaledScreen() {
    MainWindow window;
    verifyOnScreen(window);
}

void TestWindowGeometry::geometrySavedAtScaleOneFitsAtScaleTwo() {
    QSettings().setValue(QStringLiteral("mainWindow/geometry"), geometrySavedAtScaleOne());
    MainWindow window;
    verifyOnScreen(window);
}

int main(int argc, char** argv) {
    // One 1600x1000 screen at scale 2, as in the report.
    QTemporaryDir dir;
    const QString config = dir.filePath(QStringLiteral("screens.json"));
    QFile file(config);
    if (!file.open(QIODevice::WriteOnly)) return 1;
    file.write(R"({"screens": [{"name": "wide", "x": 0, "y": 0, "width": 1600, "height": 1000,
                   "logicalDpi": 96, "logicalBaseDpi": 96, "dpr": 1}]})");
    file.close();
    qputenv("QT_QPA_PLATFORM", QByteArray("offscreen:configfile=") + config.toUtf8());
    qputenv("QT_SCALE_FACTOR", "2");
    QApplication app(argc, argv);
    TestWindowGeometry test;
    return QTest::qExec(&test, argc, argv);
}

#include "tst_windowgeometry.moc"
