#include "chat/ConversationListDelegate.h"

#include <QApplication>
#include <QLineEdit>
#include <QPainter>

namespace {
constexpr int kMargin = 6;
constexpr int kGap = 2;

QFont dateFont(const QFont& base) {
    QFont font = base;
    font.setPointSizeF(base.pointSizeF() * 0.85);
    return font;
}
} // namespace

ConversationListDelegate::ConversationListDelegate(QObject* parent) : QStyledItemDelegate(parent) {}

QRect ConversationListDelegate::titleRect(const QStyleOptionViewItem& option) {
    const QRect inner = option.rect.adjusted(kMargin, kMargin / 2, -kMargin, 0);
    return QRect(inner.topLeft(), QSize(inner.width(), QFontMetrics(option.font).height() + 2));
}

void ConversationListDelegate::paint(QPainter* painter, const QStyleOptionViewItem& option,
                                     const QModelIndex& index) const {
    QStyleOptionViewItem opt = option;
    initStyleOption(&opt, index);
    const QString title = opt.text;
    opt.text.clear(); // the style draws background, selection and focus; the text is ours
    const QWidget* widget = opt.widget;
    QStyle* style = widget ? widget->style() : QApplication::style();
    style->drawControl(QStyle::CE_ItemViewItem, &opt, painter, widget);

    const bool selected = opt.state & QStyle::State_Selected;
    const QPalette::ColorGroup group = !(opt.state & QStyle::State_Enabled) ? QPalette::Disabled
                                       : (opt.state & QStyle::State_Active) ? QPalette::Active
                                                                            : QPalette::Inactive;
    const QRect titleArea = titleRect(opt);
    painter->save();
    painter->setFont(opt.font);
    painter->setPen(
        opt.palette.color(group, selected ? QPalette::HighlightedText : QPalette::Text));
    painter->drawText(titleArea, Qt::AlignLeft | Qt::AlignVCenter,
                      QFontMetrics(opt.font).elidedText(title, Qt::ElideRight, titleArea.width()));
    const QFont small = dateFont(opt.font);
    painter->setFont(small);
    // Muted but readable: the placeholder colour, or the highlight's text when selected.
    QColor muted = opt.palette.color(group, QPalette::PlaceholderText);
    if (selected) muted = opt.palette.color(group, QPalette::HighlightedText);
    painter->setPen(muted);
    const QRect dateArea(titleArea.left(), titleArea.bottom() + kGap, titleArea.width(),
                         QFontMetrics(small).height());
    painter->drawText(dateArea, Qt::AlignLeft | Qt::AlignVCenter,
                      index.data(DateTextRole).toString());
    painter->restore();
}

QSize ConversationListDelegate::sizeHint(const QStyleOptionViewItem& option,
                                         const QModelIndex&) const {
    const int height = QFontMetrics(option.font).height() + 2 + kGap +
                       QFontMetrics(dateFont(option.font)).height() + kMargin;
    // Narrow on purpose: the list gives each entry its whole width and the title is
    // elided to it, so a long title never brings a horizontal scroll bar.
    return QSize(QFontMetrics(option.font).averageCharWidth() * 8, height);
}

void ConversationListDelegate::setModelData(QWidget* editor, QAbstractItemModel*,
                                            const QModelIndex& index) const {
    const auto* line = qobject_cast<QLineEdit*>(editor);
    if (!line || line->text() == index.data(Qt::DisplayRole).toString()) return;
    emit titleEdited(index.data(IdRole).toString(), line->text());
}

void ConversationListDelegate::updateEditorGeometry(QWidget* editor,
                                                    const QStyleOptionViewItem& option,
                                                    const QModelIndex&) const {
    editor->setGeometry(titleRect(option).adjusted(-2, -1, 2, 1));
}
