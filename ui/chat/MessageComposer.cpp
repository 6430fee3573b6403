#include "chat/MessageComposer.h"

#include <QHBoxLayout>
#include <QKeyEvent>
#include <QPlainTextEdit>
#include <QPushButton>

MessageComposer::MessageComposer(QWidget* parent)
    : QWidget(parent), m_editor(new QPlainTextEdit(this)),
      m_sendButton(new QPushButton(tr("Send"), this)) {
    m_editor->setObjectName(QStringLiteral("composerEditor"));
    m_sendButton->setObjectName(QStringLiteral("sendButton"));
    m_editor->setPlaceholderText(tr("Type a message (Enter sends, Shift+Enter for a new line)"));
    m_editor->setTabChangesFocus(true);
    m_editor->setMaximumHeight(120);
    m_editor->installEventFilter(this);

    auto* layout = new QHBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(m_editor, 1);
    layout->addWidget(m_sendButton, 0, Qt::AlignBottom);

    connect(m_sendButton, &QPushButton::clicked, this, &MessageComposer::trySend);
    connect(m_editor, &QPlainTextEdit::textChanged, this, &MessageComposer::updateSendButton);
    updateSendButton();
}

QString MessageComposer::text() const { return m_editor->toPlainText(); }

void MessageComposer::clear() { m_editor->clear(); }

void MessageComposer::setReady(bool ready) {
    m_ready = ready;
    updateSendButton();
}

bool MessageComposer::eventFilter(QObject* watched, QEvent* event) {
    if (watched == m_editor && event->type() == QEvent::KeyPress) {
        auto* key = static_cast<QKeyEvent*>(event);
        const bool enter = key->key() == Qt::Key_Return || key->key() == Qt::Key_Enter;
        if (enter && !(key->modifiers() & Qt::ShiftModifier)) {
            trySend();
            return true;
        }
    }
    return QWidget::eventFilter(watched, event);
}

void MessageComposer::trySend() {
    const QString message = text().trimmed();
    if (!m_ready || message.isEmpty()) return;
    emit sendRequested(message);
    clear();
}

void MessageComposer::updateSendButton() {
    m_sendButton->setEnabled(m_ready && !text().trimmed().isEmpty());
    m_sendButton->setToolTip(m_ready ? QString() : tr("Load a model first (Model menu)"));
}
