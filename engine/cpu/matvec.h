// Matrix-vector (and small matrix-matrix) products on quantized weights, two
// ways:
// - the reference arithmetic: each row is dequantized into a small buffer
//   with gguf/'s reference dequantizers and multiplied with the float32
//   input, so no matrix is ever expanded whole and every supported type
//   takes the same path;
// - the quantized path (the default for users): the input is quantized once
//   per product to 8-bit blocks and each row goes through an integer dot
//   product on its packed weights (qdot.h), on the best SIMD the CPU has:
//   Q4_0 Q4_1 Q5_0 Q5_1 Q8_0 IQ4_NL (8-bit input blocks of 32), Q2_K Q3_K
//   Q4_K Q5_K Q6_K IQ4_XS (blocks of 256). Types without one (F32, F16,
//   BF16) take the reference arithmetic.
// Either way a batch of inputs shares each row, and the arithmetic per (row,
// input) is the same as for one input, so batched and token-by-token
// evaluation give bit-identical results.
#pragma once

#include <cstdint>
#include <initializer_list>

#include "engine/cpu/qdot.h"
#include "engine/cpu/repack.h"
#include "engine/cpu/thread_pool.h"
#include "engine/model.h"

namespace ptxlm::cpu {

// Σ_c w[c]·x[c], accumulated in float (8 lanes) per 256-element chunk, the
// chunk sums added in double. The one dot product of the reference path.
float dot(const float* w, const float* x, uint64_t n);

// Row r of w as float32.
void dequantize_row(const Weight& w, uint64_t r, float* out);

// How inputs are rounded before the products. Exact keeps float32.
// LikeLlamaCpp rounds them as llama.cpp's CPU backend does before its dot
// products (8-bit blocks of 32 for the 32-element types and IQ4_NL, of 256
// for the k-quants and IQ4_XS, f16 for F16 weights), which separates arithmetic differences from
// real defects when comparing with llama.cpp's logits. A diagnostic, never the
// default.
enum class InputRounding { Exact, LikeLlamaCpp };

// Which arithmetic a product uses (see the top of this file).
enum class CpuPath { Quantized, Reference };
struct Arithmetic {
    CpuPath path = CpuPath::Reference;
    Isa isa = Isa::Scalar;                            // Quantized: a runnable Isa
    InputRounding rounding = InputRounding::Exact;    // Reference only
};

// Y = W·X for each job: n_in inputs X[t] = x + t·ldx, outputs y + t·ldy. The
// rows of all jobs share one parallel pass (the matrices that read the same
// input: Q, K and V; gate and up).
struct MatVec {
    const Weight* w;
    float* y;
    uint64_t ldy = 0;   // stride between the outputs of consecutive inputs
    // w's rows packed for the quantized path (repack.h), or null. Used when
    // the product runs on the quantized path on p->isa; else ignored.
    const PackedWeight* packed = nullptr;
};
void matmul(ThreadPool& pool, std::initializer_list<MatVec> jobs, const float* x, uint64_t n_in, uint64_t ldx,
            const Arithmetic& arith = {});

// A product on the quantized path whose rows a caller hands out itself: the
// inputs quantized at construction (once per layout the jobs need; jobs
// sharing x have the same width) or given quantized (`pre`), then run(j, u)
// computes unit u (rows [u·kPackRows, (u+1)·kPackRows) ∩ the rows) of job j
// for every input, as matmul's pass does: a packed group with one call per
// kQDotMaxInputs inputs, else a QDotFn call per row (QDotMultiFn per
// kQDotMaxRows rows for several inputs), each bit-identical to one input
// alone. For passes whose threads finish the rows they computed (matmul_glu,
// the backend's Q/K/V heads). `jobs` must outlive it; every job's type has
// quantized dot products; at most kMaxJobs jobs. Its quantized inputs are
// the constructing thread's (kept between products, so decoding allocates
// nothing): one product at a time per thread.
class QuantizedProduct {
public:
    static constexpr size_t kMaxJobs = 8;
    QuantizedProduct(ThreadPool& pool, const MatVec* jobs, size_t n_jobs, const float* x, uint64_t n_in, uint64_t ldx,
                     Isa isa, const QuantizedInput* pre = nullptr);
    uint64_t units() const { return first_unit[n_jobs]; }   // of all jobs
    uint64_t units(size_t j) const { return first_unit[j + 1] - first_unit[j]; }
    void run(size_t j, uint64_t unit) const;

    uint64_t first_unit[kMaxJobs + 1];   // job j's units are [first_unit[j], first_unit[j + 1]) of all

private:
    const MatVec* js = nullptr;
    size_t n_jobs = 0;
    uint64_t n_in = 0, cols = 0;
    QDotFn fns[kMaxJobs];
    QDotMultiFn multi_fns[kMaxJobs];
    const PackedWeight* packed[kMaxJobs];
    const void* const* in_blocks[kMaxJobs];
};

// The same on the quantized path for inputs already quantized for every
// job's type (quantize_input, or matmul_glu's `next`): xq[0 .. n_in).
void matmul(ThreadPool& pool, std::initializer_list<MatVec> jobs, const QuantizedInput* xq, uint64_t n_in, Isa isa);

// A gated feed-forward's first half on the quantized path, gate·X and up·X in
// one pass over the pool whose items are kGluRows rows of both: the thread
// that computes an item's rows finishes them, g = act(g, u) (g[i] =
// act(g[i])·u[i], lane by lane as ElementwiseOps' activations are) and, when
// `next` is given, quantizes them as Block32 block i of next[t] for each
// input t (the input of a Block32 down product). No thread reads rows
// another computed, and nothing is left for the caller alone between the
// two products. The same bits as the two products, the activation over the
// whole vector and quantize_input. gate and up: the same rows, types with
// quantized dot products; with `next`, rows a multiple of kGluRows.
using GluFn = void (*)(float* g, const float* u, uint32_t n);
constexpr uint64_t kGluRows = 32;
void matmul_glu(ThreadPool& pool, const MatVec& gate, const MatVec& up, const float* x, uint64_t n_in, uint64_t ldx,
                Isa isa, GluFn act, QuantizedInput* next);

}  // namespace ptxlm::cpu
