// Gemma 4's small kernels on the decode path (issue 25): its per-layer
// embeddings' input step and the final logit soft-cap. Each
// computes what engine/cpu/cpu_backend.cpp computes (llama.cpp's gemma4
// graph), its products in the CPU's order; the slice norms' sums of squares
// are f32 here (a block reduction), double there, and tanh comes from ex2.
//
// Per token, before the first layer (CpuBackend::per_layer_inputs):
//   ple_in = (rmsnorm_slices(ple_proj · x₀ / √n_embd, w) + tok_row · √P) / √2
// where ple_proj · x₀ is a GEMV (P·L rows) and tok_row the token's row of
// per_layer_token_embd, which ple_input_kernel reads itself (each element
// as the embedding kernel dequantizes it: dequant_element).
// After layer l's FFN residual:
//   x += rmsnorm(inp_proj · (gelu(inp_gate · x) ⊙ ple_in[l·P, l·P + P)))
// where the two products are GEMVs (the first writes gelu(·) ⊙ the slice:
// GemvShape::gated) and the normalised add kernels/decode/elementwise's
// add_norm.
#pragma once

#include <cstdint>

#include "gguf/quant.h"
#include "kernels/ptx/builder.h"
#include "kernels/ptx/params.h"

namespace ptxlm::kernels {

struct InlineTarget;   // kernels/examples/common.h: emit inline into a persistent kernel

// out[t][l·P + i] = ((proj[t][l·P + i] · proj_scale) · r_l · w[i] + tok[t][l·P + i]) · sum_scale,
// r_l = 1 / sqrt(mean over i of (proj[t][l·P + i] · proj_scale)² + eps), and
// tok[t] row token[t] of the table (P·L wide, tok_type, the device layout of
// kernels/decode/layout.h) times tok_scale, as embed_kernel writes it: one
// block of 256 threads per (slice l, token row t). Params: proj (T rows of
// P·L f32), tok (the table), token (T u32), w (P f32), out (T rows of P·L
// f32; may be proj itself). tokens T > 1: grid.y = T; not inline.
struct PleInputShape {
  uint32_t per_layer = 0;   // P: n_embd_per_layer (a multiple of 4)
  uint32_t layers = 0;      // L
  float eps = 1e-6f;
  float proj_scale = 1.0f;  // 1/√n_embd
  float sum_scale = 1.0f;   // 1/√2
  uint32_t tokens = 1;
  gguf::GgmlType tok_type = gguf::GgmlType::F32;   // per_layer_token_embd's
  float tok_scale = 1.0f;   // √P
};
ptx::LaunchGeometry ple_input_geometry(const PleInputShape& s);
ptx::GeneratedKernel ple_input_kernel(const PleInputShape& s, ptx::Target t = {}, const InlineTarget* in = nullptr);

// x = cap · tanh(x / cap) over rows × n f32, tanh(y) as the GeGLU's 1 − 2 /
// (1 + e^(2y)) (exact at the extremes, ~1e-7 absolute). Params: x (updated).
// Grid: ⌈n / 256⌉ blocks of 256, y = rows; rows > 1: not inline.
struct SoftcapShape {
  uint32_t n = 0;
  float cap = 0;
  uint32_t rows = 1;
};
ptx::LaunchGeometry softcap_geometry(const SoftcapShape& s);
ptx::GeneratedKernel softcap_kernel(const SoftcapShape& s, ptx::Target t = {}, const InlineTarget* in = nullptr);

}  // namespace ptxlm::kernels
