#include "kernels/decode/gemv.h"

#include <algorithm>
#include <cmath>
#include <string>

#include "kernels/decode/gemv_f32.h"
#include "kernels/decode/gemv_q8.h"
#include "kernels/decode/gemv_types.h"
#include "kernels/decode/layout.h"
#include "kernels/decode/util.h"
#include "kernels/examples/common.h"

namespace ptxlm::kernels {

using namespace ptx;
using gguf::GgmlType;

namespace {

// Rows the grid covers: every segment's, or a GLU's pairs.
uint32_t total_rows(const GemvShape& s) {
  if (s.glu != Glu::None) return s.segments.at(0).rows;
  uint64_t n = 0;
  for (const GemvSegment& g : s.segments) n += g.rows;
  if (n > (1u << 30)) throw Error("gemv: more than 2^30 rows");
  return uint32_t(n);
}

// A float matrix (F16, BF16, F32): f16_row_dot takes its rows.
bool float_rows(GgmlType t) { return t == GgmlType::F16 || t == GgmlType::BF16 || t == GgmlType::F32; }

// Every segment a float matrix: N input columns on the f32 input.
bool float_rows_only(const GemvShape& s) {
  return std::all_of(s.segments.begin(), s.segments.end(), [](const GemvSegment& g) { return float_rows(g.type); });
}

void check_shape(const GemvShape& s) {
  if (s.segments.empty()) throw Error("gemv: no segments");
  if (s.glu != Glu::None && (s.segments.size() != 2 || s.segments[0].rows != s.segments[1].rows))
    throw Error("gemv: a GLU needs two segments (gate, up) with the same rows");
  if (s.glu != Glu::None && s.accumulate) throw Error("gemv: a GLU output does not accumulate");
  if (s.gated != Glu::None && (s.segments.size() != 1 || s.glu != Glu::None || s.accumulate))
    throw Error("gemv: a gated output needs one segment, no GLU and no accumulate");
  if (s.gated != Glu::None && s.columns > 1 && s.gate_stride < s.segments[0].rows)
    throw Error("gemv: a gated output's columns of m overlap (stride " + std::to_string(s.gate_stride) + " < " +
                std::to_string(s.segments[0].rows) + " rows)");
  if (s.n_in == 0 || s.n_in % 32) throw Error("gemv: n_in " + std::to_string(s.n_in) + " is not a positive multiple of 32");
  if (uint64_t(s.n_in) * 4 > 200 * 1024) throw Error("gemv: n_in " + std::to_string(s.n_in) + " does not fit in shared memory");
  if (s.q8_input && q8_blocks256(s) && s.n_in % 256)
    throw Error("gemv: an 8-bit input for a 256-element type (Q4_K, Q6_K, ...) needs n_in a multiple of 256");
  if (s.columns == 0 || s.columns > kMaxGemvColumns)
    throw Error("gemv: " + std::to_string(s.columns) + " input columns (1 to " + std::to_string(kMaxGemvColumns) + ")");
  if (s.columns > 1 && !s.q8_input && !float_rows_only(s))
    throw Error("gemv: several input columns need the 8-bit input (q8_input), or F16/BF16/F32 weights only");
  if (s.columns > 1 && !s.q8_input && uint64_t(s.n_in) * 4 * s.columns > 200 * 1024)
    throw Error("gemv: " + std::to_string(s.columns) + " f32 input columns of " + std::to_string(s.n_in) +
                " do not fit in shared memory");
  for (const GemvSegment& g : s.segments) {
    if (!gemv_supports(g.type))
      throw Error(std::string("gemv: weight type ") + gguf::type_traits(g.type).name + " is not supported yet");
    if (g.rows == 0) throw Error("gemv: a segment has no rows");
    if (s.q8_input && !gemv_supports_q8_input(g.type))
      throw Error(std::string("gemv: weight type ") + gguf::type_traits(g.type).name +
                  " has no 8-bit-input (dp4a) kernel yet");
    if (s.q8_input && k_family(g.type) != q8_blocks256(s))
      throw Error("gemv: an 8-bit input serves Q4_K/Q6_K (blocks of 256) or the 32-element types, not both at once");
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
  if (s.glu == Glu::SwiGlu) n.append("_swiglu");
  if (s.glu == Glu::GeGlu) n.append("_geglu");
  if (s.gated == Glu::SwiGlu) n.append("_siluby");
  if (s.gated == Glu::GeGlu) n.append("_geluby");
  if (s.gated != Glu::None && s.columns > 1) n.append("_m").append(std::to_string(s.gate_stride));   // m's column stride
  if (s.accumulate) n.append("_acc");
  if (s.q8_input) n.append("_q8");
  if (s.columns > 1) n.append("_n").append(std::to_string(s.columns));
  if (s.max_warps != kMaxGemvWarps) n.append("_w").append(std::to_string(s.max_warps));
  n.append("_").append(std::to_string(s.n_in));
  for (const GemvSegment& g : s.segments) {
    std::string t = gguf::type_traits(g.type).name;
    std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    n.append("_").append(t).append("x").append(std::to_string(g.rows));
  }
  return n;
}

// The address of row `local` of segment si's weights (parameter w<si>).
Reg segment_row(Kernel& k, const GemvShape& s, size_t si, const Reg& local) {
  return k.add(k.param(indexed("w", si)), k.mul_wide(local, row_layout(s.segments[si].type, s.n_in).row_bytes));
}

}  // namespace

// silu(g) = g / (1 + e^-g), or gelu_tanh(g) = 0.5·g·(1 + tanh(√(2/π)·(g + 0.044715·g³))),
// in the CPU reference's order of operations; e^y as 2^(y·log2 e) and
// tanh(y) = 1 - 2 / (1 + e^(2y)) (exact at the extremes, ~1e-7 absolute).
Reg glu_activation(Kernel& k, const Reg& g, Glu kind) {
  constexpr double kLog2e = 1.4426950408889634;
  if (kind == Glu::SwiGlu) {
    Reg e = k.ex2_approx(k.mul(g, -kLog2e));
    return k.div(g, k.add(e, 1.0f));
  }
  Reg g3 = k.mul(k.mul(k.mul(g, 0.044715f), g), g);
  Reg y = k.mul(k.add(g, g3), 0.7978845608028654f);
  Reg e2 = k.ex2_approx(k.mul(y, 2.0 * kLog2e));
  Reg q = k.reg(Type::f32), th = k.reg(Type::f32);
  k.div(q, 2.0f, k.add(e2, 1.0f));
  k.sub(th, 1.0f, q);
  Reg half_g = k.mul(g, 0.5f);
  return k.mul(half_g, k.add(th, 1.0f));
}

bool gemv_supports(GgmlType t) {
  return t == GgmlType::Q4_K || t == GgmlType::Q6_K || t == GgmlType::Q8_0 || t == GgmlType::Q4_0 ||
         t == GgmlType::Q4_1 || t == GgmlType::Q5_0 || t == GgmlType::IQ4_NL || k256_decoded(t) || float_rows(t);
}

GemvPlan gemv_plan(const GemvShape& s) {
  if (s.sms == 0) throw Error("gemv: a grid sized for 0 SMs");
  if (s.max_warps < 8 || s.max_warps > kMaxGemvWarps)
    throw Error("gemv: at most " + std::to_string(s.max_warps) + " warps a block (8 to " + std::to_string(kMaxGemvWarps) + ")");
  GemvPlan p;
  const uint32_t rows = total_rows(s);
  // At most one block per SM: every block stages the whole input, so fewer,
  // fuller blocks cut that traffic, and a grid a little over the SM count
  // would run a second, mostly idle wave; fewer blocks than SMs leave SMs
  // idle, so rows per block is the least that fits the rows in `sms` blocks.
  p.rows_per_block = ceil_div(rows, s.sms);
  p.warps = std::clamp<uint32_t>(p.rows_per_block, 8, s.max_warps);
  return p;
}

LaunchGeometry gemv_geometry(const GemvShape& s) {
  check_shape(s);
  const GemvPlan p = gemv_plan(s);
  LaunchGeometry g;
  g.grid = {ceil_div(total_rows(s), p.rows_per_block), 1, 1};
  g.block = {32 * p.warps, 1, 1};
  const uint32_t passes = q8_pass_blocks(s);
  g.shared_bytes = passes          ? s.columns * q8_pass_column_bytes(s)   // a pass's 8-bit input, every column
                   : s.q8_input    ? q8_shared_bytes(s)               // the 8-bit input, every column
                   : s.columns > 1 ? s.columns * s.n_in * 4           // float rows: every column's f32 input
                                   : s.n_in * 4 + s.n_in / 8 * 4;   // the staged input, then its 8-element sums
  return g;
}

uint64_t gemv_prefetch_bytes(const GemvShape& s) {
  const GemvPlan plan = gemv_plan(s);
  const uint32_t threads = gemv_geometry(s).block.x, blocks = gemv_geometry(s).grid.x;
  const bool glu = s.glu != Glu::None;
  const uint64_t lanes = glu ? threads / 2 : threads;
  uint64_t lines = 0;
  for (uint32_t b = 0; b < blocks; ++b) {
    const uint64_t row0 = uint64_t(b) * plan.rows_per_block;
    uint64_t base = 0;
    for (const GemvSegment& seg : s.segments) {
      const uint64_t local = glu ? row0 : row0 - base;
      if (row0 >= base && local < seg.rows) {
        const uint64_t bytes = std::min<uint64_t>(seg.rows - local, plan.rows_per_block) * row_layout(seg.type, s.n_in).row_bytes;
        lines += std::min(lanes, (bytes + 127) / 128);
      }
      if (!glu) base += seg.rows;
    }
  }
  return lines * 128;
}

GeneratedKernel gemv_kernel(const GemvShape& s, Target t, const InlineTarget* in) {
  const LaunchGeometry g = gemv_geometry(s);
  if (in && s.columns > 1) throw Error("gemv: several input columns in a persistent kernel");
  const GemvPlan plan = gemv_plan(s);
  const uint32_t threads = g.block.x;
  ParamList params;
  params.add_ptr("x");
  if (s.norm) params.add_ptr("norm_w");
  if (s.glu != Glu::None) {
    params.add_ptr("w0").add_ptr("w1").add_ptr("y0");
  } else {
    for (size_t i = 0; i < s.segments.size(); ++i) params.add_ptr(indexed("w", i)).add_ptr(indexed("y", i));
  }
  if (s.gated != Glu::None) params.add_ptr("m");
  // The first weight rows of the block (up to a 128-byte line per thread) into
  // L2 while the block stages its input: rows row0 .. row0 + rows_per_block
  // of the segment row0 falls in (a GLU's gate and up rows, half the threads
  // each). They need nothing the grid before writes.
  auto prefetch_weights = [&](Kernel& k) {
    k.comment("prefetch the block's first weight rows into L2");
    Reg tid = k.special(Sreg::tid_x);
    Reg row0 = k.mul(k.special(Sreg::ctaid_x), plan.rows_per_block);
    const bool glu = s.glu != Glu::None;
    const uint32_t lanes = glu ? threads / 2 : threads;   // threads per segment
    Reg upper = glu ? k.setp(Cmp::ge, tid, lanes) : Reg{};   // the up rows' half
    Reg line = k.shl(glu ? k.sub(tid, k.selp(lanes, 0u, upper, Type::u32)) : tid, 7u);
    uint32_t base = 0;
    for (size_t si = 0; si < s.segments.size(); ++si) {
      const GemvSegment& seg = s.segments[si];
      const uint32_t row_bytes = row_layout(seg.type, s.n_in).row_bytes;
      Reg local = glu ? row0 : k.sub(row0, base);   // wraps above rows when row0 < base
      Reg mine = k.setp(Cmp::lt, local, seg.rows);
      if (glu) mine = k.and_(mine, si == 0 ? k.not_(upper) : upper);
      k.if_(mine, [&] {
        Reg left = k.reg(Type::u32);
        k.sub(left, seg.rows, local);
        Reg bytes = k.mul(k.min(left, plan.rows_per_block), row_bytes);
        Reg first = segment_row(k, s, si, local);
        k.when(k.setp(Cmp::lt, line, bytes), [&] { k.prefetch_l2(at(k.add(first, k.cvt(Type::u64, line)))); });
      });
      if (!glu) base += seg.rows;
    }
  };
  // Inline, the persistent kernel emits the prefetch ahead of the op's
  // dependency wait (InlineTarget::prefetch_only), not at its start.
  const bool prefetch = t.prefetch && (!in || in->prefetch_only);
  Emit emit(in, kernel_name(s).c_str(), t, params, g,
            prefetch ? std::function<void(Kernel&)>(prefetch_weights) : std::function<void(Kernel&)>());
  Kernel& k = emit.k();
  // ptxas left alone caps a 512-thread kernel near 40 registers and spills
  // the 8-bit input's unrolled loads (Q6_K's two steps hold 52 words); one
  // block per SM, all a one-wave grid uses, gives it up to 128.
  // The f32 input's decoded types (gemv_types.h) hold a part's 16 code words
  // likewise.
  // So do the 16-bit-float rows' kF16Unroll chunks (32 words, gemv_f32.cpp).
  const bool decoded = std::any_of(s.segments.begin(), s.segments.end(), [](const GemvSegment& g) {
    return k256_decoded(g.type) || float_rows(g.type);
  });
  if ((s.q8_input || decoded) && !in) k.set_minnctapersm(1);
  Symbol dyn = k.dynamic_shared("xs", 16);
  Symbol scratch = k.shared_array("red", Type::f32, plan.warps);

  Reg x = k.param("x");
  Reg norm_w = s.norm ? k.param("norm_w") : Reg{};
  Reg tid = k.special(Sreg::tid_x);
  Reg lane = k.and_(tid, 31u), warp = k.shr(tid, 5u);
  Reg xs = k.shared_addr(dyn);
  Reg xsum8 = k.add(xs, s.n_in * 4);

  // 1 / rms: every row's result is scaled by it (by column's from col_scale).
  auto rms_scale = [&](const Reg& ss) {
    Reg total = block_allreduce(k, ss, ReduceOp::sum_f32, scratch, threads);   // its barriers publish the sums
    Reg root = k.sqrt(k.add(k.div(total, float(s.n_in)), s.eps));
    Reg scale = k.reg(Type::f32);
    k.div(scale, 1.0f, root);
    return scale;
  };
  // The f32 input staged at xsc (times the norm weight; the sum of squares into ss).
  auto stage_f32 = [&](const Reg& xc, const Reg& xsc, const Reg& ssc) {
    Reg i = k.reg(Type::u32);
    MemOpt nc;
    nc.nc = true;
    k.for_range(i, tid, s.n_in / 4, threads, [&] {
      Reg off = k.mul_wide(i, 16u);
      std::vector<Reg> v = {k.reg(Type::f32), k.reg(Type::f32), k.reg(Type::f32), k.reg(Type::f32)};
      k.ld(Space::global, v, at(k.add(xc, off)), nc);
      std::vector<Operand> out(v.begin(), v.end());
      if (s.norm) {
        std::vector<Reg> w = {k.reg(Type::f32), k.reg(Type::f32), k.reg(Type::f32), k.reg(Type::f32)};
        k.ld(Space::global, w, at(k.add(norm_w, off)), nc);
        for (int c = 0; c < 4; ++c) {
          k.fma(ssc, v[c], v[c], ssc);
          out[c] = k.mul(v[c], w[c]);
        }
      }
      k.st(Space::shared, at(k.mad_lo(i, 16u, xsc)), out);
    });
  };
  Symbol col_scale;
  Reg ss = k.mov(Type::f32, 0.0f);
  const uint32_t pass_blocks = q8_pass_blocks(s);
  if (pass_blocks) {
    // staged pass by pass with the rows below
  } else if (s.columns > 1 && !s.q8_input) {
    k.comment("stage each f32 input column (times the norm weight); each column's 1 / rms");
    if (s.norm) col_scale = k.shared_array("col_scale", Type::f32, s.columns);
    Reg col = k.reg(Type::u32);
    k.for_range(col, 0u, s.columns, 1u, [&] {
      Reg xc = k.add(x, k.mul_wide(col, s.n_in * 4));
      Reg xsc = k.mad_lo(col, s.n_in * 4, xs);
      Reg ssc = k.mov(Type::f32, 0.0f);
      stage_f32(xc, xsc, ssc);
      if (s.norm) {
        Reg scale = rms_scale(ssc);
        k.when(k.setp(Cmp::eq, tid, 0u), [&] { k.st_shared(at(k.mad_lo(col, 4u, k.shared_addr(col_scale))), scale); });
      }
    }, false);
  } else if (s.columns > 1) {
    k.comment("quantize the input columns (times the norm weight) to 8-bit blocks; each column's 1 / rms");
    StageInput in{x, s.n_in * 4, xs, q8_column_bytes(s), s.columns, {}};
    for (uint32_t col = 0; s.norm && col < s.columns; ++col) in.ss.push_back(k.mov(Type::f32, 0.0f));
    stage_q8_input(k, s, in, norm_w, lane, warp, plan.warps);
    if (s.norm) {
      col_scale = k.shared_array("col_scale", Type::f32, s.columns);
      Reg is_tid0 = k.setp(Cmp::eq, tid, 0u);
      for (uint32_t col = 0; col < s.columns; ++col) {
        Reg scale = rms_scale(in.ss[col]);
        k.when(is_tid0, [&] { k.st_shared(at(k.shared_addr(col_scale), 4 * int64_t(col)), scale); });
      }
    }
  } else if (s.q8_input) {
    k.comment("quantize the input (times the norm weight) to 8-bit blocks of 256; sum of squares for the norm");
    stage_q8_input(k, s, StageInput{x, 0, xs, 0, 1, {ss}}, norm_w, lane, warp, plan.warps);
  } else {
    k.comment("stage the input (times the norm weight) in shared memory; sum of squares for the norm");
    stage_f32(x, xs, ss);
    if (!float_rows_only(s)) {   // float rows have no offsets or mins
      Reg i = k.reg(Type::u32);
      k.bar_sync(0);
      k.comment("sums of each 8 staged inputs (the quant offsets and mins multiply them)");
      k.for_range(i, tid, s.n_in / 8, threads, [&] {
        Reg src = k.mad_lo(i, 32u, xs);
        Reg sum = k.ld_shared(Type::f32, at(src));
        for (uint32_t e = 1; e < 8; ++e) sum = k.add(sum, k.ld_shared(Type::f32, at(src, 4 * e)));
        k.st_shared(at(k.mad_lo(i, 4u, xsum8)), sum);
      });
    }
  }
  Reg scale;
  if (s.norm && s.columns == 1) {
    k.comment("1 / rms: every row's result is scaled by it");
    scale = rms_scale(ss);
  } else if (!pass_blocks) {
    k.bar_sync(0);
  }

  k.comment("rows: warp w of block b takes rows b * rows_per_block + w + warps * r below the next block's");
  Reg row0 = k.mul(k.special(Sreg::ctaid_x), plan.rows_per_block);
  Reg row_w = k.add(row0, warp);
  Reg is_lane0 = k.setp(Cmp::eq, lane, 0u);
  Reg row_end = k.min(k.add(row0, plan.rows_per_block), total_rows(s));
  Reg row = k.reg(Type::u32);
  // One row of segment si: the lane's partial dot products (unreduced), one per column.
  // Row `local` of segment si: its weights, and its output for the lane's
  // column (a GLU's pairs are segment 0's rows, in y0).
  auto weight_row = [&](size_t si, const Reg& local) { return segment_row(k, s, si, local); };
  auto output_at = [&](size_t si, const Reg& local) {
    return k.add(k.param(indexed("y", si)),
                 k.mul_wide(s.columns == 1 ? local : k.mad_lo(lane, s.segments[si].rows, local), 4u));
  };
  Reg writes = s.columns == 1 ? is_lane0 : k.setp(Cmp::lt, lane, s.columns);
  // A gated output's multiplier for row `local` of the writing lane's column,
  // loaded before the row's weights so that its round trip is theirs (none
  // without a gate).
  auto load_gate = [&](const Reg& local) {
    if (s.gated == Glu::None) return Reg{};
    Reg mul = k.reg(Type::f32);
    Reg a = k.add(k.param("m"), k.mul_wide(s.columns == 1 ? local : k.mad_lo(lane, s.gate_stride, local), 4u));
    k.when(writes, [&] { k.ld(Space::global, {mul}, at(a)); });
    return mul;
  };
  auto row_dot = [&](size_t si, const Reg& local) -> std::vector<Reg> {
    const GemvSegment& seg = s.segments[si];
    const RowLayout layout = row_layout(seg.type, s.n_in);
    Reg wrow = weight_row(si, local);
    if (s.q8_input) return q8_row_dot(k, s, layout, wrow, lane, xs);
    if (s.columns > 1) return f16_row_dot(k, layout, wrow, lane, xs, s.columns, s.n_in * 4);
    return {seg.type == GgmlType::Q4_K   ? q4k_row_dot(k, layout, wrow, lane, xs, xsum8)
            : seg.type == GgmlType::Q6_K ? q6k_row_dot(k, layout, wrow, lane, xs, xsum8)
            : seg.type == GgmlType::Q8_0 ? q8_0_row_dot(k, layout, wrow, lane, xs)
            : k256_decoded(seg.type)     ? k256_row_dot(k, layout, wrow, lane, xs, xsum8)
            : float_rows(seg.type)       ? f16_row_dot(k, layout, wrow, lane, xs)[0]
                                         : block32_row_dot(k, layout, wrow, lane, xs, xsum8)};
  };
  auto finish_row = [&](const Reg& part, uint32_t col) {
    Reg acc = warp_allreduce(k, part, ReduceOp::sum_f32);
    if (!s.norm) return acc;
    return k.mul(acc, s.columns == 1 ? scale : k.ld_shared(Type::f32, at(col_scale, 4 * int64_t(col))));
  };
  // A row's results, one per column, reduced and scaled: lane c keeps
  // column c's (one register, whatever the column count) and writes it.
  auto lane_result = [&](const std::vector<Reg>& parts) {
    Reg mine = finish_row(parts[0], 0);
    for (uint32_t col = 1; col < s.columns; ++col)
      mine = k.selp(finish_row(parts[col], col), mine, k.setp(Cmp::eq, lane, col), Type::f32);
    return mine;
  };
  // Row `local` of segment si's results into its output (column c's by lane
  // c); `mul`: load_gate's.
  auto store = [&](size_t si, const Reg& local, const Reg& acc, const Reg& mul) {
    Reg ya = output_at(si, local);
    k.when(writes, [&] {
      if (s.accumulate) {
        Reg old = k.ld_global(Type::f32, at(ya));
        k.st_global(at(ya), k.add(old, acc));
      } else if (s.gated != Glu::None) {
        k.st_global(at(ya), k.mul(glu_activation(k, acc, s.gated), mul));
      } else {
        k.st_global(at(ya), acc);
      }
    });
  };
  if (pass_blocks) {
    // One matrix (q8_pass_blocks): the warp's rows row_w + warps * r, each
    // with its lane's accumulators, through every pass; then reduced and
    // stored.
    const GemvSegment& seg = s.segments[0];
    const RowLayout layout = row_layout(seg.type, s.n_in);
    const uint32_t nb = s.n_in / 256, slots = ceil_div(plan.rows_per_block, plan.warps);
    const uint32_t col_bytes = q8_pass_column_bytes(s);
    std::vector<std::vector<Reg>> acc;
    for (uint32_t r = 0; r < slots; ++r) acc.push_back(zero_accumulators(k, s.columns));
    for (uint32_t first = 0; first < nb; first += pass_blocks) {
      GemvShape pass = s;
      pass.n_in = std::min(pass_blocks, nb - first) * 256;
      k.comment("pass: quantize blocks " + std::to_string(first) + " .. " + std::to_string(first + pass.n_in / 256) +
                " of each input column");
      if (first) k.bar_sync(0);   // every warp is done with the last pass's input
      const StageInput in{first ? k.add(x, uint64_t(first) * 1024) : x, s.n_in * 4, xs, col_bytes, s.columns, {}};
      stage_q8_input(k, pass, in, norm_w, lane, warp, plan.warps);   // no norm
      k.bar_sync(0);
      const bool last = first + pass_blocks >= nb;
      for (uint32_t r = 0; r < slots; ++r) {
        Reg row_r = k.add(row_w, r * plan.warps);
        k.if_(k.setp(Cmp::lt, row_r, row_end), [&] {
          Reg mul = last ? load_gate(row_r) : Reg{};
          q8_row_dot_pass(k, pass, layout, weight_row(0, row_r), lane, xs, col_bytes, first, acc[r]);
          if (last) store(0, row_r, lane_result(acc[r]), mul);
        });
      }
    }
    return emit.done(true);
  }
  // Row r's results (r in the segments' rows, concatenated) into its segment's outputs.
  auto segment_row = [&](const Reg& r) {
    uint32_t base = 0;
    for (size_t si = 0; si < s.segments.size(); ++si) {
      const GemvSegment& seg = s.segments[si];
      Reg local = k.sub(r, base);   // wraps above rows when r < base
      k.if_(k.setp(Cmp::lt, local, seg.rows), [&] {
        Reg mul = load_gate(local);
        store(si, local, lane_result(row_dot(si, local)), mul);
      });
      base += seg.rows;
    }
  };
  if (q8_rows_paired(s)) {
    // Rows row and row + warps together when both are of one paired segment
    // (the warp's rows as one at a time); otherwise each alone. Warp-uniform
    // branches: shuffles whole.
    k.for_range(row, row_w, row_end, 2 * plan.warps, [&] {
      Reg row2 = k.add(row, plan.warps);
      Reg has2 = k.setp(Cmp::lt, row2, row_end);
      struct Pair {
        size_t si;
        uint32_t base;   // the segment's first row
        Reg both;        // row and row2 are both of it
      };
      std::vector<Pair> pairs;
      Reg any;
      uint32_t base = 0;
      for (size_t si = 0; si < s.segments.size(); base += s.segments[si].rows, ++si) {
        if (!q8_pairs_type(s, s.segments[si].type)) continue;
        Reg both = k.and_(has2, k.setp(Cmp::lt, k.sub(row2, base), s.segments[si].rows));
        both = k.and_(both, k.setp(Cmp::lt, k.sub(row, base), s.segments[si].rows));   // wraps when row < base
        pairs.push_back({si, base, both});
        any = pairs.size() == 1 ? both : k.or_(any, both);
      }
      k.if_else(
          any,
          [&] {
            for (const Pair& p : pairs) {
              k.if_(p.both, [&] {
                Reg l1 = k.sub(row, p.base), l2 = k.sub(row2, p.base);
                Reg mul1 = load_gate(l1), mul2 = load_gate(l2);
                const std::vector<std::vector<Reg>> two =
                    q8_rows_dot(k, s, row_layout(s.segments[p.si].type, s.n_in),
                                {weight_row(p.si, l1), weight_row(p.si, l2)}, lane, xs);
                store(p.si, l1, lane_result(two[0]), mul1);
                store(p.si, l2, lane_result(two[1]), mul2);
              });
            }
          },
          [&] {
            Reg r = k.reg(Type::u32);
            k.for_range(r, row, k.min(k.add(row2, 1u), row_end), plan.warps, [&] { segment_row(r); });
          });
    });
    return emit.done(true);
  }
  k.for_range(row, row_w, row_end, plan.warps, [&] {
    if (s.glu != Glu::None) {
      k.comment("the gate row and the up row, then act(gate) * up");
      Reg gate, upv;
      if (q8_rows_together(s)) {   // each input word read once for both rows
        const std::vector<std::vector<Reg>> both =
            q8_rows_dot(k, s, row_layout(s.segments[0].type, s.n_in), {weight_row(0, row), weight_row(1, row)}, lane, xs);
        gate = lane_result(both[0]);
        upv = lane_result(both[1]);
      } else {
        gate = lane_result(row_dot(0, row));
        upv = lane_result(row_dot(1, row));
      }
      Reg ya = output_at(0, row);
      k.when(writes, [&] { k.st_global(at(ya), k.mul(glu_activation(k, gate, s.glu), upv)); });
      return;
    }
    segment_row(row);
  });
  return emit.done(true);
}

double gemv_tolerance(double abs_dot, uint32_t n_in) {
  // f32 rounding of ~n_in products and sums, plus the factored scales: a few
  // ulps of the absolute sum per term, grown like sqrt(n_in).
  return 1e-7 * abs_dot * std::sqrt(double(n_in)) + 1e-6;
}

}  // namespace ptxlm::kernels
