#include "chat/MathSpans.h"

#include <QRegularExpression>
#include <QStringList>

namespace {

// Where the paragraph that holds `from` ends: at a blank line or the end of the text.
qsizetype paragraphEnd(const QString& s, qsizetype from) {
    static const QRegularExpression blank(QStringLiteral("\\n[ \\t]*\\n"));
    const QRegularExpressionMatch m = blank.match(s, from);
    return m.hasMatch() ? m.capturedStart() : s.size();
}

bool escaped(const QString& s, qsizetype at) {
    qsizetype backslashes = 0;
    while (at - 1 - backslashes >= 0 && s.at(at - 1 - backslashes) == u'\\') ++backslashes;
    return backslashes % 2 == 1;
}

// The closing `$` of an inline span opened at `open`, or -1. Besides the usual rule, a
// `$` right after a letter or digit opens nothing ("US$5") and a span stays on its line.
qsizetype inlineClose(const QString& s, qsizetype open, qsizetype end) {
    if (open + 1 >= end || s.at(open + 1).isSpace() || s.at(open + 1) == u'$') return -1;
    if (open > 0 && s.at(open - 1).isLetterOrNumber()) return -1;
    for (qsizetype j = open + 2; j < end && s.at(j) != u'\n'; ++j) {
        if (s.at(j) != u'$' || escaped(s, j)) continue;
        if (s.at(j - 1).isSpace()) continue;
        if (j + 1 < s.size() && s.at(j + 1).isDigit()) continue;
        return j;
    }
    return -1;
}

// The position of `closer` after `from` that is not escaped, before `end`; -1 if none.
qsizetype findCloser(const QString& s, const QString& closer, qsizetype from, qsizetype end,
                     bool unescaped) {
    for (qsizetype j = s.indexOf(closer, from); j >= 0 && j + closer.size() <= end;
         j = s.indexOf(closer, j + 1))
        if (!unescaped || !escaped(s, j)) return j;
    return -1;
}

// Replaces the maths of `text` (prose, no fenced code) and appends the spans.
QString extractFromProse(const QString& s, QVector<MathSpans::Span>* spans) {
    QString out;
    out.reserve(s.size());
    qsizetype i = 0;
    const auto take = [&](qsizetype contentStart, qsizetype contentEnd, qsizetype next,
                          bool display) {
        const QString tex = s.mid(contentStart, contentEnd - contentStart).trimmed();
        if (tex.isEmpty()) return false;
        out += MathSpans::placeholder(int(spans->size()), display);
        spans->push_back({tex, display});
        i = next;
        return true;
    };
    while (i < s.size()) {
        const QChar c = s.at(i);
        if (c == u'`') {
            // A code span: up to the next run of exactly as many backticks.
            qsizetype run = 1;
            while (i + run < s.size() && s.at(i + run) == u'`') ++run;
            qsizetype j = i + run;
            qsizetype close = -1;
            while ((j = s.indexOf(u'`', j)) >= 0) {
                qsizetype r = 1;
                while (j + r < s.size() && s.at(j + r) == u'`') ++r;
                if (r == run) {
                    close = j;
                    break;
                }
                j += r;
            }
            const qsizetype next = close >= 0 ? close + run : i + run;
            out += s.mid(i, next - i);
            i = next;
            continue;
        }
        if (c == u'\\' && i + 1 < s.size()) {
            const QChar n = s.at(i + 1);
            const qsizetype end = paragraphEnd(s, i);
            if (n == u'(' || n == u'[') {
                const QString closer = n == u'(' ? QStringLiteral("\\)") : QStringLiteral("\\]");
                const qsizetype j = findCloser(s, closer, i + 2, end, false);
                if (j >= 0 && take(i + 2, j, j + 2, n == u'[')) continue;
            }
            out += s.mid(i, 2); // an escape (`\$` included) stays for the Markdown parser
            i += 2;
            continue;
        }
        if (c == u'$') {
            const qsizetype end = paragraphEnd(s, i);
            if (i + 1 < s.size() && s.at(i + 1) == u'$') {
                const qsizetype j = findCloser(s, QStringLiteral("$$"), i + 2, end, true);
                if (j >= 0 && take(i + 2, j, j + 2, true)) continue;
                out += QStringLiteral("$$");
                i += 2;
                continue;
            }
            const qsizetype j = inlineClose(s, i, end);
            if (j >= 0 && take(i + 1, j, j + 1, false)) continue;
        }
        out += c;
        ++i;
    }
    return out;
}

} // namespace

QString MathSpans::placeholder(int index, bool display) {
    return (display ? kDisplayOpen : kInlineOpen) + QString::number(index) + kClose;
}

QString MathSpans::extract(const QString& markdown, QVector<Span>* spans) {
    // Fenced code is copied as it is; the prose between fences is searched. Fences are
    // recognised at any indentation (inside list items too): skipping too much is safe.
    static const QRegularExpression open(QStringLiteral("^\\s*(`{3,}|~{3,})(.*)$"));
    const QStringList lines = markdown.split(u'\n');
    QStringList out;
    QStringList prose;
    const auto flushProse = [&] {
        if (prose.isEmpty()) return;
        out << extractFromProse(prose.join(u'\n'), spans).split(u'\n');
        prose.clear();
    };
    for (qsizetype i = 0; i < lines.size(); ++i) {
        const QRegularExpressionMatch m = open.match(lines.at(i));
        if (!m.hasMatch() || (m.captured(1).front() == u'`' && m.captured(2).contains(u'`'))) {
            prose << lines.at(i);
            continue;
        }
        flushProse();
        const QString fence = m.captured(1);
        const QRegularExpression close(
            QStringLiteral("^\\s*%1%2*\\s*$")
                .arg(QRegularExpression::escape(fence), QRegularExpression::escape(fence.left(1))));
        out << lines.at(i);
        for (++i; i < lines.size(); ++i) {
            out << lines.at(i);
            if (close.match(lines.at(i)).hasMatch()) break;
        }
    }
    flushProse();
    return out.join(u'\n');
}
