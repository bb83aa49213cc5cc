// The packed kernels (repack.h) for Isa::Avx2 and Isa::Avx512: AVX2 + FMA +
// F16C (compiled with those flags only here). The algorithms are
// repack_kernels*.h's; this file gives them their products, vpmaddubsw then
// vpmaddwd by ones (the 256-value types: by their sub-blocks' scales).
//
// Saturation: vpmaddubsw adds two u8·s8 products in int16. 4-bit codes
// are at most 15 against |x| <= 127: 3810 per pair, and the 8 pairs of a
// lane over a block's four words add to at most 30480 < 32767, so they are
// summed in int16 and widened once per block; 5-bit codes (31: 7874 per
// pair) are widened every two words. Q8_0 and IQ4_NL go through the sign trick,
// |w| <= 128 against x with w's sign: 32512 per pair, widened at once.
#include "engine/cpu/repack_kernels.h"

namespace ptxlm::cpu {
namespace {

struct DotMaddubs : Ymm {
    using Narrow = DotMaddubs;
    static constexpr bool kInt32Parts = false;
    static constexpr int kPartWords4 = 4, kPartWords5 = 2;   // int16 partial sums, bounded above
    static __m256i pair_sums(__m256i u, __m256i s) { return _mm256_maddubs_epi16(u, s); }
    static __m256i widen(__m256i p) { return _mm256_madd_epi16(p, _mm256_set1_epi16(1)); }
    static __m256i part2(__m256i p, __m256i u0, __m256i s0, __m256i u1, __m256i s1) {
        return _mm256_add_epi16(p, _mm256_add_epi16(pair_sums(u0, s0), pair_sums(u1, s1)));
    }
    static __m256i add32(__m256i a, __m256i u, __m256i s) { return _mm256_add_epi32(a, widen(pair_sums(u, s))); }
    static __m256i add32x2(__m256i a, __m256i u0, __m256i s0, __m256i u1, __m256i s1) {
        return _mm256_add_epi32(a, _mm256_add_epi32(widen(pair_sums(u0, s0)), widen(pair_sums(u1, s1))));
    }
    static __m256i merge5(__m256i nib, __m256i at4) {
        return _mm256_or_si256(nib, _mm256_and_si256(at4, _mm256_set1_epi8(0x10)));
    }
};

}  // namespace

namespace detail {
constinit const std::array<PackedDotFn, kQDotSlots> kPackedAvx2 = packed_table<DotMaddubs>();
}  // namespace detail

}  // namespace ptxlm::cpu
