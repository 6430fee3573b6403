#include "k3/doctor.hpp"

#include "memory/AlignedBuffer.hpp"
#include "platform/Platform.hpp"

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <stdexcept>
#include <thread>

namespace k3 {
namespace {

constexpr std::size_t kAlign = 4096;

std::string errnoText(const std::string& what, const std::filesystem::path& path) {
    return what + " " + path.string() + ": " + std::strerror(errno);
}

// The largest shard in `dir`, so the measurement reads the very bytes the engine will.
std::optional<std::filesystem::path> largestShard(const std::filesystem::path& dir) {
    std::error_code ec;
    std::optional<std::filesystem::path> best;
    std::uintmax_t bestSize = 0;
    for (const auto& entry : std::filesystem::directory_iterator(dir, ec)) {
        if (entry.path().extension() != ".safetensors") continue;
        const auto size = entry.file_size(ec);
        if (!ec && size > bestSize) {
            bestSize = size;
            best = entry.path();
        }
    }
    return best;
}

void writeScratchFile(const std::filesystem::path& path, std::uint64_t bytes) {
    platform::File out = platform::File::open(
        path, platform::open::Write | platform::open::Create | platform::open::Truncate, 0600);
    if (!out.valid()) throw std::runtime_error(errnoText("cannot create", path));
    std::vector<unsigned char> chunk(1u << 20);
    std::mt19937_64 rng(42); // incompressible bytes: a compressing filesystem must not flatter
    for (std::size_t i = 0; i + 8 <= chunk.size(); i += 8) {
        const std::uint64_t v = rng();
        std::memcpy(chunk.data() + i, &v, 8);
    }
    for (std::uint64_t done = 0; done < bytes; done += chunk.size()) {
        if (out.write(chunk.data(), chunk.size()) != static_cast<std::int64_t>(chunk.size()))
            throw std::runtime_error(errnoText("cannot write", path));
    }
    if (!out.syncToDisk()) throw std::runtime_error(errnoText("cannot fsync", path));
}

// Reads random whole blocks with `depth` reads in flight until a time or byte bound.
double readAtDepth(const platform::File& file, std::uint64_t fileBytes, std::uint64_t block,
                   int depth, const DiskBenchOptions& options, const std::atomic<bool>* cancel,
                   std::uint64_t& totalBytes, const std::filesystem::path& path) {
    const std::uint64_t blocks = fileBytes / block;
    std::atomic<std::uint64_t> bytes{0};
    std::atomic<bool> failed{false};
    std::atomic<int> failedErrno{0};
    const auto start = std::chrono::steady_clock::now();
    const auto deadline = start + std::chrono::duration<double>(options.maxSecondsPerDepth);
    std::vector<std::thread> threads;
    for (int t = 0; t < depth; ++t) {
        threads.emplace_back([&, t] {
            // The streamer's own buffers (hugepage-backed when large), as its reads use.
            memory::AlignedBuffer buffer(block);
            std::mt19937_64 rng(1000 + t);
            while (!failed && std::chrono::steady_clock::now() < deadline &&
                   bytes.load() < options.maxBytesPerDepth && !(cancel && cancel->load())) {
                const std::uint64_t offset = (rng() % blocks) * block;
                const std::int64_t got = file.readAt(buffer.data(), block, offset);
                if (got != static_cast<std::int64_t>(block)) {
                    failedErrno = got < 0 ? errno : EIO;
                    failed = true;
                    return;
                }
                bytes += block;
            }
        });
    }
    for (auto& th : threads) th.join();
    if (failed) {
        errno = failedErrno;
        throw std::runtime_error(errnoText("read failed while measuring", path));
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    totalBytes += bytes;
    return seconds > 0 ? static_cast<double>(bytes) / seconds / 1e9 : 0.0;
}

} // namespace

DiskBandwidth measureDiskBandwidth(const std::filesystem::path& dir,
                                   const DiskBenchOptions& options,
                                   const std::atomic<bool>* cancel) {
    if (options.blockBytes == 0 || options.blockBytes % kAlign != 0)
        throw std::runtime_error("disk benchmark block size must be a multiple of 4096, got " +
                                 std::to_string(options.blockBytes));
    DiskBandwidth result;
    result.blockBytes = options.blockBytes;

    std::filesystem::path file;
    bool scratch = false;
    if (auto shard = largestShard(dir);
        shard && std::filesystem::file_size(*shard) >= 2 * options.blockBytes) {
        file = *shard;
    } else {
        // Named per call as well as per process: two checks at once (the wizard's page
        // shown twice) truncating one file made the other read an empty one.
        static std::atomic<unsigned> calls{0};
        file = dir / (".k3-doctor-" + std::to_string(platform::processId()) + "-" +
                      std::to_string(calls.fetch_add(1)) + ".tmp");
        writeScratchFile(file, std::max(options.fileBytes, 2 * options.blockBytes));
        scratch = true;
    }
    struct Remove {
        std::filesystem::path path;
        bool active;
        ~Remove() {
            std::error_code ec;
            if (active) std::filesystem::remove(path, ec);
        }
    } removeScratch{file, scratch};
    result.fileMeasured = file.string();

    // Uncached (O_DIRECT) reads bypass the page cache, as the engine's reads do; some
    // filesystems (tmpfs, overlayfs) refuse them, and then the figure may be flattered.
    platform::File in = platform::File::open(file, platform::open::Read | platform::open::Uncached);
    result.directIo = in.valid();
    if (!in.valid() && errno == EINVAL) in = platform::File::open(file, platform::open::Read);
    if (!in.valid()) throw std::runtime_error(errnoText("cannot open", file));
    platform::FileInfo st;
    if (!in.info(st)) throw std::runtime_error(errnoText("cannot stat", file));
    if (!result.directIo) in.dropCachedPages();

    const auto start = std::chrono::steady_clock::now();
    // Best of several passes, the depths interleaved: a burst of another program's reads
    // spoils one pass of one depth, not the figure.
    const int passes = std::max(1, options.passes);
    DiskBenchOptions pass = options;
    pass.maxSecondsPerDepth = options.maxSecondsPerDepth / passes;
    pass.maxBytesPerDepth = std::max<std::uint64_t>(options.maxBytesPerDepth / passes, 1);
    const std::uint64_t size = st.size;
    if (size < options.blockBytes) // a shard that shrank since it was chosen
        throw std::runtime_error(file.string() + " has " + std::to_string(size) +
                                 " bytes, less than one " + std::to_string(options.blockBytes) +
                                 "-byte block to read");
    for (int i = 0; i < passes && !(cancel && cancel->load()); ++i) {
        result.gbPerSecondQd1 =
            std::max(result.gbPerSecondQd1, readAtDepth(in, size, options.blockBytes, 1, pass,
                                                        cancel, result.bytesRead, file));
        result.gbPerSecondQd16 =
            std::max(result.gbPerSecondQd16, readAtDepth(in, size, options.blockBytes, 16, pass,
                                                         cancel, result.bytesRead, file));
    }
    result.seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
    return result;
}

} // namespace k3
