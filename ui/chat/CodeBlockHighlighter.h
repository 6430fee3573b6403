#pragma once

#include <QBrush>
#include <QString>
#include <QVector>

class QTextDocument;

// Formats the code blocks of an answer rendered by MarkdownDocumentWriter (blocks carrying
// QTextFormat::BlockCodeFence, as QTextDocument::setMarkdown() also marks them):
// always a monospace font and a tinted background, lines that never wrap (the view scrolls
// a wide block sideways), plus syntax colours when the build has KSyntaxHighlighting. It only sets
// character and block formats through QTextCursor, so model text is never turned into markup.
class CodeBlockHighlighter {
public:
    struct CodeBlock {
        int firstBlock = 0; // QTextBlock numbers in the document, inclusive
        int lastBlock = 0;
        QString language; // the fence's info string, e.g. "cpp"; may be empty
        QString code;     // exactly the lines between the fences, without the last newline
    };

    // The fenced code blocks of `doc` in order. `markdown` is the source the document was
    // built from: when its fences line up with the document's, the code text is taken
    // from it, because the Markdown importer expands tabs.
    static QVector<CodeBlock> codeBlocks(const QTextDocument& doc, const QString& markdown = {});
    // Applies the fonts and colours; `dark` picks the dark or light syntax theme.
    static void highlight(QTextDocument& doc, const QString& markdown, bool dark);
    // True when this build colours code (KSyntaxHighlighting was found at build time).
    static bool hasSyntaxColours();
    // The contents of each top-level fenced block of `markdown` (CommonMark fences).
    static QStringList fencedContents(const QString& markdown);
    // How wide `code`'s widest line is in the laid-out `doc` (the first line with `room`
    // beside it, for the Copy button).
    static int contentWidth(const QTextDocument& doc, const CodeBlock& code, int room);
    // Takes the code blocks' background off `doc` (the view fills each block's rectangle
    // itself, so a scrolled block keeps a straight right edge) and returns it.
    static QBrush takeBackground(QTextDocument& doc, const QVector<CodeBlock>& blocks);
};
