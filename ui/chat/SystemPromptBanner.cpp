#include "chat/SystemPromptBanner.h"

#include <QHBoxLayout>
#include <QLabel>
#include <QPushButton>

#include <algorithm>

SystemPromptBanner::SystemPromptBanner(QWidget* parent)
    : QWidget(parent), m_label(new QLabel), m_change(new QPushButton(tr("C&hange…"))) {
    setObjectName(QStringLiteral("systemPromptBanner"));
    m_label->setObjectName(QStringLiteral("systemPromptBannerText"));
    m_label->setTextFormat(Qt::PlainText); // the user's text, never markup
    m_label->setForegroundRole(QPalette::PlaceholderText);
    m_label->setMinimumWidth(0);
    m_label->setSizePolicy(QSizePolicy::Ignored, QSizePolicy::Preferred);
    m_change->setObjectName(QStringLiteral("systemPromptChangeButton"));
    m_change->setToolTip(tr("The system prompt, temperature, top-p and longest answer of this "
                            "conversation"));
    auto* layout = new QHBoxLayout(this);
    layout->setContentsMargins(4, 0, 4, 0);
    layout->addWidget(m_label, 1);
    layout->addWidget(m_change);
    connect(m_change, &QPushButton::clicked, this, &SystemPromptBanner::changeRequested);
    hide();
}

void SystemPromptBanner::setPrompt(const QString& prompt, bool isDefault) {
    m_prompt = prompt.simplified();
    m_isDefault = isDefault;
    setVisible(!m_prompt.isEmpty());
    updateText();
}

void SystemPromptBanner::resizeEvent(QResizeEvent* event) {
    QWidget::resizeEvent(event);
    updateText(); // elided to the width there is
}

void SystemPromptBanner::updateText() {
    const QString lead = m_isDefault ? tr("This chat starts with the system prompt from Settings:")
                                     : tr("System prompt:");
    m_full = lead + QLatin1Char(' ') + m_prompt;
    m_label->setToolTip(m_prompt);
    // The banner's width less the button's: the label's own is not laid out yet here.
    const int width = std::max(100, this->width() - m_change->sizeHint().width() - 24);
    m_label->setText(m_label->fontMetrics().elidedText(m_full, Qt::ElideRight, width));
}
