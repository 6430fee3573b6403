#include <QTest>

#include "panels/TokenTimingPanel.h"

class TestTokenTimingPanel : public QObject {
    Q_OBJECT
private slots:
    void keepsTheLastBarsAndAverages();
    void aNewAnswerStartsAfresh();
    void acceptedProposalsAreMarked();
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

// Tokens that came from an accepted speculative proposal: a "*" on their bar and a count.
void TestTokenTimingPanel::acceptedProposalsAreMarked() {
    TokenTimingPanel panel;
    panel.addToken(0, 0.3, 0, 0);
    panel.addToken(1, 0.1, 0, 0, true);
    panel.addToken(2, 0.1, 0, 0, true);
    panel.addToken(3, 0.1, 0, 0);
    QCOMPARE(panel.barCount(), 4);
    QCOMPARE(panel.summaryText(), QStringLiteral("4 tokens · 0.150 s/token on average · 2 from "
                                                 "accepted proposals (*)"));
    panel.addToken(0, 0.5, 0, 0); // the next answer starts the count again
    QCOMPARE(panel.summaryText(), QStringLiteral("1 token · 0.500 s/token on average"));
}

QTEST_MAIN(TestTokenTimingPanel)
#include "tst_tokentimingpanel.moc"
