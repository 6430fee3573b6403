#include "chat/ConversationListPanel.h"

#include "AppSettings.h"

#include "chat/ConversationListDelegate.h"
#include "chat/ConversationListWidget.h"
#include "chat/RelativeTime.h"
#include "chat/TranscriptWriter.h"

#include <QAction>
#include <QFutureWatcher>
#include <QHBoxLayout>
#include <QLabel>
#include <QLineEdit>
#include <QListWidget>
#include <QLocale>
#include <QMenu>
#include <QMessageBox>
#include <QMouseEvent>
#include <QPushButton>
#include <QShortcut>
#include <QVBoxLayout>
#include <QtConcurrent>

#include <algorithm>

using Summary = ConversationStore::Summary;
using Roles = ConversationListDelegate::Roles;

ConversationListPanel::ConversationListPanel(ConversationStore* store, TranscriptWriter* writer,
                                             QWidget* parent)
    : QWidget(parent), m_store(store), m_writer(writer), m_search(new QLineEdit),
      m_list(new ConversationListWidget), m_delegate(new ConversationListDelegate(this)),
      m_noResults(new QLabel), m_undoBar(new QWidget), m_undoLabel(new QLabel) {
    m_search->setObjectName(QStringLiteral("conversationSearch"));
    m_search->setPlaceholderText(tr("Search conversations"));
    m_search->setClearButtonEnabled(true);
    m_list->setObjectName(QStringLiteral("conversationList"));
    m_list->setAccessibleName(tr("Conversations"));
    m_list->setItemDelegate(m_delegate);
    m_list->setSelectionMode(QAbstractItemView::SingleSelection);
    // Double-click opens; only F2 and the menu rename.
    m_list->setEditTriggers(QAbstractItemView::NoEditTriggers);
    m_list->setContextMenuPolicy(Qt::CustomContextMenu);
    m_list->viewport()->installEventFilter(this);
    m_noResults->setObjectName(QStringLiteral("noConversationsLabel"));
    m_noResults->setTextFormat(Qt::PlainText); // it quotes what the user typed
    m_noResults->setWordWrap(true);
    m_noResults->setAlignment(Qt::AlignHCenter | Qt::AlignTop);
    m_noResults->hide();

    m_undoBar->setObjectName(QStringLiteral("undoDeleteBar"));
    m_undoLabel->setTextFormat(Qt::PlainText);
    m_undoLabel->setWordWrap(true);
    auto* undoButton = new QPushButton(tr("Undo"));
    undoButton->setObjectName(QStringLiteral("undoDeleteButton"));
    undoButton->setToolTip(tr("Bring the conversation back (Ctrl+Z)"));
    auto* undoLayout = new QHBoxLayout(m_undoBar);
    undoLayout->setContentsMargins(0, 0, 0, 0);
    undoLayout->addWidget(m_undoLabel, 1);
    undoLayout->addWidget(undoButton);
    m_undoBar->hide();

    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(0, 0, 0, 0);
    layout->addWidget(m_search);
    layout->addWidget(m_noResults);
    layout->addWidget(m_list, 1);
    layout->addWidget(m_undoBar);

    m_searchDelay.setSingleShot(true);
    m_searchDelay.setInterval(200); // one search per pause in typing, not per key
    m_undoTimer.setSingleShot(true);
    m_undoTimer.setInterval(10000);
    m_dateTimer.setInterval(60000); // "just now" becomes "1 min ago" without a refresh
    connect(&m_searchDelay, &QTimer::timeout, this, &ConversationListPanel::startSearch);
    connect(&m_undoTimer, &QTimer::timeout, this, &ConversationListPanel::finishDeletions);
    connect(&m_dateTimer, &QTimer::timeout, this, &ConversationListPanel::updateDates);
    m_dateTimer.start();
    connect(m_search, &QLineEdit::textChanged, this, [this](const QString& text) {
        if (text.trimmed().isEmpty()) {
            m_searchDelay.stop();
            refresh(); // clearing the search brings the whole list back at once
        } else {
            m_searchDelay.start();
        }
    });
    connect(undoButton, &QPushButton::clicked, this, &ConversationListPanel::undoDelete);
    connect(m_list, &QListWidget::itemSelectionChanged, this,
            &ConversationListPanel::onSelectionChanged);
    connect(m_list, &QListWidget::itemActivated, this, [this](QListWidgetItem* item) {
        emit conversationActivated(item->data(Roles::IdRole).toString());
    });
    connect(m_list, &QWidget::customContextMenuRequested, this,
            &ConversationListPanel::showContextMenu);
    connect(m_delegate, &ConversationListDelegate::titleEdited, this,
            &ConversationListPanel::storeTitle);
    connect(m_delegate, &QAbstractItemDelegate::closeEditor, this, [this] {
        m_editing = false;
        if (!m_refreshAfterEdit) return;
        m_refreshAfterEdit = false;
        QTimer::singleShot(0, this, &ConversationListPanel::refresh); // after the commit
    });
    createActions();
}

ConversationListPanel::~ConversationListPanel() {
    finishDeletions();
}

void ConversationListPanel::createActions() {
    // Shortcuts only while the list has focus: Delete in the search field or the rename
    // editor edits text, never a conversation.
    auto* rename = new QAction(tr("Rename…"), m_list);
    rename->setObjectName(QStringLiteral("renameConversationAction"));
    rename->setShortcut(QKeySequence(Qt::Key_F2));
    rename->setShortcutContext(Qt::WidgetShortcut);
    connect(rename, &QAction::triggered, this, [this] { renameConversation(selectedId()); });
    auto* remove = new QAction(tr("Delete"), m_list);
    remove->setObjectName(QStringLiteral("deleteConversationAction"));
    remove->setShortcut(QKeySequence::Delete);
    remove->setShortcutContext(Qt::WidgetShortcut);
    connect(remove, &QAction::triggered, this, [this] { deleteConversation(selectedId()); });
    m_list->addActions({rename, remove});
    // Anywhere in the sidebar; a text field's own Ctrl+Z still undoes its typing.
    auto* undo = new QShortcut(QKeySequence::Undo, this);
    undo->setContext(Qt::WidgetWithChildrenShortcut);
    connect(undo, &QShortcut::activated, this, &ConversationListPanel::undoDelete);
}

QString ConversationListPanel::noResultsText() const {
    return m_noResults->isVisibleTo(this) ? m_noResults->text() : QString();
}

QStringList ConversationListPanel::pendingDeletions() const {
    QStringList ids;
    for (const Deletion& d : m_deletions) ids << d.id;
    return ids;
}

void ConversationListPanel::refresh() {
    const QString query = m_search->text().trimmed();
    if (!query.isEmpty()) {
        startSearch();
        return;
    }
    ++m_searchGeneration; // a search still running is out of date
    showSummaries(m_store->list(), query);
}

void ConversationListPanel::startSearch() {
    m_searchDelay.stop();
    const QString query = m_search->text().trimmed();
    const int generation = ++m_searchGeneration;
    // Every transcript is read: never on the GUI thread. The watcher is the panel's
    // child, so a result arriving after the panel is gone reaches nobody.
    auto* watcher = new QFutureWatcher<QVector<Summary>>(this);
    connect(watcher, &QFutureWatcherBase::finished, this, [this, watcher, generation, query] {
        watcher->deleteLater();
        if (generation != m_searchGeneration) return;
        showSummaries(watcher->result(), query);
        emit searchFinished();
    });
    watcher->setFuture(
        QtConcurrent::run(&ConversationStore::listDirectory, m_store->directory(), query));
}

void ConversationListPanel::showSummaries(const QVector<Summary>& summaries, const QString& query) {
    if (m_editing) { // rebuilding the list would throw away the title being typed
        m_refreshAfterEdit = true;
        return;
    }
    m_filling = true;
    m_list->clear();
    // Pinned conversations first, newest first among them as among the rest.
    const QStringList pinned = AppSettings::pinnedConversations();
    QVector<Summary> ordered = summaries;
    std::stable_partition(ordered.begin(), ordered.end(),
                          [&pinned](const Summary& s) { return pinned.contains(s.id); });
    for (const Summary& summary : ordered)
        fillItem(new QListWidgetItem(m_list), summary, pinned.contains(summary.id));
    m_filling = false;
    setCurrentConversation(m_currentId);
    const bool nothing = summaries.isEmpty() && !query.isEmpty();
    m_noResults->setText(nothing ? tr("No conversations match “%1”").arg(query) : QString());
    m_noResults->setVisible(nothing);
}

void ConversationListPanel::fillItem(QListWidgetItem* item, const Summary& summary, bool pinned) {
    item->setText(summary.title);
    item->setData(Roles::IdRole, summary.id);
    item->setData(Roles::ModifiedRole, summary.modified);
    item->setData(Roles::PinnedRole, pinned);
    item->setFlags(item->flags() | Qt::ItemIsEditable);
    item->setData(Roles::StateBytesRole, m_stateBytes.value(summary.id));
    showSecondLine(item, QDateTime::currentDateTime());
}

QString ConversationListPanel::savedStateText(quint64 bytes) {
    return tr("saved state %1")
        .arg(QLocale().formattedDataSize(qint64(bytes), 1, QLocale::DataSizeSIFormat));
}

void ConversationListPanel::showSecondLine(QListWidgetItem* item, const QDateTime& now) {
    const QDateTime modified = item->data(Roles::ModifiedRole).toDateTime();
    QString line = dateText(modified, item->data(Roles::PinnedRole).toBool(), now);
    const quint64 bytes = item->data(Roles::StateBytesRole).toULongLong();
    if (bytes > 0) line += QStringLiteral(" · ") + savedStateText(bytes);
    item->setData(Roles::DateTextRole, line);
    item->setData(Qt::AccessibleTextRole, QString(item->text() + QStringLiteral(", ") + line));
    QString tip = tr("%1\nLast changed %2")
                      .arg(item->text(), QLocale().toString(modified, QLocale::LongFormat));
    // What reopening it saves: its state comes back from disk instead of being read.
    if (bytes > 0)
        tip += QLatin1Char('\n') +
               tr("%1: a follow-up reads only the new message").arg(savedStateText(bytes));
    item->setToolTip(tip);
}

QStringList ConversationListPanel::listedIds() const {
    QStringList ids;
    for (int row = 0; row < m_list->count(); ++row)
        ids << m_list->item(row)->data(Roles::IdRole).toString();
    return ids;
}

void ConversationListPanel::setSavedState(const QString& id, quint64 bytes) {
    m_stateBytes.insert(id, bytes);
    if (QListWidgetItem* item = itemFor(id)) {
        item->setData(Roles::StateBytesRole, bytes);
        showSecondLine(item, QDateTime::currentDateTime());
    }
}

void ConversationListPanel::deleteSavedState(const QString& id) {
    if (!id.isEmpty()) emit savedStateDeleteRequested(id);
}

QString ConversationListPanel::dateText(const QDateTime& modified, bool pinned,
                                        const QDateTime& now) {
    const QString date = relativeTime(modified, now);
    return pinned ? tr("pinned · %1").arg(date) : date;
}

void ConversationListPanel::setPinned(const QString& id, bool pin) {
    QStringList pinned = AppSettings::pinnedConversations();
    pinned.removeAll(id);
    if (pin) pinned.prepend(id);
    AppSettings::setPinnedConversations(pinned);
    refresh();
}

void ConversationListPanel::waitForWriter() {
    if (m_writer) m_writer->flush();
}

void ConversationListPanel::duplicateConversation(const QString& id) {
    waitForWriter(); // the copy has the last save
    try {
        const QString copy = m_store->duplicate(id);
        refresh();
        emit conversationDuplicated(copy);
    } catch (const std::exception& e) {
        showError(tr("Could not duplicate the conversation"), QString::fromUtf8(e.what()));
    }
}

void ConversationListPanel::updateDates() {
    const QDateTime now = QDateTime::currentDateTime();
    for (int row = 0; row < m_list->count(); ++row) {
        showSecondLine(m_list->item(row), now);
    }
}

void ConversationListPanel::setCurrentConversation(const QString& id) {
    m_currentId = id;
    m_filling = true;
    if (QListWidgetItem* item = itemFor(id)) {
        m_list->setCurrentItem(item);
        m_list->scrollToItem(item);
    } else {
        m_list->clearSelection();
        m_list->setCurrentItem(nullptr);
    }
    m_filling = false;
}

void ConversationListPanel::conversationSaved(const Summary& summary, bool shown) {
    const QString& id = summary.id;
    // A save written just before the conversation went to the trash, reported after.
    for (const Deletion& d : std::as_const(m_deletions))
        if (d.id == id) return;
    if (shown) m_currentId = id;
    if (!m_search->text().trimmed().isEmpty()) { // whether it matches may have changed
        startSearch();
        return;
    }
    // The newest goes first: first of all when pinned, else first after the pinned ones.
    const bool pinned = AppSettings::pinnedConversations().contains(id);
    int top = 0;
    if (!pinned)
        while (top < m_list->count() && m_list->item(top)->data(Roles::PinnedRole).toBool() &&
               m_list->item(top)->data(Roles::IdRole).toString() != id)
            ++top;
    QListWidgetItem* item = itemFor(id);
    if (!item || (m_list->row(item) != top && !m_editing)) {
        m_filling = true;
        if (item) m_list->takeItem(m_list->row(item));
        top = std::min(top, m_list->count());
        m_list->insertItem(top, item ? item : new QListWidgetItem);
        item = m_list->item(top);
        m_filling = false;
    }
    fillItem(item, summary, pinned);
    setCurrentConversation(m_currentId);
}

void ConversationListPanel::onSelectionChanged() {
    if (m_filling) return;
    const QString id = selectedId();
    if (!id.isEmpty() && id != m_currentId) emit conversationActivated(id);
}

void ConversationListPanel::renameConversation(const QString& id) {
    QListWidgetItem* item = itemFor(id);
    if (!item) return;
    m_editing = true; // the only way an editor opens (no edit triggers)
    m_list->editItem(item);
}

void ConversationListPanel::storeTitle(const QString& id, const QString& title) {
    try {
        m_store->setTitle(id, title);
    } catch (const std::exception& e) {
        showError(tr("Could not rename the conversation"),
                  tr("The title “%1” was not stored: %2").arg(title, QString::fromUtf8(e.what())));
        return;
    }
    Summary summary = m_store->summary(id);
    if (QListWidgetItem* item = itemFor(id)) {
        summary.modified = item->data(Roles::ModifiedRole).toDateTime(); // a title is no turn
        fillItem(item, summary, item->data(Roles::PinnedRole).toBool());
    }
    emit conversationRenamed(id, summary.title);
}

void ConversationListPanel::deleteConversation(const QString& id) {
    QListWidgetItem* item = itemFor(id);
    if (!item) return;
    waitForWriter(); // a save queued before the move cannot land after it
    try {
        m_store->trash(id);
    } catch (const std::exception& e) {
        showError(tr("Could not delete the conversation"), QString::fromUtf8(e.what()));
        return;
    }
    const bool shown = id == m_currentId;
    m_deletions.push_back({id, item->text(), shown});
    m_filling = true;
    delete item;
    m_filling = false;
    setCurrentConversation(shown ? QString() : m_currentId);
    m_undoTimer.start();
    updateUndoBar();
    const bool listHadFocus = m_list->hasFocus();
    emit conversationDeleted(id);
    // The new chat shown instead takes the focus; Ctrl+Z and the next Delete belong here.
    if (listHadFocus) m_list->setFocus();
}

void ConversationListPanel::undoDelete() {
    if (m_deletions.isEmpty()) return;
    const Deletion deletion = m_deletions.takeLast();
    updateUndoBar();
    waitForWriter();
    try {
        m_store->restore(deletion.id);
    } catch (const std::exception& e) {
        showError(tr("Could not restore the conversation"), QString::fromUtf8(e.what()));
        return;
    }
    refresh();
    // Shown again unless the user has moved on to another conversation meanwhile.
    if (deletion.wasShown && m_currentId.isEmpty()) emit conversationActivated(deletion.id);
}

void ConversationListPanel::finishDeletions() {
    m_undoTimer.stop();
    for (const Deletion& deletion : std::as_const(m_deletions)) m_store->purge(deletion.id);
    m_deletions.clear();
    updateUndoBar();
}

void ConversationListPanel::updateUndoBar() {
    if (m_deletions.isEmpty()) {
        m_undoTimer.stop();
        m_undoBar->hide();
        return;
    }
    m_undoLabel->setText(tr("Deleted “%1”").arg(m_deletions.last().title));
    m_undoBar->show();
}

void ConversationListPanel::showContextMenu(const QPoint& position) {
    QListWidgetItem* item = m_list->itemAt(position);
    if (!item) return;
    const QString id = item->data(Roles::IdRole).toString();
    auto* menu = new QMenu(this);
    menu->setObjectName(QStringLiteral("conversationMenu"));
    menu->setAttribute(Qt::WA_DeleteOnClose);
    menu->addAction(tr("Open"), this, [this, id] { emit conversationActivated(id); });
    menu->addAction(tr("Rename…") + QStringLiteral("\tF2"), this,
                    [this, id] { renameConversation(id); });
    const bool pinned = item->data(Roles::PinnedRole).toBool();
    menu->addAction(pinned ? tr("Unpin") : tr("Pin to the top"), this,
                    [this, id, pinned] { setPinned(id, !pinned); })
        ->setObjectName(QStringLiteral("pinConversationAction"));
    menu->addAction(tr("Duplicate"), this, [this, id] { duplicateConversation(id); })
        ->setObjectName(QStringLiteral("duplicateConversationAction"));
    // The transcript stays; a follow-up then reads the conversation again.
    QAction* forget =
        menu->addAction(tr("Delete saved state"), this, [this, id] { deleteSavedState(id); });
    forget->setObjectName(QStringLiteral("deleteSavedStateAction"));
    forget->setEnabled(item->data(Roles::StateBytesRole).toULongLong() > 0);
    menu->addAction(tr("Delete") + QStringLiteral("\tDel"), this,
                    [this, id] { deleteConversation(id); });
    menu->popup(m_list->viewport()->mapToGlobal(position)); // not exec(): nothing waits on it
}

bool ConversationListPanel::eventFilter(QObject* watched, QEvent* event) {
    // A right button press would move the highlight away from the shown conversation;
    // the menu it brings up acts on the entry under the mouse instead.
    if (watched == m_list->viewport() &&
        (event->type() == QEvent::MouseButtonPress ||
         event->type() == QEvent::MouseButtonDblClick ||
         event->type() == QEvent::MouseButtonRelease) &&
        static_cast<QMouseEvent*>(event)->button() == Qt::RightButton)
        return true;
    return QWidget::eventFilter(watched, event);
}

void ConversationListPanel::showError(const QString& title, const QString& details) {
    auto* box = new QMessageBox(QMessageBox::Warning, title, details, QMessageBox::Ok, this);
    box->setObjectName(QStringLiteral("conversationErrorBox"));
    box->setTextFormat(Qt::PlainText); // it names files and quotes titles
    box->setAttribute(Qt::WA_DeleteOnClose);
    box->open();
}

QListWidgetItem* ConversationListPanel::itemFor(const QString& id) const {
    if (id.isEmpty()) return nullptr;
    for (int row = 0; row < m_list->count(); ++row)
        if (m_list->item(row)->data(Roles::IdRole).toString() == id) return m_list->item(row);
    return nullptr;
}

QString ConversationListPanel::selectedId() const {
    const QList<QListWidgetItem*> selected = m_list->selectedItems();
    return selected.size() == 1 ? selected.front()->data(Roles::IdRole).toString() : QString();
}
