#include "engine/cuda/paged_attention_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <utility>

#include "gguf/f16.h"

namespace ptxlm::cuda {

std::vector<Checked> paged_attention_reference(const kernels::PagedAttentionShape& s, const PagedAttentionInputs& in) {
    const uint32_t hd = s.head_dim, G = s.group(), ps = s.page_size;
    const double u = std::ldexp(1.0, -24), e2 = std::ldexp(1.0, -22), log2e = 1.4426950408889634;
    const uint32_t tile = kernels::paged_attention_tile(s), unroll = kernels::paged_attention_unroll(s);
    const uint32_t warps = kernels::kPagedAttentionWarps;
    std::vector<Checked> e(size_t(s.tokens) * s.n_head * hd, Checked{0, -1});
    for (uint32_t t = 0; t < s.tokens; ++t) {
        const uint32_t pos = in.pos[t];
        if (pos == ~0u) continue;
        const uint32_t* table = &in.tables[size_t(in.row[t]) * s.max_pages];
        const uint32_t p0 = s.window && pos + 1 > s.window ? pos + 1 - s.window : 0;
        const uint32_t n = pos + 1 - p0;
        // The kernel's cut of [p0, pos]: chunks of whole tiles, at most `splits`.
        const uint32_t a0 = p0 / tile * tile, span = pos + 1 - a0;
        const uint32_t chunk = ((span + s.splits - 1) / s.splits + tile - 1) / tile * tile;
        const uint32_t splits = (span + chunk - 1) / chunk;
        const uint32_t warp_tiles = (chunk / tile + warps - 1) / warps;
        const double terms = double(warp_tiles * unroll + 2 + warps + splits);
        for (uint32_t h = 0; h < s.n_head; ++h) {
            const float* qh = &in.q[(size_t(t) * s.n_head + h) * hd];
            auto row = [&](const std::vector<uint16_t>& pool, uint32_t j) {
                return &pool[((size_t(table[j / ps]) * s.n_head_kv + h / G) * ps + j % ps) * hd];
            };
            std::vector<double> w(n);
            double mx = -std::numeric_limits<double>::infinity(), delta = 0;
            for (uint32_t j = p0; j <= pos; ++j) {
                const uint16_t* kr = row(in.k_pool, j);
                double dot = 0, mag = 0;
                for (uint32_t i = 0; i < hd; ++i) {
                    const double x = double(qh[i]) * f16_to_f32(kr[i]);
                    dot += x;
                    mag += std::fabs(x);
                }
                w[j - p0] = dot;
                mx = std::max(mx, dot);
                delta = std::max(delta, (hd + 3) * u * log2e * mag);
            }
            double sum = 0;
            for (double& x : w) sum += (x = std::exp(x - mx));
            const double eps = std::log(2.0) * delta + (warp_tiles + 4 + (splits + 15) / 16) * e2;
            for (uint32_t i = 0; i < hd; ++i) {
                double ref = 0, mag = 0;
                for (uint32_t j = p0; j <= pos; ++j) {
                    const double vv = f16_to_f32(row(in.v_pool, j)[i]);
                    ref += w[j - p0] / sum * vv;
                    mag += w[j - p0] / sum * std::fabs(vv);
                }
                e[(size_t(t) * s.n_head + h) * hd + i] = {ref, 2 * (2 * eps + (2 * terms + 6) * u) * mag};
            }
        }
    }
    return e;
}

PagedRopeExpected paged_rope_reference(const kernels::PagedRopeShape& s, const PagedRopeInputs& in) {
    const uint32_t hd = s.head_dim, half = hd / 2, rp = s.rot() / 2, T = s.tokens, nkv = s.n_head_kv;
    PagedRopeExpected e;
    e.q.assign(size_t(T) * s.n_head * hd, Checked{0, -1});
    e.k_bits.assign(size_t(T) * nkv * hd, 0);
    e.v_bits = e.k_bits;
    e.at.assign(T, ~size_t(0));
    // Pair j of a head: (j, j + rp) under NEOX when rotated (j < rp), else (2j, 2j + 1).
    auto pair = [&](uint32_t j) {
        return j < rp && s.neox ? std::pair{j, j + rp} : std::pair{2 * j, 2 * j + 1};
    };
    // One head of x (hd values from `x`, bias `b` or null, norm weights `w`
    // or null) at position pos, rotated.
    auto head = [&](const float* x, const float* b, const float* w, uint32_t pos, std::vector<float>& y) {
        std::vector<float> v(x, x + hd);
        if (b)
            for (uint32_t i = 0; i < hd; ++i) v[i] = v[i] + b[i];
        if (w) {
            float total = 0;
            for (uint32_t c = 0; c < (half + 31) / 32; ++c) {
                float lanes[32];
                for (uint32_t l = 0; l < 32; ++l) {
                    const uint32_t j = 32 * c + l;
                    if (j >= half) {
                        lanes[l] = 0;
                        continue;
                    }
                    const auto [a, bb] = pair(j);
                    lanes[l] = std::fma(v[bb], v[bb], v[a] * v[a]);
                }
                for (uint32_t m = 16; m >= 1; m /= 2) {
                    float next[32];
                    for (uint32_t l = 0; l < 32; ++l) next[l] = lanes[l] + lanes[l ^ m];
                    std::copy(next, next + 32, lanes);
                }
                total = c == 0 ? lanes[0] : total + lanes[0];
            }
            const float root = std::sqrt(total / float(hd) + s.eps);
            const float scale = 1.0f / root;
            for (uint32_t i = 0; i < hd; ++i) v[i] = (v[i] * scale) * w[i];
        }
        y = v;
        for (uint32_t j = 0; j < rp; ++j) {
            const auto [a, bb] = pair(j);
            const float c = in.rope[(size_t(pos) * rp + j) * 2], sn = in.rope[(size_t(pos) * rp + j) * 2 + 1];
            const float x0 = v[a], x1 = v[bb];
            const float p0 = x0 * c, p1 = x1 * sn, p2 = x0 * sn, p3 = x1 * c;
            y[a] = p0 - p1;
            y[bb] = p2 + p3;
        }
    };
    std::vector<float> y;
    for (uint32_t t = 0; t < T; ++t) {
        const uint32_t pos = in.pos[t];
        if (pos == ~0u) continue;
        float scl = s.scale;
        double rel = 0;
        if (s.temp_scale != 0) {
            const float steps = float(pos / s.temp_floor + 1);
            const float temp = std::fma(std::log2(steps), float(s.temp_scale * 0.6931471805599453), 1.0f);
            scl = temp * s.scale;
            rel = std::fabs(s.temp_scale) * std::ldexp(1.0, -21) + std::ldexp(1.0, -23);
        }
        for (uint32_t h = 0; h < s.n_head; ++h) {
            const size_t off = (size_t(t) * s.n_head + h) * hd;
            head(&in.q[off], s.bias ? &in.bq[size_t(h) * hd] : nullptr, s.qk_norm ? in.q_norm.data() : nullptr, pos, y);
            for (uint32_t i = 0; i < hd; ++i) {
                const float q = y[i] * scl;
                e.q[off + i] = {q, rel * std::fabs(q)};
            }
        }
        if (s.q_only) continue;   // no K/V: the pools keep every element
        const uint32_t page = in.tables[size_t(in.row[t]) * s.max_pages + pos / s.page_size];
        e.at[t] = (size_t(page) * nkv * s.page_size + pos % s.page_size) * hd;
        for (uint32_t g = 0; g < nkv; ++g) {
            const size_t off = (size_t(t) * nkv + g) * hd;
            head(&in.k[off], s.bias ? &in.bk[size_t(g) * hd] : nullptr, s.qk_norm ? in.k_norm.data() : nullptr, pos, y);
            std::vector<float> v(hd);
            for (uint32_t i = 0; i < hd; ++i) v[i] = s.bias ? in.v[off + i] + in.bv[size_t(g) * hd + i] : in.v[off + i];
            if (s.v_norm) {   // lane l's elements l + 32i: a square, then FMAs; the butterfly; the root
                float lanes[32];
                for (uint32_t l = 0; l < 32; ++l) {
                    lanes[l] = v[l] * v[l];
                    for (uint32_t i = l + 32; i < hd; i += 32) lanes[l] = std::fma(v[i], v[i], lanes[l]);
                }
                for (uint32_t m = 16; m >= 1; m /= 2) {
                    float next[32];
                    for (uint32_t l = 0; l < 32; ++l) next[l] = lanes[l] + lanes[l ^ m];
                    std::copy(next, next + 32, lanes);
                }
                const float scale = 1.0f / std::sqrt(lanes[0] / float(hd) + s.eps);
                for (float& x : v) x = x * scale;
            }
            for (uint32_t i = 0; i < hd; ++i) {
                e.k_bits[off + i] = f32_to_f16(y[i]);
                e.v_bits[off + i] = f32_to_f16(v[i]);
            }
        }
    }
    return e;
}

PagedRopePools paged_rope_check_pools(const kernels::PagedRopeShape& s, const PagedRopeExpected& e,
                                      const std::vector<uint16_t>& k_pool, const std::vector<uint16_t>& v_pool,
                                      uint16_t sentinel) {
    const uint32_t hd = s.head_dim, nkv = s.n_head_kv;
    const size_t pool = k_pool.size();
    std::vector<int64_t> owner(pool, -1);   // index into e.k_bits / e.v_bits
    for (size_t t = 0; t < e.at.size(); ++t) {
        if (e.at[t] == ~size_t(0)) continue;
        for (uint32_t g = 0; g < nkv; ++g)
            for (uint32_t i = 0; i < hd; ++i)
                owner[e.at[t] + size_t(g) * s.page_size * hd + i] = (int64_t(t) * nkv + g) * hd + i;
    }
    PagedRopePools r;
    for (size_t i = 0; i < pool; ++i) {
        if (owner[i] < 0) {
            r.stray += k_pool[i] != sentinel || v_pool[i] != sentinel;
            continue;
        }
        const size_t o = size_t(owner[i]);
        if ((k_pool[i] != e.k_bits[o] || v_pool[i] != e.v_bits[o]) && r.kv_bad++ < PagedRopePools::kFirstBad)
            r.first_bad.emplace_back(i, o);
    }
    return r;
}

}  // namespace ptxlm::cuda
