#include "panels/ExpertCachePanel.h"

#include <QLabel>
#include <QLocale>
#include <QVBoxLayout>

ExpertCachePanel::ExpertCachePanel(QWidget* parent) : QWidget(parent), m_label(new QLabel(this)) {
    setObjectName(QStringLiteral("expertCachePanel"));
    setMinimumHeight(70);
    m_label->setTextFormat(Qt::PlainText);
    m_label->setWordWrap(true);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(6, 6, 6, 6);
    layout->addWidget(m_label);
    layout->addStretch(1);
    m_label->setText(tr("No model loaded."));
}

void ExpertCachePanel::setFigures(const MemoryFigures& f) {
    if (!f.remoteUrl.isEmpty()) {
        m_label->setText(
            tr("remote: %1\nThe server's expert cache is not visible here.").arg(f.remoteUrl));
        return;
    }
    if (!f.expertsCached) {
        m_label->setText(tr("Every routed expert is resident: no cache in use."));
        return;
    }
    const QLocale locale;
    // "resident" is the TRUE resident hit rate: experts already in memory before their
    // layer asked, not the ones its own batch prefetched just in time.
    m_label->setText(
        tr("hit %1%   TRUE resident %2%\nevictions %3\nrequests %4\ncapacity %5 experts "
           "(%6 MB)")
            .arg(f.cacheHitRate * 100, 0, 'f', 1)
            .arg(f.cacheResidentHitRate * 100, 0, 'f', 1)
            .arg(locale.toString(qulonglong(f.cacheEvictions)))
            .arg(locale.toString(qulonglong(f.cacheRequests)))
            .arg(locale.toString(f.cacheSlots))
            .arg(double(f.cacheSlots) * double(f.cacheSlotBytes) / 1e6, 0, 'f', 1));
}

QString ExpertCachePanel::text() const {
    return m_label->text();
}
