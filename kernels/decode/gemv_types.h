// The GEMV row dots of the 256-element types that share one decoder (Q5_K,
// Q3_K, Q2_K, IQ4_XS), on the f32 and the 8-bit input, and the pieces other
// kernels share with them: the IQ4 code table (IQ4_NL's row dots in gemv.cpp
// and gemv_q8.cpp, the embedding row) and the Q4_K/Q5_K scale unpacking.
//
// Each lane takes part j = lane % 4 (elements 64j .. 64j + 63) of blocks
// lane / 4 + 8i, the 8-bit input's lane map (Q8Lanes, gemv_q8.h), and
// decodes its part into 16 words of four int8 values in element order (Q3_K's
// codes with their -4 applied, IQ4_XS's through the table), one integer
// multiplier per group of 16 or 32 elements (and a min multiplier where the
// type has mins), as the CPU's dot_q5_k/q3_k/q2_k/iq4_xs
// (engine/cpu/qdot.cpp) formulate them. On the 8-bit input those words go
// to dp4a unchanged: no per-weight conversion.
#pragma once

#include <array>
#include <cstdint>
#include <utility>
#include <vector>

#include "gguf/quant.h"
#include "kernels/decode/layout.h"
#include "kernels/ptx/builder.h"

namespace ptxlm::kernels {

// Q5_K, Q3_K, Q2_K and IQ4_XS: the types the row dots below multiply.
bool k256_decoded(gguf::GgmlType t);

// kvalues_iq4nl (gguf::kIQ4Values) as four words, entries 4i .. 4i + 3 in
// word i, held in registers for prmt. A code's bit 3 picks the half
// (words 0-1 or 2-3); prmt's selector takes 3 bits per byte (its bit 3 would
// replicate the sign), so each 8 codes cost two prmt per half and a third
// to pick between the halves.
struct Iq4Table {
  std::array<ptx::Reg, 4> w;
  explicit Iq4Table(ptx::Kernel& k);
  // The values of the 8 codes of word q in Q4_0's layout (byte i: low nibble
  // element i, high nibble element i + 16), as two words of four int8:
  // {elements i .. i + 3, elements i + 16 .. i + 19}.
  std::pair<ptx::Reg, ptx::Reg> values(ptx::Kernel& k, const ptx::Reg& q) const;
  // The value of one code (0..15), as s32.
  ptx::Reg value(ptx::Kernel& k, const ptx::Reg& code) const;
};

// Q4_K and Q5_K's 6-bit scales and mins of sub-blocks 2j and 2j + 1
// (unpack_k_scales) from the header's words a = scales[0..3],
// bm = scales[4..7], c = scales[8..11]: {sc 2j, sc 2j + 1, m 2j, m 2j + 1}, s32.
struct K4Scales {
  ptx::Reg big, shift, shift_hi;   // per lane: j >= 2, the bytes' bit offsets
  K4Scales(ptx::Kernel& k, const ptx::Reg& j);
  std::array<ptx::Reg, 4> unpack(ptx::Kernel& k, const ptx::Reg& a, const ptx::Reg& bm, const ptx::Reg& c) const;
};

// The lane's partial dot products (unreduced) of one row of a k256_decoded
// type with each of `columns` 8-bit inputs (stage_q8_input256, col_bytes
// apart): per block d·dx·Σ_g sc_g·Σ q·x − dmin·dx·Σ_g m_g·Σx.
std::vector<ptx::Reg> k256_row_dot_q8(ptx::Kernel& k, const RowLayout& l, const ptx::Reg& wrow, const ptx::Reg& lane,
                                      const ptx::Reg& xq, uint32_t n_in, uint32_t columns, uint32_t col_bytes);
// The same on the f32 staged input (xs: n_in floats; xsum8: their sums of 8).
ptx::Reg k256_row_dot(ptx::Kernel& k, const RowLayout& l, const ptx::Reg& wrow, const ptx::Reg& lane,
                      const ptx::Reg& xs, const ptx::Reg& xsum8);

}  // namespace ptxlm::kernels
