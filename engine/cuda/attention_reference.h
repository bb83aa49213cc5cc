// What the CPU computes for one token's attention op of the GPU chain
// (kernels::attention_kernel: RoPE, the KV append, attention over the cache):
// the bound the device's results are checked against, by `ptxlm selftest`
// and by the kernel tests on emu.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/decode/attention.h"

namespace ptxlm::cuda {

// The op's inputs as the kernel reads them. Biases (s.bias) and norm weights
// (s.qk_norm) are empty when the shape has none; rope holds at least rows
// 0..pos of the cos/sin table (n_rot/2 pairs a row); the caches hold n_ctx rows of n_head_kv·hd
// f16 (row pos is what the token replaces).
struct AttentionInputs {
    std::vector<float> q, k, v, bq, bk, bv, q_norm, k_norm, rope;
    std::vector<uint16_t> k_cache, v_cache;
    uint32_t pos = 0;
    // When not empty: the K row the device appended (n_head_kv·hd f16), which
    // the attention then uses for the token's own position, so that an f16
    // rounding the norm's last bits flipped is charged to the K row's check.
    std::vector<uint16_t> own_k;
};

struct Checked {
    double value = 0, tol = 0;   // |device - value| must not exceed tol
};

struct AttentionExpected {
    std::vector<Checked> out;              // n_head·hd
    std::vector<Checked> k_row, v_row;     // row pos of the caches (f16 values as f32)
};

// The CPU reference's arithmetic (engine/cpu): q, k and v with their biases
// (f32), the per-head RMSNorm (sum of squares in double, then f32), the
// rotation in f32 from the table, K and V rounded to f16, then softmax
// attention over positions p0..pos (p0 = pos + 1 - window on a sliding
// layer) in double, `window_override`/`pos_override` (when not ~0u) standing
// in for the shape's window and the position the reference attends up to
// (negative controls). Tolerances: the f32 rotation is bit-equal without
// the norm (2e-6 relative with it, and one f16 step of K), attention 2e-6 of
// Σ w·|v| plus 1e-7 (f32 dot products and sums against double), widened by
// the norm's error in the scores where the shape has it.
AttentionExpected attention_reference(const kernels::AttentionShape& s, const AttentionInputs& in,
                                      uint32_t window_override = ~0u, uint32_t pos_override = ~0u);

}  // namespace ptxlm::cuda
