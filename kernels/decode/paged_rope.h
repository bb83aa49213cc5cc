// RoPE and the K/V append into the KV pool's pages (issue 22): the op before
// kernels/decode/paged_attention, for T query rows in one launch with the
// same token descriptor (T × {pos, table row} u32 in device memory; pos ~0u:
// an unused slot, its blocks exit at once) and page tables (rows ×
// max_pages u32 page ids).
//
// Per token row t, from the QKV GEMV's outputs: q (n_head·hd f32), k and v
// (n_head_kv·hd f32); qwen2's biases added first, gemma3's per-head RMSNorm
// with q_norm / k_norm next, then RoPE on the first n_rot dims of each head
// (pairs (i, i + n_rot/2) under NEOX, (2i, 2i + 1) otherwise; the rest of
// the head copied, llama.cpp's partial rotary) from the cos/sin table
// (n_ctx × n_rot/2 pairs of f32 cos, sin). Writes q_rot (n_head·hd f32:
// rotated, times the attention scale and Mistral 3's temperature of the
// row's position: what paged_attention reads), and K (rotated) and V as f16
// into k_pool / v_pool at page tables[row][pos / page_size], slot pos %
// page_size ([page][kv_head][page_size][hd]); nothing else of a page.
//
// The arithmetic is kernels/decode/attention's in the same order (bias add,
// the sum of squares per pair as mul + fma, butterflies over 32 pairs then
// the warps' sums in order, sqrt.rn and div.rn, the f32 rotation from the
// table, the scale, cvt.rn to f16), so where both meet (n_rot = head_dim)
// q, K and V are bit-equal to it (test_paged_attention_emu checks it end to
// end through paged_attention).
//
// Grid: (⌈units() / 4⌉, T) blocks of 4 warps; warp u of a row
// handles query head u (u < n_head) or KV head u − n_head (K and V), lane l
// the pairs l, l + 32, ... of the head. No shared memory, no barriers:
// every load of a head (its q or k and v, their biases, the norm's weights)
// is issued before any is used, in flight with the token descriptor's;
// then the page id and cos/sin (one more round trip), then the stores
// (docs/efficiency.md, "Paged attention").
//
// Inline (the persistent decoder, InlineTarget): the same code on a virtual
// block (ctaid.x, ctaid.y = the token row). Its two returns end the virtual
// block: `unused` is uniform over the block (one token row per block), the
// one past the last head unit is uniform over a warp; neither precedes a
// barrier (the kernel has none), so either may skip to the op's end.
#pragma once

#include <cstdint>

#include "kernels/ptx/builder.h"
#include "kernels/ptx/params.h"

namespace ptxlm::kernels {

struct InlineTarget;   // kernels/examples/common.h: emit inline into a persistent kernel

// Params: tokens (T × {pos, table row} u32), tables (rows × max_pages u32),
// q (T × n_head·hd f32), k, v (T × n_head_kv·hd f32), [bq, bk, bv (f32) when
// bias], [q_norm, k_norm (hd f32) when qk_norm], rope (n_ctx × n_rot/2 ×
// {cos, sin} f32), k_pool, v_pool (n_pages × n_head_kv × page_size × hd
// f16; one slot per used row is written), q_rot (T × n_head·hd f32; an
// unused slot's row is left as it was). q, k, v are read only.
struct PagedRopeShape {
  uint32_t n_head = 0, n_head_kv = 0, head_dim = 0;
  uint32_t n_rot = 0;        // dims rotated at the start of each head (even); 0: head_dim
  uint32_t page_size = 16;   // positions per page: a power of two
  uint32_t max_pages = 0;    // entries per page table row
  uint32_t tokens = 1;       // T: rows per launch (grid y)
  float scale = 1.0f;        // on q (the attention's 1/sqrt(hd) or the model's)
  bool neox = false;         // pairs (i, i + n_rot/2) instead of (2i, 2i + 1)
  bool bias = false;         // qwen2: q, k, v biases added first
  bool qk_norm = false;      // gemma3 / qwen3: RMSNorm of each head with q_norm / k_norm
  float eps = 1e-6f;
  // Mistral 3's attention temperature on q: 1 + temp_scale·ln(⌊pos /
  // temp_floor⌋ + 1) as attention.h computes it (lg2.approx); 0 = off.
  float temp_scale = 0;
  uint32_t temp_floor = 0;
  bool v_norm = false;       // gemma4: V RMS-normed per head without a weight (after its bias)
  // gemma4's shared-KV layers: q only (the grid covers the query heads; k,
  // v and the pools are not touched: attention reads an earlier layer's).
  bool q_only = false;
  uint32_t rot() const { return n_rot ? n_rot : head_dim; }
  uint32_t units() const { return n_head + (q_only ? 0 : n_head_kv); }   // warps' head units
};

// Warps (heads) per block.
constexpr uint32_t kPagedRopeWarps = 4;

ptx::LaunchGeometry paged_rope_geometry(const PagedRopeShape& s);
// Standalone, it ignores t.pdl (no griddepcontrol.wait: the chain launches
// it plainly); `in`: inline into a persistent kernel.
ptx::GeneratedKernel paged_rope_kernel(const PagedRopeShape& s, ptx::Target t = {}, const InlineTarget* in = nullptr);

}  // namespace ptxlm::kernels
