#pragma once
// Image input (issue 33): decoding, the official preprocessing, and K3's vision tower
// (MoonViT) with its projector, whose output rows take the place of <|media_pad|> in
// the prompt. Facts: ../shared/reference/vision.md; reference: tests/reference/k3_vision.py.
//
// Invariants that, when broken, still give a plausible but different model (each gated
// by tests/engine/vision/tst_vision.cpp against the PyTorch reference):
//  1. RoPE pairs are ADJACENT elements (2j, 2j+1), and pair 2i turns by the COLUMN
//     (x * freq_i), pair 2i+1 by the ROW: width first, despite the docstring.
//  2. The position grid is interpolated BILINEARLY (not bicubic, K2.5's), align_corners
//     false, clamped at 0, no antialias, whenever the image grid differs from it.
//  3. tanh-GELU inside the tower, exact (erf) GELU in the projector.
//  4. The 2x2 merge concatenates the sub-patches row-major: (0,0), (0,1), (1,0), (1,1).
//  5. Resizing never enlarges; palette images resize NEAREST, RGBA premultiplied
//     (Pillow's rules); transparency is laid over an 8-px chessboard AFTER the resize.
//  6. The prompt carries the ORIGINAL width x height, one pad per image.

#include "k3/error.hpp"

#include <array>
#include <cstddef>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

namespace k3 {

class Checkpoint;

class ImageError : public Error {
public:
    explicit ImageError(const std::string& message) : Error(ErrorKind::Image, message) {}
};

// ---- decoding ---------------------------------------------------------------------------

// Pixels as decoded, before any conversion (Pillow's modes): 1 channel L, 2 LA, 3 RGB,
// 4 RGBA, 8 bits each, row-major. A palette image is expanded to RGB or RGBA (with its
// tRNS alpha) and keeps `nearestResize` (Pillow resizes P and 1-bit images NEAREST); an
// RGB or L image with a tRNS colour key keeps the key, applied after the resize as
// Pillow's convert("RGBA") does.
struct DecodedImage {
    int width = 0;
    int height = 0;
    int channels = 0;
    std::vector<std::uint8_t> pixels;
    bool nearestResize = false;
    std::optional<std::array<std::uint8_t, 3>> colourKey; // L keys use [0]
    std::string format;                                   // "PNG", "JPEG", "WebP"
};

// Pillow's decompression-bomb limit (Image.MAX_IMAGE_PIXELS): 89.5 M pixels, 358 MB as
// RGBA. Checked from the header, before any pixel is decoded.
inline constexpr std::uint64_t kMaxImagePixels = 89'478'485;
// The largest file read whole as an image.
inline constexpr std::uint64_t kMaxImageFileBytes = std::uint64_t{256} << 20;

// PNG (libpng), JPEG (libjpeg-turbo, as Pillow decodes it: ISLOW, fancy upsampling) and
// WebP (libwebp). `name` names the image in messages. Throws ImageError saying what is
// wrong: not an image (with the format it looked for), truncated or corrupt data, zero
// size, over kMaxImagePixels, CMYK or 16-bit colour types that are not supported.
DecodedImage decodeImage(std::span<const std::byte> bytes, const std::string& name);
DecodedImage readImageFile(const std::filesystem::path& path);

// ---- preprocessing (the release's media_proc_cfg) ---------------------------------------

inline constexpr int kPatchSize = 14;
inline constexpr int kMergeSize = 2;
inline constexpr int kPatchesPerSideLimit = 512;
inline constexpr int kOfficialPatchLimit = 65536; // in_patch_limit of the release

// The size plan: scale = min(1, sqrt(limit / patches), 7168 / W, 7168 / H), sides
// truncated, then padded right and bottom to multiples of 28. In doubles, as the
// official Python (100000 x 100 gives 7167, not 7168).
struct ImagePlan {
    int width = 0, height = 0;               // original: what the prompt says
    int resizedWidth = 0, resizedHeight = 0; // never larger than the original
    int paddedWidth = 0, paddedHeight = 0;   // multiples of 28
    int gridHeight() const { return paddedHeight / kPatchSize; }
    int gridWidth() const { return paddedWidth / kPatchSize; }
    int patches() const { return gridHeight() * gridWidth(); }
    int tokens() const { return patches() / (kMergeSize * kMergeSize); } // prompt positions
};
ImagePlan planImage(int width, int height, int patchLimit = kOfficialPatchLimit);

struct PreparedImage {
    ImagePlan plan;
    std::vector<std::uint8_t> canvas; // [paddedHeight][paddedWidth][3]: resized, composited, padded
    std::vector<float> patches;       // [patches][3][14][14], normalised to [-1, 1], row-major
};
// Resize (Pillow BICUBIC, bit for bit), chessboard under alpha, zero padding, then
// (x / 255 - 0.5) * 2 and patchify. patchLimit >= 1.
PreparedImage prepareImage(const DecodedImage& image, int patchLimit = kOfficialPatchLimit);

// "<|media_begin|>image {W}x{H}<|media_content|><|media_pad|><|media_end|>": the
// original size, one pad the model expands to plan.tokens() rows.
std::string imagePrompt(const ImagePlan& plan);
inline constexpr const char* kMediaPadToken = "<|media_pad|>";

// ---- the tower and projector ------------------------------------------------------------

// config.json's vision_config. The tower's RMSNorm eps is not in the config: the release
// builds nn.RMSNorm(eps=None), finfo(float32).eps in current torch (vision.md section 4).
struct VisionConfig {
    int hidden = 0;                  // vt_hidden_size
    int qkvWidth = 0;                // qkv_hidden_size (heads x headDim)
    int heads = 0;                   // vt_num_attention_heads
    int headDim = 0;                 // qkvWidth / heads, a multiple of 4
    int intermediate = 0;            // vt_intermediate_size
    int layers = 0;                  // vt_num_hidden_layers
    int posHeight = 0, posWidth = 0; // init_pos_emb_height / width
    int textHidden = 0;              // text_hidden_size: the projector's output width
    float projectorEps = 1e-5f;      // projector_ln_eps
    float towerEps = 1.1920929e-7f;
    int mediaPadId = -1; // media_placeholder_token_id, -1 when absent
};
// Reads `vision_config` of a config.json text. Returns nullopt when there is none (a
// text-only checkpoint); throws ImageError naming a bad or unsupported value.
std::optional<VisionConfig> parseVisionConfig(const std::string& configJson,
                                              const std::string& path);

// Per image, the tower's rows, the merged rows and the projector's rows (diagnostics
// and tests; encode() returns only the last).
struct VisionOutputs {
    std::vector<float> towerRows;     // [sum patches][hidden]
    std::vector<float> mergedRows;    // [sum tokens][4 hidden]
    std::vector<float> projectorRows; // [sum tokens][textHidden]
};

class VisionTower {
public:
    // Binds vision_tower.* and mm_projector.* (BF16 or F32), each checked against the
    // shape the config implies; a missing or mis-shaped tensor is an error naming it.
    static VisionTower load(const Checkpoint& checkpoint, const VisionConfig& config);
    // Reads DIR/config.json; nullopt for a checkpoint without a vision_config.
    static std::optional<VisionTower> loadFromDirectory(const std::filesystem::path& dir);

    ~VisionTower();
    VisionTower(VisionTower&&) noexcept;
    VisionTower& operator=(VisionTower&&) noexcept;

    const VisionConfig& config() const;
    // What load() holds: the matrices as stored, the norms and the position grid in F32.
    std::uint64_t weightBytes() const;
    // The same figure from the checkpoint's vision_tower.* and mm_projector.* tensors,
    // without loading them (the memory plan's); 0 for a text-only checkpoint.
    static std::uint64_t plannedBytes(const Checkpoint& checkpoint);

    // All images in one batch (block-diagonal attention): [sum tokens][textHidden],
    // image after image, each image's rows row-major over its merged grid.
    std::vector<float> encode(std::span<const PreparedImage> images) const;
    VisionOutputs run(std::span<const PreparedImage> images) const;

private:
    struct Impl;
    explicit VisionTower(std::unique_ptr<Impl> impl);
    std::unique_ptr<Impl> impl_;
};

} // namespace k3
