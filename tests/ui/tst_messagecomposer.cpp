#include <QApplication>
#include <QPlainTextEdit>
#include <QPushButton>
#include <QSignalSpy>
#include <QTest>
#include <QVBoxLayout>

#include "chat/MessageComposer.h"

#include <k3/vision.hpp>

class TestMessageComposer : public QObject {
    Q_OBJECT
private slots:
    void thinkingCostIsSaidBesideTheSwitch();
    void enterSendsWhenReady();
    void shiftEnterAddsNewLine();
    void notReadyKeepsText();
    void blankMessageIsNotSent();
    void focusOnTheComposerTypesIntoTheBox();
    void imageCostIsStated();
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

// Issue 33: an attached image's prompt positions (and their time at the last message's
// rate) are said before Send.
void TestMessageComposer::imageCostIsStated() {
    // 640x480 is under both caps: padded to 644x504, 46x36 = 1,656 patches, 414 positions.
    QCOMPARE(k3::planImage(640, 480, 4096).tokens(), 414);
    // 1920x1080 at the laptop cap: scaled to 1194x671, padded to 1204x672: 86x48 = 4,128
    // patches (the padding may pass the cap), 1,032 positions; 2,691 at the release's.
    QCOMPARE(k3::planImage(1920, 1080, 4096).tokens(), 1032);
    QCOMPARE(k3::planImage(1920, 1080, 65536).tokens(), 2691);
    QCOMPARE(MessageComposer::imageCostText(1, 414, -1),
             QStringLiteral("this image will cost 414 prompt positions"));
    QCOMPARE(
        MessageComposer::imageCostText(1, 414, 0.05), // 20.7 s
        QStringLiteral("this image will cost 414 prompt positions, about 21 s at your budget"));
    QCOMPARE(MessageComposer::imageCostText(2, 1446, 0.5), // 723 s
             QStringLiteral("these 2 images will cost 1446 prompt positions, about 12 min at "
                            "your budget"));
    QCOMPARE(MessageComposer::imageCostText(1, 1, -1),
             QStringLiteral("this image will cost 1 prompt position"));
    QCOMPARE(MessageComposer::imageCostText(0, 0, 1.0), QString());

    MessageComposer composer;
    QCOMPARE(composer.imageCostShown(), QString());
    ImageAttachment a;
    a.name = QStringLiteral("photo.png");
    a.size = QSize(640, 480);
    a.positions = 414;
    composer.addAttachment(a);
    QCOMPARE(composer.imageCostShown(),
             QStringLiteral("this image will cost 414 prompt positions"));
    composer.setThinkingCost(166, 0.05); // a message was read: its rate is known
    QCOMPARE(
        composer.imageCostShown(),
        QStringLiteral("this image will cost 414 prompt positions, about 21 s at your budget"));
    composer.removeAttachment(0);
    QCOMPARE(composer.imageCostShown(), QString());

    // The cap set (Settings): attachments are counted again at it from their sizes, those
    // there before and those added after.
    ImageAttachment hd;
    hd.name = QStringLiteral("hd.png");
    hd.size = QSize(1920, 1080);
    hd.positions = 2691; // as counted at the release's cap
    composer.addAttachment(hd);
    QCOMPARE(composer.attachments()[0].positions, 2691);
    composer.setImagePatchLimit(4096);
    QCOMPARE(composer.imagePatchLimit(), 4096);
    QCOMPARE(composer.attachments()[0].positions, 1032);
    QCOMPARE( // 51.6 s
        composer.imageCostShown(),
        QStringLiteral("this image will cost 1032 prompt positions, about 52 s at your budget"));
    composer.addAttachment(a); // 640x480: 414 at either cap
    QCOMPARE(composer.attachments()[1].positions, 414);
    QCOMPARE(composer.imageCostShown(), // 72.3 s
             QStringLiteral("these 2 images will cost 1446 prompt positions, about 73 s at your "
                            "budget"));
    composer.setImagePatchLimit(65536);
    QCOMPARE(composer.attachments()[0].positions, 2691);
    QCOMPARE(composer.imageCostShown(), // 155.25 s
             QStringLiteral("these 2 images will cost 3105 prompt positions, about 3 min at your "
                            "budget"));
    composer.setImageCostKnown(false); // a server: its own cap
    QCOMPARE(composer.imageCostShown(), QString());
    composer.setImageCostKnown(true);
    QVERIFY(!composer.imageCostShown().isEmpty());
}

QTEST_MAIN(TestMessageComposer)
#include "tst_messagecomposer.moc"
