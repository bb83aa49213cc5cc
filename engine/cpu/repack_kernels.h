// The packed kernels' table for one product policy (packed_table), and the
// 32-element types' kernels (Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL); the
// policies, the helpers every kernel shares and what the Isas' builds must
// keep apart are in repack_kernels_common.h, the 256-value types' kernels in
// repack_kernels_256.h. Included by the kernel TUs (repack_avx2.cpp,
// repack_avx512vnni.cpp) only.
#pragma once

#include <array>

#include "engine/cpu/repack_kernels_256.h"
#include "engine/cpu/repack_kernels_common.h"

namespace ptxlm::cpu {
namespace {

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
    // int32 sums per input and block: two at two inputs only with a min
    // (Q4_0/Q5_0 ran slower with two there).
    template <int NX>
    static constexpr int kSums = kBlockSums<Dot, NX, HasMin ? 2 : 1>;
    // Words [C, C + Dot::kWords) of block b: every input's two products per
    // word (low nibbles against input bytes 4C.., high ones against 16 +
    // 4C..) into part. A C that is not a multiple of kWords was done with
    // the words before it.
    //
    // With S sums per input (kInt32Parts only: part[k · S + j], kBlockSums)
    // the products take turns among them, the low nibbles' into sum (2C) % S
    // and the high ones' into (2C + 1) % S, so that a block's vpdpbusd form
    // S chains 8 / S deep instead of one 8 deep.
    template <int C, int NX, int S = 1>
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
                const V xlo = Dot::xwords(y[k][b].qs + 4 * C), xhi = Dot::xwords(y[k][b].qs + 16 + 4 * C);
                if constexpr (S == 1) {
                    part[k] = Dot::part2(part[k], lo, xlo, hi, xhi);
                    keep_in_register(part[k]);
                } else {
                    V& a = part[k * S + (2 * C / Dot::kWords) % S];
                    V& h = part[k * S + (2 * C / Dot::kWords + 1) % S];
                    a = Dot::add32(a, lo, xlo);
                    h = Dot::add32(h, hi, xhi);
                    keep_in_register(a);
                    keep_in_register(h);
                }
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
            constexpr int S = kSums<NX>;
            word<0, NX, S>(g, qh, y, b, isum);
            word<1, NX, S>(g, qh, y, b, isum);
            word<2, NX, S>(g, qh, y, b, isum);
            word<3, NX, S>(g, qh, y, b, isum);
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
    // One int32 accumulator (kBlockSums at one or two inputs) and one float
    // accumulator per input, so that NX = 4 fits the 16 registers (the min
    // term goes into the same float accumulator, a second FMA on it).
    template <int NX>
    static void run(const uint8_t* g, const void* const* xs, uint64_t n, float* out, uint64_t out_stride, bool pf) {
        constexpr int S = kSums<NX>;
        Inputs<NX> in(xs);
        const BlockQ8x32* const* y = in.y;
        for (uint64_t b = 0; b < n / 32; ++b, g += kBlock) {
            if (pf) prefetch_block(g, kBlock);
            const typename Dot::Qh qh = Fifth ? Dot::load_qh(g + kQh) : typename Dot::Qh{};
            // The offset term −Offset·Σq: int32 partial sums start from it
            // (in the first of an input's sums), int16 ones (which could not
            // hold it) take it off at the end.
            V isum[NX * S];
            if constexpr (Dot::kInt32Parts)
                for (int k = 0; k < NX * S; ++k)
                    isum[k] = k % S == 0 ? Dot::start(HasMin ? 0 : -kOffset * y[k / S][b].sum) : Dot::start(0);
            words<0, NX>(g, qh, y, b, isum);
            const __m256 d = f16x8(g);
            for (int k = 0; k < NX; ++k) {
                __m256i s = Dot::fold(add_sums<Dot, S>(isum + k * S));
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
// With int32 products, kBlockSums sums per input and block: s32[k · S + j].
template <class K>
struct Signed8 {
    using Dot = typename K::Dot;
    using V = typename Dot::V;
    static constexpr uint64_t kBlock = K::kBlock;
    template <int NX>
    static void run(const uint8_t* g, const void* const* xs, uint64_t n, float* out, uint64_t out_stride, bool pf) {
        constexpr int S = kBlockSums<Dot, NX, 1>;
        Inputs<NX> in(xs);
        const BlockQ8x32* const* y = in.y;
        for (uint64_t b = 0; b < n / 32; ++b, g += kBlock) {
            if (pf) prefetch_block(g, kBlock);
            V s32[NX * S];
            for (int k = 0; k < NX * S; ++k)
                s32[k] = Dot::start(Dot::kInt32Parts && k % S == 0 ? -128 * y[k / S][b].sum : 0);
            K::template sums<NX, S>(g, y, b, s32);
            const __m256 d = f16x8(g);
            for (int k = 0; k < NX; ++k) in.scale_add(k, d, b, Dot::fold(add_sums<Dot, S>(s32 + k * S)));
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
    template <int NX, int S>
    static void sums(const uint8_t* g, const BlockQ8x32* const* y, uint64_t b, V* s32) {
        // Unrolled, so that the sum a word goes into (c % S) is a register.
        _Pragma("GCC unroll 8") for (int c = 0; c < 8; c += Dot::kWords) {
            const V w = Dot::load(g + 16 + 32 * c);
            if constexpr (Dot::kInt32Parts) {
                const V u = Dot::xor_(w, Dot::bytes(char(0x80)));   // w + 128
                for (int k = 0; k < NX; ++k) {
                    V& a = s32[k * S + (c / Dot::kWords) % S];
                    a = Dot::add32(a, u, Dot::xwords(y[k][b].qs + 4 * c));
                    keep_in_register(a);
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
    template <int NX, int S>
    static void sums(const uint8_t* g, const BlockQ8x32* const* y, uint64_t b, V* s32) {
        V table = Dot::table16(gguf::kIQ4Values);
        if constexpr (Dot::kInt32Parts) table = Dot::xor_(table, Dot::bytes(char(0x80)));   // value + 128
        const V m4 = Dot::bytes(0x0F);
        // Unrolled, so that the sums a word goes into are registers.
        _Pragma("GCC unroll 4") for (int c = 0; c < 4; c += Dot::kWords) {
            const V v = Dot::load(g + 16 + 32 * c);
            const V lo = Dot::shuffle(table, Dot::and_(v, m4));
            const V hi = Dot::shuffle(table, Dot::and_(Dot::srl4(v), m4));
            if constexpr (Dot::kInt32Parts) {
                for (int k = 0; k < NX; ++k) {
                    V& a = s32[k * S + (2 * c / Dot::kWords) % S];
                    V& h = s32[k * S + (2 * c / Dot::kWords + 1) % S];
                    a = Dot::add32(a, lo, Dot::xwords(y[k][b].qs + 4 * c));
                    h = Dot::add32(h, hi, Dot::xwords(y[k][b].qs + 16 + 4 * c));
                    keep_in_register(a);
                    keep_in_register(h);
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
