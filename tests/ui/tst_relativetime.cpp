#include <QLocale>
#include <QTest>

#include "chat/RelativeTime.h"

class TestRelativeTime : public QObject {
    Q_OBJECT
private slots:
    void readsLikeASidebar_data();
    void readsLikeASidebar();
};

namespace {
// A fixed "now" in June (no daylight saving change nearby), local time like the files'.
const QDateTime kNow(QDate(2026, 6, 10), QTime(14, 0));
} // namespace

void TestRelativeTime::readsLikeASidebar_data() {
    QTest::addColumn<QDateTime>("when");
    QTest::addColumn<QString>("expected");
    QTest::newRow("30 s") << kNow.addSecs(-30) << QStringLiteral("just now");
    QTest::newRow("a clock set back") << kNow.addSecs(300) << QStringLiteral("just now");
    QTest::newRow("1 min") << kNow.addSecs(-60) << QStringLiteral("1 min ago");
    QTest::newRow("59 min") << kNow.addSecs(-59 * 60 - 59) << QStringLiteral("59 min ago");
    QTest::newRow("2 h") << kNow.addSecs(-2 * 3600) << QStringLiteral("2 h ago");
    QTest::newRow("23 h") << kNow.addSecs(-23 * 3600) << QStringLiteral("23 h ago");
    QTest::newRow("1 day") << kNow.addDays(-1) << QStringLiteral("yesterday");
    // Past a day, calendar days: 34 h before is 04:00 the day before, 40 h is 22:00 the
    // day before that.
    QTest::newRow("34 h") << kNow.addSecs(-34 * 3600) << QStringLiteral("yesterday");
    QTest::newRow("40 h") << kNow.addSecs(-40 * 3600) << QStringLiteral("2 days ago");
    QTest::newRow("6 days") << kNow.addDays(-6) << QStringLiteral("6 days ago");
    QTest::newRow("10 days") << kNow.addDays(-10)
                             << QLocale().toString(QDate(2026, 5, 31), QLocale::ShortFormat);
}

void TestRelativeTime::readsLikeASidebar() {
    QFETCH(QDateTime, when);
    QFETCH(QString, expected);
    QCOMPARE(relativeTime(when, kNow), expected);
}

QTEST_GUILESS_MAIN(TestRelativeTime)
#include "tst_relativetime.moc"
