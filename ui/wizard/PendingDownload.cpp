#include "wizard/PendingDownload.h"

#include "Settings.h"
#include "SettingsTable.h"

namespace Table = SettingsTable;

std::optional<PendingDownload> PendingDownload::load() {
    PendingDownload p;
    p.endpoint = Settings::value(Table::pendingEndpoint);
    p.repo = Settings::value(Table::pendingRepo);
    p.revision = Settings::value(Table::pendingRevision);
    p.destination = Settings::value(Table::pendingDestination);
    if (p.repo.isEmpty() || p.revision.isEmpty() || p.destination.isEmpty()) return std::nullopt;
    return p;
}

void PendingDownload::save() const {
    Settings::setValue(Table::pendingEndpoint, endpoint);
    Settings::setValue(Table::pendingRepo, repo);
    Settings::setValue(Table::pendingRevision, revision);
    Settings::setValue(Table::pendingDestination, destination);
}

void PendingDownload::clear() {
    for (const Setting<QString>* s : {&Table::pendingEndpoint, &Table::pendingRepo,
                                      &Table::pendingRevision, &Table::pendingDestination})
        Settings::remove(*s);
}
