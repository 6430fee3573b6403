// k3 --save-state / --load-state through the binary (issue 28): the state read in one
// process and continued in another gives the first-step logits (byte for byte) and the
// ids of one uninterrupted run, and run.json says how many positions were read and how
// many came from the file; a damaged state is refused with the file named, exit 1.
#include "K3Process.hpp"

#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

namespace {

const QString kModel = QStringLiteral(K3_SOURCE_DIR "/tests/fixtures/models/k3_tiny_a");

QString idList(int first, int n) {
    QStringList ids;
    for (int i = first; i < first + n; ++i) ids << QString::number((i * 53 + 7) % 800);
    return ids.join(QLatin1Char(','));
}

nlohmann::json report(const QString& path) {
    QFile f(path);
    if (!f.open(QIODevice::ReadOnly)) return {};
    return nlohmann::json::parse(f.readAll().toStdString(), nullptr, false);
}

QByteArray bytes(const QString& path) {
    QFile f(path);
    return f.open(QIODevice::ReadOnly) ? f.readAll() : QByteArray();
}

} // namespace

class TestK3State : public QObject {
    Q_OBJECT
private slots:
    void continuesInAnotherProcess();
    void goesOnGeneratingWithNoNewTokens();
    void damagedStateIsRefused();
    void genZeroNeedsSaveState();
    void stateCacheServesALaterPrompt();

private:
    QTemporaryDir tmp_;
    QString path(const char* name) const { return tmp_.filePath(QLatin1String(name)); }
    // `k3 kModel ARGS --out NAME.json`, exit 0 asserted by the caller.
    K3Run run(const QStringList& args, const char* out) const {
        return runK3(QStringList{kModel} << args << QStringLiteral("--out") << path(out));
    }
};

void TestK3State::continuesInAnotherProcess() {
    const K3Run whole = run({"--ids", idList(0, 37) + "," + idList(37, 9), "--gen", "8",
                             "--dump-logits", path("whole.f32")},
                            "whole.json");
    QVERIFY2(whole.exitCode == 0, qPrintable(whole.err));
    const K3Run first =
        run({"--ids", idList(0, 37), "--gen", "0", "--save-state", path("p.k3state")}, "p.json");
    QVERIFY2(first.exitCode == 0, qPrintable(first.err));
    QVERIFY2(first.out.contains(QStringLiteral("state: ") + path("p.k3state") +
                                QStringLiteral(" (37 positions)")),
             qPrintable(first.out));
    const nlohmann::json saved = report(path("p.json"));
    QCOMPARE(saved["state"]["saved_positions"].get<int>(), 37);
    QCOMPARE(saved["ids"].size(), std::size_t(0));

    const K3Run next = run({"--load-state", path("p.k3state"), "--ids", idList(37, 9), "--gen", "8",
                            "--dump-logits", path("next.f32")},
                           "next.json");
    QVERIFY2(next.exitCode == 0, qPrintable(next.err));
    const nlohmann::json a = report(path("whole.json")), b = report(path("next.json"));
    QCOMPARE(b["prefill"]["positions"].get<int>(), 9);
    QCOMPARE(b["prefill"]["restored_positions"].get<int>(), 37);
    QCOMPARE(b["state"]["restored_positions"].get<int>(), 37);
    QCOMPARE(a["prefill"]["positions"].get<int>(), 46);
    QVERIFY2(b["ids"] == a["ids"], b["ids"].dump().c_str());
    QCOMPARE(b["ids"].size(), std::size_t(8));
    const QByteArray logits = bytes(path("whole.f32"));
    QCOMPARE(logits.size(), qsizetype(896 * 4));
    QVERIFY(bytes(path("next.f32")) == logits);
}

void TestK3State::goesOnGeneratingWithNoNewTokens() {
    const K3Run plain = run({"--ids", idList(0, 20), "--gen", "6"}, "plain.json");
    QVERIFY2(plain.exitCode == 0, qPrintable(plain.err));
    const K3Run save =
        run({"--ids", idList(0, 20), "--gen", "0", "--save-state", path("q.k3state")}, "q.json");
    QVERIFY2(save.exitCode == 0, qPrintable(save.err));
    const K3Run on = run({"--load-state", path("q.k3state"), "--gen", "6"}, "on.json");
    QVERIFY2(on.exitCode == 0, qPrintable(on.err));
    const nlohmann::json r = report(path("on.json"));
    QCOMPARE(r["prefill"]["positions"].get<int>(), 0);
    const nlohmann::json want = report(path("plain.json"))["ids"];
    QCOMPARE(want.size(), std::size_t(6));
    QVERIFY2(r["ids"] == want, r["ids"].dump().c_str());
}

void TestK3State::damagedStateIsRefused() {
    const K3Run save =
        run({"--ids", idList(0, 12), "--gen", "0", "--save-state", path("d.k3state")}, "d.json");
    QVERIFY2(save.exitCode == 0, qPrintable(save.err));
    QByteArray b = bytes(path("d.k3state"));
    b[b.size() - 3] = char(b[b.size() - 3] ^ 0x10); // inside the last section
    QFile f(path("d.k3state"));
    QVERIFY(f.open(QIODevice::WriteOnly | QIODevice::Truncate));
    f.write(b);
    f.close();
    const K3Run bad = run({"--load-state", path("d.k3state"), "--gen", "2"}, "bad.json");
    QCOMPARE(bad.exitCode, 1);
    QVERIFY2(bad.err.startsWith(QStringLiteral("k3: error: ") + path("d.k3state") +
                                QStringLiteral(": section \"layer 13 rope\" fails its checksum")),
             qPrintable(bad.err));
    QVERIFY(!QFile::exists(path("bad.json")));
}

void TestK3State::genZeroNeedsSaveState() {
    const K3Run r = run({"--ids", idList(0, 5), "--gen", "0"}, "zero.json");
    QCOMPARE(r.exitCode, 2);
    QVERIFY2(r.err.contains(QStringLiteral("--gen 0 generates nothing")), qPrintable(r.err));
}

// --state-cache: a run keeps its state in the folder; a later run whose prompt starts
// with those ids restores them and reads only the rest, with the ids of a plain run.
void TestK3State::stateCacheServesALaterPrompt() {
    const QString cache = path("cache");
    const K3Run plain =
        run({"--ids", idList(0, 37) + "," + idList(37, 9), "--gen", "8"}, "plain.json");
    QVERIFY2(plain.exitCode == 0, qPrintable(plain.err));
    const K3Run first =
        run({"--ids", idList(0, 37), "--gen", "0", "--state-cache", cache}, "cache1.json");
    QVERIFY2(first.exitCode == 0, qPrintable(first.err));
    QCOMPARE(report(path("cache1.json"))["state_cache"]["states_saved"].get<int>(), 1);
    QCOMPARE(QDir(cache).entryList({QStringLiteral("*.k3state")}).size(), 1);
    const K3Run second = run({"--ids", idList(0, 37) + "," + idList(37, 9), "--gen", "8",
                              "--state-cache", cache, "--state-cache-gb", "1"},
                             "cache2.json");
    QVERIFY2(second.exitCode == 0, qPrintable(second.err));
    const nlohmann::json r = report(path("cache2.json"));
    QCOMPARE(r["prefill"]["positions"].get<int>(), 9);
    QCOMPARE(r["prefill"]["restored_positions"].get<int>(), 37);
    QCOMPARE(r["state_cache"]["restored_positions"].get<int>(), 37);
    QVERIFY2(r["ids"] == report(path("plain.json"))["ids"], r["ids"].dump().c_str());
    // --state-cache-gb needs --state-cache.
    const K3Run lone = run({"--ids", "1,2", "--gen", "1", "--state-cache-gb", "1"}, "lone.json");
    QCOMPARE(lone.exitCode, 2);
    QVERIFY2(lone.err.contains(QStringLiteral("--state-cache")), qPrintable(lone.err));
}

QTEST_GUILESS_MAIN(TestK3State)
#include "tst_k3state.moc"
