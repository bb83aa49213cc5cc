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

void check_heads(const char* what, uint32_t n_head, uint32_t n_head_kv, uint32_t hd) {
  if (n_head == 0 || n_head_kv == 0 || n_head % n_head_kv)
    throw Error(std::string(what) + ": n_head must be a positive multiple of n_head_kv");
  if (hd == 0 || hd % 64 || hd > 256) throw Error(std::string(what) + ": head_dim must be 64, 128, 192 or 256");
}

}  // namespace

// ---------------------------------------------------------------- RoPE + append

LaunchGeometry rope_append_geometry(const RopeShape& s) {
  check_heads("rope_append", s.n_head, s.n_head_kv, s.head_dim);
  return LaunchGeometry{{s.n_head + s.n_head_kv, 1, 1}, {s.head_dim / 2, 1, 1}, 0};
}

GeneratedKernel rope_append_kernel(const RopeShape& s, Target t, const InlineTarget* in) {
  const LaunchGeometry g = rope_append_geometry(s);
  const uint32_t hd = s.head_dim, half = hd / 2, kv_dim = s.n_head_kv * hd;
  ParamList params;
  params.add_ptr("q").add_ptr("k").add_ptr("v");
  if (s.bias) params.add_ptr("bq").add_ptr("bk").add_ptr("bv");
  if (s.qk_norm) params.add_ptr("q_norm").add_ptr("k_norm");
  params.add_ptr("rope").add_ptr("pos").add_ptr("k_cache").add_ptr("v_cache");
  std::string name("rope_append");
  name.append(shape_suffix(s.n_head, s.n_head_kv, hd));
  if (s.neox) name.append("_neox");
  if (s.bias) name.append("_bias");
  if (s.qk_norm) name.append("_qknorm");
  Emit emit(in, name.c_str(), t, params, g);
  Kernel& k = emit.k();
  Symbol scratch = k.shared_array("red", Type::f32, half / 32);

  Reg blk = k.special(Sreg::ctaid_x), i = k.special(Sreg::tid_x);
  Reg is_q = k.setp(Cmp::lt, blk, s.n_head);
  Reg head = k.selp(blk, k.sub(blk, s.n_head), is_q, Type::u32);
  // The pair this thread rotates: (2i, 2i + 1) or (i, i + hd/2), as byte offsets in the head.
  Reg ea = s.neox ? i : k.shl(i, 1u);
  Reg eb = k.add(ea, s.neox ? half : 1u);
  Reg oa = k.mul_wide(ea, 4u), ob = k.mul_wide(eb, 4u);
  Reg head_off = k.mul_wide(head, hd * 4);

  Reg q = k.param("q"), kk = k.param("k");
  Reg src = k.add(k.selp(q, kk, is_q, Type::u64), head_off);
  Reg x0 = k.ld_global(Type::f32, at(k.add(src, oa)));
  Reg x1 = k.ld_global(Type::f32, at(k.add(src, ob)));
  if (s.bias) {
    k.comment("qwen2: biases first");
    Reg bq = k.param("bq"), bk = k.param("bk");
    Reg bsrc = k.add(k.selp(bq, bk, is_q, Type::u64), head_off);
    k.add(x0, x0, k.ld_global_nc(Type::f32, at(k.add(bsrc, oa))));
    k.add(x1, x1, k.ld_global_nc(Type::f32, at(k.add(bsrc, ob))));
  }
  if (s.qk_norm) {
    k.comment("gemma3: RMSNorm of the head, then its weight");
    Reg ss = k.mul(x0, x0);
    k.fma(ss, x1, x1, ss);
    Reg total = block_allreduce(k, ss, ReduceOp::sum_f32, scratch, half);
    Reg root = k.sqrt(k.add(k.div(total, float(hd)), s.eps));
    Reg scale = k.reg(Type::f32);
    k.div(scale, 1.0f, root);
    Reg qn = k.param("q_norm"), kn = k.param("k_norm");
    Reg w = k.selp(qn, kn, is_q, Type::u64);
    Reg wa = k.ld_global_nc(Type::f32, at(k.add(w, oa)));
    Reg wb = k.ld_global_nc(Type::f32, at(k.add(w, ob)));
    k.mul(x0, k.mul(x0, scale), wa);
    k.mul(x1, k.mul(x1, scale), wb);
  }
  k.comment("rotate by the table's cos/sin for this position");
  Reg pos = k.ld_global(Type::u32, at(k.param("pos")));
  Reg rope = k.param("rope");
  Reg cs_addr = k.add(rope, k.mul_wide(k.mad_lo(pos, half, i), 8u));
  std::vector<Reg> cs = ld_vec(k, Space::global, Type::f32, 2, cs_addr, 0, true);
  Reg a_c = k.mul(x0, cs[0]);
  Reg y0 = k.sub(a_c, k.mul(x1, cs[1]));
  Reg a_s = k.mul(x0, cs[1]);
  Reg y1 = k.add(a_s, k.mul(x1, cs[0]));

  k.if_else(
      is_q,
      [&] {
        Reg dst = k.add(q, head_off);
        k.st_global(at(k.add(dst, oa)), y0);
        k.st_global(at(k.add(dst, ob)), y1);
      },
      [&] {
        k.comment("K (rotated) and V (with its bias) to row pos of the f16 caches");
        Reg row = k.mul_wide(k.mad_lo(pos, kv_dim, k.mul(head, hd)), 2u);
        Reg ha = k.mul_wide(ea, 2u), hb = k.mul_wide(eb, 2u);
        Reg kc = k.add(k.param("k_cache"), row), vc = k.add(k.param("v_cache"), row);
        Reg k0 = k.cvt(Type::f16, y0), k1 = k.cvt(Type::f16, y1);   // one emitting call per argument list
        k.st_global(at(k.add(kc, ha)), k0);
        k.st_global(at(k.add(kc, hb)), k1);
        Reg vsrc = k.add(k.param("v"), head_off);
        Reg v0 = k.ld_global(Type::f32, at(k.add(vsrc, oa)));
        Reg v1 = k.ld_global(Type::f32, at(k.add(vsrc, ob)));
        if (s.bias) {
          Reg bv = k.add(k.param("bv"), head_off);
          k.add(v0, v0, k.ld_global_nc(Type::f32, at(k.add(bv, oa))));
          k.add(v1, v1, k.ld_global_nc(Type::f32, at(k.add(bv, ob))));
        }
        Reg h0 = k.cvt(Type::f16, v0), h1 = k.cvt(Type::f16, v1);
        k.st_global(at(k.add(vc, ha)), h0);
        k.st_global(at(k.add(vc, hb)), h1);
      });
  return emit.done(true);
}

// ---------------------------------------------------------------- attention

namespace {

void check_attention(const AttentionShape& s) {
  check_heads("attention", s.n_head, s.n_head_kv, s.head_dim);
  if (s.n_ctx == 0 || s.chunk == 0 || s.chunk > 4096) throw Error("attention: bad n_ctx or chunk");
  if (s.splits() > 65535) throw Error("attention: more than 65535 splits");
}

}  // namespace

LaunchGeometry attention_split_geometry(const AttentionShape& s) {
  check_attention(s);
  return LaunchGeometry{{s.n_head, s.splits(), 1}, {kAttnThreads, 1, 1}, 0};
}

GeneratedKernel attention_split_kernel(const AttentionShape& s, Target t, const InlineTarget* in) {
  const LaunchGeometry g = attention_split_geometry(s);
  const uint32_t hd = s.head_dim, kv_dim = s.n_head_kv * hd, group = s.n_head / s.n_head_kv;
  const uint32_t per_lane = hd / 32;   // elements of a K row per lane (2, 4, ... 16)
  ParamList params;
  params.add_ptr("q").add_ptr("k_cache").add_ptr("v_cache").add_ptr("pos").add_ptr("part");
  std::string name("attention_split");
  name.append(shape_suffix(s.n_head, s.n_head_kv, hd)).append("_c").append(std::to_string(s.chunk));
  if (s.window) name.append("_w").append(std::to_string(s.window));
  Emit emit(in, name.c_str(), t, params, g);
  Kernel& k = emit.k();
  Symbol qs = k.shared_array("qs", Type::f32, hd, 16);
  Symbol sc = k.shared_array("sc", Type::f32, s.chunk, 16);
  Symbol red = k.shared_array("red", Type::f32, kAttnThreads / 32);

  Reg h = k.special(Sreg::ctaid_x), split = k.special(Sreg::ctaid_y), tid = k.special(Sreg::tid_x);
  Reg lane = k.and_(tid, 31u), warp = k.shr(tid, 5u);
  Reg pos = k.ld_global(Type::u32, at(k.param("pos")));
  Reg first = k.mul(split, s.chunk);
  k.comment("splits past the token do nothing: the reduction never reads them");
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
  Reg kvh = k.div(h, group);
  Reg head_off = k.mul_wide(k.mul(kvh, hd), 2u);   // bytes into a cache row

  k.comment("q, times the attention scale, in shared memory");
  Reg q_param = k.param("q");
  Reg q = k.add(q_param, k.mul_wide(h, hd * 4));
  Reg qs_base = k.shared_addr(qs), sc_base = k.shared_addr(sc);
  Reg d = k.reg(Type::u32);
  k.for_range(d, tid, hd, kAttnThreads, [&] {
    Reg v = k.ld_global(Type::f32, at(k.add(q, k.mul_wide(d, 4u))));
    Reg scaled = k.mul(v, s.scale);
    k.st_shared(at(k.mad_lo(d, 4u, qs_base)), scaled);
  });
  k.bar_sync(0);

  k.comment("scores: a warp per position, each lane " + std::to_string(per_lane) + " elements of the K row");
  Reg kc = k.add(k.param("k_cache"), head_off);
  Reg lane_bytes = k.cvt(Type::u64, k.mul(lane, per_lane * 2));
  Reg q_lane = k.mad_lo(lane, per_lane * 4, qs_base);
  Reg j = k.reg(Type::u32);
  k.for_range(j, k.add(start, warp), end, kAttnThreads / 32, [&] {
    Reg row = k.add(kc, k.mul_wide(j, kv_dim * 2));
    std::vector<Reg> words = ld_vec(k, Space::global, Type::u32, per_lane / 2, k.add(row, lane_bytes));
    Reg dot = k.mov(Type::f32, 0.0f);
    for (uint32_t c = 0; c < per_lane; c += 4) {
      const uint32_t m = std::min(4u, per_lane - c);
      std::vector<Reg> qv = ld_vec(k, Space::shared, Type::f32, m, q_lane, 4 * c);
      for (uint32_t e = 0; e < m; ++e)
        k.fma(dot, half_to_f32(k, words[(c + e) / 2], 16 * ((c + e) % 2)), qv[e], dot);
    }
    dot = warp_allreduce(k, dot, ReduceOp::sum_f32);
    k.when(k.setp(Cmp::eq, lane, 0u), [&] { k.st_shared(at(k.mad_lo(k.sub(j, start), 4u, sc_base)), dot); });
  });
  k.bar_sync(0);

  k.comment("softmax numerator over the split: max, then 2^((s - max) * log2 e) kept in sc, and their sum");
  Reg i = k.reg(Type::u32);
  Reg mx = k.mov(Type::f32, -std::numeric_limits<float>::infinity());
  k.for_range(i, tid, n, kAttnThreads, [&] { k.max(mx, mx, k.ld_shared(Type::f32, at(k.mad_lo(i, 4u, sc_base)))); });
  Reg m = block_allreduce(k, mx, ReduceOp::max_f32, red, kAttnThreads);
  Reg sum = k.mov(Type::f32, 0.0f);
  k.for_range(i, tid, n, kAttnThreads, [&] {
    Reg a = k.mad_lo(i, 4u, sc_base);
    Reg e = k.ex2_approx(k.mul(k.sub(k.ld_shared(Type::f32, at(a)), m), kLog2e));
    k.st_shared(at(a), e);
    k.add(sum, sum, e);
  });
  Reg l = block_allreduce(k, sum, ReduceOp::sum_f32, red, kAttnThreads);   // its barriers publish sc

  k.comment("unnormalised V sum: thread per dimension, positions in order");
  Reg part_param = k.param("part");
  Reg part = k.add(part_param, k.mul_wide(k.mad_lo(h, s.splits(), split), (hd + 2) * 4));
  Reg vc_head = k.add(k.param("v_cache"), head_off);
  Reg vc = k.add(vc_head, k.mul_wide(start, kv_dim * 2));
  k.for_range(d, tid, hd, kAttnThreads, [&] {
    Reg acc = k.mov(Type::f32, 0.0f);
    Reg vd = k.add(vc, k.mul_wide(d, 2u));
    k.for_range(i, 0u, n, 1u, [&] {
      Reg e = k.ld_shared(Type::f32, at(k.mad_lo(i, 4u, sc_base)));
      Reg hv = k.ld_global(Type::u16, at(k.add(vd, k.mul_wide(i, kv_dim * 2))));
      k.fma(acc, e, k.cvt(Type::f32, k.bitcast(Type::f16, hv)), acc);
    });
    k.st_global(at(k.add(part, k.mul_wide(k.add(d, 2u), 4u))), acc);
  });
  k.when(k.setp(Cmp::eq, tid, 0u), [&] {
    k.st_global(at(part), m);
    k.st_global(at(part, 4), l);
  });
  return emit.done(true);
}

LaunchGeometry attention_reduce_geometry(const AttentionShape& s) {
  check_attention(s);
  return LaunchGeometry{{s.n_head, 1, 1}, {std::min(s.head_dim, 256u), 1, 1}, 0};
}

GeneratedKernel attention_reduce_kernel(const AttentionShape& s, Target t, const InlineTarget* in) {
  const LaunchGeometry g = attention_reduce_geometry(s);
  const uint32_t hd = s.head_dim, threads = g.block.x, stride = (hd + 2) * 4;
  ParamList params;
  params.add_ptr("part").add_ptr("pos").add_ptr("out");
  std::string name("attention_reduce");
  name.append(shape_suffix(s.n_head, s.n_head_kv, hd)).append("_c").append(std::to_string(s.chunk));
  Emit emit(in, name.c_str(), t, params, g);
  Kernel& k = emit.k();

  Reg h = k.special(Sreg::ctaid_x), tid = k.special(Sreg::tid_x);
  Reg pos = k.ld_global(Type::u32, at(k.param("pos")));
  Reg n_split = k.add(k.div(pos, s.chunk), 1u);   // splits that reach the token
  Reg part_param = k.param("part");
  Reg part = k.add(part_param, k.mul_wide(h, s.splits() * stride));
  Reg sp = k.reg(Type::u32);

  k.comment("the largest split maximum, then the total of the rescaled sums");
  Reg mx = k.mov(Type::f32, -std::numeric_limits<float>::infinity());
  k.for_range(sp, 0u, n_split, 1u, [&] {
    k.max(mx, mx, k.ld_global(Type::f32, at(k.add(part, k.mul_wide(sp, stride)))));
  });
  Reg total = k.mov(Type::f32, 0.0f);
  k.for_range(sp, 0u, n_split, 1u, [&] {
    Reg p = k.add(part, k.mul_wide(sp, stride));
    Reg w = k.ex2_approx(k.mul(k.sub(k.ld_global(Type::f32, at(p)), mx), kLog2e));
    k.fma(total, k.ld_global(Type::f32, at(p, 4)), w, total);
  });
  Reg inv = k.reg(Type::f32);
  k.div(inv, 1.0f, total);

  Reg out_param = k.param("out");
  Reg out = k.add(out_param, k.mul_wide(h, hd * 4));
  Reg d = k.reg(Type::u32);
  k.for_range(d, tid, hd, threads, [&] {
    Reg acc = k.mov(Type::f32, 0.0f);
    Reg off = k.mul_wide(k.add(d, 2u), 4u);
    k.for_range(sp, 0u, n_split, 1u, [&] {
      Reg p = k.add(part, k.mul_wide(sp, stride));
      Reg w = k.ex2_approx(k.mul(k.sub(k.ld_global(Type::f32, at(p)), mx), kLog2e));
      k.fma(acc, k.ld_global(Type::f32, at(k.add(p, off))), w, acc);
    });
    k.st_global(at(k.add(out, k.mul_wide(d, 4u))), k.mul(acc, inv));
  });
  return emit.done(true);
}

}  // namespace ptxlm::kernels
