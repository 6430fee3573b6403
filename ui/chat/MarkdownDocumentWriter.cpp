#include "chat/MarkdownDocumentWriter.h"

#include "chat/MathSpans.h"
#include "chat/MathTypesetter.h"

#include <QFontDatabase>
#include <QFontMetricsF>
#include <QTextBlock>
#include <QTextCursor>
#include <QTextDocument>
#include <QTextList>
#include <QTextTable>
#include <QUrl>

#include <cmark-gfm-core-extensions.h>
#include <cmark-gfm.h>

#include <memory>

namespace {

// The parsed tree of one Markdown text; frees it and its parser.
class CmarkTree {
public:
    explicit CmarkTree(const QString& markdown) {
        // Titles are made on worker threads too: register the extensions exactly once.
        static const bool registered = (cmark_gfm_core_extensions_ensure_registered(), true);
        Q_UNUSED(registered);
        // ~~ only: a single tilde is "about" in chat text ("~5 GB").
        m_parser = cmark_parser_new(CMARK_OPT_DEFAULT | CMARK_OPT_STRIKETHROUGH_DOUBLE_TILDE);
        for (const char* name : {"table", "strikethrough", "autolink", "tasklist"})
            if (cmark_syntax_extension* ext = cmark_find_syntax_extension(name))
                cmark_parser_attach_syntax_extension(m_parser, ext);
        const QByteArray utf8 = markdown.toUtf8();
        cmark_parser_feed(m_parser, utf8.constData(), size_t(utf8.size()));
        m_root = cmark_parser_finish(m_parser);
    }
    ~CmarkTree() {
        cmark_node_free(m_root);
        cmark_parser_free(m_parser);
    }
    CmarkTree(const CmarkTree&) = delete;
    CmarkTree& operator=(const CmarkTree&) = delete;
    cmark_node* root() const { return m_root; }

private:
    cmark_parser* m_parser = nullptr;
    cmark_node* m_root = nullptr;
};

QString literal(cmark_node* node) {
    const char* text = cmark_node_get_literal(node);
    return text ? QString::fromUtf8(text) : QString();
}

bool isType(cmark_node* node, const char* name) {
    return qstrcmp(cmark_node_get_type_string(node), name) == 0;
}

QString withoutFinalNewline(QString text) {
    if (text.endsWith(u'\n')) text.chop(1);
    return text;
}

// CommonMark tab stops are 4 columns; the document shows code as the importer did.
QString expandTabs(const QString& line) {
    QString out;
    for (const QChar c : line) {
        if (c == u'\t')
            out += QString(4 - out.size() % 4, u' ');
        else
            out += c;
    }
    return out;
}

bool isSafeLink(const QString& url) {
    const QString scheme = QUrl(url).scheme().toLower();
    return scheme == QLatin1String("http") || scheme == QLatin1String("https") ||
           scheme == QLatin1String("mailto");
}

// The maths placeholders of `text` replaced by `replace(span)`, the rest by `plain(text)`.
template <typename Plain, typename Maths>
void splitMaths(const QString& text, const QVector<MathSpans::Span>& spans, Plain plain,
                Maths maths) {
    qsizetype i = 0;
    while (i < text.size()) {
        qsizetype open = i;
        while (open < text.size() && text.at(open) != MathSpans::kInlineOpen &&
               text.at(open) != MathSpans::kDisplayOpen)
            ++open;
        if (open > i) plain(text.mid(i, open - i));
        if (open >= text.size()) return;
        const qsizetype close = text.indexOf(MathSpans::kClose, open);
        bool ok = false;
        const int index = close > open ? text.mid(open + 1, close - open - 1).toInt(&ok) : -1;
        if (!ok || index < 0 || index >= spans.size()) {
            plain(text.mid(open, 1));
            i = open + 1;
            continue;
        }
        maths(spans.at(index));
        i = close + 1;
    }
}

class Writer {
public:
    Writer(QTextDocument& doc, const QPalette& palette, QVector<MathSpans::Span> spans)
        : m_doc(doc), m_cursor(&doc), m_spans(std::move(spans)) {
        // Whole pixels: fractional margins put lines and code areas a pixel apart.
        m_spacing = std::floor(QFontMetricsF(doc.defaultFont()).height() / 2);
        const QColor text = palette.color(QPalette::Text);
        m_quoteTint = text;
        m_quoteTint.setAlphaF(0.06f);
        m_headerTint = text;
        m_headerTint.setAlphaF(0.08f);
        m_border = palette.color(QPalette::Mid);
        m_link = palette.color(QPalette::Link);
        m_mono = QFontDatabase::systemFont(QFontDatabase::FixedFont);
    }

    void document(cmark_node* root) {
        for (cmark_node* n = cmark_node_first_child(root); n; n = cmark_node_next(n)) block(n);
        QTextCursor end(&m_doc);
        end.movePosition(QTextCursor::End);
        if (m_blockUnused && end.block() != m_doc.begin()) {
            // The empty block after a closing table or quote takes no height.
            QTextBlockFormat none;
            none.setLineHeight(0, QTextBlockFormat::FixedHeight);
            end.setBlockFormat(none);
            return;
        }
        // No space after the last block: the message's own margin follows.
        QTextBlockFormat last;
        last.setBottomMargin(0);
        end.mergeBlockFormat(last);
    }

private:
    struct ListLevel {
        QTextListFormat format;
        QTextList* list = nullptr;
        bool tight = true;
        // Qt 6.4's lists always count from 1: a list that starts elsewhere ("2." after a
        // code block) has no marker and writes its numbers as text, hanging left.
        int writtenNumber = 0;
        QString suffix;
    };

    // The format every block at this point starts from: the quote level, and the indent
    // of the list item it continues (counted from the quote's frame it is in).
    QTextBlockFormat baseFormat() const {
        QTextBlockFormat f;
        if (const int indent = int(m_lists.size()) - m_framedListDepth; indent > 0)
            f.setIndent(indent);
        if (m_quoteLevel > 0) {
            f.setProperty(QTextFormat::BlockQuoteLevel, m_quoteLevel);
            f.setLeftMargin(quoteRoom());
        }
        return f;
    }

    // Inside a quote, what its frame's padding leaves to make its bar's room.
    qreal quoteRoom() const {
        return m_quoteLevel > 0 ? MarkdownDocumentWriter::kQuoteIndent - m_spacing / 2 : 0;
    }

    // Makes room for a frame or table: they need a block before them, which takes no
    // height when nothing was written into it.
    void prepareForFrame() {
        if (m_itemStart) startBlock(baseFormat()); // the item's marker line
        if (!m_blockUnused) return;
        QTextBlockFormat none;
        none.setLineHeight(0, QTextBlockFormat::FixedHeight);
        m_cursor.setBlockFormat(none);
    }

    // After a frame or table: the block that follows it is the next one written to.
    void leaveFrame(QTextFrame* frame) {
        m_cursor = frame->lastCursorPosition();
        m_cursor.movePosition(QTextCursor::NextBlock);
        m_blockUnused = true;
    }

    qreal frameIndent() const {
        return (int(m_lists.size()) - m_framedListDepth) * m_doc.indentWidth();
    }

    // A block quote: a tinted frame with room at its left for the bar the view draws.
    void blockQuote(cmark_node* node) {
        prepareForFrame();
        QTextFrameFormat frame;
        frame.setBackground(m_quoteTint);
        frame.setBorder(0);
        frame.setLeftMargin(frameIndent() + quoteRoom());
        frame.setPadding(m_spacing / 2);
        frame.setBottomMargin(m_spacing);
        frame.setProperty(MarkdownDocumentWriter::quoteFrameProperty(), true);
        QTextFrame* quote = m_cursor.insertFrame(frame);
        m_blockUnused = true;
        const int outerDepth = m_framedListDepth;
        m_framedListDepth = int(m_lists.size());
        ++m_quoteLevel;
        for (cmark_node* n = cmark_node_first_child(node); n; n = cmark_node_next(n)) block(n);
        --m_quoteLevel;
        m_framedListDepth = outerDepth;
        // No space under the quote's last block: the frame's padding is there.
        if (!m_blockUnused && !m_cursor.currentTable()) {
            QTextBlockFormat f;
            f.setBottomMargin(0);
            m_cursor.mergeBlockFormat(f);
        }
        leaveFrame(quote);
    }

    qreal paragraphSpacing() const {
        return !m_lists.isEmpty() && m_lists.last().tight ? 0 : m_spacing;
    }

    void startBlock(QTextBlockFormat format, const QTextCharFormat& chars = {}) {
        const bool item = m_itemStart;
        if (item) format.setIndent(0); // a list item's indent is its list's
        if (m_blockUnused) {
            m_cursor.setBlockFormat(format);
            m_cursor.setBlockCharFormat(chars);
            m_blockUnused = false;
        } else {
            m_cursor.insertBlock(format, chars);
        }
        if (!item) return;
        m_itemStart = false;
        ListLevel& level = m_lists.last();
        if (!level.list)
            level.list = m_cursor.createList(level.format);
        else
            level.list->add(m_cursor.block());
        if (level.writtenNumber > 0) {
            // In the marker's place, left of the item's text.
            const QString number = QString::number(level.writtenNumber++) + level.suffix + u' ';
            QTextBlockFormat hanging;
            hanging.setTextIndent(-QFontMetricsF(m_doc.defaultFont()).horizontalAdvance(number));
            m_cursor.mergeBlockFormat(hanging);
            m_cursor.insertText(number, chars);
        }
        if (m_itemMarker != QTextBlockFormat::MarkerType::NoMarker) {
            QTextBlockFormat marker;
            marker.setMarker(m_itemMarker);
            m_cursor.mergeBlockFormat(marker);
        }
    }

    void block(cmark_node* node) {
        switch (cmark_node_get_type(node)) {
        case CMARK_NODE_PARAGRAPH: {
            QTextBlockFormat f = baseFormat();
            f.setBottomMargin(paragraphSpacing());
            startBlock(f);
            m_afterDisplay = false;
            inlines(node, QTextCharFormat());
            m_afterDisplay = false;
            break;
        }
        case CMARK_NODE_HEADING: {
            const int level = cmark_node_get_heading_level(node);
            QTextBlockFormat f = baseFormat();
            f.setHeadingLevel(level);
            f.setTopMargin(m_spacing);
            f.setBottomMargin(m_spacing);
            QTextCharFormat chars;
            chars.setFontWeight(QFont::Bold);
            // Chat-sized headings: # and ## a step or two larger, the rest bold.
            chars.setProperty(QTextFormat::FontSizeAdjustment, std::max(0, 3 - level));
            startBlock(f, chars);
            inlines(node, chars);
            break;
        }
        case CMARK_NODE_CODE_BLOCK:
            codeBlock(node);
            break;
        case CMARK_NODE_HTML_BLOCK: {
            // Raw HTML from the model is text, never markup.
            QTextBlockFormat f = baseFormat();
            f.setBottomMargin(paragraphSpacing());
            startBlock(f);
            QString text = withoutFinalNewline(literal(node));
            text.replace(u'\n', QChar::LineSeparator);
            m_cursor.insertText(text, QTextCharFormat());
            break;
        }
        case CMARK_NODE_THEMATIC_BREAK: {
            QTextBlockFormat f = baseFormat();
            f.setProperty(QTextFormat::BlockTrailingHorizontalRulerWidth,
                          QTextLength(QTextLength::PercentageLength, 100));
            f.setBottomMargin(m_spacing);
            startBlock(f);
            break;
        }
        case CMARK_NODE_BLOCK_QUOTE:
            blockQuote(node);
            break;
        case CMARK_NODE_LIST:
            list(node);
            break;
        default:
            if (isType(node, "table")) {
                table(node);
                break;
            }
            for (cmark_node* n = cmark_node_first_child(node); n; n = cmark_node_next(n)) block(n);
        }
    }

    // The last block written gets the paragraph space below it (a tight list or a quote
    // has none between its own blocks).
    void spaceAfter() {
        if (m_blockUnused) return;
        QTextBlockFormat f;
        f.setBottomMargin(paragraphSpacing());
        m_cursor.mergeBlockFormat(f);
    }

    void list(cmark_node* node) {
        ListLevel level;
        const int depth = int(m_lists.size()) + 1;
        level.format.setIndent(depth);
        if (cmark_node_get_list_type(node) == CMARK_ORDERED_LIST) {
            level.format.setStyle(QTextListFormat::ListDecimal);
            level.suffix = cmark_node_get_list_delim(node) == CMARK_PAREN_DELIM
                               ? QStringLiteral(")")
                               : QStringLiteral(".");
            level.format.setNumberSuffix(level.suffix);
            if (const int start = cmark_node_get_list_start(node); start != 1) {
                level.writtenNumber = start;
                level.format.setStyle(QTextListFormat::ListStyleUndefined); // no marker
            }
        } else {
            static const QTextListFormat::Style bullets[] = {QTextListFormat::ListDisc,
                                                             QTextListFormat::ListCircle,
                                                             QTextListFormat::ListSquare};
            level.format.setStyle(bullets[(depth - 1) % 3]);
        }
        level.tight = cmark_node_get_list_tight(node) != 0;
        m_lists.push_back(level);
        for (cmark_node* item = cmark_node_first_child(node); item; item = cmark_node_next(item)) {
            m_itemStart = true;
            m_itemMarker = QTextBlockFormat::MarkerType::NoMarker;
            if (isType(item, "tasklist"))
                m_itemMarker = cmark_gfm_extensions_get_tasklist_item_checked(item)
                                   ? QTextBlockFormat::MarkerType::Checked
                                   : QTextBlockFormat::MarkerType::Unchecked;
            for (cmark_node* n = cmark_node_first_child(item); n; n = cmark_node_next(n)) block(n);
            if (m_itemStart) startBlock(baseFormat()); // an empty item is still an item
        }
        m_lists.pop_back();
        spaceAfter();
    }

    void codeBlock(cmark_node* node) {
        int length = 0, offset = 0;
        char fenceChar = 0;
        const bool fenced = cmark_node_get_fenced(node, &length, &offset, &fenceChar) != 0;
        const QString info = QString::fromUtf8(cmark_node_get_fence_info(node)).trimmed();
        const QString language = info.section(u' ', 0, 0);
        QTextCharFormat chars;
        chars.setFontFamilies({m_mono.family(), QStringLiteral("monospace")});
        chars.setFontFixedPitch(true);
        const QStringList lines = withoutFinalNewline(literal(node)).split(u'\n');
        for (int i = 0; i < lines.size(); ++i) {
            QTextBlockFormat f = baseFormat();
            f.setProperty(QTextFormat::BlockCodeLanguage, language);
            // An indented block is code as much as a fenced one: the same look and Copy.
            f.setProperty(QTextFormat::BlockCodeFence,
                          QString(QLatin1Char(fenced ? fenceChar : '`')));
            f.setNonBreakableLines(true);
            if (i + 1 == lines.size()) f.setBottomMargin(m_spacing);
            startBlock(f, chars);
            m_cursor.insertText(expandTabs(lines.at(i)), chars);
        }
    }

    void table(cmark_node* node) {
        const int columns = cmark_gfm_extensions_get_table_columns(node);
        int rows = 0;
        for (cmark_node* r = cmark_node_first_child(node); r; r = cmark_node_next(r)) ++rows;
        if (columns <= 0 || rows <= 0) return;
        const uint8_t* alignments = cmark_gfm_extensions_get_table_alignments(node);
        prepareForFrame();
        QTextTableFormat format;
        format.setCellPadding(MarkdownDocumentWriter::kTableCellPadding);
        format.setCellSpacing(0);
        format.setBorder(1);
        format.setBorderCollapse(true);
        format.setBorderBrush(m_border);
        format.setBorderStyle(QTextFrameFormat::BorderStyle_Solid);
        format.setHeaderRowCount(1);
        format.setAlignment(Qt::AlignLeft);
        format.setBottomMargin(m_spacing);
        format.setLeftMargin(frameIndent() + quoteRoom());
        QTextTable* t = m_cursor.insertTable(rows, columns, format);
        int row = 0;
        for (cmark_node* r = cmark_node_first_child(node); r; r = cmark_node_next(r), ++row) {
            const bool header = cmark_gfm_extensions_get_table_row_is_header(r) != 0;
            int column = 0;
            for (cmark_node* c = cmark_node_first_child(r); c && column < columns;
                 c = cmark_node_next(c), ++column) {
                QTextTableCell cell = t->cellAt(row, column);
                QTextCharFormat chars;
                if (header) chars.setFontWeight(QFont::Bold);
                m_cursor = cell.firstCursorPosition();
                QTextBlockFormat f;
                // GFM: a column's alignment holds for its header cell too.
                const char align = alignments ? char(alignments[column]) : 0;
                f.setAlignment(align == 'c'   ? Qt::AlignHCenter
                               : align == 'r' ? Qt::AlignRight
                                              : Qt::AlignLeft);
                m_cursor.setBlockFormat(f);
                inlines(c, chars);
            }
            // The tint last: a cell's format is its first block's char format.
            for (column = 0; header && column < columns; ++column) {
                QTextTableCell cell = t->cellAt(row, column);
                QTextTableCellFormat tint = cell.format().toTableCellFormat();
                tint.setBackground(m_headerTint);
                cell.setFormat(tint);
            }
        }
        leaveFrame(t);
    }

    void inlines(cmark_node* parent, const QTextCharFormat& format) {
        for (cmark_node* n = cmark_node_first_child(parent); n; n = cmark_node_next(n))
            inlineNode(n, format);
    }

    void inlineNode(cmark_node* node, const QTextCharFormat& format) {
        switch (cmark_node_get_type(node)) {
        case CMARK_NODE_TEXT:
            text(literal(node), format);
            break;
        case CMARK_NODE_SOFTBREAK:
            if (!m_afterDisplay) plain(QStringLiteral(" "), format);
            break;
        case CMARK_NODE_LINEBREAK:
            if (!m_afterDisplay) plain(QString(QChar::LineSeparator), format);
            break;
        case CMARK_NODE_CODE: {
            QTextCharFormat code = format;
            code.setFontFamilies({m_mono.family(), QStringLiteral("monospace")});
            code.setFontFixedPitch(true);
            plain(literal(node), code);
            break;
        }
        case CMARK_NODE_HTML_INLINE:
            plain(literal(node), format);
            break;
        case CMARK_NODE_EMPH: {
            QTextCharFormat f = format;
            f.setFontItalic(true);
            inlines(node, f);
            break;
        }
        case CMARK_NODE_STRONG: {
            QTextCharFormat f = format;
            f.setFontWeight(QFont::Bold);
            inlines(node, f);
            break;
        }
        case CMARK_NODE_LINK: {
            QTextCharFormat f = format;
            const QString url = QString::fromUtf8(cmark_node_get_url(node));
            f.setFontUnderline(true);
            if (isSafeLink(url)) {
                f.setAnchor(true);
                f.setAnchorHref(url);
                f.setForeground(m_link);
            }
            inlines(node, f);
            break;
        }
        case CMARK_NODE_IMAGE: {
            // Never an image: its alt text, so nothing is ever loaded.
            QTextCharFormat f = format;
            f.setFontItalic(true);
            const QString alt = plainTextOf(node).simplified();
            plain(alt.isEmpty() ? QObject::tr("[image]") : QObject::tr("[image: %1]").arg(alt), f);
            break;
        }
        case CMARK_NODE_FOOTNOTE_REFERENCE:
            plain(QStringLiteral("[^") + literal(node) + u']', format);
            break;
        default:
            if (isType(node, "strikethrough")) {
                QTextCharFormat f = format;
                f.setFontStrikeOut(true);
                inlines(node, f);
                break;
            }
            inlines(node, format);
        }
    }

    QString plainTextOf(cmark_node* node) const {
        QString out;
        for (cmark_node* n = cmark_node_first_child(node); n; n = cmark_node_next(n)) {
            const cmark_node_type type = cmark_node_get_type(n);
            if (type == CMARK_NODE_TEXT || type == CMARK_NODE_CODE)
                splitMaths(
                    literal(n), m_spans, [&](const QString& t) { out += t; },
                    [&](const MathSpans::Span& s) { out += MathTypesetter::plainText(s.tex); });
            else if (type == CMARK_NODE_SOFTBREAK || type == CMARK_NODE_LINEBREAK)
                out += u' ';
            else
                out += plainTextOf(n);
        }
        return out;
    }

    void text(const QString& text, const QTextCharFormat& format) {
        splitMaths(
            text, m_spans, [&](const QString& t) { plain(t, format); },
            [&](const MathSpans::Span& span) {
                if (span.display) {
                    displayMaths(span.tex, format);
                } else {
                    resumeAfterDisplay();
                    MathTypesetter::insert(m_cursor, span.tex, format, false);
                }
            });
    }

    void plain(QString text, const QTextCharFormat& format) {
        if (m_afterDisplay) {
            // What follows a displayed formula in its paragraph starts a line of its own.
            while (!text.isEmpty() && text.front().isSpace()) text.remove(0, 1);
            if (text.isEmpty()) return;
            resumeAfterDisplay();
        }
        m_cursor.insertText(text, format);
    }

    void resumeAfterDisplay() {
        if (!m_afterDisplay) return;
        m_afterDisplay = false;
        m_cursor.insertBlock(m_resumeFormat, QTextCharFormat());
    }

    // `$$...$$`: a centred block of its own, splitting the paragraph that holds it.
    void displayMaths(const QString& tex, const QTextCharFormat& format) {
        resumeAfterDisplay();
        QTextBlockFormat centred = baseFormat();
        centred.setAlignment(Qt::AlignHCenter);
        centred.setTopMargin(m_spacing / 2);
        centred.setBottomMargin(m_spacing / 2);
        m_resumeFormat = baseFormat();
        m_resumeFormat.setBottomMargin(m_cursor.blockFormat().bottomMargin());
        const QTextBlock block = m_cursor.block();
        if (block.length() > 1) {
            // A line break before the formula would leave an empty line.
            if (block.text().endsWith(QChar::LineSeparator)) m_cursor.deletePreviousChar();
            m_cursor.insertBlock(centred, QTextCharFormat());
        } else {
            QTextBlockFormat only = centred;
            only.setBottomMargin(
                std::max(centred.bottomMargin(), m_cursor.blockFormat().bottomMargin()));
            m_cursor.mergeBlockFormat(only);
        }
        MathTypesetter::insert(m_cursor, tex, format, true);
        m_afterDisplay = true;
    }

    QTextDocument& m_doc;
    QTextCursor m_cursor;
    QVector<MathSpans::Span> m_spans;
    QVector<ListLevel> m_lists;
    int m_quoteLevel = 0;
    int m_framedListDepth = 0; // list levels outside the innermost quote frame
    bool m_blockUnused = true; // the cursor's block is empty and not yet given a format
    bool m_itemStart = false;  // the next block starts a list item
    QTextBlockFormat::MarkerType m_itemMarker = QTextBlockFormat::MarkerType::NoMarker;
    bool m_afterDisplay = false; // a displayed formula ended the current block
    QTextBlockFormat m_resumeFormat;
    qreal m_spacing = 6;
    QColor m_quoteTint, m_headerTint, m_border, m_link;
    QFont m_mono;
};

// The reader's text of a tree, blocks separated by spaces.
QString plainTextOf(cmark_node* node, const QVector<MathSpans::Span>& spans) {
    QString out;
    for (cmark_node* n = cmark_node_first_child(node); n; n = cmark_node_next(n)) {
        switch (cmark_node_get_type(n)) {
        case CMARK_NODE_TEXT:
        case CMARK_NODE_CODE:
        case CMARK_NODE_HTML_INLINE:
        case CMARK_NODE_HTML_BLOCK:
        case CMARK_NODE_CODE_BLOCK:
            splitMaths(
                literal(n), spans, [&](const QString& t) { out += t; },
                [&](const MathSpans::Span& s) { out += MathTypesetter::plainText(s.tex); });
            break;
        case CMARK_NODE_SOFTBREAK:
        case CMARK_NODE_LINEBREAK:
            out += u' ';
            break;
        default:
            out += plainTextOf(n, spans);
        }
        if (cmark_node_first_child(n) &&
            (cmark_node_get_type(n) & CMARK_NODE_TYPE_MASK) == CMARK_NODE_TYPE_BLOCK)
            out += u' '; // the end of a block
    }
    return out;
}

} // namespace

void MarkdownDocumentWriter::write(QTextDocument& doc, const QString& markdown,
                                   const QPalette& palette) {
    QVector<MathSpans::Span> spans;
    const QString prose = MathSpans::extract(markdown, &spans);
    doc.clear();
    const CmarkTree tree(prose);
    Writer(doc, palette, std::move(spans)).document(tree.root());
}

QString MarkdownDocumentWriter::plainText(const QString& markdown) {
    QVector<MathSpans::Span> spans;
    const CmarkTree tree(MathSpans::extract(markdown, &spans));
    return plainTextOf(tree.root(), spans).simplified();
}
