// Plain C++ references for the example kernels. Sequential, f32 unless
// noted; compiled with -ffp-contract=off so each operation rounds as
// written. Tolerances are stated next to the declarations in examples.h.
#include <algorithm>
#include <cmath>
#include <cstring>

#include "kernels/examples/examples.h"

namespace ptxlm::kernels {

void rmsnorm_ref(const RmsNormShape& s, const float* x, const float* w, float* y) {
  for (uint32_t r = 0; r < s.rows; ++r) {
    const float* xr = x + size_t(r) * s.cols;
    float* yr = y + size_t(r) * s.cols;
    double ss = 0;
    for (uint32_t c = 0; c < s.cols; ++c) ss += double(xr[c]) * xr[c];
    const float mean = float(ss) / float(s.cols);
    const float scale = 1.0f / std::sqrt(mean + s.eps);
    for (uint32_t c = 0; c < s.cols; ++c) yr[c] = xr[c] * scale * w[c];
  }
}

void softmax_ref(const SoftmaxShape& s, const float* x, float* y) {
  for (uint32_t r = 0; r < s.rows; ++r) {
    const float* xr = x + size_t(r) * s.cols;
    float* yr = y + size_t(r) * s.cols;
    float m = -INFINITY;
    for (uint32_t c = 0; c < s.cols; ++c) m = std::fmax(m, xr[c]);
    double sum = 0;
    for (uint32_t c = 0; c < s.cols; ++c) {
      yr[c] = std::exp(xr[c] - m);
      sum += yr[c];
    }
    for (uint32_t c = 0; c < s.cols; ++c) yr[c] = yr[c] / float(sum);
  }
}

uint64_t argmax_key(float v, uint32_t index) {
  uint32_t bits;
  std::memcpy(&bits, &v, 4);
  const uint32_t flip = (bits & 0x80000000u) ? 0xffffffffu : 0x80000000u;
  return (uint64_t(bits ^ flip) << 32) | uint64_t(~index);
}

uint32_t argmax_index(uint64_t key) { return ~uint32_t(key); }

uint64_t argmax_ref(const ArgmaxShape& s, const float* x) {
  uint64_t best = 0;
  for (uint32_t i = 0; i < s.n; ++i) best = std::max(best, argmax_key(x[i], i));
  return best;
}

void act_backward_ref(const ActBackwardShape& s, const float* x, const float* dy, float* dx) {
  // Same operation order and fused steps as the kernel; only exp/tanh are
  // exact here where the kernel uses ex2.approx/tanh.approx.
  const float c = float(0.7978845608028654), a = float(0.044715);
  const float a3 = float(3.0 * 0.044715), half_c = float(0.5 * 0.7978845608028654);
  for (uint32_t i = 0; i < s.n; ++i) {
    const float v = x[i];
    float d = 0;
    switch (s.act) {
      case Activation::relu:
        d = v > 0.0f ? 1.0f : 0.0f;
        break;
      case Activation::silu: {
        const float sg = 1.0f / (std::exp(-v) + 1.0f);
        d = sg * std::fma(v, 1.0f - sg, 1.0f);
        break;
      }
      case Activation::gelu_tanh: {
        const float x2 = v * v;
        const float t = std::tanh(v * std::fma(x2, a, 1.0f) * c);
        const float half = std::fma(t, 0.5f, 0.5f);
        const float sech2 = std::fma(-t, t, 1.0f);
        d = half + v * half_c * sech2 * std::fma(x2, a3, 1.0f);
        break;
      }
    }
    dx[i] = dy[i] * d;
  }
}

void sumsq_partials_ref(const SumSqShape& s, const float* x, float* partials) {
  const uint64_t chunk = uint64_t(s.block) * s.items_per_thread;
  const uint32_t blocks = uint32_t((s.n + chunk - 1) / chunk);
  for (uint32_t b = 0; b < blocks; ++b) {
    double acc = 0;
    for (uint64_t i = b * chunk; i < std::min<uint64_t>(s.n, (b + 1) * chunk); ++i) acc += double(x[i]) * x[i];
    partials[b] = float(acc);
  }
}

void read_stream_ref(const ReadStreamShape& s, const uint32_t* x, uint32_t* out) {
  const uint64_t T = uint64_t(s.blocks) * s.block;
  for (uint64_t w = 0; w < T / 32; ++w) {
    uint32_t acc = 0;
    for (uint64_t t = 32 * w; t < 32 * (w + 1); ++t)
      for (uint64_t c = t; c < s.chunks; c += T)
        for (int j = 0; j < 4; ++j) acc ^= x[4 * c + j];
    out[w] = acc;
  }
}

void clip_scale_ref(const ClipScaleShape& s, const float* partials, float out[2]) {
  double sum = 0;
  for (uint32_t i = 0; i < s.partials; ++i) sum += partials[i];
  const float norm = std::sqrt(float(sum));
  out[0] = std::fmin(1.0f, s.max_norm / norm);
  out[1] = norm;
}

void clip_apply_ref(const ClipApplyShape& s, float* g, float scale) {
  for (uint32_t i = 0; i < s.n; ++i) g[i] = g[i] * scale;
}

}  // namespace ptxlm::kernels
