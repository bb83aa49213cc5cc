// Flash-decoding attention over a paged KV cache (issue 22): T query rows,
// each with its sequence's page table and its position, in one launch. The
// rows are already rotated and scaled (RoPE and the K/V append are a
// separate op); a prompt chunk is T rows of one sequence at consecutive
// positions, each causal by its own position, so the same kernel serves
// decode tokens of many sequences and prompt chunks.
//
// KV layout, per layer: K and V pools of f16, [page][kv_head][page_size][hd].
// Page-major keeps a page one allocation unit (the pool hands out pages, a
// copy-on-write copies one contiguous page of every head); inside it each KV
// head's positions are contiguous, so the block that serves one KV head reads
// one contiguous run of page_size·hd·2 bytes per page (4 KiB at 16 × 128)
// with 16-byte loads, every sector used, where [page][position][kv_head][hd]
// would interleave the heads in runs of hd·2 bytes. A page table is a row of
// `max_pages` u32 page ids per sequence (KvPool::kNoPage, ~0u, for the pages
// a sliding window dropped: never read).
//
// Block (split s, KV head g, token t) serves the whole GQA group of g (K/V
// read once for the group), or one sub-group of it (heads_per_block). The
// token's visible range [p0, pos] (p0 = pos + 1 − window on a sliding
// layer) is cut on the device, from the token's own
// length, into at most `splits` chunks of whole tiles; blocks past the last
// chunk exit at once, so the grid does not grow with the context. Each warp
// takes every 8th tile of its block's chunk: U 16-byte K loads and U V loads
// per lane in flight together (a tile is U × (32 / lanes) positions, a row
// on hd/8 lanes rounded up to a power of two: at head 96, 16 lanes of which
// the last 4 load nothing and add exact zeros; at head 512 on 32 lanes, two
// 16-byte chunks each, 256 dims apart), the group's scores by a
// butterfly over the lanes of a row, an online softmax per head, the V sum
// per lane over its rows; warps, then splits, combine by their (max, sum).
// The splits are combined by the last block of (t, g) to finish (a counter
// per (t, g), acq_rel, left at zero), its reads of the parts 16 splits at a
// time: a second kernel would add a launch (1.3 µs in a graph) and its own
// fill round trip to the same reads, where the fused reduction adds the
// counter's round trip (docs/efficiency.md, "Paged attention").
//
// Everything a token needs is in device memory (tokens, tables, q), so a
// captured graph stays valid from step to step.
//
// Inline (the persistent decoder, InlineTarget): the same code on a virtual
// block (ctaid.x the split, ctaid.y the KV head, times sub_groups() plus the
// sub-group) for one token row (T = 1:
// the token's ctaid.z is 0 inline, and the decoder takes 2-D grids only).
// Its shared arrays are regions of the decoder's window, bar.sync counts
// the op's 256 threads, and its returns (an unused slot, a split past the
// last, a lone split, a block that is not the last to finish) are uniform
// over the block and end the virtual block. The split counters work as
// standalone: a virtual block never waits for another of its op. A tile's
// V loads follow its scores inline (registers; the same arithmetic).
#pragma once

#include <cstdint>

#include "kernels/ptx/builder.h"
#include "kernels/ptx/params.h"

namespace ptxlm::kernels {

struct InlineTarget;   // kernels/examples/common.h: emit inline into a persistent kernel

// Params: tokens (T × {pos, table row} u32; pos ~0u: an unused slot, all its
// blocks exit), tables (rows × max_pages u32 page ids), q (T × n_head·hd
// f32, rotated and times the attention scale), k_pool, v_pool (n_pages ×
// n_head_kv × page_size × hd f16), part (workspace: T × n_head × splits ×
// (hd + 4) f32: max, sum, 2 unused, V sum), sync
// (paged_attention_sync_slots u32, zero before the first launch; every
// launch leaves it zero), out (T × n_head·hd f32).
struct PagedAttentionShape {
  uint32_t n_head = 0, n_head_kv = 0, head_dim = 0;
  uint32_t page_size = 16;   // positions per page: a power of two, at least one tile
  uint32_t max_pages = 0;    // entries per page table row (the context / page_size)
  uint32_t tokens = 1;       // T: query rows per launch (grid z)
  uint32_t splits = 32;      // most chunks one token's range is cut into (grid x)
  uint32_t window = 0;       // 0: every position up to pos
  uint32_t group() const { return n_head / n_head_kv; }
  // Query heads a block serves: the whole group, or where the group's V
  // sums would not fit (group × head_dim over 1024: Gemma 4's 8 over one KV
  // head) the largest divisor of the group that does; the group's K/V is
  // then read once per sub-group (grid y: n_head_kv × sub_groups()).
  uint32_t heads_per_block() const {
    uint32_t h = group();
    while (h > 1 && (h * head_dim > 1024 || group() % h)) --h;
    return h;
  }
  uint32_t sub_groups() const { return group() / heads_per_block(); }
};

// The split counters a launch takes (its `sync`): one per token and block row.
inline uint32_t paged_attention_sync_slots(const PagedAttentionShape& s) {
  return s.tokens * s.n_head_kv * s.sub_groups();
}

// Warps per block: 8 keep a block's loads in flight (one block per SM at
// Llama-3-8B's decode grid) and their V sums fit 32 KiB of shared memory.
constexpr uint32_t kPagedAttentionWarps = 8;

// Splits that give `sms` SMs one block each at T tokens of n_head_kv heads
// (a grid a little over the SM count would run a second, mostly idle round).
uint32_t paged_attention_splits(uint32_t n_head_kv, uint32_t tokens, uint32_t sms);

// Per lane: K (and V) loads in flight per tile; positions per tile.
uint32_t paged_attention_unroll(const PagedAttentionShape& s);
uint32_t paged_attention_tile(const PagedAttentionShape& s);

ptx::LaunchGeometry paged_attention_geometry(const PagedAttentionShape& s);
// Standalone, it ignores t.pdl (no griddepcontrol.wait: the chain launches
// it plainly); `in`: inline into a persistent kernel (tokens must be 1).
ptx::GeneratedKernel paged_attention_kernel(const PagedAttentionShape& s, ptx::Target t = {},
                                            const InlineTarget* in = nullptr);

}  // namespace ptxlm::kernels
