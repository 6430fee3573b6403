// AVX2/FMA matvec rows. Compiled with function-level target attributes, never with
// -mavx2 for the file, so the rest of the engine stays portable and the choice is made
// at run time by CPUID. Lane k*8+j of the order in k3/kernels.hpp is element j of
// accumulator k, so these loops are the scalar ones done eight lanes at a time.

#include "kernels/MatvecRows.hpp"

#include "k3/kernels.hpp"

#if defined(K3_HAVE_AVX2_PATH)

#include <cmath>
#include <cstring>
#include <immintrin.h>

#define K3_AVX2 __attribute__((target("avx2,fma")))

namespace k3::detail {

namespace {

K3_AVX2 inline void storeLanes(__m256 a0, __m256 a1, __m256 a2, __m256 a3, float* lanes) {
    _mm256_storeu_ps(lanes, a0);
    _mm256_storeu_ps(lanes + 8, a1);
    _mm256_storeu_ps(lanes + 16, a2);
    _mm256_storeu_ps(lanes + 24, a3);
}

K3_AVX2 inline __m256 loadBf16(const std::uint16_t* p) {
    const __m128i h = _mm_loadu_si128(reinterpret_cast<const __m128i*>(p));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

// Eight MXFP4 weights from four bytes, scaled by the group's table. Shifting the
// little-endian word by 0, 4, ..., 28 yields the nibbles in element order: low nibble of
// byte 0 is element 0, its high nibble element 1, and so on.
K3_AVX2 inline __m256 decode8(__m256 table, const std::uint8_t* p) {
    std::uint32_t bits;
    std::memcpy(&bits, p, sizeof bits);
    const __m256i nib = _mm256_srlv_epi32(_mm256_set1_epi32(static_cast<int>(bits)),
                                          _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28));
    const __m256 mag = _mm256_permutevar8x32_ps(table, nib); // uses bits 0..2 only
    const __m256i sign = _mm256_slli_epi32(_mm256_and_si256(nib, _mm256_set1_epi32(8)), 28);
    return _mm256_xor_ps(mag, _mm256_castsi256_ps(sign));
}

} // namespace

K3_AVX2 float dotF32Avx2(const float* x, const float* w, int n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + kLanes <= n; i += kLanes) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), _mm256_loadu_ps(w + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), _mm256_loadu_ps(w + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), _mm256_loadu_ps(w + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), _mm256_loadu_ps(w + i + 24), a3);
    }
    float lanes[kLanes];
    storeLanes(a0, a1, a2, a3, lanes);
    for (; i < n; ++i) lanes[i % kLanes] = std::fma(x[i], w[i], lanes[i % kLanes]);
    return foldLanes(lanes);
}

K3_AVX2 float dotBf16Avx2(const float* x, const std::uint16_t* w, int n) {
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    int i = 0;
    for (; i + kLanes <= n; i += kLanes) {
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i), loadBf16(w + i), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 8), loadBf16(w + i + 8), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 16), loadBf16(w + i + 16), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(x + i + 24), loadBf16(w + i + 24), a3);
    }
    float lanes[kLanes];
    storeLanes(a0, a1, a2, a3, lanes);
    for (; i < n; ++i) lanes[i % kLanes] = std::fma(x[i], bf16ToFloat(w[i]), lanes[i % kLanes]);
    return foldLanes(lanes);
}

K3_AVX2 float dotMxfp4Avx2(const float* x, const std::uint8_t* packed, const std::uint8_t* scales,
                           int n) {
    const __m256 magnitudes = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    // Four named accumulators (not an array) so they stay in registers.
    __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
    const int fullGroups = n / kMxfp4Group;
    for (int g = 0; g < fullGroups; ++g) {
        if (scales[g] == 255) continue; // NaN scale: the whole group is dropped
        // Scaling the 8-entry table by a power of two is exact, so each decoded weight
        // equals the scalar path's kE2m1[nib] * s.
        const __m256 table = _mm256_mul_ps(magnitudes, _mm256_set1_ps(e8m0(scales[g])));
        const std::uint8_t* pg = packed + g * (kMxfp4Group / 2);
        const float* xg = x + g * kMxfp4Group;
        a0 = _mm256_fmadd_ps(_mm256_loadu_ps(xg), decode8(table, pg), a0);
        a1 = _mm256_fmadd_ps(_mm256_loadu_ps(xg + 8), decode8(table, pg + 4), a1);
        a2 = _mm256_fmadd_ps(_mm256_loadu_ps(xg + 16), decode8(table, pg + 8), a2);
        a3 = _mm256_fmadd_ps(_mm256_loadu_ps(xg + 24), decode8(table, pg + 12), a3);
    }
    float lanes[kLanes];
    storeLanes(a0, a1, a2, a3, lanes);
    // The partial last group, if any, element by element exactly as the scalar path.
    const int begin = fullGroups * kMxfp4Group;
    if (begin < n && scales[fullGroups] != 255) {
        const float s = e8m0(scales[fullGroups]);
        for (int i = begin; i < n; ++i) {
            const unsigned nib = (packed[i >> 1] >> ((i & 1) * 4)) & 0xFu;
            lanes[i % kLanes] = std::fma(x[i], kE2m1[nib] * s, lanes[i % kLanes]);
        }
    }
    return foldLanes(lanes);
}

} // namespace k3::detail

#endif
