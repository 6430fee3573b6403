// The real `k3` binary under injected I/O faults (K3_FAULT_INJECT, the engine's test
// hook) and --dump-cache-trace. Exit codes as DESIGN.md gives them: an expert that
// cannot be read makes the run invalid (exit 4, after the full report); a trunk read
// error or a full disk while packing is a failure naming what broke (exit 1).
#include "JsonFile.hpp"
#include "K3Process.hpp"

#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include <fstream>
#include <set>
#include <utility>

#include <k3/chat.hpp>

namespace {

const QString kModels = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/");

QProcessEnvironment faultEnv(const QString& spec) {
    QProcessEnvironment env = QProcessEnvironment::systemEnvironment();
    env.insert(QStringLiteral("K3_FAULT_INJECT"), spec);
    return env;
}

QByteArray readAll(const QString& path) {
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

} // namespace

class TestK3Faults : public QObject {
    Q_OBJECT
private slots:
    void expertReadFaultGivesExitFourAfterTheReport_data();
    void expertReadFaultGivesExitFourAfterTheReport();
    void trunkReadErrorNamesTheLayerAndExitsOne();
    void packOutOfSpaceLeavesNoUsableTrunk();
    void transcriptOutOfSpaceKeepsThePreviousTranscript();
    void malformedFaultSpecExitsTwo();
    void shippedBinaryTakesNoFaultFromTheEnvironment();
    void dumpCacheTraceWritesOneRecordPerRequest();
    void dumpCacheTraceWithoutACacheIsAUsageError();
};

void TestK3Faults::expertReadFaultGivesExitFourAfterTheReport_data() {
    QTest::addColumn<QString>("spec");
    QTest::addColumn<QString>("reader"); // K3_EXPERT_IO: the batch's reads in flight together
    for (const char* reader : {"threads", "uring"}) {
        QTest::addRow("eio, %s", reader)
            << QStringLiteral("kind:expert,error:eio,after:3") << QString(reader);
        QTest::addRow("short read, %s", reader)
            << QStringLiteral("kind:expert,error:short,after:3") << QString(reader);
    }
}

void TestK3Faults::expertReadFaultGivesExitFourAfterTheReport() {
    QFETCH(QString, spec);
    QFETCH(QString, reader);
    QTemporaryDir tmp;
    const QString out = tmp.filePath("run.json");
    QProcessEnvironment env = faultEnv(spec);
    env.insert(QStringLiteral("K3_EXPERT_IO"), reader);
    const K3Run r = runK3({kModels + "k3_tiny_b", "--ids", "5,6,7", "--gen", "4", "--cache-gb",
                           "0.0001", "--out", out},
                          {}, env);
    if (reader == "uring" && r.exitCode == 1 && r.err.contains("through io_uring were asked for"))
        QSKIP("this kernel refuses io_uring");
    QVERIFY2(r.exitCode == 4, qPrintable(QString::number(r.exitCode) + " " + r.err));
    QVERIFY2(r.err.contains("TEST HOOK: fault injection armed"), qPrintable(r.err));
    // The full report came first: every step, the summary lines, the report file.
    QVERIFY2(r.out.contains("4 tokens in "), qPrintable(r.out));
    QVERIFY2(r.out.contains("PEAK RSS for the whole run"), qPrintable(r.out));
    QVERIFY2(r.out.contains("run report: " + out), qPrintable(r.out));
    QVERIFY2(r.err.contains("RUN INVALID: ") &&
                 r.err.contains("routed expert(s) could not be loaded"),
             qPrintable(r.err));
    const nlohmann::json report = readJsonFile(out);
    QVERIFY(report.is_object());
    QCOMPARE(report["valid"].get<bool>(), false);
    QVERIFY(report["dropped_experts"].get<int>() > 0);
    QCOMPARE(report["ids"].size(), std::size_t(4));
    // The 3 prompt positions were one chunk, and the fault (the 4th expert read, one slot)
    // landed inside it.
    QCOMPARE(report["prefill"]["chunks"].get<int>(), 1);
    QCOMPARE(report["prefill"]["positions"].get<int>(), 3);
    QVERIFY(report["cache"]["failed_reads"].get<int>() >= report["dropped_experts"].get<int>());
    // Several reads were in flight when the fault landed, and none was left behind (the
    // sanitizer builds check nothing leaked).
    QCOMPARE(report["cache"]["expert_io"]["mode"].get<std::string>(), reader.toStdString());
    QVERIFY(report["cache"]["max_in_flight"].get<int>() > 1);
    QVERIFY(report["invalid_reasons"][0].get<std::string>().find("could not be loaded") !=
            std::string::npos);
}

void TestK3Faults::trunkReadErrorNamesTheLayerAndExitsOne() {
    QTemporaryDir tmp;
    const QString dir = kModels + "k3_tiny_b";
    const QString trunk = tmp.filePath("trunk");
    QCOMPARE(runK3({"pack", dir, trunk}).exitCode, 0);
    const K3Run load = runK3(
        {dir, "--trunk", trunk, "--ids", "5,6", "--gen", "2", "--out", tmp.filePath("a.json")}, {},
        faultEnv("kind:trunk,error:eio"));
    QCOMPARE(load.exitCode, 1);
    QVERIFY2(load.err.contains("trunk layer 0: ") && load.err.contains("Input/output error"),
             qPrintable(load.err));
    // A short read of the fifth layer (k3's smallest trunk budget, 0.1 GB, pins all nine
    // layers of this model at load; tst_fault_injection covers a layer failing mid-run).
    const K3Run run = runK3({dir, "--trunk", trunk, "--trunk-gb", "0.1", "--ids", "5,6", "--gen",
                             "2", "--out", tmp.filePath("b.json")},
                            {}, faultEnv("kind:trunk,error:short,after:4"));
    QCOMPARE(run.exitCode, 1);
    QVERIFY2(run.err.contains("cannot load the model in " + dir + ": trunk layer 4: short read") &&
                 run.err.contains("truncated trunk.bin? re-pack it"),
             qPrintable(run.err));
    QVERIFY(!QFile::exists(tmp.filePath("b.json"))); // a failed run writes no report
}

void TestK3Faults::packOutOfSpaceLeavesNoUsableTrunk() {
    QTemporaryDir tmp;
    const QString dir = kModels + "k3_tiny_b";
    const QString trunk = tmp.filePath("trunk");
    const K3Run pack = runK3({"pack", dir, trunk}, {}, faultEnv("kind:pack,error:enospc,after:2"));
    QCOMPARE(pack.exitCode, 1);
    QVERIFY2(pack.err.contains("k3 pack: ") && pack.err.contains("No space left on device"),
             qPrintable(pack.err));
    QVERIFY(!QFile::exists(trunk + "/trunk.json"));
    QVERIFY(!QFile::exists(trunk + "/trunk.bin"));
    const K3Run run = runK3({dir, "--trunk", trunk, "--ids", "5", "--gen", "1"});
    QCOMPARE(run.exitCode, 1);
    QVERIFY2(run.err.contains("trunk.json does not exist: pack the trunk first (k3 pack " + dir +
                              " " + trunk + ")"),
             qPrintable(run.err));
}

void TestK3Faults::transcriptOutOfSpaceKeepsThePreviousTranscript() {
    QTemporaryDir tmp;
    const QString history = tmp.filePath("chat.jsonl");
    const QStringList args{kModels + "k3_tiny_a", "--chat", "--no-think", "--max-tokens", "3",
                           "--history",           history};
    QCOMPARE(runK3(args, "hi\n").exitCode, 0);
    const QByteArray before = readAll(history);
    QCOMPARE(k3::readTranscript(history.toStdString()).size(), std::size_t(2));
    const K3Run full = runK3(args, "again\n", faultEnv("kind:transcript,error:enospc"));
    // The conversation goes on and the warning says what was lost; the session does not
    // end as a success, since the file is not the conversation.
    QCOMPARE(full.exitCode, 1);
    QVERIFY2(full.err.contains("the transcript was not saved: cannot write " + history) &&
                 full.err.contains("No space left on device"),
             qPrintable(full.err));
    QVERIFY2(full.err.endsWith("k3: error: --history " + history +
                               ": the last save failed (see the warning above), so the file does "
                               "not hold the whole conversation\n"),
             qPrintable(full.err));
    QCOMPARE(readAll(history), before);
    QCOMPARE(QDir(tmp.path()).entryList(QDir::Files | QDir::Hidden).size(), 1);
}

void TestK3Faults::malformedFaultSpecExitsTwo() {
    const K3Run r = runK3({"--version"}, {}, faultEnv("kind:disk,error:eio"));
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("K3_FAULT_INJECT=\"kind:disk,error:eio\": unknown kind \"disk\""),
             qPrintable(r.err));
}

// The hook's environment variable is read only by the test build (k3_with_test_hooks):
// the shipped k3 runs as if it were unset, even with a rule that fails every read.
void TestK3Faults::shippedBinaryTakesNoFaultFromTheEnvironment() {
    QTemporaryDir tmp;
    const auto run = [&](const QString& program, const QString& name,
                         const QProcessEnvironment& env) {
        const QString out = tmp.filePath(name);
        const K3Run r = runProgram(program,
                                   {kModels + "k3_tiny_b", "--ids", "5,6,7", "--gen", "4",
                                    "--cache-gb", "0.0001", "--out", out},
                                   {}, env);
        return std::pair{r, readJsonFile(out)};
    };
    const QString shipped = QStringLiteral(K3_SHIPPED_CLI_PATH);
    const auto [clean, cleanReport] =
        run(shipped, "clean.json", QProcessEnvironment::systemEnvironment());
    QVERIFY2(clean.exitCode == 0, qPrintable(clean.err));
    QCOMPARE(cleanReport["ids"].size(), std::size_t(4));
    for (const char* spec : {"kind:expert,error:eio", "kind:disk,error:eio"}) {
        const auto [r, report] = run(shipped, QString(spec).replace(':', '_') + ".json",
                                     faultEnv(QString::fromLatin1(spec)));
        QVERIFY2(r.exitCode == 0, qPrintable(QString(spec) + ": " + r.err));
        QVERIFY2(!r.err.contains("K3_FAULT_INJECT") && !r.err.contains("TEST HOOK"),
                 qPrintable(r.err));
        QCOMPARE(QString::fromStdString(report["ids"].dump()),
                 QString::fromStdString(cleanReport["ids"].dump()));
        QCOMPARE(report["valid"].get<bool>(), true);
    }
    // The same rule in the test build does fail the run (so the check above can fail).
    const auto [hooked, hookedReport] =
        run(QStringLiteral(K3_CLI_PATH), "hooked.json", faultEnv("kind:expert,error:eio"));
    QCOMPARE(hooked.exitCode, 4);
    QCOMPARE(hookedReport["valid"].get<bool>(), false);
}

void TestK3Faults::dumpCacheTraceWritesOneRecordPerRequest() {
    QTemporaryDir tmp;
    const QString out = tmp.filePath("run.json");
    const QString traceDir = tmp.filePath("trace");
    const K3Run r = runK3({kModels + "k3_tiny_b", "--ids", "5,6,7", "--gen", "3", "--cache-gb",
                           "0.0001", "--dump-cache-trace", traceDir, "--out", out});
    QVERIFY2(r.exitCode == 0, qPrintable(r.err));
    const nlohmann::json report = readJsonFile(out);
    const auto requests = report["cache"]["requests"].get<std::uint64_t>();
    QVERIFY(requests > 0);
    QCOMPARE(report["cache_trace"]["records"].get<std::uint64_t>(), requests);
    QVERIFY2(r.out.contains(QString("cache trace: %1/expert_requests.tsv (%2 requests)")
                                .arg(traceDir)
                                .arg(requests)),
             qPrintable(r.out));

    const QList<QByteArray> lines = readAll(traceDir + "/expert_requests.tsv").split('\n');
    QCOMPARE(lines.first(), QByteArray("step\tlayer\texpert\thit"));
    QCOMPARE(lines.last(), QByteArray()); // ends with a newline
    QCOMPARE(std::uint64_t(lines.size() - 2), requests);
    std::map<QByteArray, std::uint64_t> kinds;
    qint64 lastStep = 0;
    for (int i = 1; i < lines.size() - 1; ++i) {
        const QList<QByteArray> f = lines[i].split('\t');
        QCOMPARE(f.size(), 4);
        const qint64 step = f[0].toLongLong();
        QVERIFY(step >= lastStep); // in request order
        lastStep = step;
        ++kinds[f[3]];
    }
    // The 3 prompt positions are one chunk (step 0), then 2 fed tokens (the last sampled
    // token is never fed): steps 0..2.
    QCOMPARE(lastStep, qint64(2));
    QCOMPARE(kinds[QByteArray("resident")], report["cache"]["resident_hits"].get<std::uint64_t>());
    QCOMPARE(kinds[QByteArray("prefetch")], report["cache"]["prefetch_hits"].get<std::uint64_t>());
    QCOMPARE(kinds[QByteArray("miss")], report["cache"]["misses"].get<std::uint64_t>());
    QCOMPARE(kinds.count(QByteArray("failed")), std::size_t(0));
    QCOMPARE(std::uint64_t(QFileInfo(traceDir + "/expert_trace.bin").size()), 8 * requests);
    QCOMPARE(readJsonFile(traceDir + "/expert_hist.json")["requests"].get<std::uint64_t>(),
             requests);
}

void TestK3Faults::dumpCacheTraceWithoutACacheIsAUsageError() {
    QTemporaryDir tmp;
    const K3Run r = runK3({kModels + "k3_tiny_b", "--ids", "5", "--gen", "1", "--dump-cache-trace",
                           tmp.filePath("trace")});
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains("this run has no expert cache"), qPrintable(r.err));
}

QTEST_GUILESS_MAIN(TestK3Faults)
#include "tst_k3faults.moc"
