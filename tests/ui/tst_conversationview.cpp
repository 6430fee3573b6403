#include <QClipboard>
#include <QGuiApplication>
#include <QSet>
#include <QTest>
#include <QTextBlock>
#include <QTextCursor>
#include <QTextDocument>

#include "chat/CodeBlockHighlighter.h"

#include "chat/ConversationModel.h"
#include "chat/ConversationView.h"
#include "chat/MessageDelegate.h"

class TestConversationView : public QObject {
    Q_OBJECT
private slots:
    void streamingFillsTheLastMessage();
    void modelOutputIsNeverMarkup();
    void markdownIsRendered();
    void thinkingLabelAndToggle();
    void turnsExcludeTheStreamingMessage();
    void codeBlockIsHighlighted();
    void codeBlockTextIsExact();
    void copyButtonCopiesTheCode();
    void copyMessageShortcut();
    void keepThinkingExpanded();
    void removeFromDropsTheRest();
    void findCountsRenderedMatches();
};

namespace {
const QString kCppAnswer = QStringLiteral(
    "Use a loop:\n\n```cpp\nint main() {\n\treturn 0; // done\n}\n```\n\nThat is all.");
const QString kCppCode = QStringLiteral("int main() {\n\treturn 0; // done\n}");

// The character formats of every code character of the first code block.
QVector<QTextCharFormat> codeFormats(const QTextDocument& doc,
                                     const CodeBlockHighlighter::CodeBlock& code) {
    QVector<QTextCharFormat> out;
    for (int n = code.firstBlock; n <= code.lastBlock; ++n) {
        const QTextBlock block = doc.findBlockByNumber(n);
        for (int i = 0; i < block.length() - 1; ++i) {
            QTextCursor c(block);
            c.setPosition(block.position() + i + 1); // the format of the character before
            if (!block.text().at(i).isSpace()) out << c.charFormat();
        }
    }
    return out;
}
} // namespace

void TestConversationView::streamingFillsTheLastMessage() {
    ConversationView view;
    ConversationModel* m = view.conversation();
    m->appendMessage(QStringLiteral("user"), QStringLiteral("hi"));
    m->beginAssistantMessage();
    m->appendToLast({}, QStringLiteral("Hel"));
    m->appendToLast({}, QStringLiteral("lo"));
    QCOMPARE(view.messageCount(), 2);
    const QModelIndex last = m->index(1);
    QCOMPARE(last.data(ConversationModel::ContentRole).toString(), QStringLiteral("Hello"));
    QVERIFY(last.data(ConversationModel::StreamingRole).toBool());
    m->finishLast(QStringLiteral("2 tokens"));
    QVERIFY(!last.data(ConversationModel::StreamingRole).toBool());
    QCOMPARE(last.data(ConversationModel::StatsRole).toString(), QStringLiteral("2 tokens"));
}

void TestConversationView::modelOutputIsNeverMarkup() {
    QTextDocument doc;
    MessageDelegate::buildBody(doc, QStringLiteral("<img src=\"http://example.com/x.png\"><b>bold?</b>"),
                               QFont());
    // Raw HTML stays visible text: no image, no remote resource, no bold.
    QVERIFY(doc.toPlainText().contains(QStringLiteral("<img src=")));
    QVERIFY(doc.toPlainText().contains(QStringLiteral("<b>bold?</b>")));
    QVERIFY(!doc.toHtml().contains(QStringLiteral("<img")));
}

void TestConversationView::markdownIsRendered() {
    QTextDocument doc;
    MessageDelegate::buildBody(doc, QStringLiteral("**Cache** locality\n\n```cpp\nint i = 0;\n```\n"), QFont());
    QCOMPARE(doc.toPlainText(), QStringLiteral("Cache locality\nint i = 0;"));
    QTextCursor c(&doc);
    c.movePosition(QTextCursor::NextCharacter);
    QVERIFY(c.charFormat().fontWeight() >= QFont::Bold);
}

void TestConversationView::thinkingLabelAndToggle() {
    ConversationModel m;
    m.beginAssistantMessage();
    m.appendToLast(QStringLiteral("let me think"), {});
    QModelIndex i = m.index(0);
    QVERIFY(MessageDelegate::thinkingLabel(i).startsWith(QStringLiteral("▸ Thinking… ")));
    m.appendToLast({}, QStringLiteral("Answer."));
    QVERIFY(MessageDelegate::thinkingLabel(i).startsWith(QStringLiteral("▸ Thought for ")));
    QVERIFY(!i.data(ConversationModel::ThinkingExpandedRole).toBool());
    m.toggleThinking(0);
    QVERIFY(i.data(ConversationModel::ThinkingExpandedRole).toBool());
    QVERIFY(MessageDelegate::thinkingLabel(i).startsWith(QStringLiteral("▾ ")));
    // Opened from disk: the reasoning is there, its duration is not.
    m.setTurns({{QStringLiteral("user"), QStringLiteral("Q"), {}},
                {QStringLiteral("assistant"), QStringLiteral("A"), QStringLiteral("because")}});
    QCOMPARE(MessageDelegate::thinkingLabel(m.index(1)), QStringLiteral("▸ Thoughts"));
}

void TestConversationView::turnsExcludeTheStreamingMessage() {
    ConversationModel m;
    m.appendMessage(QStringLiteral("user"), QStringLiteral("q1"));
    m.beginAssistantMessage();
    m.appendToLast(QStringLiteral("r"), QStringLiteral("a1"));
    QCOMPARE(m.turns().size(), 1);
    m.finishLast({});
    const QVector<ChatTurn> turns = m.turns();
    QCOMPARE(turns.size(), 2);
    QCOMPARE(turns.at(1).role, QStringLiteral("assistant"));
    QCOMPARE(turns.at(1).content, QStringLiteral("a1"));
    QCOMPARE(turns.at(1).reasoning, QStringLiteral("r"));
}

void TestConversationView::codeBlockIsHighlighted() {
    QTextDocument doc;
    MessageDelegate::buildBody(doc, kCppAnswer, QFont());
    const auto blocks = CodeBlockHighlighter::codeBlocks(doc, kCppAnswer);
    QCOMPARE(blocks.size(), 1);
    QCOMPARE(blocks.at(0).language, QStringLiteral("cpp"));
    const QVector<QTextCharFormat> formats = codeFormats(doc, blocks.at(0));
    QVERIFY(formats.size() > 10);
    QSet<QRgb> colours;
    for (const QTextCharFormat& f : formats) {
        QVERIFY2(f.fontFixedPitch(), "a code character is not in a fixed-pitch font");
        colours.insert(f.foreground().color().rgba());
    }
    // The prose around the code stays in the proportional body font.
    QTextCursor prose(doc.begin());
    prose.setPosition(1);
    QVERIFY(!prose.charFormat().fontFixedPitch());
    QVERIFY(doc.findBlockByNumber(blocks.at(0).firstBlock)
                .blockFormat()
                .hasProperty(QTextFormat::BackgroundBrush));
#ifdef K3_HAVE_KSYNTAXHIGHLIGHTING
    QVERIFY(CodeBlockHighlighter::hasSyntaxColours());
    QVERIFY2(colours.size() >= 2, "KSyntaxHighlighting gave the C++ snippet a single colour");
#else
    QVERIFY(!CodeBlockHighlighter::hasSyntaxColours());
#endif
    // Still text, not markup: nothing but the code and the prose.
    QCOMPARE(doc.toPlainText(),
             QStringLiteral("Use a loop:\nint main() {\n    return 0; // done\n}\nThat is all."));
}

void TestConversationView::codeBlockTextIsExact() {
    QTextDocument doc;
    MessageDelegate::buildBody(doc, kCppAnswer, QFont());
    // The renderer expands the tab; the copied code keeps it.
    QCOMPARE(CodeBlockHighlighter::codeBlocks(doc, kCppAnswer).at(0).code, kCppCode);
    const QString two =
        QStringLiteral("a\n\n~~~~\nx ``` y\n\n  z\n~~~~\n\nb\n\n```python\nprint(1)\n");
    QCOMPARE(CodeBlockHighlighter::fencedContents(two),
             (QStringList{QStringLiteral("x ``` y\n\n  z"), QStringLiteral("print(1)")}));
    QTextDocument doc2;
    MessageDelegate::buildBody(doc2, two, QFont());
    const auto blocks = CodeBlockHighlighter::codeBlocks(doc2, two);
    QCOMPARE(blocks.size(), 2);
    QCOMPARE(blocks.at(0).code, QStringLiteral("x ``` y\n\n  z"));
    QCOMPARE(blocks.at(1).code, QStringLiteral("print(1)")); // unclosed: an answer still streaming
    QCOMPARE(blocks.at(1).language, QStringLiteral("python"));
}

void TestConversationView::copyButtonCopiesTheCode() {
    ConversationView view;
    view.resize(640, 480);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    ConversationModel* m = view.conversation();
    m->appendMessage(QStringLiteral("user"), QStringLiteral("Show me main"));
    m->appendMessage(QStringLiteral("assistant"), kCppAnswer);
    QGuiApplication::clipboard()->setText(QStringLiteral("before"));
    QVERIFY(view.codeCopyButtonRect(0, 0).isNull()); // the question has no code
    const QRect button = view.codeCopyButtonRect(1, 0);
    QVERIFY(!button.isEmpty());
    QVERIFY(view.viewport()->rect().contains(button));
    QVERIFY(view.codeCopyButtonRect(1, 1).isNull());
    // A click beside the button copies nothing.
    QTest::mouseClick(view.viewport(), Qt::LeftButton, {}, button.bottomLeft() + QPoint(-40, 30));
    QCOMPARE(QGuiApplication::clipboard()->text(), QStringLiteral("before"));
    QTest::mouseClick(view.viewport(), Qt::LeftButton, {}, button.center());
    QCOMPARE(QGuiApplication::clipboard()->text(), kCppCode);
}

void TestConversationView::copyMessageShortcut() {
    ConversationView view;
    view.resize(640, 480);
    view.show();
    QVERIFY(QTest::qWaitForWindowActive(&view));
    ConversationModel* m = view.conversation();
    m->appendMessage(QStringLiteral("user"), QStringLiteral("first question"));
    m->appendMessage(QStringLiteral("assistant"), kCppAnswer);
    view.setFocus();
    // Without a current message, the last one is copied, as Markdown source.
    QTest::keySequence(&view, QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_C));
    QCOMPARE(QGuiApplication::clipboard()->text(), kCppAnswer);
    view.setCurrentIndex(m->index(0));
    QTest::keySequence(&view, QKeySequence(Qt::CTRL | Qt::SHIFT | Qt::Key_C));
    QCOMPARE(QGuiApplication::clipboard()->text(), QStringLiteral("first question"));
}

void TestConversationView::keepThinkingExpanded() {
    ConversationModel m;
    m.setTurns({{QStringLiteral("assistant"), QStringLiteral("a"), QStringLiteral("r")}});
    QVERIFY(!m.index(0).data(ConversationModel::ThinkingExpandedRole).toBool());
    m.setThinkingExpandedByDefault(true);
    QVERIFY(m.index(0).data(ConversationModel::ThinkingExpandedRole).toBool());
    m.beginAssistantMessage();
    m.appendToLast(QStringLiteral("thinking"), {});
    QVERIFY(m.index(1).data(ConversationModel::ThinkingExpandedRole).toBool());
    QVERIFY(MessageDelegate::thinkingLabel(m.index(1)).startsWith(QStringLiteral("▾ Thinking… ")));
    m.setThinkingExpandedByDefault(false);
    QVERIFY(!m.index(1).data(ConversationModel::ThinkingExpandedRole).toBool());
}

void TestConversationView::removeFromDropsTheRest() {
    ConversationModel m;
    m.appendMessage(QStringLiteral("user"), QStringLiteral("q1"));
    m.appendMessage(QStringLiteral("assistant"), QStringLiteral("a1"));
    m.appendMessage(QStringLiteral("user"), QStringLiteral("q2"));
    m.appendMessage(QStringLiteral("assistant"), QStringLiteral("a2"));
    m.removeFrom(7);
    QCOMPARE(m.rowCount(), 4);
    m.removeFrom(2);
    QCOMPARE(m.rowCount(), 2);
    QCOMPARE(m.turns().last().content, QStringLiteral("a1"));
}

void TestConversationView::findCountsRenderedMatches() {
    ConversationView view;
    view.resize(640, 200);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    ConversationModel* m = view.conversation();
    m->appendMessage(QStringLiteral("user"), QStringLiteral("What is cache locality?"));
    for (int i = 0; i < 6; ++i)
        m->appendMessage(QStringLiteral("assistant"), QStringLiteral("Filler line %1.").arg(i));
    // "ca**che**" renders as "cache": found; the Markdown source would not match.
    m->appendMessage(QStringLiteral("assistant"),
                     QStringLiteral("A CACHE keeps data near; ca**che** lines."));
    QCOMPARE(view.find(QStringLiteral("cache")), 3);
    QCOMPARE(view.currentMatch(), 0);
    view.findNext();
    QCOMPARE(view.currentMatch(), 1);
    QCOMPARE(view.currentIndex().row(), 7);
    // The match was scrolled into view.
    QVERIFY(view.viewport()->rect().intersects(view.visualRect(view.currentIndex())));
    view.findPrevious();
    view.findPrevious();
    QCOMPARE(view.currentMatch(), 2); // wraps around
    QCOMPARE(view.find(QStringLiteral("nowhere")), 0);
    QCOMPARE(view.currentMatch(), -1);
    view.clearFind();
    QCOMPARE(view.matchCount(), 0);
}

QTEST_MAIN(TestConversationView)
#include "tst_conversationview.moc"
