// IEEE binary16 and bfloat16 conversions, exact and branch-light.
#pragma once

#include <cstdint>
#include <cstring>

namespace ptxlm {

inline uint32_t f32_bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline float f32_from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// Exact: every f16 value is representable in f32 (subnormals, inf and NaN included).
float f16_to_f32(uint16_t h);
// Round to nearest even, overflow to inf, NaN stays NaN (quiet).
uint16_t f32_to_f16(float f);

inline float bf16_to_f32(uint16_t h) { return f32_from_bits(uint32_t(h) << 16); }
// Round to nearest even; NaN stays NaN (quiet).
uint16_t f32_to_bf16(float f);

}  // namespace ptxlm
