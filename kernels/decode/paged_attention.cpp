#include "kernels/decode/paged_attention.h"

#include <algorithm>
#include <bit>
#include <limits>
#include <string>
#include <vector>

#include "kernels/decode/util.h"
#include "kernels/examples/common.h"

namespace ptxlm::kernels {

using namespace ptx;

namespace {

constexpr uint32_t kWarps = kPagedAttentionWarps, kThreads = 32 * kWarps;
constexpr uint32_t kMaxSplits = 64;
constexpr double kLog2e = 1.4426950408889634;
constexpr float kNegInf = -std::numeric_limits<float>::infinity();

uint32_t log2u(uint32_t x) { return uint32_t(std::countr_zero(x)); }

// Lanes per K row: hd/8 (8 f16 each) rounded up to a power of two, so that a
// warp load covers whole rows and the butterfly stays within one; at head 96
// a row takes 16 lanes, the last 4 idle (their loads off, their products 0);
// at head 512 the whole warp, each lane two chunks of 8 (chunks_per_lane).
uint32_t lanes_per_row(uint32_t hd) { return std::min(32u, std::bit_ceil(hd / 8)); }
uint32_t chunks_per_lane(uint32_t hd) { return hd > 256 ? hd / 256 : 1; }

void check(const PagedAttentionShape& s) {
  if (s.n_head == 0 || s.n_head_kv == 0 || s.n_head % s.n_head_kv)
    throw Error("paged_attention: n_head must be a positive multiple of n_head_kv");
  if (s.group() > 8) throw Error("paged_attention: at most 8 query heads per KV head");
  if (s.head_dim != 64 && s.head_dim != 96 && s.head_dim != 128 && s.head_dim != 256 && s.head_dim != 512)
    throw Error("paged_attention: head_dim " + std::to_string(s.head_dim) +
                " not supported (64, 96, 128, 256 or 512: the sizes with a test on emu)");
  const uint32_t rows_per_load = 32 / lanes_per_row(s.head_dim);
  if (!std::has_single_bit(s.page_size) || s.page_size < rows_per_load)
    throw Error("paged_attention: page_size must be a power of two of at least " + std::to_string(rows_per_load));
  if (s.max_pages == 0 || uint64_t(s.max_pages) * s.page_size > (1u << 30))
    throw Error("paged_attention: max_pages must be positive and the context under 2^30 positions");
  if (s.tokens == 0 || s.tokens > 65535) throw Error("paged_attention: tokens must be 1..65535");
  if (s.splits == 0 || s.splits > kMaxSplits)
    throw Error("paged_attention: splits must be 1.." + std::to_string(kMaxSplits));
}

}  // namespace

uint32_t paged_attention_splits(uint32_t n_head_kv, uint32_t tokens, uint32_t sms) {
  const uint64_t per = uint64_t(n_head_kv) * std::max(tokens, 1u);
  return uint32_t(std::clamp<uint64_t>(sms / per, 1, kMaxSplits));
}

// Registers per lane grow with the group (its V sums: 8 per head) and with U
// (K and V words, the K row as f32, a score per head and row): U shrinks as
// the group grows so that ptxas keeps everything in registers (test_ptxas).
uint32_t paged_attention_unroll(const PagedAttentionShape& s) {
  const uint32_t g = s.heads_per_block(), rows_per_load = 32 / lanes_per_row(s.head_dim);
  // At head 64 a load covers 4 rows: 4 loads already make a 16-position tile
  // (and ptxas spilled at 8 with a group of 1); at head 512 a row is two
  // loads per lane and twice the f32 K and V sums: a quarter of the rows
  // (ptxas spilled at half on sm_86 and sm_89, a group of 2).
  const uint32_t cpl = chunks_per_lane(s.head_dim);
  const uint32_t u = std::min(g <= 2 ? 8u : g <= 4 ? 4u : 2u, s.head_dim == 64 ? 4u : 8u) / (cpl * cpl);
  return std::max(1u, std::min(u, s.page_size / rows_per_load));   // a tile lies in one page
}

uint32_t paged_attention_tile(const PagedAttentionShape& s) {
  return paged_attention_unroll(s) * (32 / lanes_per_row(s.head_dim));
}

namespace {

// Static shared bytes: q, the chunk's page ids (a chunk of at most the
// context over the splits, in whole tiles, may straddle one page more),
// the warps' (max, sum) and V sums, the reduction's flag.
uint32_t shared_bytes(const PagedAttentionShape& s, uint32_t* pages_max) {
  const uint32_t tile = paged_attention_tile(s);
  const uint64_t ctx = uint64_t(s.max_pages) * s.page_size;
  const uint64_t chunk_max = ((ctx + s.splits - 1) / s.splits + tile - 1) / tile * tile;
  *pages_max = uint32_t(chunk_max / s.page_size + 2);
  const uint32_t g = s.heads_per_block(), hd = s.head_dim;
  return 4 * (g * hd + *pages_max + kWarps * g * 2 + kWarps * g * hd + 1);
}

}  // namespace

LaunchGeometry paged_attention_geometry(const PagedAttentionShape& s) {
  check(s);
  uint32_t pages_max = 0;
  if (shared_bytes(s, &pages_max) > 48 * 1024)
    throw Error("paged_attention: " + std::to_string(pages_max) + " page ids per chunk and the warps' sums need " +
                std::to_string(shared_bytes(s, &pages_max)) + " bytes of shared memory (48 KiB): more splits or larger pages");
  return LaunchGeometry{{s.splits, s.n_head_kv * s.sub_groups(), s.tokens}, {kThreads, 1, 1}, 0};
}

GeneratedKernel paged_attention_kernel(const PagedAttentionShape& s, Target t, const InlineTarget* in) {
  const LaunchGeometry geo = paged_attention_geometry(s);
  // G: the query heads of this block (the group, or a sub-group of it).
  const uint32_t hd = s.head_dim, G = s.heads_per_block(), subs = s.sub_groups(), ps = s.page_size, S = s.splits,
                 nkv = s.n_head_kv;
  const uint32_t lpr = lanes_per_row(hd), rpl = 32 / lpr;   // lanes per row, rows per warp load
  const uint32_t cpl = chunks_per_lane(hd);        // 16-byte chunks of a row per lane: 2 at head 512
  const uint32_t vl = hd / 8;                      // a row's chunks of 8 dims (the shared layout's lanes)
  const uint32_t dpr = vl / cpl;                   // lanes of a row that hold data: lpr but at 96
  const uint32_t ne = 8 * cpl;                     // dims per lane
  const uint32_t U = paged_attention_unroll(s), tile = paged_attention_tile(s);
  uint32_t pages_max = 0;   // page ids of the longest chunk
  shared_bytes(s, &pages_max);
  const uint32_t pstride = (hd + 4) * 4;           // bytes of one split's part
  const uint32_t cols = G * hd / 4;                // float4 columns of the group's output
  const uint32_t col_iters = (cols + kThreads - 1) / kThreads;

  ParamList params;
  params.add_ptr("tokens").add_ptr("tables").add_ptr("q").add_ptr("k_pool").add_ptr("v_pool").add_ptr("part")
      .add_ptr("sync").add_ptr("out");
  std::string name = "paged_attention_" + std::to_string(s.n_head) + "_" + std::to_string(nkv) + "_" +
                     std::to_string(hd) + "_p" + std::to_string(ps) + "_t" + std::to_string(s.tokens) + "_s" +
                     std::to_string(S);
  if (s.window) name += "_w" + std::to_string(s.window);
  if (in && s.tokens != 1) throw Error("paged_attention: inline (the persistent decoder) serves one token row, not " +
                                       std::to_string(s.tokens));
  t.pdl = false;   // launched plainly (see the header)
  // Inline, a thread has 65536 / the decoder's threads registers (its block
  // is the widest op's: 384 or 512 for all but the tiny synthetic models;
  // 128 registers at 512, where gemma-3-270m's group of 4 at head 256
  // spilled): a tile's V loads go out after its scores (one more round trip
  // per tile; no spills at 104), the same arithmetic in the same order.
  const bool lean = in != nullptr;
  Emit emit(in, name.c_str(), t, params, geo);
  Kernel& k = emit.k();
  Symbol qs = k.shared_array("qs", Type::f32, G * hd, 16);          // the group's q rows, times log2 e
  Symbol pg = k.shared_array("pg", Type::u32, pages_max, 4);        // the chunk's page ids
  Symbol wml = k.shared_array("wml", Type::f32, kWarps * G * 2, 8); // per warp and head: max, sum
  Symbol wacc = k.shared_array("wacc", Type::f32, kWarps * G * hd, 16);   // per warp and head: V sums
  Symbol cell = k.shared_array("last", Type::u32, 1);

  Reg split = k.special(Sreg::ctaid_x), cy = k.special(Sreg::ctaid_y), tok = k.special(Sreg::ctaid_z);
  Reg kvh = subs > 1 ? k.div(cy, subs) : cy;   // the KV head, and the sub-group of its query heads
  Reg sub = subs > 1 ? k.sub(cy, k.mul(kvh, subs)) : Reg{};
  Reg tid = k.special(Sreg::tid_x);
  Reg lane = k.and_(tid, 31u), warp = k.shr(tid, 5u);

  k.comment("the token: its position and page-table row (pos ~0: an unused slot)");
  Reg tokens = k.param("tokens");
  std::vector<Reg> tk = ld_vec(k, Space::global, Type::u32, 2, k.add(tokens, k.mul_wide(tok, 8u)));
  Reg pos = tk[0], row = tk[1];
  k.when(k.setp(Cmp::eq, pos, 0xffffffffu), [&] { k.ret(); });
  Reg p1 = k.add(pos, 1u);
  Reg p0 = k.mov(Type::u32, 0u);
  if (s.window) {   // a sliding layer sees positions pos + 1 - window .. pos
    Reg past = k.setp(Cmp::gt, p1, s.window);
    k.selp(p0, k.sub(p1, s.window), 0u, past);
  }
  k.comment("the range [a0, pos] (a0: p0 down to a tile) in at most " + std::to_string(S) +
            " chunks of whole tiles, from this token's length: splits past the last exit");
  Reg a0 = k.and_(p0, ~(tile - 1));
  Reg span = k.sub(p1, a0);
  Reg per = k.div(k.add(span, S - 1), S);
  Reg chunk = k.and_(k.add(per, tile - 1), ~(tile - 1));
  Reg nsplit = k.div(k.sub(k.add(span, chunk), 1u), chunk);
  k.when(k.setp(Cmp::hs, split, nsplit), [&] { k.ret(); });
  Reg lo = k.mad_lo(split, chunk, a0);
  Reg hi = k.min(k.add(lo, chunk), p1);
  Reg page_lo = k.shr(lo, log2u(ps));
  Reg npages = k.sub(k.add(k.shr(k.sub(hi, 1u), log2u(ps)), 1u), page_lo);

  // x / n and x mod n: a shift and a mask for a power of two (every n but at
  // head 96: 24 float4 columns, 12 data lanes).
  auto div_by = [&](const Reg& x, uint32_t n) { return std::has_single_bit(n) ? k.shr(x, log2u(n)) : k.div(x, n); };
  auto mod_by = [&](const Reg& x, uint32_t n) {
    if (std::has_single_bit(n)) return k.and_(x, n - 1);
    Reg r = k.reg(Type::u32);
    k.rem(r, x, n);
    return r;
  };
  // Shared copies of q and of the warps' V sums keep a head's float4 columns
  // as [half][chunk of the row]: column 2·dl + h at h·(hd/8) + dl, so that a
  // warp's 16-byte reads of its lanes' first (second) halves are contiguous
  // (no bank conflicts; at head 512 lane l's chunks are l and l + 32).
  // Threads walk the shared order; this is the column of the output a shared
  // index holds.
  auto column_of = [&](const Reg& si) {
    Reg r = mod_by(si, hd / 4);
    Reg h = div_by(r, vl);
    Reg pair = k.mad_lo(mod_by(r, vl), 2u, h);
    return k.add(k.sub(si, r), pair);
  };
  k.comment("the group's q rows and the chunk's page ids, in one round trip");
  Reg qparam = k.param("q");
  Reg head0 = k.mad_lo(tok, s.n_head, k.mul(kvh, s.group()));   // the block's first query row
  if (subs > 1) head0 = k.mad_lo(sub, G, head0);
  Reg qsrc = k.add(qparam, k.mul_wide(head0, hd * 4));
  const uint32_t q_iters = (cols + kThreads - 1) / kThreads;
  std::vector<std::vector<Reg>> qv(q_iters);
  std::vector<Reg> q_ok(q_iters);
  for (uint32_t it = 0; it < q_iters; ++it) {
    Reg idx = k.add(tid, it * kThreads);
    for (int e = 0; e < 4; ++e) qv[it].push_back(k.reg(Type::f32));
    Reg a = k.add(qsrc, k.mul_wide(column_of(idx), 16u));
    if ((it + 1) * kThreads <= cols) {
      k.ld(Space::global, qv[it], at(a));
    } else {
      q_ok[it] = k.setp(Cmp::lt, idx, cols);
      k.when(q_ok[it], [&] { k.ld(Space::global, qv[it], at(a)); });
    }
  }
  Reg pg_base = k.shared_addr(pg);
  Reg tables = k.param("tables");
  Reg table = k.add(tables, k.mul_wide(k.mad_lo(row, s.max_pages, page_lo), 4u));
  Reg i = k.reg(Type::u32);
  k.for_range(i, tid, npages, kThreads, [&] {
    Reg id = k.ld_global(Type::u32, at(k.add(table, k.mul_wide(i, 4u))));
    k.st_shared(at(k.mad_lo(i, 4u, pg_base)), id);
  });
  Reg qs_base = k.shared_addr(qs);
  for (uint32_t it = 0; it < q_iters; ++it) {
    auto store = [&] {
      std::vector<Operand> v;
      for (const Reg& x : qv[it]) v.push_back(k.mul(x, kLog2e));
      k.st(Space::shared, at(k.mad_lo(k.add(tid, it * kThreads), 16u, qs_base)), v);
    };
    if (q_ok[it].valid()) k.if_(q_ok[it], store);
    else store();
  }
  k.bar_sync(0);   // q and the page ids are read by every warp

  k.comment("tiles of " + std::to_string(tile) + " positions, every " + std::to_string(kWarps) +
            "th to a warp; lane: row (lane / " + std::to_string(lpr) + ") of each load, 8 dims");
  Reg rsub = k.shr(lane, log2u(lpr));
  Reg dl = k.and_(lane, lpr - 1);
  Reg lane_off = k.mul_wide(k.mad_lo(rsub, hd, k.shl(dl, 3u)), 2u);
  // An idle lane (head 96) reads the row's last lane's q: finite, times its K of 0.
  Reg q_lane = k.mad_lo(dpr == lpr ? dl : k.min(dl, dpr - 1), 16u, qs_base);
  Reg data_lane;   // head 96: lanes 12..15 of a row hold no dims
  if (dpr != lpr) data_lane = k.setp(Cmp::lo, dl, dpr);
  Reg kpool = k.param("k_pool"), vpool = k.param("v_pool");
  std::vector<Reg> m(G), l(G);
  std::vector<std::vector<Reg>> acc(G);
  for (uint32_t g = 0; g < G; ++g) {
    m[g] = k.mov(Type::f32, kNegInf);
    l[g] = k.mov(Type::f32, 0.0f);
    for (uint32_t e = 0; e < ne; ++e) acc[g].push_back(k.mov(Type::f32, 0.0f));
  }
  Reg tile_lo = k.shr(lo, log2u(tile));
  Reg tile_end = k.add(k.shr(k.sub(hi, 1u), log2u(tile)), 1u);
  Reg ti = k.reg(Type::u32);
  auto to_f32 = [&](const std::vector<Reg>& words) {   // 4 words of 2 f16 -> 8 f32 (per chunk)
    std::vector<Reg> f;
    for (const Reg& w : words) {
      Reg h0 = k.reg(Type::f16), h1 = k.reg(Type::f16);
      k.unpack(h0, h1, w);
      f.push_back(k.cvt(Type::f32, h0));
      f.push_back(k.cvt(Type::f32, h1));
    }
    return f;
  };
  k.for_range(ti, k.add(tile_lo, warp), tile_end, kWarps, [&] {
    Reg tstart = k.shl(ti, log2u(tile));
    Reg page = k.ld_shared(Type::u32, at(k.mad_lo(k.sub(k.shr(tstart, log2u(ps)), page_lo), 4u, pg_base)));
    Reg in_page = k.and_(tstart, ps - 1);
    Reg rowidx = k.mad_lo(k.mad_lo(page, nkv, kvh), ps, in_page);
    Reg off = k.add(k.mul_wide(rowidx, hd * 2), lane_off);
    Reg ka = k.add(kpool, off), va = k.add(vpool, off);
    Reg jr = k.add(tstart, rsub);
    std::vector<Reg> valid(U), load(U);   // the row is visible; and this lane holds dims of it
    std::vector<std::vector<Reg>> kw(U), vw(U);
    for (uint32_t u = 0; u < U; ++u) {
      Reg j = k.add(jr, u * rpl);
      Reg above = k.setp(Cmp::hs, j, p0);
      valid[u] = k.and_(above, k.setp(Cmp::lo, j, hi));
      load[u] = data_lane.valid() ? k.and_(valid[u], data_lane) : valid[u];
      for (uint32_t e = 0; e < 4 * cpl; ++e) {
        kw[u].push_back(k.mov(Type::u32, 0u));
        if (!lean) vw[u].push_back(k.mov(Type::u32, 0u));
      }
    }
    MemOpt nc;
    nc.nc = true;
    // Row u's words of this lane: chunk c (4 words) 512 bytes after chunk c − 1.
    auto load_row = [&](const std::vector<Reg>& w, const Reg& base, uint32_t u) {
      for (uint32_t c = 0; c < cpl; ++c)
        k.ld(Space::global, std::vector<Reg>(w.begin() + 4 * c, w.begin() + 4 * c + 4),
             at(base, int64_t(u) * rpl * hd * 2 + int64_t(c) * 512), nc);
    };
    auto load_v = [&] {
      for (uint32_t u = 0; u < U; ++u) k.when(load[u], [&] { load_row(vw[u], va, u); });
    };
    k.comment(lean ? "K of the tile in flight (V after the scores); rows outside [p0, hi) are not read (kNoPage below p0)"
                   : "K and V of the tile in flight together; rows outside [p0, hi) are not read (kNoPage below p0)");
    for (uint32_t u = 0; u < U; ++u) k.when(load[u], [&] { load_row(kw[u], ka, u); });
    if (!lean) load_v();
    std::vector<std::vector<Reg>> kf(U);
    for (uint32_t u = 0; u < U; ++u) kf[u] = to_f32(kw[u]);
    std::vector<std::vector<Reg>> sc(G, std::vector<Reg>(U));
    for (uint32_t g = 0; g < G; ++g) {
      std::vector<Reg> q;   // this lane's dims of head g, chunk by chunk, as kf holds K's
      for (uint32_t c = 0; c < cpl; ++c)
        for (int64_t half : {int64_t(0), int64_t(hd) * 2}) {
          const std::vector<Reg> q4 = ld_vec(k, Space::shared, Type::f32, 4, q_lane, int64_t(g) * hd * 4 + c * 512 + half);
          q.insert(q.end(), q4.begin(), q4.end());
        }
      for (uint32_t u = 0; u < U; ++u) {
        Reg d = k.mul(q[0], kf[u][0]);
        for (uint32_t e = 1; e < ne; ++e) k.fma(d, q[e], kf[u][e], d);
        sc[g][u] = d;
      }
    }
    if (lean) {   // V now: the K words and their f32 copies are dead
      for (uint32_t u = 0; u < U; ++u)
        for (uint32_t e = 0; e < 4 * cpl; ++e) vw[u].push_back(k.mov(Type::u32, 0u));
      load_v();
    }
    k.comment("scores: a butterfly over the row's lanes; the online softmax per head (log2 units)");
    for (uint32_t g = 0; g < G; ++g) {
      for (uint32_t u = 0; u < U; ++u) {
        for (uint32_t b = lpr / 2; b >= 1; b /= 2) k.add(sc[g][u], sc[g][u], k.shfl_bfly(sc[g][u], b));
        k.selp(sc[g][u], sc[g][u], kNegInf, valid[u]);
      }
      Reg mx = sc[g][0];
      for (uint32_t u = 1; u < U; ++u) mx = k.max(mx, sc[g][u]);
      for (uint32_t b = lpr; b < 32; b *= 2) mx = k.max(mx, k.shfl_bfly(mx, b));
      Reg mn = k.max(m[g], mx);   // finite: every tile has a visible row
      Reg alpha = k.ex2_approx(k.sub(m[g], mn));
      k.mov(m[g], mn);
      Reg sum = k.reg(Type::f32);
      for (uint32_t u = 0; u < U; ++u) {
        k.mov(sc[g][u], k.ex2_approx(k.sub(sc[g][u], mn)));
        if (u == 0) k.mov(sum, sc[g][u]);
        else k.add(sum, sum, sc[g][u]);
      }
      k.fma(l[g], l[g], alpha, sum);
      for (uint32_t e = 0; e < ne; ++e) k.mul(acc[g][e], acc[g][e], alpha);
    }
    for (uint32_t u = 0; u < U; ++u) {
      std::vector<Reg> vf = to_f32(vw[u]);
      for (uint32_t g = 0; g < G; ++g)
        for (uint32_t e = 0; e < ne; ++e) k.fma(acc[g][e], sc[g][u], vf[e], acc[g][e]);
    }
  }, false);

  k.comment("the warp's rows: sums over its row groups; then warps combine by (max, sum)");
  for (uint32_t g = 0; g < G; ++g)
    for (uint32_t b = lpr; b < 32; b *= 2) {
      k.add(l[g], l[g], k.shfl_bfly(l[g], b));
      for (uint32_t e = 0; e < ne; ++e) k.add(acc[g][e], acc[g][e], k.shfl_bfly(acc[g][e], b));
    }
  Reg wacc_base = k.shared_addr(wacc), wml_base = k.shared_addr(wml);
  // The first row's data lanes store the warp's sums.
  k.if_(data_lane.valid() ? k.setp(Cmp::lo, lane, dpr) : k.setp(Cmp::eq, rsub, 0u), [&] {
    Reg a = k.mad_lo(warp, G * hd * 4, k.mad_lo(dl, 16u, wacc_base));
    for (uint32_t g = 0; g < G; ++g)
      for (uint32_t c = 0; c < cpl; ++c) {   // chunk c: the shared layout's lane dl + 32c
        const auto first = acc[g].begin() + 8 * c;
        k.st(Space::shared, at(a, int64_t(g) * hd * 4 + c * 512), std::vector<Operand>(first, first + 4));
        k.st(Space::shared, at(a, int64_t(g) * hd * 4 + c * 512 + hd * 2), std::vector<Operand>(first + 4, first + 8));
      }
  });
  k.if_(k.setp(Cmp::eq, lane, 0u), [&] {
    Reg a = k.mad_lo(warp, G * 8, wml_base);
    for (uint32_t g = 0; g < G; ++g) k.st(Space::shared, at(a, int64_t(g) * 8), std::vector<Operand>{m[g], l[g]});
  });
  k.bar_sync(0);

  Reg alone = k.setp(Cmp::eq, nsplit, 1u);
  Reg out_param = k.param("out"), part_param = k.param("part");
  Reg out_head = k.add(out_param, k.mul_wide(head0, hd * 4));
  Reg part_head = k.add(part_param, k.mul_wide(head0, S * pstride));
  Reg part_split = k.add(part_head, k.mul_wide(split, pstride));
  for (uint32_t it = 0; it < col_iters; ++it) {
    Reg si = k.add(tid, it * kThreads);   // shared order; c: the output's column
    auto body = [&] {
      Reg c = column_of(si);
      Reg g = div_by(c, hd / 4);
      Reg d4 = mod_by(c, hd / 4);
      Reg ml = k.mad_lo(g, 8u, wml_base);
      Reg mx = k.ld_shared(Type::f32, at(ml));
      for (uint32_t w = 1; w < kWarps; ++w) mx = k.max(mx, k.ld_shared(Type::f32, at(ml, int64_t(w) * G * 8)));
      Reg sum = k.mov(Type::f32, 0.0f);
      std::vector<Reg> a4;
      for (int e = 0; e < 4; ++e) a4.push_back(k.mov(Type::f32, 0.0f));
      Reg wa = k.mad_lo(si, 16u, wacc_base);
      for (uint32_t w = 0; w < kWarps; ++w) {
        Reg wt = k.ex2_approx(k.sub(k.ld_shared(Type::f32, at(ml, int64_t(w) * G * 8)), mx));   // -inf -> 0
        k.fma(sum, k.ld_shared(Type::f32, at(ml, int64_t(w) * G * 8 + 4)), wt, sum);
        std::vector<Reg> v = ld_vec(k, Space::shared, Type::f32, 4, wa, int64_t(w) * G * hd * 4);
        for (int e = 0; e < 4; ++e) k.fma(a4[e], v[e], wt, a4[e]);
      }
      k.if_else(alone, [&] {
        Reg inv = k.reg(Type::f32);
        k.div(inv, 1.0f, sum);
        std::vector<Operand> o;
        for (int e = 0; e < 4; ++e) o.push_back(k.mul(a4[e], inv));
        k.st(Space::global, at(k.add(out_head, k.mul_wide(c, 16u))), o);
      }, [&] {
        Reg p = k.add(part_split, k.mul_wide(g, S * pstride));
        k.st(Space::global, at(k.add(p, k.mul_wide(d4, 16u)), 16), std::vector<Operand>(a4.begin(), a4.end()));
        k.when(k.setp(Cmp::eq, d4, 0u), [&] { k.st(Space::global, at(p), std::vector<Operand>{mx, sum}); });
      });
    };
    if ((it + 1) * kThreads <= cols) body();
    else k.if_(k.setp(Cmp::lt, si, cols), body);
  }
  k.when(alone, [&] { k.ret(); });

  k.comment("several splits: the last block of (token, KV head) to finish combines them");
  Reg is_t0 = k.setp(Cmp::eq, tid, 0u);
  k.bar_sync(0);   // every thread's part precedes thread 0's release
  last_block_or_return(k, is_t0, k.add(k.param("sync"), k.mul_wide(k.mad_lo(tok, nkv * subs, cy), 4u)), nsplit, cell);

  k.comment("the reduction: splits in batches of 16 in flight, rescaled online by their max, in split order");
  constexpr uint32_t kBatch = 16;
  for (uint32_t it = 0; it < col_iters; ++it) {
    Reg c = k.add(tid, it * kThreads);
    auto body = [&] {
      Reg g = div_by(c, hd / 4);
      Reg head = k.add(part_head, k.mul_wide(g, S * pstride));
      Reg col = k.add(head, k.mul_wide(mod_by(c, hd / 4), 16u));
      Reg mx = k.mov(Type::f32, kNegInf), sum = k.mov(Type::f32, 0.0f);
      std::vector<Reg> a4;
      for (int e = 0; e < 4; ++e) a4.push_back(k.mov(Type::f32, 0.0f));
      Reg b = k.reg(Type::u32);
      k.for_range(b, 0u, nsplit, kBatch, [&] {
        std::vector<std::vector<Reg>> ml(kBatch), v(kBatch);
        for (uint32_t u = 0; u < kBatch; ++u) {
          Reg ok = k.setp(Cmp::lo, k.add(b, u), nsplit);
          ml[u] = {k.mov(Type::f32, kNegInf), k.mov(Type::f32, 0.0f)};   // a split past the last weighs 0
          for (int e = 0; e < 4; ++e) v[u].push_back(k.mov(Type::f32, 0.0f));
          Reg off = k.mul_wide(k.add(b, u), pstride);
          Reg pa = k.add(head, off), va = k.add(col, off);
          k.when(ok, [&] {
            k.ld(Space::global, ml[u], at(pa));
            k.ld(Space::global, v[u], at(va, 16));
          });
        }
        Reg bm = ml[0][0];
        for (uint32_t u = 1; u < kBatch; ++u) bm = k.max(bm, ml[u][0]);
        Reg mn = k.max(mx, bm);
        Reg alpha = k.ex2_approx(k.sub(mx, mn));   // the first batch: ex2(-inf) = 0
        k.mov(mx, mn);
        k.mul(sum, sum, alpha);
        for (int e = 0; e < 4; ++e) k.mul(a4[e], a4[e], alpha);
        for (uint32_t u = 0; u < kBatch; ++u) {
          Reg wt = k.ex2_approx(k.sub(ml[u][0], mn));
          k.fma(sum, ml[u][1], wt, sum);
          for (int e = 0; e < 4; ++e) k.fma(a4[e], v[u][e], wt, a4[e]);
        }
      }, false);
      Reg inv = k.reg(Type::f32);
      k.div(inv, 1.0f, sum);
      std::vector<Operand> o;
      for (int e = 0; e < 4; ++e) o.push_back(k.mul(a4[e], inv));
      k.st(Space::global, at(k.add(out_head, k.mul_wide(c, 16u))), o);
    };
    if ((it + 1) * kThreads <= cols) body();
    else k.if_(k.setp(Cmp::lt, c, cols), body);
  }
  return emit.done(true);
}

}  // namespace ptxlm::kernels
