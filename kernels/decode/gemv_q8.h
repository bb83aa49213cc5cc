// The 8-bit-input GEMV's parts (kernels/decode/gemv_q8.cpp), for gemv.cpp:
// the staging of the quantized input and the per-type row dot products.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/decode/gemv.h"
#include "kernels/decode/layout.h"
#include "kernels/ptx/builder.h"

namespace ptxlm::kernels {

// The types whose 8-bit input comes in blocks of 256 (Q4_K, Q6_K; the rest
// in blocks of 32).
bool k_family(gguf::GgmlType t);
// An 8-bit input in blocks of 256: the first segment's family decides.
bool q8_blocks256(const GemvShape& s);
// Shared memory one column of the 8-bit input of `s` takes (a multiple of
// 16: column c starts c times this after the first), and all its columns.
uint32_t q8_column_bytes(const GemvShape& s);
uint32_t q8_shared_bytes(const GemvShape& s);
// Every warp of the block quantizes its share of the input (times the norm
// weight; their squares added to ss) into shared memory at xq.
void stage_q8_input(ptx::Kernel& k, const GemvShape& s, const ptx::Reg& x, const ptx::Reg& norm_w, const ptx::Reg& xq,
                    const ptx::Reg& lane, const ptx::Reg& warp, uint32_t warps, const ptx::Reg& ss);
// The lane's partial dot products (unreduced) of the row at wrow with each
// of the shape's staged input columns (xq is the first's).
std::vector<ptx::Reg> q8_row_dot(ptx::Kernel& k, const GemvShape& s, const RowLayout& l, const ptx::Reg& wrow,
                                 const ptx::Reg& lane, const ptx::Reg& xq);

}  // namespace ptxlm::kernels
