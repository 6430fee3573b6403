// The release's preprocessing (KimiK3VisionProcessor with media_proc_cfg, vision.md
// section 6), in Pillow's arithmetic: tests/fixtures/vision/preprocess.json holds
// Pillow's canvases and tst_vision compares them byte for byte.
#include "k3/vision.hpp"
#include "vision/ImageResize.hpp"

#include <algorithm>
#include <cmath>

namespace k3 {

namespace {

constexpr int kChessSquare = 8;
constexpr float kChessWhite = 255.0f, kChessGray = 180.0f;

bool hasAlpha(const DecodedImage& image) {
    return image.channels == 2 || image.channels == 4 || image.colourKey.has_value();
}

// Pillow's convert("RGBA") of the resized image: grey replicated, a colour key turned
// into alpha 0 (an exact match of the key, after the resize), else alpha 255.
std::array<std::uint8_t, 4> toRgba(const vision::Pixels& p, std::size_t i,
                                   const std::optional<std::array<std::uint8_t, 3>>& key) {
    const std::uint8_t* s = &p.data[i * std::size_t(p.channels)];
    switch (p.channels) {
    case 1:
        return {s[0], s[0], s[0], std::uint8_t(key && s[0] == (*key)[0] ? 0 : 255)};
    case 2:
        return {s[0], s[0], s[0], s[1]};
    case 3:
        return {s[0], s[1], s[2],
                std::uint8_t(
                    key && s[0] == (*key)[0] && s[1] == (*key)[1] && s[2] == (*key)[2] ? 0 : 255)};
    default:
        return {s[0], s[1], s[2], s[3]};
    }
}

} // namespace

ImagePlan planImage(int width, int height, int patchLimit) {
    if (width <= 0 || height <= 0)
        throw ImageError("an image of " + std::to_string(width) + "x" + std::to_string(height) +
                         " pixels; it needs at least 1x1");
    if (patchLimit < 1)
        throw ImageError("the patch limit per image is " + std::to_string(patchLimit) +
                         "; it must be at least 1");
    const double side = double(kPatchesPerSideLimit) * kPatchSize;
    const double patches =
        double(std::max(1, width / kPatchSize)) * std::max(1, height / kPatchSize);
    const double scale =
        std::min({1.0, std::sqrt(double(patchLimit) / patches), side / width, side / height});
    const int maxSide = kPatchesPerSideLimit * kPatchSize;
    ImagePlan plan;
    plan.width = width;
    plan.height = height;
    // int() truncates, as the official Python does.
    plan.resizedWidth = std::min(std::max(1, int(width * scale)), maxSide);
    plan.resizedHeight = std::min(std::max(1, int(height * scale)), maxSide);
    const int step = kPatchSize * kMergeSize;
    plan.paddedWidth = (plan.resizedWidth + step - 1) / step * step;
    plan.paddedHeight = (plan.resizedHeight + step - 1) / step * step;
    return plan;
}

PreparedImage prepareImage(const DecodedImage& image, int patchLimit) {
    if (image.channels < 1 || image.channels > 4 ||
        image.pixels.size() != std::size_t(image.width) * image.height * image.channels)
        throw ImageError("a decoded image of " + std::to_string(image.width) + "x" +
                         std::to_string(image.height) + "x" + std::to_string(image.channels) +
                         " does not match its " + std::to_string(image.pixels.size()) + " bytes");
    PreparedImage out;
    out.plan = planImage(image.width, image.height, patchLimit);
    const ImagePlan& plan = out.plan;
    vision::Pixels pixels{image.width, image.height, image.channels, image.pixels};
    if (plan.resizedWidth != image.width || plan.resizedHeight != image.height)
        pixels = image.nearestResize
                     ? vision::resizeNearest(pixels, plan.resizedWidth, plan.resizedHeight)
                     : vision::resizeBicubic(pixels, plan.resizedWidth, plan.resizedHeight);

    // The canvas: the resized image (over the chessboard where it has alpha), zero padding.
    out.canvas.assign(std::size_t(plan.paddedWidth) * plan.paddedHeight * 3, 0);
    const bool alpha = hasAlpha(image);
    for (int y = 0; y < plan.resizedHeight; ++y)
        for (int x = 0; x < plan.resizedWidth; ++x) {
            const std::array<std::uint8_t, 4> px =
                toRgba(pixels, std::size_t(y) * plan.resizedWidth + x, image.colourKey);
            std::uint8_t* dst = &out.canvas[(std::size_t(y) * plan.paddedWidth + x) * 3];
            if (!alpha) {
                std::copy_n(px.data(), 3, dst);
                continue;
            }
            // out = uint8(a rgb + (1 - a) bg) in float32, truncated (numpy's astype).
            const float a = float(px[3]) / 255.0f;
            const float bg =
                (y / kChessSquare + x / kChessSquare) % 2 == 1 ? kChessGray : kChessWhite;
            for (int c = 0; c < 3; ++c)
                dst[c] = std::uint8_t(a * float(px[std::size_t(c)]) + (1.0f - a) * bg);
        }

    // Normalise ((x / 255.0 as float) - 0.5) * 2 and cut into row-major CHW patches.
    const int gw = plan.gridWidth(), P = kPatchSize;
    out.patches.resize(std::size_t(plan.patches()) * 3 * P * P);
    for (int gy = 0; gy < plan.gridHeight(); ++gy)
        for (int gx = 0; gx < gw; ++gx) {
            float* patch = &out.patches[(std::size_t(gy) * gw + gx) * 3 * P * P];
            for (int c = 0; c < 3; ++c)
                for (int ky = 0; ky < P; ++ky)
                    for (int kx = 0; kx < P; ++kx) {
                        const std::uint8_t v =
                            out.canvas[((std::size_t(gy) * P + ky) * plan.paddedWidth + gx * P +
                                        kx) *
                                           3 +
                                       c];
                        patch[(c * P + ky) * P + kx] = (float(double(v) / 255.0) - 0.5f) * 2.0f;
                    }
        }
    return out;
}

std::string imagePrompt(const ImagePlan& plan) {
    return "<|media_begin|>image " + std::to_string(plan.width) + "x" +
           std::to_string(plan.height) + "<|media_content|>" + kMediaPadToken + "<|media_end|>";
}

} // namespace k3
