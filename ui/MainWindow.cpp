#include "MainWindow.h"

#include "AboutDialog.h"
#include "AppSettings.h"
#include "MainMenus.h"
#include "ModelLoader.h"
#include "RemoteServerDialog.h"
#include "Settings.h"
#include "SettingsDialog.h"
#include "SettingsTable.h"
#include "WindowPlacement.h"
#include "chat/ChatController.h"
#include "chat/ConversationListPanel.h"
#include "chat/ConversationModel.h"
#include "chat/ConversationStore.h"

#include "chat/ConversationView.h"
#include "chat/FindBar.h"
#include "chat/MessageComposer.h"
#include "chat/SystemPromptBanner.h"
#include "chat/SystemPromptDialog.h"
#include "chat/TranscriptWriter.h"
#include "panels/PanelDocks.h"
#include "panels/TokenTimingPanel.h"
#include "wizard/MemoryPage.h"
#include "wizard/RemoteServerForm.h"
#include "wizard/SetupWizard.h"
#include "worker/EngineController.h"
#include <k3/chat.hpp>

#include <QAbstractButton>
#include <QApplication>
#include <QCheckBox>
#include <QCloseEvent>
#include <QDir>
#include <QFileDialog>
#include <QFileInfo>
#include <QListWidget>
#include <QMessageBox>
#include <QPushButton>
#include <QShortcut>
#include <QSplitter>
#include <QStandardPaths>
#include <QStatusBar>
#include <QTimer>
#include <QVBoxLayout>

MainWindow::MainWindow(QWidget* parent)
    : QMainWindow(parent), m_splitter(new QSplitter(Qt::Horizontal, this)),
      m_conversation(new ConversationView), m_composer(new MessageComposer), m_findBar(new FindBar),
      m_promptBanner(new SystemPromptBanner), m_engine(new EngineController(this)),
      m_store(std::make_unique<ConversationStore>(AppSettings::conversationsDirectory())),
      m_writer(std::make_unique<TranscriptWriter>(m_store.get())), m_timing(new TokenTimingPanel),
      m_loader(new ModelLoader(m_engine, this)),
      m_chat(new ChatController(m_engine, m_conversation->conversation(), m_composer, m_store.get(),
                                m_writer.get(), this)) {
    setWindowTitle(tr("k3chat"));
    setWindowIcon(QIcon(QStringLiteral(":/k3chat/icons/k3chat.svg")));
    m_store->purgeLeftoverTrash(); // issue 35 item 14: no deleted text survives a crash

    QWidget* sidebar = buildSidebar();
    QWidget* center = buildCenter();

    m_splitter->setObjectName(QStringLiteral("mainSplitter"));
    m_splitter->addWidget(sidebar);
    m_splitter->addWidget(center);
    m_splitter->setStretchFactor(0, 0);
    m_splitter->setStretchFactor(1, 1);
    m_splitter->setSizes({220, 780});
    setCentralWidget(m_splitter);

    m_menus =
        std::make_unique<MainMenus>(this, PanelDocks::create(this, m_engine->worker(), m_timing));
    statusBar()->showMessage(tr("No model loaded"));

    connectChat();
    EngineWorker* worker = m_engine->worker();
    connectLoader();
    connect(worker, &EngineWorker::tokenTiming, m_timing, &TokenTimingPanel::addToken);
    connect(worker, &EngineWorker::deltaTiming, m_timing, &TokenTimingPanel::addDelta);
    connect(worker, &EngineWorker::prefillProgress, this,
            [this](int done, int total, double seconds, int restored, int held, double fraction,
                   double secondsLeft) {
                m_conversation->conversation()->setReading(done, total, seconds, restored, held,
                                                           fraction, secondsLeft);
                statusBar()->showMessage(tr("%1 · reading the prompt %2/%3")
                                             .arg(m_loader->modelName())
                                             .arg(done)
                                             .arg(total));
            });
    // Each conversation's saved state in the list (issue 28), measured on the engine
    // thread when the model, an answer or a deletion may have changed it.
    connect(worker, &EngineWorker::modelLoaded, this, &MainWindow::measureSavedStates);
    // After an answer: once its transcript is written (the engine reads it).
    connect(worker, &EngineWorker::generationFinished, this,
            [this] { m_writer->whenWritten(this, [this] { measureSavedStates(); }); });
    connect(worker, &EngineWorker::statesForgotten, this, &MainWindow::measureSavedStates);
    connect(worker, &EngineWorker::savedStateMeasured, m_conversationPanel,
            [this](const QString& id, int, quint64 bytes) {
                m_conversationPanel->setSavedState(id, bytes);
            });
    connect(m_conversationPanel, &ConversationListPanel::savedStateDeleteRequested, this,
            [this](const QString& id) { m_engine->forgetConversation(m_store->pathFor(id)); });
    resize(1100, 720);
    restoreWindowSettings();
    applySettings();
    m_composer->setFocus();
    refreshConversationList();
}

// The conversation list with its New chat button.
QWidget* MainWindow::buildSidebar() {
    auto* sidebar = new QWidget;
    auto* sideLayout = new QVBoxLayout(sidebar);
    auto* newChatButton = new QPushButton(tr("New chat"));
    newChatButton->setObjectName(QStringLiteral("newChatButton"));
    m_conversationPanel = new ConversationListPanel(m_store.get(), m_writer.get());
    sideLayout->addWidget(newChatButton);
    sideLayout->addWidget(m_conversationPanel, 1);
    connect(newChatButton, &QPushButton::clicked, this, &MainWindow::newChat);
    connect(m_conversationPanel, &ConversationListPanel::conversationActivated, this,
            &MainWindow::openConversation);
    connect(m_conversationPanel, &ConversationListPanel::conversationRenamed, this,
            [this](const QString&, const QString& title) {
                statusBar()->showMessage(tr("Renamed to \"%1\"").arg(title), 5000);
            });
    connect(m_conversationPanel, &ConversationListPanel::conversationDeleted, this,
            [this](const QString& id) {
                // Deleted mid-answer: the engine stops first (the forget below runs after
                // the answer's end, and its last state), and the transcript in the trash
                // is not written back by the stopped answer's save.
                if (id == currentConversationId()) m_chat->abandonAnswer();
                // What the engine kept of it goes too (read from the trash on its thread).
                m_engine->forgetConversation(m_store->trashDirectory() + QLatin1Char('/') + id +
                                             QStringLiteral(".jsonl"));
                if (id == currentConversationId()) newChat(); // its file is in the trash now
            });
    return sidebar;
}

// The conversation, the find bar and the composer, and what passes between them.
QWidget* MainWindow::buildCenter() {
    auto* center = new QWidget;
    auto* centerLayout = new QVBoxLayout(center);
    centerLayout->addWidget(m_promptBanner);
    centerLayout->addWidget(m_conversation, 1);
    connect(m_promptBanner, &SystemPromptBanner::changeRequested, this,
            &MainWindow::showSystemPrompt);
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
    connect(m_conversation, &ConversationView::findRequested, m_findBar, &FindBar::open);
    connect(m_conversation, &ConversationView::editLastMessageRequested, m_chat,
            &ChatController::editLastMessage);
    connect(m_conversation, &ConversationView::editMessageRequested, m_chat,
            &ChatController::editMessage);
    connect(m_conversation, &ConversationView::copied, this, [this](const QString& what) {
        statusBar()->showMessage(tr("Copied %1").arg(what), 3000);
    });
    connect(m_composer, &MessageComposer::editLastRequested, m_chat,
            &ChatController::editLastMessage);
    connect(m_conversation, &ConversationView::versionRequested, m_chat,
            &ChatController::showVersion);
    return center;
}

MainWindow::~MainWindow() {
    // Quitting without a close event (QApplication::quit) still keeps the answer so far.
    m_chat->stopAndKeep();
    // Deletions waiting for Undo become final while the store (a member, gone before
    // the child widgets) is still there.
    m_conversationPanel->finishDeletions();
}

void MainWindow::connectChat() {
    connect(m_composer, &MessageComposer::sendRequested, m_chat, &ChatController::send);
    connect(m_composer, &MessageComposer::stopRequested, m_chat, &ChatController::stop);
    auto* escape = new QShortcut(QKeySequence(Qt::Key_Escape), this);
    connect(escape, &QShortcut::activated, m_chat, [this] {
        if (m_engine->isBusy())
            m_chat->stop();
        else
            m_chat->cancelEdit();
    });
    connect(m_chat, &ChatController::status, this, [this](const QString& text) {
        statusBar()->showMessage(tr("%1 · %2").arg(m_loader->modelName(), text));
    });
    connect(m_chat, &ChatController::saveFailed, this, [this](const QString& why) {
        statusBar()->showMessage(tr("Could not save the conversation: %1").arg(why));
    });
    // Every save written: a new conversation's entry, a new title, the date and the first
    // place; highlighted while it is still the one shown.
    connect(m_chat, &ChatController::conversationSaved, m_conversationPanel,
            [this](const ConversationStore::Summary& summary) {
                m_conversationPanel->conversationSaved(summary,
                                                       summary.id == currentConversationId());
            });
    connect(m_chat, &ChatController::answerFailed, this, &MainWindow::showAnswerFailed);
    connect(m_chat, &ChatController::systemPromptChanged, this, &MainWindow::updatePromptBanner);
    // A server's usage arrives with its last chunk: only then are batched deltas split.
    // Done in the same slot, before answerFinished, so whoever waits on that signal sees
    // the final bars (a second queued connection could run after it).
    connect(m_chat, &ChatController::answerFinished, this, [this](const GenerationSummary& s) {
        m_timing->finishAnswer(s.generatedTokens);
        emit answerFinished();
    });
    ConversationModel* conversation = m_conversation->conversation();
    connect(conversation, &QAbstractItemModel::rowsInserted, this,
            &MainWindow::updateRegenerateAction);
    connect(conversation, &QAbstractItemModel::rowsRemoved, this,
            &MainWindow::updateRegenerateAction);
    connect(conversation, &QAbstractItemModel::modelReset, this,
            &MainWindow::updateRegenerateAction);
    // An answer ending (stopped or not) changes its row, not the rows.
    connect(conversation, &QAbstractItemModel::dataChanged, this,
            &MainWindow::updateRegenerateAction);
}

const QString& MainWindow::currentConversationId() const {
    return m_chat->conversationId();
}

// A conversation ending with a question offers to answer it instead.
void MainWindow::updateRegenerateAction() {
    QAction* action = m_menus->regenerateAction();
    const ConversationModel* conversation = m_conversation->conversation();
    const int rows = conversation->rowCount();
    const bool question =
        rows > 0 &&
        conversation->index(rows - 1).data(ConversationModel::RoleNameRole).toString() ==
            QLatin1String("user");
    action->setText(question ? tr("&Answer the last question") : tr("&Regenerate the last answer"));
    m_menus->continueAction()->setEnabled(m_chat->canContinue());
}

void MainWindow::newChat() {
    m_chat->stopAndKeep();
    m_conversation->conversation()->clear();
    m_engine->resetConversation();
    m_chat->setConversationId({});
    m_writer->release(); // after the old one's last save; the next save claims the new one
    m_conversationPanel->setCurrentConversation({});
    m_timing->clear();
    m_composer->clear();
    m_chat->showConversationSettings({}); // Settings' values; Think stays as it is
    m_composer->setFocus();
}

void MainWindow::updatePromptBanner() {
    const ConversationModel* conversation = m_conversation->conversation();
    m_promptBanner->setPrompt(m_chat->systemPrompt(), !conversation->systemPromptChosen());
}

QListWidget* MainWindow::conversationList() const {
    return m_conversationPanel->list();
}

void MainWindow::refreshConversationList() {
    m_conversationPanel->setCurrentConversation(currentConversationId());
    m_conversationPanel->refresh();
}

void MainWindow::openConversation(const QString& id) {
    if (id == currentConversationId()) return;
    m_chat->stopAndKeep(); // saved where it was written, not in the conversation opened
    m_writer->flush();     // written before this thread claims and reads another one
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
        m_conversationPanel->setCurrentConversation(
            currentConversationId()); // the shown one stays lit
        box.exec();
        return;
    }
    try {
        showConversation(id, m_store->load(id));
    } catch (const std::exception& e) {
        m_store->release();
        m_conversationPanel->setCurrentConversation(currentConversationId());
        QMessageBox box(QMessageBox::Warning, tr("Could not open the conversation"),
                        tr("The saved conversation could not be read; the file was left as it is."),
                        QMessageBox::Ok, this);
        box.setTextFormat(Qt::PlainText);
        box.setDetailedText(QString::fromUtf8(e.what()));
        box.exec();
    }
}

void MainWindow::showConversation(const QString& id, const QVector<ChatTurn>& turns) {
    m_conversation->conversation()->setTurns(turns);
    m_conversation->scrollToBottom(); // a reopened chat goes on at its end
    m_chat->setConversationId(id);
    // How it answered (sampling, Think, longest answer), and the banner's prompt.
    m_chat->showConversationSettings(m_store->loadSettings(id));
    m_conversationPanel->setCurrentConversation(id);
    m_timing->clear(); // the chart was another conversation's answer
    const QString title = m_store->storedTitle(id);
    statusBar()->showMessage(
        tr("Opened \"%1\"").arg(title.isEmpty() ? ConversationStore::titleFor(turns) : title),
        5000);
}

bool MainWindow::importConversation(const QString& file) {
    try {
        const QVector<ChatTurn> turns = ConversationStore::toTurns(
            k3::readTranscript(file.toStdString()), QFileInfo(file).absolutePath());
        m_store->importImages({turns.begin(), turns.end()}); // copies, as attaching makes
        m_chat->stopAndKeep(); // the open conversation's last save lands before this one's
        m_writer->flush();
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

void MainWindow::loadStartupModel() {
    reopenLastConversation();
    m_loader->loadStartupModel();
}

void MainWindow::reopenLastConversation() {
    // Not over one shown already (--conversation imports one before the model loads).
    if (!currentConversationId().isEmpty() || m_conversation->conversation()->rowCount() > 0)
        return;
    const QString id = AppSettings::loadWindow().conversationId;
    if (id.isEmpty() || !QFileInfo::exists(m_store->pathFor(id))) return; // deleted since
    // Quietly: one in use elsewhere or unreadable stays listed, and opening it says why.
    m_writer->flush();
    try {
        m_store->claim(id);
        showConversation(id, m_store->load(id));
    } catch (const std::exception&) {
        m_store->release();
    }
}

namespace {
// Where the folder dialog opens: the model folder last used, else home.
QString lastModelDirectory() {
    const QString dir = Settings::value(SettingsTable::modelDirectory);
    return dir.isEmpty() ? QDir::homePath() : dir;
}
} // namespace

void MainWindow::openModelFolder() {
    const QString dir = QFileDialog::getExistingDirectory(
        this, tr("Choose a checkpoint folder (config.json, shards, tokenizer)"),
        lastModelDirectory());
    if (!dir.isEmpty()) m_loader->loadModelFolder(dir);
}

const k3::LaunchConfig& MainWindow::launchConfig() const {
    return m_loader->launchConfig();
}

void MainWindow::showRemoteServerDialog() {
    auto* dialog = new RemoteServerDialog(this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    connect(dialog, &QDialog::accepted, this, [this, dialog] {
        RemoteServerForm* form = dialog->form();
        m_loader->connectRemote(form->url(), form->model(), form->apiKey());
    });
    dialog->open();
}

void MainWindow::connectLoader() {
    connect(m_loader, &ModelLoader::loadStarted, this, [this](const QString& status) {
        m_chat->stop();
        m_composer->setReady(false);
        statusBar()->showMessage(status);
    });
    connect(m_loader, &ModelLoader::ready, this,
            [this](const QString& chatModel, bool thinks, const QString& placeholder) {
                m_chat->setModel(chatModel, thinks);
                m_composer->setReady(true);
                m_conversation->setPlaceholderText(placeholder);
                statusBar()->showMessage(m_loader->readyStatus());
                emit modelReady();
            });
    connect(m_loader, &ModelLoader::failed, this, [this](bool kept) {
        statusBar()->showMessage(kept ? m_loader->readyStatus() : tr("No model loaded"));
        m_composer->setReady(kept);
    });
    connect(m_loader, &ModelLoader::setupWizardRequested, this, &MainWindow::showSetupWizard);
}

void MainWindow::measureSavedStates() {
    const QStringList ids = m_conversationPanel->listedIds();
    QStringList transcripts;
    for (const QString& id : ids) transcripts << m_store->pathFor(id);
    if (!ids.isEmpty()) m_engine->measureSavedStates(ids, transcripts);
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

void MainWindow::chooseConversationToImport() {
    auto* dialog = new QFileDialog(this, tr("Import a conversation"), QDir::homePath(),
                                   tr("Conversations (*.jsonl);;All files (*)"));
    dialog->setObjectName(QStringLiteral("importDialog"));
    dialog->setFileMode(QFileDialog::ExistingFile);
    dialog->setAcceptMode(QFileDialog::AcceptOpen);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    connect(dialog, &QFileDialog::fileSelected, this,
            [this](const QString& file) { importConversation(file); });
    dialog->open();
}

void MainWindow::showAnswerFailed(const QString& message) {
    // Not exec(): the window keeps running (and can quit) while the box is up.
    auto* box = new QMessageBox(
        QMessageBox::Warning, tr("The answer failed"),
        m_loader->remoteUrl().isEmpty()
            ? tr("The engine stopped with an error; the conversation is kept.")
            : tr("The request to the server at %1 failed; the conversation is kept.")
                  .arg(m_loader->remoteUrl()),
        QMessageBox::Ok, this);
    box->setObjectName(QStringLiteral("answerFailedBox"));
    box->setTextFormat(Qt::PlainText);
    box->setInformativeText(message); // what to do is in it (a context too small, ...)
    box->setDetailedText(message);
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->open();
}

void MainWindow::showSetupWizard() {
    if (m_wizard && m_wizard->isVisible()) {
        m_wizard->raise(); // one wizard at a time
        m_wizard->activateWindow();
        return;
    }
    auto* wizard = new SetupWizard(this);
    m_wizard = wizard;
    wizard->setAttribute(Qt::WA_DeleteOnClose);
    // Threads, chunk and context as saved: the plan shown is the plan that loads.
    wizard->memoryPage()->setBaseConfig(AppSettings::loadLaunch());
    // The whole choice, budgets included, is saved by onModelLoaded once it has opened:
    // a choice that fails never replaces the setup that works.
    connect(wizard, &SetupWizard::setupFinished, this,
            [this](const k3::LaunchConfig& config) { m_loader->loadModel(config); });
    connect(wizard, &SetupWizard::serverChosen, m_loader, &ModelLoader::connectRemote);
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
        updatePromptBanner(); // a new chat starts with the default shown
        m_chat->setImagePatchLimit(after.imagePatchLimit); // attached images' cost
        // Threads apply to the next message (the engine thread sets them per message);
        // anything else of the launch reopens the model with it. The model loaded now
        // stays until the new one has opened, and stays if it fails (onLoadFailed).
        m_loader->setThreads(after.launch.threads);
        k3::LaunchConfig changed = after.launch;
        changed.threads = before.launch.threads;
        if (changed != before.launch && !after.launch.modelDir.empty())
            m_loader->loadModel(after.launch);
    });
    dialog->open();
}

void MainWindow::showSystemPrompt() {
    auto* dialog = new SystemPromptDialog(m_chat, this);
    dialog->setAttribute(Qt::WA_DeleteOnClose);
    dialog->open();
}

void MainWindow::applySettings() {
    const AppSettings settings = AppSettings::load();
    AppSettings::applyTheme(settings.theme);
    m_composer->setThinking(settings.thinking);
    m_composer->setThinkingEffort(settings.thinkingEffort);
    updatePromptBanner(); // a new chat's default may have changed
}

void MainWindow::showAbout() {
    AboutDialog dialog(this);
    dialog.exec();
}

void MainWindow::restoreWindowSettings() {
    const AppSettings::Window saved = AppSettings::loadWindow();
    if (!saved.geometry.isEmpty()) restoreGeometry(saved.geometry);
    // Qt ignores a geometry saved at another scale (QT_SCALE_FACTOR, a screen of another
    // size), which leaves the default size; either may be larger than this screen.
    WindowPlacement::fitToScreen(this);
    if (!saved.docks.isEmpty()) QMainWindow::restoreState(saved.docks);
    if (!saved.splitter.isEmpty()) m_splitter->restoreState(saved.splitter);
}

void MainWindow::closeWithoutAsking() {
    m_quitConfirmed = true;
    close();
}

void MainWindow::askToQuitMidAnswer() {
    if (m_quitBox && m_quitBox->isVisible()) {
        m_quitBox->raise(); // asked once
        return;
    }
    auto* box = new QMessageBox(QMessageBox::Question, tr("Quit k3chat?"),
                                tr("An answer is being written. Quit anyway? The answer so far "
                                   "is kept."),
                                QMessageBox::NoButton, this);
    box->setObjectName(QStringLiteral("quitDuringAnswerBox"));
    m_quitBox = box;
    box->addButton(tr("Quit"), QMessageBox::AcceptRole)->setObjectName(QStringLiteral("quit"));
    box->addButton(QMessageBox::Cancel);
    box->setCheckBox(new QCheckBox(tr("Don't ask again")));
    box->setAttribute(Qt::WA_DeleteOnClose);
    connect(box, &QMessageBox::buttonClicked, this, [this, box](QAbstractButton* button) {
        if (box->buttonRole(button) != QMessageBox::AcceptRole) return;
        if (box->checkBox()->isChecked())
            Settings::setValue(SettingsTable::askBeforeQuittingMidAnswer, false);
        m_quitConfirmed = true;
        QTimer::singleShot(0, this, &QWidget::close);
    });
    box->open();
}

void MainWindow::closeEvent(QCloseEvent* event) {
    if (m_chat->isAnswering() && !m_quitConfirmed &&
        Settings::value(SettingsTable::askBeforeQuittingMidAnswer)) {
        event->ignore();
        askToQuitMidAnswer();
        return;
    }
    m_quitConfirmed = false;
    m_chat->stopAndKeep(); // the answer so far, marked stopped, is on disk
    // An open wizard is a separate window: it must not keep the app alive.
    if (m_wizard) m_wizard->close();
    AppSettings::saveWindow(
        {saveGeometry(), m_splitter->saveState(), saveState(), currentConversationId()});
    event->accept();
}
