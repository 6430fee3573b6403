// The compressed trunk's codec and its end-to-end effect, measured in one run.
//
//   bench_trunk_codec codec MODEL_DIR [--sample-gb X=1]
//     MODEL_DIR: a synthetic checkpoint written with --gaussian-trunk 1 (its layers' BF16
//     as fresh N(0, 0.02) draws). Reads up to X GB of the layers' BF16 trunk tensors and
//     prints the order-0 entropy of the high bytes (the bound any byte code of the high
//     bytes with the low bytes verbatim reaches), then for each point tried on the
//     ratio/speed curve (k forced, k chosen per block, block sizes) the ratio and the
//     decode GB/s on ONE core (raw bytes out per second), scalar and AVX2, next to memcpy.
//
//   bench_trunk_codec e2e MODEL_DIR RAW_TRUNK CODED_TRUNK [--trunk-gb 1.5] [--cache-gb 0.5]
//                     [--tokens N=4]
//     Loads the model on each trunk in turn (the page cache dropped before each: run as
//     root) and decodes N tokens: trunk GB read per token and s/token, compressed vs raw.

#include "k3/model.hpp"
#include "k3/pack.hpp"
#include "k3/safetensors.hpp"
#include "k3/trunk.hpp"
#include "memory/TrunkCodec.hpp"

#include <time.h>
#include <unistd.h>
#define XXH_DISPATCH_DISABLE_REPLACE // both, side by side
#include <xxh_x86dispatch.h>

#include <algorithm>
#include <array>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <map>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
namespace codec = k3::codec;

double since(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

// The codec figures are per core: CPU seconds of this thread (the machines here are shared
// by several jobs, so wall time would count time the thread was not running), best of 7.
double threadSeconds() {
    timespec ts{};
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return double(ts.tv_sec) + double(ts.tv_nsec) * 1e-9;
}

// Up to `limit` bytes of the layers' BF16 trunk tensors (not routed experts).
std::vector<std::byte> sampleTrunk(const std::string& dir, std::uint64_t limit) {
    const k3::Checkpoint ckpt = k3::Checkpoint::open(dir);
    std::vector<std::string> names;
    for (const auto& [name, t] : ckpt.tensors())
        if (t.dtype == k3::DType::BF16 && name.find(".layers.") != std::string::npos &&
            !k3::isRoutedExpertTensor(name))
            names.push_back(name);
    std::sort(names.begin(), names.end());
    std::vector<std::byte> out;
    for (const std::string& n : names) {
        if (out.size() >= limit) break;
        const auto b = ckpt.readRaw(n);
        out.insert(out.end(), b.begin(),
                   b.begin() +
                       std::ptrdiff_t(std::min<std::uint64_t>(b.size(), limit - out.size())));
    }
    out.resize(out.size() / 2 * 2);
    return out;
}

double entropyBits(const std::array<std::uint64_t, 256>& count) {
    std::uint64_t n = 0;
    for (auto c : count) n += c;
    double h = 0;
    for (auto c : count)
        if (c) h -= double(c) / double(n) * std::log2(double(c) / double(n));
    return h;
}

struct Point {
    std::string what;
    double ratio = 0, scalarGBs = 0, avx2GBs = 0;
};

// Encodes `raw` in blocks, then decodes every block into `out` on one core (best of 3).
Point measure(const std::string& what, const std::vector<std::byte>& raw, std::size_t blockBytes,
              codec::EncodeChoice choice, std::vector<std::byte>& out, bool checksum = true) {
    std::vector<std::byte> stored;
    std::vector<std::size_t> starts{0};
    for (std::size_t at = 0; at < raw.size(); at += blockBytes) {
        codec::encodeBlock(raw.data() + at, std::min(blockBytes, raw.size() - at), stored, choice);
        starts.push_back(stored.size());
    }
    Point p{what, double(stored.size()) / double(raw.size())};
    for (const auto path : {codec::DecodePath::Scalar, codec::DecodePath::Avx2}) {
        if (path == codec::DecodePath::Avx2 && !codec::avx2DecodeAvailable()) continue;
        double best = 1e30;
        for (int rep = 0; rep < 7; ++rep) {
            const double t0 = threadSeconds();
            for (std::size_t b = 0; b + 1 < starts.size(); ++b)
                codec::decodeBlock(stored.data() + starts[b], starts[b + 1] - starts[b],
                                   out.data() + b * blockBytes,
                                   std::min(blockBytes, raw.size() - b * blockBytes), path,
                                   checksum);
            best = std::min(best, threadSeconds() - t0);
        }
        if (std::memcmp(out.data(), raw.data(), raw.size()) != 0) {
            std::fprintf(stderr, "%s: the decode differs from the original bytes\n", what.c_str());
            std::exit(1);
        }
        (path == codec::DecodePath::Scalar ? p.scalarGBs : p.avx2GBs) =
            double(raw.size()) / 1e9 / best;
    }
    std::printf("  %-34s %8.4f %10.2f %10.2f\n", p.what.c_str(), p.ratio, p.scalarGBs, p.avx2GBs);
    std::fflush(stdout);
    return p;
}

int runCodec(const std::string& dir, double sampleGb) {
    const auto raw = sampleTrunk(dir, std::uint64_t(sampleGb * 1e9));
    if (raw.empty()) {
        std::fprintf(stderr, "%s has no BF16 layer tensors\n", dir.c_str());
        return 1;
    }
    std::array<std::uint64_t, 256> high{}, low{};
    for (std::size_t i = 0; i + 1 < raw.size(); i += 2) {
        ++low[std::uint8_t(raw[i])];
        ++high[std::uint8_t(raw[i + 1])];
    }
    const double hHigh = entropyBits(high), hLow = entropyBits(low);
    std::printf("sample: %.3f GB of the layers' BF16 trunk tensors of %s\n",
                double(raw.size()) / 1e9, dir.c_str());
    std::printf("order-0 entropy: high bytes %.4f bits, low bytes %.4f bits\n", hHigh, hLow);
    std::printf("bound (high bytes at their order-0 entropy, low bytes verbatim): %.4f of raw\n",
                (hHigh + 8.0) / 16.0);

    std::vector<std::byte> out(raw.size());
    double copyBest = 1e30;
    for (int rep = 0; rep < 7; ++rep) {
        const double t0 = threadSeconds();
        std::memcpy(out.data(), raw.data(), raw.size());
        copyBest = std::min(copyBest, threadSeconds() - t0);
    }
    std::printf("memcpy of the same bytes, one core: %.2f GB/s\n",
                double(raw.size()) / 1e9 / copyBest);
    std::printf("decode path chosen at run time: %s\n", codec::decodePathName());
    std::printf("  %-34s %8s %10s %10s\n", "point (64 KiB blocks unless said)", "ratio",
                "scalar GB/s", "AVX2 GB/s");
    measure("raw blocks (header only)", raw, 65536, {0, true}, out);
    for (int k = 1; k <= 4; ++k)
        measure("k = " + std::to_string(k) + " forced" + (k == 4 ? " (nibble code)" : ""), raw,
                65536, {k, false}, out);
    measure("k chosen per block (the packed one)", raw, 65536, {}, out);
    for (std::size_t b : {4096u, 8192u, 16384u, 32768u})
        measure("k chosen per block, " + std::to_string(b / 1024) + " KiB blocks", raw, b, {}, out);
    // Where the time goes: the same decodes without the block checksum, and XXH3 alone.
    for (std::size_t b : {4096u, 16384u, 65536u})
        measure("  no block checksum, " + std::to_string(b / 1024) + " KiB", raw, b, {}, out,
                false);
    // The engine hashes through libxxhash's run-time dispatch (AVX2 where present); the
    // plain entry point is the library's portable build.
    for (int dispatch = 0; dispatch < 2; ++dispatch) {
        double hashBest = 1e30;
        std::uint64_t sink = 0;
        for (int rep = 0; rep < 7; ++rep) {
            const double t0 = threadSeconds();
            for (std::size_t at = 0; at < raw.size(); at += 16384) {
                const std::size_t n = std::min<std::size_t>(16384, raw.size() - at);
                sink ^= dispatch ? XXH3_64bits_dispatch(raw.data() + at, n)
                                 : XXH3_64bits(raw.data() + at, n);
            }
            hashBest = std::min(hashBest, threadSeconds() - t0);
        }
        std::printf("XXH3-64 %s over the raw bytes in 16 KiB pieces, one core: %.2f GB/s (%llx)\n",
                    dispatch ? "(run-time dispatch)" : "(plain)",
                    double(raw.size()) / 1e9 / hashBest, (unsigned long long)(sink & 0xf));
    }
    return 0;
}

void dropCaches() {
    ::sync();
    std::ofstream f("/proc/sys/vm/drop_caches");
    f << "3\n";
    if (!f) std::fprintf(stderr, "note: could not drop the page cache (not root?)\n");
}

int runE2e(const std::string& model, const std::string& rawTrunk, const std::string& codedTrunk,
           double trunkGb, double cacheGb, int tokens) {
    struct Result {
        double gbPerToken = 0, sPerToken = 0, waitPerToken = 0, decodePerToken = 0;
        double helperPerToken = 0, helperShare = 0, pinnedDecodePerToken = 0;
        int pinned = 0, pinnedCompressed = 0;
        std::uint64_t layerStored = 0, layerRaw = 0;
    } res[2];
    std::vector<float> firstLogits[2];
    for (int c = 0; c < 2; ++c) {
        const std::string trunk = c ? codedTrunk : rawTrunk;
        const k3::TrunkIndex idx = k3::openTrunkIndex(trunk, model);
        res[c].layerStored = idx.layerStoredTotal();
        res[c].layerRaw = idx.layerBytesTotal();
        dropCaches();
        k3::LaunchConfig o;
        o.modelDir = model;
        o.trunkDir = trunk;
        o.budget.trunkBytes = std::uint64_t(trunkGb * 1e9);
        o.budget.cacheBytes = std::uint64_t(cacheGb * 1e9);
        o.contextLength = 64;
        o.maxSpeculation = 0;
        k3::LaunchDiagnostics d;
        d.enforceMemoryPlan = false;
        const k3::Model m = k3::Model::load(o, d);
        std::printf("%s trunk: %s\n", c ? "compressed" : "raw", m.memoryPlan().format().c_str());
        std::vector<float> logits(std::size_t(m.config().vocabSize));
        k3::InferenceState st = m.newState();
        m.forward(st, 1, logits); // the first token warms nothing on disk: caches were dropped
        firstLogits[c] = logits;
        const k3::TrunkStats s0 = m.memoryStats().trunk;
        const auto t0 = Clock::now();
        int token = 2;
        for (int i = 0; i < tokens; ++i) {
            m.forward(st, token, logits);
            token = int(std::max_element(logits.begin(), logits.end()) - logits.begin());
        }
        const double secs = since(t0);
        const k3::TrunkStats s1 = m.memoryStats().trunk;
        res[c].gbPerToken = double(s1.bytesRead - s0.bytesRead) / 1e9 / tokens;
        res[c].sPerToken = secs / tokens;
        res[c].waitPerToken = (s1.waitSeconds - s0.waitSeconds) / tokens;
        res[c].decodePerToken = (s1.decodeSeconds - s0.decodeSeconds) / tokens;
        res[c].helperPerToken = (s1.helperDecodeSeconds - s0.helperDecodeSeconds) / tokens;
        const std::uint64_t decoded = s1.bytesDecoded - s0.bytesDecoded;
        res[c].helperShare =
            decoded ? double(s1.helperBytesDecoded - s0.helperBytesDecoded) / double(decoded) : 0;
        res[c].pinnedDecodePerToken = (s1.pinnedDecodeSeconds - s0.pinnedDecodeSeconds) / tokens;
        res[c].pinned = s1.pinnedLayers;
        res[c].pinnedCompressed = s1.pinnedCompressedLayers;
    }
    const bool same = firstLogits[0] == firstLogits[1] &&
                      std::memcmp(firstLogits[0].data(), firstLogits[1].data(),
                                  firstLogits[0].size() * sizeof(float)) == 0;
    std::printf("\nend to end, --trunk-gb %.2f --cache-gb %.2f, %d tokens after a first one, page "
                "cache dropped before each model:\n",
                trunkGb, cacheGb, tokens);
    std::printf("  %-11s %14s %10s %10s %12s %12s %8s %14s %8s\n", "trunk", "trunk GB/token",
                "s/token", "wait s/tok", "decode s/tok", "helper s/tok", "helped", "pinned (coded)",
                "pin dec s");
    for (int c = 0; c < 2; ++c)
        std::printf("  %-11s %14.3f %10.3f %10.3f %12.3f %12.3f %7.0f%% %10d (%d) %8.3f\n",
                    c ? "compressed" : "raw", res[c].gbPerToken, res[c].sPerToken,
                    res[c].waitPerToken, res[c].decodePerToken, res[c].helperPerToken,
                    100 * res[c].helperShare, res[c].pinned, res[c].pinnedCompressed,
                    res[c].pinnedDecodePerToken);
    const double byteRatio = res[1].gbPerToken / res[0].gbPerToken;
    const double saved = 1.0 - byteRatio;
    const double timeSaved = 1.0 - res[1].sPerToken / res[0].sPerToken;
    std::printf("  layers stored: %.4f of raw; trunk bytes read per token: %.4f of raw\n",
                double(res[1].layerStored) / double(res[1].layerRaw), byteRatio);
    std::printf("  s/token saved: %.1f%%, %.0f%% of the %.1f%% byte saving\n", 100 * timeSaved,
                saved > 0 ? 100 * timeSaved / saved : 0.0, 100 * saved);
    std::printf("  first token's logits identical (memcmp): %s\n", same ? "yes" : "NO");
    std::ifstream loadavg("/proc/loadavg");
    std::string load;
    std::getline(loadavg, load);
    std::printf("  load average at the end: %s\n", load.c_str());
    return same ? 0 : 1;
}

// Every layer of the coded trunk, streamed whole and in two pieces, against the raw trunk
// read the same way: the same bytes (memcmp) for every tensor.
int runSame(const std::string& model, const std::string& rawTrunk, const std::string& codedTrunk) {
    const k3::TrunkIndex raw = k3::openTrunkIndex(rawTrunk, model);
    const k3::TrunkIndex coded = k3::openTrunkIndex(codedTrunk, model);
    std::uint64_t largest = 0, maxPiece = 0;
    for (const auto& r : coded.layers) {
        largest = std::max(largest, k3::alignUp(r.bytes));
        maxPiece = std::max(maxPiece, k3::largestPieceBytes(r));
    }
    int mismatches = 0;
    // First the blocks as packed, one by one with plain reads (no streamer).
    for (std::size_t L = 0; L < coded.layers.size(); ++L) {
        const auto& c = coded.layers[L];
        const auto& r = raw.layers[L];
        if (!c.compressed()) continue;
        std::ifstream fc(coded.binPath, std::ios::binary), fr(raw.binPath, std::ios::binary);
        std::vector<std::byte> blk, want(coded.blockBytes), got(coded.blockBytes);
        int bad = 0;
        for (std::size_t j = 0; j < c.blockCount(); ++j) {
            blk.resize(c.blockStarts[j + 1] - c.blockStarts[j]);
            fc.seekg(std::streamoff(c.offset + c.blockStarts[j]));
            fc.read(reinterpret_cast<char*>(blk.data()), std::streamsize(blk.size()));
            const std::size_t n =
                std::min<std::uint64_t>(coded.blockBytes, c.bytes - j * coded.blockBytes);
            fr.seekg(std::streamoff(r.offset + j * coded.blockBytes));
            fr.read(reinterpret_cast<char*>(want.data()), std::streamsize(n));
            try {
                codec::decodeBlock(blk.data(), blk.size(), got.data(), n);
                if (std::memcmp(got.data(), want.data(), n) != 0)
                    throw codec::CodecError("bytes differ");
            } catch (const codec::CodecError& e) {
                if (bad++ < 3) std::printf("layer %zu block %zu: %s\n", L, j, e.what());
            }
        }
        std::printf("layer %zu: %zu blocks read one by one, %d bad\n", L, c.blockCount(), bad);
        mismatches += bad;
    }
    for (const bool pieces : {false, true}) {
        k3::MemoryPlan plan;
        plan.totalLayers = int(coded.layers.size());
        plan.ringSlots = 1;
        plan.ringSlotBytes = pieces ? maxPiece : largest;
        plan.piecewise = pieces;
        k3::TrunkStreamer a(raw, plan), b(coded, plan);
        for (int L = 0; L < plan.totalLayers; ++L) {
            for (int p = pieces && a.piecewise(L) ? 0 : -1; p < (pieces && a.piecewise(L) ? 2 : 0);
                 ++p) {
                std::vector<std::byte> copy;
                const auto& rec = raw.layers[std::size_t(L)];
                std::map<std::string, std::uint64_t, std::less<>> at;
                const std::byte* x = nullptr;
                if (p < 0) {
                    x = a.acquire(L);
                    for (const auto& [n, t] : rec.tensors) at[n] = t.offset;
                } else {
                    x = a.acquirePiece(L, p);
                    at = a.piece(L, p).tensorAt;
                }
                std::uint64_t bytes = 0;
                for (const auto& [n, o] : at)
                    bytes = std::max(bytes, o + rec.tensors.at(n).info.nbytes);
                copy.assign(x, x + bytes);
                const std::byte* y = p < 0 ? b.acquire(L) : b.acquirePiece(L, p);
                for (const auto& [n, o] : at)
                    if (std::memcmp(copy.data() + o, y + o, rec.tensors.at(n).info.nbytes) != 0) {
                        std::printf("layer %d piece %d tensor %s differs\n", L, p, n.c_str());
                        ++mismatches;
                    }
                std::printf("layer %d %s: %zu tensors compared\n", L,
                            p < 0 ? "whole" : (p == 0 ? "piece 0" : "piece 1"), at.size());
            }
        }
        const k3::TrunkStats s = b.stats();
        std::printf("%s: coded trunk read %.3f GB, decoded %.3f GB, decode %.2f s on the reader\n",
                    pieces ? "pieces" : "whole layers", double(s.bytesRead) / 1e9,
                    double(s.bytesDecoded) / 1e9, s.decodeSeconds);
    }
    std::printf("same bytes as the raw trunk: %s\n", mismatches ? "NO" : "yes");
    return mismatches ? 1 : 0;
}

double numberAfter(int& i, int argc, char** argv) {
    if (i + 1 >= argc) {
        std::fprintf(stderr, "%s needs a value\n", argv[i]);
        std::exit(2);
    }
    return std::atof(argv[++i]);
}

} // namespace

int main(int argc, char** argv) {
    const std::string mode = argc > 1 ? argv[1] : "";
    try {
        if (mode == "codec" && argc >= 3) {
            double gb = 1.0;
            for (int i = 3; i < argc; ++i)
                if (std::string(argv[i]) == "--sample-gb") gb = numberAfter(i, argc, argv);
            return runCodec(argv[2], gb);
        }
        if (mode == "same" && argc >= 5) return runSame(argv[2], argv[3], argv[4]);
        if (mode == "e2e" && argc >= 5) {
            double trunkGb = 1.5, cacheGb = 0.5;
            int tokens = 4;
            for (int i = 5; i < argc; ++i) {
                const std::string a = argv[i];
                if (a == "--trunk-gb") trunkGb = numberAfter(i, argc, argv);
                if (a == "--cache-gb") cacheGb = numberAfter(i, argc, argv);
                if (a == "--tokens") tokens = int(numberAfter(i, argc, argv));
            }
            return runE2e(argv[2], argv[3], argv[4], trunkGb, cacheGb, tokens);
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_trunk_codec: %s\n", e.what());
        return 1;
    }
    std::fprintf(stderr, "usage: bench_trunk_codec codec MODEL_DIR [--sample-gb X]\n"
                         "       bench_trunk_codec same MODEL_DIR RAW_TRUNK CODED_TRUNK\n"
                         "       bench_trunk_codec e2e MODEL_DIR RAW_TRUNK CODED_TRUNK "
                         "[--trunk-gb X] [--cache-gb Y] [--tokens N]\n");
    return 2;
}
