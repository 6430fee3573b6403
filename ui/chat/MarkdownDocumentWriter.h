#pragma once

#include <QPalette>
#include <QString>
#include <QTextFormat>

class QTextDocument;

// Renders an answer's Markdown into a QTextDocument as CommonMark and GFM define it:
// cmark-gfm (Debian's libcmark-gfm) parses, with its table, strikethrough (~~ only, so
// "~5 GB" stays text), autolink and task-list extensions, and this class writes the tree
// through QTextCursor. Model text is never markup: raw HTML is shown as text, an image is
// its alt text ("[image: ALT]", nothing is loaded), only http(s) and mailto links keep an
// address. Fenced code blocks carry QTextFormat::BlockCodeFence and BlockCodeLanguage, as
// Qt's own importer sets them, for CodeBlockHighlighter. Maths (MathSpans) is set by
// MathTypesetter; tables get padding, a header row and GFM column alignment; a block quote
// is a tinted frame (quoteFrameProperty()) whose blocks carry QTextFormat::BlockQuoteLevel,
// and the view draws a bar at its left.
class MarkdownDocumentWriter {
public:
    // Replaces `doc`'s contents. The palette tints quotes, table borders and header cells.
    static void write(QTextDocument& doc, const QString& markdown,
                      const QPalette& palette = QPalette());
    // The text a reader sees, on one line, without any Markdown (titles made from a
    // message): "Show me **bold**, `x`" gives "Show me bold, x".
    static QString plainText(const QString& markdown);

    // The space inside each table cell, in pixels.
    static constexpr qreal kTableCellPadding = 6;
    // The room at a quote's left, for its bar, in pixels.
    static constexpr qreal kQuoteIndent = 14;
    // The frame format property that marks a block quote's frame (the view draws its bar).
    static constexpr int quoteFrameProperty() { return QTextFormat::UserProperty + 38; }
};
