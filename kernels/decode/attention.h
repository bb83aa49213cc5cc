// Attention for one decoded token: RoPE (with qwen2's biases and gemma3's
// per-head q/k norms) and the append of K and V to an f16 cache, then
// attention over the cache split along the sequence (flash-decoding) and a
// reduction of the splits.
//
// The token's position lives in device memory (a u32 the scheduler updates),
// so one generated kernel serves every position and a captured graph stays
// valid. RoPE's cos/sin come from a table (n_ctx × head_dim/2 pairs of f32
// cos, sin) the engine computes once on the host exactly as the CPU
// reference does (double angle, then f32), so rotation is bit-equal to it.
#pragma once

#include <cstdint>

#include "kernels/ptx/builder.h"
#include "kernels/ptx/params.h"

namespace ptxlm::kernels {

struct InlineTarget;   // kernels/examples/common.h: emit inline into a persistent kernel

// ---- RoPE + KV append.
// Params: q (n_head·hd f32, rotated in place), k, v (n_head_kv·hd f32),
// [bq, bk, bv (f32) when bias], [q_norm, k_norm (hd f32) when qk_norm],
// rope (cos/sin table), pos (u32*), k_cache, v_cache ([n_ctx][n_head_kv·hd]
// f16; row pos is written).
struct RopeShape {
  uint32_t n_head = 0, n_head_kv = 0, head_dim = 0;
  bool neox = false;      // pairs (i, i + hd/2) instead of (2i, 2i + 1)
  bool bias = false;      // qwen2: q, k, v biases added first
  bool qk_norm = false;   // gemma3: RMSNorm of each head with q_norm / k_norm
  float eps = 1e-6f;
};
ptx::LaunchGeometry rope_append_geometry(const RopeShape& s);
ptx::GeneratedKernel rope_append_kernel(const RopeShape& s, ptx::Target t = {}, const InlineTarget* in = nullptr);

// ---- Attention over the cache, split along the sequence.
// attention_split: params q (n_head·hd f32), k_cache, v_cache (f16), pos
// (u32*), part (workspace: n_head × splits × (hd + 2) f32). Block (h, s)
// handles positions [s·chunk, (s+1)·chunk) ∩ [p0, pos] of head h, where p0
// = pos + 1 − window on a sliding layer (else 0), and writes its running
// maximum, sum of exponentials and unnormalised V sum.
// attention_reduce: params part, pos (u32*), out (n_head·hd f32): combines
// the splits that pos reaches.
struct AttentionShape {
  uint32_t n_head = 0, n_head_kv = 0, head_dim = 0;
  uint32_t n_ctx = 0;
  uint32_t window = 0;    // 0: the whole cache
  float scale = 1.0f;     // applied to q·k
  uint32_t chunk = 256;   // positions per split
  uint32_t splits() const { return (n_ctx + chunk - 1) / chunk; }
};
ptx::LaunchGeometry attention_split_geometry(const AttentionShape& s);
ptx::GeneratedKernel attention_split_kernel(const AttentionShape& s, ptx::Target t = {}, const InlineTarget* in = nullptr);
ptx::LaunchGeometry attention_reduce_geometry(const AttentionShape& s);
ptx::GeneratedKernel attention_reduce_kernel(const AttentionShape& s, ptx::Target t = {}, const InlineTarget* in = nullptr);

}  // namespace ptxlm::kernels
