// Every SIMD kernel path (AVX2, AVX-512, NEON: whichever this CPU has) against the
// scalar path, bit for bit (memcmp), at every shape edge: partial MXFP4 groups, partial
// BF16 blocks and 16-chunks, odd column counts, one column (T = 1) and tiles of columns
// that do not divide; the documented order re-implemented independently; exact sums; and
// the same bits as the x86-64 build (a digest of fixed products, taken there).
//
// Plain C++ with no Qt: it also runs in the aarch64 CI leg under qemu-user, where no Qt
// is built (tests/cross). Prints one line per check group, then "N passed, N failed".

#include "k3/kernels.hpp"

#include <omp.h>

#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

using namespace k3;

namespace {

int gPassed = 0, gFailed = 0;

void check(bool ok, const std::string& what) {
    if (ok) {
        ++gPassed;
        return;
    }
    ++gFailed;
    std::printf("FAIL: %s\n", what.c_str());
}

// A fixed generator (the same numbers on every compiler and CPU).
struct Rng {
    std::uint64_t s;
    std::uint32_t next() {
        s = s * 6364136223846793005ull + 1442695040888963407ull;
        return static_cast<std::uint32_t>(s >> 33);
    }
    // A float in [-2, 2) with 24 significant bits: exact, no library call.
    float uniform() { return float(int(next() >> 7) - (1 << 23)) * 0x1p-22f; }
    int below(int n) { return int(next() % std::uint32_t(n)); }
};

struct Matrix {
    int rows = 0, cols = 0;
    std::vector<float> f32;
    std::vector<std::uint16_t> bf16;
    std::vector<std::uint8_t> packed, scales;
};

Matrix randomMatrix(int rows, int cols, Rng& rng) {
    Matrix m;
    m.rows = rows;
    m.cols = cols;
    const std::size_t n = std::size_t(rows) * cols;
    m.f32.resize(n);
    m.bf16.resize(n);
    for (auto& v : m.f32) v = rng.uniform();
    for (auto& v : m.bf16) {
        const float f = rng.uniform();
        std::uint32_t u;
        std::memcpy(&u, &f, 4);
        v = std::uint16_t(u >> 16);
    }
    m.packed.resize(rows * mxfp4RowBytes(cols));
    m.scales.resize(rows * mxfp4ScalesPerRow(cols));
    for (auto& b : m.packed) b = std::uint8_t(rng.next());
    for (auto& s : m.scales) s = std::uint8_t(rng.below(20) == 0 ? 255 : 110 + rng.below(26));
    return m;
}

std::vector<float> randomVector(std::size_t n, Rng& rng) {
    std::vector<float> x(n);
    for (auto& v : x) v = rng.uniform();
    return x;
}

WeightView view(const Matrix& m, WeightType t) {
    switch (t) {
    case WeightType::F32:
        return WeightView::f32(m.f32.data(), m.rows, m.cols);
    case WeightType::BF16:
        return WeightView::bf16(m.bf16.data(), m.rows, m.cols);
    case WeightType::MXFP4:
        break;
    }
    return WeightView::mxfp4(m.packed.data(), m.scales.data(), m.rows, m.cols);
}

const WeightType kTypes[] = {WeightType::F32, WeightType::BF16, WeightType::MXFP4};
const char* typeName(WeightType t) {
    return t == WeightType::F32 ? "f32" : t == WeightType::BF16 ? "bf16" : "mxfp4";
}

// matvec of every format on the path in force, concatenated.
std::vector<float> matvecAll(const Matrix& m, const float* x) {
    std::vector<float> y(3 * std::size_t(m.rows));
    for (int k = 0; k < 3; ++k) matvec(y.data() + k * m.rows, x, view(m, kTypes[k]));
    return y;
}

bool sameBits(const std::vector<float>& a, const std::vector<float>& b) {
    return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

std::vector<KernelPath> simdPaths() {
    std::vector<KernelPath> p;
    for (KernelPath k : {KernelPath::Avx2, KernelPath::Avx512, KernelPath::Neon})
        if (kernelPathAvailable(k)) p.push_back(k);
    return p;
}

std::string shape(const char* what, int rows, int cols, int columns = 1) {
    return std::string(what) + " rows=" + std::to_string(rows) + " cols=" + std::to_string(cols) +
           " columns=" + std::to_string(columns) + " path=" + kernelPathName(kernelPath());
}

// ---- the documented order (k3/kernels.hpp), written out independently ----------------

float fold(const double* l) {
    return float(((l[0] + l[4]) + (l[2] + l[6])) + ((l[1] + l[5]) + (l[3] + l[7])));
}

float documentedF32(const float* x, const float* w, int n) {
    double lanes[8] = {};
    for (int i = 0; i < n; ++i) lanes[i % 8] = std::fma(double(x[i]), double(w[i]), lanes[i % 8]);
    return fold(lanes);
}

float documentedBf16(const float* x, const std::uint16_t* w, int n) {
    double lanes[8] = {};
    for (int b = 0; b < n; b += 128) {
        float f[16] = {};
        for (int i = b; i < n && i < b + 128; ++i)
            f[i % 16] = std::fma(bf16ToFloat(w[i]), x[i], f[i % 16]);
        for (int l = 0; l < 8; ++l) lanes[l] = (lanes[l] + double(f[l])) + double(f[l + 8]);
    }
    return fold(lanes);
}

double e2m1(unsigned nib) {
    const double mag[8] = {0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0};
    return (nib & 8) ? -mag[nib & 7] : mag[nib & 7];
}

float documentedMxfp4(const float* x, const std::uint8_t* packed, const std::uint8_t* scales,
                      int n) {
    double lanes[8] = {};
    for (int g = 0; g * 32 < n; ++g) {
        if (scales[g] == 255) continue;
        double part[8] = {};
        for (int c = g * 32; c < n && c < g * 32 + 32; ++c) {
            const unsigned nib = (packed[c / 2] >> (4 * (c % 2))) & 0xFu;
            part[c % 8] = std::fma(double(x[c]), e2m1(nib), part[c % 8]);
        }
        const double s = std::ldexp(1.0, scales[g] - 127);
        for (int l = 0; l < 8; ++l) lanes[l] = std::fma(part[l], s, lanes[l]);
    }
    return fold(lanes);
}

// ---- checks ---------------------------------------------------------------------------

const int kCols[] = {1,  2,  3,  7,   8,   9,   15,  16,  17,  31,  32,  33,  47,
                     63, 64, 65, 100, 127, 128, 129, 255, 256, 257, 300, 1031};

void matvecMatchesScalar() {
    Rng rng{1};
    for (int rows : {1, 2, 3, 4, 5, 7, 12, 13, 25}) {
        for (int cols : kCols) {
            const Matrix m = randomMatrix(rows, cols, rng);
            const auto x = randomVector(std::size_t(cols), rng);
            setKernelPath(KernelPath::Scalar);
            const auto want = matvecAll(m, x.data());
            for (KernelPath p : simdPaths()) {
                setKernelPath(p);
                check(sameBits(matvecAll(m, x.data()), want), shape("matvec", rows, cols));
            }
        }
    }
}

// matmat on every path: each column the bits of the scalar matvec of that column.
void matmatMatchesScalar() {
    Rng rng{2};
    for (int rows : {1, 5, 13, 30})
        for (int cols : {1, 9, 31, 32, 33, 65, 129, 300})
            for (int columns : {1, 2, 3, 7, 33, 65, 70}) {
                const Matrix m = randomMatrix(rows, cols, rng);
                const auto x = randomVector(std::size_t(cols) * columns, rng);
                for (WeightType t : kTypes) {
                    setKernelPath(KernelPath::Scalar);
                    std::vector<float> want(std::size_t(rows) * columns);
                    for (int c = 0; c < columns; ++c)
                        matvec(want.data() + std::size_t(c) * rows,
                               x.data() + std::size_t(c) * cols, view(m, t));
                    std::vector<KernelPath> paths = simdPaths();
                    paths.insert(paths.begin(), KernelPath::Scalar);
                    for (KernelPath p : paths) {
                        setKernelPath(p);
                        std::vector<float> got(want.size(), -1.0f);
                        matmat(got.data(), x.data(), view(m, t), columns);
                        check(sameBits(got, want), shape(typeName(t), rows, cols, columns));
                    }
                }
            }
}

void everyPathFollowsTheDocumentedOrder() {
    Rng rng{3};
    const float edgeX[] = {0.0f, -0.0f, 1e-40f, -1e-45f, 1e30f, -1e38f, INFINITY, 3.5f};
    const std::uint8_t edgeScales[] = {0, 1, 2, 100, 127, 150, 253, 254, 255};
    for (bool edges : {false, true})
        for (int cols : kCols) {
            const int rows = 3;
            Matrix m = randomMatrix(rows, cols, rng);
            auto x = randomVector(std::size_t(cols), rng);
            if (edges) { // extreme scales (2^-127, 2^127), infinities, subnormals, signed zeros
                for (auto& v : x)
                    if (rng.below(5) == 0) v = edgeX[rng.below(8)];
                for (auto& s : m.scales) s = edgeScales[rng.below(9)];
                for (auto& h : m.bf16)
                    if (rng.below(10) == 0) h = std::uint16_t(rng.next()) & 0xFF7F; // no NaN
            }
            std::vector<float> want(3 * rows);
            const std::size_t rb = mxfp4RowBytes(cols), rs = mxfp4ScalesPerRow(cols);
            for (int r = 0; r < rows; ++r) {
                const std::size_t o = std::size_t(r) * cols;
                want[r] = documentedF32(x.data(), &m.f32[o], cols);
                want[rows + r] = documentedBf16(x.data(), &m.bf16[o], cols);
                want[2 * rows + r] =
                    documentedMxfp4(x.data(), &m.packed[r * rb], &m.scales[r * rs], cols);
            }
            std::vector<KernelPath> paths = simdPaths();
            paths.insert(paths.begin(), KernelPath::Scalar);
            for (KernelPath p : paths) {
                setKernelPath(p);
                check(sameBits(matvecAll(m, x.data()), want),
                      shape(edges ? "documented order, edge values" : "documented order", rows,
                            cols));
            }
        }
}

// Sums that are exact in every format, through every tail: weights 1 and x = 0..1030 give
// 530965 in each row; a NaN-scale group drops out even against an infinite x; the padding
// nibble of an odd row is never read; a negative sum too small for a float rounds to -0.
void exactValues() {
    std::vector<KernelPath> paths = simdPaths();
    paths.insert(paths.begin(), KernelPath::Scalar);
    const int rows = 5, cols = 1031;
    Matrix ones;
    ones.rows = rows;
    ones.cols = cols;
    ones.f32.assign(std::size_t(rows) * cols, 1.0f);
    ones.bf16.assign(std::size_t(rows) * cols, std::uint16_t(0x3F80));
    ones.packed.assign(rows * mxfp4RowBytes(cols), std::uint8_t(0x22));
    ones.scales.assign(rows * mxfp4ScalesPerRow(cols), std::uint8_t(127));
    std::vector<float> x(std::size_t(cols) * 3);
    for (std::size_t c = 0; c < x.size(); ++c) x[c] = float(c % cols);
    for (KernelPath p : paths) {
        setKernelPath(p);
        const std::string name = kernelPathName(p);
        check(matvecAll(ones, x.data()) == std::vector<float>(3 * rows, 530965.0f),
              name + ": ones . (0..1030) = 530965");
        for (WeightType t : kTypes) {
            std::vector<float> y(3 * rows);
            matmat(y.data(), x.data(), view(ones, t), 3);
            check(y == std::vector<float>(3 * rows, 530965.0f),
                  name + " matmat " + typeName(t) + ": 530965 in every column");
        }

        const std::vector<std::uint8_t> packed(mxfp4RowBytes(40), 0x22), scales = {255, 127};
        std::vector<float> xn(40, 1.0f);
        xn[3] = INFINITY;
        float y = -1;
        matvecMxfp4(&y, xn.data(), packed.data(), scales.data(), 1, 40);
        check(y == 8.0f, name + ": a NaN-scale group is dropped");

        const std::uint8_t odd[2] = {0x71, 0xF3}, one = 127;
        const float xo[3] = {1.0f, 1.0f, 1.0f};
        matvecMxfp4(&y, xo, odd, &one, 1, 3);
        check(y == 8.0f, name + ": the padding nibble is not a weight");

        std::vector<std::uint8_t> pz(mxfp4RowBytes(64));
        for (std::size_t b = 0; b < pz.size(); ++b) pz[b] = b < 16 ? 0x11 : 0x88;
        const std::uint8_t zs[2] = {0, 127};
        std::vector<float> xz(64, 1.0f);
        for (int i = 0; i < 32; ++i) xz[std::size_t(i)] = -1e-30f;
        y = 1;
        matvecMxfp4(&y, xz.data(), pz.data(), zs, 1, 64);
        check(y == 0.0f && std::signbit(y), name + ": a tiny negative sum rounds to -0");
    }
}

void threadCountChangesNothing() {
    Rng rng{4};
    const Matrix m = randomMatrix(67, 1031, rng);
    const auto x = randomVector(1031 * 5, rng);
    std::vector<KernelPath> paths = simdPaths();
    paths.insert(paths.begin(), KernelPath::Scalar);
    for (KernelPath p : paths) {
        setKernelPath(p);
        std::vector<float> runs[3];
        const int threads[3] = {1, 2, 4};
        for (int k = 0; k < 3; ++k) {
            omp_set_num_threads(threads[k]);
            runs[k] = matvecAll(m, x.data());
            for (WeightType t : kTypes) {
                std::vector<float> y(67 * 5);
                matmat(y.data(), x.data(), view(m, t), 5);
                runs[k].insert(runs[k].end(), y.begin(), y.end());
            }
        }
        check(sameBits(runs[0], runs[1]) && sameBits(runs[0], runs[2]),
              std::string(kernelPathName(p)) + ": 1, 2 and 4 threads");
    }
    omp_set_num_threads(omp_get_num_procs());
}

// (MinGW has no setenv; the same program runs under wine.)
void setEnvironment(const char* name, const char* value) {
#if defined(_WIN32)
    _putenv_s(name, value ? value : "");
#else
    if (value)
        setenv(name, value, 1);
    else
        unsetenv(name);
#endif
}

void environmentSwitch() {
    resetKernelPath();
    setEnvironment("K3_FORCE_SCALAR", "1");
    check(kernelPath() == KernelPath::Scalar, "K3_FORCE_SCALAR=1 gives the scalar path");
    setEnvironment("K3_FORCE_SCALAR", "0");
    const KernelPath widest = kernelPathAvailable(KernelPath::Neon)     ? KernelPath::Neon
                              : kernelPathAvailable(KernelPath::Avx512) ? KernelPath::Avx512
                              : kernelPathAvailable(KernelPath::Avx2)   ? KernelPath::Avx2
                                                                        : KernelPath::Scalar;
    check(kernelPath() == widest, std::string("K3_FORCE_SCALAR=0 gives ") + kernelPathName(widest));
    setEnvironment("K3_FORCE_SCALAR", nullptr);
#if defined(__aarch64__)
    check(widest == KernelPath::Neon, "AArch64 runs NEON");
    check(!kernelPathAvailable(KernelPath::Avx2), "no AVX2 on AArch64");
#else
    check(!kernelPathAvailable(KernelPath::Neon), "no NEON off AArch64");
#endif
}

// FNV-1a over the bytes of fixed products and norms: taken on x86-64 (AVX2 and scalar
// agree), so an ARM64 build that rounds anywhere differently (a contracted multiply-add,
// another libm) fails here with the digest it got.
std::uint64_t digest(const std::vector<float>& v, std::uint64_t h = 1469598103934665603ull) {
    const auto* p = reinterpret_cast<const unsigned char*>(v.data());
    for (std::size_t i = 0; i < v.size() * sizeof(float); ++i) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

constexpr std::uint64_t kX86Digest = 0x1a79f137ae8c1754ull;

void sameBitsAsX86() {
    std::vector<KernelPath> paths = simdPaths();
    paths.insert(paths.begin(), KernelPath::Scalar);
    for (KernelPath p : paths) {
        setKernelPath(p);
        Rng rng{5};
        std::uint64_t h = 1469598103934665603ull;
        for (int cols : {33, 200, 1031}) {
            const Matrix m = randomMatrix(9, cols, rng);
            const auto x = randomVector(std::size_t(cols) * 4, rng);
            h = digest(matvecAll(m, x.data()), h);
            for (WeightType t : kTypes) {
                std::vector<float> y(9 * 4);
                matmat(y.data(), x.data(), view(m, t), 4);
                h = digest(y, h);
            }
            std::vector<float> n(std::size_t(cols) * 3);
            const auto w = randomVector(std::size_t(cols), rng);
            rmsnorm(n.data(), x.data(), w.data(), cols, 1e-5f);
            l2norm(n.data(), cols);
            situGlu(n.data() + cols, x.data(), x.data() + cols, cols);
            for (int i = 0; i < cols; ++i)
                n[std::size_t(2 * cols + i)] = silu(8 * x[std::size_t(i)]);
            h = digest(n, h);
        }
        char got[40];
        std::snprintf(got, sizeof got, "0x%016llxull", static_cast<unsigned long long>(h));
        check(
            h == kX86Digest,
            std::string(kernelPathName(p)) + ": digest " + got + ", x86-64 gives 0x" + [] {
                char b[20];
                std::snprintf(b, sizeof b, "%016llx", static_cast<unsigned long long>(kX86Digest));
                return std::string(b);
            }());
    }
}

} // namespace

int main() {
    struct Group {
        const char* name;
        void (*fn)();
    };
    const Group groups[] = {
        {"matvecMatchesScalar", matvecMatchesScalar},
        {"matmatMatchesScalar", matmatMatchesScalar},
        {"everyPathFollowsTheDocumentedOrder", everyPathFollowsTheDocumentedOrder},
        {"exactValues", exactValues},
        {"threadCountChangesNothing", threadCountChangesNothing},
        {"environmentSwitch", environmentSwitch},
        {"sameBitsAsX86", sameBitsAsX86},
    };
    std::string paths;
    for (KernelPath p : simdPaths()) paths += std::string(" ") + kernelPathName(p);
    std::printf("tst_kernels_paths: scalar against%s\n",
                paths.empty() ? " nothing" : paths.c_str());
    for (const Group& g : groups) {
        const int before = gFailed;
        const auto t0 = std::chrono::steady_clock::now();
        g.fn();
        resetKernelPath();
        const double s =
            std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        std::printf("%s %s (%.1f s)\n", gFailed == before ? "PASS" : "FAIL", g.name, s);
    }
    std::printf("%d passed, %d failed\n", gPassed, gFailed);
    return gFailed == 0 && gPassed > 0 ? 0 : 1;
}
