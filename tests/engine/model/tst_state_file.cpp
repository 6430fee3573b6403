// A conversation's state on disk (issue 28): saved after N positions and loaded into
// another session (another memory budget, another chunk size, with or without
// speculation), it continues with the logits and ids of a run that never stopped; every
// binding field, a damaged byte in each section, a truncated file and another model's
// state are refused with a message naming the mismatch, and the session is then intact.
#include <QFile>
#include <QTemporaryDir>
#include <QTest>

#include <nlohmann/json.hpp>

#include <cstring>
#include <filesystem>
#include <fstream>

#include <k3/pack.hpp>
#include <k3/session.hpp>

namespace {

std::string fixture(const char* name) {
    return std::string(K3_SOURCE_DIR "/tests/fixtures/models/") + name;
}

std::vector<k3::TokenId> idsFrom(int first, int n) {
    std::vector<k3::TokenId> ids;
    for (int i = first; i < first + n; ++i) ids.push_back((i * 53 + 7) % 800);
    return ids;
}

// Where a session's weights come from: all resident, or the packed trunk (`trunkDir`)
// streamed within `trunkBytes` (0: the smallest ring; past the trunk's size: every layer
// pinned) with `cacheSlots` expert cache slots (0: the plan's).
struct Budget {
    const char* what;
    bool streamed = false;
    std::uint64_t trunkBytes = 0;
    int cacheSlots = 1;
};

// The rungs of the memory ladder a state is saved and loaded at (tst_chunk_forward
// checks the forward itself at each).
const Budget kResident{"resident"};
const Budget kSmallestRing{"smallest ring, 1 expert slot", true};
const Budget kAllPinned{"every layer pinned, the plan's expert cache", true, 1ull << 40, 0};

struct Opened {
    std::string trunkDir;
    k3::Session open(const std::string& model, const Budget& b, int chunk,
                     int layerLimit = 0) const {
        k3::LaunchConfig o;
        o.modelDir = model;
        o.prefillChunk = chunk;
        o.contextLength = 256;
        k3::LaunchDiagnostics d;
        d.loadTokenizer = false;
        d.layerLimit = layerLimit;
        if (b.streamed) {
            o.trunkDir = trunkDir;
            o.budget.trunkBytes = b.trunkBytes;
            if (b.cacheSlots > 0) d.expertCacheSlots = b.cacheSlots;
        }
        return k3::Session::open(o, d);
    }
};

// The logits after the prompt (before any token is sampled) and the generated ids.
struct Run {
    std::vector<float> logits;
    std::vector<k3::TokenId> ids;
    int prefillPositions = 0;
};

class LogitsAtPromptEnd : public k3::SessionObserver {
public:
    explicit LogitsAtPromptEnd(const k3::Session& s) : session_(s) {}
    void onProgress(const k3::SessionProgress& p) override {
        if (p.done == p.total) {
            const auto l = session_.lastLogits();
            logits.assign(l.begin(), l.end());
        }
    }
    std::vector<float> logits;

private:
    const k3::Session& session_;
};

Run generate(k3::Session& s, const std::vector<k3::TokenId>& prompt, int tokens, int spec = 0) {
    LogitsAtPromptEnd observer(s);
    if (s.positions() == int(prompt.size())) { // nothing to read: the loaded logits
        const auto l = s.lastLogits();
        observer.logits.assign(l.begin(), l.end());
    }
    k3::GenerateOptions o;
    o.maxTokens = tokens;
    o.speculation = spec;
    const k3::GenerateResult r = s.generateIds(prompt, o, &observer);
    return {observer.logits, r.ids, r.prefillPositions};
}

std::string readAll(const std::string& path) {
    std::ifstream in(path, std::ios::binary);
    return {std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>()};
}

void writeAll(const std::string& path, const std::string& bytes) {
    std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

std::uint64_t u64At(const std::string& b, std::size_t at) {
    std::uint64_t v = 0;
    for (int i = 7; i >= 0; --i) v = v << 8 | std::uint8_t(b[at + std::size_t(i)]);
    return v;
}

std::string u64Bytes(std::uint64_t v) {
    std::string out(8, '\0');
    for (int i = 0; i < 8; ++i) out[std::size_t(i)] = char((v >> (8 * i)) & 0xff);
    return out;
}

// A state file taken apart: its header and the bytes after the header's checksum.
struct StateParts {
    nlohmann::json header;
    std::string body;
    static StateParts of(const std::string& bytes) {
        const std::uint64_t n = u64At(bytes, 8);
        return {nlohmann::json::parse(bytes.substr(16, n)), bytes.substr(16 + n + 8)};
    }
    // Sealed again with a correct header checksum: only the change made is wrong.
    std::string sealed() const {
        const std::string text = header.dump();
        return "K3STATE1" + u64Bytes(text.size()) + text +
               u64Bytes(k3::trunkChecksum(text.data(), text.size())) + body;
    }
};

} // namespace

class TestStateFile : public QObject {
    Q_OBJECT
private slots:
    void initTestCase();
    void continuesWithTheSameBits_data();
    void continuesWithTheSameBits();
    void continuesGeneratingWithNoNewTokens();
    void bindingMismatchesAreRefused();
    void damagedSectionsAreRefused();
    void truncatedAndForeignFilesAreRefused();
    void newFilesAreOwnerOnly();

private:
    QTemporaryDir tmp_;
    Opened trunkA_;
    std::string model_ = fixture("k3_tiny_a");
    std::vector<k3::TokenId> p_ = idsFrom(0, 37), q_ = idsFrom(37, 9);
    // The uninterrupted run: P + Q read at once, then 8 tokens.
    Run reference_;
    std::string file(const char* name) const { return tmp_.filePath(name).toStdString(); }
    std::string savedAfterP(const Budget& b, int chunk, const char* name) const;
};

void TestStateFile::initTestCase() {
    QVERIFY(tmp_.isValid());
    trunkA_.trunkDir = file("trunk_a");
    k3::packTrunk(model_, trunkA_.trunkDir);
    k3::Session s = trunkA_.open(model_, kResident, 64);
    std::vector<k3::TokenId> all = p_;
    all.insert(all.end(), q_.begin(), q_.end());
    reference_ = generate(s, all, 8);
    QCOMPARE(int(reference_.ids.size()), 8);
}

std::string TestStateFile::savedAfterP(const Budget& b, int chunk, const char* name) const {
    k3::Session s = trunkA_.open(model_, b, chunk);
    generate(s, p_, 0); // reads P only
    if (s.positions() != int(p_.size())) return {};
    const std::string path = file(name);
    s.saveState(path);
    return path;
}

void TestStateFile::continuesWithTheSameBits_data() {
    QTest::addColumn<int>("saveAt"); // index into budgets()
    QTest::addColumn<int>("loadAt");
    QTest::addColumn<int>("chunk");
    QTest::addColumn<int>("speculation");
    QTest::newRow("resident -> resident, chunk 64") << 0 << 0 << 64 << 0;
    QTest::newRow("resident -> smallest ring, chunk 1") << 0 << 1 << 1 << 0;
    QTest::newRow("smallest ring -> resident, chunk 1") << 1 << 0 << 1 << 0;
    QTest::newRow("smallest ring -> smallest ring, chunk 64, speculation") << 1 << 1 << 64 << 4;
    QTest::newRow("resident -> resident, chunk 1, speculation") << 0 << 0 << 1 << -1;
    QTest::newRow("half pinned -> all pinned, chunk 1") << 2 << 3 << 1 << 0;
    QTest::newRow("all pinned -> half pinned, chunk 64, speculation") << 3 << 2 << 64 << 4;
    QTest::newRow("all pinned -> smallest ring, chunk 64") << 3 << 1 << 64 << 0;
}

void TestStateFile::continuesWithTheSameBits() {
    QFETCH(int, saveAt);
    QFETCH(int, loadAt);
    QFETCH(int, chunk);
    QFETCH(int, speculation);
    // Half of trunk.bin: some layers pinned, the others through the ring.
    const Budget halfPinned{"about half the trunk pinned, a ring, 8 expert slots", true,
                            std::filesystem::file_size(trunkA_.trunkDir + "/trunk.bin") / 2, 8};
    const Budget budgets[] = {kResident, kSmallestRing, halfPinned, kAllPinned};
    const std::string path = savedAfterP(budgets[saveAt], chunk, "continue.k3state");
    QVERIFY(!path.empty());
    k3::Session s = trunkA_.open(model_, budgets[loadAt], chunk);
    if (loadAt == 2) { // the rung is what it says
        const k3::MemoryPlan& plan = s.memoryReport().plan;
        QVERIFY2(
            plan.pinnedLayers > 0 && plan.ringSlots > 0,
            qPrintable(
                QString("%1 pinned, %2 ring slots").arg(plan.pinnedLayers).arg(plan.ringSlots)));
    }
    if (loadAt == 3) QCOMPARE(s.memoryReport().plan.pinnedLayers, 14); // k3_tiny_a's all
    s.loadState(path);
    QCOMPARE(s.positions(), int(p_.size()));
    QVERIFY(std::equal(p_.begin(), p_.end(), s.heldIds().begin(), s.heldIds().end()));
    std::vector<k3::TokenId> all = p_;
    all.insert(all.end(), q_.begin(), q_.end());
    const Run r = generate(s, all, 8, speculation);
    QCOMPARE(r.prefillPositions, int(q_.size())); // only the new positions are read
    QCOMPARE(r.logits.size(), reference_.logits.size());
    QVERIFY(std::memcmp(r.logits.data(), reference_.logits.data(),
                        r.logits.size() * sizeof(float)) == 0);
    QCOMPARE(r.ids, reference_.ids);
}

void TestStateFile::continuesGeneratingWithNoNewTokens() {
    k3::Session plain = trunkA_.open(model_, kResident, 64);
    const Run want = generate(plain, p_, 6);
    const std::string path = savedAfterP(kSmallestRing, 64, "no_new.k3state");
    k3::Session s = trunkA_.open(model_, kResident, 64);
    s.loadState(path);
    const Run r = generate(s, p_, 6);
    QCOMPARE(r.prefillPositions, 0); // nothing read: the loaded logits start the decode
    QVERIFY(std::memcmp(r.logits.data(), want.logits.data(), r.logits.size() * sizeof(float)) == 0);
    QCOMPARE(r.ids, want.ids);
}

void TestStateFile::bindingMismatchesAreRefused() {
    const std::string path = savedAfterP(kResident, 64, "binding.k3state");
    const std::string bytes = readAll(path);
    struct Change {
        const char* field;
        nlohmann::json value;
        const char* message;
    };
    const std::vector<Change> changes{
        {"format", 2, "state format 2; this k3 reads format 1"},
        {"numerics", 7, "saved by an engine with other arithmetic (numerics 7, this one 1)"},
        {"layers", 3, "saved with 3 layers; this session runs 14"},
        {"vocab_size", 900, "vocab_size 900, the model's 896"},
        {"positions", 300, "it holds 300 positions and the context holds 256"},
        {"positions", 36, "section 1 is"},
    };
    const std::string edited = file("edited.k3state");
    k3::Session s = trunkA_.open(model_, kResident, 64);
    const Run before = generate(s, p_, 3); // the session's own conversation
    for (const Change& c : changes) {
        StateParts parts = StateParts::of(bytes);
        parts.header[c.field] = c.value;
        writeAll(edited, parts.sealed());
        try {
            s.loadState(edited);
            QFAIL(qPrintable(
                QStringLiteral("%1 = %2 was loaded")
                    .arg(QLatin1String(c.field), QString::fromStdString(c.value.dump()))));
        } catch (const k3::StateError& e) {
            QVERIFY2(std::string(e.what()).starts_with(edited + ": " + c.message), e.what());
        }
    }
    // Another model's identity: config.json's hash.
    StateParts parts = StateParts::of(bytes);
    parts.header["model"]["config_fnv1a64"] = "0123456789abcdef";
    writeAll(edited, parts.sealed());
    QVERIFY_THROWS_EXCEPTION(k3::StateError, s.loadState(edited));
    try {
        s.loadState(edited);
    } catch (const k3::StateError& e) {
        QCOMPARE(std::string(e.what()),
                 edited + ": saved from another model: config.json changed since the trunk "
                          "was packed");
    }
    // A header edited without sealing it again.
    std::string unsealed = bytes;
    unsealed[20] ^= 0x01;
    writeAll(edited, unsealed);
    try {
        s.loadState(edited);
        QFAIL("an unsealed header was loaded");
    } catch (const k3::StateError& e) {
        QCOMPARE(std::string(e.what()),
                 edited + ": the header's checksum fails: the file is damaged");
    }
    // Fewer layers than saved: a session opened with --layers 3.
    k3::Session short3 = trunkA_.open(model_, kResident, 64, 3);
    try {
        short3.loadState(path);
        QFAIL("a 14-layer state was loaded into a 3-layer session");
    } catch (const k3::StateError& e) {
        QCOMPARE(std::string(e.what()), path + ": saved with 14 layers; this session runs 3");
    }
    // After every refusal the session still holds its own conversation.
    QCOMPARE(s.positions(), int(p_.size()) + 2);
    k3::Session fresh = trunkA_.open(model_, kResident, 64);
    std::vector<k3::TokenId> next = p_;
    next.insert(next.end(), before.ids.begin(), before.ids.end());
    QCOMPARE(generate(s, next, 4).ids, generate(fresh, next, 4).ids);
}

void TestStateFile::damagedSectionsAreRefused() {
    const std::string path = savedAfterP(kResident, 64, "damaged.k3state");
    const std::string bytes = readAll(path);
    const StateParts parts = StateParts::of(bytes);
    const std::size_t bodyStart = bytes.size() - parts.body.size();
    std::size_t at = bodyStart;
    const std::string damaged = file("flipped.k3state");
    k3::Session s = trunkA_.open(model_, kResident, 64);
    int checked = 0;
    for (const auto& sec : parts.header.at("sections")) {
        const std::size_t n = sec.at("bytes").get<std::size_t>();
        std::string flipped = bytes;
        flipped[at + n / 2] ^= 0x20; // one bit in the middle of the section
        writeAll(damaged, flipped);
        const std::string name = sec.at("name").get<std::string>();
        try {
            s.loadState(damaged);
            QFAIL(qPrintable(QStringLiteral("a flipped bit in %1 was loaded")
                                 .arg(QString::fromStdString(name))));
        } catch (const k3::StateError& e) {
            const std::string want = damaged + ": section \"" + name + "\" fails its checksum";
            QVERIFY2(std::string(e.what()).starts_with(want), e.what());
        }
        at += n;
        ++checked;
    }
    QCOMPARE(at, bytes.size());
    // ids, logits, then 9 KDA layers x 4 arrays and 5 MLA layers x 2 arrays.
    QCOMPARE(checked, 2 + 9 * 4 + 5 * 2);
    QCOMPARE(s.positions(), 0);
}

void TestStateFile::truncatedAndForeignFilesAreRefused() {
    const std::string path = savedAfterP(kResident, 64, "whole.k3state");
    const std::string bytes = readAll(path);
    const std::string cut = file("cut.k3state");
    writeAll(cut, bytes.substr(0, bytes.size() - 5));
    k3::Session s = trunkA_.open(model_, kResident, 64);
    try {
        s.loadState(cut);
        QFAIL("a truncated state was loaded");
    } catch (const k3::StateError& e) {
        QVERIFY2(
            std::string(e.what()).starts_with(cut + ": truncated in section \"layer 13 rope\""),
            e.what());
    }
    writeAll(cut, bytes + "x");
    try {
        s.loadState(cut);
        QFAIL("a state with trailing bytes was loaded");
    } catch (const k3::StateError& e) {
        QCOMPARE(std::string(e.what()),
                 cut + ": bytes after the last section: the file is not what its header says");
    }
    writeAll(cut, "{\"not\": \"a state\"}");
    QVERIFY_THROWS_EXCEPTION(k3::StateError, s.loadState(cut));

    // k3_tiny_b's state into k3_tiny_a: another model.
    k3::LaunchConfig ob;
    ob.modelDir = fixture("k3_tiny_b");
    ob.contextLength = 256;
    k3::LaunchDiagnostics d;
    d.loadTokenizer = false;
    k3::Session b = k3::Session::open(ob, d);
    generate(b, idsFrom(0, 5), 0);
    const std::string foreign = file("foreign.k3state");
    b.saveState(foreign);
    try {
        s.loadState(foreign);
        QFAIL("another model's state was loaded");
    } catch (const k3::StateError& e) {
        QVERIFY2(std::string(e.what()).starts_with(foreign + ": saved from another model: "),
                 e.what());
    }
    // And after all that, the session gives the uninterrupted ids.
    std::vector<k3::TokenId> all = p_;
    all.insert(all.end(), q_.begin(), q_.end());
    QCOMPARE(generate(s, all, 8).ids, reference_.ids);
}

void TestStateFile::newFilesAreOwnerOnly() {
    const std::string path = savedAfterP(kResident, 64, "private.k3state");
    const QFile::Permissions p = QFile::permissions(QString::fromStdString(path));
    QCOMPARE(p & (QFile::ReadGroup | QFile::WriteGroup | QFile::ReadOther | QFile::WriteOther),
             QFile::Permissions());
    k3::Session empty = trunkA_.open(model_, kResident, 64);
    QVERIFY_THROWS_EXCEPTION(k3::StateError, empty.saveState(file("empty.k3state")));
}

QTEST_GUILESS_MAIN(TestStateFile)
#include "tst_state_file.moc"
