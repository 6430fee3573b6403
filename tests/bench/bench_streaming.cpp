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

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <random>
#include <unistd.h>

namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

namespace {

void writeFile(const fs::path& p, std::uint64_t bytes) {
    const int fd = ::open(p.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0644);
    if (fd < 0) throw std::runtime_error("cannot create " + p.string());
    std::vector<unsigned char> chunk(8u << 20);
    std::mt19937_64 rng(1); // incompressible
    for (std::size_t i = 0; i + 8 <= chunk.size(); i += 8) {
        const auto v = rng();
        std::memcpy(chunk.data() + i, &v, 8);
    }
    for (std::uint64_t done = 0; done < bytes;) {
        const std::size_t n = std::size_t(std::min<std::uint64_t>(chunk.size(), bytes - done));
        if (::write(fd, chunk.data(), n) != ssize_t(n)) throw std::runtime_error("write failed");
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
        k3::DiskBenchOptions dopt;
        dopt.blockBytes = layerBytes;
        dopt.maxSecondsPerDepth = 4;
        // The doctor measures the largest *.safetensors in a directory: hard links make it
        // read the very files the streamer and the cache read.
        fs::create_directories(dir / "disk_trunk");
        fs::create_directories(dir / "disk_experts");
        fs::create_hard_link(idx.binPath, dir / "disk_trunk" / "t.safetensors");
        fs::create_hard_link(dir / "experts.bin", dir / "disk_experts" / "e.safetensors");
        const k3::DiskBandwidth diskLayer = k3::measureDiskBandwidth(dir / "disk_trunk", dopt);
        dopt.blockBytes = k3::alignUp(expertBytes);
        const k3::DiskBandwidth diskExpert = k3::measureDiskBandwidth(dir / "disk_experts", dopt);

        // Trunk: budget = one pinned layer + a ring of 2, far below the data.
        k3::MemoryPlan plan;
        std::vector<std::uint64_t> sizes(std::size_t(layers), layerBytes);
        k3::planTrunk(plan, sizes, 3 * layerBytes);
        k3::TrunkStreamer streamer(idx, plan);
        const bool trunkDirect = k3::AlignedFile(idx.binPath).direct();
        const bool expertDirect = k3::AlignedFile(dir / "experts.bin").direct();
        const auto before = streamer.stats();
        const auto t0 = Clock::now();
        for (int pass = 0; pass < 2; ++pass)
            for (int L = 0; L < layers; ++L) {
                volatile std::byte sink = streamer.acquire(L)[4096];
                (void)sink;
            }
        const double trunkSecs = std::chrono::duration<double>(Clock::now() - t0).count();
        const auto after = streamer.stats();
        const double trunkGBs = double(after.bytesRead - before.bytesRead) / 1e9 / trunkSecs;

        // Experts: 16 per batch from a pool much larger than the cache.
        k3::CacheOptions co;
        co.slotCount = 32;
        k3::ExpertCache cache(
            std::make_shared<FileExperts>(dir / "experts.bin", expertBytes, expertCount), co);
        std::mt19937 rng(3);
        const auto t1 = Clock::now();
        for (int step = 0; step < std::max(4, expertCount / 16); ++step) {
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
        const double cacheSecs = std::chrono::duration<double>(Clock::now() - t1).count();
        const double cacheGBs = double(cache.stats().bytesRead) / 1e9 / cacheSecs;

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
                    "2 passes\n",
                    k3::formatBytes(idx.fileBytes).c_str(),
                    k3::formatBytes(plan.trunkBytes()).c_str(), plan.pinnedLayers, layers,
                    plan.ringSlots, k3::formatBytes(plan.ringSlotBytes).c_str());
        std::printf("  streamed %.2f GB/s   disk QD1 @ %s blocks %.2f GB/s   ratio %.0f%% (%s)\n",
                    trunkGBs, k3::formatBytes(layerBytes).c_str(), diskLayer.gbPerSecondQd1,
                    100 * trunkGBs / diskLayer.gbPerSecondQd1,
                    verdict(trunkGBs / diskLayer.gbPerSecondQd1));
        std::printf("  compute thread waited %.2f s of %.2f s\n",
                    after.waitSeconds - before.waitSeconds, trunkSecs);
        std::printf("expert cache: %d slots x %s over a pool of %d experts (%s), %llu reads, "
                    "TRUE resident %.1f%%\n",
                    co.slotCount, k3::formatBytes(cache.slotBytes()).c_str(), expertCount,
                    k3::formatBytes(std::uint64_t(expertCount) * expertBytes).c_str(),
                    (unsigned long long)cache.stats().diskReads,
                    100 * cache.stats().residentHitRate());
        std::printf("  fetched %.2f GB/s   disk QD16 @ %s blocks %.2f GB/s   ratio %.0f%% (%s)\n",
                    cacheGBs, k3::formatBytes(k3::alignUp(expertBytes)).c_str(),
                    diskExpert.gbPerSecondQd16, 100 * cacheGBs / diskExpert.gbPerSecondQd16,
                    verdict(cacheGBs / diskExpert.gbPerSecondQd16));
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_streaming: %s\n", e.what());
        fs::remove_all(dir);
        return 1;
    }
    fs::remove_all(dir);
    return 0;
}
