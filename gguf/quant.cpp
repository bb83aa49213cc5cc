// The type table and the dequantizers of the 32-element block types, the
// non-linear 4-bit types and the plain float types. Every dequantizer
// evaluates an element with the same float operations, in the same order, as
// ggml's reference C code:
//   Q4_0/Q5_0/Q8_0:  y = float(q - offset) * d
//   Q4_1/Q5_1:       y = float(q) * d + m
//   IQ4_NL:          y = d * float(kIQ4Values[q])
//   IQ4_XS:          dl = d * float(ls - 32), y = dl * float(kIQ4Values[q])
// (a float product is commutative, so gguf-py's d * q is the same number).
#include <cstring>

#include "gguf/f16.h"
#include "gguf/quant.h"
#include "gguf/quant_internal.h"

namespace ptxlm::gguf {
namespace {

using namespace detail;

constexpr TypeTraits kTypes[] = {
    {GgmlType::F32, "F32", 1, 4, dequantize_row_f32, quantize_row_f32},
    {GgmlType::F16, "F16", 1, 2, dequantize_row_f16, quantize_row_f16},
    {GgmlType::Q4_0, "Q4_0", 32, sizeof(BlockQ4_0), dequantize_row_q4_0, quantize_row_q4_0},
    {GgmlType::Q4_1, "Q4_1", 32, sizeof(BlockQ4_1), dequantize_row_q4_1, quantize_row_q4_1},
    {GgmlType::Q5_0, "Q5_0", 32, sizeof(BlockQ5_0), dequantize_row_q5_0, quantize_row_q5_0},
    {GgmlType::Q5_1, "Q5_1", 32, sizeof(BlockQ5_1), dequantize_row_q5_1, quantize_row_q5_1},
    {GgmlType::Q8_0, "Q8_0", 32, sizeof(BlockQ8_0), dequantize_row_q8_0, quantize_row_q8_0},
    // ggml has no reference dequantizer for Q8_1 (it only feeds dot products);
    // ours is the obvious y = d * q, s being d * sum(q) and unused.
    {GgmlType::Q8_1, "Q8_1", 32, sizeof(BlockQ8_1), dequantize_row_q8_1, nullptr},
    {GgmlType::Q2_K, "Q2_K", QK_K, sizeof(BlockQ2_K), dequantize_row_q2_k, quantize_row_q2_k},
    {GgmlType::Q3_K, "Q3_K", QK_K, sizeof(BlockQ3_K), dequantize_row_q3_k, quantize_row_q3_k},
    {GgmlType::Q4_K, "Q4_K", QK_K, sizeof(BlockQ4_K), dequantize_row_q4_k, quantize_row_q4_k},
    {GgmlType::Q5_K, "Q5_K", QK_K, sizeof(BlockQ5_K), dequantize_row_q5_k, quantize_row_q5_k},
    {GgmlType::Q6_K, "Q6_K", QK_K, sizeof(BlockQ6_K), dequantize_row_q6_k, quantize_row_q6_k},
    {GgmlType::Q8_K, "Q8_K", QK_K, sizeof(BlockQ8_K), dequantize_row_q8_k, quantize_row_q8_k},
    {GgmlType::IQ4_NL, "IQ4_NL", 32, sizeof(BlockIQ4_NL), dequantize_row_iq4_nl, quantize_row_iq4_nl},
    {GgmlType::IQ4_XS, "IQ4_XS", QK_K, sizeof(BlockIQ4_XS), dequantize_row_iq4_xs, quantize_row_iq4_xs},
    {GgmlType::BF16, "BF16", 1, 2, dequantize_row_bf16, quantize_row_bf16},
    // Storage only: sizes as ggml defines them, no numerics here (yet).
    {GgmlType::IQ2_XXS, "IQ2_XXS", QK_K, 66, nullptr, nullptr},
    {GgmlType::IQ2_XS, "IQ2_XS", QK_K, 74, nullptr, nullptr},
    {GgmlType::IQ3_XXS, "IQ3_XXS", QK_K, 98, nullptr, nullptr},
    {GgmlType::IQ1_S, "IQ1_S", QK_K, 50, nullptr, nullptr},
    {GgmlType::IQ3_S, "IQ3_S", QK_K, 110, nullptr, nullptr},
    {GgmlType::IQ2_S, "IQ2_S", QK_K, 82, nullptr, nullptr},
    {GgmlType::I8, "I8", 1, 1, nullptr, nullptr},
    {GgmlType::I16, "I16", 1, 2, nullptr, nullptr},
    {GgmlType::I32, "I32", 1, 4, nullptr, nullptr},
    {GgmlType::I64, "I64", 1, 8, nullptr, nullptr},
    {GgmlType::F64, "F64", 1, 8, nullptr, nullptr},
    {GgmlType::IQ1_M, "IQ1_M", QK_K, 56, nullptr, nullptr},
    {GgmlType::TQ1_0, "TQ1_0", QK_K, 54, nullptr, nullptr},
    {GgmlType::TQ2_0, "TQ2_0", QK_K, 66, nullptr, nullptr},
    {GgmlType::MXFP4, "MXFP4", 32, 17, nullptr, nullptr},
    {GgmlType::NVFP4, "NVFP4", 64, 36, nullptr, nullptr},
    {GgmlType::Q1_0, "Q1_0", 128, 18, nullptr, nullptr},
};

char ascii_upper(char c) { return (c >= 'a' && c <= 'z') ? char(c - 'a' + 'A') : c; }

}  // namespace

const TypeTraits* find_type(uint32_t id) {
    for (const TypeTraits& t : kTypes)
        if (uint32_t(t.type) == id) return &t;
    return nullptr;
}

const TypeTraits& type_traits(GgmlType t) {
    const TypeTraits* p = find_type(uint32_t(t));
    // Every enumerator is in the table (test_quant checks it); an out-of-range
    // cast is a caller bug, not bad input.
    if (!p) __builtin_trap();
    return *p;
}

const TypeTraits* find_type_by_name(std::string_view name) {
    for (const TypeTraits& t : kTypes) {
        std::string_view tn = t.name;
        if (tn.size() != name.size()) continue;
        bool same = true;
        for (size_t i = 0; i < tn.size() && same; ++i) same = ascii_upper(name[i]) == tn[i];
        if (same) return &t;
    }
    return nullptr;
}

std::string type_name(uint32_t id) {
    if (const TypeTraits* t = find_type(id)) return t->name;
    return "type " + std::to_string(id);
}

std::optional<uint64_t> row_bytes(const TypeTraits& t, uint64_t n) {
    if (n % t.block_elems != 0) return std::nullopt;
    const uint64_t blocks = n / t.block_elems;
    if (blocks > UINT64_MAX / t.block_bytes) return std::nullopt;
    return blocks * t.block_bytes;
}

// ---- dequantizers ---------------------------------------------------------

namespace detail {

void dequantize_row_f32(const void* src, float* dst, int64_t n) {
    std::memcpy(dst, src, size_t(n) * sizeof(float));
}

void dequantize_row_f16(const void* src, float* dst, int64_t n) {
    const auto* p = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = f16_to_f32(h);
    }
}

void dequantize_row_bf16(const void* src, float* dst, int64_t n) {
    const auto* p = static_cast<const uint8_t*>(src);
    for (int64_t i = 0; i < n; ++i) {
        uint16_t h;
        std::memcpy(&h, p + 2 * i, 2);
        dst[i] = bf16_to_f32(h);
    }
}

void dequantize_row_q4_0(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const BlockQ4_0*>(src);
    for (int64_t b = 0; b < n / 32; ++b, dst += 32) {
        const float d = f16_to_f32(x[b].d);
        for (int j = 0; j < 16; ++j) {
            dst[j] = float((x[b].qs[j] & 0xF) - 8) * d;
            dst[j + 16] = float((x[b].qs[j] >> 4) - 8) * d;
        }
    }
}

void dequantize_row_q4_1(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const BlockQ4_1*>(src);
    for (int64_t b = 0; b < n / 32; ++b, dst += 32) {
        const float d = f16_to_f32(x[b].d);
        const float m = f16_to_f32(x[b].m);
        for (int j = 0; j < 16; ++j) {
            dst[j] = float(x[b].qs[j] & 0xF) * d + m;
            dst[j + 16] = float(x[b].qs[j] >> 4) * d + m;
        }
    }
}

namespace {
uint32_t load_u32_le(const uint8_t* p) {
    return uint32_t(p[0]) | uint32_t(p[1]) << 8 | uint32_t(p[2]) << 16 | uint32_t(p[3]) << 24;
}
}  // namespace

void dequantize_row_q5_0(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const BlockQ5_0*>(src);
    for (int64_t b = 0; b < n / 32; ++b, dst += 32) {
        const float d = f16_to_f32(x[b].d);
        const uint32_t qh = load_u32_le(x[b].qh);
        for (int j = 0; j < 16; ++j) {
            const int q0 = (x[b].qs[j] & 0xF) | int((qh >> j) & 1) << 4;
            const int q1 = (x[b].qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
            dst[j] = float(q0 - 16) * d;
            dst[j + 16] = float(q1 - 16) * d;
        }
    }
}

void dequantize_row_q5_1(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const BlockQ5_1*>(src);
    for (int64_t b = 0; b < n / 32; ++b, dst += 32) {
        const float d = f16_to_f32(x[b].d);
        const float m = f16_to_f32(x[b].m);
        const uint32_t qh = load_u32_le(x[b].qh);
        for (int j = 0; j < 16; ++j) {
            const int q0 = (x[b].qs[j] & 0xF) | int((qh >> j) & 1) << 4;
            const int q1 = (x[b].qs[j] >> 4) | int((qh >> (j + 16)) & 1) << 4;
            dst[j] = float(q0) * d + m;
            dst[j + 16] = float(q1) * d + m;
        }
    }
}

void dequantize_row_q8_0(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const BlockQ8_0*>(src);
    for (int64_t b = 0; b < n / 32; ++b, dst += 32) {
        const float d = f16_to_f32(x[b].d);
        for (int j = 0; j < 32; ++j) dst[j] = float(x[b].qs[j]) * d;
    }
}

void dequantize_row_q8_1(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const BlockQ8_1*>(src);
    for (int64_t b = 0; b < n / 32; ++b, dst += 32) {
        const float d = f16_to_f32(x[b].d);
        for (int j = 0; j < 32; ++j) dst[j] = float(x[b].qs[j]) * d;
    }
}

void dequantize_row_iq4_nl(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const BlockIQ4_NL*>(src);
    for (int64_t b = 0; b < n / 32; ++b, dst += 32) {
        const float d = f16_to_f32(x[b].d);
        for (int j = 0; j < 16; ++j) {
            dst[j] = d * float(kIQ4Values[x[b].qs[j] & 0xF]);
            dst[j + 16] = d * float(kIQ4Values[x[b].qs[j] >> 4]);
        }
    }
}

void dequantize_row_iq4_xs(const void* src, float* dst, int64_t n) {
    const auto* x = static_cast<const BlockIQ4_XS*>(src);
    for (int64_t b = 0; b < n / QK_K; ++b) {
        const float d = f16_to_f32(x[b].d);
        for (int ib = 0; ib < 8; ++ib, dst += 32) {
            const float dl = d * float(iq4_xs_scale(x[b], ib) - 32);
            const uint8_t* qs = x[b].qs + 16 * ib;
            for (int j = 0; j < 16; ++j) {
                dst[j] = dl * float(kIQ4Values[qs[j] & 0xF]);
                dst[j + 16] = dl * float(kIQ4Values[qs[j] >> 4]);
            }
        }
    }
}

}  // namespace detail
}  // namespace ptxlm::gguf
