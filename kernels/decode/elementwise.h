// The decode path's small kernels: the token's embedding row, and gemma3's
// normalised residual add.
#pragma once

#include <cstdint>

#include "gguf/quant.h"
#include "kernels/ptx/builder.h"
#include "kernels/ptx/params.h"

namespace ptxlm::kernels {

struct InlineTarget;   // kernels/examples/common.h: emit inline into a persistent kernel

// x = dequantized row `*token` of the embedding (device layout of
// kernels/decode/layout.h) times `scale`, computed as gguf's reference
// dequantizers compute each element (so bit-equal to the CPU's row).
// Params: w, token (u32*), x (n f32).
struct EmbedShape {
  gguf::GgmlType type = gguf::GgmlType::F32;
  uint32_t n = 0;
  float scale = 1.0f;
};
ptx::LaunchGeometry embed_geometry(const EmbedShape& s);
ptx::GeneratedKernel embed_kernel(const EmbedShape& s, ptx::Target t = {}, const InlineTarget* in = nullptr);

// x += rmsnorm(o) ∘ w (gemma3's post-attention and post-FFN norms), one
// block. Params: x (n f32, updated), o (n f32), w (n f32).
struct AddNormShape {
  uint32_t n = 0;
  float eps = 1e-6f;
};
ptx::LaunchGeometry add_norm_geometry(const AddNormShape& s);
ptx::GeneratedKernel add_norm_kernel(const AddNormShape& s, ptx::Target t = {}, const InlineTarget* in = nullptr);

// *out = 0 (one thread): clears the argmax slot before each token's argmax
// (kernels/examples argmax_kernel accumulates with red.max). Params: out.
ptx::GeneratedKernel clear_u64_kernel(ptx::Target t = {}, const InlineTarget* in = nullptr);

}  // namespace ptxlm::kernels
