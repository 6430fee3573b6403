// Writes a synthetic Kimi K3 checkpoint in the released format at the real widths (see
// SynthCheckpoint.hpp), for streaming benchmarks and full-width tests without the
// 1.56 TB download.
//
//   synth_checkpoint OUT_DIR [--layers N=2] [--experts E=4] [--seed S=1] [--gaussian-trunk 1]
//                    [--routing-trace expert_trace.bin [--trace-layer T=1]] [--vision 1] [--sparse
//                    1]
//
// --routing-trace: each MoE layer L routes only inside the experts the trace used at its
// layer T + L - 1 (the router bias; see SynthOptions::allowedExperts).
//
// --sparse 1: the headers only, tensor bytes as holes (a few MB of disk whatever the
// size), and OUT_DIR/trunk the trunk `k3 pack` would write for it, also a hole. The
// full-size model as the planner sees it (docs/make-screenshots.sh):
//   synth_checkpoint /tmp/k3-fullsize --layers 93 --experts 896 --vision 1 --sparse 1
#include "SynthCheckpoint.hpp"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>

int main(int argc, char** argv) {
    if (argc < 2 || std::strcmp(argv[1], "--help") == 0) {
        std::fprintf(stderr,
                     "usage: synth_checkpoint OUT_DIR [--layers N] [--experts E] [--seed S] "
                     "[--gaussian-trunk 1] [--routing-trace FILE [--trace-layer T]] [--vision 1] "
                     "[--sparse 1]\n");
        return 2;
    }
    k3synth::SynthOptions o;
    std::string trace;
    int traceLayer = 1;
    for (int i = 2; i < argc; ++i) {
        const std::string a = argv[i];
        if (i + 1 >= argc) {
            std::fprintf(stderr, "synth_checkpoint: %s needs a value\n", a.c_str());
            return 2;
        }
        if (a == "--routing-trace") {
            trace = argv[++i];
            continue;
        }
        char* end = nullptr;
        const long long v = std::strtoll(argv[++i], &end, 10);
        if (!end || *end || v < 0) {
            std::fprintf(stderr, "synth_checkpoint: %s %s is not a number\n", a.c_str(), argv[i]);
            return 2;
        }
        if (a == "--layers")
            o.layers = int(v);
        else if (a == "--experts")
            o.experts = int(v);
        else if (a == "--seed")
            o.seed = std::uint64_t(v);
        else if (a == "--trace-layer")
            traceLayer = int(v);
        else if (a == "--gaussian-trunk") // the layers' BF16 as fresh N(0, 0.02) draws
            o.gaussianTrunk = v != 0;
        else if (a == "--vision") // the vision tower and projector, and vision_config
            o.vision = v != 0;
        else if (a == "--sparse") // headers over holes, and the trunk for them
            o.sparse = v != 0;
        else {
            std::fprintf(stderr, "synth_checkpoint: unknown option %s\n", a.c_str());
            return 2;
        }
    }
    try {
        if (!trace.empty()) {
            o.allowedExperts = k3synth::traceExpertUnions(trace, o.layers, traceLayer);
            for (int L = 1; L < o.layers; ++L)
                std::printf("layer %d routes inside the %zu experts trace layer %d used\n", L,
                            o.allowedExperts[std::size_t(L)].size(), traceLayer + L - 1);
        }
        std::printf("writing %.2f GB%s (%d layers x %d experts, real widths) to %s\n",
                    double(k3synth::synthCheckpointBytes(o)) / 1e9, o.sparse ? " of holes" : "",
                    o.layers, o.experts, argv[1]);
        const auto r =
            k3synth::writeSynthCheckpoint(argv[1], o, [](std::uint64_t done, std::uint64_t total) {
                std::fprintf(stderr, "\r  %.2f / %.2f GB", double(done) / 1e9, double(total) / 1e9);
            });
        std::fprintf(stderr, "\n");
        std::printf("wrote %d tensors in %d shards, %.2f GB in %.1f s (%.2f GB/s)\n", r.tensors,
                    r.shards, double(r.bytes) / 1e9, r.seconds, double(r.bytes) / 1e9 / r.seconds);
        if (o.sparse) {
            const std::filesystem::path trunk = std::filesystem::path(argv[1]) / "trunk";
            const std::uint64_t bytes = k3synth::writeZeroTrunk(argv[1], trunk);
            std::printf("wrote its trunk (%.2f GB of holes) to %s\n", double(bytes) / 1e9,
                        trunk.c_str());
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "synth_checkpoint: %s\n", e.what());
        return 1;
    }
    return 0;
}
