#include <QAccessible>
#include <QClipboard>
#include <QDialog>
#include <QElapsedTimer>
#include <QGuiApplication>
#include <QImage>
#include <QPushButton>
#include <QSet>
#include <QSignalSpy>
#include <QTemporaryDir>
#include <QTest>
#include <QTextBlock>
#include <QTextCursor>
#include <QTextDocument>
#include <QTextEdit>
#include <QTextImageFormat>
#include <QTextLayout>
#include <QVBoxLayout>

#include "chat/CodeBlockHighlighter.h"

#include "chat/ConversationModel.h"
#include "chat/ConversationView.h"
#include "chat/MessageDelegate.h"
#include "chat/SafeTextDocument.h"

#include <atomic>
#include <chrono>
#include <fcntl.h>
#include <sys/stat.h>
#include <thread>
#include <unistd.h>

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
    void markdownImagesNeverLoadAFile();
    void safeDocumentLoadsNoResource();
    void invalidAnswerIsMarkedWhenReopened();
    void singleNewlinesAreLineBreaks();
    void userLinesKeepTheirHeight();
    void longCodeLineWrapsWithTheCopyButtonInView();
    void focusIsVisibleAndTheKeyboardReachesTheToggles();
    void finishedAnswerIsAnnounced();
    void messageTextCanBeSelectedInPart();
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
    MessageDelegate::buildBody(
        doc, QStringLiteral("<img src=\"http://example.com/x.png\"><b>bold?</b>"), QFont());
    // Raw HTML stays visible text: no image, no remote resource, no bold.
    QVERIFY(doc.toPlainText().contains(QStringLiteral("<img src=")));
    QVERIFY(doc.toPlainText().contains(QStringLiteral("<b>bold?</b>")));
    QVERIFY(!doc.toHtml().contains(QStringLiteral("<img")));
}

void TestConversationView::markdownIsRendered() {
    QTextDocument doc;
    MessageDelegate::buildBody(
        doc, QStringLiteral("**Cache** locality\n\n```cpp\nint i = 0;\n```\n"), QFont());
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

namespace {
// Image fragments left in a document.
int imageCount(const QTextDocument& doc) {
    int n = 0;
    for (QTextBlock b = doc.begin(); b.isValid(); b = b.next())
        for (auto it = b.begin(); !it.atEnd(); ++it)
            n += it.fragment().charFormat().isImageFormat() ? 1 : 0;
    return n;
}

// Whether anything opens `fifo` for reading while it runs: a reader blocked in open()
// lets a non-blocking writer open the other end (otherwise ENXIO), which also releases
// that reader, so a broken view records the open instead of hanging the test.
class FifoWatch {
public:
    explicit FifoWatch(QByteArray fifo)
        : m_fifo(std::move(fifo)), m_thread([this] {
              while (!m_stop.load()) {
                  const int fd = ::open(m_fifo.constData(), O_WRONLY | O_NONBLOCK | O_CLOEXEC);
                  if (fd >= 0) {
                      m_opened.store(true);
                      ::close(fd);
                  }
                  std::this_thread::sleep_for(std::chrono::milliseconds(2));
              }
          }) {}
    ~FifoWatch() { stop(); }
    bool stop() {
        m_stop.store(true);
        if (m_thread.joinable()) m_thread.join();
        return m_opened.load();
    }

private:
    QByteArray m_fifo;
    std::atomic<bool> m_stop{false};
    std::atomic<bool> m_opened{false};
    std::thread m_thread;
};
} // namespace

void TestConversationView::markdownImagesNeverLoadAFile() {
    // Model text (an answer, or an imported conversation) naming local files as images:
    // a FIFO (reading it froze the app for good), /dev/zero (read until bad_alloc), a
    // real picture (was shown). The view must never open any of them.
    QTemporaryDir tmp;
    QVERIFY(tmp.isValid());
    const QString fifo = tmp.filePath("pipe");
    QCOMPARE(::mkfifo(QFile::encodeName(fifo).constData(), 0600), 0);
    const QString png = tmp.filePath("cat.png");
    QImage picture(8, 8, QImage::Format_RGB32);
    picture.fill(Qt::red);
    QVERIFY(picture.save(png));

    const QString answer = QStringLiteral("See ![the pipe](%1) and ![zero](/dev/zero) and "
                                          "![a cat](%2) and ![](file://%2).")
                               .arg(fifo, png);
    FifoWatch watch(QFile::encodeName(fifo));
    QElapsedTimer clock;
    clock.start();

    SafeTextDocument doc;
    MessageDelegate::buildBody(doc, answer, QFont());
    doc.setTextWidth(400);
    const QSizeF size = doc.size(); // lays the document out (where images were loaded)
    QVERIFY(size.height() > 0);
    QCOMPARE(imageCount(doc), 0);
    QCOMPARE(doc.resourceRequests(), 0);
    // Qt 6.4's Markdown reader drops an image without alt text; later ones keep it, and
    // it becomes "[image]". Either way no object (U+FFFC) is left in the text.
    const QString text = doc.toPlainText();
    QVERIFY2(text.startsWith(QStringLiteral("See [image: the pipe] and [image: zero] and "
                                            "[image: a cat] and ")),
             qPrintable(text));
    QVERIFY2(text.endsWith(QStringLiteral(" and [image].")) ||
                 text.endsWith(QStringLiteral(" and .")),
             qPrintable(text));
    QVERIFY(!text.contains(QChar::ObjectReplacementCharacter));
    QVERIFY(doc.resource(QTextDocument::ImageResource, QUrl::fromLocalFile(png)).isNull());

    // The whole view, painted, with the same answer saved and reopened.
    ConversationView view;
    view.resize(600, 400);
    view.conversation()->setTurns({{QStringLiteral("user"), QStringLiteral("show me")},
                                   {QStringLiteral("assistant"), answer}});
    view.show();
    const QPixmap shot = view.grab();
    QVERIFY(!shot.isNull());
    QVERIFY(view.codeCopyButtonRect(1, 0).isNull()); // laid out (and no code block)

    QVERIFY2(!watch.stop(), "the FIFO named by an image was opened");
    QVERIFY2(clock.elapsed() < 5000, qPrintable(QString::number(clock.elapsed())));
    struct stat st {};
    QCOMPARE(::stat(QFile::encodeName(fifo).constData(), &st), 0);
    QVERIFY(S_ISFIFO(st.st_mode));
}

void TestConversationView::safeDocumentLoadsNoResource() {
    // Even an image that reaches the document (here through HTML, which the views never
    // set) gets nothing from loadResource(): the request is counted and answered empty.
    QTemporaryDir tmp;
    const QString png = tmp.filePath("p.png");
    QImage picture(4, 4, QImage::Format_RGB32);
    picture.fill(Qt::blue);
    QVERIFY(picture.save(png));
    SafeTextDocument doc;
    doc.setHtml(
        QStringLiteral("<p>x<img src=\"%1\">y</p>").arg(QUrl::fromLocalFile(png).toString()));
    doc.setTextWidth(300);
    QVERIFY(doc.size().height() > 0);
    QVERIFY(doc.resourceRequests() >= 1);
    QVERIFY(doc.resource(QTextDocument::ImageResource, QUrl::fromLocalFile(png)).isNull());
    // A plain QTextDocument would have read the file: the control that this is the path.
    QTextDocument plain;
    QVERIFY(!plain.resource(QTextDocument::ImageResource, QUrl::fromLocalFile(png)).isNull());
    // replaceImages() removes it altogether.
    QCOMPARE(SafeTextDocument::replaceImages(doc), 1);
    QCOMPARE(imageCount(doc), 0);
    QCOMPARE(doc.toPlainText(), QStringLiteral("x[image]y"));
}

void TestConversationView::invalidAnswerIsMarkedWhenReopened() {
    ConversationModel m;
    m.appendMessage(QStringLiteral("user"), QStringLiteral("hi"));
    m.beginAssistantMessage();
    m.appendToLast({}, QStringLiteral("x"));
    m.finishLast(QStringLiteral("1 token · RUN INVALID (a NaN or Inf reached the logits)"),
                 QStringLiteral("a NaN or Inf reached the logits"));
    const QVector<ChatTurn> turns = m.turns();
    QCOMPARE(turns.size(), 2);
    QCOMPARE(turns[1].invalid, QStringLiteral("a NaN or Inf reached the logits"));
    QCOMPARE(turns[0].invalid, QString());
    ConversationModel reopened;
    reopened.setTurns(turns);
    QCOMPARE(reopened.index(1).data(ConversationModel::InvalidRole).toString(),
             QStringLiteral("a NaN or Inf reached the logits"));
    QCOMPARE(reopened.index(1).data(ConversationModel::StatsRole).toString(),
             QStringLiteral("RUN INVALID: a NaN or Inf reached the logits"));
    QCOMPARE(reopened.index(0).data(ConversationModel::StatsRole).toString(), QString());
}

// Chat text means its newlines (issue 21): a single newline is a line break in user and
// model text alike, while fenced code, lists and paragraphs keep their Markdown meaning.
void TestConversationView::singleNewlinesAreLineBreaks() {
    QCOMPARE(MessageDelegate::hardLineBreaks(QStringLiteral("one\ntwo\n\nthree")),
             QStringLiteral("one  \ntwo\n\nthree"));
    QCOMPARE(MessageDelegate::hardLineBreaks(QStringLiteral("```\na\nb\n```\nx\ny")),
             QStringLiteral("```\na\nb\n```\nx  \ny"));
    QTextDocument doc;
    MessageDelegate::buildBody(doc, QStringLiteral("Roses are red\nViolets are blue"), QFont());
    // Two lines (Qt lays a Markdown hard break out as a block break), not "red Violets".
    QCOMPARE(doc.blockCount(), 2);
    QCOMPARE(doc.firstBlock().text(), QStringLiteral("Roses are red"));
    QCOMPARE(doc.lastBlock().text(), QStringLiteral("Violets are blue"));
    QTextDocument list;
    MessageDelegate::buildBody(list, QStringLiteral("- a\n- b\n\n```\nx = 1\ny = 2\n```"), QFont());
    QCOMPARE(list.toPlainText(), QStringLiteral("a\nb\nx = 1\ny = 2"));
}

// A user message "a\nb" takes two lines in the view, not one line "a b" (issue 21).
void TestConversationView::userLinesKeepTheirHeight() {
    ConversationView view;
    view.resize(640, 480);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    ConversationModel* m = view.conversation();
    m->appendMessage(QStringLiteral("user"), QStringLiteral("a"));
    m->appendMessage(QStringLiteral("user"), QStringLiteral("a\nb"));
    m->appendMessage(QStringLiteral("user"), QStringLiteral("a\nb\nc"));
    QTest::qWait(0);
    view.doItemsLayout();
    const int one = view.visualRect(m->index(0)).height();
    const int two = view.visualRect(m->index(1)).height();
    const int three = view.visualRect(m->index(2)).height();
    const int line = two - one;
    QVERIFY2(line >= QFontMetrics(view.font()).height() - 1, qPrintable(QString::number(line)));
    QCOMPARE(three - two, line); // each newline adds one line
    QTextDocument doc;
    MessageDelegate::buildBody(doc, QStringLiteral("a\nb"), view.font());
    doc.setTextWidth(600);
    doc.size(); // lays the document out
    int lines = 0;
    for (QTextBlock b = doc.begin(); b.isValid(); b = b.next()) lines += b.layout()->lineCount();
    QCOMPARE(lines, 2);
}

// Issue 21: a long code line ran out of the message with no scroll bar, and its Copy
// button (at the line's right end) with it. Code now wraps at the message width; the
// button sits at the message's right edge, beside the first line, and copies the line whole.
void TestConversationView::longCodeLineWrapsWithTheCopyButtonInView() {
    ConversationView view;
    view.resize(480, 400);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    const QString longLine = QStringLiteral("auto total = ") +
                             QStringLiteral("first_value + second_value + ").repeated(12) +
                             QStringLiteral("0;");
    const QString answer =
        QStringLiteral("Here:\n\n```cpp\n") + longLine + QStringLiteral("\n```\n");
    ConversationModel* m = view.conversation();
    m->appendMessage(QStringLiteral("assistant"), answer);
    const QRect button = view.codeCopyButtonRect(0, 0);
    QVERIFY(!button.isEmpty());
    QVERIFY2(view.viewport()->rect().contains(button), qPrintable(QStringLiteral("%1,%2 %3x%4")
                                                                      .arg(button.x())
                                                                      .arg(button.y())
                                                                      .arg(button.width())
                                                                      .arg(button.height())));
    // Nothing is wider than the message: the document wraps the line at the width.
    QTextDocument doc;
    MessageDelegate::buildBody(doc, answer, view.font());
    const int width = view.viewport()->width() - 24;
    doc.setTextWidth(width);
    QVERIFY2(doc.idealWidth() <= width, qPrintable(QString::number(doc.idealWidth())));
    const auto blocks = CodeBlockHighlighter::codeBlocks(doc, answer);
    QCOMPARE(blocks.size(), 1);
    const QTextBlock code = doc.findBlockByNumber(blocks.at(0).firstBlock);
    QVERIFY(code.layout()->lineCount() >= 3);
    // The first line stops short of the button.
    QVERIFY(code.layout()->lineAt(0).naturalTextWidth() <=
            width - MessageDelegate::copyButtonSize(view.font()).width());
    QGuiApplication::clipboard()->clear();
    QTest::mouseClick(view.viewport(), Qt::LeftButton, {}, button.center());
    QCOMPARE(QGuiApplication::clipboard()->text(), longLine);
}

// Issue 21: a Tab stop on the conversation showed no focus; the thinking toggle and the
// Copy buttons the delegate draws had no keyboard way and no accessible names.
void TestConversationView::focusIsVisibleAndTheKeyboardReachesTheToggles() {
    QWidget window;
    auto* before = new QPushButton(QStringLiteral("before"), &window);
    auto* view = new ConversationView(&window);
    auto* layout = new QVBoxLayout(&window);
    layout->addWidget(before);
    layout->addWidget(view);
    window.resize(640, 480);
    ConversationModel* m = view->conversation();
    m->setTurns({{QStringLiteral("user"), QStringLiteral("Show me main"), {}},
                 {QStringLiteral("assistant"), kCppAnswer, QStringLiteral("thinking it over")}});
    window.show();
    QVERIFY(QTest::qWaitForWindowActive(&window));
    before->setFocus();
    const QColor highlight = view->palette().color(QPalette::Highlight);
    QCOMPARE(QColor(view->viewport()->grab().toImage().pixel(1, 1)) == highlight, false);
    QTest::keyClick(before, Qt::Key_Tab);
    QTRY_VERIFY(view->hasFocus());
    // A frame in the highlight colour, and the last message is the current one.
    QCOMPARE(QColor(view->viewport()->grab().toImage().pixel(1, 1)), highlight);
    QCOMPARE(view->currentIndex().row(), 1);
    QCOMPARE(view->accessibleDescription(),
             QStringLiteral("Message 2 of 2, from K3. Thinking hidden: Space shows it. 1 code "
                            "block: Copy code block 1 is in the context menu."));
    QTest::keyClick(view, Qt::Key_Space);
    QVERIFY(m->index(1).data(ConversationModel::ThinkingExpandedRole).toBool());
    QVERIFY(
        view->accessibleDescription().contains(QStringLiteral("Thinking shown: Space hides it.")));
    QTest::keyClick(view, Qt::Key_Space);
    QVERIFY(!m->index(1).data(ConversationModel::ThinkingExpandedRole).toBool());
    QTest::keyClick(view, Qt::Key_Up);
    QCOMPARE(view->currentIndex().row(), 0);
    QCOMPARE(view->accessibleDescription(), QStringLiteral("Message 1 of 2, from you."));
}

namespace {
QVector<QPair<QAccessible::Event, QObject*>> g_accessibleEvents;
void recordAccessibleEvent(QAccessibleEvent* event) {
    g_accessibleEvents.push_back({event->type(), event->object()});
}
} // namespace

// Issue 21: a screen reader hears the answer once, when it is complete.
void TestConversationView::finishedAnswerIsAnnounced() {
    ConversationView view;
    QSignalSpy announced(&view, &ConversationView::answerAnnounced);
    ConversationModel* m = view.conversation();
    m->appendMessage(QStringLiteral("user"), QStringLiteral("hi"));
    g_accessibleEvents.clear();
    // As when a screen reader is running (events are dropped otherwise).
    QAccessible::setActive(true);
    const QAccessible::UpdateHandler previous =
        QAccessible::installUpdateHandler(recordAccessibleEvent);
    m->beginAssistantMessage();
    m->appendToLast(QStringLiteral("hmm"), {});
    m->appendToLast({}, QStringLiteral("Hello\nthere"));
    m->appendToLast({}, QStringLiteral("!"));
    QCOMPARE(announced.count(), 0); // nothing token by token
    m->finishLast(QStringLiteral("3 tokens"));
    QAccessible::installUpdateHandler(previous);
    QAccessible::setActive(false);
    QCOMPARE(announced.count(), 1);
    QCOMPARE(announced.at(0).at(0).toString(), QStringLiteral("K3 answered: Hello there!"));
    QCOMPARE(view.accessibleDescription(), QStringLiteral("K3 answered: Hello there!"));
    // Qt delivers accessibility events only where the platform has an accessibility
    // bridge (not offscreen); there the alert goes to the view.
    if (QAccessible::isActive()) {
        int alerts = 0;
        for (const auto& [type, object] : g_accessibleEvents)
            if (type == QAccessible::Alert && object == &view) ++alerts;
        QCOMPARE(alerts, 1);
    }
    m->appendMessage(QStringLiteral("user"), QStringLiteral("again")); // no second announcement
    QCOMPARE(announced.count(), 1);
}

// The delegate draws text that cannot be selected; Select text… (context menu) shows
// the message in a read-only box where any part of it can be selected and copied.
void TestConversationView::messageTextCanBeSelectedInPart() {
    ConversationView view;
    view.conversation()->appendMessage(QStringLiteral("assistant"),
                                       QStringLiteral("Line one\nLine **two** ![x](/dev/zero)"));
    view.showMessageText(0);
    auto* dialog = view.findChild<QDialog*>(QStringLiteral("messageTextDialog"));
    QVERIFY(dialog);
    QVERIFY(dialog->isVisible());
    auto* text = dialog->findChild<QTextEdit*>(QStringLiteral("messageText"));
    QVERIFY(text);
    QVERIFY(text->isReadOnly());
    QCOMPARE(text->toPlainText(), QStringLiteral("Line one\nLine two [image: x]"));
    QCOMPARE(qobject_cast<SafeTextDocument*>(text->document())->resourceRequests(), 0);
    QTextCursor part = text->textCursor();
    part.setPosition(5);
    part.setPosition(8, QTextCursor::KeepAnchor);
    text->setTextCursor(part);
    text->copy();
    QCOMPARE(QGuiApplication::clipboard()->text(), QStringLiteral("one"));
    dialog->close();
}

QTEST_MAIN(TestConversationView)
#include "tst_conversationview.moc"
