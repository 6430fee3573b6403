// TokenStore without a reachable keychain (the test has no session bus): it says so,
// keeps the token in memory for the run, and never lets it reach QSettings or a log.

#include <QCoreApplication>
#include <QFile>
#include <QMutex>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTest>

#include "wizard/TokenStore.h"

namespace {
const QString kSecret = QStringLiteral("hf_tokenstore_secret_97531");

QMutex logMutex;
QStringList logLines;
void recordMessage(QtMsgType, const QMessageLogContext&, const QString& message) {
    QMutexLocker lock(&logMutex);
    logLines << message;
}
} // namespace

class TestTokenStore : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void withoutKeychainTheTokenStaysInMemoryForThisRun();
    void emptyTokenForgetsIt();
};

void TestTokenStore::initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("k3chat-tests"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_tokenstore"));
    QStandardPaths::setTestModeEnabled(true);
    QSettings().clear();
    QSettings().setValue(QStringLiteral("unrelated/key"), 1); // a settings file exists
    qInstallMessageHandler(recordMessage);
}

void TestTokenStore::withoutKeychainTheTokenStaysInMemoryForThisRun() {
    TokenStore store;
    QSignalSpy loaded(&store, &TokenStore::loaded);
    QSignalSpy status(&store, &TokenStore::statusChanged);
    store.load();
    // Asynchronous: nothing is answered inside the call.
    QVERIFY(store.isBusy());
    QCOMPARE(loaded.count(), 0);
    QCOMPARE(int(store.where()), int(TokenStore::Where::Unknown));
    QVERIFY(loaded.wait(20000));
    QVERIFY(!store.isBusy());
    QCOMPARE(loaded.at(0).at(0).toString(), QString());
    QCOMPARE(int(store.where()), int(TokenStore::Where::MemoryOnly));
    QCOMPARE(status.count(), 1);
    const QString text = store.statusText();
#ifdef K3_HAVE_QTKEYCHAIN
    QVERIFY2(text.startsWith(QStringLiteral("No system keychain is reachable (")) &&
                 !text.contains(QStringLiteral("QtKeychain support")),
             qPrintable(text));
#else
    QVERIFY2(text.startsWith(QStringLiteral("No system keychain is reachable (this build of "
                                            "k3chat has no QtKeychain support)")),
             qPrintable(text));
#endif
    QVERIFY2(text.endsWith(QStringLiteral(": the token is kept in memory for this run only and "
                                          "must be entered again next time.")),
             qPrintable(text));

    QSignalSpy stored(&store, &TokenStore::stored);
    store.store(kSecret);
    QCOMPARE(store.token(), kSecret); // usable at once
    QVERIFY(stored.wait(20000));
    QCOMPARE(int(store.where()), int(TokenStore::Where::MemoryOnly));
    QCOMPARE(store.statusText(), text);

    // Another store in the same run (a second wizard) finds it.
    TokenStore other;
    QSignalSpy otherLoaded(&other, &TokenStore::loaded);
    other.load();
    QVERIFY(otherLoaded.wait(20000));
    QCOMPARE(otherLoaded.at(0).at(0).toString(), kSecret);

    // Nowhere on disk in the settings, and never in a log line.
    QSettings settings;
    settings.sync();
    QVERIFY(QFile::exists(settings.fileName()));
    for (const QString& key : settings.allKeys())
        QVERIFY2(!settings.value(key).toString().contains(kSecret), qPrintable(key));
    QFile file(settings.fileName());
    QVERIFY(file.open(QIODevice::ReadOnly));
    QVERIFY(!file.readAll().contains(kSecret.toUtf8()));
    QMutexLocker lock(&logMutex);
    for (const QString& line : logLines) QVERIFY2(!line.contains(kSecret), "the token was logged");
}

void TestTokenStore::emptyTokenForgetsIt() {
    TokenStore store;
    QSignalSpy loaded(&store, &TokenStore::loaded);
    store.load();
    QVERIFY(loaded.wait(20000));
    QCOMPARE(loaded.at(0).at(0).toString(), kSecret);
    QSignalSpy stored(&store, &TokenStore::stored);
    store.store(QString());
    QVERIFY(stored.wait(20000));
    QCOMPARE(store.token(), QString());
    TokenStore later;
    QSignalSpy laterLoaded(&later, &TokenStore::loaded);
    later.load();
    QVERIFY(laterLoaded.wait(20000));
    QCOMPARE(laterLoaded.at(0).at(0).toString(), QString());
}

int main(int argc, char** argv) {
    // Never touch the developer's real keychain: without a session bus TokenStore falls back.
    qputenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/k3chat-test-bus");
    QCoreApplication app(argc, argv);
    TestTokenStore test;
    return QTest::qExec(&test, argc, argv);
}

#include "tst_tokenstore.moc"
