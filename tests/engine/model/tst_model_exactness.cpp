// The committed tiny checkpoints (tests/fixtures/models/*, resources/demo) give the
// reference's token ids on every kernel path, and the same ids and the same last logits,
// bit for bit, at several memory budgets (a packed trunk streamed through rings of one and
// two layers, layers in pieces, the expert cache at one and top-k slots, streamed tables)
// and chunk sizes (a prompt fed 1, 3, 7 and 64 positions at a time).
//
// The expected ids are the PyTorch reference's (expected.json), which the x86-64 build
// matches (tst_model_gates), so ids equal here mean ids equal to the x86-64 run. Plain C++
// with no Qt: the aarch64 CI leg runs it under qemu-user (tests/cross), where NEON is the
// SIMD path. Usage: tst_model_exactness SCRATCH_DIR [MODEL_NAME...]. Prints one line per
// model and path, then "N passed, N failed".

#include "k3/kernels.hpp"
#include "k3/model.hpp"
#include "k3/pack.hpp"
#include "k3/trunk.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <span>
#include <string>
#include <vector>

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

int gPassed = 0, gFailed = 0;

void check(bool ok, const std::string& what) {
    if (ok) {
        ++gPassed;
        return;
    }
    ++gFailed;
    std::printf("FAIL: %s\n", what.c_str());
}

std::string idsText(const std::vector<int>& ids) {
    std::string s;
    for (int id : ids) s += (s.empty() ? "" : ",") + std::to_string(id);
    return s;
}

struct Run {
    std::vector<int> ids;
    std::vector<float> lastLogits;
    int dropped = 0;
    bool nonFinite = false;
};

// The prompt fed `chunk` positions at a time, then `decode` greedy tokens one at a time.
Run greedy(const k3::Model& m, const std::vector<int>& prompt, int decode, int chunk = 1) {
    const std::size_t V = std::size_t(m.config().vocabSize);
    Run r;
    std::vector<float> logits(V);
    k3::InferenceState st = m.newState();
    for (std::size_t t = 0; t < prompt.size(); t += std::size_t(chunk)) {
        const std::size_t n = std::min(std::size_t(chunk), prompt.size() - t);
        const k3::TokenStats s = m.forward(st, std::span<const int>(prompt.data() + t, n), logits);
        r.dropped += s.droppedExperts;
        r.nonFinite = r.nonFinite || s.nonFinite;
    }
    for (int i = 0; i < decode; ++i) {
        r.ids.push_back(k3::argmax(logits));
        const k3::TokenStats s = m.forward(st, r.ids.back(), logits);
        r.dropped += s.droppedExperts;
        r.nonFinite = r.nonFinite || s.nonFinite;
    }
    r.lastLogits = logits;
    return r;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

// FNV-1a over the bytes of the last logits of the reference's greedy run.
std::uint64_t digest(const std::vector<float>& v) {
    std::uint64_t h = 1469598103934665603ull;
    const auto* p = reinterpret_cast<const unsigned char*>(v.data());
    for (std::size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

// Those digests as the x86-64 build gives them (AVX2 and scalar alike): equal digests on
// another CPU mean the same logits, bit for bit, not only the same ids.
struct X86Digest {
    const char* model;
    std::uint64_t lastLogits;
};
constexpr X86Digest kX86Digests[] = {
    {"demo", 0xe59b0d17747c128full},        {"k3_tiny_a", 0x1333e05c505b1d1cull},
    {"k3_tiny_b", 0x2570e9b64c61188cull},   {"k3_tiny_bf16", 0x88942bab103a1027ull},
    {"k3_tiny_f32", 0xe0fa8af31f63f236ull},
};

std::string hex(std::uint64_t v) {
    char b[24];
    std::snprintf(b, sizeof b, "0x%016llx", static_cast<unsigned long long>(v));
    return b;
}

// The reference's greedy ids and teacher-forcing argmaxes on the path in force.
Run referenceIds(const std::string& name, const fs::path& dir, const json& expected) {
    const std::string path = k3::kernelPathName(k3::kernelPath());
    const k3::Model model = k3::Model::load(dir);
    const auto prompt = expected.at("prompt_ids").get<std::vector<int>>();
    const auto want = expected.at("greedy").at("incremental").get<std::vector<int>>();
    const Run r = greedy(model, prompt, int(want.size()));
    check(r.ids == want, name + " " + path + ": greedy ids " + idsText(r.ids) +
                             ", the reference's " + idsText(want));
    check(r.dropped == 0 && !r.nonFinite, name + " " + path + ": a valid run");

    const auto full = expected.at("full_ids").get<std::vector<int>>();
    const auto wantTf = expected.at("full_ids_teacher_forcing_argmax").get<std::vector<int>>();
    std::vector<float> logits(std::size_t(model.config().vocabSize));
    k3::InferenceState st = model.newState();
    std::vector<int> tf;
    for (int id : full) {
        model.forward(st, id, logits);
        tf.push_back(k3::argmax(logits));
    }
    check(tf == wantTf, name + " " + path + ": teacher-forcing argmax " + idsText(tf) +
                            ", the reference's " + idsText(wantTf));
    return r;
}

// Several budgets and chunk sizes against the resident one-position run on this path.
void budgetsAndChunks(const std::string& name, const fs::path& dir, const json& expected,
                      const fs::path& scratch) {
    const std::string path = k3::kernelPathName(k3::kernelPath());
    auto prompt = expected.at("prompt_ids").get<std::vector<int>>();
    prompt.resize(std::min<std::size_t>(prompt.size(), 12)); // qemu is slow: a short prompt
    constexpr int kDecode = 6;
    const k3::Model resident = k3::Model::load(dir);
    const Run ref = greedy(resident, prompt, kDecode);
    check(ref.dropped == 0 && !ref.nonFinite, name + " " + path + ": resident run valid");

    for (int chunk : {3, 7, 64}) {
        const Run r = greedy(resident, prompt, kDecode, chunk);
        check(r.ids == ref.ids && sameBits(r.lastLogits, ref.lastLogits),
              name + " " + path + ": chunk " + std::to_string(chunk) + " gives ids " +
                  idsText(r.ids) + " (one position at a time: " + idsText(ref.ids) + ")");
    }

    const fs::path trunk = scratch / (name + "-trunk");
    fs::remove_all(trunk);
    k3::packTrunk(dir, trunk);
    const k3::TrunkIndex idx = k3::openTrunkIndex(trunk, dir);
    std::uint64_t all = 0, largest = 0, maxPiece = 0;
    for (const auto& layer : idx.layers) {
        all += k3::alignUp(layer.bytes);
        largest = std::max(largest, layer.bytes);
        maxPiece = std::max(maxPiece, k3::largestPieceBytes(layer));
    }
    const int topK = resident.config().numExpertsPerToken;
    struct Budget {
        const char* what;
        std::uint64_t trunk;
        int cacheSlots;
        bool tables;
        int chunk;
    };
    const Budget budgets[] = {
        {"all pinned, every expert through a top-k cache", all, topK, false, 1},
        {"nothing pinned, ring of 2", 2 * k3::alignUp(largest), 0, false, 1},
        {"nothing pinned, ring of 1, 1 expert slot", k3::alignUp(largest), 1, false, 1},
        {"layers in pieces, ring of 2, chunks of 7", 2 * maxPiece, 0, false, 7},
        {"ultra: pieces through a ring of 1, tables streamed, 1 expert slot, chunks of 3", maxPiece,
         1, true, 3},
    };
    for (const Budget& b : budgets) {
        k3::LaunchConfig o;
        o.modelDir = dir;
        o.trunkDir = trunk;
        o.budget.trunkBytes = b.trunk;
        o.budget.modelTablesOnDisk = b.tables;
        k3::LaunchDiagnostics d;
        d.expertCacheSlots = b.cacheSlots;
        d.tableBlockBytes = 3 * 4096;
        const k3::Model m = k3::Model::load(o, d);
        const Run r = greedy(m, prompt, kDecode, b.chunk);
        check(r.dropped == 0, name + " " + path + ", " + b.what + ": no dropped expert");
        check(m.memoryPlan().trunkBytes() <= b.trunk,
              name + " " + path + ", " + b.what + ": the plan within the budget");
        check(r.ids == ref.ids && sameBits(r.lastLogits, ref.lastLogits),
              name + " " + path + ", " + b.what + ": ids " + idsText(r.ids) + " (resident " +
                  idsText(ref.ids) + ") and the same last logits");
    }
    fs::remove_all(trunk);
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: tst_model_exactness SCRATCH_DIR [MODEL_NAME...]\n");
        return 2;
    }
    const fs::path scratch = argv[1];
    fs::create_directories(scratch);
    std::vector<std::string> only(argv + 2, argv + argc);
    std::vector<std::pair<std::string, fs::path>> models;
    for (const fs::path& d :
         fs::directory_iterator(fs::path(K3_SOURCE_DIR) / "tests/fixtures/models"))
        if (fs::exists(d / "expected.json")) models.emplace_back(d.filename().string(), d);
    models.emplace_back("demo", fs::path(K3_SOURCE_DIR) / "resources/demo");
    std::sort(models.begin(), models.end());
    int ran = 0;
    for (const auto& [name, dir] : models) {
        if (!only.empty() && std::find(only.begin(), only.end(), name) == only.end()) continue;
        ++ran;
        std::ifstream in(dir / "expected.json");
        const json expected = json::parse(in);
        // Every path this CPU has (the widest first, then scalar): the reference ids on each,
        // and the same last logits bit for bit between them.
        std::vector<k3::KernelPath> paths;
        k3::resetKernelPath();
        paths.push_back(k3::kernelPath());
        if (paths.front() != k3::KernelPath::Scalar) paths.push_back(k3::KernelPath::Scalar);
        std::vector<float> firstLogits;
        for (k3::KernelPath p : paths) {
            k3::setKernelPath(p);
            const int before = gFailed;
            const auto t0 = std::chrono::steady_clock::now();
            const Run r = referenceIds(name, dir, expected);
            if (firstLogits.empty()) {
                firstLogits = r.lastLogits;
                std::uint64_t want = 0;
                for (const X86Digest& d : kX86Digests)
                    if (name == d.model) want = d.lastLogits;
                check(digest(r.lastLogits) == want,
                      name + " " + k3::kernelPathName(p) + ": last logits digest " +
                          hex(digest(r.lastLogits)) + ", x86-64 gives " + hex(want));
            } else
                check(sameBits(r.lastLogits, firstLogits),
                      name + ": " + k3::kernelPathName(p) + " gives the last logits of " +
                          k3::kernelPathName(paths.front()) + " bit for bit");
            // Budgets and chunks on the widest path only (qemu is slow; tst_memory_model
            // and tst_chunk_forward cover every budget on the host).
            if (p == paths.front()) budgetsAndChunks(name, dir, expected, scratch);
            const double s =
                std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
            std::printf("%s %s %s (%.1f s)\n", gFailed == before ? "PASS" : "FAIL", name.c_str(),
                        k3::kernelPathName(p), s);
        }
    }
    k3::resetKernelPath();
    check(ran > 0, "at least one checkpoint ran");
    std::printf("%d passed, %d failed\n", gPassed, gFailed);
    return gFailed == 0 ? 0 : 1;
}
