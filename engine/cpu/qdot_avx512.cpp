// Quantized dot products, AVX-512 (F + BW + VL, optionally VNNI; compiled
// with those flags only here, called only after runnable_isas() saw them).
// Same integer sums per block as the scalar kernels in qdot.cpp. The
// multi-input kernels (qdot.h, run_multi) are the same templates run for
// several rows and inputs at once.
//
// 32-element types: two blocks per 512-bit register (an odd last block pairs
// with zeros). With VNNI, vpdpbusd does u8 × s8 with 4-product int32 sums in
// one instruction (no int16 step); without it, vpmaddubsw + vpmaddwd as in
// qdot_avx2.cpp.
// k-quants: 64 elements per register, in the input's natural order. Their
// scales change every 16 or 32 elements, and vpmaddwd by the scale is the
// cheapest way to apply them, so vpdpbusd gains nothing there: Avx512Vnni
// uses the same Q4_K/Q5_K/Q6_K kernels as Avx512. Q2_K, Q3_K and IQ4_XS take
// VNNI's vpdpwssd instead, which fuses that vpmaddwd with the int32 add
// (same integers).
// IQ4_NL and IQ4_XS look their non-linear values up with vpshufb: the 16
// table entries sit in each 128-bit lane and the nibbles index them.
//
// Saturation: as in qdot_avx2.cpp (|w| <= 128 against x in [-127, 127];
// unsigned codes <= 63 against x in [-128, 127]; the IQ4 values' |v| <= 127,
// Q2_K/Q3_K codes <= 7). vpdpwssd and vpmaddwd of those int16 pairs by
// scales of at most 63 stay far inside int32.
#include <type_traits>

#include "engine/cpu/qdot.h"
#include "engine/cpu/x86_intrinsics.h"

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

inline __m512i loadu512(const void* p) { return _mm512_loadu_si512(p); }
inline __m256i loadu(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m128i loadu128(const void* p) { return _mm_loadu_si128(static_cast<const __m128i*>(p)); }

inline float hsum(__m128 v) {
    __m128 s = _mm_add_ps(v, _mm_movehl_ps(v, v));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

// 16 int32 lanes, each the sum of 4 adjacent products u[i]·s[i].
template <bool Vnni>
inline __m512i dot_u8s8(__m512i u, __m512i s) {
    if constexpr (Vnni) return _mm512_dpbusd_epi32(_mm512_setzero_si512(), u, s);
    else return _mm512_madd_epi16(_mm512_maddubs_epi16(u, s), _mm512_set1_epi16(1));
}

inline __m512i pair(__m256i lo, __m256i hi) { return _mm512_inserti64x4(_mm512_castsi256_si512(lo), hi, 1); }

// 16 packed bytes as 32 nibbles: low nibbles (elements 0..15), then high.
inline __m256i nibbles(const uint8_t* qs) {
    const __m128i v = loadu128(qs);
    return _mm256_and_si256(_mm256_set_m128i(_mm_srli_epi16(v, 4), v), _mm256_set1_epi8(0x0F));
}

// Q5: add 16 to byte i where bit i of qh is set (bit 4 is clear after nibbles()).
inline __m256i add_fifth_bits(__m256i q, const uint8_t* qh) {
    return _mm256_mask_add_epi8(q, detail::load_u32(qh), q, _mm256_set1_epi8(0x10));
}

struct UnpackQ4_0 {
    __m256i operator()(const BlockQ4_0& b) const { return _mm256_sub_epi8(nibbles(b.qs), _mm256_set1_epi8(8)); }
};
struct UnpackQ4_1 {
    __m256i operator()(const BlockQ4_1& b) const { return nibbles(b.qs); }
};
struct UnpackQ5_0 {
    __m256i operator()(const BlockQ5_0& b) const {
        return _mm256_sub_epi8(add_fifth_bits(nibbles(b.qs), b.qh), _mm256_set1_epi8(16));
    }
};
struct UnpackQ5_1 {
    __m256i operator()(const BlockQ5_1& b) const { return add_fifth_bits(nibbles(b.qs), b.qh); }
};
struct UnpackQ8_0 {
    __m256i operator()(const BlockQ8_0& b) const { return loadu(b.qs); }
};
// The 16 IQ4 table values in every 128-bit lane, for vpshufb.
inline __m512i iq4_table() { return _mm512_broadcast_i32x4(loadu128(gguf::kIQ4Values)); }
struct UnpackIQ4_NL {
    __m256i operator()(const BlockIQ4_NL& b) const {
        return _mm256_shuffle_epi8(_mm512_castsi512_si256(iq4_table()), nibbles(b.qs));
    }
};

// Signed: Unpack yields s8 codes (offset applied). Otherwise u8 codes and the
// block adds m · s_x (Q4_1, Q5_1).
template <class Block, class Unpack, bool Signed, bool Vnni>
struct Dot32 {
    // NR rows (row_bytes apart) times NX inputs: out[r + k · out_stride].
    template <int NR, int NX>
    static void run(const void* row, uint64_t row_bytes, const void* const* xs, uint64_t n, float* out,
                    uint64_t out_stride) {
        const Block* w[NR];
        const BlockQ8x32* y[NX];
        detail::pass_operands(row, row_bytes, xs, w, y);
        __m512 acc[NR][NX];
        float accm[NR][NX];
        for (int r = 0; r < NR; ++r)
            for (int k = 0; k < NX; ++k) {
                acc[r][k] = _mm512_setzero_ps();
                accm[r][k] = 0.f;
            }
        const Unpack unpack{};
        // Blocks b0 and b1 (lanes 0..7 and 8..15); a lone last block (b1 ==
        // b0) pairs with zeros and scale 0. Signed without VNNI: |w| times x
        // negated where w < 0 (there is no 512-bit vpsignb); x never holds
        // -128. Signed with VNNI: see minus128x.
        // always_inline: else GCC calls it, with the accumulator arrays in memory.
        auto step = [&](uint64_t b0, uint64_t b1) __attribute__((always_inline)) {
            const bool lone = b1 == b0;
            __m512i q[NR];
            __m512 dw[NR];
            [[maybe_unused]] __m512i aq[NR];
            [[maybe_unused]] __mmask64 neg[NR];
            for (int r = 0; r < NR; ++r) {
                q[r] = lone ? _mm512_zextsi256_si512(unpack(w[r][b0])) : pair(unpack(w[r][b0]), unpack(w[r][b1]));
                dw[r] = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(f16(w[r][b0].d)),
                                             _mm512_set1_ps(lone ? 0.f : f16(w[r][b1].d)));
                if constexpr (Signed && Vnni) {
                    aq[r] = _mm512_xor_si512(q[r], _mm512_set1_epi8(char(0x80)));   // w + 128 as u8
                } else if constexpr (Signed) {
                    aq[r] = _mm512_abs_epi8(q[r]);
                    neg[r] = _mm512_movepi8_mask(q[r]);
                }
            }
            for (int k = 0; k < NX; ++k) {
                const __m512i x = lone ? _mm512_zextsi256_si512(loadu(y[k][b0].qs))
                                       : pair(loadu(y[k][b0].qs), loadu(y[k][b1].qs));
                // d_w · d_x per lane (a lone block: 0 · 0).
                const __m512 dx = _mm512_mask_blend_ps(0xFF00, _mm512_set1_ps(y[k][b0].d),
                                                       _mm512_set1_ps(lone ? 0.f : y[k][b1].d));
                // VNNI, signed: Σ(w + 128)·x − 128·Σx, the −128·Σx per lane
                // once per input for all the rows (the same integers).
                [[maybe_unused]] __m512i minus128x;
                if constexpr (Signed && Vnni)
                    minus128x = _mm512_sub_epi32(
                        _mm512_setzero_si512(),
                        _mm512_dpbusd_epi32(_mm512_setzero_si512(), _mm512_set1_epi8(char(0x80)), x));
                for (int r = 0; r < NR; ++r) {
                    __m512i p;
                    if constexpr (Signed && Vnni) p = _mm512_dpbusd_epi32(minus128x, aq[r], x);
                    else if constexpr (Signed)
                        p = dot_u8s8<Vnni>(aq[r], _mm512_mask_sub_epi8(x, neg[r], _mm512_setzero_si512(), x));
                    else p = dot_u8s8<Vnni>(q[r], x);
                    acc[r][k] = _mm512_fmadd_ps(_mm512_mul_ps(dw[r], dx), _mm512_cvtepi32_ps(p), acc[r][k]);
                }
            }
            if constexpr (!Signed)
                for (int r = 0; r < NR; ++r) {
                    const float m0 = f16(w[r][b0].m);
                    for (int k = 0; k < NX; ++k) accm[r][k] = fma1(m0, y[k][b0].s, accm[r][k]);
                    if (lone) continue;
                    const float m1 = f16(w[r][b1].m);
                    for (int k = 0; k < NX; ++k) accm[r][k] = fma1(m1, y[k][b1].s, accm[r][k]);
                }
        };
        const uint64_t nb = n / 32;
        uint64_t b = 0;
        for (; b + 2 <= nb; b += 2) step(b, b + 1);
        if (b < nb) step(b, b);
        for (int r = 0; r < NR; ++r)
            for (int k = 0; k < NX; ++k) out[r + k * out_stride] = _mm512_reduce_add_ps(acc[r][k]) + accm[r][k];
    }
};

// Lane index vectors for vpermw: 16-bit lane i takes scale first + i / per.
struct ScaleIndex {
    alignas(64) int16_t lane[32];
};
constexpr ScaleIndex scale_index(int first, int per) {
    ScaleIndex r{};
    for (int i = 0; i < 32; ++i) r.lane[i] = int16_t(first + i / per);
    return r;
}
// Q4_K/Q5_K chunk c: sub-blocks 2c | 2c+1 (256 bits each).
constexpr ScaleIndex kK45Index[4] = {scale_index(0, 16), scale_index(2, 16), scale_index(4, 16), scale_index(6, 16)};
// Q6_K: groups 4i .. 4i+3, one per 128-bit lane.
constexpr ScaleIndex kQ6Index[4] = {scale_index(0, 8), scale_index(4, 8), scale_index(8, 8), scale_index(12, 8)};

inline __m512i load_index(const ScaleIndex& s) { return _mm512_load_si512(s.lane); }

// Q4_K/Q5_K mins: 4 int32 lanes of Σ_j m_j·(bsums[2j] + bsums[2j+1]).
inline __m128i k_min_sums(const uint8_t m[8], const int16_t bsums[16]) {
    const __m128i bs = _mm_hadd_epi16(loadu128(bsums), loadu128(bsums + 8));   // 8 sub-block sums
    return _mm_madd_epi16(bs, _mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(m))));
}

// Q4_K (HighBits false) and Q5_K. Chunk c (32 bytes) holds sub-block 2c in its
// low nibbles and 2c+1 in its high nibbles: broadcast it to both halves and
// shift the upper half by 4, giving elements 64c..64c+63 in order.
template <class Block, bool HighBits>
struct DotK45 {
    template <int NR, int NX>
    static void run(const void* row, uint64_t, const void* const* xs, uint64_t n, float* out, uint64_t out_stride) {
        static_assert(NR == 1);
        const auto* w = static_cast<const Block*>(row);
        const BlockQ8x256* y[NX];
        __m512 acc[NX];
        __m128 accm[NX];
        for (int k = 0; k < NX; ++k) {
            y[k] = static_cast<const BlockQ8x256*>(xs[k]);
            acc[k] = _mm512_setzero_ps();
            accm[k] = _mm_setzero_ps();
        }
        const __m512i m4 = _mm512_set1_epi8(0x0F), b4 = _mm512_set1_epi8(0x10);
        constexpr __mmask32 kUpper16 = 0xFFFF0000u;   // the upper 256 bits, in 16-bit lanes
        for (uint64_t b = 0; b < n / 256; ++b) {
            uint8_t sc[8], m[8];
            detail::unpack_k_scales(w[b].scales, sc, m);
            const __m512i sc16 =
                _mm512_castsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(sc))));
            const uint8_t* q = w[b].qs;
            // Q5_K: byte test masks for bits 2c (lower half) and 2c+1 (upper half).
            [[maybe_unused]] __m512i qh{}, bit{};
            if constexpr (HighBits) {
                qh = _mm512_broadcast_i64x4(loadu(w[b].qh));
                bit = _mm512_inserti64x4(_mm512_set1_epi8(1), _mm256_set1_epi8(2), 1);
            }
            __m512i isum[NX];
            for (int k = 0; k < NX; ++k) isum[k] = _mm512_setzero_si512();
            for (int c = 0; c < 4; ++c, q += 32) {
                __m512i v = _mm512_broadcast_i64x4(loadu(q));
                v = _mm512_and_si512(_mm512_mask_srli_epi16(v, kUpper16, v, 4), m4);
                if constexpr (HighBits) {
                    v = _mm512_mask_add_epi8(v, _mm512_test_epi8_mask(qh, bit), v, b4);
                    bit = _mm512_slli_epi16(bit, 2);   // 0x01/0x02 .. 0x40/0x80: never crosses a byte
                }
                const __m512i s = _mm512_permutexvar_epi16(load_index(kK45Index[c]), sc16);
                for (int k = 0; k < NX; ++k) {
                    const __m512i p = _mm512_maddubs_epi16(v, loadu512(y[k][b].qs + 64 * c));
                    isum[k] = _mm512_add_epi32(isum[k], _mm512_madd_epi16(p, s));
                }
            }
            const float dw = f16(w[b].d), dmin = f16(w[b].dmin);
            for (int k = 0; k < NX; ++k) {
                acc[k] = _mm512_fmadd_ps(_mm512_set1_ps(dw * y[k][b].d), _mm512_cvtepi32_ps(isum[k]), acc[k]);
                accm[k] = _mm_fmadd_ps(_mm_set1_ps(dmin * y[k][b].d), _mm_cvtepi32_ps(k_min_sums(m, y[k][b].bsums)),
                                       accm[k]);
            }
        }
        for (int k = 0; k < NX; ++k) out[k * out_stride] = _mm512_reduce_add_ps(acc[k]) - hsum(accm[k]);
    }
};

// Q6_K, per 128-element half h: ql[64h..64h+64) in one register gives, from
// its low nibbles, elements 0..63 of the half (quads 0 | 1) and, from its high
// nibbles, elements 64..127 (quads 2 | 3); qh (broadcast) supplies bits
// 2k..2k+1 for quad k. Each 128-bit lane is one group of 16.
struct DotQ6K {
    template <int NR, int NX>
    static void run(const void* row, uint64_t, const void* const* xs, uint64_t n, float* out, uint64_t out_stride) {
        static_assert(NR == 1);
        const auto* w = static_cast<const BlockQ6_K*>(row);
        const BlockQ8x256* y[NX];
        __m512 acc[NX];
        for (int k = 0; k < NX; ++k) {
            y[k] = static_cast<const BlockQ8x256*>(xs[k]);
            acc[k] = _mm512_setzero_ps();
        }
        const __m512i m4 = _mm512_set1_epi8(0x0F), m30 = _mm512_set1_epi8(0x30);
        constexpr __mmask32 kLower16 = 0x0000FFFFu, kUpper16 = 0xFFFF0000u;
        for (uint64_t b = 0; b < n / 256; ++b) {
            const __m256i sc = _mm256_cvtepi8_epi16(loadu128(w[b].scales));   // 16 int16
            const __m512i sc16 = _mm512_castsi256_si512(sc);
            __m512i isum[NX];
            for (int k = 0; k < NX; ++k) isum[k] = _mm512_setzero_si512();
            for (int h = 0; h < 2; ++h) {
                const __m512i ql = loadu512(w[b].ql + 64 * h);
                const __m512i qh = _mm512_broadcast_i64x4(loadu(w[b].qh + 32 * h));
                // Quads 0 | 1: (qh << 4) | (qh << 2); quads 2 | 3: qh | (qh >> 2); bits 4..5 kept.
                const __m512i h01 =
                    _mm512_and_si512(_mm512_mask_slli_epi16(_mm512_slli_epi16(qh, 2), kLower16, qh, 4), m30);
                const __m512i h23 = _mm512_and_si512(_mm512_mask_srli_epi16(qh, kUpper16, qh, 2), m30);
                const __m512i q01 = _mm512_or_si512(_mm512_and_si512(ql, m4), h01);
                const __m512i q23 = _mm512_or_si512(_mm512_and_si512(_mm512_srli_epi16(ql, 4), m4), h23);
                const __m512i s01 = _mm512_permutexvar_epi16(load_index(kQ6Index[2 * h]), sc16);
                const __m512i s23 = _mm512_permutexvar_epi16(load_index(kQ6Index[2 * h + 1]), sc16);
                for (int k = 0; k < NX; ++k) {
                    const int8_t* xq = y[k][b].qs + 128 * h;
                    const __m512i p01 = _mm512_maddubs_epi16(q01, loadu512(xq));
                    const __m512i p23 = _mm512_maddubs_epi16(q23, loadu512(xq + 64));
                    isum[k] = _mm512_add_epi32(isum[k], _mm512_madd_epi16(p01, s01));
                    isum[k] = _mm512_add_epi32(isum[k], _mm512_madd_epi16(p23, s23));
                }
            }
            // The -32 offset: Σ_g scales[g]·32·bsums[g].
            const float dw = f16(w[b].d);
            for (int k = 0; k < NX; ++k) {
                const __m256i off = _mm256_madd_epi16(loadu(y[k][b].bsums), sc);
                isum[k] = _mm512_sub_epi32(isum[k], _mm512_zextsi256_si512(_mm256_slli_epi32(off, 5)));
                acc[k] = _mm512_fmadd_ps(_mm512_set1_ps(dw * y[k][b].d), _mm512_cvtepi32_ps(isum[k]), acc[k]);
            }
        }
        for (int k = 0; k < NX; ++k) out[k * out_stride] = _mm512_reduce_add_ps(acc[k]);
    }
};

// isum + Σ of the int16 pairs of p times s, per int32 lane: vpdpwssd with
// VNNI, else vpmaddwd and vpaddd (the same integers: neither saturates).
template <bool Vnni>
inline __m512i add_scaled(__m512i isum, __m512i p, __m512i s) {
    if constexpr (Vnni) return _mm512_dpwssd_epi32(isum, p, s);
    else return _mm512_add_epi32(isum, _mm512_madd_epi16(p, s));
}

// IQ4_XS: the 8 sub-block multipliers ls − 32 as int16 lanes 0..7: low 4
// bits from nibble ib of scales_l, top 2 from bits 2ib..2ib+1 of scales_h.
inline __m128i iq4_xs_scales(const BlockIQ4_XS& b) {
    const uint32_t l = detail::load_u32(b.scales_l);
    const __m128i lv = _mm_set_epi16(short(l >> 16), short(l >> 16), short(l >> 16), short(l >> 16),
                                     short(l), short(l), short(l), short(l));
    const __m128i lo = _mm_and_si128(_mm_srlv_epi16(lv, _mm_setr_epi16(0, 4, 8, 12, 0, 4, 8, 12)), _mm_set1_epi16(0xF));
    const __m128i hi = _mm_and_si128(_mm_srlv_epi16(_mm_set1_epi16(short(b.scales_h)),
                                                    _mm_setr_epi16(0, 2, 4, 6, 8, 10, 12, 14)),
                                     _mm_set1_epi16(3));
    return _mm_sub_epi16(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi16(32));
}

// Q3_K: the 16 signed multipliers (gguf::q3_k_scale) as int16, eight bytes
// at a time: low nibbles of s[0..8) (j < 8) and their high nibbles (j >= 8);
// top bits of j from byte j % 4 of s[8..12) shifted by 2·(j / 4).
inline __m256i q3_k_scales(const uint8_t s[12]) {
    uint64_t a;
    std::memcpy(&a, s, 8);
    const uint64_t c = detail::load_u32(s + 8), m2 = 0x03030303u, m4 = 0x0F0F0F0F0F0F0F0Full;
    const uint64_t lo = (a & m4) | ((c & m2) | ((c >> 2) & m2) << 32) << 4;
    const uint64_t hi = ((a >> 4) & m4) | (((c >> 4) & m2) | ((c >> 6) & m2) << 32) << 4;
    const __m128i v = _mm_sub_epi8(_mm_set_epi64x(int64_t(hi), int64_t(lo)), _mm_set1_epi8(32));
    return _mm256_cvtepi8_epi16(v);
}

// IQ4_XS, per chunk c of 64 elements (sub-blocks 2c | 2c+1, 32 bytes of qs):
// the bytes of sub-block 2c go to 128-bit lanes 0 and 1, those of 2c+1 to
// lanes 2 and 3; lanes 1 and 3 take the high nibbles (elements 16..31 of a
// sub-block), then vpshufb looks the values up. Signed values: |v| times x
// negated where v < 0 (there is no 512-bit vpsignb; x never holds -128).
template <bool Vnni>
struct DotIQ4XS {
    template <int NR, int NX>
    static void run(const void* row, uint64_t, const void* const* xs, uint64_t n, float* out, uint64_t out_stride) {
        static_assert(NR == 1);
        const auto* w = static_cast<const BlockIQ4_XS*>(row);
        const BlockQ8x256* y[NX];
        __m512 acc[NX];
        for (int k = 0; k < NX; ++k) {
            y[k] = static_cast<const BlockQ8x256*>(xs[k]);
            acc[k] = _mm512_setzero_ps();
        }
        const __m512i table = iq4_table(), m4 = _mm512_set1_epi8(0x0F);
        constexpr __mmask32 kOddLanes = 0xFF00FF00u;   // 128-bit lanes 1 and 3, in 16-bit lanes
        for (uint64_t b = 0; b < n / 256; ++b) {
            const __m512i sc16 = _mm512_castsi128_si512(iq4_xs_scales(w[b]));
            __m512i isum[NX];
            for (int k = 0; k < NX; ++k) isum[k] = _mm512_setzero_si512();
            for (int c = 0; c < 4; ++c) {
                const __m512i q = _mm512_castsi256_si512(loadu(w[b].qs + 32 * c));
                __m512i v = _mm512_shuffle_i64x2(q, q, 0x50);   // 128-bit lanes 0, 0, 1, 1
                v = _mm512_shuffle_epi8(table, _mm512_and_si512(_mm512_mask_srli_epi16(v, kOddLanes, v, 4), m4));
                const __m512i av = _mm512_abs_epi8(v);
                const __mmask64 neg = _mm512_movepi8_mask(v);
                const __m512i s = _mm512_permutexvar_epi16(load_index(kK45Index[c]), sc16);
                for (int k = 0; k < NX; ++k) {
                    const __m512i x = loadu512(y[k][b].qs + 64 * c);
                    const __m512i p = _mm512_maddubs_epi16(av, _mm512_mask_sub_epi8(x, neg, _mm512_setzero_si512(), x));
                    isum[k] = add_scaled<Vnni>(isum[k], p, s);
                }
            }
            const float dw = f16(w[b].d);
            for (int k = 0; k < NX; ++k)
                acc[k] = _mm512_fmadd_ps(_mm512_set1_ps(dw * y[k][b].d), _mm512_cvtepi32_ps(isum[k]), acc[k]);
        }
        for (int k = 0; k < NX; ++k) out[k * out_stride] = _mm512_reduce_add_ps(acc[k]);
    }
};

// Q2_K (Q3 false) and Q3_K, per chunk c of 64 elements (half h = c / 2,
// 2-bit fields j = 2(c % 2) and j + 1 of qs[32h .. 32h+32), elements
// 128h + 32j + l): the 32 bytes in both 256-bit halves, shifted by 2j in the
// lower and 2j + 2 in the upper. Each 128-bit lane is one group of 16, so the
// scales go in per lane as for Q6_K. Q3_K's third bit of field j is bit
// 4h + j = 2c (lower half) or 2c + 1 (upper) of hmask[l] (codes 0..7; the −4
// is applied as Σ_g s_g·4·bsums[g]); Q2_K's mins as Σ_g m_g·bsums[g],
// scaled by dmin.
template <bool Q3, bool Vnni>
struct DotKLow {
    using Block = std::conditional_t<Q3, BlockQ3_K, BlockQ2_K>;
    template <int NR, int NX>
    static void run(const void* row, uint64_t, const void* const* xs, uint64_t n, float* out, uint64_t out_stride) {
        static_assert(NR == 1);
        const auto* w = static_cast<const Block*>(row);
        const BlockQ8x256* y[NX];
        __m512 acc[NX];
        [[maybe_unused]] __m256 accm[NX];
        for (int k = 0; k < NX; ++k) {
            y[k] = static_cast<const BlockQ8x256*>(xs[k]);
            acc[k] = _mm512_setzero_ps();
            accm[k] = _mm256_setzero_ps();
        }
        const __m512i m2 = _mm512_set1_epi8(3), b2 = _mm512_set1_epi8(4);
        // Shift counts per 16-bit lane for fields 0 | 1 and 2 | 3.
        const __m512i shift[2] = {_mm512_inserti64x4(_mm512_set1_epi16(0), _mm256_set1_epi16(2), 1),
                                  _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(6), 1)};
        for (uint64_t b = 0; b < n / 256; ++b) {
            // Per group of 16: Q2_K's 4-bit scale, Q3_K's signed multiplier.
            __m256i sc;
            if constexpr (Q3) sc = q3_k_scales(w[b].scales);
            else sc = _mm256_cvtepu8_epi16(_mm_and_si128(loadu128(w[b].scales), _mm_set1_epi8(0x0F)));
            const __m512i sc16 = _mm512_castsi256_si512(sc);
            [[maybe_unused]] __m512i hm{}, bit{};
            if constexpr (Q3) {
                hm = _mm512_broadcast_i64x4(loadu(w[b].hmask));
                bit = _mm512_inserti64x4(_mm512_set1_epi8(1), _mm256_set1_epi8(2), 1);
            }
            __m512i isum[NX];
            for (int k = 0; k < NX; ++k) isum[k] = _mm512_setzero_si512();
            for (int c = 0; c < 4; ++c) {
                const __m512i q = _mm512_broadcast_i64x4(loadu(w[b].qs + 32 * (c / 2)));
                __m512i codes = _mm512_and_si512(_mm512_srlv_epi16(q, shift[c % 2]), m2);
                if constexpr (Q3) {
                    codes = _mm512_mask_add_epi8(codes, _mm512_test_epi8_mask(hm, bit), codes, b2);
                    bit = _mm512_slli_epi16(bit, 2);   // 0x01/0x02 .. 0x40/0x80: never crosses a byte
                }
                const __m512i s = _mm512_permutexvar_epi16(load_index(kQ6Index[c]), sc16);
                for (int k = 0; k < NX; ++k) {
                    const __m512i p = _mm512_maddubs_epi16(codes, loadu512(y[k][b].qs + 64 * c));
                    isum[k] = add_scaled<Vnni>(isum[k], p, s);
                }
            }
            const float dw = f16(w[b].d);
            if constexpr (Q3) {
                for (int k = 0; k < NX; ++k) {
                    const __m256i off = _mm256_madd_epi16(loadu(y[k][b].bsums), sc);
                    isum[k] = _mm512_sub_epi32(isum[k], _mm512_zextsi256_si512(_mm256_slli_epi32(off, 2)));
                    acc[k] = _mm512_fmadd_ps(_mm512_set1_ps(dw * y[k][b].d), _mm512_cvtepi32_ps(isum[k]), acc[k]);
                }
            } else {
                const __m256i m16 =
                    _mm256_cvtepu8_epi16(_mm_and_si128(_mm_srli_epi16(loadu128(w[b].scales), 4), _mm_set1_epi8(0x0F)));
                const float dmin = f16(w[b].dmin);
                for (int k = 0; k < NX; ++k) {
                    const __m256i msum = _mm256_madd_epi16(loadu(y[k][b].bsums), m16);
                    acc[k] = _mm512_fmadd_ps(_mm512_set1_ps(dw * y[k][b].d), _mm512_cvtepi32_ps(isum[k]), acc[k]);
                    accm[k] = _mm256_fmadd_ps(_mm256_set1_ps(dmin * y[k][b].d), _mm256_cvtepi32_ps(msum), accm[k]);
                }
            }
        }
        for (int k = 0; k < NX; ++k) {
            const float sum = _mm512_reduce_add_ps(acc[k]);
            if constexpr (Q3) out[k * out_stride] = sum;
            else out[k * out_stride] = sum - _mm512_reduce_add_ps(_mm512_zextps256_ps512(accm[k]));
        }
    }
};

// Inputs per pass: 32 zmm registers hold the unpacked weights, the scales
// and NR·NX accumulators. Measured on pp64 (Zen 4, SmolLM2 Q4_1, one
// thread): 32-element types 334 tok/s with one row × 8 inputs, 372 with two
// rows × 4 (x loaded once for both rows); one row × 4 and × 8 measured the
// same. The k-quants take one row at a time (not measured with two).
// With VNNI the signed 32-element types also take four rows × 4 inputs (the
// input loaded once for four rows; 16 accumulators): gemma-3-270m pp512 on
// 2 threads 943 -> 1008 tok/s (with the VNNI offset form above).
// IQ4_NL takes Q8_0's widths and IQ4_XS/Q2_K/Q3_K kWidthK (not tuned). On a
// 576 x 1536 matrix times 64 inputs (one thread, Xeon with AVX-512 VNNI,
// 2026-11-28, a loaded machine, best of 15) they ran at 1.6x (IQ4_NL), 1.7x
// (IQ4_XS), 1.6x (Q2_K) and 2.2x (Q3_K) the AVX2 kernels' rate with VNNI,
// 1.3x, 1.5x, 1.4x, 2.0x without.
constexpr int kWidth32 = 8, kWidth32Pair = 4, kWidth32Quad = 4, kWidthK = 8;

template <bool Vnni> using K4_0 = Dot32<BlockQ4_0, UnpackQ4_0, true, Vnni>;
template <bool Vnni> using K4_1 = Dot32<BlockQ4_1, UnpackQ4_1, false, Vnni>;
template <bool Vnni> using K5_0 = Dot32<BlockQ5_0, UnpackQ5_0, true, Vnni>;
template <bool Vnni> using K5_1 = Dot32<BlockQ5_1, UnpackQ5_1, false, Vnni>;
template <bool Vnni> using K8_0 = Dot32<BlockQ8_0, UnpackQ8_0, true, Vnni>;
using K4K = DotK45<BlockQ4_K, false>;
using K5K = DotK45<BlockQ5_K, true>;
template <bool Vnni> using KIQ4NL = Dot32<BlockIQ4_NL, UnpackIQ4_NL, true, Vnni>;   // widths as Q8_0's
template <bool Vnni> using KQ2K = DotKLow<false, Vnni>;
template <bool Vnni> using KQ3K = DotKLow<true, Vnni>;

}  // namespace

namespace detail {
const QDotFn kQDotAvx512[kQDotSlots] = {
    run_single<K4_0<false>>,   run_single<K4_1<false>>,     run_single<K5_0<false>>, run_single<K5_1<false>>,
    run_single<K8_0<false>>,   run_single<K4K>,             run_single<K5K>,         run_single<DotQ6K>,
    run_single<KIQ4NL<false>>, run_single<DotIQ4XS<false>>, run_single<KQ2K<false>>, run_single<KQ3K<false>>,
};
const QDotFn kQDotAvx512Vnni[kQDotSlots] = {
    run_single<K4_0<true>>,   run_single<K4_1<true>>,     run_single<K5_0<true>>, run_single<K5_1<true>>,
    run_single<K8_0<true>>,   run_single<K4K>,            run_single<K5K>,        run_single<DotQ6K>,
    run_single<KIQ4NL<true>>, run_single<DotIQ4XS<true>>, run_single<KQ2K<true>>, run_single<KQ3K<true>>,
};
const QDotMultiFn kQDotMultiAvx512[kQDotSlots] = {
    run_multi<K4_0<false>, kWidth32, kWidth32Pair>,   run_multi<K4_1<false>, kWidth32, kWidth32Pair>,
    run_multi<K5_0<false>, kWidth32, kWidth32Pair>,   run_multi<K5_1<false>, kWidth32, kWidth32Pair>,
    run_multi<K8_0<false>, kWidth32, kWidth32Pair>,   run_multi<K4K, kWidthK>,
    run_multi<K5K, kWidthK>,                          run_multi<DotQ6K, kWidthK>,
    run_multi<KIQ4NL<false>, kWidth32, kWidth32Pair>, run_multi<DotIQ4XS<false>, kWidthK>,
    run_multi<KQ2K<false>, kWidthK>,                  run_multi<KQ3K<false>, kWidthK>,
};
const QDotMultiFn kQDotMultiAvx512Vnni[kQDotSlots] = {
    run_multi<K4_0<true>, kWidth32, kWidth32Pair, kWidth32Quad>,   run_multi<K4_1<true>, kWidth32, kWidth32Pair>,
    run_multi<K5_0<true>, kWidth32, kWidth32Pair, kWidth32Quad>,   run_multi<K5_1<true>, kWidth32, kWidth32Pair>,
    run_multi<K8_0<true>, kWidth32, kWidth32Pair, kWidth32Quad>,   run_multi<K4K, kWidthK>,
    run_multi<K5K, kWidthK>,                                       run_multi<DotQ6K, kWidthK>,
    run_multi<KIQ4NL<true>, kWidth32, kWidth32Pair, kWidth32Quad>, run_multi<DotIQ4XS<true>, kWidthK>,
    run_multi<KQ2K<true>, kWidthK>,                                run_multi<KQ3K<true>, kWidthK>,
};
}  // namespace detail

}  // namespace ptxlm::cpu
