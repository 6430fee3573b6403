#include "panels/ExpertCachePanel.h"

#include <QLabel>
#include <QLocale>
#include <QVBoxLayout>

ExpertCachePanel::ExpertCachePanel(QWidget* parent) : QWidget(parent) {
    setObjectName(QStringLiteral("expertCachePanel"));
    setMinimumHeight(70);
    auto* layout = new QVBoxLayout(this);
    layout->setContentsMargins(6, 6, 6, 6);
    layout->setSpacing(2);
    addLine("prefillProgress",
            tr("The prompt is being read: positions done of the prompt's total, what this "
               "prompt has read from disk so far and the time left at the rate so far."));
    addLine("servedFromMemory",
            tr("Requests for a routed expert that were served from memory, without any disk "
               "read: the expert was already in the cache when its layer asked for it."));
    addLine("readFromDisk", tr("Routed experts read from disk because they were not in memory, "
                               "and their bytes. This is what makes a small cache slow."));
    addLine("cacheDetail",
            tr("Prefetched: experts read from disk by their layer's batch just before use "
               "(not served from memory). Evictions: experts dropped to make room for "
               "another one."));
    addLine("cacheCapacity", tr("How many experts the cache holds at once, and its size."));
    layout->addStretch(1);
    showLines({{}, tr("No model loaded.")});
}

QLabel* ExpertCachePanel::addLine(const char* objectName, const QString& toolTip) {
    auto* label = new QLabel(this);
    label->setObjectName(QLatin1String(objectName));
    label->setTextFormat(Qt::PlainText);
    label->setWordWrap(true);
    label->setToolTip(toolTip);
    static_cast<QVBoxLayout*>(layout())->addWidget(label);
    m_lines << label;
    return label;
}

// Line i goes to label i; an empty line hides its label.
void ExpertCachePanel::showLines(const QStringList& lines) {
    for (int i = 0; i < m_lines.size(); ++i) {
        const QString text = lines.value(i);
        m_lines[i]->setText(text);
        m_lines[i]->setVisible(!text.isEmpty());
    }
}

void ExpertCachePanel::setFigures(const MemoryFigures& f) {
    if (!f.remoteUrl.isEmpty()) {
        showLines({{},
                   tr("remote: %1 — no local memory figures").arg(f.remoteUrl),
                   tr("The server's expert cache is not visible here.")});
        return;
    }
    if (!f.expertsCached) {
        showLines({{}, tr("Every routed expert is resident: no cache in use.")});
        return;
    }
    const QLocale locale;
    const auto count = [&locale](quint64 n) { return locale.toString(qulonglong(n)); };
    const double served =
        f.cacheRequests > 0 ? 100.0 * double(f.cacheResidentHits) / double(f.cacheRequests) : 0;
    // How far a prompt is read is said once, in the Disk I/O dock (and the answer's bubble).
    showLines({{},
               tr("served from memory %1% (%2 of %3 requests)")
                   .arg(served, 0, 'f', 1)
                   .arg(count(f.cacheResidentHits), count(f.cacheRequests)),
               tr("read from disk %1 GB (%2 experts)")
                   .arg(double(f.expertBytesRead) / 1e9, 0, 'f', 1)
                   .arg(count(f.cacheDiskReads)),
               tr("prefetched %1 · evictions %2")
                   .arg(count(f.cachePrefetchHits), count(f.cacheEvictions)),
               tr("capacity %1 experts (%2 MB)")
                   .arg(locale.toString(f.cacheSlots))
                   .arg(double(f.cacheSlots) * double(f.cacheSlotBytes) / 1e6, 0, 'f', 1)});
}

QString ExpertCachePanel::text() const {
    QStringList visible;
    for (const QLabel* label : m_lines)
        if (!label->text().isEmpty()) visible << label->text();
    return visible.join(QLatin1Char('\n'));
}
