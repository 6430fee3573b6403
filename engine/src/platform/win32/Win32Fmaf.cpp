// fmaf with one rounding, as the kernels' documented scalar order needs (std::fma on
// floats: k3/kernels.hpp). MinGW-w64's own fmaf (libmingwex, a software routine used
// when the compiler may not emit vfmadd) rounds twice: under wine 2 M random products
// gave other bits than glibc and the FMA instruction, so the scalar kernels disagreed with
// the AVX2 ones and with Linux (tst_kernels_paths). Defined here, the linker takes this
// one instead of the CRT's.
//
// The product of two floats is exact in a double (24 + 24 bits < 53); the sum is rounded
// to odd (a double with its error folded into the last bit), and rounding that to float
// is then correctly rounded, since a double has more than 24 + 2 bits.
#include <cmath>
#include <cstdint>
#include <cstring>

extern "C" float fmaf(float a, float b, float c) {
    const double product = double(a) * double(b);
    const double sum = product + double(c);
    if (!std::isfinite(sum) || sum == 0) return float(sum); // inf, NaN, exact zeros
    // TwoSum: the exact error of the double sum.
    const double bVirtual = sum - product;
    const double error = (product - (sum - bVirtual)) + (double(c) - bVirtual);
    if (error == 0) return float(sum);
    std::uint64_t bits;
    std::memcpy(&bits, &sum, sizeof bits);
    if ((bits & 1) == 0) {
        // Round to odd: step one unit towards the exact value when the last bit is even.
        const bool sameSign = (error > 0) == (sum > 0);
        bits += sameSign ? 1 : -1;
        double odd;
        std::memcpy(&odd, &bits, sizeof odd);
        return float(odd);
    }
    return float(sum);
}
