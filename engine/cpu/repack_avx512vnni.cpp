// The packed kernels (repack.h) for Isa::Avx512Vnni: AVX2 + FMA + F16C with
// AVX-512 F/BW/VL/VNNI (compiled with those flags only here, called only
// after runnable_isas() saw them). The algorithms and the packed layout are
// repack_kernels*.h's and repack.cpp's, built twice: at the ymm width (8 rows,
// one int32 lane each; the default) and at zmm (Zmm below: two words per
// vector, for A/B runs, repack.h says why it is not the default). Only the
// products and the Q5 merge differ from repack_avx2.cpp:
//   - vpdpbusd (ymm) adds a lane's 4 u8·s8 products straight into its int32
//     sum: no int16 stage, so nothing to bound and no vpmaddwd by ones, and a
//     block's 4 words go into one sum. Exact like the AVX2 path's, so the
//     int32 sums, and with the float steps shared the results, are the same
//     bits. Not vpdpbusds: it saturates, the AVX2 sums do not.
//     The sum of a Q4_0/Q5_0 block starts at −Offset·Σq (exact in int32)
//     instead of taking it off at the end.
//   - vpternlogd does a Q5 code's nib | (qh_shifted & 0x10) in one
//     instruction instead of vpand + vpor. The nibble's own vpand stays: one
//     constant operand cannot tell three kinds of bit (0-3 from v, 4 from
//     qh, 5-7 zero) apart, so the whole (v & 0x0F) | (qh_shifted & 0x10)
//     takes two instructions, not one (two merges per word, 8 saved per
//     block).
//   - Q8_0 and IQ4_NL skip the sign trick: their weights go in as the
//     unsigned w + 128 (an xor with 0x80; IQ4_NL's table shifted once), the
//     sum starting at −128·Σq, which no int16 pair could hold under
//     vpmaddubsw (255·127·2 > 32767) and an int32 lane does.
//   - The 256-value types (K-quants, IQ4_XS) sum a sub-block's words in
//     int32 by vpdpbusd, one per word, and meet its scale by vpmulld once,
//     where AVX2 takes vpmaddubsw + vpaddw per word and vpmaddwd by the
//     scale per sub-block (or per half of one); IQ4_XS as IQ4_NL, its
//     table shifted by 128, a sub-block's sum starting at −128·Σx. Always
//     at 256 bits (the zmm table takes these too).
#include "engine/cpu/repack_kernels.h"

namespace ptxlm::cpu {
namespace {

// vpternlogd's truth table is the result for the operand bits (a, b, c) =
// the bits of 0xF0, 0xCC, 0xAA: a | (b & c).
constexpr int kOrAnd = 0xF0 | (0xCC & 0xAA);
static_assert(kOrAnd == 0xF8);

// The vector side at 512 bits (repack_kernels_common.h's contract): words c and c + 1 of a
// block, adjacent in the layout, are one 64-byte load, word c's 8 rows in the
// low half and c + 1's in the high one; the input's 4-byte groups c and
// c + 1 go into the halves' lanes (a broadcast, then a masked broadcast),
// and the halves' int32 sums are added once per block (fold).
struct Zmm {
    using V = __m512i;
    using Qh = __m512i;   // the 8 rows' qh words in both halves
    static constexpr int kWords = 2;
    static V halves(int32_t lo, int32_t hi) { return _mm512_mask_set1_epi32(_mm512_set1_epi32(lo), 0xFF00, hi); }
    static V load(const uint8_t* p) { return _mm512_loadu_si512(p); }
    // Both broadcasts from memory (vpbroadcastd zmm, m32; the masked one
    // adds a p05 blend): through a general register they took a mov, a sar
    // and two port-5 broadcasts.
    static V xwords(const int8_t* q) {
        return _mm512_mask_broadcastd_epi32(_mm512_broadcastd_epi32(_mm_loadu_si32(q)), 0xFF00, _mm_loadu_si32(q + 4));
    }
    static V bytes(char c) { return _mm512_set1_epi8(c); }
    static V and_(V a, V b) { return _mm512_and_si512(a, b); }
    static V xor_(V a, V b) { return _mm512_xor_si512(a, b); }
    static V add(V a, V b) { return _mm512_add_epi32(a, b); }
    static V srl4(V v) { return _mm512_srli_epi16(v, 4); }
    static V table16(const int8_t* t) { return _mm512_broadcast_i32x4(_mm_loadu_si128(reinterpret_cast<const __m128i*>(t))); }
    static V shuffle(V table, V idx) { return _mm512_shuffle_epi8(table, idx); }
    static V start(int32_t v) { return _mm512_zextsi256_si512(_mm256_set1_epi32(v)); }
    static __m256i fold(V v) { return _mm256_add_epi32(_mm512_castsi512_si256(v), _mm512_extracti64x4_epi64(v, 1)); }
    static Qh load_qh(const uint8_t* p) { return _mm512_broadcast_i64x4(loadu(p)); }
    // Ymm::fifth per half: word C's bits in the low half, C + 1's in the
    // high one, by per-lane shift counts.
    template <int C, bool High>
    static V fifth(Qh qh) {
        return High ? _mm512_srlv_epi32(qh, halves(C, C + 1)) : _mm512_sllv_epi32(qh, halves(4 - C, 3 - C));
    }
};

inline __m256i dpbusd(__m256i a, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(a, u, s); }
inline __m512i dpbusd(__m512i a, __m512i u, __m512i s) { return _mm512_dpbusd_epi32(a, u, s); }
inline __m256i or_and_x10(__m256i a, __m256i b) { return _mm256_ternarylogic_epi32(a, b, _mm256_set1_epi8(0x10), kOrAnd); }
inline __m512i or_and_x10(__m512i a, __m512i b) { return _mm512_ternarylogic_epi32(a, b, _mm512_set1_epi8(0x10), kOrAnd); }

// The products on either width: Vec is Ymm (8 lanes, one word) or Zmm.
template <class Vec>
struct DotVnni : Vec {
    using V = typename Vec::V;
    using Narrow = DotVnni<Ymm>;
    static constexpr bool kInt32Parts = true;                // one int32 sum per block, from the offset on
    static constexpr int kPartWords4 = 4, kPartWords5 = 4;
    static V widen(V p) { return p; }
    static V part2(V p, V u0, V s0, V u1, V s1) { return dpbusd(dpbusd(p, u0, s0), u1, s1); }
    static V add32(V a, V u, V s) { return dpbusd(a, u, s); }
    static V add32x2(V a, V u0, V s0, V u1, V s1) { return part2(a, u0, s0, u1, s1); }
    static V merge5(V nib, V at4) { return or_and_x10(nib, at4); }
};

}  // namespace

namespace detail {
constinit const std::array<PackedDotFn, kQDotSlots> kPackedAvx512Vnni = packed_table<DotVnni<Ymm>>();
constinit const std::array<PackedDotFn, kQDotSlots> kPackedAvx512VnniZmm = packed_table<DotVnni<Zmm>>();
}  // namespace detail

}  // namespace ptxlm::cpu
