// What the CPU computes for the paged attention op (kernels::
// paged_attention_kernel): each query row's attention over its sequence's
// pages, in double, with the bound the device's results are checked against
// (the kernel tests on emu; `ptxlm selftest` once the backend uses the op).
#pragma once

#include <cstddef>
#include <cstdint>
#include <utility>
#include <vector>

#include "engine/cuda/attention_reference.h"
#include "kernels/decode/paged_attention.h"
#include "kernels/decode/paged_rope.h"

namespace ptxlm::cuda {

// The op's inputs as the kernel reads them: q (T × n_head·hd f32, rotated
// and scaled), the pools (n_pages × n_head_kv × page_size × hd f16), the
// tables (rows × max_pages page ids), and per row its position (~0u: an
// unused slot) and table row.
struct PagedAttentionInputs {
    std::vector<float> q;
    std::vector<uint16_t> k_pool, v_pool;
    std::vector<uint32_t> tables;
    std::vector<uint32_t> pos, row;
};

// T × n_head·hd values (an unused slot's all {0, -1}: not checked). Scores,
// softmax and the V sum in double over positions p0..pos (p0 = pos + 1 −
// window on a sliding layer). The tolerance, from the kernel's rounding:
// scores in f32 ((hd + 3)·u·log2 e·Σ|q·k| in log2 units, u = 2^-24),
// ex2.approx (2^-22 relative, PTX ISA) for each weight and for each rescale
// that multiplies it (a warp's later tiles, the warps' combination, the
// splits' and their batches of 16), the V sums and the softmax sum in f32
// along chains of at most m additions (a lane's rows, its row groups, the
// warps, the splits): a weight off by a relative e moves the output by at
// most 2e·Σ w|v|, so tol = 2 × (2·(ln2·δ + (tiles + 4 + batches)·2^-22) +
// (2m + 6)·u) × Σ w|v|, the leading 2 a stated margin.
std::vector<Checked> paged_attention_reference(const kernels::PagedAttentionShape& s, const PagedAttentionInputs& in);

// The RoPE + append op's inputs (kernels::paged_rope_kernel): T rows of q
// (n_head·hd), k and v (n_head_kv·hd); biases and norm weights empty when
// the shape has none; rope n_ctx × n_rot/2 × {cos, sin}; tables, and per row
// its position (~0u: unused) and table row.
struct PagedRopeInputs {
    std::vector<float> q, k, v, bq, bk, bv, q_norm, k_norm, rope;
    std::vector<uint32_t> tables;
    std::vector<uint32_t> pos, row;
};

// What the op writes. q: T × n_head·hd (an unused row's {0, -1}); k_bits,
// v_bits: T × n_head_kv·hd, the f16 written at pool element `at[t] +
// g·page_size·hd + i` for KV head g (at[t]: ~0 for an unused row). The
// arithmetic mirrors the kernel's f32 operations one by one (the norm's
// butterflies over 32 pairs and their sums in order, sqrt and division
// rounded, the rotation as mul, mul, sub / add, the temperature's
// fmaf(log2f, ·, 1), cvt to f16 by round to nearest even). The kernel's
// operations are all .rn (ptxas may not contract them) but lg2.approx, so
// q, K and V are bit-equal on any device but for the temperature: q's
// tolerance is lg2.approx's 2^-22 (absolute near 1, PTX ISA) times
// temp_scale·ln 2 and two roundings, (|temp_scale|·2^-21 + 2^-23)·|q| with
// a temperature, else 0; K and V never see it.
struct PagedRopeExpected {
    std::vector<Checked> q;
    std::vector<uint16_t> k_bits, v_bits;
    std::vector<size_t> at;
};
PagedRopeExpected paged_rope_reference(const kernels::PagedRopeShape& s, const PagedRopeInputs& in);

// The op's ownership of the pools (both n_pages × n_head_kv × page_size × hd
// f16, every element `sentinel` before the launch): each used row's K/V slot
// (e.at) bit-equal to e.k_bits / e.v_bits, nothing else written. kv_bad
// counts the owned elements not bit-equal (the first kFirstBad kept as
// {pool element, index into e.k_bits / e.v_bits}), stray the elements no row
// owns that changed in either pool.
struct PagedRopePools {
    static constexpr size_t kFirstBad = 3;
    size_t kv_bad = 0, stray = 0;
    std::vector<std::pair<size_t, size_t>> first_bad;
    bool pass() const { return kv_bad == 0 && stray == 0; }
};
PagedRopePools paged_rope_check_pools(const kernels::PagedRopeShape& s, const PagedRopeExpected& e,
                                      const std::vector<uint16_t>& k_pool, const std::vector<uint16_t>& v_pool,
                                      uint16_t sentinel);

}  // namespace ptxlm::cuda
