// attention_simd.h's loops on AVX-512 (compiled with -mavx512f; called only
// after runnable_isas() saw it).
#include "engine/cpu/x86_intrinsics.h"

#include "engine/cpu/attention_simd.h"

namespace ptxlm::cpu {
namespace {

struct Avx512 {
    using V = __m512;
    static constexpr int W = 16;
    static constexpr int kTileHeads = 4;
    static V zero() { return _mm512_setzero_ps(); }
    static V set1(float x) { return _mm512_set1_ps(x); }
    static V load(const float* p) { return _mm512_loadu_ps(p); }
    static V load_h(const uint16_t* p) { return _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(p))); }
    static V fmadd(V a, V b, V c) { return _mm512_fmadd_ps(a, b, c); }
    static V mul(V a, V b) { return _mm512_mul_ps(a, b); }
    static void store(float* p, V v) { _mm512_storeu_ps(p, v); }
    static void store_n(float* p, V v, uint32_t n) { _mm512_mask_storeu_ps(p, __mmask16((1u << n) - 1), v); }
    // Lane j of the result = the sum of v[j]'s lanes.
    static V reduce(const V* v) {
        V a[8], b[4], c[2];
        // Lanes of each 128-bit quarter: pairs (2i, 2i+1) interleaved and added.
        for (int i = 0; i < 8; ++i)
            a[i] = _mm512_add_ps(_mm512_unpacklo_ps(v[2 * i], v[2 * i + 1]), _mm512_unpackhi_ps(v[2 * i], v[2 * i + 1]));
        for (int i = 0; i < 4; ++i) {
            const __m512d x = _mm512_castps_pd(a[2 * i]), y = _mm512_castps_pd(a[2 * i + 1]);
            b[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
        }
        // b[i]: quarter k holds the quarter-k partial sums of v[4i .. 4i+3].
        for (int i = 0; i < 2; ++i)
            c[i] = _mm512_add_ps(_mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0x44),    // quarters 0,1 | 0,1
                                 _mm512_shuffle_f32x4(b[2 * i], b[2 * i + 1], 0xEE));   // quarters 2,3 | 2,3
        // c[i]: quarters (0+2 of b[2i]), (1+3 of b[2i]), (0+2 of b[2i+1]), (1+3 of b[2i+1]).
        const V lo = _mm512_shuffle_f32x4(c[0], c[1], 0x88), hi = _mm512_shuffle_f32x4(c[0], c[1], 0xDD);
        return _mm512_add_ps(lo, hi);
    }
    // p[j] = scale · (the sum of v[j]'s lanes) for j < n (<= 4), summed as
    // reduce sums them: per quarter k, Q_k = (x[4k] + x[4k+2]) + (x[4k+1] +
    // x[4k+3]), then (Q_0 + Q_2) + (Q_1 + Q_3).
    static void store_reduce4(float* p, const V* v, float scale, uint32_t n) {
        const V a0 = _mm512_add_ps(_mm512_unpacklo_ps(v[0], v[1]), _mm512_unpackhi_ps(v[0], v[1]));
        const V a1 = _mm512_add_ps(_mm512_unpacklo_ps(v[2], v[3]), _mm512_unpackhi_ps(v[2], v[3]));
        const __m512d x = _mm512_castps_pd(a0), y = _mm512_castps_pd(a1);
        // Quarter k of b: Q_k of v[0], v[1], v[2], v[3].
        const V b = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(x, y)), _mm512_castpd_ps(_mm512_unpackhi_pd(x, y)));
        const V c = _mm512_add_ps(b, _mm512_shuffle_f32x4(b, b, 0x4E));   // quarters 0+2, 1+3
        const __m128 s = _mm_mul_ps(_mm_add_ps(_mm512_castps512_ps128(c), _mm512_extractf32x4_ps(c, 1)), _mm_set1_ps(scale));
        _mm_mask_storeu_ps(p, __mmask8((1u << n) - 1), s);
    }
};

}  // namespace

void attn_scores_avx512(const AttnChunk& a) { attn_scores<Avx512>(a); }
void attn_accumulate_avx512(const AttnChunk& a) { attn_accumulate<Avx512>(a); }

}  // namespace ptxlm::cpu
