#include "SynthCheckpoint.hpp"

#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

namespace k3synth {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

// The released language model's widths (shared/reference/README.md).
constexpr std::uint64_t kHidden = 7168, kVocab = 163840, kKdaHeads = 96, kHeadDim = 128;
constexpr std::uint64_t kConv = 4, kALogShipped = 128;
constexpr std::uint64_t kMlaHeads = 96, kQLora = 1536, kKvLora = 512, kNope = 128, kRope = 64,
                        kV = 128;
constexpr std::uint64_t kLatent = 3584, kMoeInter = 3072, kShared = 2, kDenseInter = 33792;
constexpr int kTopK = 16;

enum class Fill { Small, Gain, F32Small, Packed, Scale };
enum class Dt { BF16, F32, U8 };

struct Tensor {
    std::string name;
    Dt dtype;
    std::vector<std::uint64_t> shape;
    Fill fill;
    std::uint64_t bytes() const {
        std::uint64_t n = dtype == Dt::BF16 ? 2 : dtype == Dt::F32 ? 4 : 1;
        for (auto d : shape) n *= d;
        return n;
    }
};

struct Shard {
    std::vector<Tensor> tensors;
};

const char* dtName(Dt d) {
    return d == Dt::BF16 ? "BF16" : d == Dt::F32 ? "F32" : "U8";
}

bool isMla(int layer, int layers) {
    return (layer + 1) % 4 == 0 || layer + 1 == layers;
}

void addLayer(std::vector<Tensor>& t, int L, int layers) {
    const std::string p = "language_model.model.layers." + std::to_string(L) + ".";
    const std::uint64_t E = kHidden, P = kKdaHeads * kHeadDim;
    auto bf = [&](const std::string& n, std::vector<std::uint64_t> s, Fill f = Fill::Small) {
        t.push_back({p + n, Dt::BF16, std::move(s), f});
    };
    // The non-expert tensors first, as one contiguous run (the packer needs that).
    bf("input_layernorm.weight", {E}, Fill::Gain);
    bf("post_attention_layernorm.weight", {E}, Fill::Gain);
    bf("self_attention_res_norm.weight", {E}, Fill::Gain);
    bf("self_attention_res_proj.weight", {1, E});
    bf("mlp_res_norm.weight", {E}, Fill::Gain);
    bf("mlp_res_proj.weight", {1, E});
    const std::string a = "self_attn.";
    if (!isMla(L, layers)) {
        for (const char* n : {"q_proj", "k_proj", "v_proj", "g_proj"})
            bf(a + n + ".weight", {P, E});
        bf(a + "o_proj.weight", {E, P});
        for (const char* n : {"q_conv1d", "k_conv1d", "v_conv1d"})
            bf(a + n + ".weight", {P, 1, kConv});
        bf(a + "f_a_proj.weight", {kHeadDim, E});
        bf(a + "f_b_proj.weight", {P, kHeadDim});
        bf(a + "b_proj.weight", {kKdaHeads, E});
        t.push_back({p + a + "A_log", Dt::F32, {kALogShipped}, Fill::F32Small});
        bf(a + "dt_bias", {P});
        bf(a + "o_norm.weight", {kHeadDim}, Fill::Gain);
    } else {
        bf(a + "q_a_proj.weight", {kQLora, E});
        bf(a + "q_a_layernorm.weight", {kQLora}, Fill::Gain);
        bf(a + "q_b_proj.weight", {kMlaHeads * (kNope + kRope), kQLora});
        bf(a + "kv_a_proj_with_mqa.weight", {kKvLora + kRope, E});
        bf(a + "kv_a_layernorm.weight", {kKvLora}, Fill::Gain);
        bf(a + "kv_b_proj.weight", {kMlaHeads * (kNope + kV), kKvLora});
        bf(a + "g_proj.weight", {kMlaHeads * kV, E});
        bf(a + "o_proj.weight", {E, kMlaHeads * kV});
    }
}

void addMlp(std::vector<Tensor>& t, int L, int experts) {
    const std::string p = "language_model.model.layers." + std::to_string(L) + ".";
    const std::uint64_t E = kHidden;
    auto bf = [&](const std::string& n, std::vector<std::uint64_t> s, Fill f = Fill::Small) {
        t.push_back({p + n, Dt::BF16, std::move(s), f});
    };
    if (L == 0) { // first_k_dense_replace = 1
        bf("mlp.gate_proj.weight", {kDenseInter, E});
        bf("mlp.up_proj.weight", {kDenseInter, E});
        bf("mlp.down_proj.weight", {E, kDenseInter});
        return;
    }
    const std::string m = "block_sparse_moe.";
    bf(m + "gate.weight", {std::uint64_t(experts), E});
    t.push_back({p + m + "gate.e_score_correction_bias",
                 Dt::F32,
                 {std::uint64_t(experts)},
                 Fill::F32Small});
    bf(m + "routed_expert_down_proj.weight", {kLatent, E});
    bf(m + "routed_expert_up_proj.weight", {E, kLatent});
    bf(m + "routed_expert_norm.weight", {kLatent}, Fill::Gain);
    const std::uint64_t SI = kMoeInter * kShared;
    bf(m + "shared_experts.gate_proj.weight", {SI, E});
    bf(m + "shared_experts.up_proj.weight", {SI, E});
    bf(m + "shared_experts.down_proj.weight", {E, SI});
    // Routed experts after the trunk run: w1 = gate, w3 = up [3072, 3584]; w2 = down.
    for (int e = 0; e < experts; ++e) {
        const std::string x = p + m + "experts." + std::to_string(e) + ".";
        for (const char* w : {"w1", "w2", "w3"}) {
            const bool down = std::strcmp(w, "w2") == 0;
            const std::uint64_t rows = down ? kLatent : kMoeInter,
                                cols = down ? kMoeInter : kLatent;
            t.push_back({x + w + ".weight_packed", Dt::U8, {rows, cols / 2}, Fill::Packed});
            t.push_back({x + w + ".weight_scale", Dt::U8, {rows, cols / 32}, Fill::Scale});
        }
    }
}

// The vision tower (27 blocks) and the projector as released (shared/reference/vision.md,
// section 3): 168 BF16 tensors, no biases.
Shard visionShard() {
    constexpr std::uint64_t C = 1024, Q = 1536, M = 4096, Pos = 64, Patch = 14;
    Shard s;
    auto bf = [&s](const std::string& n, std::vector<std::uint64_t> shape, Fill f = Fill::Small) {
        s.tensors.push_back({n, Dt::BF16, std::move(shape), f});
    };
    const std::string t = "vision_tower.";
    bf(t + "patch_embed.proj.weight", {C, 3, Patch, Patch});
    bf(t + "patch_embed.pos_emb.weight", {Pos, Pos, C});
    for (int i = 0; i < 27; ++i) {
        const std::string b = t + "encoder.blocks." + std::to_string(i) + ".";
        bf(b + "norm0.weight", {C}, Fill::Gain);
        bf(b + "wqkv.weight", {3 * Q, C});
        bf(b + "wo.weight", {C, Q});
        bf(b + "norm1.weight", {C}, Fill::Gain);
        bf(b + "mlp.fc0.weight", {M, C});
        bf(b + "mlp.fc1.weight", {C, M});
    }
    bf(t + "encoder.final_layernorm.weight", {C}, Fill::Gain);
    bf("mm_projector.proj.0.weight", {M, M});
    bf("mm_projector.proj.2.weight", {kHidden, M});
    bf("mm_projector.post_norm.weight", {kHidden}, Fill::Gain);
    return s;
}

// Shard 1: embeddings; one shard per layer; then final norm, output AttnRes, lm_head;
// the vision tower last when asked for (96 shards at full size, as released).
std::vector<Shard> layout(const SynthOptions& o) {
    std::vector<Shard> shards;
    const std::string mp = "language_model.model.";
    shards.push_back({{{mp + "embed_tokens.weight", Dt::BF16, {kVocab, kHidden}, Fill::Small}}});
    for (int L = 0; L < o.layers; ++L) {
        Shard s;
        addLayer(s.tensors, L, o.layers);
        addMlp(s.tensors, L, o.experts);
        shards.push_back(std::move(s));
    }
    shards.push_back(
        {{{mp + "norm.weight", Dt::BF16, {kHidden}, Fill::Gain},
          {mp + "output_attn_res_norm.weight", Dt::BF16, {kHidden}, Fill::Gain},
          {mp + "output_attn_res_proj.weight", Dt::BF16, {1, kHidden}, Fill::Small},
          {"language_model.lm_head.weight", Dt::BF16, {kVocab, kHidden}, Fill::Small}}});
    if (o.vision) shards.push_back(visionShard());
    return shards;
}

// Random pools the tensors are cut from (16 MB each: large writes, no per-byte work).
struct Pools {
    static constexpr std::size_t kBytes = std::size_t{16} << 20;
    std::vector<unsigned char> pool[5];
    explicit Pools(std::uint64_t seed) {
        std::mt19937_64 rng(seed);
        for (int f = 0; f < 5; ++f) {
            auto& v = pool[f];
            v.resize(kBytes);
            for (std::size_t i = 0; i < kBytes; i += 8) {
                std::uint64_t r = rng();
                unsigned char* out = v.data() + i;
                switch (Fill(f)) {
                case Fill::Small: // BF16 +-[2^-8, 2^-4): sign, exponent 119..122, mantissa
                case Fill::Gain:  // BF16 +[0.5, 2): exponent 126..127
                    for (int k = 0; k < 4; ++k, r >>= 16) {
                        const unsigned mant = unsigned(r & 0x7f);
                        const unsigned ex = Fill(f) == Fill::Gain ? 126 + unsigned((r >> 7) & 1)
                                                                  : 119 + unsigned((r >> 7) & 3);
                        const unsigned sign = Fill(f) == Fill::Gain ? 0 : unsigned((r >> 9) & 1);
                        const auto h = std::uint16_t((sign << 15) | (ex << 7) | mant);
                        std::memcpy(out + 2 * k, &h, 2);
                    }
                    break;
                case Fill::F32Small: // F32 in [0, 1)
                    for (int k = 0; k < 2; ++k, r >>= 32) {
                        const float x = float(r & 0xffffff) / float(1 << 24);
                        std::memcpy(out + 4 * k, &x, 4);
                    }
                    break;
                case Fill::Packed: // any byte is two valid E2M1 codes
                    std::memcpy(out, &r, 8);
                    break;
                case Fill::Scale: // E8M0 118..122: 2^-9..2^-5, never 255 (NaN)
                    for (int k = 0; k < 8; ++k, r >>= 8)
                        out[k] = (unsigned char)(118 + (r & 0xff) % 5);
                    break;
                }
            }
        }
    }
};

void writeAll(int fd, const unsigned char* p, std::size_t n, const fs::path& path) {
    while (n > 0) {
        const ssize_t w = ::write(fd, p, n);
        if (w < 0) {
            if (errno == EINTR) continue;
            throw std::runtime_error(path.string() + ": write failed: " + std::strerror(errno));
        }
        p += w;
        n -= std::size_t(w);
    }
}

// One shard file written through a 16 MB aligned staging buffer with O_DIRECT: on the
// machines here buffered writes ran at a tenth of the disk (dirty-page throttling).
// The last chunk is padded to 4096 and the file truncated back to its exact size.
// Filesystems without O_DIRECT (tmpfs) get the same writes, buffered.
class ShardWriter {
public:
    static constexpr std::size_t kChunk = std::size_t{16} << 20;
    explicit ShardWriter(const fs::path& path) : path_(path) {
        fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC | O_DIRECT, 0644);
        if (fd_ < 0 && errno == EINVAL)
            fd_ = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
        if (fd_ < 0)
            throw std::runtime_error(path.string() + ": cannot create: " + std::strerror(errno));
        void* p = nullptr;
        if (::posix_memalign(&p, 4096, kChunk) != 0) {
            ::close(fd_);
            throw std::runtime_error("cannot allocate a 16 MB aligned write buffer");
        }
        buf_ = static_cast<unsigned char*>(p);
    }
    ~ShardWriter() {
        if (fd_ >= 0) ::close(fd_);
        std::free(buf_);
    }
    ShardWriter(const ShardWriter&) = delete;
    ShardWriter& operator=(const ShardWriter&) = delete;
    void append(const unsigned char* p, std::size_t n) {
        while (n > 0) {
            const std::size_t k = std::min(n, kChunk - used_);
            std::memcpy(buf_ + used_, p, k);
            used_ += k;
            p += k;
            n -= k;
            if (used_ == kChunk) flush();
        }
    }
    void finish() {
        const std::uint64_t size = written_ + used_;
        if (used_ > 0) {
            const std::size_t padded = (used_ + 4095) / 4096 * 4096;
            std::memset(buf_ + used_, 0, padded - used_);
            used_ = padded;
            flush();
        }
        const bool ok = ::ftruncate(fd_, off_t(size)) == 0;
        const int err = errno;
        const bool closed = ::close(fd_) == 0;
        fd_ = -1;
        if (!ok || !closed)
            throw std::runtime_error(path_.string() + ": cannot finish: " + std::strerror(err));
    }

private:
    void flush() {
        writeAll(fd_, buf_, used_, path_);
        written_ += used_;
        used_ = 0;
    }
    fs::path path_;
    int fd_ = -1;
    unsigned char* buf_ = nullptr;
    std::size_t used_ = 0;
    std::uint64_t written_ = 0;
};

// A shard's length prefix and header, then `dataBytes` of hole.
void writeSparseShard(const fs::path& path, const std::string& header, std::uint64_t dataBytes) {
    const int fd = ::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    if (fd < 0)
        throw std::runtime_error(path.string() + ": cannot create: " + std::strerror(errno));
    unsigned char len[8];
    for (int i = 0; i < 8; ++i) len[i] = (unsigned char)(std::uint64_t(header.size()) >> (8 * i));
    try {
        writeAll(fd, len, 8, path);
        writeAll(fd, reinterpret_cast<const unsigned char*>(header.data()), header.size(), path);
    } catch (...) {
        ::close(fd);
        throw;
    }
    const bool ok = ::ftruncate(fd, off_t(8 + header.size() + dataBytes)) == 0;
    const int err = errno;
    if (::close(fd) != 0 || !ok)
        throw std::runtime_error(path.string() + ": cannot size: " + std::strerror(err));
}

std::uint64_t splitmix64(std::uint64_t& x) {
    std::uint64_t z = (x += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

// Walker's alias table over the 65536 BF16 codes: code c has the probability that
// N(0, sigma) rounds to it (the interval between the midpoints to its neighbours), so one
// 64-bit draw gives one exact sample (16 bits pick a column, 48 bits the threshold).
struct Bf16GaussianTable {
    std::vector<std::uint64_t> threshold = std::vector<std::uint64_t>(65536);
    std::vector<std::uint16_t> alias = std::vector<std::uint16_t>(65536);
    explicit Bf16GaussianTable(double sigma) {
        auto value = [](std::uint32_t c) {
            const std::uint32_t f = c << 16;
            float v;
            std::memcpy(&v, &f, 4);
            return double(v);
        };
        std::vector<double> p(65536, 0.0);
        const double k = 1.0 / (sigma * std::sqrt(2.0));
        for (std::uint32_t c = 0; c < 0x7f80; ++c) { // +0 .. the largest finite
            const double lo = c == 0 ? 0.0 : (value(c - 1) + value(c)) / 2;
            const double hi = c == 0x7f7f ? HUGE_VAL : (value(c) + value(c + 1)) / 2;
            const double q = 0.5 * (std::erfc(lo * k) - std::erfc(hi * k));
            p[c] = q;
            p[c | 0x8000] = q;
        }
        // Vose's method on p * 65536.
        std::vector<double> scaled(65536);
        std::vector<std::uint32_t> small, large;
        for (std::uint32_t i = 0; i < 65536; ++i) {
            scaled[i] = p[i] * 65536.0;
            (scaled[i] < 1.0 ? small : large).push_back(i);
        }
        const double one = double(std::uint64_t{1} << 48);
        while (!small.empty() && !large.empty()) {
            const std::uint32_t s = small.back(), l = large.back();
            small.pop_back();
            threshold[s] = std::uint64_t(scaled[s] * one);
            alias[s] = std::uint16_t(l);
            scaled[l] -= 1.0 - scaled[s];
            if (scaled[l] < 1.0) {
                large.pop_back();
                small.push_back(l);
            }
        }
        for (std::uint32_t i : large)
            threshold[i] = std::uint64_t{1} << 48, alias[i] = std::uint16_t(i);
        for (std::uint32_t i : small)
            threshold[i] = std::uint64_t{1} << 48, alias[i] = std::uint16_t(i);
    }
};

// The chosen expert set of the layer whose router bias `name` is, if any.
const std::vector<int>* allowedSet(const SynthOptions& o, const std::string& name) {
    const std::string suffix = ".block_sparse_moe.gate.e_score_correction_bias";
    const std::string prefix = "language_model.model.layers.";
    if (name.size() <= suffix.size() ||
        name.compare(name.size() - suffix.size(), suffix.size(), suffix) != 0)
        return nullptr;
    const auto L = std::size_t(std::stoi(name.substr(prefix.size())));
    if (L >= o.allowedExperts.size() || o.allowedExperts[L].empty()) return nullptr;
    return &o.allowedExperts[L];
}

} // namespace

std::vector<std::vector<int>> traceExpertUnions(const fs::path& trace, int layers,
                                                int firstTraceLayer) {
    std::ifstream in(trace, std::ios::binary);
    if (!in) throw std::runtime_error(trace.string() + ": cannot open");
    std::vector<std::vector<char>> used(std::size_t(std::max(layers, 1)));
    std::int32_t rec[2];
    while (in.read(reinterpret_cast<char*>(rec), sizeof rec)) {
        const int L = rec[0] - firstTraceLayer + 1; // trace layer -> our MoE layer
        if (L < 1 || L >= layers || rec[1] < 0) continue;
        auto& u = used[std::size_t(L)];
        if (u.size() <= std::size_t(rec[1])) u.resize(std::size_t(rec[1]) + 1, 0);
        u[std::size_t(rec[1])] = 1;
    }
    std::vector<std::vector<int>> sets(std::size_t(std::max(layers, 1)));
    for (std::size_t L = 0; L < used.size(); ++L)
        for (std::size_t e = 0; e < used[L].size(); ++e)
            if (used[L][e]) sets[L].push_back(int(e));
    return sets;
}

void fillGaussianBf16(std::uint16_t* out, std::size_t n, std::uint64_t seed) {
    static const Bf16GaussianTable t(0.02);
    std::uint64_t x = seed;
    for (std::size_t i = 0; i < n; ++i) {
        const std::uint64_t r = splitmix64(x);
        const std::uint32_t col = std::uint32_t(r & 0xffff);
        out[i] = (r >> 16) < t.threshold[col] ? std::uint16_t(col) : t.alias[col];
    }
}

std::uint64_t synthCheckpointBytes(const SynthOptions& o) {
    std::uint64_t n = 0;
    for (const Shard& s : layout(o))
        for (const Tensor& t : s.tensors) n += t.bytes();
    return n;
}

SynthResult writeSynthCheckpoint(const fs::path& dir, const SynthOptions& o,
                                 const SynthProgress& progress) {
    if (o.layers < 1 || o.layers > 93)
        throw std::runtime_error("--layers " + std::to_string(o.layers) + " is outside 1..93");
    if (o.experts < 1 || o.experts > 896)
        throw std::runtime_error("--experts " + std::to_string(o.experts) + " is outside 1..896");
    const auto t0 = std::chrono::steady_clock::now();
    fs::create_directories(dir);
    const std::vector<Shard> shards = layout(o);
    const std::uint64_t total = synthCheckpointBytes(o);
    const Pools pools(o.seed);
    SynthResult res;
    // Sorted by name, as the hub's index files are (an ordered_json looks each name up
    // linearly: 500,000 names at full size took minutes).
    nlohmann::json weightMap = nlohmann::json::object();
    char nameBuf[64];
    std::uint64_t cursor = o.seed * 7919; // where in the pools the next tensor starts
    for (std::size_t si = 0; si < shards.size(); ++si) {
        std::snprintf(nameBuf, sizeof nameBuf, "model-%05zu-of-%05zu.safetensors", si + 1,
                      shards.size());
        const fs::path path = dir / nameBuf;
        ordered_json header = ordered_json::object();
        header["__metadata__"] = {{"format", "pt"}};
        std::uint64_t off = 0;
        for (const Tensor& t : shards[si].tensors) {
            header[t.name] = {{"dtype", dtName(t.dtype)},
                              {"shape", t.shape},
                              {"data_offsets", {off, off + t.bytes()}}};
            off += t.bytes();
            weightMap[t.name] = nameBuf;
        }
        std::string h = header.dump();
        h.append((8 - h.size() % 8) % 8, ' '); // data starts 8-aligned
        if (o.sparse) {
            writeSparseShard(path, h, off);
            res.bytes += off;
            res.tensors += int(shards[si].tensors.size());
            ++res.shards;
            if (progress) progress(res.bytes, total);
            continue;
        }
        ShardWriter out(path);
        const std::uint64_t len = h.size();
        unsigned char lenBytes[8];
        for (int i = 0; i < 8; ++i) lenBytes[i] = (unsigned char)(len >> (8 * i)); // little-endian
        out.append(lenBytes, 8);
        out.append(reinterpret_cast<const unsigned char*>(h.data()), h.size());
        for (const Tensor& t : shards[si].tensors) {
            if (o.gaussianTrunk && t.fill == Fill::Small && t.dtype == Dt::BF16 &&
                t.name.find(".layers.") != std::string::npos) {
                // Fresh draws, one per element, a stream per tensor.
                std::vector<std::uint16_t> buf(Pools::kBytes / 2);
                std::uint64_t seed = o.seed * 0x9e3779b97f4a7c15ull + std::uint64_t(res.tensors);
                for (std::uint64_t left = t.bytes() / 2; left > 0;) {
                    const std::size_t n = std::size_t(std::min<std::uint64_t>(left, buf.size()));
                    fillGaussianBf16(buf.data(), n, splitmix64(seed));
                    out.append(reinterpret_cast<const unsigned char*>(buf.data()), 2 * n);
                    left -= n;
                }
                res.bytes += t.bytes();
                ++res.tensors;
                continue;
            }
            if (const auto* set = allowedSet(o, t.name)) {
                std::vector<float> bias(std::size_t(o.experts), -4.0f);
                for (int e : *set)
                    if (e >= 0 && e < o.experts) bias[std::size_t(e)] = 0.0f;
                out.append(reinterpret_cast<const unsigned char*>(bias.data()), t.bytes());
                res.bytes += t.bytes();
                ++res.tensors;
                continue;
            }
            const auto& pool = pools.pool[int(t.fill)];
            // Start on a multiple of the element size so every element stays valid.
            std::size_t at = std::size_t(cursor % (Pools::kBytes / 2)) & ~std::size_t(7);
            cursor = cursor * 6364136223846793005ull + 1442695040888963407ull;
            for (std::uint64_t left = t.bytes(); left > 0;) {
                const std::size_t n =
                    std::size_t(std::min<std::uint64_t>(left, Pools::kBytes - at));
                out.append(pool.data() + at, n);
                left -= n;
                at = 0;
            }
            res.bytes += t.bytes();
            ++res.tensors;
        }
        out.finish();
        ++res.shards;
        if (progress) progress(res.bytes, total);
    }
    ordered_json index;
    index["metadata"] = {{"total_size", res.bytes}};
    index["weight_map"] = weightMap;
    std::ofstream(dir / "model.safetensors.index.json") << index.dump(2) << "\n";

    // config.json in the released nested shape; every language-model key in text_config.
    ordered_json kda = ordered_json::array(), full = ordered_json::array();
    for (int L = 0; L < o.layers; ++L) (isMla(L, o.layers) ? full : kda).push_back(L + 1);
    ordered_json tc;
    tc["model_type"] = "kimi_linear";
    tc["hidden_size"] = kHidden;
    tc["num_hidden_layers"] = o.layers;
    tc["vocab_size"] = kVocab;
    tc["rms_norm_eps"] = 1e-5;
    tc["tie_word_embeddings"] = false;
    tc["hidden_act"] = "situ";
    tc["activation_situ_beta"] = 4.0;
    tc["activation_situ_linear_beta"] = 25.0;
    tc["num_attention_heads"] = kMlaHeads;
    tc["q_lora_rank"] = kQLora;
    tc["kv_lora_rank"] = kKvLora;
    tc["qk_nope_head_dim"] = kNope;
    tc["qk_rope_head_dim"] = kRope;
    tc["v_head_dim"] = kV;
    tc["mla_use_output_gate"] = true;
    tc["mla_use_nope"] = true;
    tc["num_experts"] = o.experts;
    tc["num_experts_per_token"] = std::min(kTopK, o.experts);
    tc["num_shared_experts"] = kShared;
    tc["routed_expert_hidden_size"] = kLatent;
    tc["moe_intermediate_size"] = kMoeInter;
    tc["routed_scaling_factor"] = 1.0;
    tc["moe_renormalize"] = true;
    tc["latent_moe_use_norm"] = true;
    tc["moe_router_activation_func"] = "sigmoid";
    tc["num_expert_group"] = 1;
    tc["topk_group"] = 1;
    tc["first_k_dense_replace"] = 1;
    tc["intermediate_size"] = kDenseInter;
    tc["attn_res_block_size"] = 12;
    tc["num_nextn_predict_layers"] = 0;
    tc["max_position_embeddings"] = 262144;
    tc["linear_attn_config"] = {
        {"num_heads", kKdaHeads},    {"head_dim", kHeadDim}, {"short_conv_kernel_size", kConv},
        {"gate_lower_bound", -5.0},  {"kda_layers", kda},    {"full_attn_layers", full},
        {"use_full_rank_gate", true}};
    tc["quantization_config"] = {
        {"quant_method", "compressed-tensors"},
        {"format", "mxfp4-pack-quantized"},
        {"config_groups",
         {{"group_0",
           {{"targets", {"Linear"}},
            {"format", "mxfp4-pack-quantized"},
            {"weights",
             {{"num_bits", 4},
              {"type", "float"},
              {"symmetric", true},
              {"strategy", "group"},
              {"group_size", 32},
              {"scale_dtype", "uint8"},
              {"dynamic", false}}},
            {"input_activations", nullptr}}}}},
        {"ignore",
         {"language_model.lm_head", "re:.*self_attn.*", "re:.*mlp\\..*", "re:.*shared_experts.*",
          "re:.*block_sparse_moe\\.gate$", "re:.*routed_expert_(down|up)_proj$"}}};
    ordered_json cfg;
    cfg["architectures"] = {"KimiK3ForConditionalGeneration"};
    cfg["model_type"] = "kimi_k3";
    cfg["bos_token_id"] = 163584;
    cfg["eos_token_id"] = 163586;
    cfg["pad_token_id"] = 163839;
    cfg["text_config"] = tc;
    if (o.vision) { // as released (shared/reference/vision.md, section 2)
        cfg["media_placeholder_token_id"] = 163605;
        cfg["vision_config"] = {{"_attn_implementation", "flash_attention_2"},
                                {"activation_func", "gelu_pytorch_tanh"},
                                {"attn_bias", false},
                                {"init_pos_emb_height", 64},
                                {"init_pos_emb_width", 64},
                                {"init_pos_emb_time", 4},
                                {"linear_bias", false},
                                {"merge_kernel_size", {2, 2}},
                                {"merge_type", "sd2_tpool"},
                                {"mlp_type", "mlp2"},
                                {"mm_hidden_size", 1024},
                                {"mm_projector_type", "patchmergerv2"},
                                {"norm_type", "rmsnorm"},
                                {"patch_embed_proj_bias", false},
                                {"patch_size", 14},
                                {"pos_emb_interpolation_mode", "bilinear"},
                                {"pos_emb_type", "divided_fixed"},
                                {"projector_hidden_act", "gelu"},
                                {"projector_ln_eps", 1e-05},
                                {"qkv_hidden_size", 1536},
                                {"text_hidden_size", 7168},
                                {"vt_hidden_size", 1024},
                                {"vt_intermediate_size", 4096},
                                {"vt_num_attention_heads", 12},
                                {"vt_num_hidden_layers", 27}};
    }
    std::ofstream(dir / "config.json") << cfg.dump(2) << "\n";
    res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return res;
}

} // namespace k3synth
