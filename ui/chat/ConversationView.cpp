#include "chat/ConversationView.h"

#include "chat/ConversationModel.h"
#include "chat/MessageDelegate.h"

#include <QPainter>
#include <QScrollBar>

ConversationView::ConversationView(QWidget* parent)
    : QListView(parent), m_messages(new ConversationModel(this)), m_delegate(new MessageDelegate(this)),
      m_placeholder(tr("No messages yet. Load a model, then type below to start a chat.")) {
    setObjectName(QStringLiteral("conversationView"));
    setModel(m_messages);
    setItemDelegate(m_delegate);
    setSelectionMode(QAbstractItemView::NoSelection);
    setVerticalScrollMode(QAbstractItemView::ScrollPerPixel);
    setResizeMode(QListView::Adjust);
    setWordWrap(true);
    setFrameShape(QFrame::NoFrame);
    setMouseTracking(true);
    connect(m_delegate, &MessageDelegate::thinkingToggled, m_messages, &ConversationModel::toggleThinking);
    // Follow a streaming answer while the user is at the bottom; keep their place otherwise.
    connect(m_messages, &QAbstractItemModel::dataChanged, this, [this] {
        QScrollBar* bar = verticalScrollBar();
        const bool atBottom = bar->value() >= bar->maximum() - 4;
        scheduleDelayedItemsLayout();
        if (atBottom) scrollToBottom();
    });
    connect(m_messages, &QAbstractItemModel::rowsInserted, this, [this] { scrollToBottom(); });
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

void ConversationView::resizeEvent(QResizeEvent* event) {
    QListView::resizeEvent(event);
    scheduleDelayedItemsLayout(); // message heights depend on the width
}
