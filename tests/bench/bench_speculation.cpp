// Exact greedy speculation, in one run:
//   1. the demo model with its trunk streamed through the smallest ring (--trunk-gb 0):
//      seconds per committed token and tokens per trunk pass, serial vs --spec auto / 4 / 8,
//      on text that repeats the prompt and on text that does not (the overhead case);
//   2. with --synth SYNTH_DIR TRUNK_DIR (the synthetic full-width checkpoint): the cost of
//      verifying k = 2, 4, 8 positions in one pass relative to one position, at
//      --trunk-gb 1.5 --cache-gb 0.5;
//   3. with --all-rejected MODEL_DIR TRUNK_DIR DRAFT_DIR|- (the worst case: every proposal's
//      first token is made wrong after the proposer paid for it): seconds per token of
//      serial decode and of --spec auto, in interleaved pairs (--pairs N, default 2), at
//      --trunk-gb 1.5 --cache-gb 0.5, with the draft trunk or (-) prompt lookup.
// Every speculative run is checked against the serial ids (exit 1 if they differ).
//
//   bench_speculation DEMO_DIR [--gen 64] [--rejecting TINY_DIR] [--synth SYNTH_DIR TRUNK_DIR]
#include <k3/model.hpp>
#include <k3/pack.hpp>
#include <k3/session.hpp>
#include <k3/speculation.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>

#include <string>
#include <unistd.h>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

struct Row {
    double secondsPerToken = 0;
    double tokensPerPass = 0;
    int proposed = 0, accepted = 0, passes = 0;
    std::vector<k3::TokenId> ids;
};

Row decode(const k3::LaunchConfig& so, const k3::LaunchDiagnostics& sd,
           const std::vector<k3::TokenId>& prompt, int gen, int spec) {
    k3::Session s = k3::Session::open(so, sd);
    k3::GenerateOptions o;
    o.maxTokens = gen;
    o.speculation = spec;
    const k3::GenerateResult r = s.generateIds(prompt, o);
    Row row;
    row.ids = r.ids;
    row.secondsPerToken = r.decodeSeconds / double(r.ids.size());
    row.passes = r.decodePasses;
    row.proposed = r.proposed;
    row.accepted = r.acceptedProposals;
    row.tokensPerPass =
        r.decodePasses ? double(r.decodePasses + r.acceptedProposals) / r.decodePasses : 0;
    return row;
}

int demoPart(const std::string& demo, int gen) {
    const std::filesystem::path trunk =
        std::filesystem::temp_directory_path() / ("k3-bench-spec-" + std::to_string(::getpid()));
    k3::packTrunk(demo, trunk);
    k3::LaunchConfig so;
    so.modelDir = demo;
    so.trunkDir = trunk;
    so.budget.trunkBytes = 0; // the smallest ring: every layer read on every pass
    k3::LaunchDiagnostics sd;
    sd.loadTokenizer = false;
    const int vocab = k3::Session::open(so, sd).config().vocabSize;
    std::vector<k3::TokenId> repeating, plain;
    for (int r = 0; r < 3; ++r)
        for (int i = 0; i < 9; ++i) repeating.push_back((i * 41 + 5) % vocab);
    for (int i = 0; i < 27; ++i) plain.push_back((i * 7919 + 101) % vocab);
    std::printf("\n%s, trunk streamed through one slot (--trunk-gb 0), %d tokens\n", demo.c_str(),
                gen);
    std::printf("%-10s %-8s %12s %10s %8s %9s %7s %s\n", "text", "spec", "s/token", "vs serial",
                "passes", "proposed", "accept", "tokens/pass");
    int rc = 0;
    for (const auto& [name, prompt] :
         {std::pair{"repeating", repeating}, std::pair{"plain", plain}}) {
        const Row serial = decode(so, sd, prompt, gen, 0);
        for (int spec : {0, -1, 4, 8}) {
            const Row r = spec == 0 ? serial : decode(so, sd, prompt, gen, spec);
            if (r.ids != serial.ids) {
                std::printf("DIFFERENT IDS at spec %d\n", spec);
                rc = 1;
            }
            std::printf("%-10s %-8s %12.5f %9.2fx %8d %9d %7d %.2f\n", name,
                        spec == 0  ? "off"
                        : spec < 0 ? "auto"
                                   : std::to_string(spec).c_str(),
                        r.secondsPerToken, serial.secondsPerToken / r.secondsPerToken, r.passes,
                        r.proposed, r.accepted, r.tokensPerPass);
        }
    }
    std::filesystem::remove_all(trunk);
    return rc;
}

void synthPart(const std::string& dir, const std::string& trunk) {
    k3::LaunchConfig o;
    o.modelDir = dir;
    o.trunkDir = trunk;
    o.budget.trunkBytes = 1'500'000'000;
    o.budget.cacheBytes = 500'000'000;
    o.contextLength = 256;
    k3::LaunchDiagnostics d;
    d.enforceMemoryPlan = false;
    const k3::Model m = k3::Model::load(o, d);
    const std::size_t V = std::size_t(m.config().vocabSize);
    std::printf(
        "\nsynthetic %s: verifying k positions in one pass (--trunk-gb 1.5 --cache-gb 0.5)\n",
        dir.c_str());
    std::printf("%-4s %10s %12s %14s\n", "k", "seconds", "vs k=1", "trunk GB read");
    std::vector<int> prompt;
    for (int i = 0; i < 8; ++i) prompt.push_back((i * 7919 + 13) % int(V));
    k3::InferenceState st = m.newState();
    std::vector<float> last(V);
    m.forward(st, prompt, last);
    double one = 0;
    for (int k : {1, 2, 4, 8}) {
        std::vector<int> chunk;
        for (int i = 0; i < k; ++i) chunk.push_back((i * 31 + 7) % int(V));
        std::vector<float> all(std::size_t(k) * V);
        const k3::MemoryStats before = m.memoryStats();
        const auto t0 = Clock::now();
        m.forward(st, chunk, all, true);
        const double s = since(t0);
        const k3::MemoryStats after = m.memoryStats();
        m.rollback(st, int(prompt.size()));
        if (k == 1) one = s;
        std::printf("%-4d %10.2f %11.2fx %14.2f\n", k, s, s / one,
                    double(after.trunk.bytesRead - before.trunk.bytesRead) / 1e9);
        std::fflush(stdout);
    }
}

// Serial vs auto width where nothing is accepted: the filter makes each proposal's first
// token differ from the serial answer's (the proposer's cost is paid, the pass wasted).
int allRejectedPart(const std::string& model, const std::string& trunk, const std::string& draft,
                    int gen, int pairs) {
    k3::LaunchConfig so;
    so.modelDir = model;
    so.trunkDir = trunk;
    so.budget.trunkBytes = 1'500'000'000;
    so.budget.cacheBytes = 500'000'000;
    so.contextLength = 256;
    if (draft != "-") so.draftDir = draft;
    k3::LaunchDiagnostics sd;
    sd.loadTokenizer = false;
    sd.enforceMemoryPlan = false;
    const int vocab = k3::Session::open(so, sd).config().vocabSize;
    std::vector<k3::TokenId> prompt;
    for (int r = 0; r < 3; ++r)
        for (int i = 0; i < 9; ++i) prompt.push_back((i * 41 + 5) % vocab);
    std::printf("\n%s, every proposal rejected, %s, %d tokens, --trunk-gb 1.5 --cache-gb 0.5\n",
                model.c_str(), draft == "-" ? "prompt lookup" : "draft trunk", gen);
    std::printf("%-5s %12s %12s %9s %8s %9s\n", "pair", "serial s/tok", "auto s/tok", "auto/ser",
                "passes", "proposed");
    int rc = 0;
    std::vector<double> ratios;
    for (int p = 0; p < pairs; ++p) {
        const Row serial = decode(so, sd, prompt, gen, 0);
        k3::setProposalFilterForBenchmarks(
            k3::rejectEveryProposal(serial.ids, prompt.size(), vocab));
        const Row spec = decode(so, sd, prompt, gen, -1);
        k3::setProposalFilterForBenchmarks({});
        if (spec.ids != serial.ids || spec.accepted != 0) {
            std::printf("DIFFERENT IDS or an accepted proposal (%d)\n", spec.accepted);
            rc = 1;
        }
        ratios.push_back(spec.secondsPerToken / serial.secondsPerToken);
        std::printf("%-5d %12.4f %12.4f %8.3fx %8d %9d\n", p + 1, serial.secondsPerToken,
                    spec.secondsPerToken, ratios.back(), spec.passes, spec.proposed);
        std::fflush(stdout);
    }
    std::sort(ratios.begin(), ratios.end());
    std::printf("auto/serial: min %.3f, median %.3f, max %.3f\n", ratios.front(),
                ratios[ratios.size() / 2], ratios.back());
    return rc;
}

} // namespace

int main(int argc, char** argv) {
    if (argc < 2) {
        std::fprintf(stderr, "usage: bench_speculation DEMO_DIR [--gen 64] [--rejecting TINY_DIR] "
                             "[--synth SYNTH_DIR TRUNK_DIR] [--all-rejected MODEL TRUNK DRAFT|- "
                             "[--pairs N]]\n");
        return 2;
    }
    int gen = 64;
    int pairs = 2;
    std::string synth, synthTrunk, rejecting, worstModel, worstTrunk, worstDraft;
    for (int i = 2; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--gen" && i + 1 < argc)
            gen = std::atoi(argv[++i]);
        else if (a == "--pairs" && i + 1 < argc)
            pairs = std::max(1, std::atoi(argv[++i]));
        else if (a == "--all-rejected" && i + 3 < argc) {
            worstModel = argv[++i];
            worstTrunk = argv[++i];
            worstDraft = argv[++i];
        } else if (a == "--rejecting" && i + 1 < argc)
            rejecting = argv[++i];
        else if (a == "--synth" && i + 2 < argc) {
            synth = argv[++i];
            synthTrunk = argv[++i];
        } else {
            std::fprintf(stderr, "bench_speculation: unknown option %s\n", a.c_str());
            return 2;
        }
    }
    if (!worstModel.empty()) // on its own: the demo part would load the disk first
        return allRejectedPart(worstModel, worstTrunk, worstDraft, gen, pairs);
    int rc = demoPart(argv[1], gen);
    // A model whose output never repeats the prompt (random weights): every proposal is
    // rejected, the overhead case.
    if (!rejecting.empty()) rc |= demoPart(rejecting, gen);
    if (!synth.empty()) synthPart(synth, synthTrunk);
    return rc;
}
