#pragma once

#include <QAbstractTextDocumentLayout>
#include <QHash>
#include <QStyledItemDelegate>

#include <algorithm>

class QTextDocument;
class ThumbnailCache;

// Draws one chat message: who spoke, the collapsible thinking line, the answer as
// Markdown (raw HTML off: model output is text, never markup) with highlighted code
// blocks and a Copy button on each, find-in-conversation matches, and the timing line.
// Code lines never wrap: a block wider than the message scrolls sideways on its own
// (a thin indicator under it), its Copy button pinned at its top right. The view opens a
// message in a read-only editor over its text (double-click, F2) to select part of it.
class MessageDelegate : public QStyledItemDelegate {
    Q_OBJECT
public:
    explicit MessageDelegate(QObject* parent = nullptr);

    // A user message's images, drawn as thumbnails above its text (read off the GUI thread).
    ThumbnailCache* thumbnails() const { return m_thumbnails; }
    static constexpr int kThumbnailSide = 96;

    void paint(QPainter* painter, const QStyleOptionViewItem& option,
               const QModelIndex& index) const override;
    QSize sizeHint(const QStyleOptionViewItem& option, const QModelIndex& index) const override;
    bool editorEvent(QEvent* event, QAbstractItemModel* model, const QStyleOptionViewItem& option,
                     const QModelIndex& index) override;

    // The inline editor: a read-only QTextEdit ("messageTextEditor") over the message's
    // text, holding the same document the view draws; it never changes the model.
    QWidget* createEditor(QWidget* parent, const QStyleOptionViewItem& option,
                          const QModelIndex& index) const override;
    void setEditorData(QWidget* editor, const QModelIndex& index) const override;
    void setModelData(QWidget* editor, QAbstractItemModel* model,
                      const QModelIndex& index) const override;
    void updateEditorGeometry(QWidget* editor, const QStyleOptionViewItem& option,
                              const QModelIndex& index) const override;

protected:
    bool eventFilter(QObject* object, QEvent* event) override;

public:
    // The answer as the view lays it out (tests read it back). The palette picks the
    // light or dark code theme.
    static void buildBody(QTextDocument& doc, const QString& markdown, const QFont& font,
                          const QPalette& palette = QPalette());
    // buildBody() laid out at `width`, with room for the scroll indicator under each code
    // block wider than that: what sizeHint measures and paint draws.
    static void layoutBody(QTextDocument& doc, const QString& markdown, const QFont& font,
                           const QPalette& palette, int width);
    // The bar drawn at a block quote's left: its width and colour.
    static constexpr int kQuoteBarWidth = 3;
    static QColor quoteBarColour(const QPalette& palette);
    // The timing line under an answer: its font, and its height at `width` (it wraps).
    static QFont statsFont(const QFont& font);
    static int statsHeight(const QString& stats, const QFont& font, int width);
    // The space a wide code block leaves under itself for its scroll indicator.
    static constexpr int kScrollIndicatorSpace = 6;
    // Pixels one wheel notch (or one Shift+Left/Right) scrolls a code block sideways:
    // 20 per QApplication::wheelScrollLines() (3 by default: 60).
    static int codeScrollStep();
    static QString thinkingLabel(const QModelIndex& index);
    // The Copy button of a code block; its first line leaves room for it.
    static QSize copyButtonSize(const QFont& font);
    // The Markdown buildBody renders: single newlines outside fenced code made hard breaks.
    static QString hardLineBreaks(const QString& markdown);
    // "Reading your message: 12 of 40 tokens · about 30 s left" while the prompt is read;
    // empty otherwise.
    static QString readingLabel(const QModelIndex& index);
    // "2/3" beside a message with versions (regenerated, edited); empty with only one.
    static QString versionText(const QModelIndex& index);
    // The switcher's "<" and ">" in view coordinates; null rects without versions.
    QPair<QRect, QRect> versionButtonRects(const QStyleOptionViewItem& option,
                                           const QModelIndex& index) const;

    // The Copy buttons of the message's code blocks, in view coordinates, in block order.
    QVector<QRect> copyButtonRects(const QStyleOptionViewItem& option,
                                   const QModelIndex& index) const;
    // Where the body text [position, position + length) is drawn, in view coordinates.
    QRect bodyTextRect(const QStyleOptionViewItem& option, const QModelIndex& index, int position,
                       int length) const;

    // A fenced code block as drawn, in view coordinates: its lines across the message's
    // width, its Copy button (never scrolled) and the width of its widest line.
    struct CodeArea {
        QRect rect;
        QRect button;
        int contentWidth = 0;
        int maxOffset() const { return std::max(0, contentWidth - rect.width()); }
    };
    QVector<CodeArea> codeAreas(const QStyleOptionViewItem& option, const QModelIndex& index) const;
    // The code block under `pos` (view coordinates); -1 when none.
    int codeBlockAt(const QStyleOptionViewItem& option, const QModelIndex& index,
                    const QPoint& pos) const;
    // The first code block wider than the message; -1 when none.
    int firstWideCodeBlock(const QStyleOptionViewItem& option, const QModelIndex& index) const;
    // How far code block `block` of message `row` is scrolled sideways, in pixels.
    int codeOffset(int row, int block) const { return m_codeOffsets.value({row, block}); }
    // Scrolls it by `dx` pixels, kept within its width; true when it moved.
    bool scrollCode(const QStyleOptionViewItem& option, const QModelIndex& index, int block,
                    int dx);
    // Forgets the offsets of rows `fromRow` and later (the model reset or lost rows).
    void clearCodeOffsets(int fromRow = 0);

    // Find in conversation: every match of `query` is tinted; the current one
    // (row, document position) is drawn as a selection.
    void setFindQuery(const QString& query) { m_findQuery = query; }
    void setCurrentMatch(int row, int position) {
        m_matchRow = row;
        m_matchPosition = position;
    }

signals:
    void thinkingToggled(int row);
    void copyCodeRequested(int row, int block);
    // The switcher's "<" or ">": show version `version` (from 0) of message `row`.
    void versionRequested(int row, int version);

private:
    struct Layout {
        QRect role, previousVersion, version, nextVersion, thinking, reasoning, reading, readingBar,
            images, body, stats;
    };
    Layout layout(const QStyleOptionViewItem& option, const QModelIndex& index) const;
    static QVector<CodeArea> codeAreasIn(const QTextDocument& doc, const QString& markdown,
                                         const QRect& body, const QFont& font);
    void paintHeader(QPainter* painter, const QStyleOptionViewItem& option,
                     const QModelIndex& index, const Layout& l) const;
    void paintThinkingAndReading(QPainter* painter, const QStyleOptionViewItem& option,
                                 const QModelIndex& index, const Layout& l) const;
    void paintBody(QPainter* painter, const QStyleOptionViewItem& option, const QModelIndex& index,
                   const QRect& body) const;
    void paintImages(QPainter* painter, const QStyleOptionViewItem& option,
                     const QModelIndex& index, const QRect& images) const;
    void paintCodeArea(QPainter* painter, const QTextDocument& doc,
                       const QAbstractTextDocumentLayout::PaintContext& ctx, const QRect& body,
                       const CodeArea& area, int offset, const QBrush& background) const;
    void paintCopyButton(QPainter* painter, const QStyleOptionViewItem& option,
                         const QRect& rect) const;
    QAbstractTextDocumentLayout::PaintContext bodyContext(const QTextDocument& doc,
                                                          const QPalette& palette, int row) const;

    QHash<QPair<int, int>, int> m_codeOffsets; // (row, code block) -> pixels scrolled
    ThumbnailCache* m_thumbnails;

    QString m_findQuery;
    int m_matchRow = -1;
    int m_matchPosition = -1;
};
