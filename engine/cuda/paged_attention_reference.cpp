#include "engine/cuda/paged_attention_reference.h"

#include <algorithm>
#include <cmath>
#include <limits>

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

}  // namespace ptxlm::cuda
