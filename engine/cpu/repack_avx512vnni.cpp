// The packed kernels (repack.h) for Isa::Avx512Vnni: AVX2 + FMA + F16C with
// AVX-512 F/BW/VL/VNNI (compiled with those flags only here, called only
// after runnable_isas() saw them). The algorithms and the packed layout are
// repack_kernels.h's and repack.cpp's, at the same ymm width (8 rows, one
// int32 lane each); only the products and the Q5 merge differ from
// repack_avx2.cpp:
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
#include "engine/cpu/repack_kernels.h"

namespace ptxlm::cpu {
namespace {

// vpternlogd's truth table is the result for the operand bits (a, b, c) =
// the bits of 0xF0, 0xCC, 0xAA: a | (b & c).
constexpr int kOrAnd = 0xF0 | (0xCC & 0xAA);
static_assert(kOrAnd == 0xF8);

struct DotVnni {
    static constexpr bool kInt32Parts = true;                // one int32 sum per block, from the offset on
    static constexpr int kPartWords4 = 4, kPartWords5 = 4;
    static __m256i widen(__m256i p) { return p; }
    static __m256i part2(__m256i p, __m256i u0, __m256i s0, __m256i u1, __m256i s1) {
        return _mm256_dpbusd_epi32(_mm256_dpbusd_epi32(p, u0, s0), u1, s1);
    }
    static __m256i add32(__m256i a, __m256i u, __m256i s) { return _mm256_dpbusd_epi32(a, u, s); }
    static __m256i add32x2(__m256i a, __m256i u0, __m256i s0, __m256i u1, __m256i s1) { return part2(a, u0, s0, u1, s1); }
    static __m256i merge5(__m256i nib, __m256i at4) {
        return _mm256_ternarylogic_epi32(nib, at4, _mm256_set1_epi8(0x10), kOrAnd);
    }
};

}  // namespace

namespace detail {
constinit const std::array<PackedDotFn, kQDotSlots> kPackedAvx512Vnni = packed_table<DotVnni>();
}  // namespace detail

}  // namespace ptxlm::cpu
