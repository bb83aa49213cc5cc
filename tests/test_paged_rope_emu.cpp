// RoPE + append into pages (kernels/decode/paged_rope) on emu against
// paged_rope_reference's f32 mirror (engine/cuda/paged_attention_reference):
// bit-equal (q with a temperature within lg2.approx's bound under hardware
// variance), over a batch with a page's first and
// last slots, a shared page, a prompt chunk and an unused row; the whole
// pools checked (a sentinel everywhere no row owns). Negative controls: a
// wrong page id, the reference one position ahead. End to end: today's
// attention_kernel against paged_rope -> paged_attention over 20 decode steps.
//
// Counts: the op's distinct bytes, waits and dependent loads at Llama-3-8B's,
// Qwen2.5's and Gemma-4-E2B's heads, and the H100 SXM projection
// (tests/paged_emu_util.h).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "emu/interp.h"
#include "emu/stats.h"
#include "engine/cuda/paged_attention_reference.h"
#include "engine/kv_pool.h"
#include "engine/projection.h"
#include "gguf/f16.h"
#include "kernels/decode/attention.h"
#include "kernels/decode/paged_attention.h"
#include "kernels/decode/paged_rope.h"
#include "tests/emu_cuda_fixture.h"
#include "tests/paged_emu_util.h"

namespace {

using namespace ptxlm;
using namespace ptxlm::paged_test;
namespace kx = ptxlm::kernels;
using ptx::DevPtr;

bool variance_mode() {
  const char* v = std::getenv("PTXLM_EMU_VARIANCE");
  return v && std::string(v) == "1";
}

constexpr uint16_t kSentinel16 = 0x5a5a;   // an f16 no row of the op can hold by chance

struct RopeResult {
  size_t q_bad = 0, q_inexact = 0;   // q_rot values outside the tolerance; not bit-equal to the mirror
  size_t kv_bad = 0;                 // written K/V elements not bit-equal to the reference
  size_t stray = 0;                  // pool elements changed that no row owns
  double q_worst = 0, q_max_err = 0; // the largest q error as a share of its tolerance; absolute
  bool untouched = true;             // an unused row's q_rot left as it was
};

class PagedRopeOnEmu : public testing_util::EmuCudaTest {
protected:
  // Launches the op on `run_tables` (the reference's `tables` unless a
  // negative control) and checks q_rot and both whole pools against the
  // reference at every row's position plus `ref_shift`.
  RopeResult run(const kx::PagedRopeShape& s, uint32_t n_pages, const std::vector<uint32_t>& tables,
                 const std::vector<uint32_t>& pos, const std::vector<uint32_t>& row,
                 const std::vector<uint32_t>* run_tables = nullptr, uint32_t ref_shift = 0) {
    const uint32_t hd = s.head_dim, T = s.tokens, nkv = s.n_head_kv;
    const bool quiet = run_tables || ref_shift;
    cuda::PagedRopeInputs in;
    in.q = randv(size_t(T) * s.n_head * hd, 1.0f);
    in.k = randv(size_t(T) * nkv * hd, 1.0f);
    in.v = randv(in.k.size(), 1.0f);
    if (s.bias) in.bq = randv(size_t(s.n_head) * hd, 0.5f), in.bk = randv(size_t(nkv) * hd, 0.5f), in.bv = randv(size_t(nkv) * hd, 0.5f);
    if (s.qk_norm) in.q_norm = randv(hd, 0.2f), in.k_norm = randv(hd, 0.2f);
    uint32_t n_ctx = 1;
    for (uint32_t p : pos)
      if (p != kUnused) n_ctx = std::max(n_ctx, p + 2);
    in.rope = testing_util::rope_table(n_ctx, s.rot(), 10000.0);
    in.tables = tables;
    in.pos = pos;
    in.row = row;
    const size_t pool = size_t(n_pages) * nkv * s.page_size * hd;
    const float sentinel = 12345.0f;
    std::vector<uint32_t> tokv;
    for (uint32_t t = 0; t < T; ++t) tokv.push_back(pos[t]), tokv.push_back(row[t]);
    auto dtok = upload(tokv), dtab = upload(run_tables ? *run_tables : tables), dq = upload(in.q), dk = upload(in.k),
         dv = upload(in.v), drope = upload(in.rope);
    auto dbq = upload(s.bias ? in.bq : in.q), dbk = upload(s.bias ? in.bk : in.k), dbv = upload(s.bias ? in.bv : in.v);
    auto dqn = upload(s.qk_norm ? in.q_norm : in.q), dkn = upload(s.qk_norm ? in.k_norm : in.q);
    auto dkp = upload(std::vector<uint16_t>(pool, kSentinel16)), dvp = upload(std::vector<uint16_t>(pool, kSentinel16));
    auto dout = upload(std::vector<float>(in.q.size(), sentinel));
    std::vector<ptx::ParamValue> args = {DevPtr{dtok.ptr()}, DevPtr{dtab.ptr()}, DevPtr{dq.ptr()}, DevPtr{dk.ptr()},
                                         DevPtr{dv.ptr()}};
    if (s.bias) args.insert(args.end(), {DevPtr{dbq.ptr()}, DevPtr{dbk.ptr()}, DevPtr{dbv.ptr()}});
    if (s.qk_norm) args.insert(args.end(), {DevPtr{dqn.ptr()}, DevPtr{dkn.ptr()}});
    args.insert(args.end(), {DevPtr{drope.ptr()}, DevPtr{dkp.ptr()}, DevPtr{dvp.ptr()}, DevPtr{dout.ptr()}});
    launch(kx::paged_rope_kernel(s), args);
    const std::vector<float> out = download<float>(dout, in.q.size());
    const std::vector<uint16_t> gk = download<uint16_t>(dkp, pool), gv = download<uint16_t>(dvp, pool);

    if (ref_shift)
      for (uint32_t& p : in.pos)
        if (p != kUnused) p += ref_shift;
    const cuda::PagedRopeExpected e = cuda::paged_rope_reference(s, in);
    RopeResult r;
    for (size_t i = 0; i < out.size(); ++i) {
      if (e.q[i].tol < 0) {
        r.untouched &= out[i] == sentinel;
        continue;
      }
      const double err = std::fabs(out[i] - e.q[i].value);
      r.q_max_err = std::max(r.q_max_err, err);
      r.q_worst = std::max(r.q_worst, e.q[i].tol > 0 ? err / e.q[i].tol : (err > 0 ? 1e30 : 0.0));
      r.q_inexact += out[i] != float(e.q[i].value);
      if (!(err <= e.q[i].tol) && r.q_bad++ < 3 && !quiet)
        ADD_FAILURE() << "q_rot row " << i / (s.n_head * hd) << ", head " << i / hd % s.n_head << " [" << i % hd
                      << "]: " << out[i] << " vs " << e.q[i].value << " (tolerance " << e.q[i].tol << ")";
    }
    // Every pool element: a row's slot holds its K/V, everything else the sentinel.
    const cuda::PagedRopePools pools = cuda::paged_rope_check_pools(s, e, gk, gv, kSentinel16);
    r.kv_bad = pools.kv_bad;
    r.stray = pools.stray;
    if (!quiet)
      for (const auto& [i, o] : pools.first_bad)
        ADD_FAILURE() << "pool element " << i << ": K " << f16_to_f32(gk[i]) << " vs " << f16_to_f32(e.k_bits[o])
                      << ", V " << f16_to_f32(gv[i]) << " vs " << f16_to_f32(e.v_bits[o]);
    return r;
  }

  // A batch over three sequences on pages of 16 (the first two share their
  // first page, a prefix): row 0 at pos 0 (a page's first slot), row 1 at 15
  // (its last slot, in the shared page), row 2 at 16 (the next page's first),
  // rows 3..5 a prompt chunk at 37..39 (adjacent slots of one page), row 6
  // unused, row 7 at 5 (the shared page again, another slot).
  struct Batch {
    uint32_t n_pages = 12, max_pages = 4;
    std::vector<uint32_t> tables, pos, row;
  };
  Batch batch() {
    Batch b;
    b.tables = {7, 2, 9, 0, 7, 4, 11, 0, 1, 8, 3, 6};   // rows 0 and 1 share page 7; pages 5 and 10 free
    b.pos = {0, 15, 16, 37, 38, 39, kUnused, 5};
    b.row = {0, 1, 1, 2, 2, 2, 0, 0};
    return b;
  }

  void expect_good(kx::PagedRopeShape s, const char* what) {
    const Batch b = batch();
    s.max_pages = b.max_pages;
    s.tokens = uint32_t(b.pos.size());
    const RopeResult r = run(s, b.n_pages, b.tables, b.pos, b.row);
    std::printf("[paged rope] %s: %u/%u heads, hd %u, n_rot %u, %s%s%s%s: q_rot max error %.3g (%.3g of the "
                "tolerance), %zu of q_rot not bit-equal to the mirrored reference\n",
                what, s.n_head, s.n_head_kv, s.head_dim, s.rot(), s.neox ? "neox" : "normal", s.bias ? ", bias" : "",
                s.qk_norm ? ", qk_norm" : "", s.temp_scale != 0 ? ", temperature" : "", r.q_max_err, r.q_worst,
                r.q_inexact);
    EXPECT_EQ(r.q_bad, 0u) << what;
    EXPECT_EQ(r.kv_bad, 0u) << what << ": K/V not bit-equal";
    EXPECT_EQ(r.stray, 0u) << what << ": pool slots no row owns were written";
    EXPECT_TRUE(r.untouched) << what << ": an unused row's q_rot was written";
    // Everything is .rn but the temperature's lg2.approx: q is bit-equal
    // without one, and on emu without hardware variance (libm's log2f) with one.
    if (!variance_mode() || s.temp_scale == 0) {
      EXPECT_EQ(r.q_inexact, 0u) << what;
    }
  }
};

// Llama-like: interleaved pairs, Mistral 3's temperature (floor 8: the rows
// at 37..39 see factor ln(5) + ..., row 0 none).
TEST_F(PagedRopeOnEmu, NormalPairsWithTemperature) {
  expect_good({.n_head = 8, .n_head_kv = 2, .head_dim = 128, .scale = 0.088f, .temp_scale = 0.1f, .temp_floor = 8},
              "llama + temperature");
}
// qwen2 / gemma3 pieces together: NEOX, biases, q/k norms, partial rotary
// (96 of 128: the second 32 pairs of a lane half rotated), temperature.
TEST_F(PagedRopeOnEmu, NeoxBiasNormPartialRotary) {
  expect_good({.n_head = 8, .n_head_kv = 2, .head_dim = 128, .n_rot = 96, .scale = 0.088f, .neox = true, .bias = true,
               .qk_norm = true, .temp_scale = 0.1f, .temp_floor = 8},
              "neox, bias, qk_norm, n_rot 96");
}
// Interleaved pairs with partial rotary inside the first 32 pairs (n_rot 32 of
// 64), biases and norms; and half the head rotated (a whole slot unrotated).
TEST_F(PagedRopeOnEmu, NormalPairsPartialRotary) {
  expect_good({.n_head = 4, .n_head_kv = 4, .head_dim = 64, .n_rot = 32, .scale = 0.125f, .bias = true, .qk_norm = true},
              "normal, bias, qk_norm, n_rot 32");
  expect_good({.n_head = 8, .n_head_kv = 2, .head_dim = 128, .n_rot = 64, .scale = 0.088f}, "normal, n_rot 64");
}
// gemma3's head 256 with norms (a group of 8), Phi-3/4-mini's head 96 with
// n_rot 72 (48 pairs: a lane's second slot only half a head's), and head 32
// (16 pairs: half a warp).
TEST_F(PagedRopeOnEmu, HeadDims256And96) {
  expect_good({.n_head = 8, .n_head_kv = 1, .head_dim = 256, .scale = 0.0625f, .neox = true, .qk_norm = true},
              "gemma3 head 256");
  expect_good({.n_head = 6, .n_head_kv = 2, .head_dim = 96, .n_rot = 72, .scale = 0.102f, .neox = true, .qk_norm = true},
              "phi head 96, n_rot 72");
  expect_good({.n_head = 4, .n_head_kv = 2, .head_dim = 32, .scale = 0.177f, .qk_norm = true}, "head 32 (16 pairs)");
}

// Negative controls: the kernel given a table with one wrong page id (row 2's
// second page), and the reference one position ahead.
TEST_F(PagedRopeOnEmu, WrongPageOrPositionFails) {
  kx::PagedRopeShape s{.n_head = 8, .n_head_kv = 2, .head_dim = 128, .n_rot = 96, .scale = 0.088f, .neox = true,
                       .bias = true, .qk_norm = true, .temp_scale = 0.1f, .temp_floor = 8};
  const Batch b = batch();
  s.max_pages = b.max_pages;
  s.tokens = uint32_t(b.pos.size());
  std::vector<uint32_t> wrong = b.tables;
  wrong[2 * b.max_pages + 2] = 5;   // row 2's page of positions 32..47: a free page
  const RopeResult w = run(s, b.n_pages, b.tables, b.pos, b.row, &wrong);
  std::printf("[paged rope] negative control (a wrong page id): %zu K/V elements missing from their slots, %zu written "
              "to slots no row owns\n", w.kv_bad, w.stray);
  EXPECT_GT(w.kv_bad, 0u);
  EXPECT_GT(w.stray, 0u);
  EXPECT_EQ(w.q_bad, 0u) << "q_rot does not depend on the page";
  const RopeResult p = run(s, b.n_pages, b.tables, b.pos, b.row, nullptr, 1);
  std::printf("[paged rope] negative control (the reference one position ahead): %zu q_rot values outside, worst %.3g "
              "of the tolerance (max error %.3g); %zu K/V elements not bit-equal\n", p.q_bad, p.q_worst, p.q_max_err, p.kv_bad);
  EXPECT_GT(p.q_worst, 1e3);
  EXPECT_GT(p.kv_bad, 0u);
}

// The op's counts per family's heads, one decode row and a batch of 16 at
// scattered depths: distinct bytes against what the op must move (q, k, v
// in, their biases and norm weights once; each row's cos/sin row,
// descriptor and page id; q_rot, K and V out), waits per warp (every load
// of a head issued before the first use of any: the descriptor's round
// trip, then the page id's and cos/sin's), the dependent load chain
// (descriptor, then page id), and the H100 SXM projection from
// engine/projection's terms. Llama-3-8B (32/8 heads of 128), qwen2's biases
// (Qwen2.5-7B: 28/4), Gemma-4-E2B's full-attention heads (8/1 of 512: q/k
// norms, V's norm, 8 pairs a lane) and its shared-KV layers (q only).
TEST(PagedRopeCounts, TwoRoundTripsPerWarpOnEveryFamilysHeads) {
  struct Case {
    const char* what;
    kx::PagedRopeShape s;
  };
  const uint32_t ps = 16, max_pages = 512;
  const Case cases[] = {
      {"Llama-3-8B", {.n_head = 32, .n_head_kv = 8, .head_dim = 128, .scale = 0.088f}},
      {"Qwen2.5-7B, biases", {.n_head = 28, .n_head_kv = 4, .head_dim = 128, .scale = 0.088f, .neox = true, .bias = true}},
      {"Gemma-4-E2B full", {.n_head = 8, .n_head_kv = 1, .head_dim = 512, .scale = 1.0f, .neox = true, .qk_norm = true,
                            .v_norm = true}},
      {"Gemma-4-E2B shared KV", {.n_head = 8, .n_head_kv = 1, .head_dim = 512, .scale = 1.0f, .neox = true,
                                 .qk_norm = true, .v_norm = true, .q_only = true}},
  };
  std::mt19937 rng(5);
  for (const Case& cs : cases)
    for (uint32_t T : {1u, 16u}) {
      kx::PagedRopeShape s = cs.s;
      s.max_pages = max_pages;
      s.tokens = T;
      const uint32_t nh = s.n_head, nkv = s.q_only ? 0 : s.n_head_kv, hd = s.head_dim;
      std::vector<uint32_t> tok, tables(size_t(T) * max_pages, KvPool::kNoPage);
      for (uint32_t t = 0; t < T; ++t) {
        const uint32_t pos = (t * 977u + 4096u) % 8000u;
        tok.push_back(pos), tok.push_back(t);
        tables[size_t(t) * max_pages + pos / ps] = t;
      }
      std::normal_distribution<float> nd(0.0f, 1.0f);
      auto rnd = [&](size_t n) {
        std::vector<float> v(n);
        for (float& x : v) x = nd(rng);
        return v;
      };
      const std::vector<float> q = rnd(size_t(T) * nh * hd), kv = rnd(size_t(T) * s.n_head_kv * hd),
                               rope = rnd(size_t(8192) * hd), bq = rnd(size_t(nh) * hd),
                               bkv = rnd(size_t(s.n_head_kv) * hd), w = rnd(hd);
      const std::vector<uint16_t> pool(size_t(T) * s.n_head_kv * ps * hd, 0);
      std::vector<std::vector<uint8_t>> bufs = {bytes_of(tok), bytes_of(tables), bytes_of(q), bytes_of(kv), bytes_of(kv)};
      if (s.bias) bufs.insert(bufs.end(), {bytes_of(bq), bytes_of(bkv), bytes_of(bkv)});
      if (s.qk_norm) bufs.insert(bufs.end(), {bytes_of(w), bytes_of(w)});
      bufs.insert(bufs.end(), {bytes_of(rope), bytes_of(pool), bytes_of(pool), bytes_of(q)});
      const Counted c = count(kx::paged_rope_kernel(s), bufs);
      const uint64_t warps = uint64_t(T) * s.units();
      // Once per launch: the biases and norm weights; per row: q, k, v in,
      // the cos/sin row, descriptor and page id, q_rot, K, V out.
      const double once = (s.bias ? double(nh + 2 * nkv) * hd * 4 : 0) + (s.qk_norm ? (nkv ? 2.0 : 1.0) * hd * 4 : 0);
      const double need = once + double(T) * ((nh + 2 * nkv) * hd * 4 + s.rot() / 2 * 8 + 8 + (nkv ? 4 : 0) +
                                              nh * hd * 4 + 2 * nkv * hd * 2);
      const uint64_t blocks = uint64_t(T) * ((s.units() + kx::kPagedRopeWarps - 1) / kx::kPagedRopeWarps);
      const Summary m = summarize(c.stats, 0, blocks, 0, 32 * kx::kPagedRopeWarps, 16);
      const double waits = double(c.stats.inflight_batches) / double(warps);
      std::printf("[paged rope counts] %s, %u rows: %.1f KB touched (%.3fx what the op must move), %.2f waits per "
                  "warp, dependent load chain %llu, %.1f warp instructions per warp; H100 SXM projected %.2f us (%s)\n",
                  cs.what, T, c.stats.unique_global_bytes / 1e3, c.stats.unique_global_bytes / need, waits,
                  (unsigned long long)c.stats.dependent_load_chain_max,
                  double(c.stats.warp_instructions) / double(warps), m.us, m.terms.bound_by().c_str());
      EXPECT_LE(double(c.stats.unique_global_bytes), 1.02 * need) << cs.what << ", " << T;
      EXPECT_GE(double(c.stats.unique_global_bytes), need) << cs.what << ", " << T;
      EXPECT_LE(c.stats.dependent_load_chain_max, 2u) << cs.what << ": descriptor, then page id / cos-sin";
      EXPECT_LE(waits, 2.0) << cs.what << ", " << T << ": two round trips per warp";
    }
}

TEST(PagedRope, RefusesShapesItCannotRun) {
  EXPECT_THROW(kx::paged_rope_kernel({.n_head = 9, .n_head_kv = 4, .head_dim = 64, .max_pages = 8}), ptx::Error);
  EXPECT_THROW(kx::paged_rope_kernel({.n_head = 4, .n_head_kv = 4, .head_dim = 80, .max_pages = 8}), ptx::Error);
  EXPECT_THROW(kx::paged_rope_kernel({.n_head = 4, .n_head_kv = 4, .head_dim = 64, .n_rot = 33, .max_pages = 8}),
               ptx::Error);
  EXPECT_THROW(kx::paged_rope_kernel({.n_head = 4, .n_head_kv = 4, .head_dim = 64, .n_rot = 66, .max_pages = 8}),
               ptx::Error);
  EXPECT_THROW(kx::paged_rope_kernel({.n_head = 4, .n_head_kv = 4, .head_dim = 64, .page_size = 24, .max_pages = 8}),
               ptx::Error);
  EXPECT_THROW(kx::paged_rope_kernel({.n_head = 4, .n_head_kv = 4, .head_dim = 64, .max_pages = 8, .temp_scale = 0.1f}),
               ptx::Error);
}

// End to end, one sequence over decode steps 0..steps-1: today's
// attention_kernel (contiguous cache, its own RoPE and append) against the
// chain paged_rope -> paged_attention on the same q/k/v at each step, so
// every earlier step's K/V is read back from the pages the op wrote (pages
// of 16 in a shuffled order, crossing a page boundary; the pools start NaN so
// a slot read before it is written shows). Checked: the appended K/V slot
// bit-equal to today's cache row, and the outputs within the sum of the two
// kernels' reference bounds. Negative control: at the last step the paged
// attention one position short (the token's own K/V left out).
class PagedChainOnEmu : public testing_util::EmuCudaTest {
protected:
  struct Loaded {
    std::unique_ptr<cuda::Module> m;
    ptx::GeneratedKernel g;
  };
  Loaded load(ptx::GeneratedKernel g) {
    Loaded l{std::make_unique<cuda::Module>(*ctx_, g.ptx), std::move(g)};
    return l;
  }
  void go(const Loaded& l, const std::vector<ptx::ParamValue>& args) {
    cuda::Stream st(*ctx_);
    ptx::ParamPack pack = l.g.params.pack(args);
    cuda::launch(l.m->function(l.g.name), l.g.geometry, st, pack);
    st.synchronize();
  }

  void chain(const kx::AttentionShape& a, uint32_t steps, const char* what) {
    const uint32_t hd = a.head_dim, nkv = a.n_head_kv, kv = nkv * hd, ps = 16, max_pages = a.n_ctx / ps, n_pages = max_pages + 3;
    kx::PagedRopeShape r{.n_head = a.n_head, .n_head_kv = nkv, .head_dim = hd, .n_rot = a.n_rot, .page_size = ps,
                         .max_pages = max_pages,
                         .tokens = 1, .scale = a.scale, .neox = a.neox, .bias = a.bias, .qk_norm = a.qk_norm, .eps = a.eps,
                         .temp_scale = a.temp_scale, .temp_floor = a.temp_floor};
    kx::PagedAttentionShape p{a.n_head, nkv, hd, ps, max_pages, 1, 4, a.window};
    const Loaded today = load(kx::attention_kernel(a)), rope = load(kx::paged_rope_kernel(r)),
                 paged = load(kx::paged_attention_kernel(p));
    std::vector<uint32_t> table(max_pages);
    for (uint32_t i = 0; i < max_pages; ++i) table[i] = (i * 5 + 3) % n_pages;   // scattered, each once
    const std::vector<float> rope_t = testing_util::rope_table(a.n_ctx, a.rot(), 10000.0);
    std::vector<float> bq, bk, bv, qn, kn;
    if (a.bias) bq = randv(size_t(a.n_head) * hd, 0.5f), bk = randv(kv, 0.5f), bv = randv(kv, 0.5f);
    if (a.qk_norm) qn = randv(hd, 0.2f), kn = randv(hd, 0.2f);
    const std::vector<float> dummy(hd, 0.0f);
    auto drope = upload(rope_t), dtab = upload(table);
    auto dbq = upload(a.bias ? bq : dummy), dbk = upload(a.bias ? bk : dummy), dbv = upload(a.bias ? bv : dummy);
    auto dqn = upload(a.qk_norm ? qn : dummy), dkn = upload(a.qk_norm ? kn : dummy);
    auto dkc = upload(std::vector<uint16_t>(size_t(a.n_ctx) * kv, kNaN16)), dvc = upload(std::vector<uint16_t>(size_t(a.n_ctx) * kv, kNaN16));
    const size_t pool = size_t(n_pages) * nkv * ps * hd;
    auto dkp = upload(std::vector<uint16_t>(pool, kNaN16)), dvp = upload(std::vector<uint16_t>(pool, kNaN16));
    auto dpart = upload(std::vector<float>(size_t(a.n_head) * a.splits() * (hd + 2), 0.0f));
    auto dsync = upload(std::vector<uint32_t>(a.n_head, 0u));
    auto dppart = upload(std::vector<float>(size_t(a.n_head) * p.splits * (hd + 4), 0.0f));
    auto dpsync = upload(std::vector<uint32_t>(nkv, 0u));
    auto dout = upload(std::vector<float>(size_t(a.n_head) * hd, 0.0f)), dout2 = upload(std::vector<float>(size_t(a.n_head) * hd, 0.0f));
    auto dqrot = upload(std::vector<float>(size_t(a.n_head) * hd, 0.0f));
    double worst = 0, max_diff = 0;
    size_t bad = 0, kv_inexact = 0;
    double short_worst = 0;   // the negative control
    for (uint32_t pos = 0; pos < steps; ++pos) {
      const std::vector<float> q = randv(size_t(a.n_head) * hd, 1.0f), k = randv(kv, 1.0f), v = randv(kv, 1.0f);
      auto dq = upload(q), dk = upload(k), dv = upload(v), dpos = upload(std::vector<uint32_t>{pos}),
           dtok = upload(std::vector<uint32_t>{pos, 0u});
      std::vector<ptx::ParamValue> ta = {DevPtr{dq.ptr()}, DevPtr{dk.ptr()}, DevPtr{dv.ptr()}};
      std::vector<ptx::ParamValue> ra = {DevPtr{dtok.ptr()}, DevPtr{dtab.ptr()}, DevPtr{dq.ptr()}, DevPtr{dk.ptr()}, DevPtr{dv.ptr()}};
      for (auto* args : {&ta, &ra}) {
        if (a.bias) args->insert(args->end(), {DevPtr{dbq.ptr()}, DevPtr{dbk.ptr()}, DevPtr{dbv.ptr()}});
        if (a.qk_norm) args->insert(args->end(), {DevPtr{dqn.ptr()}, DevPtr{dkn.ptr()}});
      }
      ta.insert(ta.end(), {DevPtr{drope.ptr()}, DevPtr{dpos.ptr()}, DevPtr{dkc.ptr()}, DevPtr{dvc.ptr()},
                           DevPtr{dpart.ptr()}, DevPtr{dsync.ptr()}, DevPtr{dout.ptr()}});
      ra.insert(ra.end(), {DevPtr{drope.ptr()}, DevPtr{dkp.ptr()}, DevPtr{dvp.ptr()}, DevPtr{dqrot.ptr()}});
      go(today, ta);
      go(rope, ra);
      go(paged, {DevPtr{dtok.ptr()}, DevPtr{dtab.ptr()}, DevPtr{dqrot.ptr()}, DevPtr{dkp.ptr()}, DevPtr{dvp.ptr()},
                 DevPtr{dppart.ptr()}, DevPtr{dpsync.ptr()}, DevPtr{dout2.ptr()}});
      const std::vector<float> o1 = download<float>(dout, q.size()), o2 = download<float>(dout2, q.size());
      const std::vector<uint16_t> kc = download<uint16_t>(dkc, size_t(a.n_ctx) * kv), vc = download<uint16_t>(dvc, kc.size());
      const std::vector<uint16_t> kp = download<uint16_t>(dkp, pool), vp = download<uint16_t>(dvp, pool);
      // The appended slot against today's cache row.
      for (uint32_t g = 0; g < nkv; ++g)
        for (uint32_t i = 0; i < hd; ++i) {
          const size_t pi = ((size_t(table[pos / ps]) * nkv + g) * ps + pos % ps) * hd + i, ci = size_t(pos) * kv + g * hd + i;
          kv_inexact += kp[pi] != kc[ci] || vp[pi] != vc[ci];
        }
      // Both kernels' bounds against their double references.
      cuda::AttentionInputs ai;
      ai.q = q, ai.k = k, ai.v = v, ai.bq = bq, ai.bk = bk, ai.bv = bv, ai.q_norm = qn, ai.k_norm = kn, ai.rope = rope_t;
      ai.k_cache = kc, ai.v_cache = vc, ai.pos = pos;
      ai.own_k.assign(kc.begin() + long(pos) * kv, kc.begin() + long(pos + 1) * kv);
      const cuda::AttentionExpected et = cuda::attention_reference(a, ai);
      cuda::PagedAttentionInputs pi;
      pi.q = download<float>(dqrot, q.size()), pi.k_pool = kp, pi.v_pool = vp, pi.tables = table, pi.pos = {pos}, pi.row = {0};
      const std::vector<cuda::Checked> ep = cuda::paged_attention_reference(p, pi);
      std::vector<float> o3;
      if (pos + 1 == steps) {   // the negative control: the paged attention at pos - 1 with this step's q
        auto dshort = upload(std::vector<uint32_t>{pos - 1, 0u});
        go(paged, {DevPtr{dshort.ptr()}, DevPtr{dtab.ptr()}, DevPtr{dqrot.ptr()}, DevPtr{dkp.ptr()}, DevPtr{dvp.ptr()},
                   DevPtr{dppart.ptr()}, DevPtr{dpsync.ptr()}, DevPtr{dout2.ptr()}});
        o3 = download<float>(dout2, q.size());
      }
      for (size_t i = 0; i < o1.size(); ++i) {
        const double d = std::fabs(double(o1[i]) - o2[i]), tol = et.out[i].tol + ep[i].tol;
        if (!o3.empty()) short_worst = std::max(short_worst, std::fabs(double(o1[i]) - o3[i]) / tol);
        max_diff = std::max(max_diff, d);
        worst = std::max(worst, d / tol);
        if (!(d <= tol) && bad++ < 3)
          ADD_FAILURE() << what << ", pos " << pos << " [" << i << "]: today's " << o1[i] << ", paged " << o2[i]
                        << " (bound " << tol << ")";
      }
    }
    std::printf("[paged chain] %s: %u steps, %u/%u heads, hd %u: outputs' max difference %.3g (%.3g of the two kernels' "
                "summed bounds); %zu appended K/V elements not bit-equal to today's cache; negative control (the paged "
                "attention one position short at the last step): %.3g of the bound\n",
                what, steps, a.n_head, nkv, hd, max_diff, worst, kv_inexact, short_worst);
    EXPECT_EQ(bad, 0u) << what;
    EXPECT_EQ(kv_inexact, 0u) << what;
    EXPECT_GT(short_worst, 1.0) << what << ": attention one position short passed";
  }
};

// Llama-like (temperature on); qwen2/gemma3-like (NEOX, biases, norms); and
// partial rotary (n_rot 96 of 128, as attention_kernel now takes it). Today's
// kernel in splits of 8 positions so its reduction runs too; 20 steps cross a
// page.
TEST_F(PagedChainOnEmu, TodaysAttentionAndTheChainAgree) {
  chain({.n_head = 8, .n_head_kv = 2, .head_dim = 128, .n_ctx = 64, .scale = 0.088f, .chunk = 8, .temp_scale = 0.1f,
         .temp_floor = 8},
        20, "llama + temperature");
  chain({.n_head = 4, .n_head_kv = 2, .head_dim = 64, .n_ctx = 64, .scale = 0.125f, .chunk = 8, .neox = true, .bias = true,
         .qk_norm = true},
        20, "neox, bias, qk_norm");
  chain({.n_head = 8, .n_head_kv = 2, .head_dim = 128, .n_ctx = 64, .scale = 0.088f, .chunk = 8, .neox = true,
         .qk_norm = true, .n_rot = 96},
        20, "neox, qk_norm, n_rot 96");
}

}  // namespace
