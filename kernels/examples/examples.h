// Example kernels written with the PTX builder, each a pure function of its
// shape returning {PTX, param description, launch geometry}, with a plain
// C++ reference (reference.cpp) that tests compare emu's results against.
//
// Numerics: f32 throughout; add/mul/div/sqrt are .rn (never fused by
// ptxas); reductions run in a fixed order (per thread in index order, then
// a butterfly across the warp, then warps in ascending order), so results
// are deterministic but not bit-equal to the sequential references. Each
// reference states the tolerance a comparison should use.
#pragma once

#include <cstdint>
#include <vector>

#include "kernels/ptx/builder.h"
#include "kernels/ptx/params.h"

namespace ptxlm::kernels {

struct InlineTarget;   // kernels/examples/common.h: emit inline into a persistent kernel

using ptx::GeneratedKernel;
using ptx::LaunchGeometry;
using ptx::Target;

// ---- RMSNorm: y[r][c] = x[r][c] / sqrt(mean(x[r]^2) + eps) * w[c].
// One block per row. Params: x (rows×cols f32), w (cols f32), y (rows×cols
// f32; may alias x).
struct RmsNormShape {
  uint32_t rows = 1, cols = 0;
  float eps = 1e-6f;
};
LaunchGeometry rmsnorm_geometry(const RmsNormShape& s);
GeneratedKernel rmsnorm_kernel(const RmsNormShape& s, Target t = {});
// Tolerance: |y - ref| <= 1e-5 * |ref| + 1e-6.
void rmsnorm_ref(const RmsNormShape& s, const float* x, const float* w, float* y);

// ---- Softmax over each row, max-subtracted. One block per row. Params:
// x (rows×cols f32), y (rows×cols f32, must not alias x).
struct SoftmaxShape {
  uint32_t rows = 1, cols = 0;
};
LaunchGeometry softmax_geometry(const SoftmaxShape& s);
GeneratedKernel softmax_kernel(const SoftmaxShape& s, Target t = {});
// Tolerance (ex2.approx): |y - ref| <= 2e-5 * ref + 1e-7.
void softmax_ref(const SoftmaxShape& s, const float* x, float* y);

// ---- Argmax over n floats across blocks. Each block reduces its chunk to
// a packed key (orderable value bits << 32 | ~index) and does one
// red.global.max.u64: the largest value wins, ties go to the lowest index,
// +NaN ranks above +inf. Params: x (n f32), out (one u64, zeroed by the
// caller before the launch). columns C > 1 (a batch step's logits, issue
// 22): x C rows of n one after another, out C slots, row c's argmax in
// slot c; grid.y = C; not inline. C = 1 is the single-row kernel, unchanged.
struct ArgmaxShape {
  uint32_t n = 0;
  uint32_t block = 256;
  uint32_t items_per_thread = 8;
  uint32_t columns = 1;
};
LaunchGeometry argmax_geometry(const ArgmaxShape& s);
GeneratedKernel argmax_kernel(const ArgmaxShape& s, Target t = {}, const InlineTarget* in = nullptr);
uint64_t argmax_key(float v, uint32_t index);
uint32_t argmax_index(uint64_t key);
// Exact: returns the key the kernel leaves in *out.
uint64_t argmax_ref(const ArgmaxShape& s, const float* x);

// ---- Activation backward, elementwise: dx = dy * f'(x). Params: x, dy,
// dx (n f32 each; dx may alias dy).
enum class Activation : uint8_t { relu, gelu_tanh, silu };
struct ActBackwardShape {
  uint32_t n = 0;
  Activation act = Activation::relu;
};
LaunchGeometry act_backward_geometry(const ActBackwardShape& s);
GeneratedKernel act_backward_kernel(const ActBackwardShape& s, Target t = {});
// Tolerance: relu exact; silu |dx - ref| <= 1e-5 * (|dy| + |ref|);
// gelu_tanh (tanh.approx, relative error up to 2^-11 on t = tanh(u), which
// f' = (1+t)/2 + (x c/2)(1-t^2)(1+3a x^2) amplifies by at most
// 1/2 + |x| c (1+3a x^2)): |dx - ref| <= |dy| (2^-11 gain + 1e-5) + 1e-6.
void act_backward_ref(const ActBackwardShape& s, const float* x, const float* dy, float* dx);

// ---- Per-block squared-sum partials: partials[b] = sum of x[i]^2 over
// block b's chunk of block*items_per_thread elements. Params: x (n f32),
// partials (grid.x f32).
struct SumSqShape {
  uint32_t n = 0;
  uint32_t block = 256;
  uint32_t items_per_thread = 8;
};
LaunchGeometry sumsq_partials_geometry(const SumSqShape& s);
GeneratedKernel sumsq_partials_kernel(const SumSqShape& s, Target t = {});
// Tolerance: |p - ref| <= 1e-5 * ref (ref accumulates in double).
void sumsq_partials_ref(const SumSqShape& s, const float* x, float* partials);

// ---- Streaming read: the achievable read bandwidth (`ptxlm profile`).
// Each thread XORs the 16-byte chunks i = gtid, gtid + T, ... (T = every
// thread of the grid) of x, four loads in flight per step (ld.global.nc.v4);
// each warp XORs its lanes' words and lane 0 writes out[global warp]. The
// writes are 1/512 of the bytes read. Params: x (chunks × 16 bytes,
// 16-byte aligned), out (grid.x · block / 32 u32).
struct ReadStreamShape {
  uint64_t chunks = 0;     // 16-byte chunks of x
  uint32_t blocks = 0;     // a few per SM: the caller knows the SM count
  uint32_t block = 512;
};
LaunchGeometry read_stream_geometry(const ReadStreamShape& s);
GeneratedKernel read_stream_kernel(const ReadStreamShape& s, Target t = {});
// out[w] for x given as 32-bit words (exact: XOR).
void read_stream_ref(const ReadStreamShape& s, const uint32_t* x, uint32_t* out);

// ---- Clip scale: norm = sqrt(sum(partials)), scale = min(1, max_norm /
// norm) (1 when norm is 0); writes out[0] = scale, out[1] = norm. One block.
// Params: partials (count f32), out (2 f32, 8-byte aligned).
struct ClipScaleShape {
  uint32_t partials = 0;
  float max_norm = 1.0f;
};
LaunchGeometry clip_scale_geometry(const ClipScaleShape& s);
GeneratedKernel clip_scale_kernel(const ClipScaleShape& s, Target t = {});
// Tolerance: 1e-5 relative on both outputs.
void clip_scale_ref(const ClipScaleShape& s, const float* partials, float out[2]);

// ---- Gradient clip: g[i] *= *scale, the scale read from device memory
// (written by clip_scale, so no host round trip). Params: g (n f32), scale
// (ptr to one f32).
struct ClipApplyShape {
  uint32_t n = 0;
};
LaunchGeometry clip_apply_geometry(const ClipApplyShape& s);
GeneratedKernel clip_apply_kernel(const ClipApplyShape& s, Target t = {});
// Exact (one .rn multiply).
void clip_apply_ref(const ClipApplyShape& s, float* g, float scale);

// Every example kernel at shapes the supported models use (for ptxas tests
// and `ptxlm selftest`).
std::vector<GeneratedKernel> example_kernels(Target t = {});

// Kernels that use every instruction family the builder emits (nonsense
// arithmetic, every result stored); the sm_90-only one is included when
// t.sm >= 90. For ptxas tests and as parser input for emu.
std::vector<GeneratedKernel> builder_coverage_kernels(Target t = {});

}  // namespace ptxlm::kernels
