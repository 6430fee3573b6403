#include "worker/EngineController.h"

#include <QMetaObject>

// Commands reach the worker as queued lambdas run in its thread (the compiler checks the
// calls; a worker already gone drops them).

EngineController::EngineController(QObject* parent) : QObject(parent), m_worker(new EngineWorker) {
    m_thread.setObjectName(QStringLiteral("k3-engine"));
    m_worker->moveToThread(&m_thread);
    connect(&m_thread, &QThread::finished, m_worker, &QObject::deleteLater);
    connect(m_worker, &EngineWorker::modelLoaded, this, [this] { setBusy(false); });
    connect(m_worker, &EngineWorker::loadFailed, this, [this] { setBusy(false); });
    connect(m_worker, &EngineWorker::generationFinished, this, [this] { setBusy(false); });
    connect(m_worker, &EngineWorker::generationFailed, this, [this] { setBusy(false); });
    m_thread.start();
}

EngineController::~EngineController() {
    m_worker->requestStop();
    m_thread.quit();
    m_thread.wait();
}

void EngineController::loadModel(const k3::LaunchConfig& config) {
    setBusy(true);
    QMetaObject::invokeMethod(
        m_worker, [worker = m_worker, config] { worker->loadModel(config); }, Qt::QueuedConnection);
}

void EngineController::connectRemote(const QString& url, const QString& model,
                                     const QString& apiKey) {
    setBusy(true);
    QMetaObject::invokeMethod(
        m_worker,
        [worker = m_worker, url, model, apiKey] { worker->connectRemote(url, model, apiKey); },
        Qt::QueuedConnection);
}

void EngineController::generate(const QVector<ChatTurn>& history,
                                const GenerationSettings& settings) {
    setBusy(true);
    QMetaObject::invokeMethod(
        m_worker, [worker = m_worker, history, settings] { worker->generate(history, settings); },
        Qt::QueuedConnection);
}

void EngineController::stop() {
    m_worker->requestStop();
}

void EngineController::resetConversation() {
    QMetaObject::invokeMethod(
        m_worker, [worker = m_worker] { worker->resetConversation(); }, Qt::QueuedConnection);
}

void EngineController::setBusy(bool busy) {
    if (m_busy == busy) return;
    m_busy = busy;
    emit busyChanged(busy);
}
