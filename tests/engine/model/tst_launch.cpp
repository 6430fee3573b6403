// The launch configuration: the budget a preset and size flags give (later flags win),
// the session options it opens with, and planLaunch: the plan from the files on disk,
// which is exactly the plan a Session opened from the same configuration holds.
#include <QDir>
#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include <k3/launch.hpp>
#include <k3/pack.hpp>
#include <k3/session.hpp>
#include <k3/system.hpp>

using k3::LaunchBudget;
using k3::MemoryFlag;

namespace {

const std::string kModels = K3_SOURCE_DIR "/tests/fixtures/models/";

std::uint64_t availableNow() {
    const auto mem = k3::readMemoryInfo();
    return mem ? mem->availableBytes : 0;
}

// Every planned figure (not `available`, read at another moment).
void comparePlans(const k3::MemoryPlan& a, const k3::MemoryPlan& b) {
    QCOMPARE(a.totalLayers, b.totalLayers);
    QCOMPARE(a.pinnedLayers, b.pinnedLayers);
    QCOMPARE(a.pinnedBytes, b.pinnedBytes);
    QCOMPARE(a.ringSlots, b.ringSlots);
    QCOMPARE(a.ringSlotBytes, b.ringSlotBytes);
    QCOMPARE(a.piecewise, b.piecewise);
    QCOMPARE(a.trunkDecodeBytes, b.trunkDecodeBytes);
    QCOMPARE(a.modelBytes, b.modelBytes);
    QCOMPARE(a.modelTablesStreamed, b.modelTablesStreamed);
    QCOMPARE(a.residentExpertBytes, b.residentExpertBytes);
    QCOMPARE(a.cacheSlots, b.cacheSlots);
    QCOMPARE(a.expertSlotBytes, b.expertSlotBytes);
    QCOMPARE(a.stateBytes, b.stateBytes);
    QCOMPARE(a.bufferBytes, b.bufferBytes);
    QCOMPARE(a.chunkPositions, b.chunkPositions);
    QCOMPARE(a.maxSpeculation, b.maxSpeculation);
    QCOMPARE(a.kvBytes, b.kvBytes);
    QCOMPARE(a.contextLength, b.contextLength);
    QCOMPARE(a.total(), b.total());
    QCOMPARE(a.budget.source, b.budget.source);
}

} // namespace

class TestLaunch : public QObject {
    Q_OBJECT
private slots:
    void budgetResolvesAndDescribesItself();
    void laterFlagsWin();
    void autoIsTheRecommendedPreset();
    void unknownPresetIsNamed();
    void theLaunchIsResolvedOnce();
    void validateNamesEveryFieldOutOfRange();
    void planLaunchIsTheSessionsPlan_data();
    void planLaunchIsTheSessionsPlan();
    void planLaunchGivesTheFiguresOfTheFiles();
    void automaticBudgetFillsTrunkFirst();
    void checkLaunchNamesWhatALoadWouldMiss();
    void checkLaunchRefusesAnotherModelsTrunk();
};

void TestLaunch::budgetResolvesAndDescribesItself() {
    const LaunchBudget resident = LaunchBudget::resident();
    QVERIFY(resident.isResident());
    QCOMPARE(resident.resolvedTrunkBytes(), std::numeric_limits<std::uint64_t>::max());
    QCOMPARE(resident.resolvedCacheBytes(), std::uint64_t(0));
    QCOMPARE(resident.describe(), std::string("everything resident"));

    const LaunchBudget laptop = LaunchBudget::ofPreset("laptop");
    QCOMPARE(laptop.resolvedTrunkBytes(), std::uint64_t(3'000'000'000ull));
    QCOMPARE(laptop.resolvedCacheBytes(), std::uint64_t(1'000'000'000ull));
    QVERIFY(!laptop.streamsModelTables());
    QCOMPARE(laptop.describe(), std::string("preset laptop"));

    LaunchBudget ultra = LaunchBudget::ofPreset("ultra");
    ultra.trunkBytes = 1'500'000'000ull;
    QCOMPARE(ultra.resolvedTrunkBytes(), std::uint64_t(1'500'000'000ull));
    QCOMPARE(ultra.resolvedCacheBytes(), std::uint64_t(310'000'000ull));
    QVERIFY(ultra.streamsModelTables()); // the preset's tables stay on disk
    QCOMPARE(ultra.describe(), std::string("preset ultra, trunk 1.50 GB"));

    const LaunchBudget bytes = LaunchBudget::ofBytes(3'000'000'000ull, 1'500'000'000ull);
    QCOMPARE(bytes.describe(), std::string("trunk 3.00 GB / cache 1.50 GB"));
    QVERIFY(bytes != laptop);
    QVERIFY(bytes == LaunchBudget::ofBytes(3'000'000'000ull, 1'500'000'000ull));
}

void TestLaunch::laterFlagsWin() {
    std::vector<MemoryFlag> flags{{MemoryFlag::Kind::Preset, "server", 0},
                                  {MemoryFlag::Kind::CacheGB, "", 40}};
    LaunchBudget b = k3::resolveMemoryFlags(flags, 0);
    QCOMPARE(b.preset, std::string("server"));
    QCOMPARE(b.resolvedTrunkBytes(), std::uint64_t(110'000'000'000ull));
    QCOMPARE(b.resolvedCacheBytes(), std::uint64_t(40'000'000'000ull));
    // And the other way round: the preset after the flag replaces it.
    flags = {{MemoryFlag::Kind::CacheGB, "", 40}, {MemoryFlag::Kind::Preset, "laptop", 0}};
    QCOMPARE(k3::resolveMemoryFlags(flags, 0), LaunchBudget::ofPreset("laptop"));
    QVERIFY(k3::resolveMemoryFlags({}, 0).isResident());
    // A lone size flag: only that number; no trunk budget keeps every layer pinned.
    flags = {{MemoryFlag::Kind::CacheGB, "", 2}};
    b = k3::resolveMemoryFlags(flags, 0);
    QCOMPARE(b, (LaunchBudget{{}, {}, 2'000'000'000ull}));
    QCOMPARE(b.resolvedTrunkBytes(), std::numeric_limits<std::uint64_t>::max());
    flags = {{MemoryFlag::Kind::Preset, "ultra", 0}, {MemoryFlag::Kind::TrunkGB, "", 1.5}};
    b = k3::resolveMemoryFlags(flags, 0);
    QCOMPARE(b.resolvedTrunkBytes(), std::uint64_t(1'500'000'000ull));
    QCOMPARE(b.resolvedCacheBytes(), std::uint64_t(310'000'000ull));
    QCOMPARE(b.describe(), std::string("preset ultra, trunk 1.50 GB"));
}

void TestLaunch::autoIsTheRecommendedPreset() {
    const std::vector<MemoryFlag> flags{{MemoryFlag::Kind::Preset, "auto", 0}};
    QCOMPARE(k3::resolveMemoryFlags(flags, 12'000'000'000ull).preset, std::string("laptop"));
    QCOMPARE(k3::resolveMemoryFlags(flags, 40'000'000'000ull).preset, std::string("desktop"));
    try {
        k3::resolveMemoryFlags(flags, 2'000'000'000ull);
        QFAIL("auto under 4 GB accepted");
    } catch (const k3::MemoryRefusal& e) {
        QVERIFY2(std::string(e.what()).find("under 4 GB") != std::string::npos, e.what());
    }
    QVERIFY_THROWS_EXCEPTION(k3::MemoryRefusal, k3::resolveMemoryFlags(flags, 0));
}

void TestLaunch::unknownPresetIsNamed() {
    const std::vector<MemoryFlag> flags{{MemoryFlag::Kind::Preset, "huge", 0}};
    try {
        k3::resolveMemoryFlags(flags, 0);
        QFAIL("unknown preset accepted");
    } catch (const k3::MemoryRefusal& e) {
        const std::string m = e.what();
        QVERIFY(m.find("\"huge\"") != std::string::npos);
        QVERIFY(m.find("workstation") != std::string::npos);
    }
    const std::vector<MemoryFlag> neg{{MemoryFlag::Kind::CacheGB, "", -1}};
    QVERIFY_THROWS_EXCEPTION(k3::MemoryRefusal, k3::resolveMemoryFlags(neg, 0));
    // A configuration naming an unknown preset (a hand-edited file) is refused by name.
    k3::LaunchConfig c;
    c.modelDir = kModels + "k3_tiny_a";
    c.budget.preset = "huge";
    const std::vector<std::string> problems = k3::validate(c);
    QCOMPARE(int(problems.size()), 1);
    QVERIFY2(problems[0].rfind("unknown preset \"huge\"; the presets are ", 0) == 0,
             problems[0].c_str());
    QVERIFY_THROWS_EXCEPTION(k3::LaunchError, k3::planLaunch(c, 16'000'000'000ull));
}

// The plan a load makes holds the whole config, the budget resolved once (the preset's
// trunk, the cache replaced, its tables on disk) and described by what was asked for.
void TestLaunch::theLaunchIsResolvedOnce() {
    QTemporaryDir tmp;
    k3::LaunchConfig c;
    c.modelDir = kModels + "k3_tiny_a";
    c.trunkDir = tmp.filePath(QStringLiteral("trunk")).toStdString();
    k3::packTrunk(c.modelDir, c.trunkDir);
    c.budget = LaunchBudget::ofPreset("ultra");
    c.budget.cacheBytes = 2'000'000'000ull;
    c.threads = 6;
    c.prefillChunk = 32;
    c.contextLength = 8192;
    c.maxSpeculation = 4;
    const k3::MemoryPlan plan = k3::planLaunch(c, 16'000'000'000ull);
    QCOMPARE(plan.budget.trunkBytes, std::uint64_t(2'500'000'000ull));
    QCOMPARE(plan.budget.cacheBytes, std::uint64_t(2'000'000'000ull));
    QCOMPARE(plan.budget.source, std::string("preset ultra, cache 2.00 GB"));
    QVERIFY(plan.modelTablesStreamed);
    QCOMPARE(plan.chunkPositions, 32);
    QCOMPARE(plan.contextLength, 8192);
    QCOMPARE(plan.maxSpeculation, 4);

    c.budget.modelTablesOnDisk = false; // replaces the preset's choice
    QVERIFY(!k3::planLaunch(c, 16'000'000'000ull).modelTablesStreamed);
    QCOMPARE(c.budget.describe(),
             std::string("preset ultra, cache 2.00 GB, model tables in memory"));

    const k3::MemoryPlan resident =
        k3::planLaunch(k3::LaunchConfig{.modelDir = c.modelDir}, 16'000'000'000ull);
    QCOMPARE(resident.pinnedLayers, resident.totalLayers);
    QCOMPARE(resident.cacheSlots, 0);
    QVERIFY(!resident.modelTablesStreamed);
    QCOMPARE(resident.contextLength, 4096);
    QCOMPARE(resident.maxSpeculation, 16);
    // Equality covers every field.
    k3::LaunchConfig other = c;
    QVERIFY(other == c);
    other.threads = 5;
    QVERIFY(other != c);
    other = c;
    other.draftDir = "/elsewhere";
    QVERIFY(other != c);
}

// One table of ranges: each number outside it is named with its value and the range,
// and a load refuses it before reading a file.
void TestLaunch::validateNamesEveryFieldOutOfRange() {
    k3::LaunchConfig c;
    QCOMPARE(k3::validate(c), std::vector<std::string>{"no model folder is given"});
    c.modelDir = kModels + "k3_tiny_a";
    QVERIFY(k3::validate(c).empty());
    c.threads = -1;
    c.contextLength = 15;
    c.prefillChunk = 4097;
    c.maxSpeculation = 33;
    c.budget.cacheBytes = 2 * k3::kMaxBudgetBytes;
    c.stateCacheBytes = 1;
    const std::vector<std::string> want{
        "the thread count -1 is outside 0..1024 (0: every core)",
        "the context length 15 is outside 16..1048576 positions",
        "the prefill chunk 4097 is outside 0..4096 positions (0: as the memory plan sizes it)",
        "the speculation width 33 is outside 0..32 proposals",
        "the expert-cache budget 2000000.00 GB is over the largest size taken (1000000.00 GB)",
        "a state-cache budget is given without a state-cache folder",
    };
    QCOMPARE(k3::validate(c), want);
    try {
        k3::Session::open(c);
        QFAIL("an invalid launch was opened");
    } catch (const k3::LaunchError& e) {
        QVERIFY2(std::string(e.what()).find("the context length 15 is outside 16..1048576") !=
                     std::string::npos,
                 e.what());
    }
    // The edges are inside.
    c = k3::LaunchConfig{.modelDir = c.modelDir};
    c.threads = 1024;
    c.contextLength = 16;
    c.prefillChunk = 4096;
    c.maxSpeculation = 32;
    QVERIFY(k3::validate(c).empty());
    QVERIFY(k3::kContextRange.contains(1 << 20) && !k3::kContextRange.contains((1 << 20) + 1));
}

void TestLaunch::planLaunchIsTheSessionsPlan_data() {
    QTest::addColumn<QString>("model");
    QTest::addColumn<bool>("packed");
    QTest::addColumn<LaunchBudget>("budget");
    for (const char* model : {"k3_tiny_a", "k3_tiny_b", "k3_tiny_f32"}) {
        const auto row = [&](const char* name, bool packed, LaunchBudget b) {
            QTest::newRow((std::string(model) + "/" + name).c_str())
                << QString::fromLatin1(model) << packed << b;
        };
        row("resident", false, LaunchBudget::resident());
        row("resident with a cache", false, LaunchBudget{{}, {}, 60'000ull});
        row("packed, all pinned", true, LaunchBudget::resident());
        row("streamed small trunk", true, LaunchBudget{{}, 300'000ull, {}});
        row("streamed small trunk and cache", true, LaunchBudget::ofBytes(300'000ull, 60'000ull));
        row("smallest ring", true, LaunchBudget::ofBytes(0, 1));
        row("preset ultra", true, LaunchBudget::ofPreset("ultra"));
    }
}

Q_DECLARE_METATYPE(LaunchBudget)

void TestLaunch::planLaunchIsTheSessionsPlan() {
    QFETCH(QString, model);
    QFETCH(bool, packed);
    QFETCH(LaunchBudget, budget);
    QTemporaryDir tmp;
    k3::LaunchConfig c;
    c.modelDir = kModels + model.toStdString();
    if (packed) {
        c.trunkDir = tmp.filePath(QStringLiteral("trunk")).toStdString();
        k3::packTrunk(c.modelDir, c.trunkDir);
    }
    c.budget = budget;
    c.contextLength = 512;
    c.prefillChunk = 16;
    const k3::MemoryPlan planned = k3::planLaunch(c, availableNow());
    const k3::Session session = k3::Session::open(c, {.loadTokenizer = false});
    comparePlans(planned, session.memoryReport().plan);
    QCOMPARE(planned.contextLength, 512);
    QCOMPARE(planned.chunkPositions, 16);
    QCOMPARE(planned.cacheSlots > 0, budget.resolvedCacheBytes() > 0);
    QCOMPARE(planned.ringSlots > 0, packed && planned.pinnedLayers < planned.totalLayers);
}

// k3_tiny_a's numbers, from its headers and config.json (14 layers, 12 experts in each of
// the 13 MoE layers), as the planning must read them.
void TestLaunch::planLaunchGivesTheFiguresOfTheFiles() {
    QTemporaryDir tmp;
    k3::LaunchConfig c;
    c.modelDir = kModels + "k3_tiny_a";
    const k3::MemoryPlan resident = k3::planLaunch(c, 16'000'000'000ull);
    QCOMPARE(resident.totalLayers, 14);
    QCOMPARE(resident.pinnedLayers, 14);
    QCOMPARE(resident.ringSlots, 0);
    QCOMPARE(resident.cacheSlots, 0);
    QCOMPARE(resident.residentExpertBytes, std::uint64_t(13 * 12 * 3136)); // MXFP4 experts
    QCOMPARE(resident.contextLength, 4096);
    QCOMPARE(resident.chunkPositions, 64);
    QCOMPARE(resident.available, std::uint64_t(16'000'000'000ull));
    QCOMPARE(resident.budget.source, std::string("everything resident"));

    c.trunkDir = tmp.filePath(QStringLiteral("trunk")).toStdString();
    k3::packTrunk(c.modelDir, c.trunkDir);
    c.budget = LaunchBudget::ofBytes(300'000ull, 60'000ull);
    const k3::MemoryPlan streamed = k3::planLaunch(c, 16'000'000'000ull);
    QCOMPARE(streamed.totalLayers, 14);
    QCOMPARE(streamed.pinnedLayers, 3);
    QCOMPARE(streamed.ringSlots, 2);
    QVERIFY(streamed.trunkBytes() <= 300'000ull);
    // The store's slot: an expert's 3136 bytes read as an aligned window that straddles a
    // 4096 boundary (the wizard's old copy said 4096, the average expert aligned up).
    QCOMPARE(streamed.expertSlotBytes, std::uint64_t(8192));
    QCOMPARE(streamed.cacheSlots, 7); // 60,000 / 8192
    QCOMPARE(streamed.residentExpertBytes, std::uint64_t(0));
    // A chunk of 64 (the cache's 57,344 bytes pay for 23) at 2392 bytes a position (6
    // blocks of 64 floats, 4 routed rows of 48 floats with their routing), 64-position tiles.
    QCOMPARE(streamed.chunkPositions, 64);
    QCOMPARE(streamed.total(), std::uint64_t(7'855'960));

    // A trunk packed from another checkpoint is refused, naming it.
    c.modelDir = kModels + "k3_tiny_b";
    QVERIFY_THROWS_EXCEPTION(std::exception, k3::planLaunch(c, 16'000'000'000ull));
}

void TestLaunch::automaticBudgetFillsTrunkFirst() {
    QTemporaryDir tmp;
    k3::LaunchConfig c;
    c.modelDir = kModels + "k3_tiny_a";
    QVERIFY(k3::automaticBudget(c, 16'000'000'000ull).isResident()); // nothing packed
    c.trunkDir = tmp.filePath(QStringLiteral("trunk")).toStdString();
    k3::packTrunk(c.modelDir, c.trunkDir);
    // Plenty: every layer pinned, every expert a slot.
    c.budget = k3::automaticBudget(c, 16'000'000'000ull);
    const k3::MemoryPlan plan = k3::planLaunch(c, 16'000'000'000ull);
    QCOMPARE(plan.pinnedLayers, 14);
    QCOMPARE(plan.ringSlots, 0);
    QCOMPARE(plan.cacheSlots, 13 * 12);
    QCOMPARE(*c.budget.trunkBytes, plan.trunkBytes());
    QCOMPARE(*c.budget.cacheBytes, plan.cacheBytes());
}

namespace {
// A copy of a fixture model in `dir`, so files can be removed or broken.
std::string copyModel(const QString& name, const QString& dir) {
    const QString src = QString::fromStdString(kModels) + name;
    QDir().mkpath(dir);
    for (const QString& f : QDir(src).entryList(QDir::Files))
        QFile::copy(src + QLatin1Char('/') + f, dir + QLatin1Char('/') + f);
    return dir.toStdString();
}

bool mentions(const std::vector<std::string>& problems, const std::string& part) {
    for (const std::string& p : problems)
        if (p.find(part) != std::string::npos) return true;
    return false;
}
} // namespace

void TestLaunch::checkLaunchNamesWhatALoadWouldMiss() {
    QTemporaryDir tmp;
    k3::LaunchConfig c;
    c.modelDir = copyModel(QStringLiteral("k3_tiny_a"), tmp.filePath(QStringLiteral("m")));
    QCOMPARE(k3::checkLaunch(c).size(), std::size_t(0));

    QVERIFY(QFile::remove(QString::fromStdString((c.modelDir / "tiktoken.model").string())));
    std::vector<std::string> problems = k3::checkLaunch(c);
    QCOMPARE(problems.size(), std::size_t(1));
    QCOMPARE(problems[0], (c.modelDir / "tiktoken.model").string() +
                              " is missing: the tokenizer needs tiktoken.model");

    QFile config(QString::fromStdString((c.modelDir / "config.json").string()));
    QVERIFY(config.open(QIODevice::WriteOnly | QIODevice::Truncate));
    config.write("{ not json");
    config.close();
    problems = k3::checkLaunch(c);
    QCOMPARE(problems.size(), std::size_t(2));
    QVERIFY2(mentions(problems, "config.json"), problems[0].c_str());

    c.modelDir = tmp.filePath(QStringLiteral("nothing-here")).toStdString();
    QCOMPARE(k3::checkLaunch(c),
             std::vector<std::string>{(c.modelDir / "config.json").string() + " does not exist: " +
                                      c.modelDir.string() + " is not a folder"});
}

void TestLaunch::checkLaunchRefusesAnotherModelsTrunk() {
    QTemporaryDir tmp;
    const std::string otherTrunk = tmp.filePath(QStringLiteral("b-trunk")).toStdString();
    k3::packTrunk(kModels + "k3_tiny_b", otherTrunk);
    k3::LaunchConfig c;
    c.modelDir = copyModel(QStringLiteral("k3_tiny_a"), tmp.filePath(QStringLiteral("a")));
    c.trunkDir = otherTrunk;
    const std::vector<std::string> problems = k3::checkLaunch(c);
    QCOMPARE(problems.size(), std::size_t(1));
    QVERIFY2(mentions(problems, "was packed from another checkpoint"), problems[0].c_str());
    QVERIFY2(mentions(problems, "pack one into a new folder"), problems[0].c_str());
    // The suggestion is a new folder next to the model, never the other model's trunk.
    try {
        k3::openTrunkIndex(otherTrunk, c.modelDir);
        QFAIL("another model's trunk was accepted");
    } catch (const k3::StaleTrunkError& e) {
        QVERIFY(e.remedy().has_value());
        QCOMPARE(e.remedy()->modelDir, c.modelDir);
        QCOMPARE(e.remedy()->trunkDir, c.modelDir / "trunk");
    }
    QCOMPARE(k3::freshTrunkFolder(c.modelDir), c.modelDir / "trunk");
    QDir().mkpath(QString::fromStdString((c.modelDir / "trunk").string()));
    QCOMPARE(k3::freshTrunkFolder(c.modelDir), c.modelDir / "trunk-2");
}

QTEST_APPLESS_MAIN(TestLaunch)
#include "tst_launch.moc"
