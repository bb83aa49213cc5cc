// The 8-bit-input GEMV (GemvShape::q8_input): the input quantized in shared
// memory by the CPU quantized path's rule, and the row dot products that
// multiply it with the packed weights by dp4a. gemv.cpp builds the rest of
// the kernel (the grid, the rows, the norm's scale, the outputs) around it.
#include "kernels/decode/gemv_q8.h"

#include <algorithm>
#include <array>
#include <functional>
#include <optional>

#include "kernels/decode/gemv_types.h"
#include "kernels/decode/util.h"
#include "kernels/examples/common.h"

namespace ptxlm::kernels {

using namespace ptx;
using gguf::GgmlType;

std::vector<Reg> zero_accumulators(Kernel& k, uint32_t columns) {
  std::vector<Reg> acc;
  for (uint32_t c = 0; c < columns; ++c) acc.push_back(k.mov(Type::f32, 0.0f));
  return acc;
}

namespace {

// Lane l's eight f32 at `a` + `imm` (elements 8l .. 8l + 7 of a 256-chunk),
// as loaded.
std::vector<Reg> issue_eight(Kernel& k, const Reg& a, uint32_t imm = 0) {
  std::vector<Reg> v = ld_vec(k, Space::global, Type::f32, 4, a, imm, true);
  std::vector<Reg> v2 = ld_vec(k, Space::global, Type::f32, 4, a, imm + 16, true);
  v.insert(v.end(), v2.begin(), v2.end());
  return v;
}

// The eight inputs times the norm weight's eight (w) when the shape has one,
// their squares added to ss; with `in`, lanes past n_in add none.
std::vector<Reg> scale_eight(Kernel& k, const GemvShape& s, std::vector<Reg> v, const std::vector<Reg>& w,
                             const Reg& ss, const Reg* in) {
  if (!s.norm) return v;
  for (int e = 0; e < 8; ++e) {
    Reg xe = in ? k.selp(v[e], 0.0f, *in, Type::f32) : v[e];   // no square twice
    k.fma(ss, xe, xe, ss);
    v[e] = k.mul(xe, w[e]);
  }
  return v;
}

// 256-chunks a warp loads before it uses the first, with one column (one
// wait for up to this many: a 14336-wide input is 3.5 chunks per warp of 16).
constexpr uint32_t kStageUnroll = 4;
// Columns whose loads one staging iteration issues together: 8 f32 a lane
// each, and the norm weight's 8 once, 72 registers at most.
constexpr uint32_t kStageColumns = 8;

// The largest |v| of the lane's eight.
Reg abs_max(Kernel& k, const std::vector<Reg>& v) {
  Reg amax = k.abs(v[0]);
  for (size_t e = 1; e < v.size(); ++e) amax = k.max(amax, k.abs(v[e]));
  return amax;
}

// q = rni(v · scale) (the CPU's rounding), packed four to a word; and Σq.
// The CPU clamps q to ±127; here no clamp is needed: |v| ≤ amax and scale is
// 127 / amax (or 1 / (amax / 127)) rounded, so |v · scale| ≤ 127·(1 + 2⁻²⁴)³
// < 127.5, and a NaN product (an infinite input) converts to 0 either way.
// Bytes packed by prmt, Σq by dp4a with ones.
std::pair<std::vector<Operand>, Reg> quantize_eight(Kernel& k, const std::vector<Reg>& v, const Reg& scale) {
  std::vector<Reg> q;
  for (const Reg& e : v) q.push_back(k.bitcast(Type::u32, k.cvt(Type::s32, k.mul(scale, e), Rnd::rni)));
  std::vector<Operand> words;
  Reg sum = k.mov(Type::s32, 0);
  for (size_t wd = 0; wd < q.size() / 4; ++wd) {
    Reg lo = k.prmt(q[4 * wd], q[4 * wd + 1], 0x3340u), hi = k.prmt(q[4 * wd + 2], q[4 * wd + 3], 0x3340u);
    Reg w = k.prmt(lo, hi, 0x5410u);
    k.dp4a(sum, k.bitcast(Type::s32, w), 0x01010101u, sum);
    words.push_back(w);
  }
  return {words, sum};
}

// A 256-chunk's eight inputs of columns c0, c0 + 1, ... (v[i] is column
// c0 + i's), scaled, with the lane's `in` (lanes past n_in: the last chunk of
// a partial input) or null.
using QuantizeChunk =
    std::function<void(const Reg& qb, uint32_t c0, const std::vector<std::vector<Reg>>& v, const Reg* in)>;

// Warp w stages 256-chunks w + warps·i of every column. Columns go in groups
// of up to kStageColumns; per iteration a warp issues the loads of `unroll`
// of its chunks of every column of the group (x, and the norm weight once
// per chunk) before it quantizes the first: one round trip for them all,
// not one per column. Then quantize(qb, column, eight inputs) chunk by chunk,
// column by column: each column's chunks in the same order whatever the
// grouping, so its sum of squares too. `partial`: the last chunk may end
// before 256 (blocks of 32): lanes past n_in load element 0 and add no
// squares (a block's lanes are all in or all out, so shuffles stay whole).
void stage_chunks(Kernel& k, const GemvShape& s, const StageInput& input, const Reg& norm_w, const Reg& lane,
                  const Reg& warp, uint32_t warps, bool partial, const QuantizeChunk& quantize) {
  const uint32_t nc = ceil_div(s.n_in, 256);
  const Reg lane_elem = k.shl(lane, 3u);
  for (uint32_t g0 = 0; g0 < input.columns; g0 += kStageColumns) {
    const uint32_t group = std::min(kStageColumns, input.columns - g0);
    const uint32_t unroll = std::min(std::max(kStageUnroll / group, 1u), ceil_div(nc, warps));
    Reg first = k.reg(Type::u32);
    k.for_range(first, warp, nc, unroll * warps, [&] {
      struct Chunk {
        Reg qb, valid, in;
        std::vector<Reg> w;
        std::vector<std::vector<Reg>> x;   // per column of the group
      };
      std::vector<Chunk> ch(unroll);
      for (uint32_t u = 0; u < unroll; ++u) {
        Chunk& c = ch[u];
        c.qb = k.add(first, u * warps);
        c.valid = k.setp(Cmp::lt, c.qb, nc);
        auto issue = [&] {
          Reg elem = k.mad_lo(c.qb, 256u, lane_elem);
          if (partial) c.in = k.setp(Cmp::lt, elem, s.n_in);
          Reg off = k.mul_wide(partial ? k.selp(elem, 0u, c.in, Type::u32) : elem, 4u);
          if (s.norm) c.w = issue_eight(k, k.add(norm_w, off));
          Reg xa = k.add(input.x, off);   // every column at an immediate offset from it
          for (uint32_t i = 0; i < group; ++i) c.x.push_back(issue_eight(k, xa, (g0 + i) * input.x_stride));
        };
        if (u == 0) issue();   // the loop's own bound
        else k.if_(c.valid, issue);
      }
      for (uint32_t u = 0; u < unroll; ++u) {
        const Chunk& c = ch[u];
        auto run = [&] {
          const Reg* in = partial ? &c.in : nullptr;
          std::vector<std::vector<Reg>> v;
          for (uint32_t i = 0; i < group; ++i)
            v.push_back(scale_eight(k, s, c.x[i], c.w, s.norm ? input.ss[g0 + i] : Reg{}, in));
          quantize(c.qb, g0, v, in);
        };
        if (u == 0) run();
        else k.if_(c.valid, run);
      }
    });
  }
}

// Blocks of 256: lane l quantizes elements 8l .. 8l + 7 of the chunk and
// stores them as two words at their rotated place; lane 0 stores the block's
// d, every fourth lane a sub-block sum, every second a 16-group sum. Bit for
// bit the CPU's quants: amax, iscale = 127 / amax, q = rni(iscale · v),
// d = 1 / iscale (all zero when amax is).
void stage_q8_input256(Kernel& k, const GemvShape& s, const StageInput& in, const Reg& norm_w, const Reg& lane,
                       const Reg& warp, uint32_t warps) {
  // Part j = l / 8, chunk c = (l % 8) / 2, half of the chunk l % 2.
  const Reg j = k.shr(lane, 3u), c = k.and_(k.shr(lane, 1u), 3u);
  const Reg base_rot = k.add(c, k.shr(j, 1u));
  const Reg part_off = k.add(k.shl(j, 6u), k.shl(k.and_(lane, 1u), 3u));
  const Reg sub_lane = k.setp(Cmp::eq, k.and_(lane, 3u), 0u), lane0 = k.setp(Cmp::eq, lane, 0u);
  const Reg pair_lane = k.setp(Cmp::eq, k.and_(lane, 1u), 0u);
  const Q8Layout q8(s.n_in);
  const Reg sub_off = k.add(k.shl(k.shr(lane, 2u), 2u), q8.sum32);    // sub-block lane / 4's sum
  const Reg group_off = k.add(k.shl(k.shr(lane, 1u), 2u), q8.sum16);  // 16-group lane / 2's sum
  stage_chunks(k, s, in, norm_w, lane, warp, warps, false,
               [&](const Reg& qb, uint32_t c0, const std::vector<std::vector<Reg>>& vs, const Reg*) {
                 // The chunk's places in the first column; column c at c · xq_stride from them.
                 Reg rot = k.and_(k.add(base_rot, k.shl(k.and_(qb, 1u), 1u)), 3u);
                 Reg dst = k.add(k.mad_lo(qb, 256u, in.xq), k.add(part_off, k.shl(rot, 4u)));
                 Reg group_at = k.add(k.mad_lo(qb, 64u, in.xq), group_off);
                 Reg sub_at = k.add(k.mad_lo(qb, 32u, in.xq), sub_off);
                 Reg d_at = k.mad_lo(qb, 4u, in.xq);
                 for (uint32_t i = 0; i < vs.size(); ++i) {
                   const int64_t co = int64_t(c0 + i) * in.xq_stride;
                   Reg amax = warp_allreduce(k, abs_max(k, vs[i]), ReduceOp::max_f32);
                   Reg nonzero = k.setp(Cmp::gt, amax, 0.0f);
                   Reg iscale = k.selp(k.div(k.mov(Type::f32, 127.0f), amax), 0.0f, nonzero, Type::f32);
                   Reg d = k.selp(k.div(k.mov(Type::f32, 1.0f), iscale), 0.0f, nonzero, Type::f32);
                   auto [words, sum] = quantize_eight(k, vs[i], iscale);
                   k.st(Space::shared, at(dst, co), words);
                   sum = k.add(sum, k.shfl_bfly(sum, 1u));
                   k.when(pair_lane, [&] { k.st_shared(at(group_at, co), sum); });
                   sum = k.add(sum, k.shfl_bfly(sum, 2u));
                   k.when(sub_lane, [&] { k.st_shared(at(sub_at, co), sum); });
                   k.when(lane0, [&] { k.st_shared(at(d_at, q8.d + co), d); });
                 }
               });
}

// Several rows' accumulators: [row][column].
using RowsAcc = std::vector<std::vector<Reg>>;

RowsAcc zero_rows(Kernel& k, size_t rows, uint32_t columns) {
  RowsAcc acc;
  for (size_t r = 0; r < rows; ++r) acc.push_back(zero_accumulators(k, columns));
  return acc;
}

// t added to acc, or nothing for a step past the row's end (step u > 0: the
// loop's bound keeps step 0 in the row).
void add_step(Kernel& k, const Reg& acc, const Reg& t, uint32_t u, const Reg& valid) {
  k.add(acc, acc, u == 0 ? t : k.selp(t, 0.0f, valid, Type::f32));
}

// The per-warp dot products of Q4_K rows (one, or a GLU's gate and up row)
// with the 8-bit input (see stage_q8_input256). Lane l takes part j = l % 4
// of blocks l / 4 + 8i: quant bytes 32j .. 32j + 31, whose low nibbles are
// sub-block 2j (elements 64j .. + 31) and high nibbles sub-block 2j + 1
// (the next 32). Per block: four
// dp4a sums of 8 per sub-block, times the 6-bit scales, minus the mins times
// the sub-block sums; then d·dx·Σ − dmin·dx·Σm in f32, as the CPU's dot_q4_k
// per block. Up to kQ8Unroll steps' loads issue together; a step past the
// row's end loads the last block again and adds nothing. Each of `columns`
// inputs (col_bytes apart) takes the same integer sums of the same nibbles
// and its own f32 accumulator, in the same order whatever the column count.
// Each column's inputs are read from shared memory once for all the rows;
// each row's arithmetic is what it is alone. A pass of q8_pass_blocks: the
// staged n_in are the row's blocks from `first` on, added into `carry`.
RowsAcc q4k_rows_dot_q8(Kernel& k, const RowLayout& l, const std::vector<Reg>& wrows, const Reg& lane, const Reg& xq,
                        uint32_t n_in, uint32_t columns, uint32_t col_bytes, uint32_t first = 0,
                        const RowsAcc* carry = nullptr) {
  const uint32_t nb = n_in / 256, unroll = std::min(q8_unroll(columns), ceil_div(nb, 8));
  const size_t R = wrows.size();
  const Q8Lanes lanes(k, lane);
  const Reg& j = lanes.j;
  const K4Scales k4(k, j);
  Reg qoff = k.cvt(Type::u64, k.shl(j, 5u));
  const Q8Layout q8(n_in);
  Reg sums_off = k.add(k.shl(j, 3u), q8.sum32);
  RowsAcc acc = carry ? *carry : zero_rows(k, R, columns);
  Reg b = k.reg(Type::u32);
  k.for_range(b, lanes.first, nb, 8 * unroll, [&] {
    std::vector<Reg> bu, valid;
    std::vector<std::vector<std::vector<Reg>>> q(unroll), h(unroll);   // [step][row]: quant words, scale words
    for (uint32_t u = 0; u < unroll; ++u) {
      const auto [block, counts] = q8_step(k, b, u, nb);
      bu.push_back(block);
      valid.push_back(counts);
      for (const Reg& wrow : wrows) {
        // The row's block is `first` past the staged one (a pass).
        Reg qa = k.add(k.add(wrow, k.mul_wide(bu[u], 128u)), qoff);
        std::vector<Reg> qv = ld_v4_nc(k, Type::u32, qa, 128 * first), qv2 = ld_v4_nc(k, Type::u32, qa, 128 * first + 16);
        qv.insert(qv.end(), qv2.begin(), qv2.end());
        q[u].push_back(qv);
        h[u].push_back(ld_v4_nc(k, Type::u32,
                                k.add(wrow, k.cvt(Type::u64, k.mad_lo(bu[u], 16u, l.planes[1].offset + 16 * first)))));
      }
    }
    for (uint32_t u = 0; u < unroll; ++u) {
      struct Unpacked {
        std::vector<Reg> lo, hi;   // the nibbles, for every column
        Reg sc_lo, sc_hi, m_lo, m_hi, d, dmin;
      };
      std::vector<Unpacked> rows;
      for (size_t r = 0; r < R; ++r) {
        Unpacked w;
        for (uint32_t i = 0; i < 8; ++i) {
          w.lo.push_back(k.and_(q[u][r][i], 0x0f0f0f0fu));
          w.hi.push_back(k.and_(k.shr(q[u][r][i], 4u), 0x0f0f0f0fu));
        }
        // 6-bit scales and mins of sub-blocks 2j, 2j + 1 (unpack_k_scales).
        const std::array<Reg, 4> sm = k4.unpack(k, h[u][r][1], h[u][r][2], h[u][r][3]);
        w.sc_lo = sm[0], w.sc_hi = sm[1], w.m_lo = sm[2], w.m_hi = sm[3];
        w.d = half_to_f32(k, h[u][r][0], 0);
        w.dmin = half_to_f32(k, h[u][r][0], 16);
        rows.push_back(w);
      }
      const Q8Lanes::Inputs in = lanes.inputs(k, xq, q8, bu[u]);
      const Reg sums_at = k.add(k.mad_lo(bu[u], 32u, xq), sums_off);
      for (uint32_t col = 0; col < columns; ++col) {
        // The column's inputs, read once for every row.
        const uint32_t co = col * col_bytes;
        const auto [x, dx] = lanes.input(k, in, co);
        std::vector<Reg> sums = ld_vec(k, Space::shared, Type::s32, 2, sums_at, co);
        for (size_t r = 0; r < R; ++r) {
          const Unpacked& w = rows[r];
          Reg il = k.mov(Type::s32, 0), ih = k.mov(Type::s32, 0);
          for (uint32_t i = 0; i < 8; ++i) {
            k.dp4a(il, w.lo[i], x[i], il);
            k.dp4a(ih, w.hi[i], x[8 + i], ih);
          }
          Reg isum = k.mul(w.sc_lo, il);
          k.mad_lo(isum, w.sc_hi, ih, isum);
          Reg imin = k.mul(w.m_lo, sums[0]);
          k.mad_lo(imin, w.m_hi, sums[1], imin);
          Reg dd = k.mul(w.d, dx), dm = k.mul(w.dmin, dx);
          add_step(k, acc[r][col], k.sub(k.mul(dd, k.cvt(Type::f32, isum)), k.mul(dm, k.cvt(Type::f32, imin))), u,
                   valid[u]);
        }
      }
    }
  });
  return acc;
}

// The per-warp dot products of Q6_K rows with the 8-bit input, on the same
// lane map as q4k_rows_dot_q8: lane l takes part j = l % 4 (elements 64j ..
// 64j + 63, half h = j / 2 of the block, k = j % 2) of blocks l / 4 + 8i.
// Its elements are q1, q2 (k = 0) or q3, q4 (k = 1) of ql bytes 64h .. + 63
// (nibble k) and qh bytes 32h .. + 31 (bits 4k, 4k + 2), the 16-element
// groups 4j .. 4j + 3 with int8 scales scales[4j .. 4j + 3] (one word).
// Per group: dp4a sums, minus 32 times the group's input sum, times its
// scale; then d·dx in f32 per block, as the CPU's dot_q6_k. Loads as in
// q4k_rows_dot_q8: up to kQ8Unroll steps of 8 blocks issue together; columns
// and rows as there.
RowsAcc q6k_rows_dot_q8(Kernel& k, const RowLayout& l, const std::vector<Reg>& wrows, const Reg& lane, const Reg& xq,
                        uint32_t n_in, uint32_t columns, uint32_t col_bytes, uint32_t first = 0,
                        const RowsAcc* carry = nullptr) {
  const uint32_t nb = n_in / 256, unroll = std::min(q8_unroll(columns), ceil_div(nb, 8));
  const size_t R = wrows.size();
  const Q8Lanes lanes(k, lane);
  const Reg& j = lanes.j;
  Reg nib = k.shl(k.and_(j, 1u), 2u);         // 4k: the nibble of ql, the first qh bit pair
  Reg nib2 = k.add(nib, 2u);                  // the second qh bit pair
  Reg half = k.shr(j, 1u);
  Reg ql_off = k.cvt(Type::u64, k.shl(half, 6u));
  Reg qh_off = k.cvt(Type::u64, k.add(k.shl(half, 5u), l.planes[1].offset));
  Reg sc_off = k.cvt(Type::u64, k.add(k.shl(j, 2u), l.planes[2].offset));
  const Q8Layout q8(n_in);
  Reg gsum_off = k.add(k.shl(j, 4u), q8.sum16);
  MemOpt nc;
  nc.nc = true;
  RowsAcc acc = carry ? *carry : zero_rows(k, R, columns);
  Reg b = k.reg(Type::u32);
  k.for_range(b, lanes.first, nb, 8 * unroll, [&] {
    std::vector<Reg> bu, valid;
    struct Raw {
      std::vector<Reg> ql, qh;
      Reg sc, dbits;
    };
    std::vector<std::vector<Raw>> raw(unroll);   // [step][row]
    for (uint32_t u = 0; u < unroll; ++u) {
      const auto [block, counts] = q8_step(k, b, u, nb);
      bu.push_back(block);
      valid.push_back(counts);
      for (const Reg& wrow : wrows) {
        // The row's block is `first` past the staged one (a pass).
        Raw w;
        Reg qa = k.add(k.add(wrow, k.mul_wide(bu[u], 128u)), ql_off);
        for (uint32_t c = 0; c < 4; ++c) {
          std::vector<Reg> v = ld_v4_nc(k, Type::u32, qa, 128 * first + 16 * c);
          w.ql.insert(w.ql.end(), v.begin(), v.end());
        }
        Reg ha = k.add(k.add(wrow, k.mul_wide(bu[u], 64u)), qh_off);
        w.qh = ld_v4_nc(k, Type::u32, ha, 64 * first);
        std::vector<Reg> hv2 = ld_v4_nc(k, Type::u32, ha, 64 * first + 16);
        w.qh.insert(w.qh.end(), hv2.begin(), hv2.end());
        w.sc = k.reg(Type::u32);
        k.ld(Space::global, w.sc, at(k.add(k.add(wrow, k.mul_wide(bu[u], 16u)), sc_off), 16 * first), nc);
        w.dbits = k.reg(Type::u16);
        k.ld(Space::global, w.dbits,
             at(k.add(wrow, k.cvt(Type::u64, k.mad_lo(bu[u], 2u, l.planes[3].offset + 2 * first)))), nc);
        raw[u].push_back(w);
      }
    }
    for (uint32_t u = 0; u < unroll; ++u) {
      // Each row's part: 16 words of 6-bit quants, for every column. Word w:
      // ql word w (the first 32 elements) or w - 8 + 8 (ql bytes 32 .. 63
      // for the next 32); qh word w % 8, bit pair 4k for the first 32
      // elements, 4k + 2 for the next. Its four group scales and d.
      struct Unpacked {
        std::vector<Reg> w6, scale;
        Reg d;
      };
      std::vector<Unpacked> rows;
      for (const Raw& r : raw[u]) {
        Unpacked w;
        for (uint32_t i = 0; i < 16; ++i) {
          Reg q = k.and_(k.shr(r.ql[i], nib), 0x0f0f0f0fu);
          Reg top = k.and_(k.shl(k.shr(r.qh[i % 8], i < 8 ? nib : nib2), 4u), 0x30303030u);
          w.w6.push_back(k.or_(q, top));
        }
        for (uint32_t g = 0; g < 4; ++g) w.scale.push_back(k.bfe(k.bitcast(Type::s32, r.sc), 8 * g, 8u));   // signed
        w.d = k.cvt(Type::f32, k.bitcast(Type::f16, r.dbits));
        rows.push_back(w);
      }
      const Q8Lanes::Inputs in = lanes.inputs(k, xq, q8, bu[u]);
      const Reg gsum_at = k.add(k.mad_lo(bu[u], 64u, xq), gsum_off);
      for (uint32_t col = 0; col < columns; ++col) {
        // The column's inputs, read once for every row.
        const uint32_t co = col * col_bytes;
        const auto [x, dx] = lanes.input(k, in, co);
        std::vector<Reg> gsum = ld_vec(k, Space::shared, Type::s32, 4, gsum_at, co);
        for (size_t r = 0; r < R; ++r) {
          const Unpacked& w = rows[r];
          Reg isum = k.mov(Type::s32, 0);
          for (uint32_t g = 0; g < 4; ++g) {   // elements 16g .. 16g + 15 of the part: 4 words
            Reg gs = k.mov(Type::s32, 0);
            for (uint32_t i = 4 * g; i < 4 * g + 4; ++i) k.dp4a(gs, w.w6[i], x[i], gs);
            Reg centered = k.reg(Type::s32);
            k.mad_lo(centered, gsum[g], -32, gs);
            k.mad_lo(isum, w.scale[g], centered, isum);
          }
          add_step(k, acc[r][col], k.mul(k.mul(w.d, dx), k.cvt(Type::f32, isum)), u, valid[u]);
        }
      }
    }
  });
  return acc;
}

// ---- The 8-bit input in blocks of 32 (Q8_0, Q4_0, Q4_1, Q5_0): the CPU's
// quantize_block32 (d = amax / 127, q = rni(x · (1/d)) clamped to ±127,
// s = d · Σq). Shared memory: the n_in quants, block b's 32 bytes at 32b with
// its two 16-byte halves swapped when bit 2 of b is set, so that the row
// dot's lanes (one block each) read 8 distinct groups of 4 banks per 8
// lanes; then arrays of each block's f32 d, f32 s and s32 Σq.
struct Q8Layout32 {
  uint32_t d = 0, s = 0, sumq = 0, bytes = 0;
  explicit Q8Layout32(uint32_t n_in) {
    const uint32_t nb = n_in / 32;
    d = n_in;
    s = d + 4 * nb;
    sumq = s + 4 * nb;
    bytes = sumq + 4 * nb;
  }
};

// Blocks of 32, a warp per 256 elements (8 blocks): lane l quantizes
// elements 8l .. 8l + 7 of block l / 4 (x times the norm weight, whose
// squares it adds to ss); the lanes of a block share its amax and Σq by
// shuffles.
void stage_q8_input32(Kernel& k, const GemvShape& s, const StageInput& in, const Reg& norm_w, const Reg& lane,
                      const Reg& warp, uint32_t warps) {
  const Q8Layout32 q8(s.n_in);
  const Reg half = k.and_(k.shr(lane, 1u), 1u), sub = k.shl(k.and_(lane, 1u), 3u);
  const Reg swap = k.and_(k.shr(lane, 4u), 1u);   // bit 2 of the block (8 blocks per 256, 4 lanes each)
  const Reg lane_off = k.add(k.add(k.shl(k.shr(lane, 2u), 5u), k.shl(k.xor_(half, swap), 4u)), sub);
  const Reg block_lane = k.setp(Cmp::eq, k.and_(lane, 3u), 0u);
  // The last 256 may be partial (n_in is a multiple of 32).
  stage_chunks(k, s, in, norm_w, lane, warp, warps, s.n_in % 256 != 0,
               [&](const Reg& qb, uint32_t c0, const std::vector<std::vector<Reg>>& vs, const Reg* inside) {
                 // The chunk's places in the first column; column c at c · xq_stride from them.
                 Reg dst = k.add(k.mad_lo(qb, 256u, in.xq), lane_off);
                 Reg block_at = k.mad_lo(k.add(k.shl(qb, 3u), k.shr(lane, 2u)), 4u, in.xq);
                 Reg stores = inside ? k.and_(block_lane, *inside) : block_lane;
                 for (uint32_t i = 0; i < vs.size(); ++i) {
                   const int64_t co = int64_t(c0 + i) * in.xq_stride;
                   Reg amax = abs_max(k, vs[i]);
                   amax = k.max(amax, k.shfl_bfly(amax, 1u));
                   amax = k.max(amax, k.shfl_bfly(amax, 2u));
                   Reg d = k.div(amax, k.mov(Type::f32, 127.0f));
                   Reg id = k.selp(k.div(k.mov(Type::f32, 1.0f), d), 0.0f, k.setp(Cmp::ne, d, 0.0f), Type::f32);
                   auto [words, sum] = quantize_eight(k, vs[i], id);
                   auto store = [&] { k.st(Space::shared, at(dst, co), words); };
                   if (inside) k.when(*inside, store);
                   else store();
                   sum = k.add(sum, k.shfl_bfly(sum, 1u));
                   sum = k.add(sum, k.shfl_bfly(sum, 2u));
                   k.when(stores, [&] {
                     k.st_shared(at(block_at, q8.d + co), d);
                     k.st_shared(at(block_at, q8.s + co), k.mul(d, k.cvt(Type::f32, sum)));
                     k.st_shared(at(block_at, q8.sumq + co), sum);
                   });
                 }
               });
}

// The per-warp dot product of one row of Q8_0, Q4_0, Q4_1, Q5_0 or IQ4_NL
// with the 8-bit input in blocks of 32 (stage_q8_input32): lane l takes
// blocks l + 32i, two steps' loads issued together. Per block, as the CPU's
// dot_q*: Q8_0 d·dx·Σq·x; Q4_0 d·dx·(Σq·x − 8Σx); Q5_0 the same with the
// fifth bit from qh and 16; Q4_1 d·dx·Σq·x + m·s; IQ4_NL d·dx·Σv·x, the codes'
// values v from kvalues_iq4nl by prmt (Iq4Table). Columns as in q4k_rows_dot_q8.
std::vector<Reg> block32_row_dot_q8(Kernel& k, const RowLayout& l, const Reg& wrow, const Reg& lane, const Reg& xq,
                                    uint32_t n_in, uint32_t columns, uint32_t col_bytes) {
  const GgmlType t = l.type;
  const uint32_t nb = l.blocks, qbytes = l.planes[0].bytes_per_block, unroll = std::min(q8_unroll(columns), ceil_div(nb, 32));
  const Q8Layout32 q8(n_in);
  const Reg lo_off = k.shl(k.and_(k.shr(lane, 2u), 1u), 4u), hi_off = k.xor_(lo_off, 16u);
  const std::optional<Iq4Table> iq4 = t == GgmlType::IQ4_NL ? std::optional<Iq4Table>(Iq4Table(k)) : std::nullopt;
  MemOpt nc;
  nc.nc = true;
  auto plane_addr = [&](const Reg& b, size_t p) {
    return k.add(wrow, k.cvt(Type::u64, k.mad_lo(b, l.planes[p].bytes_per_block, l.planes[p].offset)));
  };
  std::vector<Reg> acc = zero_accumulators(k, columns);
  Reg b = k.reg(Type::u32);
  k.for_range(b, lane, nb, 32 * unroll, [&] {
    std::vector<Reg> bu, valid, scale, qh;
    std::vector<std::vector<Reg>> q;
    for (uint32_t u = 0; u < unroll; ++u) {
      Reg bi = k.add(b, 32 * u);
      valid.push_back(k.setp(Cmp::lt, bi, nb));
      bu.push_back(k.min(bi, nb - 1));
      Reg qa = k.add(wrow, k.cvt(Type::u64, k.mad_lo(bu[u], qbytes, l.planes[0].offset)));
      std::vector<Reg> qv = ld_v4_nc(k, Type::u32, qa);
      if (qbytes == 32) {
        std::vector<Reg> qv2 = ld_v4_nc(k, Type::u32, qa, 16);
        qv.insert(qv.end(), qv2.begin(), qv2.end());
      }
      q.push_back(qv);
      const size_t dp = t == GgmlType::Q5_0 ? 2 : 1;
      Reg sc = k.reg(t == GgmlType::Q4_1 ? Type::u32 : Type::u16);
      k.ld(Space::global, sc, at(plane_addr(bu[u], dp)), nc);
      scale.push_back(sc);
      if (t == GgmlType::Q5_0) {
        Reg h = k.reg(Type::u32);
        k.ld(Space::global, h, at(plane_addr(bu[u], 1)), nc);
        qh.push_back(h);
      }
    }
    for (uint32_t u = 0; u < unroll; ++u) {
      // The block's quants as 8 words of int8 in element order, for every column.
      std::vector<Reg> w8;
      if (t == GgmlType::Q8_0) {
        for (uint32_t w = 0; w < 8; ++w) w8.push_back(k.bitcast(Type::s32, q[u][w]));
      } else {
        std::vector<Reg> lo, hi;
        for (uint32_t w = 0; w < 4; ++w) {
          if (iq4) {   // the codes through kvalues_iq4nl: signed int8 values
            const auto [a, b] = iq4->values(k, q[u][w]);
            lo.push_back(k.bitcast(Type::s32, a));
            hi.push_back(k.bitcast(Type::s32, b));
            continue;
          }
          lo.push_back(k.and_(q[u][w], 0x0f0f0f0fu));
          hi.push_back(k.and_(k.shr(q[u][w], 4u), 0x0f0f0f0fu));
          if (t == GgmlType::Q5_0) {   // bit j of qh is element j's fifth bit, bit j + 16 element j + 16's
            auto spread = [&](uint32_t first) {   // 4 bits of qh from `first` to bit 4 of each byte
              Reg nib = k.bfe(qh[u], first, 4u);
              return k.shl(k.and_(k.mul(nib, 0x00204081u), 0x01010101u), 4u);
            };
            lo[w] = k.or_(lo[w], spread(4 * w));
            hi[w] = k.or_(hi[w], spread(16 + 4 * w));
          }
        }
        w8 = lo;
        w8.insert(w8.end(), hi.begin(), hi.end());
      }
      const bool q4_1 = t == GgmlType::Q4_1;
      Reg d = q4_1 ? half_to_f32(k, scale[u], 0) : k.cvt(Type::f32, k.bitcast(Type::f16, scale[u]));
      Reg m = q4_1 ? half_to_f32(k, scale[u], 16) : Reg{};
      Reg xa = k.mad_lo(bu[u], 32u, xq);
      Reg sa = k.mad_lo(bu[u], 4u, xq);
      for (uint32_t col = 0; col < columns; ++col) {
        const uint32_t co = col * col_bytes;
        std::vector<Reg> x = ld_vec(k, Space::shared, Type::s32, 4, k.add(xa, lo_off), co);
        std::vector<Reg> x2 = ld_vec(k, Space::shared, Type::s32, 4, k.add(xa, hi_off), co);
        x.insert(x.end(), x2.begin(), x2.end());
        Reg dx = k.ld_shared(Type::f32, at(sa, int64_t(q8.d) + co));
        Reg isum = k.mov(Type::s32, 0);
        if (t == GgmlType::Q8_0) {
          for (uint32_t w = 0; w < 8; ++w) k.dp4a(isum, w8[w], x[w], isum);
        } else {
          for (uint32_t w = 0; w < 4; ++w) {
            k.dp4a(isum, w8[w], x[w], isum);
            k.dp4a(isum, w8[4 + w], x[4 + w], isum);
          }
        }
        Reg term;
        if (q4_1) {   // d·dx·Σq·x + m·s
          Reg sx = k.ld_shared(Type::f32, at(sa, int64_t(q8.s) + co));
          term = k.fma(k.mul(d, dx), k.cvt(Type::f32, isum), k.mul(m, sx));
        } else {
          if (t == GgmlType::Q4_0 || t == GgmlType::Q5_0) {   // the offset: 8 (Q4_0) or 16 (Q5_0) times Σx
            Reg sq = k.ld_shared(Type::s32, at(sa, int64_t(q8.sumq) + co));
            k.mad_lo(isum, sq, t == GgmlType::Q5_0 ? -16 : -8, isum);
          }
          term = k.mul(k.mul(d, dx), k.cvt(Type::f32, isum));
        }
        k.add(acc[col], acc[col], k.selp(term, 0.0f, valid[u], Type::f32));
      }
    }
  }, false);   // unrolled by ptxas, Q8_0's loop took 88 registers instead of 40
  return acc;
}

}  // namespace

bool k_family(GgmlType t) { return t == GgmlType::Q4_K || t == GgmlType::Q6_K || k256_decoded(t); }

bool q8_blocks256(const GemvShape& s) { return !s.segments.empty() && k_family(s.segments[0].type); }

uint32_t q8_column_bytes(const GemvShape& s) {
  return ((q8_blocks256(s) ? Q8Layout(s.n_in).bytes : Q8Layout32(s.n_in).bytes) + 15) / 16 * 16;
}

uint32_t q8_shared_bytes(const GemvShape& s) { return s.columns * q8_column_bytes(s); }

void stage_q8_input(Kernel& k, const GemvShape& s, const StageInput& in, const Reg& norm_w, const Reg& lane,
                    const Reg& warp, uint32_t warps) {
  if (s.norm && in.ss.size() != in.columns) throw Error("gemv: staging a normed input needs a sum of squares per column");
  if (q8_blocks256(s)) stage_q8_input256(k, s, in, norm_w, lane, warp, warps);
  else stage_q8_input32(k, s, in, norm_w, lane, warp, warps);
}

std::vector<Reg> q8_row_dot(Kernel& k, const GemvShape& s, const RowLayout& l, const Reg& wrow, const Reg& lane,
                            const Reg& xq) {
  const uint32_t cb = q8_column_bytes(s);
  return l.type == GgmlType::Q4_K   ? q4k_rows_dot_q8(k, l, {wrow}, lane, xq, s.n_in, s.columns, cb)[0]
         : l.type == GgmlType::Q6_K ? q6k_rows_dot_q8(k, l, {wrow}, lane, xq, s.n_in, s.columns, cb)[0]
         : k256_decoded(l.type)     ? k256_row_dot_q8(k, l, wrow, lane, xq, s.n_in, s.columns, cb)
                                    : block32_row_dot_q8(k, l, wrow, lane, xq, s.n_in, s.columns, cb);
}

uint32_t q8_pass_blocks(const GemvShape& s) {
  if (!s.q8_input || !q8_blocks256(s) || q8_shared_bytes(s) <= kQ8OnePassBytes) return 0;
  if (s.norm || s.glu != Glu::None || s.segments.size() != 1) return 0;
  const GgmlType t = s.segments[0].type;
  if (t != GgmlType::Q4_K && t != GgmlType::Q6_K) return 0;
  const GemvPlan plan = gemv_plan(s);
  if (ceil_div(plan.rows_per_block, plan.warps) * s.columns > 64) return 0;   // every row's accumulators held
  // Whole steps of the row dot's lanes (16 blocks: two steps of 8 when
  // unrolled), so no pass but the last has a step past its end.
  const uint32_t nb = s.n_in / 256;
  for (uint32_t pb = (nb - 1) / 16 * 16; pb >= 16; pb -= 16)
    if (uint64_t(s.columns) * ((Q8Layout(256 * pb).bytes + 15) / 16 * 16) <= kQ8OnePassBytes) return pb;
  return 0;
}

uint32_t q8_pass_column_bytes(const GemvShape& s) {
  const uint32_t pb = q8_pass_blocks(s);
  return pb ? (Q8Layout(256 * pb).bytes + 15) / 16 * 16 : q8_column_bytes(s);
}

void q8_row_dot_pass(Kernel& k, const GemvShape& pass, const RowLayout& l, const Reg& wrow, const Reg& lane,
                     const Reg& xq, uint32_t col_bytes, uint32_t first, const std::vector<Reg>& acc) {
  const RowsAcc carry = {acc};
  if (l.type == GgmlType::Q4_K) q4k_rows_dot_q8(k, l, {wrow}, lane, xq, pass.n_in, pass.columns, col_bytes, first, &carry);
  else if (l.type == GgmlType::Q6_K) q6k_rows_dot_q8(k, l, {wrow}, lane, xq, pass.n_in, pass.columns, col_bytes, first, &carry);
  else throw Error("gemv: an 8-bit input in passes serves Q4_K and Q6_K only");
}

bool q8_rows_together(const GemvShape& s) {
  if (!s.q8_input || s.glu == Glu::None) return false;
  const GgmlType t = s.segments[0].type;
  return (t == GgmlType::Q4_K || t == GgmlType::Q6_K) && s.segments[1].type == t;
}

bool q8_pairs_type(const GemvShape& s, GgmlType t) {
  return t == GgmlType::Q4_K || (t == GgmlType::Q6_K && s.columns == 1);
}

bool q8_rows_paired(const GemvShape& s) {
  if (!s.q8_input || s.glu != Glu::None || q8_pass_blocks(s)) return false;
  const GemvPlan plan = gemv_plan(s);
  return plan.rows_per_block >= 2 * plan.warps &&
         std::any_of(s.segments.begin(), s.segments.end(), [&](const GemvSegment& g) { return q8_pairs_type(s, g.type); });
}

std::vector<std::vector<Reg>> q8_rows_dot(Kernel& k, const GemvShape& s, const RowLayout& l,
                                          const std::vector<Reg>& wrows, const Reg& lane, const Reg& xq) {
  const uint32_t cb = q8_column_bytes(s);
  if (l.type == GgmlType::Q4_K) return q4k_rows_dot_q8(k, l, wrows, lane, xq, s.n_in, s.columns, cb);
  if (l.type == GgmlType::Q6_K) return q6k_rows_dot_q8(k, l, wrows, lane, xq, s.n_in, s.columns, cb);
  throw Error("gemv: rows together serve Q4_K and Q6_K only");
}

bool gemv_supports_q8_input(GgmlType t) {
  return k_family(t) || t == GgmlType::Q8_0 || t == GgmlType::Q4_0 || t == GgmlType::Q4_1 || t == GgmlType::Q5_0 ||
         t == GgmlType::IQ4_NL;
}

bool gemv_q8_input_fits(const GemvShape& s) {
  if (s.segments.empty()) return false;
  for (const GemvSegment& g : s.segments)
    if (!gemv_supports_q8_input(g.type) || k_family(g.type) != q8_blocks256(s)) return false;
  return s.n_in % (q8_blocks256(s) ? 256 : 32) == 0;
}

}  // namespace ptxlm::kernels
