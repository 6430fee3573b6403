#pragma once

#include <QStyledItemDelegate>

// One sidebar entry on two lines: the title (elided), and under it, smaller and
// muted, how long ago the conversation last changed. Renaming edits the title line;
// the new title is handed to whoever stores it (titleEdited) instead of written into
// the item, so an item only ever shows a title the store accepted.
class ConversationListDelegate : public QStyledItemDelegate {
    Q_OBJECT
public:
    enum Roles {
        IdRole = Qt::UserRole, // the store's id (QString)
        ModifiedRole,          // the transcript's last write (QDateTime)
        DateTextRole,          // the relative time shown ("2 h ago", "pinned · 2 h ago")
        PinnedRole,            // pinned to the top of the list (bool)
        StateBytesRole,        // the engine's saved states of it on disk (quint64; 0: none)
    };

    explicit ConversationListDelegate(QObject* parent = nullptr);

    void paint(QPainter* painter, const QStyleOptionViewItem& option,
               const QModelIndex& index) const override;
    QSize sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const override;
    void setModelData(QWidget* editor, QAbstractItemModel* model,
                      const QModelIndex& index) const override;
    void updateEditorGeometry(QWidget* editor, const QStyleOptionViewItem& option,
                              const QModelIndex& index) const override;

signals:
    // The user committed `title` for conversation `id` (unchanged titles are not sent).
    void titleEdited(const QString& id, const QString& title) const;

private:
    static QRect titleRect(const QStyleOptionViewItem& option);
};
