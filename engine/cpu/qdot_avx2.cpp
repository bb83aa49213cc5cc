// Quantized dot products, AVX2 + FMA + F16C (compiled with those flags only
// here; called only after runnable_isas() saw them). Same integer sums per
// block as the scalar kernels in qdot.cpp; vpmaddubsw (u8 × s8 → s16 pairs)
// then vpmaddwd into 8 int32 lanes, one float FMA per block (32-element types)
// or per super-block (k-quants), one horizontal sum per row.
//
// Saturation: vpmaddubsw adds two u8·s8 products in int16. The weights are
// fed unsigned (at most 63, Q6_K) or, for the signed types, as |w| <= 128
// against x in [-127, 127]; 2·128·127 and 2·63·128 stay below 32767.
#include <immintrin.h>

#include "engine/cpu/qdot.h"

namespace ptxlm::cpu {
namespace {

using gguf::BlockQ4_0;
using gguf::BlockQ4_1;
using gguf::BlockQ5_0;
using gguf::BlockQ5_1;
using gguf::BlockQ8_0;
using gguf::BlockQ4_K;
using gguf::BlockQ5_K;
using gguf::BlockQ6_K;

inline float f16(uint16_t h) { return _cvtsh_ss(h); }

inline __m256i loadu(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i loadu128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

inline float hsum(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

inline float hsum(__m128 v) {
    __m128 s = _mm_add_ps(v, _mm_movehl_ps(v, v));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// 8 int32 lanes, each the sum of 4 adjacent products u[i]·s[i].
inline __m256i dot_u8s8(__m256i u, __m256i s) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1));
}

// The same for signed w: |w|·(x with w's sign). x must not hold -128.
inline __m256i dot_s8s8(__m256i w, __m256i x) {
    return dot_u8s8(_mm256_sign_epi8(w, w), _mm256_sign_epi8(x, w));
}

// 16 packed bytes as 32 nibbles: low nibbles (elements 0..15), then high.
inline __m256i nibbles(const uint8_t* qs) {
    const __m128i v = loadu128(qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
}

// Byte i = 0x10 where bit i of qh is set, else 0.
inline __m256i bits_to_0x10(const uint8_t* qh) {
    const __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi32(int(detail::load_u32(qh))),
                                          _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1,
                                                           2, 2, 2, 2, 2, 2, 2, 2, 3, 3, 3, 3, 3, 3, 3, 3));
    const __m256i bit = _mm256_set1_epi64x(0x8040201008040201ll);
    return _mm256_and_si256(_mm256_cmpeq_epi8(_mm256_and_si256(v, bit), bit), _mm256_set1_epi8(0x10));
}

struct UnpackQ4_0 {
    __m256i operator()(const BlockQ4_0& b) const { return _mm256_sub_epi8(nibbles(b.qs), _mm256_set1_epi8(8)); }
};
struct UnpackQ4_1 {
    __m256i operator()(const BlockQ4_1& b) const { return nibbles(b.qs); }
};
struct UnpackQ5_0 {
    __m256i operator()(const BlockQ5_0& b) const {
        return _mm256_sub_epi8(_mm256_or_si256(nibbles(b.qs), bits_to_0x10(b.qh)), _mm256_set1_epi8(16));
    }
};
struct UnpackQ5_1 {
    __m256i operator()(const BlockQ5_1& b) const { return _mm256_or_si256(nibbles(b.qs), bits_to_0x10(b.qh)); }
};
struct UnpackQ8_0 {
    __m256i operator()(const BlockQ8_0& b) const { return loadu(b.qs); }
};

// Signed: Unpack yields s8 codes (offset applied). Otherwise u8 codes and the
// block adds m · s_x (Q4_1, Q5_1).
template <class Block, class Unpack, bool Signed>
float dot32(const void* row, const void* x, uint64_t n) {
    const auto* w = static_cast<const Block*>(row);
    const auto* y = static_cast<const BlockQ8x32*>(x);
    const Unpack unpack{};
    __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
    float accm = 0.f;
    const uint64_t nb = n / 32;
    auto block = [&](uint64_t b, __m256& acc) {
        const __m256i q = unpack(w[b]);
        const __m256i xv = loadu(y[b].qs);
        const __m256i p = Signed ? dot_s8s8(q, xv) : dot_u8s8(q, xv);
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(w[b].d) * y[b].d), _mm256_cvtepi32_ps(p), acc);
        if constexpr (!Signed) accm += f16(w[b].m) * y[b].s;
    };
    uint64_t b = 0;
    for (; b + 2 <= nb; b += 2) {   // two chains hide the FMA latency
        block(b, acc0);
        block(b + 1, acc1);
    }
    if (b < nb) block(b, acc0);
    return hsum(_mm256_add_ps(acc0, acc1)) + accm;
}

// Q4_K/Q5_K mins: 4 int32 lanes of Σ_j m_j·(bsums[2j] + bsums[2j+1]).
inline __m128i k_min_sums(const uint8_t m[8], const int16_t bsums[16]) {
    const __m128i bs = _mm_hadd_epi16(loadu128(bsums), loadu128(bsums + 8));   // 8 sub-block sums
    return _mm_madd_epi16(bs, _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m))));
}

// Q4_K (HighBits false) and Q5_K: chunk c of 32 bytes holds sub-block 2c in
// its low nibbles and 2c+1 in its high nibbles; Q5_K's fifth bits are bits
// 2c and 2c+1 of qh.
template <class Block, bool HighBits>
float dot_k45(const void* row, const void* x, uint64_t n) {
    const auto* w = static_cast<const Block*>(row);
    const auto* y = static_cast<const BlockQ8x256*>(x);
    const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
    __m256 acc = _mm256_setzero_ps();
    __m128 accm = _mm_setzero_ps();
    for (uint64_t b = 0; b < n / 256; ++b) {
        uint8_t sc[8], m[8];
        detail::unpack_k_scales(w[b].scales, sc, m);
        const uint8_t* q = w[b].qs;
        const int8_t* xq = y[b].qs;
        [[maybe_unused]] __m256i qh{};
        if constexpr (HighBits) qh = loadu(w[b].qh);
        __m256i isum = _mm256_setzero_si256();
        for (int c = 0; c < 4; ++c, q += 32, xq += 64) {
            const __m256i v = loadu(q);
            __m256i lo = _mm256_and_si256(v, m4);
            __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
            if constexpr (HighBits) {
                lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4), b4));
                hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(qh, 3), b4));
                qh = _mm256_srli_epi16(qh, 2);   // only bits 0..1 of each byte are read
            }
            const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, loadu(xq)), _mm256_set1_epi16(sc[2 * c]));
            const __m256i phi =
                _mm256_madd_epi16(_mm256_maddubs_epi16(hi, loadu(xq + 32)), _mm256_set1_epi16(sc[2 * c + 1]));
            isum = _mm256_add_epi32(isum, _mm256_add_epi32(plo, phi));
        }
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(w[b].d) * y[b].d), _mm256_cvtepi32_ps(isum), acc);
        accm = _mm_fmadd_ps(_mm_set1_ps(f16(w[b].dmin) * y[b].d), _mm_cvtepi32_ps(k_min_sums(m, y[b].bsums)), accm);
    }
    return hsum(acc) - hsum(accm);
}

// Q6_K, per 128-element half: quads k = 0..3 of 32 elements, codes 0..63;
// maddubs lanes 0..7 cover group 2k, lanes 8..15 group 2k+1.
float dot_q6_k(const void* row, const void* x, uint64_t n) {
    const auto* w = static_cast<const BlockQ6_K*>(row);
    const auto* y = static_cast<const BlockQ8x256*>(x);
    const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
    __m256 acc = _mm256_setzero_ps();
    for (uint64_t b = 0; b < n / 256; ++b) {
        const int8_t* sc = w[b].scales;
        __m256i isum = _mm256_setzero_si256();
        for (int h = 0; h < 2; ++h) {
            const __m256i q0 = loadu(w[b].ql + 64 * h), q1 = loadu(w[b].ql + 64 * h + 32);
            const __m256i qh = loadu(w[b].qh + 32 * h);
            const __m256i k[4] = {
                _mm256_or_si256(_mm256_and_si256(q0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)),
                _mm256_or_si256(_mm256_and_si256(q1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q0, 4), m4), _mm256_and_si256(qh, m30)),
                _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q1, 4), m4),
                                _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)),
            };
            const int8_t* xq = y[b].qs + 128 * h;
            for (int j = 0; j < 4; ++j) {
                const int g = 8 * h + 2 * j;
                const __m256i s = _mm256_set_m128i(_mm_set1_epi16(sc[g + 1]), _mm_set1_epi16(sc[g]));
                const __m256i p = _mm256_maddubs_epi16(k[j], loadu(xq + 32 * j));
                isum = _mm256_add_epi32(isum, _mm256_madd_epi16(p, s));
            }
        }
        // The -32 offset: Σ_g scales[g]·32·bsums[g].
        const __m256i off = _mm256_madd_epi16(loadu(y[b].bsums), _mm256_cvtepi8_epi16(loadu128(sc)));
        isum = _mm256_sub_epi32(isum, _mm256_slli_epi32(off, 5));
        acc = _mm256_fmadd_ps(_mm256_set1_ps(f16(w[b].d) * y[b].d), _mm256_cvtepi32_ps(isum), acc);
    }
    return hsum(acc);
}

}  // namespace

namespace detail {
const QDotFn kQDotAvx2[kQDotSlots] = {
    dot32<BlockQ4_0, UnpackQ4_0, true>, dot32<BlockQ4_1, UnpackQ4_1, false>,
    dot32<BlockQ5_0, UnpackQ5_0, true>, dot32<BlockQ5_1, UnpackQ5_1, false>,
    dot32<BlockQ8_0, UnpackQ8_0, true>, dot_k45<BlockQ4_K, false>,
    dot_k45<BlockQ5_K, true>,           dot_q6_k,
};
}  // namespace detail

}  // namespace ptxlm::cpu
