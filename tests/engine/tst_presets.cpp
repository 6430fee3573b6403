#include <QTest>

#include <k3/presets.hpp>

class TestPresets : public QObject {
    Q_OBJECT
private slots:
    void tableMatchesSeed_data();
    void tableMatchesSeed();
    void unknownNameIsRefused();
    void recommendation_data();
    void recommendation();
    void tableListsEveryPreset();
};

void TestPresets::tableMatchesSeed_data() {
    QTest::addColumn<QString>("name");
    QTest::addColumn<double>("trunk");
    QTest::addColumn<double>("cache");
    QTest::newRow("ultra") << "ultra" << 2.5 << 0.31;
    QTest::newRow("laptop") << "laptop" << 3.0 << 1.0;
    QTest::newRow("desktop") << "desktop" << 16.0 << 10.0;
    QTest::newRow("workstation") << "workstation" << 60.0 << 30.0;
    QTest::newRow("server") << "server" << 110.0 << 13.0;
    QTest::newRow("max") << "max" << 110.0 << 109.0;
}

void TestPresets::tableMatchesSeed() {
    QFETCH(QString, name);
    QFETCH(double, trunk);
    QFETCH(double, cache);
    const auto p = k3::findPreset(name.toStdString());
    QVERIFY(p.has_value());
    QCOMPARE(p->trunkGB, trunk);
    QCOMPARE(p->cacheGB, cache);
}

void TestPresets::unknownNameIsRefused() {
    QVERIFY(!k3::findPreset("huge").has_value());
    QVERIFY(!k3::findPreset("").has_value());
    QVERIFY(!k3::findPreset("Laptop").has_value());
}

void TestPresets::recommendation_data() {
    QTest::addColumn<double>("availableGB");
    QTest::addColumn<QString>("expected"); // empty: refuse
    QTest::newRow("2 GB refuses") << 2.0 << QString();
    QTest::newRow("6 GB ultra") << 6.0 << "ultra";
    QTest::newRow("9.99 GB ultra") << 9.99 << "ultra";
    QTest::newRow("10 GB laptop") << 10.0 << "laptop";
    QTest::newRow("15.8 GB laptop") << 15.8 << "laptop";
    QTest::newRow("32 GB desktop") << 32.0 << "desktop";
    QTest::newRow("96 GB workstation") << 96.0 << "workstation";
    QTest::newRow("191 GB workstation") << 191.0 << "workstation";
    QTest::newRow("192 GB server") << 192.0 << "server";
    QTest::newRow("1 TB server, never max") << 1000.0 << "server";
}

void TestPresets::recommendation() {
    QFETCH(double, availableGB);
    QFETCH(QString, expected);
    const auto p = k3::recommendPreset(static_cast<std::uint64_t>(availableGB * 1e9));
    if (expected.isEmpty()) {
        QVERIFY(!p.has_value());
    } else {
        QVERIFY(p.has_value());
        QCOMPARE(QString::fromUtf8(p->name.data(), qsizetype(p->name.size())), expected);
    }
}

void TestPresets::tableListsEveryPreset() {
    const QString table = QString::fromStdString(k3::formatPresetTable());
    for (const auto& p : k3::presets())
        QVERIFY2(table.contains(QString::fromUtf8(p.name.data(), qsizetype(p.name.size()))),
                 p.name.data());
    QVERIFY(table.contains(QLatin1String("auto")));
    QCOMPARE(table.count(QLatin1Char('\n')), 8); // header + 6 presets + auto
}

QTEST_GUILESS_MAIN(TestPresets)
#include "tst_presets.moc"
