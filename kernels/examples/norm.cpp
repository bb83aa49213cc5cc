// Row-wise kernels, one block per row: RMSNorm and softmax.
#include <limits>

#include "kernels/examples/common.h"
#include "kernels/examples/examples.h"

namespace ptxlm::kernels {

using namespace ptx;

namespace {

constexpr double kLog2e = 1.4426950408889634;

// Row base addresses: base + row * cols * 4.
Reg row_address(Kernel& k, const Reg& base, const Reg& row, uint32_t cols) {
  return k.add(base, k.mul_wide(row, cols * 4u));
}

}  // namespace

// ---------------------------------------------------------------- RMSNorm

LaunchGeometry rmsnorm_geometry(const RmsNormShape& s) {
  if (s.rows == 0 || s.cols == 0) throw Error("rmsnorm: empty shape");
  return LaunchGeometry{{s.rows, 1, 1}, {row_block(s.cols), 1, 1}, 0};
}

GeneratedKernel rmsnorm_kernel(const RmsNormShape& s, Target t) {
  const LaunchGeometry g = rmsnorm_geometry(s);
  const uint32_t block = g.block.x;
  ParamList params;
  params.add_ptr("x").add_ptr("w").add_ptr("y");
  Kernel k = start_kernel("rmsnorm", t, params, g);
  Symbol scratch = k.shared_array("red", Type::f32, block / 32);

  Reg x = k.param("x"), w = k.param("w"), y = k.param("y");
  Reg row = k.special(Sreg::ctaid_x), tid = k.special(Sreg::tid_x);
  Reg xr = row_address(k, x, row, s.cols), yr = row_address(k, y, row, s.cols);

  k.comment("sum of squares, strided over the row");
  Reg ss = k.mov(Type::f32, 0.0f);
  Reg i = k.reg(Type::u32);
  k.for_range(i, tid, s.cols, block, [&] {
    Reg v = k.ld_global(Type::f32, at(k.add(xr, k.mul_wide(i, 4u))));  // plain ld: y may alias x
    k.fma(ss, v, v, ss);
  });
  Reg total = block_allreduce(k, ss, ReduceOp::sum_f32, scratch, block);

  k.comment("scale = 1 / sqrt(mean + eps), correctly rounded steps");
  Reg mean = k.div(total, float(s.cols));
  Reg root = k.sqrt(k.add(mean, s.eps));
  Reg scale = k.reg(Type::f32);
  k.div(scale, 1.0f, root);

  k.for_range(i, tid, s.cols, block, [&] {
    Reg off = k.mul_wide(i, 4u);
    Reg v = k.ld_global(Type::f32, at(k.add(xr, off)));
    Reg wv = k.ld_global_nc(Type::f32, at(k.add(w, off)));
    Reg out = k.mul(k.mul(v, scale), wv);
    k.st_global(at(k.add(yr, off)), out);
  });
  return finish(k, params, g, true);
}

// ---------------------------------------------------------------- softmax

LaunchGeometry softmax_geometry(const SoftmaxShape& s) {
  if (s.rows == 0 || s.cols == 0) throw Error("softmax: empty shape");
  return LaunchGeometry{{s.rows, 1, 1}, {row_block(s.cols), 1, 1}, 0};
}

GeneratedKernel softmax_kernel(const SoftmaxShape& s, Target t) {
  const LaunchGeometry g = softmax_geometry(s);
  const uint32_t block = g.block.x;
  ParamList params;
  params.add_ptr("x").add_ptr("y");
  Kernel k = start_kernel("softmax", t, params, g);
  Symbol scratch = k.shared_array("red", Type::f32, block / 32);

  Reg x = k.param("x"), y = k.param("y");
  Reg row = k.special(Sreg::ctaid_x), tid = k.special(Sreg::tid_x);
  Reg xr = row_address(k, x, row, s.cols), yr = row_address(k, y, row, s.cols);
  Reg i = k.reg(Type::u32);

  k.comment("row maximum");
  Reg m = k.mov(Type::f32, -std::numeric_limits<float>::infinity());
  k.for_range(i, tid, s.cols, block, [&] {
    Reg v = k.ld_global_nc(Type::f32, at(k.add(xr, k.mul_wide(i, 4u))));
    k.max(m, m, v);
  });
  Reg rowmax = block_allreduce(k, m, ReduceOp::max_f32, scratch, block);

  k.comment("e = 2^((x - max) * log2(e)), kept in y; sum of e");
  Reg sum = k.mov(Type::f32, 0.0f);
  k.for_range(i, tid, s.cols, block, [&] {
    Reg off = k.mul_wide(i, 4u);
    Reg v = k.ld_global_nc(Type::f32, at(k.add(xr, off)));
    Reg e = k.ex2_approx(k.mul(k.sub(v, rowmax), kLog2e));
    k.st_global(at(k.add(yr, off)), e);
    k.add(sum, sum, e);
  });
  Reg total = block_allreduce(k, sum, ReduceOp::sum_f32, scratch, block);

  k.comment("normalise: each thread rereads only what it wrote");
  k.for_range(i, tid, s.cols, block, [&] {
    Reg a = k.add(yr, k.mul_wide(i, 4u));
    Reg e = k.ld_global(Type::f32, at(a));
    k.st_global(at(a), k.div(e, total));
  });
  return finish(k, params, g, true);
}

}  // namespace ptxlm::kernels
