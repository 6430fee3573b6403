#include "panels/TokenTimingPanel.h"

#include <QBarSet>
#include <QChart>
#include <QChartView>
#include <QEvent>
#include <QLabel>
#include <QStackedBarSeries>
#include <QVBoxLayout>
#include <QValueAxis>

#include <algorithm>
#include <array>
#include <cmath>

namespace {
// One colour per series in every theme (a chart theme's own palette gave trunk I/O and
// expert I/O each other's colours between Light and Dark, and Dark's trunk I/O the green
// of accepted proposals). Mid-tones that read on a light and on a dark window.
const QColor kTrunkIoColor(0x3a, 0x88, 0xc8);  // blue
const QColor kExpertIoColor(0xe8, 0x8a, 0x1a); // orange
const QColor kComputeColor(0x94, 0x67, 0xbd);  // purple
const QColor kProposalColor(0x2c, 0xa0, 0x4c); // green: the summary line names it
} // namespace

TokenTimingPanel::TokenTimingPanel(QWidget* parent)
    : QWidget(parent), m_chart(new QChart), m_view(new QChartView(m_chart, this)),
      m_series(new QStackedBarSeries), m_trunk(new QBarSet(tr("trunk I/O"))),
      m_experts(new QBarSet(tr("expert I/O"))), m_compute(new QBarSet(tr("compute"))),
      m_axisX(new QValueAxis), m_axisY(new QValueAxis), m_summary(new QLabel(this)) {
    setObjectName(QStringLiteral("tokenTimingPanel"));
    m_series->append(m_trunk);
    m_series->append(m_experts);
    m_series->append(m_compute);
    m_series->setBarWidth(1.0);
    m_chart->addSeries(m_series);
    // A value axis, not a category axis: its labels are a few token numbers at nice steps
    // rather than one per bar (thousands).
    m_axisX->setGridLineVisible(false);
    m_axisX->setLabelFormat(QStringLiteral("%.0f"));
    m_axisX->setTickType(QValueAxis::TicksDynamic);
    m_axisX->setTickAnchor(0);
    m_axisX->setMinorTickCount(0);
    m_chart->addAxis(m_axisX, Qt::AlignBottom);
    m_series->attachAxis(m_axisX);
    m_chart->addAxis(m_axisY, Qt::AlignLeft);
    m_series->attachAxis(m_axisY);
    m_axisX->setTitleText(tr("token"));
    m_axisY->setTitleText(tr("seconds"));
    m_chart->legend()->setAlignment(Qt::AlignBottom);
    m_chart->setMargins(QMargins(2, 2, 2, 2));
    m_chart->setBackgroundRoundness(0);
    applyPalette();
    m_view->setRenderHint(QPainter::Antialiasing);
    m_view->setAccessibleName(tr("Per-token timing chart"));
    // The dock's scroll area is the Tab stop (with a focus frame); the chart takes no keys.
    m_view->setFocusPolicy(Qt::NoFocus);
    // Small enough that the docks and the conversation fit an 800x600 window.
    m_view->setMinimumHeight(120);
    setMinimumWidth(300);
    m_summary->setWordWrap(true);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(4, 4, 4, 4);
    layout->addWidget(m_view, 1);
    layout->addWidget(m_summary);
    clear();
}

void TokenTimingPanel::clear() {
    m_deltas.clear();
    m_sharedOut = false;
    clearBars();
}

void TokenTimingPanel::clearBars() {
    m_trunk->remove(0, m_trunk->count());
    m_experts->remove(0, m_experts->count());
    m_compute->remove(0, m_compute->count());
    m_compute->deselectAllBars();
    m_total = 0;
    m_tokens = 0;
    m_proposed = 0;
    m_summary->setText(tr("No tokens yet."));
    updateTokenAxis();
    rescale();
}

void TokenTimingPanel::addToken(int index, double computeSeconds, double trunkIoSeconds,
                                double expertIoSeconds, bool fromProposal) {
    if (index == 0) clear();
    appendBar(computeSeconds, trunkIoSeconds, expertIoSeconds, fromProposal);
}

void TokenTimingPanel::addDelta(int index, double seconds, int tokens) {
    if (index == 0) clear();
    m_deltas.push_back({seconds, std::max(0, tokens)});
    const int bars = std::max(1, tokens);
    for (int i = 0; i < bars; ++i) appendBar(seconds / bars, 0, 0, false);
}

void TokenTimingPanel::finishAnswer(int tokens) {
    if (m_deltas.isEmpty()) return;
    int counted = 0, unsaid = 0;
    for (const Delta& d : m_deltas) {
        counted += d.tokens;
        unsaid += d.tokens == 0;
    }
    const int left = tokens - counted;
    if (unsaid == 0 || left <= unsaid) return; // one bar per delta is already one per token
    // Even shares, the remainder spread: delta j of the unsaid ones gets
    // floor((j+1)*left/unsaid) - floor(j*left/unsaid) tokens (at least 1 each).
    QVector<int> shares;
    int j = 0;
    for (const Delta& d : m_deltas) {
        if (d.tokens > 0) {
            shares.push_back(d.tokens);
            continue;
        }
        shares.push_back(int(qint64(j + 1) * left / unsaid - qint64(j) * left / unsaid));
        ++j;
    }
    m_sharedOut = true;
    drawDeltas(shares);
}

void TokenTimingPanel::drawDeltas(const QVector<int>& shares) {
    clearBars();
    for (qsizetype i = 0; i < m_deltas.size(); ++i)
        for (int t = 0; t < shares[i]; ++t) appendBar(m_deltas[i].seconds / shares[i], 0, 0, false);
}

void TokenTimingPanel::appendBar(double computeSeconds, double trunkIoSeconds,
                                 double expertIoSeconds, bool fromProposal) {
    const bool full = m_compute->count() == kMaxBars;
    if (full) {
        // The marks move with the bars: the selection is by index.
        QList<int> marked = m_compute->selectedBars();
        m_compute->deselectAllBars();
        m_trunk->remove(0);
        m_experts->remove(0);
        m_compute->remove(0);
        for (int& i : marked) --i;
        marked.removeAll(-1);
        m_compute->selectBars(marked);
    }
    m_trunk->append(trunkIoSeconds);
    m_experts->append(expertIoSeconds);
    m_compute->append(computeSeconds);
    if (fromProposal) {
        ++m_proposed;
        m_compute->selectBar(m_compute->count() - 1);
    }
    m_total += computeSeconds + trunkIoSeconds + expertIoSeconds;
    ++m_tokens;
    m_summary->setText(summaryText());
    updateTokenAxis();
    const double height = computeSeconds + trunkIoSeconds + expertIoSeconds;
    // Growing the axis is O(1) per token; only dropping the oldest bar needs a rescan.
    if (full) {
        rescale();
    } else if (height > m_top) {
        setTop(height);
    }
}

int TokenTimingPanel::heightForWidth(int width) const {
    const QMargins margins = layout()->contentsMargins();
    return margins.top() + m_view->minimumHeight() + std::max(0, layout()->spacing()) +
           m_summary->heightForWidth(width - margins.left() - margins.right()) + margins.bottom();
}

int TokenTimingPanel::barCount() const {
    return m_compute->count();
}

double TokenTimingPanel::barSeconds(int bar) const {
    return m_trunk->at(bar) + m_experts->at(bar) + m_compute->at(bar);
}

bool TokenTimingPanel::isFromProposal(int bar) const {
    return m_compute->isBarSelected(bar);
}

QColor TokenTimingPanel::proposalColor() const {
    return m_compute->selectedColor();
}

QString TokenTimingPanel::summaryText() const {
    if (m_tokens == 0) return tr("No tokens yet.");
    const QString count = m_tokens == 1 ? tr("1 token") : tr("%1 tokens").arg(m_tokens);
    QString text = tr("%1 · %2 s/token on average").arg(count).arg(m_total / m_tokens, 0, 'f', 3);
    if (m_proposed > 0) text += tr(" · %1 from accepted proposals (green)").arg(m_proposed);
    // A server that batches: say that the bars split each delta's time, and where the
    // token counts came from.
    if (!m_deltas.isEmpty() && m_tokens > m_deltas.size())
        text += (m_sharedOut ? tr(" · the server sent them in %1 deltas; each delta's time is "
                                  "split evenly over its tokens (counts shared out evenly from "
                                  "the answer's usage)")
                             : tr(" · the server sent them in %1 deltas; each delta's time is "
                                  "split evenly over its tokens (counts from the server's usage "
                                  "per chunk)"))
                    .arg(m_deltas.size());
    return text;
}

void TokenTimingPanel::rescale() {
    double top = 0;
    for (int i = 0; i < m_compute->count(); ++i)
        top = std::max(top, m_trunk->at(i) + m_experts->at(i) + m_compute->at(i));
    setTop(top);
}

TokenTimingPanel::Scale TokenTimingPanel::niceScale(double top) {
    if (!(top > 0) || !std::isfinite(top)) return {1.0, 6, 1}; // 0.0 0.2 ... 1.0
    // The smallest 1-2-5 step that covers `top` in at most 5 intervals.
    const double raw = top / 5;
    const double magnitude = std::pow(10.0, std::floor(std::log10(raw)));
    double step = 10 * magnitude;
    for (const double m : {1.0, 2.0, 5.0})
        if (m * magnitude >= raw * (1 - 1e-9)) {
            step = m * magnitude;
            break;
        }
    // One more interval when the tallest bar would touch the top.
    const int intervals = std::max(2, int(std::floor(top / step + 1e-9)) + 1);
    const int decimals = std::max(0, -int(std::floor(std::log10(step) + 1e-9)));
    return {step * intervals, intervals + 1, decimals};
}

void TokenTimingPanel::setTop(double top) {
    m_top = top;
    const Scale scale = niceScale(top);
    m_axisY->setRange(0, scale.max);
    m_axisY->setTickCount(scale.tickCount);
    m_axisY->setLabelFormat(QStringLiteral("%.%1f").arg(scale.decimals));
}

void TokenTimingPanel::updateTokenAxis() {
    const int bars = std::max(1, m_compute->count());
    m_axisX->setRange(-0.5, bars - 0.5);
    // About five labels: the smallest 1-2-5 step of at least bars / 5 tokens.
    double step = 1;
    for (int k = 1; step * 5 < bars; ++k)
        step = std::array{1.0, 2.0, 5.0}[k % 3] * std::pow(10.0, k / 3);
    m_axisX->setTickInterval(step);
}

QStringList TokenTimingPanel::yAxisLabels() const {
    QStringList labels;
    const int ticks = m_axisY->tickCount();
    for (int i = 0; i < ticks; ++i)
        labels << QString::asprintf(m_axisY->labelFormat().toLatin1().constData(),
                                    m_axisY->min() +
                                        (m_axisY->max() - m_axisY->min()) * i / (ticks - 1));
    return labels;
}

void TokenTimingPanel::applyPalette() {
    const QPalette pal = palette();
    const bool dark = pal.color(QPalette::Window).lightness() < 128;
    // The theme sets the fonts and axes; the bars keep their own colours, and everything
    // around them takes the palette's, so no light box is left in a dark window (issue 21).
    m_chart->setTheme(dark ? QChart::ChartThemeDark : QChart::ChartThemeLight);
    m_trunk->setColor(kTrunkIoColor);
    m_experts->setColor(kExpertIoColor);
    m_compute->setColor(kComputeColor);
    // No outline: the theme's light border drowned the fill once hundreds of bars shared
    // the width (a long answer looked white).
    for (QBarSet* set : {m_trunk, m_experts, m_compute}) set->setPen(Qt::NoPen);
    m_chart->setBackgroundBrush(pal.window());
    m_chart->setBackgroundPen(Qt::NoPen);
    m_chart->setPlotAreaBackgroundVisible(false);
    m_view->setBackgroundBrush(pal.window());
    const QColor text = pal.color(QPalette::WindowText);
    QColor grid = text;
    grid.setAlpha(50);
    for (QAbstractAxis* axis :
         {static_cast<QAbstractAxis*>(m_axisX), static_cast<QAbstractAxis*>(m_axisY)}) {
        axis->setLabelsColor(text);
        axis->setTitleBrush(text);
        axis->setLinePenColor(grid);
        axis->setGridLineColor(grid);
    }
    m_chart->legend()->setLabelColor(text);
    // Tokens from accepted proposals: their compute segment in a colour of its own, which
    // the summary line names (the legend cannot show a per-bar colour).
    m_compute->setSelectedColor(kProposalColor);
}

void TokenTimingPanel::changeEvent(QEvent* event) {
    QWidget::changeEvent(event);
    if (event->type() == QEvent::PaletteChange ||
        event->type() == QEvent::ApplicationPaletteChange || event->type() == QEvent::StyleChange)
        applyPalette();
}
