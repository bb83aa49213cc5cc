// The packed kernels' algorithms (repack.h), one copy for every Isa that
// runs them: this header's shared pieces (the policies' contract, the Ymm
// vector side, prefetch, a pass's inputs and accumulators),
// repack_kernels.h's 32-element kernels and table, repack_kernels_256.h's
// 256-value kernels. Each kernel TU includes repack_kernels.h and
// instantiates the templates with its own product policy `Dot`, compiled
// with its own -m flags:
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
//       kWords) at bit 4 of each byte (the low or high nibbles' bits);
//   add(a, b): int32 lanes added (two partial sums of one block).
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

#include "engine/cpu/env_knob.h"
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
    static V add(V a, V b) { return _mm256_add_epi32(a, b); }
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
// The distance depends on the core. On a Zen 4 VM core, 4096 bytes, not
// 2048: one stream kept 0.83-0.89 of the read at 2048 and 0.88-0.97 at
// 4096 (8192 slowed Q4_K from L2 and Q6_K from memory); gemma-3 tg128 on
// that core 1.044x [1.023, 1.084]. On an Intel Xeon VM core (family 6
// model 167) 4096 kept only 0.71-0.81 of the read from memory and 3072
// 0.92-0.95 (2048 0.96-0.98); gemma-3 tg128 on two threads 1.082x [1.032,
// 1.106] at 3072, 1.095x at 2048, and SmolLM2, whose weights sit in that
// VM's 480 MiB L3, 0.942x [0.852, 1.087] at 3072 against 0.839x at 2048:
// 3072 on Intel, 4096 elsewhere (AMD). PTXLM_CPU_PREFETCH=BYTES sets the
// distance, 0 turns it off (A/B runs).
inline uint64_t default_prefetch() {
    __builtin_cpu_init();   // this runs during static initialisation
    return __builtin_cpu_is("intel") ? 3072 : 4096;
}
// inline: one object for every kernel TU, read once.
inline const uint64_t kPrefetch = env_count("PTXLM_CPU_PREFETCH", default_prefetch(), uint64_t(1) << 20);
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

// With int32 products (Dot::kInt32Parts) a block's products go into S int32
// sums per input, taking turns, and the S are added at the block's end: 4
// at one input, AtTwo at two (2, or 1 for the kernels two sums slowed
// there), 1 from three on (the inputs' own sums are independent chains
// already). One sum chained a block's 8 vpdpbusd at one input; on a Zen 4
// core from L2 four ran Q4_1 1.12x, Q8_0 1.04x, IQ4_NL 1.12x as fast
// (2026-12-06, docs/benchmarks.md). The decode there streams from memory
// either way: this is headroom for a core that reads faster.
template <class Dot, int NX, int AtTwo = 2>
constexpr int kBlockSums = !Dot::kInt32Parts || NX > 2 ? 1 : NX == 2 ? AtTwo : 4;
template <class Dot, int S>
inline typename Dot::V add_sums(const typename Dot::V* s) {
    static_assert(S == 1 || S == 2 || S == 4);
    if constexpr (S == 1) return s[0];
    else if constexpr (S == 2) return Dot::add(s[0], s[1]);
    else return Dot::add(Dot::add(s[0], s[1]), Dot::add(s[2], s[3]));
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

}  // namespace
}  // namespace ptxlm::cpu
