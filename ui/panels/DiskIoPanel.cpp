#include "panels/DiskIoPanel.h"

#include <QLabel>
#include <QVBoxLayout>

DiskIoPanel::DiskIoPanel(QWidget* parent) : QWidget(parent), m_label(new QLabel(this)) {
    setObjectName(QStringLiteral("diskIoPanel"));
    setMinimumHeight(90); // three wrapped lines
    m_label->setTextFormat(Qt::PlainText);
    m_label->setWordWrap(true);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(6, 6, 6, 6);
    layout->addWidget(m_label);
    layout->addStretch(1);
    m_label->setText(tr("No model loaded."));
}

void DiskIoPanel::setFigures(const MemoryFigures& f) {
    if (!f.remoteUrl.isEmpty()) {
        m_label->setText(tr("remote: %1 — no local memory figures\nNo weights are read from "
                            "this computer's disk.")
                             .arg(f.remoteUrl));
        return;
    }
    const double total = double(f.trunkBytesRead + f.expertBytesRead);
    const double rate = f.readBusySeconds > 0 ? total / f.readBusySeconds / 1e9 : 0;
    const QString trunk = f.trunkStreamed ? tr("trunk layers pinned %1 of %2, the rest streamed")
                                                .arg(f.pinnedLayers)
                                                .arg(f.totalLayers)
                                          : tr("trunk resident (%1 layers)").arg(f.totalLayers);
    // While a prompt is read, how far it is comes first: the totals below keep growing.
    const QString reading = f.prefillText();
    m_label->setText(
        (reading.isEmpty() ? QString() : reading + QLatin1Char('\n')) +
        tr("%1 GB read (trunk %2 GB, experts %3 GB)\n%4 GB/s while reading\nI/O %5% of "
           "wall clock\n%6")
            .arg(total / 1e9, 0, 'f', 3)
            .arg(double(f.trunkBytesRead) / 1e9, 0, 'f', 3)
            .arg(double(f.expertBytesRead) / 1e9, 0, 'f', 3)
            .arg(rate, 0, 'f', 2)
            .arg(f.ioShare * 100, 0, 'f', 0)
            .arg(trunk));
}

QString DiskIoPanel::text() const {
    return m_label->text();
}
