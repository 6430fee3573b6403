// The k3 CLI's helpers that need no process: id lists, sampling defaults, terminal-safe
// text, and the report formatters.
#include <QTest>

#include "cli/CliSupport.hpp"
#include "cli/Commands.hpp"

class TestCliSupport : public QObject {
    Q_OBJECT
private slots:
    void idListParses();
    void idListRefusesNamingTheItem();
    void samplingFollowsTheSeed();
    void terminalSafeEscapesControls();
    void formatters();
};

void TestCliSupport::idListParses() {
    QCOMPARE(k3cli::parseIdList("1008,10484, 318 ,0"),
             (std::vector<std::int32_t>{1008, 10484, 318, 0}));
    QCOMPARE(k3cli::parseIdList("7"), (std::vector<std::int32_t>{7}));
}

void TestCliSupport::idListRefusesNamingTheItem() {
    const auto refused = [](const std::string& text) -> std::string {
        try {
            k3cli::parseIdList(text);
        } catch (const k3cli::CommandError& e) {
            if (e.exitCode != k3cli::kExitUsage) return "wrong exit code";
            return e.message;
        }
        return "accepted";
    };
    QVERIFY(refused("1,-2").find("\"-2\" (item 2)") != std::string::npos);
    QVERIFY(refused("1,2,").find("\"\" (item 3)") != std::string::npos);
    QVERIFY(refused("").find("(item 1)") != std::string::npos);
    QVERIFY(refused("1;2").find("\"1;2\" (item 1)") != std::string::npos);
    QVERIFY(refused("99999999999").find("(item 1)") != std::string::npos); // overflows int32
}

void TestCliSupport::samplingFollowsTheSeed() {
    k3cli::SamplingArgs a;
    QCOMPARE(k3cli::resolveSampling(a).sampling, false); // greedy by default
    a.seed = 5;                                          // any sampling flag turns it on
    k3cli::ResolvedSampling r = k3cli::resolveSampling(a);
    QCOMPARE(r.sampling, true);
    QCOMPARE(r.temperature, 1.0f);
    QCOMPARE(r.topP, 0.95f);
    QCOMPARE(r.seed, std::uint64_t(5));
    a.topP = 0.5;
    QCOMPARE(k3cli::resolveSampling(a).topP, 0.5f);
    a.greedy = true; // --greedy wins
    QCOMPARE(k3cli::resolveSampling(a).sampling, false);
    k3cli::SamplingArgs t;
    t.temperature = 0.0; // temperature 0 is argmax
    QCOMPARE(k3cli::resolveSampling(t).sampling, false);
}

void TestCliSupport::terminalSafeEscapesControls() {
    QCOMPARE(k3cli::terminalSafe("a\x1b[2Jb\n\tc"), std::string("a\\x1b[2Jb\n\tc"));
    QCOMPARE(k3cli::terminalSafe("\r\x7f"), std::string("\\x0d\\x7f"));
    QCOMPARE(k3cli::terminalSafe("x\xc2\x9b"
                                 "31m"),
             std::string("x\\u009b31m")); // C1 CSI
    QCOMPARE(k3cli::terminalSafe("caf\xc3\xa9 \xc2\xa0"), std::string("caf\xc3\xa9 \xc2\xa0"));
}

void TestCliSupport::formatters() {
    QCOMPARE(k3cli::formatBytes(8.24e9), std::string("8.24 GB"));
    QCOMPARE(k3cli::formatBytes(1.5e6), std::string("1.5 MB"));
    QCOMPARE(k3cli::formatBytes(17), std::string("17 B"));
    QCOMPARE(k3cli::formatDuration(0.42), std::string("0.42 s"));
    QCOMPARE(k3cli::formatDuration(192), std::string("3 min 12 s"));
    QCOMPARE(k3cli::formatDuration(3840), std::string("1 h 04 min"));
    QVERIFY(k3cli::peakRssBytes() > 100000);
}

QTEST_GUILESS_MAIN(TestCliSupport)
#include "tst_clisupport.moc"
