// Matvec at Kimi K3's real shapes next to this machine's memory read bandwidth,
// measured in the same run. A decode step is a stream of matvecs over weights that do
// not fit in cache, so the BF16 figure is judged against the read bandwidth; MXFP4
// experts are small (5.5 MB) but streamed cold in a real decode, so the benchmark
// cycles through enough distinct experts to defeat the last-level cache.
//
// The read bandwidth is a plain sum over 512 MB, read both as one stream per thread and
// as eight side by side; the faster counts (the kernels read several rows at once, and
// the bandwidth is whatever the machine can deliver to a reader like them or better).
// Each round measures the read bandwidth and then the kernel right after it, so a
// machine shared with other jobs disturbs both alike; the table keeps the best time of
// each over the rounds and also prints the median of the per-round ratios.
//
// The multi-column section times matmat at T = 1, 8, 16 and 32 columns next to the
// single-column matvec of the same matrix, interleaved in the same rounds: the ratio of
// the GFLOP/s is what sharing one pass over the weights among T columns buys. It also
// prints the double-FMA ceiling of the machine, from a clock measured with a chain of
// dependent integer adds (one per cycle).
//
// Usage: bench_matvec [rounds, default 7] [all | matvec | matmat, default all]
//        (threads: OMP_NUM_THREADS, default all)

#include "k3/kernels.hpp"
#include "k3/system.hpp"

#include <omp.h>

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <fstream>
#include <functional>
#include <string>
#include <vector>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

using namespace k3;
using Clock = std::chrono::steady_clock;

namespace {

double seconds(Clock::time_point a, Clock::time_point b) {
    return std::chrono::duration<double>(b - a).count();
}

std::string loadAverage() {
    std::ifstream f("/proc/loadavg");
    std::string a, b, c;
    if (!(f >> a >> b >> c)) return "unknown";
    return a + " " + b + " " + c;
}

// Sums every 64-bit word of [p, p + n) (n a multiple of 128 bytes): a consumer that
// reads every byte, as the kernels do, with four independent accumulators so the loop
// is limited by memory and not by an addition chain.
std::uint64_t sumPortable(const std::uint64_t* p, std::size_t words) {
    std::uint64_t a = 0, b = 0, c = 0, d = 0;
    for (std::size_t i = 0; i < words; i += 4) {
        a += p[i];
        b += p[i + 1];
        c += p[i + 2];
        d += p[i + 3];
    }
    return a + b + c + d;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) std::uint64_t sumAvx2(const std::uint64_t* p, std::size_t words) {
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (std::size_t i = 0; i < words; i += 16) {
        a = _mm256_add_epi64(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i)));
        b = _mm256_add_epi64(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 4)));
        c = _mm256_add_epi64(c, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 8)));
        d = _mm256_add_epi64(d, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + i + 12)));
    }
    alignas(32) std::uint64_t t[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(t),
                       _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
    return t[0] + t[1] + t[2] + t[3];
}
#endif

// Process CPU seconds (all threads): with the machine shared, wall time counts the
// time our threads waited for a core; CPU time over the thread count estimates the
// wall time the run would take with the cores to itself (spinning at OpenMP barriers is
// counted, so the estimate errs on the slow side).
double cpuSeconds() {
    timespec t{};
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

// Reads [p, p + words) as kStreams equal parts side by side, 128 bytes of each in turn:
// the pattern of a kernel that walks several rows at once. Some machines read faster
// this way than along one stream (this VM: up to 1.2x), so the probe tries both.
constexpr int kStreams = 8;
std::uint64_t sumStreamsPortable(const std::uint64_t* p, std::size_t words) {
    const std::size_t part = words / kStreams / 16 * 16;
    std::uint64_t total = 0;
    for (std::size_t i = 0; i < part; i += 16)
        for (int s = 0; s < kStreams; ++s) total += sumPortable(p + s * part + i, 16);
    return total;
}

#if defined(__x86_64__)
__attribute__((target("avx2"))) std::uint64_t sumStreamsAvx2(const std::uint64_t* p,
                                                             std::size_t words) {
    const std::size_t part = words / kStreams / 16 * 16;
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (std::size_t i = 0; i < part; i += 16) {
        for (int s = 0; s < kStreams; ++s) {
            const std::uint64_t* q = p + s * part + i;
            a = _mm256_add_epi64(a, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q)));
            b = _mm256_add_epi64(b, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 4)));
            c = _mm256_add_epi64(c, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 8)));
            d = _mm256_add_epi64(d, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(q + 12)));
        }
    }
    alignas(32) std::uint64_t t[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(t),
                       _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d)));
    return t[0] + t[1] + t[2] + t[3];
}
#endif

struct ReadRate {
    double wall = 0; // GB/s over wall time
    double cpu = 0;  // GB/s over per-thread CPU time
};

// One pass over buf with all OpenMP threads (static split), each thread reading its
// part as one stream or as kStreams.
ReadRate readPass(const std::vector<std::uint64_t>& buf, bool avx2, bool streams,
                  std::uint64_t& sink) {
    const int threads = omp_get_max_threads();
    const std::size_t per = buf.size() / threads / (16 * kStreams) * (16 * kStreams);
    std::uint64_t total = 0;
    const double c0 = cpuSeconds();
    const auto t0 = Clock::now();
#pragma omp parallel reduction(+ : total)
    {
        const std::uint64_t* p = buf.data() + per * omp_get_thread_num();
#if defined(__x86_64__)
        if (avx2)
            total += streams ? sumStreamsAvx2(p, per) : sumAvx2(p, per);
        else
#endif
            total += streams ? sumStreamsPortable(p, per) : sumPortable(p, per);
    }
    const double t = seconds(t0, Clock::now());
    const double tc = (cpuSeconds() - c0) / threads;
    sink += total;
    const double gb = double(per * threads * sizeof(std::uint64_t)) / 1e9;
    return {gb / t, gb / tc};
}

// The machine's read bandwidth now: the faster of the two patterns.
ReadRate readBandwidth(const std::vector<std::uint64_t>& buf, bool avx2, std::uint64_t& sink) {
    const ReadRate one = readPass(buf, avx2, false, sink);
    const ReadRate many = readPass(buf, avx2, true, sink);
    return {std::max(one.wall, many.wall), std::max(one.cpu, many.cpu)};
}

struct Case {
    std::string name;  // "bf16 12288x7168"
    double flops;      // per matvec
    double bytes;      // weight bytes per matvec
    int matvecsPerRun; // the run function does this many matvecs
    std::function<void()> run;
    double targetPercentOfRead; // 0: none
    double targetGflops;        // 0: none
};

double median(std::vector<double> v) {
    std::sort(v.begin(), v.end());
    return v.empty() ? 0.0 : v[v.size() / 2];
}

// This core's clock in GHz: a chain of dependent adds retires one per cycle. Timed in
// this thread's CPU time, so the time a neighbour held the core is not counted; the best
// of five tries of about 10 ms.
double threadCpuSeconds() {
    timespec t{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return double(t.tv_sec) + double(t.tv_nsec) * 1e-9;
}

double measuredGhz() {
#if defined(__x86_64__)
    constexpr long kIters = 5'000'000; // 8 adds each
    double best = 0;
    for (int attempt = 0; attempt < 5; ++attempt) {
        std::uint64_t v = 0;
        const double t0 = threadCpuSeconds();
        for (long i = 0; i < kIters; ++i)
            asm volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                         "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0"
                         : "+r"(v));
        best = std::max(best, 8.0 * kIters / (threadCpuSeconds() - t0) / 1e9);
    }
    return best;
#else
    return 0;
#endif
}

// matmat against matvec on the same matrix, same rounds. run(columns) does one product
// per matrix of the case (MXFP4: each of the experts in turn) with `columns` columns;
// columns 0 means matvec.
struct MatmatCase {
    std::string name;
    double flopsPerColumn; // per matrix
    int matricesPerRun;
    std::function<void(int columns)> run;
    int targetColumns;  // the column count with a target, 0: none
    double targetRatio; // GFLOP/s at targetColumns over the matvec GFLOP/s
};

bool runMatmatSection(const std::vector<MatmatCase>& cases, int rounds) {
    const int threads = omp_get_max_threads();
    const double ghz = measuredGhz();
    // 2 FMA pipes of 4 doubles, 2 flops each, per core.
    const double ceiling = threads * 2 * 4 * 2 * ghz;
    std::printf("\nMulti-column products (matmat, %s path), best of %d rounds, %d threads; "
                "clock measured %.2f GHz (dependent adds, thread CPU time)\n",
                kernelPathName(kernelPath()), rounds, threads, ghz);
    std::printf("MXFP4 double-FMA ceiling: %d cores x 2 FMA x 4 doubles x 2 flops x %.2f GHz "
                "(measured) = %.1f GFLOP/s\n",
                threads, ghz, ceiling);
    std::printf("GFLOP/s = 2 * rows * cols * T / time; ratio = matmat GFLOP/s over the matvec "
                "GFLOP/s of the same run (best times); med = median of the per-round ratios; "
                "cpu = the same from per-thread CPU time\n");
    std::printf("%-17s %4s %9s %9s %11s %7s %7s %9s %11s %7s  %s\n", "matrix", "T", "ms", "GFLOP/s",
                "matvec GF/s", "ratio", "med", "cpu GF/s", "cpu matvec", "cpu rt", "target");
    const int columnCounts[] = {1, 8, 16, 32};
    bool allMet = true;
    for (const MatmatCase& c : cases) {
        c.run(0); // warm up
        for (int t : columnCounts) c.run(t);
        double bestVec = 1e30, bestVecCpu = 1e30;
        double best[4] = {1e30, 1e30, 1e30, 1e30}, bestCpu[4] = {1e30, 1e30, 1e30, 1e30};
        std::vector<double> ratios[4];
        for (int r = 0; r < rounds; ++r) {
            double c0 = cpuSeconds();
            auto t0 = Clock::now();
            c.run(0);
            const double tv = seconds(t0, Clock::now()) / c.matricesPerRun;
            bestVec = std::min(bestVec, tv);
            bestVecCpu = std::min(bestVecCpu, (cpuSeconds() - c0) / threads / c.matricesPerRun);
            for (int k = 0; k < 4; ++k) {
                c0 = cpuSeconds();
                t0 = Clock::now();
                c.run(columnCounts[k]);
                const double tm = seconds(t0, Clock::now()) / c.matricesPerRun;
                best[k] = std::min(best[k], tm);
                bestCpu[k] = std::min(bestCpu[k], (cpuSeconds() - c0) / threads / c.matricesPerRun);
                ratios[k].push_back(tv * columnCounts[k] / tm);
            }
        }
        const double vecGflops = c.flopsPerColumn / bestVec / 1e9;
        const double vecCpuGflops = c.flopsPerColumn / bestVecCpu / 1e9;
        for (int k = 0; k < 4; ++k) {
            const int t = columnCounts[k];
            const double gflops = c.flopsPerColumn * t / best[k] / 1e9;
            const double cpuGflops = c.flopsPerColumn * t / bestCpu[k] / 1e9;
            const double ratio = gflops / vecGflops;
            std::string target = "-";
            if (t == c.targetColumns) {
                const bool met = ratio >= c.targetRatio;
                allMet = allMet && met;
                char buf[64];
                std::snprintf(buf, sizeof buf, ">= %.1fx: %s", c.targetRatio,
                              met ? "met" : "NOT met");
                target = buf;
            }
            std::printf("%-17s %4d %9.3f %9.2f %11.2f %6.2fx %6.2fx %9.2f %11.2f %6.2fx  %s\n",
                        c.name.c_str(), t, best[k] * 1e3, gflops, vecGflops, ratio,
                        median(ratios[k]), cpuGflops, vecCpuGflops, cpuGflops / vecCpuGflops,
                        target.c_str());
        }
        std::fflush(stdout);
    }
    std::printf("matmat targets (wall-clock ratio) %s; clock after: %.2f GHz\n",
                allMet ? "all met" : "NOT all met", measuredGhz());
    return allMet;
}

} // namespace

int main(int argc, char** argv) {
    const int rounds = argc > 1 ? std::atoi(argv[1]) : 7;
    if (rounds < 1 || rounds > 1000) {
        std::fprintf(stderr, "bench_matvec: rounds must be 1..1000, got %s\n", argv[1]);
        return 2;
    }
    const std::string mode = argc > 2 ? argv[2] : "all";
    if (mode != "all" && mode != "matvec" && mode != "matmat") {
        std::fprintf(stderr, "bench_matvec: mode must be all, matvec or matmat, got %s\n", argv[2]);
        return 2;
    }
    const bool avx2 = kernelPathAvailable(KernelPath::Avx2);
    std::printf("CPU: %s; %d OpenMP threads; %d rounds; load average at start: %s\n",
                detectCpuFeatures().summary().c_str(), omp_get_max_threads(), rounds,
                loadAverage().c_str());

    // 512 MB: 16 times the 32 MB L3 of the machines we target.
    std::vector<std::uint64_t> readBuf(std::size_t(512) << 17, 1);
    std::uint64_t sink = 0;

    // 32 columns of x (the first is the matvec x), and room for 32 columns of y.
    std::vector<float> x(std::size_t(12288) * 32);
    for (std::size_t i = 0; i < x.size(); ++i) x[i] = float(int(i * 37 % 255)) / 255.0f - 0.5f;
    std::vector<float> y(std::size_t(12288) * 32);

    // BF16: one matrix of each shape (176 MB and 103 MB, both far beyond the L3).
    std::vector<std::uint16_t> wideBf16(std::size_t(12288) * 7168);
    for (std::size_t i = 0; i < wideBf16.size(); ++i)
        wideBf16[i] = std::uint16_t(0x3C00 + (i * 2654435761u >> 7) % 255);
    std::vector<std::uint16_t> squareBf16(std::size_t(7168) * 7168);
    for (std::size_t i = 0; i < squareBf16.size(); ++i)
        squareBf16[i] = std::uint16_t(0xBC00 + (i * 40503u >> 3) % 255);

    // MXFP4 experts: 16 distinct matrices per shape (about 93 MB), visited in turn.
    const int experts = 16;
    struct Mx {
        int rows, cols;
        std::vector<std::uint8_t> packed, scales;
    };
    Mx mx[2] = {{3072, 3584, {}, {}}, {3584, 3072, {}, {}}};
    for (Mx& m : mx) {
        m.packed.resize(std::size_t(experts) * m.rows * mxfp4RowBytes(m.cols));
        m.scales.resize(std::size_t(experts) * m.rows * mxfp4ScalesPerRow(m.cols));
        for (std::size_t i = 0; i < m.packed.size(); ++i)
            m.packed[i] = std::uint8_t((i * 2654435761u) >> 13);
        for (std::size_t i = 0; i < m.scales.size(); ++i)
            m.scales[i] = std::uint8_t(118 + (i * 7919u >> 4) % 8);
    }

    // The multi-column section on the AVX2 path (the scalar reference would take minutes).
    auto matmatSection = [&] {
        std::vector<MatmatCase> mm;
        auto addBf16mm = [&](const std::vector<std::uint16_t>& w, int rows, int cols) {
            const WeightView v = WeightView::bf16(w.data(), rows, cols);
            mm.push_back({"bf16  " + std::to_string(rows) + "x" + std::to_string(cols),
                          2.0 * rows * cols, 1,
                          [v, &x, &y](int t) {
                              if (t == 0)
                                  matvec(y.data(), x.data(), v);
                              else
                                  matmat(y.data(), x.data(), v, t);
                          },
                          32, 4.0});
        };
        addBf16mm(wideBf16, 12288, 7168);
        addBf16mm(squareBf16, 7168, 7168);
        for (Mx& m : mx) {
            const std::size_t pb = std::size_t(m.rows) * mxfp4RowBytes(m.cols);
            const std::size_t sb = std::size_t(m.rows) * mxfp4ScalesPerRow(m.cols);
            mm.push_back({"mxfp4 " + std::to_string(m.rows) + "x" + std::to_string(m.cols),
                          2.0 * m.rows * m.cols, experts,
                          [&m, pb, sb, &x, &y, experts](int t) {
                              for (int e = 0; e < experts; ++e) {
                                  const WeightView v =
                                      WeightView::mxfp4(m.packed.data() + e * pb,
                                                        m.scales.data() + e * sb, m.rows, m.cols);
                                  if (t == 0)
                                      matvec(y.data(), x.data(), v);
                                  else
                                      matmat(y.data(), x.data(), v, t);
                              }
                          },
                          16, 1.8});
        }
        const bool met = runMatmatSection(mm, rounds);
        std::printf("load average after matmat: %s (checksum %g)\n", loadAverage().c_str(),
                    double(y[0]));
        return met;
    };
    if (mode == "matmat") {
        matmatSection();
        return 0;
    }

    std::vector<Case> cases;
    auto addBf16 = [&](const std::vector<std::uint16_t>& w, int rows, int cols) {
        cases.push_back(
            {"bf16  " + std::to_string(rows) + "x" + std::to_string(cols), 2.0 * rows * cols,
             2.0 * rows * cols, 1,
             [&w, rows, cols, &x, &y] { matvecBf16(y.data(), x.data(), w.data(), rows, cols); },
             60.0, 0.0});
    };
    addBf16(wideBf16, 12288, 7168);
    addBf16(squareBf16, 7168, 7168);
    for (Mx& m : mx) {
        const std::size_t pb = std::size_t(m.rows) * mxfp4RowBytes(m.cols);
        const std::size_t sb = std::size_t(m.rows) * mxfp4ScalesPerRow(m.cols);
        cases.push_back({"mxfp4 " + std::to_string(m.rows) + "x" + std::to_string(m.cols),
                         2.0 * m.rows * m.cols, double(pb + sb), experts,
                         [&m, pb, sb, &x, &y, experts] {
                             for (int e = 0; e < experts; ++e)
                                 matvecMxfp4(y.data(), x.data(), m.packed.data() + e * pb,
                                             m.scales.data() + e * sb, m.rows, m.cols);
                         },
                         0.0, 35.0});
    }

    std::printf("\n%-17s %-9s %9s %9s %10s %10s %9s %9s  %s\n", "matvec", "path", "ms", "GFLOP/s",
                "GB/s wts", "read GB/s", "best %rd", "med %rd", "target");
    bool allMet = true;
    struct CpuRow {
        std::string name;
        double t, flops, bytes, read;
    };
    std::vector<CpuRow> cpuRows;
    for (const Case& c : cases) {
        for (KernelPath path : {KernelPath::Avx2, KernelPath::Scalar}) {
            if (!kernelPathAvailable(path)) continue;
            setKernelPath(path);
            // The scalar path is the portable reference, shown once for scale.
            const int n = path == KernelPath::Scalar ? 1 : rounds;
            c.run(); // warm up: page in, fault the output
            double bestKernel = 1e30, bestRead = 0, bestKernelCpu = 1e30, bestReadCpu = 0;
            std::vector<double> ratios;
            const int threads = omp_get_max_threads();
            for (int r = 0; r < n; ++r) {
                const ReadRate rate = readBandwidth(readBuf, avx2, sink);
                const double read = rate.wall, readCpu = rate.cpu;
                const double c1 = cpuSeconds();
                const auto t0 = Clock::now();
                c.run();
                const double t = seconds(t0, Clock::now()) / c.matvecsPerRun;
                const double tc = (cpuSeconds() - c1) / threads / c.matvecsPerRun;
                bestKernel = std::min(bestKernel, t);
                bestRead = std::max(bestRead, read);
                bestKernelCpu = std::min(bestKernelCpu, tc);
                bestReadCpu = std::max(bestReadCpu, readCpu);
                ratios.push_back(100.0 * c.bytes / t / 1e9 / read);
            }
            cpuRows.push_back({c.name + "  " + kernelPathName(path), bestKernelCpu, c.flops,
                               c.bytes, bestReadCpu});
            const double gflops = c.flops / bestKernel / 1e9;
            const double gbs = c.bytes / bestKernel / 1e9;
            const double bestRatio = 100.0 * gbs / bestRead;
            std::string target = "-";
            if (path == KernelPath::Avx2) {
                bool met = true;
                if (c.targetPercentOfRead > 0) {
                    met = bestRatio >= c.targetPercentOfRead;
                    target = ">= " + std::to_string(int(c.targetPercentOfRead)) + "% of read: ";
                } else {
                    met = gflops >= c.targetGflops;
                    target = ">= " + std::to_string(int(c.targetGflops)) + " GFLOP/s: ";
                }
                target += met ? "met" : "NOT met";
                allMet = allMet && met;
            }
            std::printf("%-17s %-9s %9.3f %9.2f %10.2f %10.2f %8.0f%% %8.0f%%  %s\n",
                        c.name.c_str(), kernelPathName(path), bestKernel * 1e3, gflops, gbs,
                        bestRead, bestRatio, median(ratios), target.c_str());
            std::fflush(stdout);
        }
    }
    resetKernelPath();
    std::printf("\nCPU-time normalised (per-thread CPU seconds instead of wall time):\n");
    std::printf("%-27s %9s %9s %10s %10s %9s\n", "matvec", "ms", "GFLOP/s", "GB/s wts", "read GB/s",
                "% of read");
    for (const CpuRow& r : cpuRows)
        std::printf("%-27s %9.3f %9.2f %10.2f %10.2f %8.0f%%\n", r.name.c_str(), r.t * 1e3,
                    r.flops / r.t / 1e9, r.bytes / r.t / 1e9, r.read,
                    100.0 * r.bytes / r.t / 1e9 / r.read);
    if (mode == "all") allMet = matmatSection() && allMet;
    std::printf("\nload average at end: %s; targets %s (checksum %llu %g)\n", loadAverage().c_str(),
                allMet ? "all met" : "NOT all met", static_cast<unsigned long long>(sink),
                double(y[0]));
    return 0;
}
