#include "chat/MessageDelegate.h"

#include "chat/ConversationModel.h"

#include <QAbstractTextDocumentLayout>
#include <QApplication>
#include <QMouseEvent>
#include <QPainter>
#include <QTextDocument>

namespace {
constexpr int kMargin = 12;
constexpr int kGap = 4;

int documentHeight(const QString& markdownOrText, bool markdown, const QFont& font, int width) {
    QTextDocument doc;
    if (markdown) MessageDelegate::buildBody(doc, markdownOrText, font);
    else {
        doc.setDefaultFont(font);
        doc.setPlainText(markdownOrText);
    }
    doc.setTextWidth(width);
    return int(std::ceil(doc.size().height()));
}
} // namespace

MessageDelegate::MessageDelegate(QObject* parent) : QStyledItemDelegate(parent) {}

void MessageDelegate::buildBody(QTextDocument& doc, const QString& markdown, const QFont& font) {
    doc.setDefaultFont(font);
    doc.setDocumentMargin(0);
    // NoHTML: a model that writes <img src=...> or <a> tags gets them shown as text.
    doc.setMarkdown(markdown, QTextDocument::MarkdownFeatures(QTextDocument::MarkdownDialectGitHub |
                                                               QTextDocument::MarkdownNoHTML));
}

QString MessageDelegate::thinkingLabel(const QModelIndex& index) {
    const double seconds = index.data(ConversationModel::ThinkingSecondsRole).toDouble();
    const bool expanded = index.data(ConversationModel::ThinkingExpandedRole).toBool();
    const bool streaming = index.data(ConversationModel::StreamingRole).toBool();
    const bool answering = !index.data(ConversationModel::ContentRole).toString().isEmpty();
    const QString arrow = expanded ? QStringLiteral("▾ ") : QStringLiteral("▸ ");
    if (streaming && !answering)
        return arrow + QObject::tr("Thinking… %1 s").arg(qRound(seconds));
    return arrow + QObject::tr("Thought for %1 s").arg(qRound(seconds));
}

MessageDelegate::Layout MessageDelegate::layout(const QStyleOptionViewItem& option,
                                                const QModelIndex& index) const {
    Layout l;
    const QFontMetrics fm(option.font);
    const int width = std::max(100, option.rect.width() - 2 * kMargin);
    int y = option.rect.top() + kMargin;
    l.role = QRect(option.rect.left() + kMargin, y, width, fm.height());
    y += fm.height() + kGap;
    const QString reasoning = index.data(ConversationModel::ReasoningRole).toString();
    if (!reasoning.isEmpty()) {
        l.thinking = QRect(option.rect.left() + kMargin, y, width, fm.height());
        y += fm.height() + kGap;
        if (index.data(ConversationModel::ThinkingExpandedRole).toBool()) {
            const int h = documentHeight(reasoning, false, option.font, width - kMargin);
            l.reasoning = QRect(option.rect.left() + 2 * kMargin, y, width - kMargin, h);
            y += h + kGap;
        }
    }
    const QString content = index.data(ConversationModel::ContentRole).toString();
    const int bodyHeight = content.isEmpty() ? 0 : documentHeight(content, true, option.font, width);
    l.body = QRect(option.rect.left() + kMargin, y, width, bodyHeight);
    y += bodyHeight;
    if (!index.data(ConversationModel::StatsRole).toString().isEmpty()) {
        QFont small = option.font;
        small.setPointSizeF(small.pointSizeF() * 0.85);
        const int h = QFontMetrics(small).height();
        y += kGap;
        l.stats = QRect(option.rect.left() + kMargin, y, width, h);
        y += h;
    }
    l.stats.setBottom(std::max(l.stats.bottom(), y));
    return l;
}

void MessageDelegate::paint(QPainter* painter, const QStyleOptionViewItem& option,
                            const QModelIndex& index) const {
    painter->save();
    const QPalette& pal = option.palette;
    const bool user = index.data(ConversationModel::RoleNameRole).toString() == QLatin1String("user");
    if (user) painter->fillRect(option.rect.adjusted(4, 2, -4, -2), pal.alternateBase());
    const Layout l = layout(option, index);

    QFont bold = option.font;
    bold.setBold(true);
    painter->setFont(bold);
    painter->setPen(pal.color(QPalette::Text));
    painter->drawText(l.role, Qt::AlignLeft | Qt::AlignVCenter, user ? tr("You") : tr("K3"));

    painter->setFont(option.font);
    if (!l.thinking.isNull()) {
        painter->setPen(pal.color(QPalette::PlaceholderText));
        painter->drawText(l.thinking, Qt::AlignLeft | Qt::AlignVCenter, thinkingLabel(index));
    }
    if (!l.reasoning.isNull()) {
        QTextDocument doc;
        doc.setDefaultFont(option.font);
        doc.setPlainText(index.data(ConversationModel::ReasoningRole).toString());
        doc.setTextWidth(l.reasoning.width());
        QAbstractTextDocumentLayout::PaintContext ctx;
        ctx.palette = pal;
        ctx.palette.setColor(QPalette::Text, pal.color(QPalette::PlaceholderText));
        painter->save();
        painter->translate(l.reasoning.topLeft());
        doc.documentLayout()->draw(painter, ctx);
        painter->restore();
    }
    const QString content = index.data(ConversationModel::ContentRole).toString();
    if (!content.isEmpty()) {
        QTextDocument doc;
        buildBody(doc, content, option.font);
        doc.setTextWidth(l.body.width());
        QAbstractTextDocumentLayout::PaintContext ctx;
        ctx.palette = pal;
        painter->save();
        painter->translate(l.body.topLeft());
        doc.documentLayout()->draw(painter, ctx);
        painter->restore();
    }
    const QString stats = index.data(ConversationModel::StatsRole).toString();
    if (!stats.isEmpty()) {
        QFont small = option.font;
        small.setPointSizeF(small.pointSizeF() * 0.85);
        painter->setFont(small);
        painter->setPen(pal.color(QPalette::PlaceholderText));
        painter->drawText(l.stats, Qt::AlignLeft | Qt::AlignTop, stats);
    }
    painter->restore();
}

QSize MessageDelegate::sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const {
    const Layout l = layout(option, index);
    return {option.rect.width(), l.stats.bottom() - option.rect.top() + kMargin};
}

bool MessageDelegate::editorEvent(QEvent* event, QAbstractItemModel* model,
                                  const QStyleOptionViewItem& option, const QModelIndex& index) {
    if (event->type() == QEvent::MouseButtonRelease) {
        const auto* mouse = static_cast<QMouseEvent*>(event);
        const Layout l = layout(option, index);
        if (!l.thinking.isNull() && l.thinking.contains(mouse->position().toPoint())) {
            emit thinkingToggled(index.row());
            return true;
        }
    }
    return QStyledItemDelegate::editorEvent(event, model, option, index);
}
