#include "k3/system.hpp"

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#endif

namespace k3 {

std::string CpuFeatures::summary() const {
    if (neon) return "NEON (AArch64)";
    if (!avx2 || !fma) return "portable (no AVX2/FMA)";
    return avx512f ? "AVX2 + FMA + AVX-512F" : "AVX2 + FMA";
}

CpuFeatures detectCpuFeatures() {
    CpuFeatures f;
#if defined(__x86_64__) || defined(__i386__)
    unsigned eax = 0, ebx = 0, ecx = 0, edx = 0;
    if (!__get_cpuid(1, &eax, &ebx, &ecx, &edx)) return f;
    const bool osxsave = (ecx & (1u << 27)) != 0;
    const bool hasFma = (ecx & (1u << 12)) != 0;
    const bool hasAvx = (ecx & (1u << 28)) != 0;
    if (!osxsave || !hasAvx) return f;
    // XCR0 tells which register files the OS preserves across context switches.
    unsigned xcr0Lo = 0, xcr0Hi = 0;
    __asm__ volatile("xgetbv" : "=a"(xcr0Lo), "=d"(xcr0Hi) : "c"(0));
    const bool osYmm = (xcr0Lo & 0x6u) == 0x6u;
    const bool osZmm = (xcr0Lo & 0xE6u) == 0xE6u;
    if (!osYmm) return f;
    if (!__get_cpuid_count(7, 0, &eax, &ebx, &ecx, &edx)) return f;
    f.avx2 = (ebx & (1u << 5)) != 0;
    f.fma = hasFma;
    f.avx512f = osZmm && (ebx & (1u << 16)) != 0;
#elif defined(__aarch64__)
    f.neon = true;
#endif
    return f;
}

} // namespace k3
