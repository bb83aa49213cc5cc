// Dequantizers of the k-quants (256-element super-blocks). Operation order per
// element, as in ggml's reference C code (and gguf-py, checked in ctest):
//   Q2_K:      dl = d * (sc & 15), ml = dmin * (sc >> 4), y = dl * q - ml
//   Q3_K:      dl = d * (sc - 32), y = dl * q            (q in -4..3)
//   Q4_K/Q5_K: d1 = d * sc, m1 = dmin * m, y = d1 * q - m1
//   Q6_K:      y = (d * sc) * q                          (q in -32..31)
//   Q8_K:      y = d * q                                 (d is f32)
// Each product and difference is rounded to float before the next step;
// gguf/ builds with -ffp-contract=off so no FMA merges them.
#include "gguf/f16.h"
#include "gguf/quant.h"
#include "gguf/quant_internal.h"

namespace ptxlm::gguf::detail {

// Q2_K {scales[16]; qs[64]; d; dmin}: 16 sub-blocks of 16. Each 128-element
// half reads 32 bytes of qs; 2-bit field k (shift 2k) of qs[l] is element
// 32k + l, so sub-block 2k covers qs[0..16) and 2k+1 covers qs[16..32).
void dequantize_row_q2_k(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ2_K*>(src);
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const float d = f16_to_f32(x[b].d);
        const float dmin = f16_to_f32(x[b].dmin);
        const uint8_t* q = x[b].qs;
        int is = 0;
        for (int half = 0; half < 2; ++half, q += 32) {
            for (int k = 0; k < 4; ++k) {
                for (int part = 0; part < 2; ++part) {
                    const uint8_t sc = x[b].scales[is++];
                    const float dl = d * float(sc & 0xF);
                    const float ml = dmin * float(sc >> 4);
                    for (int l = 0; l < 16; ++l)
                        *y++ = dl * float((q[16 * part + l] >> (2 * k)) & 3) - ml;
                }
            }
        }
    }
}

// Q3_K {hmask[32]; qs[64]; scales[12]; d}: as Q2_K for the low 2 bits; the
// third bit of element 32k + l of half h is hmask[l] bit 4h + k, and a CLEAR
// bit subtracts 4. Scales: q3_k_scale (quant.h).
void dequantize_row_q3_k(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ3_K*>(src);
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const float d = f16_to_f32(x[b].d);
        int scale[16];
        for (int k = 0; k < 16; ++k) scale[k] = q3_k_scale(x[b].scales, k);
        const uint8_t* q = x[b].qs;
        int is = 0;
        for (int half = 0; half < 2; ++half, q += 32) {
            for (int k = 0; k < 4; ++k) {
                const uint8_t mask = uint8_t(1u << (4 * half + k));
                for (int part = 0; part < 2; ++part) {
                    const float dl = d * float(scale[is++]);
                    for (int l = 0; l < 16; ++l) {
                        const int i = 16 * part + l;
                        const int v = ((q[i] >> (2 * k)) & 3) - ((x[b].hmask[i] & mask) ? 0 : 4);
                        *y++ = dl * float(v);
                    }
                }
            }
        }
    }
}

// Q4_K: chunk c (32 bytes of qs) holds sub-block 2c in the low nibbles and
// sub-block 2c+1 in the high nibbles.
void dequantize_row_q4_k(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ4_K*>(src);
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const float d = f16_to_f32(x[b].d);
        const float dmin = f16_to_f32(x[b].dmin);
        const uint8_t* q = x[b].qs;
        for (int c = 0; c < 4; ++c, q += 32) {
            uint8_t sc, m;
            k_scale_min_get(2 * c, x[b].scales, &sc, &m);
            const float d1 = d * float(sc), m1 = dmin * float(m);
            k_scale_min_get(2 * c + 1, x[b].scales, &sc, &m);
            const float d2 = d * float(sc), m2 = dmin * float(m);
            for (int l = 0; l < 32; ++l) *y++ = d1 * float(q[l] & 0xF) - m1;
            for (int l = 0; l < 32; ++l) *y++ = d2 * float(q[l] >> 4) - m2;
        }
    }
}

// Q5_K: as Q4_K plus a fifth bit, qh[l] bit 2c (low nibble) / 2c+1 (high).
void dequantize_row_q5_k(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ5_K*>(src);
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const float d = f16_to_f32(x[b].d);
        const float dmin = f16_to_f32(x[b].dmin);
        const uint8_t* q = x[b].qs;
        const uint8_t* qh = x[b].qh;
        for (int c = 0; c < 4; ++c, q += 32) {
            uint8_t sc, m;
            k_scale_min_get(2 * c, x[b].scales, &sc, &m);
            const float d1 = d * float(sc), m1 = dmin * float(m);
            k_scale_min_get(2 * c + 1, x[b].scales, &sc, &m);
            const float d2 = d * float(sc), m2 = dmin * float(m);
            for (int l = 0; l < 32; ++l)
                *y++ = d1 * float((q[l] & 0xF) | (((qh[l] >> (2 * c)) & 1) << 4)) - m1;
            for (int l = 0; l < 32; ++l)
                *y++ = d2 * float((q[l] >> 4) | (((qh[l] >> (2 * c + 1)) & 1) << 4)) - m2;
        }
    }
}

// Q6_K: see FACTS.md; each 128-element half uses ql+64h, qh+32h, scales+8h.
void dequantize_row_q6_k(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ6_K*>(src);
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const float d = f16_to_f32(x[b].d);
        for (int h = 0; h < 2; ++h, y += 128) {
            const uint8_t* ql = x[b].ql + 64 * h;
            const uint8_t* qh = x[b].qh + 32 * h;
            const int8_t* sc = x[b].scales + 8 * h;
            for (int l = 0; l < 32; ++l) {
                const int is = l / 16;
                const int q1 = ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) - 32;
                const int q2 = ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) - 32;
                const int q3 = ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) - 32;
                const int q4 = ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) - 32;
                y[l] = d * float(sc[is]) * float(q1);
                y[l + 32] = d * float(sc[is + 2]) * float(q2);
                y[l + 64] = d * float(sc[is + 4]) * float(q3);
                y[l + 96] = d * float(sc[is + 6]) * float(q4);
            }
        }
    }
}

void dequantize_row_q8_k(const void* src, float* y, int64_t n) {
    const auto* x = static_cast<const BlockQ8_K*>(src);
    for (int64_t b = 0; b < n / QK_K; ++b, y += QK_K)
        for (int j = 0; j < QK_K; ++j) y[j] = x[b].d * float(x[b].qs[j]);
}

}  // namespace ptxlm::gguf::detail
