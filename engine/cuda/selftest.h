// `ptxlm selftest`: every kernel a model's decode chain needs, run on the
// device at the model's shapes (its own weights, random activations) and
// compared with the CPU's arithmetic for the same op (the quantized path's
// for 8-bit-input GEMVs, else the reference's). On emu it runs in CI; on a
// real GPU it is the first thing to run.
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "engine/cuda/driver.h"
#include "engine/model.h"

namespace ptxlm::cuda {

struct SelftestResult {
    std::string kernel;
    std::string what;        // the op, in words
    double max_error = 0;    // largest |device - reference|
    double tolerance = 0;    // the bound at that element (bit-equal ops: 0)
    bool pass = false;
};

// Runs each distinct kernel once, in chain order; `report` sees each result
// as it is known. Positions are the last of an n_ctx context (the largest
// RoPE angles, the fullest cache).
// quantized_inputs: the GEMVs as the default path runs them, checked against
// the CPU quantized path's arithmetic (false: f32 inputs, the CPU reference).
// paged_kv: the attention as the backend runs it under GpuTuning::paged_kv
// (RoPE + the K/V append into a page, then attention over a page-table row
// of shuffled pages, against paged_rope_reference and
// paged_attention_reference) instead of the contiguous cache's op.
std::vector<SelftestResult> run_selftest(const Model& m, std::shared_ptr<const Driver> driver, uint32_t n_ctx,
                                         uint32_t seed, const std::function<void(const SelftestResult&)>& report,
                                         bool quantized_inputs = true, bool paged_kv = false);

}  // namespace ptxlm::cuda
