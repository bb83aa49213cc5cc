// Attention for one decoded token, in one launch: RoPE (with qwen2's biases
// and gemma3's per-head q/k norms), the append of this token's K and V to an
// f16 cache, attention over the cache split along the sequence
// (flash-decoding), and the reduction of the splits by the last split block
// of each head to finish.
//
// The token's position lives in device memory (a u32 the scheduler updates),
// so one generated kernel serves every position and a captured graph stays
// valid. RoPE's cos/sin come from a table (n_ctx × n_rot/2 pairs of f32
// cos, sin) the engine computes once on the host exactly as the CPU
// reference does (double angle, then f32), so rotation is bit-equal to it.
// With n_rot < head_dim (Phi-4-mini's partial rotary) only the first n_rot
// dims of each head rotate; the rest pass through (llama.cpp's ggml_rope_ext).
//
// Block (h, s) handles positions [s·chunk, (s+1)·chunk) ∩ [p0, pos] of query
// head h (p0 = pos + 1 − window on a sliding layer, else 0):
//   - it rotates q head h (bias, norm, RoPE), times the attention scale (and
//     Mistral 3's temperature of the position);
//   - the split that holds pos rotates this token's K row of KV head
//     h / group and reads its V row, and uses both from shared memory: the
//     first head of the group also writes them to row pos of the caches, so
//     no block reads a cache row another block of the launch writes;
//   - scores, softmax numerator and the unnormalised V sum over its positions;
//   - with one split reaching pos (pos < chunk) it writes the output row
//     itself; else it writes (max, sum, V sum) to `part`, and the last block
//     of head h to finish (a counter per head, acq_rel) combines every split
//     and sets the counter back to 0.
#pragma once

#include <cstdint>

#include "kernels/ptx/builder.h"
#include "kernels/ptx/params.h"

namespace ptxlm::kernels {

struct InlineTarget;   // kernels/examples/common.h: emit inline into a persistent kernel

// Params: q (n_head·hd f32), k, v (n_head_kv·hd f32), [bq, bk, bv (f32)
// when bias], [q_norm, k_norm (hd f32) when qk_norm], rope (n_ctx × n_rot/2 × {cos, sin} f32),
// pos (u32*), k_cache, v_cache ([n_ctx][n_head_kv·hd] f16; row pos is
// written), part (workspace: n_head × splits × (hd + 2) f32), sync (n_head
// u32, zero before the first launch; every launch leaves it zero), out
// (n_head·hd f32). q, k and v are read only.
struct AttentionShape {
  uint32_t n_head = 0, n_head_kv = 0, head_dim = 0;
  uint32_t n_ctx = 0;
  uint32_t window = 0;    // 0: the whole cache
  float scale = 1.0f;     // applied to q·k
  uint32_t chunk = 256;   // positions per split
  bool neox = false;      // RoPE pairs (i, i + n_rot/2) instead of (2i, 2i + 1)
  bool bias = false;      // qwen2: q, k, v biases added first
  bool qk_norm = false;   // gemma3: RMSNorm of each head with q_norm / k_norm
  float eps = 1e-6f;
  // Mistral 3's attention temperature: q times 1 + temp_scale·ln(⌊pos /
  // temp_floor⌋ + 1) (lg2.approx: 2^-22 off the CPU's double log); 0 = off.
  float temp_scale = 0;
  uint32_t temp_floor = 0;
  uint32_t n_rot = 0;     // dims rotated at the start of each head (even); 0: head_dim
  uint32_t rot() const { return n_rot ? n_rot : head_dim; }
  uint32_t splits() const { return (n_ctx + chunk - 1) / chunk; }
};
ptx::LaunchGeometry attention_geometry(const AttentionShape& s);
ptx::GeneratedKernel attention_kernel(const AttentionShape& s, ptx::Target t = {}, const InlineTarget* in = nullptr);

}  // namespace ptxlm::kernels
