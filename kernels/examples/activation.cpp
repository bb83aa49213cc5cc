// Elementwise activation backward: dx = dy * f'(x) for ReLU, GELU (tanh
// form) and SiLU. One thread per element.
#include "kernels/examples/common.h"
#include "kernels/examples/examples.h"

namespace ptxlm::kernels {

using namespace ptx;

namespace {

constexpr double kLog2e = 1.4426950408889634;
constexpr double kSqrt2OverPi = 0.7978845608028654;
constexpr double kGeluA = 0.044715;

// f'(x) for each activation, in the operation order act_backward_ref uses.
Reg derivative(Kernel& k, Activation act, const Reg& x) {
  switch (act) {
    case Activation::relu:
      return k.selp(1.0f, 0.0f, k.setp(Cmp::gt, x, 0.0f), Type::f32);  // NaN -> 0
    case Activation::silu: {
      // s = 1 / (1 + e^-x); f' = s * (1 + x * (1 - s))
      Reg e = k.ex2_approx(k.mul(x, -kLog2e));
      Reg s = k.reg(Type::f32);
      k.div(s, 1.0f, k.add(e, 1.0f));
      Reg one_minus = k.reg(Type::f32);
      k.sub(one_minus, 1.0f, s);
      return k.mul(s, k.fma(x, one_minus, 1.0f));
    }
    case Activation::gelu_tanh: {
      // u = c (x + a x^3), t = tanh(u)
      // f' = (1 + t)/2 + (x c / 2) (1 - t^2) (1 + 3 a x^2)
      Reg x2 = k.mul(x, x);
      Reg u = k.mul(k.mul(x, k.fma(x2, kGeluA, 1.0f)), kSqrt2OverPi);
      Reg t = k.tanh_approx(u);
      Reg half = k.fma(t, 0.5f, 0.5f);
      Reg sech2 = k.fma(k.neg(t), t, 1.0f);
      Reg du = k.fma(x2, 3.0 * kGeluA, 1.0f);
      Reg rest = k.mul(k.mul(k.mul(x, 0.5 * kSqrt2OverPi), sech2), du);
      return k.add(half, rest);
    }
  }
  throw Error("act_backward: unknown activation");
}

const char* act_name(Activation a) {
  switch (a) {
    case Activation::relu: return "relu_backward";
    case Activation::gelu_tanh: return "gelu_tanh_backward";
    case Activation::silu: return "silu_backward";
  }
  return "?";
}

}  // namespace

LaunchGeometry act_backward_geometry(const ActBackwardShape& s) {
  if (s.n == 0) throw Error("act_backward: empty");
  return LaunchGeometry{{ceil_div(s.n, 256), 1, 1}, {256, 1, 1}, 0};
}

GeneratedKernel act_backward_kernel(const ActBackwardShape& s, Target t) {
  const LaunchGeometry g = act_backward_geometry(s);
  ParamList params;
  params.add_ptr("x").add_ptr("dy").add_ptr("dx");
  Kernel k = start_kernel(act_name(s.act), t, params, g);
  Reg x = k.param("x"), dy = k.param("dy"), dx = k.param("dx");
  Reg i = k.global_index_x();
  k.if_(k.setp(Cmp::lo, i, s.n), [&] {
    Reg off = k.mul_wide(i, 4u);
    Reg xv = k.ld_global_nc(Type::f32, at(k.add(x, off)));
    Reg dyv = k.ld_global(Type::f32, at(k.add(dy, off)));  // plain ld: dx may alias dy
    Reg g = k.mul(dyv, derivative(k, s.act, xv));
    k.st_global(at(k.add(dx, off)), g);  // (one emitting argument per call: C++ leaves their order open)
  });
  return finish(k, params, g, true);
}

}  // namespace ptxlm::kernels
