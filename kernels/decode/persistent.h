// The persistent decoder: one cooperative launch runs whole tokens. Its
// resident blocks walk a device-side op table (the same ops the chain
// launches one by one: embedding, per layer fused norm + QKV, attention
// (RoPE, KV append, splits and their reduction; under paged KV paged_rope
// then paged_attention), output GEMV, gate/up, down, then the LM head and
// the argmax), each op's code emitted inline from the op's own
// generator (ptx::InlineOp), so the kernels are the same code in both
// schedules.
//
// Per token t of the launch, every block runs:
//
//   for op i in the table:
//     for v = blockIdx; v < op.vblocks; v += gridDim       (virtual blocks)
//       under Target::prefetch: the op's first weights of v into L2 (a
//         GEMV's prefetch, InlineTarget::prefetch_only; other ops have
//         none), so DRAM streams while the block waits (the op's arguments
//         are then copied before a barrier of their own)
//       thread 0 waits, for each dependency d (ld.acquire.gpu; protects the
//         op's inputs): done[d] >= (t+1) * vblocks[d] (the whole op), or
//         flag[b] >= t+1 for the producer blocks b its range names
//       bar.sync                      (the block starts after the wait)
//       the op's code for virtual block v
//       bar.sync                      (every thread's writes precede the release;
//                                      shared memory free for the next op)
//       thread 0: flag[v] = t+1 (st.release.gpu); red.release.gpu.add done[i], 1
//   block 0 thread 0 ("advance"): waits for the last op; token = argmax of
//     `best`; io.tokens[t] = token; io.produced = t+1 (st.release.sys: the
//     host streams it); stop when the token is a stop id, t+1 = steps or the
//     host set io.cancel (ld.acquire.sys); else state = (token, pos+1) and
//     best = 0; then go = t+1 (st.release.gpu)
//   every block's thread 0 waits for go >= t+1 (it protects state and
//     best, which the next token's embedding and argmax use), reads stop.
//
// Counters and flags are monotonic within a launch (the host zeroes them
// before each launch), so no reset races a late reader. The dependencies
// are what an op reads, as the host's table says (OpRecord).
#pragma once

#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "kernels/examples/common.h"
#include "kernels/ptx/builder.h"
#include "kernels/ptx/params.h"

namespace ptxlm::kernels {

// One kind of op: a generator bound to its shape, called once standalone
// (in = nullptr: for its geometry) and once inline.
using OpGenerator = std::function<ptx::GeneratedKernel(const ptx::Target&, const InlineTarget*)>;

constexpr uint32_t kMaxDeps = 4;

constexpr uint32_t kAllBlocks = 0xffffffffu;   // a dependency on every virtual block of the producer

// One row of the device op table (little-endian, 64 bytes, 8-aligned).
struct OpRecord {
  uint32_t kind = 0;      // index into the kinds the kernel was generated for
  uint32_t vblocks = 0;   // the op's grid: x * y virtual blocks
  uint32_t grid_x = 1;    // virtual block v is (v % grid_x, v / grid_x)
  uint32_t n_deps = 0;
  uint32_t deps[kMaxDeps] = {};     // indices of earlier ops it reads from
  // Per dependency: kAllBlocks (wait for the whole producer: its done
  // counter), or the offset in the ranges table (u32) of this op's ranges,
  // one (first, count, stride) triple per virtual block: virtual block v
  // waits for the producer's blocks first + k*stride, k < count (their flags).
  uint32_t ranges[kMaxDeps] = {};
  uint32_t flag_base = 0;  // this op's first flag (flags are per virtual block)
  uint32_t pad = 0;
  uint64_t args = 0;      // device address of the op's packed parameters (ParamList::pack's layout);
                          // readable for the largest kind's parameter size (the kernel copies that much)
};
static_assert(sizeof(OpRecord) == 64);

// The host-mapped block the kernel streams tokens through.
struct PersistentIo {
  uint32_t produced = 0;   // tokens written so far (st.release.sys)
  uint32_t cancel = 0;     // the host sets it to stop after the current token
  uint32_t stopped = 0;    // 1 stop id, 2 step count, 3 cancelled
  uint32_t pad = 0;
  // then uint32_t tokens[steps]
};
constexpr uint32_t kPersistentIoHeader = 16;

// Device scratch the kernel synchronises through: done[n_ops], go, stop,
// then one flag per virtual block of every op (n_flags in all). Zeroed
// before each launch.
inline uint64_t persistent_sync_bytes(uint32_t n_ops, uint64_t n_flags) { return (uint64_t(n_ops) + 2 + n_flags) * 4; }

struct PersistentKernel {
  ptx::GeneratedKernel kernel;              // geometry: grid 1 (the caller sizes it), block, shared
  std::vector<ptx::GeneratedKernel> kinds;  // per kind: name, params, geometry (shared = its use of the window)
};

// Where the advance writes the next token's input in `state`: byte offsets
// of the u32 token and the u32 position. Default {token, pos}; paged KV's
// {pos, table row, token, 0} starts with the paged ops' token descriptor.
struct PersistentState {
  uint32_t token = 0, pos = 4;
};

// Params: ops (OpRecord[n_ops]), n_ops, sync (persistent_sync_bytes),
// ranges (u32 triples, see OpRecord),
// state (u32 token and pos, where `layout` places them), best (u64 argmax key),
// io (PersistentIo + tokens), steps, stop_ids (u32[n_stop]), n_stop. The
// argmax key is decoded as kernels/examples argmax_index does (~low 32 bits).
PersistentKernel persistent_kernel(const std::vector<OpGenerator>& kinds, ptx::Target t = {},
                                   PersistentState layout = {});

}  // namespace ptxlm::kernels
