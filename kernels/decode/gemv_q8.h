// The 8-bit-input GEMV's parts (kernels/decode/gemv_q8.cpp), for gemv.cpp:
// the staging of the quantized input and the per-type row dot products.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/decode/gemv.h"
#include "kernels/decode/layout.h"
#include "kernels/decode/util.h"
#include "kernels/ptx/builder.h"

namespace ptxlm::kernels {

// The 8-bit input in blocks of 256 (GemvShape::q8_input), its layout and
// lane map shared by the row dots of gemv_q8.cpp and gemv_types.cpp.
//
// Shared memory holds the input quantized by the CPU quantized path's rule
// (quantize_block256), in arrays over the nb = n_in / 256 blocks: the n_in
// int8 quants; each block's f32 d; its eight s32 sums of 32-element
// sub-blocks (which the Q4_K mins multiply); its sixteen s32 sums of 16
// elements (the CPU's bsums, which Q6_K's -32 offset multiplies). Arrays, not
// a record per block: the lanes of consecutive blocks then read consecutive
// sums, free of bank conflicts. Within a block the quants are in element
// order by 64-element parts, but each part's four 16-byte chunks are
// rotated: chunk c of part j of block A sits at 64j + 16·((c + rot) mod 4),
// rot = j / 2 + 2·(A mod 2). The row dots' lanes read chunk c of part j of
// blocks A and A + 1 eight at a time; the rotation puts those eight on eight
// distinct groups of 4 banks (one wavefront per 8 lanes, the ideal), where
// element order would put four lanes on each group.
struct Q8Layout {
  uint32_t d = 0, sum32 = 0, sum16 = 0, bytes = 0;   // byte offsets of the arrays; the total
  explicit Q8Layout(uint32_t n_in) {
    const uint32_t nb = n_in / 256;
    d = n_in;
    sum32 = d + (4 * nb + 15) / 16 * 16;
    sum16 = sum32 + 32 * nb;
    bytes = sum16 + 64 * nb;
  }
};

// The lane map the 256-element row dots share: lane l takes part j = l % 4
// (elements 64j .. 64j + 63) of blocks l / 4 + 8i, whose parity is that of
// l / 4; chunk c of the part sits at 64j + 16·((c + rot) mod 4).
struct Q8Lanes {
  ptx::Reg j, first;
  std::vector<ptx::Reg> chunk_off;
  Q8Lanes(ptx::Kernel& k, const ptx::Reg& lane) : j(k.and_(lane, 3u)), first(k.shr(lane, 2u)) {
    ptx::Reg rot = k.and_(k.add(k.shr(j, 1u), k.shl(k.and_(first, 1u), 1u)), 3u);
    for (uint32_t c = 0; c < 4; ++c) chunk_off.push_back(k.add(k.shl(j, 6u), k.shl(k.and_(k.add(rot, c), 3u), 4u)));
  }
  // Where the part's inputs of block bu sit in the first column (the four
  // chunks' addresses and the block's d): computed once per block, every
  // column at an immediate offset from them.
  struct Inputs {
    std::vector<ptx::Reg> chunk;
    ptx::Reg d;          // d's address less d_offset
    uint32_t d_offset;
  };
  Inputs inputs(ptx::Kernel& k, const ptx::Reg& xq, const Q8Layout& q8, const ptx::Reg& bu) const {
    ptx::Reg xa = k.mad_lo(bu, 256u, xq);
    Inputs in{{}, k.mad_lo(bu, 4u, xq), q8.d};
    for (uint32_t c = 0; c < 4; ++c) in.chunk.push_back(k.add(xa, chunk_off[c]));
    return in;
  }
  // The part's 64 int8 inputs of the column at `col` bytes from the first
  // as 16 words, in element order, and the block's d.
  std::pair<std::vector<ptx::Reg>, ptx::Reg> input(ptx::Kernel& k, const Inputs& in, uint32_t col) const {
    std::vector<ptx::Reg> x;
    for (uint32_t c = 0; c < 4; ++c) {
      std::vector<ptx::Reg> v = ld_vec(k, ptx::Space::shared, ptx::Type::s32, 4, in.chunk[c], col);
      x.insert(x.end(), v.begin(), v.end());
    }
    return {x, k.ld_shared(ptx::Type::f32, ptx::at(in.d, int64_t(in.d_offset) + col))};
  }
};

// Step u of a row loop at block b: the block it reads (the row's last when
// b + 8u is past the end, which then adds nothing) and whether it counts.
inline std::pair<ptx::Reg, ptx::Reg> q8_step(ptx::Kernel& k, const ptx::Reg& b, uint32_t u, uint32_t nb) {
  ptx::Reg bi = k.add(b, 8 * u);
  return {k.min(bi, nb - 1), k.setp(ptx::Cmp::lt, bi, nb)};
}

// Steps of the 8-bit-input row dots whose loads issue before the first is used: its
// lanes cover 8 blocks per step; at most this many steps, fewer when a row
// has fewer blocks.
// With more than 4 input columns a step's arithmetic is long enough to
// cover its loads' latency, and the columns' accumulators need the
// registers: one step (registers measured by test_ptxas: two steps spill at
// 8 columns of Q6_K, one step at 16 through a GLU holds 16 gate results too).
constexpr uint32_t kQ8Unroll = 2;
inline uint32_t q8_unroll(uint32_t columns) { return columns > 4 ? 1 : kQ8Unroll; }


// The types whose 8-bit input comes in blocks of 256 (Q4_K, Q6_K and the
// k256_decoded types; the rest in blocks of 32).
bool k_family(gguf::GgmlType t);
// An 8-bit input in blocks of 256: the first segment's family decides.
bool q8_blocks256(const GemvShape& s);
// Shared memory one column of the 8-bit input of `s` takes (a multiple of
// 16: column c starts c times this after the first), and all its columns.
uint32_t q8_column_bytes(const GemvShape& s);
uint32_t q8_shared_bytes(const GemvShape& s);
// One f32 accumulator per input column, zero.
std::vector<ptx::Reg> zero_accumulators(ptx::Kernel& k, uint32_t columns);

// A GEMV's input columns to stage: column c's f32 input (global) at x +
// c·x_stride, its 8-bit input (shared) at xq + c·xq_stride, and, with a
// norm, its sum of squares in ss[c]. Columns at immediate offsets: no
// register per column but the sums.
struct StageInput {
  ptx::Reg x;
  uint32_t x_stride = 0;
  ptx::Reg xq;
  uint32_t xq_stride = 0;
  uint32_t columns = 1;
  std::vector<ptx::Reg> ss;
};
// Every warp of the block quantizes its share of each column's input (times
// the norm weight; their squares added to the column's ss) into shared
// memory. A warp's loads of up to 8 columns issue together: one round trip
// of the prologue for them, not one per column.
void stage_q8_input(ptx::Kernel& k, const GemvShape& s, const StageInput& in, const ptx::Reg& norm_w,
                    const ptx::Reg& lane, const ptx::Reg& warp, uint32_t warps);
// The lane's partial dot products (unreduced) of the row at wrow with each
// of the shape's staged input columns (xq is the first's).
std::vector<ptx::Reg> q8_row_dot(ptx::Kernel& k, const GemvShape& s, const RowLayout& l, const ptx::Reg& wrow,
                                 const ptx::Reg& lane, const ptx::Reg& xq);

// A GLU's gate and up rows of one type, Q4_K or Q6_K, in one pass over the
// blocks: each column's input words read from shared memory once for both
// (half the shared-memory traffic); each row's arithmetic as alone.
// Results [row][column].
bool q8_rows_together(const GemvShape& s);
// Matrices without a GLU, one of them of a paired type (q8_pairs_type),
// with at least two rows per warp: each warp takes its rows two at a time
// through q8_rows_dot where both are of one such matrix, one read of each
// input word for both (the shared-memory wavefronts halved) and both rows'
// weights in flight together (at one column the persistent decoder's
// 8-warp GEMVs are latency-bound: docs/efficiency.md, "Gemma 4 at
// Gemma-4-E2B's size").
bool q8_rows_paired(const GemvShape& s);
// The types q8_rows_paired pairs: Q4_K at any column count, Q6_K at one
// column (a decode token's LM head; two of its rows spill at 8 columns on
// sm_80 to sm_89: ptxas, 12-20 bytes).
bool q8_pairs_type(const GemvShape& s, gguf::GgmlType t);
std::vector<std::vector<ptx::Reg>> q8_rows_dot(ptx::Kernel& k, const GemvShape& s, const RowLayout& l,
                                               const std::vector<ptx::Reg>& wrows, const ptx::Reg& lane,
                                               const ptx::Reg& xq);

// The 8-bit input in passes: when every column's input does not fit in
// shared memory at once (kQ8OnePassBytes; a step's down projection at 16
// columns of 14336), the kernel stages and multiplies it in passes of
// q8_pass_blocks(s) blocks of 256, each lane carrying its accumulators from
// pass to pass. A lane adds the same terms in the same order as in one pass,
// so every column's result is the one-pass kernel's, bit for bit. For one
// Q4_K or Q6_K matrix without a norm or GLU, whose block holds few enough
// rows per warp to keep every row's accumulators; 0: one pass (or none
// fits, and gemv refuses the shape).
constexpr uint32_t kQ8OnePassBytes = 200 * 1024;
uint32_t q8_pass_blocks(const GemvShape& s);
// Shared memory one column of a pass takes (the column stride), all columns'.
uint32_t q8_pass_column_bytes(const GemvShape& s);
// Pass `p` of the row dot: blocks first .. first + the pass's (s.n_in / 256)
// of the row, the staged input holding those (col_bytes apart), added into
// acc (one per column).
void q8_row_dot_pass(ptx::Kernel& k, const GemvShape& pass, const RowLayout& l, const ptx::Reg& wrow,
                     const ptx::Reg& lane, const ptx::Reg& xq, uint32_t col_bytes, uint32_t first,
                     const std::vector<ptx::Reg>& acc);

}  // namespace ptxlm::kernels
