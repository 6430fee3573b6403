#pragma once

#include <QHash>
#include <QTimer>
#include <QVector>
#include <QWidget>

#include "chat/ConversationStore.h"

class ConversationListDelegate;
class QLabel;
class QLineEdit;
class QListWidget;
class QListWidgetItem;
class TranscriptWriter;

// The sidebar's conversations: newest first, each with its title and how long ago it
// changed. The highlighted entry is always the shown conversation: choosing one (click,
// arrow keys, Enter) asks for it to be opened, and a right-click opens a menu for the
// entry under the mouse without moving the highlight. F2 renames inline; Delete moves
// the conversation to the store's trash and offers Undo (the button, or Ctrl+Z) for a
// while; only then, or when the panel goes away, is it deleted for good. The search
// field matches titles and message text on a worker thread and says when nothing does.
// Saves of the open conversation are TranscriptWriter's: before the panel copies, moves
// or brings back a conversation's files it waits for what is queued (flush()), so no
// save lands after a move; what a save changes arrives as conversationSaved().
class ConversationListPanel : public QWidget {
    Q_OBJECT
public:
    // `store` must outlive the panel, or finishDeletions() be called before it goes;
    // `writer` (may be null: nothing is written behind the panel's back) writes into it.
    explicit ConversationListPanel(ConversationStore* store, TranscriptWriter* writer = nullptr,
                                   QWidget* parent = nullptr);
    // Deletions still waiting for Undo become final.
    ~ConversationListPanel() override;

    QListWidget* list() const { return m_list; }
    QLineEdit* searchField() const { return m_search; }
    const QString& currentConversation() const { return m_currentId; }
    // Shown when a search finds nothing; empty otherwise.
    QString noResultsText() const;
    // The deleted conversations Undo can still bring back, the latest last.
    QStringList pendingDeletions() const;
    // The conversations listed now, in order (their saved states are measured for them).
    QStringList listedIds() const;
    // "saved state 12.3 MB" (bytes > 0): shown under the title and in the tooltip.
    static QString savedStateText(quint64 bytes);
    // How long Undo is offered after a deletion (10 s unless a test shortens it).
    void setUndoPeriod(int milliseconds) { m_undoTimer.setInterval(milliseconds); }

public slots:
    // Lists the store again: at once without a search, on a worker with one.
    void refresh();
    // Highlights `id` (none when empty or not listed): the conversation now shown.
    void setCurrentConversation(const QString& id);
    // A conversation was just written (`summary`: its title and date, read by the writer):
    // its entry gets them and moves to the top (a new one is added), and it is highlighted
    // when `shown` (the conversation on screen; not one left before its save landed).
    void conversationSaved(const ConversationStore::Summary& summary, bool shown = true);
    // Opens the inline editor on `id`'s title.
    void renameConversation(const QString& id);
    void deleteConversation(const QString& id);
    // Pinned conversations stay at the top of the list (AppSettings), newest first.
    void setPinned(const QString& id, bool pinned);
    // A copy under a new id, "TITLE (copy)", listed and announced.
    void duplicateConversation(const QString& id);
    // What the engine keeps of `id` on disk (EngineWorker::savedStateMeasured).
    void setSavedState(const QString& id, quint64 bytes);
    // Asks for `id`'s saved states to be deleted, its transcript kept (the menu's
    // "Delete saved state").
    void deleteSavedState(const QString& id);
    // Brings back the latest deletion.
    void undoDelete();
    // Deletes every pending deletion for good.
    void finishDeletions();

signals:
    // The user chose conversation `id` to be shown.
    void conversationActivated(const QString& id);
    // `id` was moved to the trash (the window shows a new chat if it was shown).
    void conversationDeleted(const QString& id);
    // The user's new title for `id` is stored; `title` is what the list shows now.
    void conversationRenamed(const QString& id, const QString& title);
    // A copy of a conversation was made (duplicateConversation).
    void conversationDuplicated(const QString& copyId);
    // The user asked for `id`'s saved states to go (the transcript stays).
    void savedStateDeleteRequested(const QString& id);
    // A search's results are on screen.
    void searchFinished();

protected:
    bool eventFilter(QObject* watched, QEvent* event) override;

private:
    struct Deletion {
        QString id;
        QString title;
        bool wasShown;
    };
    void createActions();
    void startSearch();
    void showSummaries(const QVector<ConversationStore::Summary>& summaries, const QString& query);
    void fillItem(QListWidgetItem* item, const ConversationStore::Summary& summary, bool pinned);
    static QString dateText(const QDateTime& modified, bool pinned, const QDateTime& now);
    // The line under the title: the date, and the saved state's size when there is one.
    void showSecondLine(QListWidgetItem* item, const QDateTime& now);
    void updateDates();
    void updateUndoBar();
    void onSelectionChanged();
    void storeTitle(const QString& id, const QString& title);
    void showContextMenu(const QPoint& position);
    void showError(const QString& title, const QString& details);
    QListWidgetItem* itemFor(const QString& id) const;
    QString selectedId() const;

    // Everything queued for the disk is written (before the panel touches a conversation).
    void waitForWriter();

    ConversationStore* m_store;
    TranscriptWriter* m_writer;
    QLineEdit* m_search;
    QListWidget* m_list;
    ConversationListDelegate* m_delegate;
    QLabel* m_noResults;
    QWidget* m_undoBar;
    QLabel* m_undoLabel;
    QTimer m_searchDelay;
    QTimer m_undoTimer;
    QTimer m_dateTimer;
    QString m_currentId;
    QVector<Deletion> m_deletions;        // pending, oldest first
    QHash<QString, quint64> m_stateBytes; // measured saved states by id (kept across refills)
    int m_searchGeneration = 0;           // a result of an older search or listing is dropped
    bool m_filling = false;               // selection changes now are the panel's, not the user's
    bool m_editing = false;               // a title is being typed
    bool m_refreshAfterEdit = false;
};
