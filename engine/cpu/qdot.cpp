// Quantized dot products: Isa selection, the activation quantizer, the
// dispatch table and the scalar kernels, which define the arithmetic the SIMD
// kernels (qdot_avx2.cpp, qdot_avx512.cpp) reproduce: per block an exact
// integer sum, then float scale · float(sum) added to a float total.
#include "engine/cpu/qdot.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <string_view>

#include "engine/cpu/x86_intrinsics.h"
#include "gguf/f16.h"

namespace ptxlm::cpu {

using gguf::GgmlType;

// ---- Isa ------------------------------------------------------------------

const char* isa_name(Isa isa) {
    switch (isa) {
        case Isa::Scalar: return "scalar";
        case Isa::Avx2: return "avx2";
        case Isa::Avx512: return "avx512";
        case Isa::Avx512Vnni: return "avx512vnni";
    }
    return "?";
}

Isa parse_isa(std::string_view name) {
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni})
        if (name == isa_name(isa)) return isa;
    throw std::invalid_argument("'" + std::string(name) + "' is not an ISA (choose scalar, avx2, avx512 or avx512vnni)");
}

std::vector<Isa> hardware_isas() {
    std::vector<Isa> out{Isa::Scalar};
    __builtin_cpu_init();
    const bool avx2 = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma") &&
                      __builtin_cpu_supports("f16c");
    if (!avx2) return out;
    out.push_back(Isa::Avx2);
    const bool avx512 = __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
                        __builtin_cpu_supports("avx512vl");
    if (!avx512) return out;
    out.push_back(Isa::Avx512);
    if (__builtin_cpu_supports("avx512vnni")) out.push_back(Isa::Avx512Vnni);
    return out;
}

std::vector<Isa> runnable_isas() {
    std::vector<Isa> isas = hardware_isas();
    const char* env = std::getenv("PTXLM_CPU_ISA");
    if (!env || !*env) return isas;
    Isa cap;
    try {
        cap = parse_isa(env);
    } catch (const std::invalid_argument&) {
        throw std::runtime_error("PTXLM_CPU_ISA=" + std::string(env) +
                                 ": unknown, expected scalar, avx2, avx512 or avx512vnni");
    }
    // The Isas are ordered, each a superset of the one before: cut the list
    // after the named one.
    const auto at = std::find(isas.begin(), isas.end(), cap);
    if (at == isas.end())
        throw std::runtime_error("PTXLM_CPU_ISA=" + std::string(env) + ": this CPU cannot run " + isa_name(cap) +
                                 " (best here: " + isa_name(isas.back()) + ")");
    isas.erase(at + 1, isas.end());
    return isas;
}

Isa best_isa() { return runnable_isas().back(); }

// ---- activation quantizer -------------------------------------------------

QuantizedInput::Layout qdot_layout(GgmlType t) {
    switch (t) {
        case GgmlType::Q4_0: case GgmlType::Q4_1: case GgmlType::Q5_0: case GgmlType::Q5_1: case GgmlType::Q8_0:
        case GgmlType::IQ4_NL:
            return QuantizedInput::Layout::Block32;
        case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
        case GgmlType::IQ4_XS:
            return QuantizedInput::Layout::Block256;
        default: return QuantizedInput::Layout::None;
    }
}

bool has_qdot(GgmlType t) { return qdot_layout(t) != QuantizedInput::Layout::None; }

namespace {

// std::fmax and std::fmin are library calls on the baseline ISA (this file
// has no -m flags); these comparisons give the same results, NaN included (a
// NaN operand yields the other one), and made pp64 about 10% faster once the
// products unpack each weight block once per batch.
float max_abs(const float* x, int n) {
    float amax = 0.f;
    for (int i = 0; i < n; ++i) {
        const float a = std::fabs(x[i]);
        amax = a > amax ? a : amax;
    }
    return amax;
}
float clamp127(float v) {
    v = v > -127.f ? v : -127.f;
    return v < 127.f ? v : 127.f;
}

void quantize_block32(const float* x, BlockQ8x32& y) {
    const float amax = max_abs(x, 32);
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    int sum = 0;
    for (int i = 0; i < 32; ++i) {
        // |x·id| <= 127 up to rounding of id; clamp so -128 can never appear.
        const float v = clamp127(std::nearbyint(x[i] * id));
        y.qs[i] = int8_t(v);
        sum += y.qs[i];
    }
    y.d = d;
    y.s = d * float(sum);
    y.sum = sum;
}

// Symmetric, as the 32-element blocks: q = x · 127/amax rounded to nearest
// even. (ggml's Q8_K maps the value of largest magnitude to -128 instead;
// against llama.cpp's logits the symmetric rounding lands closer, see
// test_vs_llamacpp.)
void quantize_block256(const float* x, BlockQ8x256& y) {
    const float amax = max_abs(x, 256);
    if (amax == 0.f) {
        std::memset(&y, 0, sizeof y);
        return;
    }
    const float iscale = 127.f / amax;
    for (int i = 0; i < 256; ++i) {
        const float v = clamp127(std::nearbyint(iscale * x[i]));
        y.qs[i] = int8_t(v);
    }
    for (int j = 0; j < 16; ++j) {
        int sum = 0;
        for (int i = 0; i < 16; ++i) sum += y.qs[16 * j + i];
        y.bsums[j] = int16_t(sum);
    }
    y.d = 1.f / iscale;
}


// The same two functions on AVX-512, bit for bit: x·id (or iscale·x) is one
// rounded product either way, vrndscaleps rounds to nearest even as
// nearbyint does in the default rounding mode, and max and the integer sums
// are exact.
#define PTXLM_AVX512 __attribute__((target("avx512f,avx512bw,avx512vl")))
PTXLM_AVX512 float max_abs_avx512(const float* x, int n) {
    __m512 m = _mm512_setzero_ps();
    for (int i = 0; i < n; i += 16) m = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + i)), m);   // a NaN is skipped, as in max_abs
    return _mm512_reduce_max_ps(m);
}
PTXLM_AVX512 __m128i quantize16_avx512(const float* x, __m512 scale) {
    const __m512 v = _mm512_roundscale_ps(_mm512_mul_ps(_mm512_loadu_ps(x), scale), _MM_FROUND_TO_NEAREST_INT);
    const __m512 c = _mm512_min_ps(_mm512_max_ps(v, _mm512_set1_ps(-127.f)), _mm512_set1_ps(127.f));
    return _mm512_cvtepi32_epi8(_mm512_cvtps_epi32(c));
}
PTXLM_AVX512 void quantize_block32_avx512(const float* x, BlockQ8x32& y) {
    const float amax = max_abs_avx512(x, 32);
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    const __m128i q0 = quantize16_avx512(x, _mm512_set1_ps(id)), q1 = quantize16_avx512(x + 16, _mm512_set1_ps(id));
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y.qs), q0);
    _mm_storeu_si128(reinterpret_cast<__m128i*>(y.qs + 16), q1);
    const __m512i s = _mm512_add_epi32(_mm512_cvtepi8_epi32(q0), _mm512_cvtepi8_epi32(q1));
    y.d = d;
    y.sum = _mm512_reduce_add_epi32(s);
    y.s = d * float(y.sum);
}
PTXLM_AVX512 void quantize_block256_avx512(const float* x, BlockQ8x256& y) {
    const float amax = max_abs_avx512(x, 256);
    if (amax == 0.f) {
        std::memset(&y, 0, sizeof y);
        return;
    }
    const float iscale = 127.f / amax;
    for (int j = 0; j < 16; ++j) {
        const __m128i q = quantize16_avx512(x + 16 * j, _mm512_set1_ps(iscale));
        _mm_storeu_si128(reinterpret_cast<__m128i*>(y.qs + 16 * j), q);
        y.bsums[j] = int16_t(_mm512_reduce_add_epi32(_mm512_cvtepi8_epi32(q)));
    }
    y.d = 1.f / iscale;
}

// And on AVX2, bit for bit as well (the same reasoning; vroundps with
// _MM_FROUND_TO_NEAREST_INT is round-to-nearest-even).
#define PTXLM_AVX2 __attribute__((target("avx2,fma,f16c")))
PTXLM_AVX2 float max_abs_avx2(const float* x, int n) {
    const __m256 sign = _mm256_set1_ps(-0.f);
    __m256 m = _mm256_setzero_ps();
    for (int i = 0; i < n; i += 8) m = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(x + i)), m);
    __m128 h = _mm_max_ps(_mm256_castps256_ps128(m), _mm256_extractf128_ps(m, 1));
    h = _mm_max_ps(h, _mm_movehl_ps(h, h));
    h = _mm_max_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}
PTXLM_AVX2 __m256i quantize8_avx2(const float* x, __m256 scale) {
    const __m256 v = _mm256_round_ps(_mm256_mul_ps(_mm256_loadu_ps(x), scale), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
    return _mm256_cvtps_epi32(_mm256_min_ps(_mm256_max_ps(v, _mm256_set1_ps(-127.f)), _mm256_set1_ps(127.f)));
}
PTXLM_AVX2 int hsum_avx2(__m256i v) {
    __m128i s = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0x4E));
    s = _mm_add_epi32(s, _mm_shuffle_epi32(s, 0xB1));
    return _mm_cvtsi128_si32(s);
}
// 32 values x·scale as int8 at q; the sums of values 0..15 and 16..31.
PTXLM_AVX2 void quantize32_avx2(const float* x, __m256 scale, int8_t* q, int& sum_lo, int& sum_hi) {
    const __m256i a = quantize8_avx2(x, scale), b = quantize8_avx2(x + 8, scale);
    const __m256i c = quantize8_avx2(x + 16, scale), d = quantize8_avx2(x + 24, scale);
    // packs interleave 128-bit halves: bytes come out as a0-3 b0-3 c0-3 d0-3 a4-7 b4-7 c4-7 d4-7.
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(a, b), _mm256_packs_epi32(c, d));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q), _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    sum_lo = hsum_avx2(_mm256_add_epi32(a, b));
    sum_hi = hsum_avx2(_mm256_add_epi32(c, d));
}
PTXLM_AVX2 void quantize_block32_avx2(const float* x, BlockQ8x32& y) {
    const float amax = max_abs_avx2(x, 32);
    const float d = amax / 127.f;
    const float id = d != 0.f ? 1.f / d : 0.f;
    int lo, hi;
    quantize32_avx2(x, _mm256_set1_ps(id), y.qs, lo, hi);
    y.d = d;
    y.s = d * float(lo + hi);
    y.sum = lo + hi;
}
PTXLM_AVX2 void quantize_block256_avx2(const float* x, BlockQ8x256& y) {
    const float amax = max_abs_avx2(x, 256);
    if (amax == 0.f) {
        std::memset(&y, 0, sizeof y);
        return;
    }
    const float iscale = 127.f / amax;
    for (int j = 0; j < 8; ++j) {
        int lo, hi;
        quantize32_avx2(x + 32 * j, _mm256_set1_ps(iscale), y.qs + 32 * j, lo, hi);
        y.bsums[2 * j] = int16_t(lo);
        y.bsums[2 * j + 1] = int16_t(hi);
    }
    y.d = 1.f / iscale;
}

// The quantizer for `isa` (all give the same bits).
enum class Quantizer { Scalar, Avx2, Avx512 };
Quantizer quantizer(Isa isa) {
    switch (isa) {
        case Isa::Scalar: return Quantizer::Scalar;
        case Isa::Avx2: return Quantizer::Avx2;
        default: return Quantizer::Avx512;
    }
}

}  // namespace

QuantizeBlock32Fn quantize_block32_fn(Isa isa) {
    const Quantizer qz = quantizer(isa);
    return qz == Quantizer::Avx512 ? quantize_block32_avx512 : qz == Quantizer::Avx2 ? quantize_block32_avx2 : quantize_block32;
}

void quantize_input(const float* x, uint64_t n, GgmlType weight_type, QuantizedInput& out, Isa isa) {
    const QuantizedInput::Layout layout = qdot_layout(weight_type);
    const uint64_t block = layout == QuantizedInput::Layout::Block256 ? 256 : 32;
    if (layout == QuantizedInput::Layout::None)
        throw std::invalid_argument(std::string("quantize_input: no quantized dot product for ") +
                                    gguf::type_traits(weight_type).name);
    if (n % block != 0)
        throw std::invalid_argument("quantize_input: n = " + std::to_string(n) + " is not a multiple of " +
                                    std::to_string(block) + " (" + gguf::type_traits(weight_type).name + ")");
    out.layout = layout;
    out.n = n;
    if (layout == QuantizedInput::Layout::Block32) {
        out.b32.resize(n / 32);
        const QuantizeBlock32Fn fn = quantize_block32_fn(isa);
        for (uint64_t b = 0; b < n / 32; ++b) fn(x + 32 * b, out.b32[b]);
    } else {
        out.b256.resize(n / 256);
        const Quantizer qz = quantizer(isa);
        auto* fn = qz == Quantizer::Avx512 ? quantize_block256_avx512
                   : qz == Quantizer::Avx2 ? quantize_block256_avx2
                                                    : quantize_block256;
        for (uint64_t b = 0; b < n / 256; ++b) fn(x + 256 * b, out.b256[b]);
    }
}

// ---- scalar kernels ---------------------------------------------------------

namespace {

using gguf::BlockQ4_0;
using gguf::BlockQ4_1;
using gguf::BlockQ5_0;
using gguf::BlockQ5_1;
using gguf::BlockQ8_0;
using gguf::BlockQ4_K;
using gguf::BlockQ5_K;
using gguf::BlockQ6_K;
using gguf::BlockQ2_K;
using gguf::BlockQ3_K;
using gguf::BlockIQ4_NL;
using gguf::BlockIQ4_XS;
using gguf::kIQ4Values;

float dot_q4_0(const void* row, const void* x, uint64_t n) {
    const auto* w = static_cast<const BlockQ4_0*>(row);
    const auto* y = static_cast<const BlockQ8x32*>(x);
    float sum = 0.f;
    for (uint64_t b = 0; b < n / 32; ++b) {
        int isum = 0;
        for (int j = 0; j < 16; ++j)
            isum += ((w[b].qs[j] & 0xF) - 8) * y[b].qs[j] + ((w[b].qs[j] >> 4) - 8) * y[b].qs[j + 16];
        sum += f16_to_f32(w[b].d) * y[b].d * float(isum);
    }
    return sum;
}

float dot_q4_1(const void* row, const void* x, uint64_t n) {
    const auto* w = static_cast<const BlockQ4_1*>(row);
    const auto* y = static_cast<const BlockQ8x32*>(x);
    float sum = 0.f;
    for (uint64_t b = 0; b < n / 32; ++b) {
        int isum = 0;
        for (int j = 0; j < 16; ++j) isum += (w[b].qs[j] & 0xF) * y[b].qs[j] + (w[b].qs[j] >> 4) * y[b].qs[j + 16];
        sum += f16_to_f32(w[b].d) * y[b].d * float(isum) + f16_to_f32(w[b].m) * y[b].s;
    }
    return sum;
}

// Q5 codes 0..31: low nibble | bit j (element j) or bit j+16 of qh, times 16.
float dot_q5_0(const void* row, const void* x, uint64_t n) {
    const auto* w = static_cast<const BlockQ5_0*>(row);
    const auto* y = static_cast<const BlockQ8x32*>(x);
    float sum = 0.f;
    for (uint64_t b = 0; b < n / 32; ++b) {
        const uint32_t qh = detail::load_u32(w[b].qh);
        int isum = 0;
        for (int j = 0; j < 16; ++j) {
            const int q0 = int((w[b].qs[j] & 0xF) | ((qh >> j) & 1) << 4) - 16;
            const int q1 = int((w[b].qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4) - 16;
            isum += q0 * y[b].qs[j] + q1 * y[b].qs[j + 16];
        }
        sum += f16_to_f32(w[b].d) * y[b].d * float(isum);
    }
    return sum;
}

float dot_q5_1(const void* row, const void* x, uint64_t n) {
    const auto* w = static_cast<const BlockQ5_1*>(row);
    const auto* y = static_cast<const BlockQ8x32*>(x);
    float sum = 0.f;
    for (uint64_t b = 0; b < n / 32; ++b) {
        const uint32_t qh = detail::load_u32(w[b].qh);
        int isum = 0;
        for (int j = 0; j < 16; ++j) {
            const int q0 = int((w[b].qs[j] & 0xF) | ((qh >> j) & 1) << 4);
            const int q1 = int((w[b].qs[j] >> 4) | ((qh >> (j + 16)) & 1) << 4);
            isum += q0 * y[b].qs[j] + q1 * y[b].qs[j + 16];
        }
        sum += f16_to_f32(w[b].d) * y[b].d * float(isum) + f16_to_f32(w[b].m) * y[b].s;
    }
    return sum;
}

float dot_q8_0(const void* row, const void* x, uint64_t n) {
    const auto* w = static_cast<const BlockQ8_0*>(row);
    const auto* y = static_cast<const BlockQ8x32*>(x);
    float sum = 0.f;
    for (uint64_t b = 0; b < n / 32; ++b) {
        int isum = 0;
        for (int j = 0; j < 32; ++j) isum += w[b].qs[j] * y[b].qs[j];
        sum += f16_to_f32(w[b].d) * y[b].d * float(isum);
    }
    return sum;
}

// Q4_K/Q5_K: Σ_j sc_j·Σ(q·x) over the 8 sub-blocks of 32, minus
// Σ_j m_j·Σx (two bsums per sub-block), each scaled once per super-block.
int k_min_sum(const uint8_t m[8], const int16_t bsums[16]) {
    int msum = 0;
    for (int j = 0; j < 8; ++j) msum += m[j] * (bsums[2 * j] + bsums[2 * j + 1]);
    return msum;
}

float dot_q4_k(const void* row, const void* x, uint64_t n) {
    const auto* w = static_cast<const BlockQ4_K*>(row);
    const auto* y = static_cast<const BlockQ8x256*>(x);
    float sum = 0.f;
    for (uint64_t b = 0; b < n / 256; ++b) {
        uint8_t sc[8], m[8];
        detail::unpack_k_scales(w[b].scales, sc, m);
        const uint8_t* q = w[b].qs;
        const int8_t* xq = y[b].qs;
        int isum = 0;
        for (int c = 0; c < 4; ++c, q += 32, xq += 64) {
            int lo = 0, hi = 0;
            for (int l = 0; l < 32; ++l) {
                lo += (q[l] & 0xF) * xq[l];
                hi += (q[l] >> 4) * xq[l + 32];
            }
            isum += sc[2 * c] * lo + sc[2 * c + 1] * hi;
        }
        const int msum = k_min_sum(m, y[b].bsums);
        sum += f16_to_f32(w[b].d) * y[b].d * float(isum) - f16_to_f32(w[b].dmin) * y[b].d * float(msum);
    }
    return sum;
}

float dot_q5_k(const void* row, const void* x, uint64_t n) {
    const auto* w = static_cast<const BlockQ5_K*>(row);
    const auto* y = static_cast<const BlockQ8x256*>(x);
    float sum = 0.f;
    for (uint64_t b = 0; b < n / 256; ++b) {
        uint8_t sc[8], m[8];
        detail::unpack_k_scales(w[b].scales, sc, m);
        const uint8_t* q = w[b].qs;
        const uint8_t* qh = w[b].qh;
        const int8_t* xq = y[b].qs;
        int isum = 0;
        for (int c = 0; c < 4; ++c, q += 32, xq += 64) {
            int lo = 0, hi = 0;
            for (int l = 0; l < 32; ++l) {
                lo += ((q[l] & 0xF) | ((qh[l] >> (2 * c)) & 1) << 4) * xq[l];
                hi += ((q[l] >> 4) | ((qh[l] >> (2 * c + 1)) & 1) << 4) * xq[l + 32];
            }
            isum += sc[2 * c] * lo + sc[2 * c + 1] * hi;
        }
        const int msum = k_min_sum(m, y[b].bsums);
        sum += f16_to_f32(w[b].d) * y[b].d * float(isum) - f16_to_f32(w[b].dmin) * y[b].d * float(msum);
    }
    return sum;
}

// Q6_K: element 128h + 32k + l (k = 0..3) takes its low 4 bits from
// ql[64h + l + 32·(k & 1)] (low nibble for k < 2, high for k >= 2) and its top
// 2 bits from bits 2k..2k+1 of qh[32h + l]; its group of 16 is
// g = 8h + 2k + l/16, scaled by scales[g]. Codes are 0..63; the -32 offset is
// Σ_g scales[g]·32·bsums[g].
float dot_q6_k(const void* row, const void* x, uint64_t n) {
    const auto* w = static_cast<const BlockQ6_K*>(row);
    const auto* y = static_cast<const BlockQ8x256*>(x);
    float sum = 0.f;
    for (uint64_t b = 0; b < n / 256; ++b) {
        int gs[16] = {};
        for (int h = 0; h < 2; ++h) {
            const uint8_t* ql = w[b].ql + 64 * h;
            const uint8_t* qh = w[b].qh + 32 * h;
            const int8_t* xq = y[b].qs + 128 * h;
            for (int l = 0; l < 32; ++l) {
                const int g = 8 * h + l / 16;
                gs[g + 0] += ((ql[l] & 0xF) | ((qh[l] >> 0) & 3) << 4) * xq[l];
                gs[g + 2] += ((ql[l + 32] & 0xF) | ((qh[l] >> 2) & 3) << 4) * xq[l + 32];
                gs[g + 4] += ((ql[l] >> 4) | ((qh[l] >> 4) & 3) << 4) * xq[l + 64];
                gs[g + 6] += ((ql[l + 32] >> 4) | ((qh[l] >> 6) & 3) << 4) * xq[l + 96];
            }
        }
        int isum = 0;
        for (int g = 0; g < 16; ++g) isum += w[b].scales[g] * (gs[g] - 32 * y[b].bsums[g]);
        sum += f16_to_f32(w[b].d) * y[b].d * float(isum);
    }
    return sum;
}

// IQ4_NL / IQ4_XS: a 32-element block's codes index kIQ4Values (-127..113),
// laid out as Q4_0's; Σ v·x in int.
int iq4_block_sum(const uint8_t qs[16], const int8_t* xq) {
    int isum = 0;
    for (int j = 0; j < 16; ++j) isum += kIQ4Values[qs[j] & 0xF] * xq[j] + kIQ4Values[qs[j] >> 4] * xq[j + 16];
    return isum;
}

float dot_iq4_nl(const void* row, const void* x, uint64_t n) {
    const auto* w = static_cast<const BlockIQ4_NL*>(row);
    const auto* y = static_cast<const BlockQ8x32*>(x);
    float sum = 0.f;
    for (uint64_t b = 0; b < n / 32; ++b) sum += f16_to_f32(w[b].d) * y[b].d * float(iq4_block_sum(w[b].qs, y[b].qs));
    return sum;
}

// IQ4_XS: Σ_ib (ls_ib − 32)·Σ(v·x) over the 8 sub-blocks, |·| < 2^31
// (8 · 32 · 32 · 127 · 127), scaled once per super-block.
float dot_iq4_xs(const void* row, const void* x, uint64_t n) {
    const auto* w = static_cast<const BlockIQ4_XS*>(row);
    const auto* y = static_cast<const BlockQ8x256*>(x);
    float sum = 0.f;
    for (uint64_t b = 0; b < n / 256; ++b) {
        int isum = 0;
        for (int ib = 0; ib < 8; ++ib)
            isum += (gguf::iq4_xs_scale(w[b], ib) - 32) * iq4_block_sum(w[b].qs + 16 * ib, y[b].qs + 32 * ib);
        sum += f16_to_f32(w[b].d) * y[b].d * float(isum);
    }
    return sum;
}

// Q2_K / Q3_K: element 128h + 32k + l (l = 0..31) is the 2-bit field k of
// qs[32h + l], in group g = 8h + 2k + l/16 of 16 (bsums[g]). Q2_K: Σ_g
// sc_g·Σ(q·x) − Σ_g m_g·bsums[g] (scale sc_g = low nibble of scales[g], min
// m_g = high nibble), each scaled by d or dmin once per super-block. Q3_K:
// codes u = q + 4 in 0..7 (bit 2 is bit 4h + k of hmask[l]), Σ_g
// s_g·(Σ(u·x) − 4·bsums[g]) with the signed 6-bit multipliers s_g.
template <class Code>
void k_low_group_sums(const uint8_t* qs, const int8_t* xq, Code code, int gs[16]) {
    for (int g = 0; g < 16; ++g) gs[g] = 0;
    for (int h = 0; h < 2; ++h)
        for (int k = 0; k < 4; ++k)
            for (int l = 0; l < 32; ++l) {
                const int i = 128 * h + 32 * k + l;
                gs[i / 16] += code(h, k, l, (qs[32 * h + l] >> (2 * k)) & 3) * xq[i];
            }
}

float dot_q2_k(const void* row, const void* x, uint64_t n) {
    const auto* w = static_cast<const BlockQ2_K*>(row);
    const auto* y = static_cast<const BlockQ8x256*>(x);
    float sum = 0.f;
    for (uint64_t b = 0; b < n / 256; ++b) {
        int gs[16];
        k_low_group_sums(w[b].qs, y[b].qs, [](int, int, int, int q) { return q; }, gs);
        int isum = 0, msum = 0;
        for (int g = 0; g < 16; ++g) {
            isum += (w[b].scales[g] & 0xF) * gs[g];
            msum += (w[b].scales[g] >> 4) * y[b].bsums[g];
        }
        sum += f16_to_f32(w[b].d) * y[b].d * float(isum) - f16_to_f32(w[b].dmin) * y[b].d * float(msum);
    }
    return sum;
}

float dot_q3_k(const void* row, const void* x, uint64_t n) {
    const auto* w = static_cast<const BlockQ3_K*>(row);
    const auto* y = static_cast<const BlockQ8x256*>(x);
    float sum = 0.f;
    for (uint64_t b = 0; b < n / 256; ++b) {
        const uint8_t* hm = w[b].hmask;
        int gs[16];
        k_low_group_sums(w[b].qs, y[b].qs,
                         [hm](int h, int k, int l, int q) { return q | ((hm[l] >> (4 * h + k)) & 1) << 2; }, gs);
        int isum = 0;
        for (int g = 0; g < 16; ++g) isum += gguf::q3_k_scale(w[b].scales, g) * (gs[g] - 4 * y[b].bsums[g]);
        sum += f16_to_f32(w[b].d) * y[b].d * float(isum);
    }
    return sum;
}

// Scalar code gains nothing from sharing the unpacking: one product at a time.
template <QDotFn Dot>
void dot_multi(const QDotBatch& a) {
    for (int r = 0; r < a.n_rows; ++r) {
        const void* row = static_cast<const uint8_t*>(a.rows) + uint64_t(r) * a.row_bytes;
        for (int k = 0; k < a.n_x; ++k) a.out[r + k * a.out_stride] = Dot(row, a.xs[k], a.n);
    }
}

}  // namespace

namespace detail {
const QDotFn kQDotScalar[kQDotSlots] = {dot_q4_0, dot_q4_1, dot_q5_0,  dot_q5_1,  dot_q8_0, dot_q4_k,
                                        dot_q5_k, dot_q6_k, dot_iq4_nl, dot_iq4_xs, dot_q2_k, dot_q3_k};
const QDotMultiFn kQDotMultiScalar[kQDotSlots] = {
    dot_multi<dot_q4_0>,   dot_multi<dot_q4_1>,   dot_multi<dot_q5_0>, dot_multi<dot_q5_1>,
    dot_multi<dot_q8_0>,   dot_multi<dot_q4_k>,   dot_multi<dot_q5_k>, dot_multi<dot_q6_k>,
    dot_multi<dot_iq4_nl>, dot_multi<dot_iq4_xs>, dot_multi<dot_q2_k>, dot_multi<dot_q3_k>,
};
}  // namespace detail

// ---- dispatch ---------------------------------------------------------------

namespace detail {

int qdot_slot(GgmlType t) {
    switch (t) {
        case GgmlType::Q4_0: return detail::kQ4_0;
        case GgmlType::Q4_1: return detail::kQ4_1;
        case GgmlType::Q5_0: return detail::kQ5_0;
        case GgmlType::Q5_1: return detail::kQ5_1;
        case GgmlType::Q8_0: return detail::kQ8_0;
        case GgmlType::Q4_K: return detail::kQ4_K;
        case GgmlType::Q5_K: return detail::kQ5_K;
        case GgmlType::Q6_K: return detail::kQ6_K;
        case GgmlType::IQ4_NL: return detail::kIQ4_NL;
        case GgmlType::IQ4_XS: return detail::kIQ4_XS;
        case GgmlType::Q2_K: return detail::kQ2_K;
        case GgmlType::Q3_K: return detail::kQ3_K;
        default: return -1;
    }
}

}  // namespace detail

QDotMultiFn qdot_multi_fn(Isa isa, GgmlType t) {
    const int slot = detail::qdot_slot(t);
    if (slot < 0) return nullptr;
    switch (isa) {
        case Isa::Scalar: return detail::kQDotMultiScalar[slot];
        case Isa::Avx2: return detail::kQDotMultiAvx2[slot];
        case Isa::Avx512: return detail::kQDotMultiAvx512[slot];
        case Isa::Avx512Vnni: return detail::kQDotMultiAvx512Vnni[slot];
    }
    return nullptr;
}

QDotFn qdot_fn(Isa isa, GgmlType t) {
    const int slot = detail::qdot_slot(t);
    if (slot < 0) return nullptr;
    switch (isa) {
        case Isa::Scalar: return detail::kQDotScalar[slot];
        case Isa::Avx2: return detail::kQDotAvx2[slot];
        case Isa::Avx512: return detail::kQDotAvx512[slot];
        case Isa::Avx512Vnni: return detail::kQDotAvx512Vnni[slot];
    }
    return nullptr;
}

float qdot(Isa isa, GgmlType t, const void* row, const QuantizedInput& x, uint64_t n) {
    const QDotFn fn = qdot_fn(isa, t);
    if (!fn)
        throw std::invalid_argument(std::string("qdot: no quantized dot product for ") + gguf::type_traits(t).name);
    if (x.layout != qdot_layout(t) || x.n != n)
        throw std::invalid_argument(std::string("qdot: input not quantized for ") + gguf::type_traits(t).name +
                                    " rows of " + std::to_string(n));
    bool runnable = false;
    for (Isa r : runnable_isas()) runnable |= r == isa;
    if (!runnable) throw std::invalid_argument(std::string("qdot: this CPU cannot run ") + isa_name(isa));
    return fn(row, x.blocks(), n);
}

}  // namespace ptxlm::cpu
