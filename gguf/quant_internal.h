// Row kernels behind the type table in quant.cpp. Private to gguf/: callers go
// through find_type()/type_traits(), which hold these as function pointers.
#pragma once

#include <cstdint>

#include "gguf/f16.h"
#include "gguf/quant.h"

namespace ptxlm::gguf::detail {

// Dequantizers. Each evaluates every element with ggml's reference operations
// in ggml's order (see quant.h); gguf/ is compiled with -ffp-contract=off.
void dequantize_row_f32(const void* src, float* dst, int64_t n);
void dequantize_row_f16(const void* src, float* dst, int64_t n);
void dequantize_row_bf16(const void* src, float* dst, int64_t n);
void dequantize_row_q4_0(const void* src, float* dst, int64_t n);
void dequantize_row_q4_1(const void* src, float* dst, int64_t n);
void dequantize_row_q5_0(const void* src, float* dst, int64_t n);
void dequantize_row_q5_1(const void* src, float* dst, int64_t n);
void dequantize_row_q8_0(const void* src, float* dst, int64_t n);
void dequantize_row_q8_1(const void* src, float* dst, int64_t n);
void dequantize_row_q2_k(const void* src, float* dst, int64_t n);   // quant_k.cpp
void dequantize_row_q3_k(const void* src, float* dst, int64_t n);
void dequantize_row_q4_k(const void* src, float* dst, int64_t n);
void dequantize_row_q5_k(const void* src, float* dst, int64_t n);
void dequantize_row_q6_k(const void* src, float* dst, int64_t n);
void dequantize_row_q8_k(const void* src, float* dst, int64_t n);
void dequantize_row_iq4_nl(const void* src, float* dst, int64_t n);   // quant.cpp
void dequantize_row_iq4_xs(const void* src, float* dst, int64_t n);

// Quantizers (quantize.cpp). Deterministic: same input, same bytes.
void quantize_row_f32(const float* src, void* dst, int64_t n);
void quantize_row_f16(const float* src, void* dst, int64_t n);
void quantize_row_bf16(const float* src, void* dst, int64_t n);
void quantize_row_q4_0(const float* src, void* dst, int64_t n);
void quantize_row_q4_1(const float* src, void* dst, int64_t n);
void quantize_row_q5_0(const float* src, void* dst, int64_t n);
void quantize_row_q5_1(const float* src, void* dst, int64_t n);
void quantize_row_q8_0(const float* src, void* dst, int64_t n);
void quantize_row_q4_k(const float* src, void* dst, int64_t n);
void quantize_row_q5_k(const float* src, void* dst, int64_t n);
void quantize_row_q6_k(const float* src, void* dst, int64_t n);
void quantize_row_q8_k(const float* src, void* dst, int64_t n);
void quantize_row_q2_k(const float* src, void* dst, int64_t n);
void quantize_row_q3_k(const float* src, void* dst, int64_t n);
void quantize_row_iq4_nl(const float* src, void* dst, int64_t n);   // quantize_iq4.cpp
void quantize_row_iq4_xs(const float* src, void* dst, int64_t n);

// The value a dequantizer sees for a scale stored as f16.
inline float f16_round(float v) { return f16_to_f32(f32_to_f16(v)); }

// round(v) clamped to [lo, hi], for any finite or infinite v. Clamping first
// keeps the float->int conversion defined; +0.5 and truncation of a
// non-negative value round half up.
inline int round_clamp(float v, int lo, int hi) {
    float t = v - float(lo) + 0.5f;
    if (!(t > 0.f)) return lo;   // also NaN
    if (t > float(hi - lo) + 0.5f) return hi;
    const int r = int(t) + lo;
    return r > hi ? hi : r;
}

// Q4_K/Q5_K pack 8 six-bit scales and 8 six-bit mins into 12 bytes.
inline void k_scale_min_get(int j, const uint8_t* s, uint8_t* sc, uint8_t* m) {
    if (j < 4) {
        *sc = s[j] & 63;
        *m = s[j + 4] & 63;
    } else {
        *sc = uint8_t((s[j + 4] & 0xF) | ((s[j - 4] >> 6) << 4));
        *m = uint8_t((s[j + 4] >> 4) | ((s[j] >> 6) << 4));
    }
}

}  // namespace ptxlm::gguf::detail

namespace ptxlm::gguf::detail {

// Inverse of k_scale_min_get: sc and m are 6-bit (0..63) per sub-block j.
inline void k_scale_min_set(const uint8_t sc[8], const uint8_t m[8], uint8_t s[12]) {
    for (int j = 0; j < 4; ++j) {
        s[j] = uint8_t((sc[j] & 63) | ((sc[j + 4] >> 4) << 6));
        s[j + 4] = uint8_t((m[j] & 63) | ((m[j + 4] >> 4) << 6));
        s[j + 8] = uint8_t((sc[j + 4] & 0xF) | ((m[j + 4] & 0xF) << 4));
    }
}

}  // namespace ptxlm::gguf::detail
