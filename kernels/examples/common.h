// Shared pieces of the example kernels: block sizing and block-wide
// reductions built from warp butterflies and a small shared scratch array.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>

#include "kernels/ptx/builder.h"

namespace ptxlm::kernels {

inline uint32_t ceil_div(uint64_t a, uint64_t b) { return uint32_t((a + b - 1) / b); }

// Threads per block for a row of n elements: a multiple of 32 in [32, 256].
uint32_t row_block(uint32_t n);

enum class ReduceOp : uint8_t { sum_f32, max_f32, max_u64 };

// A kernel with the target, params and .maxntid of its geometry set.
ptx::Kernel start_kernel(const char* name, const ptx::Target& t, const ptx::ParamList& params,
                         const ptx::LaunchGeometry& g);

// Butterfly all-reduce within a full warp: every lane gets the result.
ptx::Reg warp_allreduce(ptx::Kernel& k, const ptx::Reg& v, ReduceOp op);

// All-reduce over a block of `threads` threads (a multiple of 32): warps
// reduce, lane 0 writes scratch[warp], then every thread combines the warp
// partials in ascending order (same order for all: same result). The
// trailing barrier makes scratch reusable. `scratch` needs threads/32
// elements of the value's type.
ptx::Reg block_allreduce(ptx::Kernel& k, const ptx::Reg& v, ReduceOp op, const ptx::Symbol& scratch,
                         uint32_t threads);

ptx::GeneratedKernel finish(const ptx::Kernel& k, const ptx::ParamList& params, const ptx::LaunchGeometry& g,
                            bool hot);

// Where a generator emits its kernel: a kernel of its own (`in` null), or,
// as one op of a persistent kernel, inline into in->host's kernel (see
// ptx::InlineOp; the caller fills the virtual-block registers, the end
// label and the window, this fills in the op's params and geometry).
struct InlineTarget {
  ptx::Kernel* host = nullptr;
  ptx::InlineOp op;
  // Only the op's opening part (Emit's `first`: a GEMV's weight prefetch),
  // which the persistent kernel emits ahead of the op's dependency wait; the
  // rest of the generator's code goes to a scratch kernel and is dropped. A
  // generator without one emits nothing.
  bool prefetch_only = false;
};

class Emit {
 public:
  // first: emitted at the kernel's start, before griddepcontrol.wait under
  // t.pdl (what needs nothing the grid before writes: a weight prefetch);
  // inline, at the op's start, or alone under InlineTarget::prefetch_only.
  Emit(const InlineTarget* in, const char* name, const ptx::Target& t, const ptx::ParamList& params,
       const ptx::LaunchGeometry& g, const std::function<void(ptx::Kernel&)>& first = {});
  ptx::Kernel& k() { return host_ ? *host_ : *own_; }
  // Own kernel: the complete module (finish() above). Inline: closes the op;
  // the result has no PTX and its geometry's shared_bytes is what the op
  // used of the host kernel's window (its dynamic bytes and its arrays).
  ptx::GeneratedKernel done(bool hot);

 private:
  std::optional<ptx::Kernel> own_;
  ptx::Kernel* host_ = nullptr;
  bool scratch_ = false;   // own_ takes a prefetch-only op's body, to be dropped
  std::string name_;
  ptx::ParamList params_;
  ptx::LaunchGeometry g_;
};

}  // namespace ptxlm::kernels
