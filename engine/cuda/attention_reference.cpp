#include "engine/cuda/attention_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

#include "engine/model.h"
#include "gguf/f16.h"

namespace ptxlm::cuda {

AttentionExpected attention_reference(const kernels::AttentionShape& s, const AttentionInputs& in,
                                      uint32_t window_override, uint32_t pos_override) {
    const uint32_t hd = s.head_dim, kv = s.n_head_kv * hd, group = s.n_head / s.n_head_kv, pos = in.pos;
    // Bias, norm and rotation of `heads` heads of x, as engine/cpu does them.
    auto prep = [&](std::vector<float> x, const std::vector<float>& b, const std::vector<float>& nw, uint32_t heads) {
        if (s.bias)
            for (size_t i = 0; i < x.size(); ++i) x[i] += b[i];
        for (uint32_t h = 0; h < heads; ++h) {
            float* p = &x[size_t(h) * hd];
            if (s.qk_norm) {
                double ss = 0;
                for (uint32_t i = 0; i < hd; ++i) ss += double(p[i]) * p[i];
                const float scale = 1.0f / std::sqrt(float(ss / hd) + s.eps);
                for (uint32_t i = 0; i < hd; ++i) p[i] = (p[i] * scale) * nw[i];
            }
            // The first n_rot dims; the rest pass through (partial rotary).
            const uint32_t rp = s.rot() / 2;
            for (uint32_t i = 0; i < rp; ++i) {
                const float c = in.rope[(size_t(pos) * rp + i) * 2], sn = in.rope[(size_t(pos) * rp + i) * 2 + 1];
                const uint32_t a = s.neox ? i : 2 * i, b2 = s.neox ? i + rp : 2 * i + 1;
                const float x0 = p[a], x1 = p[b2];
                p[a] = x0 * c - x1 * sn;
                p[b2] = x0 * sn + x1 * c;
            }
        }
        return x;
    };
    const std::vector<float> q = prep(in.q, in.bq, in.q_norm, s.n_head), k = prep(in.k, in.bk, in.k_norm, s.n_head_kv);
    const double rel = s.qk_norm ? 2e-6 : 0.0;   // f32 vs double sum of squares; else bit-equal
    // Mistral 3's temperature on q (the kernel's lg2.approx and two f32
    // roundings: within 1e-6 of it, relative).
    const double temp = attn_temperature(pos, s.temp_scale, s.temp_floor);
    const double temp_rel = s.temp_scale != 0 ? 1e-6 : 0.0;
    const double scale = s.scale * temp;
    AttentionExpected e;
    std::vector<float> kc(size_t(pos + 1) * kv), vc(kc.size());
    for (size_t i = 0; i < kc.size(); ++i) {
        kc[i] = f16_to_f32(in.k_cache[i]);
        vc[i] = f16_to_f32(in.v_cache[i]);
    }
    for (uint32_t i = 0; i < kv; ++i) {
        const float kr = f16_to_f32(f32_to_f16(k[i]));
        const float vr = f16_to_f32(f32_to_f16(in.v[i] + (s.bias ? in.bv[i] : 0.0f)));
        kc[size_t(pos) * kv + i] = in.own_k.empty() ? kr : f16_to_f32(in.own_k[i]);
        vc[size_t(pos) * kv + i] = vr;
        // With the norm, K may round to the neighbouring f16.
        e.k_row.push_back({kr, 4 * rel * (1 + std::fabs(kr)) + (rel ? 1e-3 * std::fabs(kr) : 0.0)});
        e.v_row.push_back({vr, 0.0});
    }
    const uint32_t window = window_override != ~0u ? window_override : s.window;
    const uint32_t last = pos_override != ~0u ? pos_override : pos;
    const uint32_t p0 = window && last + 1 > window ? last + 1 - window : 0;
    for (uint32_t h = 0; h < s.n_head; ++h) {
        const size_t off = size_t(h / group) * hd;
        std::vector<double> w;
        // The norm's relative error in q and k (rel each) moves score j by up
        // to 2·rel·Σ|q·k|·scale (the token's own K row is the device's when
        // given: an f16 rounding it flipped is its check's, not this one's);
        // the softmax turns a shift of every score by at most e into a
        // relative change of each weight of at most 2e.
        double mx = -std::numeric_limits<double>::infinity(), sum = 0, score_err = 0;
        for (uint32_t j = p0; j <= last; ++j) {
            double dot = 0, abs_dot = 0;
            for (uint32_t i = 0; i < hd; ++i) {
                const double t = double(q[h * hd + i]) * kc[j * kv + off + i];
                dot += t;
                abs_dot += std::fabs(t);
            }
            w.push_back(dot * scale);
            mx = std::max(mx, w.back());
            score_err = std::max(score_err, (2 * rel + temp_rel) * abs_dot * scale);
        }
        for (double& x : w) sum += (x = std::exp(x - mx));
        for (uint32_t i = 0; i < hd; ++i) {
            double ref = 0, mag = 0;
            for (uint32_t j = p0; j <= last; ++j) {
                const double vv = vc[j * kv + off + i];
                ref += w[j - p0] / sum * vv;
                mag += w[j - p0] / sum * std::fabs(vv);
            }
            e.out.push_back({ref, (2e-6 + 2 * score_err) * mag + 1e-7});
        }
    }
    return e;
}

}  // namespace ptxlm::cuda
