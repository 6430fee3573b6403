#pragma once

#include <QColor>
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

    int barCount() const;
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

protected:
    void changeEvent(QEvent* event) override;

private:
    void rescale();
    void setTop(double top);
    // The chart's colours from the palette: it follows the light or dark theme.
    void applyPalette();
    // The x axis spans the bars shown, labelled every 1-2-5 step of tokens.
    void updateTokenAxis();

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
};
