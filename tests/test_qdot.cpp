// Quantized dot products (engine/cpu/qdot.h), for every type and every Isa
// this CPU runs:
//   - every SIMD kernel equals the scalar one (same integer sums; only the
//     order of float additions differs);
//   - each multi-input kernel equals the single-input kernel of its Isa bit
//     for bit;
//   - the scalar kernel equals dot(dequantized row, dequantized input) in
//     double;
//   - the result stays close to the float dot with the unquantized input;
//   - a corrupted scale byte changes the result (the tests can fail);
//   - the AVX-512 tables hold their own IQ4_NL/IQ4_XS/Q2_K/Q3_K kernels,
//     equal to the scalar kernel at edge values, and bit for bit where every
//     float step is exact (with a changed code and scale as controls);
//   - PTXLM_CPU_ISA selects, and rejects, as documented.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "engine/cpu/qdot.h"
#include "gguf/f16.h"

using namespace ptxlm;
using cpu::Isa;
using gguf::GgmlType;

namespace {

const GgmlType kTypes[] = {GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,   GgmlType::Q5_1,
                           GgmlType::Q8_0, GgmlType::Q4_K, GgmlType::Q5_K,   GgmlType::Q6_K,
                           GgmlType::Q2_K, GgmlType::Q3_K, GgmlType::IQ4_NL, GgmlType::IQ4_XS};

// Offsets of the f16 scale fields in a block (d, and m/dmin where present).
std::vector<size_t> f16_fields(GgmlType t) {
    switch (t) {
        case GgmlType::Q4_1: case GgmlType::Q5_1: case GgmlType::Q4_K: case GgmlType::Q5_K: return {0, 2};
        case GgmlType::Q6_K: return {offsetof(gguf::BlockQ6_K, d)};
        case GgmlType::Q2_K: return {offsetof(gguf::BlockQ2_K, d), offsetof(gguf::BlockQ2_K, dmin)};
        case GgmlType::Q3_K: return {offsetof(gguf::BlockQ3_K, d)};
        default: return {0};   // Q4_0 Q5_0 Q8_0 IQ4_NL IQ4_XS
    }
}

// A byte of block 0 that scales part of the row, and a bit of it to flip:
// the exponent of d (32-element types), sub-block 0's 6-bit scale (Q4_K,
// Q5_K, Q3_K, IQ4_XS), group 0's int8 scale (Q6_K), group 0's 4-bit scale
// (Q2_K).
std::pair<size_t, uint8_t> scale_byte(GgmlType t) {
    switch (t) {
        case GgmlType::Q4_K: case GgmlType::Q5_K: return {offsetof(gguf::BlockQ4_K, scales), 0x08};
        case GgmlType::Q6_K: return {offsetof(gguf::BlockQ6_K, scales), 0x10};
        case GgmlType::Q2_K: return {offsetof(gguf::BlockQ2_K, scales), 0x08};
        case GgmlType::Q3_K: return {offsetof(gguf::BlockQ3_K, scales), 0x08};
        case GgmlType::IQ4_XS: return {offsetof(gguf::BlockIQ4_XS, scales_l), 0x08};
        default: return {1, 0x04};   // high byte of f16 d: lowest exponent bit
    }
}

enum class RowKind {
    Quantized,   // random floats through the type's reference quantizer
    RandomBits,  // random bytes (every code, scale and min value), sane f16 fields
};

std::vector<uint8_t> make_row(GgmlType t, uint64_t n, RowKind kind, std::mt19937& rng) {
    const gguf::TypeTraits& tt = gguf::type_traits(t);
    std::vector<uint8_t> row(n / tt.block_elems * tt.block_bytes);
    if (kind == RowKind::Quantized && tt.quantize_row) {
        std::normal_distribution<float> g(0.f, 1.f);
        std::uniform_real_distribution<float> u(0.1f, 2.f);
        std::vector<float> w(n);
        for (uint64_t i = 0; i < n; i += 32) {   // scale varies block to block
            const float s = u(rng);
            for (uint64_t j = i; j < i + 32; ++j) w[j] = s * g(rng) + (t == GgmlType::Q4_1 ? 0.3f : 0.f);
        }
        tt.quantize_row(w.data(), row.data(), int64_t(n));
        return row;
    }
    std::uniform_int_distribution<int> byte(0, 255);
    std::uniform_real_distribution<float> scale(0.001f, 0.05f);
    for (uint8_t& b : row) b = uint8_t(byte(rng));
    for (size_t blk = 0; blk < row.size(); blk += tt.block_bytes)
        for (size_t off : f16_fields(t)) {
            const uint16_t h = f32_to_f16(scale(rng));
            std::memcpy(&row[blk + off], &h, 2);
        }
    return row;
}

enum class InputKind {
    Normal,  // N(0, 1) with a block-varying scale
    Signs,   // ±1: every quantized value at full range (saturation check)
};

std::vector<float> make_input(uint64_t n, InputKind kind, std::mt19937& rng) {
    std::vector<float> x(n);
    std::normal_distribution<float> g(0.f, 1.f);
    std::uniform_real_distribution<float> u(0.2f, 3.f);
    std::bernoulli_distribution coin(0.5);
    for (uint64_t i = 0; i < n; i += 32) {
        const float s = u(rng);
        for (uint64_t j = i; j < i + 32; ++j) x[j] = kind == InputKind::Signs ? (coin(rng) ? 1.f : -1.f) : s * g(rng);
    }
    return x;
}

// The quantized input as floats: d · q.
std::vector<float> dequantize_input(const cpu::QuantizedInput& q) {
    std::vector<float> x(q.n);
    if (q.layout == cpu::QuantizedInput::Layout::Block32) {
        for (uint64_t i = 0; i < q.n; ++i) x[i] = q.b32[i / 32].d * float(q.b32[i / 32].qs[i % 32]);
    } else {
        for (uint64_t i = 0; i < q.n; ++i) x[i] = q.b256[i / 256].d * float(q.b256[i / 256].qs[i % 256]);
    }
    return x;
}

struct Ref {
    double dot;   // Σ w·x in double
    double abs;   // Σ |w·x|, the scale of the rounding errors
};

Ref reference(const std::vector<float>& w, const std::vector<float>& x) {
    Ref r{0, 0};
    for (size_t i = 0; i < w.size(); ++i) {
        r.dot += double(w[i]) * double(x[i]);
        r.abs += std::fabs(double(w[i]) * double(x[i]));
    }
    return r;
}

std::string label(GgmlType t, Isa isa, uint64_t n, int row, RowKind rk, InputKind ik) {
    return std::string(gguf::type_traits(t).name) + " " + cpu::isa_name(isa) + " n=" + std::to_string(n) +
           " row " + std::to_string(row) + (rk == RowKind::Quantized ? " quantized" : " random-bits") +
           (ik == InputKind::Normal ? " x~normal" : " x=±1");
}

TEST(QDot, AllTypesAllIsasMatchReferences) {
    const std::vector<Isa> isas = cpu::runnable_isas();
    std::string ran;
    for (Isa isa : isas) ran += std::string(" ") + cpu::isa_name(isa);
    std::printf("runnable ISAs:%s\n", ran.c_str());
    std::mt19937 rng(1234);
    cpu::QuantizedInput xq;
    for (GgmlType t : kTypes) {
        ASSERT_TRUE(cpu::has_qdot(t));
        const bool k = gguf::type_traits(t).block_elems == 256;
        // One block, an odd count (pairing tails), several, and real widths.
        const std::vector<uint64_t> lengths = k ? std::vector<uint64_t>{256, 768, 2048, 5632}
                                                : std::vector<uint64_t>{32, 96, 256, 2048, 5632};
        for (uint64_t n : lengths) {
            for (InputKind ik : {InputKind::Normal, InputKind::Signs}) {
                const std::vector<float> x = make_input(n, ik, rng);
                cpu::quantize_input(x.data(), n, t, xq);
                ASSERT_EQ(xq.layout, cpu::qdot_layout(t));
                ASSERT_EQ(xq.n, n);
                const std::vector<float> xd = dequantize_input(xq);
                for (int r = 0; r < 4; ++r) {
                    const RowKind rk = r < 2 ? RowKind::Quantized : RowKind::RandomBits;
                    const std::vector<uint8_t> row = make_row(t, n, rk, rng);
                    std::vector<float> w(n);
                    gguf::type_traits(t).dequantize_row(row.data(), w.data(), int64_t(n));
                    const Ref ref = reference(w, xd);
                    const Ref exact = reference(w, x);

                    const float scalar = cpu::qdot(Isa::Scalar, t, row.data(), xq, n);
                    const std::string what = label(t, Isa::Scalar, n, r, rk, ik);
                    // Same products, rounded differently: the reference rounds
                    // each w (and x) to float, the kernel rounds d_w·d_x once
                    // per block and adds in float: ~1e-7 of Σ|w·x| per step.
                    EXPECT_NEAR(scalar, ref.dot, 1e-5 * ref.abs + 1e-30) << what;
                    // Input rounding: each x moves by at most half a step
                    // (amax/254 for 32-blocks, amax/256 for 256-blocks), with
                    // signs uncorrelated with w, so the error grows like
                    // √n·step·rms(w) against Σ|w·x| ~ n·E|w|·E|x|: about 0.1% at
                    // n = 32 and less beyond; 1% leaves room and still catches
                    // a wrong layout, which errs by O(Σ|w·x|).
                    EXPECT_NEAR(scalar, exact.dot, 0.01 * exact.abs) << what;

                    for (Isa isa : isas) {
                        if (isa == Isa::Scalar) continue;
                        const cpu::QDotFn fn = cpu::qdot_fn(isa, t);
                        ASSERT_NE(fn, nullptr);
                        const float v = fn(row.data(), xq.blocks(), n);
                        // Same integer sums per block; only the float summation order differs.
                        EXPECT_NEAR(v, scalar, 1e-5 * ref.abs + 1e-30) << label(t, isa, n, r, rk, ik);
                    }
                }
            }
        }
    }
}

// The multi-input kernels equal the single-input kernel of the same Isa bit
// for bit, for every (row, input) of every batch of 1..kQDotMaxRows rows and
// 1..kQDotMaxInputs inputs (the SIMD kernels split a batch into passes of
// their own widths and a smaller tail, so every size takes another path),
// writing only their outputs of a strided output array.
TEST(QDot, MultiInputMatchesSingleInputBitForBit) {
    std::mt19937 rng(4321);
    constexpr int kMaxX = cpu::kQDotMaxInputs, kMaxR = cpu::kQDotMaxRows;
    constexpr uint64_t kStride = kMaxR + 1;   // a gap after each input's rows
    for (GgmlType t : kTypes) {
        const gguf::TypeTraits& tt = gguf::type_traits(t);
        const bool k = tt.block_elems == 256;
        const std::vector<uint64_t> lengths = k ? std::vector<uint64_t>{256, 768, 2048}
                                                : std::vector<uint64_t>{32, 96, 576, 2048};
        for (uint64_t n : lengths) {
            std::vector<cpu::QuantizedInput> xq(kMaxX);
            std::vector<const void*> xs(kMaxX);
            for (int i = 0; i < kMaxX; ++i) {
                const std::vector<float> x = make_input(n, i % 3 == 2 ? InputKind::Signs : InputKind::Normal, rng);
                cpu::quantize_input(x.data(), n, t, xq[i]);
                xs[i] = xq[i].blocks();
            }
            // kMaxR + 1 consecutive rows, quantized and random bits alternating.
            const uint64_t row_bytes = n / tt.block_elems * tt.block_bytes;
            std::vector<uint8_t> rows;
            for (int r = 0; r <= kMaxR; ++r) {
                const std::vector<uint8_t> row = make_row(t, n, r % 2 ? RowKind::RandomBits : RowKind::Quantized, rng);
                rows.insert(rows.end(), row.begin(), row.end());
            }
            for (Isa isa : cpu::runnable_isas()) {
                const cpu::QDotFn single = cpu::qdot_fn(isa, t);
                const cpu::QDotMultiFn multi = cpu::qdot_multi_fn(isa, t);
                ASSERT_NE(multi, nullptr);
                std::vector<float> want((kMaxR + 1) * kMaxX);   // [row][input]
                for (int r = 0; r <= kMaxR; ++r)
                    for (int i = 0; i < kMaxX; ++i) want[r * kMaxX + i] = single(rows.data() + r * row_bytes, xs[i], n);
                for (int n_rows = 1; n_rows <= kMaxR; ++n_rows) {
                    for (int n_x = 1; n_x <= kMaxX; ++n_x) {
                        // Start at another row and input per size, so each path sees other data.
                        const int row0 = (n_x + n_rows) % (kMaxR + 2 - n_rows), x0 = (kMaxX - n_x) / 2;
                        std::vector<float> out(kMaxX * kStride, -1.f);
                        cpu::QDotBatch batch;
                        batch.rows = rows.data() + row0 * row_bytes;
                        batch.row_bytes = row_bytes;
                        batch.n_rows = n_rows;
                        batch.xs = xs.data() + x0;
                        batch.n_x = n_x;
                        batch.n = n;
                        batch.out = out.data();
                        batch.out_stride = kStride;
                        multi(batch);
                        for (int o = 0; o < int(out.size()); ++o) {
                            const int r = o % int(kStride), i = o / int(kStride);
                            const std::string what = std::string(tt.name) + " " + cpu::isa_name(isa) +
                                                     " n=" + std::to_string(n) + " rows=" + std::to_string(n_rows) +
                                                     " n_x=" + std::to_string(n_x) + " out " + std::to_string(o);
                            if (r >= n_rows || i >= n_x) {
                                EXPECT_EQ(out[o], -1.f) << what << ": written outside the outputs";
                                continue;
                            }
                            const float got = out[o], exp = want[(row0 + r) * kMaxX + x0 + i];
                            EXPECT_EQ(std::memcmp(&got, &exp, sizeof got), 0) << what << ": " << got << " vs " << exp;
                        }
                    }
                }
            }
        }
    }
    EXPECT_EQ(cpu::qdot_multi_fn(Isa::Scalar, GgmlType::BF16), nullptr);
}

// The types that ran the AVX2 kernels under the AVX-512 Isas until they had
// their own (qdot_avx512.cpp).
const GgmlType kAvx512NewTypes[] = {GgmlType::IQ4_NL, GgmlType::IQ4_XS, GgmlType::Q2_K, GgmlType::Q3_K};

// Both AVX-512 tables hold kernels of their own for these types, single and
// multi input, and VNNI's differ from plain AVX-512's (vpdpbusd / vpdpwssd).
// qdot_fn only reads the tables, so this holds on any CPU.
TEST(QDot, Avx512HasItsOwnKernelsForTheNewTypes) {
    for (GgmlType t : kAvx512NewTypes) {
        const char* name = gguf::type_traits(t).name;
        for (Isa isa : {Isa::Avx512, Isa::Avx512Vnni}) {
            for (Isa other : {Isa::Scalar, Isa::Avx2}) {
                EXPECT_NE(cpu::qdot_fn(isa, t), cpu::qdot_fn(other, t)) << name << " " << cpu::isa_name(isa);
                EXPECT_NE(cpu::qdot_multi_fn(isa, t), cpu::qdot_multi_fn(other, t))
                    << name << " " << cpu::isa_name(isa);
            }
            EXPECT_NE(cpu::qdot_fn(isa, t), nullptr) << name;
            EXPECT_NE(cpu::qdot_multi_fn(isa, t), nullptr) << name;
        }
        EXPECT_NE(cpu::qdot_fn(Isa::Avx512, t), cpu::qdot_fn(Isa::Avx512Vnni, t)) << name;
        EXPECT_NE(cpu::qdot_multi_fn(Isa::Avx512, t), cpu::qdot_multi_fn(Isa::Avx512Vnni, t)) << name;
    }
}

// Edge rows: every byte of the row from a pattern, then the f16 fields of
// block b set to d[b % d.size()] (and dmin to the same bits with the exponent
// one lower, where the type has one).
enum class EdgeBytes {
    AllValues,  // byte i = 37·i + 11: every byte value once per 256 bytes (codes, scales, mins, hmask bits)
    Zeros,      // code 0 (IQ4: −127), IQ4_XS/Q3_K multiplier −32, Q2_K scale and min 0
    Ones,       // code 15 (IQ4: 113), Q3_K code 7, IQ4_XS/Q3_K multiplier 31, Q2_K scale and min 15
    Random,
};
std::vector<uint8_t> make_edge_row(GgmlType t, uint64_t n, EdgeBytes kind, const std::vector<uint16_t>& d,
                                   std::mt19937& rng) {
    const gguf::TypeTraits& tt = gguf::type_traits(t);
    std::vector<uint8_t> row(n / tt.block_elems * tt.block_bytes);
    std::uniform_int_distribution<int> byte(0, 255);
    for (size_t i = 0; i < row.size(); ++i)
        row[i] = kind == EdgeBytes::AllValues ? uint8_t(37 * i + 11)
                 : kind == EdgeBytes::Zeros   ? uint8_t(0)
                 : kind == EdgeBytes::Ones    ? uint8_t(0xFF)
                                              : uint8_t(byte(rng));
    for (size_t blk = 0; blk < row.size() / tt.block_bytes; ++blk) {
        const std::vector<size_t> fields = f16_fields(t);
        for (size_t f = 0; f < fields.size(); ++f) {
            uint16_t h = d[blk % d.size()];
            if (f > 0 && (h & 0x7C00) > 0x0400) h = uint16_t(h - 0x0400);   // dmin: half of d (normal d only)
            std::memcpy(&row[blk * tt.block_bytes + fields[f]], &h, 2);
        }
    }
    return row;
}

// Σ|w·x| of the dequantized row and input: the scale of the float rounding.
double abs_dot(GgmlType t, const std::vector<uint8_t>& row, const cpu::QuantizedInput& xq) {
    std::vector<float> w(xq.n);
    gguf::type_traits(t).dequantize_row(row.data(), w.data(), int64_t(xq.n));
    return reference(w, dequantize_input(xq)).abs;
}

// Every SIMD kernel of the new AVX-512 types (and the AVX2 ones) against the
// scalar kernel at the edges: f16 scales from the smallest subnormal to
// ±65504 and zero, every byte value, all-zero and all-one codes and scales,
// inputs at full range (±1), all zero, and with one spike per block. The
// bound is the main test's (same integers, float sums in another order).
TEST(QDot, NewTypesMatchScalarOnEdgeValues) {
    std::mt19937 rng(2025);
    const std::vector<uint16_t> extreme = {0x0001, 0x03FF, 0x0400, 0x3C00, 0x7BFF, 0xFBFF, 0x8001, 0x0000, 0x2E66};
    const uint64_t n = 1024;
    std::vector<std::vector<float>> inputs = {make_input(n, InputKind::Signs, rng),
                                              make_input(n, InputKind::Normal, rng), std::vector<float>(n, 0.f),
                                              std::vector<float>(n, 1e-3f)};
    for (uint64_t i = 0; i < n; i += 32) inputs[3][i + i / 32 % 32] = -7e3f;   // a spike per block, elsewhere ~0
    cpu::QuantizedInput xq;
    int checked = 0;
    for (GgmlType t : kAvx512NewTypes) {
        for (const std::vector<float>& x : inputs) {
            cpu::quantize_input(x.data(), n, t, xq);
            for (EdgeBytes kind : {EdgeBytes::AllValues, EdgeBytes::Zeros, EdgeBytes::Ones, EdgeBytes::Random}) {
                for (size_t shift = 0; shift < extreme.size(); shift += 4) {   // another scale per block each time
                    std::vector<uint16_t> d(extreme.begin() + shift, extreme.end());
                    d.insert(d.end(), extreme.begin(), extreme.begin() + shift);
                    const std::vector<uint8_t> row = make_edge_row(t, n, kind, d, rng);
                    const float scalar = cpu::qdot(Isa::Scalar, t, row.data(), xq, n);
                    ASSERT_TRUE(std::isfinite(scalar)) << gguf::type_traits(t).name;
                    const double bound = 1e-5 * abs_dot(t, row, xq) + 1e-30;
                    for (Isa isa : cpu::runnable_isas()) {
                        if (isa == Isa::Scalar) continue;
                        const float v = cpu::qdot_fn(isa, t)(row.data(), xq.blocks(), n);
                        EXPECT_NEAR(v, scalar, bound) << gguf::type_traits(t).name << " " << cpu::isa_name(isa)
                                                      << " bytes " << int(kind) << " shift " << shift;
                        ++checked;
                    }
                }
            }
        }
    }
    std::printf("edge comparisons: %d\n", checked);
}

// Where every float step is exact, the SIMD kernels of the new types must give
// the scalar kernel's bits: the input is integers (|x| <= 4, one 127 per
// block, so the input scale is exactly 1 and q = x), each row's scales are one
// power of two, and every partial sum stays below 2^24 units (n = 512:
// ≤ 2 · 255 · 4 · 127 · 32 + 2 · 127 · 127 · 32 < 2^24 for IQ4_XS, less for
// the others), so no order of additions rounds. Any difference in the
// integer sums shows here, to the unit. Control: one code and one scale
// changed move the result, and the kernels follow it exactly.
TEST(QDot, NewTypesEqualScalarBitForBitInExactArithmetic) {
    std::mt19937 rng(77);
    const uint64_t n = 512;
    std::uniform_int_distribution<int> small(-4, 4);
    // 1, 2^-10, 2^-24 (f16's smallest subnormal), −2^4, 2^13.
    const std::vector<uint16_t> powers = {0x3C00, 0x1400, 0x0001, 0xCC00, 0x7000};
    cpu::QuantizedInput xq;
    for (GgmlType t : kAvx512NewTypes) {
        const gguf::TypeTraits& tt = gguf::type_traits(t);
        const uint64_t x_block = cpu::qdot_layout(t) == cpu::QuantizedInput::Layout::Block32 ? 32 : 256;
        for (int trial = 0; trial < 8; ++trial) {
            std::vector<float> x(n);
            for (uint64_t i = 0; i < n; ++i) x[i] = i % x_block == 0 ? 127.f : float(small(rng));
            cpu::quantize_input(x.data(), n, t, xq);
            for (uint64_t i = 0; i < n; ++i) {   // the premise: scale 1, codes = x
                const bool b32 = xq.layout == cpu::QuantizedInput::Layout::Block32;
                ASSERT_EQ(b32 ? xq.b32[i / 32].qs[i % 32] : xq.b256[i / 256].qs[i % 256], int8_t(x[i]));
                ASSERT_EQ(b32 ? xq.b32[i / 32].d : xq.b256[i / 256].d, 1.f);
            }
            for (uint16_t d : powers) {
                const EdgeBytes kind = trial % 4 == 0 ? EdgeBytes::AllValues : EdgeBytes::Random;
                std::vector<uint8_t> row = make_edge_row(t, n, kind, {d}, rng);
                char d_hex[8];
                std::snprintf(d_hex, sizeof d_hex, "%04x", d);
                const std::string what = std::string(tt.name) + " trial " + std::to_string(trial) + " d 0x" + d_hex;
                const float before = cpu::qdot(Isa::Scalar, t, row.data(), xq, n);
                for (Isa isa : cpu::runnable_isas())
                    EXPECT_EQ(cpu::qdot_fn(isa, t)(row.data(), xq.blocks(), n), before)
                        << what << " " << cpu::isa_name(isa);

                // Control 1: element 0 (x = 127) gets another code, with a
                // nonzero scale on its group: the result must move.
                const std::vector<uint8_t> saved = row;
                size_t qs = 0, scale = 0;
                uint8_t scale_bits = 0;
                switch (t) {
                    case GgmlType::IQ4_NL: qs = offsetof(gguf::BlockIQ4_NL, qs); break;
                    case GgmlType::IQ4_XS:   // ls of sub-block 0 = 0x5 | (scales_h & 3) << 4, never 32
                        qs = offsetof(gguf::BlockIQ4_XS, qs), scale = offsetof(gguf::BlockIQ4_XS, scales_l),
                        scale_bits = 0x5;
                        break;
                    case GgmlType::Q2_K:   // scale of group 0 = 5
                        qs = offsetof(gguf::BlockQ2_K, qs), scale = offsetof(gguf::BlockQ2_K, scales), scale_bits = 0x5;
                        break;
                    default:   // Q3_K: multiplier of group 0 = 5 | (scales[8] & 3) << 4 − 32, never 0
                        qs = offsetof(gguf::BlockQ3_K, qs), scale = offsetof(gguf::BlockQ3_K, scales), scale_bits = 0x5;
                        break;
                }
                if (scale_bits) row[scale] = uint8_t((row[scale] & 0xF0) | scale_bits);
                const float base = cpu::qdot(Isa::Scalar, t, row.data(), xq, n);
                row[qs] ^= 1;   // low bit of element 0's code
                const float moved = cpu::qdot(Isa::Scalar, t, row.data(), xq, n);
                EXPECT_NE(moved, base) << what << ": a changed code left the result alone";
                for (Isa isa : cpu::runnable_isas())
                    EXPECT_EQ(cpu::qdot_fn(isa, t)(row.data(), xq.blocks(), n), moved)
                        << what << " " << cpu::isa_name(isa);
                // Control 2: the scale of that group changed instead.
                row = saved;
                if (scale_bits) {
                    row[scale] = uint8_t((row[scale] & 0xF0) | 0x6);
                    const float rescaled = cpu::qdot(Isa::Scalar, t, row.data(), xq, n);
                    row[scale] = uint8_t((row[scale] & 0xF0) | scale_bits);
                    EXPECT_NE(rescaled, cpu::qdot(Isa::Scalar, t, row.data(), xq, n)) << what;
                    for (Isa isa : cpu::runnable_isas()) {
                        row[scale] = uint8_t((row[scale] & 0xF0) | 0x6);
                        EXPECT_EQ(cpu::qdot_fn(isa, t)(row.data(), xq.blocks(), n), rescaled)
                            << what << " " << cpu::isa_name(isa);
                    }
                }
            }
        }
    }
}

// Corrupting one scale byte must change every kernel's result (and the
// kernels must still agree): the comparisons above are not vacuous.
TEST(QDot, CorruptedScaleChangesResult) {
    std::mt19937 rng(99);
    cpu::QuantizedInput xq;
    for (GgmlType t : kTypes) {
        const uint64_t n = 512;
        const std::vector<float> x = make_input(n, InputKind::Normal, rng);
        cpu::quantize_input(x.data(), n, t, xq);
        std::vector<uint8_t> row = make_row(t, n, RowKind::Quantized, rng);
        std::vector<float> before;
        for (Isa isa : cpu::runnable_isas()) before.push_back(cpu::qdot(isa, t, row.data(), xq, n));
        const auto [off, bit] = scale_byte(t);
        row[off] ^= bit;
        size_t i = 0;
        float scalar_after = 0;
        for (Isa isa : cpu::runnable_isas()) {
            const float after = cpu::qdot(isa, t, row.data(), xq, n);
            if (isa == Isa::Scalar) scalar_after = after;
            const std::string what = std::string(gguf::type_traits(t).name) + " " + cpu::isa_name(isa);
            EXPECT_GT(std::fabs(after - before[i]), 1e-3f * std::fabs(before[i]) + 1e-6f) << what;
            EXPECT_NEAR(after, scalar_after, 1e-5f * (std::fabs(scalar_after) + 1.f)) << what;
            ++i;
        }
    }
}

// Every Isa's quantizer gives the scalar quantizer's bits (so a sequence's
// results do not depend on which one ran), on random inputs, on ±1 and on
// values that land on rounding ties; a flipped input moves the bits (the
// comparison is not vacuous).
TEST(QDot, QuantizersAgreeBitForBit) {
    std::mt19937 rng(7);
    for (GgmlType t : {GgmlType::Q4_0, GgmlType::Q4_K}) {
        for (int kind = 0; kind < 3; ++kind) {
            const uint64_t n = 1024;
            std::vector<float> x = make_input(n, kind == 1 ? InputKind::Signs : InputKind::Normal, rng);
            if (kind == 2)   // amax 127 in every block: x itself is the quantized value, k + 0.5 a tie
                for (uint64_t i = 0; i < n; ++i) x[i] = i % 32 == 0 ? 127.f : float(int(i % 200) - 100) + 0.5f;
            cpu::QuantizedInput ref, got;
            cpu::quantize_input(x.data(), n, t, ref, Isa::Scalar);
            const auto bytes = [](const cpu::QuantizedInput& q) {
                const uint64_t size = q.layout == cpu::QuantizedInput::Layout::Block32
                                          ? q.b32.size() * sizeof(q.b32[0])
                                          : q.b256.size() * sizeof(q.b256[0]);
                const auto* p = static_cast<const uint8_t*>(q.blocks());
                return std::vector<uint8_t>(p, p + size);
            };
            for (Isa isa : cpu::runnable_isas()) {
                cpu::quantize_input(x.data(), n, t, got, isa);
                EXPECT_EQ(bytes(got), bytes(ref)) << gguf::type_traits(t).name << " " << cpu::isa_name(isa)
                                                  << " input kind " << kind;
            }
            x[5] = -x[5] + 3.f;
            cpu::quantize_input(x.data(), n, t, got, cpu::best_isa());
            EXPECT_NE(bytes(got), bytes(ref)) << "a changed input left the bits alone";
        }
    }
}

TEST(QDot, QuantizeInputChecksAndReusesStorage) {
    std::vector<float> x(2048, 0.5f);
    cpu::QuantizedInput q;
    cpu::quantize_input(x.data(), 2048, GgmlType::Q4_K, q);
    const void* blocks = q.blocks();
    cpu::quantize_input(x.data(), 1024, GgmlType::Q6_K, q);
    EXPECT_EQ(q.blocks(), blocks);   // smaller: same storage
    cpu::quantize_input(x.data(), 2048, GgmlType::Q5_K, q);
    EXPECT_EQ(q.blocks(), blocks);
    EXPECT_EQ(q.b256.size(), 8u);
    cpu::quantize_input(x.data(), 2048, GgmlType::Q8_0, q);
    EXPECT_EQ(q.layout, cpu::QuantizedInput::Layout::Block32);
    EXPECT_EQ(q.b32.size(), 64u);
    // An all-zero block quantizes to zeros and dots to 0.
    std::vector<float> z(256, 0.f);
    cpu::quantize_input(z.data(), 256, GgmlType::Q4_K, q);
    EXPECT_EQ(q.b256[0].d, 0.f);

    EXPECT_THROW(cpu::quantize_input(x.data(), 100, GgmlType::Q4_0, q), std::invalid_argument);
    EXPECT_THROW(cpu::quantize_input(x.data(), 288, GgmlType::Q4_K, q), std::invalid_argument);
    EXPECT_THROW(cpu::quantize_input(x.data(), 256, GgmlType::F16, q), std::invalid_argument);
    EXPECT_FALSE(cpu::has_qdot(GgmlType::F32));
    EXPECT_FALSE(cpu::has_qdot(GgmlType::IQ2_XXS));   // known to the container only
    EXPECT_EQ(cpu::qdot_fn(Isa::Scalar, GgmlType::F16), nullptr);
    // qdot() refuses an input quantized for another layout or length.
    cpu::quantize_input(x.data(), 256, GgmlType::Q8_0, q);
    std::vector<uint8_t> row(256 / 256 * sizeof(gguf::BlockQ4_K));
    EXPECT_THROW(cpu::qdot(Isa::Scalar, GgmlType::Q4_K, row.data(), q, 256), std::invalid_argument);
}

// PTXLM_CPU_ISA: each runnable name selects itself; a name this CPU cannot
// run and an unknown name throw, naming the value.
// quantize_input follows its documented rule exactly, whichever code path
// (scalar or AVX-512) this CPU takes: Block32 d = amax/127, q = x·(1/d)
// rounded to nearest even, s = d·Σq; Block256 q = x·(127/amax) rounded,
// bsums of 16, d = 1/(127/amax). Values land on exact halves too.
TEST(QDot, QuantizeInputFollowsItsRule) {
    std::mt19937 rng(3);
    std::normal_distribution<float> nd(0.0f, 2.0f);
    std::vector<float> x(1024);
    for (float& v : x) v = nd(rng);
    for (size_t i = 0; i < 64; ++i) x[i] = float(int(i) - 32) * 0.5f;   // halves: ties to even
    std::fill(x.begin() + 256, x.begin() + 512, 0.0f);                 // an all-zero block of each size
    x[700] = std::nanf("");                                              // skipped by amax, clamped to -127
    cpu::QuantizedInput q32, q256;
    cpu::quantize_input(x.data(), x.size(), GgmlType::Q5_0, q32);
    cpu::quantize_input(x.data(), x.size(), GgmlType::Q4_K, q256);
    const auto amax = [&](size_t b, size_t n) {
        float m = 0;
        for (size_t i = b; i < b + n; ++i) m = std::fabs(x[i]) > m ? std::fabs(x[i]) : m;
        return m;
    };
    const auto code = [](float v) { return int8_t(std::isnan(v) ? -127.f : std::min(127.f, std::max(-127.f, std::nearbyint(v)))); };
    for (size_t b = 0; b < x.size() / 32; ++b) {
        const float d = amax(32 * b, 32) / 127.f, id = d != 0.f ? 1.f / d : 0.f;
        int sum = 0;
        for (size_t i = 0; i < 32; ++i) {
            const int8_t want = code(x[32 * b + i] * id);
            ASSERT_EQ(want, q32.b32[b].qs[i]) << "block32 " << b << " element " << i;
            sum += want;
        }
        EXPECT_EQ(d, q32.b32[b].d);
        EXPECT_EQ(d * float(sum), q32.b32[b].s);
    }
    for (size_t b = 0; b < x.size() / 256; ++b) {
        const float m = amax(256 * b, 256), iscale = m != 0.f ? 127.f / m : 0.f;
        for (size_t j = 0; j < 16; ++j) {
            int sum = 0;
            for (size_t i = 0; i < 16; ++i) {
                const int8_t want = m != 0.f ? code(iscale * x[256 * b + 16 * j + i]) : int8_t(0);
                ASSERT_EQ(want, q256.b256[b].qs[16 * j + i]) << "block256 " << b << " element " << 16 * j + i;
                sum += want;
            }
            EXPECT_EQ(sum, q256.b256[b].bsums[j]);
        }
        EXPECT_EQ(m != 0.f ? 1.f / iscale : 0.f, q256.b256[b].d);
    }
}

// PTXLM_CPU_ISA caps what the engine selects and what every test sweeps:
// runnable_isas() ends at the named Isa. The test restores the variable the
// suite runs under, so the tests after it keep its cap.
TEST(QDot, IsaFromEnvironmentCapsTheRunnableOnes) {
    const char* outer = std::getenv("PTXLM_CPU_ISA");
    const std::string saved = outer ? outer : "";
    const std::vector<Isa> hw = cpu::hardware_isas();
    ASSERT_FALSE(hw.empty());
    EXPECT_EQ(hw.front(), Isa::Scalar);
    unsetenv("PTXLM_CPU_ISA");
    EXPECT_EQ(cpu::runnable_isas(), hw);
    EXPECT_EQ(cpu::best_isa(), hw.back());
    for (Isa isa : {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Vnni}) {
        setenv("PTXLM_CPU_ISA", cpu::isa_name(isa), 1);
        const auto at = std::find(hw.begin(), hw.end(), isa);
        if (at != hw.end()) {
            EXPECT_EQ(cpu::best_isa(), isa) << cpu::isa_name(isa);
            EXPECT_EQ(cpu::runnable_isas(), std::vector<Isa>(hw.begin(), at + 1)) << cpu::isa_name(isa);
        } else {
            try {
                cpu::best_isa();
                ADD_FAILURE() << "no error for " << cpu::isa_name(isa);
            } catch (const std::runtime_error& e) {
                EXPECT_NE(std::string(e.what()).find("cannot run"), std::string::npos) << e.what();
            }
        }
    }
    setenv("PTXLM_CPU_ISA", "avx9000", 1);
    try {
        cpu::runnable_isas();
        ADD_FAILURE() << "no error for avx9000";
    } catch (const std::runtime_error& e) {
        EXPECT_NE(std::string(e.what()).find("PTXLM_CPU_ISA=avx9000"), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("unknown"), std::string::npos) << e.what();
    }
    setenv("PTXLM_CPU_ISA", "", 1);   // empty: as if unset
    EXPECT_EQ(cpu::best_isa(), hw.back());
    if (outer)
        setenv("PTXLM_CPU_ISA", saved.c_str(), 1);
    else
        unsetenv("PTXLM_CPU_ISA");
}

}  // namespace
