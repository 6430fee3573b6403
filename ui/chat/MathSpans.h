#pragma once

#include <QString>
#include <QVector>

// Finds the maths in an answer's Markdown before the Markdown parser sees it (which would
// take `\{` for an escape and `a_1 * b_2` for emphasis) and puts a placeholder in its
// place: `$...$` and `\(...\)` inline, `$$...$$` and `\[...\]` displayed. The usual rule
// keeps prices prose: an opening `$` is not followed by a space, a closing `$` is not
// preceded by a space nor followed by a digit, so "$5 and $10" stays text; an inline span
// stays on one line and does not open right after a letter or digit ("US$5"). Code (fenced
// blocks and backtick spans) and `\$` are left alone; no span crosses a blank line.
class MathSpans {
public:
    struct Span {
        QString tex;
        bool display = false;
    };

    // `markdown` with each maths span replaced by placeholder(i); the spans in order.
    static QString extract(const QString& markdown, QVector<Span>* spans);
    // The placeholder of span `index`: private-use characters a parser keeps as text.
    static QString placeholder(int index, bool display);
    static constexpr QChar kInlineOpen{0xE000};
    static constexpr QChar kDisplayOpen{0xE002};
    static constexpr QChar kClose{0xE001};
};
