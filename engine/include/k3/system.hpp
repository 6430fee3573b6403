#pragma once
// Facts about this machine that decide how the engine runs: SIMD support for kernel
// dispatch and available memory for the memory plan.

#include <cstdint>
#include <optional>
#include <string>

namespace k3 {

struct CpuFeatures {
    bool avx2 = false;
    bool fma = false;
    bool avx512f = false;
    // "AVX2 + FMA", "AVX2 + FMA + AVX-512F" or "portable (no AVX2/FMA)".
    std::string summary() const;
};

// Reads CPUID and XGETBV: a feature counts only when the OS saves its registers too.
CpuFeatures detectCpuFeatures();

struct MemoryInfo {
    std::uint64_t totalBytes = 0;
    std::uint64_t availableBytes = 0;
};

// Parses /proc/meminfo text ("MemTotal:  16318412 kB" lines). Nothing when either
// MemTotal or MemAvailable is missing or malformed.
std::optional<MemoryInfo> parseMeminfo(const std::string& text);

// Reads /proc/meminfo of this machine.
std::optional<MemoryInfo> readMemoryInfo();

} // namespace k3
