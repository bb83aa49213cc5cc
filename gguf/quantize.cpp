// Quantizers used by the synthetic-model generator. Deterministic: integer
// rounding is done by truncating a clamped, non-negative float, and every
// search visits its candidates in a fixed order, keeping the first best.
//
// Three families:
//  * Q8_0, Q4_1, Q5_1, Q8_K: the plain "scale from the extreme value" rule of
//    ggml's reference quantizers (Q8_0/Q4_1/Q5_1 give the same bytes as
//    gguf-py's quantizers, which follow the same rule; checked in ctest).
//  * Q4_0, Q5_0: that rule is the first candidate of a small search over the
//    block scale (least-squares refit per candidate, the rounded f16 scale
//    scored); the best by squared error wins, so never worse than the rule.
//  * Q2_K, Q3_K, Q4_K, Q5_K, Q6_K: per sub-block a scale (and min) search
//    with least-squares refits, then the 4/6/8-bit sub-block scales are
//    quantized against the super-block d (and dmin), d/dmin are refit by
//    least squares over the whole super-block, and the elements are
//    re-quantized against the scales a dequantizer will actually see. Q2_K
//    shares Q4_K's asymmetric fit (16 sub-blocks of 16, 4-bit scales and
//    mins), Q3_K Q6_K's symmetric one (codes -4..3, 6-bit signed scales).
// (IQ4_NL and IQ4_XS: quantize_iq4.cpp.)
#include <cmath>
#include <cstring>

#include "gguf/f16.h"
#include "gguf/quant.h"
#include "gguf/quant_internal.h"

namespace ptxlm::gguf::detail {
namespace {

// Signed value with the largest magnitude (the first one on ties), as ggml's
// reference rules pick it.
float signed_absmax(const float* x, int n) {
    float amax = 0.f, max = 0.f;
    for (int i = 0; i < n; ++i) {
        const float a = std::fabs(x[i]);
        if (a > amax) { amax = a; max = x[i]; }
    }
    return max;
}

// ---- 32-element blocks --------------------------------------------------

// y = d * (q - half), q in [0, 2*half). Writes f16 d and the unsigned q.
// Candidate 0 is ggml's rule (d = max / -half, q = trunc(x/d + half + 0.5));
// then the extreme is mapped to other levels, each candidate's q gets a
// least-squares d, and that d is scored after f16 rounding. The winner's d is
// used to re-quantize every element to its nearest level (never worse).
void quantize_block_offset(const float* x, int half, uint16_t* d_out, uint8_t* q_out) {
    constexpr int n = 32;
    const int qmax = 2 * half - 1;
    const float max = signed_absmax(x, n);

    uint8_t q[n], best_q[n];
    float best_d;
    float best_err;
    {
        const float d = max / float(-half);
        const float id = d != 0.f ? 1.0f / d : 0.0f;
        for (int i = 0; i < n; ++i) {
            const int v = int(x[i] * id + (float(half) + 0.5f));
            best_q[i] = uint8_t(v < 0 ? 0 : v > qmax ? qmax : v);
        }
        best_d = f16_round(d);
        best_err = 0.f;
        for (int i = 0; i < n; ++i) {
            const float e = x[i] - float(best_q[i] - half) * best_d;
            best_err += e * e;
        }
    }
    if (max == 0.f || best_err == 0.f) {
        *d_out = f32_to_f16(best_d);
        std::memcpy(q_out, best_q, n);
        return;
    }
    // Level the extreme value lands on: -half .. -half+3 and the top levels.
    const float levels[] = {float(-half), float(-half) + 0.5f, float(-half) + 1.f, float(-half) + 1.5f,
                            float(-half) + 2.f, float(-half) + 3.f, float(half - 1), float(half) - 1.5f,
                            float(half - 2), float(half - 3)};
    for (float level : levels) {
        const float inv = level / max;
        float sxq = 0.f, sqq = 0.f;
        for (int i = 0; i < n; ++i) {
            q[i] = uint8_t(round_clamp(x[i] * inv, -half, half - 1) + half);
            const float v = float(q[i] - half);
            sxq += x[i] * v;
            sqq += v * v;
        }
        if (sqq == 0.f) continue;
        const float d = f16_round(sxq / sqq);
        float err = 0.f;
        for (int i = 0; i < n; ++i) {
            const float e = x[i] - float(q[i] - half) * d;
            err += e * e;
        }
        if (err < best_err) {
            best_err = err;
            best_d = d;
            std::memcpy(best_q, q, n);
        }
    }
    // Nearest level under the chosen d: each term can only shrink.
    if (best_d != 0.f) {
        const float inv = 1.0f / best_d;
        for (int i = 0; i < n; ++i) {
            const int cand = round_clamp(x[i] * inv, -half, half - 1) + half;
            const float e_new = x[i] - float(cand - half) * best_d;
            const float e_old = x[i] - float(best_q[i] - half) * best_d;
            if (e_new * e_new < e_old * e_old) best_q[i] = uint8_t(cand);
        }
    }
    *d_out = f32_to_f16(best_d);
    std::memcpy(q_out, best_q, n);
}

// y = d * q + m, q in [0, qmax]: d = (max - min) / qmax, m = min (ggml's rule).
void quantize_block_minmax(const float* x, int qmax, uint16_t* d_out, uint16_t* m_out, uint8_t* q_out) {
    float min = x[0], max = x[0];
    for (int i = 1; i < 32; ++i) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
    }
    const float d = (max - min) / float(qmax);
    const float id = d != 0.f ? 1.0f / d : 0.0f;
    for (int i = 0; i < 32; ++i) {
        const int v = int((x[i] - min) * id + 0.5f);
        q_out[i] = uint8_t(v < 0 ? 0 : v > qmax ? qmax : v);
    }
    *d_out = f32_to_f16(d);
    *m_out = f32_to_f16(min);
}

void pack_nibbles(const uint8_t q[32], uint8_t qs[16]) {
    for (int j = 0; j < 16; ++j) qs[j] = uint8_t((q[j] & 0xF) | (q[j + 16] & 0xF) << 4);
}

void pack_fifth_bits(const uint8_t q[32], uint8_t qh[4]) {
    uint32_t h = 0;
    for (int j = 0; j < 32; ++j) h |= uint32_t(q[j] >> 4) << j;
    for (int k = 0; k < 4; ++k) qh[k] = uint8_t(h >> (8 * k));
}

// ---- k-quant sub-block fits ---------------------------------------------

// x[0..n) ≈ scale * q - min with q in [0, qmax], scale >= 0, min >= 0 (the
// format subtracts a non-negative min). Candidate grids map [lo, max] onto
// qmax + t levels; each grid's q gets the least-squares (scale, min), scored
// in closed form; the best is refined once by re-quantizing against itself.
struct ScaleMin { float scale, min; };

ScaleMin fit_scale_min(const float* x, int n, int qmax) {
    float lo = x[0], hi = x[0], sx = 0.f, sxx = 0.f;
    for (int i = 0; i < n; ++i) {
        lo = std::fmin(lo, x[i]);
        hi = std::fmax(hi, x[i]);
        sx += x[i];
        sxx += x[i] * x[i];
    }
    if (lo > 0.f) lo = 0.f;
    if (!(hi > lo)) return {0.f, -lo};   // constant (non-positive) or zero
    const float fn = float(n);

    ScaleMin best{(hi - lo) / float(qmax), -lo};
    float best_err = INFINITY;
    // Scores the grid x -> round((x - off) * iscale) and keeps its LS fit.
    auto try_grid = [&](float off, float iscale) {
        float sq = 0.f, sqq = 0.f, sxq = 0.f;
        for (int i = 0; i < n; ++i) {
            const float q = float(round_clamp((x[i] - off) * iscale, 0, qmax));
            sq += q;
            sqq += q * q;
            sxq += x[i] * q;
        }
        const float det = fn * sqq - sq * sq;
        if (!(det > 0.f)) return;
        float s = (fn * sxq - sq * sx) / det;
        float b = (sqq * sx - sq * sxq) / det;   // x ≈ s*q + b
        if (b > 0.f) { b = 0.f; s = sxq / sqq; }
        if (!(s > 0.f)) return;
        const float err = sxx + s * s * sqq + fn * b * b - 2.f * s * sxq - 2.f * b * sx + 2.f * s * b * sq;
        if (err < best_err) { best_err = err; best = {s, -b}; }
    };
    const float range = hi - lo;
    static constexpr float kSteps[] = {0.f, -0.5f, 0.5f, -1.f, 1.f, -0.25f, 0.25f};
    for (float t : kSteps) try_grid(lo, (float(qmax) + t) / range);
    if (best.scale > 0.f) try_grid(-best.min, 1.0f / best.scale);
    return best;
}

// x[0..n) ≈ scale * q with q in [-half, half - 1] (either sign of scale).
// The extreme is mapped to a few levels near -half and half - 1; each grid's
// q gets the LS scale.
float fit_scale_sym(const float* x, int n, int half) {
    const float max = signed_absmax(x, n);
    if (max == 0.f) return 0.f;
    const float h = float(half);
    float best = max / -h, best_score = -1.f;
    auto try_grid = [&](float iscale) {
        float sxq = 0.f, sqq = 0.f;
        for (int i = 0; i < n; ++i) {
            const float q = float(round_clamp(x[i] * iscale, -half, half - 1));
            sxq += x[i] * q;
            sqq += q * q;
        }
        if (!(sqq > 0.f)) return;
        const float score = sxq * sxq / sqq;   // error = sum x^2 - score at the LS scale
        if (score > best_score) { best_score = score; best = sxq / sqq; }
    };
    const float levels[] = {-h, -h + 0.5f, -h + 1.f, -h + 1.5f, -h + 2.f, -h + 3.f, -h - 0.5f,
                            h - 1.f, h - 1.5f, h - 2.f};
    for (float level : levels) try_grid(level / max);
    if (best != 0.f) try_grid(1.0f / best);
    return best;
}

// ---- Q2_K / Q4_K / Q5_K ------------------------------------------------------

// An asymmetric k-quant: nsub sub-blocks of `sub` elements, codes 0..qmax,
// unsigned sub-block scales and mins 0..smax (y = d·sc·q − dmin·m).
struct KAsymShape { int nsub, sub, qmax, smax; };
constexpr KAsymShape kQ2K{16, 16, 3, 15}, kQ4K{8, 32, 15, 63}, kQ5K{8, 32, 31, 63};

// Integer codes of one super-block before packing.
struct KAsymCodes {
    uint16_t d, dmin;
    uint8_t sc[16], m[16];
    uint8_t q[QK_K];
};

// Re-quantizes every element against the scales a dequantizer computes
// (d * sc - in float, as dequantize_row_q4_k does) and returns the error.
float k_asym_assign(const float* x, const KAsymShape& sh, KAsymCodes& c) {
    const float d = f16_to_f32(c.d), dmin = f16_to_f32(c.dmin);
    float err = 0.f;
    for (int j = 0; j < sh.nsub; ++j) {
        const float s = d * float(c.sc[j]), m = dmin * float(c.m[j]);
        const float inv = s > 0.f ? 1.0f / s : 0.f;
        for (int i = sh.sub * j; i < sh.sub * (j + 1); ++i) {
            const int q = s > 0.f ? round_clamp((x[i] + m) * inv, 0, sh.qmax) : 0;
            c.q[i] = uint8_t(q);
            const float e = x[i] - (s * float(q) - m);
            err += e * e;
        }
    }
    return err;
}

void quantize_superblock_asym(const float* x, const KAsymShape& sh, KAsymCodes& c) {
    ScaleMin fit[16];
    float max_scale = 0.f, max_min = 0.f;
    for (int j = 0; j < sh.nsub; ++j) {
        fit[j] = fit_scale_min(x + sh.sub * j, sh.sub, sh.qmax);
        max_scale = std::fmax(max_scale, fit[j].scale);
        max_min = std::fmax(max_min, fit[j].min);
    }
    c.d = f32_to_f16(max_scale / float(sh.smax));
    c.dmin = f32_to_f16(max_min / float(sh.smax));
    const float d = f16_to_f32(c.d), dmin = f16_to_f32(c.dmin);
    for (int j = 0; j < sh.nsub; ++j) {
        c.sc[j] = uint8_t(d > 0.f ? round_clamp(fit[j].scale / d, 0, sh.smax) : 0);
        c.m[j] = uint8_t(dmin > 0.f ? round_clamp(fit[j].min / dmin, 0, sh.smax) : 0);
    }
    float err = k_asym_assign(x, sh, c);

    // Refit (d, dmin) by least squares over the super-block with the integer
    // codes fixed: x ≈ d * a - dmin * b, a = sc*q, b = m.
    double saa = 0, sab = 0, sbb = 0, sxa = 0, sxb = 0;
    for (int i = 0; i < QK_K; ++i) {
        const double a = double(c.sc[i / sh.sub]) * c.q[i], b = c.m[i / sh.sub];
        saa += a * a; sab += a * b; sbb += b * b;
        sxa += x[i] * a; sxb += x[i] * b;
    }
    const double det = saa * sbb - sab * sab;
    if (det > 0) {
        KAsymCodes t = c;
        const double nd = (sxa * sbb - sxb * sab) / det;
        const double nm = (sxa * sab - sxb * saa) / det;   // = dmin
        if (nd > 0 && nm >= 0) {
            t.d = f32_to_f16(float(nd));
            t.dmin = f32_to_f16(float(nm));
            if (k_asym_assign(x, sh, t) < err) c = t;
        }
    }
}

// ---- Q3_K / Q6_K -------------------------------------------------------------

// A symmetric k-quant: 16 sub-blocks of 16, codes -half..half-1, signed
// sub-block scales -shalf..shalf-1 (y = (d·sc)·q).
struct KSymShape { int half, shalf; };
constexpr KSymShape kQ3K{4, 32}, kQ6K{32, 128};

struct KSymCodes {
    uint16_t d;
    int8_t sc[16];
    int8_t q[QK_K];
};

float k_sym_assign(const float* x, const KSymShape& sh, KSymCodes& c) {
    const float d = f16_to_f32(c.d);
    float err = 0.f;
    for (int j = 0; j < 16; ++j) {
        const float s = d * float(c.sc[j]);   // the dequantizer's (d * sc)
        const float inv = s != 0.f ? 1.0f / s : 0.f;
        for (int i = 16 * j; i < 16 * j + 16; ++i) {
            const int q = s != 0.f ? round_clamp(x[i] * inv, -sh.half, sh.half - 1) : 0;
            c.q[i] = int8_t(q);
            const float e = x[i] - s * float(q);
            err += e * e;
        }
    }
    return err;
}

void quantize_superblock_sym(const float* x, const KSymShape& sh, KSymCodes& c) {
    float scale[16], max = 0.f, amax = 0.f;
    for (int j = 0; j < 16; ++j) {
        scale[j] = fit_scale_sym(x + 16 * j, 16, sh.half);
        if (std::fabs(scale[j]) > amax) { amax = std::fabs(scale[j]); max = scale[j]; }
    }
    // The largest scale lands on -shalf, so the others span [-shalf, shalf];
    // a +shalf clamps to shalf - 1 (a 0.8% loss on that one sub-block for
    // Q6_K, 3% for Q3_K).
    c.d = f32_to_f16(max != 0.f ? max / -float(sh.shalf) : 0.f);   // an all-zero block stores +0
    const float d = f16_to_f32(c.d);
    for (int j = 0; j < 16; ++j)
        c.sc[j] = int8_t(d != 0.f ? round_clamp(scale[j] / d, -sh.shalf, sh.shalf - 1) : 0);
    const float err = k_sym_assign(x, sh, c);

    double saa = 0, sxa = 0;
    for (int i = 0; i < QK_K; ++i) {
        const double a = double(c.sc[i / 16]) * c.q[i];
        saa += a * a;
        sxa += x[i] * a;
    }
    if (saa > 0) {
        KSymCodes t = c;
        t.d = f32_to_f16(float(sxa / saa));
        if (k_sym_assign(x, sh, t) < err) c = t;
    }
}

}  // namespace

// ---- row entry points -------------------------------------------------------

void quantize_row_f32(const float* src, void* dst, int64_t n) {
    std::memcpy(dst, src, size_t(n) * sizeof(float));
}

void quantize_row_f16(const float* src, void* dst, int64_t n) {
    auto* p = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_f16(src[i]);
        std::memcpy(p + 2 * i, &h, 2);
    }
}

void quantize_row_bf16(const float* src, void* dst, int64_t n) {
    auto* p = static_cast<uint8_t*>(dst);
    for (int64_t i = 0; i < n; ++i) {
        const uint16_t h = f32_to_bf16(src[i]);
        std::memcpy(p + 2 * i, &h, 2);
    }
}

void quantize_row_q4_0(const float* src, void* dst, int64_t n) {
    auto* y = static_cast<BlockQ4_0*>(dst);
    for (int64_t b = 0; b < n / 32; ++b, src += 32) {
        uint8_t q[32];
        quantize_block_offset(src, 8, &y[b].d, q);
        pack_nibbles(q, y[b].qs);
    }
}

void quantize_row_q5_0(const float* src, void* dst, int64_t n) {
    auto* y = static_cast<BlockQ5_0*>(dst);
    for (int64_t b = 0; b < n / 32; ++b, src += 32) {
        uint8_t q[32];
        quantize_block_offset(src, 16, &y[b].d, q);
        pack_nibbles(q, y[b].qs);
        pack_fifth_bits(q, y[b].qh);
    }
}

void quantize_row_q4_1(const float* src, void* dst, int64_t n) {
    auto* y = static_cast<BlockQ4_1*>(dst);
    for (int64_t b = 0; b < n / 32; ++b, src += 32) {
        uint8_t q[32];
        quantize_block_minmax(src, 15, &y[b].d, &y[b].m, q);
        pack_nibbles(q, y[b].qs);
    }
}

void quantize_row_q5_1(const float* src, void* dst, int64_t n) {
    auto* y = static_cast<BlockQ5_1*>(dst);
    for (int64_t b = 0; b < n / 32; ++b, src += 32) {
        uint8_t q[32];
        quantize_block_minmax(src, 31, &y[b].d, &y[b].m, q);
        pack_nibbles(q, y[b].qs);
        pack_fifth_bits(q, y[b].qh);
    }
}

// d = amax / 127, q = roundf(x / d) (half away from zero), as ggml and gguf-py.
void quantize_row_q8_0(const float* src, void* dst, int64_t n) {
    auto* y = static_cast<BlockQ8_0*>(dst);
    for (int64_t b = 0; b < n / 32; ++b, src += 32) {
        float amax = 0.f;
        for (int i = 0; i < 32; ++i) amax = std::fmax(amax, std::fabs(src[i]));
        const float d = amax / 127.f;
        const float id = d != 0.f ? 1.0f / d : 0.0f;
        y[b].d = f32_to_f16(d);
        for (int i = 0; i < 32; ++i) y[b].qs[i] = int8_t(std::round(src[i] * id));
    }
}

void quantize_row_q4_k(const float* src, void* dst, int64_t n) {
    auto* y = static_cast<BlockQ4_K*>(dst);
    KAsymCodes c;
    for (int64_t b = 0; b < n / QK_K; ++b, src += QK_K) {
        quantize_superblock_asym(src, kQ4K, c);
        y[b].d = c.d;
        y[b].dmin = c.dmin;
        k_scale_min_set(c.sc, c.m, y[b].scales);
        for (int ch = 0; ch < 4; ++ch)
            for (int l = 0; l < 32; ++l)
                y[b].qs[32 * ch + l] = uint8_t(c.q[64 * ch + l] | c.q[64 * ch + 32 + l] << 4);
    }
}

void quantize_row_q5_k(const float* src, void* dst, int64_t n) {
    auto* y = static_cast<BlockQ5_K*>(dst);
    KAsymCodes c;
    for (int64_t b = 0; b < n / QK_K; ++b, src += QK_K) {
        quantize_superblock_asym(src, kQ5K, c);
        y[b].d = c.d;
        y[b].dmin = c.dmin;
        k_scale_min_set(c.sc, c.m, y[b].scales);
        std::memset(y[b].qh, 0, sizeof y[b].qh);
        for (int ch = 0; ch < 4; ++ch) {
            for (int l = 0; l < 32; ++l) {
                const uint8_t lo = c.q[64 * ch + l], hi = c.q[64 * ch + 32 + l];
                y[b].qs[32 * ch + l] = uint8_t((lo & 0xF) | (hi & 0xF) << 4);
                y[b].qh[l] |= uint8_t((lo >> 4) << (2 * ch) | (hi >> 4) << (2 * ch + 1));
            }
        }
    }
}

void quantize_row_q6_k(const float* src, void* dst, int64_t n) {
    auto* y = static_cast<BlockQ6_K*>(dst);
    KSymCodes c;
    for (int64_t b = 0; b < n / QK_K; ++b, src += QK_K) {
        quantize_superblock_sym(src, kQ6K, c);
        y[b].d = c.d;
        std::memcpy(y[b].scales, c.sc, 16);
        for (int h = 0; h < 2; ++h) {
            const int8_t* q = c.q + 128 * h;
            uint8_t* ql = y[b].ql + 64 * h;
            uint8_t* qh = y[b].qh + 32 * h;
            for (int l = 0; l < 32; ++l) {
                const int q1 = q[l] + 32, q2 = q[l + 32] + 32, q3 = q[l + 64] + 32, q4 = q[l + 96] + 32;
                ql[l] = uint8_t((q1 & 0xF) | (q3 & 0xF) << 4);
                ql[l + 32] = uint8_t((q2 & 0xF) | (q4 & 0xF) << 4);
                qh[l] = uint8_t((q1 >> 4) | (q2 >> 4) << 2 | (q3 >> 4) << 4 | (q4 >> 4) << 6);
            }
        }
    }
}

// Q2_K: sub-block j (elements 16j..16j+16) keeps scale | min << 4 in
// scales[j]; element 128h + 32k + i is bits 2k..2k+1 of qs[32h + i].
void quantize_row_q2_k(const float* src, void* dst, int64_t n) {
    auto* y = static_cast<BlockQ2_K*>(dst);
    KAsymCodes c;
    for (int64_t b = 0; b < n / QK_K; ++b, src += QK_K) {
        quantize_superblock_asym(src, kQ2K, c);
        y[b].d = c.d;
        y[b].dmin = c.dmin;
        for (int j = 0; j < 16; ++j) y[b].scales[j] = uint8_t(c.sc[j] | c.m[j] << 4);
        std::memset(y[b].qs, 0, sizeof y[b].qs);
        for (int i = 0; i < QK_K; ++i) y[b].qs[32 * (i / 128) + i % 32] |= uint8_t(c.q[i] << (2 * ((i % 128) / 32)));
    }
}

// Q3_K: code u = q + 4 (0..7); its low 2 bits as Q2_K's, its bit 2 at bit
// 4h + k of hmask[i] (element 128h + 32k + i). Scale j as 6 bits sc + 32:
// low nibble in scales[j] (j < 8) or the high nibble of scales[j - 8], top 2
// bits at bits 2·(j / 4) of scales[8 + j % 4].
void quantize_row_q3_k(const float* src, void* dst, int64_t n) {
    auto* y = static_cast<BlockQ3_K*>(dst);
    KSymCodes c;
    for (int64_t b = 0; b < n / QK_K; ++b, src += QK_K) {
        quantize_superblock_sym(src, kQ3K, c);
        y[b].d = c.d;
        std::memset(y[b].scales, 0, sizeof y[b].scales);
        for (int j = 0; j < 16; ++j) {
            const int u = c.sc[j] + 32;
            y[b].scales[j % 8] |= uint8_t((u & 0xF) << (4 * (j / 8)));
            y[b].scales[8 + j % 4] |= uint8_t((u >> 4) << (2 * (j / 4)));
        }
        std::memset(y[b].qs, 0, sizeof y[b].qs);
        std::memset(y[b].hmask, 0, sizeof y[b].hmask);
        for (int i = 0; i < QK_K; ++i) {
            const int u = c.q[i] + 4, h = i / 128, k = (i % 128) / 32, l = i % 32;
            y[b].qs[32 * h + l] |= uint8_t((u & 3) << (2 * k));
            y[b].hmask[l] |= uint8_t((u >> 2) << (4 * h + k));
        }
    }
}

// Q8_K (the activation format of k-quant dot products): d = max / -128 in f32,
// q = nearest(x / d) capped at 127, bsums = sums of 16 q.
void quantize_row_q8_k(const float* src, void* dst, int64_t n) {
    auto* y = static_cast<BlockQ8_K*>(dst);
    for (int64_t b = 0; b < n / QK_K; ++b, src += QK_K) {
        const float max = signed_absmax(src, QK_K);
        std::memset(&y[b], 0, sizeof y[b]);
        if (max == 0.f) continue;
        const float iscale = -128.f / max;
        for (int i = 0; i < QK_K; ++i) y[b].qs[i] = int8_t(round_clamp(iscale * src[i], -128, 127));
        for (int j = 0; j < 16; ++j) {
            int sum = 0;
            for (int i = 0; i < 16; ++i) sum += y[b].qs[16 * j + i];
            y[b].bsums[j] = int16_t(sum);
        }
        y[b].d = 1.0f / iscale;
    }
}

}  // namespace ptxlm::gguf::detail
