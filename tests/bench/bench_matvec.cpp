// Weights per second through each matvec kernel, next to this machine's measured
// memory read bandwidth. A decode step is a stream of matvecs over weights that do not
// fit in cache, so the ratio says how close a kernel gets to the memory wall.
//
// Usage: bench_matvec [megabytes per weight matrix, default 256]

#include "k3/kernels.hpp"
#include "k3/system.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <random>
#include <vector>

using namespace k3;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

// Best of `reps` runs of fn, in seconds.
template <typename Fn> double bestOf(int reps, Fn&& fn) {
    double best = 1e30;
    for (int r = 0; r < reps; ++r) {
        const auto t0 = Clock::now();
        fn();
        best = std::min(best, seconds(t0, Clock::now()));
    }
    return best;
}

// Read bandwidth: every thread sums its share of a large buffer with four independent
// accumulators, so the loop is limited by memory, not by an addition chain.
double readBandwidth(const std::vector<std::uint64_t>& buf, std::uint64_t& sink) {
    const std::size_t quads = buf.size() / 4;
    const std::uint64_t* p = buf.data();
    const double t = bestOf(3, [&] {
        std::uint64_t total = 0;
#pragma omp parallel for schedule(static) reduction(+ : total)
        for (std::size_t q = 0; q < quads; ++q) {
            const std::uint64_t* w = p + 4 * q;
            total += (w[0] ^ w[1]) + (w[2] ^ w[3]);
        }
        sink += total;
    });
    return double(quads * 4 * sizeof(std::uint64_t)) / t / 1e9;
}

double copyBandwidth(std::vector<std::uint64_t>& dst, const std::vector<std::uint64_t>& src) {
    const double t =
        bestOf(3, [&] { std::memcpy(dst.data(), src.data(), src.size() * sizeof(std::uint64_t)); });
    return double(2 * src.size() * sizeof(std::uint64_t)) / t / 1e9; // read + write
}

} // namespace

int main(int argc, char** argv) {
    const double mb = argc > 1 ? std::atof(argv[1]) : 256.0;
    if (!(mb >= 1.0 && mb <= 8192.0)) {
        std::fprintf(stderr, "bench_matvec: megabytes per matrix must be 1..8192, got %s\n",
                     argv[1]);
        return 2;
    }
    const std::size_t bytes = std::size_t(mb * 1024 * 1024);
    const int cols = 7168; // the model's hidden width
    std::printf("CPU: %s, %d OpenMP threads, %.0f MB per weight matrix\n",
                detectCpuFeatures().summary().c_str(), omp_get_max_threads(), mb);

    std::vector<std::uint64_t> a(bytes / 8, 1), b(bytes / 8, 0);
    std::uint64_t sink = 0;
    const double readGBs = readBandwidth(a, sink);
    const double copyGBs = copyBandwidth(b, a);
    std::printf("memory: read %.2f GB/s, memcpy %.2f GB/s (read+write)\n\n", readGBs, copyGBs);
    a.clear();
    a.shrink_to_fit();
    b.clear();
    b.shrink_to_fit();

    std::mt19937 rng(1);
    std::uniform_int_distribution<int> byte(0, 255);
    std::vector<float> x(cols);
    for (auto& v : x) v = float(byte(rng)) / 255.0f - 0.5f;

    const int rowsF32 = int(bytes / (cols * sizeof(float)));
    const int rowsBf16 = int(bytes / (cols * sizeof(std::uint16_t)));
    const std::size_t mxRow = mxfp4RowBytes(cols) + mxfp4ScalesPerRow(cols);
    const int rowsMx = int(bytes / mxRow);
    std::vector<float> wf(std::size_t(rowsF32) * cols);
    for (std::size_t i = 0; i < wf.size(); ++i) wf[i] = float(i % 97) * 0.01f - 0.48f;
    std::vector<std::uint16_t> wb(std::size_t(rowsBf16) * cols);
    for (std::size_t i = 0; i < wb.size(); ++i) wb[i] = std::uint16_t(0x3C00 + i % 255);
    std::vector<std::uint8_t> packed(std::size_t(rowsMx) * mxfp4RowBytes(cols));
    std::vector<std::uint8_t> scales(std::size_t(rowsMx) * mxfp4ScalesPerRow(cols), 121);
    for (auto& p : packed) p = std::uint8_t(byte(rng));
    std::vector<float> y(std::max({rowsF32, rowsBf16, rowsMx}));

    struct Kernel {
        const char* name;
        double weightBytes;
        double weights;
        std::function<void()> run;
    };
    const Kernel kernels[] = {
        {"f32", double(wf.size() * sizeof(float)), double(wf.size()),
         [&] { matvecF32(y.data(), x.data(), wf.data(), rowsF32, cols); }},
        {"bf16", double(wb.size() * sizeof(std::uint16_t)), double(wb.size()),
         [&] { matvecBf16(y.data(), x.data(), wb.data(), rowsBf16, cols); }},
        {"mxfp4", double(packed.size() + scales.size()), double(rowsMx) * cols,
         [&] { matvecMxfp4(y.data(), x.data(), packed.data(), scales.data(), rowsMx, cols); }},
    };

    std::printf("%-7s %-9s %10s %12s %12s %10s\n", "kernel", "path", "ms", "GB/s weights",
                "Gweights/s", "vs read");
    for (const Kernel& k : kernels) {
        for (KernelPath p : {KernelPath::Scalar, KernelPath::Avx2}) {
            if (!kernelPathAvailable(p)) {
                std::printf("%-7s %-9s %10s   (not available on this CPU)\n", k.name,
                            kernelPathName(p), "-");
                continue;
            }
            setKernelPath(p);
            k.run(); // warm up: page in, fault the output
            const double t = bestOf(p == KernelPath::Scalar ? 2 : 4, k.run);
            const double gbs = k.weightBytes / t / 1e9;
            std::printf("%-7s %-9s %10.2f %12.2f %12.2f %9.0f%%\n", k.name, kernelPathName(p),
                        t * 1e3, gbs, k.weights / t / 1e9, 100.0 * gbs / readGBs);
        }
    }
    resetKernelPath();
    std::printf("\n(checksum %llu %g)\n", static_cast<unsigned long long>(sink), double(y[0]));
    return 0;
}
