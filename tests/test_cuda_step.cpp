// The GPU's batch step (issue 22, CudaBackend::step) on emu, driven by
// cpu::Batcher as the server drives it: three sequences of a tiny synthetic
// model at different depths, one sharing another's first page and then
// rewriting into it (a copy-on-write on the device), prompt chunks and decode
// tokens mixed in one step, steps of 1 to 16 rows, greedy rows that copy
// back only their argmax beside a row that copies its logits. Every logit
// row is bit for bit what the single-sequence GPU path (the same model and
// arithmetic, paged KV, one token per launch) gives that sequence alone,
// and every greedy row's id that path's argmax. On the reference
// arithmetic (f32 GEMV inputs, one column per launch) the rows are also the
// CPU reference's within test_cuda_backend's tolerance; on the default one
// (8-bit inputs, T columns per launch) the CPU quantized path's argmax where
// its top-2 margin is wide (end to end the two quantize inputs that differ
// by float reordering, and one input rounded to the other side of a step
// moves a tiny random model's logits by up to ~0.6: the per-op check is
// test_cuda_ops'). Negative control (the step API directly): a wrong
// page-table entry. Refusals: no pool, the persistent schedule, too many
// tokens, a table short of the position or past the pool.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/cpu/batcher.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_backend.h"
#include "models/synth/synth.h"
#include "tests/forwarding_step.h"

using namespace ptxlm;

namespace {

constexpr uint32_t kCtx = 64;

// test_cuda_backend's tolerance: the GPU reference path against the CPU
// reference, max |logit diff| (1.25x its largest measured, issue 19).
constexpr double kCpuTolerance = 5e-3;
// The default path's argmax is compared with the CPU quantized path's where
// the CPU's top-2 margin exceeds this: above the largest end-to-end
// difference measured between the two (2026-11-28, emu, this scenario:
// llama 0.243, qwen2 0.311, gemma3 0.647) times 1.25.
constexpr double kQuantizedMargin = 0.81;

Model tiny(synth::Arch a, std::vector<uint8_t>& bytes) {
  bytes = synth::model_bytes(synth::preset(a, synth::Size::Tiny));
  return Model::from_file(gguf::File::parse(bytes, std::string("synth-") + synth::arch_name(a)));
}

double max_abs_diff(const float* a, const float* b, size_t n) {
  double d = 0;
  for (size_t i = 0; i < n; ++i) d = std::max(d, std::fabs(double(a[i]) - b[i]));
  return d;
}

std::unique_ptr<cuda::CudaBackend> gpu_pool(const Model& m, KvPages pages, Schedule s = Schedule::Graph,
                                            GpuArithmetic path = GpuArithmetic::Default) {
  return std::make_unique<cuda::CudaBackend>(m, cuda::Driver::load(), kCtx, s, path, nullptr, cuda::GpuTuning{}, pages);
}

// The GPU's StepBackend, its steps' rows and sequences and its page copies counted.
class Counting final : public test::ForwardingStep {
public:
  using ForwardingStep::ForwardingStep;
  void step(std::span<const SeqStep> batch) override {
    uint32_t n = 0;
    for (const SeqStep& s : batch) n += uint32_t(s.tokens.size());
    most_rows = std::max(most_rows, n);
    most_seqs = std::max(most_seqs, uint32_t(batch.size()));
    ForwardingStep::step(batch);
  }
  void copy_page(uint32_t from, uint32_t to, uint32_t positions) override {
    ++copies;
    ForwardingStep::copy_page(from, to, positions);
  }
  uint32_t copies = 0, most_rows = 0, most_seqs = 0;
};

// A sequence's tokens and the logits the batcher wrote for each of them
// (positions from `first`).
struct Seq {
  explicit Seq(std::unique_ptr<Backend> b) : be(std::move(b)) {}
  std::unique_ptr<Backend> be;
  std::vector<TokenId> tokens;
  uint32_t first = 0;
  std::vector<float> logits;
  std::map<uint32_t, TokenId> greedy;   // positions queued for their argmax alone, and the id the step wrote
};

void mixed_batches(synth::Arch arch_id, GpuArithmetic path) {
  const char* arch = synth::arch_name(arch_id);
  const bool ref_path = path == GpuArithmetic::Reference;
  std::vector<uint8_t> bytes;
  const Model m = tiny(arch_id, bytes);
  const size_t nv = m.n_vocab;
  Counting* gpu = nullptr;
  cpu::Batcher b(
      [&](KvPages pages) {
        auto c = std::make_unique<Counting>(gpu_pool(m, pages, Schedule::Graph, path));
        gpu = c.get();
        return c;
      },
      kCtx, 3, 0, 16, 4 * kCtx);
  ASSERT_EQ(b.backend().max_step_tokens(), cuda::CudaBackend::kMaxStep);

  auto ids = [&](uint32_t seed, uint32_t n) {
    std::vector<TokenId> v(n);
    for (uint32_t i = 0; i < n; ++i) v[i] = TokenId((seed * 7919u + i * 104729u) % nv);
    return v;
  };
  // Queues `t` at pos (logits for each token) on s.
  auto queue = [&](Seq& s, std::vector<TokenId> t, uint32_t pos) {
    if (s.tokens.empty()) s.first = pos;
    s.tokens.resize(pos);
    s.tokens.insert(s.tokens.end(), t.begin(), t.end());
    s.logits.resize((s.tokens.size() - s.first) * nv);
    s.be->eval_batch(t, pos, s.logits.data() + (pos - s.first) * nv, uint32_t(t.size()));
  };
  // Queues `t` at pos for its argmax alone (no logits copied back).
  auto queue_greedy = [&](Seq& s, TokenId t, uint32_t pos) {
    s.tokens.resize(pos);
    s.tokens.push_back(t);
    s.logits.resize((s.tokens.size() - s.first) * nv);
    TokenId& slot = s.greedy[pos] = -1;
    s.be->eval_argmax_into(t, pos, &slot);
  };
  auto run = [&] {
    while (b.step()) {}
  };
  Seq a{b.open()}, bb{b.open()}, c{b.open()};
  queue(a, ids(1, 20), 0);   // a prompt of 20: steps of 16 and 4
  run();
  // b reuses a's first page, then rewrites from position 10: a copy of the
  // shared page's first 10 positions before the write.
  const std::vector<TokenId> a16(a.tokens.begin(), a.tokens.begin() + 16);
  ASSERT_EQ(bb.be->reuse_prefix(a16, 0), 16u);
  bb.tokens = a16;
  bb.first = 10;
  std::vector<TokenId> own = ids(2, 14);
  bb.tokens.resize(10);
  bb.tokens.insert(bb.tokens.end(), own.begin(), own.end());
  bb.logits.resize(14 * nv);
  bb.be->eval_batch(own, 10, bb.logits.data(), 14);
  queue(c, ids(3, 5), 0);
  queue(a, ids(4, 1), 20);   // a decode token beside two prompt chunks
  run();
  for (uint32_t r = 0; r < 3; ++r)   // decode steps of three rows
    for (Seq* s : {&a, &bb, &c}) queue(*s, ids(10 + r, 1), uint32_t(s->tokens.size()));
  run();
  for (uint32_t r = 0; r < 2; ++r) {   // greedy decode steps: two argmax rows beside a logits row
    queue_greedy(a, ids(20 + r, 1)[0], uint32_t(a.tokens.size()));
    queue(bb, ids(20 + r, 1), uint32_t(bb.tokens.size()));
    queue_greedy(c, ids(30 + r, 1)[0], uint32_t(c.tokens.size()));
    run();
  }
  EXPECT_GE(gpu->copies, 1u) << "no page was copied on write";
  EXPECT_EQ(gpu->most_rows, 16u);
  EXPECT_EQ(gpu->most_seqs, 3u);

  // Each sequence alone: the single-sequence GPU path, and the CPU path of
  // the same arithmetic.
  cuda::CudaBackend single(m, cuda::Driver::load(), kCtx, Schedule::Graph, path, nullptr,
                           cuda::GpuTuning{false, false, true});
  cpu::CpuBackend cpu(m, kCtx, KvType::F16, 2);
  if (ref_path) cpu.set_path(cpu::CpuPath::Reference);
  size_t rows = 0, unequal = 0, checked = 0, argmax_diff = 0, greedy_rows = 0, greedy_wrong = 0;
  double d_cpu = 0;
  for (Seq* s : {&a, &bb, &c}) {
    const uint32_t n = uint32_t(s->tokens.size());
    std::vector<float> one(n * nv), ref(n * nv);
    single.eval_batch(s->tokens, 0, one.data(), n);
    cpu.eval_batch(s->tokens, 0, ref.data(), n);
    for (uint32_t i = s->first; i < n; ++i) {
      if (auto g = s->greedy.find(i); g != s->greedy.end()) {   // the alone path's argmax (ties: the lowest id)
        const float* alone = one.data() + i * nv;
        ++greedy_rows;
        greedy_wrong += g->second != TokenId(std::max_element(alone, alone + nv) - alone);
        continue;
      }
      ++rows;
      const float *got = s->logits.data() + (i - s->first) * nv, *r = ref.data() + i * nv;
      unequal += !std::equal(got, got + nv, one.data() + i * nv);
      d_cpu = std::max(d_cpu, max_abs_diff(got, r, nv));
      std::vector<float> top(r, r + nv);
      std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
      if (top[0] - top[1] > (ref_path ? 2 * kCpuTolerance : kQuantizedMargin)) {
        ++checked;
        argmax_diff += std::max_element(got, got + nv) - got != std::max_element(r, r + nv) - r;
      }
    }
  }
  std::printf("[cuda-step] %s, %s path: %zu logit rows, %zu not bit-equal to the sequence alone; max |diff| to the CPU's "
              "%.3g%s, argmax differs at %zu of %zu rows with a wide margin; %zu of %zu greedy rows' device argmax not "
              "the alone logits' argmax; %u page copies, steps of up to %u rows from %u sequences\n",
              arch, ref_path ? "reference" : "default", rows, unequal, d_cpu,
              ref_path ? (" (tolerance " + std::to_string(kCpuTolerance) + ")").c_str() : "", argmax_diff, checked,
              greedy_wrong, greedy_rows, gpu->copies, gpu->most_rows, gpu->most_seqs);
  EXPECT_EQ(rows, size_t(20 + 1 + 3) + (14 + 3 + 2) + (5 + 3));
  EXPECT_EQ(greedy_rows, 4u);
  EXPECT_EQ(greedy_wrong, 0u);
  EXPECT_EQ(unequal, 0u);
  if (ref_path) {
    EXPECT_LE(d_cpu, kCpuTolerance);
  }
  EXPECT_GE(checked, rows / 2);
  EXPECT_EQ(argmax_diff, 0u);
}

class CudaStep : public ::testing::TestWithParam<synth::Arch> {};

TEST_P(CudaStep, MixedBatchesAreEachSequenceAlone) { mixed_batches(GetParam(), GpuArithmetic::Default); }

INSTANTIATE_TEST_SUITE_P(Archs, CudaStep, ::testing::Values(synth::Arch::Llama, synth::Arch::Gemma3),
                         [](const auto& info) { return std::string(synth::arch_name(info.param)); });

// The reference arithmetic: one GEMV launch per row, against the CPU reference.
TEST(CudaStepReference, MixedBatchesAreEachSequenceAloneAndTheCpus) {
  mixed_batches(synth::Arch::Llama, GpuArithmetic::Reference);
}

// The step API directly: a sequence on pages {5, 2} (not the pool's first),
// its prompt in chunks of 16 and 4, then a decode token, bit-equal to the
// single-sequence path; the same token with entry 1 pointing at page 7
// (never written) is far off; a chunk asking for its last rows' logits only
// (the LM head over those rows) beside a row asking for none. Refusals.
TEST(CudaStepApi, PagesAnywhereAndAWrongEntry) {
  std::vector<uint8_t> bytes;
  const Model m = tiny(synth::Arch::Llama, bytes);
  const size_t nv = m.n_vocab;
  auto gpu = gpu_pool(m, KvPages{8, 16});
  std::vector<TokenId> t(21);
  for (uint32_t i = 0; i < t.size(); ++i) t[i] = TokenId((i * 7u + 3u) % nv);
  const std::vector<uint32_t> table = {5, 2}, wrong = {5, 7};
  std::vector<float> got(nv), bad(nv), one(21 * nv);
  const SeqStep first{table, 0, {t.data(), 16}, nullptr, 0};
  gpu->step({&first, 1});
  const SeqStep rest{table, 16, {t.data() + 16, 4}, nullptr, 0};
  gpu->step({&rest, 1});
  const SeqStep next{table, 20, {t.data() + 20, 1}, got.data(), 1};
  gpu->step({&next, 1});
  const SeqStep off{wrong, 20, {t.data() + 20, 1}, bad.data(), 1};
  gpu->step({&off, 1});
  cuda::CudaBackend single(m, cuda::Driver::load(), kCtx, Schedule::Graph, GpuArithmetic::Default, nullptr,
                           cuda::GpuTuning{false, false, true});
  single.eval_batch(t, 0, one.data(), 21);
  const double d_bad = max_abs_diff(bad.data(), got.data(), nv);
  std::printf("[cuda-step] pages {5, 2}: %s the sequence alone; with entry 1 -> page 7: %.3g off\n",
              std::equal(got.begin(), got.end(), one.begin() + 20 * long(nv)) ? "bit-equal to" : "NOT equal to", d_bad);
  EXPECT_TRUE(std::equal(got.begin(), got.end(), one.begin() + 20 * long(nv)));
  EXPECT_GE(d_bad, 2 * kQuantizedMargin) << "a wrong page-table entry passed";
  // The LM head over the rows that want logits only: the same prompt on
  // pages {1, 3} in one chunk of 16 asking for its last 3 rows' logits, beside
  // a decode token of the first sequence asking for none (its next row
  // evaluated, not read).
  const std::vector<uint32_t> other = {1, 3};
  std::vector<float> last3(3 * nv);
  const SeqStep chunk{other, 0, {t.data(), 15}, last3.data(), 3};
  const SeqStep quiet{table, 21, {t.data() + 3, 1}, nullptr, 0};
  const SeqStep both[] = {quiet, chunk};
  gpu->step(both);
  const bool head_rows = std::equal(last3.begin(), last3.end(), one.begin() + 12 * long(nv));
  std::printf("[cuda-step] a chunk of 15 asking for its last 3 rows' logits beside a row asking for none: %s\n",
              head_rows ? "bit-equal to the sequence alone" : "NOT equal to the sequence alone");
  EXPECT_TRUE(head_rows);

  // Refusals.
  std::vector<TokenId> many(17, 1);
  const SeqStep too_many{table, 0, many, nullptr, 0};
  EXPECT_THROW(gpu->step({&too_many, 1}), std::invalid_argument);
  const std::vector<uint32_t> short_table = {5};
  const SeqStep short_step{short_table, 20, {t.data() + 20, 1}, nullptr, 0};
  EXPECT_THROW(gpu->step({&short_step, 1}), std::invalid_argument);
  const std::vector<uint32_t> past = {5, 8};
  const SeqStep past_step{past, 20, {t.data() + 20, 1}, nullptr, 0};
  EXPECT_THROW(gpu->step({&past_step, 1}), std::invalid_argument);
  EXPECT_THROW(gpu->copy_page(1, 8, 4), std::invalid_argument);
  EXPECT_THROW(single.step({&next, 1}), std::logic_error);   // no pool
  EXPECT_THROW(cuda::CudaBackend(m, cuda::Driver::load(), kCtx, Schedule::Graph, GpuArithmetic::Default, nullptr,
                                 cuda::GpuTuning{}, KvPages{3, 16}),
               std::invalid_argument);   // smaller than one context (4 pages)
  auto persistent = gpu_pool(m, KvPages{8, 16}, Schedule::Persistent);
  EXPECT_THROW(persistent->step({&first, 1}), std::logic_error);
  // Step factories (serve and bench --parallel) refuse what cannot step
  // several sequences: the persistent schedule and a contiguous KV cache
  // (--gpu-contiguous-kv); the default (graph, paged) is taken.
  EXPECT_THROW(check_step_options(Schedule::Persistent, false), std::invalid_argument);
  EXPECT_THROW(check_step_options(Schedule::Graph, true), std::invalid_argument);
  EXPECT_NO_THROW(check_step_options(Schedule::Graph, false));
  const cuda::CudaBackend contiguous(m, cuda::Driver::load(), kCtx, Schedule::Graph);
  EXPECT_THROW(make_step_backend(m, contiguous, BackendOptions{}), std::invalid_argument);
  EXPECT_NO_THROW(make_step_backend(m, single, BackendOptions{}));
}

}  // namespace
