#pragma once
// Facts about this machine that decide how the engine runs: SIMD support for kernel
// dispatch and available memory for the memory plan.

#include <cstdint>
#include <filesystem>
#include <optional>
#include <string>

namespace k3 {

struct CpuFeatures {
    bool avx2 = false;
    bool fma = false;
    bool avx512f = false;
    bool neon = false; // AArch64 Advanced SIMD: part of the architecture, true on every ARM64
    // "AVX2 + FMA", "AVX2 + FMA + AVX-512F", "NEON (AArch64)" or "portable (no AVX2/FMA)".
    std::string summary() const;
};

// Reads CPUID and XGETBV: a feature counts only when the OS saves its registers too.
CpuFeatures detectCpuFeatures();

struct MemoryInfo {
    std::uint64_t totalBytes = 0;
    // The smallest of MemAvailable and, for every memory cgroup this process is in
    // (v2, or v1's memory controller; each level up to the root), its limit minus its
    // usage (page cache it could drop, inactive_file, not counted as used).
    std::uint64_t availableBytes = 0;
    std::uint64_t meminfoAvailableBytes = 0; // MemAvailable alone
    // What bound availableBytes: "MemAvailable", or the cgroup limit file that did, e.g.
    // "cgroup v2 /sys/fs/cgroup/user.slice/memory.max (limit 300.0 MB, usage 12.1 MB)".
    std::string boundBy = "MemAvailable";
    std::optional<std::uint64_t> cgroupLimitBytes; // the binding cgroup's limit, if any
};

// Parses /proc/meminfo text ("MemTotal:  16318412 kB" lines). Nothing when either
// MemTotal or MemAvailable is missing or malformed. boundBy is "MemAvailable".
std::optional<MemoryInfo> parseMeminfo(const std::string& text);

// Reads ROOT/proc/meminfo, ROOT/proc/self/cgroup and the cgroup files under
// ROOT/sys/fs/cgroup (v2 unified, v2 at sys/fs/cgroup/unified in a hybrid layout, v1
// memory controller at sys/fs/cgroup/memory). ROOT is "/" on a real run; tests give a
// folder of stub files, read through the same code. A cgroup file that is missing or
// unreadable leaves that cgroup out; "max" (v2) or a v1 limit of 2^60 or more is no limit.
std::optional<MemoryInfo> readMemoryInfo(const std::filesystem::path& root);

// readMemoryInfo("/") for this process.
std::optional<MemoryInfo> readMemoryInfo();

// ---- kernel path (defined with the kernels) ----------------------------------------

// Avx512 is Avx2 plus an AVX-512F BF16 multi-column kernel (the one product that is
// compute-bound); Neon is AArch64's Advanced SIMD. Every path gives the same bits.
enum class KernelPath { Scalar, Avx2, Avx512, Neon };

const char* kernelPathName(KernelPath path);
// Avx2 needs AVX2 and FMA from CPUID (with OS register support), Avx512 also AVX-512F
// (with OS ZMM support); Neon is there in every AArch64 build and nowhere else; Scalar
// is always there.
bool kernelPathAvailable(KernelPath path);
// The path matvec uses now. Automatic choice: the widest available (Neon on AArch64),
// unless the environment variable K3_FORCE_SCALAR is set to a non-empty value other than
// "0", or K3_FORCE_AVX2 to one (AVX-512 off).
KernelPath kernelPath();
// Forces a path (tests, benchmarks). Throws KernelError when the CPU lacks it.
void setKernelPath(KernelPath path);
// Back to the automatic choice.
void resetKernelPath();

} // namespace k3
