// What the CPU computes for one GEMV op of the GPU chain, fed a given input:
// the bound every device result is checked against, by `ptxlm selftest`
// (random inputs) and by the per-op check of the whole chain
// (CudaBackend::trace_gemvs, the device's own activations).
#pragma once

#include <vector>

#include "engine/model.h"
#include "kernels/decode/gemv.h"

namespace ptxlm::cuda {

struct RowCheck {
    double value = 0;   // the CPU's result for the row
    double tol = 0;     // |device - value| must not exceed it
};

// One op of shape `s` over matrices `ws` (one per segment) and norm weights
// `norm` (s.norm only), input `x` (n_in, before the norm) and, when it
// accumulates, `y0` (per output, what it adds to); when gated, `gate` (the
// multiplier, one per row). Outputs: one per segment, or one under a GLU
// (act(gate)·up) or a gate (act(row)·gate). The arithmetic is the CPU's that the
// shape claims to equal: with s.q8_input the quantized path's (the
// normalised-but-unscaled input quantized by cpu::quantize_input, cpu::qdot,
// times the norm's scale), else the reference's (dequantized rows, the
// normalised input, in double). Tolerance: kernels::gemv_tolerance of the
// row's Σ|w·x| plus an ulp of the f32 result (an accumulated residual can be
// far larger than the product), and for a GLU the propagation through act.
std::vector<std::vector<RowCheck>> gemv_reference(const kernels::GemvShape& s, const std::vector<const Weight*>& ws,
                                                  const std::vector<float>& norm, const std::vector<float>& x,
                                                  const std::vector<std::vector<float>>& y0,
                                                  const std::vector<float>& gate = {});

// The CPU reference's activations (engine/cpu) of a GLU's gate.
float glu_activation(kernels::Glu g, float x);

}  // namespace ptxlm::cuda
