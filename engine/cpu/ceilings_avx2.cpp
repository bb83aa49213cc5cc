// The AVX2 loops of ceilings.h (built with -mavx2).
#include <immintrin.h>

#include "engine/cpu/ceilings.h"

namespace ptxlm::cpu::detail {

uint64_t read_sum_avx2(const void* p, uint64_t bytes) {
    const auto* v = static_cast<const __m256i*>(p);
    __m256i a = _mm256_setzero_si256(), b = a, c = a, d = a;
    for (uint64_t i = 0; i < bytes / 32; i += 4) {
        a = _mm256_add_epi64(a, _mm256_load_si256(v + i));
        b = _mm256_add_epi64(b, _mm256_load_si256(v + i + 1));
        c = _mm256_add_epi64(c, _mm256_load_si256(v + i + 2));
        d = _mm256_add_epi64(d, _mm256_load_si256(v + i + 3));
    }
    const __m256i s = _mm256_add_epi64(_mm256_add_epi64(a, b), _mm256_add_epi64(c, d));
    alignas(32) uint64_t out[4];
    _mm256_store_si256(reinterpret_cast<__m256i*>(out), s);
    return out[0] + out[1] + out[2] + out[3];
}

uint64_t int8_loop_avx2(uint64_t iters) {
    // Eight chains of the kernels' sequence: u8 x s8 pairs to i16
    // (vpmaddubsw, 32 multiply-adds), pairs of i16 to i32 (vpmaddwd with
    // ones), accumulate. The empty asm makes each chain's operand look
    // changed every iteration, so nothing is hoisted out of the loop; named
    // variables (not arrays) keep all of it in registers.
    const __m256i ones = _mm256_set1_epi16(1), x = _mm256_set1_epi8(3);
    __m256i w0 = _mm256_set1_epi8(1), w1 = _mm256_set1_epi8(2), w2 = _mm256_set1_epi8(3), w3 = _mm256_set1_epi8(4);
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    auto dot = [&](__m256i w) { return _mm256_madd_epi16(_mm256_maddubs_epi16(x, w), ones); };
    for (uint64_t i = 0; i < iters; ++i) {
        asm volatile("" : "+x"(w0), "+x"(w1), "+x"(w2), "+x"(w3));
        a0 = _mm256_add_epi32(a0, dot(w0));
        a1 = _mm256_add_epi32(a1, dot(w1));
        a2 = _mm256_add_epi32(a2, dot(w2));
        a3 = _mm256_add_epi32(a3, dot(w3));
        a4 = _mm256_add_epi32(a4, dot(w0));
        a5 = _mm256_add_epi32(a5, dot(w1));
        a6 = _mm256_add_epi32(a6, dot(w2));
        a7 = _mm256_add_epi32(a7, dot(w3));
    }
    const __m256i s = _mm256_add_epi32(_mm256_add_epi32(_mm256_add_epi32(a0, a1), _mm256_add_epi32(a2, a3)),
                                       _mm256_add_epi32(_mm256_add_epi32(a4, a5), _mm256_add_epi32(a6, a7)));
    return static_cast<uint64_t>(static_cast<uint32_t>(_mm256_extract_epi32(s, 0)));
}

}  // namespace ptxlm::cpu::detail
