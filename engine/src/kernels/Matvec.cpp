// Public matvec entry points: argument checks, run-time path choice, OpenMP over rows.

#include "kernels/MatvecRows.hpp"

#include "k3/kernels.hpp"
#include "k3/system.hpp"
#include "platform/Platform.hpp"

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <mutex>
#include <string>
#include <tuple>
#include <utility>

namespace k3 {

namespace {

// -1: automatic (decided on first use), otherwise the KernelPath value in force.
std::atomic<int> gForcedPath{-1};

bool cpuHasAvx2Fma() {
#if defined(K3_HAVE_AVX2_PATH)
    static const bool has = [] {
        const CpuFeatures f = detectCpuFeatures();
        return f.avx2 && f.fma;
    }();
    return has;
#else
    return false;
#endif
}

bool cpuHasAvx512() {
#if defined(K3_HAVE_AVX2_PATH)
    static const bool has = cpuHasAvx2Fma() && detectCpuFeatures().avx512f;
    return has;
#else
    return false;
#endif
}

// Advanced SIMD is part of AArch64 itself (every ARMv8-A CPU and OS has it), so the
// NEON path is there wherever it is compiled; the path is still chosen here, at run
// time, like the x86 ones, and K3_FORCE_SCALAR turns it off.
constexpr bool kHasNeon =
#if defined(K3_HAVE_NEON_PATH)
    true;
#else
    false;
#endif

bool envFlag(const char* name) {
    const char* v = std::getenv(name);
    return v && *v && std::strcmp(v, "0") != 0;
}

KernelPath automaticPath() {
    if (envFlag("K3_FORCE_SCALAR")) return KernelPath::Scalar;
    if (kHasNeon) return KernelPath::Neon;
    if (cpuHasAvx512() && !envFlag("K3_FORCE_AVX2")) return KernelPath::Avx512;
    return cpuHasAvx2Fma() ? KernelPath::Avx2 : KernelPath::Scalar;
}

#if defined(K3_HAVE_AVX2_PATH)
// Avx512 runs the AVX2 kernels everywhere but the BF16 multi-column product.
bool avx2Kernels(KernelPath path) {
    return path == KernelPath::Avx2 || path == KernelPath::Avx512;
}
#endif

void checkMatvec(const char* what, const float* y, const float* x, const void* w, int rows,
                 int cols) {
    if (rows < 0 || cols < 0)
        throw KernelError(std::string(what) + ": negative size rows=" + std::to_string(rows) +
                          " cols=" + std::to_string(cols));
    if ((rows > 0 && !y) || (rows > 0 && cols > 0 && (!x || !w)))
        throw KernelError(std::string(what) + ": null buffer for rows=" + std::to_string(rows) +
                          " cols=" + std::to_string(cols));
}

// Rows are independent and each has a fixed order, so the thread count cannot change
// a result; small products stay on one thread where forking costs more than it saves.
bool worthForking(int rows, int cols) {
    return rows >= 16 && static_cast<long long>(rows) * cols >= (1LL << 15);
}

template <typename RowFn> void forRows(int rows, int cols, RowFn&& fn) {
#pragma omp parallel for schedule(static) if (worthForking(rows, cols))
    for (int r = 0; r < rows; ++r) fn(r);
}

// The SIMD kernels take rows in blocks (several rows share the x loads); a block boundary
// only decides which rows run together, never how a row is summed. 12 is a multiple of
// both passes (MXFP4: 3 rows, BF16: 6), so no block ends in a slower short pass (8 did:
// 3+3+2; same-run 12 vs 8 was 1.02-1.04x on the MXFP4 expert shapes, 1 and 2 threads).
constexpr int kRowBlock = 12;

// The widened copy of x that the SIMD kernels read with 32-byte loads, 64-byte aligned:
// from a std::vector it sat at 16 mod 32 about half the time, so every other load split
// a cache line and the MXFP4 matvec ran 1.16x slower (measured same-run, one thread, xd
// at +0/+16/+32 bytes: 22.2, 19.2, 22.2 GFLOP/s). Grow-only and per calling thread, so
// a matvec allocates nothing after the first call at its size and callers never share.
// Room for `count` doubles (matvec: one per column of w; matmat: the copies of a tile of
// columns).
double* widenedXBuffer(std::size_t count) {
    struct Buffer {
        double* p = nullptr;
        std::size_t capacity = 0;
        ~Buffer() { platform::freeAligned(p); }
    };
    thread_local Buffer buf;
    if (count > buf.capacity) {
        const std::size_t bytes = (count * sizeof(double) + 63) / 64 * 64;
        auto* p = static_cast<double*>(platform::allocateAligned(64, bytes));
        if (!p)
            throw KernelError("matvec: cannot allocate " + std::to_string(bytes) +
                              " bytes for the widened x");
        platform::freeAligned(buf.p);
        buf.p = p;
        buf.capacity = bytes / sizeof(double);
    }
    return buf.p;
}

template <typename BlockFn> void forRowBlocks(int rows, bool fork, BlockFn&& fn) {
    const int blocks = (rows + kRowBlock - 1) / kRowBlock;
#pragma omp parallel for schedule(static) if (fork)
    for (int b = 0; b < blocks; ++b) {
        const int first = b * kRowBlock;
        fn(first, rows - first < kRowBlock ? rows - first : kRowBlock);
    }
}

template <typename BlockFn> void forRowBlocks(int rows, int cols, BlockFn&& fn) {
    forRowBlocks(rows, worthForking(rows, cols), std::forward<BlockFn>(fn));
}

// ---- K3_KERNEL_PROFILE=1: wall seconds per weight shape, printed at exit -----------------
// The engine's own timer for docs/measurements.md (perf cannot attribute the kernels to
// their callers through the OpenMP regions): every matvec/matmat call is timed on the
// calling thread, keyed by (format, rows, cols, one column or several).
struct ProfileKey {
    int type, rows, cols;
    bool multi;
    bool operator<(const ProfileKey& o) const {
        return std::tie(type, rows, cols, multi) < std::tie(o.type, o.rows, o.cols, o.multi);
    }
};
struct ProfileRow {
    long long calls = 0, columns = 0, passes = 0; // passes: reads of the whole matrix
    double seconds = 0;
};

std::size_t weightBytes(const WeightView& w) {
    const auto rows = static_cast<std::size_t>(w.rows);
    switch (w.type) {
    case WeightType::F32:
        return rows * static_cast<std::size_t>(w.cols) * 4;
    case WeightType::BF16:
        return rows * static_cast<std::size_t>(w.cols) * 2;
    case WeightType::MXFP4:
        return rows * (mxfp4RowBytes(w.cols) + mxfp4ScalesPerRow(w.cols));
    }
    return 0;
}

class KernelProfile {
public:
    static KernelProfile* instance() {
        static KernelProfile* p = envFlag("K3_KERNEL_PROFILE") ? new KernelProfile : nullptr;
        return p;
    }
    void add(const WeightView& w, int columns, int passes, double seconds) {
        const std::lock_guard lock(mutex_);
        ProfileRow& r = rows_[{static_cast<int>(w.type), w.rows, w.cols, columns > 1}];
        ++r.calls;
        r.columns += columns;
        r.passes += passes;
        r.seconds += seconds;
    }

private:
    KernelProfile() {
        std::atexit([] { instance()->print(); });
    }
    void print() {
        const std::lock_guard lock(mutex_);
        static const char* kType[] = {"f32", "bf16", "mxfp4"};
        double total = 0;
        for (const auto& kv : rows_) total += kv.second.seconds;
        std::fprintf(stderr,
                     "\nK3_KERNEL_PROFILE (%s path): wall seconds on the calling thread\n"
                     "| kind | format | rows x cols | calls | columns/call | s | share | GFLOP/s | "
                     "weight GB/s |\n|---|---|---|---|---|---|---|---|---|\n",
                     kernelPathName(kernelPath()));
        for (const auto& [k, r] : rows_) {
            const WeightView w{static_cast<WeightType>(k.type), nullptr, nullptr, k.rows, k.cols};
            const double flops = 2.0 * k.rows * double(k.cols) * double(r.columns);
            const double bytes = double(weightBytes(w)) * double(r.passes);
            std::fprintf(stderr,
                         "| %s | %s | %dx%d | %lld | %.1f | %.3f | %.1f%% | %.1f | %.1f |\n",
                         k.multi ? "matmat" : "matvec", kType[k.type], k.rows, k.cols, r.calls,
                         double(r.columns) / double(r.calls), r.seconds, 100.0 * r.seconds / total,
                         flops / r.seconds / 1e9, bytes / r.seconds / 1e9);
        }
        std::fprintf(stderr, "total %.3f s in matvec/matmat\n", total);
    }
    std::mutex mutex_;
    std::map<ProfileKey, ProfileRow> rows_;
};

class ProfileScope {
public:
    ProfileScope(const WeightView& w, int columns, int passes)
        : profile_(KernelProfile::instance()), w_(w), columns_(columns), passes_(passes) {
        if (profile_) start_ = std::chrono::steady_clock::now();
    }
    ~ProfileScope() {
        if (profile_)
            profile_->add(
                w_, columns_, passes_,
                std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count());
    }
    ProfileScope(const ProfileScope&) = delete;
    ProfileScope& operator=(const ProfileScope&) = delete;

private:
    KernelProfile* profile_;
    WeightView w_;
    int columns_, passes_;
    std::chrono::steady_clock::time_point start_;
};

} // namespace

const char* kernelPathName(KernelPath path) {
    switch (path) {
    case KernelPath::Avx2:
        return "AVX2+FMA";
    case KernelPath::Avx512:
        return "AVX-512F+AVX2+FMA";
    case KernelPath::Neon:
        return "NEON";
    case KernelPath::Scalar:
        break;
    }
    return "scalar";
}

bool kernelPathAvailable(KernelPath path) {
    switch (path) {
    case KernelPath::Avx2:
        return cpuHasAvx2Fma();
    case KernelPath::Avx512:
        return cpuHasAvx512();
    case KernelPath::Neon:
        return kHasNeon;
    case KernelPath::Scalar:
        break;
    }
    return true;
}

KernelPath kernelPath() {
    const int forced = gForcedPath.load(std::memory_order_relaxed);
    if (forced >= 0) return static_cast<KernelPath>(forced);
    return automaticPath();
}

void setKernelPath(KernelPath path) {
    if (!kernelPathAvailable(path))
        throw KernelError(std::string("kernel path ") + kernelPathName(path) +
                          " is not available on this CPU (" + detectCpuFeatures().summary() + ")");
    gForcedPath.store(static_cast<int>(path), std::memory_order_relaxed);
}

void resetKernelPath() {
    gForcedPath.store(-1, std::memory_order_relaxed);
}

// ---- weights ------------------------------------------------------------------------

WeightView WeightView::f32(const float* w, int rows, int cols) {
    return {WeightType::F32, w, nullptr, rows, cols};
}

WeightView WeightView::bf16(const std::uint16_t* w, int rows, int cols) {
    return {WeightType::BF16, w, nullptr, rows, cols};
}

WeightView WeightView::mxfp4(const std::uint8_t* packed, const std::uint8_t* scales, int rows,
                             int cols) {
    return {WeightType::MXFP4, packed, scales, rows, cols};
}

WeightView WeightView::rowSlice(int first, int count) const {
    if (first < 0 || count < 0 || first > rows - count)
        throw KernelError("WeightView::rowSlice: rows [" + std::to_string(first) + ", " +
                          std::to_string(first) + "+" + std::to_string(count) +
                          ") outside a matrix of " + std::to_string(rows) + " rows");
    WeightView v = *this;
    v.rows = count;
    const auto r = static_cast<std::size_t>(first);
    switch (type) {
    case WeightType::F32:
        v.data = static_cast<const float*>(data) + r * cols;
        break;
    case WeightType::BF16:
        v.data = static_cast<const std::uint16_t*>(data) + r * cols;
        break;
    case WeightType::MXFP4:
        v.data = static_cast<const std::uint8_t*>(data) + r * mxfp4RowBytes(cols);
        v.scales = scales + r * mxfp4ScalesPerRow(cols);
        break;
    }
    return v;
}

std::size_t mxfp4RowBytes(int cols) {
    return (static_cast<std::size_t>(cols) + 1) / 2;
}

std::size_t mxfp4ScalesPerRow(int cols) {
    return (static_cast<std::size_t>(cols) + kMxfp4Group - 1) / kMxfp4Group;
}

float e8m0Scale(std::uint8_t s) {
    return detail::e8m0(s);
}

float mxfp4Decode(const std::uint8_t* packedRow, const std::uint8_t* scaleRow, int col) {
    const unsigned nib = (packedRow[col >> 1] >> ((col & 1) * 4)) & 0xFu;
    return detail::kE2m1[nib] * e8m0Scale(scaleRow[col / kMxfp4Group]);
}

// ---- matvec -------------------------------------------------------------------------

void matvecF32(float* y, const float* x, const float* w, int rows, int cols) {
    checkMatvec("matvecF32", y, x, w, rows, cols);
    auto dot = detail::dotF32Scalar;
#if defined(K3_HAVE_AVX2_PATH)
    if (avx2Kernels(kernelPath())) dot = detail::dotF32Avx2;
#endif
#if defined(K3_HAVE_NEON_PATH)
    if (kernelPath() == KernelPath::Neon) dot = detail::dotF32Neon;
#endif
    forRows(rows, cols,
            [&](int r) { y[r] = dot(x, w + static_cast<std::size_t>(r) * cols, cols); });
}

void matvecBf16(float* y, const float* x, const std::uint16_t* w, int rows, int cols) {
    checkMatvec("matvecBf16", y, x, w, rows, cols);
#if defined(K3_HAVE_AVX2_PATH)
    if (avx2Kernels(kernelPath())) {
        // The buffer holds cols doubles: room for the cols floats of the permuted x.
        float* xp = reinterpret_cast<float*>(widenedXBuffer(static_cast<std::size_t>(cols)));
        detail::permuteXBf16Avx2(xp, x, cols);
        forRowBlocks(rows, cols, [&](int first, int count) {
            detail::rowsBf16Avx2(y + first, x, xp, w + static_cast<std::size_t>(first) * cols, cols,
                                 count);
        });
        return;
    }
#endif
#if defined(K3_HAVE_NEON_PATH)
    if (kernelPath() == KernelPath::Neon) {
        forRowBlocks(rows, cols, [&](int first, int count) {
            detail::rowsBf16Neon(y + first, x, w + static_cast<std::size_t>(first) * cols, cols,
                                 count);
        });
        return;
    }
#endif
    forRows(rows, cols, [&](int r) {
        y[r] = detail::dotBf16Scalar(x, w + static_cast<std::size_t>(r) * cols, cols);
    });
}

void matvecMxfp4(float* y, const float* x, const std::uint8_t* packed, const std::uint8_t* scales,
                 int rows, int cols) {
    checkMatvec("matvecMxfp4", y, x, packed, rows, cols);
    if (rows > 0 && cols > 0 && !scales) throw KernelError("matvecMxfp4: null scales");
    const std::size_t rowBytes = mxfp4RowBytes(cols);
    const std::size_t rowScales = mxfp4ScalesPerRow(cols);
#if defined(K3_HAVE_AVX2_PATH)
    if (avx2Kernels(kernelPath())) {
        double* xd = widenedXBuffer(static_cast<std::size_t>(cols));
        detail::widenXMxfp4Avx2(xd, x, cols);
        forRowBlocks(rows, cols, [&](int first, int count) {
            detail::rowsMxfp4Avx2(y + first, x, xd, packed + first * rowBytes, rowBytes,
                                  scales + first * rowScales, rowScales, cols, count);
        });
        return;
    }
#endif
#if defined(K3_HAVE_NEON_PATH)
    if (kernelPath() == KernelPath::Neon) {
        double* xd = widenedXBuffer(static_cast<std::size_t>(cols));
        detail::widenXMxfp4Neon(xd, x, cols);
        forRowBlocks(rows, cols, [&](int first, int count) {
            detail::rowsMxfp4Neon(y + first, x, xd, packed + first * rowBytes, rowBytes,
                                  scales + first * rowScales, rowScales, cols, count);
        });
        return;
    }
#endif
    forRows(rows, cols, [&](int r) {
        y[r] = detail::dotMxfp4Scalar(x, packed + r * rowBytes, scales + r * rowScales, cols);
    });
}

void matvec(float* y, const float* x, const WeightView& w) {
    const ProfileScope profile(w, 1, 1);
    switch (w.type) {
    case WeightType::F32:
        return matvecF32(y, x, static_cast<const float*>(w.data), w.rows, w.cols);
    case WeightType::BF16:
        return matvecBf16(y, x, static_cast<const std::uint16_t*>(w.data), w.rows, w.cols);
    case WeightType::MXFP4:
        return matvecMxfp4(y, x, static_cast<const std::uint8_t*>(w.data), w.scales, w.rows,
                           w.cols);
    }
    throw KernelError("matvec: unknown weight type");
}

// Columns per parallel pass over the weights: bounds the x copies (64 x 12288 floats of
// BF16 is 3 MB) while the weights are read once for every 64 columns.
constexpr int kMatmatColumns = 64;

// Long on purpose: one dispatch over every weight format and instruction-set path, so the
// choice of kernel is read in one place (each branch is a call into that path's kernel).
void matmat(float* y, const float* x, const WeightView& w, int columns) {
    if (columns < 0) throw KernelError("matmat: negative column count " + std::to_string(columns));
    if (columns == 0) return;
    if (columns == 1) return matvec(y, x, w); // one column: nothing to share
    const ProfileScope profile(w, columns, (columns + kMatmatColumns - 1) / kMatmatColumns);
    const int rows = w.rows, cols = w.cols;
    checkMatvec("matmat", y, x, w.data, rows, cols);
    if (w.type == WeightType::MXFP4 && rows > 0 && cols > 0 && !w.scales)
        throw KernelError("matmat: null MXFP4 scales");
    if (rows == 0) return;
    const std::size_t nr = static_cast<std::size_t>(rows), nc = static_cast<std::size_t>(cols);
    const bool fork = rows >= 16 && static_cast<long long>(rows) * cols * columns >= (1LL << 15);
    const std::size_t rowBytes = mxfp4RowBytes(cols), rowScales = mxfp4ScalesPerRow(cols);
    const auto* f32 = static_cast<const float*>(w.data);
    const auto* bf16 = static_cast<const std::uint16_t*>(w.data);
    const auto* packed = static_cast<const std::uint8_t*>(w.data);
#if defined(K3_HAVE_AVX2_PATH)
    const KernelPath path = kernelPath();
    if (avx2Kernels(path) && cols > 0) {
        static_assert(kRowBlock <= detail::kMatmatRows);
        for (int t0 = 0; t0 < columns; t0 += kMatmatColumns) {
            const int tc = columns - t0 < kMatmatColumns ? columns - t0 : kMatmatColumns;
            float* yt = y + t0 * nr;
            const float* xt = x + t0 * nc;
            switch (w.type) {
            case WeightType::F32: {
                double* xd = widenedXBuffer(detail::f32ColumnsDoubles(cols, tc));
                detail::widenXF32ColumnsAvx2(xd, xt, cols, tc);
                forRowBlocks(rows, fork, [&](int first, int count) {
                    detail::rowsF32ColumnsAvx2(yt + first, nr, xt, xd, f32 + first * nc, cols,
                                               count, tc);
                });
                break;
            }
            case WeightType::BF16: {
                // Room for the floats of the copies.
                float* xp = reinterpret_cast<float*>(
                    widenedXBuffer((detail::bf16ColumnsFloats(cols, tc) + 1) / 2));
                if (path == KernelPath::Avx512) {
                    detail::copyXBf16ColumnsAvx512(xp, xt, cols, tc);
                    forRowBlocks(rows, fork, [&](int first, int count) {
                        detail::rowsBf16ColumnsAvx512(yt + first, nr, xt, xp, bf16 + first * nc,
                                                      cols, count, tc);
                    });
                    break;
                }
                detail::permuteXBf16ColumnsAvx2(xp, xt, cols, tc);
                forRowBlocks(rows, fork, [&](int first, int count) {
                    detail::rowsBf16ColumnsAvx2(yt + first, nr, xt, xp, bf16 + first * nc, cols,
                                                count, tc);
                });
                break;
            }
            case WeightType::MXFP4: {
                double* xd = widenedXBuffer(detail::mxfp4ColumnsDoubles(cols, tc));
                detail::widenXMxfp4ColumnsAvx2(xd, xt, cols, tc);
                forRowBlocks(rows, fork, [&](int first, int count) {
                    detail::rowsMxfp4ColumnsAvx2(yt + first, nr, xt, xd, packed + first * rowBytes,
                                                 rowBytes, w.scales + first * rowScales, rowScales,
                                                 cols, count, tc);
                });
                break;
            }
            }
        }
        return;
    }
#endif
#if defined(K3_HAVE_NEON_PATH)
    if (kernelPath() == KernelPath::Neon && cols > 0) {
        static_assert(kRowBlock <= detail::kMatmatRowsNeon);
        for (int t0 = 0; t0 < columns; t0 += kMatmatColumns) {
            const int tc = columns - t0 < kMatmatColumns ? columns - t0 : kMatmatColumns;
            float* yt = y + t0 * nr;
            const float* xt = x + t0 * nc;
            switch (w.type) {
            case WeightType::F32:
                forRowBlocks(rows, fork, [&](int first, int count) {
                    detail::rowsF32ColumnsNeon(yt + first, nr, xt, f32 + first * nc, cols, count,
                                               tc);
                });
                break;
            case WeightType::BF16:
                forRowBlocks(rows, fork, [&](int first, int count) {
                    detail::rowsBf16ColumnsNeon(yt + first, nr, xt, bf16 + first * nc, cols, count,
                                                tc);
                });
                break;
            case WeightType::MXFP4: {
                double* xd = widenedXBuffer(detail::mxfp4ColumnsDoublesNeon(cols, tc));
                detail::widenXMxfp4ColumnsNeon(xd, xt, cols, tc);
                forRowBlocks(rows, fork, [&](int first, int count) {
                    detail::rowsMxfp4ColumnsNeon(yt + first, nr, xt, xd, packed + first * rowBytes,
                                                 rowBytes, w.scales + first * rowScales, rowScales,
                                                 cols, count, tc);
                });
                break;
            }
            }
        }
        return;
    }
#endif
    // The portable reference: each row against every column while it is in cache.
    forRows(rows, cols, [&](int r) {
        for (int t = 0; t < columns; ++t) {
            const float* xt = x + t * nc;
            float v = 0;
            switch (w.type) {
            case WeightType::F32:
                v = detail::dotF32Scalar(xt, f32 + r * nc, cols);
                break;
            case WeightType::BF16:
                v = detail::dotBf16Scalar(xt, bf16 + r * nc, cols);
                break;
            case WeightType::MXFP4:
                v = detail::dotMxfp4Scalar(xt, packed + r * rowBytes, w.scales + r * rowScales,
                                           cols);
                break;
            }
            y[t * nr + r] = v;
        }
    });
}

} // namespace k3
