#include "worker/EngineController.h"

EngineController::EngineController(QObject* parent) : QObject(parent), m_worker(new EngineWorker) {
    m_thread.setObjectName(QStringLiteral("k3-engine"));
    m_worker->moveToThread(&m_thread);
    connect(m_worker, &EngineWorker::modelLoaded, this, [this] { setBusy(false); });
    connect(m_worker, &EngineWorker::loadFailed, this, [this] { setBusy(false); });
    connect(m_worker, &EngineWorker::generationFinished, this, [this] { setBusy(false); });
    connect(m_worker, &EngineWorker::generationFailed, this, [this] { setBusy(false); });
    // Connected before the thread starts, so the slot object is visible to it.
    connect(
        this, &EngineController::commandQueued, m_worker, [this] { runOldestCommand(); },
        Qt::QueuedConnection);
    m_thread.start();
}

EngineController::~EngineController() {
    {
        // Commands not started yet never run: a queued generation would otherwise start
        // after the stop below and keep the join waiting.
        std::lock_guard lock(m_commandsMutex);
        m_commands.clear();
    }
    m_thread.quit();
    // Repeated: a command taken off the queue just before the clear clears the stop flag
    // when it starts (a stop belongs to the turn before it).
    do {
        m_worker->requestStop();
    } while (!m_thread.wait(QDeadlineTimer(100)));
    // Deleted here, after the join, so the loop above never touches a deleted worker.
    delete m_worker;
}

void EngineController::loadModel(const k3::LaunchConfig& config) {
    setBusy(true);
    post([config](EngineWorker& worker) { worker.loadModel(config); });
}

void EngineController::connectRemote(const QString& url, const QString& model,
                                     const QString& apiKey) {
    setBusy(true);
    post([url, model, apiKey](EngineWorker& worker) { worker.connectRemote(url, model, apiKey); });
}

void EngineController::generate(const QVector<ChatTurn>& history,
                                const GenerationSettings& settings) {
    setBusy(true);
    post([history, settings](EngineWorker& worker) { worker.generate(history, settings); });
}

void EngineController::stop() {
    m_worker->requestStop();
}

void EngineController::resetConversation() {
    post([](EngineWorker& worker) { worker.resetConversation(); });
}

void EngineController::forgetConversation(const QString& transcript) {
    post([transcript](EngineWorker& worker) { worker.forgetConversation(transcript); });
}

void EngineController::measureSavedStates(const QStringList& ids, const QStringList& transcripts) {
    post([ids, transcripts](EngineWorker& worker) { worker.measureSavedStates(ids, transcripts); });
}

void EngineController::measureThinkingCost(const QString& effort) {
    post([effort](EngineWorker& worker) { worker.measureThinkingCost(effort); });
}

void EngineController::measureReading(const QVector<ChatTurn>& history,
                                      const GenerationSettings& settings) {
    post([history, settings](EngineWorker& worker) { worker.measureReading(history, settings); });
}

void EngineController::post(Command command) {
    {
        std::lock_guard lock(m_commandsMutex);
        m_commands.push_back(std::move(command));
    }
    emit commandQueued(QPrivateSignal());
}

// One command per wake-up, as separate queued calls were.
void EngineController::runOldestCommand() {
    Command command;
    {
        std::lock_guard lock(m_commandsMutex);
        if (m_commands.empty()) return;
        command = std::move(m_commands.front());
        m_commands.pop_front();
    }
    command(*m_worker);
}

void EngineController::setBusy(bool busy) {
    if (m_busy == busy) return;
    m_busy = busy;
    emit busyChanged(busy);
}
