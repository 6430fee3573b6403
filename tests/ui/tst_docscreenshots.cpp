// The pictures in docs/ that show issue 37's screens (docs/make-screenshots.sh runs this
// under Xvfb with K3_SCREENSHOT_DIR=docs, so each is a real X11 window): the memory page of
// the wizard, a reopened conversation being read again, and the timing chart in the Light
// and Dark themes. Each also checks what it pictures, so it is a test without the folder.
#include <QApplication>
#include <QDir>
#include <QGuiApplication>
#include <QPixmap>
#include <QScreen>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTest>
#include <QWizard>

#include "AppSettings.h"
#include "MainWindow.h"
#include "ModelLoader.h"
#include "QueuedSpy.h"
#include "chat/ConversationModel.h"
#include "chat/ConversationStore.h"
#include "chat/ConversationView.h"
#include "chat/MessageComposer.h"
#include "chat/MessageDelegate.h"
#include "panels/MemoryPlanPanel.h"
#include "panels/TokenTimingPanel.h"
#include "wizard/MemoryPage.h"
#include "worker/EngineController.h"
#include "worker/EngineWorker.h"

#include <k3/pack.hpp>

class TestDocScreenshots : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void cleanup() { AppSettings::applyTheme(QStringLiteral("system")); }
    void memoryPage();
    void conversationReadAgain();
    void timingChartInBothThemes();

private:
    // Saves `widget` as docs/NAME when K3_SCREENSHOT_DIR names a folder: from the X11
    // screen when there is one (what a user sees, the frame included), else grabbed.
    static void save(QWidget& widget, const QString& name);
    QTemporaryDir m_tmp;
};

void TestDocScreenshots::initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("k3chat-tests"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_docscreenshots"));
    QStandardPaths::setTestModeEnabled(true);
    QSettings().clear();
    QSettings().setValue(QStringLiteral("setup/firstRunDone"), true);
    QDir(AppSettings::conversationsDirectory()).removeRecursively();
    QVERIFY(m_tmp.isValid());
}

void TestDocScreenshots::save(QWidget& widget, const QString& name) {
    const QString dir = qEnvironmentVariable("K3_SCREENSHOT_DIR");
    if (dir.isEmpty()) return;
    QTest::qWait(400); // the window manager's frame and the last paint (pictures only)
    QPixmap shot;
    if (QGuiApplication::platformName() == QLatin1String("xcb") && widget.screen()) {
        const QRect frame = widget.frameGeometry();
        shot = widget.screen()->grabWindow(0, frame.x(), frame.y(), frame.width(), frame.height());
    }
    if (shot.isNull()) shot = widget.grab();
    QVERIFY2(shot.save(dir + QLatin1Char('/') + name), qPrintable(dir + QLatin1Char('/') + name));
}

// The wizard's last page. With K3_FULLSIZE_MODEL (docs/make-screenshots.sh makes it: the
// full-size model's headers over holes and its trunk in K3_FULLSIZE_MODEL/trunk, see
// tests/bench/synth_checkpoint.cpp --sparse) it is the real model's plan at the laptop
// preset on this machine's memory, the figures checked against the planner's and the
// panel's rows. Without it (CI) the tiny checkpoint with its packed trunk, said to have
// 14 MB available so its plan fills the bar (every preset then marked too large).
void TestDocScreenshots::memoryPage() {
    const QString fullSize = qEnvironmentVariable("K3_FULLSIZE_MODEL");
    QString model = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a");
    QString trunk = m_tmp.filePath(QStringLiteral("trunk"));
    if (fullSize.isEmpty())
        k3::packTrunk(model.toStdString(), trunk.toStdString());
    else
        model = fullSize, trunk = fullSize + QStringLiteral("/trunk");
    QWizard wizard;
    wizard.setWindowTitle(QStringLiteral("k3chat setup"));
    auto* page = new MemoryPage;
    if (fullSize.isEmpty()) page->setAvailableBytes(14'000'000ull);
    wizard.addPage(page);
    wizard.resize(820, 560);
    wizard.show();
    QVERIFY(QTest::qWaitForWindowExposed(&wizard));
    page->setModel(model, trunk); // after initializePage (this wizard has no folder fields)
    page->selectPreset(fullSize.isEmpty() ? QStringLiteral("auto") : QStringLiteral("laptop"));
    // The first plan of the full-size model checks its trunk against the shards' holes.
    QTRY_VERIFY_WITH_TIMEOUT(page->hasPlan() && !page->isPlanning(), 600000);
    QVERIFY(page->fits());
    if (!fullSize.isEmpty()) {
        const quint64 available = page->planPanel()->figures().availableBytes;
        const k3::MemoryPlan expected = k3::planLaunch(page->launchConfig(), available);
        QCOMPARE(page->plan().total(), expected.total());
        QCOMPARE(page->plan().totalLayers, 93);
        QCOMPARE(page->plan().pinnedLayers, expected.pinnedLayers);
        const QString details = page->planPanel()->detailsText();
        QVERIFY2(
            details.contains(
                QStringLiteral("planned %1 GB of").arg(double(expected.total()) / 1e9, 0, 'f', 2)),
            qPrintable(details + QStringLiteral("\nplan total %1").arg(expected.total())));
    }
    save(wizard, QStringLiteral("screenshot-memory-page.png"));
}

// After a restart the engine holds nothing of an old conversation: a follow-up reads it
// all again, and the bubble says so with the estimate. The reading is set as the worker
// reports it (260 positions, 40 read in 20 s), so the picture does not depend on this
// machine's speed.
void TestDocScreenshots::conversationReadAgain() {
    MainWindow window;
    window.resize(1100, 720);
    window.show();
    QVERIFY(QTest::qWaitForWindowExposed(&window));
    QSignalSpy ready(&window, &MainWindow::modelReady);
    QueuedSpy cost(window.findChild<EngineController*>()->worker(), &EngineWorker::thinkingCost);
    window.loader()->loadModelFolder(QStringLiteral(K3_SOURCE_DIR "/resources/demo"));
    QVERIFY(ready.wait(30000));
    QVERIFY(cost.count() > 0 || cost.wait(30000));
    const QString id = window.store()->save(
        {}, {{QStringLiteral("user"), QStringLiteral("Which preset fits a 16 GB laptop?"), {}},
             {QStringLiteral("assistant"),
              QStringLiteral("The **laptop** preset: an 8 GB trunk budget and a 4 GB expert "
                             "cache leave room for the system."),
              {}},
             {QStringLiteral("user"), QStringLiteral("And how fast will it be?"), {}},
             {QStringLiteral("assistant"),
              QStringLiteral("About 27 s per token on a 2.9 GB/s disk: the streamed layers and "
                             "the experts not in the cache are read for every token."),
              {}}});
    window.store()->release();
    window.openConversation(id);
    window.refreshConversationList();
    // The demo has no think channel: nothing is said of Think's cost beside the switch
    // (this picture showed "+169 prompt positions" beside a disabled Think).
    QVERIFY(!window.composer()->isThinkingAvailable());
    QVERIFY(cost.last().at(0).toInt() > 0); // the template's cost is known, and not shown
    QCOMPARE(window.composer()->thinkingCostText(), QString());
    ConversationModel* conversation = window.conversationView()->conversation();
    conversation->appendMessage(QStringLiteral("user"),
                                QStringLiteral("Can a faster disk halve that?"));
    const int row = conversation->beginAssistantMessage();
    conversation->setReading(40, 260, 20.0, 0, 0, 40 / 260.0, 110.0);
    QCOMPARE(MessageDelegate::readingLabel(conversation->index(row)),
             QStringLiteral("Reading this conversation again: 40 of 260 positions · about 110 s "
                            "left"));
    window.conversationView()->scrollToBottom();
    window.composer()->setGenerating(true); // Stop, as while the worker reads
    save(window, QStringLiteral("screenshot-reading-again.png"));
    window.composer()->setGenerating(false);
    conversation->removeLast();
    window.newChat();
    window.store()->remove(id);
}

// The same colour for the same series in both themes (issue 37 point 7): 24 tokens with
// trunk reads, expert reads and compute, three of them accepted proposals.
void TestDocScreenshots::timingChartInBothThemes() {
    for (const QString& theme : {QStringLiteral("light"), QStringLiteral("dark")}) {
        AppSettings::applyTheme(theme);
        TokenTimingPanel panel;
        panel.setWindowTitle(QStringLiteral("Per-token timing"));
        panel.resize(520, 360);
        for (int i = 0; i < 24; ++i) {
            const double wave = (i % 5) * 0.01;
            panel.addToken(i, 0.05 + wave, i == 0 ? 0.45 : 0.12 + wave, 0.06 + (i % 3) * 0.02,
                           i % 8 == 7);
        }
        panel.show();
        QVERIFY(QTest::qWaitForWindowExposed(&panel));
        QCOMPARE(panel.palette().color(QPalette::Window).lightness() < 128,
                 theme == QLatin1String("dark"));
        save(panel, QStringLiteral("screenshot-timing-%1.png").arg(theme));
    }
}

QTEST_MAIN(TestDocScreenshots)
#include "tst_docscreenshots.moc"
