#include "kernels/decode/attention.h"

#include <limits>
#include <string>

#include "kernels/decode/util.h"
#include "kernels/examples/common.h"

namespace ptxlm::kernels {

using namespace ptx;

namespace {

constexpr double kLog2e = 1.4426950408889634;
constexpr uint32_t kAttnThreads = 128;

std::string shape_suffix(uint32_t n_head, uint32_t n_head_kv, uint32_t hd) {
  std::string s("_");
  s.append(std::to_string(n_head)).append("_").append(std::to_string(n_head_kv)).append("_").append(std::to_string(hd));
  return s;
}

// Splits whose (max, sum) pairs the reducing block stages in shared memory.
constexpr uint32_t kMaxSplits = 2048;

void check_attention(const AttentionShape& s) {
  if (s.n_head == 0 || s.n_head_kv == 0 || s.n_head % s.n_head_kv)
    throw Error("attention: n_head must be a positive multiple of n_head_kv");
  if (s.head_dim == 0 || s.head_dim % 64 || s.head_dim > 256)
    throw Error("attention: head_dim must be 64, 128, 192 or 256");
  if (s.n_ctx == 0 || s.chunk == 0 || s.chunk > 4096) throw Error("attention: bad n_ctx or chunk");
  if (s.temp_scale != 0 && s.temp_floor == 0) throw Error("attention: a temperature needs temp_floor > 0");
  if (s.rot() % 2 || s.rot() < 2 || s.rot() > s.head_dim) throw Error("attention: n_rot must be even, 2..head_dim");
  if (s.splits() > kMaxSplits)
    throw Error("attention: more than " + std::to_string(kMaxSplits) + " splits (n_ctx / chunk)");
}

}  // namespace

// ---------------------------------------------------------------- attention

LaunchGeometry attention_geometry(const AttentionShape& s) {
  check_attention(s);
  return LaunchGeometry{{s.n_head, s.splits(), 1}, {kAttnThreads, 1, 1}, 0};
}

GeneratedKernel attention_kernel(const AttentionShape& s, Target t, const InlineTarget* in) {
  const LaunchGeometry g = attention_geometry(s);
  const uint32_t hd = s.head_dim, half = hd / 2, kv_dim = s.n_head_kv * hd, group = s.n_head / s.n_head_kv;
  const uint32_t per_lane = hd / 32;   // elements of a K row per lane (2, 4, ... 8)
  const uint32_t stride = (hd + 2) * 4;   // bytes of one split's part: max, sum, V sum
  ParamList params;
  params.add_ptr("q").add_ptr("k").add_ptr("v");
  if (s.bias) params.add_ptr("bq").add_ptr("bk").add_ptr("bv");
  if (s.qk_norm) params.add_ptr("q_norm").add_ptr("k_norm");
  params.add_ptr("rope").add_ptr("pos").add_ptr("k_cache").add_ptr("v_cache").add_ptr("part").add_ptr("sync").add_ptr("out");
  std::string name("attention");
  name.append(shape_suffix(s.n_head, s.n_head_kv, hd)).append("_c").append(std::to_string(s.chunk));
  if (s.window) name.append("_w").append(std::to_string(s.window));
  if (s.neox) name.append("_neox");
  if (s.bias) name.append("_bias");
  if (s.qk_norm) name.append("_qknorm");
  if (s.temp_scale != 0) name.append("_temp").append(std::to_string(s.temp_floor));
  if (s.rot() != hd) name.append("_r").append(std::to_string(s.rot()));
  Emit emit(in, name.c_str(), t, params, g);
  Kernel& k = emit.k();
  Symbol qs = k.shared_array("qs", Type::f32, hd, 16);
  Symbol sc = k.shared_array("sc", Type::f32, s.chunk, 16);
  Symbol red = k.shared_array("red", Type::f32, kAttnThreads / 32);
  Symbol kvs = k.shared_array("kvs", Type::u16, 2 * hd, 16);   // this token's K row, then its V row (f16)
  Symbol ml = k.shared_array("ml", Type::f32, 2 * s.splits(), 16);   // per split: weight, sum (the reduction)
  Symbol cell = k.shared_array("last", Type::u32, 1);

  Reg h = k.special(Sreg::ctaid_x), split = k.special(Sreg::ctaid_y), tid = k.special(Sreg::tid_x);
  Reg lane = k.and_(tid, 31u), warp = k.shr(tid, 5u);
  Reg pos = k.ld_global(Type::u32, at(k.param("pos")));
  Reg first = k.mul(split, s.chunk);
  k.comment("splits past the token do nothing: they are not counted either");
  k.when(k.setp(Cmp::gt, first, pos), [&] { k.ret(); });
  Reg p1 = k.add(pos, 1u);
  Reg end = k.min(k.add(first, s.chunk), p1);
  Reg start = first;
  if (s.window) {
    // A sliding layer sees positions pos + 1 - window .. pos.
    Reg past = k.setp(Cmp::gt, p1, s.window);
    Reg p0 = k.selp(k.sub(p1, s.window), 0u, past, Type::u32);
    start = k.max(first, p0);
  }
  Reg nonempty = k.setp(Cmp::gt, end, start);
  Reg n = k.selp(k.sub(end, start), 0u, nonempty, Type::u32);
  Reg own = k.setp(Cmp::eq, end, p1);   // this split holds the token (then n >= 1: pos is its last position)
  Reg kvh = k.div(h, group);
  Reg head_off = k.mul_wide(k.mul(kvh, hd), 2u);   // bytes into a cache row
  Reg qs_base = k.shared_addr(qs), sc_base = k.shared_addr(sc), kvs_base = k.shared_addr(kvs);

  // Partial rotary (rp < half): thread i >= rp holds the unrotated pair
  // (2i, 2i + 1) in either style (2i >= n_rot) and rotates it by cos 1, sin 0,
  // which leaves both values exactly as they are.
  const uint32_t rp = s.rot() / 2;
  k.comment(rp == half ? "RoPE: thread i < hd/2 rotates the pair (2i, 2i + 1) or (i, i + hd/2)"
                       : "RoPE: thread i < n_rot/2 rotates the pair (2i, 2i + 1) or (i, i + n_rot/2); "
                         "i < hd/2 passes (2i, 2i + 1) through");
  Reg active = k.setp(Cmp::lt, tid, half);
  Reg i = k.min(tid, half - 1);   // the others compute a copy of the last pair and store nothing
  Reg rotates;                    // partial rotary only: i < n_rot/2
  if (rp != half) rotates = k.setp(Cmp::lt, i, rp);
  Reg ea, eb;
  if (!s.neox) {
    ea = k.shl(i, 1u);
    eb = k.add(ea, 1u);
  } else if (rp == half) {
    ea = i;
    eb = k.add(ea, half);
  } else {
    ea = k.selp(i, k.shl(i, 1u), rotates, Type::u32);
    eb = k.add(ea, k.selp(rp, 1u, rotates, Type::u32));
  }
  Reg oa = k.mul_wide(ea, 4u), ob = k.mul_wide(eb, 4u);
  // Head `head` of `vec` (with its bias, norm), rotated: the pair (y0, y1).
  auto rotate = [&](const char* vec, const char* bias, const char* norm, const Reg& head) {
    Reg ci = rp == half ? i : k.min(i, rp - 1);   // the pass-through pairs read the last row entry, unused
    Reg cs_addr = k.add(k.param("rope"), k.mul_wide(k.mad_lo(pos, rp, ci), 8u));
    std::vector<Reg> cs = ld_vec(k, Space::global, Type::f32, 2, cs_addr, 0, true);
    if (rp != half) {
      cs[0] = k.selp(cs[0], 1.0f, rotates, Type::f32);
      cs[1] = k.selp(cs[1], 0.0f, rotates, Type::f32);
    }
    Reg off = k.mul_wide(head, hd * 4);
    Reg src = k.add(k.param(vec), off);
    Reg x0 = k.ld_global(Type::f32, at(k.add(src, oa)));
    Reg x1 = k.ld_global(Type::f32, at(k.add(src, ob)));
    if (s.bias) {
      Reg b = k.add(k.param(bias), off);
      k.add(x0, x0, k.ld_global_nc(Type::f32, at(k.add(b, oa))));
      k.add(x1, x1, k.ld_global_nc(Type::f32, at(k.add(b, ob))));
    }
    if (s.qk_norm) {
      Reg ss = k.mul(x0, x0);
      k.fma(ss, x1, x1, ss);
      k.selp(ss, ss, 0.0f, active);
      Reg total = block_allreduce(k, ss, ReduceOp::sum_f32, red, kAttnThreads);
      Reg root = k.sqrt(k.add(k.div(total, float(hd)), s.eps));
      Reg scale = k.reg(Type::f32);
      k.div(scale, 1.0f, root);
      Reg w = k.param(norm);
      Reg wa = k.ld_global_nc(Type::f32, at(k.add(w, oa)));
      Reg wb = k.ld_global_nc(Type::f32, at(k.add(w, ob)));
      k.mul(x0, k.mul(x0, scale), wa);
      k.mul(x1, k.mul(x1, scale), wb);
    }
    Reg y0 = k.sub(k.mul(x0, cs[0]), k.mul(x1, cs[1]));
    Reg y1 = k.add(k.mul(x0, cs[1]), k.mul(x1, cs[0]));
    return std::pair{y0, y1};
  };
  {
    auto [y0, y1] = rotate("q", "bq", "q_norm", h);
    const Operand scale = q_scale(k, pos, s.scale, s.temp_scale, s.temp_floor);
    k.comment("q, rotated, times the attention scale, in shared memory");
    k.when(active, [&] {
      k.st_shared(at(k.mad_lo(ea, 4u, qs_base)), k.mul(y0, scale));
      k.st_shared(at(k.mad_lo(eb, 4u, qs_base)), k.mul(y1, scale));
    });
  }
  k.if_(own, [&] {
    k.comment("this token's K (rotated) and V (with its bias), as f16, in shared memory");
    auto [y0, y1] = rotate("k", "bk", "k_norm", kvh);
    k.when(active, [&] {
      Reg k0 = k.cvt(Type::f16, y0), k1 = k.cvt(Type::f16, y1);   // one emitting call per argument list
      k.st_shared(at(k.mad_lo(ea, 2u, kvs_base)), k0);
      k.st_shared(at(k.mad_lo(eb, 2u, kvs_base)), k1);
    });
    Reg voff = k.mul_wide(kvh, hd * 4);
    Reg vsrc = k.add(k.param("v"), voff);
    Reg v0 = k.ld_global(Type::f32, at(k.add(vsrc, oa)));
    Reg v1 = k.ld_global(Type::f32, at(k.add(vsrc, ob)));
    if (s.bias) {
      Reg bv = k.add(k.param("bv"), voff);
      k.add(v0, v0, k.ld_global_nc(Type::f32, at(k.add(bv, oa))));
      k.add(v1, v1, k.ld_global_nc(Type::f32, at(k.add(bv, ob))));
    }
    k.when(active, [&] {
      Reg h0 = k.cvt(Type::f16, v0), h1 = k.cvt(Type::f16, v1);
      k.st_shared(at(k.mad_lo(ea, 2u, kvs_base), 2 * hd), h0);
      k.st_shared(at(k.mad_lo(eb, 2u, kvs_base), 2 * hd), h1);
    });
  });
  k.bar_sync(0);
  Reg in_group = k.reg(Type::u32);
  k.rem(in_group, h, group);
  k.if_(k.and_(own, k.setp(Cmp::eq, in_group, 0u)), [&] {
    k.comment("the group's first head appends them to row pos of the caches");
    Reg row = k.mul_wide(k.mad_lo(pos, kv_dim, k.mul(kvh, hd)), 2u);
    Reg kc = k.add(k.param("k_cache"), row), vc = k.add(k.param("v_cache"), row);
    Reg e = k.reg(Type::u32);
    k.for_range(e, tid, hd, kAttnThreads, [&] {
      Reg sa = k.mad_lo(e, 2u, kvs_base);
      Reg off = k.mul_wide(e, 2u);
      k.st_global(at(k.add(kc, off)), k.ld_shared(Type::u16, at(sa)));
      k.st_global(at(k.add(vc, off)), k.ld_shared(Type::u16, at(sa, 2 * hd)));
    });
  });

  k.comment("scores: a warp per position, each lane " + std::to_string(per_lane) + " elements of the K row");
  Reg kc = k.add(k.param("k_cache"), head_off);
  Reg lane_bytes = k.mul(lane, per_lane * 2);
  Reg q_lane = k.mad_lo(lane, per_lane * 4, qs_base);
  auto score = [&](const std::vector<Reg>& words, const Reg& j) {
    Reg dot = k.mov(Type::f32, 0.0f);
    for (uint32_t c = 0; c < per_lane; c += 4) {
      const uint32_t m = std::min(4u, per_lane - c);
      std::vector<Reg> qv = ld_vec(k, Space::shared, Type::f32, m, q_lane, 4 * c);
      for (uint32_t e = 0; e < m; ++e)
        k.fma(dot, half_to_f32(k, words[(c + e) / 2], 16 * ((c + e) % 2)), qv[e], dot);
    }
    dot = warp_allreduce(k, dot, ReduceOp::sum_f32);
    k.when(k.setp(Cmp::eq, lane, 0u), [&] { k.st_shared(at(k.mad_lo(k.sub(j, start), 4u, sc_base)), dot); });
  };
  Reg cache_end = k.selp(pos, end, own, Type::u32);   // the token's own row is in shared memory
  Reg j = k.reg(Type::u32);
  k.for_range(j, k.add(start, warp), cache_end, kAttnThreads / 32, [&] {
    Reg row = k.add(kc, k.mul_wide(j, kv_dim * 2));
    score(ld_vec(k, Space::global, Type::u32, per_lane / 2, k.add(row, k.cvt(Type::u64, lane_bytes))), j);
  });
  k.if_(k.and_(own, k.setp(Cmp::eq, warp, 0u)), [&] {
    score(ld_vec(k, Space::shared, Type::u32, per_lane / 2, k.add(kvs_base, lane_bytes)), pos);
  });
  k.bar_sync(0);

  k.comment("softmax numerator over the split: max, then 2^((s - max) * log2 e) kept in sc, and their sum");
  Reg r = k.reg(Type::u32);
  Reg mx = k.mov(Type::f32, -std::numeric_limits<float>::infinity());
  k.for_range(r, tid, n, kAttnThreads, [&] { k.max(mx, mx, k.ld_shared(Type::f32, at(k.mad_lo(r, 4u, sc_base)))); });
  Reg m = block_allreduce(k, mx, ReduceOp::max_f32, red, kAttnThreads);
  Reg sum = k.mov(Type::f32, 0.0f);
  k.for_range(r, tid, n, kAttnThreads, [&] {
    Reg a = k.mad_lo(r, 4u, sc_base);
    Reg e = k.ex2_approx(k.mul(k.sub(k.ld_shared(Type::f32, at(a)), m), kLog2e));
    k.st_shared(at(a), e);
    k.add(sum, sum, e);
  });
  Reg l = block_allreduce(k, sum, ReduceOp::sum_f32, red, kAttnThreads);   // its barriers publish sc

  k.comment("unnormalised V sum: thread per dimension, positions in order (the token's own last)");
  Reg alone = k.setp(Cmp::lt, pos, s.chunk);   // one split reaches the token: it writes the output
  Reg inv = k.reg(Type::f32);
  k.div(inv, 1.0f, l);
  Reg part_param = k.param("part"), out_param = k.param("out");
  Reg part_head = k.add(part_param, k.mul_wide(h, s.splits() * stride));
  Reg part = k.add(part_head, k.mul_wide(split, stride));
  Reg out = k.add(out_param, k.mul_wide(h, hd * 4));
  Reg vc = k.add(k.add(k.param("v_cache"), head_off), k.mul_wide(start, kv_dim * 2));
  Reg n_cache = k.selp(k.sub(n, 1u), n, own, Type::u32);
  Reg d = k.reg(Type::u32);
  k.for_range(d, tid, hd, kAttnThreads, [&] {
    Reg acc = k.mov(Type::f32, 0.0f);
    Reg vd = k.add(vc, k.mul_wide(d, 2u));
    k.for_range(r, 0u, n_cache, 1u, [&] {
      Reg e = k.ld_shared(Type::f32, at(k.mad_lo(r, 4u, sc_base)));
      Reg hv = k.ld_global(Type::u16, at(k.add(vd, k.mul_wide(r, kv_dim * 2))));
      k.fma(acc, e, k.cvt(Type::f32, k.bitcast(Type::f16, hv)), acc);
    });
    k.when(own, [&] {
      Reg e = k.ld_shared(Type::f32, at(k.mad_lo(n_cache, 4u, sc_base)));
      Reg hv = k.ld_shared(Type::u16, at(k.mad_lo(d, 2u, kvs_base), 2 * hd));
      k.fma(acc, e, k.cvt(Type::f32, k.bitcast(Type::f16, hv)), acc);
    });
    k.if_else(alone, [&] { k.st_global(at(k.add(out, k.mul_wide(d, 4u))), k.mul(acc, inv)); },
              [&] { k.st_global(at(k.add(part, k.mul_wide(k.add(d, 2u), 4u))), acc); });
  });
  k.when(alone, [&] { k.ret(); });

  k.comment("several splits: publish this one's part; the last block of the head to finish combines them");
  Reg is_t0 = k.setp(Cmp::eq, tid, 0u);
  k.when(is_t0, [&] {
    k.st_global(at(part), m);
    k.st_global(at(part, 4), l);
  });
  k.bar_sync(0);   // every thread's part precedes thread 0's release
  Reg n_split = k.add(k.div(pos, s.chunk), 1u);   // splits that reach the token
  last_block_or_return(k, is_t0, k.add(k.param("sync"), k.mul_wide(h, 4u)), n_split, cell);

  k.comment("the reduction: weights 2^((max_s - max) log2 e) and sums per split in shared memory, then V in split order");
  Reg ml_base = k.shared_addr(ml);
  Reg sp = k.reg(Type::u32);
  Reg lmx = k.mov(Type::f32, -std::numeric_limits<float>::infinity());
  k.for_range(sp, tid, n_split, kAttnThreads, [&] {
    Reg p = k.add(part_head, k.mul_wide(sp, stride));
    Reg ms = k.ld_global(Type::f32, at(p)), ls = k.ld_global(Type::f32, at(p, 4));
    Reg a = k.mad_lo(sp, 8u, ml_base);
    k.st_shared(at(a), ms);
    k.st_shared(at(a, 4), ls);
    k.max(lmx, lmx, ms);
  });
  Reg gmx = block_allreduce(k, lmx, ReduceOp::max_f32, red, kAttnThreads);
  k.for_range(sp, tid, n_split, kAttnThreads, [&] {
    Reg a = k.mad_lo(sp, 8u, ml_base);
    k.st_shared(at(a), k.ex2_approx(k.mul(k.sub(k.ld_shared(Type::f32, at(a)), gmx), kLog2e)));
  });
  k.bar_sync(0);
  Reg total = k.mov(Type::f32, 0.0f);
  k.for_range(sp, 0u, n_split, 1u, [&] {
    Reg a = k.mad_lo(sp, 8u, ml_base);
    k.fma(total, k.ld_shared(Type::f32, at(a, 4)), k.ld_shared(Type::f32, at(a)), total);
  });
  Reg tinv = k.reg(Type::f32);
  k.div(tinv, 1.0f, total);
  k.for_range(d, tid, hd, kAttnThreads, [&] {
    Reg acc = k.mov(Type::f32, 0.0f);
    Reg off = k.mul_wide(k.add(d, 2u), 4u);
    k.for_range(sp, 0u, n_split, 1u, [&] {
      Reg w = k.ld_shared(Type::f32, at(k.mad_lo(sp, 8u, ml_base)));
      k.fma(acc, k.ld_global(Type::f32, at(k.add(k.add(part_head, k.mul_wide(sp, stride)), off))), w, acc);
    });
    k.st_global(at(k.add(out, k.mul_wide(d, 4u))), k.mul(acc, tinv));
  });
  return emit.done(true);
}

}  // namespace ptxlm::kernels
