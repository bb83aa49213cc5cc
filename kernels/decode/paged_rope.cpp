#include "kernels/decode/paged_rope.h"

#include <algorithm>
#include <bit>
#include <functional>
#include <string>
#include <vector>

#include "kernels/decode/util.h"
#include "kernels/examples/common.h"

namespace ptxlm::kernels {

using namespace ptx;

namespace {

constexpr uint32_t kWarps = kPagedRopeWarps, kThreads = 32 * kWarps;

void check(const PagedRopeShape& s) {
  if (s.n_head == 0 || s.n_head_kv == 0 || s.n_head % s.n_head_kv)
    throw Error("paged_rope: n_head must be a positive multiple of n_head_kv");
  if (s.head_dim == 0 || s.head_dim % 32 || s.head_dim > 512)
    throw Error("paged_rope: head_dim must be a multiple of 32 up to 512");
  if (s.rot() % 2 || s.rot() < 2 || s.rot() > s.head_dim)
    throw Error("paged_rope: n_rot must be even, 2..head_dim");
  if (!std::has_single_bit(s.page_size)) throw Error("paged_rope: page_size must be a power of two");
  if (s.max_pages == 0) throw Error("paged_rope: max_pages must be positive");
  if (s.tokens == 0 || s.tokens > 65535) throw Error("paged_rope: tokens must be 1..65535");
  if (s.temp_scale != 0 && s.temp_floor == 0) throw Error("paged_rope: a temperature needs temp_floor > 0");
}

}  // namespace

LaunchGeometry paged_rope_geometry(const PagedRopeShape& s) {
  check(s);
  return LaunchGeometry{{(s.units() + kWarps - 1) / kWarps, s.tokens, 1}, {kThreads, 1, 1}, 0};
}

GeneratedKernel paged_rope_kernel(const PagedRopeShape& s, Target t, const InlineTarget* in) {
  const LaunchGeometry geo = paged_rope_geometry(s);
  const uint32_t hd = s.head_dim, half = hd / 2, rp = s.rot() / 2, nkv = s.n_head_kv, ps = s.page_size;
  const uint32_t slots = (half + 31) / 32;   // pairs per lane
  const uint32_t units = s.units();
  ParamList params;
  params.add_ptr("tokens").add_ptr("tables").add_ptr("q").add_ptr("k").add_ptr("v");
  if (s.bias) params.add_ptr("bq").add_ptr("bk").add_ptr("bv");
  if (s.qk_norm) params.add_ptr("q_norm").add_ptr("k_norm");
  params.add_ptr("rope").add_ptr("k_pool").add_ptr("v_pool").add_ptr("q_rot");
  std::string name = "paged_rope_" + std::to_string(s.n_head) + "_" + std::to_string(nkv) + "_" + std::to_string(hd);
  if (s.rot() != hd) name += "_r" + std::to_string(s.rot());
  name += "_p" + std::to_string(ps) + "_t" + std::to_string(s.tokens);
  if (s.neox) name += "_neox";
  if (s.bias) name += "_bias";
  if (s.qk_norm) name += "_qknorm";
  if (s.temp_scale != 0) name += "_temp" + std::to_string(s.temp_floor);
  if (s.v_norm) name += "_vnorm";
  if (s.q_only) name += "_qonly";
  t.pdl = false;   // launched plainly (see the header)
  Emit emit(in, name.c_str(), t, params, geo);
  Kernel& k = emit.k();

  Reg blk = k.special(Sreg::ctaid_x), tok = k.special(Sreg::ctaid_y), tid = k.special(Sreg::tid_x);
  Reg lane = k.and_(tid, 31u), warp = k.shr(tid, 5u);
  Reg unit = k.mad_lo(blk, kWarps, warp);   // query head unit, or KV head unit - n_head
  if (units % kWarps) k.when(k.setp(Cmp::hs, unit, units), [&] { k.ret(); });
  k.comment("the token: its position and page-table row (pos ~0: an unused slot), in flight with the head's loads");
  std::vector<Reg> tk = ld_vec(k, Space::global, Type::u32, 2, k.add(k.param("tokens"), k.mul_wide(tok, 8u)));
  Reg pos = tk[0], row = tk[1];

  // Pair slot c of a lane: j = lane + 32c. j < rp: the rotated pair (j, j +
  // rp) under NEOX, else (2j, 2j + 1); j >= rp: the unrotated pair (2j, 2j +
  // 1) in either mode (2j >= n_rot). Whether a slot rotates (and is a pair
  // of the head at all) is known here unless rp (half) cuts its 32 lanes.
  struct Slot {
    Reg j, ea, eb;       // pair index (clamped to the head), element indices
    Reg oa, ob;          // their byte offsets in f32
    Reg rot, valid;      // runtime predicates where not known here
    bool rot_all = false, rot_none = false, valid_all = true;
  };
  std::vector<Slot> sl(slots);
  for (uint32_t c = 0; c < slots; ++c) {
    Slot& x = sl[c];
    x.valid_all = 32 * c + 31 < half;
    x.rot_all = 32 * c + 31 < rp;
    x.rot_none = 32 * c >= rp;
    Reg j = k.add(lane, 32 * c);
    if (!x.valid_all) {
      x.valid = k.setp(Cmp::lo, j, half);
      j = k.min(j, half - 1);   // invalid lanes compute on the head's last pair and store nothing
    }
    x.j = j;
    if (!x.rot_all && !x.rot_none) x.rot = k.setp(Cmp::lo, j, rp);
    Reg two_j = k.shl(j, 1u), two_j1 = k.add(two_j, 1u);
    if (!s.neox || x.rot_none) {
      x.ea = two_j;
      x.eb = two_j1;
    } else if (x.rot_all) {
      x.ea = j;
      x.eb = k.add(j, rp);
    } else {
      x.ea = k.selp(j, two_j, x.rot, Type::u32);
      x.eb = k.selp(k.add(j, rp), two_j1, x.rot, Type::u32);
    }
    x.oa = k.mul_wide(x.ea, 4u);
    x.ob = k.mul_wide(x.eb, 4u);
  }

  // Row `head_row` of `vec` (T × heads rows; `head` its head): the slots'
  // pairs, their biases and the norm's weights (`weights`, when qk_norm),
  // loaded; add_bias() adds the biases. Every load of a head is issued
  // before the first use of any: one round trip, in flight with the token
  // descriptor's.
  struct Loaded {
    std::vector<std::pair<Reg, Reg>> x, b, w;
  };
  auto load = [&](const char* vec, const char* bias, const char* weights, const Reg& head_row, const Reg& head) {
    Reg src = k.add(k.param(vec), k.mul_wide(head_row, hd * 4));
    auto pairs = [&](const Reg& base, bool nc) {
      std::vector<std::pair<Reg, Reg>> v(slots);
      for (uint32_t c = 0; c < slots; ++c) {
        Reg a = k.add(base, sl[c].oa), b = k.add(base, sl[c].ob);
        v[c] = nc ? std::pair{k.ld_global_nc(Type::f32, at(a)), k.ld_global_nc(Type::f32, at(b))}
                  : std::pair{k.ld_global(Type::f32, at(a)), k.ld_global(Type::f32, at(b))};
      }
      return v;
    };
    Loaded r;
    r.x = pairs(src, false);
    if (s.bias) r.b = pairs(k.add(k.param(bias), k.mul_wide(head, hd * 4)), true);
    if (s.qk_norm) r.w = pairs(k.param(weights), true);
    return r;
  };
  auto add_bias = [&](Loaded& in) {
    for (uint32_t c = 0; c < in.b.size(); ++c) {
      k.add(in.x[c].first, in.x[c].first, in.b[c].first);
      k.add(in.x[c].second, in.x[c].second, in.b[c].second);
    }
  };
  // 1 / sqrt(total / hd + eps), sqrt.rn then div.rn: a head's RMSNorm factor.
  auto inverse_rms = [&](const Reg& total) {
    Reg root = k.sqrt(k.add(k.div(total, float(hd)), s.eps));
    Reg scale = k.reg(Type::f32);
    k.div(scale, 1.0f, root);
    return scale;
  };
  // The per-head RMSNorm (attention.cpp's order: each pair's x0² + x1² as
  // mul + fma, a butterfly over each 32 pairs, their sums in order), with
  // the weights load() brought.
  auto norm = [&](Loaded& in) {
    if (!s.qk_norm) return;
    std::vector<std::pair<Reg, Reg>>& x = in.x;
    Reg total;
    for (uint32_t c = 0; c < slots; ++c) {
      Reg ss = k.mul(x[c].first, x[c].first);
      k.fma(ss, x[c].second, x[c].second, ss);
      if (!sl[c].valid_all) k.selp(ss, ss, 0.0f, sl[c].valid);
      Reg w = warp_allreduce(k, ss, ReduceOp::sum_f32);
      total = c == 0 ? w : k.add(total, w);
    }
    Reg scale = inverse_rms(total);
    for (uint32_t c = 0; c < slots; ++c) {
      k.mul(x[c].first, k.mul(x[c].first, scale), in.w[c].first);
      k.mul(x[c].second, k.mul(x[c].second, scale), in.w[c].second);
    }
  };
  // cos/sin of the slots that rotate, at pos (after the unused check).
  auto table = [&] {
    std::vector<std::vector<Reg>> cs(slots);
    for (uint32_t c = 0; c < slots; ++c) {
      if (sl[c].rot_none) continue;
      Reg i = sl[c].rot_all ? sl[c].j : k.min(sl[c].j, rp - 1);
      cs[c] = ld_vec(k, Space::global, Type::f32, 2, k.add(k.param("rope"), k.mul_wide(k.mad_lo(pos, rp, i), 8u)), 0, true);
    }
    return cs;
  };
  auto rotate = [&](std::vector<std::pair<Reg, Reg>>& x, const std::vector<std::vector<Reg>>& cs) {
    for (uint32_t c = 0; c < slots; ++c) {
      if (sl[c].rot_none) continue;
      Reg x0 = x[c].first, x1 = x[c].second;
      Reg y0 = k.sub(k.mul(x0, cs[c][0]), k.mul(x1, cs[c][1]));
      Reg y1 = k.add(k.mul(x0, cs[c][1]), k.mul(x1, cs[c][0]));
      if (sl[c].rot_all) {
        x[c] = {y0, y1};
      } else {
        x[c] = {k.selp(y0, x0, sl[c].rot, Type::f32), k.selp(y1, x1, sl[c].rot, Type::f32)};
      }
    }
  };
  auto unused = [&] { k.when(k.setp(Cmp::eq, pos, 0xffffffffu), [&] { k.ret(); }); };
  auto guarded = [&](uint32_t c, const std::function<void()>& fn) {
    if (sl[c].valid_all) fn();
    else k.if_(sl[c].valid, fn);
  };

  auto query_head = [&] {
    k.comment("a query head: bias, norm, RoPE, times the scale (and the temperature), to q_rot");
    Reg qrow = k.mad_lo(tok, s.n_head, unit);
    Loaded in = load("q", "bq", "q_norm", qrow, unit);
    std::vector<std::pair<Reg, Reg>>& x = in.x;
    add_bias(in);
    unused();
    std::vector<std::vector<Reg>> cs = table();
    norm(in);
    rotate(x, cs);
    const Operand scale = q_scale(k, pos, s.scale, s.temp_scale, s.temp_floor);
    Reg dst = k.add(k.param("q_rot"), k.mul_wide(qrow, hd * 4));
    for (uint32_t c = 0; c < slots; ++c) {
      Reg y0 = k.mul(x[c].first, scale), y1 = k.mul(x[c].second, scale);
      guarded(c, [&] {
        k.st_global(at(k.add(dst, sl[c].oa)), y0);
        k.st_global(at(k.add(dst, sl[c].ob)), y1);
      });
    }
  };
  auto kv_head = [&] {
    k.comment("a KV head: K (bias, norm, RoPE) and V (bias) as f16 to the token's slot of its page");
    Reg kvh = k.sub(unit, s.n_head);
    Reg kvrow = k.mad_lo(tok, nkv, kvh);
    Loaded in = load("k", "bk", "k_norm", kvrow, kvh);
    std::vector<std::pair<Reg, Reg>>& x = in.x;
    const uint32_t vper = hd / 32;
    Reg voff = k.mul_wide(kvrow, hd * 4);
    Reg vsrc = k.add(k.param("v"), voff);
    Reg lane4 = k.mul_wide(lane, 4u);
    std::vector<Reg> vv(vper);
    for (uint32_t i = 0; i < vper; ++i) vv[i] = k.ld_global(Type::f32, at(k.add(vsrc, lane4), int64_t(i) * 128));
    if (s.bias) {
      Reg bsrc = k.add(k.add(k.param("bv"), k.mul_wide(kvh, hd * 4)), lane4);
      std::vector<Reg> bv(vper);
      for (uint32_t i = 0; i < vper; ++i) bv[i] = k.ld_global_nc(Type::f32, at(bsrc, int64_t(i) * 128));
      for (uint32_t i = 0; i < vper; ++i) k.add(vv[i], vv[i], bv[i]);
    }
    add_bias(in);   // K's, once V's loads are in flight too
    if (s.v_norm) {   // rms_norm without a weight: the lanes' squares, a butterfly, the same root
      Reg ss = k.mul(vv[0], vv[0]);
      for (uint32_t i = 1; i < vper; ++i) k.fma(ss, vv[i], vv[i], ss);
      Reg scale = inverse_rms(warp_allreduce(k, ss, ReduceOp::sum_f32));
      for (uint32_t i = 0; i < vper; ++i) k.mul(vv[i], vv[i], scale);
    }
    unused();
    Reg page = k.ld_global(Type::u32, at(k.add(k.param("tables"),
                                               k.mul_wide(k.mad_lo(row, s.max_pages, k.shr(pos, uint32_t(std::countr_zero(ps)))), 4u))));
    std::vector<std::vector<Reg>> cs = table();
    norm(in);
    rotate(x, cs);
    Reg slot_row = k.mad_lo(k.mad_lo(page, nkv, kvh), ps, k.and_(pos, ps - 1));
    Reg base = k.mul_wide(slot_row, hd * 2);
    Reg kdst = k.add(k.param("k_pool"), base), vdst = k.add(k.param("v_pool"), base);
    for (uint32_t c = 0; c < slots; ++c) {
      Reg k0 = k.cvt(Type::f16, x[c].first), k1 = k.cvt(Type::f16, x[c].second);
      guarded(c, [&] {
        k.st_global(at(k.add(kdst, k.mul_wide(sl[c].ea, 2u))), k0);
        k.st_global(at(k.add(kdst, k.mul_wide(sl[c].eb, 2u))), k1);
      });
    }
    Reg vd = k.add(vdst, k.mul_wide(lane, 2u));
    for (uint32_t i = 0; i < vper; ++i) k.st_global(at(vd, int64_t(i) * 64), k.cvt(Type::f16, vv[i]));
  };
  if (s.q_only) query_head();
  else k.if_else(k.setp(Cmp::lo, unit, s.n_head), query_head, kv_head);
  return emit.done(true);
}

}  // namespace ptxlm::kernels
