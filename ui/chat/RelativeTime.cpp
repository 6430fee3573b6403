#include "chat/RelativeTime.h"

#include <QCoreApplication>
#include <QLocale>

QString relativeTime(const QDateTime& when, const QDateTime& now) {
    const auto tr = [](const char* text, int n = -1) {
        return QCoreApplication::translate("RelativeTime", text, nullptr, n);
    };
    const qint64 seconds = when.secsTo(now);
    if (seconds < 60) return tr("just now");
    if (seconds < 3600) return tr("%n min ago", int(seconds / 60));
    if (seconds < 24 * 3600) return tr("%n h ago", int(seconds / 3600));
    // Past a day, calendar days count: 30 h ago may have been the day before yesterday.
    const qint64 days = when.toLocalTime().date().daysTo(now.toLocalTime().date());
    if (days <= 1) return tr("yesterday");
    if (days < 7) return tr("%n days ago", int(days));
    return QLocale().toString(when.toLocalTime().date(), QLocale::ShortFormat);
}
