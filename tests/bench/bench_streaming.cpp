// GB/s through the trunk streamer and the expert cache, next to the disk's measured
// O_DIRECT GB/s at the same block size and queue depth, measured in the same run (the
// machines here are noisy: compare the ratios). Writes a synthetic trunk.bin and expert
// file into DIR (default: a temp dir on the current filesystem), streams them at a
// budget smaller than the data, and removes them.
//
// Every measured read (the disk probe, the streamer, the cache) is O_DIRECT, so the page
// cache cannot flatter a figure even though the files were just written; the run says
// so, and says loudly when the filesystem refused O_DIRECT. Target: >= 85% of the disk.
//
//   bench_streaming [DIR] [TRUNK_MB=4096] [LAYER_MB=512] [EXPERT_KB=17136]
#include "k3/aligned_io.hpp"
#include "k3/doctor.hpp"
#include "k3/expert_cache.hpp"
#include "k3/trunk.hpp"
#include "memory/AlignedBuffer.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <memory>
#include <random>
#include <thread>
#include <unistd.h>

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

// O_DIRECT writes (buffered ones ran at a tenth of the disk here), 4096-multiple sizes.
void writeFile(const fs::path& p, std::uint64_t bytes) {
    int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_DIRECT, 0644);
    if (fd < 0 && errno == EINVAL) fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) throw std::runtime_error("cannot create " + p.string());
    constexpr std::size_t kChunk = std::size_t{8} << 20;
    void* raw = nullptr;
    if (::posix_memalign(&raw, 4096, kChunk) != 0) throw std::runtime_error("out of memory");
    std::unique_ptr<void, decltype(&std::free)> hold(raw, &std::free);
    auto* chunk = static_cast<unsigned char*>(raw);
    std::mt19937_64 rng(1); // incompressible
    for (std::size_t i = 0; i + 8 <= kChunk; i += 8) {
        const auto v = rng();
        std::memcpy(chunk + i, &v, 8);
    }
    for (std::uint64_t done = 0; done < bytes;) {
        const std::size_t n = std::size_t(std::min<std::uint64_t>(kChunk, bytes - done));
        if (::write(fd, chunk, n) != ssize_t(n)) throw std::runtime_error("write failed");
        done += n;
    }
    ::fsync(fd);
    ::close(fd);
}

// Experts laid end to end in one file, each read as one aligned window.
class FileExperts : public k3::ExpertStore {
public:
    FileExperts(const fs::path& p, std::size_t expertBytes, int count)
        : file_(p), bytes_(expertBytes), count_(count) {}
    std::size_t slotBytes() const override { return std::size_t(k3::alignUp(bytes_ + 4096)); }
    std::uint64_t expertBytes(int, int) const override { return bytes_; }
    std::uint64_t diskOrder(int l, int e) const override { return offset(l, e); }
    std::size_t read(int l, int e, std::byte* slot) const override {
        const std::uint64_t off = offset(l, e), start = off & ~std::uint64_t(4095);
        const std::size_t len = std::size_t(k3::alignUp(off + bytes_) - start);
        if (file_.readWindow(start, slot, len) < off + bytes_ - start)
            throw k3::IoError("short read");
        return std::size_t(off - start);
    }

private:
    std::uint64_t offset(int l, int e) const {
        return (std::uint64_t(l) * 64 + std::uint64_t(e)) % std::uint64_t(count_) * bytes_;
    }
    k3::AlignedFile file_;
    std::size_t bytes_;
    int count_;
};

// The disk at one block size and queue depth, read the way the streamer and the cache
// read it: AlignedFile::readWindow (O_DIRECT) into the engine's hugepage-advised aligned
// buffers, random whole blocks, `depth` threads, for `seconds`. (The doctor's probe uses
// plain 4 KB pages; pinning those for a 512 MB O_DIRECT read costs CPU, so on a loaded
// machine it understates the disk next to the streamer.)
double probeDisk(const fs::path& file, std::uint64_t block, int depth, double seconds) {
    const k3::AlignedFile f(file);
    const std::uint64_t blocks = f.size() / block;
    if (blocks == 0) throw std::runtime_error(file.string() + " is smaller than one block");
    std::atomic<std::uint64_t> bytes{0};
    std::atomic<bool> failed{false};
    // Buffers faulted in before the clock starts, as the streamer's warmed ring slots are.
    std::vector<k3::memory::AlignedBuffer> bufs;
    for (int t = 0; t < depth; ++t) {
        bufs.emplace_back(std::size_t(block));
        std::memset(bufs.back().data(), 0, bufs.back().size());
    }
    const auto start = Clock::now();
    const auto deadline = start + std::chrono::duration<double>(seconds);
    std::vector<std::thread> threads;
    for (int t = 0; t < depth; ++t)
        threads.emplace_back([&, t] {
            k3::memory::AlignedBuffer& buf = bufs[std::size_t(t)];
            std::mt19937_64 rng(1000 + std::uint64_t(t));
            while (!failed && Clock::now() < deadline) {
                const std::uint64_t off = (rng() % blocks) * block;
                try {
                    if (f.readWindow(off, buf.data(), std::size_t(block)) != block) failed = true;
                } catch (const std::exception&) {
                    failed = true;
                }
                bytes += block;
            }
        });
    for (auto& th : threads) th.join();
    if (failed) throw std::runtime_error("read failed while probing " + file.string());
    return double(bytes) / 1e9 / std::chrono::duration<double>(Clock::now() - start).count();
}

} // namespace

int main(int argc, char** argv) {
    const fs::path dir =
        argc > 1 ? fs::path(argv[1])
                 : fs::current_path() / ("k3_bench_stream_" + std::to_string(::getpid()));
    const std::uint64_t trunkMB = argc > 2 ? std::strtoull(argv[2], nullptr, 10) : 4096;
    const std::uint64_t layerMB = argc > 3 ? std::strtoull(argv[3], nullptr, 10) : 512;
    const std::uint64_t expertKB =
        argc > 4 ? std::strtoull(argv[4], nullptr, 10) : 17136; // 17,547,264 B
    fs::create_directories(dir);
    try {
        const std::uint64_t layerBytes = layerMB << 20;
        const int layers = int(std::max<std::uint64_t>(4, (trunkMB << 20) / layerBytes));
        k3::TrunkIndex idx;
        idx.binPath = dir / "trunk.bin";
        for (int L = 0; L < layers; ++L) {
            k3::TrunkRecord r;
            r.name = "layer " + std::to_string(L);
            r.layer = L;
            r.offset = std::uint64_t(L) * layerBytes;
            r.bytes = layerBytes;
            idx.layers.push_back(r);
        }
        idx.fileBytes = std::uint64_t(layers) * layerBytes;
        std::printf("writing %s synthetic trunk (%d layers of %llu MB) and an expert file...\n",
                    k3::formatBytes(idx.fileBytes).c_str(), layers, (unsigned long long)layerMB);
        writeFile(idx.binPath, idx.fileBytes);
        const std::size_t expertBytes = std::size_t(expertKB) * 1024;
        const int expertCount = int(std::max<std::uint64_t>(32, idx.fileBytes / expertBytes));
        writeFile(dir / "experts.bin", std::uint64_t(expertCount) * expertBytes);

        // The disk, the way each consumer reads it: whole layers at QD1, experts at QD16.
        // The doctor measures the largest *.safetensors in a directory: hard links make it
        // read the very files the streamer and the cache read.
        fs::create_directories(dir / "disk_trunk");
        fs::create_directories(dir / "disk_experts");
        fs::create_hard_link(idx.binPath, dir / "disk_trunk" / "t.safetensors");
        fs::create_hard_link(dir / "experts.bin", dir / "disk_experts" / "e.safetensors");
        auto measure = [&](const char* sub, std::uint64_t block) {
            k3::DiskBenchOptions dopt;
            dopt.blockBytes = block;
            dopt.maxSecondsPerDepth = 3;
            return k3::measureDiskBandwidth(dir / sub, dopt);
        };
        // The reference: the same files, block sizes and queue depths, the same buffers.
        const fs::path expertFile = dir / "experts.bin";
        const std::uint64_t expertBlock = k3::alignUp(expertBytes);

        // Trunk: budget = one pinned layer + a ring of 2, far below the data.
        k3::MemoryPlan plan;
        std::vector<std::uint64_t> sizes(std::size_t(layers), layerBytes);
        k3::planTrunk(plan, sizes, 3 * layerBytes);
        k3::TrunkStreamer streamer(idx, plan);
        const bool trunkDirect = k3::AlignedFile(idx.binPath).direct();
        const bool expertDirect = k3::AlignedFile(dir / "experts.bin").direct();
        auto trunkPass = [&] {
            for (int L = 0; L < layers; ++L) {
                volatile std::byte sink = streamer.acquire(L)[4096];
                (void)sink;
            }
        };
        // Experts: 16 per batch from a pool much larger than the cache.
        k3::CacheOptions co;
        co.slotCount = 32;
        k3::ExpertCache cache(
            std::make_shared<FileExperts>(dir / "experts.bin", expertBytes, expertCount), co);
        std::mt19937 rng(3);
        auto expertSteps = [&](int steps) {
            for (int step = 0; step < steps; ++step) {
                std::vector<int> batch;
                while (batch.size() < 16) {
                    const int e = int(rng() % std::uint32_t(expertCount));
                    if (std::find(batch.begin(), batch.end(), e) == batch.end()) batch.push_back(e);
                }
                cache.prefetch(0, batch);
                for (int e : batch) {
                    auto h = cache.acquire(0, e);
                    cache.release(h);
                }
                cache.releaseBatch();
            }
        };
        // Warm-up, untimed: the first pass faults in the ring slots and the cache arena
        // (a steady decode reuses both), as the first token of a real run does.
        trunkPass();
        expertSteps(2);
        cache.resetStats();

        // The disk right before and right after the measured streaming (the machine is
        // shared: the mean of the two is the reference, both are printed).
        const double probeLayer1 = probeDisk(idx.binPath, layerBytes, 1, 4);
        const double probeExpert1 = probeDisk(expertFile, expertBlock, 16, 4);
        const auto before = streamer.stats();
        const auto t0 = Clock::now();
        trunkPass();
        trunkPass();
        const double trunkSecs = std::chrono::duration<double>(Clock::now() - t0).count();
        const auto after = streamer.stats();
        const double trunkGBs = double(after.bytesRead - before.bytesRead) / 1e9 / trunkSecs;
        const auto t1 = Clock::now();
        expertSteps(std::max(4, expertCount / 16));
        const double cacheSecs = std::chrono::duration<double>(Clock::now() - t1).count();
        const double cacheGBs = double(cache.stats().bytesRead) / 1e9 / cacheSecs;
        const double probeLayer2 = probeDisk(idx.binPath, layerBytes, 1, 4);
        const double probeExpert2 = probeDisk(expertFile, expertBlock, 16, 4);
        const double refLayer = (probeLayer1 + probeLayer2) / 2;
        const double refExpert = (probeExpert1 + probeExpert2) / 2;
        // The doctor's own probe, for comparison with what `k3 doctor` prints.
        const k3::DiskBandwidth diskLayer = measure("disk_trunk", layerBytes);
        const k3::DiskBandwidth diskExpert = measure("disk_experts", expertBlock);

        auto verdict = [](double ratio) {
            return ratio >= 0.85 ? "meets the 85% target" : "BELOW the 85% target";
        };
        std::printf(
            "\nO_DIRECT in every measured read: disk probe %s, trunk.bin %s, experts.bin %s\n",
            diskLayer.directIo && diskExpert.directIo ? "yes" : "REFUSED",
            trunkDirect ? "yes" : "REFUSED", expertDirect ? "yes" : "REFUSED");
        if (!(diskLayer.directIo && diskExpert.directIo && trunkDirect && expertDirect))
            std::printf(
                "  WARNING: buffered reads here; the page cache may flatter these figures\n");
        std::printf("trunk streamer: %s of layers, budget %s (%d/%d layers pinned, ring %d x %s), "
                    "2 passes after a warm-up pass\n",
                    k3::formatBytes(idx.fileBytes).c_str(),
                    k3::formatBytes(plan.trunkBytes()).c_str(), plan.pinnedLayers, layers,
                    plan.ringSlots, k3::formatBytes(plan.ringSlotBytes).c_str());
        std::printf("  streamed %.2f GB/s   disk QD1 @ %s blocks %.2f GB/s (before %.2f, after "
                    "%.2f)   ratio %.0f%% (%s)\n",
                    trunkGBs, k3::formatBytes(layerBytes).c_str(), refLayer, probeLayer1,
                    probeLayer2, 100 * trunkGBs / refLayer, verdict(trunkGBs / refLayer));
        std::printf("  compute thread waited %.2f s of %.2f s\n",
                    after.waitSeconds - before.waitSeconds, trunkSecs);
        std::printf("expert cache: %d slots x %s over a pool of %d experts (%s), %llu reads, "
                    "TRUE resident %.1f%%\n",
                    co.slotCount, k3::formatBytes(cache.slotBytes()).c_str(), expertCount,
                    k3::formatBytes(std::uint64_t(expertCount) * expertBytes).c_str(),
                    (unsigned long long)cache.stats().diskReads,
                    100 * cache.stats().residentHitRate());
        std::printf("  fetched %.2f GB/s   disk QD16 @ %s blocks %.2f GB/s (before %.2f, after "
                    "%.2f)   ratio %.0f%% (%s)\n",
                    cacheGBs, k3::formatBytes(expertBlock).c_str(), refExpert, probeExpert1,
                    probeExpert2, 100 * cacheGBs / refExpert, verdict(cacheGBs / refExpert));
        std::printf("doctor's probe (4 KB pages): QD1 @ %s %.2f GB/s, QD16 @ %s %.2f GB/s\n",
                    k3::formatBytes(layerBytes).c_str(), diskLayer.gbPerSecondQd1,
                    k3::formatBytes(expertBlock).c_str(), diskExpert.gbPerSecondQd16);
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_streaming: %s\n", e.what());
        fs::remove_all(dir);
        return 1;
    }
    fs::remove_all(dir);
    return 0;
}
