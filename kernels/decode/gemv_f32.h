// The GEMV row dots on the f32 staged input (xs: n_in floats; xsum8: their
// sums of 8, which the quant offsets and mins multiply) of the types that
// keep their own decoder: Q8_0, the 32-element Q4_0, Q4_1, Q5_0 and IQ4_NL,
// Q6_K, Q4_K, and the 16-bit floats F16 and BF16. Each returns the lane's
// partial dot product (unreduced) of one row at wrow in the device layout
// (kernels/decode/layout.h). gemv_kernel (gemv.cpp) picks one per segment;
// the 8-bit input's row dots are in gemv_q8.h, the other 256-element types'
// in gemv_types.h.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/decode/layout.h"
#include "kernels/ptx/builder.h"

namespace ptxlm::kernels {

ptx::Reg q8_0_row_dot(ptx::Kernel& k, const RowLayout& l, const ptx::Reg& wrow, const ptx::Reg& lane,
                      const ptx::Reg& xs);
// Q4_0, Q4_1, Q5_0, IQ4_NL.
ptx::Reg block32_row_dot(ptx::Kernel& k, const RowLayout& l, const ptx::Reg& wrow, const ptx::Reg& lane,
                         const ptx::Reg& xs, const ptx::Reg& xsum8);
ptx::Reg q6k_row_dot(ptx::Kernel& k, const RowLayout& l, const ptx::Reg& wrow, const ptx::Reg& lane,
                     const ptx::Reg& xs, const ptx::Reg& xsum8);
ptx::Reg q4k_row_dot(ptx::Kernel& k, const RowLayout& l, const ptx::Reg& wrow, const ptx::Reg& lane,
                     const ptx::Reg& xs, const ptx::Reg& xsum8);
// F16, BF16 or F32, one partial per input column (`columns` staged col_bytes apart).
std::vector<ptx::Reg> f16_row_dot(ptx::Kernel& k, const RowLayout& l, const ptx::Reg& wrow, const ptx::Reg& lane,
                                  const ptx::Reg& xs, uint32_t columns = 1, uint32_t col_bytes = 0);

}  // namespace ptxlm::kernels
