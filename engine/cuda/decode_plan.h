// The shapes of every kernel a model's decode chain launches, from the model
// description alone (no device): what CudaBackend builds its chain from, and
// what `ptxlm ptx` writes out and the tests assemble with ptxas.
#pragma once

#include <cstdint>
#include <vector>

#include "engine/backend.h"
#include "engine/model.h"
#include "kernels/decode/attention.h"
#include "kernels/decode/elementwise.h"
#include "kernels/decode/gemma4.h"
#include "kernels/decode/gemv.h"
#include "kernels/decode/paged_attention.h"
#include "kernels/decode/paged_rope.h"
#include "kernels/decode/persistent.h"

namespace ptxlm::cuda {

constexpr uint32_t kAttentionChunk = 256;   // positions per attention split
constexpr uint32_t kKvPageSize = 16;        // positions per KV page under paged KV (GpuTuning::paged_kv)

// Pages of kKvPageSize positions that hold a context of n_ctx.
inline uint32_t kv_pages(uint32_t n_ctx) { return (n_ctx + kKvPageSize - 1) / kKvPageSize; }

struct LayerPlan {
    kernels::GemvShape qkv;        // fused attn_norm + Q, K, V
    kernels::AttentionShape attention;   // RoPE, KV append, split attention and its reduction
    // Paged KV: the attention op above replaced by two, over one page table
    // row of kv_pages(n_ctx) pages: RoPE + the K/V append into the pages, then
    // flash-decoding over them (T = 1: one sequence, one token per launch).
    bool paged = false;
    kernels::PagedRopeShape rope;
    kernels::PagedAttentionShape paged_attention;
    kernels::GemvShape wo;         // accumulates into the residual unless post_attn_norm
    kernels::GemvShape gate_up;    // fused ffn_norm + gate, up, writing act(gate)·up
    kernels::GemvShape down;       // accumulates into the residual unless post_ffn_norm
    bool post_attn_norm = false, post_ffn_norm = false;   // gemma3: normalised adds
    // gemma4: the layer whose KV pages attention reads (its own index, or an
    // earlier layer's: then paged_rope writes q only); after the FFN's
    // residual, the per-layer embedding's gate GEMV (the residual, P rows,
    // writing gelu(·) ⊙ the layer's slice: GemvShape::gated), its projection
    // (P -> n_embd) and a normalised add; out_scale: the layer's last
    // normalised add multiplies by layer_output_scale.
    uint32_t kv_layer = 0;
    bool ple = false;
    kernels::GemvShape ple_gate, ple_proj;
    bool out_scale = false;
    // The normalised adds after the FFN (post_ffn_norm) and the per-layer
    // input (ple), the layer's last one `scaled` under out_scale.
    kernels::AddNormShape ffn_add, ple_add;
};

struct DecodePlan {
    kernels::EmbedShape embed;
    std::vector<LayerPlan> layers;
    kernels::AddNormShape add_norm;   // the post-attention norms' (LayerPlan: the later ones')
    kernels::GemvShape head;          // fused output_norm + LM head
    // gemma4's per-layer inputs, after the embedding (ple): the projection
    // of the scaled input (P·L rows), and ple_input combining it with the
    // token's row of per_layer_token_embd times √P (kernels/decode/gemma4.h).
    bool ple = false;
    kernels::GemvShape ple_model;
    kernels::PleInputShape ple_input;
    kernels::SoftcapShape softcap;    // cap 0: none; else on the logits after the head
};

// quantized_inputs: every GEMV whose matrices have 8-bit-input kernels
// (kernels::gemv_q8_input_fits) quantizes its input as the CPU quantized path
// does and multiplies with dp4a (the default path, `--gpu-path quantized`);
// the others, and all of them without it (`--gpu-path reference`), multiply
// an f32 input, as the CPU reference does. Throws ModelError naming what the
// GPU path cannot run (a weight type; gemma4's shared KV or v norm on the
// contiguous cache).
// sms: the SMs of the device the GEMV grids are sized for (one wave).
// paged_kv: each layer's attention as paged_rope -> paged_attention over
// pages of kKvPageSize (LayerPlan::paged); throws ModelError naming a head
// size or GQA group the paged kernels cannot run.
// max_gemv_warps: every GEMV's kernels::GemvShape::max_warps (8 to
// kernels::kMaxGemvWarps; gemv_warps gives the schedule's).
DecodePlan decode_plan(const Model& m, uint32_t n_ctx, bool quantized_inputs, uint32_t sms, bool paged_kv = false,
                       uint32_t max_gemv_warps = kernels::kMaxGemvWarps);

// The plan of a batch step of T token rows (CudaBackend::step), from the
// single-token plan `one` (paged KV): the embedding, normalised adds,
// paged_rope and paged_attention with T rows (the attention's splits as in
// `one`, so that a row's arithmetic does not depend on T), every GEMV with
// the most input columns up to T its kernels take (8-bit inputs, or
// F16/BF16 matrices) whose inputs fit 200 KiB of shared memory, launched
// T / columns times. Throws std::invalid_argument for T not a power of two
// in 1..kernels::kMaxGemvColumns or a plan without paged KV.
DecodePlan step_plan(const DecodePlan& one, uint32_t tokens);

// The most warps a GEMV block takes in `m`'s plan under schedule s (the
// decode_plan argument): kernels::kMaxGemvWarps, but 8 for gemma4's
// persistent decoder, whose block, the widest op's, would otherwise leave its
// inlined paged attention too few registers (decode_plan.cpp says which).
// CudaBackend, `ptxlm ptx` and the counted projection plan with it.
uint32_t gemv_warps(const Model& m, Schedule s);

// Whether `path` runs 8-bit GEMV inputs (every schedule: the default, and
// --gpu-path quantized) or f32 ones (--gpu-path reference).
inline bool quantized_gemvs(GpuArithmetic path) { return path != GpuArithmetic::Reference; }

// The paged pair as chain ops: standalone kernels that ignore Target::pdl
// (launched plainly), or inline in the persistent decoder.
kernels::OpGenerator paged_rope_op(const kernels::PagedRopeShape& s);
// Where the per-token device state holds the token and the position (what
// the persistent decoder's advance writes): {token, pos}, or under paged KV
// {pos, table row, token, 0}, whose first 8 bytes are the paged kernels'
// token descriptor.
inline kernels::PersistentState state_layout(bool paged_kv) {
    return paged_kv ? kernels::PersistentState{8, 0} : kernels::PersistentState{0, 4};
}
kernels::OpGenerator paged_attention_op(const kernels::PagedAttentionShape& s);

// Every distinct kernel of the plan, in chain order, as generators bound to
// their shapes (standalone, or inline in the persistent decoder).
std::vector<kernels::OpGenerator> decode_op_kinds(const DecodePlan& plan);

// Every distinct kernel of the plan, in chain order, generated for `t`.
std::vector<ptx::GeneratedKernel> decode_kernels(const DecodePlan& plan, const ptx::Target& t);

}  // namespace ptxlm::cuda
