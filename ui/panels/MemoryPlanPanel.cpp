#include "panels/MemoryPlanPanel.h"

#include <QLabel>
#include <QPainter>
#include <QVBoxLayout>

#include <algorithm>

namespace {
constexpr int kBarHeight = 22;

QString gb(quint64 bytes) {
    if (bytes >= 1'000'000'000ull) return QObject::tr("%1 GB").arg(double(bytes) / 1e9, 0, 'f', 2);
    return QObject::tr("%1 MB").arg(double(bytes) / 1e6, 0, 'f', 1);
}

QColor segmentColor(int i) {
    static const QColor colors[] = {QColor(0x1d, 0x35, 0x57), QColor(0x45, 0x7b, 0x9d),
                                    QColor(0x2a, 0x9d, 0x8f), QColor(0xe9, 0xc4, 0x6a),
                                    QColor(0xf4, 0xa2, 0x61), QColor(0xe7, 0x6f, 0x51),
                                    QColor(0x8e, 0x7d, 0xbe), QColor(0x90, 0xa9, 0xb7)};
    return colors[i % 8];
}
} // namespace

MemoryPlanPanel::MemoryPlanPanel(QWidget* parent) : QWidget(parent), m_details(new QLabel(this)) {
    setObjectName(QStringLiteral("memoryPlanPanel"));
    m_details->setTextFormat(Qt::RichText);
    m_details->setWordWrap(true);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(6, kBarHeight + 12, 6, 6);
    layout->addWidget(m_details);
    layout->addStretch(1);
    m_details->setText(tr("No model loaded."));
}

void MemoryPlanPanel::setFigures(const MemoryFigures& figures) {
    m_figures = figures;
    // Remote: no bar is drawn, so the text takes its place.
    layout()->setContentsMargins(6, figures.remoteUrl.isEmpty() ? kBarHeight + 12 : 6, 6, 6);
    // The key: each part's row starts with a square of its colour in the bar.
    QStringList html;
    const QStringList rows = detailRows();
    for (int i = 0; i < rows.size(); ++i) {
        const QString text = rows[i].toHtmlEscaped();
        html << (i < figures.plan.size() && figures.remoteUrl.isEmpty()
                     ? QStringLiteral("<span style=\"color:%1\">&#9632;</span> %2")
                           .arg(segmentColor(i).name(), text)
                     : text);
    }
    m_details->setText(html.join(QStringLiteral("<br>")));
    update();
}

QString MemoryPlanPanel::detailsText() const {
    return detailRows().join(QLatin1Char('\n'));
}

QStringList MemoryPlanPanel::detailRows() const {
    const MemoryFigures& f = m_figures;
    if (!f.remoteUrl.isEmpty())
        return {tr("remote: %1 — no local memory figures").arg(f.remoteUrl),
                tr("The server holds the model; this computer only shows the answer.")};
    QStringList rows;
    for (const MemoryFigures::Component& c : f.plan)
        rows << QStringLiteral("%1  %2").arg(c.name, gb(c.bytes));
    rows << tr("planned %1 of %2 available").arg(gb(f.plannedBytes()), gb(f.availableBytes));
    if (f.availableBytes > 0)
        rows << tr("red line: 95% of the memory available, the most a plan may use");
    if (f.totalLayers > 0)
        rows << (!f.trunkStreamed ? tr("all %1 layers resident").arg(f.totalLayers)
                 : f.pinnedLayers >= f.totalLayers
                     ? tr("all %1 layers pinned, none streamed").arg(f.totalLayers)
                     : tr("%1 of %2 layers pinned, the rest streamed")
                           .arg(f.pinnedLayers)
                           .arg(f.totalLayers));
    if (f.peakRssBytes > 0) rows << tr("peak RSS %1").arg(gb(f.peakRssBytes));
    return rows;
}

void MemoryPlanPanel::paintEvent(QPaintEvent*) {
    // A server plans its own memory: no bar, only the text saying so.
    if (!m_figures.remoteUrl.isEmpty()) return;
    QPainter painter(this);
    const QRect bar(6, 6, width() - 12, kBarHeight);
    painter.fillRect(bar, palette().color(QPalette::AlternateBase));
    painter.setPen(palette().color(QPalette::Mid));
    painter.drawRect(bar.adjusted(0, 0, -1, -1));
    const double scale =
        double(std::max<quint64>(m_figures.availableBytes, m_figures.plannedBytes()));
    if (scale <= 0) return;
    double x = bar.left();
    for (int i = 0; i < m_figures.plan.size(); ++i) {
        const double w = bar.width() * double(m_figures.plan[i].bytes) / scale;
        painter.fillRect(QRectF(x, bar.top(), std::max(w, 1.0), bar.height()), segmentColor(i));
        x += w;
    }
    // The engine refuses a plan above 95% of MemAvailable.
    if (m_figures.availableBytes > 0) {
        const double limit =
            bar.left() + bar.width() * 0.95 * double(m_figures.availableBytes) / scale;
        painter.setPen(QPen(Qt::red, 2));
        painter.drawLine(QPointF(limit, bar.top() - 3), QPointF(limit, bar.bottom() + 3));
    }
}
