#include <QAccessible>
#include <QApplication>
#include <QClipboard>
#include <QDialog>
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
#include <QWheelEvent>

#include "chat/CodeBlockHighlighter.h"

#include "chat/ConversationModel.h"
#include "chat/ConversationView.h"
#include "chat/MessageDelegate.h"
#include "chat/SafeTextDocument.h"

#include <atomic>
#include <cerrno>
#include <cmath>
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
    void longCodeLineScrollsSideways();
    void wheelAndKeysScrollTheCodeBlock();
    void focusIsVisibleAndTheKeyboardReachesTheToggles();
    void finishedAnswerIsAnnounced();
    void messageTextCanBeSelectedInPart();
    void contextMenuSelectTextOpensTheEditor();
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

// Whether anything opens `fifo` for reading while it runs. The watcher waits in a
// writer's blocking open(), which returns when a reader opens the other end (blocking or
// not): an open is seen when it happens, not found by polling, and a reader blocked in
// open() is released, so a broken view records the open instead of hanging the test.
// stop() opens a reader of its own to end the wait.
class FifoWatch {
public:
    explicit FifoWatch(QByteArray fifo)
        : m_fifo(std::move(fifo)), m_thread([this] {
              for (;;) {
                  const int fd = ::open(m_fifo.constData(), O_WRONLY | O_CLOEXEC);
                  if (fd < 0 && errno == EINTR) continue;
                  if (fd >= 0) ::close(fd);
                  if (fd < 0 || m_stopping.load()) return;
                  m_opened.store(true);
              }
          }) {}
    ~FifoWatch() { stop(); }
    bool stop() {
        if (m_thread.joinable()) {
            m_stopping.store(true);
            // Held until the join: the watcher's open() returns even if it had not begun.
            const int reader = ::open(m_fifo.constData(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
            m_thread.join();
            if (reader >= 0) ::close(reader);
        }
        return m_opened.load();
    }

private:
    QByteArray m_fifo;
    std::atomic<bool> m_stopping{false};
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
    // A read that blocked would never return: the test's time-out is the hang guard.
    FifoWatch watch(QFile::encodeName(fifo));

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
    // Two lines, not "red Violets": a Markdown hard break is a line separator in the one
    // paragraph (a block break would make a new list item inside a list, issue 37).
    QCOMPARE(doc.blockCount(), 1);
    QCOMPARE(doc.firstBlock().text(), QStringLiteral("Roses are red\u2028Violets are blue"));
    QCOMPARE(doc.toPlainText(), QStringLiteral("Roses are red\nViolets are blue"));
    doc.setTextWidth(600);
    doc.size(); // lays the document out
    QCOMPARE(doc.firstBlock().layout()->lineCount(), 2);
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
    QCoreApplication::processEvents(); // what the insertions posted, then the layout now
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

namespace {
const QString kLongLine = QStringLiteral("auto total = ") +
                          QStringLiteral("first_value + second_value + ").repeated(12) +
                          QStringLiteral("0;");
const QString kShortLine = QStringLiteral("auto total = 0;");
QString codeAnswer(const QString& line) {
    return QStringLiteral("Here:\n\n```cpp\n") + line + QStringLiteral("\n```\n\nDone.");
}

void wheel(QWidget* viewport, const QPoint& at, const QPoint& angle,
           Qt::KeyboardModifiers modifiers = {}) {
    QWheelEvent event(at, viewport->mapToGlobal(at), QPoint(), angle, Qt::NoButton, modifiers,
                      Qt::NoScrollPhase, false);
    QApplication::sendEvent(viewport, &event);
}
} // namespace

// Issue 21: a long code line ran out of the message with no scroll bar, and its Copy
// button (at the line's right end) with it. Code lines now never wrap: the block keeps
// one line per line and scrolls sideways, the button pinned at the message's right edge.
void TestConversationView::longCodeLineScrollsSideways() {
    ConversationView view;
    view.resize(480, 400);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    ConversationModel* m = view.conversation();
    m->appendMessage(QStringLiteral("assistant"), codeAnswer(kLongLine));
    m->appendMessage(QStringLiteral("assistant"), codeAnswer(kShortLine));
    view.doItemsLayout();
    // The same height as with the line cut short, plus the scroll indicator's room.
    QCOMPARE(view.visualRect(m->index(0)).height(),
             view.visualRect(m->index(1)).height() + MessageDelegate::kScrollIndicatorSpace);
    QCOMPARE(view.codeBlockRect(0, 0).height(), view.codeBlockRect(1, 0).height());
    const int width = view.viewport()->width() - 24; // the body, between the margins
    QCOMPARE(view.codeBlockRect(0, 0).width(), width);
    QCOMPARE(view.codeScrollMaximum(1, 0), 0); // the short line fits
    QVERIFY2(view.codeScrollMaximum(0, 0) > width, qPrintable(QString::number(width)));

    SafeTextDocument doc;
    MessageDelegate::layoutBody(doc, codeAnswer(kLongLine), view.font(), view.palette(), width);
    const auto blocks = CodeBlockHighlighter::codeBlocks(doc, codeAnswer(kLongLine));
    QCOMPARE(blocks.size(), 1);
    const QTextBlock code = doc.findBlockByNumber(blocks.at(0).firstBlock);
    QCOMPARE(code.layout()->lineCount(), 1);
    // The line's full width (plus the button's room) is what the block scrolls through.
    const QTextLine line = code.layout()->lineAt(0);
    const int room = MessageDelegate::copyButtonSize(view.font()).width() + 4;
    QCOMPARE(view.codeScrollMaximum(0, 0),
             int(std::ceil(line.x() + line.naturalTextWidth() + room)) - width);
    // The prose still wraps at the message width.
    QVERIFY(doc.idealWidth() > width);
    QCOMPARE(doc.lastBlock().text(), QStringLiteral("Done."));
    QCOMPARE(doc.lastBlock().layout()->lineCount(), 1);

    const QRect button = view.codeCopyButtonRect(0, 0);
    QVERIFY(view.viewport()->rect().contains(button));
    QCOMPARE(button.right(), view.codeBlockRect(0, 0).right() - 2);
    QCOMPARE(button.top(), view.codeBlockRect(0, 0).top() + 2);
    QGuiApplication::clipboard()->clear();
    QTest::mouseClick(view.viewport(), Qt::LeftButton, {}, button.center());
    QCOMPARE(QGuiApplication::clipboard()->text(), kLongLine);
}

// A sideways wheel, Shift+wheel and Shift+Left/Right scroll the wide block by
// codeScrollStep() (60 px with 3 wheel lines), within its width; the Copy button stays
// where it was and still copies the whole line.
void TestConversationView::wheelAndKeysScrollTheCodeBlock() {
    QApplication::setWheelScrollLines(3);
    QCOMPARE(MessageDelegate::codeScrollStep(), 60);
    ConversationView view;
    view.resize(480, 400);
    view.show();
    QVERIFY(QTest::qWaitForWindowActive(&view));
    ConversationModel* m = view.conversation();
    m->appendMessage(QStringLiteral("user"), QStringLiteral("Sum them"));
    m->appendMessage(QStringLiteral("assistant"), codeAnswer(kLongLine));
    const QRect block = view.codeBlockRect(1, 0);
    const QRect button = view.codeCopyButtonRect(1, 0);
    const int maximum = view.codeScrollMaximum(1, 0);
    QVERIFY(maximum > 60);
    const QPoint inside = block.center() - QPoint(block.width() / 4, 0);
    const QImage before = view.viewport()->grab().toImage();

    wheel(view.viewport(), inside, QPoint(-120, 0)); // one notch to the right
    QCOMPARE(view.codeScrollOffset(1, 0), 60);
    QCOMPARE(view.codeCopyButtonRect(1, 0), button);
    const QImage after = view.viewport()->grab().toImage();
    // The code moved, the button did not (inside its rounded border, which lets the code
    // under its corners show).
    QVERIFY(before.copy(block.adjusted(0, 0, -button.width() - 2, 0)) !=
            after.copy(block.adjusted(0, 0, -button.width() - 2, 0)));
    QCOMPARE(before.copy(button.adjusted(3, 3, -3, -3)), after.copy(button.adjusted(3, 3, -3, -3)));

    wheel(view.viewport(), inside, QPoint(0, -120), Qt::ShiftModifier); // Shift+wheel down
    QCOMPARE(view.codeScrollOffset(1, 0), 120);
    wheel(view.viewport(), inside, QPoint(0, -120)); // a plain wheel is not for the code
    QCOMPARE(view.codeScrollOffset(1, 0), 120);
    wheel(view.viewport(), inside, QPoint(120, 0)); // back left
    QCOMPARE(view.codeScrollOffset(1, 0), 60);
    wheel(view.viewport(), inside, QPoint(-120 * 1000, 0));
    QCOMPARE(view.codeScrollOffset(1, 0), maximum); // no further than the line's end
    wheel(view.viewport(), inside, QPoint(120 * 1000, 0));
    QCOMPARE(view.codeScrollOffset(1, 0), 0);
    // Outside the block (on the question) the wheel scrolls no code.
    wheel(view.viewport(), view.visualRect(m->index(0)).center(), QPoint(-120, 0));
    QCOMPARE(view.codeScrollOffset(1, 0), 0);

    view.setFocus();
    view.setCurrentIndex(m->index(1));
    QTest::keyClick(&view, Qt::Key_Right, Qt::ShiftModifier);
    QTest::keyClick(&view, Qt::Key_Right, Qt::ShiftModifier);
    QCOMPARE(view.codeScrollOffset(1, 0), 120);
    QTest::keyClick(&view, Qt::Key_Left, Qt::ShiftModifier);
    QCOMPARE(view.codeScrollOffset(1, 0), 60);
    QCOMPARE(view.currentIndex().row(), 1);
    QVERIFY(view.accessibleDescription().contains(
        QStringLiteral("Shift+Left and Shift+Right scroll its wide code.")));

    // Find in conversation scrolls to a match at the line's end (and back to its start).
    QCOMPARE(view.find(QStringLiteral("second_value + 0;")), 1);
    QCOMPARE(view.codeScrollOffset(1, 0), maximum);
    QCOMPARE(view.find(QStringLiteral("auto total")), 1);
    QCOMPARE(view.codeScrollOffset(1, 0), 0);
    view.clearFind();

    QCOMPARE(view.codeCopyButtonRect(1, 0), button);
    QGuiApplication::clipboard()->clear();
    QTest::mouseClick(view.viewport(), Qt::LeftButton, {}, button.center());
    QCOMPARE(QGuiApplication::clipboard()->text(), kLongLine);
    // A new conversation starts unscrolled.
    wheel(view.viewport(), inside, QPoint(-120, 0));
    QCOMPARE(view.codeScrollOffset(1, 0), 60);
    m->setTurns({{QStringLiteral("assistant"), codeAnswer(kLongLine), {}}});
    QCOMPARE(view.codeScrollOffset(0, 0), 0);
    QCOMPARE(view.codeScrollOffset(1, 0), 0);
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
                            "block: Copy code block 1 is in the context menu. F2 selects its "
                            "text."));
    QTest::keyClick(view, Qt::Key_Space);
    QVERIFY(m->index(1).data(ConversationModel::ThinkingExpandedRole).toBool());
    QVERIFY(
        view->accessibleDescription().contains(QStringLiteral("Thinking shown: Space hides it.")));
    QTest::keyClick(view, Qt::Key_Space);
    QVERIFY(!m->index(1).data(ConversationModel::ThinkingExpandedRole).toBool());
    QTest::keyClick(view, Qt::Key_Up);
    QCOMPARE(view->currentIndex().row(), 0);
    QCOMPARE(view->accessibleDescription(),
             QStringLiteral("Message 1 of 2, from you. F2 selects its text."));
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

namespace {
// The open editor (a closed one is hidden until it is deleted).
QTextEdit* messageEditor(const ConversationView& view) {
    for (QTextEdit* editor :
         view.viewport()->findChildren<QTextEdit*>(QStringLiteral("messageTextEditor")))
        if (editor->isVisible()) return editor;
    return nullptr;
}
} // namespace

// Issue 21: text can be selected in part, in place. A double-click on a message opens it
// in a read-only editor with the same rendered text; a selection made with the keyboard
// copies exactly that part (Ctrl+C), and Esc closes the editor, leaving the message as it was.
void TestConversationView::messageTextCanBeSelectedInPart() {
    ConversationView view;
    view.resize(640, 480);
    view.show();
    QVERIFY(QTest::qWaitForWindowActive(&view));
    ConversationModel* m = view.conversation();
    const QString source = QStringLiteral("Line one\nLine **two** ![x](/dev/zero)");
    m->appendMessage(QStringLiteral("user"), QStringLiteral("Two lines, please"));
    m->appendMessage(QStringLiteral("assistant"), source);
    view.doItemsLayout();
    QVERIFY(!messageEditor(view));
    const QRect text = view.visualRect(m->index(1));
    // A real double-click: a click, then the double-click event (QTest sends only that).
    QTest::mouseClick(view.viewport(), Qt::LeftButton, {}, text.center());
    QTest::mouseDClick(view.viewport(), Qt::LeftButton, {}, text.center());
    QTextEdit* editor = messageEditor(view);
    QVERIFY(editor);
    QVERIFY(editor->isReadOnly());
    QTRY_VERIFY(editor->hasFocus());
    QCOMPARE(editor->toPlainText(), QStringLiteral("Line one\nLine two [image: x]"));
    QCOMPARE(qobject_cast<SafeTextDocument*>(editor->document())->resourceRequests(), 0);
    QVERIFY(text.contains(editor->geometry()));
    QCOMPARE(view.currentIndex().row(), 1);

    // "one": from the start, five characters right, then three selected.
    QTest::keyClick(editor, Qt::Key_Home, Qt::ControlModifier);
    for (int i = 0; i < 5; ++i) QTest::keyClick(editor, Qt::Key_Right);
    for (int i = 0; i < 3; ++i) QTest::keyClick(editor, Qt::Key_Right, Qt::ShiftModifier);
    QCOMPARE(editor->textCursor().selectedText(), QStringLiteral("one"));
    QGuiApplication::clipboard()->setText(QStringLiteral("before"));
    QTest::keySequence(editor, QKeySequence::Copy);
    QCOMPARE(QGuiApplication::clipboard()->text(), QStringLiteral("one"));
    // Across the line break and the bold word: the rendered text, not the Markdown.
    QTextCursor part = editor->textCursor();
    part.setPosition(5);
    part.setPosition(17, QTextCursor::KeepAnchor);
    editor->setTextCursor(part);
    QTest::keySequence(editor, QKeySequence::Copy);
    QCOMPARE(QGuiApplication::clipboard()->text(), QStringLiteral("one\nLine two"));
    // Typing changes nothing.
    QTest::keyClicks(editor, QStringLiteral("zz"));
    QCOMPARE(editor->toPlainText(), QStringLiteral("Line one\nLine two [image: x]"));

    QTest::keyClick(editor, Qt::Key_Escape);
    QTRY_VERIFY(!messageEditor(view));
    QCOMPARE(m->index(1).data(ConversationModel::ContentRole).toString(), source);
    QVERIFY(view.hasFocus());

    // F2 on the current message opens it too; Tab closes it, back to the conversation.
    view.setCurrentIndex(m->index(0));
    QTest::keyClick(&view, Qt::Key_F2);
    QTRY_VERIFY(messageEditor(view));
    QCOMPARE(messageEditor(view)->toPlainText(), QStringLiteral("Two lines, please"));
    QTest::keyClick(messageEditor(view), Qt::Key_Tab);
    QTRY_VERIFY(!messageEditor(view));
    QCOMPARE(view.currentIndex().row(), 0);
    // A double-click on the Copy button opens nothing (its first click copied the code).
    m->appendMessage(QStringLiteral("assistant"), kCppAnswer);
    const QRect button = view.codeCopyButtonRect(2, 0);
    QVERIFY(!button.isEmpty());
    QTest::mouseClick(view.viewport(), Qt::LeftButton, {}, button.center());
    QTest::mouseDClick(view.viewport(), Qt::LeftButton, {}, button.center());
    QVERIFY(!messageEditor(view));
    QCOMPARE(QGuiApplication::clipboard()->text(), kCppCode);
}

// The context menu's Select text opens the same editor (the old dialog is gone); an
// answer still streaming in grows under it and the selection stays.
void TestConversationView::contextMenuSelectTextOpensTheEditor() {
    ConversationView view;
    view.resize(640, 480);
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    view.conversation()->appendMessage(QStringLiteral("assistant"), QStringLiteral("Hello there"));
    view.selectMessageText(0);
    QTextEdit* editor = messageEditor(view);
    QVERIFY(editor);
    QCOMPARE(editor->toPlainText(), QStringLiteral("Hello there"));
    QVERIFY(!view.findChild<QDialog*>());
    view.conversation()->beginAssistantMessage();
    view.selectMessageText(1); // no text yet: nothing to select, the open editor stays
    QVERIFY(messageEditor(view));
    QCOMPARE(messageEditor(view)->toPlainText(), QStringLiteral("Hello there"));
    view.conversation()->appendToLast({}, QStringLiteral("More"));
    view.selectMessageText(1);
    editor = messageEditor(view);
    QVERIFY(editor);
    QCOMPARE(editor->toPlainText(), QStringLiteral("More"));
    QTextCursor part = editor->textCursor();
    part.setPosition(1);
    part.setPosition(3, QTextCursor::KeepAnchor);
    editor->setTextCursor(part);
    view.conversation()->appendToLast({}, QStringLiteral(" text"));
    QCOMPARE(editor->toPlainText(), QStringLiteral("More text"));
    QCOMPARE(editor->textCursor().selectedText(), QStringLiteral("or"));
}

QTEST_MAIN(TestConversationView)
#include "tst_conversationview.moc"
