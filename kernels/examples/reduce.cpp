// Cross-block reductions: argmax (packed value/index keys and one atomic
// per block), squared-sum partials, and the gradient-clip pair (scale from
// the partials, then the scale applied, read from device memory).
#include <limits>
#include <vector>

#include "kernels/examples/common.h"
#include "kernels/examples/examples.h"

namespace ptxlm::kernels {

using namespace ptx;

namespace {

// The chunk [begin, end) of block ctaid.x when each block covers `chunk`
// elements of n; returns {begin + tid, end}.
std::pair<Reg, Reg> block_chunk(Kernel& k, uint32_t chunk, uint32_t n) {
  Reg b = k.special(Sreg::ctaid_x), tid = k.special(Sreg::tid_x);
  Reg begin = k.mul(b, chunk);
  Reg end = k.min(k.add(begin, chunk), n);
  return {k.add(begin, tid), end};
}

// One block per chunk of block * items elements; the shape is checked here,
// so every chunked kernel's geometry is this one function.
LaunchGeometry chunked_geometry(const char* what, uint32_t n, uint32_t block, uint32_t items) {
  if (n == 0 || items == 0 || block == 0 || block % 32 || block > 1024)
    throw Error(std::string(what) + ": bad shape (n > 0, block a multiple of 32 up to 1024)");
  if (uint64_t(n) + uint64_t(block) * items > std::numeric_limits<uint32_t>::max())
    throw Error(std::string(what) + ": n too large for 32-bit indexing");
  return LaunchGeometry{{ceil_div(n, uint64_t(block) * items), 1, 1}, {block, 1, 1}, 0};
}

}  // namespace

// ---------------------------------------------------------------- argmax

LaunchGeometry argmax_geometry(const ArgmaxShape& s) {
  if (s.columns == 0 || s.columns > 65535) throw Error("argmax: columns must be 1..65535");
  LaunchGeometry g = chunked_geometry("argmax", s.n, s.block, s.items_per_thread);
  g.grid.y = s.columns;
  return g;
}

GeneratedKernel argmax_kernel(const ArgmaxShape& s, Target t, const InlineTarget* in) {
  const LaunchGeometry g = argmax_geometry(s);
  if (s.columns > 1 && in) throw Error("argmax: several columns have no inline form");
  ParamList params;
  params.add_ptr("x").add_ptr("out");
  const std::string name = s.columns > 1 ? "argmax_x" + std::to_string(s.columns) : "argmax";
  Emit emit(in, name.c_str(), t, params, g);
  Kernel& k = emit.k();
  Symbol scratch = k.shared_array("red", Type::u64, s.block / 32);

  Reg x = k.param("x"), out = k.param("out");
  if (s.columns > 1) {   // column c: x + c·n, slot c
    Reg c = k.special(Sreg::ctaid_y);
    x = k.add(x, k.mul_wide(c, s.n * 4));
    out = k.add(out, k.mul_wide(c, 8u));
  }
  auto [first, end] = block_chunk(k, s.block * s.items_per_thread, s.n);
  Reg best = k.mov(Type::u64, 0u);  // below every real key: ~index is never 0 for index < 2^32-1
  // Every item's load is issued before the first is used: one round trip a
  // warp, where a loop that used each load at once waited items_per_thread
  // times (8 waits a warp: 5.6 us a token projected for an H100 at
  // Llama-3's 128256 logits, latency-bound).
  std::vector<Reg> index, live, bits;
  MemOpt nc;
  nc.nc = true;
  for (uint32_t j = 0; j < s.items_per_thread; ++j) {
    index.push_back(j == 0 ? first : k.add(first, j * s.block));
    live.push_back(k.setp(Cmp::lo, index.back(), end));
    bits.push_back(k.mov(Type::u32, 0u));
    k.when(live.back(), [&] {
      k.ld(Space::global, bits.back(), at(k.add(x, k.mul_wide(index.back(), 4u))), nc);
    });
  }
  k.comment("key = orderable(bits(x)) << 32 | ~i; max key = max value, lowest index");
  for (uint32_t j = 0; j < s.items_per_thread; ++j) {
    Reg sign = k.shr(k.bitcast(Type::s32, bits[j]), 31u);  // 0 or -1 (shr.s32)
    Reg flip = k.reg(Type::u32);
    k.or_(flip, sign, 0x80000000u);  // negative: flip all bits; else only the sign
    Reg ordered = k.xor_(bits[j], flip);
    Reg key = k.reg(Type::u64);
    k.pack(key, k.not_(index[j]), ordered);
    k.when(live[j], [&] { k.max(best, best, key); });
  }
  Reg block_best = block_allreduce(k, best, ReduceOp::max_u64, scratch, s.block);
  Reg tid = k.special(Sreg::tid_x);
  k.when(k.setp(Cmp::eq, tid, 0u), [&] { k.red(AtomOp::max, Space::global, at(out), block_best); });
  return emit.done(true);
}

// ---------------------------------------------------------------- squared-sum partials

LaunchGeometry sumsq_partials_geometry(const SumSqShape& s) {
  return chunked_geometry("sumsq_partials", s.n, s.block, s.items_per_thread);
}

GeneratedKernel sumsq_partials_kernel(const SumSqShape& s, Target t) {
  const LaunchGeometry g = sumsq_partials_geometry(s);
  ParamList params;
  params.add_ptr("x").add_ptr("partials");
  Kernel k = start_kernel("sumsq_partials", t, params, g);
  Symbol scratch = k.shared_array("red", Type::f32, s.block / 32);

  Reg x = k.param("x"), partials = k.param("partials");
  auto [first, end] = block_chunk(k, s.block * s.items_per_thread, s.n);
  Reg acc = k.mov(Type::f32, 0.0f);
  Reg i = k.reg(Type::u32);
  k.for_range(i, first, end, s.block, [&] {
    Reg v = k.ld_global_nc(Type::f32, at(k.add(x, k.mul_wide(i, 4u))));
    k.fma(acc, v, v, acc);
  });
  Reg total = block_allreduce(k, acc, ReduceOp::sum_f32, scratch, s.block);
  Reg tid = k.special(Sreg::tid_x), b = k.special(Sreg::ctaid_x);
  k.if_(k.setp(Cmp::eq, tid, 0u), [&] { k.st_global(at(k.add(partials, k.mul_wide(b, 4u))), total); });
  return finish(k, params, g, true);
}

// ---------------------------------------------------------------- streaming read

LaunchGeometry read_stream_geometry(const ReadStreamShape& s) {
  if (s.chunks == 0 || s.blocks == 0 || s.block == 0 || s.block % 32 || s.block > 1024)
    throw Error("read_stream: bad shape (chunks and blocks > 0, block a multiple of 32 up to 1024)");
  return LaunchGeometry{{s.blocks, 1, 1}, {s.block, 1, 1}, 0};
}

GeneratedKernel read_stream_kernel(const ReadStreamShape& s, Target t) {
  const LaunchGeometry g = read_stream_geometry(s);
  ParamList params;
  params.add_ptr("x").add_ptr("out");
  Kernel k = start_kernel("read_stream", t, params, g);
  Reg x = k.param("x"), out = k.param("out");
  Reg tid = k.special(Sreg::tid_x), b = k.special(Sreg::ctaid_x);
  const uint64_t T = uint64_t(s.blocks) * s.block;
  Reg gtid = k.cvt(Type::u64, k.mad_lo(b, s.block, tid));
  Reg acc = k.mov(Type::u32, 0u);
  Reg i = k.reg(Type::u64);
  MemOpt nc;
  nc.nc = true;
  k.for_range(i, gtid, s.chunks, 4 * T, [&] {
    std::vector<std::vector<Reg>> v;
    std::vector<Reg> in;
    for (uint64_t u = 0; u < 4; ++u) {   // four independent loads before the first XOR
      Reg c = k.add(i, u * T);
      in.push_back(k.setp(Cmp::lo, c, s.chunks));
      v.emplace_back();
      for (int w = 0; w < 4; ++w) v.back().push_back(k.mov(Type::u32, 0u));
      k.when(in.back(), [&] { k.ld(Space::global, v.back(), at(k.add(x, k.shl(c, 4u))), nc); });
    }
    for (const std::vector<Reg>& w : v)
      for (const Reg& r : w) k.xor_(acc, acc, r);
  });
  for (uint32_t m = 16; m >= 1; m /= 2) k.xor_(acc, acc, k.shfl_bfly(acc, m));
  Reg warp = k.add(k.mul(b, s.block / 32), k.shr(tid, 5u));
  k.if_(k.setp(Cmp::eq, k.and_(tid, 31u), 0u), [&] { k.st_global(at(k.add(out, k.mul_wide(warp, 4u))), acc); });
  return finish(k, params, g, true);
}

// ---------------------------------------------------------------- clip scale

LaunchGeometry clip_scale_geometry(const ClipScaleShape& s) {
  if (s.partials == 0) throw Error("clip_scale: no partials");
  if (!(s.max_norm > 0)) throw Error("clip_scale: max_norm must be positive");
  return LaunchGeometry{{1, 1, 1}, {row_block(s.partials), 1, 1}, 0};
}

GeneratedKernel clip_scale_kernel(const ClipScaleShape& s, Target t) {
  const LaunchGeometry g = clip_scale_geometry(s);
  const uint32_t block = g.block.x;
  ParamList params;
  params.add_ptr("partials").add_ptr("out");
  Kernel k = start_kernel("clip_scale", t, params, g);
  Symbol scratch = k.shared_array("red", Type::f32, block / 32);

  Reg partials = k.param("partials"), out = k.param("out");
  Reg tid = k.special(Sreg::tid_x);
  Reg acc = k.mov(Type::f32, 0.0f);
  Reg i = k.reg(Type::u32);
  k.for_range(i, tid, s.partials, block, [&] {
    k.add(acc, acc, k.ld_global(Type::f32, at(k.add(partials, k.mul_wide(i, 4u)))));
  });
  Reg total = block_allreduce(k, acc, ReduceOp::sum_f32, scratch, block);
  k.comment("norm 0 gives max_norm / 0 = inf, and min(1, inf) = 1");
  Reg norm = k.sqrt(total);
  Reg ratio = k.reg(Type::f32);
  k.div(ratio, s.max_norm, norm);
  Reg scale = k.min(ratio, 1.0f);
  k.if_(k.setp(Cmp::eq, tid, 0u), [&] { k.st(Space::global, at(out), {scale, norm}); });  // st.v2: out is 8-aligned
  return finish(k, params, g, false);
}

// ---------------------------------------------------------------- clip apply

LaunchGeometry clip_apply_geometry(const ClipApplyShape& s) {
  if (s.n == 0) throw Error("clip_apply: empty");
  return LaunchGeometry{{ceil_div(s.n, 256), 1, 1}, {256, 1, 1}, 0};
}

GeneratedKernel clip_apply_kernel(const ClipApplyShape& s, Target t) {
  const LaunchGeometry g = clip_apply_geometry(s);
  ParamList params;
  params.add_ptr("g").add_ptr("scale");
  Kernel k = start_kernel("clip_apply", t, params, g);
  Reg gp = k.param("g"), sp = k.param("scale");
  Reg i = k.global_index_x();
  k.if_(k.setp(Cmp::lo, i, s.n), [&] {
    Reg scale = k.ld_global(Type::f32, at(sp));  // written by clip_scale, an earlier launch
    Reg a = k.add(gp, k.mul_wide(i, 4u));
    k.st_global(at(a), k.mul(k.ld_global(Type::f32, at(a)), scale));
  });
  return finish(k, params, g, true);
}

}  // namespace ptxlm::kernels
