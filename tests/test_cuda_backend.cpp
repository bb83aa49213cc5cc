// The GPU decode path (engine/cuda/cuda_backend) end to end on emu, on its
// reference arithmetic (`--gpu-path reference`: f32 GEMV inputs) against the
// CPU reference (f16 KV cache, like the GPU's). Every op but the GEMVs is the
// default path's too, so this is their sharp end-to-end check (the default
// path's 8-bit-input GEMVs: test_cuda_ops, op by op). Teacher-forced on the
// CPU's own 32-token greedy continuation of a prompt, the logits agree within
// a tolerance at every position and the argmax agrees wherever the CPU's
// top-2 margin exceeds twice that tolerance (at least 90% of positions). A
// corrupted Q4_K sub-block scale in one matrix makes the comparison fail.
// Real models: the first positions of a prompt, the same way.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_backend.h"
#include "models/synth/synth.h"
#include "tests/real_model_util.h"

using namespace ptxlm;

namespace {

struct Comparison {
  double max_diff = 0;      // over every logit of every position
  size_t positions = 0, checked = 0, argmax_mismatches = 0;
};

// Teacher-forced logits of both backends over `ids`, one token at a time.
Comparison compare(Backend& cpu, Backend& gpu, const std::vector<TokenId>& ids, double tol,
                   const std::vector<float>* cpu_logits = nullptr) {
  const size_t nv = cpu.n_vocab();
  std::vector<float> a(nv), b(nv);
  Comparison c;
  for (uint32_t i = 0; i < ids.size(); ++i) {
    if (cpu_logits) std::copy_n(cpu_logits->data() + i * nv, nv, a.data());
    else cpu.eval(ids[i], i, a.data());
    gpu.eval(ids[i], i, b.data());
    double md = 0;
    for (size_t t = 0; t < nv; ++t) md = std::max(md, std::fabs(double(a[t]) - b[t]));
    c.max_diff = std::max(c.max_diff, md);
    std::vector<float> sorted = a;
    std::partial_sort(sorted.begin(), sorted.begin() + 2, sorted.end(), std::greater<float>());
    ++c.positions;
    if (sorted[0] - sorted[1] > 2 * tol) {
      ++c.checked;
      const auto am = std::max_element(a.begin(), a.end()) - a.begin(), bm = std::max_element(b.begin(), b.end()) - b.begin();
      if (am != bm) ++c.argmax_mismatches;
    }
  }
  return c;
}

// The CPU's greedy continuation of `prompt` to `n` tokens, and its logits.
std::vector<TokenId> greedy(Backend& cpu, std::vector<TokenId> ids, size_t n, std::vector<float>* logits) {
  const size_t nv = cpu.n_vocab();
  logits->clear();
  std::vector<float> l(nv);
  for (uint32_t i = 0; i < n; ++i) {
    cpu.eval(ids[i], i, l.data());
    logits->insert(logits->end(), l.begin(), l.end());
    if (i + 1 == ids.size() && ids.size() < n)
      ids.push_back(TokenId(std::max_element(l.begin(), l.end()) - l.begin()));
  }
  return ids;
}

// The GPU path against the CPU reference, max |logit diff|: 1.25 x the largest
// maximum measured (issue 19, 2026-11-25). Both sides are the same on every
// CPU Isa (emu and the reference path are plain C++), so one measurement
// holds for all. Measured: synthetic llama 1.09e-3 (1.06e-3 in emu's
// hardware-variance mode), qwen2 9.82e-4, gemma3 4.00e-3; SmolLM2 2.81e-3,
// gemma-3-270m 1.14e-3. Both caches are f16: a K or V value whose f32
// results differ in the last bits can round to neighbouring halves, which
// moves logits by ~1e-3. Negative control (a corrupted Q4_K scale, below):
// llama 0.117, qwen2 0.249, gemma3 0.382, each at least twice the bound.
// Issue 25 (2026-11-27): qwen3 8.35e-4, llama3 1.12e-3, mistral3 2.03e-3,
// phi3 1.06e-4 (and at a context of 1024, its long factors, 1.06e-4; the
// short factors' run 5.92 off); controls 0.117, 0.093, 0.196 and 0.178;
// phi4mini (partial rotary, 2026-11-28) 4.22e-4, control 0.247, and the
// device rotating the whole head 9.49 off. (mistral3's YaRN and temperature move
// llama.cpp's logits by 9.7 and 0.93 when left out: a device path without
// either could not pass.)
constexpr double kTolerance = 5e-3;
constexpr GpuArithmetic kRef = GpuArithmetic::Reference;

class CudaBackendSynth : public ::testing::TestWithParam<synth::Arch> {};

TEST_P(CudaBackendSynth, TeacherForcedLogitsMatchTheCpu) {
  std::vector<uint8_t> bytes = synth::model_bytes(synth::preset(GetParam(), synth::Size::Tiny));
  Model m = Model::from_file(gguf::File::parse(bytes, std::string("synth-") + synth::arch_name(GetParam())));
  cpu::CpuBackend cpu(m, 64, KvType::F16, 2);
  cpu.set_path(cpu::CpuPath::Reference);   // what the GPU path is checked against
  std::vector<float> ref;
  const std::vector<TokenId> ids = greedy(cpu, {764, 17, 301, 52}, 36, &ref);
  ASSERT_EQ(ids.size(), 36u);

  cuda::CudaBackend gpu(m, cuda::Driver::load(), 64, Schedule::Default, kRef);
  EXPECT_EQ(gpu.n_ctx(), 64u);
  const double tol = kTolerance;
  const Comparison c = compare(cpu, gpu, ids, tol, &ref);
  std::printf("[cuda-backend] %s: %zu launches/token, max |logit diff| %.2e (tolerance %.1e), %zu/%zu positions checked, "
              "%zu argmax mismatches\n", synth::arch_name(GetParam()), gpu.launches_per_token(), c.max_diff, tol,
              c.checked, c.positions, c.argmax_mismatches);
  EXPECT_LE(c.max_diff, tol);
  EXPECT_GE(c.checked * 10, c.positions * 9);
  EXPECT_EQ(c.argmax_mismatches, 0u);

  // Greedy decoding on the device: only the argmax comes back, and it is the
  // CPU's wherever the CPU's top-2 margin is clear (the greedy sequence's
  // next token).
  cuda::CudaBackend greedy_gpu(m, cuda::Driver::load(), 64, Schedule::Default, kRef);
  const size_t nv = m.n_vocab;
  size_t compared = 0;
  for (uint32_t i = 0; i < ids.size(); ++i) {
    const TokenId got = greedy_gpu.eval_argmax(ids[i], i);
    std::vector<float> row(ref.begin() + i * nv, ref.begin() + (i + 1) * nv);
    const TokenId want = TokenId(std::max_element(row.begin(), row.end()) - row.begin());
    std::partial_sort(row.begin(), row.begin() + 2, row.end(), std::greater<float>());
    if (row[0] - row[1] <= 2 * tol) continue;
    ++compared;
    EXPECT_EQ(got, want) << "position " << i << ": device argmax vs the CPU's";
  }
  EXPECT_GE(compared * 10, ids.size() * 9);

  // Batches (queued whole, one synchronisation each) give exactly the logits
  // of one-by-one evaluation: chunks of 13, 13 and 10 tokens, all logits.
  cuda::CudaBackend one(m, cuda::Driver::load(), 64), batched(m, cuda::Driver::load(), 64);   // the default path
  std::vector<float> single(ids.size() * nv), batch(ids.size() * nv);
  for (uint32_t i = 0; i < ids.size(); ++i) one.eval(ids[i], i, single.data() + i * nv);
  for (uint32_t i = 0; i < ids.size(); i += 13) {
    const uint32_t k = std::min<uint32_t>(13, uint32_t(ids.size()) - i);
    batched.eval_batch({ids.data() + i, k}, i, batch.data() + i * nv, k);
  }
  EXPECT_EQ(batch, single) << "batched and one-by-one logits differ";

  // Negative control: one Q4_K sub-block scale of one matrix, 9 steps off.
  const Weight* victim = nullptr;
  for (const LayerDesc& l : m.layers)
    for (const Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down})
      if (!victim && w->type == gguf::GgmlType::Q4_K) victim = w;
  ASSERT_NE(victim, nullptr) << "no Q4_K matrix in the synthetic model";
  uint8_t* scale = const_cast<uint8_t*>(victim->data) + 4 + 1;   // row 0, block 0, scales[1]
  const uint8_t saved = *scale;
  *scale = uint8_t((saved & 0xC0) | (((saved & 63) + 9) & 63));
  cuda::CudaBackend broken(m, cuda::Driver::load(), 64, Schedule::Default, kRef);
  *scale = saved;
  const Comparison bad = compare(cpu, broken, ids, tol, &ref);
  std::printf("[cuda-backend] %s with a corrupted scale in %s: max |logit diff| %.2e\n", synth::arch_name(GetParam()),
              victim->name().c_str(), bad.max_diff);
  EXPECT_GE(bad.max_diff, 2 * tol) << "a corrupted scale in " << victim->name() << " is within twice the tolerance";
}

INSTANTIATE_TEST_SUITE_P(Archs, CudaBackendSynth,
                         ::testing::Values(synth::Arch::Llama, synth::Arch::Qwen2, synth::Arch::Gemma3,
                                           synth::Arch::Qwen3, synth::Arch::Llama3, synth::Arch::Mistral3,
                                           synth::Arch::Phi3, synth::Arch::Phi4Mini),
                         [](const auto& info) { return std::string(synth::arch_name(info.param)); });

// phi4mini's partial rotary (48 of 64 dims): the device rotating the whole
// head instead (the model description's n_rot set to head_dim after the CPU
// took its rates) is the negative control, far off the CPU's logits.
TEST(CudaBackendPhi4Mini, WholeHeadRotationIsFarOffThePartialOne) {
  std::vector<uint8_t> bytes = synth::model_bytes(synth::preset(synth::Arch::Phi4Mini, synth::Size::Tiny));
  Model m = Model::from_file(gguf::File::parse(bytes, "synth-phi4mini"));
  ASSERT_LT(m.n_rot, m.head_dim);
  cpu::CpuBackend cpu(m, 64, KvType::F16, 2);
  cpu.set_path(cpu::CpuPath::Reference);
  std::vector<float> ref;
  const std::vector<TokenId> ids = greedy(cpu, {764, 17, 301, 52}, 12, &ref);
  m.n_rot = m.head_dim;
  cuda::CudaBackend whole(m, cuda::Driver::load(), 64, Schedule::Default, kRef);
  const Comparison off = compare(cpu, whole, ids, kTolerance, &ref);
  std::printf("[cuda-backend] phi4mini with the whole head rotated on the device: %.2e off (%.0f x the tolerance)\n",
              off.max_diff, off.max_diff / kTolerance);
  EXPECT_GE(off.max_diff, 2 * kTolerance);
}

// phi3 runs above at a context of 64, under its original 512: LongRoPE's
// short factors. Past it (1024) the device's RoPE table must carry the long
// ones, as the CPU's rates do; the short factors' device run (context 64) is
// the negative control, far off the same CPU logits.
TEST(CudaBackendPhi3, LongRopeFactorsPastTheOriginalContext) {
  std::vector<uint8_t> bytes = synth::model_bytes(synth::preset(synth::Arch::Phi3, synth::Size::Tiny));
  Model m = Model::from_file(gguf::File::parse(bytes, "synth-phi3"));
  ASSERT_LT(m.hp.rope_orig_ctx, 1024u);
  cpu::CpuBackend cpu(m, 1024, KvType::F16, 2);
  cpu.set_path(cpu::CpuPath::Reference);
  std::vector<float> ref;
  const std::vector<TokenId> ids = greedy(cpu, {764, 17, 301, 52}, 12, &ref);
  cuda::CudaBackend gpu(m, cuda::Driver::load(), 1024, Schedule::Default, kRef);
  const Comparison c = compare(cpu, gpu, ids, kTolerance, &ref);
  cuda::CudaBackend short_gpu(m, cuda::Driver::load(), 64, Schedule::Default, kRef);
  const Comparison off = compare(cpu, short_gpu, ids, kTolerance, &ref);
  std::printf("[cuda-backend] phi3 at a context of 1024 (long factors): max |logit diff| %.2e (tolerance %.1e); "
              "the device at 64 (short factors) %.2e off\n", c.max_diff, kTolerance, off.max_diff);
  EXPECT_LE(c.max_diff, kTolerance);
  EXPECT_EQ(c.argmax_mismatches, 0u);
  EXPECT_GE(off.max_diff, 2 * kTolerance);
}

// The first `n` positions of a prompt on a real model (emu runs a few
// seconds per token of these).
void check_real_model(const char* file, uint32_t n) {
  const testing_util::RealPrompt r = testing_util::real_model_prompt(file);
  const Model& m = r.model;
  const std::vector<TokenId>& ids = r.ids;
  ASSERT_GE(ids.size(), n);
  cpu::CpuBackend cpu(m, 16, KvType::F16, 2);
  cpu.set_path(cpu::CpuPath::Reference);
  cuda::CudaBackend gpu(m, cuda::Driver::load(), 16, Schedule::Default, kRef);
  const double tol = kTolerance;
  const Comparison c = compare(cpu, gpu, {ids.begin(), ids.begin() + n}, tol);
  std::printf("[cuda-backend] %s: %zu launches/token, max |logit diff| %.2e over %u positions (tolerance %.1e)\n", file,
              gpu.launches_per_token(), c.max_diff, n, tol);
  EXPECT_LE(c.max_diff, tol);
  EXPECT_EQ(c.argmax_mismatches, 0u);
}

TEST(CudaBackendReal, SmolLM2FirstPositions) { check_real_model("SmolLM2-135M-Instruct.Q4_1.gguf", 4); }
TEST(CudaBackendReal, Gemma3FirstPositions) { check_real_model("gemma-3-270m-q4_k_m.gguf", 3); }

}  // namespace
