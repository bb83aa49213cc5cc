// Elementwise math for the CPU backend's quantized path, vectorised per ISA:
// exp over an array (attention's softmax), the gated activations of the
// feed-forward block and the final logit soft-cap. Every element takes the same arithmetic wherever it
// sits in the array (the SIMD versions run a short tail through the vector
// code too), so results do not depend on how work is split between threads
// or batched.
//
// exp is a range-reduced polynomial (2^n · p(r), |r| <= ln2/2), within 2 ulp
// of expf over the float range; inputs below -87.3 give 0. The activations
// are x·σ(x) (SiLU) and x·σ(2·√(2/π)·(x + 0.044715·x³)) (GELU, tanh form,
// rewritten through tanh(u) = 2σ(2u) − 1). The soft-cap c·tanh(x/c) takes
// tanh(y) = 1 − 2/(1 + e^2y) (as the GPU's softcap kernel does): within a
// few units of 1e-7·c of the exact value, where the scalar std::tanh loop it
// replaces cost a Gemma-4-E2B-sized decode about 4% of its time (262144
// logits a token). The f16 conversion is exact rounding, the same bits on
// every path.
#pragma once

#include <cstdint>

#include "engine/cpu/qdot.h"

namespace ptxlm::cpu {

struct ElementwiseOps {
    void (*exp_inplace)(float* x, uint32_t n);
    // g[i] = act(g[i]) · u[i]
    void (*silu_mul)(float* g, const float* u, uint32_t n);
    void (*gelu_mul)(float* g, const float* u, uint32_t n);
    // x[i] = cap · tanh(x[i] / cap), cap > 0
    void (*softcap)(float* x, uint64_t n, float cap);
    // out[i] = x[i] as IEEE binary16, rounded to nearest even: the bits of
    // f32_to_f16 (gguf/f16.h) for every input, NaN included (F16C's
    // vcvtps2ph on the SIMD paths). The KV cache's store.
    void (*to_f16)(const float* x, uint16_t* out, uint64_t n);
};
ElementwiseOps elementwise_ops(Isa isa);

}  // namespace ptxlm::cpu
