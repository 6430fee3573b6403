#include <QImage>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

// Starts the real k3chat executable offscreen, lets it draw its window, and checks it
// exits cleanly; the screenshot proves a window of the expected size was drawn.
class TestK3ChatApp : public QObject {
    Q_OBJECT
private slots:
    void startsAndQuitsCleanly();
    void badQuitAfterIsUsageError();
};

void TestK3ChatApp::startsAndQuitsCleanly() {
    QTemporaryDir home;
    QVERIFY(home.isValid());
    const QString shot = home.filePath(QStringLiteral("shot.png"));
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
    env.insert(QStringLiteral("XDG_CONFIG_HOME"), home.path()); // no settings from the user
    p.setProcessEnvironment(env);
    p.start(QStringLiteral(K3CHAT_PATH), {"--quit-after", "300", "--screenshot", shot});
    QVERIFY(p.waitForFinished(30000));
    QCOMPARE(p.exitStatus(), QProcess::NormalExit);
    QCOMPARE(p.exitCode(), 0);
    const QImage image(shot);
    QVERIFY(!image.isNull());
    QCOMPARE(image.size(), QSize(1100, 720));
}

void TestK3ChatApp::badQuitAfterIsUsageError() {
    QProcess p;
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("QT_QPA_PLATFORM"), QStringLiteral("offscreen"));
    p.setProcessEnvironment(env);
    p.start(QStringLiteral(K3CHAT_PATH), {"--quit-after", "soon"});
    QVERIFY(p.waitForFinished(30000));
    QCOMPARE(p.exitCode(), 2);
    QVERIFY(QString::fromUtf8(p.readAllStandardError()).contains(QStringLiteral("soon")));
}

QTEST_GUILESS_MAIN(TestK3ChatApp)
#include "tst_k3chat_app.moc"
