#include "Settings.h"

#include <QSettings>

Settings* Settings::instance() {
    static Settings settings;
    return &settings;
}

QVariant Settings::read(const QString& key) {
    return QSettings().value(key);
}

void Settings::write(const QString& key, const QVariant& value) {
    if (value.isValid())
        QSettings().setValue(key, value);
    else
        QSettings().remove(key);
}

QString Settings::fileName() {
    return QSettings().fileName();
}
