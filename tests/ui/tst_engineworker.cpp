#include <QSignalSpy>
#include <QThread>

#include "QueuedSpy.h"
#include <QTemporaryDir>

#include <QRegularExpression>
#include <QTest>
#include <k3/chat.hpp>
#include <k3/pack.hpp>
#include <k3/tokenizer.hpp>

#include "worker/EngineController.h"

#include <atomic>
#include <mutex>

// The engine on its own thread, driven the way the window drives it.
class TestEngineWorker : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void loadsAndAnswers();
    void stopEndsTheAnswer();
    void stopWhileThePromptIsReadSettlesThePanels();
    void thinkingCostIsTheEffortPreamble();
    void destroyingWhileGeneratingJoinsCleanly();
    void queuedCommandsRunInOrderOnTheEngineThread();
    void loadFailureNamesTheFile();
    void refusedBudgetSaysWhatToChooseInTheApp();
    void streamedTrunkAndCacheGiveTheSameAnswer();

private:
    static bool load(EngineController& engine, const QString& dir);
    QString m_model = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a");
    QVector<ChatTurn> m_history{{QStringLiteral("user"), QStringLiteral("What is MXFP4?"), {}}};
};

namespace {
// A checkpoint folder, everything resident unless a trunk and budgets are given.
k3::LaunchConfig launch(const QString& dir, const QString& trunk = {},
                        k3::LaunchBudget budget = {}) {
    k3::LaunchConfig c;
    c.modelDir = dir.toStdString();
    c.trunkDir = trunk.toStdString();
    c.budget = std::move(budget);
    return c;
}
} // namespace

void TestEngineWorker::initTestCase() {
    qRegisterMetaType<ModelInfo>();
}

bool TestEngineWorker::load(EngineController& engine, const QString& dir) {
    QueuedSpy loaded(engine.worker(), &EngineWorker::modelLoaded);
    engine.loadModel(launch(dir));
    return loaded.wait(30000);
}

void TestEngineWorker::loadsAndAnswers() {
    EngineController engine;
    QSignalSpy busy(&engine, &EngineController::busyChanged);
    QVERIFY(load(engine, m_model));
    QueuedSpy tokens(engine.worker(), &EngineWorker::tokenGenerated);
    QueuedSpy finished(engine.worker(), &EngineWorker::generationFinished);
    // The thread the answer is computed on: the one each token is emitted from.
    QThread* const gui = QThread::currentThread();
    std::atomic<QThread*> emitter{nullptr};
    std::atomic<int> onGui{0};
    const QMetaObject::Connection probe = connect(
        engine.worker(), &EngineWorker::tokenGenerated, this,
        [gui, &emitter, &onGui] {
            emitter.store(QThread::currentThread());
            if (QThread::currentThread() == gui) onGui.fetch_add(1);
        },
        Qt::DirectConnection);
    GenerationSettings settings;
    settings.thinking = false;
    settings.maxTokens = 20;
    engine.generate(m_history, settings);
    QVERIFY(engine.isBusy());
    QVERIFY(finished.wait(30000));
    QVERIFY(!engine.isBusy());
    disconnect(probe);
    const auto summary = finished.at(0).at(0).value<GenerationSummary>();
    QCOMPARE(summary.generatedTokens, 20);
    QCOMPARE(summary.promptTokens, 26); // the reference's prompt ids for this turn
    QCOMPARE(tokens.count(), 20);
    QString streamed;
    for (int i = 0; i < tokens.count(); ++i) {
        QCOMPARE(tokens.at(i).at(0).toInt(), i);
        streamed += tokens.at(i).at(2).toString();
    }
    QCOMPARE(streamed, summary.content);
    QVERIFY(!summary.cancelled);
    QVERIFY(summary.valid);
    // The answer was computed on the engine thread (the worker's, named k3-engine), never
    // on this (GUI) thread; the signals were delivered here through queued connections.
    QCOMPARE(onGui.load(), 0);
    QVERIFY(emitter.load() != nullptr);
    QVERIFY(emitter.load() != gui);
    QCOMPARE(emitter.load(), engine.worker()->thread());
    QCOMPARE(emitter.load()->objectName(), QStringLiteral("k3-engine"));
}

void TestEngineWorker::stopEndsTheAnswer() {
    EngineController engine;
    QVERIFY(load(engine, m_model));
    QueuedSpy tokens(engine.worker(), &EngineWorker::tokenGenerated);
    QueuedSpy finished(engine.worker(), &EngineWorker::generationFinished);
    GenerationSettings settings;
    settings.thinking = false;
    settings.maxTokens = 1'000'000; // would run for many minutes
    engine.generate(m_history, settings);
    QVERIFY(tokens.wait(30000));
    engine.stop();
    QVERIFY(finished.wait(10000));
    const auto summary = finished.at(0).at(0).value<GenerationSummary>();
    QVERIFY(summary.cancelled);
    QVERIFY(summary.generatedTokens < 1'000'000);
    // The conversation survives a stop: the next answer reuses the prompt positions.
    QueuedSpy again(engine.worker(), &EngineWorker::generationFinished);
    settings.maxTokens = 3;
    engine.generate(m_history, settings);
    QVERIFY(again.wait(30000));
    QCOMPARE(again.at(0).at(0).value<GenerationSummary>().generatedTokens, 3);
}

// Issue 37 point 2: Esc while the prompt was read left the docks on "reading the prompt
// 64 of 260 · about 113 s left". Stop is pressed here (on the engine thread, so
// deterministically) as the prompt's reading begins: the answer ends cancelled and empty,
// and the last figures the docks get carry no prompt progress.
void TestEngineWorker::stopWhileThePromptIsReadSettlesThePanels() {
    EngineController engine;
    QVERIFY(load(engine, m_model));
    QueuedSpy figures(engine.worker(), &EngineWorker::memoryUpdated);
    QueuedSpy finished(engine.worker(), &EngineWorker::generationFinished);
    EngineWorker* const worker = engine.worker();
    const QMetaObject::Connection stopper = connect(
        worker, &EngineWorker::prefillProgress, this, [worker] { worker->requestStop(); },
        Qt::DirectConnection);
    GenerationSettings settings;
    settings.thinking = false;
    settings.maxTokens = 20;
    engine.generate(m_history, settings);
    QVERIFY(finished.wait(30000));
    disconnect(stopper);
    const auto summary = finished.at(0).at(0).value<GenerationSummary>();
    QVERIFY(summary.cancelled);
    QCOMPARE(summary.generatedTokens, 0);
    QTRY_VERIFY(!figures.isEmpty());
    bool sawReading = false;
    for (int i = 0; i < figures.count(); ++i)
        sawReading = sawReading || figures.at(i).at(0).value<MemoryFigures>().prefillTotal > 0;
    QVERIFY(sawReading); // the docks were told a prompt was being read
    QCOMPARE(figures.last().at(0).value<MemoryFigures>().prefillTotal, 0);
    QCOMPARE(figures.last().at(0).value<MemoryFigures>().prefillText(), QString());
}

// What Think adds to a first message: the prompt rendered with and without it, counted
// here through the other encoding path (the rendered text with its special tokens),
// and the reading rate of the last message once one was read.
void TestEngineWorker::thinkingCostIsTheEffortPreamble() {
    EngineController engine;
    QVERIFY(load(engine, m_model));
    QueuedSpy cost(engine.worker(), &EngineWorker::thinkingCost);
    engine.measureThinkingCost(QStringLiteral("low"));
    QVERIFY(cost.wait(10000));
    const k3::Tokenizer tok = k3::Tokenizer::fromDirectory(m_model.toStdString());
    std::vector<k3::ChatMessage> hello(1);
    hello[0].role = k3::ChatRole::User;
    hello[0].content = "Hello";
    k3::ChatRenderOptions on, off;
    on.thinkingEffort = "low";
    off.thinking = false;
    const int expected = int(tok.encodeWithSpecial(k3::renderChat(hello, on)).size()) -
                         int(tok.encodeWithSpecial(k3::renderChat(hello, off)).size());
    QVERIFY(expected > 0);
    QCOMPARE(cost.last().at(0).toInt(), expected);
    QCOMPARE(cost.last().at(1).toDouble(), -1.0); // nothing read yet at this budget

    QueuedSpy finished(engine.worker(), &EngineWorker::generationFinished);
    GenerationSettings settings;
    settings.thinking = false;
    settings.maxTokens = 2;
    engine.generate(m_history, settings);
    QVERIFY(finished.wait(30000));
    const auto summary = finished.last().at(0).value<GenerationSummary>();
    engine.measureThinkingCost(QStringLiteral("low"));
    QVERIFY(cost.wait(10000));
    QCOMPARE(cost.last().at(1).toDouble(),
             summary.prefillSeconds / double(summary.prefillPositions));
}

void TestEngineWorker::destroyingWhileGeneratingJoinsCleanly() {
    auto* engine = new EngineController;
    QVERIFY(load(*engine, m_model));
    QueuedSpy tokens(engine->worker(), &EngineWorker::tokenGenerated);
    // Recorded on the engine thread (the controller and its queue are gone once deleted);
    // read after the join below.
    std::atomic<int> started{0}, finished{0}, generated{0};
    std::atomic<bool> cancelled{false};
    connect(engine->worker(), &EngineWorker::settingsApplied, [&] { ++started; });
    connect(engine->worker(), &EngineWorker::generationFinished, [&](const GenerationSummary& s) {
        ++finished;
        generated = s.generatedTokens;
        cancelled = s.cancelled;
    });
    GenerationSettings settings;
    settings.maxTokens = 1'000'000; // would run for many minutes
    engine->generate(m_history, settings);
    engine->generate(m_history, settings); // queued behind the first: never started
    QVERIFY(tokens.wait(30000));
    // Stops the answer and joins the thread; one that ran on would hang here until the
    // test's time-out, so what is checked is how it ended, not how long it took.
    delete engine;
    QCOMPARE(started.load(), 1);
    QCOMPARE(finished.load(), 1);
    QVERIFY(cancelled.load());
    QVERIFY2(generated.load() < 1'000'000, qPrintable(QString::number(generated.load())));
}

void TestEngineWorker::queuedCommandsRunInOrderOnTheEngineThread() {
    EngineController engine;
    QThread* const gui = QThread::currentThread();
    std::mutex mutex;
    QStringList order; // what the worker reported, and whether from the engine thread
    const auto record = [&](const QString& what) {
        std::lock_guard lock(mutex);
        order << what + (QThread::currentThread() == gui ? QStringLiteral("@gui") : QString());
    };
    connect(
        engine.worker(), &EngineWorker::loadFailed, this,
        [&] { record(QStringLiteral("loadFailed")); }, Qt::DirectConnection);
    connect(
        engine.worker(), &EngineWorker::modelLoaded, this,
        [&] { record(QStringLiteral("modelLoaded")); }, Qt::DirectConnection);
    connect(
        engine.worker(), &EngineWorker::generationFinished, this,
        [&](const GenerationSummary& s) {
            record(QStringLiteral("finished:%1").arg(s.generatedTokens));
        },
        Qt::DirectConnection);
    QueuedSpy finished(engine.worker(), &EngineWorker::generationFinished);
    GenerationSettings settings;
    settings.thinking = false;
    settings.maxTokens = 3;
    // Given all at once, without waiting: each runs after the one before it ends.
    engine.loadModel(launch(QStringLiteral("/nonexistent/k3-model")));
    engine.loadModel(launch(m_model));
    engine.generate(m_history, settings);
    settings.maxTokens = 2;
    engine.generate(m_history, settings);
    QTRY_COMPARE_WITH_TIMEOUT(finished.count(), 2, 60000);
    std::lock_guard lock(mutex);
    QCOMPARE(order, (QStringList{QStringLiteral("loadFailed"), QStringLiteral("modelLoaded"),
                                 QStringLiteral("finished:3"), QStringLiteral("finished:2")}));
}

void TestEngineWorker::loadFailureNamesTheFile() {
    EngineController engine;
    QueuedSpy failed(engine.worker(), &EngineWorker::loadFailed);
    engine.loadModel(launch(QStringLiteral("/nonexistent/k3model")));
    QVERIFY(failed.wait(10000));
    const QString message = failed.at(0).at(0).toString();
    QVERIFY2(message.contains(QStringLiteral("/nonexistent/k3model/config.json")),
             qPrintable(message));
    QVERIFY(!engine.isBusy());
}

// The engine's refusal has the numbers; the app adds where to change the budget (its
// wizard), never a command-line flag.
void TestEngineWorker::refusedBudgetSaysWhatToChooseInTheApp() {
    QTemporaryDir tmp;
    const QString trunk = tmp.filePath(QStringLiteral("trunk"));
    k3::packTrunk(m_model.toStdString(), trunk.toStdString());
    EngineController engine;
    QueuedSpy failed(engine.worker(), &EngineWorker::loadFailed);
    engine.loadModel(launch(m_model, trunk, k3::LaunchBudget::ofBytes(10'000, 50'000)));
    QVERIFY(failed.wait(30000));
    const QString message = failed.at(0).at(0).toString();
    QVERIFY2(message.contains(QStringLiteral("cannot hold one ring slot")), qPrintable(message));
    QVERIFY2(message.contains(QRegularExpression(QStringLiteral(
                 "Choose a trunk budget of at least [0-9]+\\.[0-9]{2} [KMG]B \\(Model > Setup "
                 "wizard…"))),
             qPrintable(message));
    QVERIFY2(!message.contains(QStringLiteral("--trunk-gb")), qPrintable(message));
}

// The budgets the wizard chose reach the engine: the trunk streams from trunk.bin, the
// experts go through the cache, and the answer is the same as with everything resident.
void TestEngineWorker::streamedTrunkAndCacheGiveTheSameAnswer() {
    QTemporaryDir tmp;
    const QString trunk = tmp.filePath(QStringLiteral("trunk"));
    k3::packTrunk(m_model.toStdString(), trunk.toStdString());
    GenerationSettings settings;
    settings.thinking = false;
    settings.maxTokens = 20;
    QString answers[2];
    bool streamed[2] = {true, false};
    for (int run = 0; run < 2; ++run) {
        EngineController engine;
        QueuedSpy memory(engine.worker(), &EngineWorker::memoryUpdated);
        QueuedSpy loaded(engine.worker(), &EngineWorker::modelLoaded);
        if (run == 0)
            engine.loadModel(launch(m_model));
        else // 0.3 MB trunk, 50 kB cache
            engine.loadModel(launch(m_model, trunk, k3::LaunchBudget::ofBytes(300'000, 50'000)));
        QVERIFY(loaded.wait(30000));
        QVERIFY(memory.count() >= 1 || memory.wait(5000));
        const auto figures = memory.last().at(0).value<MemoryFigures>();
        streamed[run] = figures.trunkStreamed;
        QueuedSpy finished(engine.worker(), &EngineWorker::generationFinished);
        engine.generate(m_history, settings);
        QVERIFY(finished.wait(30000));
        answers[run] = finished.at(0).at(0).value<GenerationSummary>().content;
    }
    QVERIFY(!streamed[0]);
    QVERIFY(streamed[1]);
    QCOMPARE(answers[1], answers[0]);
}

QTEST_MAIN(TestEngineWorker)
#include "tst_engineworker.moc"
