// Issue 37 point 6: answers as CommonMark/GFM say, tables with padding and column
// alignment, quotes marked, maths set as maths, stats that wrap.
#include <QApplication>
#include <QImage>
#include <QRegularExpression>
#include <QTest>
#include <QTextBlock>
#include <QTextCursor>
#include <QTextDocument>
#include <QTextFrame>
#include <QTextLayout>
#include <QTextList>
#include <QTextTable>

#include "chat/CodeBlockHighlighter.h"
#include "chat/ConversationModel.h"
#include "chat/ConversationView.h"
#include "chat/MarkdownDocumentWriter.h"
#include "chat/MathTypesetter.h"
#include "chat/MessageDelegate.h"
#include "chat/SafeTextDocument.h"

#include <cmark-gfm-core-extensions.h>
#include <cmark-gfm.h>

class TestAnswerRendering : public QObject {
    Q_OBJECT
private slots:
    void tableHasPaddingHeaderAndColumnAlignment();
    void blockQuoteIsMarked();
    void inlineMathsIsSet();
    void displayMathsIsCentredAndSet();
    void pricesAndCodeAreNotMaths();
    void linkLineAfterAListItemStaysInIt();
    void listsQuotesAndTablesMatchCmarkGfm_data();
    void listsQuotesAndTablesMatchCmarkGfm();
    void listStartingAtTwoKeepsItsNumber();
    void linksKeepOnlyWebAddresses();
    void statsLineWraps();
    void screenshotOfATableWithMaths();
};

namespace {

QTextTable* firstTable(const QTextDocument& doc) {
    for (QTextFrame* frame : doc.rootFrame()->childFrames())
        if (auto* table = qobject_cast<QTextTable*>(frame)) return table;
    return nullptr;
}

QTextBlock blockStartingWith(const QTextDocument& doc, const QString& text) {
    for (QTextBlock b = doc.begin(); b.isValid(); b = b.next())
        if (b.text().startsWith(text)) return b;
    return {};
}

// The char format of the character at `position`.
QTextCharFormat formatAt(const QTextDocument& doc, int position) {
    QTextCursor c(const_cast<QTextDocument*>(&doc));
    c.setPosition(position + 1);
    return c.charFormat();
}

struct Shape {
    int listItems = 0;
    int quotes = 0;
    int tableCells = 0;
    int codeBlocks = 0;
};

// What cmark-gfm's own HTML renderer makes of `markdown`, counted by tag.
Shape cmarkShape(const QString& markdown) {
    cmark_gfm_core_extensions_ensure_registered();
    cmark_parser* parser =
        cmark_parser_new(CMARK_OPT_DEFAULT | CMARK_OPT_STRIKETHROUGH_DOUBLE_TILDE);
    for (const char* name : {"table", "strikethrough", "autolink", "tasklist"})
        cmark_parser_attach_syntax_extension(parser, cmark_find_syntax_extension(name));
    const QByteArray utf8 = markdown.toUtf8();
    cmark_parser_feed(parser, utf8.constData(), size_t(utf8.size()));
    cmark_node* root = cmark_parser_finish(parser);
    char* html =
        cmark_render_html(root, CMARK_OPT_DEFAULT, cmark_parser_get_syntax_extensions(parser));
    const QString text = QString::fromUtf8(html);
    free(html);
    cmark_node_free(root);
    cmark_parser_free(parser);
    Shape s;
    s.listItems = int(text.count(QStringLiteral("<li")));
    s.quotes = int(text.count(QStringLiteral("<blockquote>")));
    s.tableCells = int(text.count(QRegularExpression(QStringLiteral("<t[hd][ >]"))));
    s.codeBlocks = int(text.count(QStringLiteral("<pre")));
    return s;
}

void countFrames(QTextFrame* parent, Shape& s) {
    for (QTextFrame* frame : parent->childFrames()) {
        // A short row's missing cells are empty cells in cmark-gfm's HTML too.
        if (auto* table = qobject_cast<QTextTable*>(frame))
            s.tableCells += table->rows() * table->columns();
        if (frame->frameFormat().boolProperty(MarkdownDocumentWriter::quoteFrameProperty()))
            ++s.quotes;
        countFrames(frame, s);
    }
}

// The same counts in the document the view draws.
Shape documentShape(const QString& markdown) {
    SafeTextDocument doc;
    MessageDelegate::buildBody(doc, markdown, QFont());
    Shape s;
    for (QTextBlock b = doc.begin(); b.isValid(); b = b.next())
        if (b.textList()) ++s.listItems;
    countFrames(doc.rootFrame(), s);
    s.codeBlocks = int(CodeBlockHighlighter::codeBlocks(doc).size());
    return s;
}

const QString kTable = QStringLiteral("| Model | Params | Score |\n"
                                      "|:------|:------:|------:|\n"
                                      "| K3 | 2.78T | **91.2** |\n"
                                      "| Small | 7B | 70.1 |\n");

} // namespace

void TestAnswerRendering::tableHasPaddingHeaderAndColumnAlignment() {
    SafeTextDocument doc;
    MessageDelegate::buildBody(doc, QStringLiteral("Scores:\n\n") + kTable, QFont());
    QTextTable* table = firstTable(doc);
    QVERIFY(table);
    QCOMPARE(table->rows(), 3);
    QCOMPARE(table->columns(), 3);
    const QTextTableFormat format = table->format();
    QCOMPARE(format.cellPadding(), 6.0);
    QCOMPARE(format.cellSpacing(), 0.0);
    QCOMPARE(format.headerRowCount(), 1);
    QVERIFY(format.borderCollapse());
    const Qt::Alignment columns[] = {Qt::AlignLeft, Qt::AlignHCenter, Qt::AlignRight};
    const QString header[] = {QStringLiteral("Model"), QStringLiteral("Params"),
                              QStringLiteral("Score")};
    for (int column = 0; column < 3; ++column) {
        // Header cells follow their column's alignment, as GFM says, and are bold.
        const QTextTableCell head = table->cellAt(0, column);
        const QTextBlock headBlock = head.firstCursorPosition().block();
        QCOMPARE(headBlock.text(), header[column]);
        QCOMPARE(headBlock.blockFormat().alignment() & Qt::AlignHorizontal_Mask, columns[column]);
        QCOMPARE(formatAt(doc, headBlock.position()).fontWeight(), int(QFont::Bold));
        QVERIFY(head.format().background().style() != Qt::NoBrush);
        for (int row = 1; row < 3; ++row)
            QCOMPARE(
                table->cellAt(row, column).firstCursorPosition().block().blockFormat().alignment() &
                    Qt::AlignHorizontal_Mask,
                columns[column]);
    }
    QCOMPARE(table->cellAt(1, 2).firstCursorPosition().block().text(), QStringLiteral("91.2"));
    QVERIFY(table->cellAt(1, 0).format().background().style() == Qt::NoBrush);
    // The empty block a document keeps after a closing table takes no height.
    QCOMPARE(doc.lastBlock().text(), QString());
    QCOMPARE(doc.lastBlock().blockFormat().lineHeightType(), int(QTextBlockFormat::FixedHeight));
    QCOMPARE(doc.lastBlock().blockFormat().lineHeight(), 0.0);
}

void TestAnswerRendering::blockQuoteIsMarked() {
    const QString answer = QStringLiteral("Before.\n\n> Quoted once\n> and again.\n\nAfter.");
    QPalette palette;
    palette.setColor(QPalette::Text, QColor(10, 20, 30));
    SafeTextDocument doc;
    MessageDelegate::buildBody(doc, answer, QFont(), palette);
    const QTextBlock quoted = blockStartingWith(doc, QStringLiteral("Quoted once"));
    QVERIFY(quoted.isValid());
    QCOMPARE(quoted.blockFormat().intProperty(QTextFormat::BlockQuoteLevel), 1);
    QCOMPARE(quoted.text(), QStringLiteral("Quoted once\u2028and again."));
    QTextFrame* frame = QTextCursor(quoted).currentFrame();
    QVERIFY(frame != doc.rootFrame());
    QVERIFY(frame->frameFormat().boolProperty(MarkdownDocumentWriter::quoteFrameProperty()));
    QColor tint(10, 20, 30);
    tint.setAlphaF(0.06f);
    QCOMPARE(frame->frameFormat().background().color(), tint);
    QCOMPARE(blockStartingWith(doc, QStringLiteral("After."))
                 .blockFormat()
                 .intProperty(QTextFormat::BlockQuoteLevel),
             0);

    // The view draws a bar at the quote's left, in the placeholder colour.
    ConversationView view;
    view.resize(500, 300);
    view.conversation()->setTurns({{QStringLiteral("assistant"), answer, {}}});
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    const QModelIndex index = view.conversation()->index(0);
    auto* delegate = qobject_cast<MessageDelegate*>(view.itemDelegate());
    QVERIFY(delegate);
    QStyleOptionViewItem option;
    option.initFrom(view.viewport());
    option.rect = view.visualRect(index);
    option.font = view.font();
    const QRect text = delegate->bodyTextRect(option, index, quoted.position(), 6);
    const QImage shot = view.viewport()->grab().toImage();
    const QColor bar = MessageDelegate::quoteBarColour(view.palette());
    // The bar is at the body's left edge (the message margin, 12 px), the text after it.
    const int x = option.rect.left() + 12 + MessageDelegate::kQuoteBarWidth / 2;
    QCOMPARE(
        shot.pixelColor(x * shot.devicePixelRatio(), text.center().y() * shot.devicePixelRatio()),
        bar);
    QVERIFY(text.left() >= option.rect.left() + 12 + MarkdownDocumentWriter::kQuoteIndent);
}

void TestAnswerRendering::inlineMathsIsSet() {
    SafeTextDocument doc;
    MessageDelegate::buildBody(
        doc, QStringLiteral("Energy: $E=mc^2$, and $\\alpha_i \\le \\frac{1}{2}$."), QFont());
    const QString thin(QChar(0x2009));
    QCOMPARE(doc.toPlainText(), QStringLiteral("Energy: E") + thin + u'=' + thin +
                                    QStringLiteral("mc2, and αi") + thin + QStringLiteral("≤") +
                                    thin + QStringLiteral("1⁄2."));
    const int e = int(doc.toPlainText().indexOf(u'E', 2));
    const QTextCharFormat letter = formatAt(doc, e);
    QVERIFY(letter.fontItalic());
    QCOMPARE(letter.fontFamilies().toStringList().first(), QStringLiteral("STIX"));
    QCOMPARE(letter.property(MathTypesetter::texProperty()).toString(), QStringLiteral("E=mc^2"));
    const int two = int(doc.toPlainText().indexOf(u'2'));
    QCOMPARE(formatAt(doc, two).verticalAlignment(), QTextCharFormat::AlignSuperScript);
    const int i =
        int(doc.toPlainText().indexOf(u'i', doc.toPlainText().indexOf(QStringLiteral("α"))));
    QCOMPARE(formatAt(doc, i).verticalAlignment(), QTextCharFormat::AlignSubScript);
    const int fraction = int(doc.toPlainText().indexOf(QStringLiteral("1⁄2")));
    QCOMPARE(formatAt(doc, fraction).verticalAlignment(), QTextCharFormat::AlignSuperScript);
    QCOMPARE(formatAt(doc, fraction + 2).verticalAlignment(), QTextCharFormat::AlignSubScript);
    QVERIFY(!doc.toPlainText().contains(u'$'));
    QVERIFY(!doc.toPlainText().contains(u'\\'));

    // The operators the issue names, and a title's plain form.
    QCOMPARE(MathTypesetter::plainText(QStringLiteral("E=mc^2")), QStringLiteral("E = mc²"));
    QCOMPARE(MathTypesetter::plainText(
                 QStringLiteral("\\sum_{i=1}^{n} x_i \\ge \\int_0^\\infty f \\times g \\cdot h")),
             QStringLiteral("∑ᵢ₌₁ⁿxᵢ ≥ ∫₀^∞f × g ⋅ h"));
    QCOMPARE(MathTypesetter::plainText(QStringLiteral("\\sqrt{x} \\ne \\text{the root}")),
             QStringLiteral("√x ≠ the root"));
    const QVector<MathTypesetter::Run> root =
        MathTypesetter::typeset(QStringLiteral("\\sqrt{x+1}"));
    QCOMPARE(root.size(), 3);
    QCOMPARE(root.at(0).text, QStringLiteral("√"));
    QVERIFY(!root.at(0).overline);
    QCOMPARE(root.at(1).text, QStringLiteral("x"));
    QVERIFY(root.at(1).italic && root.at(1).overline);
    QCOMPARE(root.at(2).text, thin + u'+' + thin + u'1');
    QVERIFY(!root.at(2).italic && root.at(2).overline);
}

void TestAnswerRendering::displayMathsIsCentredAndSet() {
    SafeTextDocument doc;
    MessageDelegate::buildBody(
        doc, QStringLiteral("The sum:\n$$\n\\sum_{i=1}^{n} i = \\frac{n(n+1)}{2}\n$$\nholds."),
        QFont());
    QCOMPARE(doc.blockCount(), 3);
    const QTextBlock maths = doc.firstBlock().next();
    QCOMPARE(doc.firstBlock().text(), QStringLiteral("The sum:"));
    const QString thin(QChar(0x2009));
    QCOMPARE(maths.text(),
             QStringLiteral("∑i=1ni") + thin + u'=' + thin + QStringLiteral("n(n+1)⁄2"));
    QCOMPARE(maths.blockFormat().alignment() & Qt::AlignHorizontal_Mask, Qt::AlignHCenter);
    QCOMPARE(formatAt(doc, maths.position() + 1).verticalAlignment(),
             QTextCharFormat::AlignSubScript);
    QCOMPARE(doc.lastBlock().text(), QStringLiteral("holds."));
    QCOMPARE(doc.lastBlock().blockFormat().alignment() & Qt::AlignHorizontal_Mask, Qt::AlignLeft);
    // \[ ... \] is display maths too; \( ... \) inline.
    SafeTextDocument latex;
    MessageDelegate::buildBody(latex, QStringLiteral("\\[x^2\\] and \\(\\pi\\)"), QFont());
    QCOMPARE(latex.toPlainText(), QStringLiteral("x2\nand π"));
}

void TestAnswerRendering::pricesAndCodeAreNotMaths() {
    const QString prose = QStringLiteral("It costs $5 and $10, or US$5 to US$10.\n\\$x$ is text, "
                                         "`$a$` is code.\n\n```\n$b$\n```");
    SafeTextDocument doc;
    MessageDelegate::buildBody(doc, prose, QFont());
    QCOMPARE(doc.toPlainText(), QStringLiteral("It costs $5 and $10, or US$5 to US$10.\n$x$ is "
                                               "text, $a$ is code.\n$b$"));
    for (QTextBlock b = doc.begin(); b.isValid(); b = b.next())
        for (auto it = b.begin(); !it.atEnd(); ++it)
            QVERIFY(!it.fragment().charFormat().hasProperty(MathTypesetter::texProperty()));
}

void TestAnswerRendering::linkLineAfterAListItemStaysInIt() {
    // As sent by the model: a link line right after "2. second" (a lazy continuation
    // of the item's paragraph, with the chat's line break), never a third item.
    SafeTextDocument doc;
    MessageDelegate::buildBody(
        doc, QStringLiteral("1. first\n2. second\n[a link](https://example.com)\n\nAfter."),
        QFont());
    int items = 0;
    QTextList* list = nullptr;
    for (QTextBlock b = doc.begin(); b.isValid(); b = b.next())
        if (b.textList()) {
            ++items;
            list = b.textList();
        }
    QCOMPARE(items, 2);
    QCOMPARE(list->count(), 2);
    QCOMPARE(list->item(1).text(), QStringLiteral("second\u2028a link"));
    const int link = list->item(1).position() + 8;
    QCOMPARE(formatAt(doc, link).anchorHref(), QStringLiteral("https://example.com"));
    QVERIFY(!blockStartingWith(doc, QStringLiteral("After.")).textList());
}

void TestAnswerRendering::listsQuotesAndTablesMatchCmarkGfm_data() {
    QTest::addColumn<QString>("markdown");
    // Examples from the CommonMark 0.29 and GFM specs (their number), and chat answers.
    QTest::newRow("lazy continuation, spec 290") << QStringLiteral("- a\n- b\nc\n- d");
    QTest::newRow("sublist, spec 294") << QStringLiteral("- a\n  - b\n\n    c\n- d");
    QTest::newRow("loose list, spec 306") << QStringLiteral("- a\n- b\n\n- c");
    QTest::newRow("lazy quote, spec 210") << QStringLiteral("> # Foo\n> bar\nbaz");
    QTest::newRow("quote in a list, spec 272") << QStringLiteral(
        "1.  A paragraph\n    with two lines.\n\n        indented code\n\n    > A block quote.");
    QTest::newRow("nested quotes, spec 229") << QStringLiteral("> > > foo\nbar");
    QTest::newRow("table, GFM 198")
        << QStringLiteral("| foo | bar |\n| --- | --- |\n| baz | bim |");
    QTest::newRow("table ends at a quote, GFM 201")
        << QStringLiteral("| abc | def |\n| --- | --- |\n| bar | baz |\n> bar");
    QTest::newRow("short and long rows, GFM 204")
        << QStringLiteral("| abc | def |\n| --- | --- |\n| bar |\n| bar | baz | boo |");
    QTest::newRow("not a table, GFM 203") << QStringLiteral("| abc | def |\n| --- |\n| bar |");
    QTest::newRow("code after an item")
        << QStringLiteral("1. Install:\n```sh\napt install x\n```\n2. Run it\n3. Done");
    QTest::newRow("task list") << QStringLiteral(
        "- [x] done\n- [ ] to do\n\n> quoted\n\n| a |\n|---|\n| 1 |");
}

void TestAnswerRendering::listsQuotesAndTablesMatchCmarkGfm() {
    QFETCH(QString, markdown);
    // The chat's line breaks are part of what is rendered; cmark-gfm reads the same text.
    const QString rendered = MessageDelegate::hardLineBreaks(markdown);
    const Shape expected = cmarkShape(rendered);
    const Shape actual = documentShape(markdown);
    QCOMPARE(actual.listItems, expected.listItems);
    QCOMPARE(actual.quotes, expected.quotes);
    QCOMPARE(actual.tableCells, expected.tableCells);
    QCOMPARE(actual.codeBlocks, expected.codeBlocks);
}

void TestAnswerRendering::listStartingAtTwoKeepsItsNumber() {
    // The code block at column 0 ends the first list (CommonMark); the next one starts
    // at 2 and says so (Qt 6.4's lists can only count from 1).
    SafeTextDocument doc;
    MessageDelegate::buildBody(
        doc, QStringLiteral("1. Install:\n\n```sh\napt install x\n```\n\n2. Run it\n3. Done"),
        QFont());
    QCOMPARE(doc.toPlainText(), QStringLiteral("Install:\napt install x\n2. Run it\n3. Done"));
    const QTextBlock run = blockStartingWith(doc, QStringLiteral("2. Run it"));
    QVERIFY(run.blockFormat().textIndent() < 0); // the number hangs left of the text
    QVERIFY(run.textList());
    QCOMPARE(run.textList()->format().style(), QTextListFormat::ListStyleUndefined);
    QCOMPARE(run.textList()->count(), 2);
}

void TestAnswerRendering::linksKeepOnlyWebAddresses() {
    SafeTextDocument doc;
    MessageDelegate::buildBody(
        doc,
        QStringLiteral("[web](https://example.org) [file](file:///etc/passwd) [rel](notes.txt)"),
        QFont());
    QCOMPARE(doc.toPlainText(), QStringLiteral("web file rel"));
    QCOMPARE(formatAt(doc, 0).anchorHref(), QStringLiteral("https://example.org"));
    QVERIFY(formatAt(doc, 0).isAnchor());
    QCOMPARE(formatAt(doc, 4).anchorHref(), QString());
    QVERIFY(!formatAt(doc, 4).isAnchor());
    QCOMPARE(formatAt(doc, 9).anchorHref(), QString());
}

void TestAnswerRendering::statsLineWraps() {
    // The figures under an answer at the window's default width: they were cut off
    // ("…48 reusec"); they wrap onto a second line.
    const QString shortStats = QStringLiteral("48 tokens · 9.1 tok/s");
    const QString longStats = QStringLiteral(
        "48 tokens · 9.1 tok/s · first token after 2.3 s · prompt 87 positions in 1.9 s · "
        "0 of 48 guesses accepted · 48 reused · answered by Kimi-K3-demo");
    ConversationView view;
    view.resize(560, 400);
    ConversationModel* m = view.conversation();
    for (const QString& stats : {shortStats, longStats}) {
        m->beginAssistantMessage();
        m->appendToLast({}, QStringLiteral("Hello."));
        m->finishLast(stats);
    }
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    const QFont small = MessageDelegate::statsFont(view.font());
    const int width = view.visualRect(m->index(1)).width() - 2 * 12;
    const QFontMetrics fm(small);
    QVERIFY2(fm.horizontalAdvance(longStats) > width, "the stats line fits: make it longer");
    const int oneLine = MessageDelegate::statsHeight(shortStats, view.font(), width);
    const int wrapped = MessageDelegate::statsHeight(longStats, view.font(), width);
    QCOMPARE(wrapped, 2 * oneLine);
    view.doItemsLayout();
    QCOMPARE(view.visualRect(m->index(1)).height() - view.visualRect(m->index(0)).height(),
             oneLine);
    // Both lines are drawn: ink on the second line of the figures.
    const QRect second(view.visualRect(m->index(1)).left() + 12,
                       view.visualRect(m->index(1)).bottom() - 12 - oneLine + 2, width,
                       oneLine - 2);
    const QImage shot = view.viewport()->grab().toImage();
    // The message's right margin, level with that line: nothing is drawn there.
    const QColor background =
        shot.pixelColor(view.visualRect(m->index(1)).right() - 6, second.center().y());
    bool ink = false;
    for (int x = second.left(); x < second.right() && !ink; ++x)
        for (int y = second.top(); y < second.bottom() && !ink; ++y)
            ink = shot.pixelColor(x, y) != background;
    QVERIFY2(ink, "nothing drawn on the stats' second line");
}

void TestAnswerRendering::screenshotOfATableWithMaths() {
    // docs/screenshot-answer-table-maths.png when K3_SCREENSHOT_DIR names a folder.
    const QString answer = QStringLiteral(
        "Here are the three presets and what the model needs at each:\n\n"
        "| Preset | Trunk | Cache | Speed |\n"
        "|:-------|------:|------:|:-----:|\n"
        "| laptop | 8 GB | 4 GB | 1× |\n"
        "| desktop | 24 GB | 16 GB | 2.6× |\n"
        "| workstation | 96 GB | 64 GB | 5.1× |\n\n"
        "> The expert cache pays off when the same experts come back.\n\n"
        "With a hit rate $h$ and $N$ experts per token, the bytes read per token are\n"
        "$$B = (1 - h) \\cdot N \\cdot s_e + \\frac{S_t}{L}$$\n"
        "so $h \\ge 0.8$ cuts the reads by $\\times 5$; for $\\alpha \\in [0, 1]$ the "
        "estimate is $\\sum_{i=1}^{n} \\alpha_i^2 \\le \\sqrt{n}$.");
    ConversationView view;
    view.resize(760, 560);
    view.conversation()->setTurns(
        {{QStringLiteral("user"), QStringLiteral("Which **preset** fits, and why?"), {}},
         {QStringLiteral("assistant"), answer, {}}});
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    const QImage shot = view.grab().toImage();
    QVERIFY(!shot.isNull());
    const QString dir = qEnvironmentVariable("K3_SCREENSHOT_DIR");
    if (!dir.isEmpty())
        QVERIFY(shot.save(dir + QStringLiteral("/screenshot-answer-table-maths.png")));
}

QTEST_MAIN(TestAnswerRendering)
#include "tst_answerrendering.moc"
