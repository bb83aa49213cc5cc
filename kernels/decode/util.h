// Small PTX-emitting helpers the decode kernels share.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ptx/builder.h"

namespace ptxlm::kernels {

struct InlineTarget;   // kernels/examples/common.h

// A small kernel's T token rows: 1..65535 (grid y or x), and a batch (T > 1)
// has no inline form in a persistent kernel.
inline void check_batch(const char* op, uint32_t tokens, const InlineTarget* in) {
  if (tokens == 0 || tokens > 65535) throw ptx::Error(std::string(op) + ": tokens must be 1..65535");
  if (tokens > 1 && in) throw ptx::Error(std::string(op) + ": a batch of tokens has no inline form");
}

// The f16 in bits [lo, lo + 16) of a 32-bit register, as f32.
inline ptx::Reg half_to_f32(ptx::Kernel& k, const ptx::Reg& word, unsigned lo) {
  ptx::Reg bits = lo ? k.shr(word, lo) : word;
  ptx::Reg h = k.bitcast(ptx::Type::f16, k.cvt(ptx::Type::u16, bits));
  return k.cvt(ptx::Type::f32, h);
}

// n (1, 2 or 4) registers of type t loaded from `a + offset` in one access
// (.v2/.v4), through the non-coherent path when nc.
inline std::vector<ptx::Reg> ld_vec(ptx::Kernel& k, ptx::Space space, ptx::Type t, unsigned n, const ptx::Reg& a,
                                    int64_t offset = 0, bool nc = false) {
  std::vector<ptx::Reg> v;
  for (unsigned i = 0; i < n; ++i) v.push_back(k.reg(t));
  ptx::MemOpt o;
  o.nc = nc;
  if (n == 1) k.ld(space, v[0], ptx::at(a, offset), o);
  else k.ld(space, v, ptx::at(a, offset), o);
  return v;
}

// Loads 4 × 32 bits at `a + offset` (16-byte aligned) through the non-coherent path.
inline std::vector<ptx::Reg> ld_v4_nc(ptx::Kernel& k, ptx::Type t, const ptx::Reg& a, int64_t offset = 0) {
  return ld_vec(k, ptx::Space::global, t, 4, a, offset, true);
}

// q's factor at position `pos`: the attention scale, times Mistral 3's
// temperature 1 + temp_scale·ln(⌊pos / temp_floor⌋ + 1) when temp_scale is
// not 0 (the log as lg2.approx · ln 2).
inline ptx::Operand q_scale(ptx::Kernel& k, const ptx::Reg& pos, float scale, float temp_scale, uint32_t temp_floor) {
  using namespace ptx;
  if (temp_scale == 0) return scale;
  k.comment("Mistral 3: times 1 + temp_scale * ln(pos / temp_floor + 1), the log as lg2 * ln 2");
  Reg steps = k.cvt(Type::f32, k.add(k.div(pos, temp_floor), 1u), Rnd::rn);
  Reg temp = k.fma(k.lg2_approx(steps), float(temp_scale * 0.6931471805599453), 1.0f);
  return k.mul(temp, scale);
}

// The end of a split block whose splits the last block to finish combines:
// thread 0 (is_t0) counts the block in at `counter` (a global u32; acq_rel,
// so the last block sees every part published before a count), and the
// last of `n_blocks` sets it back to zero for the next launch; every other
// block returns. Call it after a barrier that orders the block's part stores
// before thread 0's count; `cell` is a shared u32 that tells the block.
inline void last_block_or_return(ptx::Kernel& k, const ptx::Reg& is_t0, const ptx::Reg& counter,
                                 const ptx::Reg& n_blocks, const ptx::Symbol& cell) {
  using namespace ptx;
  Reg cell_addr = k.shared_addr(cell);
  k.if_(is_t0, [&] {
    Reg before = k.reg(Type::u32);
    k.atom(AtomOp::add, before, Space::global, at(counter), 1u, Scope::gpu, Order::acq_rel);
    Reg last = k.setp(Cmp::eq, k.add(before, 1u), n_blocks);
    k.when(last, [&] {
      MemOpt relaxed;
      relaxed.order = Order::relaxed;
      relaxed.scope = Scope::gpu;
      k.st(Space::global, at(counter), k.mov(Type::u32, 0u), relaxed);   // ready for the next launch
    });
    k.st_shared(at(cell_addr), k.selp(1u, 0u, last, Type::u32));
  });
  k.bar_sync(0);   // thread 0's acquire precedes every thread's reads of the parts
  k.when(k.setp(Cmp::eq, k.ld_shared(Type::u32, at(cell_addr)), 0u), [&] { k.ret(); });
}

}  // namespace ptxlm::kernels
