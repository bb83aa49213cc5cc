// The packed kernels' algorithms (repack.h), one copy for every Isa that
// runs them. Each kernel TU includes this header and instantiates the
// templates with its own product policy `Dot`, compiled with its own -m
// flags:
//   - repack_avx2.cpp, DotMaddubs: vpmaddubsw into int16 pairs, vpmaddwd by
//     ones into int32 (the int16 staging is bounded there);
//   - repack_avx512vnni.cpp, DotVnni<Ymm>: vpdpbusd (ymm, AVX512-VNNI + VL)
//     adds 4 u8·s8 products straight into int32 lanes, and vpternlogd
//     merges a Q5 nibble with its fifth bit; DotVnni<Zmm>: the same at 512
//     bits, two packed words per zmm.
// All give the same int32 sum per (row, block): the products are exact on
// every one (no saturation), so with the float steps written once here the
// Isas give the same bits.
//
// A policy's vector side (Ymm below, or Zmm in repack_avx512vnni.cpp):
//   V, kWords: the vector type and how many packed words (8 rows × 4 bytes
//       each, adjacent in the layout) one V holds: 1 (ymm, one int32 lane
//       per row) or 2 (zmm: word c in the low half, c + 1 in the high one);
//   load(p): kWords words; xwords(q): input bytes q[4i .. 4i + 4) in every
//       lane of word i's half; bytes, and_, xor_, srl4 (per 16 bits),
//       table16, shuffle (vpshufb per 128 bits): the unpacking;
//   start(v): a sum that starts at v (counted once: in one half only);
//   fold(s): the int32 sum per row of s, 8 lanes (zmm: its halves added);
//   Qh, load_qh(p), fifth<C, High>(qh): the Q5 fifth bits of words [C, C +
//       kWords) at bit 4 of each byte (the low or high nibbles' bits).
// and its products, on V:
//   kInt32Parts: whether partial sums are int32 lanes already (then a
//       block's words go straight into one sum that starts at the offset,
//       and the signed types' weights go in as unsigned w + 128, the sum
//       starting at −128·Σq); int16 ones only at kWords 1;
//   kPartWords4, kPartWords5: how many 4-byte words of 4- or 5-bit codes a
//       partial sum may hold before it is widened;
//   part2(p, u0, s0, u1, s1): partial sum p plus u0·s0 + u1·s1 (each u·s:
//       the 4 u8 × s8 products of a lane);
//   widen(p): p as int32 lanes;
//   add32(a, u, s), add32x2(a, u0, s0, u1, s1): int32 a plus u·s (plus
//       u1·s1), for the sign trick (pairs of products |.| <= 32512);
//   merge5(nib, at4): nib | (at4 & 0x10) per byte (a Q5 code from its nibble
//       and its fifth bit, wherever at4 has it at bit 4);
//   Narrow: the policy's products at 256 bits (itself at kWords 1), which
//       the 256-value types' kernels take.
//
// Everything here has internal linkage (the unnamed namespace): each TU gets
// its own copy of every helper and template, compiled with that TU's flags,
// so no AVX-512 code can stand in for an AVX2 function at link time (the ODR
// trap of inline functions shared between TUs built with different -m
// flags). The policy in every kernel's type keeps the symbols distinct too.
#pragma once

#include <array>
#include <cstdlib>

#include "engine/cpu/repack.h"
#include "engine/cpu/x86_intrinsics.h"
#include "gguf/quant.h"

namespace ptxlm::cpu {
namespace {

inline __m256i loadu(const void* p) { return _mm256_loadu_si256(static_cast<const __m256i*>(p)); }
inline __m256 f16x8(const uint8_t* p) { return _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(p))); }
// 4 input bytes in every int32 lane.
inline __m256i bcast4(const int8_t* p) {
    int32_t v;
    __builtin_memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

// The vector side of a policy at 256 bits: one packed word (8 rows × 4
// bytes) per vector, so an input's 4 bytes are one broadcast.
struct Ymm {
    using V = __m256i;
    using Qh = __m256i;
    static constexpr int kWords = 1;
    static V load(const uint8_t* p) { return loadu(p); }
    static V xwords(const int8_t* q) { return bcast4(q); }
    static V bytes(char c) { return _mm256_set1_epi8(c); }
    static V and_(V a, V b) { return _mm256_and_si256(a, b); }
    static V xor_(V a, V b) { return _mm256_xor_si256(a, b); }
    static V srl4(V v) { return _mm256_srli_epi16(v, 4); }
    static V table16(const int8_t* t) {
        return _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t)));
    }
    static V shuffle(V table, V idx) { return _mm256_shuffle_epi8(table, idx); }
    static V start(int32_t v) { return _mm256_set1_epi32(v); }
    static __m256i fold(V v) { return v; }
    static Qh load_qh(const uint8_t* p) { return loadu(p); }
    // qh with the fifth bits of word C's low (High false) or high nibbles at
    // bit 4 of each byte (the other bits are the other words', for merge5 to
    // mask): packed spread (repack.cpp, spread_qh), they sit at bit C (low)
    // and bit 4 + C (high) of each byte.
    template <int C, bool High>
    static V fifth(Qh qh) {
        return High ? _mm256_srli_epi32(qh, C) : _mm256_slli_epi32(qh, 4 - C);
    }
};

// An empty asm that claims to change v: GCC may not move additions across
// it. Without it, GCC regroups a block's integer sums into a tree whose
// products are all computed first, and with four inputs their partial sums
// (32 registers) spill to the stack. "v": any register the TU's flags allow
// (ymm0-15 on AVX2, ymm0-31 or zmm0-31 with AVX-512).
template <class V>
inline void keep_in_register(V& v) {
    asm volatile("" : "+v"(v));
}

// Software prefetch, `kPrefetch` bytes ahead of the block in use, on the
// first pass over a row group (later passes of the same group, for more
// inputs, find it in cache). Decode reads each group once, and the hardware
// prefetchers alone left a core short of what it can read: SmolLM2 tg128 on
// a Zen 3 VM +16% on one core, +9% on two; gemma-3 +3-8% (docs/benchmarks.md).
// PTXLM_CPU_PREFETCH=BYTES sets the distance, 0 turns it off (A/B runs).
const uint64_t kPrefetch = [] {
    const char* e = std::getenv("PTXLM_CPU_PREFETCH");
    return e ? std::strtoull(e, nullptr, 10) : uint64_t(2048);
}();
inline void prefetch_block(const uint8_t* g, uint64_t bytes) {
    for (uint64_t o = 0; o < bytes; o += 64) _mm_prefetch(reinterpret_cast<const char*>(g + kPrefetch + o), _MM_HINT_T0);
}
// Lines [L0, L1) from p, as asm volatile: GCC 12 takes __builtin_prefetch
// for an operation without effects and drops it from these templates (a
// constant-trip loop of prefetches, or a function holding only them, left
// not one prefetcht0 in the 256-value kernels).
template <uint64_t L0, uint64_t L1>
inline void prefetch_lines(const uint8_t* p) {
    if constexpr (L0 < L1) {
        asm volatile("prefetcht0 %0" : : "m"(*(p + 64 * L0)));
        prefetch_lines<L0 + 1, L1>(p);
    }
}
// Slice I of N of a Bytes-long block's prefetch (prefetch_block's lines, 64
// bytes apart from g), for the 256-value types, whose blocks take 11-27
// lines: each sub-block (or group) issues its share as it starts. Issued all
// at a block's start they left a Zen 4 core streaming a Q6_K matrix at 9-13
// GB/s, against 27-31 spread (its plain read loop 31-34; docs/benchmarks.md).
template <int I, int N, uint64_t Bytes>
inline void prefetch_slice(const uint8_t* g, bool pf) {
    constexpr uint64_t lines = (Bytes + 63) / 64, per = (lines + N - 1) / N;
    constexpr uint64_t l0 = I * per < lines ? I * per : lines, l1 = l0 + per < lines ? l0 + per : lines;
    if (pf) prefetch_lines<l0, l1>(g + kPrefetch);
}

// A pass's inputs and its float accumulators, one per input (the set-up and
// the stores every kernel's run shares): out[r + k · out_stride] = acc[k]
// lane r at the end. Y: the input's blocks (BlockQ8x256 for the 256-value
// types).
template <int NX, class Y = BlockQ8x32>
struct Inputs {
    const Y* y[NX];
    __m256 acc[NX];
    explicit Inputs(const void* const* xs) {
        for (int k = 0; k < NX; ++k) {
            y[k] = static_cast<const Y*>(xs[k]);
            acc[k] = _mm256_setzero_ps();
        }
    }
    // acc[k] += d_w · d_x · s (the block's int32 sums, one lane per row).
    void scale_add(int k, __m256 d, uint64_t b, __m256i s) {
        acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(y[k][b].d)), _mm256_cvtepi32_ps(s), acc[k]);
    }
    // The same with a min term: acc[k] += d_w·d_x · s − dmin_w·d_x · m.
    void scale_add_min(int k, __m256 d, __m256 dmin, uint64_t b, __m256i s, __m256i m) {
        const __m256 dx = _mm256_set1_ps(y[k][b].d);
        acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(d, dx), _mm256_cvtepi32_ps(s), acc[k]);
        acc[k] = _mm256_fnmadd_ps(_mm256_mul_ps(dmin, dx), _mm256_cvtepi32_ps(m), acc[k]);
    }
    void store(float* out, uint64_t out_stride) const {
        for (int k = 0; k < NX; ++k) _mm256_storeu_ps(out + k * out_stride, acc[k]);
    }
};

// The 4- and 5-bit types: Q4_0, Q4_1 (Fifth false), Q5_0, Q5_1, with a
// min (Q4_1, Q5_1) or without. Packed block: d[8], m[8] where HasMin, the
// 8 rows' qh words where Fifth, then 4 words of nibbles × 8 rows: 144, 160,
// 176 or 192 bytes. Codes c = nibble (| fifth bit · 16): 0..15 or 0..31.
// Without a min the offset comes off as Offset·Σq (the same integer as
// Σ(c − Offset)·q; the input block carries its Σq); with one,
// m · s is added per block.
template <class Dot, bool HasMin, bool Fifth>
struct Nibbles8 {
    using V = typename Dot::V;
    static constexpr int kOffset = Fifth ? 16 : 8;
    static constexpr uint64_t kQh = HasMin ? 32 : 16, kQs = kQh + (Fifth ? 32 : 0), kBlock = kQs + 128;
    // Words summed per partial sum; a block's 4 words are 4 / kPart of them.
    static constexpr int kPart = Fifth ? Dot::kPartWords5 : Dot::kPartWords4;
    static_assert(kPart > 0 && 4 % kPart == 0 && 4 % Dot::kWords == 0);
    static_assert(Dot::kInt32Parts || Dot::kWords == 1);
    // Words [C, C + Dot::kWords) of block b: every input's two products per
    // word (low nibbles against input bytes 4C.., high ones against 16 +
    // 4C..) into part. A C that is not a multiple of kWords was done with
    // the words before it.
    template <int C, int NX>
    static void word(const uint8_t* g, typename Dot::Qh qh, const BlockQ8x32* const* y, uint64_t b, V* part) {
        if constexpr (C % Dot::kWords == 0) {
            const V m4 = Dot::bytes(0x0F);
            const V v = Dot::load(g + kQs + 32 * C);
            V lo = Dot::and_(v, m4), hi = Dot::and_(Dot::srl4(v), m4);
            if constexpr (Fifth) {
                lo = Dot::merge5(lo, Dot::template fifth<C, false>(qh));
                hi = Dot::merge5(hi, Dot::template fifth<C, true>(qh));
            }
            for (int k = 0; k < NX; ++k) {
                part[k] = Dot::part2(part[k], lo, Dot::xwords(y[k][b].qs + 4 * C), hi,
                                     Dot::xwords(y[k][b].qs + 16 + 4 * C));
                keep_in_register(part[k]);
            }
        }
    }
    // Words [C0, C0 + kPart) of block b into a partial sum (zeroed first),
    // then widened into isum (set when C0 is 0, else added), then the next
    // words.
    // With int32 partial sums (Dot::kInt32Parts) the words go straight into
    // isum, which holds its start value.
    template <int C0, int NX>
    static void words(const uint8_t* g, typename Dot::Qh qh, const BlockQ8x32* const* y, uint64_t b, V* isum) {
        if constexpr (Dot::kInt32Parts) {
            word<0, NX>(g, qh, y, b, isum);
            word<1, NX>(g, qh, y, b, isum);
            word<2, NX>(g, qh, y, b, isum);
            word<3, NX>(g, qh, y, b, isum);
        } else {
            V part[NX];
            for (int k = 0; k < NX; ++k) part[k] = _mm256_setzero_si256();
            // Written out: a fold over an integer_sequence in a lambda made GCC
            // schedule the AVX2 kernel worse (21 more instructions per block at 4
            // inputs: extra vpaddw and register moves).
            word<C0, NX>(g, qh, y, b, part);
            if constexpr (kPart > 1) word<C0 + 1, NX>(g, qh, y, b, part);
            if constexpr (kPart > 2) word<C0 + 2, NX>(g, qh, y, b, part);
            if constexpr (kPart > 3) word<C0 + 3, NX>(g, qh, y, b, part);
            for (int k = 0; k < NX; ++k) {
                const V w = Dot::widen(part[k]);
                isum[k] = C0 == 0 ? w : _mm256_add_epi32(isum[k], w);
                if constexpr (kPart < 4) keep_in_register(isum[k]);
            }
            if constexpr (C0 + kPart < 4) words<C0 + kPart, NX>(g, qh, y, b, isum);
        }
    }
    // One int32 accumulator and one float accumulator per input, so that
    // NX = 4 fits the 16 registers (the min term goes into the same float
    // accumulator, a second FMA on it).
    template <int NX>
    static void run(const uint8_t* g, const void* const* xs, uint64_t n, float* out, uint64_t out_stride, bool pf) {
        Inputs<NX> in(xs);
        const BlockQ8x32* const* y = in.y;
        for (uint64_t b = 0; b < n / 32; ++b, g += kBlock) {
            if (pf) prefetch_block(g, kBlock);
            const typename Dot::Qh qh = Fifth ? Dot::load_qh(g + kQh) : typename Dot::Qh{};
            // The offset term −Offset·Σq: int32 partial sums start from it,
            // int16 ones (which could not hold it) take it off at the end.
            V isum[NX];
            if constexpr (Dot::kInt32Parts)
                for (int k = 0; k < NX; ++k) isum[k] = Dot::start(HasMin ? 0 : -kOffset * y[k][b].sum);
            words<0, NX>(g, qh, y, b, isum);
            const __m256 d = f16x8(g);
            for (int k = 0; k < NX; ++k) {
                __m256i s = Dot::fold(isum[k]);
                if constexpr (!HasMin && !Dot::kInt32Parts)
                    s = _mm256_sub_epi32(s, _mm256_set1_epi32(kOffset * y[k][b].sum));
                in.scale_add(k, d, b, s);
                if constexpr (HasMin) in.acc[k] = _mm256_fmadd_ps(f16x8(g + 16), _mm256_set1_ps(y[k][b].s), in.acc[k]);
            }
        }
        in.store(out, out_stride);
    }
};

// The signed types: one int32 sum per (row, input) and block, times
// d_w·d_x. K gives the block's bytes and its sums (K::sums: the block at g,
// into s32, which the caller starts). With int16 pair sums (vpmaddubsw) the
// products go through the sign trick (|w| <= 128 against x with w's sign:
// 32512 per pair) and s32 starts at 0; with int32 products (Dot::kInt32Parts:
// no pair to saturate) the weights go in as the unsigned w + 128 (w xor
// 0x80, or IQ4_NL's table shifted by 128) and s32 starts at −128·Σq: the
// same integer, without the four vpsignb per word.
template <class K>
struct Signed8 {
    using Dot = typename K::Dot;
    static constexpr uint64_t kBlock = K::kBlock;
    template <int NX>
    static void run(const uint8_t* g, const void* const* xs, uint64_t n, float* out, uint64_t out_stride, bool pf) {
        Inputs<NX> in(xs);
        const BlockQ8x32* const* y = in.y;
        for (uint64_t b = 0; b < n / 32; ++b, g += kBlock) {
            if (pf) prefetch_block(g, kBlock);
            typename Dot::V s32[NX];
            for (int k = 0; k < NX; ++k) s32[k] = Dot::start(Dot::kInt32Parts ? -128 * y[k][b].sum : 0);
            K::template sums<NX>(g, y, b, s32);
            const __m256 d = f16x8(g);
            for (int k = 0; k < NX; ++k) in.scale_add(k, d, b, Dot::fold(s32[k]));
        }
        in.store(out, out_stride);
    }
};

// Q8_0, 272 bytes per packed block: d[8], 8 words × 8 rows.
template <class D>
struct Q8_0Sums {
    using Dot = D;
    using V = typename Dot::V;
    static constexpr uint64_t kBlock = 272;
    template <int NX>
    static void sums(const uint8_t* g, const BlockQ8x32* const* y, uint64_t b, V* s32) {
        for (int c = 0; c < 8; c += Dot::kWords) {
            const V w = Dot::load(g + 16 + 32 * c);
            if constexpr (Dot::kInt32Parts) {
                const V u = Dot::xor_(w, Dot::bytes(char(0x80)));   // w + 128
                for (int k = 0; k < NX; ++k) {
                    s32[k] = Dot::add32(s32[k], u, Dot::xwords(y[k][b].qs + 4 * c));
                    keep_in_register(s32[k]);
                }
            } else {
                const V aw = _mm256_sign_epi8(w, w);
                for (int k = 0; k < NX; ++k) {
                    s32[k] = Dot::add32(s32[k], aw, _mm256_sign_epi8(Dot::xwords(y[k][b].qs + 4 * c), w));
                    keep_in_register(s32[k]);
                }
            }
        }
    }
};

// IQ4_NL, 144 bytes per packed block as Q4_0's (d[8], 4 words of nibbles ×
// 8 rows): the nibbles index the non-linear table with vpshufb, and the
// values (|w| <= 127) take the sign trick.
template <class D>
struct IQ4_NLSums {
    using Dot = D;
    using V = typename Dot::V;
    static constexpr uint64_t kBlock = 144;
    template <int NX>
    static void sums(const uint8_t* g, const BlockQ8x32* const* y, uint64_t b, V* s32) {
        V table = Dot::table16(gguf::kIQ4Values);
        if constexpr (Dot::kInt32Parts) table = Dot::xor_(table, Dot::bytes(char(0x80)));   // value + 128
        const V m4 = Dot::bytes(0x0F);
        for (int c = 0; c < 4; c += Dot::kWords) {
            const V v = Dot::load(g + 16 + 32 * c);
            const V lo = Dot::shuffle(table, Dot::and_(v, m4));
            const V hi = Dot::shuffle(table, Dot::and_(Dot::srl4(v), m4));
            if constexpr (Dot::kInt32Parts) {
                for (int k = 0; k < NX; ++k) {
                    s32[k] = Dot::add32x2(s32[k], lo, Dot::xwords(y[k][b].qs + 4 * c), hi,
                                          Dot::xwords(y[k][b].qs + 16 + 4 * c));
                    keep_in_register(s32[k]);
                }
            } else {
                const V alo = _mm256_sign_epi8(lo, lo), ahi = _mm256_sign_epi8(hi, hi);
                for (int k = 0; k < NX; ++k) {
                    s32[k] = Dot::add32x2(s32[k], alo, _mm256_sign_epi8(Dot::xwords(y[k][b].qs + 4 * c), lo), ahi,
                                          _mm256_sign_epi8(Dot::xwords(y[k][b].qs + 16 + 4 * c), hi));
                    keep_in_register(s32[k]);
                }
            }
        }
    }
};

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
        for (int w0 = 0; w0 < 8; w0 += kPart) {
            __m256i part[NX];
            for (int k = 0; k < NX; ++k) part[k] = _mm256_setzero_si256();
            for (int w = w0; w < w0 + kPart; w += 2) {
                __m256i q[2];
                for (int i = 0; i < 2; ++i) {
                    const __m256i v = loadu(g + kQs + 32 * (8 * c + w + i));
                    q[i] = _mm256_and_si256(high ? _mm256_srli_epi16(v, 4) : v, m4);
                    if constexpr (Fifth)   // bit J of each qh byte to bit 4
                        q[i] = Dot::merge5(q[i], shift16<4 - J>(loadu(g + kQh + 32 * (w + i))));
                }
                for (int k = 0; k < NX; ++k) {
                    const int8_t* x = y[k][b].qs + 64 * c + 32 * high + 4 * w;
                    part[k] = Dot::part2(part[k], q[0], bcast32(x), q[1], bcast32(x + 4));
                    keep_in_register(part[k]);
                }
            }
            for (int k = 0; k < NX; ++k) isum[k] = Sc::meet(isum[k], part[k], sc);
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
            __m256i part[NX];
            for (int k = 0; k < NX; ++k)
                part[k] = _mm256_set1_epi32(-128 * (int32_t(y[k][b].bsums[2 * IB]) + y[k][b].bsums[2 * IB + 1]));
            for (int w = 0; w < 4; ++w) {
                const __m256i v = loadu(g + kQs + 32 * (4 * IB + w));
                const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, m4));
                const __m256i hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
                for (int k = 0; k < NX; ++k) {
                    const int8_t* x = y[k][b].qs + 32 * IB + 4 * w;
                    part[k] = Dot::part2(part[k], lo, bcast32(x), hi, bcast32(x + 16));
                    keep_in_register(part[k]);
                }
            }
            for (int k = 0; k < NX; ++k) isum[k] = Sc::meet(isum[k], part[k], s);
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
    template <int H, int K, int W>
    static __m256i codes(const uint8_t* g) {
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
            isum[j] = Sc::meet(isum[j], part, sg);
            keep_in_register(isum[j]);
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
            __m256i isum[NX], bs[NX];
            for (int j = 0; j < NX; ++j) isum[j] = bs[j] = _mm256_setzero_si256();
            groups<0, NX>(g, sc, y, b, isum, pf);
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

// Inputs in passes of W (the registers hold W sets of accumulators), the
// leftover ones in one smaller pass.
template <class K, int M>
void run_rest(int m, const uint8_t* g, const void* const* xs, uint64_t n, float* out, uint64_t out_stride, bool pf) {
    if constexpr (M > 0) {
        if (m == M) return K::template run<M>(g, xs, n, out, out_stride, pf);
        run_rest<K, M - 1>(m, g, xs, n, out, out_stride, pf);
    }
}
template <class K, int W>
void run_group(const uint8_t* g, const void* const* xs, int n_x, uint64_t n, float* out, uint64_t out_stride) {
    const bool pf = kPrefetch > 0;
    int k = 0;
    for (; k + W <= n_x; k += W) K::template run<W>(g, xs + k, n, out + k * out_stride, out_stride, pf && k == 0);
    run_rest<K, W - 1>(n_x - k, g, xs + k, n, out + k * out_stride, out_stride, pf && k == 0);
}

// The kernel table of one policy, by qdot.h's slots.
template <class Dot>
constexpr std::array<PackedDotFn, detail::kQDotSlots> packed_table() {
    constexpr int kWidth = 4;
    std::array<PackedDotFn, detail::kQDotSlots> t{};
    t[detail::kQ4_0] = run_group<Nibbles8<Dot, false, false>, kWidth>;
    t[detail::kQ4_1] = run_group<Nibbles8<Dot, true, false>, kWidth>;
    t[detail::kQ5_0] = run_group<Nibbles8<Dot, false, true>, kWidth>;
    t[detail::kQ5_1] = run_group<Nibbles8<Dot, true, true>, kWidth>;
    t[detail::kQ8_0] = run_group<Signed8<Q8_0Sums<Dot>>, kWidth>;
    t[detail::kIQ4_NL] = run_group<Signed8<IQ4_NLSums<Dot>>, kWidth>;
    using N = typename Dot::Narrow;   // the 256-value types' kernels are 256 bits wide on every table
    t[detail::kQ4_K] = run_group<K45x8<N, false>, kWidth>;
    t[detail::kQ5_K] = run_group<K45x8<N, true>, kWidth>;
    t[detail::kQ6_K] = run_group<Q6Kx8<N>, kWidth>;
    t[detail::kIQ4_XS] = run_group<IQ4XSx8<N>, kWidth>;
    t[detail::kQ2_K] = run_group<K23x8<N, false>, kWidth>;
    t[detail::kQ3_K] = run_group<K23x8<N, true>, kWidth>;
    return t;
}

}  // namespace
}  // namespace ptxlm::cpu
