#pragma once

#include <QObject>
#include <QThread>

#include <deque>
#include <functional>
#include <mutex>

#include "worker/EngineWorker.h"

// Owns the engine thread and its worker. Commands are typed lambdas queued to the worker,
// one per wake-up, in the order given; signals come back on the GUI thread. Destroying
// the controller stops any generation and joins the thread, so closing the window
// mid-answer shuts down cleanly.
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
    void forgetConversation(const QString& transcript);
    void measureSavedStates(const QStringList& ids, const QStringList& transcripts);
    void measureThinkingCost(const QString& effort);
    void measureReading(const QVector<ChatTurn>& history, const GenerationSettings& settings);

signals:
    void busyChanged(bool busy);
    // One per queued command: wakes the engine thread to run the oldest one.
    void commandQueued(QPrivateSignal);

private:
    using Command = std::function<void(EngineWorker&)>;
    void post(Command command);
    void runOldestCommand(); // on the engine thread
    void setBusy(bool busy);

    QThread m_thread;
    EngineWorker* m_worker;
    bool m_busy = false;
    // The commands cross threads here, under a mutex TSan can see, not as functors inside
    // Qt's uninstrumented event queue (whose hand-over TSan reports as a race).
    std::mutex m_commandsMutex;
    std::deque<Command> m_commands;
};
