#include <QTemporaryDir>
#include <QTest>

#include <fstream>

#include <k3/doctor.hpp>

class TestDoctor : public QObject {
    Q_OBJECT
private slots:
    void measuresDiskWithinBounds();
    void refusesUnalignedBlock();
    void emptyFolderSuggestsDownload();
    void checkpointFolderSuggestsPack();
    void jsonHasEveryCheck();
};

static k3::DiskBenchOptions smallBench() {
    k3::DiskBenchOptions o;
    o.blockBytes = 1u << 20;
    o.fileBytes = 16u << 20;
    o.maxSecondsPerDepth = 0.2;
    o.maxBytesPerDepth = 64u << 20;
    return o;
}

void TestDoctor::measuresDiskWithinBounds() {
    QTemporaryDir dir;
    QVERIFY(dir.isValid());
    const k3::DiskBandwidth bw = k3::measureDiskBandwidth(dir.path().toStdString(), smallBench());
    QVERIFY(bw.gbPerSecondQd1 > 0);
    QVERIFY(bw.gbPerSecondQd16 > 0);
    QCOMPARE(bw.blockBytes, std::uint64_t(1u << 20));
    QCOMPARE(bw.bytesRead % (1u << 20), std::uint64_t(0)); // whole blocks only
    // Each depth stops at its byte bound, overshooting by at most one block per thread.
    QVERIFY(bw.bytesRead <= 2 * (64u << 20) + 17 * (1u << 20));
    // The scratch file is gone afterwards.
    QCOMPARE(QDir(dir.path()).entryList(QDir::Files | QDir::Hidden).size(), 0);
}

void TestDoctor::refusesUnalignedBlock() {
    QTemporaryDir dir;
    k3::DiskBenchOptions o = smallBench();
    o.blockBytes = 1000;
    QVERIFY_THROWS_EXCEPTION(std::runtime_error,
                             k3::measureDiskBandwidth(dir.path().toStdString(), o));
}

void TestDoctor::emptyFolderSuggestsDownload() {
    QTemporaryDir dir;
    k3::DoctorOptions o;
    o.modelDir = (dir.path() + QStringLiteral("/k3model")).toStdString(); // not created yet
    o.measureDisk = false;
    const k3::DoctorReport r = k3::runDoctor(o);
    QVERIFY(r.canRun()); // CI and dev machines have 24 GB
    QVERIFY(!r.checkpointPresent);
    QVERIFY(r.freeBytes.has_value());
    QCOMPARE(QString::fromStdString(r.nextCommand), QStringLiteral("k3 download ") + dir.path() + "/k3model");
    bool sawSpace = false;
    for (const auto& c : r.checks)
        if (c.name == "disk-space") {
            sawSpace = true;
            // No machine here has 1.56 TB free, so the shortfall must be stated.
            if (*r.freeBytes < k3::kCheckpointBytes) {
                QCOMPARE(c.status, k3::CheckStatus::Warning);
                QVERIFY(QString::fromStdString(c.verdict).contains(QStringLiteral("short by")));
            }
        }
    QVERIFY(sawSpace);
}

void TestDoctor::checkpointFolderSuggestsPack() {
    QTemporaryDir dir;
    std::ofstream(dir.filePath(QStringLiteral("config.json")).toStdString()) << "{}";
    std::ofstream(dir.filePath(QStringLiteral("model.safetensors.index.json")).toStdString()) << "{}";
    k3::DoctorOptions o;
    o.modelDir = dir.path().toStdString();
    o.measureDisk = false;
    const k3::DoctorReport r = k3::runDoctor(o);
    QVERIFY(r.checkpointPresent);
    QCOMPARE(QString::fromStdString(r.nextCommand),
             QStringLiteral("k3 pack %1 %1/trunk").arg(dir.path()));
}

void TestDoctor::jsonHasEveryCheck() {
    QTemporaryDir dir;
    k3::DoctorOptions o;
    o.modelDir = dir.path().toStdString();
    o.disk = smallBench();
    const k3::DoctorReport r = k3::runDoctor(o);
    const QString json = QString::fromStdString(k3::doctorReportJson(r));
    for (const char* key : {"\"cpu\"", "\"memory\"", "\"disk-space\"", "\"disk-speed\"",
                            "\"gb_per_s_qd16\"", "\"next_command\"", "\"can_run\": true"})
        QVERIFY2(json.contains(QLatin1String(key)), key);
    QCOMPARE(r.checks.size(), std::size_t(4)); // cpu, memory, disk-space, disk-speed
}

QTEST_GUILESS_MAIN(TestDoctor)
#include "tst_doctor.moc"
