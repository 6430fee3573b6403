#include "chat/ConversationView.h"

#include <QPainter>
#include <QStandardItemModel>

ConversationView::ConversationView(QWidget* parent)
    : QListView(parent), m_messages(new QStandardItemModel(this)),
      m_placeholder(tr("No messages yet. Load a model, then type below to start a chat.")) {
    setObjectName(QStringLiteral("conversationView"));
    setModel(m_messages);
    setSelectionMode(QAbstractItemView::NoSelection);
    setVerticalScrollMode(QAbstractItemView::ScrollPerPixel);
    setWordWrap(true);
    setFrameShape(QFrame::NoFrame);
}

int ConversationView::messageCount() const { return m_messages->rowCount(); }

QString ConversationView::placeholderText() const { return m_placeholder; }

void ConversationView::setPlaceholderText(const QString& text) {
    m_placeholder = text;
    viewport()->update();
}

void ConversationView::paintEvent(QPaintEvent* event) {
    QListView::paintEvent(event);
    if (messageCount() > 0) return;
    QPainter painter(viewport());
    painter.setPen(palette().color(QPalette::PlaceholderText));
    painter.drawText(viewport()->rect().adjusted(24, 24, -24, -24),
                     Qt::AlignCenter | Qt::TextWordWrap, m_placeholder);
}
