// Matrix-vector products on quantized weights, the CPU backend's reference
// arithmetic: each row is dequantized block by block into a small buffer with
// gguf/'s reference dequantizers and multiplied with the float32 input, so no
// matrix is ever expanded whole and every supported type takes the same path.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "engine/cpu/thread_pool.h"
#include "engine/model.h"

namespace ptxlm::cpu {

// Σ_c row[c]·x[c] for row r of w (accumulated in float per 256-element chunk,
// chunks summed in double).
float dot_row(const Weight& w, uint64_t r, const float* x);

// Row r of w as float32.
void dequantize_row(const Weight& w, uint64_t r, float* out);

// y = W·x for each job; the rows of all jobs share one parallel pass (the
// matrices that read the same input: Q, K and V; gate and up).
struct MatVec {
    const Weight* w;
    float* y;
};
// How the input vector is rounded before the products. Exact keeps float32.
// LikeLlamaCpp rounds it as llama.cpp's CPU backend does before its dot
// products (8-bit blocks of 32 for the 32-element types, of 256 for the
// k-quants, f16 for F16 weights), which separates arithmetic differences from
// real defects when comparing with llama.cpp's logits. A diagnostic, never the
// default.
enum class InputRounding { Exact, LikeLlamaCpp };
void matvec(ThreadPool& pool, std::initializer_list<MatVec> jobs, const float* x,
            InputRounding rounding = InputRounding::Exact);

}  // namespace ptxlm::cpu
