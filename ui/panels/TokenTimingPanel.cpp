#include "panels/TokenTimingPanel.h"

#include <QBarCategoryAxis>
#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QLabel>
#include <QStackedBarSeries>
#include <QVBoxLayout>
#include <QValueAxis>

#include <algorithm>

TokenTimingPanel::TokenTimingPanel(QWidget* parent)
    : QWidget(parent), m_chart(new QChart), m_view(new QChartView(m_chart, this)),
      m_series(new QStackedBarSeries), m_trunk(new QBarSet(tr("trunk I/O"))),
      m_experts(new QBarSet(tr("expert I/O"))), m_compute(new QBarSet(tr("compute"))),
      m_axisX(new QBarCategoryAxis), m_axisY(new QValueAxis), m_summary(new QLabel(this)) {
    setObjectName(QStringLiteral("tokenTimingPanel"));
    m_series->append(m_trunk);
    m_series->append(m_experts);
    m_series->append(m_compute);
    m_series->setBarWidth(1.0);
    m_chart->addSeries(m_series);
    // A category axis is what lays the bars out side by side; its labels would only
    // repeat the token index, so they are hidden.
    m_axisX->setLabelsVisible(false);
    m_axisX->setGridLineVisible(false);
    m_chart->addAxis(m_axisX, Qt::AlignBottom);
    m_series->attachAxis(m_axisX);
    m_chart->addAxis(m_axisY, Qt::AlignLeft);
    m_series->attachAxis(m_axisY);
    m_axisY->setTitleText(tr("seconds"));
    m_axisY->setLabelFormat(QStringLiteral("%.3f"));
    m_chart->legend()->setAlignment(Qt::AlignBottom);
    m_chart->setMargins(QMargins(2, 2, 2, 2));
    m_chart->setBackgroundRoundness(0);
    m_chart->setTheme(palette().color(QPalette::Window).lightness() < 128
                          ? QChart::ChartThemeDark
                          : QChart::ChartThemeLight);
    m_view->setRenderHint(QPainter::Antialiasing);
    m_view->setMinimumHeight(160);
    setMinimumWidth(300);
    m_summary->setWordWrap(true);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(m_view, 1);
    layout->addWidget(m_summary);
    clear();
}

void TokenTimingPanel::clear() {
    m_trunk->remove(0, m_trunk->count());
    m_experts->remove(0, m_experts->count());
    m_compute->remove(0, m_compute->count());
    m_axisX->clear();
    m_total = 0;
    m_tokens = 0;
    m_proposed = 0;
    m_summary->setText(tr("No tokens yet."));
    rescale();
}

void TokenTimingPanel::addToken(int index, double computeSeconds, double trunkIoSeconds,
                                double expertIoSeconds, bool fromProposal) {
    if (index == 0) clear();
    const bool full = m_compute->count() == kMaxBars;
    if (full) {
        m_trunk->remove(0);
        m_experts->remove(0);
        m_compute->remove(0);
        m_axisX->remove(m_axisX->at(0));
    }
    m_trunk->append(trunkIoSeconds);
    m_experts->append(expertIoSeconds);
    m_compute->append(computeSeconds);
    // One category per bar, or the axis spans a single slot and squeezes the bars.
    m_axisX->append(QString::number(m_tokens) + (fromProposal ? QStringLiteral("*") : QString()));
    if (fromProposal) ++m_proposed;
    m_total += computeSeconds + trunkIoSeconds + expertIoSeconds;
    ++m_tokens;
    m_summary->setText(summaryText());
    const double height = computeSeconds + trunkIoSeconds + expertIoSeconds;
    // Growing the axis is O(1) per token; only dropping the oldest bar needs a rescan.
    if (full) {
        rescale();
    } else if (height > m_top) {
        m_top = height;
        m_axisY->setRange(0, m_top * 1.1);
    }
}

int TokenTimingPanel::barCount() const {
    return m_compute->count();
}

QString TokenTimingPanel::summaryText() const {
    if (m_tokens == 0) return tr("No tokens yet.");
    const QString count = m_tokens == 1 ? tr("1 token") : tr("%1 tokens").arg(m_tokens);
    QString text = tr("%1 · %2 s/token on average").arg(count).arg(m_total / m_tokens, 0, 'f', 3);
    if (m_proposed > 0) text += tr(" · %1 from accepted proposals (*)").arg(m_proposed);
    return text;
}

void TokenTimingPanel::rescale() {
    m_top = 0;
    for (int i = 0; i < m_compute->count(); ++i)
        m_top = std::max(m_top, m_trunk->at(i) + m_experts->at(i) + m_compute->at(i));
    m_axisY->setRange(0, m_top > 0 ? m_top * 1.1 : 1.0);
}
