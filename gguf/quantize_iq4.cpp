// Quantizers of the non-linear 4-bit types (IQ4_NL, IQ4_XS; layouts in
// quant.h). Ours, not ggml's: deterministic, candidates in a fixed order, the
// first best kept.
//
// A block's codes index the 16-value table kIQ4Values (-127 .. 113, denser
// near 0), y = scale · v. For a scale s the best code of each element is the
// table value nearest x / s. The search maps the block's extreme value onto
// levels near either end of the table (-127 or 113), takes the nearest codes
// under each such grid, and scores the grid's least-squares scale
// (Σx·v / Σv²) in closed form. IQ4_NL stores that scale as f16 and re-picks
// every code against the stored value. IQ4_XS fits the eight sub-block scales
// so, quantizes them to 6 bits against a super-block d (several d scored),
// re-picks the codes against d·(ls − 32) as the dequantizer computes it, then
// refits d by least squares over the super-block and keeps it when that
// lowers the error.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <iterator>

#include "gguf/quant.h"
#include "gguf/quant_internal.h"

namespace ptxlm::gguf::detail {
namespace {

// The index of the table value nearest v (the lower one on a tie; 0 for NaN).
int iq4_nearest(float v) {
    static constexpr float kMid[15] = {
        -115.5f, -93.5f, -74.f, -57.f, -42.f, -28.5f, -16.f, -4.5f, 7.f, 19.f, 31.5f, 45.5f, 61.f, 79.f, 101.f};
    int idx = 0;
    for (float m : kMid) idx += v > m;
    return idx;
}

// Codes for x[0..n) under scale s (all 8, the code of +1, when s is 0) and
// the squared error.
float iq4_assign(const float* x, int n, float s, uint8_t* q) {
    const float inv = s != 0.f ? 1.0f / s : 0.f;
    float err = 0.f;
    for (int i = 0; i < n; ++i) {
        q[i] = uint8_t(s != 0.f ? iq4_nearest(x[i] * inv) : 8);
        const float e = x[i] - s * float(kIQ4Values[q[i]]);
        err += e * e;
    }
    return err;
}

// The best scale for x[0..n) (0 for an all-zero block), before any rounding.
float iq4_fit_scale(const float* x, int n) {
    float max = 0.f, amax = 0.f;
    for (int i = 0; i < n; ++i)
        if (std::fabs(x[i]) > amax) { amax = std::fabs(x[i]); max = x[i]; }
    if (amax == 0.f) return 0.f;
    float best = max / -127.f, best_score = -1.f;
    for (int end = 0; end < 2; ++end) {
        for (int t = -6; t <= 6; ++t) {
            const float iscale = (end == 0 ? float(-127 + t) : float(113 + t)) / max;
            float sxv = 0.f, svv = 0.f;
            for (int i = 0; i < n; ++i) {
                const float v = float(kIQ4Values[iq4_nearest(x[i] * iscale)]);
                sxv += x[i] * v;
                svv += v * v;
            }
            if (!(svv > 0.f)) continue;
            const float score = sxv * sxv / svv;   // error = Σx² − score at the LS scale
            if (score > best_score) { best_score = score; best = sxv / svv; }
        }
    }
    return best;
}

void pack_iq4_nibbles(const uint8_t q[32], uint8_t qs[16]) {
    for (int j = 0; j < 16; ++j) qs[j] = uint8_t(q[j] | q[j + 16] << 4);
}

// One IQ4_XS super-block: d, the eight 6-bit scales ls (0..63) and the codes.
struct XsCodes {
    uint16_t d;
    uint8_t ls[8];
    uint8_t q[QK_K];
};

float xs_assign(const float* x, XsCodes& c) {
    const float d = f16_to_f32(c.d);
    float err = 0.f;
    for (int j = 0; j < 8; ++j) err += iq4_assign(x + 32 * j, 32, d * float(int(c.ls[j]) - 32), c.q + 32 * j);
    return err;
}

void quantize_superblock_xs(const float* x, XsCodes& c) {
    float scale[8], max = 0.f, amax = 0.f;
    for (int j = 0; j < 8; ++j) {
        scale[j] = iq4_fit_scale(x + 32 * j, 32);
        if (std::fabs(scale[j]) > amax) { amax = std::fabs(scale[j]); max = scale[j]; }
    }
    // The super-block d: the largest scale onto ls - 32 = k for k from -32
    // (the widest range) towards -16, and from 31 towards 16 (the other
    // sign); each rounded d scored with the codes it gives. Small weights
    // give a subnormal f16 d, coarse by itself: another k then fits better.
    float err = INFINITY;
    c.d = 0;
    std::fill(std::begin(c.ls), std::end(c.ls), uint8_t(32));
    if (max == 0.f) err = xs_assign(x, c);
    for (int i = 0; i < 34 && max != 0.f; ++i) {
        const int k = i < 17 ? -32 + i : 31 - (i - 17);
        XsCodes t;
        t.d = f32_to_f16(max / float(k));
        const float d = f16_to_f32(t.d);
        if (d == 0.f) continue;
        for (int j = 0; j < 8; ++j) t.ls[j] = uint8_t(round_clamp(scale[j] / d, -32, 31) + 32);
        const float e = xs_assign(x, t);
        if (e < err) {
            err = e;
            c = t;
        }
    }
    if (err == INFINITY) err = xs_assign(x, c);   // every d underflowed: all zero

    double saa = 0, sxa = 0;
    for (int i = 0; i < QK_K; ++i) {
        const double a = double(int(c.ls[i / 32]) - 32) * kIQ4Values[c.q[i]];
        saa += a * a;
        sxa += x[i] * a;
    }
    if (saa > 0) {
        XsCodes t = c;
        t.d = f32_to_f16(float(sxa / saa));
        if (xs_assign(x, t) < err) c = t;
    }
}

}  // namespace

void quantize_row_iq4_nl(const float* src, void* dst, int64_t n) {
    auto* y = static_cast<BlockIQ4_NL*>(dst);
    for (int64_t b = 0; b < n / 32; ++b, src += 32) {
        uint8_t q[32];
        const float d = f16_round(iq4_fit_scale(src, 32));
        iq4_assign(src, 32, d, q);
        y[b].d = f32_to_f16(d);
        pack_iq4_nibbles(q, y[b].qs);
    }
}

void quantize_row_iq4_xs(const float* src, void* dst, int64_t n) {
    auto* y = static_cast<BlockIQ4_XS*>(dst);
    XsCodes c;
    for (int64_t b = 0; b < n / QK_K; ++b, src += QK_K) {
        quantize_superblock_xs(src, c);
        y[b].d = c.d;
        y[b].scales_h = 0;
        std::memset(y[b].scales_l, 0, sizeof y[b].scales_l);
        for (int j = 0; j < 8; ++j) {
            y[b].scales_l[j / 2] |= uint8_t((c.ls[j] & 0xF) << (4 * (j % 2)));
            y[b].scales_h = uint16_t(y[b].scales_h | (c.ls[j] >> 4) << (2 * j));
            pack_iq4_nibbles(c.q + 32 * j, y[b].qs + 16 * j);
        }
    }
}

}  // namespace ptxlm::gguf::detail
