// What a user does in the real main window, end to end: the first run's wizard to a
// first answer with the demo, an answer streaming token by token with its think block
// collapsed, the panels filling from a streamed run, and a corrupt transcript.
#include <QApplication>
#include <QFile>
#include <QMessageBox>
#include <QPushButton>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QTemporaryDir>
#include <QTest>
#include <QTimer>

#include "MainWindow.h"
#include "chat/ConversationModel.h"
#include "chat/ConversationStore.h"
#include "chat/ConversationView.h"
#include "chat/MessageComposer.h"
#include "panels/DiskIoPanel.h"
#include "panels/ExpertCachePanel.h"
#include "panels/MemoryPlanPanel.h"
#include "panels/TokenTimingPanel.h"
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

private:
    QString m_tiny = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a");
};

void TestAppFlows::initTestCase() {
    QCoreApplication::setOrganizationName(QStringLiteral("k3chat-tests"));
    QCoreApplication::setApplicationName(QStringLiteral("tst_appflows"));
    QStandardPaths::setTestModeEnabled(true); // never touch the user's settings or chats
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
    window.sendMessage(QString::fromStdString(expected.at("question").get<std::string>()));
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
    window.loadModel(m_tiny);
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
    window.sendMessage(QStringLiteral("What is KDA?"));
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
    window.loadModel(m_tiny, trunk, 300'000, 50'000); // 0.3 MB trunk, 50 kB of expert slots
    QVERIFY(ready.wait(30000));
    window.composer()->setThinking(false);
    QSignalSpy finished(&window, &MainWindow::answerFinished);
    window.sendMessage(QStringLiteral("What is MXFP4?"));
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
    QVERIFY2(cacheText.contains(QStringLiteral("requests ") +
                                QLocale().toString(qulonglong(f.cacheRequests))),
             qPrintable(cacheText));
    QVERIFY2(cacheText.contains(QStringLiteral("resident ")) &&
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
    QTimer::singleShot(200, this, [&] {
        if (auto* box = qobject_cast<QMessageBox*>(QApplication::activeModalWidget())) {
            title = box->text();
            details = box->detailedText();
            box->accept();
        }
    });
    window.openConversation(id);
    QVERIFY2(title.contains(QStringLiteral("left as it is")), qPrintable(title));
    QVERIFY2(details.contains(id + QStringLiteral(".jsonl:2:")), qPrintable(details));
    QCOMPARE(window.conversationView()->messageCount(), 0);
    QVERIFY(file.open(QIODevice::ReadOnly));
    QCOMPARE(file.readAll(), bytes);
    file.close();
    QVERIFY(file.remove());
}

// The wizard's whole choice (a streamed trunk and a cache budget) is what the next start
// opens: the same plan, not "everything resident" (which the real checkpoint is refused).
void TestAppFlows::wizardChoiceSurvivesARestart() {
    QTemporaryDir tmp;
    const QString trunk = tmp.filePath(QStringLiteral("trunk"));
    k3::packTrunk(m_tiny.toStdString(), trunk.toStdString());
    QSettings().setValue(QStringLiteral("setup/firstRunDone"), true);
    const auto planOf = [](MainWindow& w) {
        QStringList parts;
        for (const auto& c : w.findChild<MemoryPlanPanel*>()->figures().plan)
            parts << QStringLiteral("%1=%2").arg(c.name).arg(c.bytes);
        return parts;
    };
    QStringList chosen;
    {
        MainWindow window;
        QSignalSpy ready(&window, &MainWindow::modelReady);
        window.showSetupWizard();
        auto* wizard = window.findChild<SetupWizard*>();
        QVERIFY(wizard);
        emit wizard->setupFinished(m_tiny, trunk, 300'000, 50'000); // as Finish does
        QVERIFY(ready.wait(30000));
        const MemoryFigures& f = window.findChild<MemoryPlanPanel*>()->figures();
        QVERIFY(f.trunkStreamed); // the plan arrives before "ready"
        QVERIFY(f.expertsCached);
        chosen = planOf(window);
        window.close();
    }
    MainWindow again;
    QSignalSpy ready(&again, &MainWindow::modelReady);
    again.loadStartupModel();
    QVERIFY(ready.wait(30000));
    QCOMPARE(QSettings().value(QStringLiteral("model/directory")).toString(), m_tiny);
    const MemoryFigures& f = again.findChild<MemoryPlanPanel*>()->figures();
    QVERIFY(f.trunkStreamed);
    QVERIFY(f.expertsCached);
    QCOMPARE(planOf(again), chosen);
    QSettings().remove(QStringLiteral("model/trunkBytes"));
    QSettings().remove(QStringLiteral("model/cacheBytes"));
}

QTEST_MAIN(TestAppFlows)
#include "tst_appflows.moc"
