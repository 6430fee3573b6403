#pragma once

#include <QMainWindow>

class ConversationView;
class MessageComposer;
class QListWidget;
class QLineEdit;
class QSplitter;

// The main window: conversations on the left, the current one in the middle with the
// composer under it. Geometry and splitter positions are remembered across runs.
class MainWindow : public QMainWindow {
    Q_OBJECT
public:
    explicit MainWindow(QWidget* parent = nullptr);

    ConversationView* conversationView() const { return m_conversation; }
    MessageComposer* composer() const { return m_composer; }
    QListWidget* conversationList() const { return m_conversationList; }

public slots:
    void newChat();
    void showAbout();
    void showSetupWizard();

protected:
    void closeEvent(QCloseEvent* event) override;

private:
    void createMenus();
    void restoreState();

    QSplitter* m_splitter;
    QListWidget* m_conversationList;
    QLineEdit* m_search;
    ConversationView* m_conversation;
    MessageComposer* m_composer;
};
