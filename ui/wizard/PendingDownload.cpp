#include "wizard/PendingDownload.h"

#include <QSettings>

namespace {
const QString kGroup = QStringLiteral("download/pending");
}

std::optional<PendingDownload> PendingDownload::load() {
    QSettings settings;
    settings.beginGroup(kGroup);
    PendingDownload p;
    p.endpoint = settings.value(QStringLiteral("endpoint")).toString();
    p.repo = settings.value(QStringLiteral("repo")).toString();
    p.revision = settings.value(QStringLiteral("revision")).toString();
    p.destination = settings.value(QStringLiteral("destination")).toString();
    if (p.repo.isEmpty() || p.revision.isEmpty() || p.destination.isEmpty()) return std::nullopt;
    return p;
}

void PendingDownload::save() const {
    QSettings settings;
    settings.beginGroup(kGroup);
    settings.setValue(QStringLiteral("endpoint"), endpoint);
    settings.setValue(QStringLiteral("repo"), repo);
    settings.setValue(QStringLiteral("revision"), revision);
    settings.setValue(QStringLiteral("destination"), destination);
}

void PendingDownload::clear() {
    QSettings().remove(kGroup);
}
