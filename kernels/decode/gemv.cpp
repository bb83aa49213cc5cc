#include "kernels/decode/gemv.h"

#include <algorithm>
#include <array>
#include <cmath>
#include <optional>
#include <string>

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

bool sixteen_bit(GgmlType t) { return t == GgmlType::F16 || t == GgmlType::BF16; }

// Every segment F16 or BF16: N input columns on the f32 input.
bool sixteen_bit_only(const GemvShape& s) {
  return std::all_of(s.segments.begin(), s.segments.end(), [](const GemvSegment& g) { return sixteen_bit(g.type); });
}

void check_shape(const GemvShape& s) {
  if (s.segments.empty()) throw Error("gemv: no segments");
  if (s.glu != Glu::None && (s.segments.size() != 2 || s.segments[0].rows != s.segments[1].rows))
    throw Error("gemv: a GLU needs two segments (gate, up) with the same rows");
  if (s.glu != Glu::None && s.accumulate) throw Error("gemv: a GLU output does not accumulate");
  if (s.n_in == 0 || s.n_in % 32) throw Error("gemv: n_in " + std::to_string(s.n_in) + " is not a positive multiple of 32");
  if (uint64_t(s.n_in) * 4 > 200 * 1024) throw Error("gemv: n_in " + std::to_string(s.n_in) + " does not fit in shared memory");
  if (s.q8_input && q8_blocks256(s) && s.n_in % 256)
    throw Error("gemv: an 8-bit input for a 256-element type (Q4_K, Q6_K, ...) needs n_in a multiple of 256");
  if (s.columns == 0 || s.columns > kMaxGemvColumns)
    throw Error("gemv: " + std::to_string(s.columns) + " input columns (1 to " + std::to_string(kMaxGemvColumns) + ")");
  if (s.columns > 1 && !s.q8_input && !sixteen_bit_only(s))
    throw Error("gemv: several input columns need the 8-bit input (q8_input), or F16/BF16 weights only");
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
  if (s.accumulate) n.append("_acc");
  if (s.q8_input) n.append("_q8");
  if (s.columns > 1) n.append("_n").append(std::to_string(s.columns));
  n.append("_").append(std::to_string(s.n_in));
  for (const GemvSegment& g : s.segments) {
    std::string t = gguf::type_traits(g.type).name;
    std::transform(t.begin(), t.end(), t.begin(), [](unsigned char c) { return char(std::tolower(c)); });
    n.append("_").append(t).append("x").append(std::to_string(g.rows));
  }
  return n;
}

// The per-warp dot product of one Q8_0 row in the device layout (quants
// plane, then f16 scales): two lanes per block, lane l taking half l % 2
// (16 quants) of blocks l / 2, l / 2 + 16, ..., so each warp request reads
// 512 contiguous bytes. Returns the lane's partial sum.
Reg q8_0_row_dot(Kernel& k, const RowLayout& l, const Reg& wrow, const Reg& lane, const Reg& xs) {
  Reg half = k.and_(lane, 1u), first = k.shr(lane, 1u);
  Reg qoff = k.cvt(Type::u64, k.shl(half, 4u));
  Reg x0 = k.mad_lo(half, 64u, xs);
  Reg acc = k.mov(Type::f32, 0.0f);
  Reg b = k.reg(Type::u32);
  MemOpt nc;
  nc.nc = true;
  k.for_range(b, first, l.blocks, 16u, [&] {
    Reg qa = k.add(k.add(wrow, k.mul_wide(b, 32u)), qoff);
    std::vector<Reg> q = ld_v4_nc(k, Type::u32, qa);
    Reg xa = k.mad_lo(b, 128u, x0);
    Reg dot = k.mov(Type::f32, 0.0f);
    for (uint32_t c = 0; c < 4; ++c) {
      std::vector<Reg> x = ld_vec(k, Space::shared, Type::f32, 4, xa, 16 * c);
      for (uint32_t e = 0; e < 4; ++e) {
        Reg qv = k.cvt(Type::f32, k.bfe(k.bitcast(Type::s32, q[c]), 8 * e, 8u));
        k.fma(dot, qv, x[e], dot);
      }
    }
    Reg bits = k.reg(Type::u16);
    k.ld(Space::global, bits, at(k.add(wrow, k.cvt(Type::u64, k.mad_lo(b, 2u, l.planes[1].offset)))), nc);
    Reg d = k.cvt(Type::f32, k.bitcast(Type::f16, bits));
    k.fma(acc, d, dot, acc);
  });
  return acc;
}

// The per-warp dot product of one row of a 16-byte-quant block type (Q4_0,
// Q4_1, Q5_0, IQ4_NL: its codes through kvalues_iq4nl) in the device layout (layout.h: quants plane, then
// high bits, then scales). Lane l takes blocks l, l + 32, ...; Q4_x and
// Q5_0 hold element j in the low nibble of byte j and element j + 16 in its
// high nibble. Returns the lane's partial sum.
Reg block32_row_dot(Kernel& k, const RowLayout& l, const Reg& wrow, const Reg& lane, const Reg& xs, const Reg& xsum8) {
  const GgmlType t = l.type;
  const uint32_t qbytes = l.planes[0].bytes_per_block;
  const std::optional<Iq4Table> iq4 = t == GgmlType::IQ4_NL ? std::optional<Iq4Table>(Iq4Table(k)) : std::nullopt;
  Reg acc = k.mov(Type::f32, 0.0f);
  Reg b = k.reg(Type::u32);
  k.for_range(b, lane, l.blocks, 32u, [&] {
    Reg qa = k.add(wrow, k.mul_wide(b, qbytes));
    std::vector<Reg> q = ld_v4_nc(k, Type::u32, qa);
    Reg xa = k.mad_lo(b, 128u, xs);
    std::vector<Reg> x;
    for (uint32_t c = 0; c < 8; ++c) {
      std::vector<Reg> v = {k.reg(Type::f32), k.reg(Type::f32), k.reg(Type::f32), k.reg(Type::f32)};
      k.ld(Space::shared, v, at(xa, 16 * c));
      x.insert(x.end(), v.begin(), v.end());
    }
    // The scale plane(s), one small aligned load each.
    auto plane_addr = [&](size_t p, uint32_t bytes) {
      return k.add(wrow, k.cvt(Type::u64, k.mad_lo(b, bytes, l.planes[p].offset)));
    };
    MemOpt nc;
    nc.nc = true;
    auto half_at = [&](size_t p) {
      Reg bits = k.reg(Type::u16);
      k.ld(Space::global, bits, at(plane_addr(p, 2)), nc);
      return k.cvt(Type::f32, k.bitcast(Type::f16, bits));
    };
    Reg out;
    {
      std::vector<std::pair<Reg, Reg>> iq4v;   // IQ4_NL: each word's codes through kvalues_iq4nl
      if (iq4)
        for (uint32_t w = 0; w < 4; ++w) iq4v.push_back(iq4->values(k, q[w]));
      Reg qh;
      if (t == GgmlType::Q5_0) {
        qh = k.reg(Type::u32);
        k.ld(Space::global, qh, at(plane_addr(1, 4)), nc);
      }
      Reg dot = k.mov(Type::f32, 0.0f);
      for (uint32_t j = 0; j < 16; ++j) {
        Reg lo = iq4 ? k.bfe(k.bitcast(Type::s32, iq4v[j / 4].first), 8 * (j % 4), 8u) : k.bfe(q[j / 4], 8 * (j % 4), 4u);
        Reg hi = iq4 ? k.bfe(k.bitcast(Type::s32, iq4v[j / 4].second), 8 * (j % 4), 8u)
                     : k.bfe(q[j / 4], 8 * (j % 4) + 4, 4u);
        if (t == GgmlType::Q5_0) {   // the fifth bit: qh bit j (low nibble), bit j + 16 (high)
          lo = k.or_(lo, k.shl(k.bfe(qh, j, 1u), 4u));
          hi = k.or_(hi, k.shl(k.bfe(qh, j + 16, 1u), 4u));
        }
        k.fma(dot, k.cvt(Type::f32, lo), x[j], dot);
        k.fma(dot, k.cvt(Type::f32, hi), x[j + 16], dot);
      }
      // Σx over the block, from the four staged 8-element sums.
      auto block_sum = [&] {
        std::vector<Reg> s4 = ld_vec(k, Space::shared, Type::f32, 4, k.mad_lo(b, 16u, xsum8));
        Reg s01 = k.add(s4[0], s4[1]);
        return k.add(s01, k.add(s4[2], s4[3]));
      };
      if (iq4) {                   // y = d·v
        out = k.mul(half_at(1), dot);
      } else if (t == GgmlType::Q4_1) {
        Reg sum = block_sum();   // y = d·q + m
        Reg dm = k.reg(Type::u32);
        k.ld(Space::global, dm, at(plane_addr(1, 4)), nc);
        Reg d = half_to_f32(k, dm, 0);
        out = k.fma(d, dot, k.mul(half_to_f32(k, dm, 16), sum));
      } else {                     // y = d·(q - 8) or d·(q - 16)
        const float offset = t == GgmlType::Q5_0 ? 16.0f : 8.0f;
        Reg d = half_at(t == GgmlType::Q5_0 ? 2 : 1);
        out = k.mul(d, k.sub(dot, k.mul(block_sum(), offset)));
      }
    }
    k.add(acc, acc, out);
  });
  return acc;
}

// The per-warp dot product of one Q6_K row in the device layout (planes ql,
// qh, scales, d). Lane l takes part p = l % 8 of blocks l / 8, l / 8 + 4, ...:
// half n = p / 4 of the block (128 elements) and l in 8(p % 4) .. +7, i.e.
// the 6-bit values q1..q4 at elements 128n + l + {0, 32, 64, 96}:
// q1 = low nibble of ql[64n + l] | bits 0-1 of qh[32n + l] << 4, q2 = low
// nibble of ql[64n + l + 32] | bits 2-3, q3 = high nibble of ql[64n + l] |
// bits 4-5, q4 = high nibble of ql[64n + l + 32] | bits 6-7; each minus 32,
// times the int8 scale sc[8n + l / 16 + {0, 2, 4, 6}] and d.
Reg q6k_row_dot(Kernel& k, const RowLayout& l, const Reg& wrow, const Reg& lane, const Reg& xs, const Reg& xsum8) {
  Reg part = k.and_(lane, 7u), first = k.shr(lane, 3u);
  Reg n = k.shr(part, 2u), l0 = k.shl(k.and_(part, 3u), 3u);
  Reg is8 = k.shl(k.shr(l0, 4u), 3u);                  // 8 · (l / 16): the scale byte's bit offset
  Reg is8_2 = k.add(is8, 16u);                          // ... of scale is + 2 (same word)
  Reg ql_off = k.cvt(Type::u64, k.mad_lo(n, 64u, l0));
  Reg qh_off = k.cvt(Type::u64, k.mad_lo(n, 32u, k.add(l0, l.planes[1].offset)));
  Reg sc_off = k.cvt(Type::u64, k.mad_lo(n, 8u, l.planes[2].offset));
  Reg elem = k.mad_lo(n, 128u, l0);
  Reg x0 = k.mad_lo(elem, 4u, xs);
  Reg s0 = k.add(xsum8, k.shr(elem, 1u));
  MemOpt nc;
  nc.nc = true;
  auto ld2 = [&](const Reg& a) {
    std::vector<Reg> v = {k.reg(Type::u32), k.reg(Type::u32)};
    k.ld(Space::global, v, at(a), nc);
    return v;
  };
  Reg acc = k.mov(Type::f32, 0.0f);
  Reg b = k.reg(Type::u32);
  k.for_range(b, first, l.blocks, 4u, [&] {
    Reg ql = k.add(k.add(wrow, k.mul_wide(b, 128u)), ql_off);
    std::vector<Reg> qa = ld2(ql);
    std::vector<Reg> qb = ld2(k.add(ql, 32));
    std::vector<Reg> qh = ld2(k.add(k.add(wrow, k.mul_wide(b, 64u)), qh_off));
    std::vector<Reg> sc = ld2(k.add(k.add(wrow, k.mul_wide(b, 16u)), sc_off));
    Reg dbits = k.reg(Type::u16);
    k.ld(Space::global, dbits, at(k.add(wrow, k.cvt(Type::u64, k.mad_lo(b, 2u, l.planes[3].offset)))), nc);
    Reg d = k.cvt(Type::f32, k.bitcast(Type::f16, dbits));
    Reg xa = k.mad_lo(b, 1024u, x0);
    Reg sa = k.mad_lo(b, 128u, s0);
    Reg total = k.mov(Type::f32, 0.0f);
    for (uint32_t q = 0; q < 4; ++q) {   // q1..q4: elements 32q further, scale 2q further
      Reg dot = k.mov(Type::f32, 0.0f);
      for (uint32_t c = 0; c < 2; ++c) {
        std::vector<Reg> x = {k.reg(Type::f32), k.reg(Type::f32), k.reg(Type::f32), k.reg(Type::f32)};
        k.ld(Space::shared, x, at(xa, 128 * q + 16 * c));
        for (uint32_t e = 0; e < 4; ++e) {
          const uint32_t i = 4 * c + e;   // l - l0
          const Reg& src = (q % 2 == 0 ? qa : qb)[i / 4];
          Reg lo = k.bfe(src, 8 * (i % 4) + (q >= 2 ? 4 : 0), 4u);
          Reg hi = k.bfe(qh[i / 4], 8 * (i % 4) + 2 * q, 2u);
          Reg u = k.or_(lo, k.shl(hi, 4u));
          k.fma(dot, k.cvt(Type::f32, u), x[e], dot);
        }
      }
      Reg s = k.ld_shared(Type::f32, at(sa, 16 * q));   // Σx of these 8 elements
      Reg scale = k.cvt(Type::f32, k.bfe(k.bitcast(Type::s32, sc[q / 2]), q % 2 ? is8_2 : is8, 8u));
      k.fma(total, scale, k.sub(dot, k.mul(s, 32.0f)), total);
    }
    k.fma(acc, d, total, acc);
  });
  return acc;
}

// The per-warp dot product of one Q4_K row with the staged input. Lane l
// takes the 16 quant bytes `part` = l % 8 of blocks l / 8, l / 8 + 4, ...:
// the low nibbles are elements 64j + 16h .. +15 of sub-block 2j, the high
// nibbles the same offsets 32 further in sub-block 2j + 1 (j = part / 2,
// h = part % 2). Returns the lane's partial sum (unreduced).
Reg q4k_row_dot(Kernel& k, const RowLayout& l, const Reg& wrow, const Reg& lane, const Reg& xs, const Reg& xsum8) {
  const uint32_t nb = l.blocks;
  Reg part = k.and_(lane, 7u), first = k.shr(lane, 3u);
  Reg j = k.shr(part, 1u), half = k.and_(part, 1u);
  Reg big = k.setp(Cmp::ge, j, 2u);   // sub-blocks 4..7: scales packed across bytes
  Reg shift_lo = k.shl(k.and_(j, 1u), 4u);
  Reg shift_hi = k.add(shift_lo, 8u);
  Reg qoff = k.cvt(Type::u64, k.shl(part, 4u));
  // Byte offsets into the staged input and its 8-element sums, for block 0.
  Reg elem = k.mad_lo(j, 64u, k.shl(half, 4u));
  Reg x0 = k.mad_lo(elem, 4u, xs);
  Reg s0 = k.add(xsum8, k.shr(elem, 1u));   // sum elem / 8, 4 bytes each

  Reg acc = k.mov(Type::f32, 0.0f);
  Reg b = k.reg(Type::u32);
  k.for_range(b, first, nb, 4u, [&] {
    // Device layout (layout.h): the row's quants plane (128 bytes per
    // block), then its headers plane (d, dmin, scales: 16 bytes per block).
    Reg qblk = k.add(wrow, k.mul_wide(b, 128u));
    Reg hdr = k.add(wrow, k.cvt(Type::u64, k.mad_lo(b, 16u, l.planes[1].offset)));
    std::vector<Reg> h = ld_v4_nc(k, Type::u32, hdr);
    std::vector<Reg> q = ld_v4_nc(k, Type::u32, k.add(qblk, qoff));
    Reg d = half_to_f32(k, h[0], 0), dmin = half_to_f32(k, h[0], 16);

    // 6-bit scale and min of sub-block s (get_scale_min_k4): for s < 4,
    // scales[s] & 63 and scales[s + 4] & 63; for s >= 4, the low/high nibble
    // of scales[s + 4] with the top two bits of scales[s - 4] / scales[s].
    // h[1..3] hold scales[0..11]; byte t = s % 4 of each word is needed.
    auto scale_min = [&](const Reg& shift, Reg& sc, Reg& mn) {
      Reg b1 = k.bfe(h[1], shift, 8u), b2 = k.bfe(h[2], shift, 8u), b3 = k.bfe(h[3], shift, 8u);
      Reg sc_small = k.and_(b1, 63u), mn_small = k.and_(b2, 63u);
      Reg b3_lo = k.and_(b3, 15u), b3_hi = k.shr(b3, 4u);   // one emitting call per argument list
      Reg sc_big = k.or_(b3_lo, k.shl(k.shr(b1, 6u), 4u));
      Reg mn_big = k.or_(b3_hi, k.shl(k.shr(b2, 6u), 4u));
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
    Reg sa = k.mad_lo(b, 128u, s0);   // 32 sums of 8 per block
    std::vector<Reg> sl = {k.reg(Type::f32), k.reg(Type::f32)}, sh = {k.reg(Type::f32), k.reg(Type::f32)};
    k.ld(Space::shared, sl, at(sa));
    k.ld(Space::shared, sh, at(sa, 16));   // 32 elements further: four sums on
    Reg sum_lo = k.add(sl[0], sl[1]);
    Reg sum_hi = k.add(sh[0], sh[1]);
    Reg pos_lo = k.mul(k.mul(d, sc_lo), dot_lo), pos_hi = k.mul(k.mul(d, sc_hi), dot_hi);
    Reg part_lo = k.sub(pos_lo, k.mul(k.mul(dmin, mn_lo), sum_lo));
    Reg part_hi = k.sub(pos_hi, k.mul(k.mul(dmin, mn_hi), sum_hi));
    k.add(acc, acc, k.add(part_lo, part_hi));
  });
  return acc;
}

// 16-byte chunks (8 weights) a lane of a 16-bit-float row loads before it
// uses the first: 4 KiB in flight per warp wait, the 256-element kernels' most.
constexpr uint32_t kF16Unroll = 8;

// The per-warp dot product of one F16 or BF16 row (the file's bytes, the row
// padded to a sector) with the staged f32 input. Lane l takes the 16-byte
// chunks l, l + 32, ... (elements 8c .. 8c + 7 of chunk c): a warp request is
// 512 contiguous bytes, whole sectors, kF16Unroll requests in flight before
// the first is used (the last step's chunks past the row read the row's last
// chunk and add -0). Each weight becomes an exact f32 (F16: cvt.f32.f16;
// BF16: its bits shifted up 16, an integer op) and one f32 FMA takes it:
// the products and sums are the f32 ones of every other type's f32 input,
// so gemv_tolerance holds unchanged. A lane reads its chunk's 8 inputs as
// two 16-byte halves, lanes with bit 2 set the second half first: a quarter
// warp then covers all 32 banks (in element order, at a 32-byte stride, it
// would cover 16 twice); those lanes swap their weight words to match.
//
// With several input columns (staged col_bytes apart) each weight is
// converted once and multiplied into every column's accumulator; a column's
// sums are added in the same order whatever the column count.
std::vector<Reg> f16_row_dot(Kernel& k, const RowLayout& l, const Reg& wrow, const Reg& lane, const Reg& xs,
                             uint32_t columns = 1, uint32_t col_bytes = 0) {
  const bool bf16 = l.type == GgmlType::BF16;
  // More than 4 columns: fewer chunks per step (a half, a quarter past 8), so
  // the columns' accumulators have the registers (test_ptxas: a 16-column GLU
  // spilled on sm_90 at a half).
  const uint32_t per_step = columns > 8 ? kF16Unroll / 4 : columns > 4 ? kF16Unroll / 2 : kF16Unroll;
  const uint32_t nc = l.cols / 8, unroll = std::min(per_step, ceil_div(nc, 32u));
  Reg flip = k.and_(lane, 4u);
  Reg swap = k.setp(Cmp::ne, flip, 0u);
  Reg x_first = k.add(xs, k.shl(flip, 2u));                 // the half read first: 16 bytes on when swapped
  Reg x_second = k.add(xs, k.xor_(k.shl(flip, 2u), 16u));
  auto to_f32 = [&](const Reg& word, uint32_t half) {       // element 2i + half of word i, exactly
    if (bf16) return k.bitcast(Type::f32, half ? k.and_(word, 0xffff0000u) : k.shl(word, 16u));
    Reg lo = k.reg(Type::f16), hi = k.reg(Type::f16);
    k.unpack(lo, hi, word);
    return k.cvt(Type::f32, half ? hi : lo);
  };
  std::vector<Reg> acc = zero_accumulators(k, columns);
  Reg b = k.reg(Type::u32);
  k.for_range(b, lane, nc, 32 * unroll, [&] {
    std::vector<std::vector<Reg>> raw;
    std::vector<Reg> chunk, valid;
    for (uint32_t u = 0; u < unroll; ++u) {   // every step's loads first
      Reg c = u ? k.add(b, 32 * u) : b;
      valid.push_back(u ? k.setp(Cmp::lt, c, nc) : Reg{});
      chunk.push_back(u ? k.min(c, nc - 1) : c);
      raw.push_back(ld_v4_nc(k, Type::u32, k.add(wrow, k.mul_wide(chunk.back(), 16u))));
    }
    for (uint32_t u = 0; u < unroll; ++u) {
      Reg xo = k.shl(chunk[u], 5u);
      Reg xa0 = k.add(x_first, xo), xb0 = k.add(x_second, xo);
      const std::vector<Reg>& r = raw[u];
      // The words of the half read first (elements 0-3, or 4-7 when swapped), then the other's.
      const std::array<Reg, 4> w = {k.selp(r[2], r[0], swap, Type::u32), k.selp(r[3], r[1], swap, Type::u32),
                                    k.selp(r[0], r[2], swap, Type::u32), k.selp(r[1], r[3], swap, Type::u32)};
      std::vector<Reg> f;   // the 8 weights as f32, in the order the input's halves are read
      for (uint32_t i = 0; i < 4; ++i)
        for (uint32_t h = 0; h < 2; ++h) f.push_back(to_f32(w[i], h));
      for (uint32_t col = 0; col < columns; ++col) {
        std::vector<Reg> xa = ld_vec(k, Space::shared, Type::f32, 4, xa0, col * col_bytes);
        std::vector<Reg> xb = ld_vec(k, Space::shared, Type::f32, 4, xb0, col * col_bytes);
        Reg dot = k.mov(Type::f32, 0.0f);
        for (uint32_t e = 0; e < 8; ++e) k.fma(dot, f[e], (e < 4 ? xa : xb)[e % 4], dot);
        // A chunk past the row adds -0, the exact identity: the sum is the same whatever the unrolling.
        k.add(acc[col], acc[col], u ? k.selp(dot, -0.0f, valid[u], Type::f32) : dot);
      }
    }
  });
  return acc;
}

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

}  // namespace

bool gemv_supports(GgmlType t) {
  return t == GgmlType::Q4_K || t == GgmlType::Q6_K || t == GgmlType::Q8_0 || t == GgmlType::Q4_0 ||
         t == GgmlType::Q4_1 || t == GgmlType::Q5_0 || t == GgmlType::IQ4_NL || k256_decoded(t) || t == GgmlType::F16 ||
         t == GgmlType::BF16;
}

GemvPlan gemv_plan(const GemvShape& s) {
  if (s.sms == 0) throw Error("gemv: a grid sized for 0 SMs");
  GemvPlan p;
  const uint32_t rows = total_rows(s);
  // At most one block per SM: every block stages the whole input, so fewer,
  // fuller blocks cut that traffic, and a grid a little over the SM count
  // would run a second, mostly idle wave; fewer blocks than SMs leave SMs
  // idle, so rows per block is the least that fits the rows in `sms` blocks.
  p.rows_per_block = ceil_div(rows, s.sms);
  p.warps = std::clamp<uint32_t>(p.rows_per_block, 8, 16);
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
                   : s.columns > 1 ? s.columns * s.n_in * 4           // F16/BF16: every column's f32 input
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
        Reg first = k.add(k.param(indexed("w", si)), k.mul_wide(local, row_bytes));
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
  // So do the 16-bit-float rows' kF16Unroll chunks (32 words).
  const bool decoded = std::any_of(s.segments.begin(), s.segments.end(), [](const GemvSegment& g) {
    return k256_decoded(g.type) || g.type == GgmlType::F16 || g.type == GgmlType::BF16;
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
    if (!sixteen_bit_only(s)) {   // F16/BF16 rows have no offsets or mins
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
  auto row_dot = [&](size_t si, const Reg& local) -> std::vector<Reg> {
    const GemvSegment& seg = s.segments[si];
    const RowLayout layout = row_layout(seg.type, s.n_in);
    Reg wrow = k.add(k.param(indexed("w", si)), k.mul_wide(local, layout.row_bytes));
    if (s.q8_input) return q8_row_dot(k, s, layout, wrow, lane, xs);
    if (s.columns > 1) return f16_row_dot(k, layout, wrow, lane, xs, s.columns, s.n_in * 4);
    return {seg.type == GgmlType::Q4_K   ? q4k_row_dot(k, layout, wrow, lane, xs, xsum8)
            : seg.type == GgmlType::Q6_K ? q6k_row_dot(k, layout, wrow, lane, xs, xsum8)
            : seg.type == GgmlType::Q8_0 ? q8_0_row_dot(k, layout, wrow, lane, xs)
            : k256_decoded(seg.type)     ? k256_row_dot(k, layout, wrow, lane, xs, xsum8)
            : seg.type == GgmlType::F16 || seg.type == GgmlType::BF16 ? f16_row_dot(k, layout, wrow, lane, xs)[0]
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
  Reg writes = s.columns == 1 ? is_lane0 : k.setp(Cmp::lt, lane, s.columns);
  // A row's results into its outputs (column c's by lane c).
  auto store = [&](const Reg& ya, const Reg& acc) {
    k.when(writes, [&] {
      if (s.accumulate) {
        Reg old = k.ld_global(Type::f32, at(ya));
        k.st_global(at(ya), k.add(old, acc));
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
          Reg wrow = k.add(k.param("w0"), k.mul_wide(row_r, layout.row_bytes));
          q8_row_dot_pass(k, pass, layout, wrow, lane, xs, col_bytes, first, acc[r]);
          if (last)
            store(k.add(k.param("y0"), k.mul_wide(s.columns == 1 ? row_r : k.mad_lo(lane, seg.rows, row_r), 4u)),
                  lane_result(acc[r]));
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
        store(k.add(k.param(indexed("y", si)), k.mul_wide(s.columns == 1 ? local : k.mad_lo(lane, seg.rows, local), 4u)),
              lane_result(row_dot(si, local)));
      });
      base += seg.rows;
    }
  };
  if (q8_rows_paired(s)) {
    // Rows row and row + warps together when both are of one Q4_K segment
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
        if (s.segments[si].type != GgmlType::Q4_K) continue;
        Reg both = k.and_(has2, k.setp(Cmp::lt, k.sub(row2, base), s.segments[si].rows));
        both = k.and_(both, k.setp(Cmp::lt, k.sub(row, base), s.segments[si].rows));   // wraps when row < base
        pairs.push_back({si, base, both});
        any = pairs.size() == 1 ? both : k.or_(any, both);
      }
      k.if_else(
          any,
          [&] {
            for (const Pair& p : pairs) {
              const GemvSegment& seg = s.segments[p.si];
              const RowLayout layout = row_layout(seg.type, s.n_in);
              Reg w = k.param(indexed("w", p.si)), y = k.param(indexed("y", p.si));
              k.if_(p.both, [&] {
                Reg l1 = k.sub(row, p.base), l2 = k.sub(row2, p.base);
                const std::vector<std::vector<Reg>> two = q8_rows_dot(
                    k, s, layout, {k.add(w, k.mul_wide(l1, layout.row_bytes)), k.add(w, k.mul_wide(l2, layout.row_bytes))},
                    lane, xs);
                store(k.add(y, k.mul_wide(k.mad_lo(lane, seg.rows, l1), 4u)), lane_result(two[0]));
                store(k.add(y, k.mul_wide(k.mad_lo(lane, seg.rows, l2), 4u)), lane_result(two[1]));
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
        const RowLayout layout = row_layout(s.segments[0].type, s.n_in);
        const std::vector<std::vector<Reg>> both = q8_rows_dot(
            k, s, layout,
            {k.add(k.param("w0"), k.mul_wide(row, layout.row_bytes)), k.add(k.param("w1"), k.mul_wide(row, layout.row_bytes))},
            lane, xs);
        gate = lane_result(both[0]);
        upv = lane_result(both[1]);
      } else {
        gate = lane_result(row_dot(0, row));
        upv = lane_result(row_dot(1, row));
      }
      Reg ya = k.add(k.param("y0"), k.mul_wide(s.columns == 1 ? row : k.mad_lo(lane, s.segments[0].rows, row), 4u));
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
