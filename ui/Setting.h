#pragma once

#include <QString>
#include <QStringList>

#include <algorithm>
#include <optional>
#include <type_traits>
#include <utility>

// One entry of the settings table (SettingsTable.h): the QSettings key it is kept under,
// its type, the value when it is absent, and the values it may take. Read and written
// only through Settings, so a hand-edited settings file never breaks the app.
template <typename T> struct Setting {
    QString key;               // "group/name": the same keys every earlier k3chat wrote
    T fallback{};              // the value while the key is absent
    std::optional<T> min, max; // numbers: a value read back is brought inside
    QStringList choices;       // text: a value read back outside them reads as fallback

    Setting(QString key_, T fallback_ = {}, std::optional<T> min_ = {}, std::optional<T> max_ = {},
            QStringList choices_ = {})
        : key(std::move(key_)), fallback(std::move(fallback_)), min(std::move(min_)),
          max(std::move(max_)), choices(std::move(choices_)) {}

    // `value` inside the range or among the choices; the fallback for an unknown choice.
    T bounded(const T& value) const {
        if constexpr (std::is_arithmetic_v<T> && !std::is_same_v<T, bool>) {
            T v = value;
            if (min) v = std::max(v, *min);
            if (max) v = std::min(v, *max);
            return v;
        } else if constexpr (std::is_same_v<T, QString>) {
            return choices.isEmpty() || choices.contains(value) ? value : fallback;
        } else {
            return value;
        }
    }
};
