#pragma once

#include <QStyledItemDelegate>

class QTextDocument;

// Draws one chat message: who spoke, the collapsible thinking line, the answer as
// Markdown (raw HTML off: model output is text, never markup) with highlighted code
// blocks and a Copy button on each, find-in-conversation matches, and the timing line.
class MessageDelegate : public QStyledItemDelegate {
    Q_OBJECT
public:
    explicit MessageDelegate(QObject* parent = nullptr);

    void paint(QPainter* painter, const QStyleOptionViewItem& option,
               const QModelIndex& index) const override;
    QSize sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const override;
    bool editorEvent(QEvent* event, QAbstractItemModel* model, const QStyleOptionViewItem& option,
                     const QModelIndex& index) override;

    // The answer as the view lays it out (tests read it back). The palette picks the
    // light or dark code theme.
    static void buildBody(QTextDocument& doc, const QString& markdown, const QFont& font,
                          const QPalette& palette = QPalette());
    static QString thinkingLabel(const QModelIndex& index);
    // The Copy button of a code block; its first line leaves room for it.
    static QSize copyButtonSize(const QFont& font);
    // The Markdown buildBody renders: single newlines outside fenced code made hard breaks.
    static QString hardLineBreaks(const QString& markdown);
    // "Reading your message: 12 of 40 tokens · about 30 s left" while the prompt is read;
    // empty otherwise.
    static QString readingLabel(const QModelIndex& index);
    // "2/3" beside a message with versions (regenerated, edited); empty with only one.
    static QString versionText(const QModelIndex& index);
    // The switcher's "<" and ">" in view coordinates; null rects without versions.
    QPair<QRect, QRect> versionButtonRects(const QStyleOptionViewItem& option,
                                           const QModelIndex& index) const;

    // The Copy buttons of the message's code blocks, in view coordinates, in block order.
    QVector<QRect> copyButtonRects(const QStyleOptionViewItem& option,
                                   const QModelIndex& index) const;
    // Where the body text [position, position + length) is drawn, in view coordinates.
    QRect bodyTextRect(const QStyleOptionViewItem& option, const QModelIndex& index, int position,
                       int length) const;

    // Find in conversation: every match of `query` is tinted; the current one
    // (row, document position) is drawn as a selection.
    void setFindQuery(const QString& query) { m_findQuery = query; }
    void setCurrentMatch(int row, int position) {
        m_matchRow = row;
        m_matchPosition = position;
    }

signals:
    void thinkingToggled(int row);
    void copyCodeRequested(int row, int block);
    // The switcher's "<" or ">": show version `version` (from 0) of message `row`.
    void versionRequested(int row, int version);

private:
    struct Layout {
        QRect role, previousVersion, version, nextVersion, thinking, reasoning, reading, readingBar,
            body, stats;
    };
    Layout layout(const QStyleOptionViewItem& option, const QModelIndex& index) const;
    QVector<QRect> copyButtonsIn(const QTextDocument& doc, const QString& markdown,
                                 const QRect& body, const QFont& font) const;

    QString m_findQuery;
    int m_matchRow = -1;
    int m_matchPosition = -1;
};
