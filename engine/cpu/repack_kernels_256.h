// The packed kernels of the 256-value types (K-quants and IQ4_XS), over
// the policies of repack_kernels_common.h; repack_kernels.h puts them in
// the kernel table. Internal linkage, as every piece of these headers.
#pragma once

#include "engine/cpu/repack_kernels_common.h"

namespace ptxlm::cpu {
namespace {

// The 256-value types (K-quants and IQ4_XS): sub-blocks of 32 (Q4_K, Q5_K,
// IQ4_XS) or 16 (Q2_K, Q3_K, Q6_K) values with their own integer scales.
// Per (row, input) and super-block, the scalar kernel's integers
// (qdot.cpp): isum = Σ_j sc_j · Σ(q·x) over sub-block j, and for
// Q2_K/Q4_K/Q5_K msum = Σ_j m_j · Σx over it (from the input's bsums), for
// Q3_K and Q6_K the offset (−4 or −32) · Σ_g sc_g · bsums_g in isum; then
// acc += d_w·d_x · isum (and −= dmin_w·d_x · msum), one lane per row. A
// sub-block's products are summed across its words and meet its scale
// once: for all inputs, a word of 8 rows is unpacked once and a scale
// spread once. The kernels take a 256-bit policy (Dot::Narrow; the zmm
// table runs the ymm VNNI ones) and Scaled<Dot> below: with vpmaddubsw
// (AVX2, Avx512) the sums are int16 (the bounds below) and meet the scale
// in vpmaddwd by (sc, sc) per lane; with vpdpbusd (Avx512Vnni) they are
// int32, one vpdpbusd per word, and meet it in vpmulld by sc per lane
// (IQ4_XS's table values go in as u8 v + 128, the sum starting at −128·Σx).
// Every step is exact, so both give the scalar kernel's integers and, with
// the float steps shared, the same bits.

// 4 input bytes (or two int16) in every int32 lane.
inline __m256i bcast32(const void* p) {
    int32_t v;
    __builtin_memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// Bytes J0 and J1 (0..3) of each int32 lane of v, sign-extended into the
// lane's low and high int16: a sub-block's scale (or two) for each row,
// ready for vpmaddwd.
template <int J0, int J1>
inline __m256i s8_pair(__m256i v) {
    constexpr char z = char(0x80);
    const __m256i idx = _mm256_setr_epi8(z, J0, z, J1, z, 4 + J0, z, 4 + J1, z, 8 + J0, z, 8 + J1, z, 12 + J0, z,
                                         12 + J1, z, J0, z, J1, z, 4 + J0, z, 4 + J1, z, 8 + J0, z, 8 + J1, z,
                                         12 + J0, z, 12 + J1);
    return _mm256_srai_epi16(_mm256_shuffle_epi8(v, idx), 8);
}

// Bytes J0 and J1 (0..3) of each int32 lane of v, zero-extended into the
// lane's low and high int16.
template <int J0, int J1>
inline __m256i u8_pair(__m256i v) {
    constexpr char z = char(0x80);
    const __m256i idx = _mm256_setr_epi8(J0, z, J1, z, 4 + J0, z, 4 + J1, z, 8 + J0, z, 8 + J1, z, 12 + J0, z,
                                         12 + J1, z, J0, z, J1, z, 4 + J0, z, 4 + J1, z, 8 + J0, z, 8 + J1, z,
                                         12 + J0, z, 12 + J1, z);
    return _mm256_shuffle_epi8(v, idx);
}

// A sub-block's partial sums on a 256-bit policy Dot and how they meet the
// rows' scales: int16 pairs (vpmaddubsw) met by vpmaddwd with (sc, sc) per
// lane, or int32 lanes (Dot::kInt32Parts: vpdpbusd) met by vpmulld with sc
// per lane. s8<J>: byte J of each int32 lane of v, sign-extended, in the
// form meet() takes; u4<J>: that byte's low nibble.
template <class Dot>
struct Scaled {
    static_assert(Dot::kWords == 1);
    static constexpr bool kInt32 = Dot::kInt32Parts;
    template <int J>
    static __m256i s8(__m256i v) {
        if constexpr (kInt32) return _mm256_srai_epi32(_mm256_slli_epi32(v, 24 - 8 * J), 24);
        else return s8_pair<J, J>(v);
    }
    template <int J>
    static __m256i u4(__m256i v) {
        if constexpr (kInt32) return _mm256_and_si256(_mm256_srli_epi32(v, 8 * J), _mm256_set1_epi32(0xF));
        else return _mm256_and_si256(u8_pair<J, J>(v), _mm256_set1_epi16(0xF));
    }
    // isum + part · sc.
    static __m256i meet(__m256i isum, __m256i part, __m256i sc) {
        if constexpr (kInt32) return _mm256_add_epi32(isum, _mm256_mullo_epi32(part, sc));
        else return _mm256_add_epi32(isum, _mm256_madd_epi16(part, sc));
    }
};

// v shifted left (S > 0) or right (S < 0) by |S| bits per int16.
template <int S>
inline __m256i shift16(__m256i v) {
    if constexpr (S > 0) return _mm256_slli_epi16(v, S);
    else if constexpr (S < 0) return _mm256_srli_epi16(v, -S);
    else return v;
}

// Σ_g c_g · bsums_g over the group pairs (G, G + 1) .. (14, 15) of each
// input, into sum: c_g the signed byte g % 4 of sc[g / 4] (Q3_K's
// multipliers, Q6_K's scales), a pair per lane against the input's two
// bsums in one vpmaddwd.
template <int G, int NX>
inline void signed_bsum_terms(const __m256i* sc, const BlockQ8x256* const* y, uint64_t b, __m256i* sum) {
    const __m256i cp = s8_pair<G % 4, G % 4 + 1>(sc[G / 4]);
    for (int k = 0; k < NX; ++k) sum[k] = _mm256_add_epi32(sum[k], _mm256_madd_epi16(cp, bcast32(y[k][b].bsums + G)));
    if constexpr (G < 14) signed_bsum_terms<G + 2, NX>(sc, y, b, sum);
}

// Q4_K (Fifth false) and Q5_K. Packed super-block (repack.cpp's shape):
// d[8], dmin[8], the 12 scale bytes as 3 words × 8 rows, (Q5_K: qh as 8
// words × 8 rows,) qs as 32 words × 8 rows: 1152 or 1408 bytes. qs word
// 8c + w holds values 64c + 4w.. (low nibbles, sub-block 2c) and 64c + 32 +
// 4w.. (high nibbles, sub-block 2c + 1); Q5_K's fifth bits of both are bits
// 2c and 2c + 1 of qh word w's bytes. The 6-bit scales unpack for 8 rows at
// once, unpack_k_scales (qdot.h) on int32 lanes.
// int16 bounds: 8 words of 4-bit codes, 8 · 2 · 15 · 127 = 30480; 4 words
// of 5-bit ones, 4 · 2 · 31 · 127 = 31496 (int32 sums take all 8).
template <class Dot, bool Fifth>
struct K45x8 {
    using Sc = Scaled<Dot>;
    static constexpr uint64_t kScales = 32, kQh = kScales + 96, kQs = kQh + (Fifth ? 256 : 0), kBlock = kQs + 1024;
    static constexpr int kPart = Fifth && !Sc::kInt32 ? 4 : 8;
    // Sub-block J times each input, its partial sums met by the rows'
    // scales sc (Scaled's form), into isum.
    template <int J, int NX>
    static void sub_block(const uint8_t* g, const BlockQ8x256* const* y, uint64_t b, __m256i sc, __m256i* isum,
                          bool pf) {
        prefetch_slice<J, 8, kBlock>(g, pf);
        constexpr int c = J / 2;
        constexpr bool high = J % 2 == 1;
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        // With int32 parts at one or two inputs, two parts per input taking
        // word pairs in turn: two vpdpbusd chains of 4 instead of one of 8.
        constexpr int S = Sc::kInt32 && NX <= 2 ? 2 : 1;
        for (int w0 = 0; w0 < 8; w0 += kPart) {
            __m256i part[NX * S];
            for (int k = 0; k < NX * S; ++k) part[k] = _mm256_setzero_si256();
            _Pragma("GCC unroll 4") for (int w = w0; w < w0 + kPart; w += 2) {
                __m256i q[2];
                for (int i = 0; i < 2; ++i) {
                    const __m256i v = loadu(g + kQs + 32 * (8 * c + w + i));
                    q[i] = _mm256_and_si256(high ? _mm256_srli_epi16(v, 4) : v, m4);
                    if constexpr (Fifth)   // bit J of each qh byte to bit 4
                        q[i] = Dot::merge5(q[i], shift16<4 - J>(loadu(g + kQh + 32 * (w + i))));
                }
                for (int k = 0; k < NX; ++k) {
                    const int8_t* x = y[k][b].qs + 64 * c + 32 * high + 4 * w;
                    __m256i& p = part[k * S + (w - w0) / 2 % S];
                    p = Dot::part2(p, q[0], bcast32(x), q[1], bcast32(x + 4));
                    keep_in_register(p);
                }
            }
            for (int k = 0; k < NX; ++k) {
                isum[k] = Sc::meet(isum[k], add_sums<Dot, S>(part + k * S), sc);
            }
        }
    }
    // m_j · (bsums[2j] + bsums[2j + 1]) for sub-blocks J.. of each input
    // into msum (the rows' mins m in bytes J % 4 of each lane).
    template <int J, int NX>
    static void mins(__m256i m, const BlockQ8x256* const* y, uint64_t b, __m256i* msum) {
        const __m256i mp = s8_pair<J % 4, J % 4>(m);
        for (int k = 0; k < NX; ++k)
            msum[k] = _mm256_add_epi32(msum[k], _mm256_madd_epi16(mp, bcast32(y[k][b].bsums + 2 * J)));
        if constexpr (J % 4 < 3) mins<J + 1, NX>(m, y, b, msum);
    }
    template <int NX>
    static void run(const uint8_t* g, const void* const* xs, uint64_t n, float* out, uint64_t out_stride, bool pf) {
        Inputs<NX, BlockQ8x256> in(xs);
        const BlockQ8x256* const* y = in.y;
        const __m256i k3f = _mm256_set1_epi8(0x3F), k0f = _mm256_set1_epi8(0x0F), k30 = _mm256_set1_epi8(0x30);
        for (uint64_t b = 0; b < n / 256; ++b, g += kBlock) {
            const __m256i a = loadu(g + kScales), s1 = loadu(g + kScales + 32), s2 = loadu(g + kScales + 64);
            const __m256i sc_lo = _mm256_and_si256(a, k3f);
            const __m256i sc_hi =
                _mm256_or_si256(_mm256_and_si256(s2, k0f), _mm256_and_si256(_mm256_srli_epi32(a, 2), k30));
            __m256i isum[NX];
            for (int k = 0; k < NX; ++k) isum[k] = _mm256_setzero_si256();
            sub_block<0, NX>(g, y, b, Sc::template s8<0>(sc_lo), isum, pf);
            sub_block<1, NX>(g, y, b, Sc::template s8<1>(sc_lo), isum, pf);
            sub_block<2, NX>(g, y, b, Sc::template s8<2>(sc_lo), isum, pf);
            sub_block<3, NX>(g, y, b, Sc::template s8<3>(sc_lo), isum, pf);
            sub_block<4, NX>(g, y, b, Sc::template s8<0>(sc_hi), isum, pf);
            sub_block<5, NX>(g, y, b, Sc::template s8<1>(sc_hi), isum, pf);
            sub_block<6, NX>(g, y, b, Sc::template s8<2>(sc_hi), isum, pf);
            sub_block<7, NX>(g, y, b, Sc::template s8<3>(sc_hi), isum, pf);
            __m256i msum[NX];
            for (int k = 0; k < NX; ++k) msum[k] = _mm256_setzero_si256();
            mins<0, NX>(_mm256_and_si256(s1, k3f), y, b, msum);
            mins<4, NX>(_mm256_or_si256(_mm256_and_si256(_mm256_srli_epi32(s2, 4), k0f),
                                        _mm256_and_si256(_mm256_srli_epi32(s1, 2), k30)),
                        y, b, msum);
            const __m256 d = f16x8(g), dmin = f16x8(g + 16);
            for (int k = 0; k < NX; ++k) in.scale_add_min(k, d, dmin, b, isum[k], msum[k]);
        }
        in.store(out, out_stride);
    }
};

// Q6_K. Packed super-block: d[8], ql as 32 words × 8 rows, qh as 16, the
// 16 int8 scales as 4: 1680 bytes. Value 128h + 32k + 4w + i (quad k,
// word w) has its low 4 bits in ql word 16h + 8·(k & 1) + w (low nibbles
// for k < 2, high ones for k >= 2), its top 2 in bits 2k, 2k + 1 of qh word
// 8h + w, and group g = 8h + 2k + w / 4 (16 values) scales it. Codes 0..63:
// two words' int16 sums at most 2 · 2 · 63 · 127 = 32004, so each pair of
// words meets its group's scale (int32 sums: the group's 4 words at once);
// the −32 offset is Σ_g sc_g · 32 · bsums_g.
template <class Dot>
struct Q6Kx8 {
    using Sc = Scaled<Dot>;
    static constexpr uint64_t kQl = 16, kQh = kQl + 1024, kScales = kQh + 512, kBlock = kScales + 128;
    // The 4 codes of quad K, word W of half H, for 8 rows.
    template <int H, int K, int W>
    static __m256i codes(const uint8_t* g) {
        const __m256i ql = loadu(g + kQl + 32 * (16 * H + 8 * (K & 1) + W)), qh = loadu(g + kQh + 32 * (8 * H + W));
        const __m256i lo = _mm256_and_si256(K < 2 ? ql : _mm256_srli_epi16(ql, 4), _mm256_set1_epi8(0x0F));
        return _mm256_or_si256(lo, _mm256_and_si256(shift16<4 - 2 * K>(qh), _mm256_set1_epi8(0x30)));
    }
    // Words W, W + 1 of quad K of half H times each input, into part.
    template <int H, int K, int W, int NX>
    static void words(const uint8_t* g, const BlockQ8x256* const* y, uint64_t b, __m256i* part) {
        const __m256i q0 = codes<H, K, W>(g), q1 = codes<H, K, W + 1>(g);
        for (int k = 0; k < NX; ++k) {
            const int8_t* x = y[k][b].qs + 128 * H + 32 * K + 4 * W;
            part[k] = Dot::part2(part[k], q0, bcast32(x), q1, bcast32(x + 4));
            keep_in_register(part[k]);
        }
    }
    // Groups G.. (to the end of the super-block), the scale words in sc.
    template <int G, int NX>
    static void groups(const uint8_t* g, const __m256i* sc, const BlockQ8x256* const* y, uint64_t b, __m256i* isum,
                       bool pf) {
        prefetch_slice<G, 16, kBlock>(g, pf);
        constexpr int h = G / 8, k = G % 8 / 2, w = 4 * (G % 2);
        const __m256i s = Sc::template s8<G % 4>(sc[G / 4]);
        __m256i part[NX];
        for (int j = 0; j < NX; ++j) part[j] = _mm256_setzero_si256();
        words<h, k, w, NX>(g, y, b, part);
        if constexpr (!Sc::kInt32)
            for (int j = 0; j < NX; ++j) {
                isum[j] = Sc::meet(isum[j], part[j], s);
                part[j] = _mm256_setzero_si256();
            }
        words<h, k, w + 2, NX>(g, y, b, part);
        for (int j = 0; j < NX; ++j) {
            isum[j] = Sc::meet(isum[j], part[j], s);
            keep_in_register(isum[j]);
        }
        if constexpr (G < 15) groups<G + 1, NX>(g, sc, y, b, isum, pf);
    }
    template <int NX>
    static void run(const uint8_t* g, const void* const* xs, uint64_t n, float* out, uint64_t out_stride, bool pf) {
        Inputs<NX, BlockQ8x256> in(xs);
        const BlockQ8x256* const* y = in.y;
        for (uint64_t b = 0; b < n / 256; ++b, g += kBlock) {
            const __m256i sc[4] = {loadu(g + kScales), loadu(g + kScales + 32), loadu(g + kScales + 64),
                                   loadu(g + kScales + 96)};
            __m256i isum[NX], off[NX];
            for (int k = 0; k < NX; ++k) isum[k] = off[k] = _mm256_setzero_si256();
            groups<0, NX>(g, sc, y, b, isum, pf);
            signed_bsum_terms<0, NX>(sc, y, b, off);
            const __m256 d = f16x8(g);
            for (int k = 0; k < NX; ++k) in.scale_add(k, d, b, _mm256_sub_epi32(isum[k], _mm256_slli_epi32(off[k], 5)));
        }
        in.store(out, out_stride);
    }
};

// IQ4_XS. Packed super-block: d[8], scales_h[8] (u16, in the f16 fields'
// place), scales_l as 1 word × 8 rows, qs as 32 words × 8 rows: 1088 bytes.
// qs word 4ib + w holds values 32ib + 4w.. (low nibbles) and 32ib + 16 +
// 4w.. (high ones) of sub-block ib, whose multiplier is ls − 32 (ls: the low
// 4 bits in nibble ib % 2 of scales_l byte ib / 2, the top 2 at bits 2ib of
// scales_h). The table values (|v| <= 127) take the sign trick: a word's
// pair sums reach 2 · 127 · 127 = 32258, so each meets the multiplier at
// once (vpmaddwd), as the one-row kernel's do. With int32 sums the table
// goes in as u8 v + 128 (no sign trick), a sub-block's sum starts at
// −128 · Σx over it and meets the multiplier once.
template <class Dot>
struct IQ4XSx8 {
    using Sc = Scaled<Dot>;
    static constexpr uint64_t kScalesH = 16, kScalesL = 32, kQs = 64, kBlock = kQs + 1024;
    template <int IB, int NX>
    static void sub_block(const uint8_t* g, __m256i sl, __m256i sh, const BlockQ8x256* const* y, uint64_t b,
                          __m256i* isum, bool pf) {
        prefetch_slice<IB, 8, kBlock>(g, pf);
        const __m256i ls = _mm256_or_si256(
            _mm256_and_si256(_mm256_srli_epi32(sl, 8 * (IB / 2) + 4 * (IB % 2)), _mm256_set1_epi32(0xF)),
            _mm256_slli_epi32(_mm256_and_si256(_mm256_srli_epi32(sh, 2 * IB), _mm256_set1_epi32(3)), 4));
        const __m256i s = _mm256_sub_epi32(ls, _mm256_set1_epi32(32));
        __m256i table =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gguf::kIQ4Values)));
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        if constexpr (Sc::kInt32) {
            table = _mm256_xor_si256(table, _mm256_set1_epi8(char(0x80)));   // v + 128
            // At one or two inputs, two parts per input taking the words in
            // turn (two vpdpbusd chains of 4, not one of 8), the first
            // starting at the offset.
            constexpr int S = NX <= 2 ? 2 : 1;
            __m256i part[NX * S];
            for (int k = 0; k < NX * S; ++k) {
                const BlockQ8x256& in = y[k / S][b];
                part[k] = k % S ? _mm256_setzero_si256()
                                : _mm256_set1_epi32(-128 * (int32_t(in.bsums[2 * IB]) + in.bsums[2 * IB + 1]));
            }
            _Pragma("GCC unroll 4") for (int w = 0; w < 4; ++w) {
                const __m256i v = loadu(g + kQs + 32 * (4 * IB + w));
                const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, m4));
                const __m256i hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
                for (int k = 0; k < NX; ++k) {
                    const int8_t* x = y[k][b].qs + 32 * IB + 4 * w;
                    __m256i& p = part[k * S + w % S];
                    p = Dot::part2(p, lo, bcast32(x), hi, bcast32(x + 16));
                    keep_in_register(p);
                }
            }
            for (int k = 0; k < NX; ++k) {
                isum[k] = Sc::meet(isum[k], add_sums<Dot, S>(part + k * S), s);
            }
        } else {
            const __m256i scp = _mm256_blend_epi16(s, _mm256_slli_epi32(s, 16), 0xAA);   // (s, s) per lane
            for (int w = 0; w < 4; ++w) {
                const __m256i v = loadu(g + kQs + 32 * (4 * IB + w));
                const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, m4));
                const __m256i hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
                const __m256i alo = _mm256_sign_epi8(lo, lo), ahi = _mm256_sign_epi8(hi, hi);
                for (int k = 0; k < NX; ++k) {
                    const int8_t* x = y[k][b].qs + 32 * IB + 4 * w;
                    const __m256i plo = _mm256_maddubs_epi16(alo, _mm256_sign_epi8(bcast32(x), lo));
                    const __m256i phi = _mm256_maddubs_epi16(ahi, _mm256_sign_epi8(bcast32(x + 16), hi));
                    isum[k] = _mm256_add_epi32(
                        isum[k], _mm256_add_epi32(_mm256_madd_epi16(plo, scp), _mm256_madd_epi16(phi, scp)));
                    keep_in_register(isum[k]);
                }
            }
        }
        if constexpr (IB < 7) sub_block<IB + 1, NX>(g, sl, sh, y, b, isum, pf);
    }
    template <int NX>
    static void run(const uint8_t* g, const void* const* xs, uint64_t n, float* out, uint64_t out_stride, bool pf) {
        Inputs<NX, BlockQ8x256> in(xs);
        const BlockQ8x256* const* y = in.y;
        for (uint64_t b = 0; b < n / 256; ++b, g += kBlock) {
            const __m256i sl = loadu(g + kScalesL);
            const __m256i sh = _mm256_cvtepu16_epi32(_mm_loadu_si128(reinterpret_cast<const __m128i*>(g + kScalesH)));
            __m256i isum[NX];
            for (int k = 0; k < NX; ++k) isum[k] = _mm256_setzero_si256();
            sub_block<0, NX>(g, sl, sh, y, b, isum, pf);
            const __m256 d = f16x8(g);
            for (int k = 0; k < NX; ++k) in.scale_add(k, d, b, isum[k]);
        }
        in.store(out, out_stride);
    }
};

// Q2_K (Q3 false) and Q3_K: value 128h + 32k + 4w + i (quad k, word w) is
// the 2-bit field k of qs word 8h + w (Q3_K: bit 2 from bit 4h + k of hmask
// word w), in group g = 8h + 2k + w / 4 of 16 values. Packed super-block,
// Q2_K: d[8], dmin[8], the 16 scale bytes as 4 words, qs as 16: 672 bytes;
// Q3_K: d[8], hmask 8 words, qs 16, the 12 scale bytes 3: 880. A group's 4
// words sum in int16 (codes to 3 or 7: at most 4 · 2 · 7 · 127 = 7112) and
// meet its scale once. Q2_K: scale = low nibble of scales[g], min = high
// nibble, the mins against the bsums; Q3_K: the signed 6-bit multipliers
// (gguf::q3_k_scale) for 8 rows at once, the −4 offset as Σ_g s_g · 4 ·
// bsums_g.
template <class Dot, bool Q3>
struct K23x8 {
    using Sc = Scaled<Dot>;
    static constexpr uint64_t kHm = 16, kQs = Q3 ? kHm + 256 : 32 + 128, kScales = Q3 ? kQs + 512 : 32,
                              kBlock = Q3 ? kScales + 96 : kQs + 512;
    // Q2_K with int32 sums: the codes are masked where they lie, 4^K · q
    // (at most 192, a u8), and a group's sums with the same K gather in an
    // accumulator of their own, shifted down once a block (exact: every
    // term is a multiple of 4^K; at most 64 · 3 · 127 · 16 · 15 · 4 = 23.4M
    // per lane before the shift). One vpand per word instead of a shift and
    // a vpand.
    static constexpr bool kInPlace = !Q3 && Sc::kInt32;
    static constexpr int kAccs = kInPlace ? 4 : 1;
    template <int H, int K, int W>
    static __m256i codes(const uint8_t* g) {
        if constexpr (kInPlace) return _mm256_and_si256(loadu(g + kQs + 32 * (8 * H + W)), _mm256_set1_epi8(char(3 << 2 * K)));
        const __m256i q = _mm256_and_si256(shift16<-2 * K>(loadu(g + kQs + 32 * (8 * H + W))), _mm256_set1_epi8(3));
        if constexpr (!Q3) return q;
        else
            return _mm256_or_si256(q, _mm256_and_si256(shift16<2 - (4 * H + K)>(loadu(g + kHm + 32 * W)),
                                                       _mm256_set1_epi8(4)));
    }
    // Group G's scale in Scaled's form: from the 4 raw scale words (Q2_K,
    // the low nibble) or the 4 words of signed multipliers (Q3_K), byte G %
    // 4 of sc[G / 4].
    template <int G>
    static __m256i scale(const __m256i* sc) {
        if constexpr (Q3) return Sc::template s8<G % 4>(sc[G / 4]);
        else return Sc::template u4<G % 4>(sc[G / 4]);
    }
    // Groups G.. (to the end of the super-block) times each input, into isum.
    template <int G, int NX>
    static void groups(const uint8_t* g, const __m256i* sc, const BlockQ8x256* const* y, uint64_t b, __m256i* isum,
                       bool pf) {
        prefetch_slice<G, 16, kBlock>(g, pf);
        constexpr int h = G / 8, k = G % 8 / 2, w = 4 * (G % 2);
        const __m256i q0 = codes<h, k, w>(g), q1 = codes<h, k, w + 1>(g), q2 = codes<h, k, w + 2>(g),
                      q3 = codes<h, k, w + 3>(g);
        const __m256i sg = scale<G>(sc);
        for (int j = 0; j < NX; ++j) {
            const int8_t* x = y[j][b].qs + 128 * h + 32 * k + 4 * w;
            const __m256i p01 = Dot::part2(_mm256_setzero_si256(), q0, bcast32(x), q1, bcast32(x + 4));
            const __m256i part = Dot::part2(p01, q2, bcast32(x + 8), q3, bcast32(x + 12));
            __m256i& a = isum[j * kAccs + (kInPlace ? k : 0)];
            a = Sc::meet(a, part, sg);
            keep_in_register(a);
        }
        if constexpr (G < 15) groups<G + 1, NX>(g, sc, y, b, isum, pf);
    }
    // Q2_K's Σ_g m_g · bsums_g over the group pairs (G, G + 1) .. into sum,
    // m_g the high nibble of scale byte g.
    template <int G, int NX>
    static void min_terms(const __m256i* sc, const BlockQ8x256* const* y, uint64_t b, __m256i* sum) {
        const __m256i mp = _mm256_srli_epi16(u8_pair<G % 4, G % 4 + 1>(sc[G / 4]), 4);
        for (int j = 0; j < NX; ++j)
            sum[j] = _mm256_add_epi32(sum[j], _mm256_madd_epi16(mp, bcast32(y[j][b].bsums + G)));
        if constexpr (G < 14) min_terms<G + 2, NX>(sc, y, b, sum);
    }
    template <int NX>
    static void run(const uint8_t* g, const void* const* xs, uint64_t n, float* out, uint64_t out_stride, bool pf) {
        Inputs<NX, BlockQ8x256> in(xs);
        const BlockQ8x256* const* y = in.y;
        for (uint64_t b = 0; b < n / 256; ++b, g += kBlock) {
            __m256i sc[4];
            if constexpr (Q3) {
                // q3_k_scale for 8 rows: multiplier j's low 4 bits from bytes
                // 0..7 (low nibbles for j < 8, high ones after), its top 2 at
                // bits 2·(j / 4) of byte 8 + j % 4; sc[q] holds j = 4q.. 4q + 3.
                const __m256i a = loadu(g + kScales), a1 = loadu(g + kScales + 32), c = loadu(g + kScales + 64);
                const __m256i k0f = _mm256_set1_epi8(0x0F), k30 = _mm256_set1_epi8(0x30), k32 = _mm256_set1_epi8(32);
                const __m256i lo[4] = {_mm256_and_si256(a, k0f), _mm256_and_si256(a1, k0f),
                                       _mm256_and_si256(_mm256_srli_epi16(a, 4), k0f),
                                       _mm256_and_si256(_mm256_srli_epi16(a1, 4), k0f)};
                const __m256i hi[4] = {_mm256_and_si256(shift16<4>(c), k30), _mm256_and_si256(shift16<2>(c), k30),
                                       _mm256_and_si256(c, k30), _mm256_and_si256(shift16<-2>(c), k30)};
                for (int q = 0; q < 4; ++q) sc[q] = _mm256_sub_epi8(_mm256_or_si256(lo[q], hi[q]), k32);
            } else {
                for (int q = 0; q < 4; ++q) sc[q] = loadu(g + kScales + 32 * q);
            }
            __m256i isum[NX * kAccs], bs[NX];
            for (int j = 0; j < NX * kAccs; ++j) isum[j] = _mm256_setzero_si256();
            for (int j = 0; j < NX; ++j) bs[j] = _mm256_setzero_si256();
            groups<0, NX>(g, sc, y, b, isum, pf);
            // Fold each input's four per-shift sums into isum[j]. In place is safe: input j writes slot j
            // and reads slots 4j..4j+3, and for j >= 1 those are all above j, not yet written.
            if constexpr (kInPlace)
                for (int j = 0; j < NX; ++j)
                    isum[j] = _mm256_add_epi32(
                        _mm256_add_epi32(isum[4 * j], _mm256_srai_epi32(isum[4 * j + 1], 2)),
                        _mm256_add_epi32(_mm256_srai_epi32(isum[4 * j + 2], 4), _mm256_srai_epi32(isum[4 * j + 3], 6)));
            if constexpr (Q3) signed_bsum_terms<0, NX>(sc, y, b, bs);
            else min_terms<0, NX>(sc, y, b, bs);
            const __m256 d = f16x8(g);
            if constexpr (Q3) {
                for (int j = 0; j < NX; ++j)
                    in.scale_add(j, d, b, _mm256_sub_epi32(isum[j], _mm256_slli_epi32(bs[j], 2)));
            } else {
                const __m256 dmin = f16x8(g + 16);
                for (int j = 0; j < NX; ++j) in.scale_add_min(j, d, dmin, b, isum[j], bs[j]);
            }
        }
        in.store(out, out_stride);
    }
};

}  // namespace
}  // namespace ptxlm::cpu
