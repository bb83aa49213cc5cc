// The packed kernels (repack.h), AVX2 + FMA + F16C (compiled with those
// flags only here). One group of 8 rows per call: every int32 lane of the
// accumulators is one row, so a group ends with one 8-float store per input
// instead of 8 horizontal sums, and the 8 rows' f16 scales become floats in
// one vcvtph2ps.
//
// Saturation: vpmaddubsw adds two u8·s8 products in int16. 4-bit codes
// are at most 15 against |x| <= 127: 3810 per pair, and the 8 pairs of a
// lane over a block's four words add to at most 30480 < 32767, so they are
// summed in int16 and widened once per block; 5-bit codes (31: 7874 per
// pair) are widened every two words. Q8_0 and IQ4_NL go through the sign trick,
// |w| <= 128 against x with w's sign: 32512 per pair, widened at once.
#include <cstdlib>
#include <immintrin.h>

#include "engine/cpu/repack.h"
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

// An empty asm that claims to change v: GCC may not move additions across
// it. Without it, GCC regroups a block's integer sums into a tree whose
// products are all computed first, and with four inputs their partial sums
// (32 registers) spill to the stack.
inline void keep_in_register(__m256i& v) { asm volatile("" : "+x"(v)); }

// The 4- and 5-bit types: Q4_0, Q4_1 (Fifth false), Q5_0, Q5_1, with a
// min (Q4_1, Q5_1) or without. Packed block: d[8], m[8] where HasMin, the
// 8 rows' qh words where Fifth, then 4 words of nibbles × 8 rows: 144, 160,
// 176 or 192 bytes. Codes c = nibble (| fifth bit · 16): 0..15 or 0..31.
// Without a min the offset comes off as Offset·Σq (the same integer as
// Σ(c − Offset)·q; the input block carries its Σq); with one,
// m · s is added per block.
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

template <bool HasMin, bool Fifth>
struct Nibbles8 {
    static constexpr int kOffset = Fifth ? 16 : 8;
    static constexpr uint64_t kQh = HasMin ? 32 : 16, kQs = kQh + (Fifth ? 32 : 0), kBlock = kQs + 128;
    // The fifth bits of word c's low (High false) or high nibbles as 0x10
    // per byte: packed spread (repack.cpp, spread_qh), they sit at bit c
    // (low) and bit 4 + c (high) of each byte.
    template <int C, bool High>
    static __m256i fifth(__m256i qh) {
        const __m256i at4 = High ? _mm256_srli_epi32(qh, C) : _mm256_slli_epi32(qh, 4 - C);
        return _mm256_and_si256(at4, _mm256_set1_epi8(0x10));
    }
    template <int C, int NX>
    static void word(const uint8_t* g, __m256i qh, const BlockQ8x32* const* y, uint64_t b, __m256i* s16) {
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        const __m256i v = loadu(g + kQs + 32 * C);
        __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
        if constexpr (Fifth) {
            lo = _mm256_or_si256(lo, fifth<C, false>(qh));
            hi = _mm256_or_si256(hi, fifth<C, true>(qh));
        }
        for (int k = 0; k < NX; ++k) {
            const __m256i plo = _mm256_maddubs_epi16(lo, bcast4(y[k][b].qs + 4 * C));
            const __m256i phi = _mm256_maddubs_epi16(hi, bcast4(y[k][b].qs + 16 + 4 * C));
            s16[k] = _mm256_add_epi16(s16[k], _mm256_add_epi16(plo, phi));
            keep_in_register(s16[k]);
        }
    }
    // Words [C0, C0 + 2) of block b into s16 (zeroed first), then widened
    // into isum (set when First, else added).
    template <int C0, int NX, bool First>
    static void two_words(const uint8_t* g, __m256i qh, const BlockQ8x32* const* y, uint64_t b, __m256i* isum) {
        __m256i s16[NX];
        for (int k = 0; k < NX; ++k) s16[k] = _mm256_setzero_si256();
        word<C0, NX>(g, qh, y, b, s16);
        word<C0 + 1, NX>(g, qh, y, b, s16);
        const __m256i ones = _mm256_set1_epi16(1);
        for (int k = 0; k < NX; ++k) {
            const __m256i w = _mm256_madd_epi16(s16[k], ones);
            isum[k] = First ? w : _mm256_add_epi32(isum[k], w);
            keep_in_register(isum[k]);
        }
    }
    // One int32 accumulator and one float accumulator per input, so that
    // NX = 4 fits the 16 registers (the min term goes into the same float
    // accumulator, a second FMA on it).
    template <int NX>
    static void run(const uint8_t* g, const void* const* xs, uint64_t n, float* out, uint64_t out_stride, bool pf) {
        const BlockQ8x32* y[NX];
        __m256 acc[NX];
        for (int k = 0; k < NX; ++k) {
            y[k] = static_cast<const BlockQ8x32*>(xs[k]);
            acc[k] = _mm256_setzero_ps();
        }
        for (uint64_t b = 0; b < n / 32; ++b, g += kBlock) {
            if (pf) prefetch_block(g, kBlock);
            const __m256i qh = Fifth ? loadu(g + kQh) : _mm256_setzero_si256();
            __m256i isum[NX];
            if constexpr (Fifth) {
                // 5-bit codes: two words (4 code pairs) per int16 sum.
                two_words<0, NX, true>(g, qh, y, b, isum);
                two_words<2, NX, false>(g, qh, y, b, isum);
            } else {
                // 4-bit codes: 8 pairs of 2·15·127 = 30480 fit an int16.
                __m256i s16[NX];
                for (int k = 0; k < NX; ++k) s16[k] = _mm256_setzero_si256();
                word<0, NX>(g, qh, y, b, s16);
                word<1, NX>(g, qh, y, b, s16);
                word<2, NX>(g, qh, y, b, s16);
                word<3, NX>(g, qh, y, b, s16);
                for (int k = 0; k < NX; ++k) isum[k] = _mm256_madd_epi16(s16[k], _mm256_set1_epi16(1));
            }
            const __m256 d = f16x8(g);
            for (int k = 0; k < NX; ++k) {
                if constexpr (!HasMin) isum[k] = _mm256_sub_epi32(isum[k], _mm256_set1_epi32(kOffset * y[k][b].sum));
                acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(y[k][b].d)), _mm256_cvtepi32_ps(isum[k]), acc[k]);
                if constexpr (HasMin) acc[k] = _mm256_fmadd_ps(f16x8(g + 16), _mm256_set1_ps(y[k][b].s), acc[k]);
            }
        }
        for (int k = 0; k < NX; ++k) _mm256_storeu_ps(out + k * out_stride, acc[k]);
    }
};

// The signed types, whose products go through the sign trick (|w| <= 128
// against x with w's sign: 32512 per pair, widened at once): one int32 sum
// per (row, input) and block, times d_w·d_x. K gives the block's bytes and
// its sums (K::sums: the block at g, into s32, zeroed by the caller).
template <class K>
struct Signed8 {
    static constexpr uint64_t kBlock = K::kBlock;
    template <int NX>
    static void run(const uint8_t* g, const void* const* xs, uint64_t n, float* out, uint64_t out_stride, bool pf) {
        const BlockQ8x32* y[NX];
        __m256 acc[NX];
        for (int k = 0; k < NX; ++k) {
            y[k] = static_cast<const BlockQ8x32*>(xs[k]);
            acc[k] = _mm256_setzero_ps();
        }
        for (uint64_t b = 0; b < n / 32; ++b, g += kBlock) {
            if (pf) prefetch_block(g, kBlock);
            __m256i s32[NX];
            for (int k = 0; k < NX; ++k) s32[k] = _mm256_setzero_si256();
            K::template sums<NX>(g, y, b, s32);
            const __m256 d = f16x8(g);
            for (int k = 0; k < NX; ++k)
                acc[k] = _mm256_fmadd_ps(_mm256_mul_ps(d, _mm256_set1_ps(y[k][b].d)), _mm256_cvtepi32_ps(s32[k]),
                                         acc[k]);
        }
        for (int k = 0; k < NX; ++k) _mm256_storeu_ps(out + k * out_stride, acc[k]);
    }
};

// w (signed bytes) against 4 input bytes per lane, into s32.
inline __m256i signed_products(__m256i w, __m256i aw, const int8_t* x4) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(aw, _mm256_sign_epi8(bcast4(x4), w)), _mm256_set1_epi16(1));
}

// Q8_0, 272 bytes per packed block: d[8], 8 words × 8 rows.
struct Q8_0Sums {
    static constexpr uint64_t kBlock = 272;
    template <int NX>
    static void sums(const uint8_t* g, const BlockQ8x32* const* y, uint64_t b, __m256i* s32) {
        for (int c = 0; c < 8; ++c) {
            const __m256i w = loadu(g + 16 + 32 * c), aw = _mm256_sign_epi8(w, w);
            for (int k = 0; k < NX; ++k) {
                s32[k] = _mm256_add_epi32(s32[k], signed_products(w, aw, y[k][b].qs + 4 * c));
                keep_in_register(s32[k]);
            }
        }
    }
};

// IQ4_NL, 144 bytes per packed block as Q4_0's (d[8], 4 words of nibbles ×
// 8 rows): the nibbles index the non-linear table with vpshufb, and the
// values (|w| <= 127) take the sign trick, the low and high nibbles'
// products widened separately.
struct IQ4_NLSums {
    static constexpr uint64_t kBlock = 144;
    template <int NX>
    static void sums(const uint8_t* g, const BlockQ8x32* const* y, uint64_t b, __m256i* s32) {
        const __m256i table =
            _mm256_broadcastsi128_si256(_mm_loadu_si128(reinterpret_cast<const __m128i*>(gguf::kIQ4Values)));
        const __m256i m4 = _mm256_set1_epi8(0x0F);
        for (int c = 0; c < 4; ++c) {
            const __m256i v = loadu(g + 16 + 32 * c);
            const __m256i lo = _mm256_shuffle_epi8(table, _mm256_and_si256(v, m4));
            const __m256i hi = _mm256_shuffle_epi8(table, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
            const __m256i alo = _mm256_sign_epi8(lo, lo), ahi = _mm256_sign_epi8(hi, hi);
            for (int k = 0; k < NX; ++k) {
                s32[k] = _mm256_add_epi32(s32[k], _mm256_add_epi32(signed_products(lo, alo, y[k][b].qs + 4 * c),
                                                                   signed_products(hi, ahi, y[k][b].qs + 16 + 4 * c)));
                keep_in_register(s32[k]);
            }
        }
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

constexpr int kWidth = 4;

}  // namespace

namespace detail {
// In qdot.h's slot order; the k-quants and IQ4_XS keep the one-row kernels.
const PackedDotFn kPackedAvx2[kQDotSlots] = {
    run_group<Nibbles8<false, false>, kWidth>,   // Q4_0
    run_group<Nibbles8<true, false>, kWidth>,    // Q4_1
    run_group<Nibbles8<false, true>, kWidth>,    // Q5_0
    run_group<Nibbles8<true, true>, kWidth>,     // Q5_1
    run_group<Signed8<Q8_0Sums>, kWidth>,        // Q8_0
    nullptr, nullptr, nullptr,                   // Q4_K, Q5_K, Q6_K
    run_group<Signed8<IQ4_NLSums>, kWidth>,      // IQ4_NL
    nullptr, nullptr, nullptr,                   // IQ4_XS, Q2_K, Q3_K
};
}  // namespace detail

}  // namespace ptxlm::cpu
