// Batch-1 matrix-vector products over quantized weights, with the RMSNorm of
// the input fused in and every matrix that shares the input computed by one
// launch (Q, K and V; gate and up). Each matrix keeps its own quant type:
// the generated kernel walks a per-segment table (rows, type) fixed at
// generation, with one weight and one output pointer per segment.
//
// Layout of the work: a block stages the input vector in shared memory once
// (multiplied by the norm weight when the norm is fused; the norm's scalar
// 1/rms multiplies each finished row), then each warp computes whole rows,
// its lanes striding over the row's quant blocks with 16-byte loads, and a
// butterfly reduction ends the row.
//
// Types: Q4_K, Q6_K, Q8_0, Q4_0, Q4_1, Q5_0, IQ4_NL, and Q5_K, Q3_K, Q2_K,
// IQ4_XS (kernels/decode/gemv_types.h), and the float matrices F16, BF16
// and F32 (on the f32 input only: each weight converted exactly to f32, one
// f32 FMA; a launch that mixes them with quantized types stays on the f32
// input).
//
// A GLU's gate and up rows are computed by the same warp, which writes
// act(gate)·up (the Glu modes below).
//
// Numerics: f32 products and sums, block-local sums factored as
// d·sc·Σq·x − dmin·m·Σx (Q4_K; d·(Σq·x − 8Σx) for Q4_0 and so on, with Σx
// over 8-element groups staged once per block); not bit-equal to the CPU
// reference, which dequantizes first. gemv_tolerance gives the bound a
// comparison should use.
#pragma once

#include <cstdint>
#include <vector>

#include "gguf/quant.h"
#include "kernels/ptx/builder.h"
#include "kernels/ptx/params.h"

namespace ptxlm::kernels {

struct InlineTarget;   // kernels/examples/common.h: emit inline into a persistent kernel

struct GemvSegment {
  gguf::GgmlType type = gguf::GgmlType::Q4_K;
  uint32_t rows = 0;
};

// A gated FFN's activation fused into its gate and up product: with two
// segments (gate, then up, the same row count) the kernel writes one output,
// y[r] = act(gate_r·x) · (up_r·x), from the warp that computed both rows, so
// the activation needs no launch and the down projection stages one vector.
enum class Glu : uint8_t { None, SwiGlu, GeGlu };

// act(g) of a GLU (SwiGlu: silu, GeGlu: gelu_tanh), as the GEMV's epilogue
// computes it (gemma4's per-layer gate takes the same).
ptx::Reg glu_activation(ptx::Kernel& k, const ptx::Reg& g, Glu kind);

// An H100 SXM's SMs: the grid GemvShape sizes for unless told the device's.
constexpr uint32_t kH100SxmSms = 132;

struct GemvShape {
  uint32_t n_in = 0;                   // columns: a multiple of every segment's block (32, 256 for Q4_K)
  std::vector<GemvSegment> segments;   // one per matrix sharing the input
  bool norm = false;                   // multiply rmsnorm(x) ∘ norm_w instead of x
  float eps = 1e-6f;
  bool accumulate = false;             // y += W·x (a residual add fused in; not with a GLU)
  Glu glu = Glu::None;                 // pairs segments 0 and 1 into act(gate)·up
  // Gemma 4's per-layer gate as the epilogue (one segment, no GLU, no
  // accumulate): y[r] = act(W·x)[r] · m[r], m a further parameter (after
  // y0) whose column c starts gate_stride floats after column c - 1 (a
  // token's row of the per-layer inputs). The product and act are the
  // standalone gate's bit for bit (the f32 row result, then act, then ·m).
  Glu gated = Glu::None;
  uint32_t gate_stride = 0;
  // Quantize the (normalised) input to 8-bit blocks of 256 by the CPU
  // quantized path's rule (engine/cpu/qdot.h, Block256: d = amax / 127,
  // q = round-to-nearest-even(127 / amax · x), block sums) and multiply the
  // packed weights with dp4a: no per-weight conversion. Q4_K, Q6_K, Q5_K,
  // Q3_K, Q2_K and IQ4_XS take it in blocks of 256 (quantize_block256), Q8_0,
  // Q4_0, Q4_1, Q5_0 and IQ4_NL in blocks of 32 (quantize_block32);
  // gemv_q8_input_fits says which shapes.
  bool q8_input = false;
  // SMs of the device the grid is sized for: one wave, a block per SM
  // (engine/cuda sizes it from the device; kernel tests and `ptxlm ptx` from
  // an H100 SXM's 132). Rows are whole per warp, so a row's result is the
  // same on any grid.
  uint32_t sms = kH100SxmSms;
  // Input columns N: the same weights times N input vectors in one launch,
  // each weight block loaded once for all of them (a batch of decode tokens,
  // a prompt chunk). x holds the columns one after another (column c at
  // c·n_in), every output likewise (column c at c·rows). Only with q8_input,
  // or on the f32 input when every segment is F16/BF16/F32 (each weight converted
  // once for all columns; columns × n_in × 4 bytes of shared memory, at most
  // 200 KiB), in a kernel of its own, 1 to kMaxGemvColumns. Column c's results are bit
  // for bit those of N = 1 on column c alone: each column is quantized,
  // normalised, accumulated and reduced in the same order whatever N.
  uint32_t columns = 1;
  // The most warps a block takes (8 to kMaxGemvWarps; gemv_plan): fewer
  // make a smaller block, which leaves each thread more registers where
  // the GEMV is emitted inline beside a heavier op (the persistent decoder's
  // block is its widest op's). A row's result does not depend on it except
  // through the fused norm's sum of squares, which the block's threads
  // reduce; names carry it (_w8).
  uint32_t max_warps = 16;
};

constexpr uint32_t kMaxGemvColumns = 16;
constexpr uint32_t kMaxGemvWarps = 16;

// Types gemv_kernel multiplies with a q8_input (dp4a on packed weights).
bool gemv_supports_q8_input(gguf::GgmlType t);
// Whether `s` can take q8_input: every segment's type supports it, all of
// one family (the 256-element types, with n_in a multiple of 256; or the
// 32-element Q8_0, Q4_0, Q4_1, Q5_0, IQ4_NL).
bool gemv_q8_input_fits(const GemvShape& s);

// Types gemv_kernel multiplies (the others are refused with an Error).
bool gemv_supports(gguf::GgmlType t);

// Warps per block and rows per block, chosen from the shape alone (a GLU's
// row is a pair: the gate row and the up row). Warp w of a block takes its
// rows w, w + warps, ... Rows per block is the least that keeps the grid to
// one wave of the shape's `sms` (a block per SM); warps grow with it (up to
// the shape's max_warps, 16 by default) so that a block keeps more loads in
// flight.
struct GemvPlan {
  uint32_t warps = 8;
  uint32_t rows_per_block = 8;
};
GemvPlan gemv_plan(const GemvShape& s);

ptx::LaunchGeometry gemv_geometry(const GemvShape& s);

// Params: x (columns × n_in f32), norm_w (n_in f32; only with norm), then
// per segment i: w<i> (rows in the device layout of kernels/decode/layout.h),
// y<i> (columns × rows f32); with a GLU only y0 (the pairs' outputs) follows
// w0 and w1; when gated, m (columns rows gate_stride apart) after y0. x must
// not alias any y.
ptx::GeneratedKernel gemv_kernel(const GemvShape& s, ptx::Target t = {}, const InlineTarget* in = nullptr);

// The bytes the weight prefetch of `s` (Target::prefetch) asks L2 for, all
// blocks together: each block's threads take a 128-byte line each of its
// first rows (of each segment it starts in; a GLU's gate and up rows half
// the threads each), as many lines as those rows cover. What emu counts as
// the launch's prefetch_bytes.
uint64_t gemv_prefetch_bytes(const GemvShape& s);

// |y - ref| bound for one row: ref computed in double from the dequantized
// row and the f32 normalised input, with `abs_dot` = Σ|w·x| over the row.
double gemv_tolerance(double abs_dot, uint32_t n_in);

}  // namespace ptxlm::kernels
