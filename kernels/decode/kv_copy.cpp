#include "kernels/decode/kv_copy.h"

#include <bit>
#include <string>
#include <vector>

#include "kernels/decode/util.h"
#include "kernels/examples/common.h"

namespace ptxlm::kernels {

using namespace ptx;

LaunchGeometry kv_copy_geometry(const KvCopyShape& s) {
  if (s.pools == 0 || s.pools > 65535) throw Error("kv_copy: pools must be 1..65535");
  if (s.copies == 0) throw Error("kv_copy: copies must be positive");
  if (!std::has_single_bit(s.page_size)) throw Error("kv_copy: page_size must be a power of two");
  return LaunchGeometry{{s.copies, s.pools, 1}, {kKvCopyThreads, 1, 1}, 0};
}

GeneratedKernel kv_copy_kernel(const KvCopyShape& s, Target t) {
  const LaunchGeometry geo = kv_copy_geometry(s);
  constexpr uint32_t kUnroll = 4;   // 16-byte pieces in flight per thread
  ParamList params;
  params.add_ptr("pools").add_ptr("copies");
  const std::string name = "kv_copy_p" + std::to_string(s.page_size);
  t.pdl = false;
  Emit emit(nullptr, name.c_str(), t, params, geo);
  Kernel& k = emit.k();
  Reg c = k.special(Sreg::ctaid_x), p = k.special(Sreg::ctaid_y), tid = k.special(Sreg::tid_x);
  k.comment("the copy {from, to, positions} and the pool {base, kv_heads, row_bytes}, loaded together");
  std::vector<Reg> cp = ld_vec(k, Space::global, Type::u32, 4, k.add(k.param("copies"), k.mul_wide(c, 16u)));
  Reg desc = k.add(k.param("pools"), k.mul_wide(p, 16u));
  Reg base = k.ld_global(Type::u64, at(desc));
  std::vector<Reg> hr = ld_vec(k, Space::global, Type::u32, 2, desc, 8);
  Reg from = cp[0], to = cp[1], n = cp[2], heads = hr[0], row_bytes = hr[1];
  k.when(k.setp(Cmp::eq, n, 0u), [&] { k.ret(); });   // uniform over the block
  Reg head_bytes = k.mul(row_bytes, s.page_size);      // one KV head's rows of a page
  Reg page_bytes = k.mul(heads, head_bytes);
  Reg src = k.add(base, k.mul_wide(from, page_bytes)), dst = k.add(base, k.mul_wide(to, page_bytes));
  Reg per_head = k.shr(k.mul(n, row_bytes), 4u);       // 16-byte pieces of one head's copied rows
  Reg total = k.mul(heads, per_head);
  // Piece j: head j / per_head, offset 16·(j % per_head) in it.
  auto offset = [&](const Reg& j) {
    Reg g = k.div(j, per_head);
    Reg o = k.sub(j, k.mul(g, per_head));
    Reg r = k.reg(Type::u64);
    k.mad_wide(r, g, head_bytes, k.mul_wide(o, 16u));
    return r;
  };
  Reg j = k.reg(Type::u32);
  k.comment("kUnroll pieces a thread per step: the loads in flight together, then the stores");
  k.for_range(j, tid, total, kKvCopyThreads * kUnroll, [&] {
    std::vector<std::vector<Reg>> v(kUnroll);
    std::vector<Reg> off(kUnroll), ok(kUnroll);
    for (uint32_t u = 0; u < kUnroll; ++u) {
      Reg ju = u ? k.add(j, u * kKvCopyThreads) : j;
      ok[u] = k.setp(Cmp::lo, ju, total);
      off[u] = offset(ju);
      v[u] = {k.reg(Type::u32), k.reg(Type::u32), k.reg(Type::u32), k.reg(Type::u32)};
      if (u == 0) k.ld(Space::global, v[u], at(k.add(src, off[u])));
      else k.when(ok[u], [&] { k.ld(Space::global, v[u], at(k.add(src, off[u]))); });
    }
    for (uint32_t u = 0; u < kUnroll; ++u) {
      auto store = [&] { k.st(Space::global, at(k.add(dst, off[u])), {v[u][0], v[u][1], v[u][2], v[u][3]}); };
      if (u == 0) store();
      else k.when(ok[u], store);
    }
  });
  return emit.done(true);
}

}  // namespace ptxlm::kernels
