#include <QApplication>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QTest>
#include <QVBoxLayout>

#include "chat/MessageComposer.h"

class TestMessageComposer : public QObject {
    Q_OBJECT
private slots:
    void thinkingCostIsSaidBesideTheSwitch();
    void enterSendsWhenReady();
    void shiftEnterAddsNewLine();
    void notReadyKeepsText();
    void blankMessageIsNotSent();
    void focusOnTheComposerTypesIntoTheBox();
};

static QPlainTextEdit* editorOf(MessageComposer& c) {
    return c.findChild<QPlainTextEdit*>(QStringLiteral("composerEditor"));
}

// Issue 37 point 1: what Think adds to a new conversation's prompt, beside the switch.
void TestMessageComposer::thinkingCostIsSaidBesideTheSwitch() {
    MessageComposer composer;
    QCOMPARE(composer.thinkingCostText(), QString()); // nothing known yet
    composer.setThinkingCost(166, -1);                // no message read yet: no rate
    QCOMPARE(composer.thinkingCostText(), QStringLiteral("+166 prompt positions"));
    composer.setThinkingCost(166, 1.0); // 166 s at the last message's rate
    QCOMPARE(composer.thinkingCostText(), QStringLiteral("+166 prompt positions · about 3 min"));
    composer.setThinkingCost(166, 0.25); // 41.5 s
    QCOMPARE(composer.thinkingCostText(), QStringLiteral("+166 prompt positions · about 42 s"));
    composer.setThinkingCost(166, 0.001); // under a second: no time said
    QCOMPARE(composer.thinkingCostText(), QStringLiteral("+166 prompt positions"));
    composer.setThinkingCost(-1, -1); // a server: nothing
    QCOMPARE(composer.thinkingCostText(), QString());
}

void TestMessageComposer::enterSendsWhenReady() {
    MessageComposer composer;
    composer.setReady(true);
    QSignalSpy sent(&composer, &MessageComposer::sendRequested);
    QTest::keyClicks(editorOf(composer), QStringLiteral("  hello K3 "));
    QVERIFY(composer.findChild<QPushButton*>(QStringLiteral("sendButton"))->isEnabled());
    QTest::keyClick(editorOf(composer), Qt::Key_Return);
    QCOMPARE(sent.count(), 1);
    QCOMPARE(sent.at(0).at(0).toString(), QStringLiteral("hello K3"));
    QCOMPARE(composer.text(), QString());
}

void TestMessageComposer::shiftEnterAddsNewLine() {
    MessageComposer composer;
    composer.setReady(true);
    QSignalSpy sent(&composer, &MessageComposer::sendRequested);
    QTest::keyClicks(editorOf(composer), QStringLiteral("a"));
    QTest::keyClick(editorOf(composer), Qt::Key_Return, Qt::ShiftModifier);
    QTest::keyClicks(editorOf(composer), QStringLiteral("b"));
    QCOMPARE(sent.count(), 0);
    QCOMPARE(composer.text(), QStringLiteral("a\nb"));
}

void TestMessageComposer::notReadyKeepsText() {
    MessageComposer composer;
    QSignalSpy sent(&composer, &MessageComposer::sendRequested);
    QTest::keyClicks(editorOf(composer), QStringLiteral("keep me"));
    QVERIFY(!composer.findChild<QPushButton*>(QStringLiteral("sendButton"))->isEnabled());
    QTest::keyClick(editorOf(composer), Qt::Key_Return);
    QCOMPARE(sent.count(), 0);
    QCOMPARE(composer.text(), QStringLiteral("keep me"));
}

void TestMessageComposer::blankMessageIsNotSent() {
    MessageComposer composer;
    composer.setReady(true);
    QSignalSpy sent(&composer, &MessageComposer::sendRequested);
    QTest::keyClicks(editorOf(composer), QStringLiteral("   "));
    QTest::keyClick(editorOf(composer), Qt::Key_Return);
    QCOMPARE(sent.count(), 0);
}

// Issue 21: after Up (edit the last message) the window focused the composer widget
// itself, which ignores keys: typing went nowhere until the box was clicked.
void TestMessageComposer::focusOnTheComposerTypesIntoTheBox() {
    QWidget window;
    auto* composer = new MessageComposer(&window);
    auto* other = new QPlainTextEdit(&window); // where the focus was before
    auto* layout = new QVBoxLayout(&window);
    layout->addWidget(other);
    layout->addWidget(composer);
    window.show();
    QVERIFY(QTest::qWaitForWindowActive(&window));
    other->setFocus();
    composer->setText(QStringLiteral("edit me"));
    composer->setEditing(true);
    composer->setFocus();
    QTRY_COMPARE(QApplication::focusWidget(), editorOf(*composer));
    QTest::keyClicks(QApplication::focusWidget(), QStringLiteral(" again"));
    QCOMPARE(composer->text(), QStringLiteral("edit me again"));
    QCOMPARE(other->toPlainText(), QString());
}

QTEST_MAIN(TestMessageComposer)
#include "tst_messagecomposer.moc"
