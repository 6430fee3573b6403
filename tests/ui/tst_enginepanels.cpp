#include <QImage>
#include <QLabel>
#include <QLocale>
#include <QTest>

#include "panels/DiskIoPanel.h"
#include "panels/ExpertCachePanel.h"
#include "panels/MemoryPlanPanel.h"

class TestEnginePanels : public QObject {
    Q_OBJECT
private slots:
    void planListsEveryComponent();
    void planTotalIsThePlansTotal();
    void cacheShowsBothHitRates();
    void cacheLeadsWithServedFromMemoryAndDiskReads();
    void prefillProgressLeadsThePanels();
    void remoteModeSaysThereAreNoLocalFigures();
    void diskShowsBytesRateAndShare();
    void readRateIsOverTheTimeReadsWereInProgress();
};

static MemoryFigures sample() {
    MemoryFigures f;
    f.plan = {{QStringLiteral("trunk pinned"), 3'000'000'000ull},
              {QStringLiteral("trunk ring"), 2'340'000'000ull},
              {QStringLiteral("expert cache"), 1'000'000'000ull}};
    f.availableBytes = 15'800'000'000ull;
    f.pinnedLayers = 3;
    f.totalLayers = 93;
    f.trunkStreamed = true;
    f.expertsCached = true;
    f.cacheRequests = 1000;
    f.cacheResidentHits = 120;
    f.cachePrefetchHits = 260;
    f.cacheDiskReads = 880;
    f.cacheHitRate = 0.38;
    f.cacheResidentHitRate = 0.12;
    f.cacheEvictions = 1204;
    f.cacheSlots = 57;
    f.cacheSlotBytes = 17'547'264; // one K3 expert
    f.trunkBytesRead = 100'000'000'000ull;
    f.expertBytesRead = 34'000'000'000ull;
    f.readBusySeconds = 50;
    f.ioShare = 0.71;
    return f;
}

void TestEnginePanels::planListsEveryComponent() {
    MemoryPlanPanel panel;
    panel.setFigures(sample());
    QCOMPARE(panel.figures().plannedBytes(), 6'340'000'000ull);
    const QString text = panel.detailsText();
    QVERIFY(text.contains(QStringLiteral("trunk pinned  3.00 GB")));
    QVERIFY(text.contains(QStringLiteral("trunk ring  2.34 GB")));
    QVERIFY(text.contains(QStringLiteral("planned 6.34 GB of 15.80 GB available")));
    QVERIFY(text.contains(QStringLiteral("3 of 93 layers pinned, the rest streamed")));

    // The bar is 300 px wide (6 px margins) and scaled to the 15.8 GB available: the
    // segments take 300 * 3 / 15.8 = 57.0, 300 * 2.34 / 15.8 = 44.4 and 300 * 1 / 15.8 =
    // 19.0 px from the left in the plan's order, the rest stays empty, and the red line
    // stands at 95% of the available memory (x = 6 + 285 = 291).
    panel.resize(312, 200);
    QImage image(panel.size(), QImage::Format_ARGB32);
    image.fill(Qt::white);
    panel.render(&image);
    const int y = 6 + 22 / 2; // the bar's middle row
    const QRgb segment[] = {qRgb(0x1d, 0x35, 0x57), qRgb(0x45, 0x7b, 0x9d), qRgb(0x2a, 0x9d, 0x8f)};
    const double wantWidth[] = {300 * 3.0 / 15.8, 300 * 2.34 / 15.8, 300 * 1.0 / 15.8};
    int firstX[3] = {-1, -1, -1}, width[3] = {};
    QList<int> red;
    for (int x = 0; x < image.width(); ++x) {
        const QRgb px = image.pixel(x, y) | 0xff000000u;
        for (int i = 0; i < 3; ++i)
            if (px == segment[i]) {
                if (firstX[i] < 0) firstX[i] = x;
                ++width[i];
            }
        if (px == qRgb(255, 0, 0)) red << x;
    }
    QCOMPARE(firstX[0], 6);
    for (int i = 0; i < 3; ++i) {
        QVERIFY2(qAbs(width[i] - wantWidth[i]) <= 1.0,
                 qPrintable(QStringLiteral("segment %1: %2 px").arg(i).arg(width[i])));
        if (i > 0) QCOMPARE(firstX[i], firstX[i - 1] + width[i - 1]); // no gap, no overlap
    }
    QVERIFY2(
        !red.isEmpty() && red.first() >= 290 && red.last() <= 292,
        qPrintable(
            QStringLiteral("red line at %1-%2").arg(red.value(0)).arg(red.value(red.size() - 1))));
}

void TestEnginePanels::cacheShowsBothHitRates() {
    ExpertCachePanel panel;
    panel.setFigures(sample());
    // Counts follow the user's locale ("1,204" in English). The engine's 38% "hit rate"
    // counts the 260 prefetched experts, which came from disk: it is not shown as a hit.
    QCOMPARE(panel.text(), QStringLiteral("served from memory 12.0% (120 of %1 requests)\n"
                                          "read from disk 34.0 GB (880 experts)\n"
                                          "prefetched 260 · evictions %2\n"
                                          "capacity 57 experts (1000.2 MB)")
                               .arg(QLocale().toString(1000), QLocale().toString(1204)));
    QVERIFY(!panel.text().contains(QStringLiteral("hit")));
    MemoryFigures resident = sample();
    resident.expertsCached = false;
    panel.setFigures(resident);
    QCOMPARE(panel.text(), QStringLiteral("Every routed expert is resident: no cache in use."));
}

// Issue 21's run: 8,400 requests, 84 of them in memory, 8,316 read (147 GB), every
// one of those an eviction. The engine called it "hit 100.0%" (all prefetched).
void TestEnginePanels::cacheLeadsWithServedFromMemoryAndDiskReads() {
    MemoryFigures f = sample();
    f.cacheRequests = 8400;
    f.cacheResidentHits = 84;
    f.cachePrefetchHits = 8316;
    f.cacheDiskReads = 8316;
    f.cacheEvictions = 8316;
    f.cacheHitRate = 1.0;
    f.cacheResidentHitRate = 0.01;
    f.expertBytesRead = 147'000'000'000ull;
    ExpertCachePanel panel;
    panel.setFigures(f);
    const QLocale locale;
    const QStringList lines = panel.text().split(QLatin1Char('\n'));
    QCOMPARE(
        lines.value(0),
        QStringLiteral("served from memory 1.0% (84 of %1 requests)").arg(locale.toString(8400)));
    QCOMPARE(lines.value(1),
             QStringLiteral("read from disk 147.0 GB (%1 experts)").arg(locale.toString(8316)));
    QCOMPARE(lines.value(2),
             QStringLiteral("prefetched %1 · evictions %1").arg(locale.toString(8316)));
    // Each term says what it counts.
    const auto tip = [&](const char* name) {
        auto* label = panel.findChild<QLabel*>(QLatin1String(name));
        return label ? label->toolTip() : QString();
    };
    QVERIFY(tip("servedFromMemory").contains(QStringLiteral("without any disk read")));
    QVERIFY(tip("readFromDisk")
                .contains(QStringLiteral("read from disk because they were not in memory")));
    QVERIFY(tip("cacheDetail").contains(QStringLiteral("not served from memory")));
    QVERIFY(tip("cacheCapacity").contains(QStringLiteral("How many experts")));
}

// While a prompt is read, the Disk I/O panel leads with how far it is, what it read and
// the time left at the rate so far; the line is said there only (issue 37 point 1: the
// same line stood in three docks).
void TestEnginePanels::prefillProgressLeadsThePanels() {
    MemoryFigures f = sample();
    f.prefillDone = 16;
    f.prefillTotal = 40;
    f.prefillSeconds = 8; // 2 positions/s: 24 left take 12 s
    f.prefillBytesRead = 1'234'000'000ull;
    const QString reading =
        QStringLiteral("reading the prompt 16 of 40 · 1.23 GB read · about 12 s left");
    QCOMPARE(f.prefillText(), reading);
    ExpertCachePanel cache;
    cache.setFigures(f);
    QVERIFY2(cache.text().startsWith(QStringLiteral("served from memory")),
             qPrintable(cache.text()));
    DiskIoPanel disk;
    disk.setFigures(f);
    QCOMPARE(disk.text().section(QLatin1Char('\n'), 0, 0), reading);
    MemoryPlanPanel plan;
    plan.setFigures(f);
    QVERIFY2(!plan.detailsText().contains(QStringLiteral("reading the prompt")),
             qPrintable(plan.detailsText()));
    // Inside a one-chunk prompt (issue 37 point 1): no position is done yet, but a quarter
    // of the chunk's layers are, 10 s in: a share and an estimate from the layers.
    f.prefillDone = 0;
    f.prefillFraction = 0.25;
    f.prefillSeconds = 10;
    QCOMPARE(f.prefillText(),
             QStringLiteral("reading the prompt 0 of 40 (25%) · 1.23 GB read · about 30 s left"));
    f.prefillFraction = -1; // unknown: by positions, and nothing to go by yet
    QCOMPARE(f.prefillText(), QStringLiteral("reading the prompt 0 of 40 · 1.23 GB read"));
    f.prefillDone = 40; // done: no estimate
    QCOMPARE(f.prefillText(), QStringLiteral("reading the prompt 40 of 40 · 1.23 GB read"));
    f.prefillTotal = 0; // a token's figures: no reading line
    cache.setFigures(f);
    QVERIFY(cache.text().startsWith(QStringLiteral("served from memory")));
}

// Issue 37 point 3: the wizard said "planned 2.45 GB" in the panel and "Total 2.52 GB"
// under it; the panel missed the trunk's decode buffers. Every part the plan counts is
// a part of the panel, so the two totals are one.
void TestEnginePanels::planTotalIsThePlansTotal() {
    k3::MemoryPlan p;
    p.pinnedBytes = 1'000;
    p.pinDecodeSlotBytes = 20;
    p.ringSlots = 2;
    p.ringSlotBytes = 300;
    p.trunkDecodeBytes = 4;
    p.modelBytes = 50'000;
    p.residentExpertBytes = 600'000;
    p.cacheSlots = 3;
    p.expertSlotBytes = 7'000'000;
    p.stateBytes = 80'000'000;
    p.bufferBytes = 900'000'000;
    p.kvBytes = 1'000'000'000;
    p.draftBytes = 3'000'000'000ull;
    const MemoryFigures f = MemoryFigures::fromPlan(p);
    QCOMPARE(f.plannedBytes(), quint64(p.total()));
    QCOMPARE(f.plannedBytes(),
             quint64(1'000 + 20 + 600 + 4 + 50'000 + 600'000 + 21'000'000 + 80'000'000 +
                     900'000'000 + 1'000'000'000 + 3'000'000'000ull));
    QCOMPARE(f.plan.back().name, QStringLiteral("draft model")); // the draft is in the plan
    QCOMPARE(f.plan.back().bytes, quint64(3'000'000'000ull));
}

// The rate "while reading" is bytes over the time a read was in progress (the trunk
// reader's read calls, expert reads in flight), not over the time the compute waited.
void TestEnginePanels::readRateIsOverTheTimeReadsWereInProgress() {
    k3::MemoryReport r;
    r.trunk.bytesRead = 6'000'000'000ull;
    r.trunk.ioSeconds = 2;
    r.trunk.waitSeconds = 0.5;
    r.cache.bytesRead = 2'000'000'000ull;
    r.cache.ioBusySeconds = 2;
    r.cache.readSeconds = 0.5;
    r.wallSeconds = 10;
    const MemoryFigures f = MemoryFigures::from(r);
    QCOMPARE(f.readBusySeconds, 4.0);
    QCOMPARE(f.ioShare, 0.1); // the compute waited 1 s of 10
    DiskIoPanel panel;
    panel.setFigures(f);
    QVERIFY2(
        panel.text().contains(QStringLiteral("\n2.00 GB/s while reading\nI/O 10% of wall clock")),
        qPrintable(panel.text()));
}

// Remote mode: the panels say so, and the plan panel draws no (empty) bar.
void TestEnginePanels::remoteModeSaysThereAreNoLocalFigures() {
    MemoryFigures f;
    f.remoteUrl = QStringLiteral("http://127.0.0.1:8080");
    const QString first = QStringLiteral("remote: http://127.0.0.1:8080 — no local memory figures");
    MemoryPlanPanel plan;
    plan.setFigures(f);
    QCOMPARE(plan.detailsText().section(QLatin1Char('\n'), 0, 0), first);
    ExpertCachePanel cache;
    cache.setFigures(f);
    QCOMPARE(cache.text().section(QLatin1Char('\n'), 0, 0), first);
    DiskIoPanel disk;
    disk.setFigures(f);
    QCOMPARE(disk.text().section(QLatin1Char('\n'), 0, 0), first);
    plan.resize(312, 200);
    QImage image(plan.size(), QImage::Format_ARGB32);
    image.fill(Qt::white);
    plan.render(&image);
    // The bar's frame corners (6,6) and (305,6) in local mode: the panel's background here.
    const QRgb background = plan.palette().color(QPalette::Window).rgb() | 0xff000000u;
    QCOMPARE(image.pixel(6, 6) | 0xff000000u, background);
    QCOMPARE(image.pixel(305, 6) | 0xff000000u, background);
    plan.setFigures(sample()); // a local plan draws its bar there
    image.fill(Qt::white);
    plan.render(&image);
    QVERIFY((image.pixel(6, 6) | 0xff000000u) != background);
}

void TestEnginePanels::diskShowsBytesRateAndShare() {
    DiskIoPanel panel;
    panel.setFigures(sample());
    QCOMPARE(panel.text(), QStringLiteral("134.000 GB read (trunk 100.000 GB, experts 34.000 GB)\n"
                                          "2.68 GB/s while reading\nI/O 71% of wall clock\n"
                                          "trunk layers pinned 3 of 93, the rest streamed"));
}

QTEST_MAIN(TestEnginePanels)
#include "tst_enginepanels.moc"
