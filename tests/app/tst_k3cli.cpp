#include <QDir>
#include <QFile>
#include <QJsonArray>
#include <QJsonDocument>
#include <QJsonObject>
#include <QProcess>
#include <QTemporaryDir>
#include <QTest>

#include <k3/presets.hpp>
#include <k3/version.hpp>

struct Run {
    int exitCode;
    QString out;
    QString err;
};

static Run runK3(const QStringList& args) {
    QProcess p;
    p.start(QStringLiteral(K3_CLI_PATH), args);
    if (!p.waitForFinished(20000)) return {-1, {}, QStringLiteral("timed out")};
    return {p.exitStatus() == QProcess::NormalExit ? p.exitCode() : -2,
            QString::fromUtf8(p.readAllStandardOutput()),
            QString::fromUtf8(p.readAllStandardError())};
}

class TestK3Cli : public QObject {
    Q_OBJECT
private slots:
    void versionPrintsAndExitsZero();
    void helpPrintsUsageAndExitsZero();
    void listPresetsNeedsNoModel();
    void unknownFlagIsUsageError();
    void doctorJsonReport();
    void doctorRefusesOutOfRangeSeconds();
    void doctorOpensTheCheckpoint();
};

void TestK3Cli::versionPrintsAndExitsZero() {
    const Run r = runK3({"--version"});
    QCOMPARE(r.exitCode, 0);
    QCOMPARE(r.out.trimmed(), QStringLiteral("k3 (k3chat) ") + QString::fromUtf8(k3::kVersion));
}

void TestK3Cli::helpPrintsUsageAndExitsZero() {
    const Run r = runK3({"--help"});
    QCOMPARE(r.exitCode, 0);
    QVERIFY2(r.out.contains(QStringLiteral("--list-presets")), qPrintable(r.out));
    QVERIFY(r.out.contains(QStringLiteral("Exit codes: 0 ok")));
}

void TestK3Cli::listPresetsNeedsNoModel() {
    const Run r = runK3({"--list-presets"});
    QCOMPARE(r.exitCode, 0);
    const QStringList lines = r.out.split(QLatin1Char('\n'), Qt::SkipEmptyParts);
    QCOMPARE(lines.size(), 8);
    QVERIFY2(lines.at(2).startsWith(QStringLiteral("laptop")), qPrintable(lines.at(2)));
    QVERIFY(lines.at(2).contains(QStringLiteral("3.00")));
}

void TestK3Cli::unknownFlagIsUsageError() {
    const Run r = runK3({"--no-such-flag"});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains(QStringLiteral("--no-such-flag")), qPrintable(r.err));
}

void TestK3Cli::doctorJsonReport() {
    QTemporaryDir dir;
    const Run r = runK3({"doctor", dir.path(), "--json", "--disk-seconds", "0.2"});
    QCOMPARE(r.exitCode, 0);
    QJsonParseError error{};
    const QJsonObject report = QJsonDocument::fromJson(r.out.toUtf8(), &error).object();
    QCOMPARE(error.error, QJsonParseError::NoError);
    QCOMPARE(report.value("can_run").toBool(), true);
    QCOMPARE(report.value("model_dir").toString(), dir.path());
    QCOMPARE(report.value("next_command").toString(), "k3 download " + dir.path());
    const QString preset = report.value("recommended_preset").toString();
    QVERIFY2(k3::findPreset(preset.toStdString()).has_value(), qPrintable(preset));
    QStringList names;
    for (const QJsonValue& c : report.value("checks").toArray())
        names << c.toObject().value("name").toString();
    QCOMPARE(names, (QStringList{"cpu", "memory", "disk-space", "disk-speed"}));
    QVERIFY(report.value("disk").toObject().value("gb_per_s_qd16").toDouble() > 0);
}

void TestK3Cli::doctorRefusesOutOfRangeSeconds() {
    const Run r = runK3({"doctor", "--disk-seconds", "100"});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains(QStringLiteral("disk-seconds")), qPrintable(r.err));
}

// Issue 22, point 11: `k3 doctor` used to say "[ok] Checkpoint: found" for a broken
// checkpoint. It opens it now: a readable one is ok (exit 0), a missing shard fails the
// check with the file named (exit 1).
void TestK3Cli::doctorOpensTheCheckpoint() {
    QTemporaryDir dir;
    const QDir src(QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_b"));
    for (const QString& f : src.entryList(QDir::Files))
        QVERIFY(QFile::copy(src.filePath(f), dir.filePath(f)));
    const Run good = runK3({"doctor", dir.path(), "--no-disk-test"});
    QCOMPARE(good.exitCode, 0);
    QVERIFY2(good.out.contains("[ok]   Checkpoint: readable at " + dir.path() +
                               " (522 tensors in 2 shard(s), 9 layers, routed experts MXFP4)\n"),
             qPrintable(good.out));

    QVERIFY(QFile::remove(dir.filePath(QStringLiteral("model-00002-of-00002.safetensors"))));
    const Run broken = runK3({"doctor", dir.path(), "--no-disk-test"});
    QCOMPARE(broken.exitCode, 1);
    QVERIFY2(broken.out.contains("[FAIL] Checkpoint: cannot be read: " + dir.path() +
                                 "/model-00002-of-00002.safetensors: cannot open: No such file "
                                 "or directory\n"),
             qPrintable(broken.out));
    QVERIFY2(broken.out.contains("The checkpoint at " + dir.path() +
                                 " cannot be read; see the failed check above.\n"),
             qPrintable(broken.out));
    QVERIFY2(!broken.out.contains(QStringLiteral("Next:")), qPrintable(broken.out));
}

QTEST_GUILESS_MAIN(TestK3Cli)
#include "tst_k3cli.moc"
