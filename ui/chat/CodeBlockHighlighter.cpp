#include "chat/CodeBlockHighlighter.h"

#include <QColor>
#include <QFontDatabase>
#include <QRegularExpression>
#include <QTextBlock>
#include <QTextCursor>
#include <QTextDocument>
#include <QTextLayout>

#include <algorithm>
#include <cmath>

#ifdef K3_HAVE_KSYNTAXHIGHLIGHTING
#include <KSyntaxHighlighting/AbstractHighlighter>
#include <KSyntaxHighlighting/Definition>
#include <KSyntaxHighlighting/Format>
#include <KSyntaxHighlighting/Repository>
#include <KSyntaxHighlighting/State>
#include <KSyntaxHighlighting/Theme>
#endif

namespace {

bool isCodeBlock(const QTextBlock& block) {
    return block.blockFormat().hasProperty(QTextFormat::BlockCodeFence);
}

QString languageOf(const QTextBlock& block) {
    return block.blockFormat().stringProperty(QTextFormat::BlockCodeLanguage).trimmed();
}

#ifdef K3_HAVE_KSYNTAXHIGHLIGHTING
namespace ksh = KSyntaxHighlighting;

// Loading every syntax definition takes a while: once per process, on the GUI thread.
ksh::Repository& repository() {
    static ksh::Repository repo;
    return repo;
}

ksh::Definition definitionFor(const QString& language) {
    if (language.isEmpty()) return {};
    ksh::Repository& repo = repository();
    ksh::Definition def = repo.definitionForName(language);
    if (!def.isValid()) def = repo.definitionForFileName(QStringLiteral("snippet.") + language);
    if (!def.isValid() &&
        (language == QLatin1String("shell") || language == QLatin1String("console")))
        def = repo.definitionForName(QStringLiteral("Bash"));
    return def;
}

// Turns KSyntaxHighlighting's per-line format callbacks into QTextCharFormats on the
// document's own blocks.
class DocumentHighlighter : public ksh::AbstractHighlighter {
public:
    void run(QTextDocument& doc, const CodeBlockHighlighter::CodeBlock& code) {
        ksh::State state;
        for (int n = code.firstBlock; n <= code.lastBlock; ++n) {
            m_block = doc.findBlockByNumber(n);
            state = highlightLine(m_block.text(), state);
        }
    }

protected:
    void applyFormat(int offset, int length, const ksh::Format& format) override {
        if (length <= 0 || format.isDefaultTextStyle(theme())) return;
        QTextCharFormat f;
        if (format.hasTextColor(theme())) f.setForeground(format.textColor(theme()));
        if (format.hasBackgroundColor(theme())) f.setBackground(format.backgroundColor(theme()));
        if (format.isBold(theme())) f.setFontWeight(QFont::Bold);
        if (format.isItalic(theme())) f.setFontItalic(true);
        QTextCursor c(m_block);
        c.setPosition(m_block.position() + offset);
        c.setPosition(m_block.position() + offset + length, QTextCursor::KeepAnchor);
        c.mergeCharFormat(f);
    }

private:
    QTextBlock m_block;
};
#endif

} // namespace

bool CodeBlockHighlighter::hasSyntaxColours() {
#ifdef K3_HAVE_KSYNTAXHIGHLIGHTING
    return true;
#else
    return false;
#endif
}

QStringList CodeBlockHighlighter::fencedContents(const QString& markdown) {
    static const QRegularExpression open(QStringLiteral("^( {0,3})(`{3,}|~{3,})(.*)$"));
    QStringList out;
    const QStringList lines = markdown.split(QLatin1Char('\n'));
    for (qsizetype i = 0; i < lines.size(); ++i) {
        const QRegularExpressionMatch m = open.match(lines.at(i));
        if (!m.hasMatch()) continue;
        const QString fence = m.captured(2);
        if (fence.front() == QLatin1Char('`') && m.captured(3).contains(QLatin1Char('`'))) continue;
        const int indent = int(m.captured(1).size());
        const QRegularExpression close(
            QStringLiteral("^ {0,3}%1%2*\\s*$")
                .arg(QRegularExpression::escape(fence), QRegularExpression::escape(fence.left(1))));
        QStringList body;
        for (++i; i < lines.size() && !close.match(lines.at(i)).hasMatch(); ++i) {
            QString line = lines.at(i);
            // CommonMark: drop up to the opening fence's indentation from each line.
            int drop = 0;
            while (drop < indent && drop < line.size() && line.at(drop) == QLatin1Char(' ')) ++drop;
            body << line.mid(drop);
        }
        // An unclosed fence (an answer still streaming) runs to the end, like the renderer.
        if (i >= lines.size() && !body.isEmpty() && body.last().isEmpty()) body.removeLast();
        out << body.join(QLatin1Char('\n'));
    }
    return out;
}

QVector<CodeBlockHighlighter::CodeBlock> CodeBlockHighlighter::codeBlocks(const QTextDocument& doc,
                                                                          const QString& markdown) {
    QVector<CodeBlock> out;
    for (QTextBlock b = doc.begin(); b.isValid(); b = b.next()) {
        if (!isCodeBlock(b)) continue;
        CodeBlock code;
        code.firstBlock = b.blockNumber();
        code.language = languageOf(b);
        QStringList lines{b.text()};
        while (b.next().isValid() && isCodeBlock(b.next()) &&
               languageOf(b.next()) == code.language) {
            b = b.next();
            lines << b.text();
        }
        code.lastBlock = b.blockNumber();
        code.code = lines.join(QLatin1Char('\n'));
        out.push_back(code);
    }
    if (markdown.isEmpty()) return out;
    // Prefer the source text when both agree on how many blocks and lines there are.
    const QStringList source = fencedContents(markdown);
    if (source.size() != out.size()) return out;
    for (qsizetype i = 0; i < out.size(); ++i) {
        const qsizetype lines = out[i].lastBlock - out[i].firstBlock + 1;
        if (source.at(i).count(QLatin1Char('\n')) + 1 == lines) out[i].code = source.at(i);
    }
    return out;
}

void CodeBlockHighlighter::highlight(QTextDocument& doc, const QString& markdown, bool dark) {
    const QVector<CodeBlock> blocks = codeBlocks(doc, markdown);
    if (blocks.isEmpty()) return;
    QFont mono = QFontDatabase::systemFont(QFontDatabase::FixedFont);
    QTextCharFormat monoFormat;
    monoFormat.setFontFamilies({mono.family(), QStringLiteral("monospace")});
    monoFormat.setFontFixedPitch(true);
    monoFormat.setFontStyleHint(QFont::Monospace);
    QColor background = dark ? QColor(255, 255, 255, 20) : QColor(0, 0, 0, 14);
#ifdef K3_HAVE_KSYNTAXHIGHLIGHTING
    const ksh::Theme theme =
        repository().defaultTheme(dark ? ksh::Repository::DarkTheme : ksh::Repository::LightTheme);
    monoFormat.setForeground(QColor::fromRgba(theme.textColor(ksh::Theme::Normal)));
    // The palette tint, not the theme's editor background: the light theme's is white,
    // which would make the block vanish into the message area.
#endif
    for (const CodeBlock& code : blocks) {
        QTextCursor c(doc.findBlockByNumber(code.firstBlock));
        c.movePosition(QTextCursor::StartOfBlock);
        const QTextBlock last = doc.findBlockByNumber(code.lastBlock);
        c.setPosition(last.position() + last.length() - 1, QTextCursor::KeepAnchor);
        c.mergeCharFormat(monoFormat);
        QTextBlockFormat blockFormat;
        blockFormat.setBackground(background);
        // Code lines never wrap: a line wider than the message scrolls sideways in its
        // block (MessageDelegate), so the code reads as it was written.
        blockFormat.setNonBreakableLines(true);
        c.mergeBlockFormat(blockFormat);
#ifdef K3_HAVE_KSYNTAXHIGHLIGHTING
        if (const ksh::Definition def = definitionFor(code.language); def.isValid()) {
            DocumentHighlighter h;
            h.setDefinition(def);
            h.setTheme(theme);
            h.run(doc, code);
        }
#endif
    }
}

int CodeBlockHighlighter::contentWidth(const QTextDocument& doc, const CodeBlock& code, int room) {
    qreal widest = 0;
    for (int n = code.firstBlock; n <= code.lastBlock; ++n) {
        const QTextLayout* tl = doc.findBlockByNumber(n).layout();
        for (int i = 0; tl && i < tl->lineCount(); ++i) {
            const QTextLine line = tl->lineAt(i);
            const qreal extra = n == code.firstBlock && i == 0 ? room : 0;
            widest = std::max(widest, line.x() + line.naturalTextWidth() + extra);
        }
    }
    return int(std::ceil(widest));
}

QBrush CodeBlockHighlighter::takeBackground(QTextDocument& doc, const QVector<CodeBlock>& blocks) {
    QBrush brush;
    for (const CodeBlock& code : blocks)
        for (int n = code.firstBlock; n <= code.lastBlock; ++n) {
            const QTextBlock block = doc.findBlockByNumber(n);
            QTextBlockFormat f = block.blockFormat();
            if (f.background().style() == Qt::NoBrush) continue;
            brush = f.background();
            f.clearBackground();
            QTextCursor(block).setBlockFormat(f);
        }
    return brush;
}
