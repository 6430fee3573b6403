#include <QFile>
#include <QTest>

#include <k3/system.hpp>

class TestSystem : public QObject {
    Q_OBJECT
private slots:
    void parsesMeminfo();
    void refusesIncompleteMeminfo();
    void readsThisMachine();
    void cpuFeaturesAgreeWithKernel();
};

void TestSystem::parsesMeminfo() {
    const auto info = k3::parseMeminfo("MemTotal:       16318412 kB\n"
                                       "MemFree:         1234567 kB\n"
                                       "MemAvailable:   15400000 kB\n"
                                       "Buffers:          100 kB\n");
    QVERIFY(info.has_value());
    QCOMPARE(info->totalBytes, std::uint64_t(16318412) * 1024);
    QCOMPARE(info->availableBytes, std::uint64_t(15400000) * 1024);
}

void TestSystem::refusesIncompleteMeminfo() {
    QVERIFY(!k3::parseMeminfo("MemTotal: 100 kB\n").has_value());
    QVERIFY(!k3::parseMeminfo("MemTotal: 100 kB\nMemAvailable: lots kB\n").has_value());
    QVERIFY(!k3::parseMeminfo("MemTotal: 100 kB\nMemAvailable: 50 MB\n").has_value());
    QVERIFY(!k3::parseMeminfo("MemTotalX: 100 kB\nMemAvailable: 50 kB\n").has_value());
    QVERIFY(!k3::parseMeminfo("").has_value());
}

void TestSystem::readsThisMachine() {
    const auto info = k3::readMemoryInfo();
    QVERIFY(info.has_value());
    QVERIFY(info->totalBytes > 0);
    QVERIFY(info->availableBytes <= info->totalBytes);
}

// The kernel's /proc/cpuinfo flags are an independent reading of the same CPUID bits.
void TestSystem::cpuFeaturesAgreeWithKernel() {
    QFile cpuinfo(QStringLiteral("/proc/cpuinfo"));
    QVERIFY(cpuinfo.open(QIODevice::ReadOnly));
    QByteArray flags;
    for (const QByteArray& line : cpuinfo.readAll().split('\n'))
        if (line.startsWith("flags")) {
            flags = " " + line.mid(line.indexOf(':') + 1).trimmed() + " ";
            break;
        }
    QVERIFY(!flags.isEmpty());
    const k3::CpuFeatures f = k3::detectCpuFeatures();
    QCOMPARE(f.avx2, flags.contains(" avx2 "));
    QCOMPARE(f.fma, flags.contains(" fma "));
    QCOMPARE(f.avx512f, flags.contains(" avx512f "));
}

QTEST_GUILESS_MAIN(TestSystem)
#include "tst_system.moc"
