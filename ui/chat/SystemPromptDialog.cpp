#include "chat/SystemPromptDialog.h"

#include "chat/ChatController.h"

#include <QDialogButtonBox>
#include <QDoubleSpinBox>
#include <QFormLayout>
#include <QLabel>
#include <QPlainTextEdit>
#include <QSpinBox>
#include <QVBoxLayout>

namespace {
// Below every real value: the box reads "as in Settings" there.
constexpr double kUnsetTemperature = -0.01;
constexpr double kUnsetTopP = 0.0;
} // namespace

SystemPromptDialog::SystemPromptDialog(ChatController* chat, QWidget* parent)
    : QDialog(parent), m_chat(chat), m_editor(new QPlainTextEdit),
      m_temperature(new QDoubleSpinBox), m_topP(new QDoubleSpinBox), m_maxTokens(new QSpinBox) {
    setObjectName(QStringLiteral("systemPromptDialog"));
    setWindowTitle(tr("This conversation"));
    auto* label = new QLabel(tr("&System prompt: what the model is told before this "
                                "conversation (empty: nothing). It applies from the next answer "
                                "on."));
    label->setWordWrap(true);
    m_editor->setObjectName(QStringLiteral("systemPromptEdit"));
    m_editor->setAccessibleName(tr("System prompt of this conversation"));
    m_editor->setTabChangesFocus(true);
    m_editor->setPlainText(chat->systemPrompt());
    label->setBuddy(m_editor);

    const ConversationSettings& own = chat->conversationSettings();
    const QString unset = tr("as in Settings");
    m_temperature->setObjectName(QStringLiteral("conversationTemperature"));
    m_temperature->setAccessibleName(tr("Temperature of this conversation"));
    m_temperature->setRange(kUnsetTemperature, 2.0);
    m_temperature->setDecimals(2);
    m_temperature->setSingleStep(0.05);
    m_temperature->setSpecialValueText(unset);
    m_temperature->setToolTip(tr("0.00: always the most likely token (greedy)."));
    m_temperature->setValue(own.temperature.value_or(kUnsetTemperature));
    m_topP->setObjectName(QStringLiteral("conversationTopP"));
    m_topP->setAccessibleName(tr("Top-p of this conversation"));
    m_topP->setRange(kUnsetTopP, 1.0);
    m_topP->setDecimals(2);
    m_topP->setSingleStep(0.05);
    m_topP->setSpecialValueText(unset);
    m_topP->setValue(own.topP.value_or(kUnsetTopP));
    m_maxTokens->setObjectName(QStringLiteral("conversationMaxTokens"));
    m_maxTokens->setAccessibleName(tr("Longest answer of this conversation, in tokens"));
    m_maxTokens->setRange(0, 1'000'000);
    m_maxTokens->setSpecialValueText(unset);
    m_maxTokens->setSuffix(tr(" tokens"));
    m_maxTokens->setValue(own.maxTokens.value_or(0));
    auto* form = new QFormLayout;
    form->addRow(tr("&Temperature:"), m_temperature);
    form->addRow(tr("Top-&p:"), m_topP);
    form->addRow(tr("&Longest answer:"), m_maxTokens);
    auto* note = new QLabel(tr("Think is the switch under the conversation; the choice is kept "
                               "with the conversation too."));
    note->setWordWrap(true);

    auto* buttons = new QDialogButtonBox(QDialogButtonBox::Ok | QDialogButtonBox::Cancel);
    auto* layout = new QVBoxLayout(this);
    layout->addWidget(label);
    layout->addWidget(m_editor, 1);
    layout->addLayout(form);
    layout->addWidget(note);
    layout->addWidget(buttons);
    connect(buttons, &QDialogButtonBox::accepted, this, &SystemPromptDialog::accept);
    connect(buttons, &QDialogButtonBox::rejected, this, &SystemPromptDialog::reject);
    resize(480, 360);
}

void SystemPromptDialog::accept() {
    ConversationSettings settings = m_chat->conversationSettings();
    settings.temperature.reset();
    settings.topP.reset();
    settings.maxTokens.reset();
    if (m_temperature->value() > kUnsetTemperature) settings.temperature = m_temperature->value();
    if (m_topP->value() > kUnsetTopP) settings.topP = m_topP->value();
    if (m_maxTokens->value() > 0) settings.maxTokens = m_maxTokens->value();
    m_chat->setConversationSettings(settings);
    m_chat->setSystemPrompt(m_editor->toPlainText());
    QDialog::accept();
}
