// Q5_K, Q3_K, Q2_K and IQ4_XS row dots (see gemv_types.h): a per-type
// decoder of a lane's 64-element part into int8 code words and integer group
// multipliers, and two row loops over it (the 8-bit input by dp4a, the f32
// input by conversions, as the other f32 row dots).
#include "kernels/decode/gemv_types.h"

#include <algorithm>
#include <optional>
#include <string>

#include "kernels/decode/gemv_q8.h"
#include "kernels/decode/util.h"
#include "kernels/examples/common.h"

namespace ptxlm::kernels {

using namespace ptx;
using gguf::GgmlType;

bool k256_decoded(GgmlType t) {
  return t == GgmlType::Q5_K || t == GgmlType::Q3_K || t == GgmlType::Q2_K || t == GgmlType::IQ4_XS;
}

Iq4Table::Iq4Table(Kernel& k) {
  for (uint32_t i = 0; i < 4; ++i) {
    uint32_t word = 0;
    for (uint32_t b = 0; b < 4; ++b) word |= uint32_t(uint8_t(gguf::kIQ4Values[4 * i + b])) << (8 * b);
    w[i] = k.mov(Type::u32, word);
  }
}

std::pair<Reg, Reg> Iq4Table::values(Kernel& k, const Reg& q) const {
  // q's nibbles in order are the codes of elements i, i + 16, i + 1, i + 17, ...
  Reg idx = k.and_(q, 0x77777777u);                                   // the entry within a half
  Reg pick = k.or_(k.and_(k.shr(q, 1u), 0x44444444u), 0x32103210u);   // byte n of the low (n) or high (n + 4) half
  std::array<Reg, 2> t;
  for (uint32_t i = 0; i < 2; ++i) {   // codes of nibbles 4i .. 4i + 3
    Reg sel = i ? k.shr(idx, 16u) : idx;
    Reg lo = k.prmt(w[0], w[1], sel), hi = k.prmt(w[2], w[3], sel);
    t[i] = k.prmt(lo, hi, i ? k.shr(pick, 16u) : pick);
  }
  return {k.prmt(t[0], t[1], 0x6420u), k.prmt(t[0], t[1], 0x7531u)};   // even nibbles, odd nibbles
}

Reg Iq4Table::value(Kernel& k, const Reg& code) const {
  Reg sel = k.and_(code, 7u);
  Reg v = k.selp(k.prmt(w[2], w[3], sel), k.prmt(w[0], w[1], sel), k.setp(Cmp::ge, code, 8u), Type::u32);
  return k.bfe(k.bitcast(Type::s32, v), 0u, 8u);
}

K4Scales::K4Scales(Kernel& k, const Reg& j)
    : big(k.setp(Cmp::ge, j, 2u)), shift(k.shl(k.and_(j, 1u), 4u)), shift_hi(k.add(shift, 8u)) {}

std::array<Reg, 4> K4Scales::unpack(Kernel& k, const Reg& a, const Reg& bm, const Reg& c) const {
  Reg sc_word = k.selp(k.or_(k.and_(c, 0x0f0f0f0fu), k.and_(k.shr(a, 2u), 0x30303030u)), k.and_(a, 0x3f3f3f3fu), big,
                       Type::u32);
  Reg m_word = k.selp(k.or_(k.and_(k.shr(c, 4u), 0x0f0f0f0fu), k.and_(k.shr(bm, 2u), 0x30303030u)),
                      k.and_(bm, 0x3f3f3f3fu), big, Type::u32);
  auto byte = [&](const Reg& word, const Reg& at_bit) { return k.bitcast(Type::s32, k.bfe(word, at_bit, 8u)); };
  return {byte(sc_word, shift), byte(sc_word, shift_hi), byte(m_word, shift), byte(m_word, shift_hi)};
}

namespace {

// A lane's part of one block, decoded.
struct Part {
  std::vector<Reg> w;    // 16 words of four int8 values (s32), elements 64j .. 64j + 63 in order
  std::vector<Reg> sc;   // per group (2 of 32 or 4 of 16 elements): the s32 multiplier
  std::vector<Reg> mn;   // per group: the s32 min multiplier (types with mins)
  Reg d, dmin;           // f32 (dmin with mins only)
};

// The per-type loads and decoding of a lane's part j (elements 64j .. 64j +
// 63 of a block) in the device layout (layout.cpp: the planes named below).
// Every lane of part j loads the same bytes of the planes a part shares
// (Q5_K's qh, Q3_K's hmask): one request serves the four lanes of a block.
class Decoder {
 public:
  Decoder(Kernel& k, const RowLayout& l, const Reg& j) : k_(k), l_(l) {
    const GgmlType t = l.type;
    // The lane's byte offset in each plane's field (plane offset included).
    std::vector<Reg> extra;
    if (t == GgmlType::Q3_K || t == GgmlType::Q2_K) {   // element 128h + 32kk + l: field kk of qs[32h + l]
      Reg h = k.shr(j, 1u), odd = k.and_(j, 1u);
      extra = {k.shl(h, 5u)};
      qshift_ = k.shl(odd, 2u);                         // 2·kk of the part's first 32 elements
      if (t == GgmlType::Q3_K) {
        hshift_ = k.add(k.shl(h, 2u), k.shl(odd, 1u));   // hmask bit 4h + kk
        sc_shift_ = k.shl(h, 2u);                        // groups 8..15 take the high nibbles
        top_shift_ = k.shl(j, 1u);                       // their top bits: 2·(group / 4)
        extra.push_back(k.mov(Type::u32, 0u));
        extra.push_back(k.shl(odd, 2u));                 // scales word j % 2
        extra.push_back(k.mov(Type::u32, 0u));
      } else {
        extra.push_back(k.shl(j, 2u));                   // scales[4j .. 4j + 3]
        extra.push_back(k.mov(Type::u32, 0u));
      }
    } else {   // Q5_K, IQ4_XS: quant bytes 32j .. 32j + 31; the headers (and Q5_K's qh) whole
      extra = {k.shl(j, 5u)};
      for (size_t p = 1; p < l.planes.size(); ++p) extra.push_back(k.mov(Type::u32, 0u));
    }
    for (size_t p = 0; p < extra.size(); ++p) off_.push_back(k.add(extra[p], l.planes[p].offset));
    if (t == GgmlType::Q3_K) off_.push_back(k.mov(Type::u32, l.planes[2].offset + 8));   // scales[8 .. 11]
    if (t == GgmlType::Q5_K) {
      k4_.emplace(k, j);
      qh_shift_ = k.shl(j, 1u);
    }
    if (t == GgmlType::IQ4_XS) {
      iq4_.emplace(k);
      sl_shift_ = k.shl(j, 3u);
      sh_shift_ = k.add(k.shl(j, 2u), 16u);
    }
  }

  uint32_t groups() const { return l_.type == GgmlType::Q5_K || l_.type == GgmlType::IQ4_XS ? 2 : 4; }

  // Issues block b's loads: the raw words decode() takes.
  std::vector<Reg> load(const Reg& wrow, const Reg& b) const {
    auto addr = [&](size_t p, const Reg& off) {   // block b's field p, at the lane's offset
      return k_.add(wrow, k_.cvt(Type::u64, k_.mad_lo(b, l_.planes[p].bytes_per_block, off)));
    };
    auto words = [&](size_t p, unsigned n, const Reg* off = nullptr) {   // n u32 words (16-byte aligned when n >= 4)
      Reg a = addr(p, off ? *off : off_[p]);
      std::vector<Reg> v;
      for (unsigned i = 0; i < n; i += 4) {
        std::vector<Reg> w = ld_vec(k_, Space::global, Type::u32, std::min(n - i, 4u), a, 4 * i, true);
        v.insert(v.end(), w.begin(), w.end());
      }
      return v;
    };
    std::vector<Reg> raw = words(0, 8);   // the part's 32 quant bytes
    auto append = [&](const std::vector<Reg>& v) { raw.insert(raw.end(), v.begin(), v.end()); };
    switch (l_.type) {
      case GgmlType::Q5_K:
        append(words(1, 4));   // d, dmin, scales
        append(words(2, 8));   // qh
        break;
      case GgmlType::Q3_K: {
        append(words(1, 8));   // hmask
        append(words(2, 1));   // scales[4(j % 2) .. + 3]
        append(words(2, 1, &off_[4]));   // scales[8 .. 11]
        MemOpt nc;
        nc.nc = true;
        Reg dbits = k_.reg(Type::u16);
        k_.ld(Space::global, dbits, at(addr(3, off_[3])), nc);
        raw.push_back(dbits);
        break;
      }
      case GgmlType::Q2_K:
        append(words(1, 1));   // scales[4j .. 4j + 3]
        append(words(2, 1));   // d, dmin
        break;
      case GgmlType::IQ4_XS:
        append(words(1, 2));   // d | scales_h << 16, scales_l
        break;
      default: throw Error(std::string("gemv: no decoder for ") + gguf::type_traits(l_.type).name);
    }
    return raw;
  }

  Part decode(const std::vector<Reg>& raw) const {
    Part p;
    std::vector<Reg> lo, hi;   // the part's first and second 32 elements
    const GgmlType t = l_.type;
    if (t == GgmlType::Q5_K) {   // nibbles, the fifth bit from qh bits 2j (low nibble) and 2j + 1
      for (uint32_t w = 0; w < 8; ++w) {
        Reg hb = k_.shr(raw[12 + w], qh_shift_);
        lo.push_back(k_.or_(k_.and_(raw[w], 0x0f0f0f0fu), k_.and_(k_.shl(hb, 4u), 0x10101010u)));
        hi.push_back(k_.or_(k_.and_(k_.shr(raw[w], 4u), 0x0f0f0f0fu), k_.and_(k_.shl(hb, 3u), 0x10101010u)));
      }
      const std::array<Reg, 4> s = k4_->unpack(k_, raw[9], raw[10], raw[11]);
      p.sc = {s[0], s[1]};
      p.mn = {s[2], s[3]};
      p.d = half_to_f32(k_, raw[8], 0);
      p.dmin = half_to_f32(k_, raw[8], 16);
    } else if (t == GgmlType::Q3_K || t == GgmlType::Q2_K) {   // 2-bit fields kk and kk + 1 of the same bytes
      for (uint32_t w = 0; w < 8; ++w) {
        Reg q = k_.shr(raw[w], qshift_);
        lo.push_back(k_.and_(q, 0x03030303u));
        hi.push_back(k_.and_(k_.shr(q, 2u), 0x03030303u));
        if (t == GgmlType::Q3_K) {   // hmask bit 4h + kk set: the code is q; clear: q - 4, as int8 q | 0xfc
          Reg clear = k_.not_(k_.shr(raw[8 + w], hshift_));
          lo.back() = k_.or_(lo.back(), k_.mul(k_.and_(clear, 0x01010101u), 0xfcu));
          hi.back() = k_.or_(hi.back(), k_.mul(k_.and_(k_.shr(clear, 1u), 0x01010101u), 0xfcu));
        }
      }
      if (t == GgmlType::Q3_K) {   // groups 4j .. 4j + 3: q3_k_scale, four bytes of one word
        Reg low = k_.and_(k_.shr(raw[16], sc_shift_), 0x0f0f0f0fu);
        Reg top = k_.and_(k_.shl(k_.shr(raw[17], top_shift_), 4u), 0x30303030u);
        Reg word = k_.or_(low, top);
        for (uint32_t g = 0; g < 4; ++g) p.sc.push_back(k_.sub(k_.bitcast(Type::s32, k_.bfe(word, 8 * g, 6u)), 32));
        p.d = k_.cvt(Type::f32, k_.bitcast(Type::f16, raw[18]));
      } else {                     // scales[4j + g]: low nibble the scale, high the min
        for (uint32_t g = 0; g < 4; ++g) {
          p.sc.push_back(k_.bitcast(Type::s32, k_.bfe(raw[8], 8 * g, 4u)));
          p.mn.push_back(k_.bitcast(Type::s32, k_.bfe(raw[8], 8 * g + 4, 4u)));
        }
        p.d = half_to_f32(k_, raw[9], 0);
        p.dmin = half_to_f32(k_, raw[9], 16);
      }
    } else {   // IQ4_XS: sub-blocks 2j, 2j + 1, each 16 bytes as IQ4_NL's block
      for (uint32_t w = 0; w < 8; ++w) {
        const auto [a, b] = iq4_->values(k_, raw[w]);
        (w < 4 ? lo : hi).push_back(a);
        (w < 4 ? lo : hi).push_back(b);
      }
      for (std::vector<Reg>* v : {&lo, &hi})   // words a0 b0 a1 b1 ... to element order a0..a3 b0..b3
        *v = {(*v)[0], (*v)[2], (*v)[4], (*v)[6], (*v)[1], (*v)[3], (*v)[5], (*v)[7]};
      // ls of sub-block 2j + s: nibble s of scales_l[j], bits 2s .. 2s + 1 of scales_h >> 4j.
      Reg sl = k_.bfe(raw[9], sl_shift_, 8u), sh = k_.bfe(raw[8], sh_shift_, 4u);
      for (uint32_t s = 0; s < 2; ++s) {
        Reg ls = k_.or_(k_.bfe(sl, 4 * s, 4u), k_.shl(k_.bfe(sh, 2 * s, 2u), 4u));
        p.sc.push_back(k_.sub(k_.bitcast(Type::s32, ls), 32));
      }
      p.d = half_to_f32(k_, raw[8], 0);
    }
    for (const std::vector<Reg>* v : {&lo, &hi})
      for (const Reg& w : *v) p.w.push_back(k_.bitcast(Type::s32, w));
    return p;
  }

 private:
  Kernel& k_;
  const RowLayout& l_;
  std::vector<Reg> off_;   // per plane (Q3_K: and the scales' third word)
  std::optional<K4Scales> k4_;
  std::optional<Iq4Table> iq4_;
  Reg qshift_, hshift_, sc_shift_, top_shift_, qh_shift_, sl_shift_, sh_shift_;
};

}  // namespace

std::vector<Reg> k256_row_dot_q8(Kernel& k, const RowLayout& l, const Reg& wrow, const Reg& lane, const Reg& xq,
                                 uint32_t n_in, uint32_t columns, uint32_t col_bytes) {
  const uint32_t nb = l.blocks, unroll = std::min(q8_unroll(columns), ceil_div(nb, 8));
  const Q8Lanes lanes(k, lane);
  const Decoder dec(k, l, lanes.j);
  const Q8Layout q8(n_in);
  const uint32_t groups = dec.groups(), words = 16 / groups;
  // The groups' input sums: sixteen of 16 (q8.sum16) or eight of 32 (q8.sum32) per block.
  Reg gsum_off = groups == 4 ? k.add(k.shl(lanes.j, 4u), q8.sum16) : k.add(k.shl(lanes.j, 3u), q8.sum32);
  std::vector<Reg> acc = zero_accumulators(k, columns);
  Reg b = k.reg(Type::u32);
  k.for_range(b, lanes.first, nb, 8 * unroll, [&] {
    std::vector<Reg> bu, valid;
    std::vector<std::vector<Reg>> raw;
    for (uint32_t u = 0; u < unroll; ++u) {   // every step's loads first
      const auto [block, counts] = q8_step(k, b, u, nb);
      bu.push_back(block);
      valid.push_back(counts);
      raw.push_back(dec.load(wrow, block));
    }
    for (uint32_t u = 0; u < unroll; ++u) {
      const Part p = dec.decode(raw[u]);
      const Q8Lanes::Inputs in = lanes.inputs(k, xq, q8, bu[u]);
      const Reg gsum_at = p.mn.empty() ? Reg{} : k.add(k.mad_lo(bu[u], 16 * groups, xq), gsum_off);
      for (uint32_t col = 0; col < columns; ++col) {
        const uint32_t co = col * col_bytes;
        const auto [x, dx] = lanes.input(k, in, co);
        std::vector<Reg> gsum;   // only the mins multiply the groups' input sums
        if (!p.mn.empty()) gsum = ld_vec(k, Space::shared, Type::s32, groups, gsum_at, co);
        Reg isum = k.mov(Type::s32, 0), imin = p.mn.empty() ? Reg{} : k.mov(Type::s32, 0);
        for (uint32_t g = 0; g < groups; ++g) {
          Reg gs = k.mov(Type::s32, 0);
          for (uint32_t w = words * g; w < words * (g + 1); ++w) k.dp4a(gs, p.w[w], x[w], gs);
          k.mad_lo(isum, p.sc[g], gs, isum);
          if (!p.mn.empty()) k.mad_lo(imin, p.mn[g], gsum[g], imin);
        }
        Reg t = k.mul(k.mul(p.d, dx), k.cvt(Type::f32, isum));
        if (!p.mn.empty()) t = k.sub(t, k.mul(k.mul(p.dmin, dx), k.cvt(Type::f32, imin)));
        k.add(acc[col], acc[col], k.selp(t, 0.0f, valid[u], Type::f32));
      }
    }
  });
  return acc;
}

Reg k256_row_dot(Kernel& k, const RowLayout& l, const Reg& wrow, const Reg& lane, const Reg& xs, const Reg& xsum8) {
  Reg j = k.and_(lane, 3u), first = k.shr(lane, 2u);
  const Decoder dec(k, l, j);
  const uint32_t groups = dec.groups(), words = 16 / groups;
  Reg x0 = k.mad_lo(j, 256u, xs);     // the part's 64 floats
  Reg s0 = k.mad_lo(j, 32u, xsum8);   // its 8 sums of 8
  Reg acc = k.mov(Type::f32, 0.0f);
  Reg b = k.reg(Type::u32);
  k.for_range(b, first, l.blocks, 8u, [&] {
    const Part p = dec.decode(dec.load(wrow, b));
    Reg xa = k.mad_lo(b, 1024u, x0), sa = k.mad_lo(b, 128u, s0);
    Reg total = k.mov(Type::f32, 0.0f), mins = k.mov(Type::f32, 0.0f);
    for (uint32_t g = 0; g < groups; ++g) {
      Reg dot = k.mov(Type::f32, 0.0f);
      for (uint32_t w = words * g; w < words * (g + 1); ++w) {
        std::vector<Reg> x = ld_vec(k, Space::shared, Type::f32, 4, xa, 16 * w);
        for (uint32_t e = 0; e < 4; ++e) k.fma(dot, k.cvt(Type::f32, k.bfe(p.w[w], 8 * e, 8u)), x[e], dot);
      }
      k.fma(total, k.cvt(Type::f32, p.sc[g]), dot, total);
      if (!p.mn.empty()) {   // the group's input sum, from the staged sums of 8
        std::vector<Reg> s8 = ld_vec(k, Space::shared, Type::f32, words / 2, sa, 2 * words * g);
        Reg sum = s8[0];
        for (size_t i = 1; i < s8.size(); ++i) sum = k.add(sum, s8[i]);
        k.fma(mins, k.cvt(Type::f32, p.mn[g]), sum, mins);
      }
    }
    k.fma(acc, p.d, total, acc);
    if (!p.mn.empty()) k.sub(acc, acc, k.mul(p.dmin, mins));
  });
  return acc;
}

}  // namespace ptxlm::kernels
