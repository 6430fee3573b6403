#include "chat/MessageDelegate.h"

#include "chat/CodeBlockHighlighter.h"
#include "chat/ConversationModel.h"
#include "chat/MarkdownDocumentWriter.h"
#include "chat/MessageTextEditor.h"
#include "chat/SafeTextDocument.h"
#include "chat/ThumbnailCache.h"

#include <QAbstractScrollArea>
#include <QAbstractTextDocumentLayout>
#include <QApplication>
#include <QKeyEvent>
#include <QMouseEvent>
#include <QPainter>
#include <QRegion>
#include <QStyleOptionButton>
#include <QStyleOptionProgressBar>
#include <QTextBlock>
#include <QTextCursor>
#include <QTextDocument>
#include <QTextEdit>
#include <QTextFrame>
#include <QTextLayout>

#include <climits>
#include <cmath>

namespace {
constexpr int kMargin = 12;
constexpr int kGap = 4;
constexpr int kStatsFlags = Qt::AlignLeft | Qt::AlignTop | Qt::TextWordWrap;

bool isDark(const QPalette& palette) {
    return palette.color(QPalette::Base).lightness() < 128;
}

int documentHeight(const QString& markdownOrText, bool markdown, const QFont& font, int width,
                   const QPalette& palette = QPalette()) {
    SafeTextDocument doc;
    if (markdown)
        MessageDelegate::layoutBody(doc, markdownOrText, font, palette, width);
    else {
        doc.setDefaultFont(font);
        doc.setPlainText(markdownOrText);
        doc.setTextWidth(width);
    }
    return int(std::ceil(doc.size().height()));
}

// The room the first line of a code block leaves for the Copy button at its right end.
int buttonRoom(const QFont& font) {
    return MessageDelegate::copyButtonSize(font).width() + 4;
}

// The bar at the left of each block quote (nested ones too) of the laid-out `doc`.
void paintQuoteBars(QPainter* painter, const QTextDocument& doc, QTextFrame* parent,
                    const QColor& colour) {
    for (QTextFrame* frame : parent->childFrames()) {
        if (frame->frameFormat().boolProperty(MarkdownDocumentWriter::quoteFrameProperty())) {
            const QRectF r = doc.documentLayout()->frameBoundingRect(frame);
            painter->fillRect(
                QRectF(r.left(), r.top(), MessageDelegate::kQuoteBarWidth, r.height()), colour);
        }
        paintQuoteBars(painter, doc, frame, colour);
    }
}

} // namespace

MessageDelegate::MessageDelegate(QObject* parent)
    : QStyledItemDelegate(parent), m_thumbnails(new ThumbnailCache(this)) {}

void MessageDelegate::paintImages(QPainter* painter, const QStyleOptionViewItem& option,
                                  const QModelIndex& index, const QRect& images) const {
    const QStringList files = index.data(ConversationModel::ImagesRole).toStringList();
    const QPalette& pal = option.palette;
    for (int i = 0; i < files.size(); ++i) {
        const QRect box(images.left() + i * (kThumbnailSide + kGap), images.top(), kThumbnailSide,
                        kThumbnailSide);
        if (box.left() > images.right()) break; // more than the width shows
        const QImage thumbnail = m_thumbnails->thumbnail(files[i]);
        if (!thumbnail.isNull()) {
            const QSize size = thumbnail.size().scaled(box.size(), Qt::KeepAspectRatio);
            painter->drawImage(QRect(QPoint(box.left(), box.top()), size), thumbnail);
            continue;
        }
        // Being read, or gone: the place stays, and says why when the file is missing.
        painter->setPen(pal.color(QPalette::Mid));
        painter->drawRect(box.adjusted(0, 0, -1, -1));
        const QString problem = m_thumbnails->problem(files[i]);
        if (problem.isEmpty()) continue;
        painter->setPen(pal.color(QPalette::PlaceholderText));
        painter->drawText(box.adjusted(4, 4, -4, -4), Qt::AlignCenter | Qt::TextWordWrap,
                          tr("image %1").arg(problem));
    }
}

QColor MessageDelegate::quoteBarColour(const QPalette& palette) {
    // Halfway between the text and its background, opaque: visible on the quote's tint.
    const QColor text = palette.color(QPalette::Text), base = palette.color(QPalette::Base);
    return QColor((text.red() + base.red()) / 2, (text.green() + base.green()) / 2,
                  (text.blue() + base.blue()) / 2);
}

QFont MessageDelegate::statsFont(const QFont& font) {
    QFont small = font;
    small.setPointSizeF(small.pointSizeF() * 0.85);
    return small;
}

int MessageDelegate::statsHeight(const QString& stats, const QFont& font, int width) {
    // The figures wrap between words: a narrow window shows all of them.
    return QFontMetrics(statsFont(font))
        .boundingRect(QRect(0, 0, width, INT_MAX), kStatsFlags, stats)
        .height();
}

QString MessageDelegate::hardLineBreaks(const QString& markdown) {
    // Chat text means its newlines: a single newline between two non-empty lines becomes
    // a Markdown hard break ("  " at the line's end). Fenced code keeps its lines as they
    // are; at the end of a paragraph, list item or heading a hard break renders nothing.
    const QStringList lines = markdown.split(QLatin1Char('\n'));
    QString out;
    bool fence = false;
    for (int i = 0; i < lines.size(); ++i) {
        const QString& line = lines[i];
        const QString trimmed = line.trimmed();
        const bool fenceLine =
            trimmed.startsWith(QLatin1String("```")) || trimmed.startsWith(QLatin1String("~~~"));
        out += line;
        if (fenceLine) fence = !fence;
        const bool last = i + 1 == lines.size();
        if (!fence && !fenceLine && !last && !trimmed.isEmpty() &&
            !lines[i + 1].trimmed().isEmpty() && !line.endsWith(QLatin1String("  ")) &&
            !line.endsWith(QLatin1Char('\\')))
            out += QLatin1String("  ");
        if (!last) out += QLatin1Char('\n');
    }
    return out;
}

void MessageDelegate::buildBody(QTextDocument& doc, const QString& text, const QFont& font,
                                const QPalette& palette) {
    const QString markdown = hardLineBreaks(text);
    doc.setDefaultFont(font);
    doc.setDocumentMargin(0);
    // CommonMark and GFM as cmark-gfm reads them; raw HTML (<img src=...>, <a>) is shown
    // as text and images become their alt text (MarkdownDocumentWriter).
    MarkdownDocumentWriter::write(doc, markdown, palette);
    // Nothing the writer makes is an image; this stays as the last guard before any layout:
    // model text never makes the view open a file (SafeTextDocument).
    SafeTextDocument::replaceImages(doc);
    CodeBlockHighlighter::highlight(doc, markdown, isDark(palette));
    // Code never wraps (CodeBlockHighlighter): a wide block scrolls sideways in the view.
    // The first line of each block leaves room for the Copy button pinned at its right
    // end, so a block that fits shows its whole first line beside the button.
    const int room = buttonRoom(font);
    for (const CodeBlockHighlighter::CodeBlock& code :
         CodeBlockHighlighter::codeBlocks(doc, markdown)) {
        QTextCursor first(doc.findBlockByNumber(code.firstBlock));
        QTextBlockFormat margin;
        margin.setRightMargin(room);
        first.mergeBlockFormat(margin);
    }
}

void MessageDelegate::layoutBody(QTextDocument& doc, const QString& markdown, const QFont& font,
                                 const QPalette& palette, int width) {
    buildBody(doc, markdown, font, palette);
    doc.setTextWidth(width);
    doc.size(); // lays the document out: the code lines' widths are read below
    const int room = buttonRoom(font);
    for (const CodeBlockHighlighter::CodeBlock& code :
         CodeBlockHighlighter::codeBlocks(doc, markdown)) {
        if (CodeBlockHighlighter::contentWidth(doc, code, room) <= width) continue;
        // The layout keeps the larger of two touching margins: the room goes under the
        // gap the block had before (to the next block's top margin), not into it.
        const QTextBlock last = doc.findBlockByNumber(code.lastBlock);
        const QTextBlock next = last.next();
        const qreal gap = std::max(last.blockFormat().bottomMargin(),
                                   next.isValid() ? next.blockFormat().topMargin() : 0.0);
        QTextBlockFormat space;
        space.setBottomMargin(gap + kScrollIndicatorSpace);
        QTextCursor(last).mergeBlockFormat(space);
    }
}

int MessageDelegate::codeScrollStep() {
    return 20 * std::max(1, QApplication::wheelScrollLines());
}

QSize MessageDelegate::copyButtonSize(const QFont& font) {
    const QFontMetrics fm(font);
    return {fm.horizontalAdvance(tr("Copy")) + 16, fm.height() + 4};
}

QString MessageDelegate::thinkingLabel(const QModelIndex& index) {
    const double seconds = index.data(ConversationModel::ThinkingSecondsRole).toDouble();
    const bool expanded = index.data(ConversationModel::ThinkingExpandedRole).toBool();
    const bool streaming = index.data(ConversationModel::StreamingRole).toBool();
    const bool answering = !index.data(ConversationModel::ContentRole).toString().isEmpty();
    const QString arrow = expanded ? QStringLiteral("▾ ") : QStringLiteral("▸ ");
    if (streaming && !answering) return arrow + QObject::tr("Thinking… %1 s").arg(qRound(seconds));
    // A conversation opened from disk has its reasoning but not how long it took.
    if (seconds < 0) return arrow + QObject::tr("Thoughts");
    return arrow + QObject::tr("Thought for %1 s").arg(qRound(seconds));
}

QString MessageDelegate::readingLabel(const QModelIndex& index) {
    const QVariant reading = index.data(ConversationModel::ReadingRole);
    if (!reading.isValid()) return {};
    const QPointF p = reading.toPointF();
    const int done = int(p.x()), total = int(p.y());
    const int restored = index.data(ConversationModel::ReadingRestoredRole).toInt();
    QString label;
    // The conversation so far came back from disk: only the rest is read.
    if (restored > 0)
        label = restored == 1 ? QObject::tr("Restored 1 position from disk")
                              : QObject::tr("Restored %1 positions from disk").arg(restored);
    // Nothing held (a restart without a saved state, another conversation in between):
    // the cost is the whole conversation, not the message, and the bubble says which.
    if (total > 0 && index.data(ConversationModel::ReadingAgainRole).toBool())
        label =
            QObject::tr("Reading this conversation again: %1 of %2 positions").arg(done).arg(total);
    else if (total > 0)
        label += (label.isEmpty() ? QObject::tr("Reading your message: %1 of %2 tokens")
                                  : QObject::tr(" · reading your message: %1 of %2 tokens"))
                     .arg(done)
                     .arg(total);
    const double left = index.data(ConversationModel::ReadingSecondsLeftRole).toDouble();
    if (left >= 0 && done < total) {
        const int s = int(std::ceil(left));
        label += s >= 120 ? QObject::tr(" · about %1 min left").arg((s + 30) / 60)
                          : QObject::tr(" · about %1 s left").arg(std::max(1, s));
    }
    return label;
}

MessageDelegate::Layout MessageDelegate::layout(const QStyleOptionViewItem& option,
                                                const QModelIndex& index) const {
    Layout l;
    const QFontMetrics fm(option.font);
    const int width = std::max(100, option.rect.width() - 2 * kMargin);
    int y = option.rect.top() + kMargin;
    l.role = QRect(option.rect.left() + kMargin, y, width, fm.height());
    if (const QString version = versionText(index); !version.isEmpty()) {
        // "< 2/3 >" after the speaker's name.
        const int x = l.role.left() + fm.horizontalAdvance(tr("You")) + 3 * kMargin;
        const int button = fm.horizontalAdvance(QLatin1Char('<')) + 2 * kGap + 4;
        l.previousVersion = QRect(x, y, button, fm.height());
        l.version = QRect(l.previousVersion.right() + 1, y,
                          fm.horizontalAdvance(version) + 2 * kGap, fm.height());
        l.nextVersion = QRect(l.version.right() + 1, y, button, fm.height());
    }
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
    if (index.data(ConversationModel::ReadingRole).isValid()) {
        l.reading = QRect(option.rect.left() + kMargin, y, width, fm.height());
        y += fm.height() + kGap;
        l.readingBar =
            QRect(option.rect.left() + kMargin, y, std::min(width, 360), fm.height() / 2 + 4);
        y += l.readingBar.height() + kGap;
    }
    if (!index.data(ConversationModel::ImagesRole).toStringList().isEmpty()) {
        l.images = QRect(option.rect.left() + kMargin, y, width, kThumbnailSide);
        y += kThumbnailSide + kGap;
    }
    const QString content = index.data(ConversationModel::ContentRole).toString();
    const int bodyHeight =
        content.isEmpty() ? 0 : documentHeight(content, true, option.font, width, option.palette);
    l.body = QRect(option.rect.left() + kMargin, y, width, bodyHeight);
    y += bodyHeight;
    if (const QString stats = index.data(ConversationModel::StatsRole).toString();
        !stats.isEmpty()) {
        const int h = statsHeight(stats, option.font, width);
        y += kGap;
        l.stats = QRect(option.rect.left() + kMargin, y, width, h);
        y += h;
    }
    l.stats.setBottom(std::max(l.stats.bottom(), y));
    return l;
}

QVector<MessageDelegate::CodeArea> MessageDelegate::codeAreasIn(const QTextDocument& doc,
                                                                const QString& markdown,
                                                                const QRect& body,
                                                                const QFont& font) {
    QVector<CodeArea> out;
    const QSize size = copyButtonSize(font);
    const int room = buttonRoom(font);
    for (const CodeBlockHighlighter::CodeBlock& code :
         CodeBlockHighlighter::codeBlocks(doc, markdown)) {
        QAbstractTextDocumentLayout* layout = doc.documentLayout();
        const QRectF first = layout->blockBoundingRect(doc.findBlockByNumber(code.firstBlock));
        const QRectF last = layout->blockBoundingRect(doc.findBlockByNumber(code.lastBlock));
        CodeArea area;
        area.rect = QRect(body.left(), body.top() + int(first.top()), body.width(),
                          int(std::ceil(last.top() + last.height() - first.top())));
        // Pinned at the block's top right, at the message's right edge: never scrolled.
        area.button = QRect(QPoint(body.right() - size.width() - 1, area.rect.top() + 2), size);
        area.contentWidth = CodeBlockHighlighter::contentWidth(doc, code, room);
        out.push_back(area);
    }
    return out;
}

QVector<MessageDelegate::CodeArea> MessageDelegate::codeAreas(const QStyleOptionViewItem& option,
                                                              const QModelIndex& index) const {
    const QString content = index.data(ConversationModel::ContentRole).toString();
    if (content.isEmpty()) return {};
    const Layout l = layout(option, index);
    SafeTextDocument doc;
    layoutBody(doc, content, option.font, option.palette, l.body.width());
    return codeAreasIn(doc, content, l.body, option.font);
}

QVector<QRect> MessageDelegate::copyButtonRects(const QStyleOptionViewItem& option,
                                                const QModelIndex& index) const {
    QVector<QRect> out;
    for (const CodeArea& area : codeAreas(option, index)) out.push_back(area.button);
    return out;
}

int MessageDelegate::codeBlockAt(const QStyleOptionViewItem& option, const QModelIndex& index,
                                 const QPoint& pos) const {
    const QVector<CodeArea> areas = codeAreas(option, index);
    for (int i = 0; i < areas.size(); ++i) {
        // The indicator under a wide block counts as the block.
        const int below = areas.at(i).maxOffset() > 0 ? kScrollIndicatorSpace : 0;
        if (areas.at(i).rect.adjusted(0, 0, 0, below).contains(pos)) return i;
    }
    return -1;
}

int MessageDelegate::firstWideCodeBlock(const QStyleOptionViewItem& option,
                                        const QModelIndex& index) const {
    const QVector<CodeArea> areas = codeAreas(option, index);
    for (int i = 0; i < areas.size(); ++i)
        if (areas.at(i).maxOffset() > 0) return i;
    return -1;
}

bool MessageDelegate::scrollCode(const QStyleOptionViewItem& option, const QModelIndex& index,
                                 int block, int dx) {
    const QVector<CodeArea> areas = codeAreas(option, index);
    if (block < 0 || block >= areas.size()) return false;
    const QPair<int, int> key{index.row(), block};
    const int before = std::clamp(m_codeOffsets.value(key), 0, areas.at(block).maxOffset());
    const int after = std::clamp(before + dx, 0, areas.at(block).maxOffset());
    if (after == 0)
        m_codeOffsets.remove(key);
    else
        m_codeOffsets.insert(key, after);
    return after != before;
}

void MessageDelegate::clearCodeOffsets(int fromRow) {
    for (auto it = m_codeOffsets.begin(); it != m_codeOffsets.end();)
        it = it.key().first >= fromRow ? m_codeOffsets.erase(it) : std::next(it);
}

QRect MessageDelegate::bodyTextRect(const QStyleOptionViewItem& option, const QModelIndex& index,
                                    int position, int length) const {
    const Layout l = layout(option, index);
    SafeTextDocument doc;
    layoutBody(doc, index.data(ConversationModel::ContentRole).toString(), option.font,
               option.palette, l.body.width());
    const QTextBlock block = doc.findBlock(position);
    if (!block.isValid() || !block.layout()) return l.body;
    const QRectF blockRect = doc.documentLayout()->blockBoundingRect(block);
    const QTextLine line = block.layout()->lineForTextPosition(position - block.position());
    if (!line.isValid()) return blockRect.translated(l.body.topLeft()).toRect();
    const qreal x1 = line.cursorToX(position - block.position());
    const qreal x2 = line.cursorToX(position + length - block.position());
    return QRectF(blockRect.left() + x1, blockRect.top() + line.y(), std::max<qreal>(1, x2 - x1),
                  line.height())
        .translated(l.body.topLeft())
        .toRect();
}

void MessageDelegate::paint(QPainter* painter, const QStyleOptionViewItem& option,
                            const QModelIndex& index) const {
    painter->save();
    const QPalette& pal = option.palette;
    const bool user =
        index.data(ConversationModel::RoleNameRole).toString() == QLatin1String("user");
    if (user) painter->fillRect(option.rect.adjusted(4, 2, -4, -2), pal.alternateBase());
    if (option.state & QStyle::State_HasFocus) {
        // The message that Copy message (Ctrl+Shift+C) acts on when the list has focus.
        painter->setPen(QPen(pal.color(QPalette::Highlight), 1, Qt::DotLine));
        painter->drawRect(option.rect.adjusted(4, 2, -5, -3));
    }
    const Layout l = layout(option, index);
    paintHeader(painter, option, index, l);
    painter->setFont(option.font);
    paintThinkingAndReading(painter, option, index, l);
    if (!l.images.isNull()) paintImages(painter, option, index, l.images);
    if (!index.data(ConversationModel::ContentRole).toString().isEmpty())
        paintBody(painter, option, index, l.body);
    const QString stats = index.data(ConversationModel::StatsRole).toString();
    if (!stats.isEmpty()) {
        painter->setFont(statsFont(option.font));
        painter->setPen(pal.color(QPalette::PlaceholderText));
        painter->drawText(l.stats, kStatsFlags, stats);
    }
    painter->restore();
}

void MessageDelegate::paintHeader(QPainter* painter, const QStyleOptionViewItem& option,
                                  const QModelIndex& index, const Layout& l) const {
    const QPalette& pal = option.palette;
    const bool user =
        index.data(ConversationModel::RoleNameRole).toString() == QLatin1String("user");
    QFont bold = option.font;
    bold.setBold(true);
    painter->setFont(bold);
    painter->setPen(pal.color(QPalette::Text));
    painter->drawText(l.role, Qt::AlignLeft | Qt::AlignVCenter, user ? tr("You") : tr("K3"));
    if (l.version.isNull()) return;
    const QPoint v = index.data(ConversationModel::VersionRole).toPoint();
    painter->setFont(option.font);
    const QColor on = pal.color(QPalette::Link);
    const QColor off = pal.color(QPalette::Disabled, QPalette::Text);
    painter->setPen(v.x() > 1 ? on : off);
    painter->drawText(l.previousVersion, Qt::AlignCenter, QStringLiteral("<"));
    painter->setPen(pal.color(QPalette::PlaceholderText));
    painter->drawText(l.version, Qt::AlignCenter, versionText(index));
    painter->setPen(v.x() < v.y() ? on : off);
    painter->drawText(l.nextVersion, Qt::AlignCenter, QStringLiteral(">"));
}

void MessageDelegate::paintThinkingAndReading(QPainter* painter, const QStyleOptionViewItem& option,
                                              const QModelIndex& index, const Layout& l) const {
    const QPalette& pal = option.palette;
    if (!l.thinking.isNull()) {
        painter->setPen(pal.color(QPalette::PlaceholderText));
        painter->drawText(l.thinking, Qt::AlignLeft | Qt::AlignVCenter, thinkingLabel(index));
    }
    if (!l.reasoning.isNull()) {
        SafeTextDocument doc;
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
    if (l.reading.isNull()) return;
    painter->setPen(pal.color(QPalette::PlaceholderText));
    painter->drawText(l.reading, Qt::AlignLeft | Qt::AlignVCenter, readingLabel(index));
    const QPointF p = index.data(ConversationModel::ReadingRole).toPointF();
    QStyleOptionProgressBar bar;
    bar.rect = l.readingBar;
    bar.palette = pal;
    bar.state = QStyle::State_Enabled | QStyle::State_Horizontal;
    bar.minimum = 0;
    // Everything restored from disk: nothing to read, the bar is full.
    bar.maximum = std::max(1, int(p.y()));
    bar.progress = p.y() > 0 ? int(p.x()) : 1;
    bar.textVisible = false;
    const QWidget* widget = option.widget;
    (widget ? widget->style() : QApplication::style())
        ->drawControl(QStyle::CE_ProgressBar, &bar, painter, widget);
}

QAbstractTextDocumentLayout::PaintContext
MessageDelegate::bodyContext(const QTextDocument& doc, const QPalette& pal, int row) const {
    QAbstractTextDocumentLayout::PaintContext ctx;
    ctx.palette = pal;
    if (m_findQuery.isEmpty()) return ctx;
    QColor tint = pal.color(QPalette::Highlight);
    tint.setAlpha(70);
    for (QTextCursor c = doc.find(m_findQuery); !c.isNull(); c = doc.find(m_findQuery, c)) {
        QAbstractTextDocumentLayout::Selection s;
        s.cursor = c;
        const bool current = row == m_matchRow && c.selectionStart() == m_matchPosition;
        s.format.setBackground(current ? pal.color(QPalette::Highlight) : tint);
        if (current) s.format.setForeground(pal.color(QPalette::HighlightedText));
        ctx.selections.push_back(s);
    }
    return ctx;
}

void MessageDelegate::paintBody(QPainter* painter, const QStyleOptionViewItem& option,
                                const QModelIndex& index, const QRect& body) const {
    const QString content = index.data(ConversationModel::ContentRole).toString();
    SafeTextDocument doc;
    layoutBody(doc, content, option.font, option.palette, body.width());
    const QVector<CodeArea> areas = codeAreasIn(doc, content, body, option.font);
    const QBrush codeBackground =
        CodeBlockHighlighter::takeBackground(doc, CodeBlockHighlighter::codeBlocks(doc, content));
    const QAbstractTextDocumentLayout::PaintContext ctx =
        bodyContext(doc, option.palette, index.row());
    // The prose: everything but the code blocks, which are drawn scrolled on their own.
    QRegion prose(body);
    for (const CodeArea& area : areas) prose -= area.rect;
    painter->save();
    painter->setClipRegion(prose, Qt::IntersectClip);
    painter->translate(body.topLeft());
    doc.documentLayout()->draw(painter, ctx);
    paintQuoteBars(painter, doc, doc.rootFrame(), quoteBarColour(option.palette));
    painter->restore();
    for (int i = 0; i < areas.size(); ++i) {
        const int offset = std::clamp(codeOffset(index.row(), i), 0, areas.at(i).maxOffset());
        paintCodeArea(painter, doc, ctx, body, areas.at(i), offset, codeBackground);
        paintCopyButton(painter, option, areas.at(i).button);
    }
}

void MessageDelegate::paintCodeArea(QPainter* painter, const QTextDocument& doc,
                                    const QAbstractTextDocumentLayout::PaintContext& ctx,
                                    const QRect& body, const CodeArea& area, int offset,
                                    const QBrush& background) const {
    painter->save();
    painter->setClipRect(area.rect, Qt::IntersectClip);
    painter->fillRect(area.rect, background);
    painter->translate(body.left() - offset, body.top());
    QAbstractTextDocumentLayout::PaintContext scrolled = ctx;
    scrolled.clip = QRectF(area.rect.translated(offset - body.left(), -body.top()));
    doc.documentLayout()->draw(painter, scrolled);
    painter->restore();
    if (area.maxOffset() <= 0) return;
    // A thin indicator under the block: the track, and where the visible part lies in it.
    const QRect track(area.rect.left(), area.rect.bottom() + 2, area.rect.width(),
                      kScrollIndicatorSpace - 2);
    const int thumbWidth =
        std::max(16, int(qint64(track.width()) * track.width() / area.contentWidth));
    const int thumbX = track.left() + int(qint64(track.width() - thumbWidth) * offset /
                                          std::max(1, area.maxOffset()));
    QColor colour = ctx.palette.color(QPalette::PlaceholderText);
    painter->save();
    painter->setRenderHint(QPainter::Antialiasing);
    painter->setPen(Qt::NoPen);
    colour.setAlpha(50);
    painter->setBrush(colour);
    painter->drawRoundedRect(track, 2, 2);
    colour.setAlpha(170);
    painter->setBrush(colour);
    painter->drawRoundedRect(QRect(thumbX, track.top(), thumbWidth, track.height()), 2, 2);
    painter->restore();
}

void MessageDelegate::paintCopyButton(QPainter* painter, const QStyleOptionViewItem& option,
                                      const QRect& rect) const {
    const QWidget* widget = option.widget;
    QStyle* style = widget ? widget->style() : QApplication::style();
    QStyleOptionButton button;
    button.rect = rect;
    button.text = tr("Copy");
    button.palette = option.palette;
    button.fontMetrics = option.fontMetrics;
    button.state = QStyle::State_Enabled | QStyle::State_Raised;
    if (const auto* view = qobject_cast<const QAbstractScrollArea*>(widget);
        view && (option.state & QStyle::State_MouseOver) &&
        rect.contains(view->viewport()->mapFromGlobal(QCursor::pos())))
        button.state |= QStyle::State_MouseOver;
    style->drawControl(QStyle::CE_PushButton, &button, painter, widget);
}

QString MessageDelegate::versionText(const QModelIndex& index) {
    const QPoint v = index.data(ConversationModel::VersionRole).toPoint();
    return v.y() > 1 ? QStringLiteral("%1/%2").arg(v.x()).arg(v.y()) : QString();
}

QPair<QRect, QRect> MessageDelegate::versionButtonRects(const QStyleOptionViewItem& option,
                                                        const QModelIndex& index) const {
    const Layout l = layout(option, index);
    return {l.previousVersion, l.nextVersion};
}

QSize MessageDelegate::sizeHint(const QStyleOptionViewItem& option,
                                const QModelIndex& index) const {
    const Layout l = layout(option, index);
    return {option.rect.width(), l.stats.bottom() - option.rect.top() + kMargin};
}

bool MessageDelegate::editorEvent(QEvent* event, QAbstractItemModel* model,
                                  const QStyleOptionViewItem& option, const QModelIndex& index) {
    if (event->type() == QEvent::MouseButtonDblClick) {
        // A double-click opens the text for selection (the view's edit trigger), except on
        // the controls drawn here: there it is two clicks.
        const QPoint at = static_cast<QMouseEvent*>(event)->position().toPoint();
        const Layout l = layout(option, index);
        bool control =
            l.thinking.contains(at) || l.previousVersion.contains(at) || l.nextVersion.contains(at);
        for (const QRect& button : copyButtonRects(option, index)) control |= button.contains(at);
        if (control) return true;
    }
    if (event->type() == QEvent::MouseButtonRelease) {
        const auto* mouse = static_cast<QMouseEvent*>(event);
        const QPoint at = mouse->position().toPoint();
        const Layout l = layout(option, index);
        const QPoint v = index.data(ConversationModel::VersionRole).toPoint();
        if (!l.version.isNull() && l.previousVersion.contains(at) && v.x() > 1) {
            emit versionRequested(index.row(), v.x() - 2);
            return true;
        }
        if (!l.version.isNull() && l.nextVersion.contains(at) && v.x() < v.y()) {
            emit versionRequested(index.row(), v.x());
            return true;
        }
        if (!l.thinking.isNull() && l.thinking.contains(at)) {
            emit thinkingToggled(index.row());
            return true;
        }
        if (l.body.contains(at)) {
            const QVector<QRect> buttons = copyButtonRects(option, index);
            for (int i = 0; i < buttons.size(); ++i)
                if (buttons.at(i).contains(at)) {
                    emit copyCodeRequested(index.row(), i);
                    return true;
                }
        }
    }
    return QStyledItemDelegate::editorEvent(event, model, option, index);
}

QWidget* MessageDelegate::createEditor(QWidget* parent, const QStyleOptionViewItem& option,
                                       const QModelIndex& index) const {
    QPalette pal = option.palette;
    if (index.data(ConversationModel::RoleNameRole).toString() == QLatin1String("user"))
        pal.setColor(QPalette::Base, pal.color(QPalette::AlternateBase));
    return new MessageTextEditor(parent, option.font, pal);
}

void MessageDelegate::setEditorData(QWidget* editor, const QModelIndex& index) const {
    if (auto* text = qobject_cast<MessageTextEditor*>(editor))
        text->showContent(index.data(ConversationModel::ContentRole).toString());
}

void MessageDelegate::setModelData(QWidget*, QAbstractItemModel*, const QModelIndex&) const {
    // Read-only: selecting text never changes the message.
}

void MessageDelegate::updateEditorGeometry(QWidget* editor, const QStyleOptionViewItem& option,
                                           const QModelIndex& index) const {
    const Layout l = layout(option, index);
    // Over the text, and down to the message's end: a wide code block gives the editor a
    // horizontal scroll bar, which takes the timing line's place while it is open.
    QRect r = l.body;
    r.setBottom(std::max(r.bottom(), option.rect.bottom() - kGap));
    editor->setGeometry(r);
}

bool MessageDelegate::eventFilter(QObject* object, QEvent* event) {
    // Tab leaves the text editor for the conversation instead of opening the next
    // message's: the keyboard goes on from there, never round the messages' editors.
    if (event->type() == QEvent::KeyPress) {
        const int key = static_cast<QKeyEvent*>(event)->key();
        if (auto* editor = qobject_cast<QWidget*>(object);
            editor && (key == Qt::Key_Tab || key == Qt::Key_Backtab)) {
            emit closeEditor(editor, QAbstractItemDelegate::NoHint);
            return true;
        }
    }
    return QStyledItemDelegate::eventFilter(object, event);
}
