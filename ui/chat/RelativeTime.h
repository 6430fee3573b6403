#pragma once

#include <QDateTime>
#include <QString>

// How long ago `when` was, the way the sidebar shows it: "just now", "5 min ago",
// "2 h ago" (under a day), "yesterday", "3 days ago" (under a week), else the short
// date. `now` is a parameter so tests fix it; a time after `now` (a clock set back)
// reads "just now".
QString relativeTime(const QDateTime& when, const QDateTime& now);
