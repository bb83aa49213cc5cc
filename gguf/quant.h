// Quantized block formats of ggml: layouts, the type table, reference row
// dequantization and the quantizers the synthetic-model generator uses.
//
// The dequantizers are the numerical reference for every kernel: they are
// compiled with -ffp-contract=off and evaluate each element with the same
// operations, in the same order, as ggml's reference C code, so the result is
// bit-identical to it (and to the gguf Python package, checked in ctest).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ptxlm::gguf {

// ggml type ids as stored in GGUF tensor infos.
enum class GgmlType : uint32_t {
    F32 = 0, F16 = 1, Q4_0 = 2, Q4_1 = 3, Q5_0 = 6, Q5_1 = 7, Q8_0 = 8, Q8_1 = 9,
    Q2_K = 10, Q3_K = 11, Q4_K = 12, Q5_K = 13, Q6_K = 14, Q8_K = 15,
    IQ4_NL = 20, IQ4_XS = 23, BF16 = 30,
    // Known to the container only (block size and bytes, no dequantizer), so
    // such files can be read and inspected; decoding them is a clear error.
    IQ2_XXS = 16, IQ2_XS = 17, IQ3_XXS = 18, IQ1_S = 19, IQ3_S = 21, IQ2_S = 22,
    I8 = 24, I16 = 25, I32 = 26, I64 = 27, F64 = 28, IQ1_M = 29,
    TQ1_0 = 34, TQ2_0 = 35, MXFP4 = 39, NVFP4 = 40, Q1_0 = 41,
};

constexpr int QK_K = 256;   // super-block size of the k-quants

// Block layouts (all fields little-endian; f16 fields stored as raw uint16_t).
struct BlockQ4_0 { uint16_t d; uint8_t qs[16]; };
struct BlockQ4_1 { uint16_t d, m; uint8_t qs[16]; };
struct BlockQ5_0 { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; };
struct BlockQ5_1 { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; };
struct BlockQ8_0 { uint16_t d; int8_t qs[32]; };
struct BlockQ8_1 { uint16_t d, s; int8_t qs[32]; };
struct BlockQ2_K { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; };
struct BlockQ3_K { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; };
struct BlockQ4_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; };
struct BlockQ5_K { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; };
struct BlockQ6_K { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; };
struct BlockQ8_K { float d; int8_t qs[256]; int16_t bsums[16]; };
// The non-linear 4-bit types: a code indexes kIQ4Values. IQ4_NL: 32 elements,
// qs as Q4_0's (low nibble of byte j = element j, high = element j + 16),
// y = d * v. IQ4_XS: 256 elements in 8 sub-blocks of 32, each laid out as an
// IQ4_NL block at qs + 16 ib, with a 6-bit scale ls (low 4 bits in nibble
// ib % 2 of scales_l[ib / 2], top 2 bits at bits 2 ib of scales_h),
// y = (d * (ls - 32)) * v.
struct BlockIQ4_NL { uint16_t d; uint8_t qs[16]; };
struct BlockIQ4_XS { uint16_t d; uint16_t scales_h; uint8_t scales_l[4]; uint8_t qs[128]; };
inline constexpr int8_t kIQ4Values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                          1,    13,   25,  38,  53,  69,  89,  113};

static_assert(sizeof(BlockQ4_0) == 18 && sizeof(BlockQ4_1) == 20 && sizeof(BlockQ5_0) == 22);
static_assert(sizeof(BlockQ5_1) == 24 && sizeof(BlockQ8_0) == 34 && sizeof(BlockQ8_1) == 36);
static_assert(sizeof(BlockQ2_K) == 84 && sizeof(BlockQ3_K) == 110 && sizeof(BlockQ4_K) == 144);
static_assert(sizeof(BlockQ5_K) == 176 && sizeof(BlockQ6_K) == 210 && sizeof(BlockQ8_K) == 292);
static_assert(sizeof(BlockIQ4_NL) == 18 && sizeof(BlockIQ4_XS) == 136);

// Packed sub-block scales, shared by the dequantizers and the CPU kernels
// (static: files built with other -m flags keep their own copies).
// Q3_K: scale j (0..15) as 6 bits: low nibble of s[j] (j < 8) or the high
// nibble of s[j - 8], top 2 bits at bits 2·(j / 4) of s[8 + j % 4]; the
// multiplier is that minus 32.
static inline int q3_k_scale(const uint8_t s[12], int j) {
    const int lo = j < 8 ? (s[j] & 0xF) : (s[j - 8] >> 4);
    return (lo | ((s[8 + j % 4] >> (2 * (j / 4))) & 3) << 4) - 32;
}
// IQ4_XS: sub-block ib's 6-bit scale ls (0..63); the multiplier is ls - 32.
static inline int iq4_xs_scale(const BlockIQ4_XS& b, int ib) {
    return ((b.scales_l[ib / 2] >> (4 * (ib % 2))) & 0xF) | ((b.scales_h >> (2 * ib)) & 3) << 4;
}

// dst[0..n) = dequantized src; n is a multiple of the block size.
using DequantizeRowFn = void (*)(const void* src, float* dst, int64_t n);
// dst = quantized src[0..n); n is a multiple of the block size.
using QuantizeRowFn = void (*)(const float* src, void* dst, int64_t n);

struct TypeTraits {
    GgmlType type;
    const char* name;          // "Q4_K", as ggml and gguf-py spell it
    uint32_t block_elems;      // elements per block
    uint32_t block_bytes;      // bytes per block
    DequantizeRowFn dequantize_row;  // nullptr where the type has no reference dequantizer
    QuantizeRowFn quantize_row;      // nullptr where we have no quantizer
};

// The one table of every type we know. nullptr for an unknown id.
const TypeTraits* find_type(uint32_t id);
const TypeTraits& type_traits(GgmlType t);   // t must be a known type
const TypeTraits* find_type_by_name(std::string_view name);  // case-insensitive
std::string type_name(uint32_t id);          // "Q4_K", or "type 42" when unknown

// Bytes of a row of n elements, or nullopt if n is not a multiple of the block.
std::optional<uint64_t> row_bytes(const TypeTraits& t, uint64_t n);

}  // namespace ptxlm::gguf
