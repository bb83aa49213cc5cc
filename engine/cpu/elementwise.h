// Elementwise math for the CPU backend's quantized path, vectorised per ISA:
// exp over an array (attention's softmax) and the gated activations of the
// feed-forward block. Every element takes the same arithmetic wherever it
// sits in the array (the SIMD versions run a short tail through the vector
// code too), so results do not depend on how work is split between threads
// or batched.
//
// exp is a range-reduced polynomial (2^n · p(r), |r| <= ln2/2), within 2 ulp
// of expf over the float range; inputs below -87.3 give 0. The activations
// are x·σ(x) (SiLU) and x·σ(2·√(2/π)·(x + 0.044715·x³)) (GELU, tanh form,
// rewritten through tanh(u) = 2σ(2u) − 1).
#pragma once

#include <cstdint>

#include "engine/cpu/qdot.h"

namespace ptxlm::cpu {

struct ElementwiseOps {
    void (*exp_inplace)(float* x, uint32_t n);
    // g[i] = act(g[i]) · u[i]
    void (*silu_mul)(float* g, const float* u, uint32_t n);
    void (*gelu_mul)(float* g, const float* u, uint32_t n);
};
ElementwiseOps elementwise_ops(Isa isa);

}  // namespace ptxlm::cpu
