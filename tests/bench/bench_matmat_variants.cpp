// Old vs new multi-column kernel on the same inputs, interleaved in the same rounds, with
// the bits compared: the figures behind a kernel change in docs/measurements.md.
//
//   bench_matmat_variants [rounds=7]   (threads: OMP_NUM_THREADS)
//
// Times are per-process CPU seconds (the machine is shared; a thread waiting for a core
// costs wall time, not CPU time) and wall seconds; the ratio is old time / new time.
#include "k3/kernels.hpp"

#include <omp.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <random>
#include <vector>

namespace k3::detail {
// engine/src/kernels/MatvecRows.hpp: tiles of fewer columns scale the partial sums.
extern std::atomic<int> gMxfp4ScalePartsBelow;
} // namespace k3::detail

namespace {

double cpuSeconds() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) + 1e-9 * double(t.tv_nsec);
}

double wallSeconds() {
    return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
}

struct Timing {
    double cpu = 1e30, wall = 1e30;
};

} // namespace

int main(int argc, char** argv) {
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
    std::mt19937 rng(7);
    std::uniform_int_distribution<int> byte(0, 255), scale(118, 130);
    std::normal_distribution<float> normal(0.0f, 1.0f);
    struct Shape {
        int rows, cols;
    };
    const Shape shapes[] = {{3072, 3584}, {3584, 3072}};
    const int columnCounts[] = {2, 3, 4, 6, 8, 12, 16, 32};
    const int chosen = k3::detail::gMxfp4ScalePartsBelow.load();
    std::printf("MXFP4 matmat, old (decoded weights times the scale, every tile) vs new (each "
                "column's partial sums times the scale), best of %d rounds, %d threads, %s path; "
                "the engine scales the partial sums below %d columns\n",
                rounds, omp_get_max_threads(), k3::kernelPathName(k3::kernelPath()), chosen);
    std::printf("%-12s %4s %10s %10s %8s %10s %10s %8s %s\n", "matrix", "T", "old cpu ms",
                "new cpu ms", "cpu old/new", "old GF/s", "new GF/s", "wall o/n", "bits");
    for (const Shape& s : shapes) {
        const std::size_t rowBytes = k3::mxfp4RowBytes(s.cols),
                          rowScales = k3::mxfp4ScalesPerRow(s.cols);
        std::vector<std::uint8_t> packed(rowBytes * s.rows), scales(rowScales * s.rows);
        for (auto& b : packed) b = std::uint8_t(byte(rng));
        for (auto& b : scales) b = std::uint8_t(scale(rng));
        const k3::WeightView w =
            k3::WeightView::mxfp4(packed.data(), scales.data(), s.rows, s.cols);
        for (int T : columnCounts) {
            std::vector<float> x(std::size_t(T) * s.cols);
            for (auto& v : x) v = normal(rng);
            std::vector<float> yOld(std::size_t(T) * s.rows), yNew(yOld.size());
            Timing old, neu;
            for (int r = 0; r < rounds; ++r)
                for (int variant = 0; variant < 2; ++variant) {
                    k3::detail::gMxfp4ScalePartsBelow = variant == 1 ? 1 << 30 : 0;
                    float* y = variant ? yNew.data() : yOld.data();
                    const double c0 = cpuSeconds(), w0 = wallSeconds();
                    k3::matmat(y, x.data(), w, T);
                    const double cpu = cpuSeconds() - c0, wall = wallSeconds() - w0;
                    Timing& t = variant ? neu : old;
                    t.cpu = std::min(t.cpu, cpu);
                    t.wall = std::min(t.wall, wall);
                }
            k3::detail::gMxfp4ScalePartsBelow = chosen;
            const bool same = std::memcmp(yOld.data(), yNew.data(), yOld.size() * 4) == 0;
            const double flops = 2.0 * s.rows * double(s.cols) * T;
            const int threads = omp_get_max_threads();
            char name[32];
            std::snprintf(name, sizeof name, "%dx%d", s.rows, s.cols);
            std::printf("%-12s %4d %10.3f %10.3f %10.3fx %10.1f %10.1f %7.3fx %s\n", name, T,
                        old.cpu * 1e3, neu.cpu * 1e3, old.cpu / neu.cpu,
                        flops / (old.cpu / threads) / 1e9, flops / (neu.cpu / threads) / 1e9,
                        old.wall / neu.wall, same ? "same" : "DIFFERENT");
            if (!same) return 1;
        }
    }
    return 0;
}
