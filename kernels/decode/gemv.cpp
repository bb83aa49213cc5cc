#include "kernels/decode/gemv.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/examples/common.h"

namespace ptxlm::kernels {

using namespace ptx;
using gguf::GgmlType;

namespace {

constexpr uint32_t kTargetBlocks = 264;   // two blocks per SM on a 132-SM H100
constexpr uint32_t kQ4kBytes = 144;       // d, dmin (f16), scales[12], qs[128]

uint32_t total_rows(const GemvShape& s) {
  uint64_t n = 0;
  for (const GemvSegment& g : s.segments) n += g.rows;
  if (n > (1u << 30)) throw Error("gemv: more than 2^30 rows");
  return uint32_t(n);
}

void check_shape(const GemvShape& s) {
  if (s.segments.empty()) throw Error("gemv: no segments");
  if (s.n_in == 0 || s.n_in % 4) throw Error("gemv: n_in " + std::to_string(s.n_in) + " is not a positive multiple of 4");
  if (uint64_t(s.n_in) * 4 > 200 * 1024) throw Error("gemv: n_in " + std::to_string(s.n_in) + " does not fit in shared memory");
  for (const GemvSegment& g : s.segments) {
    if (!gemv_supports(g.type))
      throw Error(std::string("gemv: weight type ") + gguf::type_traits(g.type).name + " is not supported yet");
    if (g.rows == 0) throw Error("gemv: a segment has no rows");
    if (s.n_in % gguf::type_traits(g.type).block_elems)
      throw Error("gemv: n_in " + std::to_string(s.n_in) + " is not a multiple of " + gguf::type_traits(g.type).name +
                  "'s block");
  }
}

// "w3" (appends, which GCC 12's -Wrestrict does not misread as operator+ does).
std::string indexed(const char* prefix, size_t i) {
  std::string s(prefix);
  s.append(std::to_string(i));
  return s;
}

// gemv[_norm][_acc]_<n_in>_<type>x<rows>... e.g. gemv_norm_4096_q4_kx4096_q4_kx1024.
std::string kernel_name(const GemvShape& s) {
  std::string n(s.norm ? "gemv_norm" : "gemv");
  if (s.accumulate) n.append("_acc");
  n.append("_").append(std::to_string(s.n_in));
  for (const GemvSegment& g : s.segments) {
    std::string t = gguf::type_traits(g.type).name;
    std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    n.append("_").append(t).append("x").append(std::to_string(g.rows));
  }
  return n;
}

// f16 in bits [lo, lo+16) of a u32 register, as f32.
Reg half_to_f32(Kernel& k, const Reg& word, unsigned lo) {
  Reg bits = lo ? k.shr(word, lo) : word;
  Reg h = k.bitcast(Type::f16, k.cvt(Type::u16, bits));
  return k.cvt(Type::f32, h);
}

// The per-warp dot product of one Q4_K row with the staged input. Lane l
// takes the 16 quant bytes `part` = l % 8 of blocks l / 8, l / 8 + 4, ...:
// the low nibbles are elements 64j + 16h .. +15 of sub-block 2j, the high
// nibbles the same offsets 32 further in sub-block 2j + 1 (j = part / 2,
// h = part % 2). Returns the lane's partial sum (unreduced).
Reg q4k_row_dot(Kernel& k, const Reg& wrow, uint32_t n_in, const Reg& lane, const Reg& xs, const Reg& xsum16) {
  const uint32_t nb = n_in / 256;
  Reg part = k.and_(lane, 7u), first = k.shr(lane, 3u);
  Reg j = k.shr(part, 1u), half = k.and_(part, 1u);
  Reg big = k.setp(Cmp::ge, j, 2u);   // sub-blocks 4..7: scales packed across bytes
  Reg shift_lo = k.shl(k.and_(j, 1u), 4u);
  Reg shift_hi = k.add(shift_lo, 8u);
  Reg qoff = k.cvt(Type::u64, k.mad_lo(part, 16u, 16u));
  // Byte offsets into the staged input and its 16-element sums, for block 0.
  Reg elem = k.mad_lo(j, 64u, k.shl(half, 4u));
  Reg x0 = k.mad_lo(elem, 4u, xs);
  Reg s0 = k.add(xsum16, k.shr(elem, 2u));   // sum (elem / 16), 4 bytes each

  Reg acc = k.mov(Type::f32, 0.0f);
  Reg b = k.reg(Type::u32);
  k.for_range(b, first, nb, 4u, [&] {
    Reg blk = k.add(wrow, k.mul_wide(b, kQ4kBytes));
    std::vector<Reg> h = {k.reg(Type::u32), k.reg(Type::u32), k.reg(Type::u32), k.reg(Type::u32)};
    std::vector<Reg> q = {k.reg(Type::u32), k.reg(Type::u32), k.reg(Type::u32), k.reg(Type::u32)};
    MemOpt nc;
    nc.nc = true;
    k.ld(Space::global, h, at(blk), nc);
    k.ld(Space::global, q, at(k.add(blk, qoff)), nc);
    Reg d = half_to_f32(k, h[0], 0), dmin = half_to_f32(k, h[0], 16);

    // 6-bit scale and min of sub-block s (get_scale_min_k4): for s < 4,
    // scales[s] & 63 and scales[s + 4] & 63; for s >= 4, the low/high nibble
    // of scales[s + 4] with the top two bits of scales[s - 4] / scales[s].
    // h[1..3] hold scales[0..11]; byte t = s % 4 of each word is needed.
    auto scale_min = [&](const Reg& shift, Reg& sc, Reg& mn) {
      Reg b1 = k.bfe(h[1], shift, 8u), b2 = k.bfe(h[2], shift, 8u), b3 = k.bfe(h[3], shift, 8u);
      Reg sc_small = k.and_(b1, 63u), mn_small = k.and_(b2, 63u);
      Reg sc_big = k.or_(k.and_(b3, 15u), k.shl(k.shr(b1, 6u), 4u));
      Reg mn_big = k.or_(k.shr(b3, 4u), k.shl(k.shr(b2, 6u), 4u));
      sc = k.cvt(Type::f32, k.selp(sc_big, sc_small, big, Type::u32));
      mn = k.cvt(Type::f32, k.selp(mn_big, mn_small, big, Type::u32));
    };
    Reg sc_lo, mn_lo, sc_hi, mn_hi;
    scale_min(shift_lo, sc_lo, mn_lo);
    scale_min(shift_hi, sc_hi, mn_hi);

    Reg xa = k.mad_lo(b, 1024u, x0);   // 256 floats per block
    Reg dot_lo = k.mov(Type::f32, 0.0f), dot_hi = k.mov(Type::f32, 0.0f);
    for (uint32_t w = 0; w < 4; ++w) {
      std::vector<Reg> xl = {k.reg(Type::f32), k.reg(Type::f32), k.reg(Type::f32), k.reg(Type::f32)};
      std::vector<Reg> xh = {k.reg(Type::f32), k.reg(Type::f32), k.reg(Type::f32), k.reg(Type::f32)};
      k.ld(Space::shared, xl, at(xa, 16 * w));
      k.ld(Space::shared, xh, at(xa, 128 + 16 * w));
      for (uint32_t byte = 0; byte < 4; ++byte) {
        Reg lo = k.cvt(Type::f32, k.bfe(q[w], 8 * byte, 4u));
        Reg hi = k.cvt(Type::f32, k.bfe(q[w], 8 * byte + 4, 4u));
        k.fma(dot_lo, lo, xl[byte], dot_lo);
        k.fma(dot_hi, hi, xh[byte], dot_hi);
      }
    }
    // The mins multiply the sums of the same 16 inputs, staged beforehand.
    Reg sa = k.mad_lo(b, 64u, s0);   // 16 sums of 16 per block
    Reg sum_lo = k.ld_shared(Type::f32, at(sa));
    Reg sum_hi = k.ld_shared(Type::f32, at(sa, 8));   // 32 elements further: two sums on
    Reg part_lo = k.sub(k.mul(k.mul(d, sc_lo), dot_lo), k.mul(k.mul(dmin, mn_lo), sum_lo));
    Reg part_hi = k.sub(k.mul(k.mul(d, sc_hi), dot_hi), k.mul(k.mul(dmin, mn_hi), sum_hi));
    k.add(acc, acc, k.add(part_lo, part_hi));
  });
  return acc;
}

}  // namespace

bool gemv_supports(GgmlType t) { return t == GgmlType::Q4_K; }

GemvPlan gemv_plan(const GemvShape& s) {
  GemvPlan p;
  const uint32_t rows = total_rows(s);
  p.rows_per_warp = std::clamp<uint32_t>(rows / (p.warps * kTargetBlocks), 1, 8);
  return p;
}

LaunchGeometry gemv_geometry(const GemvShape& s) {
  check_shape(s);
  const GemvPlan p = gemv_plan(s);
  LaunchGeometry g;
  g.grid = {ceil_div(total_rows(s), p.rows_per_block()), 1, 1};
  g.block = {32 * p.warps, 1, 1};
  g.shared_bytes = s.n_in * 4 + s.n_in / 16 * 4;   // the staged input, then its 16-element sums
  return g;
}

GeneratedKernel gemv_kernel(const GemvShape& s, Target t) {
  const LaunchGeometry g = gemv_geometry(s);
  const GemvPlan plan = gemv_plan(s);
  const uint32_t threads = g.block.x;
  ParamList params;
  params.add_ptr("x");
  if (s.norm) params.add_ptr("norm_w");
  for (size_t i = 0; i < s.segments.size(); ++i) params.add_ptr(indexed("w", i)).add_ptr(indexed("y", i));
  Kernel k = start_kernel(kernel_name(s).c_str(), t, params, g);
  Symbol dyn = k.dynamic_shared("xs", 16);
  Symbol scratch = k.shared_array("red", Type::f32, plan.warps);

  Reg x = k.param("x");
  Reg norm_w = s.norm ? k.param("norm_w") : Reg{};
  Reg tid = k.special(Sreg::tid_x);
  Reg lane = k.and_(tid, 31u), warp = k.shr(tid, 5u);
  Reg xs = k.mov(Type::u32, Operand::symbol(dyn.name));
  Reg xsum16 = k.add(xs, s.n_in * 4);

  k.comment("stage the input (times the norm weight) in shared memory; sum of squares for the norm");
  Reg ss = k.mov(Type::f32, 0.0f);
  Reg i = k.reg(Type::u32);
  MemOpt nc;
  nc.nc = true;
  k.for_range(i, tid, s.n_in / 4, threads, [&] {
    Reg off = k.mul_wide(i, 16u);
    std::vector<Reg> v = {k.reg(Type::f32), k.reg(Type::f32), k.reg(Type::f32), k.reg(Type::f32)};
    k.ld(Space::global, v, at(k.add(x, off)), nc);
    std::vector<Operand> out(v.begin(), v.end());
    if (s.norm) {
      std::vector<Reg> w = {k.reg(Type::f32), k.reg(Type::f32), k.reg(Type::f32), k.reg(Type::f32)};
      k.ld(Space::global, w, at(k.add(norm_w, off)), nc);
      for (int c = 0; c < 4; ++c) {
        k.fma(ss, v[c], v[c], ss);
        out[c] = k.mul(v[c], w[c]);
      }
    }
    k.st(Space::shared, at(k.mad_lo(i, 16u, xs)), out);
  });
  k.bar_sync(0);
  k.comment("sums of each 16 staged inputs (the Q4_K mins multiply them)");
  k.for_range(i, tid, s.n_in / 16, threads, [&] {
    Reg src = k.mad_lo(i, 64u, xs);
    Reg sum = k.ld_shared(Type::f32, at(src));
    for (uint32_t e = 1; e < 16; ++e) sum = k.add(sum, k.ld_shared(Type::f32, at(src, 4 * e)));
    k.st_shared(at(k.mad_lo(i, 4u, xsum16)), sum);
  });
  Reg scale;
  if (s.norm) {
    k.comment("1 / rms: every row's result is scaled by it");
    Reg total = block_allreduce(k, ss, ReduceOp::sum_f32, scratch, threads);   // its barriers publish the sums
    Reg root = k.sqrt(k.add(k.div(total, float(s.n_in)), s.eps));
    scale = k.reg(Type::f32);
    k.div(scale, 1.0f, root);
  } else {
    k.bar_sync(0);
  }

  k.comment("rows: warp w of block b takes rows b * rows_per_block + w + warps * r");
  Reg row0 = k.mul(k.special(Sreg::ctaid_x), plan.rows_per_block());
  Reg row_w = k.add(row0, warp);
  Reg is_lane0 = k.setp(Cmp::eq, lane, 0u);
  for (uint32_t r = 0; r < plan.rows_per_warp; ++r) {
    Reg row = k.add(row_w, plan.warps * r);
    uint32_t base = 0;
    for (size_t si = 0; si < s.segments.size(); ++si) {
      const GemvSegment& seg = s.segments[si];
      Reg local = k.sub(row, base);   // wraps above rows when row < base
      k.if_(k.setp(Cmp::lt, local, seg.rows), [&] {
        Reg w = k.param(indexed("w", si)), y = k.param(indexed("y", si));
        const uint64_t row_bytes = uint64_t(s.n_in / 256) * kQ4kBytes;
        Reg wrow = k.add(w, k.mul_wide(local, uint32_t(row_bytes)));
        Reg acc = warp_allreduce(k, q4k_row_dot(k, wrow, s.n_in, lane, xs, xsum16), ReduceOp::sum_f32);
        if (s.norm) acc = k.mul(acc, scale);
        Reg ya = k.add(y, k.mul_wide(local, 4u));
        k.when(is_lane0, [&] {
          if (s.accumulate) {
            Reg old = k.ld_global(Type::f32, at(ya));
            k.st_global(at(ya), k.add(old, acc));
          } else {
            k.st_global(at(ya), acc);
          }
        });
      });
      base += seg.rows;
    }
  }
  return finish(k, params, g, true);
}

double gemv_tolerance(double abs_dot, uint32_t n_in) {
  // f32 rounding of ~n_in products and sums, plus the factored scales: a few
  // ulps of the absolute sum per term, grown like sqrt(n_in).
  return 1e-7 * abs_dot * std::sqrt(double(n_in)) + 1e-6;
}

}  // namespace ptxlm::kernels
