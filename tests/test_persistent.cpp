// The persistent decoder (--schedule persistent) on emu: one cooperative
// launch walks the chain's op table. Its logits are the graph schedule's
// exactly (the same kernels' code, inline), teacher-forced on the synthetic
// models; under several scheduling seeds with emu's memory-model checking
// (on for every cooperative launch) nothing races or deadlocks and the
// tokens are the same; greedy streams give the graph schedule's tokens, one
// by one while the launch runs, and a cancelled stream stops within a token.
// Real models: SmolLM2's first 3 positions and gemma-3-270m's first 2.
// Paged KV's persistent decoder under seeds (PersistentPaged).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <optional>
#include <string>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_backend.h"
#include "models/synth/synth.h"
#include "tests/real_model_util.h"

using namespace ptxlm;

namespace {

Model synth_model(synth::Arch a, std::vector<uint8_t>& bytes) {
  bytes = synth::model_bytes(synth::preset(a, synth::Size::Tiny));
  return Model::from_file(gguf::File::parse(bytes, std::string("synth-") + synth::arch_name(a)));
}

// The CPU's greedy continuation of a prompt to n tokens.
std::vector<TokenId> cpu_greedy(const Model& m, std::vector<TokenId> ids, size_t n) {
  cpu::CpuBackend cpu(m, 64, KvType::F16, 2);
  cpu.set_path(cpu::CpuPath::Reference);
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

// The persistent schedule's logits against the graph schedule's, bit for bit.
void expect_graph_schedules_logits(synth::Arch arch) {
  std::vector<uint8_t> bytes;
  const Model m = synth_model(arch, bytes);
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
  std::printf("[persistent] %s: %zu ops per token, %zu all-to-all waits (%zu layers), %zu of %zu logits differ "
              "from the graph schedule's\n",
              synth::arch_name(arch), pers.ops_per_token(), pers.all_to_all_waits(), m.layers.size(), differ,
              a.size());
  EXPECT_EQ(pers.launches_per_token(), 1u);
  // A grid-wide wait only where a full vector goes in: at most 4 per layer
  // (QKV, output GEMV, gate/up, down; gemma3's norms after the adds are
  // gathered by one block and broadcast), plus the LM head's and argmax's.
  EXPECT_LE(pers.all_to_all_waits(), 4 * m.layers.size() + 2);
  EXPECT_GE(pers.all_to_all_waits(), 4 * m.layers.size()) << "each layer has at least its four GEMV inputs to gather";
  EXPECT_EQ(graph.all_to_all_waits(), 0u);
  EXPECT_EQ(differ, 0u);
}

TEST_P(Persistent, LogitsAreTheGraphSchedulesExactly) { expect_graph_schedules_logits(GetParam()); }

// mistral3 differs from llama only inside the attention op (its temperature;
// YaRN lives in the host's RoPE table), so the inline op's bit-exact logits
// are what it adds here; phi3 only in its weights (views of fused matrices,
// uploaded each on its own) and its RoPE table, phi4mini in the attention
// op's partial rotary (48 of 64 dims); the other checks above are
// the schedule's, not the architecture's, and stay on the other presets
// (each costs ~15 s on emu).
class PersistentAttentionFeatures : public Persistent {};
TEST_P(PersistentAttentionFeatures, LogitsAreTheGraphSchedulesExactly) { expect_graph_schedules_logits(GetParam()); }
INSTANTIATE_TEST_SUITE_P(Archs, PersistentAttentionFeatures, ::testing::Values(synth::Arch::Mistral3, synth::Arch::Phi3,
                                                                                 synth::Arch::Phi4Mini),
                         [](const auto& info) { return std::string(synth::arch_name(info.param)); });

// Both GEMV paths run inline as they run launched (the default 8-bit
// inputs and --gpu-path reference's f32 ones), each stated in the
// description: the first positions' logits equal the graph schedule's on
// the same path, bit for bit.
TEST_P(Persistent, RunsEitherGemvPathAsTheGraphScheduleDoes) {
  std::vector<uint8_t> bytes;
  const Model m = synth_model(GetParam(), bytes);
  const std::vector<TokenId> ids = {764, 17, 301};
  for (GpuArithmetic path : {GpuArithmetic::Default, GpuArithmetic::Reference}) {
    cuda::CudaBackend graph(m, cuda::Driver::load(), 16, Schedule::Graph, path);
    cuda::CudaBackend pers(m, cuda::Driver::load(), 16, Schedule::Persistent, path);
    const char* inputs = path == GpuArithmetic::Reference ? "f32 GEMV inputs" : "8-bit GEMV inputs";
    EXPECT_NE(pers.description().find(inputs), std::string::npos) << pers.description();
    std::vector<float> a(ids.size() * m.n_vocab), b(a.size());
    graph.eval_batch({ids.data(), ids.size()}, 0, a.data(), uint32_t(ids.size()));
    pers.eval_batch({ids.data(), ids.size()}, 0, b.data(), uint32_t(ids.size()));
    EXPECT_EQ(a, b) << inputs;
  }
}

// Programmatic dependent launches (--gpu-pdl: every op opens with
// griddepcontrol.wait) and weight prefetches (--gpu-prefetch: every GEMV
// opens by prefetching its block's first rows, which emu checks lie in
// device memory), alone and together: the chain and graph schedules compute
// exactly what they compute without them. The persistent schedule prefetches
// too (each GEMV op before its dependency wait), computing the same, and
// refuses --gpu-pdl.
TEST_P(Persistent, ProgrammaticLaunchesAndPrefetchesGiveTheSameLogits) {
  std::vector<uint8_t> bytes;
  const Model m = synth_model(GetParam(), bytes);
  const std::vector<TokenId> ids = {764, 17, 301};
  cuda::CudaBackend plain(m, cuda::Driver::load(), 16, Schedule::Graph);
  std::vector<float> a(ids.size() * m.n_vocab);
  plain.eval_batch({ids.data(), ids.size()}, 0, a.data(), uint32_t(ids.size()));
  for (const cuda::GpuTuning tuning : {cuda::GpuTuning{true, false}, cuda::GpuTuning{false, true}, cuda::GpuTuning{true, true}}) {
    for (Schedule s : {Schedule::Graph, Schedule::Chain}) {
      const std::string what = std::string(schedule_name(s)) + (tuning.pdl ? " pdl" : "") + (tuning.prefetch ? " prefetch" : "");
      cuda::CudaBackend b(m, cuda::Driver::load(), 16, s, GpuArithmetic::Default, nullptr, tuning);
      EXPECT_EQ(b.description().find("launched programmatically") != std::string::npos, tuning.pdl) << b.description();
      EXPECT_EQ(b.description().find("prefetching") != std::string::npos, tuning.prefetch) << b.description();
      std::vector<float> v(a.size());
      b.eval_batch({ids.data(), ids.size()}, 0, v.data(), uint32_t(ids.size()));
      EXPECT_EQ(a, v) << what;
      EXPECT_EQ(b.eval_argmax(ids[0], 3), plain.eval_argmax(ids[0], 3)) << what;
    }
    if (!tuning.pdl) {
      cuda::CudaBackend p(m, cuda::Driver::load(), 16, Schedule::Persistent, GpuArithmetic::Default, nullptr, tuning);
      EXPECT_NE(p.description().find("prefetching their first weights before waiting"), std::string::npos) << p.description();
      std::vector<float> v(a.size());
      p.eval_batch({ids.data(), ids.size()}, 0, v.data(), uint32_t(ids.size()));
      EXPECT_EQ(a, v) << "persistent prefetch";
      EXPECT_EQ(p.eval_argmax(ids[0], 3), plain.eval_argmax(ids[0], 3)) << "persistent prefetch";
      continue;
    }
    try {
      cuda::CudaBackend p(m, cuda::Driver::load(), 16, Schedule::Persistent, GpuArithmetic::Default, nullptr, tuning);
      ADD_FAILURE() << "the persistent schedule took --gpu-pdl";
    } catch (const ModelError& e) {
      EXPECT_NE(std::string(e.what()).find("--gpu-pdl"), std::string::npos) << e.what();
    }
  }
}

// The graph schedule's greedy tokens after a prompt, one eval_argmax each.
std::vector<TokenId> graph_greedy(const Model& m, const std::vector<TokenId>& prompt, size_t n) {
  cuda::CudaBackend g(m, cuda::Driver::load(), 64, Schedule::Graph);
  g.eval_batch({prompt.data(), prompt.size() - 1}, 0, nullptr, 0);
  std::vector<TokenId> out;
  TokenId t = prompt.back();
  for (uint32_t i = 0; i < n; ++i) out.push_back(t = g.eval_argmax(t, uint32_t(prompt.size() - 1 + i)));
  return out;
}

// Up to n tokens of a greedy stream (prompt prefilled but its last token).
std::vector<TokenId> stream_greedy(cuda::CudaBackend& b, const std::vector<TokenId>& prompt, uint32_t n,
                                   std::vector<TokenId> stop = {}) {
  b.eval_batch({prompt.data(), prompt.size() - 1}, 0, nullptr, 0);
  auto s = b.start_greedy(prompt.back(), uint32_t(prompt.size() - 1), n, stop);
  EXPECT_NE(s, nullptr);
  std::vector<TokenId> out;
  while (s) {
    std::optional<TokenId> t = s->next();
    if (!t) break;
    out.push_back(*t);
  }
  return out;
}

const std::vector<TokenId> kPrompt = {764, 17, 301, 52};

// Tokens come out of one launch as they exist; the launch's step count (256)
// is not reached, so 10 tokens are one launch. A stop id ends it early.
TEST_P(Persistent, GreedyStreamGivesTheGraphSchedulesTokens) {
  std::vector<uint8_t> bytes;
  const Model m = synth_model(GetParam(), bytes);
  const std::vector<TokenId> want = graph_greedy(m, kPrompt, 10);
  cuda::CudaBackend b(m, cuda::Driver::load(), 64, Schedule::Persistent);
  const std::vector<TokenId> got = stream_greedy(b, kPrompt, 10);
  EXPECT_EQ(got, want);
  const cuda::CudaBackend::StreamStats st = b.stream_stats();
  std::printf("[persistent] %s: %llu tokens in %llu launch(es), %llu handed out while the launch ran\n",
              synth::arch_name(GetParam()), (unsigned long long)st.tokens, (unsigned long long)st.launches,
              (unsigned long long)st.tokens_while_running);
  EXPECT_EQ(st.launches, 1u);
  EXPECT_GE(st.tokens_while_running, 5u) << "tokens should stream out of the running launch, not arrive at its end";
  // A stop id: the stream ends with it (the 5th token), and the next stream works.
  cuda::CudaBackend c(m, cuda::Driver::load(), 64, Schedule::Persistent);
  const std::vector<TokenId> stopped = stream_greedy(c, kPrompt, 10, {want[4]});
  const auto first = std::find(want.begin(), want.end(), want[4]) - want.begin();
  EXPECT_EQ(stopped, std::vector<TokenId>(want.begin(), want.begin() + first + 1));
  EXPECT_EQ(stream_greedy(c, kPrompt, 3), std::vector<TokenId>(want.begin(), want.begin() + 3));
}

// Destroying a stream (Ctrl-C, a client gone) sets the cancel flag: the device
// produces at most one more token, and the backend is usable at once.
TEST_P(Persistent, CancelStopsWithinOneToken) {
  std::vector<uint8_t> bytes;
  const Model m = synth_model(GetParam(), bytes);
  cuda::CudaBackend b(m, cuda::Driver::load(), 64, Schedule::Persistent);
  b.eval_batch({kPrompt.data(), kPrompt.size() - 1}, 0, nullptr, 0);
  {
    auto s = b.start_greedy(kPrompt.back(), uint32_t(kPrompt.size() - 1), 40, {});
    ASSERT_NE(s, nullptr);
    for (int i = 0; i < 3; ++i) ASSERT_TRUE(s->next().has_value());
  }
  const cuda::CudaBackend::StreamStats st = b.stream_stats();
  std::printf("[persistent] %s: cancelled with %u tokens produced, %u when the device stopped (of 40 asked)\n",
              synth::arch_name(GetParam()), st.produced_at_cancel, st.produced_after_cancel);
  EXPECT_TRUE(st.cancelled);
  EXPECT_GE(st.produced_at_cancel, 3u);
  EXPECT_LE(st.produced_after_cancel, st.produced_at_cancel + 1);
  EXPECT_LT(st.produced_after_cancel, 40u);
  // The cache up to the prompt is intact: a new stream gives the same tokens.
  const std::vector<TokenId> want = graph_greedy(m, kPrompt, 4);
  EXPECT_EQ(stream_greedy(b, kPrompt, 4), want);
}

// Scheduling seeds change how the blocks interleave; with memory-model
// checking on (every cooperative launch) no race or deadlock may be found,
// and the tokens may not change.
TEST_P(Persistent, TwentySeedsSameTokensNoRace) {
  std::vector<uint8_t> bytes;
  const Model m = synth_model(GetParam(), bytes);
  const std::vector<TokenId> want = graph_greedy(m, kPrompt, 2);
  cuda::CudaBackend b(m, cuda::Driver::load(), 64, Schedule::Persistent);
  b.eval_batch({kPrompt.data(), kPrompt.size() - 1}, 0, nullptr, 0);   // once: each stream rewrites only its own positions
  for (int seed = 1; seed <= 20; ++seed) {
    setenv("PTXLM_EMU_SEED", std::to_string(seed).c_str(), 1);
    auto s = b.start_greedy(kPrompt.back(), uint32_t(kPrompt.size() - 1), 2, {});
    ASSERT_NE(s, nullptr);
    std::vector<TokenId> got;
    while (std::optional<TokenId> t = s->next()) got.push_back(*t);
    EXPECT_EQ(got, want) << "seed " << seed;
  }
}

// Paged KV (the default; not --gpu-contiguous-kv): paged_rope and paged_attention inline, each
// virtual block waiting only for the blocks it reads. Under ten scheduling
// seeds with memory-model checking, nothing races or deadlocks and the
// tokens are the paged graph schedule's (test_cuda_paged checks the logits
// bit for bit and that a dropped wait is reported as a race).
TEST(PersistentPaged, TenSeedsSameTokensNoRace) {
  for (synth::Arch arch : {synth::Arch::Llama, synth::Arch::Gemma3}) {
    std::vector<uint8_t> bytes;
    const Model m = synth_model(arch, bytes);
    cuda::GpuTuning paged;
    paged.paged_kv = true;
    cuda::CudaBackend g(m, cuda::Driver::load(), 64, Schedule::Graph, GpuArithmetic::Default, nullptr, paged);
    g.eval_batch({kPrompt.data(), kPrompt.size() - 1}, 0, nullptr, 0);
    const TokenId t0 = g.eval_argmax(kPrompt.back(), uint32_t(kPrompt.size() - 1));
    const std::vector<TokenId> want = {t0, g.eval_argmax(t0, uint32_t(kPrompt.size()))};
    cuda::CudaBackend b(m, cuda::Driver::load(), 64, Schedule::Persistent, GpuArithmetic::Default, nullptr, paged);
    b.eval_batch({kPrompt.data(), kPrompt.size() - 1}, 0, nullptr, 0);
    for (int seed = 1; seed <= 10; ++seed) {
      setenv("PTXLM_EMU_SEED", std::to_string(seed).c_str(), 1);
      auto s = b.start_greedy(kPrompt.back(), uint32_t(kPrompt.size() - 1), 2, {});
      ASSERT_NE(s, nullptr);
      std::vector<TokenId> got;
      while (std::optional<TokenId> t = s->next()) got.push_back(*t);
      EXPECT_EQ(got, want) << synth::arch_name(arch) << " seed " << seed;
    }
    unsetenv("PTXLM_EMU_SEED");
  }
}

// The negative control of the dependency table: without the attention
// block's waits on the QKV blocks that write its kv head's K and V rows
// (this token's, which the split holding the token rotates and appends), it
// reads them while they are written, and emu's race checker must say so.
// Shows the seed tests above can fail.
TEST(PersistentNegative, DroppedKvHeadWaitIsReportedAsARace) {
  std::vector<uint8_t> bytes;
  const Model m = synth_model(synth::Arch::Llama, bytes);
  cuda::CudaBackend b(m, cuda::Driver::load(), 64, Schedule::Persistent);
  ASSERT_EQ(b.drop_dependency_for_test("attention_", 1), m.layers.size());   // k's rows, then v's
  ASSERT_EQ(b.drop_dependency_for_test("attention_", 1), m.layers.size());
  std::vector<float> logits(kPrompt.size() * m.n_vocab);
  ::testing::internal::CaptureStderr();
  std::string error;
  try {
    b.eval_batch({kPrompt.data(), kPrompt.size()}, 0, logits.data(), uint32_t(kPrompt.size()));
  } catch (const std::exception& e) {
    error = e.what();
  }
  const std::string log = ::testing::internal::GetCapturedStderr();
  std::printf("[persistent] dropped kv-head wait: %s\n%s", error.c_str(), log.c_str());
  EXPECT_NE(log.find("race: kernel 'persistent"), std::string::npos) << log;
  EXPECT_NE(error, "") << "the race must fail the launch";
}

// Real models: the first positions of a prompt, the persistent decoder's
// logits against the graph schedule's (which test_cuda_backend compares with
// the CPU), bit for bit.
void check_real_model(const char* file, uint32_t n) {
  const testing_util::RealPrompt r = testing_util::real_model_prompt(file);
  const Model& m = r.model;
  const std::vector<TokenId>& ids = r.ids;
  ASSERT_GE(ids.size(), n);
  cuda::CudaBackend graph(m, cuda::Driver::load(), 16, Schedule::Graph);
  cuda::CudaBackend pers(m, cuda::Driver::load(), 16, Schedule::Persistent);
  const size_t nv = m.n_vocab;
  std::vector<float> a(n * nv), b(n * nv);
  graph.eval_batch({ids.data(), n}, 0, a.data(), n);
  pers.eval_batch({ids.data(), n}, 0, b.data(), n);
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); ++i) differ += a[i] != b[i];
  std::printf("[persistent] %s: %zu ops per token, %u positions, %zu of %zu logits differ from the graph schedule's\n",
              file, pers.ops_per_token(), n, differ, a.size());
  EXPECT_EQ(differ, 0u);
}

TEST(PersistentReal, SmolLM2FirstPositions) { check_real_model("SmolLM2-135M-Instruct.Q4_1.gguf", 3); }
TEST(PersistentReal, Gemma3FirstPositions) { check_real_model("gemma-3-270m-q4_k_m.gguf", 2); }

INSTANTIATE_TEST_SUITE_P(Archs, Persistent,
                         ::testing::Values(synth::Arch::Llama, synth::Arch::Qwen2, synth::Arch::Gemma3,
                                           synth::Arch::Qwen3, synth::Arch::Llama3),
                         [](const auto& info) { return std::string(synth::arch_name(info.param)); });

}  // namespace
