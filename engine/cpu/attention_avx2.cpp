// attention_simd.h's loops on AVX2 + FMA + F16C (compiled with those flags;
// called only after runnable_isas() saw them).
#include <immintrin.h>

#include <cstring>

#include "engine/cpu/attention_simd.h"

namespace ptxlm::cpu {
namespace {

struct Avx2 {
    using V = __m256;
    static constexpr int W = 8;
    static constexpr int kTileHeads = 3;   // 12 sums of 16 registers
    static V zero() { return _mm256_setzero_ps(); }
    static V set1(float x) { return _mm256_set1_ps(x); }
    static V load(const float* p) { return _mm256_loadu_ps(p); }
    static V load_h(const uint16_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
    static V fmadd(V a, V b, V c) { return _mm256_fmadd_ps(a, b, c); }
    static V mul(V a, V b) { return _mm256_mul_ps(a, b); }
    static void store(float* p, V v) { _mm256_storeu_ps(p, v); }
    static void store_n(float* p, V v, uint32_t n) {
        if (n == 8) return _mm256_storeu_ps(p, v);
        alignas(32) float t[8];
        _mm256_store_ps(t, v);
        std::memcpy(p, t, n * 4);
    }
    // Lane j of the result = the sum of v[j]'s lanes.
    static V reduce(const V* v) {
        V a[4], b[2];
        for (int i = 0; i < 4; ++i) a[i] = _mm256_hadd_ps(v[2 * i], v[2 * i + 1]);
        // b[i], half k: the half-k sums of v[4i .. 4i+3].
        for (int i = 0; i < 2; ++i) b[i] = _mm256_hadd_ps(a[2 * i], a[2 * i + 1]);
        return _mm256_add_ps(_mm256_permute2f128_ps(b[0], b[1], 0x20), _mm256_permute2f128_ps(b[0], b[1], 0x31));
    }
    // p[j] = scale · (the sum of v[j]'s lanes) for j < n (<= 4), summed as
    // reduce sums them.
    static void store_reduce4(float* p, const V* v, float scale, uint32_t n) {
        const V b = _mm256_hadd_ps(_mm256_hadd_ps(v[0], v[1]), _mm256_hadd_ps(v[2], v[3]));
        const __m128 s = _mm_mul_ps(_mm_add_ps(_mm256_castps256_ps128(b), _mm256_extractf128_ps(b, 1)), _mm_set1_ps(scale));
        if (n == 4) return _mm_storeu_ps(p, s);
        alignas(16) float t[4];
        _mm_store_ps(t, s);
        std::memcpy(p, t, n * 4);
    }
};

}  // namespace

void attn_scores_avx2(const AttnChunk& a) { attn_scores<Avx2>(a); }
void attn_accumulate_avx2(const AttnChunk& a) { attn_accumulate<Avx2>(a); }

}  // namespace ptxlm::cpu
