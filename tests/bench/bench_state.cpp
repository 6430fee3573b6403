// What a conversation state on disk saves (issue 28), on the synthetic full-width
// checkpoint (tests/bench/synth_checkpoint + k3 pack), in one run:
//   1. a 2-turn conversation: turn 1 leaves --preamble + --message prompt ids and an
//      --answer of generated ids (the state then holds 512 positions by default) and the
//      prefix cache saves it; the second turn (the conversation + --follow-up ids) is read
//      cold by a fresh session without the cache, then by a fresh session that restores
//      the state: first-token seconds and bytes read (trunk + experts from the run report,
//      the state file, and the disk's own count from /proc/self/io);
//   2. the state file: its size and Session::loadState's seconds against the bytes and
//      seconds of the prefill that makes the same state (the positions it holds, read
//      cold);
//   3. a new conversation (--preamble ids + --new-message ids) read cold and with the
//      preamble's state cached by an earlier conversation: first-token seconds and bytes.
// The page cache is dropped before every measured call (root: /proc/sys/vm/drop_caches;
// --no-drop skips it); each measured call runs in a freshly opened session, so the trunk
// ring and the expert cache start empty. The restored runs must give the cold runs' ids
// and logits bit for bit (exit 1 otherwise). Not a test: run by hand; the figures go to
// docs/measurements.md.
//
//   bench_state SYNTH_DIR TRUNK_DIR SCRATCH_DIR [--trunk-gb 1.5] [--cache-gb 0.5]
//               [--chunk N (0: the plan's)] [--preamble 185] [--message 312]
//               [--answer 16] [--follow-up 15] [--new-message 6] [--no-drop]
#include <k3/memory_plan.hpp>
#include <k3/model.hpp>
#include <k3/pack.hpp>
#include <k3/session.hpp>
#include <k3/state_cache.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

double since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}
double gb(double bytes) {
    return bytes / 1e9;
}

bool g_drop = true;

// The measured calls start with nothing of the files in the page cache (the state file
// above all: the trunk and the experts are read with O_DIRECT anyway). drop_caches drops
// clean pages only: the state files are fsynced by the engine's atomic writer, and the
// checkpoint is synced by the caller (`sync` before the run, docs/measurements.md).
void dropPageCache() {
    if (!g_drop) return;
    std::ofstream f("/proc/sys/vm/drop_caches");
    f << "3\n";
    f.flush();
    if (!f) {
        std::fprintf(stderr, "bench_state: cannot write /proc/sys/vm/drop_caches (not root?); "
                             "rerun as root or with --no-drop\n");
        std::exit(2);
    }
}

// Bytes this process had the block layer read (O_DIRECT included); 0 when not known.
std::uint64_t diskReadBytes() {
    std::ifstream f("/proc/self/io");
    std::string key;
    std::uint64_t value = 0;
    while (f >> key >> value)
        if (key == "read_bytes:") return value;
    return 0;
}

struct Options {
    fs::path model, trunk, scratch;
    double trunkGB = 1.5, cacheGB = 0.5;
    int chunk = 0; // 0: the plan's
    int preamble = 185, message = 312, answer = 16, followUp = 15, newMessage = 6;
};

std::uint64_t readBytes(const k3::MemoryStats& m) {
    return m.trunk.bytesRead + m.cache.bytesRead;
}

k3::Session open(const Options& o, const fs::path& cacheDir, double& seconds) {
    k3::LaunchConfig c;
    c.modelDir = o.model;
    c.trunkDir = o.trunk;
    c.budget.trunkBytes = std::uint64_t(o.trunkGB * 1e9);
    c.budget.cacheBytes = std::uint64_t(o.cacheGB * 1e9);
    c.prefillChunk = o.chunk;
    c.contextLength = 1024;
    c.stateCacheDir = cacheDir;
    k3::LaunchDiagnostics d;
    d.loadTokenizer = false;
    d.enforceMemoryPlan = false;
    const auto t0 = Clock::now();
    k3::Session s = k3::Session::open(c, d);
    seconds = since(t0);
    return s;
}

// One measured generateIds call, and what it had read when its first token came.
struct Turn {
    k3::GenerateResult r;
    double firstToken = 0; // the first token's event: sampled and fed, as a front end sees it
    std::uint64_t bytesToFirst = 0; // trunk + expert bytes read until then (run report)
    std::uint64_t diskToFirst = 0;  // /proc/self/io read_bytes over the same span
    std::vector<float> logits;      // after the call (the first token fed)
};

class Watch : public k3::SessionObserver {
public:
    Watch(const k3::Session& s, Turn& t)
        : s_(s), t_(t), base_(readBytes(s.memoryReport())), disk0_(diskReadBytes()),
          t0_(Clock::now()) {}
    void onToken(const k3::TokenEvent& e) override {
        if (e.index != 0) return;
        t_.firstToken = since(t0_);
        t_.bytesToFirst = readBytes(s_.memoryReport()) - base_;
        t_.diskToFirst = diskReadBytes() - disk0_;
    }

private:
    const k3::Session& s_;
    Turn& t_;
    std::uint64_t base_, disk0_;
    Clock::time_point t0_;
};

// Two tokens: the first is fed before its event (as in a chat), the second is not.
Turn measure(k3::Session& s, const std::vector<k3::TokenId>& prompt) {
    dropPageCache();
    Turn t;
    k3::GenerateOptions g;
    g.maxTokens = 2;
    Watch w(s, t);
    t.r = s.generateIds(prompt, g, &w);
    const std::span<const float> l = s.lastLogits();
    t.logits.assign(l.begin(), l.end());
    if (!t.r.valid()) {
        std::fprintf(stderr, "bench_state: the run is invalid (dropped %d, non-finite %d)\n",
                     t.r.droppedExperts, int(t.r.nonFinite));
        std::exit(4);
    }
    return t;
}

std::vector<k3::TokenId> someIds(int n, int seed, int vocab) {
    std::vector<k3::TokenId> ids;
    for (int i = 0; i < n; ++i) ids.push_back(int((i * 7919L + seed * 104729L + 13) % vocab));
    return ids;
}

std::vector<fs::path> stateFiles(const fs::path& dir) {
    std::vector<fs::path> out;
    for (const auto& e : fs::directory_iterator(dir))
        if (e.path().extension() == ".k3state") out.push_back(e.path());
    return out;
}

int g_failures = 0;
void expect(bool ok, const char* what) {
    if (ok) return;
    std::printf("FAILED: %s\n", what);
    ++g_failures;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

void printHeader() {
    std::printf("%-9s %5s %8s %6s %11s %9s %9s %9s %9s %9s %9s\n", "path", "read", "restored",
                "chunks", "1st token s", "sampled s", "trunk GB", "expert GB", "state GB",
                "total GB", "disk GB");
}

// `stateBytes`: the file the restored path loaded (0: none).
void printRow(const char* name, const Turn& t, std::uint64_t stateBytes) {
    std::printf("%-9s %5d %8d %6d %11.2f %9.2f %9.3f %9.3f %9.4f %9.3f %9.3f\n", name,
                t.r.prefillPositions, t.r.restoredPositions, t.r.prefillChunks, t.firstToken,
                t.r.prefillSeconds, gb(double(t.r.prefillTrunkBytes)),
                gb(double(t.r.prefillExpertBytes)), gb(double(stateBytes)),
                gb(double(t.bytesToFirst + stateBytes)), gb(double(t.diskToFirst)));
}

const char* verdict(double ratio, double target) {
    return ratio >= target ? "met" : "NOT met";
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 4) {
        std::fprintf(stderr,
                     "usage: bench_state SYNTH_DIR TRUNK_DIR SCRATCH_DIR [--trunk-gb 1.5] "
                     "[--cache-gb 0.5] [--chunk N] [--preamble 185] [--message 312] [--answer 16] "
                     "[--follow-up 15] [--new-message 6] [--no-drop]\n");
        return 2;
    }
    Options o;
    o.model = argv[1];
    o.trunk = argv[2];
    o.scratch = argv[3];
    for (int i = 4; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--no-drop") {
            g_drop = false;
            continue;
        }
        if (i + 1 >= argc) {
            std::fprintf(stderr, "bench_state: %s needs a value\n", a.c_str());
            return 2;
        }
        const char* v = argv[++i];
        if (a == "--trunk-gb")
            o.trunkGB = std::atof(v);
        else if (a == "--cache-gb")
            o.cacheGB = std::atof(v);
        else if (a == "--chunk")
            o.chunk = std::atoi(v);
        else if (a == "--preamble")
            o.preamble = std::atoi(v);
        else if (a == "--message")
            o.message = std::atoi(v);
        else if (a == "--answer")
            o.answer = std::atoi(v);
        else if (a == "--follow-up")
            o.followUp = std::atoi(v);
        else if (a == "--new-message")
            o.newMessage = std::atoi(v);
        else {
            std::fprintf(stderr, "bench_state: unknown option %s\n", a.c_str());
            return 2;
        }
    }
    if (o.preamble < 1 || o.message < 1 || o.answer < 2 || o.followUp < 1 || o.newMessage < 1) {
        std::fprintf(stderr, "bench_state: every length must be at least 1 (--answer 2)\n");
        return 2;
    }
    // Two folders, so the conversation's state never supersedes the preamble's.
    const fs::path cacheA = o.scratch / "states-conversation",
                   cacheB = o.scratch / "states-preamble";
    for (const fs::path& d : {cacheA, cacheB}) {
        fs::remove_all(d);
        fs::create_directories(d);
    }
    std::printf("bench_state %s (trunk %s), --trunk-gb %.2f --cache-gb %.2f, page cache %s\n",
                o.model.c_str(), o.trunk.c_str(), o.trunkGB, o.cacheGB,
                g_drop ? "dropped before each measured call" : "NOT dropped");

    double openSeconds = 0;
    int vocab = 0;
    // Turn 1: the conversation the second turn follows, its state saved by the cache.
    std::vector<k3::TokenId> preamble, conversation;
    int held = 0;
    fs::path stateFile;
    std::uint64_t stateBytes = 0;
    std::vector<float> heldLogits;
    {
        k3::Session s = open(o, cacheA, openSeconds);
        vocab = s.config().vocabSize;
        const k3::MemoryPlan& plan = s.model().memoryPlan();
        std::uint64_t perPass = 0;
        const k3::TrunkIndex idx = k3::openTrunkIndex(o.trunk, o.model);
        for (int L = plan.pinnedLayers; L < plan.totalLayers; ++L)
            perPass += idx.layers[std::size_t(L)].bytes;
        std::printf("%d/%d layers pinned, ring %d x %.2f GB, cache %d slots, chunk %d positions; "
                    "one trunk pass reads %.2f GB; a session opens in %.1f s\n",
                    plan.pinnedLayers, plan.totalLayers, plan.ringSlots,
                    gb(double(plan.ringSlotBytes)), plan.cacheSlots, plan.chunkPositions,
                    gb(double(perPass)), openSeconds);
        preamble = someIds(o.preamble, 1, vocab);
        conversation = preamble;
        const std::vector<k3::TokenId> message = someIds(o.message, 2, vocab);
        conversation.insert(conversation.end(), message.begin(), message.end());
        k3::GenerateOptions g;
        g.maxTokens = o.answer;
        const auto t0 = Clock::now();
        const k3::GenerateResult r = s.generateIds(conversation, g);
        const double seconds = since(t0);
        conversation.insert(conversation.end(), r.ids.begin(), r.ids.end());
        held = s.positions();
        const std::span<const float> l = s.lastLogits();
        heldLogits.assign(l.begin(), l.end());
        const std::vector<fs::path> files = stateFiles(cacheA);
        expect(r.valid() && r.statesSaved == 1 && files.size() == 1,
               "turn 1 saves one valid state");
        if (files.size() != 1) return 1;
        stateFile = files.front();
        stateBytes = fs::file_size(stateFile);
        std::printf("\nturn 1: %d prompt ids (%d preamble + %d message) and %zu answer ids in "
                    "%.1f s (prefill %.1f s, %d chunks); the state holds %d positions: %s, "
                    "%.4f GB\n",
                    o.preamble + o.message, o.preamble, o.message, r.ids.size(), seconds,
                    r.prefillSeconds, r.prefillChunks, held, stateFile.filename().c_str(),
                    gb(double(stateBytes)));
    }
    std::vector<k3::TokenId> second = conversation;
    const std::vector<k3::TokenId> followUp = someIds(o.followUp, 3, vocab);
    second.insert(second.end(), followUp.begin(), followUp.end());

    // The second turn read cold.
    Turn cold;
    {
        k3::Session s = open(o, {}, openSeconds);
        cold = measure(s, second);
    }
    // The prefill that makes the state's positions again, cold; then the file loaded.
    k3::GenerateResult reread;
    double loadSeconds = 0;
    std::uint64_t loadDisk = 0;
    {
        k3::Session s = open(o, {}, openSeconds);
        dropPageCache();
        k3::GenerateOptions g;
        g.maxTokens = 0;
        const std::vector<k3::TokenId> heldIds(conversation.begin(), conversation.begin() + held);
        reread = s.generateIds(heldIds, g);
        const std::span<const float> r = s.lastLogits();
        expect(reread.valid() && sameBits(std::vector<float>(r.begin(), r.end()), heldLogits),
               "reading the state's positions again gives turn 1's logits");
        s.reset();
        dropPageCache();
        const std::uint64_t d0 = diskReadBytes();
        const auto t0 = Clock::now();
        s.loadState(stateFile);
        loadSeconds = since(t0);
        loadDisk = diskReadBytes() - d0;
        const std::span<const float> l = s.lastLogits();
        expect(s.positions() == held &&
                   sameBits(std::vector<float>(l.begin(), l.end()), heldLogits),
               "the loaded state holds turn 1's positions and logits");
    }
    Turn restored;
    {
        k3::Session s = open(o, cacheA, openSeconds);
        restored = measure(s, second);
    }
    expect(restored.r.restoredPositions == held, "the second turn restores the saved positions");
    expect(restored.r.prefillPositions == int(second.size()) - held,
           "the second turn reads only what follows the state");
    expect(cold.r.ids == restored.r.ids && sameBits(cold.logits, restored.logits),
           "the restored second turn gives the cold one's ids and logits");

    const int followRead = int(second.size()) - held;
    std::printf("\n== 2-turn chat, second turn: %zu prompt ids, the state holds %d (the "
                "conversation), %d to read after it\n",
                second.size(), held, followRead);
    printHeader();
    printRow("cold", cold, 0);
    printRow("restored", restored, stateBytes);
    const double restoredTotal = double(restored.bytesToFirst + stateBytes);
    std::printf(
        "first token: %.2f s cold, %.2f s restored = %.1fx sooner; bytes to it: %.2f GB "
        "vs %.3f GB = %.1fx fewer (disk's count: %.1fx); ids and logits %s\n",
        cold.firstToken, restored.firstToken, cold.firstToken / restored.firstToken,
        gb(double(cold.bytesToFirst)), gb(restoredTotal), double(cold.bytesToFirst) / restoredTotal,
        restored.diskToFirst ? double(cold.diskToFirst) / double(restored.diskToFirst) : 0.0,
        cold.r.ids == restored.r.ids && sameBits(cold.logits, restored.logits) ? "the same bits"
                                                                               : "DIFFERENT");

    std::printf("\n== the state file against re-reading the %d positions it holds\n", held);
    const double rereadBytes = double(reread.prefillTrunkBytes + reread.prefillExpertBytes);
    const double ratio = rereadBytes / double(stateBytes);
    std::printf("state file %.4f GB (%.0f bytes per position held, all in); loadState %.3f s "
                "(%.2f GB/s; disk read %.4f GB)\n",
                gb(double(stateBytes)), double(stateBytes) / held, loadSeconds,
                gb(double(stateBytes)) / loadSeconds, gb(double(loadDisk)));
    std::printf("the prefill of those %d positions, cold: %.2f GB trunk + %.2f GB experts in %d "
                "chunk(s), %.1f s\n",
                held, gb(double(reread.prefillTrunkBytes)), gb(double(reread.prefillExpertBytes)),
                reread.prefillChunks, reread.prefillSeconds);
    std::printf("TARGET restored path reads >= 20x fewer bytes than re-reading the %d-position "
                "conversation: %.2f GB / %.4f GB = %.0fx, %s; seconds %.1f / %.3f = %.0fx\n",
                held, gb(rereadBytes), gb(double(stateBytes)), ratio, verdict(ratio, 20),
                reread.prefillSeconds, loadSeconds, reread.prefillSeconds / loadSeconds);

    // A new conversation: the preamble's state saved by an earlier one, then read cold and
    // restored.
    std::vector<k3::TokenId> fresh = preamble;
    const std::vector<k3::TokenId> newMessage = someIds(o.newMessage, 4, vocab);
    fresh.insert(fresh.end(), newMessage.begin(), newMessage.end());
    std::uint64_t preambleBytes = 0;
    {
        k3::Session s = open(o, cacheB, openSeconds);
        k3::GenerateOptions g;
        g.maxTokens = 0; // read the preamble only; the cache keeps its state
        const k3::GenerateResult r = s.generateIds(preamble, g);
        const std::vector<fs::path> files = stateFiles(cacheB);
        expect(r.statesSaved == 1 && files.size() == 1, "the preamble's state is saved");
        if (files.size() != 1) return 1;
        preambleBytes = fs::file_size(files.front());
    }
    Turn coldNew, cachedNew;
    {
        k3::Session s = open(o, {}, openSeconds);
        coldNew = measure(s, fresh);
    }
    {
        k3::Session s = open(o, cacheB, openSeconds);
        cachedNew = measure(s, fresh);
    }
    expect(cachedNew.r.restoredPositions == o.preamble,
           "the new conversation restores the preamble");
    expect(coldNew.r.ids == cachedNew.r.ids && sameBits(coldNew.logits, cachedNew.logits),
           "the cached preamble gives the cold run's ids and logits");
    std::printf("\n== a new conversation: %zu prompt ids, %d of them the preamble (state file "
                "%.4f GB)\n",
                fresh.size(), o.preamble, gb(double(preambleBytes)));
    printHeader();
    printRow("cold", coldNew, 0);
    printRow("cached", cachedNew, preambleBytes);
    const double sooner = coldNew.firstToken / cachedNew.firstToken;
    std::printf("TARGET first token of a new conversation >= 5x sooner with the preamble cached: "
                "%.2f s / %.2f s = %.1fx, %s (sampled: %.2f / %.2f s = %.1fx); bytes %.2f GB vs "
                "%.3f GB = %.1fx fewer; ids and logits %s\n",
                coldNew.firstToken, cachedNew.firstToken, sooner, verdict(sooner, 5),
                coldNew.r.prefillSeconds, cachedNew.r.prefillSeconds,
                coldNew.r.prefillSeconds / cachedNew.r.prefillSeconds,
                gb(double(coldNew.bytesToFirst)),
                gb(double(cachedNew.bytesToFirst + preambleBytes)),
                double(coldNew.bytesToFirst) / double(cachedNew.bytesToFirst + preambleBytes),
                coldNew.r.ids == cachedNew.r.ids && sameBits(coldNew.logits, cachedNew.logits)
                    ? "the same bits"
                    : "DIFFERENT");
    // Two files of one model give the format's fixed part and bytes per position.
    const double perPosition =
        (double(stateBytes) - double(preambleBytes)) / double(held - o.preamble);
    std::printf("\nstate size: %.0f bytes per position, fixed part %.4f GB (from the two files)\n",
                perPosition, gb(double(preambleBytes) - perPosition * o.preamble));
    if (g_failures) std::printf("%d check(s) FAILED\n", g_failures);
    return g_failures ? 1 : 0;
}
