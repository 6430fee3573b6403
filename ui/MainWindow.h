#pragma once

#include <QMainWindow>
#include <QPointer>

#include <memory>

#include "worker/LaunchConfigMetaType.h"

class ChatController;
class ConversationListPanel;
class ConversationStore;
struct ChatTurn;
class ConversationView;
class TokenTimingPanel;
class TranscriptWriter;
class EngineController;
struct ModelInfo;
class MainMenus;
class ModelLoader;
class MessageComposer;
class QMessageBox;
class SetupWizard;
class FindBar;
class SystemPromptBanner;
class QAction;
class QListWidget;
class QSplitter;

// The main window: conversations on the left, the current one in the middle with the
// composer under it. Geometry and splitter positions are remembered across runs.
class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);
    ~MainWindow() override;

    ConversationView* conversationView() const { return m_conversation; }
    MessageComposer* composer() const { return m_composer; }
    ConversationListPanel* conversationPanel() const { return m_conversationPanel; }
    QListWidget* conversationList() const;
    EngineController* engine() const { return m_engine; }
    ConversationStore* store() const { return m_store.get(); }
    // Writes the open conversation off the GUI thread (flush() before reading its files).
    TranscriptWriter* transcriptWriter() const { return m_writer.get(); }
    TokenTimingPanel* timingPanel() const { return m_timing; }
    FindBar* findBar() const { return m_findBar; }
    ChatController* chat() const { return m_chat; }
    // Which model answers: loads a folder, a launch, the demo, or connects to a server.
    ModelLoader* loader() const { return m_loader; }
    const QString& currentConversationId() const;
    // The configuration of the local model loaded last (or loading now).
    const k3::LaunchConfig& launchConfig() const;

    // The conversation as Markdown, for File > Export.
    static QString conversationMarkdown(const QVector<ChatTurn>& turns);

    // Imports the JSONL transcript `file` (k3 --chat --history's format) as a new
    // conversation and opens it; the file itself is not changed. On failure a non-modal
    // message box (plain text: it quotes the file) says why, and false is returned.
    bool importConversation(const QString& file);

public slots:
    void newChat();
    void exportConversation();
    // File > Import conversation…: a file dialog (not blocking) whose choice goes to
    // importConversation (before: only `k3chat --conversation FILE`).
    void chooseConversationToImport();
    void showAbout();
    void showSetupWizard();
    // Edit > Preferences (Ctrl+,): opens the Settings dialog without blocking.
    void showSettings();
    // Edit > System prompt…: the open conversation's system prompt, without blocking.
    void showSystemPrompt();
    void openModelFolder();
    // Model > Use a server…: the server form in a dialog; Connect switches to it.
    void showRemoteServerDialog();
    // Quitting while an answer is written asks first (a non-modal box,
    // "quitDuringAnswerBox") unless SettingsTable::askBeforeQuittingMidAnswer is off. The
    // answer so far is kept either way.
    // Closes without that question (--quit-after); the answer so far is still kept.
    void closeWithoutAsking();
    void openConversation(const QString& id);
    void refreshConversationList();
    // At start: the last model used, else the bundled demo, else nothing.
    void loadStartupModel();

signals:
    void modelReady();
    void answerFinished();

protected:
    void closeEvent(QCloseEvent* event) override;

private:
    QWidget* buildSidebar();
    QWidget* buildCenter();
    // The chat and the status bar follow what ModelLoader reports.
    void connectLoader();
    // Asks the engine what it keeps on disk of each listed conversation (the list shows it).
    void measureSavedStates();
    void connectChat();
    void showAnswerFailed(const QString& message);
    void askToQuitMidAnswer();
    void updateRegenerateAction();
    void restoreWindowSettings();
    // The conversation open at the last quit, if it is still there (at start).
    void reopenLastConversation();
    // Shows the claimed conversation `id` read from the store.
    void showConversation(const QString& id, const QVector<ChatTurn>& turns);
    // Theme and the composer's thinking defaults from the stored settings.
    void applySettings();
    // The banner says the open conversation's system prompt (a new chat: the default).
    void updatePromptBanner();

    QSplitter* m_splitter;
    ConversationListPanel* m_conversationPanel = nullptr;
    ConversationView* m_conversation;
    MessageComposer* m_composer;
    FindBar* m_findBar;
    SystemPromptBanner* m_promptBanner;
    EngineController* m_engine;
    std::unique_ptr<ConversationStore> m_store;
    // After the store: gone first, writing what is still queued into it (quitting loses
    // nothing).
    std::unique_ptr<TranscriptWriter> m_writer;
    TokenTimingPanel* m_timing;
    ModelLoader* m_loader; // which model answers, its launch and status line
    ChatController* m_chat;
    std::unique_ptr<MainMenus> m_menus;
    QPointer<SetupWizard> m_wizard;  // the setup wizard while it exists (one at a time)
    QPointer<QMessageBox> m_quitBox; // "Quit anyway?" while it is open
    bool m_quitConfirmed = false;    // "Quit anyway" was chosen mid-answer
};
