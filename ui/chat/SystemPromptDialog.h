#pragma once

#include <QDialog>

class ChatController;
class QDoubleSpinBox;
class QPlainTextEdit;
class QSpinBox;

// Edit > This conversation… : the open conversation's system prompt (a new one shows the
// Settings default it will start with) and how it answers where it differs from Settings
// (temperature, top-p, longest answer; Think is the composer's switch, kept with the
// conversation too). OK hands them to the ChatController, which uses them from the next
// answer on and saves them with the conversation.
class SystemPromptDialog : public QDialog {
    Q_OBJECT
public:
    SystemPromptDialog(ChatController* chat, QWidget* parent = nullptr);

    QPlainTextEdit* editor() const { return m_editor; }
    void accept() override;

private:
    ChatController* m_chat;
    QPlainTextEdit* m_editor;
    QDoubleSpinBox* m_temperature; // at its minimum: as in Settings
    QDoubleSpinBox* m_topP;        // at its minimum: as in Settings
    QSpinBox* m_maxTokens;         // 0: as in Settings
};
