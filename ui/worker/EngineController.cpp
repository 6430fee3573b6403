#include "worker/EngineController.h"

#include <QMetaObject>

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
    // The string form on purpose: TSan cannot see a functor's captures handed over through
    // Qt's (uninstrumented) event queue and reports a race; the queued copy of a string
    // call's arguments is the case tests/tsan.supp describes.
    QMetaObject::invokeMethod(m_worker, "loadModel", Qt::QueuedConnection,
                              Q_ARG(k3::LaunchConfig, config));
}

void EngineController::connectRemote(const QString& url, const QString& model,
                                     const QString& apiKey) {
    setBusy(true);
    QMetaObject::invokeMethod(m_worker, "connectRemote", Qt::QueuedConnection, Q_ARG(QString, url),
                              Q_ARG(QString, model), Q_ARG(QString, apiKey));
}

void EngineController::generate(const QVector<ChatTurn>& history,
                                const GenerationSettings& settings) {
    setBusy(true);
    QMetaObject::invokeMethod(m_worker, "generate", Qt::QueuedConnection,
                              Q_ARG(QVector<ChatTurn>, history),
                              Q_ARG(GenerationSettings, settings));
}

void EngineController::stop() {
    m_worker->requestStop();
}

void EngineController::resetConversation() {
    QMetaObject::invokeMethod(m_worker, "resetConversation", Qt::QueuedConnection);
}

void EngineController::setBusy(bool busy) {
    if (m_busy == busy) return;
    m_busy = busy;
    emit busyChanged(busy);
}
