#include "kernels/decode/gemv_f32.h"

#include <algorithm>
#include <array>
#include <optional>

#include "kernels/decode/gemv_q8.h"
#include "kernels/decode/gemv_types.h"
#include "kernels/decode/util.h"
#include "kernels/examples/common.h"

namespace ptxlm::kernels {

using namespace ptx;
using gguf::GgmlType;

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

// The per-warp dot product of one F16, BF16 or F32 row (the file's bytes,
// the row padded to a sector) with the staged f32 input. Lane l takes the
// 16-byte chunks l, l + 32, ... (elements 8c .. 8c + 7 of chunk c; F32: the
// 32-byte chunks, as two 16-byte loads): a warp request is 512 contiguous
// bytes (F32: two requests of every other 16 bytes of 1024), whole sectors, kF16Unroll requests in flight before
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
                             uint32_t columns, uint32_t col_bytes) {
  const bool bf16 = l.type == GgmlType::BF16, f32 = l.type == GgmlType::F32;
  // More than 4 columns: fewer chunks per step (a half, a quarter past 8), so
  // the columns' accumulators have the registers (test_ptxas: a 16-column GLU
  // spilled on sm_90 at a half).
  // F32: half the chunks, each twice the bytes (the same words in flight).
  const uint32_t per_step = (columns > 8 ? kF16Unroll / 4 : columns > 4 ? kF16Unroll / 2 : kF16Unroll) / (f32 ? 2 : 1);
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
      Reg at_chunk = k.add(wrow, k.mul_wide(chunk.back(), f32 ? 32u : 16u));
      raw.push_back(ld_v4_nc(k, Type::u32, at_chunk));
      if (f32) {   // elements 4-7 in the next 16 bytes
        const std::vector<Reg> more = ld_v4_nc(k, Type::u32, at_chunk, 16);
        raw.back().insert(raw.back().end(), more.begin(), more.end());
      }
    }
    for (uint32_t u = 0; u < unroll; ++u) {
      Reg xo = k.shl(chunk[u], 5u);
      Reg xa0 = k.add(x_first, xo), xb0 = k.add(x_second, xo);
      const std::vector<Reg>& r = raw[u];
      std::vector<Reg> f;   // the 8 weights as f32, in the order the input's halves are read
      if (f32) {            // the words of the half read first (elements 0-3, or 4-7 when swapped), then the other's
        for (uint32_t i = 0; i < 8; ++i) f.push_back(k.bitcast(Type::f32, k.selp(r[(i + 4) % 8], r[i], swap, Type::u32)));
      } else {              // the same in pairs of 16-bit words
        const std::array<Reg, 4> w = {k.selp(r[2], r[0], swap, Type::u32), k.selp(r[3], r[1], swap, Type::u32),
                                      k.selp(r[0], r[2], swap, Type::u32), k.selp(r[1], r[3], swap, Type::u32)};
        for (uint32_t i = 0; i < 4; ++i)
          for (uint32_t h = 0; h < 2; ++h) f.push_back(to_f32(w[i], h));
      }
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

}  // namespace ptxlm::kernels
