#include "chat/SystemPromptDialog.h"

#include "chat/ChatController.h"

#include <QDialogButtonBox>
#include <QLabel>
#include <QPlainTextEdit>
#include <QVBoxLayout>

SystemPromptDialog::SystemPromptDialog(ChatController* chat, QWidget* parent)
    : QDialog(parent), m_chat(chat), m_editor(new QPlainTextEdit) {
    setObjectName(QStringLiteral("systemPromptDialog"));
    setWindowTitle(tr("System prompt"));
    auto* label = new QLabel(tr("What the model is told before this conversation (empty: "
                                "nothing). It applies from the next answer on."));
    label->setWordWrap(true);
    m_editor->setObjectName(QStringLiteral("systemPromptEdit"));
    m_editor->setAccessibleName(tr("System prompt of this conversation"));
    m_editor->setTabChangesFocus(true);
    m_editor->setPlainText(chat->systemPrompt());
    label->setBuddy(m_editor);
    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(label);
    layout->addWidget(m_editor, 1);
    layout->addWidget(buttons);
    connect(buttons, &QDialogButtonBox::accepted, this, &SystemPromptDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &SystemPromptDialog::reject);
    resize(480, 260);
}

void SystemPromptDialog::accept() {
    m_chat->setSystemPrompt(m_editor->toPlainText());
    QDialog::accept();
}
