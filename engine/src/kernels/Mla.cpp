// MLA attention of one query over the latent cache, in the absorbed form: the key
// up-projection is folded into the query and the value up-projection applied after the
// softmax, so the cache stays kv_lora + qk_rope floats per position.

#include "k3/kernels.hpp"
#include "kernels/MathFunctions.hpp"

#include <cmath>
#include <string>
#include <vector>

namespace k3 {

namespace {

// Row r of any weight type as floats (exact: bf16 and MXFP4 widen without rounding).
void decodeRow(const WeightView& w, int r, float* out) {
    const auto row = static_cast<std::size_t>(r);
    switch (w.type) {
    case WeightType::F32: {
        const float* p = static_cast<const float*>(w.data) + row * w.cols;
        for (int c = 0; c < w.cols; ++c) out[c] = p[c];
        return;
    }
    case WeightType::BF16: {
        const std::uint16_t* p = static_cast<const std::uint16_t*>(w.data) + row * w.cols;
        for (int c = 0; c < w.cols; ++c) out[c] = bf16ToFloat(p[c]);
        return;
    }
    case WeightType::MXFP4: {
        const std::uint8_t* p =
            static_cast<const std::uint8_t*>(w.data) + row * mxfp4RowBytes(w.cols);
        const std::uint8_t* s = w.scales + row * mxfp4ScalesPerRow(w.cols);
        for (int c = 0; c < w.cols; ++c) out[c] = mxfp4Decode(p, s, c);
        return;
    }
    }
}

} // namespace

void mlaAttend(float* out, const float* q, const float* latent, const float* rope, int positions,
               const WeightView& kvB, const MlaShape& shape) {
    const int H = shape.heads, nope = shape.qkNope, qr = shape.qkRope, L = shape.kvLora;
    const int vh = shape.vHead, per = nope + vh;
    if (H < 1 || nope < 0 || qr < 0 || L < 1 || vh < 1 || positions < 1)
        throw KernelError("mlaAttend: bad shape heads=" + std::to_string(H) +
                          " positions=" + std::to_string(positions));
    if (kvB.rows != H * per || kvB.cols != L)
        throw KernelError("mlaAttend: kv_b_proj is " + std::to_string(kvB.rows) + "x" +
                          std::to_string(kvB.cols) + ", expected " + std::to_string(H * per) + "x" +
                          std::to_string(L));
    const int qh = nope + qr;
    // NoPE: the rope dims are scored too, so the head width is nope + rope.
    const float scale = 1.0f / std::sqrt(float(qh));

    const bool parallel = static_cast<long long>(H) * positions * L >= (1LL << 16);
#pragma omp parallel for schedule(static) if (parallel)
    for (int h = 0; h < H; ++h) {
        std::vector<float> qLat(L, 0.0f), ctx(L, 0.0f), row(L), sc(positions);
        const float* qn = q + static_cast<std::size_t>(h) * qh;
        const float* qp = qn + nope;
        // Absorb the key up-projection: qLat = Wk_h^T q_nope, rows in increasing order.
        for (int d = 0; d < nope; ++d) {
            decodeRow(kvB, h * per + d, row.data());
            for (int c = 0; c < L; ++c) qLat[c] += qn[d] * row[c];
        }
        float m = -INFINITY;
        for (int s = 0; s < positions; ++s) {
            const float* cs = latent + static_cast<std::size_t>(s) * L;
            const float* rs = rope + static_cast<std::size_t>(s) * qr; // no head index
            double d = 0.0;
            for (int c = 0; c < L; ++c) d += double(qLat[c]) * double(cs[c]);
            for (int i = 0; i < qr; ++i) d += double(qp[i]) * double(rs[i]);
            sc[s] = float(d) * scale;
            if (sc[s] > m) m = sc[s];
        }
        double z = 0.0;
        for (int s = 0; s < positions; ++s) {
            sc[s] = math::expF(sc[s] - m);
            z += sc[s];
        }
        for (int s = 0; s < positions; ++s) {
            const float p = float(sc[s] / z);
            const float* cs = latent + static_cast<std::size_t>(s) * L;
            for (int c = 0; c < L; ++c) ctx[c] += p * cs[c];
        }
        // Value up-projection on the attended latent: this head's v rows of kv_b_proj.
        matvec(out + static_cast<std::size_t>(h) * vh, ctx.data(),
               kvB.rowSlice(h * per + nope, vh));
    }
}

} // namespace k3
