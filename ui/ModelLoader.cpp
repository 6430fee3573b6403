#include "ModelLoader.h"

#include "AppSettings.h"
#include "Settings.h"
#include "SettingsTable.h"
#include "wizard/TokenStore.h"
#include "worker/EngineController.h"

#include <QCoreApplication>
#include <QDir>
#include <QFileInfo>
#include <QMessageBox>
#include <QTimer>
#include <QWidget>

ModelLoader::ModelLoader(EngineController* engine, QWidget* window)
    : QObject(window), m_engine(engine), m_window(window) {
    EngineWorker* worker = engine->worker();
    connect(worker, &EngineWorker::modelLoaded, this, &ModelLoader::onModelLoaded);
    connect(worker, &EngineWorker::loadFailed, this, &ModelLoader::onLoadFailed);
}

QString ModelLoader::demoModelDirectory() {
    const QStringList candidates{
        QCoreApplication::applicationDirPath() + QStringLiteral("/../share/k3chat/demo"),
#ifdef K3_SOURCE_DEMO_DIR
        QStringLiteral(K3_SOURCE_DEMO_DIR),
#endif
    };
    for (const QString& dir : candidates)
        if (QFileInfo::exists(dir + QStringLiteral("/config.json"))) return QDir::cleanPath(dir);
    return {};
}

void ModelLoader::loadStartupModel() {
    const QString remoteUrl = Settings::value(SettingsTable::remoteUrl);
    if (Settings::value(SettingsTable::modelSource) == QLatin1String("remote") &&
        !remoteUrl.isEmpty()) {
        // The key comes from the keychain, which answers asynchronously.
        auto* keys = new TokenStore(this, TokenStore::serverKeyName());
        const QString model = Settings::value(SettingsTable::remoteModel);
        connect(keys, &TokenStore::loaded, this,
                [this, keys, remoteUrl, model](const QString& key) {
                    keys->deleteLater();
                    connectRemote(remoteUrl, model, key);
                });
        emit loadStarted(tr("Connecting to %1…").arg(remoteUrl));
        keys->load();
        return;
    }
    // The whole configuration the wizard or Settings left: folders, budget, context.
    k3::LaunchConfig launch = AppSettings::loadLaunch();
    // The trunk when it is still there.
    if (!launch.trunkDir.empty() &&
        !QFileInfo::exists(QString::fromStdString((launch.trunkDir / "trunk.json").string())))
        launch.trunkDir.clear();
    if (!launch.modelDir.empty() &&
        QFileInfo::exists(QString::fromStdString((launch.modelDir / "config.json").string())))
        loadModel(launch);
    else if (!demoModelDirectory().isEmpty())
        loadDemoModel();
    // First run: the wizard opens over the demo (which loads behind it), so a new user
    // can chat at once (its first page's demo button) or set up the real model.
    if (!Settings::value(SettingsTable::firstRunDone)) {
        Settings::setValue(SettingsTable::firstRunDone, true);
        QTimer::singleShot(0, this, &ModelLoader::setupWizardRequested);
    }
}

void ModelLoader::loadDemoModel() {
    const QString dir = demoModelDirectory();
    if (dir.isEmpty()) {
        QMessageBox::warning(m_window, tr("Demo model missing"),
                             tr("The bundled demo model was not found next to k3chat. "
                                "Reinstall k3chat or open a checkpoint folder instead."));
        return;
    }
    loadModelFolder(dir);
}

void ModelLoader::loadModelFolder(const QString& directory) {
    k3::LaunchConfig launch = AppSettings::loadLaunch();
    launch.modelDir = directory.toStdString();
    launch.trunkDir.clear();
    launch.budget = k3::LaunchBudget::resident();
    loadModel(launch);
}

void ModelLoader::loadModel(const k3::LaunchConfig& config) {
    // m_launch and m_modelName stay the working model's until this one has loaded.
    m_connecting = false;
    emit loadStarted(tr("Loading %1…").arg(QString::fromStdString(config.modelDir.string())));
    m_engine->loadModel(config);
}

void ModelLoader::connectRemote(const QString& url, const QString& model, const QString& apiKey) {
    m_connecting = true;
    emit loadStarted(tr("Connecting to %1…").arg(url));
    m_engine->connectRemote(url, model, apiKey);
}

void ModelLoader::onModelLoaded(const ModelInfo& info) {
    m_connecting = false;
    if (info.remote) {
        // The URL and model only: the key stays in the keychain.
        Settings::setValue(SettingsTable::modelSource, QStringLiteral("remote"));
        Settings::setValue(SettingsTable::remoteUrl, info.directory);
        Settings::setValue(SettingsTable::remoteModel, info.modelName);
        m_remoteUrl = info.directory;
        m_modelName = tr("%1 · remote: %2").arg(info.modelName, info.directory);
        m_readyStatus = tr("%1 · ready").arg(m_modelName);
        emit ready(info.modelName + QStringLiteral(" @ ") + info.directory, true,
                   tr("Connected to %1. Type a message below.").arg(info.directory));
        return;
    }
    m_remoteUrl.clear();
    m_launch = info.launch;
    m_modelName = QFileInfo(info.directory).fileName();
    Settings::setValue(SettingsTable::modelSource, QStringLiteral("local"));
    AppSettings::saveLaunch(info.launch); // what opened is what the next start opens
    // The budget in use, as asked for ("preset laptop", "trunk 3.00 GB / cache 1.50 GB").
    QString budget = QString::fromStdString(info.launch.budget.describe());
    if (!info.launch.trunkDir.empty()) budget += tr(" streamed");
    m_readyStatus = tr("%1 · %2 · %3 layers · %4 MB of weights in memory")
                        .arg(m_modelName, budget)
                        .arg(info.layers)
                        .arg(double(info.weightBytes) / 1e6, 0, 'f', 1);
    // Decided from the model's files (the demo's say it answers without a think channel),
    // so a copy of a model in another folder gets the same Think.
    emit ready(QFileInfo(info.directory).canonicalFilePath(), info.thinks,
               tr("Model ready. Type a message below."));
}

void ModelLoader::onLoadFailed(const QString& message, bool previousModelKept) {
    // The working model (or server) still answers: its figures stay, the chat goes on.
    const bool kept = previousModelKept && !m_readyStatus.isEmpty();
    if (!kept) m_readyStatus.clear();
    const bool server = m_connecting;
    m_connecting = false;
    // What the next start opens is what answers now: a launch Settings saved before
    // trying it goes back to the working one.
    if (kept && !server && m_remoteUrl.isEmpty() && !m_launch.modelDir.empty())
        AppSettings::saveLaunch(m_launch);
    emit failed(kept);
    QString text =
        server ? tr("The server did not accept the connection. Check the URL, the model name "
                    "and the API key (Model > Use a server…).")
               : tr("The model could not be loaded:\n%1").arg(message);
    text += QLatin1String("\n\n") +
            (kept ? tr("%1 is still loaded.").arg(m_modelName) : tr("No model is loaded now."));
    auto* box =
        new QMessageBox(QMessageBox::Critical,
                        server ? tr("Could not use the server") : tr("Could not load the model"),
                        text, QMessageBox::Ok, m_window);
    box->setObjectName(QStringLiteral("loadFailedBox"));
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->setTextFormat(Qt::PlainText);
    if (server) box->setDetailedText(message);
    box->open(); // never a nested event loop: the engine's signals keep arriving
}
