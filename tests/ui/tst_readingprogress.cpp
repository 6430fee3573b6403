// While the prompt is read (chunked prefill), the answer bubble says how far it is and
// how long is left, with a progress bar; the first token replaces it.
#include <QApplication>
#include <QPixmap>
#include <QTest>

#include "chat/ConversationModel.h"
#include "chat/ConversationView.h"
#include "chat/MessageComposer.h"
#include "chat/MessageDelegate.h"
#include "worker/EngineWorker.h"

class TestReadingProgress : public QObject {
    Q_OBJECT
private slots:
    void labelCountsTokensAndEstimatesTheRest();
    void firstTokenEndsTheReading();
    void restoredPositionsAreSaid();
    void rereadingAConversationIsSaid();
    void bubbleGrowsForTheBarAndPaints();
    void estimateFromTheFirstSecond();
    void costSaidBeforeSending();
};

void TestReadingProgress::labelCountsTokensAndEstimatesTheRest() {
    ConversationModel model;
    model.appendMessage(QStringLiteral("user"), QStringLiteral("Hi"));
    const int row = model.beginAssistantMessage();
    const QModelIndex index = model.index(row);
    QCOMPARE(MessageDelegate::readingLabel(index), QString()); // nothing read yet, nothing said
    model.setReading(0, 40, 0.0);
    QCOMPARE(MessageDelegate::readingLabel(index),
             QStringLiteral("Reading your message: 0 of 40 tokens"));
    model.setReading(16, 40, 8.0); // 2 positions/s: 24 left take 12 s
    QCOMPARE(MessageDelegate::readingLabel(index),
             QStringLiteral("Reading your message: 16 of 40 tokens · about 12 s left"));
    model.setReading(8, 400, 60.0); // 392 left at 7.5 s each
    QCOMPARE(MessageDelegate::readingLabel(index),
             QStringLiteral("Reading your message: 8 of 400 tokens · about 49 min left"));
    model.setReading(40, 40, 20.0);
    QCOMPARE(MessageDelegate::readingLabel(index),
             QStringLiteral("Reading your message: 40 of 40 tokens"));
}

// Issue 28: positions that came back from the state saved on disk are said first; only
// the rest is being read.
void TestReadingProgress::restoredPositionsAreSaid() {
    ConversationModel model;
    const int row = model.beginAssistantMessage();
    const QModelIndex index = model.index(row);
    model.setReading(0, 27, 0.0, 70);
    QCOMPARE(
        MessageDelegate::readingLabel(index),
        QStringLiteral("Restored 70 positions from disk · reading your message: 0 of 27 tokens"));
    // The whole prompt restored: nothing left to read.
    model.setReading(0, 0, 0.0, 97);
    QCOMPARE(index.data(ConversationModel::ReadingRole).toPointF(), QPointF(0, 0));
    QCOMPARE(MessageDelegate::readingLabel(index),
             QStringLiteral("Restored 97 positions from disk"));
    model.appendToLast({}, QStringLiteral("Hi"));
    QCOMPARE(MessageDelegate::readingLabel(index), QString());
}

// Issue 37 item 1: a follow-up whose conversation the engine no longer holds (a restart
// without a saved state) reads the whole conversation: the bubble says so. A first
// message, or one after held positions, is "your message".
void TestReadingProgress::rereadingAConversationIsSaid() {
    ConversationModel model;
    model.appendMessage(QStringLiteral("user"), QStringLiteral("Hi"));
    const int first = model.beginAssistantMessage();
    model.setReading(0, 12, 0.0, 0, 0);
    QCOMPARE(MessageDelegate::readingLabel(model.index(first)),
             QStringLiteral("Reading your message: 0 of 12 tokens"));
    model.finishLast(QStringLiteral("1 token"));
    model.appendMessage(QStringLiteral("user"), QStringLiteral("And then?"));
    const int second = model.beginAssistantMessage();
    model.setReading(40, 260, 20.0, 0, 0);
    QCOMPARE(
        MessageDelegate::readingLabel(model.index(second)),
        QStringLiteral("Reading this conversation again: 40 of 260 positions · about 110 s left"));
    model.setReading(0, 9, 0.0, 0, 251); // the engine held the rest
    QCOMPARE(MessageDelegate::readingLabel(model.index(second)),
             QStringLiteral("Reading your message: 0 of 9 tokens"));
}

void TestReadingProgress::firstTokenEndsTheReading() {
    ConversationModel model;
    const int row = model.beginAssistantMessage();
    model.setReading(5, 10, 1.0);
    QCOMPARE(model.index(row).data(ConversationModel::ReadingRole).toPointF(), QPointF(5, 10));
    model.appendToLast({}, QStringLiteral("Hello"));
    QVERIFY(!model.index(row).data(ConversationModel::ReadingRole).isValid());
    QCOMPARE(MessageDelegate::readingLabel(model.index(row)), QString());
    // A reading reported after the message finished changes nothing.
    model.finishLast(QStringLiteral("1 token"));
    model.setReading(1, 2, 1.0);
    QVERIFY(!model.index(row).data(ConversationModel::ReadingRole).isValid());
}

void TestReadingProgress::bubbleGrowsForTheBarAndPaints() {
    ConversationView view;
    view.resize(600, 400);
    ConversationModel* model = view.conversation();
    const int row = model->beginAssistantMessage();
    MessageDelegate delegate;
    QStyleOptionViewItem option;
    option.initFrom(&view);
    option.rect = QRect(0, 0, 560, 100);
    const int before = delegate.sizeHint(option, model->index(row)).height();
    model->setReading(3, 9, 3.0);
    const int reading = delegate.sizeHint(option, model->index(row)).height();
    QVERIFY2(reading > before + QFontMetrics(option.font).height(),
             qPrintable(QStringLiteral("%1 -> %2").arg(before).arg(reading)));
    view.show();
    QVERIFY(QTest::qWaitForWindowExposed(&view));
    const QImage shot = view.grab().toImage();
    QVERIFY(!shot.isNull());
    model->appendToLast({}, QStringLiteral("ok"));
    QVERIFY(delegate.sizeHint(option, model->index(row)).height() < reading);
}

// Issue 37 item 1: during the first chunk (10-25 s on a streamed trunk) the window said
// "0 of 87 · 0.0 MB read" with no estimate, and the share of the first (pinned, cheap)
// layers gave a far too short one. Until a chunk is done the estimate is the last
// message's rate at this budget, else the plan's streamed bytes per chunk at the disk
// rate this session measured; then the rate measured in this prompt.
void TestReadingProgress::estimateFromTheFirstSecond() {
    k3::MemoryReport report;
    report.trunkStreamed = true;
    report.plan.totalLayers = 93;
    report.plan.pinnedLayers = 3;
    report.plan.ringSlotBytes = 2'340'000'000ull;
    report.plan.chunkPositions = 260;
    report.trunk.bytesRead = 10'000'000'000ull; // 2.5 GB/s measured
    report.trunk.ioSeconds = 4;
    // 90 streamed layers of 2.34 GB at 2.5 GB/s.
    QCOMPARE(EngineWorker::planChunkSeconds(report), 84.24);
    report.trunk.ioSeconds = 0; // nothing read yet: no rate to go by
    QCOMPARE(EngineWorker::planChunkSeconds(report), -1.0);

    k3::SessionProgress p;
    p.total = 260;
    p.seconds = 1.0;
    // Said at the start of the prompt, before any layer: the plan's figure.
    QCOMPARE(EngineWorker::readingSecondsLeft(p, -1, 84.24, 260), 83.24);
    // Two pinned layers of 93 done in the first second: the share alone says 45 s.
    p.chunkPositions = 260;
    p.layers = 93;
    p.chunkLayersDone = 2;
    QCOMPARE(EngineWorker::readingSecondsLeft(p, -1, -1, 260), 1.0 * (1 - 2 / 93.0) / (2 / 93.0));
    QCOMPARE(EngineWorker::readingSecondsLeft(p, -1, 84.24, 260), 83.24);
    // The last message's rate at this budget (0.5 s a position) comes first.
    QCOMPARE(EngineWorker::readingSecondsLeft(p, 0.5, 84.24, 260), 260 * (1 - 2 / 93.0) * 0.5);
    // Two chunks of a 520-position prompt: both counted.
    p.total = 520;
    QCOMPARE(EngineWorker::readingSecondsLeft(p, -1, 84.24, 260), 2 * 84.24 - 1.0);
    // A chunk done: the rate of this prompt (260 of 520 in 80 s: 80 s more).
    p.done = 260;
    p.chunks = 1;
    p.chunkLayersDone = 0;
    p.seconds = 80;
    QCOMPARE(EngineWorker::readingSecondsLeft(p, 0.5, 84.24, 260), 80.0);

    // Both places that show it say the same.
    ConversationModel model;
    model.appendMessage(QStringLiteral("user"), QStringLiteral("Tell me about disks."));
    const int row = model.beginAssistantMessage();
    model.setReading(0, 87, 1.0, 0, 0, 0.0, 83.24);
    QCOMPARE(MessageDelegate::readingLabel(model.index(row)),
             QStringLiteral("Reading your message: 0 of 87 tokens · about 84 s left"));
    MemoryFigures f;
    f.prefillTotal = 87;
    f.prefillSeconds = 1.0;
    f.prefillFraction = 0;
    f.prefillSecondsLeft = 83.24;
    QCOMPARE(f.prefillText(), QStringLiteral("reading the prompt 0 of 87 · 0.0 MB read · about 84 "
                                             "s left"));
}

// Issue 37 item 1: the cost of a prompt was hidden until paid. Before Send, the composer
// says what one pass over the streamed layers costs at this budget (the worker's
// readingCost: the last message's seconds per chunk, else planChunkSeconds), when it is
// more than a few seconds.
void TestReadingProgress::costSaidBeforeSending() {
    MessageComposer composer;
    composer.show();
    composer.setReadingCost(84.24);
    QCOMPARE(composer.readingCostText(),
             QStringLiteral("a message: about 85 s before its answer starts"));
    composer.setReadingCost(300);
    QCOMPARE(composer.readingCostText(),
             QStringLiteral("a message: about 5 min before its answer starts"));
    composer.setReadingCost(3.0); // the demo, a resident trunk: nothing worth a word
    QCOMPARE(composer.readingCostText(), QString());
    composer.setReadingCost(-1);
    QCOMPARE(composer.readingCostText(), QString());
}

QTEST_MAIN(TestReadingProgress)
#include "tst_readingprogress.moc"
