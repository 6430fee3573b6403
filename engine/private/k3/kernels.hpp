#pragma once
// Kernels with a floating point contract: every kernel has ONE documented reduction
// order, so the SIMD path, the scalar path and the OpenMP thread count never change a
// bit of any output.
//
// Invariants that, when broken, still give a fluent but different model (each is
// gated by a peer fixture in tests/engine/kernels/tst_kernels_oracle.cpp):
//  1. KDA's A_log is indexed per HEAD, not per channel (kdaDecay).
//  2. MLA is NoPE, but the qk_rope dims are still cached and scored, shared by all
//     heads, and the softmax scale is (qk_nope + qk_rope)^-0.5 (mlaAttend).
//  3. The router bias steers SELECTION only; the combining weights come from the
//     unbiased sigmoid scores (routeTopK).
//  4. MXFP4: the LOW nibble of a byte is the EVEN element (matvecMxfp4).
//  5. SiTU-GLU's sigmoid takes the UNCAPPED gate (situGlu).
//  6. AttnRes keys are the RMS-normalised sources, values the RAW sources (attnRes).
//
// Matvec reduction order (F32; BF16 and MXFP4 add a level below): y[r] = sum over i of
// x[i] * w[r][i], where the product of element i is formed exactly in double (a float
// times a float, or an E2M1 value times a float, always is) and added to double lane
// (i % 8), each lane in increasing i, lanes starting at +0. The 8 lanes L are then folded
// as ((L0 + L4) + (L2 + L6)) + ((L1 + L5) + (L3 + L7)) and rounded once to float.
// BF16 sums in float blocks first: per block of kBf16Block consecutive elements (the last
// may be shorter), 16 float lanes s[c] start at +0 and take s[i % 16] = fmaf(w[i], x[i],
// s[i % 16]) in increasing i (product exact, one rounding); at the end of the block double
// lane L += double(s[L]), then += double(s[L + 8]). Widening every weight to double was
// the kernel's limit (2 threads could not keep up with DRAM); the float blocks take 2.4x
// fewer instructions and the kernel is memory-bound. Cost: on random rows of 2048-18432
// the result is 2-4 float ulp from the exact dot product on average (double lanes: 0.25),
// a relative 2.4e-7, next to 3.9e-3 for bf16's own rounding of the weights.
// MXFP4 adds one level per 32-weight group: for each lane, the exact products
// e2m1(q[i]) * x[i] of the group's elements with i % 8 == lane are summed in double in
// increasing i (starting at +0), and that partial sum times 2^(s - 127) (exact in double
// for every E8M0 s) is added to the lane; groups in increasing order. A group whose scale
// byte is 255 is skipped (it contributes nothing, even against an infinite x). So
// matvecMxfp4 is a different (per-group) rounding sequence than matvecF32 over the
// decoded matrix: equal within the usual dot-product error, not bit for bit.
// Why double (DESIGN allows fp32 lanes): 32 fp32 lanes lost up to ~200 ulp on the
// shared-expert projections, which SiTU-GLU amplified past the peer moe fixture's
// tolerance (1.43x); double lanes give 0.51x, as a float64 sequential sum does.
//
// The other kernels have a single (scalar) implementation; their order is the loop
// order written in their .cpp, with the accumulator type stated there.

#include "k3/system.hpp"

#include <bit>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>

namespace k3 {

class KernelError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

// ---- path selection: KernelPath and kernelPathAvailable() are in k3/system.hpp --------

// ---- weights -------------------------------------------------------------------------

enum class WeightType { F32, BF16, MXFP4 };

inline constexpr int kMxfp4Group = 32;
// BF16 matvec: elements per float block of the reduction order above.
inline constexpr int kBf16Block = 128;

// Row-major [rows][cols] matrix in its stored format. MXFP4 rows are (cols + 1) / 2
// packed bytes (low nibble = even element) with ceil(cols / 32) E8M0 scale bytes each;
// a row whose length is not a multiple of 32 ends in a partial group.
struct WeightView {
    WeightType type = WeightType::F32;
    const void* data = nullptr;
    const std::uint8_t* scales = nullptr; // MXFP4 only
    int rows = 0;
    int cols = 0;

    static WeightView f32(const float* w, int rows, int cols);
    static WeightView bf16(const std::uint16_t* w, int rows, int cols);
    static WeightView mxfp4(const std::uint8_t* packed, const std::uint8_t* scales, int rows,
                            int cols);
    // Rows [first, first + count) as a matrix of their own.
    WeightView rowSlice(int first, int count) const;
};

std::size_t mxfp4RowBytes(int cols);
std::size_t mxfp4ScalesPerRow(int cols);
// Quantises one row of n floats to MXFP4 (the draft trunk's format): per 32-group the
// OCP MX shared scale 2^(floor(log2(max |x|)) - 2) (E2M1's largest exponent is 2), as an
// E8M0 byte clamped to 0..254 (127 for an all-zero group), then each x / scale rounded to
// the nearest E2M1 value (ties to the even code, beyond 6 saturated, -0 kept as +0).
// Non-finite x are refused (KernelError naming the index). packed: mxfp4RowBytes(n)
// bytes, scales: mxfp4ScalesPerRow(n).
void quantizeMxfp4Row(const float* x, int n, std::uint8_t* packed, std::uint8_t* scales);

// E8M0 scale byte -> 2^(s - 127); 255 (NaN by spec) -> 0 so a bad byte kills one group.
float e8m0Scale(std::uint8_t s);
// One decoded weight: E2M1[nibble] * scale, element `col` of a packed row.
float mxfp4Decode(const std::uint8_t* packedRow, const std::uint8_t* scaleRow, int col);
// bfloat16 is the top half of a float32: widening is exact.
inline float bf16ToFloat(std::uint16_t h) {
    return std::bit_cast<float>(static_cast<std::uint32_t>(h) << 16);
}

// ---- matvec: y[rows] = W[rows][cols] . x[cols] ----------------------------------------
// Rows run in parallel with OpenMP (static schedule); each row has the order above.
// Throws KernelError on negative sizes or a null pointer with non-empty sizes.

void matvecF32(float* y, const float* x, const float* w, int rows, int cols);
void matvecBf16(float* y, const float* x, const std::uint16_t* w, int rows, int cols);
// Reads the packed nibbles in place: nothing is dequantised into a buffer.
void matvecMxfp4(float* y, const float* x, const std::uint8_t* packed, const std::uint8_t* scales,
                 int rows, int cols);
void matvec(float* y, const float* x, const WeightView& w);

// ---- multi-column products: Y[t] = W . X[t] for t in [0, columns) ---------------------
// x: [columns][w.cols], y: [columns][w.rows], both contiguous. Column t of y has exactly
// the bits matvec(y + t * rows, x + t * cols, w) gives (the same per-row order above), at
// every column count, path and thread count: only independent (row, column) pairs are
// interleaved. This is what a chunk of positions runs on: the weights are read from
// memory once per 64 columns instead of once per column, and an MXFP4 group is decoded
// once per 32 columns, so the product becomes compute-bound (docs/measurements.md,
// "Multi-column products"). One column is matvec. Throws KernelError on a negative
// column count and as matvec on bad sizes or null buffers.
void matmat(float* y, const float* x, const WeightView& w, int columns);

// ---- elementwise and norms -------------------------------------------------------------

float sigmoid(float x);
float silu(float x);
// out = x * (1 / sqrt(mean(x^2) + eps)) * w (w may be null); the mean of squares is
// accumulated in double in index order; out may alias x.
void rmsnorm(float* out, const float* x, const float* w, int n, float eps);
// x *= 1 / sqrt(sum(x^2) + eps): a SUM of squares (not a mean), double, index order.
void l2norm(float* x, int n, float eps = 1e-6f);
// y = beta*tanh(g/beta)*sigmoid(g) * linearBeta*tanh(u/linearBeta); |y| <= beta*linearBeta.
void situGlu(float* y, const float* gate, const float* up, int n, float beta = 4.0f,
             float linearBeta = 25.0f);

// ---- KDA -----------------------------------------------------------------------------

// Depthwise causal conv over T positions, SiLU fused. x, y: [T][channels] (may alias);
// w: [channels][kernel], taps oldest to newest; state: [channels][kernel - 1], oldest
// first, read and updated (null: zero history, nothing kept).
void shortConvSilu(float* y, const float* x, const float* w, float* state, int channels, int kernel,
                   int T);
// Per token: g[h*D+d] = lowerBound * sigmoid(exp(aLog[h]) * (z[h*D+d] + dtBias[h*D+d])),
// alpha = exp(g). aLog is PER HEAD (only the first H of the checkpoint's values count).
// g may alias z.
void kdaDecay(float* g, float* alpha, const float* z, const float* aLog, const float* dtBias,
              int heads, int headDim, float lowerBound);
// One delta-rule step on one head's state S[dk][dv] (row-major): S = diag(alpha) S;
// u = S^T k; S += k (beta (v - u))^T; o = S^T q from the UPDATED state. q must already
// be multiplied by dk^-0.5. Sums are fp32 in increasing key index.
void kdaStep(float* S, float* o, const float* q, const float* k, const float* v, const float* alpha,
             float beta, int dk, int dv);

// ---- MLA -----------------------------------------------------------------------------

struct MlaShape {
    int heads = 0;
    int qkNope = 0;
    int qkRope = 0;
    int kvLora = 0;
    int vHead = 0;
};

// One query position attending over `positions` cached entries (the caller passes
// exactly the causal prefix). Works on the latent cache directly (absorbed form):
//   q:      [heads][qkNope + qkRope], the rope part unrotated
//   latent: [positions][kvLora], the kv_a_layernorm-ed latents
//   rope:   [positions][qkRope], ONE slot shared by every head
//   kvB:    kv_b_proj, [heads * (qkNope + vHead)][kvLora], per head k_nope rows then v rows
//   out:    [heads][vHead]
// score = (q_nope . (Wk c_s) + q_rope . r_s) * (qkNope + qkRope)^-0.5, softmax over s.
void mlaAttend(float* out, const float* q, const float* latent, const float* rope, int positions,
               const WeightView& kvB, const MlaShape& shape);

// ---- attention residuals ---------------------------------------------------------------

// out = sum_s softmax_s(fold . rmsnorm(src_s)) * src_s: keys are the normalised sources,
// values the RAW ones. fold = res_norm.weight * res_proj.weight (fold at load time).
void attnRes(float* out, const float* const* sources, int nSources, const float* fold, int n,
             float eps);
// Before attention: skipped while no block snapshot exists (returns false, out untouched).
bool attnResBeforeAttention(float* out, const float* const* blocks, int nBlocks,
                            const float* prefix, const float* fold, int n, float eps);
// Before the MLP: no emptiness guard, the running prefix alone is a valid source set.
void attnResBeforeMlp(float* out, const float* const* blocks, int nBlocks, const float* prefix,
                      const float* fold, int n, float eps);

// ---- router --------------------------------------------------------------------------

// scores = sigmoid(gate . x); top-k by scores + bias (bias may be null); weights are
// the UNBIASED scores of the chosen experts, divided by their sum when renormalise,
// times routedScale. Ties go to the lower expert index; a NaN selection score ranks
// below every number. idx/weight: [topK], in selection order (best first).
void routeTopK(int* idx, float* weight, const float* x, const WeightView& gate, const float* bias,
               int topK, bool renormalise, float routedScale);
// The same selection from the gate's raw logits (gate . x), already computed: a chunk
// computes every position's logits with one matmat.
void routeTopKFromLogits(int* idx, float* weight, const float* logits, int experts,
                         const float* bias, int topK, bool renormalise, float routedScale);

// ---- latent MoE (one token) ------------------------------------------------------------

struct ExpertWeights {
    WeightView w1; // gate  [inter][latent]
    WeightView w3; // up    [inter][latent]
    WeightView w2; // down  [latent][inter]
};

struct LatentMoeWeights {
    WeightView gate;                         // router [experts][hidden]
    const float* selectionBias = nullptr;    // e_score_correction_bias [experts] (may be null)
    WeightView down;                         // [latent][hidden]
    WeightView up;                           // [hidden][latent]
    const float* latentNorm = nullptr;       // [latent], null: no latent norm
    WeightView sharedW1, sharedW3, sharedW2; // on the full width
    // Fetches routed expert e; false means it could not be loaded (counted as a drop).
    std::function<bool(int expert, ExpertWeights& out)> expert;
    // Optional: told the chosen experts (selection order) before the first expert()
    // call, so a streaming source can fetch them as one batch.
    std::function<void(const int* experts, int count)> prefetch;
};

struct LatentMoeConfig {
    int topK = 0;
    bool renormalise = true;
    float routedScale = 1.0f;
    float rmsEps = 1e-5f;
    float situBeta = 4.0f;
    float situLinearBeta = 25.0f;
};

// out[hidden] = up(rmsnorm(sum_j w_j expert_j(down(x)))) + shared(x). Routing runs on
// the full width; the norm is on the AGGREGATE; the shared experts see the ORIGINAL x
// and are added unweighted. Returns how many chosen experts were dropped.
int latentMoeForward(float* out, const float* x, const LatentMoeWeights& w,
                     const LatentMoeConfig& cfg);

} // namespace k3
