// The kernels against the peer engine's fixtures (an independent PyTorch oracle).
// Tolerance from ops/MANIFEST.json, combined as in numpy.allclose (which the peer's
// suite prints as "atol=1e-05 rtol=1e-04"): |got - want| <= fp32_abs + fp32_rel * |want|.

#include "k3/kernels.hpp"

#include <QTest>

#include <nlohmann/json.hpp>

#include <cmath>
#include <cstring>
#include <fstream>
#include <string>
#include <vector>

using nlohmann::json;
using namespace k3;

namespace {

const std::string kOps = std::string(K3_PEER_DIR) + "/ops/";

json loadJson(const std::string& path) {
    std::ifstream in(path);
    if (!in) throw std::runtime_error("cannot open " + path);
    return json::parse(in);
}

std::vector<float> tensor(const json& j, const char* key) {
    if (!j.contains(key)) throw std::runtime_error(std::string("fixture has no key ") + key);
    const json& t = j.at(key);
    return (t.is_object() ? t.at("data") : t).get<std::vector<float>>();
}

struct Tolerance {
    double abs = 0;
    double rel = 0;
};

Tolerance manifestTolerance() {
    const json m = loadJson(kOps + "MANIFEST.json");
    return {m.at("tolerance").at("fp32_abs").get<double>(),
            m.at("tolerance").at("fp32_rel").get<double>()};
}

// Worst |got - want| / (abs + rel * |want|) over all elements; <= 1 passes.
double worstRatio(const std::vector<float>& got, const std::vector<float>& want,
                  const Tolerance& tol, std::size_t* worstAt = nullptr) {
    double worst = 0;
    for (std::size_t i = 0; i < want.size(); ++i) {
        const double r =
            std::fabs(double(got[i]) - double(want[i])) / (tol.abs + tol.rel * std::fabs(want[i]));
        if (!(r <= worst)) { // also catches NaN
            worst = std::isnan(r) ? INFINITY : r;
            if (worstAt) *worstAt = i;
        }
    }
    return worst;
}

#define CHECK_CLOSE(name, got, want)                                                               \
    do {                                                                                           \
        QCOMPARE((got).size(), (want).size());                                                     \
        std::size_t at_ = 0;                                                                       \
        const double r_ = worstRatio((got), (want), tol, &at_);                                    \
        const std::string msg_ = std::string(name) + ": worst " + std::to_string(r_) +             \
                                 "x tol at " + std::to_string(at_) + " got " +                     \
                                 std::to_string((got)[at_]) + " want " +                           \
                                 std::to_string((want)[at_]);                                      \
        qInfo("%s", msg_.c_str());                                                                 \
        QVERIFY2(r_ <= 1.0, msg_.c_str());                                                         \
    } while (0)

std::vector<float> mv(const std::vector<float>& w, int rows, int cols, const float* x) {
    std::vector<float> y(rows);
    matvecF32(y.data(), x, w.data(), rows, cols);
    return y;
}

} // namespace

class TestKernelsOracle : public QObject {
    Q_OBJECT

    Tolerance tol;

private slots:
    void initTestCase() {
        tol = manifestTolerance();
        QCOMPARE(tol.abs, 1e-5);
        QCOMPARE(tol.rel, 1e-4);
    }

    void rmsnormMatches() {
        const json j = loadJson(kOps + "rmsnorm.json");
        const auto in = tensor(j, "in"), w = tensor(j, "weight"), want = tensor(j, "out");
        const int n = int(w.size()), rows = int(in.size()) / n;
        QCOMPARE(n, 128);
        std::vector<float> got(in.size());
        for (int r = 0; r < rows; ++r)
            rmsnorm(got.data() + r * n, in.data() + r * n, w.data(), n, j.at("eps").get<float>());
        CHECK_CLOSE("rmsnorm", got, want);
    }

    void situGluMatchesAndIsBounded() {
        const json j = loadJson(kOps + "situ_glu.json");
        const auto in = tensor(j, "in"), want = tensor(j, "out");
        const float beta = j.at("beta").get<float>(), linear = j.at("linear_beta").get<float>();
        QCOMPARE(beta, 4.0f);
        QCOMPARE(linear, 25.0f);
        const int n = 8, rows = int(want.size()) / n;
        std::vector<float> got(want.size());
        for (int r = 0; r < rows; ++r) // each row is [gate(8) | up(8)]
            situGlu(got.data() + r * n, in.data() + r * 2 * n, in.data() + r * 2 * n + n, n, beta,
                    linear);
        CHECK_CLOSE("situ_glu", got, want);
        float maxAbs = 0;
        for (float v : got) maxAbs = std::max(maxAbs, std::fabs(v));
        QVERIFY(maxAbs <= beta * linear);
        QVERIFY(std::fabs(maxAbs - j.at("max_abs").get<float>()) <= 1e-3f); // the cap is reached
        // Feeding the CAPPED gate to the sigmoid must give a different function.
        const float g = -1.0f, u = 1.0f;
        float y = 0;
        situGlu(&y, &g, &u, 1, beta, linear);
        const float capped = beta * std::tanh(g / beta);
        const float wrong = capped * sigmoid(capped) * linear * std::tanh(u / linear);
        QVERIFY(std::fabs(y - wrong) > 1e-4f);
    }

    void shortConvMatchesWithState() {
        const json j = loadJson(kOps + "shortconv.json");
        const int K = j.at("kernel").get<int>(), C = j.at("channels").get<int>();
        const auto w = tensor(j, "weight"), in = tensor(j, "in"), want = tensor(j, "out");
        const auto wantState = tensor(j, "state_after"), inNext = tensor(j, "in_next"),
                   wantNext = tensor(j, "out_next");
        const int T = int(in.size()) / C;
        QCOMPARE(T, 5);
        std::vector<float> state(C * (K - 1), 0.0f), got(in.size());
        shortConvSilu(got.data(), in.data(), w.data(), state.data(), C, K, T);
        CHECK_CLOSE("shortconv", got, want);
        CHECK_CLOSE("shortconv state", state, wantState);
        std::vector<float> next(C);
        shortConvSilu(next.data(), inNext.data(), w.data(), state.data(), C, K, 1);
        CHECK_CLOSE("shortconv continuation", next, wantNext);
        // In place (y aliases x) gives the same numbers.
        std::vector<float> inPlace = in, state2(C * (K - 1), 0.0f);
        shortConvSilu(inPlace.data(), inPlace.data(), w.data(), state2.data(), C, K, T);
        QVERIFY(std::memcmp(inPlace.data(), got.data(), got.size() * sizeof(float)) == 0);
    }

    void kdaDecayIsPerHead() {
        const json j = loadJson(kOps + "kda_decay.json");
        const auto z = tensor(j, "z"), aLog = tensor(j, "A_log"), dt = tensor(j, "dt_bias");
        const auto wantG = tensor(j, "g"), wantAlpha = tensor(j, "alpha");
        const int H = int(aLog.size()), P = int(dt.size()), D = P / H, T = int(z.size()) / P;
        QCOMPARE(H, 4);
        QCOMPARE(D, 16);
        std::vector<float> g(z.size()), alpha(z.size());
        for (int t = 0; t < T; ++t)
            kdaDecay(g.data() + t * P, alpha.data() + t * P, z.data() + t * P, aLog.data(),
                     dt.data(), H, D, j.at("lower_bound").get<float>());
        CHECK_CLOSE("kda_decay g", g, wantG);
        CHECK_CLOSE("kda_decay alpha", alpha, wantAlpha);
        // The fixture's A_log spread makes a per-channel misindex visible.
        std::vector<float> wrongLog(P);
        for (int i = 0; i < P; ++i) wrongLog[i] = aLog[std::min(i, H - 1)];
        std::vector<float> gWrong(P), aWrong(P);
        kdaDecay(gWrong.data(), aWrong.data(), z.data(), wrongLog.data(), dt.data(), P, 1, -5.0f);
        const std::vector<float> want0(wantG.begin(), wantG.begin() + P);
        QVERIFY(worstRatio(gWrong, want0, tol) > 1.0);
    }

    void kdaRecurrence_data() {
        QTest::addColumn<QString>("file");
        QTest::newRow("T=1") << "kda_recur1.json";
        QTest::newRow("T=8") << "kda_recur8.json";
    }

    void kdaRecurrence() {
        QFETCH(QString, file);
        const json j = loadJson(kOps + file.toStdString());
        const int T = j.at("T"), H = j.at("H"), dk = j.at("d_k"), dv = j.at("d_v");
        const float qScale = j.at("q_scale").get<float>();
        QCOMPARE(qScale, 1.0f / std::sqrt(float(dk)));
        const auto q = tensor(j, "q"), k = tensor(j, "k"), v = tensor(j, "v");
        const auto alpha = tensor(j, "alpha"), beta = tensor(j, "beta");
        const auto want = tensor(j, "out"), wantState = tensor(j, "state_out");
        std::vector<float> S(H * dk * dv, 0.0f), out(T * H * dv), qs(dk);
        for (int t = 0; t < T; ++t)
            for (int h = 0; h < H; ++h) {
                const int off = (t * H + h) * dk;
                for (int i = 0; i < dk; ++i) qs[i] = q[off + i] * qScale;
                kdaStep(S.data() + h * dk * dv, out.data() + (t * H + h) * dv, qs.data(),
                        k.data() + off, v.data() + (t * H + h) * dv, alpha.data() + off,
                        beta[t * H + h], dk, dv);
            }
        CHECK_CLOSE("kda out", out, want);
        CHECK_CLOSE("kda state", S, wantState);
    }

    void routerBiasSelectsOnly() {
        const json j = loadJson(kOps + "router.json");
        const json m = loadJson(kOps + "MANIFEST.json").at("config");
        const int K = j.at("top_k"), E = j.at("n_experts");
        const auto gate = tensor(j, "gate_weight"), bias = tensor(j, "bias"), in = tensor(j, "in");
        const auto wantIdx = tensor(j, "topk_idx"), wantW = tensor(j, "topk_weight");
        const int hidden = int(gate.size()) / E, rows = int(in.size()) / hidden;
        const bool renorm = m.at("moe_renormalize");
        const float scale = m.at("routed_scaling_factor");
        std::vector<float> got(rows * K);
        int changed = 0;
        for (int r = 0; r < rows; ++r) {
            std::vector<int> idx(K), idxNoBias(K);
            std::vector<float> w(K), wNoBias(K);
            const WeightView gv = WeightView::f32(gate.data(), E, hidden);
            routeTopK(idx.data(), w.data(), in.data() + r * hidden, gv, bias.data(), K, renorm,
                      scale);
            routeTopK(idxNoBias.data(), wNoBias.data(), in.data() + r * hidden, gv, nullptr, K,
                      renorm, scale);
            for (int s = 0; s < K; ++s) {
                QCOMPARE(idx[s], int(wantIdx[r * K + s]));
                got[r * K + s] = w[s];
            }
            if (idx != idxNoBias) ++changed;
        }
        CHECK_CLOSE("router weights", got, wantW);
        QCOMPARE(changed, j.at("rows_where_bias_changed_selection").get<int>());
    }

    void routerTieBreakIsLowerIndex() {
        const float gate[4] = {1, 1, 1, 1}; // four experts, identical scores
        const float x = 0.5f;
        int idx[2];
        float w[2];
        routeTopK(idx, w, &x, WeightView::f32(gate, 4, 1), nullptr, 2, true, 2.0f);
        QCOMPARE(idx[0], 0);
        QCOMPARE(idx[1], 1);
        QCOMPARE(w[0], 1.0f); // renormalised to 0.5, times the routed scale 2
        QVERIFY_THROWS_EXCEPTION(KernelError, routeTopK(idx, w, &x, WeightView::f32(gate, 4, 1),
                                                        nullptr, 5, true, 1.0f));
    }

    void attnResKeysNormedValuesRaw() {
        const json j = loadJson(kOps + "attnres.json");
        const auto prefix = tensor(j, "prefix_sum"), blocks = tensor(j, "block_residual");
        const auto proj = tensor(j, "proj_weight"), norm = tensor(j, "norm_weight");
        const auto hint = tensor(j, "fold_hint"), want = tensor(j, "out");
        const int n = int(proj.size()), T = int(prefix.size()) / n;
        const int nb = int(blocks.size()) / (T * n);
        QCOMPARE(nb + 1, j.at("n_sources").get<int>());
        std::vector<float> fold(n);
        for (int i = 0; i < n; ++i) fold[i] = norm[i] * proj[i];
        CHECK_CLOSE("attnres fold", fold, hint);
        std::vector<float> got(T * n);
        for (int t = 0; t < T; ++t) {
            std::vector<const float*> src;
            for (int b = 0; b < nb; ++b) src.push_back(blocks.data() + (t * nb + b) * n);
            attnResBeforeMlp(got.data() + t * n, src.data(), nb, prefix.data() + t * n, fold.data(),
                             n, j.at("eps").get<float>());
        }
        CHECK_CLOSE("attnres", got, want);
        // The asymmetric guards: nothing to aggregate before attention without blocks;
        // before the MLP the prefix alone passes through (softmax over one source).
        std::vector<float> out(n, 7.0f);
        QVERIFY(
            !attnResBeforeAttention(out.data(), nullptr, 0, prefix.data(), fold.data(), n, 1e-5f));
        QCOMPARE(out[0], 7.0f);
        attnResBeforeMlp(out.data(), nullptr, 0, prefix.data(), fold.data(), n, 1e-5f);
        QVERIFY(std::memcmp(out.data(), prefix.data(), n * sizeof(float)) == 0);
    }

    void mlaMatches() {
        const json j = loadJson(kOps + "mla.json");
        MlaShape s;
        s.heads = j.at("n_heads");
        s.qkNope = j.at("qk_nope");
        s.qkRope = j.at("qk_rope");
        s.kvLora = j.at("kv_lora");
        s.vHead = j.at("v_head");
        const int qLora = j.at("q_lora");
        const float eps = j.at("rms_eps");
        QCOMPARE(j.at("scale").get<double>(), 1.0 / std::sqrt(double(s.qkNope + s.qkRope)));
        const auto in = tensor(j, "in"), want = tensor(j, "out");
        const auto wantLatent = tensor(j, "kv_latent"), wantRope = tensor(j, "k_rope");
        const auto qa = tensor(j, "q_a_proj_weight"), qaNorm = tensor(j, "q_a_layernorm_weight");
        const auto qb = tensor(j, "q_b_proj_weight"), kva = tensor(j, "kv_a_proj_with_mqa_weight");
        const auto kvaNorm = tensor(j, "kv_a_layernorm_weight"),
                   kvb = tensor(j, "kv_b_proj_weight");
        const auto op = tensor(j, "o_proj_weight"), gp = tensor(j, "g_proj_weight");
        const int E = int(qa.size()) / qLora, T = int(in.size()) / E;
        const int qh = s.qkNope + s.qkRope, L = s.kvLora, R = s.qkRope;
        const int O = s.heads * s.vHead;
        std::vector<float> latent(T * L), rope(T * R), got(T * E);
        const WeightView kvB = WeightView::f32(kvb.data(), s.heads * (s.qkNope + s.vHead), L);
        for (int t = 0; t < T; ++t) {
            const float* x = in.data() + t * E;
            auto qlat = mv(qa, qLora, E, x);
            rmsnorm(qlat.data(), qlat.data(), qaNorm.data(), qLora, eps);
            const auto q = mv(qb, s.heads * qh, qLora, qlat.data());
            const auto kv = mv(kva, L + R, E, x);
            rmsnorm(latent.data() + t * L, kv.data(), kvaNorm.data(), L, eps);
            std::copy(kv.begin() + L, kv.end(), rope.begin() + t * R); // never rotated
            std::vector<float> o(O);
            mlaAttend(o.data(), q.data(), latent.data(), rope.data(), t + 1, kvB, s);
            const auto g = mv(gp, O, E, x);
            for (int i = 0; i < O; ++i) o[i] *= sigmoid(g[i]);
            matvecF32(got.data() + t * E, o.data(), op.data(), E, O);
        }
        CHECK_CLOSE("mla latent", latent, wantLatent);
        CHECK_CLOSE("mla rope slot", rope, wantRope);
        CHECK_CLOSE("mla", got, want);
    }

    void moeLayerMatches() {
        const json j = loadJson(kOps + "moe.json");
        const int hidden = j.at("hidden"), latent = j.at("latent"), inter = j.at("moe_inter");
        const int E = j.at("n_experts"), shared = j.at("n_shared");
        std::vector<std::vector<float>> ex(3 * E);
        for (int e = 0; e < E; ++e)
            for (int k = 0; k < 3; ++k) {
                const std::string key =
                    "experts_" + std::to_string(e) + "_w" + "132"[k] + "_weight";
                ex[3 * e + k] = tensor(j, key.c_str());
            }
        const auto gate = tensor(j, "gate_weight"), bias = tensor(j, "e_score_correction_bias");
        const auto down = tensor(j, "down_weight"), up = tensor(j, "up_weight");
        const auto norm = tensor(j, "norm_weight"), s1 = tensor(j, "shared_w1_weight");
        const auto s3 = tensor(j, "shared_w3_weight"), s2 = tensor(j, "shared_w2_weight");
        const auto in = tensor(j, "in"), want = tensor(j, "out");
        const int SI = inter * shared;
        LatentMoeWeights w;
        w.gate = WeightView::f32(gate.data(), E, hidden);
        w.selectionBias = bias.data();
        w.down = WeightView::f32(down.data(), latent, hidden);
        w.up = WeightView::f32(up.data(), hidden, latent);
        w.latentNorm = j.at("latent_norm").get<int>() ? norm.data() : nullptr;
        w.sharedW1 = WeightView::f32(s1.data(), SI, hidden);
        w.sharedW3 = WeightView::f32(s3.data(), SI, hidden);
        w.sharedW2 = WeightView::f32(s2.data(), hidden, SI);
        w.expert = [&](int e, ExpertWeights& out) {
            if (e < 0 || e >= E) return false;
            out.w1 = WeightView::f32(ex[3 * e].data(), inter, latent);
            out.w3 = WeightView::f32(ex[3 * e + 1].data(), inter, latent);
            out.w2 = WeightView::f32(ex[3 * e + 2].data(), latent, inter);
            return true;
        };
        LatentMoeConfig cfg;
        cfg.topK = j.at("top_k");
        cfg.renormalise = j.at("renorm").get<int>() != 0;
        cfg.routedScale = j.at("routed_scale");
        cfg.rmsEps = j.at("rms_eps");
        cfg.situBeta = j.at("situ_b1");
        cfg.situLinearBeta = j.at("situ_b2");
        const int T = int(in.size()) / hidden;
        std::vector<float> got(T * hidden);
        for (int t = 0; t < T; ++t)
            QCOMPARE(latentMoeForward(got.data() + t * hidden, in.data() + t * hidden, w, cfg), 0);
        CHECK_CLOSE("moe", got, want);
        // A failed expert load is counted, never silent.
        LatentMoeWeights broken = w;
        broken.expert = [](int, ExpertWeights&) { return false; };
        QCOMPARE(latentMoeForward(got.data(), in.data(), broken, cfg), cfg.topK);
    }

    void mxfp4DecodesReleasedBytesExactly() {
        const json j = loadJson(std::string(K3_PEER_DIR) + "/mxfp4.json");
        const int rows = j.at("rows"), width = j.at("logical_width");
        QCOMPARE(j.at("group_size").get<int>(), kMxfp4Group);
        const auto packedF = tensor(j, "packed"), scalesF = tensor(j, "scales");
        const auto want = tensor(j, "expected");
        const auto swapped =
            j.at("expected_swapped_nibbles").at("first64").get<std::vector<float>>();
        const int rowBytes = j.at("packed_cols"), rowScales = j.at("scale_cols");
        QCOMPARE(std::size_t(rowBytes), mxfp4RowBytes(width));
        QCOMPARE(std::size_t(rowScales), mxfp4ScalesPerRow(width));
        std::vector<std::uint8_t> packed(packedF.begin(), packedF.end());
        std::vector<std::uint8_t> scales(scalesF.begin(), scalesF.end());
        QCOMPARE(int(packed.size()), rows * rowBytes);
        std::vector<float> got(std::size_t(rows) * width);
        for (int r = 0; r < rows; ++r)
            for (int c = 0; c < width; ++c)
                got[std::size_t(r) * width + c] =
                    mxfp4Decode(packed.data() + r * rowBytes, scales.data() + r * rowScales, c);
        QVERIFY2(std::memcmp(got.data(), want.data(), got.size() * sizeof(float)) == 0,
                 "MXFP4 decode is not bit-exact on the released checkpoint bytes");
        // The swapped nibble order has the same statistics but must not be what we decode.
        QCOMPARE(swapped.size(), std::size_t(64));
        int differing = 0;
        for (int c = 0; c < 64; ++c) {
            if (got[c] != swapped[c]) ++differing;
            QCOMPARE(got[c ^ 1], swapped[c]); // what the swap really is: pairs exchanged
        }
        QVERIFY(differing > 0);

        // The in-place matvec on those bytes gives the same bits on every available path
        // and is a good dot product over the decoded values (its per-group order is not
        // matvecF32's, see k3/kernels.hpp).
        std::vector<float> x(width);
        for (int c = 0; c < width; ++c) x[c] = std::sin(0.37f * float(c)) * 3.0f;
        std::vector<float> first;
        for (KernelPath p : {KernelPath::Scalar, KernelPath::Avx2}) {
            if (!kernelPathAvailable(p)) continue;
            setKernelPath(p);
            std::vector<float> yq(rows);
            matvecMxfp4(yq.data(), x.data(), packed.data(), scales.data(), rows, width);
            if (first.empty()) first = yq;
            QVERIFY2(std::memcmp(yq.data(), first.data(), rows * sizeof(float)) == 0,
                     kernelPathName(p));
            for (int r = 0; r < rows; ++r) {
                double ref = 0;
                for (int c = 0; c < width; ++c)
                    ref += double(x[c]) * want[std::size_t(r) * width + c];
                QVERIFY(std::fabs(yq[r] - ref) <= 1e-5 + 1e-4 * std::fabs(ref));
            }
        }
        resetKernelPath();
    }
};

QTEST_GUILESS_MAIN(TestKernelsOracle)
#include "tst_kernels_oracle.moc"
