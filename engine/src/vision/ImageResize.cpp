#include "vision/ImageResize.hpp"

#include <algorithm>
#include <cmath>
#include <cstddef>

namespace k3::vision {

namespace {

// Pillow's fixed point for 8-bit images: 32 bits minus 8 for the value, 2 for headroom.
constexpr int kPrecisionBits = 32 - 8 - 2;

double bicubicKernel(double x) {
    constexpr double a = -0.5;
    if (x < 0.0) x = -x;
    if (x < 1.0) return ((a + 2.0) * x - (a + 3.0)) * x * x + 1;
    if (x < 2.0) return (((x - 5) * x + 8) * x - 4) * a;
    return 0.0;
}

struct Taps {
    int first = 0; // first source index
    std::vector<std::int32_t> weights;
};

// One output index's source window and fixed-point weights (Pillow's precompute_coeffs
// and normalize_coeffs_8bpc).
std::vector<Taps> bicubicTaps(int inSize, int outSize) {
    const double scale = double(inSize) / outSize;
    const double filterScale = std::max(scale, 1.0);
    const double support = 2.0 * filterScale;
    std::vector<Taps> taps(static_cast<std::size_t>(outSize));
    std::vector<double> k;
    for (int xx = 0; xx < outSize; ++xx) {
        const double center = (xx + 0.5) * scale;
        int xmin = int(center - support + 0.5);
        if (xmin < 0) xmin = 0;
        int xmax = int(center + support + 0.5);
        if (xmax > inSize) xmax = inSize;
        xmax -= xmin;
        k.assign(std::size_t(xmax), 0.0);
        double total = 0.0;
        for (int x = 0; x < xmax; ++x) {
            k[std::size_t(x)] = bicubicKernel((x + xmin - center + 0.5) / filterScale);
            total += k[std::size_t(x)];
        }
        Taps& t = taps[std::size_t(xx)];
        t.first = xmin;
        t.weights.resize(std::size_t(xmax));
        for (int x = 0; x < xmax; ++x) {
            const double v = total != 0.0 ? k[std::size_t(x)] / total : k[std::size_t(x)];
            // Rounded half away from zero, as Pillow's (int)(v * 2^22 +- 0.5).
            t.weights[std::size_t(x)] = std::int32_t(v < 0 ? -0.5 + v * (1 << kPrecisionBits)
                                                           : 0.5 + v * (1 << kPrecisionBits));
        }
    }
    return taps;
}

std::uint8_t clip8(std::int64_t v) {
    if (v >= (std::int64_t{1} << kPrecisionBits << 8)) return 255;
    if (v <= 0) return 0;
    return std::uint8_t(v >> kPrecisionBits);
}

// Resamples along x (horizontal) or y; `in` keeps its other size.
Pixels resamplePass(const Pixels& in, int outSize, bool horizontal) {
    const int inSize = horizontal ? in.width : in.height;
    const std::vector<Taps> taps = bicubicTaps(inSize, outSize);
    Pixels out;
    out.width = horizontal ? outSize : in.width;
    out.height = horizontal ? in.height : outSize;
    out.channels = in.channels;
    out.data.resize(std::size_t(out.width) * out.height * out.channels);
    const int C = in.channels;
    const std::size_t inRow = std::size_t(in.width) * C;
    for (int y = 0; y < out.height; ++y)
        for (int x = 0; x < out.width; ++x) {
            const Taps& t = taps[std::size_t(horizontal ? x : y)];
            for (int c = 0; c < C; ++c) {
                std::int64_t acc = std::int64_t{1} << (kPrecisionBits - 1);
                for (std::size_t i = 0; i < t.weights.size(); ++i) {
                    const int src = t.first + int(i);
                    const std::size_t at = horizontal
                                               ? std::size_t(y) * inRow + std::size_t(src) * C
                                               : std::size_t(src) * inRow + std::size_t(x) * C;
                    acc += std::int64_t(in.data[at + std::size_t(c)]) * t.weights[i];
                }
                out.data[(std::size_t(y) * out.width + x) * C + std::size_t(c)] = clip8(acc);
            }
        }
    return out;
}

// Pillow's MULDIV255: a * b / 255 rounded, in integers.
std::uint8_t mulDiv255(unsigned a, unsigned b) {
    const unsigned t = a * b + 128;
    return std::uint8_t(((t >> 8) + t) >> 8);
}

void premultiply(Pixels& p) {
    const int C = p.channels;
    for (std::size_t i = 0; i < p.data.size(); i += std::size_t(C)) {
        const unsigned alpha = p.data[i + std::size_t(C - 1)];
        for (int c = 0; c < C - 1; ++c)
            p.data[i + std::size_t(c)] = mulDiv255(p.data[i + std::size_t(c)], alpha);
    }
}

void unpremultiply(Pixels& p) {
    const int C = p.channels;
    for (std::size_t i = 0; i < p.data.size(); i += std::size_t(C)) {
        const unsigned alpha = p.data[i + std::size_t(C - 1)];
        if (alpha == 0 || alpha == 255) continue;
        for (int c = 0; c < C - 1; ++c)
            p.data[i + std::size_t(c)] =
                std::uint8_t(std::min(255u, 255u * p.data[i + std::size_t(c)] / alpha));
    }
}

// Pillow's ImagingScaleAffine: the source position is ACCUMULATED, not multiplied.
std::vector<int> nearestTable(int inSize, int outSize) {
    const double step = double(inSize) / outSize;
    double x = step * 0.5;
    std::vector<int> table(static_cast<std::size_t>(outSize));
    for (int i = 0; i < outSize; ++i) {
        table[std::size_t(i)] = std::min(int(x), inSize - 1);
        x += step;
    }
    return table;
}

} // namespace

Pixels resizeBicubic(const Pixels& in, int width, int height) {
    Pixels p = in;
    const bool alpha = p.channels == 2 || p.channels == 4;
    if (alpha) premultiply(p);
    if (width != p.width) p = resamplePass(p, width, true);
    if (height != p.height) p = resamplePass(p, height, false);
    if (alpha) unpremultiply(p);
    return p;
}

Pixels resizeNearest(const Pixels& in, int width, int height) {
    const std::vector<int> xs = nearestTable(in.width, width), ys = nearestTable(in.height, height);
    Pixels out;
    out.width = width;
    out.height = height;
    out.channels = in.channels;
    out.data.resize(std::size_t(width) * height * in.channels);
    const std::size_t C = std::size_t(in.channels);
    for (int y = 0; y < height; ++y)
        for (int x = 0; x < width; ++x)
            std::copy_n(
                &in.data[(std::size_t(ys[std::size_t(y)]) * in.width + xs[std::size_t(x)]) * C], C,
                &out.data[(std::size_t(y) * width + x) * C]);
    return out;
}

} // namespace k3::vision
