// Copy-on-write of KV pages (issue 22): what engine/kv_pool's append asks
// for (KvPool::Copy: the first `positions` positions of page `from` into
// page `to`) before a sequence writes into a page it shared, done on the
// device in every pool at once (each layer's K and V).
//
// A pool is [page][kv_head][page_size][row] (kernels/decode/paged_rope.h),
// a row head_dim f16 (row_bytes a multiple of 16). The pools are described
// in device memory, 16 bytes each: {u64 base, u32 kv_heads, u32 row_bytes},
// so layers of different head sizes or KV head counts (gemma4) share one
// launch. The copies are copies × {from, to, positions, 0} u32; an entry of
// 0 positions is skipped (a fixed-size list per captured graph). `from` and
// `to` must differ, and no copy may read a page another writes.
//
// Grid: (copies, pools) blocks of 128 threads; a block moves its copy's
// rows of each KV head of its pool in 16-byte pieces, several in flight per
// thread (a copy is at most kv_heads · page_size · row_bytes: 8 KiB for
// Llama-3-8B's pages of 16). Plain loads (a page may have been written by
// the previous launch).
#pragma once

#include <cstdint>

#include "kernels/ptx/builder.h"
#include "kernels/ptx/params.h"

namespace ptxlm::kernels {

struct KvCopyShape {
  uint32_t pools = 0;        // pool descriptors (2 × layers)
  uint32_t page_size = 16;   // positions per page
  uint32_t copies = 1;       // entries of the copy list
};

constexpr uint32_t kKvCopyThreads = 128;

// Throws ptx::Error for no pools, no copies or a page size that is no power of two.
ptx::LaunchGeometry kv_copy_geometry(const KvCopyShape& s);
// Params: pools (pools × 16 bytes), copies (copies × 4 u32).
ptx::GeneratedKernel kv_copy_kernel(const KvCopyShape& s, ptx::Target t = {});

}  // namespace ptxlm::kernels
