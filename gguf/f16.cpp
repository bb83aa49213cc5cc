// IEEE binary16 and bfloat16 conversions. Integer arithmetic only, so the
// result never depends on the host's rounding mode or FP16 hardware.
#include "gguf/f16.h"

namespace ptxlm {

float f16_to_f32(uint16_t h) {
    const uint32_t sign = uint32_t(h & 0x8000u) << 16;
    const uint32_t exp = (h >> 10) & 0x1fu;
    const uint32_t man = h & 0x3ffu;
    if (exp == 0x1f) {
        // inf keeps its sign; NaN keeps sign and payload and comes out quiet,
        // as F16C's vcvtph2ps and numpy produce it.
        return f32_from_bits(sign | 0x7f800000u | (man << 13) | (man ? 0x00400000u : 0u));
    }
    if (exp == 0) {
        // Zero or subnormal: man * 2^-24 is exact in f32 (man < 2^10, result normal).
        const float mag = float(man) * 0x1p-24f;
        return f32_from_bits(sign | f32_bits(mag));
    }
    // Normal: rebias the exponent (15 -> 127) and widen the mantissa.
    return f32_from_bits(sign | ((exp + 112u) << 23) | (man << 13));
}

uint16_t f32_to_f16(float f) {
    const uint32_t u = f32_bits(f);
    const uint16_t sign = uint16_t((u >> 16) & 0x8000u);
    const uint32_t a = u & 0x7fffffffu;
    if (a > 0x7f800000u)   // NaN: keep the top payload bits, force the quiet bit
        return uint16_t(sign | 0x7e00u | ((a >> 13) & 0x3ffu));
    if (a >= 0x477ff000u)  // >= 65520 = 65504 + half an ulp: rounds to inf (ties go to even = inf)
        return uint16_t(sign | 0x7c00u);
    if (a >= 0x38800000u) {
        // Normal f16 range: add half an ulp (minus one when the kept lsb is 0,
        // so that ties go to even); a carry into the exponent is correct.
        const uint32_t r = a + 0xfffu + ((a >> 13) & 1u);
        return uint16_t(sign | ((r - (112u << 23)) >> 13));
    }
    // Subnormal f16 (or zero): q = |f| / 2^-24 rounded to nearest even.
    const uint32_t e = a >> 23;
    const uint32_t m = (a & 0x7fffffu) | (e ? 0x800000u : 0u);
    const uint32_t shift = 126u - e;   // >= 14 here
    if (shift > 24) return sign;        // |f| < 2^-25: rounds to zero
    uint32_t q = m >> shift;
    const uint32_t rem = m & ((1u << shift) - 1u);
    const uint32_t half = 1u << (shift - 1);
    if (rem > half || (rem == half && (q & 1u))) ++q;  // q may reach 0x400: the smallest normal
    return uint16_t(sign | q);
}

uint16_t f32_to_bf16(float f) {
    const uint32_t u = f32_bits(f);
    if ((u & 0x7fffffffu) > 0x7f800000u)  // NaN: truncate, force the quiet bit
        return uint16_t((u >> 16) | 0x40u);
    return uint16_t((u + 0x7fffu + ((u >> 16) & 1u)) >> 16);  // RNE; overflow carries into inf
}

}  // namespace ptxlm
