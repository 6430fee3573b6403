#include <QImage>
#include <QLocale>
#include <QTest>

#include "panels/DiskIoPanel.h"
#include "panels/ExpertCachePanel.h"
#include "panels/MemoryPlanPanel.h"

class TestEnginePanels : public QObject {
    Q_OBJECT
private slots:
    void planListsEveryComponent();
    void cacheShowsBothHitRates();
    void diskShowsBytesRateAndShare();
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
    f.cacheHitRate = 0.38;
    f.cacheResidentHitRate = 0.12;
    f.cacheEvictions = 1204;
    f.cacheSlots = 57;
    f.cacheSlotBytes = 17'547'264; // one K3 expert
    f.trunkBytesRead = 100'000'000'000ull;
    f.expertBytesRead = 34'000'000'000ull;
    f.ioSeconds = 50;
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
    // Counts follow the user's locale ("1,204" in English).
    QCOMPARE(
        panel.text(),
        QStringLiteral("hit 38.0%   TRUE resident 12.0%\nevictions %1\nrequests %2\ncapacity 57 "
                       "experts (1000.2 MB)")
            .arg(QLocale().toString(1204), QLocale().toString(1000)));
    MemoryFigures resident = sample();
    resident.expertsCached = false;
    panel.setFigures(resident);
    QVERIFY(panel.text().startsWith(QStringLiteral("Every routed expert is resident")));
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
