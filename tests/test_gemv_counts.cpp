// The GEMV kernels' shared-memory wavefronts, counted by emu's bank model
// (emu/shared_banks.h) at Llama-3-8B's shapes: the 8-bit-input kernels
// (Q4_K and Q6_K) stay within 1.1x the ideal, issue 20's target. Negative
// control: today's f32-input kernels at the same shapes conflict (over 2x).
// Counts, not times; the products themselves are checked by test_gemv_emu.
#include <gtest/gtest.h>

#include <cstring>
#include <random>
#include <tuple>
#include <vector>

#include <nlohmann/json.hpp>

#include "emu/interp.h"
#include "emu/stats.h"
#include "engine/projection.h"
#include "gguf/quant.h"
#include "kernels/decode/gemv.h"
#include "kernels/decode/layout.h"

namespace {

using namespace ptxlm;
namespace kx = ptxlm::kernels;
using gguf::GgmlType;

struct Counted {
  emu::Stats stats;
  uint64_t weight_bytes = 0;
};

// One launch of the GEMV for `s` with random weights and input.
Counted count(const kx::GemvShape& s, const ptx::Target& t = {}) {
  const ptx::GeneratedKernel g = kx::gemv_kernel(s, t);
  std::string log;
  std::shared_ptr<const emu::Program> prog = emu::load_program(g.ptx, &log);
  EXPECT_TRUE(prog) << log;
  Counted c;
  if (!prog) return c;
  emu::Memory mem;
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  auto alloc = [&](const void* data, size_t n) {
    const uint64_t a = mem.alloc(n);
    std::memcpy(mem.translate(a, n), data, n);
    return a;
  };
  std::vector<float> x(s.columns * s.n_in);
  for (float& v : x) v = u(rng);
  std::vector<uint8_t> params;
  auto add_ptr = [&](uint64_t p) {
    params.resize((params.size() + 7) / 8 * 8 + 8);
    std::memcpy(params.data() + params.size() - 8, &p, 8);
  };
  add_ptr(alloc(x.data(), x.size() * 4));
  if (s.norm) {
    std::vector<float> w(s.n_in, 1.0f);
    add_ptr(alloc(w.data(), w.size() * 4));
  }
  for (const kx::GemvSegment& seg : s.segments) {
    const gguf::TypeTraits& tt = gguf::type_traits(seg.type);
    const size_t rb = s.n_in / tt.block_elems * tt.block_bytes;
    std::vector<uint8_t> rows(rb * seg.rows);
    std::vector<float> wrow(s.n_in);
    for (uint32_t r = 0; r < seg.rows; ++r) {
      for (float& v : wrow) v = 0.05f * u(rng);
      tt.quantize_row(wrow.data(), rows.data() + r * rb, s.n_in);
    }
    const std::vector<uint8_t> dev = kx::repack_rows(kx::row_layout(seg.type, s.n_in), rows.data(), seg.rows);
    add_ptr(alloc(dev.data(), dev.size()));
    c.weight_bytes += dev.size();
    std::vector<float> y(s.columns * seg.rows, 0.0f);
    add_ptr(alloc(y.data(), y.size() * 4));
  }
  emu::LaunchConfig cfg;
  cfg.grid = {g.geometry.grid.x, 1, 1};
  cfg.block = {g.geometry.block.x, 1, 1};
  cfg.dynamic_shared_bytes = g.geometry.shared_bytes;
  cfg.shared_limit = 227 * 1024;   // the opt-in CudaBackend makes (cuFuncSetAttribute)
  cfg.params = params.data();
  cfg.params_size = uint32_t(params.size());
  std::optional<emu::Fault> f = emu::run_kernel(*prog, g.name, cfg, mem, &c.stats);
  EXPECT_FALSE(f.has_value()) << (f ? f->message : "");
  return c;
}

kx::GemvShape shape(uint32_t n_in, GgmlType t, uint32_t rows, bool norm, bool q8, uint32_t columns = 1) {
  kx::GemvShape s;
  s.columns = columns;
  s.n_in = n_in;
  s.norm = norm;
  s.accumulate = !norm;
  s.q8_input = q8;
  s.segments.push_back({t, rows});
  return s;
}

// Rows enough for several per block (1056 on 4096 columns: 8 per block;
// 528 on 14336), every warp of a block busy. Conversions are printed: the
// 8-bit input's come from its staging (every block quantizes the input,
// once per element) and a few per weight block; bench/sass's gate
// (check_sass) holds the row loops to no conversion per weight.
TEST(GemvCounts, EightBitInputIsFreeOfBankConflicts) {
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K}) {
    for (const auto& [n_in, rows, norm] : {std::tuple{4096u, 1056u, true}, std::tuple{14336u, 528u, false}}) {
      const Counted q8 = count(shape(n_in, t, rows, norm, true));
      auto conv_per_kib = [](const Counted& c) {
        return 1024.0 * double(c.stats.by_class[size_t(emu::InstClass::Cvt)]) / double(c.weight_bytes);
      };
      std::printf("[gemv counts] %s n_in %u, %u rows: shared wavefronts / ideal %.3f; conversions per KiB of weights "
                  "%.2f; dp4a %llu\n",
                  gguf::type_traits(t).name, n_in, rows, q8.stats.shared_wavefront_ratio(), conv_per_kib(q8),
                  (unsigned long long)q8.stats.by_class[size_t(emu::InstClass::Dp4a)]);
      EXPECT_LE(q8.stats.shared_wavefront_ratio(), 1.1) << gguf::type_traits(t).name << " " << n_in;
      EXPECT_GT(q8.stats.by_class[size_t(emu::InstClass::Dp4a)], 0u);
      if (n_in == 4096) {   // the f32 kernel stages 4 bytes per input: 14336 needs the shared-memory opt-in
        const Counted f32 = count(shape(n_in, t, rows, norm, false));
        std::printf("[gemv counts] %s n_in %u, f32 input (negative control): shared wavefronts / ideal %.3f; "
                    "conversions per KiB %.2f\n",
                    gguf::type_traits(t).name, n_in, f32.stats.shared_wavefront_ratio(), conv_per_kib(f32));
        EXPECT_GT(f32.stats.shared_wavefront_ratio(), 2.0) << "negative control: today's kernel conflicts";
      }
    }
  }
}

// The 32-element types at gemma-3-270m's and SmolLM2's widths (1056 rows).
TEST(GemvCounts, EightBitInputOfBlocksOf32IsFreeOfBankConflicts) {
  for (const auto& [t, n_in] : {std::pair{GgmlType::Q8_0, 576u}, std::pair{GgmlType::Q4_1, 576u},
                                std::pair{GgmlType::Q5_0, 640u}, std::pair{GgmlType::Q4_0, 2048u}}) {
    const Counted q8 = count(shape(n_in, t, 1056, true, true));
    const Counted f32 = count(shape(n_in, t, 1056, true, false));
    std::printf("[gemv counts] %s n_in %u: shared wavefronts / ideal %.3f (f32 input %.3f); dp4a %llu\n",
                gguf::type_traits(t).name, n_in, q8.stats.shared_wavefront_ratio(), f32.stats.shared_wavefront_ratio(),
                (unsigned long long)q8.stats.by_class[size_t(emu::InstClass::Dp4a)]);
    EXPECT_LE(q8.stats.shared_wavefront_ratio(), 1.1) << gguf::type_traits(t).name << " " << n_in;
    EXPECT_GT(q8.stats.by_class[size_t(emu::InstClass::Dp4a)], 0u);
    EXPECT_GT(f32.stats.shared_wavefront_ratio(), 1.5) << "negative control: today's kernel conflicts";
  }
}

// Issue 25's types on the 8-bit input at Llama-3-8B's QKV width (1056 rows,
// 8 per block), beside Q4_K, Q6_K and Q4_0 of the same shape: free of bank
// conflicts, multiplied by dp4a, and no per-weight conversion: warp-level
// conversions per 1024 weights within 1.25x Q4_K's (about 6: the input's
// staging and a few per block), where a conversion per weight adds 32.
// Negative control: the f32 input converts every weight. Printed per type:
// warp instructions and dp4a per weight byte, conversions per 1024 weights,
// average and largest bytes in flight per warp wait (docs/efficiency.md).
TEST(GemvCounts, Issue25TypesOnTheEightBitInput) {
  double q4k_conv = 0;
  for (GgmlType t : {GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q4_0, GgmlType::Q5_K, GgmlType::Q3_K, GgmlType::Q2_K,
                     GgmlType::IQ4_XS, GgmlType::IQ4_NL}) {
    const Counted c = count(shape(4096, t, 1056, true, true));
    const double bytes = double(c.weight_bytes), weights = 4096.0 * 1056;
    const double conv = double(c.stats.by_class[size_t(emu::InstClass::Cvt)]) / weights;
    if (t == GgmlType::Q4_K) q4k_conv = conv;
    std::printf("[gemv counts] %-6s n_in 4096, 1056 rows: warp instructions per weight byte %.4f; conversions per 1024 "
                "weights %.2f; dp4a per weight byte %.4f; shared wavefronts / ideal %.3f; bytes in flight per wait %.0f (max %llu)\n",
                gguf::type_traits(t).name, double(c.stats.warp_instructions) / bytes, 1024.0 * conv,
                double(c.stats.by_class[size_t(emu::InstClass::Dp4a)]) / bytes, c.stats.shared_wavefront_ratio(),
                c.stats.inflight_bytes_avg(), (unsigned long long)c.stats.inflight_bytes_max);
    EXPECT_LE(c.stats.shared_wavefront_ratio(), 1.1) << gguf::type_traits(t).name;
    EXPECT_GT(c.stats.by_class[size_t(emu::InstClass::Dp4a)], 0u) << gguf::type_traits(t).name;
    EXPECT_LE(conv, 1.25 * q4k_conv) << gguf::type_traits(t).name << ": a conversion per weight?";
  }
  const Counted f32 = count(shape(4096, GgmlType::Q5_K, 1056, true, false));
  EXPECT_GT(1024.0 * double(f32.stats.by_class[size_t(emu::InstClass::Cvt)]) / (4096.0 * 1056), 32.0)
      << "negative control: the f32 input converts every weight";
}

// F16 and BF16 (the f32 input) at Llama-3-8B's QKV width (4096 columns,
// 1056 rows, 8 per block, the norm fused), projected on an H100 SXM from
// the counts (engine/projection.h's launch terms, as `ptxlm bench` counted
// mode builds them): DRAM binds. Each weight is converted once (F16: one
// cvt.f32.f16, 32 warp conversions per 1024 weights; BF16: none, an integer
// shift or mask) and multiplied by one f32 FMA; the lanes' 16-byte loads
// keep 4 KiB in flight per warp wait. Printed: warp instructions per weight
// byte, conversions and integer-pipe instructions per 1024 weights, shared
// wavefronts / ideal, bytes in flight per wait, and each limit in µs.
TEST(GemvCounts, SixteenBitFloatsAreDramBoundOnAnH100) {
  const GpuSpec gpu = *find_gpu("h100-sxm");
  for (GgmlType t : {GgmlType::F16, GgmlType::BF16}) {
    const kx::GemvShape s = shape(4096, t, 1056, true, false);
    const ptx::LaunchGeometry geo = kx::gemv_geometry(s);
    const Counted c = count(s);
    const emu::Stats& st = c.stats;
    auto cls = [&](emu::InstClass k) { return double(st.by_class[size_t(k)]); };
    const LaunchCost l = counted_launch_cost(nlohmann::json::parse(st.to_json()), geo.grid.x, geo.block.x, 1);
    const LaunchTerms lt = launch_terms(l, gpu);
    const double bytes = double(c.weight_bytes), weights = 4096.0 * 1056;
    std::printf("[gemv counts] %-4s n_in 4096, 1056 rows: warp instructions per weight byte %.4f; per 1024 weights: "
                "conversions %.2f, integer-pipe %.2f, fp32 %.2f; shared wavefronts / ideal %.3f; bytes in flight per "
                "wait %.0f (max %llu)\n",
                gguf::type_traits(t).name, double(st.warp_instructions) / bytes, 1024.0 * cls(emu::InstClass::Cvt) / weights,
                1024.0 * l.pipe[size_t(Pipe::Int)] / weights, 1024.0 * cls(emu::InstClass::Fp) / weights,
                st.shared_wavefront_ratio(), st.inflight_bytes_avg(), (unsigned long long)st.inflight_bytes_max);
    std::printf("[gemv counts] %-4s projected on an H100 SXM (µs): dram %.2f (+ start %.2f), latency %.2f, issue %.2f, "
                "shared %.2f, fp32 %.2f, int %.2f, cvt %.2f: bound by %s\n",
                gguf::type_traits(t).name, lt.dram, lt.start, lt.latency, lt.issue, lt.shared,
                lt.pipe[size_t(Pipe::Fp32)], lt.pipe[size_t(Pipe::Int)], lt.pipe[size_t(Pipe::Cvt)], lt.bound_by().c_str());
    EXPECT_EQ(lt.bound_by(), "dram") << gguf::type_traits(t).name;
    EXPECT_GE(st.inflight_bytes_max, 4096u);
    EXPECT_LE(st.shared_wavefront_ratio(), 1.1) << gguf::type_traits(t).name;
    // Conversions: F16 one per weight (32 per 1024 at warp level) and the staging's few; BF16 only the staging's.
    const double conv = 1024.0 * cls(emu::InstClass::Cvt) / weights;
    if (t == GgmlType::F16) EXPECT_LE(conv, 34.0);
    else EXPECT_LE(conv, 2.0);
  }
}

}  // namespace

namespace {

// N input columns read every weight byte once: a launch with N columns
// requests N times the input bytes of one (each block stages every column,
// in whole 256s, and the norm weight once for all; the residual of each)
// and at most the weight bytes of one (fewer where more columns take one
// unrolled step and re-read no clamped block), at Llama-3-8B's QKV width and its down
// projection's, for both K-types and a 32-element type; its shared-memory
// wavefronts stay within 1.1x the ideal. The weights' requests are at least
// the matrix's bytes (the subtraction leaves them whole). Printed: warp
// instructions per weight byte per column (what a batch amortises).
TEST(GemvCounts, InputColumnsShareEveryWeightRead) {
  for (const auto& [t, n_in, rows, norm] :
       {std::tuple{GgmlType::Q4_K, 4096u, 1056u, true}, std::tuple{GgmlType::Q6_K, 14336u, 264u, false},
        std::tuple{GgmlType::Q8_0, 576u, 1056u, true}}) {
    const kx::GemvShape one = shape(n_in, t, rows, norm, true);
    const Counted c1 = count(one);
    const ptx::LaunchGeometry geo = kx::gemv_geometry(one);
    const uint32_t blocks = geo.grid.x;
    // The staging's round trips (emu's prologue waits: before the first
    // barrier): a warp waits once per iteration of its staging loop, whose
    // loads cover up to 4 of its 256-chunks of one column, 2 of 2 columns,
    // or one chunk of up to 8 columns from 3 on: not once per column.
    auto staging_waits = [&](uint32_t n) {
      const uint32_t warps = geo.block.x / 32, nc = (n_in + 255) / 256;
      uint64_t waits = 0;
      for (uint32_t c0 = 0; c0 < n; c0 += 8) {
        const uint32_t group = std::min(8u, n - c0), unroll = std::min(std::max(4 / group, 1u), (nc + warps - 1) / warps);
        for (uint32_t w = 0; w < std::min(warps, nc); ++w) waits += ((nc - w + warps - 1) / warps + unroll - 1) / unroll;
      }
      return waits * blocks;
    };
    EXPECT_EQ(c1.stats.prologue_waits, staging_waits(1)) << gguf::type_traits(t).name;
    // Input bytes of n columns: each block stages every column and the norm
    // weight once (whole 256s: lanes past n_in read element 0); the residual's old values.
    const uint64_t staged = uint64_t(blocks) * ((n_in + 255) / 256 * 256) * 4;
    auto input_bytes = [&](uint64_t n) { return staged * (n + (norm ? 1 : 0)) + (norm ? 0 : n * rows * 4); };
    const uint64_t one_input = input_bytes(1);
    ASSERT_GT(c1.stats.global_load_bytes, one_input);
    const gguf::TypeTraits& tt = gguf::type_traits(t);
    const uint64_t matrix = uint64_t(rows) * n_in / tt.block_elems * tt.block_bytes;   // unpadded
    const uint64_t weights_read = c1.stats.global_load_bytes - one_input;
    EXPECT_GE(weights_read, matrix);
    for (uint32_t n : {4u, 8u}) {
      const Counted cn = count(shape(n_in, t, rows, norm, true, n));
      ASSERT_GT(cn.stats.global_load_bytes, input_bytes(n));
      const uint64_t weights_n = cn.stats.global_load_bytes - input_bytes(n);
      EXPECT_LE(weights_n, weights_read) << tt.name << " N " << n;
      EXPECT_GE(weights_n, matrix) << tt.name << " N " << n;
      EXPECT_LE(cn.stats.shared_wavefront_ratio(), 1.1) << tt.name << " N " << n;
      EXPECT_EQ(cn.stats.prologue_waits, staging_waits(n)) << tt.name << " N " << n;
      std::printf("[gemv counts] %s n_in %u, N = %u: weight bytes requested %.3fx the matrix; warp instructions per weight "
                  "byte per column %.4f (N = 1: %.4f); shared wavefronts / ideal %.3f\n",
                  tt.name, n_in, n, double(weights_n) / double(matrix),
                  double(cn.stats.warp_instructions) / double(cn.weight_bytes) / n,
                  double(c1.stats.warp_instructions) / double(c1.weight_bytes), cn.stats.shared_wavefront_ratio());
    }
  }
}

// The weight prefetch (--gpu-prefetch) asks for what gemv_prefetch_bytes
// says, which the projection charges: a QKV-like GEMV of three segments
// (blocks starting in one segment prefetch only its rows), a matrix whose
// last block is partial, both inputs. Negative control: no prefetch without
// Target::prefetch, and the count moves with the rows.
TEST(GemvCounts, PrefetchAsksForWhatThePlanSays) {
  ptx::Target t;
  t.prefetch = true;
  kx::GemvShape qkv = shape(2048, GgmlType::Q4_K, 2048, true, true);
  qkv.accumulate = false;
  qkv.segments.push_back({GgmlType::Q4_K, 512});
  qkv.segments.push_back({GgmlType::Q6_K, 512});
  for (const kx::GemvShape& s : {qkv, shape(4096, GgmlType::Q6_K, 1000, false, true), shape(576, GgmlType::Q8_0, 49, true, false)}) {
    const uint64_t planned = kx::gemv_prefetch_bytes(s);
    EXPECT_GT(planned, 0u);
    EXPECT_EQ(count(s, t).stats.prefetch_bytes, planned) << kx::gemv_kernel(s).name;
    EXPECT_EQ(count(s).stats.prefetch_bytes, 0u);
  }
  EXPECT_NE(kx::gemv_prefetch_bytes(shape(576, GgmlType::Q8_0, 49, true, false)),
            kx::gemv_prefetch_bytes(shape(576, GgmlType::Q8_0, 17, true, false)));
}

}  // namespace
