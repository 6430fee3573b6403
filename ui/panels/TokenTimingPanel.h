#pragma once

#include <QColor>
#include <QVector>
#include <QWidget>

class QBarSet;
class QChart;
class QChartView;
class QLabel;
class QStackedBarSeries;
class QValueAxis;

// Per-token timing as stacked bars: trunk I/O, expert I/O and compute, one bar per
// token of the current answer (up to kMaxBars, far more than the app asks for;
// beyond that the newest), updated as each token arrives and kept after the answer.
class TokenTimingPanel : public QWidget {
    Q_OBJECT
public:
    static constexpr int kMaxBars = 4096;

    explicit TokenTimingPanel(QWidget* parent = nullptr);

    void clear();
    // fromProposal: an accepted speculative proposal: its bar's compute segment is drawn
    // in proposalColor() and the summary counts it.
    void addToken(int index, double computeSeconds, double trunkIoSeconds, double expertIoSeconds,
                  bool fromProposal = false);
    // A server's delta: `seconds` since the previous one, split evenly over the `tokens` it
    // carried (one bar each; the server's compute and the network are one figure). tokens
    // 0: the server did not say; the delta gets one bar until finishAnswer() knows more.
    void addDelta(int index, double seconds, int tokens);
    // The answer's token count as the server's usage gives it: the tokens no delta
    // accounted for are shared out evenly over the deltas that did not say, and their
    // bars redrawn. Nothing changes for a local model's answer.
    void finishAnswer(int tokens);

    int barCount() const;
    // The height of bar `bar` (all its segments), in seconds.
    double barSeconds(int bar) const;
    bool isFromProposal(int bar) const;
    QColor proposalColor() const;
    QString summaryText() const;
    // The y axis labels as drawn, bottom to top (tests read them back).
    QStringList yAxisLabels() const;
    // The y axis for bars up to `top` seconds: 0 to a 1-2-5 multiple of a step, 3 to 6
    // ticks, and enough decimals that no two labels read the same.
    struct Scale {
        double max;
        int tickCount;
        int decimals;
    };
    static Scale niceScale(double top);

    // The chart at its least and the whole summary line: the dock's scroll area gives the
    // panel at least this height, so a short dock shrinks the chart, never the footer.
    int heightForWidth(int width) const override;

protected:
    void changeEvent(QEvent* event) override;

private:
    void rescale();
    void setTop(double top);
    // The chart's colours from the palette: it follows the light or dark theme.
    void applyPalette();
    // The x axis spans the bars shown, labelled every 1-2-5 step of tokens.
    void updateTokenAxis();
    void appendBar(double computeSeconds, double trunkIoSeconds, double expertIoSeconds,
                   bool fromProposal);
    void clearBars();
    // Redraws the bars from m_deltas, with `shares` tokens for each.
    void drawDeltas(const QVector<int>& shares);

    QChart* m_chart;
    QChartView* m_view;
    QStackedBarSeries* m_series;
    QBarSet* m_trunk;
    QBarSet* m_experts;
    QBarSet* m_compute;
    QValueAxis* m_axisX; // bar i sits at x = i
    QValueAxis* m_axisY;
    QLabel* m_summary;
    double m_total = 0;
    int m_tokens = 0;
    int m_proposed = 0; // tokens of this answer that came from accepted proposals
    double m_top = 0;   // the tallest bar shown: the y axis tops out just above it
    struct Delta {
        double seconds;
        int tokens; // 0: not said by the server
    };
    QVector<Delta> m_deltas;  // a server's answer: its deltas, to redraw when usage arrives
    bool m_sharedOut = false; // some deltas' token counts were shared out from the total
};
