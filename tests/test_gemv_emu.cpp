// The fused RMSNorm + GEMV kernels (kernels/decode/gemv) through the engine's
// real CUDA path on emu, against a double-precision product of the
// dequantized rows (gguf's reference dequantizers) with the normalised input,
// at gemv_tolerance; N columns bit for bit what one column gives. Negative
// controls: one corrupted Q4_K sub-block scale in one matrix, and a kernel
// generated without its norm, must fail; for issue 25's types a wrong
// kvalues_iq4nl entry and a Q5_K qh plane read one block off must fail too.
// The epilogues (a GLU's act(gate)·up, the per-layer gate) are in
// test_gemv_epilogue_emu.cpp; the fixture in gemv_emu_fixture.h.
#include <gtest/gtest.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/cpu/qdot.h"
#include "gguf/quant.h"
#include "kernels/decode/gemv.h"
#include "kernels/decode/gemv_q8.h"
#include "kernels/decode/layout.h"
#include "tests/gemv_emu_fixture.h"

namespace {

using namespace ptxlm;
using namespace ptxlm::gemv_test;


TEST_F(GemvOnEmu, Q4kSingleMatrix) {
  const Case c = make_case(shape(512, {40}, false));
  EXPECT_EQ(mismatches(c, run(kx::gemv_kernel(c.shape), c)), 0u);
}

TEST_F(GemvOnEmu, Q4kFusedNormQkv) {
  // Q, K and V of a 1024-wide model sharing one normalised input.
  const Case c = make_case(shape(1024, {64, 16, 16}, true));
  EXPECT_EQ(mismatches(c, run(kx::gemv_kernel(c.shape), c)), 0u);
}

TEST_F(GemvOnEmu, Q4kAccumulatesIntoTheResidual) {
  const Case c = make_case(shape(768, {33}, false, true));
  EXPECT_EQ(mismatches(c, run(kx::gemv_kernel(c.shape), c)), 0u);
}

TEST_F(GemvOnEmu, Q4kSeveralRowsPerWarpUnevenWarpsAndAPartialLastBlock) {
  const kx::GemvShape s = shape(256, {3000, 1301}, true);
  const kx::GemvPlan p = kx::gemv_plan(s);
  ASSERT_GE(p.rows_per_block, 2 * p.warps);
  ASSERT_NE(p.rows_per_block % p.warps, 0u);   // some warps take one row more
  ASSERT_NE((3000 + 1301) % p.rows_per_block, 0u);
  EXPECT_LE(kx::gemv_geometry(s).grid.x, 132u);   // one wave on a 132-SM GPU
  const Case c = make_case(s);
  EXPECT_EQ(mismatches(c, run(kx::gemv_kernel(c.shape), c)), 0u);
}

// Grids are sized for the device's SMs (GemvShape::sms); a row is one
// warp's whole dot product, so every row is bit-identical on any grid: an
// H100 SXM's 132 SMs (one row per block here), an A100's 108, an odd 7 (a
// partial last block, several rows per warp) and 1, on both input paths;
// and at 1 SM with blocks capped at 8 warps (GemvShape::max_warps: the
// persistent decoder's for gemma4), each warp taking 46 rows instead of 23
// (the input of 512 is staged and its squares summed by the same 128
// threads either way). On the 8-bit input the Q4_K rows go alone at 132
// and 108 SMs (3 rows a block) and in pairs from 7 (q8_rows_paired), so
// a pair's rows equal the rows alone.
TEST_F(GemvOnEmu, EveryRowIsBitIdenticalOnAGridForAnySmCount) {
  for (bool q8 : {false, true}) {
    SCOPED_TRACE(q8 ? "8-bit input" : "f32 input");
    kx::GemvShape s = shape(512, {300, 61}, true, false, {GgmlType::Q4_K, GgmlType::Q6_K});
    s.q8_input = q8;
    const Case c = make_case(s);
    std::vector<std::vector<float>> first;
    std::vector<uint32_t> grids;
    for (auto [sms, warps] : {std::pair{132u, 16u}, {108u, 16u}, {7u, 16u}, {1u, 16u}, {1u, 8u}}) {
      Case ci = c;
      ci.shape.sms = sms;
      ci.shape.max_warps = warps;
      const ptx::GeneratedKernel g = kx::gemv_kernel(ci.shape);
      EXPECT_EQ(kx::q8_rows_paired(ci.shape), q8 && sms < 100) << sms << " SMs";
      EXPECT_LE(g.geometry.grid.x, sms);
      EXPECT_EQ(g.geometry.block.x, 32 * std::clamp((361 + sms - 1) / sms, 8u, warps));
      grids.push_back(g.geometry.grid.x);
      const std::vector<std::vector<float>> ys = run(g, ci);
      if (first.empty()) {
        first = ys;
        if (!q8) {   // the 8-bit input's check: EightBitInputEqualsTheCpuQuantizedPath
          EXPECT_EQ(mismatches(ci, ys), 0u);
        }
        continue;
      }
      for (size_t si = 0; si < ys.size(); ++si)
        for (size_t r = 0; r < ys[si].size(); ++r)
          ASSERT_EQ(std::bit_cast<uint32_t>(ys[si][r]), std::bit_cast<uint32_t>(first[si][r]))
              << sms << " SMs, segment " << si << " row " << r;
    }
    EXPECT_EQ(grids, (std::vector<uint32_t>{121, 91, 7, 1, 1}));   // ceil(361 / ceil(361 / sms))
  }
  // Q6_K rows pair at one column (the Q6_K segment above is paired at 7 and
  // 1 SMs too), not at 8, where two of its rows spill on sm_80 to sm_89.
  kx::GemvShape q6 = shape(512, {61}, false, false, {GgmlType::Q6_K});
  q6.q8_input = true;
  q6.sms = 1;
  EXPECT_TRUE(kx::q8_rows_paired(q6));
  q6.columns = 8;
  EXPECT_FALSE(kx::q8_rows_paired(q6));
}

TEST_F(GemvOnEmu, EveryBlock32Type) {
  for (GgmlType t : {GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0}) {
    SCOPED_TRACE(gguf::type_traits(t).name);
    const Case c = make_case(shape(576, {37}, true, false, {t}));
    EXPECT_EQ(mismatches(c, run(kx::gemv_kernel(c.shape), c)), 0u);
    const Case a = make_case(shape(1280, {19}, false, true, {t}));
    EXPECT_EQ(mismatches(a, run(kx::gemv_kernel(a.shape), a)), 0u);
  }
}

TEST_F(GemvOnEmu, Q6kIntoTheResidual) {
  // gemma-3-270m's ffn_down: 2048 inputs, Q6_K, added to the residual.
  const Case c = make_case(shape(2048, {24}, false, true, {GgmlType::Q6_K}));
  EXPECT_EQ(mismatches(c, run(kx::gemv_kernel(c.shape), c)), 0u);
  Case bad = c;
  // Row 3, block 5: scale byte 9 (half 1, sub-block 1) off by one.
  bad.mats[0].bytes[3 * bad.mats[0].row_bytes() + 5 * 210 + 192 + 9] += 1;
  EXPECT_GE(mismatches(c, run(kx::gemv_kernel(c.shape), bad), false), 1u) << "a corrupted Q6_K scale passed";
}

TEST_F(GemvOnEmu, MixedTypesInOneLaunch) {
  // gemma-3-270m's QKV (640 wide: Q5_0 Q and K, Q8_0 V) and SmolLM2's (576: Q4_1).
  const Case g = make_case(shape(640, {1024, 256, 256}, true, false, {GgmlType::Q5_0, GgmlType::Q5_0, GgmlType::Q8_0}));
  EXPECT_EQ(mismatches(g, run(kx::gemv_kernel(g.shape), g)), 0u);
  const Case m = make_case(
      shape(512, {64, 48, 16, 9}, true, false, {GgmlType::Q4_K, GgmlType::Q8_0, GgmlType::Q4_1, GgmlType::Q6_K}));
  EXPECT_EQ(mismatches(m, run(kx::gemv_kernel(m.shape), m)), 0u);
}

TEST_F(GemvOnEmu, NegativeControlCorruptedBlockScaleQ8) {
  const Case c = make_case(shape(640, {12}, false, false, {GgmlType::Q8_0}));
  Case bad = c;
  // Row 7, block 3: mantissa bit 6 of its f16 scale flipped (about 6%).
  bad.mats[0].bytes[7 * bad.mats[0].row_bytes() + 3 * 34] ^= 0x40;
  EXPECT_GE(mismatches(c, run(kx::gemv_kernel(c.shape), bad), false), 1u)
      << "a corrupted Q8_0 block scale passed the comparison";
}

TEST_F(GemvOnEmu, NegativeControlCorruptedSubBlockScale) {
  const Case c = make_case(shape(512, {8, 8}, true));
  Case bad = c;
  // Row 5 of the second matrix, block 1: scales[2] (sub-block 2's 6-bit scale) += 9.
  uint8_t* blk = bad.mats[1].bytes.data() + 5 * bad.mats[1].row_bytes() + 144;
  blk[4 + 2] = uint8_t((blk[4 + 2] & 0xC0) | (((blk[4 + 2] & 63) + 9) & 63));
  EXPECT_GE(mismatches(c, run(kx::gemv_kernel(c.shape), bad), false), 1u)
      << "a corrupted sub-block scale passed the comparison";
  EXPECT_EQ(mismatches(c, run(kx::gemv_kernel(c.shape), c)), 0u);
}

TEST_F(GemvOnEmu, NegativeControlMissingNorm) {
  const Case c = make_case(shape(512, {16}, true));
  kx::GemvShape no_norm = c.shape;
  no_norm.norm = false;
  Case plain = c;
  plain.shape = no_norm;
  EXPECT_GE(mismatches(c, run(kx::gemv_kernel(no_norm), plain), false), 8u)
      << "a GEMV without its norm passed the comparison";
}

// Issue 25's types on the f32 input: each alone with the fused norm, into
// the residual, and two to a launch (Q3_K_M's Q3_K with a Q5_K V).
TEST_F(GemvOnEmu, Issue25TypesOnTheF32Input) {
  for (GgmlType t : {GgmlType::Q5_K, GgmlType::Q3_K, GgmlType::Q2_K, GgmlType::IQ4_XS, GgmlType::IQ4_NL}) {
    SCOPED_TRACE(gguf::type_traits(t).name);
    const Case c = make_case(shape(t == GgmlType::IQ4_NL ? 576 : 512, {37}, true, false, {t}));
    EXPECT_EQ(mismatches(c, run(kx::gemv_kernel(c.shape), c)), 0u);
    const Case a = make_case(shape(1280, {19}, false, true, {t}));
    EXPECT_EQ(mismatches(a, run(kx::gemv_kernel(a.shape), a)), 0u);
  }
  const Case m = make_case(shape(768, {40, 16, 16}, true, false, {GgmlType::Q3_K, GgmlType::Q3_K, GgmlType::Q5_K}));
  EXPECT_EQ(mismatches(m, run(kx::gemv_kernel(m.shape), m)), 0u);
}

// Negative controls for the new decoders, on both inputs: a kernel whose
// kvalues_iq4nl table has one wrong entry (the PTX's table word patched),
// and weights whose Q5_K qh plane sits one block off (what a kernel reading
// the plane at a wrong offset sees), must each fail the comparison.
TEST_F(GemvOnEmu, NegativeControlWrongIq4TableEntryAndQhPlaneOffset) {
  for (bool q8 : {false, true}) {
    SCOPED_TRACE(q8 ? "8-bit input" : "f32 input");
    for (GgmlType t : {GgmlType::IQ4_NL, GgmlType::IQ4_XS}) {
      kx::GemvShape s = shape(512, {32}, false, false, {t});
      s.q8_input = q8;
      const Case c = make_case(s);
      ptx::GeneratedKernel g = kx::gemv_kernel(s);
      // Table word 2 holds entries 8..11 (1, 13, 25, 38); entry 9 becomes 14.
      uint32_t word = 0, bad_word = 0;
      for (uint32_t b = 0; b < 4; ++b) word |= uint32_t(uint8_t(gguf::kIQ4Values[8 + b])) << (8 * b);
      bad_word = (word & ~0xff00u) | (14u << 8);
      const std::string imm = ", " + std::to_string(word) + ";";   // the mov's decimal immediate
      const size_t at = g.ptx.find(imm);
      ASSERT_NE(at, std::string::npos) << "the table word is not in the PTX";
      ptx::GeneratedKernel broken = g;
      broken.ptx.replace(at, imm.size(), ", " + std::to_string(bad_word) + ";");
      auto misses = [&](const ptx::GeneratedKernel& k) {
        const std::vector<std::vector<float>> ys = run(k, c);
        return q8 ? q8_mismatches(c, ys, nullptr, false) : mismatches(c, ys, false);
      };
      EXPECT_EQ(misses(g), 0u) << gguf::type_traits(t).name;
      EXPECT_GE(misses(broken), 1u) << gguf::type_traits(t).name << ": a wrong table entry passed";
    }
    kx::GemvShape s = shape(1024, {24}, false, false, {GgmlType::Q5_K});
    s.q8_input = q8;
    const Case c = make_case(s);
    Case bad = c;
    // Shift every row's qh bytes (file offset 16 of each 176-byte block) one block on.
    for (uint32_t r = 0; r < 24; ++r) {
      uint8_t* row = bad.mats[0].bytes.data() + r * bad.mats[0].row_bytes();
      std::vector<uint8_t> qh(4 * 32);
      for (uint32_t b = 0; b < 4; ++b) std::copy_n(row + 176 * b + 16, 32, qh.begin() + 32 * ((b + 1) % 4));
      for (uint32_t b = 0; b < 4; ++b) std::copy_n(qh.begin() + 32 * b, 32, row + 176 * b + 16);
    }
    const std::vector<std::vector<float>> ys = run(kx::gemv_kernel(s), bad);
    EXPECT_GE(q8 ? q8_mismatches(c, ys, nullptr, false) : mismatches(c, ys, false), 1u)
        << "a Q5_K qh plane one block off passed";
  }
}

// F16 and BF16 matrices (issue 25's follow-up) on the f32 input. Each
// weight converts to f32 exactly (cvt.f32.f16; BF16's bits shifted up 16)
// and one f32 FMA takes it, so the error is the f32 input's of every other
// type: n_in / 32 products and sums rounded per lane, a 5-level butterfly,
// each rounding at most 2^-24 of the running |sum| <= Σ|w·x|; grown like
// sqrt(n) for random signs, that is gemv_tolerance (1e-7·Σ|w·x|·sqrt(n_in),
// 1e-7 ≈ 1.7·2^-24). The reference is the double product of the dequantized
// (exact) weights. Shapes: the fused norm (QKV-like, 3 segments), a residual
// with a partial last unrolled step (576: 72 chunks per row, 3 steps of 32
// lanes), two full steps (4096), F16 and BF16 in one launch with Q4_K and
// Q6_K (the launch stays on the f32 input: gemv_q8_input_fits is false and
// an 8-bit input is refused), several rows per warp on an odd grid.
TEST_F(GemvOnEmu, SixteenBitFloatsOnTheF32Input) {
  for (GgmlType t : {GgmlType::F16, GgmlType::BF16, GgmlType::F32}) {   // F32: gemma4's per_layer_model_proj
    SCOPED_TRACE(gguf::type_traits(t).name);
    const Case c = make_case(shape(1024, {40, 16, 16}, true, false, {t, t, t}));
    EXPECT_EQ(mismatches(c, run(kx::gemv_kernel(c.shape), c)), 0u);
    const Case a = make_case(shape(576, {19}, false, true, {t}));
    EXPECT_EQ(mismatches(a, run(kx::gemv_kernel(a.shape), a)), 0u);
    const Case w = make_case(shape(4096, {9}, true, false, {t}));
    EXPECT_EQ(mismatches(w, run(kx::gemv_kernel(w.shape), w)), 0u);
    kx::GemvShape odd = shape(512, {300, 61}, true, false, {t, GgmlType::Q4_K});
    odd.sms = 7;
    const Case o = make_case(odd);
    EXPECT_EQ(mismatches(o, run(kx::gemv_kernel(o.shape), o)), 0u);
  }
  kx::GemvShape m = shape(512, {40, 16, 16, 8}, true, false, {GgmlType::F16, GgmlType::Q4_K, GgmlType::BF16, GgmlType::Q6_K});
  EXPECT_FALSE(kx::gemv_q8_input_fits(m));
  const Case mc = make_case(m);
  EXPECT_EQ(mismatches(mc, run(kx::gemv_kernel(m), mc)), 0u);
  m.q8_input = true;
  EXPECT_THROW(kx::gemv_kernel(m), ptx::Error);   // no 8-bit input for 16-bit weights
  m.q8_input = false;
  m.columns = 2;
  EXPECT_THROW(kx::gemv_kernel(m), ptx::Error);   // N f32 columns: F16/BF16 segments only
  kx::GemvShape wide = shape(4096, {4}, false, false, {GgmlType::F16});
  wide.columns = 13;
  EXPECT_THROW(kx::gemv_kernel(wide), ptx::Error);   // 13 f32 columns of 4096: over 200 KiB
}

// Negative controls for the 16-bit floats: one weight of one row changed
// (row 3's first, to 0.5), and a BF16 kernel whose conversion shifts by 8
// instead of 16 (the PTX patched), each fail, by a large factor of the bound.
TEST_F(GemvOnEmu, NegativeControlSixteenBitFloats) {
  for (GgmlType t : {GgmlType::F16, GgmlType::BF16}) {
    SCOPED_TRACE(gguf::type_traits(t).name);
    const Case c = make_case(shape(512, {16}, false, false, {t}));
    Case bad = c;
    float half = 0.5f;
    std::vector<uint8_t> enc(2);
    gguf::type_traits(t).quantize_row(&half, enc.data(), 1);
    std::copy(enc.begin(), enc.end(), bad.mats[0].bytes.begin() + 3 * bad.mats[0].row_bytes());
    const ptx::GeneratedKernel g = kx::gemv_kernel(c.shape);
    double factor = 0;
    EXPECT_EQ(mismatches(c, run(g, bad), false, &factor), 1u) << "a changed weight passed";
    EXPECT_GT(factor, 100.0);
    std::printf("[gemv] %s negative control: a changed weight is %.3g times the tolerance\n",
                gguf::type_traits(t).name, factor);
    if (t != GgmlType::BF16) continue;
    ptx::GeneratedKernel broken = g;
    size_t patched = 0;
    for (size_t at = broken.ptx.find("shl.b32"); at != std::string::npos; at = broken.ptx.find("shl.b32", at + 1)) {
      const size_t end = broken.ptx.find('\n', at), imm = broken.ptx.find(", 16;", at);
      if (imm < end) {
        broken.ptx.replace(imm, 5, ", 8;");
        ++patched;
      }
    }
    ASSERT_GE(patched, 1u) << "no shift by 16 in the BF16 kernel";
    EXPECT_GE(mismatches(c, run(broken, c), false, &factor), 12u) << "a BF16 shift by 8 passed";
    EXPECT_GT(factor, 100.0);
    std::printf("[gemv] BF16 negative control: the shift by 8 is %.3g times the tolerance\n", factor);
  }
}

// The 8-bit input (GemvShape::q8_input; every type, and two in one launch)
// against the CPU quantized path:
// cpu::quantize_input of the same f32 vector and cpu::qdot (scalar) per row.
// The quants and every integer sum are the same; the per-block f32 terms are
// added in another order, hence gemv_tolerance over the quantized terms.
// With the norm, the kernel quantizes x · norm_w and scales each result by
// 1/rms (the quants of a vector scaled by a constant are the same but for
// rounding ties), so the reference is 1/rms · qdot(quantize(x · norm_w)).
// Negative control: the f32 reference is further off on most rows (the
// kernel does round its input to 8 bits).
TEST_F(GemvOnEmu, EightBitInputEqualsTheCpuQuantizedPath) {
  // K-types at 4 blocks per row and 17 (a partial unrolled step); the
  // 32-element types at SmolLM2's and gemma-3-270m's widths (a partial last
  // 256 to quantize) and 4352 (136 blocks: a partial step).
  const std::vector<std::pair<std::vector<GgmlType>, std::vector<uint32_t>>> mixes = {
      {{GgmlType::Q4_K, GgmlType::Q4_K}, {1024, 4352}},
      {{GgmlType::Q6_K, GgmlType::Q6_K}, {1024, 4352}},
      {{GgmlType::Q4_K, GgmlType::Q6_K}, {1024, 4352}},
      {{GgmlType::Q8_0, GgmlType::Q8_0}, {576, 4352}},
      {{GgmlType::Q4_0, GgmlType::Q4_1}, {576, 640}},
      {{GgmlType::Q5_0, GgmlType::Q8_0}, {640, 4352}},
      {{GgmlType::Q4_1, GgmlType::Q8_0}, {576, 1536}},
      // issue 25's types, and Q3_K_M's and IQ4_XS's mixes with Q5_K, Q4_K, Q6_K
      {{GgmlType::Q5_K, GgmlType::Q5_K}, {1024, 4352}},
      {{GgmlType::Q3_K, GgmlType::Q5_K}, {1024, 4352}},
      {{GgmlType::Q2_K, GgmlType::Q3_K}, {1024, 4352}},
      {{GgmlType::IQ4_XS, GgmlType::Q6_K}, {1024, 4352}},
      {{GgmlType::IQ4_NL, GgmlType::Q8_0}, {576, 4352}}};
  for (const auto& [types, widths] : mixes)
  for (bool norm : {false, true}) {
    for (uint32_t n_in : widths) {
      kx::GemvShape s = shape(n_in, {40, 24}, norm, !norm, types);
      s.q8_input = true;
      const Case c = make_case(s);
      const std::vector<std::vector<float>> ys = run(kx::gemv_kernel(s), c);
      double worst = 0;
      const size_t bad = q8_mismatches(c, ys, &worst);
      std::printf("[gemv q8] %s+%s norm %d n_in %u: worst error %.3g of the tolerance\n",
                  gguf::type_traits(types[0]).name, gguf::type_traits(types[1]).name, norm, n_in, worst);
      EXPECT_EQ(bad, 0u);
      EXPECT_GE(mismatches(c, ys, false), 20u) << "the 8-bit input kernel matches the f32 reference too closely";
    }
  }
}

// N input columns (GemvShape::columns: a batch of tokens through one weight
// read): column c of a launch with N columns is bit for bit what N = 1 gives
// on column c alone, for every 8-bit-input family and for F16/BF16 on the
// f32 input, with the norm, into the residual, and through a GLU; N = 1 itself is checked against the CPU's
// quantized path above. Negative control: another column's N = 1 result
// differs on most rows (the comparison sees which column is which). emu's
// hardware-variance mode perturbs every .approx instruction site on its own
// (a GPU computes one input's ex2.approx the same wherever it sits): there a
// GLU's columns, whose activation takes ex2.approx, agree within 8 ulps.
TEST_F(GemvOnEmu, EachColumnIsBitIdenticalWhateverTheColumnCount) {
  struct Mix {
    std::vector<GgmlType> types;
    std::vector<uint32_t> rows;
    uint32_t n_in;
    bool norm, acc;
    kx::Glu glu;
    bool f32 = false;   // F16/BF16: N columns on the f32 input
    uint32_t n_max = 0;   // the most columns tried (0: 16 for Q4_K and F16, else 5)
    uint32_t sms = 7;     // the grid: several rows per warp, a partial last block
  };
  const std::vector<Mix> mixes = {
      {{GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K}, {40, 24, 24}, 512, true, false, kx::Glu::None},
      {{GgmlType::Q6_K}, {36}, 4352, false, true, kx::Glu::None},   // 17 blocks: a partial unrolled step
      // One Q4_K matrix: its rows go two at a time (q8_rows_paired); 43
      // rows per block of 16 warps: a pair and a last row alone for some,
      // a pair for the rest.
      {{GgmlType::Q4_K}, {300}, 4352, false, true, kx::Glu::None},
      // A QKV of Q4_K, Q4_K, Q6_K: pairs within the Q4_K segments, rows
      // alone across a segment's end and in the Q6_K one.
      {{GgmlType::Q4_K, GgmlType::Q4_K, GgmlType::Q6_K}, {200, 40, 40}, 512, true, false, kx::Glu::None},
      {{GgmlType::Q4_K, GgmlType::Q4_K}, {48, 48}, 512, true, false, kx::Glu::SwiGlu},
      {{GgmlType::Q6_K, GgmlType::Q6_K}, {48, 48}, 512, true, false, kx::Glu::SwiGlu},   // gate and up rows together
      {{GgmlType::Q5_0, GgmlType::Q8_0}, {40, 24}, 640, true, false, kx::Glu::None},
      {{GgmlType::Q4_1, GgmlType::Q4_0}, {40, 24}, 576, false, true, kx::Glu::None},
      {{GgmlType::Q5_K, GgmlType::Q3_K, GgmlType::Q2_K}, {40, 24, 24}, 512, true, false, kx::Glu::None},
      {{GgmlType::IQ4_XS}, {36}, 4352, false, true, kx::Glu::None},
      {{GgmlType::Q3_K, GgmlType::Q5_K}, {48, 48}, 512, true, false, kx::Glu::SwiGlu},
      {{GgmlType::IQ4_NL, GgmlType::Q4_0}, {40, 24}, 640, true, false, kx::Glu::None},
      {{GgmlType::F16, GgmlType::F16, GgmlType::BF16}, {40, 24, 24}, 512, true, false, kx::Glu::None, true},
      // 544 chunks: 3 steps of 8 per lane at N = 1, 5 of 4 at N = 5 (the partial last ones add -0)
      {{GgmlType::BF16}, {36}, 4352, false, true, kx::Glu::None, true},
      {{GgmlType::F16, GgmlType::BF16}, {48, 48}, 512, true, false, kx::Glu::SwiGlu, true},
      // F32 rows: 32-byte chunks, half the 16-bit rows' per step (4 at N = 1: 136 of 4352 in 2 steps)
      {{GgmlType::F32, GgmlType::F16}, {40, 24}, 512, true, false, kx::Glu::None, true},
      {{GgmlType::F32}, {36}, 4352, false, true, kx::Glu::None, true},
      // 16 columns of 14336 (a step's down projection) overflow shared
      // memory: the input in passes of 32 and 24 blocks (q8_pass_blocks),
      // two rows per warp carrying their accumulators, the second partial.
      {{GgmlType::Q6_K}, {40}, 14336, false, true, kx::Glu::None, false, 16, 2},
      {{GgmlType::Q4_K}, {40}, 14336, false, false, kx::Glu::None, false, 16, 2}};
  const char* variance_env = std::getenv("PTXLM_EMU_VARIANCE");
  const bool variance = variance_env && std::string(variance_env) == "1";
  for (const Mix& m : mixes) {
    const int32_t max_ulps = variance && m.glu != kx::Glu::None ? 8 : 0;
    kx::GemvShape s = shape(m.n_in, m.rows, m.norm, m.acc, m.types);
    s.glu = m.glu;
    s.q8_input = !m.f32;
    s.sms = m.sms;
    const uint32_t n_max =
        m.n_max ? m.n_max : m.types[0] == GgmlType::Q4_K || m.types[0] == GgmlType::F16 ? kx::kMaxGemvColumns : 5;
    s.columns = n_max;
    if (m.n_in == 14336) {
      EXPECT_EQ(kx::q8_pass_blocks(s), 32u);
      kx::GemvShape eight = s;
      eight.columns = 8;
      EXPECT_EQ(kx::q8_pass_blocks(eight), 0u);   // 8 columns fit at once
    }
    if (m.types == std::vector<GgmlType>{GgmlType::Q4_K}) {
      EXPECT_EQ(kx::q8_rows_paired(s), m.n_in != 14336);
    }
    if (m.rows == std::vector<uint32_t>{200, 40, 40}) {
      EXPECT_TRUE(kx::q8_rows_paired(s));
    }
    const Case all = make_case(s);
    // Column c alone: its input and initial outputs, N = 1.
    auto column_case = [&](uint32_t c, uint32_t n) {
      Case ci = all;
      ci.shape.columns = n;
      ci.x.assign(all.x.begin(), all.x.begin() + n * m.n_in);
      if (n == 1) ci.x.assign(all.x.begin() + c * m.n_in, all.x.begin() + (c + 1) * m.n_in);
      for (size_t i = 0; i < ci.y0.size(); ++i) {
        const size_t rows = ci.mats[i].rows;
        ci.y0[i].assign(all.y0[i].begin() + (n == 1 ? c : 0) * rows, all.y0[i].begin() + ((n == 1 ? c : 0) + n) * rows);
      }
      return ci;
    };
    std::vector<std::vector<std::vector<float>>> single;
    for (uint32_t c = 0; c < n_max; ++c) {
      const Case ci = column_case(c, 1);
      single.push_back(run(kx::gemv_kernel(ci.shape), ci));
    }
    for (uint32_t n : {2u, 3u, n_max}) {
      SCOPED_TRACE(std::string(gguf::type_traits(m.types[0]).name) + " N = " + std::to_string(n));
      const Case cn = column_case(0, n);
      const std::vector<std::vector<float>> ys = run(kx::gemv_kernel(cn.shape), cn);
      size_t compared = 0;
      for (size_t si = 0; si < ys.size(); ++si) {
        const size_t rows = ys[si].size() / n;
        for (uint32_t c = 0; c < n; ++c)
          for (size_t r = 0; r < rows; ++r, ++compared) {
            const int32_t got = std::bit_cast<int32_t>(ys[si][c * rows + r]), want = std::bit_cast<int32_t>(single[c][si][r]);
            ASSERT_TRUE(got == want || ((got ^ want) >= 0 && std::abs(got - want) <= max_ulps))
                << "segment " << si << " column " << c << " row " << r << ": " << ys[si][c * rows + r] << " vs "
                << single[c][si][r];
          }
      }
      EXPECT_GT(compared, 0u);
    }
    size_t same = 0, rows = 0;
    for (size_t si = 0; si < single[0].size(); ++si)
      for (size_t r = 0; r < single[0][si].size(); ++r, ++rows) same += single[0][si][r] == single[1][si][r];
    EXPECT_LT(same, rows / 10) << "negative control: columns 0 and 1 give the same rows";
  }
}

TEST(Gemv, RefusesShapesItCannotRun) {
  EXPECT_THROW(kx::gemv_kernel(shape(300, {4}, false)), ptx::Error);       // not a multiple of 256
  EXPECT_THROW(kx::gemv_kernel(shape(640, {4}, false)), ptx::Error);       // Q4_K needs 256
  EXPECT_THROW(kx::gemv_kernel(shape(512, {}, false)), ptx::Error);        // no segments
  EXPECT_THROW(kx::gemv_kernel(shape(512, {0}, false)), ptx::Error);       // an empty segment
  kx::GemvShape q5_1f = shape(512, {4}, false);
  q5_1f.segments[0].type = GgmlType::Q5_1;
  EXPECT_THROW(kx::gemv_kernel(q5_1f), ptx::Error);                        // not supported
  kx::GemvShape mixed = shape(512, {4, 4}, false, false, {GgmlType::Q4_K, GgmlType::Q5_0});
  mixed.q8_input = true;
  EXPECT_THROW(kx::gemv_kernel(mixed), ptx::Error);                        // blocks of 256 and of 32 at once
  kx::GemvShape q6 = shape(640, {4}, false, false, {GgmlType::Q6_K});
  q6.q8_input = true;
  EXPECT_THROW(kx::gemv_kernel(q6), ptx::Error);                           // Q6_K needs a multiple of 256
  kx::GemvShape q5_1 = shape(512, {4}, false, false, {GgmlType::Q8_0});
  q5_1.q8_input = true;
  q5_1.segments[0].type = GgmlType::Q5_1;
  EXPECT_THROW(kx::gemv_kernel(q5_1), ptx::Error);                         // not on the GPU path
  kx::GemvShape cols = shape(512, {4}, false);
  cols.columns = 2;
  EXPECT_THROW(kx::gemv_kernel(cols), ptx::Error);                         // columns need the 8-bit input
  cols.q8_input = true;
  cols.columns = kx::kMaxGemvColumns + 1;
  EXPECT_THROW(kx::gemv_kernel(cols), ptx::Error);                         // too many columns
  cols.columns = 0;
  EXPECT_THROW(kx::gemv_kernel(cols), ptx::Error);
  for (uint32_t warps : {0u, 7u, kx::kMaxGemvWarps + 1}) {
    kx::GemvShape w = shape(512, {4}, false);
    w.max_warps = warps;
    EXPECT_THROW(kx::gemv_kernel(w), ptx::Error) << warps << " warps";   // 8 to 16 warps a block
  }
  kx::GemvShape wide = shape(14336 * 3, {4}, true);
  wide.q8_input = true;
  wide.columns = kx::kMaxGemvColumns;
  EXPECT_THROW(kx::gemv_kernel(wide), ptx::Error);                         // 16 normed columns of 43008: over 227 KiB
  wide.norm = false;
  EXPECT_EQ(kx::gemv_geometry(wide).shared_bytes, 16u * kx::q8_pass_column_bytes(wide));   // in passes instead
  EXPECT_LE(kx::gemv_geometry(wide).shared_bytes, kx::kQ8OnePassBytes);
}

}  // namespace
