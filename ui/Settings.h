#pragma once

#include "Setting.h"

#include <QObject>
#include <QVariant>

#include <optional>
#include <type_traits>

// The one door to the settings file: every read and write of a SettingsTable entry goes
// through here (a source check, tests/SettingsKeyCheck.cmake, fails on any other use of
// QSettings or of a key's text in ui/ and app/). Values read back are bounded by the
// entry's range or choices; a write that changes the stored value emits changed(key) on
// instance(), so a view can follow a preference another window changed. Nothing is cached:
// the file stays the truth (tests and older builds write it directly).
class Settings : public QObject {
    Q_OBJECT
public:
    static Settings* instance();

    // The stored value bounded by the entry's range or choices; the fallback when absent.
    template <typename T> static T value(const Setting<T>& setting) {
        const QVariant v = read(setting.key);
        return setting.bounded(v.isValid() ? v.value<T>() : setting.fallback);
    }
    // The stored value bounded likewise; none when absent, or not a number for a numeric
    // entry (an optional budget: absent means "the preset's").
    template <typename T> static std::optional<T> stored(const Setting<T>& setting) {
        const QVariant v = read(setting.key);
        if (!v.isValid()) return std::nullopt;
        bool ok = true;
        T n{};
        if constexpr (std::is_integral_v<T> && !std::is_same_v<T, bool>)
            n = std::is_signed_v<T> ? T(v.toLongLong(&ok)) : T(v.toULongLong(&ok));
        else if constexpr (std::is_floating_point_v<T>)
            n = T(v.toDouble(&ok));
        else
            n = v.value<T>();
        return ok ? std::optional<T>(setting.bounded(n)) : std::nullopt;
    }
    static bool contains(const QString& key) { return read(key).isValid(); }
    template <typename T> static void setValue(const Setting<T>& setting, const T& value) {
        const QVariant old = read(setting.key);
        if (old.isValid() && old.value<T>() == value) return;
        write(setting.key, QVariant::fromValue(value));
        emit instance()->changed(setting.key);
    }
    template <typename T> static void remove(const Setting<T>& setting) {
        if (!contains(setting.key)) return;
        write(setting.key, QVariant());
        emit instance()->changed(setting.key);
    }
    // The settings file's path (its folder is made private at start-up).
    static QString fileName();

signals:
    // A setting's stored value changed (SettingsTable's key).
    void changed(const QString& key);

private:
    Settings() = default;
    static QVariant read(const QString& key);                     // invalid when absent
    static void write(const QString& key, const QVariant& value); // invalid: remove
};
