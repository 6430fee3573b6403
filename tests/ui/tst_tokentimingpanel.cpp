#include <QAbstractAxis>
#include <QChart>
#include <QChartView>
#include <QSet>
#include <QTest>

#include "panels/TokenTimingPanel.h"

class TestTokenTimingPanel : public QObject {
    Q_OBJECT
private slots:
    void keepsTheLastBarsAndAverages();
    void aNewAnswerStartsAfresh();
    void acceptedProposalsAreMarked();
    void yAxisLabelsAreDistinctNiceNumbers();
    void chartFollowsTheDarkPalette();
};

void TestTokenTimingPanel::keepsTheLastBarsAndAverages() {
    TokenTimingPanel panel;
    QCOMPARE(panel.barCount(), 0);
    QCOMPARE(panel.summaryText(), QStringLiteral("No tokens yet."));
    for (int i = 0; i < 70; ++i) panel.addToken(i, 0.25, 0.5, 0.25);
    QCOMPARE(panel.barCount(), 70); // one bar per token of the answer
    QCOMPARE(panel.summaryText(), QStringLiteral("70 tokens · 1.000 s/token on average"));
    for (int i = 70; i < TokenTimingPanel::kMaxBars + 6; ++i) panel.addToken(i, 0.25, 0.5, 0.25);
    QCOMPARE(panel.barCount(), TokenTimingPanel::kMaxBars); // then the newest
}

void TestTokenTimingPanel::aNewAnswerStartsAfresh() {
    TokenTimingPanel panel;
    panel.addToken(0, 1.0, 0, 0);
    panel.addToken(1, 3.0, 0, 0);
    QCOMPARE(panel.summaryText(), QStringLiteral("2 tokens · 2.000 s/token on average"));
    panel.addToken(0, 0.5, 0, 0); // index 0: the next answer
    QCOMPARE(panel.barCount(), 1);
    QCOMPARE(panel.summaryText(), QStringLiteral("1 token · 0.500 s/token on average"));
}

// Tokens that came from an accepted speculative proposal: their bar's compute segment in
// green (a selected bar of the compute set) and a count.
void TestTokenTimingPanel::acceptedProposalsAreMarked() {
    TokenTimingPanel panel;
    panel.addToken(0, 0.3, 0, 0);
    panel.addToken(1, 0.1, 0, 0, true);
    panel.addToken(2, 0.1, 0, 0, true);
    panel.addToken(3, 0.1, 0, 0);
    QCOMPARE(panel.barCount(), 4);
    QCOMPARE(panel.summaryText(), QStringLiteral("4 tokens · 0.150 s/token on average · 2 from "
                                                 "accepted proposals (green)"));
    QCOMPARE(QList<bool>({panel.isFromProposal(0), panel.isFromProposal(1), panel.isFromProposal(2),
                          panel.isFromProposal(3)}),
             QList<bool>({false, true, true, false}));
    QCOMPARE(panel.proposalColor().green() > panel.proposalColor().red(), true);
    panel.addToken(0, 0.5, 0, 0); // the next answer starts the count again
    QCOMPARE(panel.summaryText(), QStringLiteral("1 token · 0.500 s/token on average"));
    QVERIFY(!panel.isFromProposal(0));

    // Past kMaxBars the oldest bar goes, and the marks move with their bars.
    for (int i = 1; i < TokenTimingPanel::kMaxBars; ++i) panel.addToken(i, 0.1, 0, 0, i == 1);
    QVERIFY(panel.isFromProposal(1));
    panel.addToken(TokenTimingPanel::kMaxBars, 0.1, 0, 0);
    QCOMPARE(panel.barCount(), TokenTimingPanel::kMaxBars);
    QVERIFY(panel.isFromProposal(0));
    QVERIFY(!panel.isFromProposal(1));
}

// Issue 21: "%.3f" over 0 to 1.1 x the tallest bar printed "0.000 0.000 0.001 0.001"
// for fast tokens. The axis now ends on a 1-2-5 step with the decimals that step needs.
void TestTokenTimingPanel::yAxisLabelsAreDistinctNiceNumbers() {
    TokenTimingPanel panel;
    QCOMPARE(panel.yAxisLabels(), (QStringList{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0"}));
    panel.addToken(0, 0.0004, 0.0002, 0.0001);
    panel.addToken(1, 0.0009, 0.0002, 0.0001); // 1.2 ms, the tallest
    panel.addToken(2, 0.0005, 0.0001, 0.0001);
    QCOMPARE(panel.yAxisLabels(), (QStringList{"0.0000", "0.0005", "0.0010", "0.0015"}));
    panel.addToken(3, 0.25, 0.5, 0.25); // a 1 s token: the axis grows with it
    QCOMPARE(panel.yAxisLabels(), (QStringList{"0.0", "0.2", "0.4", "0.6", "0.8", "1.0", "1.2"}));
    panel.addToken(0, 35, 0, 0); // a slow streamed token of the next answer
    QCOMPARE(panel.yAxisLabels(), (QStringList{"0", "10", "20", "30", "40"}));
    for (const double top : {0.0031, 0.047, 0.9, 2.5, 7.3, 123.0}) {
        const QStringList labels = [&] {
            TokenTimingPanel p;
            p.addToken(0, top, 0, 0);
            return p.yAxisLabels();
        }();
        QVERIFY2(labels.size() >= 3 && labels.size() <= 7, qPrintable(labels.join(' ')));
        QCOMPARE(QSet<QString>(labels.begin(), labels.end()).size(), labels.size());
        QVERIFY2(labels.last().toDouble() > top, qPrintable(labels.join(' ')));
    }
}

// Issue 21: in the dark theme the chart was a white box.
void TestTokenTimingPanel::chartFollowsTheDarkPalette() {
    TokenTimingPanel panel;
    panel.resize(400, 300);
    QPalette dark;
    dark.setColor(QPalette::Window, QColor(30, 30, 30));
    dark.setColor(QPalette::WindowText, QColor(230, 230, 230));
    dark.setColor(QPalette::Base, QColor(20, 20, 20));
    panel.setPalette(dark);
    panel.addToken(0, 0.1, 0.05, 0.05);
    panel.show();
    QVERIFY(QTest::qWaitForWindowExposed(&panel));
    auto* view = panel.findChild<QChartView*>();
    QVERIFY(view);
    QCOMPARE(view->chart()->backgroundBrush().color(), QColor(30, 30, 30));
    // No light pixel in the chart's corners: the background is the window's.
    const QImage image = view->grab().toImage();
    for (const QPoint& p : {QPoint(3, 3), QPoint(image.width() - 4, 3)})
        QVERIFY2(QColor(image.pixel(p)).lightness() < 80,
                 qPrintable(QColor(image.pixel(p)).name()));
    QCOMPARE(view->chart()->axes(Qt::Vertical).at(0)->titleText(), QStringLiteral("seconds"));
    QCOMPARE(view->chart()->axes(Qt::Horizontal).at(0)->titleText(), QStringLiteral("token"));
}

QTEST_MAIN(TestTokenTimingPanel)
#include "tst_tokentimingpanel.moc"
