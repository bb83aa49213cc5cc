#include "engine/cpu/elementwise.h"

#include <cmath>
#include <cstring>

#include "engine/cpu/x86_intrinsics.h"
#include "gguf/f16.h"

namespace ptxlm::cpu {

namespace {

constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;

// ---- scalar ----------------------------------------------------------------

void exp_scalar(float* x, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) x[i] = std::exp(x[i]);
}
void silu_mul_scalar(float* g, const float* u, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) g[i] = g[i] / (1.0f + std::exp(-g[i])) * u[i];
}
void gelu_mul_scalar(float* g, const float* u, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) {
        const float x = g[i];
        g[i] = 0.5f * x * (1.0f + std::tanh(kSqrt2OverPi * (x + kGeluCubic * x * x * x))) * u[i];
    }
}
void softcap_scalar(float* x, uint64_t n, float cap) {
    for (uint64_t i = 0; i < n; ++i) x[i] = cap * std::tanh(x[i] / cap);
}
void to_f16_scalar(const float* x, uint16_t* out, uint64_t n) {
    for (uint64_t i = 0; i < n; ++i) out[i] = f32_to_f16(x[i]);
}

// ---- the polynomial exp, shared constants ------------------------------------
// x = k·ln2 + r with ln2 split in two (Cody-Waite), exp(r) by a degree-7
// polynomial (Cephes' expf coefficients), times 2^k.
constexpr float kLog2e = 1.44269504088896341f;
constexpr float kLn2Hi = 0.693359375f, kLn2Lo = -2.12194440e-4f;
constexpr float kExpHi = 88.0f, kExpLo = -87.3f;   // 2^k stays a normal float
constexpr float kP0 = 1.9875691500e-4f, kP1 = 1.3981999507e-3f, kP2 = 8.3334519073e-3f, kP3 = 4.1665795894e-2f,
                kP4 = 1.6666665459e-1f, kP5 = 5.0000001201e-1f;

// ---- AVX2 ------------------------------------------------------------------

#define PTXLM_AVX2 __attribute__((target("avx2,fma")))
PTXLM_AVX2 inline __m256 exp_avx2(__m256 x) {
    const __m256 under = _mm256_cmp_ps(x, _mm256_set1_ps(kExpLo), _CMP_LT_OQ);
    x = _mm256_min_ps(_mm256_max_ps(x, _mm256_set1_ps(kExpLo)), _mm256_set1_ps(kExpHi));
    const __m256 k = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    __m256 r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Hi), x);
    r = _mm256_fnmadd_ps(k, _mm256_set1_ps(kLn2Lo), r);
    __m256 p = _mm256_set1_ps(kP0);
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP1));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP2));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP3));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP4));
    p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(kP5));
    p = _mm256_fmadd_ps(p, _mm256_mul_ps(r, r), _mm256_add_ps(r, _mm256_set1_ps(1.0f)));
    const __m256i e = _mm256_slli_epi32(_mm256_add_epi32(_mm256_cvtps_epi32(k), _mm256_set1_epi32(127)), 23);
    return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(e)));
}
PTXLM_AVX2 inline __m256 silu_avx2(__m256 x) {
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), exp_avx2(_mm256_sub_ps(_mm256_setzero_ps(), x))));
}
PTXLM_AVX2 inline __m256 gelu_avx2(__m256 x) {
    // σ(2u) with u = √(2/π)(x + c·x³): x / (1 + exp(−2u)).
    const __m256 x3 = _mm256_mul_ps(_mm256_mul_ps(x, x), x);
    const __m256 u = _mm256_mul_ps(_mm256_set1_ps(-2.0f * kSqrt2OverPi), _mm256_fmadd_ps(_mm256_set1_ps(kGeluCubic), x3, x));
    return _mm256_div_ps(x, _mm256_add_ps(_mm256_set1_ps(1.0f), exp_avx2(u)));
}

// f over x[0..n) (and g = f(g)·u), 8 at a time; the last few through a
// zero-padded vector so they take the same arithmetic.
template <__m256 (*F)(__m256)>
PTXLM_AVX2 inline void map_avx2(float* x, uint32_t n) {
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, F(_mm256_loadu_ps(x + i)));
    if (i == n) return;
    alignas(32) float t[8] = {};
    std::memcpy(t, x + i, (n - i) * 4);
    _mm256_store_ps(t, F(_mm256_load_ps(t)));
    std::memcpy(x + i, t, (n - i) * 4);
}
template <__m256 (*F)(__m256)>
PTXLM_AVX2 inline void gate_avx2(float* g, const float* u, uint32_t n) {
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(g + i, _mm256_mul_ps(F(_mm256_loadu_ps(g + i)), _mm256_loadu_ps(u + i)));
    if (i == n) return;
    alignas(32) float tg[8] = {}, tu[8] = {};
    std::memcpy(tg, g + i, (n - i) * 4);
    std::memcpy(tu, u + i, (n - i) * 4);
    _mm256_store_ps(tg, _mm256_mul_ps(F(_mm256_load_ps(tg)), _mm256_load_ps(tu)));
    std::memcpy(g + i, tg, (n - i) * 4);
}
// cap · tanh(x / cap), tanh(y) = 1 − 2/(1 + e^2y) (e^2y clamped at exp's
// range: ±1 at the ends).
PTXLM_AVX2 inline __m256 softcap_avx2(__m256 x, __m256 two_over_cap, __m256 cap) {
    const __m256 e = exp_avx2(_mm256_mul_ps(x, two_over_cap)), one = _mm256_set1_ps(1.0f);
    return _mm256_mul_ps(cap, _mm256_sub_ps(one, _mm256_div_ps(_mm256_set1_ps(2.0f), _mm256_add_ps(one, e))));
}
PTXLM_AVX2 void softcap_avx2_n(float* x, uint64_t n, float c) {
    const __m256 t = _mm256_set1_ps(2.0f / c), cap = _mm256_set1_ps(c);
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8) _mm256_storeu_ps(x + i, softcap_avx2(_mm256_loadu_ps(x + i), t, cap));
    if (i == n) return;
    alignas(32) float r[8] = {};
    std::memcpy(r, x + i, (n - i) * 4);
    _mm256_store_ps(r, softcap_avx2(_mm256_load_ps(r), t, cap));
    std::memcpy(x + i, r, (n - i) * 4);
}
PTXLM_AVX2 void exp_avx2_n(float* x, uint32_t n) { map_avx2<exp_avx2>(x, n); }
__attribute__((target("avx2,f16c"))) void to_f16_avx2(const float* x, uint16_t* out, uint64_t n) {
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128(reinterpret_cast<__m128i*>(out + i), _mm256_cvtps_ph(_mm256_loadu_ps(x + i), _MM_FROUND_TO_NEAREST_INT));
    for (; i < n; ++i) out[i] = f32_to_f16(x[i]);
}
PTXLM_AVX2 void silu_mul_avx2(float* g, const float* u, uint32_t n) { gate_avx2<silu_avx2>(g, u, n); }
PTXLM_AVX2 void gelu_mul_avx2(float* g, const float* u, uint32_t n) { gate_avx2<gelu_avx2>(g, u, n); }

// ---- AVX-512 ---------------------------------------------------------------
// The same polynomial; 2^k through vscalefps. Tails use masked loads and
// stores (masked-off lanes read as 0).

#define PTXLM_AVX512 __attribute__((target("avx512f,avx2,fma")))
PTXLM_AVX512 inline __m512 exp_avx512(__m512 x) {
    const __mmask16 under = _mm512_cmp_ps_mask(x, _mm512_set1_ps(kExpLo), _CMP_LT_OQ);
    x = _mm512_min_ps(_mm512_max_ps(x, _mm512_set1_ps(kExpLo)), _mm512_set1_ps(kExpHi));
    const __m512 k = _mm512_roundscale_ps(_mm512_mul_ps(x, _mm512_set1_ps(kLog2e)), _MM_FROUND_TO_NEAREST_INT);
    __m512 r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Hi), x);
    r = _mm512_fnmadd_ps(k, _mm512_set1_ps(kLn2Lo), r);
    __m512 p = _mm512_set1_ps(kP0);
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP1));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP2));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP3));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP4));
    p = _mm512_fmadd_ps(p, r, _mm512_set1_ps(kP5));
    p = _mm512_fmadd_ps(p, _mm512_mul_ps(r, r), _mm512_add_ps(r, _mm512_set1_ps(1.0f)));
    return _mm512_maskz_scalef_ps(static_cast<__mmask16>(~under), p, k);
}
PTXLM_AVX512 inline __m512 silu_avx512(__m512 x) {
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_avx512(_mm512_sub_ps(_mm512_setzero_ps(), x))));
}
PTXLM_AVX512 inline __m512 gelu_avx512(__m512 x) {
    const __m512 x3 = _mm512_mul_ps(_mm512_mul_ps(x, x), x);
    const __m512 u = _mm512_mul_ps(_mm512_set1_ps(-2.0f * kSqrt2OverPi), _mm512_fmadd_ps(_mm512_set1_ps(kGeluCubic), x3, x));
    return _mm512_div_ps(x, _mm512_add_ps(_mm512_set1_ps(1.0f), exp_avx512(u)));
}
template <__m512 (*F)(__m512)>
PTXLM_AVX512 inline void map_avx512(float* x, uint32_t n) {
    for (uint32_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(x + i, m, F(_mm512_maskz_loadu_ps(m, x + i)));
    }
}
template <__m512 (*F)(__m512)>
PTXLM_AVX512 inline void gate_avx512(float* g, const float* u, uint32_t n) {
    for (uint32_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(g + i, m, _mm512_mul_ps(F(_mm512_maskz_loadu_ps(m, g + i)), _mm512_maskz_loadu_ps(m, u + i)));
    }
}
PTXLM_AVX512 void softcap_avx512_n(float* x, uint64_t n, float c) {
    const __m512 t = _mm512_set1_ps(2.0f / c), cap = _mm512_set1_ps(c), one = _mm512_set1_ps(1.0f);
    for (uint64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
        const __m512 e = exp_avx512(_mm512_mul_ps(_mm512_maskz_loadu_ps(m, x + i), t));
        _mm512_mask_storeu_ps(x + i, m, _mm512_mul_ps(cap, _mm512_sub_ps(one, _mm512_div_ps(_mm512_set1_ps(2.0f), _mm512_add_ps(one, e)))));
    }
}
PTXLM_AVX512 void exp_avx512_n(float* x, uint32_t n) { map_avx512<exp_avx512>(x, n); }
__attribute__((target("avx512f,avx512bw,avx512vl"))) void to_f16_avx512(const float* x, uint16_t* out, uint64_t n) {
    for (uint64_t i = 0; i < n; i += 16) {
        const __mmask16 m = n - i >= 16 ? __mmask16(0xffff) : __mmask16((1u << (n - i)) - 1);
        _mm256_mask_storeu_epi16(out + i, m, _mm512_cvtps_ph(_mm512_maskz_loadu_ps(m, x + i), _MM_FROUND_TO_NEAREST_INT));
    }
}
PTXLM_AVX512 void silu_mul_avx512(float* g, const float* u, uint32_t n) { gate_avx512<silu_avx512>(g, u, n); }
PTXLM_AVX512 void gelu_mul_avx512(float* g, const float* u, uint32_t n) { gate_avx512<gelu_avx512>(g, u, n); }

}  // namespace

ElementwiseOps elementwise_ops(Isa isa) {
    switch (isa) {
        case Isa::Scalar: break;
        case Isa::Avx2: return {exp_avx2_n, silu_mul_avx2, gelu_mul_avx2, softcap_avx2_n, to_f16_avx2};
        case Isa::Avx512:
        case Isa::Avx512Vnni: return {exp_avx512_n, silu_mul_avx512, gelu_mul_avx512, softcap_avx512_n, to_f16_avx512};
    }
    return {exp_scalar, silu_mul_scalar, gelu_mul_scalar, softcap_scalar, to_f16_scalar};
}

}  // namespace ptxlm::cpu
