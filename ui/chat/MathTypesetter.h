#pragma once

#include <QString>
#include <QTextCharFormat>
#include <QVector>

class QTextCursor;

// Sets the TeX of `$...$` and `$$...$$` as text a QTextDocument can lay out: Greek letters
// and operators as their Unicode characters, sub- and superscripts raised or lowered,
// \frac as numerator over a fraction slash over denominator, \sqrt as a radical over an
// overlined radicand, \text upright, letters in italics, all in a maths font (STIX, from
// Debian's fonts-stix). A fallback, not TeX: nesting flattens to one level of script.
class MathTypesetter {
public:
    // One piece of set maths: its text and how it sits on the line.
    struct Run {
        QString text;
        QTextCharFormat::VerticalAlignment shift = QTextCharFormat::AlignNormal;
        bool italic = false;
        bool bold = false;
        bool overline = false;
    };

    // The runs `tex` is set as; adjacent runs with the same look are merged.
    static QVector<Run> typeset(const QString& tex);
    // Inserts `tex` set as maths at `cursor` in `base`'s colours and size; `display` for a
    // `$$` block (the caller centres its block). Each run's char format holds the source
    // in property texProperty().
    static void insert(QTextCursor& cursor, const QString& tex, const QTextCharFormat& base,
                       bool display);
    // The maths as one line of plain text (titles, where there is no layout): scripts
    // that have Unicode super- or subscript forms use them ("E = mc²"), others are
    // written "^(...)" and "_(...)".
    static QString plainText(const QString& tex);
    // The char format property that holds a maths run's TeX source.
    static constexpr int texProperty() { return QTextFormat::UserProperty + 37; }
    // The font families maths is set in, best first.
    static QStringList fontFamilies();
};
