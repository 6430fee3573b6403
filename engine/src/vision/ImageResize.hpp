#pragma once
// Pillow's Image.resize as the official preprocessing calls it (BICUBIC), bit for bit:
// tests/reference/pillow_resample.py states the rules and checks them against Pillow.

#include <cstdint>
#include <vector>

namespace k3::vision {

// Interleaved 8-bit pixels, `channels` per pixel, row-major.
struct Pixels {
    int width = 0;
    int height = 0;
    int channels = 0;
    std::vector<std::uint8_t> data;
};

// Separable fixed-point bicubic (a = -0.5, support widened by the downscale factor),
// horizontal pass first, a pass skipped when its size does not change. With alpha (2 or
// 4 channels) the colour is premultiplied around the resize, as Pillow does for LA/RGBA.
Pixels resizeBicubic(const Pixels& in, int width, int height);
// What Pillow does for palette and 1-bit images whatever the filter asked.
Pixels resizeNearest(const Pixels& in, int width, int height);

} // namespace k3::vision
