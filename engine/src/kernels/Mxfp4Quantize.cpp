// MXFP4 quantisation (the draft trunk): the OCP MX recipe, one E8M0 scale per 32 values.

#include "kernels/MatvecRows.hpp"

#include "k3/kernels.hpp"

#include <cmath>
#include <string>

namespace k3 {

namespace {

// The code of the E2M1 magnitude nearest to m (0 <= m < 8, as scaled below); ties go to
// the even code (the one whose last mantissa bit is 0), beyond 6 saturates. The codes'
// magnitudes are 0, 0.5, 1, 1.5, 2, 3, 4, 6, so the code counts the midpoints below m,
// a tie (m on a midpoint) counting toward the even side. Checked equal to the nearest-
// value search for every float in [0, 8) (docs/measurements.md, "Draft packing speed").
inline std::uint8_t nearestE2m1(float m) {
    return std::uint8_t((m > 0.25f) + (m >= 0.75f) + (m > 1.25f) + (m >= 1.75f) + (m > 2.5f) +
                        (m >= 3.5f) + (m > 5.0f));
}

} // namespace

void quantizeMxfp4Row(const float* x, int n, std::uint8_t* packed, std::uint8_t* scales) {
    if (n < 0) throw KernelError("quantizeMxfp4Row: negative length " + std::to_string(n));
    for (std::size_t i = 0; i < mxfp4RowBytes(n); ++i) packed[i] = 0;
    for (int g0 = 0; g0 < n; g0 += kMxfp4Group) {
        const int g1 = n - g0 < kMxfp4Group ? n : g0 + kMxfp4Group;
        float maxAbs = 0.0f;
        for (int i = g0; i < g1; ++i) {
            if (!std::isfinite(x[i]))
                throw KernelError("quantizeMxfp4Row: element " + std::to_string(i) +
                                  " is not finite");
            maxAbs = std::fmax(maxAbs, std::fabs(x[i]));
        }
        int byte = 127;
        if (maxAbs > 0.0f) {
            int e = 0;
            std::frexp(maxAbs, &e); // maxAbs = f * 2^e, f in [0.5, 1): floor(log2) = e - 1
            byte = (e - 1) - 2 + 127;
            byte = byte < 0 ? 0 : byte > 254 ? 254 : byte;
        }
        scales[g0 / kMxfp4Group] = std::uint8_t(byte);
        const float inv = std::ldexp(1.0f, 127 - byte); // exact: a power of two
        for (int i = g0; i < g1; ++i) {
            const float v = x[i] * inv;
            std::uint8_t code = nearestE2m1(std::fabs(v));
            if (v < 0.0f && code != 0) code |= 8;
            packed[i / 2] |= std::uint8_t(i % 2 == 0 ? code : code << 4);
        }
    }
}

} // namespace k3
