#pragma once

#include <QListView>

class ConversationModel;
class MessageDelegate;

// The message list of the current conversation, drawn by MessageDelegate from
// ConversationModel so long conversations stay fast. When empty, the view says how
// to begin instead of showing a blank area. It owns the per-message actions (copy the
// message or a code block, edit the last question) and find in conversation.
class QAction;

class ConversationView : public QListView {
    Q_OBJECT
public:
    explicit ConversationView(QWidget* parent = nullptr);

    ConversationModel* conversation() const { return m_messages; }
    MessageDelegate* messageDelegate() const { return m_delegate; }
    int messageCount() const;
    QString placeholderText() const;
    void setPlaceholderText(const QString& text);

    // The message that Copy message acts on: the current one, else the last one; -1 if none.
    int currentMessageRow() const;
    // The last message the user wrote; -1 if none.
    int lastUserRow() const;
    // The code block's copy button, in viewport coordinates (tests click it).
    QRect codeCopyButtonRect(int row, int block);
    // How far code block `block` of message `row` is scrolled sideways, and how far it can
    // be (0 when it fits), in pixels; its area in viewport coordinates.
    int codeScrollOffset(int row, int block) const;
    int codeScrollMaximum(int row, int block);
    QRect codeBlockRect(int row, int block);
    // The "<" (next false) or ">" of the version switcher, in viewport coordinates;
    // null without versions.
    QRect versionButtonRect(int row, bool next);

    // Find in conversation, over the answers' text as shown (case-insensitive).
    // Returns the number of matches and selects the first one.
    int find(const QString& query);
    void findNext();
    void findPrevious();
    void clearFind();
    int matchCount() const { return int(m_matches.size()); }
    int currentMatch() const { return m_current; } // 0-based; -1 without matches

    // What a screen reader hears about message `row`: who wrote it, its thinking block
    // and code blocks and the keys that act on them (the delegate draws them as buttons,
    // which have no accessible objects of their own).
    QString describeMessage(int row) const;
    // Copy message (Ctrl+Shift+C): the Edit menu shows the same action.
    QAction* copyMessageAction() const { return m_copyMessage; }

public slots:
    void copyMessage(int row);
    void copyCurrentMessage();
    void copyCodeBlock(int row, int block);
    // Opens message `row` in place in a read-only editor where any part of its text can
    // be selected (mouse or keyboard) and copied with Ctrl+C; Esc closes it. Double-click
    // and F2 do the same.
    void selectMessageText(int row);

signals:
    void editLastMessageRequested();
    // Edit and resend user message `row` (any of them: a new branch from there).
    void editMessageRequested(int row);
    void findRequested();
    // The clipboard now holds `what` (for the status bar).
    void copied(const QString& what);
    void matchChanged(int current, int total);
    // Show version `version` (from 0) of message `row`: the switcher's "<" and ">",
    // Alt+Left and Alt+Right on the current message, or its context menu.
    void versionRequested(int row, int version);
    // An answer finished streaming; `text` is what screen readers were told.
    void answerAnnounced(const QString& text);

protected:
    void paintEvent(QPaintEvent* event) override;
    void resizeEvent(QResizeEvent* event) override;
    void contextMenuEvent(QContextMenuEvent* event) override;
    void keyPressEvent(QKeyEvent* event) override;
    // Sideways wheel (or Shift+wheel) over a code block wider than the message scrolls it.
    void wheelEvent(QWheelEvent* event) override;
    void focusInEvent(QFocusEvent* event) override;
    void focusOutEvent(QFocusEvent* event) override;
    void currentChanged(const QModelIndex& current, const QModelIndex& previous) override;

private:
    struct Match {
        int row;
        int position;
        int length;
    };
    QStyleOptionViewItem optionFor(const QModelIndex& index) const;
    void collectMatches();
    void showMatch();
    void showInCodeBlock(const QStyleOptionViewItem& option, const QModelIndex& index,
                         const QRect& r);
    void trackStreaming(int first, int last);
    void announceAnswer(int row);
    // The previous (step -1) or next (+1) version of message `row`; false when none.
    bool requestVersionStep(int row, int step);

    ConversationModel* m_messages;
    MessageDelegate* m_delegate;
    QString m_placeholder;
    QString m_query;
    QVector<Match> m_matches;
    int m_current = -1;
    int m_streamingRow = -1; // the answer being streamed, announced when it finishes
    QAction* m_copyMessage = nullptr;
};
