// A gtest fixture for kernels run through the engine's real CUDA path on
// emu (engine/cuda -> dlopen -> emu's libcuda.so.1, selected by
// PTXLM_LIBCUDA, which ctest sets): one context per suite, uploads,
// downloads, launches with the generator's own geometry.
#pragma once

#include <gtest/gtest.h>

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

}  // namespace ptxlm::testing_util
