#include "chat/MathTypesetter.h"

#include <QHash>
#include <QTextCursor>
#include <QTextDocument>

namespace {

using Shift = QTextCharFormat::VerticalAlignment;

constexpr QChar kThinSpace(0x2009);
constexpr QChar kMediumSpace(0x205F);
constexpr QChar kQuad(0x2003);

enum class Kind { Ordinary, Relation, Binary };

struct Symbol {
    QString text;
    Kind kind = Kind::Ordinary;
    bool italic = false;
};

// long: a table, one row per TeX name, built once.
const QHash<QString, Symbol>& symbols() {
    static const QHash<QString, Symbol> table = [] {
        QHash<QString, Symbol> t;
        // Lower-case Greek is italic in TeX; capitals are upright.
        const char* lower[][2] = {
            {"alpha", "α"},   {"beta", "β"},       {"gamma", "γ"}, {"delta", "δ"},
            {"epsilon", "ϵ"}, {"varepsilon", "ε"}, {"zeta", "ζ"},  {"eta", "η"},
            {"theta", "θ"},   {"vartheta", "ϑ"},   {"iota", "ι"},  {"kappa", "κ"},
            {"lambda", "λ"},  {"mu", "μ"},         {"nu", "ν"},    {"xi", "ξ"},
            {"pi", "π"},      {"varpi", "ϖ"},      {"rho", "ρ"},   {"varrho", "ϱ"},
            {"sigma", "σ"},   {"varsigma", "ς"},   {"tau", "τ"},   {"upsilon", "υ"},
            {"phi", "ϕ"},     {"varphi", "φ"},     {"chi", "χ"},   {"psi", "ψ"},
            {"omega", "ω"}};
        for (const auto& g : lower)
            t.insert(QLatin1String(g[0]), {QString::fromUtf8(g[1]), Kind::Ordinary, true});
        const char* upper[][2] = {{"Gamma", "Γ"}, {"Delta", "Δ"}, {"Theta", "Θ"}, {"Lambda", "Λ"},
                                  {"Xi", "Ξ"},    {"Pi", "Π"},    {"Sigma", "Σ"}, {"Upsilon", "Υ"},
                                  {"Phi", "Φ"},   {"Psi", "Ψ"},   {"Omega", "Ω"}};
        for (const auto& g : upper) t.insert(QLatin1String(g[0]), {QString::fromUtf8(g[1])});
        const char* relations[][2] = {{"le", "≤"},
                                      {"leq", "≤"},
                                      {"ge", "≥"},
                                      {"geq", "≥"},
                                      {"ne", "≠"},
                                      {"neq", "≠"},
                                      {"approx", "≈"},
                                      {"equiv", "≡"},
                                      {"sim", "∼"},
                                      {"simeq", "≃"},
                                      {"cong", "≅"},
                                      {"propto", "∝"},
                                      {"ll", "≪"},
                                      {"gg", "≫"},
                                      {"in", "∈"},
                                      {"notin", "∉"},
                                      {"ni", "∋"},
                                      {"subset", "⊂"},
                                      {"subseteq", "⊆"},
                                      {"supset", "⊃"},
                                      {"supseteq", "⊇"},
                                      {"to", "→"},
                                      {"rightarrow", "→"},
                                      {"leftarrow", "←"},
                                      {"gets", "←"},
                                      {"Rightarrow", "⇒"},
                                      {"Leftarrow", "⇐"},
                                      {"implies", "⇒"},
                                      {"iff", "⇔"},
                                      {"Leftrightarrow", "⇔"},
                                      {"leftrightarrow", "↔"},
                                      {"mapsto", "↦"},
                                      {"longrightarrow", "⟶"},
                                      {"perp", "⊥"},
                                      {"parallel", "∥"},
                                      {"mid", "∣"},
                                      {"prec", "≺"},
                                      {"succ", "≻"},
                                      {"vdash", "⊢"},
                                      {"models", "⊨"}};
        for (const auto& r : relations)
            t.insert(QLatin1String(r[0]), {QString::fromUtf8(r[1]), Kind::Relation});
        const char* binaries[][2] = {
            {"times", "×"}, {"cdot", "⋅"},     {"div", "÷"},   {"pm", "±"},     {"mp", "∓"},
            {"ast", "∗"},   {"star", "⋆"},     {"circ", "∘"},  {"bullet", "∙"}, {"cup", "∪"},
            {"cap", "∩"},   {"setminus", "∖"}, {"oplus", "⊕"}, {"otimes", "⊗"}, {"wedge", "∧"},
            {"land", "∧"},  {"vee", "∨"},      {"lor", "∨"}};
        for (const auto& b : binaries)
            t.insert(QLatin1String(b[0]), {QString::fromUtf8(b[1]), Kind::Binary});
        const char* ordinary[][2] = {
            {"sum", "∑"},      {"prod", "∏"},       {"coprod", "∐"},  {"int", "∫"},
            {"iint", "∬"},     {"iiint", "∭"},      {"oint", "∮"},    {"bigcup", "⋃"},
            {"bigcap", "⋂"},   {"infty", "∞"},      {"partial", "∂"}, {"nabla", "∇"},
            {"forall", "∀"},   {"exists", "∃"},     {"neg", "¬"},     {"lnot", "¬"},
            {"emptyset", "∅"}, {"varnothing", "∅"}, {"ldots", "…"},   {"dots", "…"},
            {"cdots", "⋯"},    {"vdots", "⋮"},      {"ddots", "⋱"},   {"prime", "′"},
            {"degree", "°"},   {"hbar", "ℏ"},       {"ell", "ℓ"},     {"Re", "ℜ"},
            {"Im", "ℑ"},       {"aleph", "ℵ"},      {"angle", "∠"},   {"triangle", "△"},
            {"langle", "⟨"},   {"rangle", "⟩"},     {"lfloor", "⌊"},  {"rfloor", "⌋"},
            {"lceil", "⌈"},    {"rceil", "⌉"},      {"surd", "√"},    {"|", "‖"},
            {"{", "{"},        {"}", "}"},          {"%", "%"},       {"$", "$"},
            {"&", "&"},        {"#", "#"},          {"_", "_"},       {"backslash", "\\"},
            {"lbrace", "{"},   {"rbrace", "}"},     {"vert", "|"},    {"Vert", "‖"},
            {"checkmark", "✓"}};
        for (const auto& o : ordinary) t.insert(QLatin1String(o[0]), {QString::fromUtf8(o[1])});
        const char* spaces[][2] = {{",", "\u2009"},           {":", "\u205F"}, {">", "\u205F"},
                                   {";", "\u2004"},           {" ", " "},      {"quad", "\u2003"},
                                   {"qquad", "\u2003\u2003"}, {"!", ""}};
        for (const auto& s : spaces) t.insert(QLatin1String(s[0]), {QString::fromUtf8(s[1])});
        return t;
    }();
    return table;
}

// Operator names set upright: \sin x, \log n, \lim_{n \to \infty}.
bool isFunctionName(const QString& name) {
    static const QStringList names{
        QStringLiteral("sin"),    QStringLiteral("cos"),    QStringLiteral("tan"),
        QStringLiteral("cot"),    QStringLiteral("sec"),    QStringLiteral("csc"),
        QStringLiteral("arcsin"), QStringLiteral("arccos"), QStringLiteral("arctan"),
        QStringLiteral("sinh"),   QStringLiteral("cosh"),   QStringLiteral("tanh"),
        QStringLiteral("log"),    QStringLiteral("ln"),     QStringLiteral("lg"),
        QStringLiteral("exp"),    QStringLiteral("lim"),    QStringLiteral("max"),
        QStringLiteral("min"),    QStringLiteral("sup"),    QStringLiteral("inf"),
        QStringLiteral("det"),    QStringLiteral("gcd"),    QStringLiteral("arg"),
        QStringLiteral("deg"),    QStringLiteral("dim"),    QStringLiteral("ker"),
        QStringLiteral("mod"),    QStringLiteral("Pr"),     QStringLiteral("argmax"),
        QStringLiteral("argmin")};
    return names.contains(name);
}

// Commands that only size or place what follows: the fallback ignores them.
bool isIgnored(const QString& name) {
    static const QStringList names{
        QStringLiteral("left"),         QStringLiteral("right"),       QStringLiteral("big"),
        QStringLiteral("Big"),          QStringLiteral("bigg"),        QStringLiteral("Bigg"),
        QStringLiteral("bigl"),         QStringLiteral("bigr"),        QStringLiteral("Bigl"),
        QStringLiteral("Bigr"),         QStringLiteral("biggl"),       QStringLiteral("biggr"),
        QStringLiteral("displaystyle"), QStringLiteral("textstyle"),   QStringLiteral("limits"),
        QStringLiteral("nolimits"),     QStringLiteral("scriptstyle"), QStringLiteral("middle")};
    return names.contains(name);
}

QChar doubleStruck(QChar c) {
    static const QHash<QChar, QChar> map{
        {u'N', QChar(0x2115)}, {u'Z', QChar(0x2124)}, {u'Q', QChar(0x211A)}, {u'R', QChar(0x211D)},
        {u'C', QChar(0x2102)}, {u'P', QChar(0x2119)}, {u'H', QChar(0x210D)}};
    return map.value(c, c);
}

struct Style {
    Shift shift = QTextCharFormat::AlignNormal;
    bool upright = false; // \mathrm, \text: letters not in italics
    bool bold = false;
    bool overline = false;
    bool doubleStruck = false;
};

class Parser {
public:
    explicit Parser(const QString& tex) : m_s(tex) {}

    QVector<MathTypesetter::Run> run() {
        while (m_i < m_s.size()) atom(Style{});
        return m_runs;
    }

private:
    bool atEnd() const { return m_i >= m_s.size(); }
    QChar peek() const { return atEnd() ? QChar() : m_s.at(m_i); }

    void skipSpaces() {
        while (!atEnd() && peek().isSpace()) ++m_i;
    }

    void put(const QString& text, const Style& st, bool italic, Kind kind = Kind::Ordinary) {
        if (text.isEmpty()) return;
        QString t = text;
        // TeX spaces relations and binary operators on the main line, not in scripts;
        // a sign that starts an expression is unary.
        if (kind != Kind::Ordinary && st.shift == QTextCharFormat::AlignNormal) {
            const QChar before = lastChar();
            const bool unary =
                kind == Kind::Binary && (before.isNull() || before == u'(' || before == u'[' ||
                                         before == u'{' || before == kThinSpace || before == u'=');
            if (!unary) t = kThinSpace + t + kThinSpace;
        }
        MathTypesetter::Run r;
        r.text = t;
        r.shift = st.shift;
        r.italic = italic;
        r.bold = st.bold;
        r.overline = st.overline;
        if (!m_runs.isEmpty()) {
            MathTypesetter::Run& last = m_runs.last();
            if (last.shift == r.shift && last.italic == r.italic && last.bold == r.bold &&
                last.overline == r.overline) {
                last.text += r.text;
                return;
            }
        }
        m_runs.push_back(r);
    }

    QChar lastChar() const {
        return m_runs.isEmpty() || m_runs.last().text.isEmpty() ? QChar()
                                                                : m_runs.last().text.back();
    }

    // One argument: a {group} or a single token.
    void argument(const Style& st) {
        skipSpaces();
        if (atEnd()) return;
        if (peek() == u'{') {
            ++m_i;
            while (!atEnd() && peek() != u'}') atom(st);
            if (!atEnd()) ++m_i;
        } else {
            atom(st);
        }
    }

    // The raw text of a {group} (for \text and environment names), braces balanced.
    QString rawGroup() {
        skipSpaces();
        if (peek() != u'{') {
            if (atEnd()) return {};
            return QString(m_s.at(m_i++));
        }
        int depth = 0;
        const int start = ++m_i;
        while (!atEnd()) {
            const QChar c = m_s.at(m_i);
            if (c == u'\\') {
                m_i += 2;
                continue;
            }
            if (c == u'{') ++depth;
            if (c == u'}' && depth-- == 0) break;
            ++m_i;
        }
        const QString text = m_s.mid(start, m_i - start);
        if (!atEnd()) ++m_i;
        return text;
    }

    QString commandName() {
        if (atEnd()) return {};
        if (!peek().isLetter()) return QString(m_s.at(m_i++));
        const int start = m_i;
        while (!atEnd() && peek().isLetter()) ++m_i;
        return m_s.mid(start, m_i - start);
    }

    void script(const Style& st, Shift shift) {
        Style inner = st;
        inner.shift = shift; // nested scripts flatten to one level
        argument(inner);
    }

    void atom(const Style& st) {
        const QChar c = peek();
        if (c.isSpace()) {
            skipSpaces();
            return;
        }
        ++m_i;
        if (c == u'{') {
            while (!atEnd() && peek() != u'}') atom(st);
            if (!atEnd()) ++m_i;
        } else if (c == u'}') {
            // a stray closing brace: dropped
        } else if (c == u'^') {
            script(st, QTextCharFormat::AlignSuperScript);
        } else if (c == u'_') {
            script(st, QTextCharFormat::AlignSubScript);
        } else if (c == u'\\') {
            command(st);
        } else if (c == u'&') {
            put(QString(kQuad), st, false);
        } else if (c == u'\'') {
            put(QStringLiteral("′"), st, false);
        } else if (c == u'-') {
            put(QStringLiteral("−"), st, false, Kind::Binary);
        } else if (c == u'+' || c == u'*') {
            put(c == u'*' ? QStringLiteral("∗") : QStringLiteral("+"), st, false, Kind::Binary);
        } else if (c == u'=' || c == u'<' || c == u'>') {
            put(QString(c), st, false, Kind::Relation);
        } else if (c.isLetter()) {
            put(QString(st.doubleStruck ? doubleStruck(c) : c), st,
                !st.upright && !st.doubleStruck);
        } else {
            put(QString(c), st, false);
        }
    }

    void accent(const Style& st, QChar combining) {
        const int before = m_runs.size();
        const QString lastBefore = before ? m_runs.last().text : QString();
        argument(st);
        // The mark goes on the last character the argument set.
        if (m_runs.size() > before || (before && m_runs.last().text != lastBefore))
            m_runs.last().text += combining;
    }

    void command(const Style& st) {
        const QString name = commandName();
        if (name.isEmpty()) return;
        if (name == QLatin1String("\\")) {
            // A line break in an aligned display; elsewhere a separator.
            put(st.shift == QTextCharFormat::AlignNormal ? QString(QChar::LineSeparator)
                                                         : QStringLiteral("; "),
                st, false);
            return;
        }
        if (const auto it = symbols().constFind(name); it != symbols().constEnd()) {
            put(it->text, st, it->italic && !st.upright, it->kind);
            return;
        }
        if (isFunctionName(name)) {
            if (m_runs.size() && lastChar().isLetterOrNumber()) put(QString(kThinSpace), st, false);
            put(name, st, false);
            return;
        }
        if (isIgnored(name)) {
            skipSpaces();
            if (peek() == u'.') ++m_i; // \left. and \right.: no delimiter
            return;
        }
        if (name == QLatin1String("frac") || name == QLatin1String("dfrac") ||
            name == QLatin1String("tfrac") || name == QLatin1String("cfrac")) {
            if (st.shift != QTextCharFormat::AlignNormal) {
                // Already in a script: (a)/(b) on the script's line.
                put(QStringLiteral("("), st, false);
                argument(st);
                put(QStringLiteral(")/("), st, false);
                argument(st);
                put(QStringLiteral(")"), st, false);
                return;
            }
            script(st, QTextCharFormat::AlignSuperScript);
            put(QStringLiteral("⁄"), st, false); // U+2044 FRACTION SLASH
            script(st, QTextCharFormat::AlignSubScript);
            return;
        }
        if (name == QLatin1String("sqrt")) {
            skipSpaces();
            if (peek() == u'[') {
                const int close = m_s.indexOf(u']', m_i);
                if (close > m_i) {
                    Style index = st;
                    index.shift = QTextCharFormat::AlignSuperScript;
                    Parser inner(m_s.mid(m_i + 1, close - m_i - 1));
                    for (const MathTypesetter::Run& r : inner.run()) put(r.text, index, r.italic);
                    m_i = close + 1;
                }
            }
            put(QStringLiteral("√"), st, false);
            Style under = st;
            under.overline = true;
            argument(under);
            return;
        }
        if (name == QLatin1String("text") || name == QLatin1String("textrm") ||
            name == QLatin1String("mbox") || name == QLatin1String("textnormal") ||
            name == QLatin1String("textit") || name == QLatin1String("textbf")) {
            Style text = st;
            text.bold = name == QLatin1String("textbf");
            put(rawGroup(), text, name == QLatin1String("textit"));
            return;
        }
        if (name == QLatin1String("mathrm") || name == QLatin1String("operatorname") ||
            name == QLatin1String("mathbf") || name == QLatin1String("boldsymbol") ||
            name == QLatin1String("mathit") || name == QLatin1String("mathbb") ||
            name == QLatin1String("mathcal") || name == QLatin1String("mathsf") ||
            name == QLatin1String("mathtt")) {
            Style inner = st;
            inner.upright = name != QLatin1String("mathit") && name != QLatin1String("mathcal") &&
                            name != QLatin1String("boldsymbol");
            inner.bold = name == QLatin1String("mathbf") || name == QLatin1String("boldsymbol");
            inner.doubleStruck = name == QLatin1String("mathbb");
            argument(inner);
            return;
        }
        if (name == QLatin1String("overline") || name == QLatin1String("bar")) {
            Style over = st;
            over.overline = true;
            argument(over);
            return;
        }
        if (name == QLatin1String("hat") || name == QLatin1String("widehat"))
            return accent(st, QChar(0x0302));
        if (name == QLatin1String("tilde") || name == QLatin1String("widetilde"))
            return accent(st, QChar(0x0303));
        if (name == QLatin1String("vec")) return accent(st, QChar(0x20D7));
        if (name == QLatin1String("dot")) return accent(st, QChar(0x0307));
        if (name == QLatin1String("ddot")) return accent(st, QChar(0x0308));
        if (name == QLatin1String("not")) return accent(st, QChar(0x0338));
        if (name == QLatin1String("begin") || name == QLatin1String("end")) {
            const QString env = rawGroup();
            const bool open = name == QLatin1String("begin");
            if (env.startsWith(u'p'))
                put(open ? QStringLiteral("(") : QStringLiteral(")"), st, false);
            else if (env.startsWith(u'b'))
                put(open ? QStringLiteral("[") : QStringLiteral("]"), st, false);
            else if (env.startsWith(u'v'))
                put(QStringLiteral("|"), st, false);
            else if (env == QLatin1String("cases") && open)
                put(QStringLiteral("{ "), st, false);
            return;
        }
        // Anything else: its name, upright, rather than a raw backslash.
        put(name, st, false);
    }

    const QString& m_s;
    int m_i = 0;
    QVector<MathTypesetter::Run> m_runs;
};

QString scriptForm(const QString& text, bool super) {
    static const QHash<QChar, QChar> sup{
        {u'0', QChar(0x2070)}, {u'1', QChar(0x00B9)}, {u'2', QChar(0x00B2)},
        {u'3', QChar(0x00B3)}, {u'4', QChar(0x2074)}, {u'5', QChar(0x2075)},
        {u'6', QChar(0x2076)}, {u'7', QChar(0x2077)}, {u'8', QChar(0x2078)},
        {u'9', QChar(0x2079)}, {u'+', QChar(0x207A)}, {QChar(0x2212), QChar(0x207B)},
        {u'=', QChar(0x207C)}, {u'(', QChar(0x207D)}, {u')', QChar(0x207E)},
        {u'n', QChar(0x207F)}, {u'i', QChar(0x2071)}};
    static const QHash<QChar, QChar> sub{
        {u'0', QChar(0x2080)}, {u'1', QChar(0x2081)}, {u'2', QChar(0x2082)},
        {u'3', QChar(0x2083)}, {u'4', QChar(0x2084)}, {u'5', QChar(0x2085)},
        {u'6', QChar(0x2086)}, {u'7', QChar(0x2087)}, {u'8', QChar(0x2088)},
        {u'9', QChar(0x2089)}, {u'+', QChar(0x208A)}, {QChar(0x2212), QChar(0x208B)},
        {u'=', QChar(0x208C)}, {u'(', QChar(0x208D)}, {u')', QChar(0x208E)},
        {u'a', QChar(0x2090)}, {u'e', QChar(0x2091)}, {u'o', QChar(0x2092)},
        {u'x', QChar(0x2093)}, {u'h', QChar(0x2095)}, {u'k', QChar(0x2096)},
        {u'l', QChar(0x2097)}, {u'm', QChar(0x2098)}, {u'n', QChar(0x2099)},
        {u'p', QChar(0x209A)}, {u's', QChar(0x209B)}, {u't', QChar(0x209C)},
        {u'i', QChar(0x1D62)}, {u'j', QChar(0x2C7C)}};
    const QHash<QChar, QChar>& map = super ? sup : sub;
    QString out;
    for (const QChar c : text) {
        if (!map.contains(c)) {
            const QString mark = super ? QStringLiteral("^") : QStringLiteral("_");
            return text.size() == 1 ? QString(mark + text) : QString(mark + u'(' + text + u')');
        }
        out += map.value(c);
    }
    return out;
}

} // namespace

QVector<MathTypesetter::Run> MathTypesetter::typeset(const QString& tex) {
    return Parser(tex).run();
}

QStringList MathTypesetter::fontFamilies() {
    // fonts-stix installs "STIX" (and STIXGeneral); DejaVu Serif has the same symbols.
    return {QStringLiteral("STIX"), QStringLiteral("STIXGeneral"), QStringLiteral("DejaVu Serif"),
            QStringLiteral("serif")};
}

void MathTypesetter::insert(QTextCursor& cursor, const QString& tex, const QTextCharFormat& base,
                            bool display) {
    // STIX's letters are smaller than the body font's at the same size: a step up keeps
    // maths level with the prose around it, a display formula a step more.
    const qreal body = base.hasProperty(QTextFormat::FontPointSize)
                           ? base.fontPointSize()
                           : cursor.document()->defaultFont().pointSizeF();
    const qreal size = body * (display ? 1.3 : 1.12);
    for (const Run& run : typeset(tex)) {
        QTextCharFormat f = base;
        f.setFontFamilies(fontFamilies());
        if (size > 0) f.setFontPointSize(size);
        f.setFontFixedPitch(false);
        f.setFontItalic(run.italic);
        if (run.bold) f.setFontWeight(QFont::Bold);
        f.setVerticalAlignment(run.shift);
        f.setFontOverline(run.overline);
        f.setProperty(texProperty(), tex);
        cursor.insertText(run.text, f);
    }
}

QString MathTypesetter::plainText(const QString& tex) {
    QString out;
    for (const Run& run : typeset(tex)) {
        if (run.shift == QTextCharFormat::AlignNormal)
            out += run.text;
        else
            out += scriptForm(run.text, run.shift == QTextCharFormat::AlignSuperScript);
    }
    for (QChar& c : out)
        if (c == kThinSpace || c == kMediumSpace || c == kQuad || c == QChar(0x2004) ||
            c == QChar::LineSeparator)
            c = u' ';
    return out.simplified();
}
