// Opening a folder that cannot load never costs the model that works: the folder is
// refused before anything is unloaded (a broken config.json, another model's trunk), or,
// when the open fails past the checks, the working model is opened again. Either way the
// engine still answers, the status bar shows the old model and the saved setup is as it was.
// A server that cannot be used (refused, a wrong key, a model it does not offer) is the
// same: the local model answers on.
#include <QDir>
#include <QFile>
#include <QMessageBox>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTemporaryDir>
#include <QTest>

#include "AppSettings.h"
#include "MainWindow.h"
#include "ModelLoader.h"
#include "chat/ChatController.h"
#include "chat/ConversationStore.h"
#include "chat/MessageComposer.h"
#include "wizard/SetupWizard.h"

#include <k3/launch.hpp>
#include <k3/pack.hpp>

#include "FakeOpenAiServer.hpp"

class TestFailedOpen : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void init();
    void brokenConfigKeepsTheWorkingModel();
    void anotherModelsTrunkKeepsTheWorkingModel();
    void failureAfterTheChecksReopensTheWorkingModel();
    void wizardChoiceThatFailsIsNotSaved();
    void unusableServerKeepsTheWorkingModel();

private:
    // Loads k3_tiny_a as the working model; its status line and saved launch.
    void loadWorkingModel(MainWindow& window);
    // Waits for the failure box, gives its text and closes it.
    void failureText(MainWindow& window, QString& text, QString* details = nullptr);
    // The engine answers a question after the failure.
    void stillAnswers(MainWindow& window);
    void checkNothingChanged(MainWindow& window);

    const QString m_tiny = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a");
    const QString m_tinyB = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_b");
    QString m_status;
    k3::LaunchConfig m_saved;
};

void TestFailedOpen::initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("k3chat-tests"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_failedopen"));
    QStandardPaths::setTestModeEnabled(true);
    // Every run starts without saved conversation states (the engine would restore them).
    QDir(AppSettings::stateCacheDirectory()).removeRecursively();
}

void TestFailedOpen::init() {
    QSettings().clear();
    QSettings().setValue(QStringLiteral("setup/firstRunDone"), true);
}

void TestFailedOpen::loadWorkingModel(MainWindow& window) {
    QSignalSpy ready(&window, &MainWindow::modelReady);
    window.loader()->loadModelFolder(m_tiny);
    QVERIFY(ready.wait(30000));
    m_status = window.statusBar()->currentMessage();
    QVERIFY2(m_status.startsWith(QStringLiteral("k3_tiny_a · everything resident · 14 layers")),
             qPrintable(m_status));
    m_saved = AppSettings::loadLaunch();
    QCOMPARE(m_saved.modelDir.string(), m_tiny.toStdString());
}

void TestFailedOpen::failureText(MainWindow& window, QString& text, QString* details) {
    QMessageBox* box = nullptr;
    QTRY_VERIFY_WITH_TIMEOUT(
        (box = window.findChild<QMessageBox*>(QStringLiteral("loadFailedBox"))) != nullptr, 30000);
    text = box->text();
    if (details) *details = box->detailedText();
    box->close();
    delete box; // closed boxes are deleted later; the next failure must find its own
}

void TestFailedOpen::checkNothingChanged(MainWindow& window) {
    QCOMPARE(window.statusBar()->currentMessage(), m_status);
    QCOMPARE(AppSettings::loadLaunch(), m_saved);
    QCOMPARE(window.launchConfig(), m_saved);
    QVERIFY(window.composer()->isReady());
}

void TestFailedOpen::stillAnswers(MainWindow& window) {
    QSignalSpy finished(&window, &MainWindow::answerFinished);
    window.chat()->send(QStringLiteral("What is KDA?"));
    QVERIFY(finished.wait(60000));
    QCOMPARE(window.statusBar()->currentMessage().contains(QStringLiteral("failed")), false);
    window.store()->remove(window.currentConversationId());
}

void TestFailedOpen::brokenConfigKeepsTheWorkingModel() {
    QTemporaryDir tmp;
    for (const QString& f : QDir(m_tiny).entryList(QDir::Files))
        QVERIFY(QFile::copy(m_tiny + QLatin1Char('/') + f, tmp.filePath(f)));
    QFile config(tmp.filePath(QStringLiteral("config.json")));
    QVERIFY(config.open(QIODevice::WriteOnly | QIODevice::Truncate));
    config.write("{ \"broken\": ");
    config.close();
    MainWindow window;
    loadWorkingModel(window);
    window.loader()->loadModelFolder(tmp.path());
    QString text;
    failureText(window, text);
    QVERIFY2(text.contains(tmp.filePath(QStringLiteral("config.json"))), qPrintable(text));
    QVERIFY2(text.endsWith(QStringLiteral("k3_tiny_a is still loaded.")), qPrintable(text));
    checkNothingChanged(window);
    stillAnswers(window);
}

void TestFailedOpen::anotherModelsTrunkKeepsTheWorkingModel() {
    QTemporaryDir tmp;
    const QString trunkB = tmp.filePath(QStringLiteral("b-trunk"));
    k3::packTrunk(m_tinyB.toStdString(), trunkB.toStdString());
    MainWindow window;
    loadWorkingModel(window);
    k3::LaunchConfig wrong = m_saved;
    wrong.trunkDir = trunkB.toStdString();
    wrong.budget = k3::LaunchBudget::ofBytes(0, 0);
    window.loader()->loadModel(wrong);
    QString text;
    failureText(window, text);
    QVERIFY2(text.contains(QStringLiteral("was packed from another checkpoint")), qPrintable(text));
    // Never a command that would pack k3_tiny_a over k3_tiny_b's trunk.
    QVERIFY2(!text.contains(QStringLiteral(" ") + trunkB + QStringLiteral(")")), qPrintable(text));
    checkNothingChanged(window);
    stillAnswers(window);
}

// An unknown preset passes the file checks and fails when the session opens, after the
// working model was closed to make room: it is opened again.
void TestFailedOpen::failureAfterTheChecksReopensTheWorkingModel() {
    MainWindow window;
    loadWorkingModel(window);
    k3::LaunchConfig wrong = m_saved;
    wrong.budget = k3::LaunchBudget::ofPreset("no-such-preset");
    window.loader()->loadModel(wrong);
    QString text;
    failureText(window, text);
    QVERIFY2(text.contains(QStringLiteral("unknown preset \"no-such-preset\"")), qPrintable(text));
    QVERIFY2(text.endsWith(QStringLiteral("k3_tiny_a is still loaded.")), qPrintable(text));
    checkNothingChanged(window);
    stillAnswers(window);
}

// The wizard's Finish saves nothing until the choice has loaded.
void TestFailedOpen::wizardChoiceThatFailsIsNotSaved() {
    QTemporaryDir tmp;
    MainWindow window;
    loadWorkingModel(window);
    window.showSetupWizard();
    auto* wizard = window.findChild<SetupWizard*>();
    QVERIFY(wizard);
    k3::LaunchConfig wrong = m_saved;
    wrong.modelDir = tmp.filePath(QStringLiteral("missing")).toStdString();
    emit wizard->setupFinished(wrong); // what Finish emits
    QString text;
    failureText(window, text);
    QVERIFY2(text.contains(tmp.filePath(QStringLiteral("missing")) + " is not a folder"),
             qPrintable(text));
    checkNothingChanged(window);
}

// Refused, a wrong key, a model the server does not offer: each says so, and the local
// model, its status, its saved setup and the saved source ("local") stay.
void TestFailedOpen::unusableServerKeepsTheWorkingModel() {
    QString refusedUrl; // a port nobody listens on any more
    {
        FakeOpenAiServer gone;
        refusedUrl = QString::fromStdString(gone.url());
    }
    FakeOpenAiServer keyed("sk-right-key");
    FakeOpenAiServer open;
    struct Case {
        QString url, model, key, detail;
    };
    const Case cases[] = {
        {refusedUrl, QStringLiteral("k3-think"), {}, QStringLiteral("connection refused")},
        {QString::fromStdString(keyed.url()), QStringLiteral("k3-think"),
         QStringLiteral("sk-wrong"), QStringLiteral("401")},
        {QString::fromStdString(open.url()),
         QStringLiteral("no-such-model"),
         {},
         QStringLiteral("does not offer the model \"no-such-model\"; it offers: k3-think, "
                        "k3-slow, k3-cut, k3-batch, k3-batch-usage.")},
    };
    MainWindow window;
    loadWorkingModel(window);
    for (const Case& c : cases) {
        window.loader()->connectRemote(c.url, c.model, c.key);
        QString text, details;
        failureText(window, text, &details);
        QVERIFY2(text.startsWith(QStringLiteral("The server did not accept the connection.")),
                 qPrintable(text));
        QVERIFY2(text.endsWith(QStringLiteral("k3_tiny_a is still loaded.")), qPrintable(text));
        QVERIFY2(details.contains(c.detail), qPrintable(details));
        checkNothingChanged(window);
        QCOMPARE(QSettings().value(QStringLiteral("model/source")).toString(),
                 QStringLiteral("local"));
    }
    stillAnswers(window);
}

QTEST_MAIN(TestFailedOpen)
#include "tst_failedopen.moc"
