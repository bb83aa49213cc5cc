// The decode path's small kernels: the token's embedding row, and gemma3's
// normalised residual add.
#pragma once

#include <cstdint>

#include "gguf/quant.h"
#include "kernels/ptx/builder.h"
#include "kernels/ptx/params.h"

namespace ptxlm::kernels {

struct InlineTarget;   // kernels/examples/common.h: emit inline into a persistent kernel
struct RowLayout;      // kernels/decode/layout.h

// Element e (u32) of the device row at `row` (u64; layout l), as gguf's
// reference dequantizer computes it: the embedding's, and gemma4's
// ple_input's row of the per-layer token embeddings. Throws Error for a
// type it cannot read.
ptx::Reg dequant_element(ptx::Kernel& k, const RowLayout& l, const ptx::Reg& row, const ptx::Reg& e);

// x = dequantized row `*token` of the embedding (device layout of
// kernels/decode/layout.h) times `scale`, computed as gguf's reference
// dequantizers compute each element (so bit-equal to the CPU's row).
// Params: w, token (u32*), x (n f32).
// tokens T > 1 (a batch step, issue 22): T token ids, x T rows of n one
// after another (row t at t·n, the GEMVs' column order); grid.y = T; not
// inline. T = 1 is the single-token kernel, unchanged.
struct EmbedShape {
  gguf::GgmlType type = gguf::GgmlType::F32;
  uint32_t n = 0;
  float scale = 1.0f;
  uint32_t tokens = 1;
};
ptx::LaunchGeometry embed_geometry(const EmbedShape& s);
ptx::GeneratedKernel embed_kernel(const EmbedShape& s, ptx::Target t = {}, const InlineTarget* in = nullptr);

// x += rmsnorm(o) ∘ w (gemma3's post-attention and post-FFN norms), one
// block. Params: x (n f32, updated), o (n f32), w (n f32), [s (one f32)
// when scaled]. scaled: x = (x + rmsnorm(o) ∘ w) · *s (gemma4's
// layer_output_scale at a layer's end).
// tokens T > 1: x and o T rows of n (row t at t·n), a block per row, w
// shared; not inline. T = 1 is the single-token kernel, unchanged.
struct AddNormShape {
  uint32_t n = 0;
  float eps = 1e-6f;
  uint32_t tokens = 1;
  bool scaled = false;
};
ptx::LaunchGeometry add_norm_geometry(const AddNormShape& s);
ptx::GeneratedKernel add_norm_kernel(const AddNormShape& s, ptx::Target t = {}, const InlineTarget* in = nullptr);

// *out = 0 (one thread): clears the argmax slot before each token's argmax
// (kernels/examples argmax_kernel accumulates with red.max). Params: out.
// slots > 1: out[0 .. slots) (a batch's argmax slots, one per column), one
// block of 32 threads; not inline.
ptx::GeneratedKernel clear_u64_kernel(ptx::Target t = {}, const InlineTarget* in = nullptr, uint32_t slots = 1);

}  // namespace ptxlm::kernels
