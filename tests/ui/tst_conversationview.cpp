#include <QTest>
#include <QTextCursor>
#include <QTextDocument>

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
};

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

QTEST_MAIN(TestConversationView)
#include "tst_conversationview.moc"
