#include "kernels/decode/elementwise.h"

#include <algorithm>
#include <cctype>
#include <functional>
#include <string>

#include "kernels/decode/gemv_types.h"
#include "kernels/decode/layout.h"
#include "kernels/decode/util.h"
#include "kernels/examples/common.h"

namespace ptxlm::kernels {

using namespace ptx;
using gguf::GgmlType;

namespace {

constexpr uint32_t kThreads = 256;

Reg ld_byte(Kernel& k, const Reg& addr, Type mem = Type::u8) {
  Reg v = k.reg(mem == Type::s8 ? Type::s32 : Type::u32);
  MemOpt o;
  o.nc = true;
  o.mem_type = mem;
  k.ld(Space::global, v, at(addr), o);
  return v;
}

Reg half_at(Kernel& k, const Reg& addr) {
  Reg bits = k.reg(Type::u16);
  MemOpt o;
  o.nc = true;
  k.ld(Space::global, bits, at(addr), o);
  return k.cvt(Type::f32, k.bitcast(Type::f16, bits));
}

Reg plus(Kernel& k, const Reg& base, const Reg& offset_u32) { return k.add(base, k.cvt(Type::u64, offset_u32)); }

}  // namespace

Reg dequant_element(Kernel& k, const RowLayout& l, const Reg& row, const Reg& e) {
  switch (l.type) {
    case GgmlType::F32: return k.ld_global_nc(Type::f32, at(k.add(row, k.mul_wide(e, 4u))));
    case GgmlType::F16: return half_at(k, k.add(row, k.mul_wide(e, 2u)));
    case GgmlType::BF16: {   // the f32 whose top 16 bits these are
      Reg bits = k.reg(Type::u16);
      MemOpt o;
      o.nc = true;
      k.ld(Space::global, bits, at(k.add(row, k.mul_wide(e, 2u))), o);
      return k.bitcast(Type::f32, k.shl(k.cvt(Type::u32, bits), 16u));
    }
    case GgmlType::Q8_0: {
      Reg b = k.shr(e, 5u), j = k.and_(e, 31u);
      Reg q = ld_byte(k, plus(k, row, k.mad_lo(b, 32u, j)), Type::s8);
      Reg d = half_at(k, plus(k, row, k.mad_lo(b, 2u, l.planes[1].offset)));
      return k.mul(k.cvt(Type::f32, q), d);
    }
    case GgmlType::Q4_0:
    case GgmlType::Q4_1:
    case GgmlType::Q5_0: {
      Reg b = k.shr(e, 5u), j = k.and_(e, 31u);
      Reg byte = ld_byte(k, plus(k, row, k.mad_lo(b, 16u, k.and_(j, 15u))));
      Reg nib = k.and_(k.shr(byte, k.shl(k.shr(j, 4u), 2u)), 15u);   // low nibble for j < 16, high after
      if (l.type == GgmlType::Q4_1) {
        Reg dm = k.ld_global_nc(Type::u32, at(plus(k, row, k.mad_lo(b, 4u, l.planes[1].offset))));
        Reg d = half_to_f32(k, dm, 0);
        Reg dq = k.mul(k.cvt(Type::f32, nib), d);
        return k.add(dq, half_to_f32(k, dm, 16));
      }
      Reg q = nib;
      int offset = 8;
      size_t d_plane = 1;
      if (l.type == GgmlType::Q5_0) {   // fifth bit: qh bit j for either nibble
        Reg qh = k.ld_global_nc(Type::u32, at(plus(k, row, k.mad_lo(b, 4u, l.planes[1].offset))));
        q = k.or_(nib, k.shl(k.and_(k.shr(qh, j), 1u), 4u));
        offset = 16;
        d_plane = 2;
      }
      Reg qs = k.sub(k.bitcast(Type::s32, q), offset);
      Reg d = half_at(k, plus(k, row, k.mad_lo(b, 2u, l.planes[d_plane].offset)));
      return k.mul(k.cvt(Type::f32, qs), d);
    }
    case GgmlType::Q4_K:
    case GgmlType::Q5_K: {
      // Quants plane (128 bytes per block), then headers (16 bytes per block);
      // Q5_K's qh plane after them (32 bytes per block).
      Reg b = k.shr(e, 8u);
      Reg qblk = k.add(row, k.mul_wide(b, 128u));
      Reg blk = plus(k, row, k.mad_lo(b, 16u, l.planes[1].offset));
      Reg r = k.and_(e, 255u), c = k.shr(r, 6u), li = k.and_(r, 63u);
      Reg hi = k.shr(li, 5u);                       // 0: low nibble (sub-block 2c), 1: high (2c + 1)
      Reg s = k.add(k.shl(c, 1u), hi);
      Reg byte = ld_byte(k, plus(k, qblk, k.mad_lo(c, 32u, k.and_(li, 31u))));
      Reg nib = k.and_(k.shr(byte, k.shl(hi, 2u)), 15u);
      if (l.type == GgmlType::Q5_K) {   // the fifth bit: bit s of qh[l]
        Reg qh = ld_byte(k, plus(k, row, k.mad_lo(b, 32u, k.add(k.and_(li, 31u), l.planes[2].offset))));
        nib = k.or_(nib, k.shl(k.and_(k.shr(qh, s), 1u), 4u));
      }
      Reg h0 = k.ld_global_nc(Type::u32, at(blk));
      Reg h1 = k.ld_global_nc(Type::u32, at(blk, 4)), h2 = k.ld_global_nc(Type::u32, at(blk, 8));
      Reg h3 = k.ld_global_nc(Type::u32, at(blk, 12));
      Reg shift = k.shl(k.and_(s, 3u), 3u);
      Reg big = k.setp(Cmp::ge, s, 4u);
      Reg b1 = k.bfe(h1, shift, 8u), b2 = k.bfe(h2, shift, 8u), b3 = k.bfe(h3, shift, 8u);
      Reg b3_lo = k.and_(b3, 15u), b3_hi = k.shr(b3, 4u);
      Reg sc_big = k.or_(b3_lo, k.shl(k.shr(b1, 6u), 4u)), mn_big = k.or_(b3_hi, k.shl(k.shr(b2, 6u), 4u));
      Reg sc_small = k.and_(b1, 63u), mn_small = k.and_(b2, 63u);
      Reg sc = k.selp(sc_big, sc_small, big, Type::u32), mn = k.selp(mn_big, mn_small, big, Type::u32);
      Reg d = half_to_f32(k, h0, 0), dmin = half_to_f32(k, h0, 16);
      Reg d1 = k.mul(d, k.cvt(Type::f32, sc)), m1 = k.mul(dmin, k.cvt(Type::f32, mn));
      return k.sub(k.mul(d1, k.cvt(Type::f32, nib)), m1);
    }
    case GgmlType::Q6_K: {
      Reg b = k.shr(e, 8u), r = k.and_(e, 255u);
      Reg h = k.shr(r, 7u), rr = k.and_(r, 127u);
      Reg qi = k.shr(rr, 5u), li = k.and_(rr, 31u);   // q1..q4 and l
      Reg odd32 = k.shl(k.and_(qi, 1u), 5u);   // q2 and q4 read ql 32 further
      Reg ql_idx = k.add(odd32, k.mad_lo(h, 64u, li));
      Reg ql = ld_byte(k, plus(k, row, k.mad_lo(b, 128u, ql_idx)));
      Reg nib = k.and_(k.shr(ql, k.shl(k.shr(qi, 1u), 2u)), 15u);
      Reg qh_idx = k.add(k.mad_lo(h, 32u, li), l.planes[1].offset);
      Reg qh = ld_byte(k, plus(k, row, k.mad_lo(b, 64u, qh_idx)));
      Reg hb = k.and_(k.shr(qh, k.shl(qi, 1u)), 3u);
      Reg q = k.sub(k.bitcast(Type::s32, k.or_(nib, k.shl(hb, 4u))), 32);
      Reg two_q = k.shl(qi, 1u);   // scale is + 2·(q index)
      Reg sc_idx = k.add(k.add(two_q, k.mad_lo(h, 8u, k.shr(li, 4u))), l.planes[2].offset);
      Reg sc = ld_byte(k, plus(k, row, k.mad_lo(b, 16u, sc_idx)), Type::s8);
      Reg d = half_at(k, plus(k, row, k.mad_lo(b, 2u, l.planes[3].offset)));
      Reg dsc = k.mul(d, k.cvt(Type::f32, sc));
      return k.mul(dsc, k.cvt(Type::f32, q));
    }
    case GgmlType::Q2_K:
    case GgmlType::Q3_K: {
      // Element 128h + 32kk + li: field kk of qs[32h + li], group g = e / 16.
      Reg b = k.shr(e, 8u), r = k.and_(e, 255u);
      Reg h = k.shr(r, 7u), kk = k.and_(k.shr(r, 5u), 3u), li = k.and_(r, 31u), g = k.shr(r, 4u);
      Reg qs = ld_byte(k, plus(k, row, k.mad_lo(b, 64u, k.mad_lo(h, 32u, li))));
      Reg q = k.and_(k.shr(qs, k.shl(kk, 1u)), 3u);
      if (l.type == GgmlType::Q2_K) {   // scales[g]: low nibble the scale, high the min; d, dmin
        Reg sc = ld_byte(k, plus(k, row, k.mad_lo(b, 16u, k.add(g, l.planes[1].offset))));
        Reg dm = k.ld_global_nc(Type::u32, at(plus(k, row, k.mad_lo(b, 4u, l.planes[2].offset))));
        Reg dl = k.mul(half_to_f32(k, dm, 0), k.cvt(Type::f32, k.and_(sc, 15u)));
        Reg ml = k.mul(half_to_f32(k, dm, 16), k.cvt(Type::f32, k.shr(sc, 4u)));
        return k.sub(k.mul(dl, k.cvt(Type::f32, q)), ml);
      }
      // Q3_K: the code is q − 4 unless hmask[li] bit 4h + kk is set; q3_k_scale(g) − 32.
      Reg hm = ld_byte(k, plus(k, row, k.mad_lo(b, 32u, k.add(li, l.planes[1].offset))));
      Reg hbit = k.and_(k.shr(hm, k.add(k.shl(h, 2u), kk)), 1u);
      Reg v = k.sub(k.bitcast(Type::s32, k.or_(q, k.shl(hbit, 2u))), 4);
      Reg scales = plus(k, row, k.mad_lo(b, 12u, l.planes[2].offset));
      Reg lo_byte = ld_byte(k, k.add(scales, k.cvt(Type::u64, k.and_(g, 7u))));
      Reg lo = k.and_(k.shr(lo_byte, k.shl(k.shr(g, 3u), 2u)), 15u);   // g ≥ 8: the high nibble of s[g − 8]
      Reg top_byte = ld_byte(k, k.add(scales, k.cvt(Type::u64, k.add(k.and_(g, 3u), 8u))));
      Reg top = k.and_(k.shr(top_byte, k.shl(k.shr(g, 2u), 1u)), 3u);
      Reg sc = k.sub(k.bitcast(Type::s32, k.or_(lo, k.shl(top, 4u))), 32);
      Reg d = half_at(k, plus(k, row, k.mad_lo(b, 2u, l.planes[3].offset)));
      return k.mul(k.mul(d, k.cvt(Type::f32, sc)), k.cvt(Type::f32, v));
    }
    case GgmlType::IQ4_NL:
    case GgmlType::IQ4_XS: {
      // IQ4_NL: 32-element blocks laid out as Q4_0's, y = d·v; IQ4_XS: eight
      // such sub-blocks ib per 256, y = (d·(ls − 32))·v.
      const bool xs = l.type == GgmlType::IQ4_XS;
      Reg b = k.shr(e, xs ? 8u : 5u), j = k.and_(e, 31u);
      Reg ib = xs ? k.and_(k.shr(e, 5u), 7u) : Reg{};
      Reg qi = xs ? k.mad_lo(b, 128u, k.mad_lo(ib, 16u, k.and_(j, 15u))) : k.mad_lo(b, 16u, k.and_(j, 15u));
      Reg byte = ld_byte(k, plus(k, row, qi));
      Reg code = k.and_(k.shr(byte, k.shl(k.shr(j, 4u), 2u)), 15u);
      Reg v = k.cvt(Type::f32, Iq4Table(k).value(k, code));
      if (!xs) return k.mul(half_at(k, plus(k, row, k.mad_lo(b, 2u, l.planes[1].offset))), v);
      Reg hdr = plus(k, row, k.mad_lo(b, 8u, l.planes[1].offset));
      Reg h0 = k.ld_global_nc(Type::u32, at(hdr)), sl = k.ld_global_nc(Type::u32, at(hdr, 4));
      Reg lo = k.bfe(sl, k.shl(ib, 2u), 4u);                      // nibble ib % 2 of scales_l[ib / 2]
      Reg top = k.bfe(h0, k.add(k.shl(ib, 1u), 16u), 2u);         // bits 2ib of scales_h
      Reg ls = k.sub(k.bitcast(Type::s32, k.or_(lo, k.shl(top, 4u))), 32);
      return k.mul(k.mul(half_to_f32(k, h0, 0), k.cvt(Type::f32, ls)), v);
    }
    default: break;
  }
  throw Error(std::string("embed: weight type ") + gguf::type_traits(l.type).name + " is not supported");
}


// The geometry for a launch of its own (in = null) or inline into `in`:
// the public geometry and the generator both come here, so each shape is
// checked in one place.
static LaunchGeometry embed_geometry(const EmbedShape& s, const InlineTarget* in) {
  row_layout(s.type, s.n);   // checks the type and the width
  check_batch("embed", s.tokens, in);
  return LaunchGeometry{{ceil_div(s.n, kThreads), s.tokens, 1}, {kThreads, 1, 1}, 0};
}

LaunchGeometry embed_geometry(const EmbedShape& s) { return embed_geometry(s, nullptr); }

GeneratedKernel embed_kernel(const EmbedShape& s, Target t, const InlineTarget* in) {
  const LaunchGeometry g = embed_geometry(s, in);
  const RowLayout l = row_layout(s.type, s.n);
  ParamList params;
  params.add_ptr("w").add_ptr("token").add_ptr("x");
  std::string type = gguf::type_traits(s.type).name;
  for (char& c : type) c = char(std::tolower(static_cast<unsigned char>(c)));
  std::string name("embed_");
  name.append(std::to_string(s.n)).append("_").append(type);
  if (s.tokens > 1) name.append("_t").append(std::to_string(s.tokens));
  Emit emit(in, name.c_str(), t, params, g);
  Kernel& k = emit.k();
  Reg e = k.global_index_x();
  Reg w = k.param("w"), tok = k.param("token"), x = k.param("x");
  if (s.tokens > 1) {   // row t: token t, x + t·n
    Reg row = k.special(Sreg::ctaid_y);
    tok = k.add(tok, k.mul_wide(row, 4u));
    x = k.add(x, k.mul_wide(row, s.n * 4));
  }
  k.if_(k.setp(Cmp::lt, e, s.n), [&] {
    Reg token = k.ld_global(Type::u32, at(tok));
    Reg row = k.add(w, k.mul_wide(token, l.row_bytes));
    Reg v = dequant_element(k, l, row, e);
    if (s.scale != 1.0f) v = k.mul(v, s.scale);
    k.st_global(at(k.add(x, k.mul_wide(e, 4u))), v);
  });
  return emit.done(true);
}

// As embed_geometry(s, in).
static LaunchGeometry add_norm_geometry(const AddNormShape& s, const InlineTarget* in) {
  if (s.n == 0 || s.n % 4) throw Error("add_norm: n must be a positive multiple of 4");
  check_batch("add_norm", s.tokens, in);
  return LaunchGeometry{{s.tokens, 1, 1}, {kThreads, 1, 1}, 0};
}

LaunchGeometry add_norm_geometry(const AddNormShape& s) { return add_norm_geometry(s, nullptr); }

GeneratedKernel add_norm_kernel(const AddNormShape& s, Target t, const InlineTarget* in) {
  const LaunchGeometry g = add_norm_geometry(s, in);
  ParamList params;
  params.add_ptr("x").add_ptr("o").add_ptr("w");
  if (s.scaled) params.add_ptr("s");
  std::string name("add_norm_");
  name.append(std::to_string(s.n));
  if (s.scaled) name.append("_scaled");
  if (s.tokens > 1) name.append("_t").append(std::to_string(s.tokens));
  Emit emit(in, name.c_str(), t, params, g);
  Kernel& k = emit.k();
  Symbol red = k.shared_array("red", Type::f32, kThreads / 32);
  Reg x = k.param("x"), o = k.param("o"), w = k.param("w");
  if (s.tokens > 1) {   // block t: rows x + t·n, o + t·n
    Reg row = k.mul_wide(k.special(Sreg::ctaid_x), s.n * 4);
    x = k.add(x, row);
    o = k.add(o, row);
  }
  // Thread t takes elements t + kThreads·j, j < per, as the loop it replaces
  // did (so the same sum of squares, in the same order: the same bits), but
  // each batch of up to kBatch of them is loaded before any is used: one
  // wait on memory a batch instead of one an element (a 1536-wide add took
  // 18 waits a warp, 12.6 us each on an H100 by the model, Gemma-4-E2B's
  // 105 a token: most of its projected token time, docs/efficiency.md). With
  // one batch (n <= kBatch · kThreads) the o, w and x loads are all issued
  // first, before the sum's reduction.
  constexpr uint32_t kBatch = 8;
  const uint32_t per = (s.n + kThreads - 1) / kThreads;
  Reg tid = k.special(Sreg::tid_x);
  MemOpt nc;
  nc.nc = true;
  // Element j's byte offset, and whether the thread has one (past the last
  // whole round of kThreads elements only).
  auto offset = [&](uint32_t j) { return k.mul_wide(k.add(tid, j * kThreads), 4u); };
  auto guarded = [&](uint32_t j, const std::function<void()>& fn) {
    if ((j + 1) * kThreads <= s.n) return fn();
    k.if_(k.setp(Cmp::lt, k.add(tid, j * kThreads), s.n), fn);
  };
  // Elements [j0, j0 + nb) of `base` (0 where the thread has none).
  auto load = [&](const Reg& base, uint32_t j0, uint32_t nb, const MemOpt& opt) {
    std::vector<Reg> v;
    for (uint32_t j = j0; j < j0 + nb; ++j) {
      v.push_back(k.mov(Type::f32, 0.0f));
      Reg a = k.add(base, offset(j));
      guarded(j, [&] { k.ld(Space::global, v.back(), at(a), opt); });
    }
    return v;
  };
  const bool one_batch = per <= kBatch;
  std::vector<Reg> ov, wv, xv;
  Reg out_scale = s.scaled ? k.ld_global_nc(Type::f32, at(k.param("s"))) : Reg{};   // with the first batch's loads
  Reg ss = k.mov(Type::f32, 0.0f);
  for (uint32_t j0 = 0; j0 < per; j0 += kBatch) {
    const uint32_t nb = std::min(kBatch, per - j0);
    ov = load(o, j0, nb, {});
    if (one_batch) wv = load(w, 0, nb, nc), xv = load(x, 0, nb, {});
    for (const Reg& v : ov) k.fma(ss, v, v, ss);   // a missing element adds 0·0: ss unchanged
  }
  Reg total = block_allreduce(k, ss, ReduceOp::sum_f32, red, kThreads);
  Reg root = k.sqrt(k.add(k.div(total, float(s.n)), s.eps));
  Reg scale = k.reg(Type::f32);
  k.div(scale, 1.0f, root);
  for (uint32_t j0 = 0; j0 < per; j0 += kBatch) {
    const uint32_t nb = std::min(kBatch, per - j0);
    if (!one_batch) ov = load(o, j0, nb, {}), wv = load(w, j0, nb, nc), xv = load(x, j0, nb, {});
    for (uint32_t b = 0; b < nb; ++b) {
      Reg scaled = k.mul(k.mul(ov[b], scale), wv[b]);
      Reg sum = k.add(xv[b], scaled);
      Reg a = k.add(x, offset(j0 + b));
      guarded(j0 + b, [&] { k.st_global(at(a), s.scaled ? k.mul(sum, out_scale) : sum); });
    }
  }
  return emit.done(true);
}

GeneratedKernel clear_u64_kernel(Target t, const InlineTarget* in, uint32_t slots) {
  const LaunchGeometry g{{1, 1, 1}, {32, 1, 1}, 0};
  check_batch("clear_u64", slots, in);
  ParamList params;
  params.add_ptr("out");
  const std::string name = slots > 1 ? "clear_u64_x" + std::to_string(slots) : "clear_u64";
  Emit emit(in, name.c_str(), t, params, g);
  Kernel& k = emit.k();
  Reg out = k.param("out");
  if (slots == 1) {
    k.when(k.setp(Cmp::eq, k.special(Sreg::tid_x), 0u), [&] { k.st_global(at(out), k.mov(Type::u64, 0ull)); });
  } else {
    Reg i = k.reg(Type::u32);
    k.for_range(i, k.special(Sreg::tid_x), slots, 32u,
                [&] { k.st_global(at(k.add(out, k.mul_wide(i, 8u))), k.mov(Type::u64, 0ull)); });
  }
  return emit.done(true);
}

}  // namespace ptxlm::kernels
