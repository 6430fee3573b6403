#pragma once

#include <QObject>
#include <QThread>

#include "worker/EngineWorker.h"

// Owns the engine thread and its worker. Commands are queued to the worker; signals
// come back on the GUI thread. Destroying the controller stops any generation and
// joins the thread, so closing the window mid-answer shuts down cleanly.
class EngineController : public QObject {
    Q_OBJECT
public:
    explicit EngineController(QObject* parent = nullptr);
    ~EngineController() override;

    EngineWorker* worker() const { return m_worker; }
    bool isBusy() const { return m_busy; }

    void loadModel(const k3::LaunchConfig& config);
    void connectRemote(const QString& url, const QString& model, const QString& apiKey);
    void generate(const QVector<ChatTurn>& history, const GenerationSettings& settings);
    void stop();
    void resetConversation();

signals:
    void busyChanged(bool busy);

private:
    void setBusy(bool busy);

    QThread m_thread;
    EngineWorker* m_worker;
    bool m_busy = false;
};
