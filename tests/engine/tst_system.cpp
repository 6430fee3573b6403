#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include <k3/system.hpp>

class TestSystem : public QObject {
    Q_OBJECT
private slots:
    void parsesMeminfo();
    void refusesIncompleteMeminfo();
    void readsThisMachine();
    void cgroupV2LimitBindsBelowMemAvailable();
    void cgroupV1LimitBindsBelowMemAvailable();
    void cgroupWithoutLimitLeavesMemAvailable();
    void cgroupParentLimitCounts();
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

namespace {
// A stub root: ROOT/proc/meminfo, ROOT/proc/self/cgroup and cgroup files, read by
// readMemoryInfo(ROOT) through the same code as a real run.
void put(const QString& root, const QString& rel, const QByteArray& text) {
    const QString path = root + "/" + rel;
    QVERIFY(QDir().mkpath(QFileInfo(path).path()));
    QFile f(path);
    QVERIFY(f.open(QIODevice::WriteOnly));
    QCOMPARE(f.write(text), text.size());
}
const QByteArray kMeminfo = "MemTotal:       16000000 kB\nMemAvailable:   12000000 kB\n";
} // namespace

// The case: a 300 MB memory cgroup (docker --memory=300m) on a machine with
// 12 GB available: the plan must see about 300 MB minus usage, not 12 GB.
void TestSystem::cgroupV2LimitBindsBelowMemAvailable() {
    QTemporaryDir dir;
    const QString r = dir.path();
    put(r, "proc/meminfo", kMeminfo);
    put(r, "proc/self/cgroup", "0::/docker/abc\n");
    put(r, "sys/fs/cgroup/docker/abc/memory.max", "300000000\n");
    put(r, "sys/fs/cgroup/docker/abc/memory.current", "20000000\n");
    put(r, "sys/fs/cgroup/docker/abc/memory.stat", "anon 15000000\ninactive_file 4000000\n");
    const auto info = k3::readMemoryInfo(r.toStdString());
    QVERIFY(info.has_value());
    QCOMPARE(info->meminfoAvailableBytes, std::uint64_t(12000000) * 1024);
    // 300 MB limit - (20 MB usage - 4 MB inactive page cache) = 284 MB.
    QCOMPARE(info->availableBytes, std::uint64_t(284000000));
    QCOMPARE(info->cgroupLimitBytes.value_or(0), std::uint64_t(300000000));
    QCOMPARE(QString::fromStdString(info->boundBy),
             "cgroup v2 " + r +
                 "/sys/fs/cgroup/docker/abc/memory.max (limit 300.0 MB, usage 16.0 MB)");
}

void TestSystem::cgroupV1LimitBindsBelowMemAvailable() {
    QTemporaryDir dir;
    const QString r = dir.path();
    put(r, "proc/meminfo", kMeminfo);
    put(r, "proc/self/cgroup", "4:memory:/process_api/x\n3:cpuset:/\n0::/\n");
    put(r, "sys/fs/cgroup/memory/process_api/x/memory.limit_in_bytes", "300000000\n");
    put(r, "sys/fs/cgroup/memory/process_api/x/memory.usage_in_bytes", "100000000\n");
    put(r, "sys/fs/cgroup/memory/process_api/x/memory.stat", "cache 0\ntotal_inactive_file 0\n");
    // v1's "no limit" at the root is not a limit.
    put(r, "sys/fs/cgroup/memory/memory.limit_in_bytes", "9223372036854771712\n");
    put(r, "sys/fs/cgroup/memory/memory.usage_in_bytes", "5000000000\n");
    const auto info = k3::readMemoryInfo(r.toStdString());
    QVERIFY(info.has_value());
    QCOMPARE(info->availableBytes, std::uint64_t(200000000));
    QCOMPARE(QString::fromStdString(info->boundBy),
             "cgroup v1 " + r +
                 "/sys/fs/cgroup/memory/process_api/x/memory.limit_in_bytes (limit 300.0 MB, "
                 "usage 100.0 MB)");
}

void TestSystem::cgroupWithoutLimitLeavesMemAvailable() {
    QTemporaryDir dir;
    const QString r = dir.path();
    put(r, "proc/meminfo", kMeminfo);
    put(r, "proc/self/cgroup", "0::/user.slice\n");
    put(r, "sys/fs/cgroup/user.slice/memory.max", "max\n");
    put(r, "sys/fs/cgroup/user.slice/memory.current", "50000000\n");
    // A limit above MemAvailable does not bind either.
    put(r, "sys/fs/cgroup/memory.max", "64000000000\n");
    put(r, "sys/fs/cgroup/memory.current", "1000000000\n");
    const auto info = k3::readMemoryInfo(r.toStdString());
    QVERIFY(info.has_value());
    QCOMPARE(info->availableBytes, std::uint64_t(12000000) * 1024);
    QCOMPARE(QString::fromStdString(info->boundBy), QStringLiteral("MemAvailable"));
    QVERIFY(!info->cgroupLimitBytes.has_value());
}

// A child without a limit under a limited parent: the parent's headroom binds.
void TestSystem::cgroupParentLimitCounts() {
    QTemporaryDir dir;
    const QString r = dir.path();
    put(r, "proc/meminfo", kMeminfo);
    put(r, "proc/self/cgroup", "0::/box/inner\n");
    put(r, "sys/fs/cgroup/box/inner/memory.max", "max\n");
    put(r, "sys/fs/cgroup/box/inner/memory.current", "10000000\n");
    put(r, "sys/fs/cgroup/box/memory.max", "500000000\n");
    put(r, "sys/fs/cgroup/box/memory.current", "450000000\n");
    const auto info = k3::readMemoryInfo(r.toStdString());
    QVERIFY(info.has_value());
    QCOMPARE(info->availableBytes, std::uint64_t(50000000));
    QVERIFY(QString::fromStdString(info->boundBy)
                .endsWith("/sys/fs/cgroup/box/memory.max (limit 500.0 MB, usage 450.0 MB)"));
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
