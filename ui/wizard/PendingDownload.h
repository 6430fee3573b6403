#pragma once

#include <QString>

#include <optional>

// An unfinished checkpoint download, remembered in the settings (SettingsTable::pending*)
// so the next start of the wizard offers to resume it: where and what, never the token.
// The bytes themselves stay in the destination's NAME.partial files.
struct PendingDownload {
    QString endpoint; // empty: the default hub
    QString repo;
    QString revision;
    QString destination;

    // Empty when nothing is pending or the entry is incomplete.
    static std::optional<PendingDownload> load();
    void save() const;
    static void clear();
};
