#include "MainWindow.h"

#include "AboutDialog.h"
#include "AppSettings.h"
#include "RemoteServerDialog.h"
#include "SettingsDialog.h"
#include "chat/ConversationModel.h"
#include "chat/ConversationStore.h"

#include "chat/ConversationView.h"
#include "chat/FindBar.h"
#include "chat/MessageComposer.h"
#include "panels/DiskIoPanel.h"
#include "panels/ExpertCachePanel.h"
#include "panels/MemoryPlanPanel.h"
#include "panels/PanelScrollArea.h"
#include "panels/TokenTimingPanel.h"
#include "wizard/RemoteServerForm.h"
#include "wizard/SetupWizard.h"
#include "wizard/TokenStore.h"
#include "worker/EngineController.h"
#include <k3/chat.hpp>

#include <QApplication>
#include <QCloseEvent>
#include <QComboBox>
#include <QDir>
#include <QDockWidget>
#include <QFileDialog>
#include <QFileInfo>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QMenuBar>
#include <QMessageBox>
#include <QPushButton>
#include <QRandomGenerator>
#include <QSettings>
#include <QShortcut>
#include <QSplitter>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTimer>
#include <QVBoxLayout>

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent), m_splitter(new QSplitter(Qt::Horizontal, this)),
      m_conversationList(new QListWidget), m_search(new QLineEdit),
      m_conversation(new ConversationView), m_composer(new MessageComposer), m_findBar(new FindBar),
      m_engine(new EngineController(this)),
      m_store(std::make_unique<ConversationStore>(
          QStandardPaths::writableLocation(QStandardPaths::AppDataLocation) +
          QStringLiteral("/conversations"))),
      m_timing(new TokenTimingPanel) {
    setWindowTitle(tr("k3chat"));
    setWindowIcon(QIcon(QStringLiteral(":/k3chat/icons/k3chat.svg")));

    auto* sidebar = new QWidget;
    auto* sideLayout = new QVBoxLayout(sidebar);
    auto* newChatButton = new QPushButton(tr("New chat"));
    newChatButton->setObjectName(QStringLiteral("newChatButton"));
    m_search->setObjectName(QStringLiteral("conversationSearch"));
    m_search->setPlaceholderText(tr("Search conversations"));
    m_search->setClearButtonEnabled(true);
    m_conversationList->setObjectName(QStringLiteral("conversationList"));
    sideLayout->addWidget(newChatButton);
    sideLayout->addWidget(m_search);
    sideLayout->addWidget(m_conversationList, 1);
    connect(newChatButton, &QPushButton::clicked, this, &MainWindow::newChat);
    connect(m_conversationList, &QListWidget::itemActivated, this, [this](QListWidgetItem* item) {
        openConversation(item->data(Qt::UserRole).toString());
    });
    connect(m_conversationList, &QListWidget::itemClicked, this, [this](QListWidgetItem* item) {
        openConversation(item->data(Qt::UserRole).toString());
    });
    connect(m_search, &QLineEdit::textChanged, this, &MainWindow::refreshConversationList);

    auto* center = new QWidget;
    auto* centerLayout = new QVBoxLayout(center);
    centerLayout->addWidget(m_conversation, 1);
    centerLayout->addWidget(m_findBar);
    centerLayout->addWidget(m_composer);
    connect(m_findBar, &FindBar::queryChanged, m_conversation, &ConversationView::find);
    connect(m_findBar, &FindBar::nextRequested, m_conversation, &ConversationView::findNext);
    connect(m_findBar, &FindBar::previousRequested, m_conversation,
            &ConversationView::findPrevious);
    connect(m_findBar, &FindBar::closed, this, [this] {
        m_conversation->clearFind();
        m_composer->setFocus();
    });
    connect(m_conversation, &ConversationView::matchChanged, m_findBar, &FindBar::setResult);
    connect(m_conversation, &ConversationView::findRequested, this, &MainWindow::showFindBar);
    connect(m_conversation, &ConversationView::editLastMessageRequested, this,
            &MainWindow::editLastMessage);
    connect(m_conversation, &ConversationView::copied, this, [this](const QString& what) {
        statusBar()->showMessage(tr("Copied %1").arg(what), 3000);
    });
    connect(m_composer, &MessageComposer::editLastRequested, this, &MainWindow::editLastMessage);

    m_splitter->setObjectName(QStringLiteral("mainSplitter"));
    m_splitter->addWidget(sidebar);
    m_splitter->addWidget(center);
    m_splitter->setStretchFactor(0, 0);
    m_splitter->setStretchFactor(1, 1);
    m_splitter->setSizes({220, 780});
    setCentralWidget(m_splitter);

    createDocks();
    createMenus();
    statusBar()->showMessage(tr("No model loaded"));

    connect(m_composer, &MessageComposer::sendRequested, this, &MainWindow::send);
    connect(m_composer, &MessageComposer::stopRequested, this, &MainWindow::stopGeneration);
    auto* escape = new QShortcut(QKeySequence(Qt::Key_Escape), this);
    connect(escape, &QShortcut::activated, this, [this] {
        if (m_engine->isBusy())
            stopGeneration();
        else
            cancelEdit();
    });
    EngineWorker* worker = m_engine->worker();
    connect(worker, &EngineWorker::modelLoaded, this, &MainWindow::onModelLoaded);
    connect(worker, &EngineWorker::loadFailed, this, &MainWindow::onLoadFailed);
    connect(worker, &EngineWorker::tokenGenerated, this, &MainWindow::onToken);
    connect(worker, &EngineWorker::generationFinished, this, &MainWindow::onFinished);
    connect(worker, &EngineWorker::tokenTiming, m_timing, &TokenTimingPanel::addToken);
    connect(worker, &EngineWorker::generationFailed, this, &MainWindow::onFailed);
    connect(worker, &EngineWorker::prefillProgress, this,
            [this](int done, int total, double seconds) {
                m_conversation->conversation()->setReading(done, total, seconds);
                statusBar()->showMessage(
                    tr("%1 · reading the prompt %2/%3").arg(m_modelName).arg(done).arg(total));
            });
    resize(1100, 720);
    restoreWindowSettings();
    applySettings();
    m_composer->setFocus();
    refreshConversationList();
}

MainWindow::~MainWindow() = default;

void MainWindow::createDocks() {
    auto* plan = new MemoryPlanPanel;
    auto* cache = new ExpertCachePanel;
    auto* disk = new DiskIoPanel;
    const auto dock = [this](const QString& title, const char* name, QWidget* panel) {
        auto* d = new QDockWidget(title, this);
        d->setObjectName(QString::fromLatin1(name));
        // In a scroll area: the dock can shrink (800x600 fits) and Tab reaches the panel.
        d->setWidget(new PanelScrollArea(panel, title));
        addDockWidget(Qt::RightDockWidgetArea, d);
    };
    dock(tr("Memory plan"), "memoryDock", plan);
    dock(tr("Expert cache"), "cacheDock", cache);
    dock(tr("Disk I/O"), "diskDock", disk);
    dock(tr("Per-token timing"), "timingDock", m_timing);
    EngineWorker* worker = m_engine->worker();
    connect(worker, &EngineWorker::memoryUpdated, plan, &MemoryPlanPanel::setFigures);
    connect(worker, &EngineWorker::memoryUpdated, cache, &ExpertCachePanel::setFigures);
    connect(worker, &EngineWorker::memoryUpdated, disk, &DiskIoPanel::setFigures);
}

void MainWindow::createMenus() {
    QMenu* file = menuBar()->addMenu(tr("&File"));
    QAction* newChatAction = file->addAction(tr("&New chat"), this, &MainWindow::newChat);
    newChatAction->setShortcut(QKeySequence::New);
    newChatAction->setObjectName(QStringLiteral("newChatAction"));
    QAction* exportAction = file->addAction(tr("&Export conversation as Markdown…"), this,
                                            &MainWindow::exportConversation);
    exportAction->setObjectName(QStringLiteral("exportAction"));
    file->addSeparator();
    QAction* quit = file->addAction(tr("&Quit"), this, &QWidget::close);
    quit->setShortcut(QKeySequence::Quit);

    QMenu* edit = menuBar()->addMenu(tr("&Edit"));
    QAction* regen =
        edit->addAction(tr("&Regenerate the last answer"), this, &MainWindow::regenerate);
    regen->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_R));
    regen->setObjectName(QStringLiteral("regenerateAction"));
    // Up only works in the empty composer, so it is shown here but not bound globally.
    QAction* editLast =
        edit->addAction(tr("&Edit the last message") + QStringLiteral("\t") + tr("Up"), this,
                        &MainWindow::editLastMessage);
    editLast->setObjectName(QStringLiteral("editLastAction"));
    edit->addSeparator();
    edit->addAction(m_conversation->findChild<QAction*>(QStringLiteral("copyMessageAction")));
    edit->addSeparator();
    QAction* find = edit->addAction(tr("&Find in conversation…"), this, &MainWindow::showFindBar);
    find->setObjectName(QStringLiteral("findAction"));
    find->setShortcut(QKeySequence::Find);
    QAction* findNext = edit->addAction(tr("Find &next"), this, [this] {
        if (m_findBar->text().isEmpty())
            showFindBar();
        else
            m_conversation->findNext();
    });
    findNext->setObjectName(QStringLiteral("findNextAction"));
    findNext->setShortcut(QKeySequence(Qt::Key_F3));
    QAction* findPrevious = edit->addAction(tr("Find &previous"), this, [this] {
        if (m_findBar->text().isEmpty())
            showFindBar();
        else
            m_conversation->findPrevious();
    });
    findPrevious->setObjectName(QStringLiteral("findPreviousAction"));
    findPrevious->setShortcut(QKeySequence(Qt::SHIFT | Qt::Key_F3));
    edit->addSeparator();
    QAction* preferences = edit->addAction(tr("&Preferences…"), this, &MainWindow::showSettings);
    preferences->setObjectName(QStringLiteral("preferencesAction"));
    preferences->setShortcut(QKeySequence(Qt::CTRL | Qt::Key_Comma));
    preferences->setMenuRole(QAction::PreferencesRole);
    QAction* open = new QAction(tr("&Open model folder…"), this);
    open->setShortcut(QKeySequence::Open);
    connect(open, &QAction::triggered, this, &MainWindow::openModelFolder);
    QAction* demo = new QAction(tr("Load the &demo model"), this);
    demo->setObjectName(QStringLiteral("loadDemoAction"));
    connect(demo, &QAction::triggered, this, &MainWindow::loadDemoModel);
    QMenu* view = menuBar()->addMenu(tr("&View"));
    for (QDockWidget* dock : findChildren<QDockWidget*>())
        view->addAction(dock->toggleViewAction());
    view->addSeparator();
    QAction* keepThinking = view->addAction(tr("&Keep thinking expanded"));
    keepThinking->setObjectName(QStringLiteral("keepThinkingExpandedAction"));
    keepThinking->setCheckable(true);
    keepThinking->setChecked(
        QSettings().value(QStringLiteral("chat/keepThinkingExpanded"), false).toBool());
    m_conversation->conversation()->setThinkingExpandedByDefault(keepThinking->isChecked());
    connect(keepThinking, &QAction::toggled, this, &MainWindow::setKeepThinkingExpanded);
    QMenu* model = menuBar()->addMenu(tr("&Model"));
    model->addAction(open);
    model->addAction(demo);
    QAction* server =
        model->addAction(tr("Use a &server…"), this, &MainWindow::showRemoteServerDialog);
    server->setObjectName(QStringLiteral("useServerAction"));
    model->addSeparator();
    QAction* setup = model->addAction(tr("&Setup wizard…"), this, &MainWindow::showSetupWizard);
    setup->setObjectName(QStringLiteral("setupWizardAction"));
    QMenu* help = menuBar()->addMenu(tr("&Help"));
    help->addAction(tr("&About k3chat"), this, &MainWindow::showAbout);
}

void MainWindow::newChat() {
    stopGeneration();
    cancelEdit();
    m_conversation->conversation()->clear();
    m_engine->resetConversation();
    m_currentId.clear();
    m_store->release(); // the next save claims the new conversation
    m_conversationList->clearSelection();
    m_composer->clear();
    m_composer->setFocus();
}

QString MainWindow::demoModelDirectory() {
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

void MainWindow::refreshConversationList() {
    const QString filter = m_search->text().trimmed();
    m_conversationList->clear();
    for (const ConversationStore::Summary& c : m_store->list()) {
        if (!filter.isEmpty() && !c.title.contains(filter, Qt::CaseInsensitive)) continue;
        auto* item = new QListWidgetItem(c.title, m_conversationList);
        item->setData(Qt::UserRole, c.id);
        item->setToolTip(QLocale().toString(c.modified, QLocale::ShortFormat));
        if (c.id == m_currentId) item->setSelected(true);
    }
}

void MainWindow::openConversation(const QString& id) {
    if (id == m_currentId) return;
    stopGeneration();
    cancelEdit();
    try {
        // Claimed first: another window or `k3 --chat --history` writing it is told, and
        // this one does not open it to overwrite that session's turns.
        m_store->claim(id);
    } catch (const std::exception& e) {
        QMessageBox box(QMessageBox::Warning, tr("The conversation is in use"),
                        tr("Another k3chat window or k3 session is writing this conversation; "
                           "close it there first."),
                        QMessageBox::Ok, this);
        box.setTextFormat(Qt::PlainText);
        box.setDetailedText(QString::fromUtf8(e.what()));
        box.exec();
        return;
    }
    try {
        const QVector<ChatTurn> turns = m_store->load(id);
        m_conversation->conversation()->setTurns(turns);
        m_currentId = id;
        statusBar()->showMessage(tr("Opened \"%1\"").arg(ConversationStore::titleFor(turns)), 5000);
    } catch (const std::exception& e) {
        m_store->release();
        QMessageBox box(QMessageBox::Warning, tr("Could not open the conversation"),
                        tr("The saved conversation could not be read; the file was left as it is."),
                        QMessageBox::Ok, this);
        box.setTextFormat(Qt::PlainText);
        box.setDetailedText(QString::fromUtf8(e.what()));
        box.exec();
    }
}

bool MainWindow::importConversation(const QString& file) {
    try {
        const QVector<ChatTurn> turns =
            ConversationStore::toTurns(k3::readTranscript(file.toStdString()));
        openConversation(m_store->save({}, turns));
        refreshConversationList();
        return true;
    } catch (const std::exception& e) {
        // Reported, and the file is left as it is (the store only ever reads it). The
        // message quotes the transcript: plain text, never markup (<img src=...> stays
        // text and loads nothing).
        // On stderr (a terminal, often) the quoted transcript is shown, never obeyed.
        QString logged;
        for (const QChar c : QString::fromUtf8(e.what()))
            logged += (c.unicode() < 0x20 && c != QLatin1Char('\n') && c != QLatin1Char('\t')) ||
                              (c.unicode() >= 0x7f && c.unicode() <= 0x9f)
                          ? QStringLiteral("\\x%1").arg(c.unicode(), 2, 16, QLatin1Char('0'))
                          : QString(c);
        qWarning("k3chat: %s", qPrintable(logged));
        auto* box = new QMessageBox(QMessageBox::Warning, tr("Could not import the conversation"),
                                    QString::fromUtf8(e.what()), QMessageBox::Ok, this);
        box->setObjectName(QStringLiteral("importErrorBox"));
        box->setTextFormat(Qt::PlainText);
        box->setAttribute(Qt::WA_DeleteOnClose);
        box->open(); // not exec(): --quit-after must still be able to close the app
        return false;
    }
}

void MainWindow::saveConversation() {
    const QVector<ChatTurn> turns = m_conversation->conversation()->turns();
    if (turns.isEmpty()) return;
    try {
        const bool isNew = m_currentId.isEmpty();
        m_currentId = m_store->save(m_currentId, turns);
        if (isNew) refreshConversationList();
    } catch (const std::exception& e) {
        statusBar()->showMessage(
            tr("Could not save the conversation: %1").arg(QString::fromUtf8(e.what())));
    }
}

void MainWindow::loadStartupModel() {
    const QSettings remembered;
    const QString remoteUrl = remembered.value(QStringLiteral("remote/url")).toString();
    if (remembered.value(QStringLiteral("model/source")).toString() == QLatin1String("remote") &&
        !remoteUrl.isEmpty()) {
        // The key comes from the keychain, which answers asynchronously.
        auto* keys = new TokenStore(this, TokenStore::serverKeyName());
        const QString model = remembered.value(QStringLiteral("remote/model")).toString();
        connect(keys, &TokenStore::loaded, this,
                [this, keys, remoteUrl, model](const QString& key) {
                    keys->deleteLater();
                    connectRemote(remoteUrl, model, key);
                });
        m_composer->setReady(false);
        statusBar()->showMessage(tr("Connecting to %1…").arg(remoteUrl));
        keys->load();
        return;
    }
    const QString last = QSettings().value(QStringLiteral("model/directory")).toString();
    // The trunk chosen in the wizard or Settings, when it is still there.
    QString trunk = QSettings().value(QStringLiteral("model/trunkDir")).toString();
    if (!trunk.isEmpty() && !QFileInfo::exists(trunk + QStringLiteral("/trunk.json")))
        trunk.clear();
    // The budgets the wizard chose go with the model (0: everything resident / no cache).
    const quint64 trunkBytes =
        trunk.isEmpty() ? 0
                        : QSettings().value(QStringLiteral("model/trunkBytes"), 0).toULongLong();
    const quint64 cacheBytes =
        QSettings().value(QStringLiteral("model/cacheBytes"), 0).toULongLong();
    if (!last.isEmpty() && QFileInfo::exists(last + QStringLiteral("/config.json")))
        loadModel(last, trunk, trunkBytes, cacheBytes);
    else if (!demoModelDirectory().isEmpty())
        loadDemoModel();
    // First run: the wizard opens over the demo (which loads behind it), so a new user
    // can chat at once (its first page's demo button) or set up the real model.
    QSettings settings;
    if (!settings.value(QStringLiteral("setup/firstRunDone"), false).toBool()) {
        settings.setValue(QStringLiteral("setup/firstRunDone"), true);
        QTimer::singleShot(0, this, &MainWindow::showSetupWizard);
    }
}

void MainWindow::openModelFolder() {
    const QString dir = QFileDialog::getExistingDirectory(
        this, tr("Choose a checkpoint folder (config.json, shards, tokenizer)"),
        QSettings().value(QStringLiteral("model/directory"), QDir::homePath()).toString());
    if (!dir.isEmpty()) loadModel(dir);
}

void MainWindow::loadDemoModel() {
    const QString dir = demoModelDirectory();
    if (dir.isEmpty()) {
        QMessageBox::warning(this, tr("Demo model missing"),
                             tr("The bundled demo model was not found next to k3chat. "
                                "Reinstall k3chat or open a checkpoint folder instead."));
        return;
    }
    loadModel(dir);
}

void MainWindow::loadModel(const QString& directory, const QString& trunkDir, quint64 trunkBytes,
                           quint64 cacheBytes) {
    stopGeneration();
    m_composer->setReady(false);
    m_modelName = QFileInfo(directory).fileName();
    m_connecting = false;
    statusBar()->showMessage(tr("Loading %1…").arg(directory));
    m_engine->loadModel(directory, trunkDir, trunkBytes, cacheBytes);
}

void MainWindow::connectRemote(const QString& url, const QString& model, const QString& apiKey) {
    stopGeneration();
    m_composer->setReady(false);
    m_connecting = true;
    statusBar()->showMessage(tr("Connecting to %1…").arg(url));
    m_engine->connectRemote(url, model, apiKey);
}

void MainWindow::showRemoteServerDialog() {
    auto* dialog = new RemoteServerDialog(this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    connect(dialog, &QDialog::accepted, this, [this, dialog] {
        RemoteServerForm* form = dialog->form();
        connectRemote(form->url(), form->model(), form->apiKey());
    });
    dialog->open();
}

void MainWindow::stopGeneration() {
    if (m_engine->isBusy()) m_engine->stop();
}

void MainWindow::onModelLoaded(const ModelInfo& info) {
    m_connecting = false;
    if (info.remote) {
        QSettings settings; // the URL and model only: the key stays in the keychain
        settings.setValue(QStringLiteral("model/source"), QStringLiteral("remote"));
        settings.setValue(QStringLiteral("remote/url"), info.directory);
        settings.setValue(QStringLiteral("remote/model"), info.modelName);
        m_remoteUrl = info.directory;
        m_modelName = tr("%1 · remote: %2").arg(info.modelName, info.directory);
        m_composer->setReady(true);
        m_conversation->setPlaceholderText(
            tr("Connected to %1. Type a message below.").arg(info.directory));
        statusBar()->showMessage(tr("%1 · ready").arg(m_modelName));
        emit modelReady();
        return;
    }
    m_remoteUrl.clear();
    QSettings().setValue(QStringLiteral("model/source"), QStringLiteral("local"));
    QSettings().setValue(QStringLiteral("model/directory"), info.directory);
    // The demo was trained to answer directly, without a think channel.
    const QString demo = demoModelDirectory();
    if (!demo.isEmpty() &&
        QFileInfo(info.directory).canonicalFilePath() == QFileInfo(demo).canonicalFilePath())
        m_composer->setThinking(false);
    m_composer->setReady(true);
    m_conversation->setPlaceholderText(tr("Model ready. Type a message below."));
    statusBar()->showMessage(tr("%1 · %2 layers · %3 MB of weights in memory")
                                 .arg(m_modelName)
                                 .arg(info.layers)
                                 .arg(double(info.weightBytes) / 1e6, 0, 'f', 1));
    emit modelReady();
}

void MainWindow::onLoadFailed(const QString& message) {
    statusBar()->showMessage(tr("No model loaded"));
    if (m_connecting) {
        m_connecting = false;
        QMessageBox box(QMessageBox::Critical, tr("Could not use the server"),
                        tr("The server did not accept the connection. Check the URL, the "
                           "model name and the API key (Model > Use a server…)."),
                        QMessageBox::Ok, this);
        box.setTextFormat(Qt::PlainText);
        box.setDetailedText(message);
        box.exec();
        return;
    }
    QMessageBox box(QMessageBox::Critical, tr("Could not load the model"),
                    tr("The model could not be loaded. Check that the folder holds a complete "
                       "checkpoint (config.json, every shard, the tokenizer files)."),
                    QMessageBox::Ok, this);
    box.setTextFormat(Qt::PlainText);
    box.setDetailedText(message);
    box.exec();
}

void MainWindow::send(const QString& text) {
    ConversationModel* conversation = m_conversation->conversation();
    if (m_editRow >= 0) {
        // The edited question replaces the old one and everything that followed it.
        conversation->removeFrom(m_editRow);
        m_editRow = -1;
        m_composer->setEditing(false);
    }
    conversation->appendMessage(QStringLiteral("user"), text);
    saveConversation(); // the question is on disk before the answer starts
    startAnswer(conversation->turns());
}

void MainWindow::startAnswer(const QVector<ChatTurn>& history) {
    m_conversation->conversation()->beginAssistantMessage();
    m_tokensThisAnswer = 0;
    m_firstTokenSeconds = 0;
    m_tokenSeconds = 0;
    // Read again for every message: a change in Settings applies to the next one.
    GenerationSettings settings =
        AppSettings::load().generationSettings(QRandomGenerator::global()->generate64());
    settings.thinking = m_composer->thinking();
    settings.thinkingEffort = m_composer->thinkingEffort();
    m_composer->setGenerating(true);
    m_engine->generate(history, settings);
}

void MainWindow::regenerate() {
    ConversationModel* conversation = m_conversation->conversation();
    if (m_engine->isBusy() || !m_composer->isReady() || conversation->rowCount() == 0) return;
    const QModelIndex last = conversation->index(conversation->rowCount() - 1);
    if (last.data(ConversationModel::RoleNameRole).toString() != QLatin1String("assistant")) return;
    conversation->removeLast();
    startAnswer(conversation->turns());
}

void MainWindow::editLastMessage() {
    const int row = m_conversation->lastUserRow();
    if (m_engine->isBusy() || row < 0) return;
    m_editRow = row;
    m_composer->setText(
        m_conversation->conversation()->index(row).data(ConversationModel::ContentRole).toString());
    m_composer->setEditing(true);
    m_composer->setFocus();
}

void MainWindow::cancelEdit() {
    if (m_editRow < 0) return;
    m_editRow = -1;
    m_composer->setEditing(false);
    m_composer->clear();
}

void MainWindow::showFindBar() {
    m_findBar->open();
}

void MainWindow::setKeepThinkingExpanded(bool on) {
    QSettings().setValue(QStringLiteral("chat/keepThinkingExpanded"), on);
    m_conversation->conversation()->setThinkingExpandedByDefault(on);
}

QString MainWindow::conversationMarkdown(const QVector<ChatTurn>& turns) {
    QString md = QStringLiteral("# ") + ConversationStore::titleFor(turns) + QStringLiteral("\n");
    for (const ChatTurn& t : turns) {
        const QString who = t.role == QLatin1String("user")        ? tr("You")
                            : t.role == QLatin1String("assistant") ? tr("K3")
                                                                   : tr("System");
        md += QStringLiteral("\n## ") + who + QStringLiteral("\n\n");
        if (!t.reasoning.isEmpty()) {
            // The thinking, quoted so it reads as an aside.
            for (const QString& line : t.reasoning.split(QLatin1Char('\n')))
                md += QStringLiteral("> ") + line + QLatin1Char('\n');
            md += QLatin1Char('\n');
        }
        md += t.content + QLatin1Char('\n');
    }
    return md;
}

void MainWindow::exportConversation() {
    const QVector<ChatTurn> turns = m_conversation->conversation()->turns();
    if (turns.isEmpty()) return;
    const QString path =
        QFileDialog::getSaveFileName(this, tr("Export the conversation as Markdown"),
                                     QDir::homePath() + QLatin1Char('/') +
                                         ConversationStore::titleFor(turns) + QStringLiteral(".md"),
                                     tr("Markdown (*.md)"));
    if (path.isEmpty()) return;
    try {
        k3::writeFileAtomically(path.toStdString(), conversationMarkdown(turns).toStdString());
        statusBar()->showMessage(tr("Exported to %1").arg(path), 5000);
    } catch (const std::exception& e) {
        QMessageBox box(QMessageBox::Warning, tr("Export failed"), QString::fromUtf8(e.what()),
                        QMessageBox::Ok, this);
        box.setTextFormat(Qt::PlainText); // the message names a path the user typed
        box.exec();
    }
}

void MainWindow::onToken(int index, const QString& thinking, const QString& response,
                         double seconds) {
    m_conversation->conversation()->appendToLast(thinking, response);
    m_tokensThisAnswer = index + 1;
    if (index == 0) m_firstTokenSeconds = seconds;
    m_tokenSeconds += seconds;
    statusBar()->showMessage(tr("%1 · generating %2 · %3 s/token")
                                 .arg(m_modelName)
                                 .arg(m_tokensThisAnswer)
                                 .arg(m_tokenSeconds / m_tokensThisAnswer, 0, 'f', 3));
}

void MainWindow::onFinished(const GenerationSummary& s) {
    QString stats = s.generatedTokens == 1 ? tr("1 token") : tr("%1 tokens").arg(s.generatedTokens);
    stats += tr(" · prompt %1 s").arg(s.prefillSeconds, 0, 'f', 2);
    if (s.generatedTokens > 0)
        stats += tr(" · %1 s/token").arg(s.decodeSeconds / s.generatedTokens, 0, 'f', 3);
    if (s.reusedPositions > 0) stats += tr(" · %1 positions reused").arg(s.reusedPositions);
    if (s.cancelled) stats += tr(" · stopped");
    if (!s.interruption.isEmpty()) stats += tr(" · interrupted: %1").arg(s.interruption);
    QString invalid;
    if (!s.valid) {
        invalid = s.invalidReason.isEmpty() ? tr("an expert failed to load or a NaN appeared")
                                            : s.invalidReason;
        stats += tr(" · RUN INVALID (%1)").arg(invalid);
    }
    // Saved with the answer, so the conversation says it when reopened.
    m_conversation->conversation()->finishLast(stats, invalid, s.model);
    m_composer->setGenerating(false);
    saveConversation();
    // A broken stream keeps what arrived; the status bar says why it stopped.
    statusBar()->showMessage(s.interruption.isEmpty()
                                 ? tr("%1 · ready").arg(m_modelName)
                                 : tr("%1 · %2").arg(m_modelName, s.interruption));
    emit answerFinished();
}

void MainWindow::onFailed(const QString& message) {
    m_conversation->conversation()->removeLast();
    m_composer->setGenerating(false);
    QMessageBox box(QMessageBox::Warning, tr("The answer failed"),
                    m_remoteUrl.isEmpty()
                        ? tr("The engine stopped with an error; the conversation is kept.")
                        : tr("The request to the server at %1 failed; the conversation is "
                             "kept.")
                              .arg(m_remoteUrl),
                    QMessageBox::Ok, this);
    box.setTextFormat(Qt::PlainText);
    box.setDetailedText(message);
    box.exec();
}

void MainWindow::showSetupWizard() {
    if (auto* open = findChild<SetupWizard*>(); open && open->isVisible()) {
        open->raise(); // one wizard at a time
        open->activateWindow();
        return;
    }
    auto* wizard = new SetupWizard(this);
    wizard->setAttribute(Qt::WA_DeleteOnClose);
    connect(wizard, &SetupWizard::setupFinished, this, &MainWindow::loadModel);
    connect(wizard, &SetupWizard::serverChosen, this, &MainWindow::connectRemote);
    // The whole choice is remembered, budgets included: reopened without them, a streamed
    // checkpoint would be planned fully resident and refused by the memory check.
    connect(wizard, &SetupWizard::setupFinished, this,
            [](const QString&, const QString& trunkDir, quint64 trunkBytes, quint64 cacheBytes) {
                QSettings s;
                s.setValue(QStringLiteral("model/trunkDir"), trunkDir);
                s.setValue(QStringLiteral("model/trunkBytes"), trunkBytes);
                s.setValue(QStringLiteral("model/cacheBytes"), cacheBytes);
            });
    wizard->open();
}

void MainWindow::showSettings() {
    const AppSettings before = AppSettings::load();
    auto* dialog = new SettingsDialog(this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    connect(dialog, &QDialog::accepted, this, [this, before] {
        const AppSettings after = AppSettings::load();
        if (after.theme != before.theme || after.thinking != before.thinking ||
            after.thinkingEffort != before.thinkingEffort)
            applySettings();
        if ((after.modelDir != before.modelDir || after.trunkDir != before.trunkDir) &&
            !after.modelDir.isEmpty())
            loadModel(after.modelDir, after.trunkDir);
    });
    dialog->open();
}

void MainWindow::applySettings() {
    const AppSettings settings = AppSettings::load();
    AppSettings::applyTheme(settings.theme);
    m_composer->setThinking(settings.thinking);
    // The composer has no effort setter yet; its combo box is found by name.
    if (auto* effort = m_composer->findChild<QComboBox*>(QStringLiteral("effortCombo")))
        effort->setCurrentText(settings.thinkingEffort);
}

void MainWindow::showAbout() {
    AboutDialog dialog(this);
    dialog.exec();
}

void MainWindow::restoreWindowSettings() {
    QSettings settings;
    if (const QByteArray geometry = settings.value("mainWindow/geometry").toByteArray();
        !geometry.isEmpty())
        restoreGeometry(geometry);
    if (const QByteArray docks = settings.value("mainWindow/docks").toByteArray(); !docks.isEmpty())
        QMainWindow::restoreState(docks);
    if (const QByteArray split = settings.value("mainWindow/splitter").toByteArray();
        !split.isEmpty())
        m_splitter->restoreState(split);
}

void MainWindow::closeEvent(QCloseEvent* event) {
    // An open wizard is a separate window: it must not keep the app alive.
    for (SetupWizard* wizard : findChildren<SetupWizard*>()) wizard->close();
    QSettings settings;
    settings.setValue("mainWindow/geometry", saveGeometry());
    settings.setValue("mainWindow/splitter", m_splitter->saveState());
    settings.setValue("mainWindow/docks", saveState());
    event->accept();
}
