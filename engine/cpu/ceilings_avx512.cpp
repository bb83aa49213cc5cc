// The AVX-512 loops of ceilings.h (built with -mavx512f -mavx512bw -mavx512vnni).
#include <immintrin.h>

#include "engine/cpu/ceilings.h"

namespace ptxlm::cpu::detail {

namespace {

// Eight chains of 64 multiply-adds per iteration; `vnni`: vpdpbusd, else
// vpmaddubsw + vpmaddwd + vpaddd (see int8_loop_avx2).
template <bool vnni>
uint64_t int8_loop(uint64_t iters) {
    const __m512i ones = _mm512_set1_epi16(1), x = _mm512_set1_epi8(3);
    __m512i w0 = _mm512_set1_epi8(1), w1 = _mm512_set1_epi8(2), w2 = _mm512_set1_epi8(3), w3 = _mm512_set1_epi8(4);
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0, a4 = a0, a5 = a0, a6 = a0, a7 = a0;
    auto step = [&](__m512i a, __m512i w) {
        if constexpr (vnni) return _mm512_dpbusd_epi32(a, x, w);
        else return _mm512_add_epi32(a, _mm512_madd_epi16(_mm512_maddubs_epi16(x, w), ones));
    };
    for (uint64_t i = 0; i < iters; ++i) {
        asm volatile("" : "+v"(w0), "+v"(w1), "+v"(w2), "+v"(w3));
        a0 = step(a0, w0);
        a1 = step(a1, w1);
        a2 = step(a2, w2);
        a3 = step(a3, w3);
        a4 = step(a4, w0);
        a5 = step(a5, w1);
        a6 = step(a6, w2);
        a7 = step(a7, w3);
    }
    const __m512i s = _mm512_add_epi32(_mm512_add_epi32(_mm512_add_epi32(a0, a1), _mm512_add_epi32(a2, a3)),
                                       _mm512_add_epi32(_mm512_add_epi32(a4, a5), _mm512_add_epi32(a6, a7)));
    alignas(64) uint32_t lanes[16];   // (GCC 12's _mm512_reduce_add_epi32 warns -Wuninitialized)
    _mm512_store_si512(lanes, s);
    uint32_t sum = 0;
    for (uint32_t v : lanes) sum += v;
    return sum;
}

}  // namespace

uint64_t int8_loop_avx512(uint64_t iters) { return int8_loop<false>(iters); }
uint64_t int8_loop_avx512vnni(uint64_t iters) { return int8_loop<true>(iters); }

}  // namespace ptxlm::cpu::detail
