// The embedding row and the normalised residual add (kernels/decode/
// elementwise) on emu: the embedding bit-equal to gguf's reference
// dequantizer for every type the GPU path stores; add_norm against the CPU
// reference's formula; their batch forms (T rows, issue 22) and the argmax's
// and slot clear's row by row bit-equal to the single-token kernels. Counts:
// add_norm's and gemma4's ple_input's round trips per warp.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gguf/quant.h"
#include "kernels/decode/elementwise.h"
#include "kernels/decode/gemma4.h"
#include "kernels/decode/layout.h"
#include "kernels/examples/examples.h"
#include "tests/emu_cuda_fixture.h"
#include "tests/paged_emu_util.h"

namespace {

using namespace ptxlm;
namespace kx = ptxlm::kernels;
using gguf::GgmlType;
using ptx::DevPtr;

class ElementwiseOnEmu : public testing_util::EmuCudaTest {
protected:
  // `rows` rows of n random weights quantized to `type`, as a file holds them.
  std::vector<uint8_t> quantized_rows(GgmlType type, uint32_t n, uint32_t rows) {
    const auto& tt = gguf::type_traits(type);
    std::vector<uint8_t> file(rows * (n / tt.block_elems) * tt.block_bytes);
    for (uint32_t r = 0; r < rows; ++r) {
      const std::vector<float> w = randv(n, 0.1f);
      tt.quantize_row(w.data(), file.data() + r * (file.size() / rows), n);
    }
    return file;
  }
};

TEST_F(ElementwiseOnEmu, EmbeddingRowIsTheReferenceDequantization) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                     GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_K, GgmlType::Q3_K, GgmlType::Q2_K,
                     GgmlType::IQ4_XS, GgmlType::IQ4_NL}) {
    const auto& tt = gguf::type_traits(t);
    SCOPED_TRACE(tt.name);
    const uint32_t n = 512, rows = 5, token = 3;
    const float scale = 22.627417f;   // √512, gemma3's embedding scale
    const std::vector<uint8_t> file = quantized_rows(t, n, rows);
    const kx::RowLayout l = kx::row_layout(t, n);
    auto dw = upload(kx::repack_rows(l, file.data(), rows));
    auto dtok = upload(std::vector<uint32_t>{token});
    auto dx = upload(std::vector<float>(n, NAN));
    launch(kx::embed_kernel({t, n, scale}), {DevPtr{dw.ptr()}, DevPtr{dtok.ptr()}, DevPtr{dx.ptr()}});
    std::vector<float> ref(n);
    tt.dequantize_row(file.data() + token * (file.size() / rows), ref.data(), n);
    const std::vector<float> got = download<float>(dx, n);
    size_t bad = 0;
    for (uint32_t i = 0; i < n; ++i)
      if (got[i] != ref[i] * scale && bad++ < 3) ADD_FAILURE() << "x[" << i << "]: " << got[i] << " vs " << ref[i] * scale;
    EXPECT_EQ(bad, 0u);
  }
}

// gemma4's per-layer inputs (ple_input_kernel) reading the token's row of
// the per-layer table themselves: each slice (P = 256, 3 layers) of two
// tokens' rows (the batch form, grid.y = 2) against the host's formula on
// gguf's dequantized row (the slice's sum of squares in double: 1e-6
// relative), for a float, 16-bit, 32-element and K-quant table, and the
// single-token kernel bit for bit the batch's first row. Negative control:
// the other token's row in the reference fails most elements.
TEST_F(ElementwiseOnEmu, PleInputAddsTheTokensRowOfTheTable) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::Q8_0, GgmlType::Q5_0, GgmlType::Q4_K, GgmlType::Q6_K}) {
    const auto& tt = gguf::type_traits(t);
    SCOPED_TRACE(tt.name);
    const uint32_t P = 256, L = 3, PL = P * L, rows = 5;
    const std::vector<uint32_t> tokens = {3, 1};
    kx::PleInputShape s{.per_layer = P, .layers = L, .eps = 1e-6f, .proj_scale = 0.05f, .sum_scale = 0.70710678f,
                        .tokens = 2, .tok_type = t, .tok_scale = 16.0f};
    const std::vector<uint8_t> file = quantized_rows(t, PL, rows);
    const std::vector<float> proj = randv(size_t(2) * PL, 4.0f), norm = randv(P, 0.5f);
    auto dw = upload(kx::repack_rows(kx::row_layout(t, PL), file.data(), rows));
    auto dtok = upload(tokens), dnorm = upload(norm);
    auto dp = upload(proj), dout = upload(std::vector<float>(size_t(2) * PL, NAN));
    launch(kx::ple_input_kernel(s),
           {DevPtr{dp.ptr()}, DevPtr{dw.ptr()}, DevPtr{dtok.ptr()}, DevPtr{dnorm.ptr()}, DevPtr{dout.ptr()}});
    const std::vector<float> got = download<float>(dout, size_t(2) * PL);
    // Elements outside the bound when row `row_of(c)` stands for column c's token.
    auto misses = [&](auto row_of) {
      size_t bad = 0;
      for (uint32_t c = 0; c < 2; ++c) {
        std::vector<float> row(PL);
        tt.dequantize_row(file.data() + row_of(c) * (file.size() / rows), row.data(), PL);
        for (uint32_t j = 0; j < PL; j += P) {
          const float* y = proj.data() + c * PL + j;
          double ss = 0;
          for (uint32_t i = 0; i < P; ++i) ss += double(y[i] * s.proj_scale) * double(y[i] * s.proj_scale);
          const float scale = 1.0f / std::sqrt(float(ss / P) + s.eps);
          for (uint32_t i = 0; i < P; ++i) {
            const float ref = ((y[i] * s.proj_scale) * scale * norm[i] + row[j + i] * s.tok_scale) * s.sum_scale;
            bad += !(std::fabs(got[c * PL + j + i] - ref) <= 1e-6 * (1 + std::fabs(ref)));
          }
        }
      }
      return bad;
    };
    EXPECT_EQ(misses([&](uint32_t c) { return tokens[c]; }), 0u);
    EXPECT_GE(misses([&](uint32_t c) { return tokens[1 - c]; }), size_t(2) * PL * 3 / 4) << "the other row passed";
    kx::PleInputShape one = s;
    one.tokens = 1;
    auto d1 = upload(std::vector<float>(proj.begin(), proj.begin() + PL)), o1 = upload(std::vector<float>(PL, NAN));
    launch(kx::ple_input_kernel(one),
           {DevPtr{d1.ptr()}, DevPtr{dw.ptr()}, DevPtr{dtok.ptr()}, DevPtr{dnorm.ptr()}, DevPtr{o1.ptr()}});
    EXPECT_EQ(download<float>(o1, PL), std::vector<float>(got.begin(), got.begin() + PL));
  }
}

// Widths with one batch of loads a thread (640: a partial last round of
// elements, 1536: whole rounds) and several (2052: 9 a thread, the last
// round 4 elements wide; 5376, Gemma-3-27B's: 21), plain and scaled; emu
// checks every access is inside its buffer.
TEST_F(ElementwiseOnEmu, AddNormMatchesTheReferenceFormula) {
  for (uint32_t n : {640u, 1536u, 2052u, 5376u}) {
    for (bool scaled : {false, true}) {
      SCOPED_TRACE(std::to_string(n) + (scaled ? " scaled" : ""));
      const std::vector<float> x = randv(n, 1.0f), o = randv(n, 3.0f), w = randv(n, 0.5f);
      const float out_scale = 0.75f;
      auto dx = upload(x), dob = upload(o), dw = upload(w), ds = upload(std::vector<float>{out_scale});
      kx::AddNormShape shape{n, 1e-6f};
      shape.scaled = scaled;
      std::vector<ptx::ParamValue> args = {DevPtr{dx.ptr()}, DevPtr{dob.ptr()}, DevPtr{dw.ptr()}};
      if (scaled) args.push_back(DevPtr{ds.ptr()});
      launch(kx::add_norm_kernel(shape), args);
      double ss = 0;
      for (float v : o) ss += double(v) * v;
      const float scale = 1.0f / std::sqrt(float(ss / n) + 1e-6f);
      const std::vector<float> got = download<float>(dx, n);
      size_t bad = 0;
      for (uint32_t i = 0; i < n; ++i) {
        const float ref = (x[i] + (o[i] * scale) * w[i]) * (scaled ? out_scale : 1.0f);
        if (!(std::fabs(got[i] - ref) <= 1e-6 * (1 + std::fabs(ref))) && bad++ < 3)
          ADD_FAILURE() << "x[" << i << "]: " << got[i] << " vs " << ref;
      }
      EXPECT_EQ(bad, 0u);
    }
  }
}

// The batch step's forms (T = 3 rows of distinct inputs): each row of the
// embedding, the normalised add and the argmax bit-equal to the
// single-token kernel run on that row alone, so a row reading another's
// input (or all writing row 0) fails; the slot clear zeroes exactly its
// slots.
TEST_F(ElementwiseOnEmu, BatchRowsEqualTheSingleTokenKernels) {
  const uint32_t n = 512, T = 3, rows = 7;
  const GgmlType type = GgmlType::Q4_K;
  const std::vector<uint8_t> file = quantized_rows(type, n, rows);
  const kx::RowLayout l = kx::row_layout(type, n);
  auto dw = upload(kx::repack_rows(l, file.data(), rows));
  const std::vector<uint32_t> tokens = {5, 0, 3};
  auto dtok = upload(tokens);
  auto dx = upload(std::vector<float>(size_t(T) * n, NAN));
  launch(kx::embed_kernel({type, n, 16.0f, T}), {DevPtr{dw.ptr()}, DevPtr{dtok.ptr()}, DevPtr{dx.ptr()}});
  const std::vector<float> batch = download<float>(dx, size_t(T) * n);
  // add_norm over the three rows, o random per row.
  const std::vector<float> o = randv(size_t(T) * n, 3.0f), nw = randv(n, 0.5f);
  auto dob = upload(o), dnw = upload(nw);
  launch(kx::add_norm_kernel({n, 1e-6f, T}), {DevPtr{dx.ptr()}, DevPtr{dob.ptr()}, DevPtr{dnw.ptr()}});
  const std::vector<float> added = download<float>(dx, size_t(T) * n);
  // argmax over the rows of `added`, one slot each.
  auto dslots = upload(std::vector<uint64_t>(T + 2, ~0ull));
  launch(kx::clear_u64_kernel({}, nullptr, T), {DevPtr{dslots.ptr()}});
  const std::vector<uint64_t> cleared = download<uint64_t>(dslots, T + 2);
  EXPECT_EQ(cleared, (std::vector<uint64_t>{0, 0, 0, ~0ull, ~0ull}));
  launch(kx::argmax_kernel({.n = n, .columns = T}), {DevPtr{dx.ptr()}, DevPtr{dslots.ptr()}});
  const std::vector<uint64_t> keys = download<uint64_t>(dslots, T);

  for (uint32_t t = 0; t < T; ++t) {
    SCOPED_TRACE(t);
    auto d1 = upload(std::vector<float>(n, NAN));
    auto dt1 = upload(std::vector<uint32_t>{tokens[t]});
    launch(kx::embed_kernel({type, n, 16.0f}), {DevPtr{dw.ptr()}, DevPtr{dt1.ptr()}, DevPtr{d1.ptr()}});
    EXPECT_EQ(download<float>(d1, n), std::vector<float>(batch.begin() + long(t) * n, batch.begin() + long(t + 1) * n));
    auto do1 = upload(std::vector<float>(o.begin() + long(t) * n, o.begin() + long(t + 1) * n));
    launch(kx::add_norm_kernel({n, 1e-6f}), {DevPtr{d1.ptr()}, DevPtr{do1.ptr()}, DevPtr{dnw.ptr()}});
    const std::vector<float> one = download<float>(d1, n);
    EXPECT_EQ(one, std::vector<float>(added.begin() + long(t) * n, added.begin() + long(t + 1) * n));
    auto ds1 = upload(std::vector<uint64_t>{0});
    launch(kx::argmax_kernel({.n = n}), {DevPtr{d1.ptr()}, DevPtr{ds1.ptr()}});
    EXPECT_EQ(download<uint64_t>(ds1, 1)[0], keys[t]);
    EXPECT_EQ(kx::argmax_index(keys[t]), uint32_t(std::max_element(one.begin(), one.end()) - one.begin()));
  }
  EXPECT_NE(kx::argmax_index(keys[0]), kx::argmax_index(keys[1]));   // distinct rows, or the check is blind
}

// Round trips: a wait on global loads costs a warp a DRAM round trip
// (engine/projection.h), and these kernels move a few KB, so their time is
// their waits. add_norm loads each thread's elements (o, w, x and the
// output scale) in one batch before its reduction's barrier, then only
// stores: one wait a warp at Gemma-4-E2B's 1536 and gemma-3's 640 (18 at
// 1536 before 726462b). ple_input reads the token's row of the per-layer
// table itself: the id's round trip, then the element's as embed_kernel
// decodes it, proj and w riding along.
TEST(ElementwiseCounts, RoundTripsPerWarp) {
  using paged_test::bytes_of;
  for (uint32_t n : {640u, 1536u})
    for (bool scaled : {false, true}) {
      kx::AddNormShape shape{n, 1e-6f};
      shape.scaled = scaled;
      const std::vector<float> v(n, 0.5f), one{0.75f};
      std::vector<std::vector<uint8_t>> bufs = {bytes_of(v), bytes_of(v), bytes_of(v)};
      if (scaled) bufs.push_back(bytes_of(one));
      const paged_test::Counted c = paged_test::count(kx::add_norm_kernel(shape), bufs);
      const double warps = kx::add_norm_geometry(shape).block.x / 32.0;
      EXPECT_EQ(double(c.stats.inflight_batches) / warps, 1.0) << "add_norm " << n << (scaled ? " scaled" : "");
    }
  // ple_input loads each element's proj, w and table element before its
  // reduction. At Gemma-4-E2B's 256 a layer (an element a thread) a warp
  // waits as often as embed_kernel's warps on the same table (the id, then
  // the element's decode: 2 for F32 and Q8_0, 4 for Q6_K, whose decode
  // reads its bytes one after another), where the embedding kernel and
  // ple_input took those and one more (the row written, then read back) in
  // two launches; at two elements a thread, the id once and each element's
  // decode, a float table's two loads together (four waits when proj was
  // reloaded beside w and the row after the reduction).
  for (uint32_t per_layer : {256u, 512u})
    for (gguf::GgmlType type : {gguf::GgmlType::F32, gguf::GgmlType::Q8_0, gguf::GgmlType::Q6_K}) {
      kx::PleInputShape in{.per_layer = per_layer, .layers = 35};
      in.tok_type = type;
      in.tok_scale = 16.0f;
      const std::vector<float> proj(per_layer * 35, 0.5f), w(per_layer, 1.25f);
      const std::vector<uint8_t> table(size_t(kx::row_layout(type, per_layer * 35).row_bytes) * 4, 0x11);
      const std::vector<uint32_t> token{3};
      const paged_test::Counted ci = paged_test::count(
          kx::ple_input_kernel(in), {bytes_of(proj), table, bytes_of(token), bytes_of(w), bytes_of(proj)});
      const kx::LaunchGeometry g = kx::ple_input_geometry(in);
      const double waits = double(ci.stats.inflight_batches) / (g.grid.x * g.block.x / 32.0);
      const kx::EmbedShape es{type, per_layer * 35, 16.0f};
      const std::vector<float> x(per_layer * 35, 0.0f);
      const paged_test::Counted ce = paged_test::count(kx::embed_kernel(es), {table, bytes_of(token), bytes_of(x)});
      const kx::LaunchGeometry eg = kx::embed_geometry(es);
      const double embed = double(ce.stats.inflight_batches) / (eg.grid.x * eg.block.x / 32.0);
      const double items = per_layer / 256.0;
      SCOPED_TRACE("ple_input " + std::to_string(per_layer) + " " + gguf::type_traits(type).name);
      EXPECT_EQ(waits, type == gguf::GgmlType::F32 ? 2.0 : 1 + items * (embed - 1));
      if (per_layer == 256) {
        EXPECT_EQ(waits, embed);
      }
    }
  EXPECT_THROW(kx::ple_input_geometry({.per_layer = 2052, .layers = 1}), ptx::Error);
}

// argmax issues every item's load before it uses the first: one wait a
// warp at gemma-3's 262144 logits and SmolLM2's 49152, in one column and in
// a batch's four (8, the items a thread takes, when each load was used at
// once). test_examples_emu checks the keys it leaves.
TEST(ArgmaxCounts, OneRoundTripPerWarp) {
  using paged_test::bytes_of;
  for (uint32_t n : {262144u, 49152u})
    for (uint32_t columns : {1u, 4u}) {
      const kx::ArgmaxShape shape{.n = n, .columns = columns};
      std::vector<float> x(size_t(n) * columns);
      for (size_t i = 0; i < x.size(); ++i) x[i] = float((i * 2654435761u) % 100003) * 1e-3f - 40.0f;
      const paged_test::Counted c =
          paged_test::count(kx::argmax_kernel(shape), {bytes_of(x), std::vector<uint8_t>(8 * columns, 0)});
      const kx::LaunchGeometry g = kx::argmax_geometry(shape);
      const double warps = double(g.grid.x) * g.grid.y * g.block.x / 32.0;
      EXPECT_EQ(double(c.stats.inflight_batches) / warps, 1.0) << n << " x " << columns;
    }
}

TEST(ElementwiseBatch, RefusesEmptyBatches) {
  EXPECT_THROW(kx::embed_geometry({GgmlType::Q4_K, 512, 1.0f, 0}), ptx::Error);
  EXPECT_THROW(kx::add_norm_geometry({512, 1e-6f, 0}), ptx::Error);
  EXPECT_THROW(kx::argmax_geometry({.n = 512, .columns = 0}), ptx::Error);
}

}  // namespace
