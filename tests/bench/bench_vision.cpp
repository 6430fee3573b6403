// The vision tower's time per image size at K3's real widths (issue 33): MoonViT with
// hidden 1024, attention 12 x 128 = 1536, MLP 4096, 27 layers, a 64 x 64 position grid
// and the projector 4096 -> 4096 -> 7168 (../shared/reference/vision.md), random BF16
// weights (447 M parameters, 0.83 GiB). Prints, per image: the preprocessing time, the
// tower + projector time, its GFLOP/s next to the multi-column BF16 kernel's measured in
// the same run (matmat on the tower's own 4096 x 1024 MLP matrix, 64 columns), and the
// peak resident memory it reached over the loaded weights.
//
// The weights are made in memory: one safetensors file on tmpfs (/dev/shm, RAM), read by
// the engine's own loader and removed as soon as the tower holds them; nothing is
// written to a disk.
//
// Usage: bench_vision [--layers N (1..27, default 27)] [--sizes 224x224,640x480,1920x1080]
//                     [--full] [--smoke] [--dump FILE]
// --dump FILE: the projector rows of every measured image, appended as raw float32 (a
// before/after memcmp of a change to the tower).
// Images of more than 4096 patches (1080p: 10,764) are timed on towers of 1 and 2 layers
// and scaled to the depth (every layer costs the same): minutes instead of most of an
// hour on 2 cores. --full times every size at the full depth. --smoke: 2 layers, 224x224
// only (seconds; a check that it runs).
#include <k3/kernels.hpp>
#include <k3/process_memory.hpp>
#include <k3/safetensors.hpp>
#include <k3/vision.hpp>

#include <omp.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include <unistd.h>

namespace {

using Clock = std::chrono::steady_clock;
double secondsSince(Clock::time_point t) {
    return std::chrono::duration<double>(Clock::now() - t).count();
}

// xorshift64*: fast, fixed, good enough for weights nobody reads for meaning.
struct Random {
    std::uint64_t s;
    std::uint64_t next() {
        s ^= s >> 12;
        s ^= s << 25;
        s ^= s >> 27;
        return s * 2685821657736338717ull;
    }
    // Uniform in [-a, a), rounded down to BF16 (the top half of the float).
    std::uint16_t bf16(float a) {
        const float u = float(next() >> 40) / float(1 << 24);
        const float v = (2.0f * u - 1.0f) * a;
        std::uint32_t bits;
        std::memcpy(&bits, &v, sizeof bits);
        return std::uint16_t(bits >> 16);
    }
};

struct Tensor {
    std::string name;
    std::vector<std::uint64_t> shape;
    float scale; // 0: ones (norm gains)
};

std::uint64_t elements(const Tensor& t) {
    std::uint64_t n = 1;
    for (auto d : t.shape) n *= d;
    return n;
}

// The released tensor names and shapes (vision.md section 3), random BF16 values of the
// size that keeps activations finite: uniform with variance 1 / fan-in.
std::vector<Tensor> towerTensors(const k3::VisionConfig& c) {
    const auto C = std::uint64_t(c.hidden), Q = std::uint64_t(c.qkvWidth),
               I = std::uint64_t(c.intermediate), T = std::uint64_t(c.textHidden);
    const auto fan = [](std::uint64_t in) { return std::sqrt(3.0f / float(in)); };
    std::vector<Tensor> t;
    t.push_back({"vision_tower.patch_embed.proj.weight", {C, 3, 14, 14}, fan(3 * 14 * 14)});
    t.push_back({"vision_tower.patch_embed.pos_emb.weight",
                 {std::uint64_t(c.posHeight), std::uint64_t(c.posWidth), C},
                 0.02f});
    for (int i = 0; i < c.layers; ++i) {
        const std::string b = "vision_tower.encoder.blocks." + std::to_string(i) + ".";
        t.push_back({b + "norm0.weight", {C}, 0});
        t.push_back({b + "wqkv.weight", {3 * Q, C}, fan(C)});
        t.push_back({b + "wo.weight", {C, Q}, fan(Q)});
        t.push_back({b + "norm1.weight", {C}, 0});
        t.push_back({b + "mlp.fc0.weight", {I, C}, fan(C)});
        t.push_back({b + "mlp.fc1.weight", {C, I}, fan(I)});
    }
    t.push_back({"vision_tower.encoder.final_layernorm.weight", {C}, 0});
    t.push_back({"mm_projector.proj.0.weight", {4 * C, 4 * C}, fan(4 * C)});
    t.push_back({"mm_projector.proj.2.weight", {T, 4 * C}, fan(4 * C)});
    t.push_back({"mm_projector.post_norm.weight", {T}, 0});
    return t;
}

// One safetensors file: the 8-byte header length, the JSON header, the tensors' bytes.
std::uint64_t writeSafetensors(const std::filesystem::path& path, const std::vector<Tensor>& ts) {
    nlohmann::ordered_json header;
    std::uint64_t offset = 0;
    for (const Tensor& t : ts) {
        const std::uint64_t bytes = elements(t) * 2;
        header[t.name] = {
            {"dtype", "BF16"}, {"shape", t.shape}, {"data_offsets", {offset, offset + bytes}}};
        offset += bytes;
    }
    std::string text = header.dump();
    text.append((8 - text.size() % 8) % 8, ' ');
    std::ofstream out(path, std::ios::binary);
    const std::uint64_t length = text.size();
    out.write(reinterpret_cast<const char*>(&length), 8);
    out.write(text.data(), std::streamsize(text.size()));
    Random random{0x9E3779B97F4A7C15ull};
    std::vector<std::uint16_t> buffer;
    for (const Tensor& t : ts) {
        buffer.resize(elements(t));
        for (std::uint16_t& v : buffer)
            v = t.scale == 0 ? std::uint16_t(0x3F80) : random.bf16(t.scale);
        out.write(reinterpret_cast<const char*>(buffer.data()), std::streamsize(buffer.size() * 2));
    }
    if (!out) throw std::runtime_error("could not write " + path.string());
    return offset;
}

// The floating-point work of the tower and projector for one image of `patches`
// patches (a multiply-add counts 2): the weight products, attention's two products
// (every patch attends to every patch of its image), the patch embedding.
double towerFlops(const k3::VisionConfig& c, double n) {
    const double C = c.hidden, Q = c.qkvWidth, I = c.intermediate, T = c.textHidden;
    const double perLayer = 2 * n * (C * 3 * Q + Q * C + 2 * C * I) + 4 * n * n * Q;
    const double tokens = n / 4;
    return 2 * n * 588 * C + c.layers * perLayer + 2 * tokens * (4 * C * 4 * C + 4 * C * T);
}

// Best of `rounds` of the multi-column BF16 product on the tower's fc0 shape, 64 columns.
double matmatGflops(const k3::VisionConfig& c, int rounds) {
    const int rows = c.intermediate, cols = c.hidden, columns = 64;
    std::vector<std::uint16_t> w(std::size_t(rows) * cols);
    Random random{7};
    for (auto& v : w) v = random.bf16(0.05f);
    std::vector<float> x(std::size_t(columns) * cols, 0.5f), y(std::size_t(columns) * rows);
    const k3::WeightView view = k3::WeightView::bf16(w.data(), rows, cols);
    double best = 1e9;
    for (int r = 0; r < rounds; ++r) {
        const auto t0 = Clock::now();
        k3::matmat(y.data(), x.data(), view, columns);
        best = std::min(best, secondsSince(t0));
    }
    return 2.0 * rows * cols * columns / best / 1e9;
}

k3::DecodedImage randomImage(int width, int height) {
    k3::DecodedImage d;
    d.width = width;
    d.height = height;
    d.channels = 3;
    d.format = "PNG";
    d.pixels.resize(std::size_t(width) * height * 3);
    Random random{std::uint64_t(width) * 131 + std::uint64_t(height)};
    for (auto& p : d.pixels) p = std::uint8_t(random.next() >> 56);
    return d;
}

double gib(std::uint64_t bytes) {
    return double(bytes) / double(1ull << 30);
}

// The resident peak of THIS image alone: Linux resets VmHWM when "5" is written to
// clear_refs (a by-hand benchmark on this machine; the engine's peakResidentBytes() is
// the process's lifetime peak, which cannot be reset). 0 where unavailable.
void resetPeak() {
    std::ofstream("/proc/self/clear_refs") << "5";
}
std::uint64_t peakBytes() {
    std::ifstream status("/proc/self/status");
    for (std::string line; std::getline(status, line);)
        if (line.rfind("VmHWM:", 0) == 0) return std::stoull(line.substr(6)) * 1024;
    return 0;
}

k3::VisionConfig k3Config(int layers) {
    k3::VisionConfig c;
    c.hidden = 1024;
    c.qkvWidth = 1536;
    c.heads = 12;
    c.headDim = 128;
    c.intermediate = 4096;
    c.layers = layers;
    c.posHeight = c.posWidth = 64;
    c.textHidden = 7168;
    return c;
}

// A tower of `layers` layers with random weights, through the engine's loader.
k3::VisionTower makeTower(int layers, double& seconds) {
    const k3::VisionConfig c = k3Config(layers);
    const std::filesystem::path dir = std::filesystem::exists("/dev/shm")
                                          ? std::filesystem::path("/dev/shm")
                                          : std::filesystem::temp_directory_path();
    const std::filesystem::path file =
        dir / ("k3_bench_vision_" + std::to_string(::getpid()) + ".safetensors");
    const auto t0 = Clock::now();
    writeSafetensors(file, towerTensors(c));
    try {
        k3::VisionTower tower = k3::VisionTower::load(k3::Checkpoint::open(file), c);
        std::filesystem::remove(file); // the tower holds its own copy now
        seconds = secondsSince(t0);
        return tower;
    } catch (...) {
        std::filesystem::remove(file);
        throw;
    }
}

std::string dumpPath; // --dump

struct Timing {
    double seconds = 0;
    std::uint64_t peak = 0; // resident peak during the image
};
Timing timeTower(const k3::VisionTower& tower, const k3::PreparedImage& image) {
    resetPeak();
    const auto t0 = Clock::now();
    const std::vector<float> rows = tower.encode(std::span(&image, 1));
    Timing t{secondsSince(t0), peakBytes()};
    if (!dumpPath.empty()) {
        std::ofstream out(dumpPath, std::ios::binary | std::ios::app);
        out.write(reinterpret_cast<const char*>(rows.data()),
                  std::streamsize(rows.size() * sizeof(float)));
    }
    if (rows.size() != std::size_t(image.plan.tokens()) * tower.config().textHidden ||
        !std::all_of(rows.begin(), rows.end(), [](float v) { return std::isfinite(v); }))
        throw std::runtime_error("the tower's rows are not finite rows of the projector's width");
    return t;
}

} // namespace

int main(int argc, char** argv) {
    int layers = 27;
    int fullUpTo = 4096; // patches: larger images are timed at 1 and 2 layers and scaled
    std::vector<std::pair<int, int>> sizes = {{224, 224}, {640, 480}, {1920, 1080}};
    for (int i = 1; i < argc; ++i) {
        const std::string a = argv[i];
        if (a == "--smoke") {
            layers = 2;
            sizes = {{224, 224}};
        } else if (a == "--full") {
            fullUpTo = 1 << 30;
        } else if (a == "--dump" && i + 1 < argc) {
            dumpPath = argv[++i];
        } else if (a == "--layers" && i + 1 < argc) {
            layers = std::atoi(argv[++i]);
        } else if (a == "--sizes" && i + 1 < argc) {
            sizes.clear();
            std::string list = argv[++i];
            for (std::size_t at = 0; at < list.size();) {
                const std::size_t end = std::min(list.find(',', at), list.size());
                int w = 0, h = 0;
                if (std::sscanf(list.substr(at, end - at).c_str(), "%dx%d", &w, &h) != 2 || w < 1 ||
                    h < 1) {
                    std::fprintf(stderr, "bench_vision: --sizes takes WxH,WxH,...\n");
                    return 2;
                }
                sizes.push_back({w, h});
                at = end + 1;
            }
        } else {
            std::fprintf(stderr,
                         "usage: bench_vision [--layers N] [--sizes WxH,...] [--full] [--smoke] "
                         "[--dump FILE]\n");
            return 2;
        }
    }
    if (layers < 1 || layers > 27) {
        std::fprintf(stderr, "bench_vision: --layers must be 1..27\n");
        return 2;
    }
    const k3::VisionConfig c = k3Config(layers);
    const double kernel = matmatGflops(c, 5);
    std::printf("K3 vision tower at the release's widths, random BF16 weights, %d layer(s)%s; "
                "%d OpenMP threads\n",
                layers, layers == 27 ? " (the release's depth)" : " (the release has 27)",
                omp_get_max_threads());
    std::printf("multi-column BF16 kernel (matmat 4096x1024, 64 columns, best of 5): %.1f "
                "GFLOP/s\n\n",
                kernel);
    std::printf("%-10s %9s %8s %6s %7s %9s %8s %8s %7s %10s %10s\n", "image", "read at", "patches",
                "rows", "prep s", "tower s", "GFLOP", "GFLOP/s", "kernel", "peak GiB", "how");

    std::vector<std::pair<k3::PreparedImage, std::string>> prepared;
    std::vector<double> prepSeconds;
    for (const auto& [w, h] : sizes) {
        const k3::DecodedImage image = randomImage(w, h);
        const auto p0 = Clock::now();
        prepared.push_back({k3::prepareImage(image), std::to_string(w) + "x" + std::to_string(h)});
        prepSeconds.push_back(secondsSince(p0));
    }
    const auto report = [&](std::size_t i, double seconds, std::uint64_t peak, const char* how) {
        const k3::PreparedImage& p = prepared[i].first;
        const double flops = towerFlops(c, p.plan.patches());
        char readAt[32];
        std::snprintf(readAt, sizeof readAt, "%dx%d", p.plan.paddedWidth, p.plan.paddedHeight);
        std::printf("%-10s %9s %8d %6d %7.3f %9.2f %8.1f %8.1f %6.0f%% %10.2f %10s\n",
                    prepared[i].second.c_str(), readAt, p.plan.patches(), p.plan.tokens(),
                    prepSeconds[i], seconds, flops / 1e9, flops / seconds / 1e9,
                    100.0 * flops / seconds / 1e9 / kernel, gib(peak), how);
        std::fflush(stdout);
    };
    try {
        double made = 0;
        if (std::any_of(prepared.begin(), prepared.end(),
                        [&](const auto& p) { return p.first.plan.patches() <= fullUpTo; })) {
            const k3::VisionTower tower = makeTower(layers, made);
            std::printf("(%d-layer tower: %.2f GiB of weights, made and loaded in %.1f s)\n",
                        layers, gib(tower.weightBytes()), made);
            for (std::size_t i = 0; i < prepared.size(); ++i)
                if (prepared[i].first.plan.patches() <= fullUpTo) {
                    const Timing t = timeTower(tower, prepared[i].first);
                    report(i, t.seconds, t.peak, "measured");
                }
        }
        // Larger images: every layer costs the same, so the tower at depth L takes
        // t(1) + (L - 1) (t(2) - t(1)); the peak is the 2-layer run's with the other
        // layers' weights added (activations do not grow with depth).
        if (std::any_of(prepared.begin(), prepared.end(),
                        [&](const auto& p) { return p.first.plan.patches() > fullUpTo; })) {
            const k3::VisionTower one = makeTower(1, made);
            const k3::VisionTower two = makeTower(2, made);
            const std::uint64_t layerBytes = two.weightBytes() - one.weightBytes();
            for (std::size_t i = 0; i < prepared.size(); ++i)
                if (prepared[i].first.plan.patches() > fullUpTo) {
                    const Timing t1 = timeTower(one, prepared[i].first);
                    const Timing t2 = timeTower(two, prepared[i].first);
                    const double seconds = t1.seconds + (layers - 1) * (t2.seconds - t1.seconds);
                    // The 1-layer tower is resident too during the 2-layer run.
                    const std::uint64_t peak =
                        t2.peak - one.weightBytes() + std::uint64_t(layers - 2) * layerBytes;
                    report(i, seconds, peak, "scaled");
                }
        }
    } catch (const std::exception& e) {
        std::fprintf(stderr, "bench_vision: %s\n", e.what());
        return 1;
    }
    std::printf("\nGFLOP: 2 x multiply-adds of the weight products, attention's QK and AV over "
                "every patch pair of the image, the patch embedding and the projector. kernel: "
                "the tower's GFLOP/s over the kernel's. peak: resident memory while the image was "
                "read (weights included). scaled: timed at 1 and 2 layers, t(1) + %d (t(2) - "
                "t(1)).\n",
                layers - 1);
    return 0;
}
