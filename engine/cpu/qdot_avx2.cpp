// Quantized dot products, AVX2 + FMA + F16C (compiled with those flags only
// here; called only after runnable_isas() saw them). Same integer sums per
// block as the scalar kernels in qdot.cpp; vpmaddubsw (u8 × s8 → s16 pairs)
// then vpmaddwd into 8 int32 lanes, one float FMA per block (32-element types)
// or per super-block (k-quants), one horizontal sum per row. The multi-input
// kernels (qdot.h, run_multi) are the same templates run for several rows
// and inputs at once.
//
// Saturation: vpmaddubsw adds two u8·s8 products in int16. The weights are
// fed unsigned (at most 63, Q6_K; Q4_0/Q5_0 as codes 0..31 and the offset
// 8 or 16; Q2_K/Q3_K codes 0..3 and 0..7) or, for Q8_0 and the IQ4 table
// values, as |w| <= 128 against x in [-127, 127]; 2·128·127 and 2·63·128
// stay below 32767.
//
// IQ4_NL and IQ4_XS look their non-linear values up with vpshufb: the 16
// table entries sit in each 128-bit lane and the nibbles index them.
#include <immintrin.h>

#include <type_traits>

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
using gguf::BlockQ2_K;
using gguf::BlockQ3_K;
using gguf::BlockIQ4_NL;
using gguf::BlockIQ4_XS;

inline float f16(uint16_t h) { return _cvtsh_ss(h); }
// a·b + c rounded once. Written out because the compiler contracts a·b + c
// on its own (GCC's default -ffp-contract=fast for C++), and decides
// differently for scalar and vectorised copies of one expression: the
// multi-input kernels would then differ from the single-input one.
inline float fma1(float a, float b, float c) { return __builtin_fmaf(a, b, c); }

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

// 32 IQ4 codes (16 packed bytes, Q4_0's layout) as their table values.
inline __m256i iq4_values(const uint8_t* qs) {
    const __m256i table = _mm256_broadcastsi128_si256(loadu128(gguf::kIQ4Values));
    return _mm256_shuffle_epi8(table, nibbles(qs));
}

struct UnpackIQ4_NL {
    __m256i operator()(const BlockIQ4_NL& b) const { return iq4_values(b.qs); }
};
struct UnpackQ4_1 {
    __m256i operator()(const BlockQ4_1& b) const { return nibbles(b.qs); }
};
struct UnpackQ5_1 {
    __m256i operator()(const BlockQ5_1& b) const { return _mm256_or_si256(nibbles(b.qs), bits_to_0x10(b.qh)); }
};
struct UnpackQ8_0 {
    __m256i operator()(const BlockQ8_0& b) const { return loadu(b.qs); }
};

// Signed: Unpack yields s8 codes (offset applied). Otherwise u8 codes and the
// block adds m · s_x (Q4_1, Q5_1). Per (row, input): two accumulator chains
// (even and odd blocks) hide the FMA latency.
template <class Block, class Unpack, bool Signed>
struct Dot32 {
    // NR rows (row_bytes apart) times NX inputs: out[r + k · out_stride].
    template <int NR, int NX>
    static void run(const void* row, uint64_t row_bytes, const void* const* xs, uint64_t n, float* out,
                    uint64_t out_stride) {
        const Block* w[NR];
        const BlockQ8x32* y[NX];
        detail::pass_operands(row, row_bytes, xs, w, y);
        __m256 acc[2][NR][NX];
        float accm[NR][NX];
        for (int r = 0; r < NR; ++r)
            for (int k = 0; k < NX; ++k) {
                acc[0][r][k] = acc[1][r][k] = _mm256_setzero_ps();
                accm[r][k] = 0.f;
            }
        const Unpack unpack{};
        // Block b into chain c. Signed: |w| times x with w's sign.
        // always_inline: else GCC calls it, with the accumulator arrays in memory.
        auto block = [&](uint64_t b, int c) __attribute__((always_inline)) {
            __m256i q[NR], aq[NR];
            float dw[NR];
            for (int r = 0; r < NR; ++r) {
                q[r] = unpack(w[r][b]);
                aq[r] = _mm256_sign_epi8(q[r], q[r]);
                dw[r] = f16(w[r][b].d);
            }
            for (int k = 0; k < NX; ++k) {
                const __m256i xv = loadu(y[k][b].qs);
                for (int r = 0; r < NR; ++r) {
                    const __m256i p = Signed ? dot_u8s8(aq[r], _mm256_sign_epi8(xv, q[r])) : dot_u8s8(q[r], xv);
                    acc[c][r][k] =
                        _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * y[k][b].d), _mm256_cvtepi32_ps(p), acc[c][r][k]);
                }
            }
            if constexpr (!Signed)
                for (int r = 0; r < NR; ++r) {
                    const float m = f16(w[r][b].m);
                    for (int k = 0; k < NX; ++k) accm[r][k] = fma1(m, y[k][b].s, accm[r][k]);
                }
        };
        const uint64_t nb = n / 32;
        uint64_t b = 0;
        for (; b + 2 <= nb; b += 2) {
            block(b, 0);
            block(b + 1, 1);
        }
        if (b < nb) block(b, 0);
        for (int r = 0; r < NR; ++r)
            for (int k = 0; k < NX; ++k)
                out[r + k * out_stride] = hsum(_mm256_add_ps(acc[0][r][k], acc[1][r][k])) + accm[r][k];
    }
};

// Q4_0 and Q5_0 as unsigned codes c = w + Offset (0..15, 0..31): per block
// Σ c·x − Offset·Σx, the same integers as Dot32's sign trick, with no sign
// work per (row, input) and one register per unpacked row; Offset·Σx (per
// 4-value group) is made once per input and block for all the rows. One
// accumulator chain per (row, input): with four inputs per pass there are
// 8 or more independent chains anyway, and the registers go to the inputs.
template <class Block, class Unpack, int Offset>
struct Dot32Offset {
    template <int NR, int NX>
    static void run(const void* row, uint64_t row_bytes, const void* const* xs, uint64_t n, float* out,
                    uint64_t out_stride) {
        const Block* w[NR];
        const BlockQ8x32* y[NX];
        detail::pass_operands(row, row_bytes, xs, w, y);
        __m256 acc[NR][NX];
        for (int r = 0; r < NR; ++r)
            for (int k = 0; k < NX; ++k) acc[r][k] = _mm256_setzero_ps();
        const Unpack unpack{};
        for (uint64_t b = 0; b < n / 32; ++b) {
            __m256i c[NR];
            float dw[NR];
            for (int r = 0; r < NR; ++r) {
                c[r] = unpack(w[r][b]);
                dw[r] = f16(w[r][b].d);
            }
            for (int k = 0; k < NX; ++k) {
                const __m256i xv = loadu(y[k][b].qs);
                const __m256i offset_sum = dot_u8s8(_mm256_set1_epi8(Offset), xv);
                for (int r = 0; r < NR; ++r) {
                    const __m256i p = _mm256_sub_epi32(dot_u8s8(c[r], xv), offset_sum);
                    acc[r][k] = _mm256_fmadd_ps(_mm256_set1_ps(dw[r] * y[k][b].d), _mm256_cvtepi32_ps(p), acc[r][k]);
                }
            }
        }
        for (int r = 0; r < NR; ++r)
            for (int k = 0; k < NX; ++k) out[r + k * out_stride] = hsum(acc[r][k]);
    }
};
struct UnpackQ4_0Codes {
    __m256i operator()(const BlockQ4_0& b) const { return nibbles(b.qs); }
};
struct UnpackQ5_0Codes {
    __m256i operator()(const BlockQ5_0& b) const { return _mm256_or_si256(nibbles(b.qs), bits_to_0x10(b.qh)); }
};

// Q4_K/Q5_K mins: 4 int32 lanes of Σ_j m_j·(bsums[2j] + bsums[2j+1]).
inline __m128i k_min_sums(const uint8_t m[8], const int16_t bsums[16]) {
    const __m128i bs = _mm_hadd_epi16(loadu128(bsums), loadu128(bsums + 8));   // 8 sub-block sums
    return _mm_madd_epi16(bs, _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m))));
}

// Q4_K (HighBits false) and Q5_K: chunk c of 32 bytes holds sub-block 2c in
// its low nibbles and 2c+1 in its high nibbles; Q5_K's fifth bits are bits
// 2c and 2c+1 of qh.
template <class Block, bool HighBits>
struct DotK45 {
    template <int NR, int NX>
    static void run(const void* row, uint64_t, const void* const* xs, uint64_t n, float* out, uint64_t out_stride) {
        static_assert(NR == 1);
        const auto* w = static_cast<const Block*>(row);
        const BlockQ8x256* y[NX];
        __m256 acc[NX];
        __m128 accm[NX];
        for (int k = 0; k < NX; ++k) {
            y[k] = static_cast<const BlockQ8x256*>(xs[k]);
            acc[k] = _mm256_setzero_ps();
            accm[k] = _mm_setzero_ps();
        }
        const __m256i m4 = _mm256_set1_epi8(0x0F), b4 = _mm256_set1_epi8(0x10);
        for (uint64_t b = 0; b < n / 256; ++b) {
            uint8_t sc[8], m[8];
            detail::unpack_k_scales(w[b].scales, sc, m);
            const uint8_t* q = w[b].qs;
            [[maybe_unused]] __m256i qh{};
            if constexpr (HighBits) qh = loadu(w[b].qh);
            __m256i isum[NX];
            for (int k = 0; k < NX; ++k) isum[k] = _mm256_setzero_si256();
            for (int c = 0; c < 4; ++c, q += 32) {
                const __m256i v = loadu(q);
                __m256i lo = _mm256_and_si256(v, m4);
                __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
                if constexpr (HighBits) {
                    lo = _mm256_or_si256(lo, _mm256_and_si256(_mm256_slli_epi16(qh, 4), b4));
                    hi = _mm256_or_si256(hi, _mm256_and_si256(_mm256_slli_epi16(qh, 3), b4));
                    qh = _mm256_srli_epi16(qh, 2);   // only bits 0..1 of each byte are read
                }
                const __m256i slo = _mm256_set1_epi16(sc[2 * c]), shi = _mm256_set1_epi16(sc[2 * c + 1]);
                for (int k = 0; k < NX; ++k) {
                    const int8_t* xq = y[k][b].qs + 64 * c;
                    const __m256i plo = _mm256_madd_epi16(_mm256_maddubs_epi16(lo, loadu(xq)), slo);
                    const __m256i phi = _mm256_madd_epi16(_mm256_maddubs_epi16(hi, loadu(xq + 32)), shi);
                    isum[k] = _mm256_add_epi32(isum[k], _mm256_add_epi32(plo, phi));
                }
            }
            const float dw = f16(w[b].d), dmin = f16(w[b].dmin);
            for (int k = 0; k < NX; ++k) {
                acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(dw * y[k][b].d), _mm256_cvtepi32_ps(isum[k]), acc[k]);
                accm[k] = _mm_fmadd_ps(_mm_set1_ps(dmin * y[k][b].d), _mm_cvtepi32_ps(k_min_sums(m, y[k][b].bsums)),
                                       accm[k]);
            }
        }
        for (int k = 0; k < NX; ++k) out[k * out_stride] = hsum(acc[k]) - hsum(accm[k]);
    }
};

// Q6_K, per 128-element half: quads k = 0..3 of 32 elements, codes 0..63;
// maddubs lanes 0..7 cover group 2k, lanes 8..15 group 2k+1.
struct DotQ6K {
    template <int NR, int NX>
    static void run(const void* row, uint64_t, const void* const* xs, uint64_t n, float* out, uint64_t out_stride) {
        static_assert(NR == 1);
        const auto* w = static_cast<const BlockQ6_K*>(row);
        const BlockQ8x256* y[NX];
        __m256 acc[NX];
        for (int k = 0; k < NX; ++k) {
            y[k] = static_cast<const BlockQ8x256*>(xs[k]);
            acc[k] = _mm256_setzero_ps();
        }
        const __m256i m4 = _mm256_set1_epi8(0x0F), m30 = _mm256_set1_epi8(0x30);
        for (uint64_t b = 0; b < n / 256; ++b) {
            const int8_t* sc = w[b].scales;
            __m256i isum[NX];
            for (int k = 0; k < NX; ++k) isum[k] = _mm256_setzero_si256();
            for (int h = 0; h < 2; ++h) {
                const __m256i q0 = loadu(w[b].ql + 64 * h), q1 = loadu(w[b].ql + 64 * h + 32);
                const __m256i qh = loadu(w[b].qh + 32 * h);
                const __m256i quad[4] = {
                    _mm256_or_si256(_mm256_and_si256(q0, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 4), m30)),
                    _mm256_or_si256(_mm256_and_si256(q1, m4), _mm256_and_si256(_mm256_slli_epi16(qh, 2), m30)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q0, 4), m4), _mm256_and_si256(qh, m30)),
                    _mm256_or_si256(_mm256_and_si256(_mm256_srli_epi16(q1, 4), m4),
                                    _mm256_and_si256(_mm256_srli_epi16(qh, 2), m30)),
                };
                for (int j = 0; j < 4; ++j) {
                    const int g = 8 * h + 2 * j;
                    const __m256i s = _mm256_set_m128i(_mm_set1_epi16(sc[g + 1]), _mm_set1_epi16(sc[g]));
                    for (int k = 0; k < NX; ++k) {
                        const __m256i p = _mm256_maddubs_epi16(quad[j], loadu(y[k][b].qs + 128 * h + 32 * j));
                        isum[k] = _mm256_add_epi32(isum[k], _mm256_madd_epi16(p, s));
                    }
                }
            }
            // The -32 offset: Σ_g scales[g]·32·bsums[g].
            const __m256i sc16 = _mm256_cvtepi8_epi16(loadu128(sc));
            const float dw = f16(w[b].d);
            for (int k = 0; k < NX; ++k) {
                const __m256i off = _mm256_madd_epi16(loadu(y[k][b].bsums), sc16);
                isum[k] = _mm256_sub_epi32(isum[k], _mm256_slli_epi32(off, 5));
                acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(dw * y[k][b].d), _mm256_cvtepi32_ps(isum[k]), acc[k]);
            }
        }
        for (int k = 0; k < NX; ++k) out[k * out_stride] = hsum(acc[k]);
    }
};

// IQ4_XS: per 32-element sub-block the table values (signed: the sign
// trick), their int16 pair sums times ls − 32 by vpmaddwd, int32 lanes summed
// over the super-block; one FMA per super-block.
struct DotIQ4XS {
    template <int NR, int NX>
    static void run(const void* row, uint64_t, const void* const* xs, uint64_t n, float* out, uint64_t out_stride) {
        static_assert(NR == 1);
        const auto* w = static_cast<const BlockIQ4_XS*>(row);
        const BlockQ8x256* y[NX];
        __m256 acc[NX];
        for (int k = 0; k < NX; ++k) {
            y[k] = static_cast<const BlockQ8x256*>(xs[k]);
            acc[k] = _mm256_setzero_ps();
        }
        for (uint64_t b = 0; b < n / 256; ++b) {
            __m256i isum[NX];
            for (int k = 0; k < NX; ++k) isum[k] = _mm256_setzero_si256();
            for (int ib = 0; ib < 8; ++ib) {
                const __m256i v = iq4_values(w[b].qs + 16 * ib), av = _mm256_sign_epi8(v, v);
                const __m256i s = _mm256_set1_epi16(int16_t(gguf::iq4_xs_scale(w[b], ib) - 32));
                for (int k = 0; k < NX; ++k) {
                    const __m256i xv = _mm256_sign_epi8(loadu(y[k][b].qs + 32 * ib), v);
                    isum[k] = _mm256_add_epi32(isum[k], _mm256_madd_epi16(_mm256_maddubs_epi16(av, xv), s));
                }
            }
            const float dw = f16(w[b].d);
            for (int k = 0; k < NX; ++k)
                acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(dw * y[k][b].d), _mm256_cvtepi32_ps(isum[k]), acc[k]);
        }
        for (int k = 0; k < NX; ++k) out[k * out_stride] = hsum(acc[k]);
    }
};

// Q2_K (Q3 false) and Q3_K, per 128-element half: 32 bytes of qs hold the
// 2-bit fields j = 0..3 of elements 32j + l; field j's 32 codes cover groups
// 2j (maddubs lanes 0..7) and 2j+1 (lanes 8..15), as Q6_K's quads. Q3_K's
// third bit is bit 4h + j of hmask[l] (codes 0..7; the −4 is applied as
// Σ_g s_g·4·bsums[g]); Q2_K's mins as Σ_g m_g·bsums[g], scaled by dmin.
template <bool Q3>
struct DotKLow {
    using Block = std::conditional_t<Q3, BlockQ3_K, BlockQ2_K>;
    template <int NR, int NX>
    static void run(const void* row, uint64_t, const void* const* xs, uint64_t n, float* out, uint64_t out_stride) {
        static_assert(NR == 1);
        const auto* w = static_cast<const Block*>(row);
        const BlockQ8x256* y[NX];
        __m256 acc[NX];
        [[maybe_unused]] __m256 accm[NX];
        for (int k = 0; k < NX; ++k) {
            y[k] = static_cast<const BlockQ8x256*>(xs[k]);
            acc[k] = accm[k] = _mm256_setzero_ps();
        }
        const __m256i m2 = _mm256_set1_epi8(3);
        for (uint64_t b = 0; b < n / 256; ++b) {
            int8_t sc[16];   // per group of 16: Q2_K's 4-bit scale, Q3_K's signed multiplier
            for (int g = 0; g < 16; ++g)
                sc[g] = int8_t(Q3 ? gguf::q3_k_scale(w[b].scales, g) : w[b].scales[g] & 0xF);
            [[maybe_unused]] __m256i hm{};
            if constexpr (Q3) hm = loadu(w[b].hmask);
            __m256i isum[NX];
            for (int k = 0; k < NX; ++k) isum[k] = _mm256_setzero_si256();
            for (int h = 0; h < 2; ++h) {
                const __m256i q = loadu(w[b].qs + 32 * h);
                for (int j = 0; j < 4; ++j) {
                    __m256i codes = _mm256_and_si256(_mm256_srli_epi16(q, 2 * j), m2);
                    if constexpr (Q3) {
                        const __m256i bit = _mm256_set1_epi8(char(1 << (4 * h + j)));
                        const __m256i set = _mm256_cmpeq_epi8(_mm256_and_si256(hm, bit), bit);
                        codes = _mm256_or_si256(codes, _mm256_and_si256(set, _mm256_set1_epi8(4)));
                    }
                    const int g = 8 * h + 2 * j;
                    const __m256i s = _mm256_set_m128i(_mm_set1_epi16(sc[g + 1]), _mm_set1_epi16(sc[g]));
                    for (int k = 0; k < NX; ++k) {
                        const __m256i p = _mm256_maddubs_epi16(codes, loadu(y[k][b].qs + 128 * h + 32 * j));
                        isum[k] = _mm256_add_epi32(isum[k], _mm256_madd_epi16(p, s));
                    }
                }
            }
            const float dw = f16(w[b].d);
            if constexpr (Q3) {
                const __m256i sc16 = _mm256_cvtepi8_epi16(loadu128(sc));
                for (int k = 0; k < NX; ++k) {
                    const __m256i off = _mm256_madd_epi16(loadu(y[k][b].bsums), sc16);
                    isum[k] = _mm256_sub_epi32(isum[k], _mm256_slli_epi32(off, 2));
                    acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(dw * y[k][b].d), _mm256_cvtepi32_ps(isum[k]), acc[k]);
                }
            } else {
                const __m256i m16 =
                    _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(loadu128(w[b].scales), 4), _mm_set1_epi8(0x0F)));
                const float dmin = f16(w[b].dmin);
                for (int k = 0; k < NX; ++k) {
                    const __m256i msum = _mm256_madd_epi16(loadu(y[k][b].bsums), m16);
                    acc[k] = _mm256_fmadd_ps(_mm256_set1_ps(dw * y[k][b].d), _mm256_cvtepi32_ps(isum[k]), acc[k]);
                    accm[k] = _mm256_fmadd_ps(_mm256_set1_ps(dmin * y[k][b].d), _mm256_cvtepi32_ps(msum), accm[k]);
                }
            }
        }
        for (int k = 0; k < NX; ++k) {
            if constexpr (Q3) out[k * out_stride] = hsum(acc[k]);
            else out[k * out_stride] = hsum(acc[k]) - hsum(accm[k]);
        }
    }
};

// Inputs per pass: 16 ymm registers hold the unpacked blocks, the constants
// and NR·NX accumulator sets (two chains each for the 32-element types).
// Measured on pp64 (Zen 4, PTXLM_CPU_ISA=avx2, one thread), one row per pass:
// Q4_1 (SmolLM2) runs best with 2 inputs (4 spills), Q8_0/Q5_0 (gemma-3)
// with 4; row pairs × 2 inputs then gained 8% and 4% (271 and 240 tok/s).
// The k-quants take one row at a time, 4 inputs (not measured).
constexpr int kWidthSigned32 = 4, kWidthUnsigned32 = 2, kWidthK = 4, kWidth32Pair = 2;
// Dot32Offset (Q4_0, Q5_0): one chain per (row, input), so 8 inputs for one
// row and 4 for a pair. gemma-3-270m pp512 (2 threads, PTXLM_CPU_ISA=avx2):
// 581 -> 699..766 tok/s (the machine drifted between runs; 4 rows x 2
// inputs and 2 x 3 measured lower).
constexpr int kWidthOffset32 = 8, kWidthOffset32Pair = 4;

using K4_0 = Dot32Offset<BlockQ4_0, UnpackQ4_0Codes, 8>;
using K4_1 = Dot32<BlockQ4_1, UnpackQ4_1, false>;
using K5_0 = Dot32Offset<BlockQ5_0, UnpackQ5_0Codes, 16>;
using K5_1 = Dot32<BlockQ5_1, UnpackQ5_1, false>;
using K8_0 = Dot32<BlockQ8_0, UnpackQ8_0, true>;
using K4K = DotK45<BlockQ4_K, false>;
using K5K = DotK45<BlockQ5_K, true>;
using KIQ4NL = Dot32<BlockIQ4_NL, UnpackIQ4_NL, true>;   // widths as Q8_0's (not measured)
using KQ2K = DotKLow<false>;
using KQ3K = DotKLow<true>;

}  // namespace

namespace detail {
// Named, so that the AVX-512 tables (qdot_avx512.cpp) can hold them too.
float qdot_avx2_iq4_nl(const void* row, const void* x, uint64_t n) { return run_single<KIQ4NL>(row, x, n); }
float qdot_avx2_iq4_xs(const void* row, const void* x, uint64_t n) { return run_single<DotIQ4XS>(row, x, n); }
float qdot_avx2_q2_k(const void* row, const void* x, uint64_t n) { return run_single<KQ2K>(row, x, n); }
float qdot_avx2_q3_k(const void* row, const void* x, uint64_t n) { return run_single<KQ3K>(row, x, n); }
void qdot_multi_avx2_iq4_nl(const QDotBatch& a) { run_multi<KIQ4NL, kWidthSigned32, kWidth32Pair>(a); }
void qdot_multi_avx2_iq4_xs(const QDotBatch& a) { run_multi<DotIQ4XS, kWidthK>(a); }
void qdot_multi_avx2_q2_k(const QDotBatch& a) { run_multi<KQ2K, kWidthK>(a); }
void qdot_multi_avx2_q3_k(const QDotBatch& a) { run_multi<KQ3K, kWidthK>(a); }

const QDotFn kQDotAvx2[kQDotSlots] = {
    run_single<K4_0>, run_single<K4_1>, run_single<K5_0>, run_single<K5_1>,
    run_single<K8_0>, run_single<K4K>,  run_single<K5K>,  run_single<DotQ6K>,
    qdot_avx2_iq4_nl, qdot_avx2_iq4_xs, qdot_avx2_q2_k,   qdot_avx2_q3_k,
};
const QDotMultiFn kQDotMultiAvx2[kQDotSlots] = {
    run_multi<K4_0, kWidthOffset32, kWidthOffset32Pair>, run_multi<K4_1, kWidthUnsigned32, kWidth32Pair>,
    run_multi<K5_0, kWidthOffset32, kWidthOffset32Pair>, run_multi<K5_1, kWidthUnsigned32, kWidth32Pair>,
    run_multi<K8_0, kWidthSigned32, kWidth32Pair>,   run_multi<K4K, kWidthK>,
    run_multi<K5K, kWidthK>,                         run_multi<DotQ6K, kWidthK>,
    qdot_multi_avx2_iq4_nl, qdot_multi_avx2_iq4_xs, qdot_multi_avx2_q2_k, qdot_multi_avx2_q3_k,
};
}  // namespace detail

}  // namespace ptxlm::cpu
