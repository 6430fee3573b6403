#pragma once

#include <QStyledItemDelegate>

class QTextDocument;

// Draws one chat message: who spoke, the collapsible thinking line, the answer as
// Markdown (raw HTML off: model output is text, never markup) and the timing line.
class MessageDelegate : public QStyledItemDelegate {
    Q_OBJECT
public:
    explicit MessageDelegate(QObject* parent = nullptr);

    void paint(QPainter* painter, const QStyleOptionViewItem& option,
               const QModelIndex& index) const override;
    QSize sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const override;
    bool editorEvent(QEvent* event, QAbstractItemModel* model, const QStyleOptionViewItem& option,
                     const QModelIndex& index) override;

    // The answer as the view lays it out (tests read it back).
    static void buildBody(QTextDocument& doc, const QString& markdown, const QFont& font);
    static QString thinkingLabel(const QModelIndex& index);

signals:
    void thinkingToggled(int row);

private:
    struct Layout {
        QRect role, thinking, reasoning, body, stats;
    };
    Layout layout(const QStyleOptionViewItem& option, const QModelIndex& index) const;
};
