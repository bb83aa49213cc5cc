// The GEMV kernels' epilogues on emu (kernels/decode/gemv): a GLU's one
// output act(gate)·up of the gate and up rows, and Gemma 4's per-layer gate
// act(row)·m[row] (GemvShape::gated) on every row path, with its count of
// round trips. The fixture is gemv_emu_fixture.h's, as in test_gemv_emu.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <utility>
#include <vector>

#include "gguf/quant.h"
#include "kernels/decode/gemv.h"
#include "kernels/decode/layout.h"
#include "tests/gemv_emu_fixture.h"
#include "tests/paged_emu_util.h"

namespace {

using namespace ptxlm;
using namespace ptxlm::gemv_test;

TEST_F(GemvOnEmu, GatedActivationOfTheGateAndUpRows) {
  // The FFN's gate and up rows of the normalised input, one output act(gate)·up.
  for (kx::Glu glu : {kx::Glu::SwiGlu, kx::Glu::GeGlu}) {
    for (auto types : {std::vector<GgmlType>{GgmlType::Q4_K, GgmlType::Q4_K},
                       std::vector<GgmlType>{GgmlType::Q4_K, GgmlType::Q6_K},
                       std::vector<GgmlType>{GgmlType::Q3_K, GgmlType::IQ4_XS},
                       std::vector<GgmlType>{GgmlType::F16, GgmlType::BF16},
                       std::vector<GgmlType>{GgmlType::BF16, GgmlType::Q4_K}}) {
      kx::GemvShape s = shape(512, {40, 40}, true, false, types);
      s.glu = glu;
      const Case c = make_case(s);
      const std::vector<float> y = run(kx::gemv_kernel(s), c).at(0);
      // The gate and up rows of the normalised input, in double.
      double ss = 0;
      for (float v : c.x) ss += double(v) * v;
      const float scale = float(1.0 / std::sqrt(ss / s.n_in + s.eps));
      size_t bad = 0;
      for (uint32_t r = 0; r < 40; ++r) {
        double gu[2], t[2];
        for (int m = 0; m < 2; ++m) {
          const std::vector<float> w = c.mats[m].row(r);
          double dot = 0, abs_dot = 0;
          for (uint32_t i = 0; i < s.n_in; ++i) {
            const double xn = c.x[i] * scale * c.norm_w[i];
            dot += double(w[i]) * xn;
            abs_dot += std::fabs(double(w[i]) * xn);
          }
          gu[m] = dot;
          t[m] = kx::gemv_tolerance(abs_dot, s.n_in);
        }
        const float g = float(gu[0]);
        const double a = glu == kx::Glu::SwiGlu
                             ? g / (1.0f + std::exp(-g))
                             : 0.5f * g * (1.0f + std::tanh(0.7978845608028654f * (g + 0.044715f * g * g * g)));
        // |act'| < 1.13 for SiLU and GELU.
        const double bound = 1.13 * t[0] * (std::fabs(gu[1]) + t[1]) + std::fabs(a) * t[1] + 1e-6 * std::fabs(a * gu[1]);
        if (!(std::fabs(y[r] - a * gu[1]) <= bound) && bad++ < 3)
          ADD_FAILURE() << "row " << r << ": got " << y[r] << ", reference " << a * gu[1];
      }
      EXPECT_EQ(bad, 0u) << (glu == kx::Glu::SwiGlu ? "swiglu" : "geglu");
      // Negative control: the gate and up swapped must fail.
      Case swapped = c;
      std::swap(swapped.mats[0], swapped.mats[1]);
      swapped.shape.segments = {s.segments[1], s.segments[0]};
      const std::vector<float> y2 = run(kx::gemv_kernel(swapped.shape), swapped).at(0);
      size_t differ = 0;
      for (uint32_t r = 0; r < 40; ++r) differ += std::fabs(y2[r] - y[r]) > 1e-3 * (std::fabs(y[r]) + 1e-3);
      EXPECT_GE(differ, 20u) << "act(up)·gate was not told apart from act(gate)·up";
    }
  }
}

// Gemma 4's per-layer gate as the epilogue (GemvShape::gated): each row's
// output is gelu(the ungated kernel's row) · m[row], on every row path
// (rows alone on the f32 input, Q4_K and Q6_K pairs on the 8-bit one, N
// columns with m's columns gate_stride apart, the input in passes, float
// rows), within the host's gelu of the ungated result: the kernel's tanh
// from ex2.approx is ~1e-7 absolute, so 1e-6 (1 + |g|) |m|. Controls: m one
// row on, and m's columns read rows (not gate_stride) apart, each fail 3/4
// of the rows (not all: gelu of a large negative row is ~0 whatever m).
TEST_F(GemvOnEmu, GatedOutputIsTheActivationOfTheRowTimesItsMultiplier) {
  struct Cfg {
    GgmlType type;
    uint32_t n_in;
    bool q8;
    uint32_t columns, sms;
  };
  const Cfg cfgs[] = {
      {GgmlType::Q4_K, 512, false, 1, 7},   // the f32 input, rows alone
      {GgmlType::Q4_K, 512, true, 1, 7},    // rows in pairs (q8_rows_paired)
      {GgmlType::Q6_K, 512, true, 1, 7},    // Q6_K pairs at one column
      {GgmlType::Q4_K, 512, true, 5, 7},    // 5 columns
      {GgmlType::Q8_0, 512, true, 3, 7},    // a 32-element type
      {GgmlType::F16, 512, false, 3, 7},    // float rows, 3 columns of the f32 input
      {GgmlType::Q4_K, 14336, true, 16, 2},   // the input in passes (q8_pass_blocks)
  };
  constexpr uint32_t kRows = 40;
  auto gelu = [](double g) { return 0.5 * g * (1 + std::tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))); };
  for (const Cfg& cf : cfgs) {
    SCOPED_TRACE(std::string(gguf::type_traits(cf.type).name) + " n_in " + std::to_string(cf.n_in) + " columns " +
                 std::to_string(cf.columns) + (cf.q8 ? " q8" : " f32"));
    kx::GemvShape plain = shape(cf.n_in, {kRows}, false, false, {cf.type});
    plain.q8_input = cf.q8;
    plain.columns = cf.columns;
    plain.sms = cf.sms;
    kx::GemvShape gated = plain;
    gated.gated = kx::Glu::GeGlu;
    gated.gate_stride = 3 * kRows;   // a token's row of the per-layer inputs: other layers' slices between
    const Case c = make_case(gated);
    Case p = c;
    p.shape = plain;
    const std::vector<float> y = run(kx::gemv_kernel(plain), p).at(0), yg = run(kx::gemv_kernel(gated), c).at(0);
    ASSERT_EQ(yg.size(), size_t(cf.columns) * kRows);
    // Rows outside the bound when m's column c is read from c · stride + r + shift.
    auto misses = [&](uint32_t stride, uint32_t shift) {
      size_t bad = 0;
      for (uint32_t col = 0; col < cf.columns; ++col)
        for (uint32_t r = 0; r < kRows; ++r) {
          const double g = y[col * kRows + r], m = c.gate.at(col * stride + (r + shift) % kRows), want = gelu(g) * m;
          bad += !(std::fabs(yg[col * kRows + r] - want) <= 1e-6 * (1 + std::fabs(g)) * std::fabs(m));
        }
      return bad;
    };
    EXPECT_EQ(misses(gated.gate_stride, 0), 0u);
    EXPECT_GE(misses(gated.gate_stride, 1), cf.columns * kRows * 3 / 4) << "m one row on was not told apart";
    if (cf.columns > 1) {
      EXPECT_GE(misses(kRows, 0), (cf.columns - 1) * kRows * 3 / 4) << "m's columns rows apart were not told apart";
    }
  }
}

// The multiplier costs the gated GEMV no round trip: it is loaded with the
// row's first weights, so a warp waits as often as the ungated kernel's
// (Gemma-4-E2B's per-layer gate: 1536 -> 256 Q4_K on the 8-bit input, 132
// SMs; loaded after the row's reduction it would add a wait a row).
TEST(GemvCounts, TheGateAddsNoRoundTrip) {
  using paged_test::bytes_of;
  kx::GemvShape plain = shape(1536, {256}, false, false, {GgmlType::Q4_K});
  plain.q8_input = true;
  kx::GemvShape gated = plain;
  gated.gated = kx::Glu::GeGlu;
  gated.gate_stride = 256 * 35;
  const kx::RowLayout l = kx::row_layout(GgmlType::Q4_K, 1536);
  const std::vector<uint8_t> w(size_t(l.row_bytes) * 256, 0x11);
  const std::vector<float> x(1536, 0.5f), y(256, 0.0f), m(256 * 35, 0.25f);
  const paged_test::Counted a = paged_test::count(kx::gemv_kernel(plain), {bytes_of(x), w, bytes_of(y)});
  const paged_test::Counted b = paged_test::count(kx::gemv_kernel(gated), {bytes_of(x), w, bytes_of(y), bytes_of(m)});
  ASSERT_GT(a.stats.inflight_batches, 0u);
  EXPECT_EQ(b.stats.inflight_batches, a.stats.inflight_batches);
}

}  // namespace
