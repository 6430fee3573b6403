// K3's MoonViT tower and PatchMergerMLPV2 projector (vision.md sections 4 and 3), on the
// engine's kernels: every weight product is matmat (BF16 weights read in place, float
// activations, the kernels' reduction order), and so are attention's two products (keys
// and transposed values as F32 "weights", double lanes). Transcendentals are evaluated
// in double and rounded once, as tests/reference/k3_vision.py states them.
#include "k3/kernels.hpp"
#include "k3/read_file.hpp"
#include "k3/safetensors.hpp"
#include "k3/vision.hpp"
#include "kernels/MathFunctions.hpp"
#include "model/ModelWeights.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <numbers>

namespace k3 {

namespace {

using model::Matrix;

const std::string kTower = "vision_tower.";
const std::string kProjector = "mm_projector.";
constexpr double kRopeTheta = 10000.0;
// Queries per attention tile: the score tile is kQueryTile x (patches of the image).
constexpr int kQueryTile = 64;

struct BlockWeights {
    std::vector<float> norm0, norm1;
    Matrix wqkv, wo, fc0, fc1;
};

// pixels -> bf16 -> float, round to nearest even: the release casts the pixels to the
// tower's dtype before the patch embedding (finite values only reach here).
float roundToBf16(float x) {
    std::uint32_t bits;
    std::memcpy(&bits, &x, sizeof bits);
    bits = (bits + 0x7FFFu + ((bits >> 16) & 1u)) & 0xFFFF0000u;
    float out;
    std::memcpy(&out, &bits, sizeof out);
    return out;
}

float geluTanh(float x) {
    const double d = x;
    return float(
        0.5 * d *
        (1.0 + math::tanhD(std::sqrt(2.0 / std::numbers::pi) * (d + 0.044715 * d * d * d))));
}

float geluErf(float x) {
    const double d = x;
    return float(0.5 * d * (1.0 + std::erf(d / std::sqrt(2.0))));
}

// PyTorch's bilinear source index and weights (align_corners false), in float32.
struct BilinearTap {
    int i0 = 0, i1 = 0;
    float w0 = 1.0f, w1 = 0.0f;
};
std::vector<BilinearTap> bilinearTaps(int inSize, int outSize) {
    const float scale = float(inSize) / float(outSize);
    std::vector<BilinearTap> taps(static_cast<std::size_t>(outSize));
    for (int d = 0; d < outSize; ++d) {
        float src = scale * (float(d) + 0.5f) - 0.5f;
        if (src < 0.0f) src = 0.0f; // the clamp of the linear modes
        BilinearTap& t = taps[std::size_t(d)];
        t.i0 = int(src);
        t.i1 = t.i0 < inSize - 1 ? t.i0 + 1 : t.i0;
        t.w1 = src - float(t.i0);
        t.w0 = 1.0f - t.w1;
    }
    return taps;
}

int intField(const nlohmann::json& v, const char* key, const std::string& path) {
    const auto it = v.find(key);
    if (it == v.end() || !it->is_number_integer() || it->get<long long>() < 1 ||
        it->get<long long>() > (1 << 20))
        throw ImageError(path + ": vision_config." + key + " is missing or not a positive integer");
    return it->get<int>();
}

void requireText(const nlohmann::json& v, const char* key, const char* want,
                 const std::string& path, const char* why) {
    const auto it = v.find(key);
    if (it != v.end() && !(it->is_string() && it->get<std::string>() == want))
        throw ImageError(path + ": vision_config." + key + " is " + it->dump() + "; only \"" +
                         want + "\" (K3's) is implemented" + why);
}

} // namespace

std::optional<VisionConfig> parseVisionConfig(const std::string& configJson,
                                              const std::string& path) {
    const nlohmann::json j = nlohmann::json::parse(configJson, nullptr, false);
    if (j.is_discarded() || !j.is_object()) throw ImageError(path + ": not a JSON object");
    const auto it = j.find("vision_config");
    if (it == j.end() || it->is_null()) return std::nullopt;
    const nlohmann::json& v = *it;
    if (!v.is_object()) throw ImageError(path + ": vision_config is not an object");
    requireText(v, "mm_projector_type", "patchmergerv2", path, " (K2.5 uses \"patchmerger\")");
    requireText(v, "norm_type", "rmsnorm", path, "");
    requireText(v, "pos_emb_interpolation_mode", "bilinear", path, "");
    requireText(v, "merge_type", "sd2_tpool", path, "");
    VisionConfig c;
    c.hidden = intField(v, "vt_hidden_size", path);
    c.qkvWidth = intField(v, "qkv_hidden_size", path);
    c.heads = intField(v, "vt_num_attention_heads", path);
    c.intermediate = intField(v, "vt_intermediate_size", path);
    c.layers = intField(v, "vt_num_hidden_layers", path);
    c.posHeight = intField(v, "init_pos_emb_height", path);
    c.posWidth = intField(v, "init_pos_emb_width", path);
    c.textHidden = intField(v, "text_hidden_size", path);
    if (v.contains("patch_size") && v["patch_size"] != kPatchSize)
        throw ImageError(path + ": vision_config.patch_size is " + v["patch_size"].dump() +
                         "; the preprocessing is built for " + std::to_string(kPatchSize));
    if (v.contains("merge_kernel_size") && v["merge_kernel_size"] != nlohmann::json{2, 2})
        throw ImageError(path + ": vision_config.merge_kernel_size is " +
                         v["merge_kernel_size"].dump() + "; only [2, 2] is implemented");
    if (c.qkvWidth % c.heads != 0 || (c.qkvWidth / c.heads) % 4 != 0)
        throw ImageError(path + ": qkv_hidden_size " + std::to_string(c.qkvWidth) + " over " +
                         std::to_string(c.heads) +
                         " heads does not give a head size that is a multiple of 4 (2-D RoPE)");
    c.headDim = c.qkvWidth / c.heads;
    if (v.contains("projector_ln_eps") && v["projector_ln_eps"].is_number())
        c.projectorEps = v["projector_ln_eps"].get<float>();
    if (j.contains("media_placeholder_token_id") &&
        j["media_placeholder_token_id"].is_number_integer())
        c.mediaPadId = j["media_placeholder_token_id"].get<int>();
    return c;
}

struct VisionTower::Impl {
    VisionConfig c;
    Matrix patchEmbed;          // [hidden][3 * 14 * 14]
    std::vector<float> posGrid; // [posHeight][posWidth][hidden]
    std::vector<BlockWeights> blocks;
    std::vector<float> finalNorm;
    Matrix proj0, proj2;
    std::vector<float> postNorm;
    std::uint64_t bytes = 0;

    // Patches' rows of one image after the embedding: + the interpolated grid.
    void addPositions(float* x, int h, int w) const;
    // One image's attention for one layer: qkv [n][3 * qkvWidth] -> out [n][qkvWidth].
    void attend(float* out, const float* qkv, int h, int w) const;
};

namespace {

Matrix bindMatrix(const Checkpoint& ckpt, const std::string& name, std::vector<std::uint64_t> shape,
                  std::uint64_t& bytes) {
    const TensorInfo* t = ckpt.find(name);
    if (!t) throw ImageError("the checkpoint has a vision_config but no tensor " + name);
    const std::vector<std::uint64_t> dims(t->dims().begin(), t->dims().end());
    if (dims != shape) {
        std::string want, got;
        for (auto d : shape) want += (want.empty() ? "" : ", ") + std::to_string(d);
        for (auto d : dims) got += (got.empty() ? "" : ", ") + std::to_string(d);
        throw ImageError("tensor " + name + " has shape [" + got + "]; vision_config implies [" +
                         want + "]");
    }
    if (t->dtype != DType::BF16 && t->dtype != DType::F32)
        throw ImageError("tensor " + name + " is " + std::string(dtypeName(t->dtype)) +
                         "; the vision tower reads BF16 or F32");
    Matrix m;
    m.dtype = t->dtype;
    m.raw = ckpt.readRaw(name);
    m.rows = int(shape.front());
    m.cols = int(t->numel() / shape.front());
    bytes += m.raw.size();
    return m;
}

std::vector<float> bindVector(const Checkpoint& ckpt, const std::string& name,
                              std::vector<std::uint64_t> shape, std::uint64_t& bytes) {
    const Matrix m = bindMatrix(ckpt, name, shape, bytes);
    std::vector<float> out(std::size_t(m.rows) * std::size_t(m.cols));
    widenToFloat(m.dtype, m.raw, out);
    bytes += out.size() * sizeof(float) - m.raw.size(); // held widened, the raw copy goes
    return out;
}

void rmsnormRows(float* out, const float* x, const std::vector<float>& w, int rows, int n,
                 float eps) {
    for (int r = 0; r < rows; ++r)
        rmsnorm(out + std::size_t(r) * n, x + std::size_t(r) * n, w.data(), n, eps);
}

} // namespace

VisionTower VisionTower::load(const Checkpoint& ckpt, const VisionConfig& c) {
    auto impl = std::make_unique<Impl>();
    impl->c = c;
    std::uint64_t& bytes = impl->bytes;
    const auto C = std::uint64_t(c.hidden), Q = std::uint64_t(c.qkvWidth);
    impl->patchEmbed =
        bindMatrix(ckpt, kTower + "patch_embed.proj.weight", {C, 3, kPatchSize, kPatchSize}, bytes);
    impl->posGrid = bindVector(ckpt, kTower + "patch_embed.pos_emb.weight",
                               {std::uint64_t(c.posHeight), std::uint64_t(c.posWidth), C}, bytes);
    for (int i = 0; i < c.layers; ++i) {
        const std::string b = kTower + "encoder.blocks." + std::to_string(i) + ".";
        BlockWeights w;
        w.norm0 = bindVector(ckpt, b + "norm0.weight", {C}, bytes);
        w.wqkv = bindMatrix(ckpt, b + "wqkv.weight", {3 * Q, C}, bytes);
        w.wo = bindMatrix(ckpt, b + "wo.weight", {C, Q}, bytes);
        w.norm1 = bindVector(ckpt, b + "norm1.weight", {C}, bytes);
        w.fc0 = bindMatrix(ckpt, b + "mlp.fc0.weight", {std::uint64_t(c.intermediate), C}, bytes);
        w.fc1 = bindMatrix(ckpt, b + "mlp.fc1.weight", {C, std::uint64_t(c.intermediate)}, bytes);
        impl->blocks.push_back(std::move(w));
    }
    impl->finalNorm = bindVector(ckpt, kTower + "encoder.final_layernorm.weight", {C}, bytes);
    impl->proj0 = bindMatrix(ckpt, kProjector + "proj.0.weight", {4 * C, 4 * C}, bytes);
    impl->proj2 =
        bindMatrix(ckpt, kProjector + "proj.2.weight", {std::uint64_t(c.textHidden), 4 * C}, bytes);
    impl->postNorm =
        bindVector(ckpt, kProjector + "post_norm.weight", {std::uint64_t(c.textHidden)}, bytes);
    return VisionTower(std::move(impl));
}

std::optional<VisionTower> VisionTower::loadFromDirectory(const std::filesystem::path& dir) {
    const std::filesystem::path configPath = dir / "config.json";
    const auto config = parseVisionConfig(readRegularFile(configPath, kMaxConfigBytes, "config"),
                                          configPath.string());
    if (!config) return std::nullopt;
    return load(Checkpoint::open(dir), *config);
}

VisionTower::VisionTower(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
VisionTower::~VisionTower() = default;
VisionTower::VisionTower(VisionTower&&) noexcept = default;
VisionTower& VisionTower::operator=(VisionTower&&) noexcept = default;

const VisionConfig& VisionTower::config() const {
    return impl_->c;
}
std::uint64_t VisionTower::weightBytes() const {
    return impl_->bytes;
}

std::uint64_t VisionTower::plannedBytes(const Checkpoint& checkpoint) {
    std::uint64_t bytes = 0;
    for (const auto& [name, t] : checkpoint.tensors()) {
        if (name.rfind(kTower, 0) != 0 && name.rfind(kProjector, 0) != 0) continue;
        // As load() binds them: vectors and the position grid widened (bindVector).
        const bool widened = t.rank == 1 || name == kTower + "patch_embed.pos_emb.weight";
        bytes += widened ? t.numel() * sizeof(float) : t.nbytes;
    }
    return bytes;
}

void VisionTower::Impl::addPositions(float* x, int h, int w) const {
    const int C = c.hidden;
    if (h == c.posHeight && w == c.posWidth) {
        for (std::size_t i = 0; i < std::size_t(h) * w * C; ++i) x[i] += posGrid[i];
        return;
    }
    const auto ys = bilinearTaps(c.posHeight, h), xs = bilinearTaps(c.posWidth, w);
    const auto at = [&](int y, int xx) { return &posGrid[(std::size_t(y) * c.posWidth + xx) * C]; };
    for (int y = 0; y < h; ++y)
        for (int xx = 0; xx < w; ++xx) {
            const BilinearTap& a = ys[std::size_t(y)];
            const BilinearTap& b = xs[std::size_t(xx)];
            const float *g00 = at(a.i0, b.i0), *g01 = at(a.i0, b.i1);
            const float *g10 = at(a.i1, b.i0), *g11 = at(a.i1, b.i1);
            float* row = x + (std::size_t(y) * w + xx) * C;
            // a0 (b0 g00 + b1 g01) + a1 (b0 g10 + b1 g11): the reference's stated order.
            for (int k = 0; k < C; ++k)
                row[k] +=
                    a.w0 * (b.w0 * g00[k] + b.w1 * g01[k]) + a.w1 * (b.w0 * g10[k] + b.w1 * g11[k]);
        }
}

void VisionTower::Impl::attend(float* out, const float* qkv, int h, int w) const {
    const int n = h * w, D = c.headDim, H = c.heads, Q = c.qkvWidth, half = D / 2;
    // RoPE table: pair 2i turns by x * freq_i, pair 2i+1 by y * freq_i (width first).
    std::vector<float> freqs(static_cast<std::size_t>(D / 4));
    for (int i = 0; i < D / 4; ++i)
        freqs[std::size_t(i)] = float(1.0 / std::pow(kRopeTheta, 4.0 * i / D));
    std::vector<float> cosT(std::size_t(n) * half), sinT(std::size_t(n) * half);
    for (int p = 0; p < n; ++p)
        for (int j = 0; j < half; ++j) {
            const float pos = float(j % 2 == 0 ? p % w : p / w);
            const double angle = pos * freqs[std::size_t(j / 2)]; // a float product
            cosT[std::size_t(p) * half + j] = float(std::cos(angle));
            sinT[std::size_t(p) * half + j] = float(std::sin(angle));
        }
    const float scaleDiv = float(std::sqrt(double(D)));
    std::vector<float> q(std::size_t(n) * D), k(std::size_t(n) * D), vT(std::size_t(D) * n);
    std::vector<float> scores(std::size_t(kQueryTile) * n), ctx(std::size_t(kQueryTile) * D);
    const auto rotate = [&](float* dst, const float* src, int p) {
        for (int j = 0; j < half; ++j) {
            const float a = src[2 * j], b = src[2 * j + 1];
            const float cs = cosT[std::size_t(p) * half + j], sn = sinT[std::size_t(p) * half + j];
            dst[2 * j] = a * cs - b * sn;
            dst[2 * j + 1] = a * sn + b * cs;
        }
    };
    for (int head = 0; head < H; ++head) {
        for (int p = 0; p < n; ++p) {
            const float* row = qkv + std::size_t(p) * 3 * Q + std::size_t(head) * D;
            rotate(&q[std::size_t(p) * D], row, p);
            rotate(&k[std::size_t(p) * D], row + Q, p);
            for (int d = 0; d < D; ++d) vT[std::size_t(d) * n + p] = row[2 * Q + d];
        }
        const WeightView keys = WeightView::f32(k.data(), n, D);
        const WeightView values = WeightView::f32(vT.data(), D, n);
        for (int q0 = 0; q0 < n; q0 += kQueryTile) {
            const int tq = std::min(kQueryTile, n - q0);
            matmat(scores.data(), &q[std::size_t(q0) * D], keys, tq);
            for (int t = 0; t < tq; ++t) {
                float* s = &scores[std::size_t(t) * n];
                float m = -INFINITY;
                for (int j = 0; j < n; ++j) {
                    s[j] /= scaleDiv;
                    m = std::max(m, s[j]);
                }
                double z = 0.0;
                for (int j = 0; j < n; ++j) {
                    s[j] = math::expF(s[j] - m);
                    z += s[j];
                }
                for (int j = 0; j < n; ++j) s[j] = float(double(s[j]) / z);
            }
            matmat(ctx.data(), scores.data(), values, tq);
            for (int t = 0; t < tq; ++t)
                std::copy_n(&ctx[std::size_t(t) * D], D,
                            out + std::size_t(q0 + t) * Q + std::size_t(head) * D);
        }
    }
}

VisionOutputs VisionTower::run(std::span<const PreparedImage> images) const {
    const Impl& m = *impl_;
    const VisionConfig& c = m.c;
    const int C = c.hidden, Q = c.qkvWidth, I = c.intermediate, K = 3 * kPatchSize * kPatchSize;
    int L = 0, tokens = 0;
    for (const PreparedImage& im : images) {
        if (im.patches.size() != std::size_t(im.plan.patches()) * K)
            throw ImageError("a prepared image holds " + std::to_string(im.patches.size()) +
                             " pixel values; its plan needs " +
                             std::to_string(std::size_t(im.plan.patches()) * K));
        L += im.plan.patches();
        tokens += im.plan.tokens();
    }
    VisionOutputs out;
    if (L == 0) return out;
    std::vector<float> pixels(std::size_t(L) * K);
    std::vector<float> x(std::size_t(L) * C), xn(std::size_t(L) * C), tmp(std::size_t(L) * C);
    std::size_t at = 0;
    for (const PreparedImage& im : images)
        for (float v : im.patches) pixels[at++] = roundToBf16(v);
    matmat(x.data(), pixels.data(), m.patchEmbed.view(), L);
    pixels = {};
    int row = 0;
    for (const PreparedImage& im : images) {
        m.addPositions(&x[std::size_t(row) * C], im.plan.gridHeight(), im.plan.gridWidth());
        row += im.plan.patches();
    }

    std::vector<float> qkv(std::size_t(L) * 3 * Q), att(std::size_t(L) * Q),
        mid(std::size_t(L) * I);
    for (const BlockWeights& b : m.blocks) {
        rmsnormRows(xn.data(), x.data(), b.norm0, L, C, c.towerEps);
        matmat(qkv.data(), xn.data(), b.wqkv.view(), L);
        row = 0;
        for (const PreparedImage& im : images) { // block-diagonal: each image alone
            m.attend(&att[std::size_t(row) * Q], &qkv[std::size_t(row) * 3 * Q],
                     im.plan.gridHeight(), im.plan.gridWidth());
            row += im.plan.patches();
        }
        matmat(tmp.data(), att.data(), b.wo.view(), L);
        for (std::size_t i = 0; i < x.size(); ++i) x[i] += tmp[i];
        rmsnormRows(xn.data(), x.data(), b.norm1, L, C, c.towerEps);
        matmat(mid.data(), xn.data(), b.fc0.view(), L);
        for (float& v : mid) v = geluTanh(v);
        matmat(tmp.data(), mid.data(), b.fc1.view(), L);
        for (std::size_t i = 0; i < x.size(); ++i) x[i] += tmp[i];
    }
    out.towerRows.resize(x.size());
    rmsnormRows(out.towerRows.data(), x.data(), m.finalNorm, L, C, c.towerEps);

    // 2x2 merge: per merged cell the rows (0,0), (0,1), (1,0), (1,1), concatenated.
    out.mergedRows.resize(std::size_t(tokens) * 4 * C);
    float* dst = out.mergedRows.data();
    row = 0;
    for (const PreparedImage& im : images) {
        const int h = im.plan.gridHeight(), w = im.plan.gridWidth();
        for (int my = 0; my < h / 2; ++my)
            for (int mx = 0; mx < w / 2; ++mx)
                for (int dy = 0; dy < 2; ++dy)
                    for (int dx = 0; dx < 2; ++dx, dst += C)
                        std::copy_n(
                            &out.towerRows[(std::size_t(row) + std::size_t(2 * my + dy) * w +
                                            std::size_t(2 * mx + dx)) *
                                           C],
                            C, dst);
        row += h * w;
    }

    std::vector<float> hidden(std::size_t(tokens) * 4 * C),
        projected(std::size_t(tokens) * c.textHidden);
    matmat(hidden.data(), out.mergedRows.data(), m.proj0.view(), tokens);
    for (float& v : hidden) v = geluErf(v);
    matmat(projected.data(), hidden.data(), m.proj2.view(), tokens);
    out.projectorRows.resize(projected.size());
    rmsnormRows(out.projectorRows.data(), projected.data(), m.postNorm, tokens, c.textHidden,
                c.projectorEps);
    return out;
}

std::vector<float> VisionTower::encode(std::span<const PreparedImage> images) const {
    return run(images).projectorRows;
}

} // namespace k3
