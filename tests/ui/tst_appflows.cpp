// What a user does in the real main window, end to end: the first run's wizard to a
// first answer with the demo, an answer streaming token by token with its think block
// collapsed, the panels filling from a streamed run, and a corrupt transcript.
#include <QApplication>
#include <QDir>
#include <QFile>
#include <QMessageBox>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTemporaryDir>
#include <QTest>
#include <QTimer>

#include "AppSettings.h"
#include "MainWindow.h"
#include "ModelLoader.h"
#include "chat/ChatController.h"
#include "chat/ConversationModel.h"
#include "chat/ConversationStore.h"
#include "chat/ConversationView.h"
#include "chat/MessageComposer.h"
#include "panels/DiskIoPanel.h"
#include "panels/ExpertCachePanel.h"
#include "panels/MemoryPlanPanel.h"
#include "panels/TokenTimingPanel.h"
#include "wizard/MemoryPage.h"
#include "wizard/SetupWizard.h"
#include "wizard/SystemCheckPage.h"

#include <k3/pack.hpp>

#include <nlohmann/json.hpp>

#include <fstream>

class TestAppFlows : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void firstRunWizardDemoButtonToAFirstAnswer();
    void answerStreamsTokenByTokenWithThinkingCollapsed();
    void panelsFillFromAStreamedRun();
    void corruptTranscriptIsReportedAndLeftAsItIs();
    void wizardChoiceSurvivesARestart();
    void olderSettingsKeepTheirBudget();

private:
    QString m_tiny = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a");
};

void TestAppFlows::initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("k3chat-tests"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_appflows"));
    QStandardPaths::setTestModeEnabled(true); // never touch the user's settings or chats
    // Every run starts without saved conversation states (the engine would restore them).
    QDir(AppSettings::stateCacheDirectory()).removeRecursively();
    QSettings().clear();
}

// First start: the wizard is over the demo; "Try the small demo model now" closes it and
// the demo answers its first trained question with its trained answer.
void TestAppFlows::firstRunWizardDemoButtonToAFirstAnswer() {
    std::ifstream in(K3_SOURCE_DIR "/resources/demo/expected.json");
    const auto expected = nlohmann::json::parse(in).at("prompts").at(0);
    MainWindow window;
    window.show();
    QSignalSpy ready(&window, &MainWindow::modelReady);
    window.loadStartupModel();
    QTRY_VERIFY_WITH_TIMEOUT(
        window.findChild<SetupWizard*>() && window.findChild<SetupWizard*>()->isVisible(), 5000);
    auto* wizard = window.findChild<SetupWizard*>();
    auto* demoButton =
        wizard->systemCheckPage()->findChild<QPushButton*>(QStringLiteral("demoButton"));
    QVERIFY(demoButton);
    QTest::mouseClick(demoButton, Qt::LeftButton);
    QTRY_VERIFY(!wizard->isVisible());
    QTRY_VERIFY_WITH_TIMEOUT(window.composer()->isReady(), 30000);
    QVERIFY(!window.composer()->thinking()); // the demo answers without a think channel
    QSignalSpy finished(&window, &MainWindow::answerFinished);
    window.chat()->send(QString::fromStdString(expected.at("question").get<std::string>()));
    QVERIFY(finished.wait(60000));
    const QString answer = window.conversationView()
                               ->conversation()
                               ->index(1)
                               .data(ConversationModel::ContentRole)
                               .toString();
    QCOMPARE(answer.trimmed(),
             QString::fromStdString(expected.at("answer_text").get<std::string>()).trimmed());
    window.store()->remove(window.currentConversationId());
}

// Thinking on: the think block fills first, collapsed, then the answer; each token is
// its own update of the last message.
void TestAppFlows::answerStreamsTokenByTokenWithThinkingCollapsed() {
    MainWindow window;
    QSignalSpy ready(&window, &MainWindow::modelReady);
    window.loader()->loadModelFolder(m_tiny);
    QVERIFY(ready.wait(30000));
    window.composer()->setThinking(true);
    ConversationModel* model = window.conversationView()->conversation();
    QStringList reasoningSeen, contentSeen;
    bool everExpanded = false;
    connect(model, &QAbstractItemModel::dataChanged, this, [&](const QModelIndex& from) {
        const QModelIndex last = model->index(model->rowCount() - 1);
        if (from.row() != last.row()) return;
        reasoningSeen << last.data(ConversationModel::ReasoningRole).toString();
        contentSeen << last.data(ConversationModel::ContentRole).toString();
        everExpanded |= last.data(ConversationModel::ThinkingExpandedRole).toBool();
    });
    QSignalSpy finished(&window, &MainWindow::answerFinished);
    window.chat()->send(QStringLiteral("What is KDA?"));
    QVERIFY(finished.wait(60000));
    QVERIFY2(reasoningSeen.size() >= 5, qPrintable(QString::number(reasoningSeen.size())));
    QVERIFY(!everExpanded);
    // The text only ever grows: a token at a time, reasoning (think channel) first.
    int growth = 0;
    for (int i = 1; i < reasoningSeen.size(); ++i) {
        QVERIFY(reasoningSeen[i].startsWith(reasoningSeen[i - 1]));
        QVERIFY(contentSeen[i].startsWith(contentSeen[i - 1]));
        if (reasoningSeen[i] != reasoningSeen[i - 1] || contentSeen[i] != contentSeen[i - 1])
            ++growth;
    }
    QVERIFY2(growth >= 4, qPrintable(QString::number(growth)));
    QVERIFY(!reasoningSeen.last().isEmpty());
    window.store()->remove(window.currentConversationId());
}

// A packed trunk streamed at a small budget with a small expert cache: after one answer
// every panel shows non-zero figures and the chart has one bar per generated token.
void TestAppFlows::panelsFillFromAStreamedRun() {
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    const QString trunk = tmp.filePath(QStringLiteral("trunk"));
    k3::packTrunk(m_tiny.toStdString(), trunk.toStdString());
    // The random tiny model never ends its turn: 48 tokens are plenty for the panels (512
    // streamed tokens took 20 s alone and past a minute on a loaded machine).
    QSettings().setValue(QStringLiteral("generation/maxTokens"), 48);
    MainWindow window;
    QSignalSpy ready(&window, &MainWindow::modelReady);
    k3::LaunchConfig launch;
    launch.modelDir = m_tiny.toStdString();
    launch.trunkDir = trunk.toStdString();
    launch.budget = k3::LaunchBudget::ofBytes(300'000, 50'000); // 0.3 MB trunk, 50 kB of slots
    window.loader()->loadModel(launch);
    QVERIFY(ready.wait(30000));
    window.composer()->setThinking(false);
    QSignalSpy finished(&window, &MainWindow::answerFinished);
    window.chat()->send(QStringLiteral("What is MXFP4?"));
    QVERIFY(finished.wait(60000));

    auto* plan = window.findChild<MemoryPlanPanel*>();
    auto* cache = window.findChild<ExpertCachePanel*>();
    auto* disk = window.findChild<DiskIoPanel*>();
    auto* timing = window.findChild<TokenTimingPanel*>();
    QVERIFY(plan && cache && disk && timing);
    const MemoryFigures& f = plan->figures();
    QVERIFY(f.trunkStreamed);
    QVERIFY(f.expertsCached);
    QVERIFY(f.plannedBytes() > 0);
    QVERIFY(f.cacheRequests > 0);
    QVERIFY(f.trunkBytesRead > 0);
    QVERIFY(f.expertBytesRead > 0);
    const QString cacheText = cache->text();
    QVERIFY2(cacheText.contains(QStringLiteral(" of %1 requests)")
                                    .arg(QLocale().toString(qulonglong(f.cacheRequests)))),
             qPrintable(cacheText));
    QVERIFY2(cacheText.contains(QStringLiteral("served from memory ")) &&
                 cacheText.contains(QStringLiteral("evictions ")),
             qPrintable(cacheText));
    QVERIFY2(!disk->text().startsWith(QStringLiteral("0.000 GB read")), qPrintable(disk->text()));

    const QString stats = window.conversationView()
                              ->conversation()
                              ->index(1)
                              .data(ConversationModel::StatsRole)
                              .toString();
    const int tokens = stats.section(QLatin1Char(' '), 0, 0).toInt();
    QCOMPARE(tokens, 48); // the Longest answer setting reached the engine
    QCOMPARE(timing->barCount(), tokens);
    window.store()->remove(window.currentConversationId());
    QSettings().remove(QStringLiteral("generation/maxTokens"));
}

// A transcript that is not valid JSONL: the window says so (file and line in the
// details), shows nothing of it, and the file keeps every byte.
void TestAppFlows::corruptTranscriptIsReportedAndLeftAsItIs() {
    MainWindow window;
    window.show();
    const QString id = QStringLiteral("corrupt-test");
    const QByteArray bytes =
        "{\"role\":\"user\",\"content\":\"Hello\"}\n{\"role\":\"assistant\",\"content\":";
    QFile file(window.store()->directory() + QStringLiteral("/") + id + QStringLiteral(".jsonl"));
    QVERIFY(file.open(QIODevice::WriteOnly));
    file.write(bytes);
    file.close();
    QString title, details;
    // Looks for the box on every pass of its event loop (not once after a guessed delay).
    QTimer closer;
    connect(&closer, &QTimer::timeout, this, [&] {
        if (auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget())) {
            title = box->text();
            details = box->detailedText();
            box->accept();
            closer.stop();
        }
    });
    closer.start(0);
    window.openConversation(id);
    closer.stop();
    QVERIFY2(title.contains(QStringLiteral("left as it is")), qPrintable(title));
    QVERIFY2(details.contains(id + QStringLiteral(".jsonl:2:")), qPrintable(details));
    QCOMPARE(window.conversationView()->messageCount(), 0);
    QVERIFY(file.open(QIODevice::ReadOnly));
    QCOMPARE(file.readAll(), bytes);
    file.close();
    QVERIFY(file.remove());
}

// The wizard's whole choice (a streamed trunk and a cache budget) is what the next start
// opens: the same launch configuration and the same plan, the one the wizard showed.
void TestAppFlows::wizardChoiceSurvivesARestart() {
    QTemporaryDir tmp;
    const QString trunk = tmp.filePath(QStringLiteral("trunk"));
    k3::packTrunk(m_tiny.toStdString(), trunk.toStdString());
    QSettings().setValue(QStringLiteral("setup/firstRunDone"), true);
    // Saved before: the wizard keeps them (they are not its questions).
    QSettings().setValue(QStringLiteral("launch/contextLength"), 1024);
    QSettings().setValue(QStringLiteral("engine/threads"), 2);
    const auto planOf = [](MainWindow& w) {
        return w.findChild<MemoryPlanPanel*>()->figures().enginePlan;
    };
    k3::LaunchConfig chosen;
    k3::MemoryPlan shown, opened;
    {
        MainWindow window;
        QSignalSpy ready(&window, &MainWindow::modelReady);
        window.showSetupWizard();
        auto* wizard = window.findChild<SetupWizard*>();
        QVERIFY(wizard);
        MemoryPage* page = wizard->memoryPage();
        QSignalSpy planned(page, &MemoryPage::planReady);
        page->setModel(m_tiny, trunk);
        QVERIFY(planned.wait(10000));
        page->setCustomGB(0, 0.01); // the smallest ring, a 10 MB expert cache
        QTRY_VERIFY_WITH_TIMEOUT(page->isComplete(), 10000);
        chosen = page->launchConfig();
        shown = page->plan();
        wizard->accept(); // Finish
        QVERIFY(ready.wait(30000));
        opened = planOf(window);
        QCOMPARE(window.launchConfig(), chosen);
        const QString status = window.statusBar()->currentMessage();
        QVERIFY2(status.startsWith(QStringLiteral("k3_tiny_a · trunk 0 B / cache 10.00 MB "
                                                  "streamed · 14 layers · ")),
                 qPrintable(status));
        window.close();
    }
    QCOMPARE(chosen.modelDir.string(), m_tiny.toStdString());
    QCOMPARE(chosen.trunkDir.string(), trunk.toStdString());
    QCOMPARE(chosen.budget, k3::LaunchBudget::ofBytes(0, 10'000'000));
    QCOMPARE(chosen.contextLength, 1024);
    QCOMPARE(chosen.threads, 2);
    // The plan the wizard showed is the one the engine made.
    QCOMPARE(opened.pinnedLayers, 0);
    QCOMPARE(opened.ringSlots, 1);
    QCOMPARE(opened.cacheSlots, 13 * 12); // 10 MB holds every expert of the tiny model
    QCOMPARE(opened.contextLength, 1024);
    QCOMPARE(opened.total(), shown.total());
    QCOMPARE(opened.ringSlotBytes, shown.ringSlotBytes);

    MainWindow again;
    QSignalSpy ready(&again, &MainWindow::modelReady);
    again.loadStartupModel();
    QVERIFY(ready.wait(30000));
    QCOMPARE(again.launchConfig(), chosen);
    QCOMPARE(AppSettings::loadLaunch(), chosen);
    const MemoryFigures& f = again.findChild<MemoryPlanPanel*>()->figures();
    QVERIFY(f.trunkStreamed);
    QVERIFY(f.expertsCached);
    const k3::MemoryPlan reopened = planOf(again);
    QCOMPARE(reopened.totalLayers, opened.totalLayers);
    QCOMPARE(reopened.pinnedLayers, opened.pinnedLayers);
    QCOMPARE(reopened.ringSlots, opened.ringSlots);
    QCOMPARE(reopened.ringSlotBytes, opened.ringSlotBytes);
    QCOMPARE(reopened.cacheSlots, opened.cacheSlots);
    QCOMPARE(reopened.expertSlotBytes, opened.expertSlotBytes);
    QCOMPARE(reopened.contextLength, opened.contextLength);
    QCOMPARE(reopened.total(), opened.total());
    QSettings().remove(QStringLiteral("launch"));
    QSettings().remove(QStringLiteral("engine/threads"));
}

// Settings written by an older k3chat (the wizard's budgets as model/trunkBytes and
// model/cacheBytes, 0 meaning the default) open as the same budget.
void TestAppFlows::olderSettingsKeepTheirBudget() {
    QSettings s;
    s.remove(QStringLiteral("launch"));
    s.setValue(QStringLiteral("model/directory"), m_tiny);
    s.setValue(QStringLiteral("model/trunkDir"), QStringLiteral("/models/trunk"));
    s.setValue(QStringLiteral("model/trunkBytes"), 300'000);
    s.setValue(QStringLiteral("model/cacheBytes"), 0);
    k3::LaunchConfig c = AppSettings::loadLaunch();
    QCOMPARE(c.budget, (k3::LaunchBudget{{}, 300'000ull, {}}));
    QCOMPARE(c.trunkDir.string(), std::string("/models/trunk"));
    // Saved again, in the launch keys only.
    c.budget.preset = "laptop";
    AppSettings::saveLaunch(c);
    QVERIFY(!QSettings().contains(QStringLiteral("model/trunkBytes")));
    QCOMPARE(QSettings().value(QStringLiteral("launch/preset")).toString(),
             QStringLiteral("laptop"));
    QCOMPARE(AppSettings::loadLaunch(), c);
    // A preset name the table does not know (a hand edit) is dropped, not sent on.
    QSettings().setValue(QStringLiteral("launch/preset"), QStringLiteral("huge"));
    QCOMPARE(AppSettings::loadLaunch().budget, (k3::LaunchBudget{{}, 300'000ull, {}}));
    s.remove(QStringLiteral("launch"));
    s.remove(QStringLiteral("model"));
}

QTEST_MAIN(TestAppFlows)
#include "tst_appflows.moc"
