#include "chat/ConversationView.h"

#include "chat/CodeBlockHighlighter.h"
#include "chat/ConversationModel.h"
#include "chat/MessageDelegate.h"
#include "chat/SafeTextDocument.h"
#include "chat/ThumbnailCache.h"

#include <QAccessible>
#include <QAction>
#include <QClipboard>
#include <QContextMenuEvent>
#include <QGuiApplication>
#include <QKeyEvent>
#include <QMenu>
#include <QPainter>
#include <QScrollBar>
#include <QTextCursor>
#include <QTextDocument>
#include <QWheelEvent>

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
    // The read-only text editor of MessageDelegate, to select part of a message.
    setEditTriggers(QAbstractItemView::DoubleClicked | QAbstractItemView::EditKeyPressed);
    connect(m_delegate, &MessageDelegate::thinkingToggled, m_messages,
            &ConversationModel::toggleThinking);
    connect(m_delegate, &MessageDelegate::versionRequested, this, [this](int row, int version) {
        emit versionRequested(row, version);
        setCurrentIndex(m_messages->index(row)); // the switched message stays current
    });
    connect(m_delegate, &MessageDelegate::copyCodeRequested, this,
            &ConversationView::copyCodeBlock);
    connect(m_delegate->thumbnails(), &ThumbnailCache::loaded, viewport(),
            qOverload<>(&QWidget::update));
    // Follow a streaming answer while the user is at the bottom; keep their place otherwise.
    connect(m_messages, &QAbstractItemModel::dataChanged, this, [this] {
        QScrollBar* bar = verticalScrollBar();
        const bool atBottom = bar->value() >= bar->maximum() - 4;
        scheduleDelayedItemsLayout();
        if (atBottom && m_query.isEmpty()) scrollToBottom();
    });
    connect(m_messages, &QAbstractItemModel::rowsInserted, this, [this] { scrollToBottom(); });
    // Scrolling moves the focus frame's pixels with the messages: draw it afresh.
    connect(verticalScrollBar(), &QScrollBar::valueChanged, this, [this] {
        if (hasFocus()) viewport()->update();
    });
    // Screen readers hear an answer once it is complete, not token by token.
    connect(m_messages, &QAbstractItemModel::rowsInserted, this,
            [this](const QModelIndex&, int first, int last) { trackStreaming(first, last); });
    connect(m_messages, &QAbstractItemModel::dataChanged, this,
            [this](const QModelIndex& from, const QModelIndex& to) {
                trackStreaming(from.row(), to.row());
            });
    connect(m_messages, &QAbstractItemModel::modelReset, this, [this] {
        m_streamingRow = -1;
        m_delegate->clearCodeOffsets();
    });
    // Code blocks scrolled sideways keep their place while their message stays.
    connect(m_messages, &QAbstractItemModel::rowsRemoved, this,
            [this](const QModelIndex&, int first) { m_delegate->clearCodeOffsets(first); });
    connect(m_messages, &QAbstractItemModel::rowsInserted, this,
            [this](const QModelIndex&, int first) { m_delegate->clearCodeOffsets(first); });
    connect(m_messages, &QAbstractItemModel::rowsRemoved, this, [this] {
        if (m_streamingRow >= messageCount()) m_streamingRow = -1;
    });
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

    auto* copy = m_copyMessage = new QAction(tr("&Copy message"), this);
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

int ConversationView::codeScrollOffset(int row, int block) const {
    return m_delegate->codeOffset(row, block);
}

int ConversationView::codeScrollMaximum(int row, int block) {
    executeDelayedItemsLayout();
    const QModelIndex index = m_messages->index(row);
    if (!index.isValid()) return 0;
    const auto areas = m_delegate->codeAreas(optionFor(index), index);
    return block >= 0 && block < areas.size() ? areas.at(block).maxOffset() : 0;
}

QRect ConversationView::codeBlockRect(int row, int block) {
    executeDelayedItemsLayout();
    const QModelIndex index = m_messages->index(row);
    if (!index.isValid()) return {};
    const auto areas = m_delegate->codeAreas(optionFor(index), index);
    return block >= 0 && block < areas.size() ? areas.at(block).rect : QRect();
}

QRect ConversationView::versionButtonRect(int row, bool next) {
    executeDelayedItemsLayout();
    const QModelIndex index = m_messages->index(row);
    if (!index.isValid()) return {};
    const QPair<QRect, QRect> buttons = m_delegate->versionButtonRects(optionFor(index), index);
    return next ? buttons.second : buttons.first;
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

void ConversationView::selectMessageText(int row) {
    const QModelIndex index = m_messages->index(row);
    // A message without text (an answer not yet begun) has nothing to select.
    if (!(m_messages->flags(index) & Qt::ItemIsEditable)) return;
    setCurrentIndex(index);
    scrollTo(index);
    edit(index); // MessageDelegate::createEditor
}

void ConversationView::contextMenuEvent(QContextMenuEvent* event) {
    // From the menu key or Shift+F10: the current message, the menu at its top left.
    const bool keyboard = event->reason() == QContextMenuEvent::Keyboard;
    const QModelIndex index =
        keyboard ? m_messages->index(currentMessageRow()) : indexAt(event->pos());
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
    QAction* select = menu.addAction(tr("&Select text") + QStringLiteral("\t") + tr("F2"), this,
                                     [this, row = index.row()] { selectMessageText(row); });
    select->setObjectName(QStringLiteral("selectTextAction"));
    select->setEnabled(!content.isEmpty());
    const QPoint version = index.data(ConversationModel::VersionRole).toPoint();
    if (version.y() > 1) {
        menu.addSeparator();
        QAction* previous =
            menu.addAction(tr("&Previous version") + QStringLiteral("\t") + tr("Alt+Left"), this,
                           [this, row = index.row()] { requestVersionStep(row, -1); });
        previous->setObjectName(QStringLiteral("previousVersionAction"));
        previous->setEnabled(version.x() > 1);
        QAction* next =
            menu.addAction(tr("&Next version") + QStringLiteral("\t") + tr("Alt+Right"), this,
                           [this, row = index.row()] { requestVersionStep(row, 1); });
        next->setObjectName(QStringLiteral("nextVersionAction"));
        next->setEnabled(version.x() < version.y());
        menu.addSeparator();
    }
    // Any question of the user's: an earlier one starts a new branch from there.
    if (index.data(ConversationModel::RoleNameRole).toString() == QLatin1String("user")) {
        QAction* edit =
            menu.addAction(tr("&Edit and resend") + QStringLiteral("\t") + tr("Ctrl+E"), this,
                           [this, row = index.row()] { emit editMessageRequested(row); });
        edit->setObjectName(QStringLiteral("editMessageContextAction"));
    }
    menu.addSeparator();
    menu.addAction(tr("&Find in conversation…") + QStringLiteral("\t") +
                       QKeySequence(QKeySequence::Find).toString(QKeySequence::NativeText),
                   this, &ConversationView::findRequested);
    menu.exec(keyboard ? viewport()->mapToGlobal(visualRect(index).topLeft() + QPoint(16, 16))
                       : event->globalPos());
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
        const QStyleOptionViewItem option = optionFor(index);
        const QRect r = m_delegate->bodyTextRect(option, index, m.position, m.length);
        showInCodeBlock(option, index, r);
        if (r.top() < 0 || r.bottom() > viewport()->height()) {
            QScrollBar* bar = verticalScrollBar();
            bar->setValue(bar->value() + r.top() - viewport()->height() / 3);
        }
    }
    viewport()->update();
    emit matchChanged(m_current, matchCount());
}

void ConversationView::showInCodeBlock(const QStyleOptionViewItem& option, const QModelIndex& index,
                                       const QRect& r) {
    // `r` is where the text lies unscrolled: a match in a wide code block is scrolled to,
    // a third of the way into the block.
    const auto areas = m_delegate->codeAreas(option, index);
    for (int i = 0; i < areas.size(); ++i) {
        const QRect& area = areas.at(i).rect;
        if (areas.at(i).maxOffset() <= 0 || r.top() < area.top() || r.bottom() > area.bottom())
            continue;
        const int offset = m_delegate->codeOffset(index.row(), i);
        if (r.left() >= area.left() + offset && r.right() <= area.right() + offset) return;
        const int wanted = r.left() - area.left() - area.width() / 3;
        m_delegate->scrollCode(option, index, i, wanted - offset);
        return;
    }
}

void ConversationView::paintEvent(QPaintEvent* event) {
    QListView::paintEvent(event);
    QPainter painter(viewport());
    if (hasFocus()) {
        // The view draws no frame; without this a Tab stop here showed nothing.
        painter.setPen(QPen(palette().color(QPalette::Highlight), 2));
        painter.drawRect(viewport()->rect().adjusted(1, 1, -1, -1));
    }
    if (messageCount() > 0) return;
    painter.setPen(palette().color(QPalette::PlaceholderText));
    painter.drawText(viewport()->rect().adjusted(24, 24, -24, -24),
                     Qt::AlignCenter | Qt::TextWordWrap, m_placeholder);
}

void ConversationView::resizeEvent(QResizeEvent* event) {
    QListView::resizeEvent(event);
    scheduleDelayedItemsLayout(); // message heights depend on the width
}

void ConversationView::trackStreaming(int first, int last) {
    for (int row = first; row <= last; ++row) {
        const bool streaming =
            m_messages->index(row).data(ConversationModel::StreamingRole).toBool();
        if (streaming)
            m_streamingRow = row;
        else if (row == m_streamingRow) {
            m_streamingRow = -1;
            announceAnswer(row);
        }
    }
}

void ConversationView::announceAnswer(int row) {
    const QModelIndex index = m_messages->index(row);
    const QString content = index.data(ConversationModel::ContentRole).toString().simplified();
    const QString text = content.isEmpty()
                             ? tr("K3 finished without an answer.")
                             : tr("K3 answered: %1").arg(content.left(500)); // a summary
    // The description change reaches screen readers as an event of the focused view; the
    // alert makes them read it even when the focus is in the composer.
    setAccessibleDescription(text);
    QAccessibleEvent alert(this, QAccessible::Alert);
    QAccessible::updateAccessibility(&alert);
    emit answerAnnounced(text);
}

QString ConversationView::describeMessage(int row) const {
    const QModelIndex index = m_messages->index(row);
    if (!index.isValid()) return {};
    const bool user =
        index.data(ConversationModel::RoleNameRole).toString() == QLatin1String("user");
    QStringList parts{tr("Message %1 of %2, from %3.")
                          .arg(row + 1)
                          .arg(messageCount())
                          .arg(user ? tr("you") : tr("K3"))};
    if (!index.data(ConversationModel::ReasoningRole).toString().isEmpty())
        parts << (index.data(ConversationModel::ThinkingExpandedRole).toBool()
                      ? tr("Thinking shown: Space hides it.")
                      : tr("Thinking hidden: Space shows it."));
    if (const QPoint v = index.data(ConversationModel::VersionRole).toPoint(); v.y() > 1)
        parts << tr("Version %1 of %2: Alt+Left and Alt+Right switch.").arg(v.x()).arg(v.y());
    const QString content = index.data(ConversationModel::ContentRole).toString();
    SafeTextDocument doc;
    MessageDelegate::buildBody(doc, content, font());
    const auto blocks = CodeBlockHighlighter::codeBlocks(doc, content);
    if (blocks.size() == 1)
        parts << tr("1 code block: Copy code block 1 is in the context menu.");
    else if (blocks.size() > 1)
        parts << tr("%1 code blocks: Copy code block 1 to %1 are in the context menu.")
                     .arg(blocks.size());
    if (m_delegate->firstWideCodeBlock(optionFor(index), index) >= 0)
        parts << tr("Shift+Left and Shift+Right scroll its wide code.");
    if (!content.isEmpty()) parts << tr("F2 selects its text.");
    return parts.join(QLatin1Char(' '));
}

void ConversationView::currentChanged(const QModelIndex& current, const QModelIndex& previous) {
    QListView::currentChanged(current, previous);
    if (current.isValid()) setAccessibleDescription(describeMessage(current.row()));
}

bool ConversationView::requestVersionStep(int row, int step) {
    const QPoint version = m_messages->index(row).data(ConversationModel::VersionRole).toPoint();
    const int target = version.x() - 1 + step; // from 0
    if (version.y() < 2 || target < 0 || target >= version.y()) return false;
    emit versionRequested(row, target);
    setCurrentIndex(m_messages->index(row)); // the switched message stays current
    setAccessibleDescription(describeMessage(row));
    return true;
}

void ConversationView::keyPressEvent(QKeyEvent* event) {
    // Space or Enter shows or hides the thinking of the current message: the keyboard's
    // way to the "Thought for N s" toggle the delegate draws.
    const int key = event->key();
    const QModelIndex index = currentIndex();
    // Shift+Left and Shift+Right scroll the current message's first wide code block.
    if (index.isValid() && event->modifiers() == Qt::ShiftModifier &&
        (key == Qt::Key_Left || key == Qt::Key_Right)) {
        const QStyleOptionViewItem option = optionFor(index);
        if (const int block = m_delegate->firstWideCodeBlock(option, index); block >= 0) {
            const int step = MessageDelegate::codeScrollStep();
            if (m_delegate->scrollCode(option, index, block, key == Qt::Key_Left ? -step : step))
                viewport()->update(visualRect(index));
            return;
        }
    }
    // Ctrl+E on one of the user's messages: edit and resend it (any of them).
    if (index.isValid() && event->modifiers() == Qt::ControlModifier && key == Qt::Key_E &&
        index.data(ConversationModel::RoleNameRole).toString() == QLatin1String("user")) {
        emit editMessageRequested(index.row());
        return;
    }
    // Alt+Left and Alt+Right: the keyboard's way to the "< 2/3 >" switcher.
    if (index.isValid() && event->modifiers() == Qt::AltModifier &&
        (key == Qt::Key_Left || key == Qt::Key_Right)) {
        requestVersionStep(index.row(), key == Qt::Key_Left ? -1 : 1);
        return;
    }
    if (index.isValid() && event->modifiers() == Qt::NoModifier &&
        (key == Qt::Key_Space || key == Qt::Key_Return || key == Qt::Key_Enter) &&
        !index.data(ConversationModel::ReasoningRole).toString().isEmpty()) {
        m_messages->toggleThinking(index.row());
        setAccessibleDescription(describeMessage(index.row()));
        return;
    }
    QListView::keyPressEvent(event);
}

void ConversationView::wheelEvent(QWheelEvent* event) {
    const QPoint pos = event->position().toPoint();
    const QModelIndex index = indexAt(pos);
    const QPoint pixels = event->pixelDelta();
    const QPoint angle = event->angleDelta();
    const int step = MessageDelegate::codeScrollStep();
    // Towards the right is a negative delta, as for a horizontal scroll bar.
    int dx = 0;
    if (pixels.x() != 0 || angle.x() != 0)
        dx = pixels.x() != 0 ? -pixels.x() : -angle.x() * step / 120;
    else if (event->modifiers() & Qt::ShiftModifier)
        dx = pixels.y() != 0 ? -pixels.y() : -angle.y() * step / 120;
    if (dx != 0 && index.isValid()) {
        const QStyleOptionViewItem option = optionFor(index);
        const int block = m_delegate->codeBlockAt(option, index, pos);
        if (block >= 0 && m_delegate->codeAreas(option, index).at(block).maxOffset() > 0) {
            if (m_delegate->scrollCode(option, index, block, dx))
                viewport()->update(visualRect(index));
            event->accept();
            return;
        }
    }
    QListView::wheelEvent(event);
}

void ConversationView::focusInEvent(QFocusEvent* event) {
    const bool hadCurrent = currentIndex().isValid();
    QListView::focusInEvent(event); // which makes the first message current
    // Arriving by Tab with no current message: the latest is the one to read, so the
    // focus shows on it and Up/Down, Space and the menu key act from there.
    if (!hadCurrent && messageCount() > 0)
        selectionModel()->setCurrentIndex(m_messages->index(messageCount() - 1),
                                          QItemSelectionModel::NoUpdate);
    viewport()->update();
}

void ConversationView::focusOutEvent(QFocusEvent* event) {
    QListView::focusOutEvent(event);
    viewport()->update();
}
