// Small PTX-emitting helpers the decode kernels share.
#pragma once

#include <vector>

#include "kernels/ptx/builder.h"

namespace ptxlm::kernels {

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

}  // namespace ptxlm::kernels
