#pragma once

#include <QDialog>

class ChatController;
class QPlainTextEdit;

// Edit > System prompt…: the open conversation's system prompt (a new one shows the
// Settings default it will start with). OK hands it to the ChatController, which uses it
// from the next answer on and saves it in the conversation's transcript.
class SystemPromptDialog : public QDialog {
    Q_OBJECT
public:
    SystemPromptDialog(ChatController* chat, QWidget* parent = nullptr);

    QPlainTextEdit* editor() const { return m_editor; }
    void accept() override;

private:
    ChatController* m_chat;
    QPlainTextEdit* m_editor;
};
