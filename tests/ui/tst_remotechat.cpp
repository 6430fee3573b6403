// The app chatting through a server: the remote backend on the engine thread streams a
// conversation with its think block into the view, the panels and status bar say
// "remote: URL", Stop closes the stream, and a server that dies mid-answer leaves the
// partial answer with a clear message.
#include <QAction>
#include <QApplication>
#include <QDeadlineTimer>
#include <QDir>
#include <QElapsedTimer>
#include <QFile>
#include <QMessageBox>
#include <QProcess>
#include <QRegularExpression>
#include <QSettings>
#include <QSignalSpy>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTest>
#include <QThread>
#include <QTimer>

#include "AppSettings.h"
#include "MainWindow.h"
#include "ModelLoader.h"
#include "QueuedSpy.h"
#include "RemoteServerDialog.h"
#include "chat/ChatController.h"
#include "chat/ConversationModel.h"
#include "chat/ConversationStore.h"
#include "chat/ConversationView.h"
#include "chat/MessageComposer.h"
#include "panels/DiskIoPanel.h"
#include "panels/ExpertCachePanel.h"
#include "panels/MemoryPlanPanel.h"
#include "panels/TokenTimingPanel.h"
#include "wizard/RemoteServerForm.h"
#include "worker/EngineController.h"

#include "FakeOpenAiServer.hpp"

#include <nlohmann/json.hpp>

#include <memory>

namespace {

// The server under test: started here, reached only through its URL and model names.
// A `k3 serve resources/demo` variant can return the same shape.
struct ServerUnderTest {
    QString url;        // as a user types it ("http://127.0.0.1:PORT/v1")
    QString root;       // as the app shows it ("http://127.0.0.1:PORT")
    QString thinkModel; // answers with a think block, then "Hello, wörld!"
    QString slowModel;  // streams slowly enough to stop or kill mid-answer
    std::function<void()> kill;
    std::function<std::string()> lastBody;
    std::function<int()> streamsClosedByClient;
    std::shared_ptr<void> keepAlive;
};

ServerUnderTest startFakeServer() {
    auto server = std::make_shared<FakeOpenAiServer>();
    ServerUnderTest s;
    s.url = QString::fromStdString(server->url());
    s.root = QStringLiteral("http://127.0.0.1:%1").arg(server->port());
    s.thinkModel = QStringLiteral("k3-think");
    s.slowModel = QStringLiteral("k3-slow");
    s.kill = [server] { server->kill(); };
    s.lastBody = [server] { return server->lastBody(); };
    s.streamsClosedByClient = [server] { return server->streamsClosedByClient(); };
    s.keepAlive = server;
    return s;
}

QString lastData(MainWindow& window, int role) {
    ConversationModel* model = window.conversationView()->conversation();
    return model->index(model->rowCount() - 1).data(role).toString();
}

// `k3 serve resources/demo` on a free loopback port; the URL comes from its start line.
struct K3Serve {
    std::unique_ptr<QProcess> process = std::make_unique<QProcess>();
    QString url, root;
    bool start() {
        process->start(QStringLiteral(K3_CLI_PATH),
                       {QStringLiteral("serve"), QStringLiteral(K3_SOURCE_DIR "/resources/demo"),
                        QStringLiteral("--port"), QStringLiteral("0")});
        const QRegularExpression line(QStringLiteral("on (http://127\\.0\\.0\\.1:\\d+)/v1"));
        QByteArray err;
        QElapsedTimer clock;
        clock.start();
        while (clock.elapsed() < 30000 && process->state() != QProcess::NotRunning) {
            process->setReadChannel(QProcess::StandardError);
            process->waitForReadyRead(200);
            err += process->readAllStandardError();
            const auto m = line.match(QString::fromUtf8(err));
            if (m.hasMatch()) {
                root = m.captured(1);
                url = root + QStringLiteral("/v1");
                return true;
            }
        }
        qWarning("k3 serve did not start: %s", err.constData());
        return false;
    }
    ~K3Serve() {
        if (process->state() != QProcess::NotRunning) {
            process->kill();
            process->waitForFinished(5000);
        }
    }
};

void connectTo(MainWindow& window, const QString& url, const QString& model) {
    QSignalSpy ready(&window, &MainWindow::modelReady);
    window.loader()->connectRemote(url, model, QString());
    QVERIFY(ready.wait(10000));
    QTRY_VERIFY(window.composer()->isReady());
}

void connectTo(MainWindow& window, const ServerUnderTest& server, const QString& model) {
    connectTo(window, server.url, model);
}

// Sampled answers from the real server: temperature 2 with a fixed seed.
void saveSampling(int seed, int maxTokens) {
    AppSettings settings = AppSettings::load();
    settings.greedy = false;
    settings.temperature = 2.0;
    settings.fixedSeed = true;
    settings.seed = seed;
    settings.maxTokens = maxTokens;
    settings.save();
}

} // namespace

class TestRemoteChat : public QObject {
    Q_OBJECT
private slots:
    void initTestCase() {
        QCoreApplication::setOrganizationName(QStringLiteral("k3chat-tests"));
        QCoreApplication::setApplicationName(QStringLiteral("tst_remotechat"));
        QStandardPaths::setTestModeEnabled(true);
        // Every run starts without saved conversation states (the engine would restore them).
        QDir(AppSettings::stateCacheDirectory()).removeRecursively();
        QSettings().clear();
    }

    void workerStreamsOffTheGuiThread() {
        const ServerUnderTest server = startFakeServer();
        EngineController engine;
        EngineWorker* worker = engine.worker();
        QueuedSpy loaded(worker, &EngineWorker::modelLoaded);
        QueuedSpy figures(worker, &EngineWorker::memoryUpdated);
        engine.connectRemote(server.url, server.thinkModel, QString());
        QVERIFY(loaded.wait(10000));
        const auto info = loaded.at(0).at(0).value<ModelInfo>();
        QVERIFY(info.remote);
        QCOMPARE(info.directory, server.root);
        QCOMPARE(info.modelName, server.thinkModel);
        QCOMPARE(figures.size(), 1);
        QCOMPARE(figures.at(0).at(0).value<MemoryFigures>().remoteUrl, server.root);

        QThread* gui = QThread::currentThread();
        QList<QThread*> emittedOn;
        connect(
            worker, &EngineWorker::tokenGenerated, this,
            [&] { emittedOn << QThread::currentThread(); }, Qt::DirectConnection);
        QueuedSpy tokens(worker, &EngineWorker::tokenGenerated);
        QueuedSpy finished(worker, &EngineWorker::generationFinished);
        engine.generate({{QStringLiteral("user"), QStringLiteral("Hi"), {}, {}, {}, {}}},
                        GenerationSettings{});
        QVERIFY(finished.wait(10000));
        QCOMPARE(tokens.size(), 6);
        QCOMPARE(emittedOn.size(), 6);
        for (QThread* t : emittedOn) QVERIFY(t != gui); // the GUI thread never waits on it
        const auto s = finished.at(0).at(0).value<GenerationSummary>();
        QCOMPARE(s.content, QStringLiteral("Hello, wörld!"));
        QCOMPARE(s.reasoning, QStringLiteral("The user greets; answer briefly. Done."));
        QCOMPARE(s.generatedTokens, 6);
        QCOMPARE(s.promptTokens, 12);
        QCOMPARE(s.model, server.thinkModel);
        QVERIFY(s.endOfTurn);
        QCOMPARE(s.interruption, QString());
    }

    void conversationWithAThinkBlockStreamsIntoTheView() {
        const ServerUnderTest server = startFakeServer();
        MainWindow window;
        window.show();
        connectTo(window, server, server.thinkModel);
        QCOMPARE(window.statusBar()->currentMessage(),
                 QStringLiteral("k3-think · remote: %1 · ready").arg(server.root));
        const QString remoteLine = QStringLiteral("remote: ") + server.root;
        QVERIFY(window.findChild<MemoryPlanPanel*>()->detailsText().startsWith(remoteLine));
        QVERIFY(window.findChild<ExpertCachePanel*>()->text().startsWith(remoteLine));
        QVERIFY(window.findChild<DiskIoPanel*>()->text().startsWith(remoteLine));

        window.composer()->setThinking(true);
        ConversationModel* model = window.conversationView()->conversation();
        QStringList reasoningSeen;
        connect(model, &QAbstractItemModel::dataChanged, this, [&] {
            reasoningSeen << model->index(model->rowCount() - 1)
                                 .data(ConversationModel::ReasoningRole)
                                 .toString();
        });
        QSignalSpy finished(&window, &MainWindow::answerFinished);
        window.chat()->send(QStringLiteral("Hi"));
        QVERIFY(finished.wait(10000));
        QCOMPARE(lastData(window, ConversationModel::ReasoningRole),
                 QStringLiteral("The user greets; answer briefly. Done."));
        QCOMPARE(lastData(window, ConversationModel::ContentRole), QStringLiteral("Hello, wörld!"));
        QCOMPARE(lastData(window, ConversationModel::ModelRole), server.thinkModel);
        QVERIFY(!model->index(1).data(ConversationModel::ThinkingExpandedRole).toBool());
        // The think block grew delta by delta before the answer began.
        QVERIFY(reasoningSeen.contains(QStringLiteral("The user greets; ")));
        QVERIFY(reasoningSeen.contains(QStringLiteral("The user greets; answer briefly.")));
        QVERIFY2(
            lastData(window, ConversationModel::StatsRole).startsWith(QStringLiteral("6 tokens")),
            qPrintable(lastData(window, ConversationModel::StatsRole)));
        QCOMPARE(window.timingPanel()->barCount(), 6);
        QCOMPARE(window.statusBar()->currentMessage(),
                 QStringLiteral("k3-think · remote: %1 · ready").arg(server.root));

        // Saved with the model that answered.
        const QVector<ChatTurn> saved = window.store()->load(window.currentConversationId());
        QCOMPARE(saved.size(), 2);
        QCOMPARE(saved[1].model, server.thinkModel);

        // The next message sends the whole conversation, earlier thinking included.
        window.chat()->send(QStringLiteral("Again"));
        QVERIFY(finished.wait(10000));
        const auto body = nlohmann::ordered_json::parse(server.lastBody());
        QCOMPARE(body["messages"].dump(),
                 std::string(R"([{"role":"user","content":"Hi"},)"
                             R"({"role":"assistant","content":"Hello, wörld!",)"
                             R"("reasoning_content":"The user greets; answer briefly. Done."},)"
                             R"({"role":"user","content":"Again"}])"));
        window.store()->remove(window.currentConversationId());
    }

    // The server chosen last time is where the next start connects (URL and model from
    // the settings, the key from the keychain; this test's keychain is unreachable).
    void theNextStartConnectsToTheSameServer() {
        const ServerUnderTest server = startFakeServer();
        {
            MainWindow first;
            connectTo(first, server, server.thinkModel);
        }
        QCOMPARE(QSettings().value(QStringLiteral("model/source")).toString(),
                 QStringLiteral("remote"));
        QCOMPARE(QSettings().value(QStringLiteral("remote/url")).toString(), server.root);
        MainWindow next;
        QSignalSpy ready(&next, &MainWindow::modelReady);
        next.loadStartupModel();
        QVERIFY(ready.wait(20000));
        QCOMPARE(next.statusBar()->currentMessage(),
                 QStringLiteral("k3-think · remote: %1 · ready").arg(server.root));
        QSettings().setValue(QStringLiteral("model/source"), QStringLiteral("local"));
    }

    // Model > Use a server… with a key: the key reaches the server and the keychain
    // store (memory-only here, no D-Bus), never the settings file; the next start reads
    // it back from the store.
    void modelMenuServerWithAKeyKeepsItOutOfTheSettings() {
        const QString secret = QStringLiteral("sk-remote-secret-4711");
        FakeOpenAiServer server(secret.toStdString());
        const QString root = QStringLiteral("http://127.0.0.1:%1").arg(server.port());
        MainWindow window;
        QSignalSpy ready(&window, &MainWindow::modelReady);
        window.findChild<QAction*>(QStringLiteral("useServerAction"))->trigger();
        auto* dialog = window.findChild<RemoteServerDialog*>();
        QVERIFY(dialog);
        dialog->form()->setUrl(QString::fromStdString(server.url()));
        dialog->form()->setModel(QStringLiteral("k3-think"));
        dialog->form()->setApiKey(secret);
        dialog->accept();
        QVERIFY(ready.wait(10000));
        QCOMPARE(server.lastAuthorization(), "Bearer " + secret.toStdString());
        QCOMPARE(window.statusBar()->currentMessage(),
                 QStringLiteral("k3-think · remote: %1 · ready").arg(root));
        QSettings settings;
        settings.sync();
        QFile file(settings.fileName());
        QVERIFY(file.open(QIODevice::ReadOnly));
        const QByteArray stored = file.readAll();
        QVERIFY(stored.contains(root.toUtf8()));
        QVERIFY(!stored.contains(secret.toUtf8()));

        MainWindow next;
        QSignalSpy nextReady(&next, &MainWindow::modelReady);
        next.loadStartupModel();
        QVERIFY(nextReady.wait(20000));
        QCOMPARE(next.statusBar()->currentMessage(),
                 QStringLiteral("k3-think · remote: %1 · ready").arg(root));
        QSettings().setValue(QStringLiteral("model/source"), QStringLiteral("local"));
    }

    // A server that sends several tokens per delta: the timing chart still has one bar
    // per token. With a running usage on each chunk the split is live and exact; with the
    // total only, the deltas' bars are redrawn when the usage arrives. The panel says so.
    void batchingServerGetsOneBarPerToken() {
        const ServerUnderTest server = startFakeServer();
        MainWindow window;
        QSignalSpy finished(&window, &MainWindow::answerFinished);
        const QString split = QStringLiteral(
            " · the server sent them in 4 deltas; each delta's time is split evenly over its "
            "tokens (counts %1)");
        struct Case {
            QString model;
            int tokens;
            QString counts;
        };
        for (const Case& c : {Case{QStringLiteral("k3-batch-usage"), 10,
                                   QStringLiteral("from the server's usage per chunk")},
                              Case{QStringLiteral("k3-batch"), 11,
                                   QStringLiteral("shared out evenly from the answer's usage")}}) {
            connectTo(window, server, c.model);
            window.chat()->send(QStringLiteral("Count"));
            QVERIFY(finished.wait(10000));
            QCOMPARE(window.timingPanel()->barCount(), c.tokens);
            const QString summary = window.timingPanel()->summaryText();
            QVERIFY2(summary.startsWith(QStringLiteral("%1 tokens · ").arg(c.tokens)) &&
                         summary.endsWith(split.arg(c.counts)),
                     qPrintable(summary));
            // Each delta's bars are equal: its time split evenly (20 ms apart, at least).
            QVERIFY(window.timingPanel()->barSeconds(0) > 0);
            QCOMPARE(window.timingPanel()->barSeconds(1), window.timingPanel()->barSeconds(0));
            QVERIFY2(lastData(window, ConversationModel::StatsRole)
                         .startsWith(QStringLiteral("%1 tokens").arg(c.tokens)),
                     qPrintable(lastData(window, ConversationModel::StatsRole)));
            const QString id = window.currentConversationId();
            window.newChat();
            window.store()->remove(id);
        }
    }

    void stopClosesTheStream() {
        const ServerUnderTest server = startFakeServer();
        MainWindow window;
        connectTo(window, server, server.slowModel);
        QSignalSpy finished(&window, &MainWindow::answerFinished);
        window.chat()->send(QStringLiteral("Count"));
        QTRY_VERIFY_WITH_TIMEOUT(
            lastData(window, ConversationModel::ContentRole).startsWith(QStringLiteral("1 2 ")),
            5000);
        window.chat()->stop();
        // The answer ends with what had arrived (not its 200 numbers) and the server saw
        // the client close the stream: that, not the time it took, is what Stop does. The
        // waits are hang guards only.
        QVERIFY(finished.wait(30000));
        const QString content = lastData(window, ConversationModel::ContentRole);
        QVERIFY2(content.startsWith(QStringLiteral("1 2 ")) &&
                     !content.contains(QStringLiteral(" 200 ")),
                 qPrintable(content));
        QVERIFY2(lastData(window, ConversationModel::StatsRole).contains(QStringLiteral("stopped")),
                 qPrintable(lastData(window, ConversationModel::StatsRole)));
        QCOMPARE(lastData(window, ConversationModel::ReasoningRole),
                 QStringLiteral("Counting slowly."));
        QTRY_COMPARE_WITH_TIMEOUT(server.streamsClosedByClient(), 1, 10000);
        QVERIFY(!window.engine()->isBusy());
        window.store()->remove(window.currentConversationId());
    }

    // The same window against the real server: `k3 serve resources/demo` samples the
    // demo's think block and answer (temperature 2, seed 6 make it think), which stream
    // into the view; then the server is killed and the next message says why, with the
    // conversation kept.
    void realK3ServeStreamsAThinkBlock() {
        K3Serve server;
        QVERIFY(server.start());
        saveSampling(6, 40);
        MainWindow window;
        window.show();
        connectTo(window, server.url, QStringLiteral("demo"));
        if (QTest::currentTestFailed()) return;
        QCOMPARE(window.statusBar()->currentMessage(),
                 QStringLiteral("demo · remote: %1 · ready").arg(server.root));
        window.composer()->setThinking(true);
        ConversationModel* model = window.conversationView()->conversation();
        int reasoningUpdates = 0, contentUpdates = 0;
        QString lastReasoning, lastContent;
        connect(model, &QAbstractItemModel::dataChanged, this, [&] {
            const QModelIndex last = model->index(model->rowCount() - 1);
            const QString r = last.data(ConversationModel::ReasoningRole).toString();
            const QString c = last.data(ConversationModel::ContentRole).toString();
            if (r != lastReasoning) ++reasoningUpdates;
            if (c != lastContent) ++contentUpdates;
            lastReasoning = r;
            lastContent = c;
        });
        QSignalSpy finished(&window, &MainWindow::answerFinished);
        window.chat()->send(QStringLiteral("Hello!"));
        QVERIFY(finished.wait(30000));
        const QString reasoning = lastData(window, ConversationModel::ReasoningRole);
        const QString content = lastData(window, ConversationModel::ContentRole);
        QVERIFY2(!reasoning.isEmpty() && !content.isEmpty(), qPrintable(reasoning + "|" + content));
        // Streamed: the think block and the answer each grew over several deltas, and no
        // channel marker leaked into either.
        QVERIFY2(reasoningUpdates > 1 && contentUpdates > 1,
                 qPrintable(QStringLiteral("%1 %2").arg(reasoningUpdates).arg(contentUpdates)));
        QVERIFY(!content.contains(QStringLiteral("<|")) &&
                !reasoning.contains(QStringLiteral("<|")));
        QCOMPARE(lastData(window, ConversationModel::ModelRole), QStringLiteral("demo"));

        server.process->kill();
        QVERIFY(server.process->waitForFinished(5000));
        // The failure is a warning box (text: which server; details: curl's reason).
        QString boxText, boxDetails;
        QTimer closer;
        connect(&closer, &QTimer::timeout, this, [&] {
            for (QWidget* w : QApplication::topLevelWidgets())
                if (auto* box = qobject_cast<QMessageBox*>(w); box && box->isVisible()) {
                    boxText = box->text();
                    boxDetails = box->detailedText();
                    box->accept();
                }
        });
        closer.start(50);
        window.chat()->send(QStringLiteral("Again"));
        QTRY_VERIFY_WITH_TIMEOUT(!boxText.isEmpty(), 10000);
        closer.stop();
        QCOMPARE(boxText, QStringLiteral("The request to the server at %1 failed; the "
                                         "conversation is kept.")
                              .arg(server.root));
        QVERIFY2(boxDetails.contains(QStringLiteral("refused")), qPrintable(boxDetails));
        QTRY_VERIFY(window.composer()->isReady());
        const QVector<ChatTurn> saved = window.store()->load(window.currentConversationId());
        QVERIFY(saved.size() >= 2);
        QCOMPARE(saved[1].content, content);
        QCOMPARE(saved[1].reasoning, reasoning);
        window.store()->remove(window.currentConversationId());
        QSettings().clear();
    }

    // Stop against the real server: the app closes the stream at the first delta, and
    // `k3 serve` stops generating (its access log line for the request comes at once,
    // with far fewer than the 1063 tokens this sampled answer has uncancelled; the same
    // request as tst_k3serve::disconnectFreesTheServer, 192 prompt tokens), and is free
    // for the next message (its line is read before the next message is sent, and that
    // one streams and stops the same way). Events are checked, not times: the waits are
    // hang guards.
    void stopCancelsTheRealServersGeneration() {
        K3Serve server;
        QVERIFY(server.start());
        saveSampling(3, 3000);
        MainWindow window;
        connectTo(window, server.url, QStringLiteral("demo"));
        if (QTest::currentTestFailed()) return;
        window.composer()->setThinking(true);
        ConversationModel* model = window.conversationView()->conversation();
        bool stopped = false;
        connect(model, &QAbstractItemModel::dataChanged, this, [&] {
            const QModelIndex last = model->index(model->rowCount() - 1);
            if (stopped || !model->lastIsStreaming() ||
                (last.data(ConversationModel::ContentRole).toString().isEmpty() &&
                 last.data(ConversationModel::ReasoningRole).toString().isEmpty()))
                return;
            stopped = true;
            window.chat()->stop();
        });
        QSignalSpy finished(&window, &MainWindow::answerFinished);
        const QRegularExpression logged(
            QStringLiteral(R"(POST /v1/chat/completions 200 tokens=(\d+)\+(\d+) )"));
        QByteArray log;
        for (const QString& message : {QStringLiteral("Hello!"), QStringLiteral("Hi")}) {
            stopped = false;
            window.chat()->send(message);
            QVERIFY(finished.wait(30000));
            QVERIFY(stopped); // at its first delta
            QVERIFY2(
                lastData(window, ConversationModel::StatsRole).contains(QStringLiteral("stopped")),
                qPrintable(lastData(window, ConversationModel::StatsRole)));
            // The server's line for this request: written when its generation ended.
            QRegularExpressionMatch m;
            const QDeadlineTimer hangGuard(30000);
            while (!(m = logged.match(QString::fromUtf8(log))).hasMatch() &&
                   !hangGuard.hasExpired()) {
                server.process->waitForReadyRead(50);
                log += server.process->readAllStandardError();
            }
            QVERIFY2(m.hasMatch(), log.constData());
            if (message == QStringLiteral("Hello!")) {
                QCOMPARE(m.captured(1).toInt(), 192);
                QVERIFY2(m.captured(2).toInt() < 1063 / 2, log.constData());
            }
            log = log.mid(m.capturedEnd());
        }
        window.store()->remove(window.currentConversationId());
        QSettings().clear();
    }

    void killedServerKeepsThePartialAnswerAndSaysWhy() {
        ServerUnderTest server = startFakeServer();
        MainWindow window;
        connectTo(window, server, server.slowModel);
        QSignalSpy finished(&window, &MainWindow::answerFinished);
        window.chat()->send(QStringLiteral("Count"));
        QTRY_VERIFY_WITH_TIMEOUT(
            lastData(window, ConversationModel::ContentRole).startsWith(QStringLiteral("1 2 3 ")),
            5000);
        server.kill();
        QVERIFY(finished.wait(5000));
        const QString content = lastData(window, ConversationModel::ContentRole);
        QVERIFY2(content.startsWith(QStringLiteral("1 2 3 ")), qPrintable(content));
        const QString why =
            QStringLiteral("the server at %1 closed the stream early").arg(server.root);
        QVERIFY2(lastData(window, ConversationModel::StatsRole).contains(why),
                 qPrintable(lastData(window, ConversationModel::StatsRole)));
        QVERIFY2(window.statusBar()->currentMessage().contains(why),
                 qPrintable(window.statusBar()->currentMessage()));
        QVERIFY(window.statusBar()->currentMessage().endsWith(
            QStringLiteral("; the partial answer is kept")));
        // Kept on disk too, with the conversation.
        const QVector<ChatTurn> saved = window.store()->load(window.currentConversationId());
        QCOMPARE(saved.size(), 2);
        QCOMPARE(saved[1].content, content);
        QVERIFY(window.composer()->isReady());
        window.store()->remove(window.currentConversationId());
    }
};

int main(int argc, char** argv) {
    // Never touch the developer's real keychain (the server form reads the API key).
    qputenv("DBUS_SESSION_BUS_ADDRESS", "unix:path=/nonexistent/k3chat-test-bus");
    QApplication app(argc, argv);
    TestRemoteChat test;
    return QTest::qExec(&test, argc, argv);
}
#include "tst_remotechat.moc"
