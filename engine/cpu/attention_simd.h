// The two inner loops of the quantized path's attention (attention.cpp), as
// templates over a vector type, included by attention_avx2.cpp and
// attention_avx512.cpp, each compiled with its ISA flags. Everything here
// sits in an anonymous namespace: each file keeps its own instantiations.
//
// scores: s[h][j] = scale · q_h · K[j] for the group's heads. Each
// position's products accumulate lane-wise in one vector, then one
// transposing reduction turns a block's vectors into its scores: tiles of
// up to T::kTileHeads heads (AVX2 3, AVX-512 4) over 4 positions at a time
// (attn_scores_tile); AVX-512 takes one head on f32 K over 16 positions
// (attn_scores_per_head).
// accumulate: out_h += Σ_j s[h][j] · V[j], with the outputs of up to four
// heads held in registers over a 4-vector slice of the head dimension.
#pragma once

#include <cstdint>

#include "engine/cpu/attention.h"

namespace ptxlm::cpu {
namespace {

// A cache row slice as W floats (F16: the cache is f16, else f32).
template <class T, bool F16> inline typename T::V load_row(const uint8_t* cache, uint64_t i) {
    if constexpr (F16) return T::load_h(reinterpret_cast<const uint16_t*>(cache) + i);
    else return T::load(reinterpret_cast<const float*>(cache) + i);
}

// The cache index of position j's slice.
inline uint64_t kv_at(const AttnChunk& a, uint32_t j) { return kv_row(a.pages, a.page_shift, j) * a.head_dim + a.offset; }

// fn(at) with at(jj) the cache index of the block's position j + jj (jj <
// N; a short block, m < N, repeats its last position): a block inside one
// page (the cache keeps a KV head's rows together, AttentionArgs) is
// addressed from one base.
template <int N, class Fn>
inline void with_block(const AttnChunk& a, uint32_t j, uint32_t m, const Fn& fn) {
    if (m == uint32_t(N) && (!a.pages || j >> a.page_shift == (j + N - 1) >> a.page_shift)) {
        const uint64_t base = kv_at(a, j);
        return fn([&](int jj) { return base + uint64_t(jj) * a.head_dim; });
    }
    uint64_t base[N];
    for (int jj = 0; jj < N; ++jj) base[jj] = kv_at(a, j + (uint32_t(jj) < m ? uint32_t(jj) : m - 1));
    fn([&](int jj) { return base[jj]; });
}

// Each head's scores, W positions at a time: W positions always (a short
// last block repeats its last row), so the accumulators stay in registers;
// only m scores are stored. AVX-512 takes it for one head on f32 K: W rows
// in flight where a tile has 4 (attn_scores).
template <class T, bool F16>
inline void attn_scores_per_head(const AttnChunk& a) {
    using V = typename T::V;
    constexpr int W = T::W;
    const uint32_t hd = a.head_dim, count = a.j1 - a.j0;
    for (uint32_t h = 0; h < a.group; ++h) {
        const float* q = a.q + uint64_t(h) * hd;
        for (uint32_t jb = 0; jb < count; jb += W) {
            const uint32_t m = count - jb < uint32_t(W) ? count - jb : uint32_t(W), j = a.j0 + jb;
            V acc[W];
            for (int jj = 0; jj < W; ++jj) acc[jj] = T::zero();
            const auto block = [&](auto at) {
                for (uint32_t i = 0; i < hd; i += W) {
                    const V qv = T::load(q + i);
                    for (int jj = 0; jj < W; ++jj) acc[jj] = T::fmadd(qv, load_row<T, F16>(a.k_cache, at(jj) + i), acc[jj]);
                }
            };
            with_block<W>(a, j, m, block);
            T::store_n(a.scores + uint64_t(h) * kAttnChunk + jb, T::mul(T::reduce(acc), T::set1(a.scale)), m);
        }
    }
}

// Asks for the cache lines of n values from index i (f16 or f32) ahead of
// their use.
inline void prefetch_rows(const uint8_t* cache, uint64_t i, uint32_t n, bool f16) {
    const uint64_t es = f16 ? 2 : 4;
    for (uint64_t b = 0; b < n * es; b += 64) __builtin_prefetch(cache + i * es + b);
}

// NH heads over blocks of 4 positions, their 4·NH sums in registers
// (AVX2's 16 registers hold 3 heads' 12, AVX-512's 32 hold 4 heads' 16
// with room to spare): each K slice is loaded, and converted, once for the
// NH heads, where a loop over heads converts it for each. The same products
// in the same order as a head over W positions at a time and store_reduce4's
// sums in reduce's order: the same bits whichever way a group is cut.
template <class T, bool F16, uint32_t HD, int NH>
inline void attn_scores_tile(const AttnChunk& a, uint32_t h0) {
    using V = typename T::V;
    constexpr int W = T::W, P = 4;
    const uint32_t hd = HD ? HD : a.head_dim, count = a.j1 - a.j0;
    const float* q = a.q + uint64_t(h0) * hd;
    for (uint32_t jb = 0; jb < count; jb += P) {
        const uint32_t m = count - jb < uint32_t(P) ? count - jb : uint32_t(P), j = a.j0 + jb;
        V acc[NH][P];
        for (int h = 0; h < NH; ++h)
            for (int jj = 0; jj < P; ++jj) acc[h][jj] = T::zero();
        const auto block = [&](auto at) {
            for (uint32_t i = 0; i < hd; i += W)
                for (int jj = 0; jj < P; ++jj) {
                    const V k = load_row<T, F16>(a.k_cache, at(jj) + i);
                    for (int h = 0; h < NH; ++h) acc[h][jj] = T::fmadd(T::load(q + uint64_t(h) * hd + i), k, acc[h][jj]);
                }
        };
        with_block<P>(a, j, m, [&](const auto& at) {
            if (h0 == 0)
                for (uint32_t jj = 0; jj < m; ++jj) prefetch_rows(a.v_cache, at(int(jj)), hd, F16);
            block(at);
        });
        for (int h = 0; h < NH; ++h) T::store_reduce4(a.scores + uint64_t(h0 + h) * kAttnChunk + jb, acc[h], a.scale, m);
    }
}

// The last rest (< NH) heads from h0 in one tile.
template <class T, bool F16, uint32_t HD, int NH>
inline void attn_scores_tile_rest(const AttnChunk& a, uint32_t h0, uint32_t rest) {
    if constexpr (NH > 0) {
        if (rest == uint32_t(NH)) return attn_scores_tile<T, F16, HD, NH>(a, h0);
        attn_scores_tile_rest<T, F16, HD, NH - 1>(a, h0, rest);
    }
}

// The group's heads in tiles of T::kTileHeads, the rest in one smaller tile.
template <class T, bool F16, uint32_t HD>
inline void attn_scores_tiles(const AttnChunk& a) {
    constexpr int NH = T::kTileHeads;
    uint32_t h0 = 0;
    for (; h0 + NH <= a.group; h0 += NH) attn_scores_tile<T, F16, HD, NH>(a, h0);
    attn_scores_tile_rest<T, F16, HD, NH - 1>(a, h0, a.group - h0);
}

template <class T, bool F16>
inline void attn_scores_tiled(const AttnChunk& a) {
    switch (a.head_dim) {
        case 64: return attn_scores_tiles<T, F16, 64>(a);
        case 128: return attn_scores_tiles<T, F16, 128>(a);
        default: return attn_scores_tiles<T, F16, 0>(a);
    }
}

// The tiles, but on AVX-512 one head with f32 K a head at a time. On the
// Emerald Rapids Xeon (2026-12-06, one core, depth 1024, scores and the
// weighted sum together, docs/benchmarks.md) the tiles of 4 took 1.05-1.53x
// less time than a head at a time for groups of 2-8 (head sizes 64-256, f16
// and f32 K, the cache in L2 or beyond it) and 1.05-1.28x less than K rows
// converted once for the group, the loop they replace from 4 heads on with
// f16 K; one head on f32 K ran 1.07-1.12x slower in tiles (f16 K:
// 1.03-1.11x faster).
template <class T>
inline void attn_scores(const AttnChunk& a) {
    if constexpr (T::W == 16)
        if (!a.f16 && a.group == 1) return attn_scores_per_head<T, false>(a);
    if (a.f16) return attn_scores_tiled<T, true>(a);
    attn_scores_tiled<T, false>(a);
}

// NH heads (<= 4) over 4 vectors of the head dimension at a time. A
// position's NH weights are broadcast first, then its V vectors loaded one
// at a time: AVX2's 16 registers hold 3 heads' 12 outputs, 3 weights and a
// row. Holding a position's 4 rows at once spilled an output: 9.3-9.8 ns a
// position and KV head against 6.1-6.7 this way (SmolLM2's shapes, one Zen
// 3 core, the cache in L3).
template <class T, bool F16, int NH>
inline void attn_accumulate_heads(const AttnChunk& a, uint32_t h0) {
    using V = typename T::V;
    constexpr int W = T::W, NV = 4;
    const uint32_t count = a.j1 - a.j0;
    for (uint32_t i0 = 0; i0 < a.head_dim; i0 += NV * W) {
        V acc[NH][NV];
        for (int h = 0; h < NH; ++h)
            for (int v = 0; v < NV; ++v) acc[h][v] = T::zero();
        for (uint32_t j = 0; j < count; ++j) {
            const uint64_t base = kv_at(a, a.j0 + j) + i0;
            V w[NH];
            for (int h = 0; h < NH; ++h) w[h] = T::set1(a.scores[uint64_t(h0 + h) * kAttnChunk + j]);
            for (int v = 0; v < NV; ++v) {
                const V row = load_row<T, F16>(a.v_cache, base + v * W);
                for (int h = 0; h < NH; ++h) acc[h][v] = T::fmadd(w[h], row, acc[h][v]);
            }
        }
        for (int h = 0; h < NH; ++h)
            for (int v = 0; v < NV; ++v) T::store(a.out + uint64_t(h0 + h) * a.out_stride + i0 + v * W, acc[h][v]);
    }
}

template <class T, bool F16>
inline void attn_accumulate_f(const AttnChunk& a) {
    uint32_t h0 = 0;
    for (; h0 + 4 <= a.group; h0 += 4) attn_accumulate_heads<T, F16, 4>(a, h0);
    switch (a.group - h0) {
        case 3: attn_accumulate_heads<T, F16, 3>(a, h0); break;
        case 2: attn_accumulate_heads<T, F16, 2>(a, h0); break;
        case 1: attn_accumulate_heads<T, F16, 1>(a, h0); break;
        default: break;
    }
}

template <class T>
inline void attn_accumulate(const AttnChunk& a) {
    if (a.f16) attn_accumulate_f<T, true>(a);
    else attn_accumulate_f<T, false>(a);
}

}  // namespace
}  // namespace ptxlm::cpu
