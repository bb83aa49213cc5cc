// A gtest fixture for kernels run through the engine's real CUDA path on
// emu (engine/cuda -> dlopen -> emu's libcuda.so.1, selected by
// PTXLM_LIBCUDA, which ctest sets): one context per suite, uploads,
// downloads, launches with the generator's own geometry.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <vector>

#include "engine/cuda/device.h"
#include "engine/cuda/driver.h"
#include "engine/cuda/launch.h"
#include "engine/cuda/module.h"
#include "kernels/ptx/params.h"

namespace ptxlm::testing_util {

class EmuCudaTest : public ::testing::Test {
protected:
  static void SetUpTestSuite() {
    driver_ = cuda::Driver::load();
    ctx_ = new cuda::Context(driver_);
  }
  static void TearDownTestSuite() {
    delete ctx_;
    ctx_ = nullptr;
    driver_.reset();
  }

  cuda::DeviceBuffer upload(const void* p, size_t n) {
    cuda::DeviceBuffer b(*ctx_, n);
    b.upload(p, n);
    return b;
  }
  template <class T>
  cuda::DeviceBuffer upload(const std::vector<T>& v) { return upload(v.data(), v.size() * sizeof(T)); }
  template <class T>
  static std::vector<T> download(const cuda::DeviceBuffer& b, size_t n) {
    std::vector<T> v(n);
    b.download(v.data(), n * sizeof(T));
    return v;
  }
  // Loads `g`, launches it with its own geometry and `args`, waits.
  void launch(const ptx::GeneratedKernel& g, const std::vector<ptx::ParamValue>& args) {
    cuda::Module m(*ctx_, g.ptx);
    cuda::Stream s(*ctx_);
    ptx::ParamPack pack = g.params.pack(args);
    cuda::launch(m.function(g.name), g.geometry, s, pack);
    s.synchronize();
  }
  std::vector<float> randv(size_t n, float sd) {
    std::normal_distribution<float> nd(0.0f, sd);
    std::vector<float> v(n);
    for (float& x : v) x = nd(rng_);
    return v;
  }

  static inline std::shared_ptr<const cuda::Driver> driver_;
  static inline cuda::Context* ctx_ = nullptr;
  std::mt19937 rng_{7};
};

// The attention kernels' RoPE table as the CPU backend computes it (the angle in
// double, then f32): for each position p < n_ctx and pair
// i < n_rot / 2, cos and sin of p · base^(-2i / n_rot), interleaved.
inline std::vector<float> rope_table(uint32_t n_ctx, uint32_t n_rot, double base) {
  std::vector<float> t(size_t(n_ctx) * n_rot);
  for (uint32_t p = 0; p < n_ctx; ++p)
    for (uint32_t i = 0; i < n_rot / 2; ++i) {
      const double theta = double(p) * std::pow(base, -2.0 * i / n_rot);
      t[(size_t(p) * n_rot / 2 + i) * 2] = float(std::cos(theta));
      t[(size_t(p) * n_rot / 2 + i) * 2 + 1] = float(std::sin(theta));
    }
  return t;
}

}  // namespace ptxlm::testing_util
