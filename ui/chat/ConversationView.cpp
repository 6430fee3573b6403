#include "chat/ConversationView.h"

#include "chat/CodeBlockHighlighter.h"
#include "chat/ConversationModel.h"
#include "chat/MessageDelegate.h"
#include "chat/SafeTextDocument.h"

#include <QAction>
#include <QClipboard>
#include <QContextMenuEvent>
#include <QGuiApplication>
#include <QMenu>
#include <QPainter>
#include <QScrollBar>
#include <QTextCursor>
#include <QTextDocument>

ConversationView::ConversationView(QWidget* parent)
    : QListView(parent), m_messages(new ConversationModel(this)),
      m_delegate(new MessageDelegate(this)),
      m_placeholder(tr("No messages yet. Load a model, then type below to start a chat.")) {
    setObjectName(QStringLiteral("conversationView"));
    setAccessibleName(tr("Conversation"));
    setModel(m_messages);
    setItemDelegate(m_delegate);
    setSelectionMode(QAbstractItemView::NoSelection);
    setVerticalScrollMode(QAbstractItemView::ScrollPerPixel);
    setResizeMode(QListView::Adjust);
    setWordWrap(true);
    setFrameShape(QFrame::NoFrame);
    setMouseTracking(true);
    connect(m_delegate, &MessageDelegate::thinkingToggled, m_messages,
            &ConversationModel::toggleThinking);
    connect(m_delegate, &MessageDelegate::copyCodeRequested, this,
            &ConversationView::copyCodeBlock);
    // Follow a streaming answer while the user is at the bottom; keep their place otherwise.
    connect(m_messages, &QAbstractItemModel::dataChanged, this, [this] {
        QScrollBar* bar = verticalScrollBar();
        const bool atBottom = bar->value() >= bar->maximum() - 4;
        scheduleDelayedItemsLayout();
        if (atBottom && m_query.isEmpty()) scrollToBottom();
    });
    connect(m_messages, &QAbstractItemModel::rowsInserted, this, [this] { scrollToBottom(); });
    // Matches move when messages change: recount them without scrolling.
    const auto refind = [this] {
        if (m_query.isEmpty()) return;
        collectMatches();
        if (m_current >= matchCount()) m_current = matchCount() - 1;
        if (m_current < 0 && matchCount() > 0) m_current = 0;
        if (m_current >= 0)
            m_delegate->setCurrentMatch(m_matches[m_current].row, m_matches[m_current].position);
        emit matchChanged(m_current, matchCount());
    };
    connect(m_messages, &QAbstractItemModel::modelReset, this, refind);
    connect(m_messages, &QAbstractItemModel::rowsRemoved, this, refind);
    connect(m_messages, &QAbstractItemModel::dataChanged, this, refind);

    auto* copy = new QAction(tr("&Copy message"), this);
    copy->setObjectName(QStringLiteral("copyMessageAction"));
    copy->setShortcut(QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_C));
    connect(copy, &QAction::triggered, this, &ConversationView::copyCurrentMessage);
    addAction(copy);
}

int ConversationView::messageCount() const {
    return m_messages->rowCount();
}

QString ConversationView::placeholderText() const {
    return m_placeholder;
}

void ConversationView::setPlaceholderText(const QString& text) {
    m_placeholder = text;
    viewport()->update();
}

int ConversationView::currentMessageRow() const {
    if (currentIndex().isValid()) return currentIndex().row();
    return messageCount() - 1;
}

int ConversationView::lastUserRow() const {
    for (int row = messageCount() - 1; row >= 0; --row)
        if (m_messages->index(row).data(ConversationModel::RoleNameRole).toString() ==
            QLatin1String("user"))
            return row;
    return -1;
}

QStyleOptionViewItem ConversationView::optionFor(const QModelIndex& index) const {
    QStyleOptionViewItem option;
    initViewItemOption(&option);
    option.rect = visualRect(index);
    return option;
}

QRect ConversationView::codeCopyButtonRect(int row, int block) {
    executeDelayedItemsLayout();
    const QModelIndex index = m_messages->index(row);
    if (!index.isValid()) return {};
    const QVector<QRect> rects = m_delegate->copyButtonRects(optionFor(index), index);
    return block >= 0 && block < rects.size() ? rects.at(block) : QRect();
}

void ConversationView::copyMessage(int row) {
    const QModelIndex index = m_messages->index(row);
    if (!index.isValid()) return;
    QGuiApplication::clipboard()->setText(index.data(ConversationModel::ContentRole).toString());
    emit copied(tr("the message"));
}

void ConversationView::copyCurrentMessage() {
    copyMessage(currentMessageRow());
}

void ConversationView::copyCodeBlock(int row, int block) {
    const QString content = m_messages->index(row).data(ConversationModel::ContentRole).toString();
    SafeTextDocument doc;
    MessageDelegate::buildBody(doc, content, font());
    const auto blocks = CodeBlockHighlighter::codeBlocks(doc, content);
    if (block < 0 || block >= blocks.size()) return;
    QGuiApplication::clipboard()->setText(blocks.at(block).code);
    emit copied(tr("the code block"));
}

void ConversationView::contextMenuEvent(QContextMenuEvent* event) {
    const QModelIndex index = indexAt(event->pos());
    if (!index.isValid()) return;
    setCurrentIndex(index);
    QMenu menu(this);
    QAction* copy = actions().value(0);
    menu.addAction(copy);
    const QString content = index.data(ConversationModel::ContentRole).toString();
    SafeTextDocument doc;
    MessageDelegate::buildBody(doc, content, font());
    const auto blocks = CodeBlockHighlighter::codeBlocks(doc, content);
    for (int i = 0; i < blocks.size(); ++i) {
        const QString lang = blocks.at(i).language;
        const QString label = lang.isEmpty() ? tr("Copy code block %1").arg(i + 1)
                                             : tr("Copy code block %1 (%2)").arg(i + 1).arg(lang);
        menu.addAction(label, this, [this, row = index.row(), i] { copyCodeBlock(row, i); });
    }
    if (index.row() == lastUserRow()) {
        QAction* edit = menu.addAction(tr("&Edit and resend") + QStringLiteral("\t") + tr("Up"),
                                       this, &ConversationView::editLastMessageRequested);
        edit->setObjectName(QStringLiteral("editMessageContextAction"));
    }
    menu.addSeparator();
    menu.addAction(tr("&Find in conversation…") + QStringLiteral("\t") +
                       QKeySequence(QKeySequence::Find).toString(QKeySequence::NativeText),
                   this, &ConversationView::findRequested);
    menu.exec(event->globalPos());
}

void ConversationView::collectMatches() {
    m_matches.clear();
    if (m_query.isEmpty()) return;
    for (int row = 0; row < messageCount(); ++row) {
        const QString content =
            m_messages->index(row).data(ConversationModel::ContentRole).toString();
        SafeTextDocument doc;
        MessageDelegate::buildBody(doc, content, font());
        for (QTextCursor c = doc.find(m_query); !c.isNull(); c = doc.find(m_query, c))
            m_matches.push_back({row, c.selectionStart(), c.selectionEnd() - c.selectionStart()});
    }
}

int ConversationView::find(const QString& query) {
    m_query = query;
    m_delegate->setFindQuery(query);
    collectMatches();
    m_current = m_matches.isEmpty() ? -1 : 0;
    showMatch();
    return matchCount();
}

void ConversationView::findNext() {
    if (m_matches.isEmpty()) return;
    m_current = (m_current + 1) % int(m_matches.size());
    showMatch();
}

void ConversationView::findPrevious() {
    if (m_matches.isEmpty()) return;
    m_current = (m_current - 1 + int(m_matches.size())) % int(m_matches.size());
    showMatch();
}

void ConversationView::clearFind() {
    m_query.clear();
    m_matches.clear();
    m_current = -1;
    m_delegate->setFindQuery({});
    m_delegate->setCurrentMatch(-1, -1);
    viewport()->update();
}

void ConversationView::showMatch() {
    if (m_current < 0) {
        m_delegate->setCurrentMatch(-1, -1);
    } else {
        const Match& m = m_matches.at(m_current);
        m_delegate->setCurrentMatch(m.row, m.position);
        const QModelIndex index = m_messages->index(m.row);
        setCurrentIndex(index);
        executeDelayedItemsLayout();
        // Put the match a third of the way down the viewport.
        const QRect r = m_delegate->bodyTextRect(optionFor(index), index, m.position, m.length);
        if (!viewport()->rect().contains(r)) {
            QScrollBar* bar = verticalScrollBar();
            bar->setValue(bar->value() + r.top() - viewport()->height() / 3);
        }
    }
    viewport()->update();
    emit matchChanged(m_current, matchCount());
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
