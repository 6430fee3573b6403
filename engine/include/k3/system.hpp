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
    // "AVX2 + FMA", "AVX2 + FMA + AVX-512F" or "portable (no AVX2/FMA)".
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

} // namespace k3
