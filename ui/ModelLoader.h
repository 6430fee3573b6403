#pragma once

#include <QObject>
#include <QString>

#include "worker/LaunchConfigMetaType.h"

class EngineController;
class QWidget;
struct ModelInfo;

// Which model answers: opens a local model (a LaunchConfig) or connects to a server
// through the engine worker, remembers what opened (the next start opens exactly it) and
// says what failed in a non-modal box over `window`. A load that fails keeps the model
// that worked, and the saved setup goes back to it. MainWindow shows the state it reports.
class ModelLoader : public QObject {
    Q_OBJECT
public:
    ModelLoader(EngineController* engine, QWidget* window);

    // The configuration of the local model loaded last (or loading now).
    const k3::LaunchConfig& launchConfig() const { return m_launch; }
    // What the status bar calls the model ("name · remote: URL"); empty before one loads.
    const QString& modelName() const { return m_modelName; }
    // The server while one answers; empty for a local model.
    const QString& remoteUrl() const { return m_remoteUrl; }
    // The status line of what answers now; empty: nothing.
    const QString& readyStatus() const { return m_readyStatus; }
    // Threads apply to the next message: the launch in use records them without a reload.
    void setThreads(int threads) { m_launch.threads = threads; }

    // The bundled demo model: next to the installed binary, or in the source tree.
    static QString demoModelDirectory();

    // Opens `config` (the memory plan enforced); once it loads it is what the next start
    // opens.
    void loadModel(const k3::LaunchConfig& config);
    // A checkpoint folder with every weight resident; threads, chunk and context as saved.
    void loadModelFolder(const QString& directory);
    // Says so in a box when the demo is not installed.
    void loadDemoModel();
    void connectRemote(const QString& url, const QString& model, const QString& apiKey);
    // At start: the last model used (or server), else the bundled demo, else nothing. On
    // the first run it asks for the setup wizard as well.
    void loadStartupModel();

signals:
    // A load or connection begins: the chat stops and waits; `status` says what opens.
    void loadStarted(const QString& status);
    // Ready to chat: `chatModel` is what answers are recorded with; `thinks`: the model
    // has a think channel (the demo does not); `placeholder` goes in the empty chat.
    void ready(const QString& chatModel, bool thinks, const QString& placeholder);
    // The load failed; `kept`: the model (or server) before it still answers.
    void failed(bool kept);
    void setupWizardRequested();

private:
    void onModelLoaded(const ModelInfo& info);
    void onLoadFailed(const QString& message, bool previousModelKept);

    EngineController* m_engine;
    QWidget* m_window;
    k3::LaunchConfig m_launch;
    QString m_modelName;
    QString m_remoteUrl;
    QString m_readyStatus;
    bool m_connecting = false; // a server (not a folder) is being opened
};
