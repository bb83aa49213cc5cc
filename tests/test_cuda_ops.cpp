// The GPU path's default arithmetic (8-bit GEMV inputs, `--gpu-path
// quantized`) on emu, op by op: every GEMV of the chain (QKV, attention
// output, gate/up, down, LM head, every layer) at every position of a prompt,
// its device result against the CPU quantized path's op fed the device's own
// input (CudaBackend::trace_gemvs, cuda::gemv_reference), within the
// float-reordering bound. Whole-model logits cannot be that sharp: an input
// value that sits near the middle of two 8-bit steps rounds to either
// neighbour after a reordered sum, and the flips add up over the layers (the
// CPU's own SIMD and scalar paths differ as much). Negative control: a
// corrupted Q4_K sub-block scale makes its op fail, and no other.
// The other ops (RoPE, attention, the adds) are the reference path's too:
// test_cuda_backend checks them end to end with `--gpu-path reference`.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <deque>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_backend.h"
#include "engine/cuda/gemv_reference.h"
#include "engine/cuda/selftest.h"
#include "models/synth/synth.h"
#include "tests/real_model_util.h"

using namespace ptxlm;

namespace {

struct OpCheck {
  size_t ops = 0, q8_ops = 0, rows = 0, bad = 0;
  double worst = 0;                       // largest error / tolerance
  std::map<std::string, size_t> bad_ops;  // failing rows by kernel
};

// One token traced through the chain; each GEMV op's rows checked (the first
// failures reported when `report`).
void check_token(cuda::CudaBackend& gpu, TokenId token, uint32_t pos, OpCheck& c, bool report = true) {
  for (const cuda::CudaBackend::GemvTrace& t : gpu.trace_gemvs(token, pos)) {
    const std::vector<float> nw = t.norm ? to_floats(*t.norm) : std::vector<float>{};
    const std::vector<std::vector<cuda::RowCheck>> ref = cuda::gemv_reference(t.shape, t.matrices, nw, t.input, t.before, t.gate);
    ++c.ops;
    c.q8_ops += t.shape.q8_input;
    for (size_t o = 0; o < ref.size(); ++o)
      for (size_t r = 0; r < ref[o].size(); ++r) {
        const double err = std::fabs(double(t.after[o][r]) - ref[o][r].value);
        ++c.rows;
        c.worst = std::max(c.worst, err / ref[o][r].tol);
        if (err <= ref[o][r].tol) continue;
        if (c.bad++ < 3 && report)
          ADD_FAILURE() << "position " << pos << ", op " << t.op << " (" << t.kernel << "), output " << o << " row " << r
                        << ": device " << t.after[o][r] << ", CPU quantized op " << ref[o][r].value << " (tolerance "
                        << ref[o][r].tol << ")";
        ++c.bad_ops[t.kernel];
      }
  }
}

OpCheck check_prompt(cuda::CudaBackend& gpu, const std::vector<TokenId>& ids) {
  OpCheck c;
  for (uint32_t i = 0; i < ids.size(); ++i) check_token(gpu, ids[i], i, c);
  return c;
}

// The tiny preset of `a` in type mix `mix`; bytes keeps the file.
Model tiny(synth::Arch a, std::vector<uint8_t>& bytes, synth::TypeMix mix = synth::TypeMix::Q4_K_M) {
  synth::Spec spec = synth::preset(a, synth::Size::Tiny);
  spec.types = mix;
  bytes = synth::model_bytes(spec);
  return Model::from_file(gguf::File::parse(bytes, std::string("synth-") + synth::arch_name(a)));
}

const std::vector<TokenId> kPrompt = {764, 17, 301, 52, 9, 388, 600, 5};

class CudaOpsSynth : public ::testing::TestWithParam<synth::Arch> {};

TEST_P(CudaOpsSynth, EveryGemvEqualsTheCpuQuantizedOpOnTheDevicesInput) {
  std::vector<uint8_t> bytes;
  Model m = tiny(GetParam(), bytes);
  cuda::CudaBackend gpu(m, cuda::Driver::load(), 64, Schedule::Chain);
  const OpCheck c = check_prompt(gpu, kPrompt);
  std::printf("[cuda-ops] %s: %zu GEMV ops (%zu on 8-bit inputs), %zu rows, worst error %.3g of the tolerance\n",
              synth::arch_name(GetParam()), c.ops, c.q8_ops, c.rows, c.worst);
  EXPECT_EQ(c.bad, 0u);
  EXPECT_EQ(c.ops, kPrompt.size() * (4 * m.layers.size() + 1));
  EXPECT_EQ(c.q8_ops, c.ops) << "every GEMV of the tiny models fits the 8-bit input";

  // Negative control: one Q4_K sub-block scale of one matrix, 9 steps off,
  // in the device's copy only: that op fails, every other op (fed the
  // changed activations) still matches.
  const Weight* victim = nullptr;
  for (const LayerDesc& l : m.layers)
    for (const Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down})
      if (!victim && w->type == gguf::GgmlType::Q4_K) victim = w;
  ASSERT_NE(victim, nullptr) << "no Q4_K matrix in the synthetic model";
  uint8_t* scale = const_cast<uint8_t*>(victim->data) + 4 + 1;   // row 0, block 0, scales[1]
  const uint8_t saved = *scale;
  *scale = uint8_t((saved & 0xC0) | (((saved & 63) + 9) & 63));
  cuda::CudaBackend broken(m, cuda::Driver::load(), 64, Schedule::Chain);
  *scale = saved;
  OpCheck bad;
  for (uint32_t i = 0; i < 2; ++i) check_token(broken, kPrompt[i], i, bad, false);
  std::printf("[cuda-ops] %s with a corrupted scale in %s: %zu failing rows in %zu ops\n", synth::arch_name(GetParam()),
              victim->name().c_str(), bad.bad, bad.bad_ops.size());
  EXPECT_GE(bad.bad, 1u) << "a corrupted scale in " << victim->name() << " passed the per-op check";
  EXPECT_EQ(bad.bad_ops.size(), 1u) << "the corrupted scale failed more than its own op";
}

// The whole model on the default path, teacher-forced on the CPU quantized
// path's own greedy continuation, against its scalar kernels (the same
// arithmetic on every CPU, as emu's is): max |logit diff| within 1.25 x the
// maximum measured (2026-11-26: llama 7.63e-6, qwen2 0.310, gemma3 0.458;
// 2026-11-27, issue 25: qwen3 0.437, llama3 0.021), and
// the argmax the CPU's wherever its top-2 margin exceeds twice that. Only the
// llama bound is sharp: the others are flips of 8-bit roundings
// (their every op is within 5% of the reordering bound above), as large as
// the CPU's own SIMD and scalar paths are apart; a corrupted scale
// (test_cuda_backend: 0.12-0.38) hides under them, which is why the per-op
// check is the proof.
double whole_model_tolerance(synth::Arch a) {
  switch (a) {
    case synth::Arch::Llama: return 1e-5;
    case synth::Arch::Qwen2: return 0.39;
    case synth::Arch::Qwen3: return 0.55;
    case synth::Arch::Llama3: return 0.027;
    case synth::Arch::Gemma3: return 0.57;
    case synth::Arch::Mistral3:
    case synth::Arch::Phi3:
    case synth::Arch::Phi4Mini:
    case synth::Arch::Gemma4: break;   // not instantiated here: test_cuda_backend runs them (gemma4: CPU only)
  }
  return 0.57;
}

TEST_P(CudaOpsSynth, WholeModelFollowsTheCpuQuantizedPath) {
  std::vector<uint8_t> bytes;
  Model m = tiny(GetParam(), bytes);
  cpu::CpuBackend cpu(m, 64, KvType::F16, 2);
  cpu.set_isa(cpu::Isa::Scalar);
  const size_t nv = m.n_vocab;
  const double tol = whole_model_tolerance(GetParam());
  std::vector<TokenId> ids = {764, 17, 301, 52};
  std::vector<float> a(nv), b(nv);
  cuda::CudaBackend gpu(m, cuda::Driver::load(), 64);
  double max_diff = 0;
  size_t clear = 0, agree = 0;
  for (uint32_t i = 0; i < 36; ++i) {
    cpu.eval(ids[i], i, a.data());
    gpu.eval(ids[i], i, b.data());
    for (size_t t = 0; t < nv; ++t) max_diff = std::max(max_diff, std::fabs(double(a[t]) - b[t]));
    const TokenId am = TokenId(std::max_element(a.begin(), a.end()) - a.begin());
    if (i + 1 == ids.size()) ids.push_back(am);
    std::vector<float> top = a;
    std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
    if (top[0] - top[1] <= 2 * tol) continue;
    ++clear;
    agree += TokenId(std::max_element(b.begin(), b.end()) - b.begin()) == am;
  }
  std::printf("[cuda-ops] %s whole model: max |logit diff| %.3g from the CPU quantized path (tolerance %.2g), argmax "
              "agrees at %zu of %zu positions with a clear margin\n", synth::arch_name(GetParam()), max_diff, tol, agree,
              clear);
  EXPECT_LE(max_diff, tol);
  EXPECT_EQ(agree, clear);
  EXPECT_GE(clear * 3, ids.size()) << "too few positions with a clear margin to compare the argmax";
}

INSTANTIATE_TEST_SUITE_P(Archs, CudaOpsSynth,
                         ::testing::Values(synth::Arch::Llama, synth::Arch::Qwen2, synth::Arch::Gemma3,
                                           synth::Arch::Qwen3, synth::Arch::Llama3),
                         [](const auto& info) { return std::string(synth::arch_name(info.param)); });

// `ptxlm selftest` (paged KV, the default): the paged pair (RoPE + the K/V append
// into a page, attention over a row of shuffled pages) checked in place of
// the contiguous cache's op, for each attention variant the synthetic models
// carry (llama; qwen2's biases; gemma3's q/k norms, sliding window and head
// 256; mistral3's temperature; phi4mini's head 96 with partial rotary, which
// only paged KV serves), at a context of 40 (three pages), every check within
// its bound (the references' own: paged_attention_reference.h). Teeth,
// checked by hand on 2026-11-28 (phi4mini, context 40): the reference one
// position short fails the attention check by 6x (9.2e-4 against 1.5e-4),
// the K/V slot a page off fails the append.
TEST(CudaOpsPaged, SelftestChecksThePagedPair) {
  for (synth::Arch a : {synth::Arch::Llama, synth::Arch::Qwen2, synth::Arch::Gemma3, synth::Arch::Mistral3,
                        synth::Arch::Phi4Mini}) {
    SCOPED_TRACE(synth::arch_name(a));
    const std::vector<uint8_t> bytes = synth::model_bytes(synth::preset(a, synth::Size::Tiny));
    const Model m = Model::from_file(gguf::File::parse(bytes, synth::arch_name(a)));
    size_t paged = 0, contiguous = 0, total = 0;
    for (const cuda::SelftestResult& r : cuda::run_selftest(m, cuda::Driver::load(), 40, 1, nullptr, true, true)) {
      ++total;
      paged += r.kernel.starts_with("paged_");
      contiguous += r.kernel.starts_with("attention");
      EXPECT_TRUE(r.pass) << r.kernel << " (" << r.what << "): error " << r.max_error << ", tolerance " << r.tolerance;
    }
    EXPECT_GE(paged, 2u);
    EXPECT_EQ(contiguous, 0u) << "the contiguous attention was checked under paged KV";
    EXPECT_GT(total, paged + 4);
  }
}

// `ptxlm selftest`'s checks on m, each expected to pass; returns how many ran.
size_t passing_selftests(const Model& m) {
  size_t n = 0;
  for (const cuda::SelftestResult& r : cuda::run_selftest(m, cuda::Driver::load(), 16, 1, nullptr)) {
    ++n;
    EXPECT_TRUE(r.pass) << r.kernel << " (" << r.what << "): error " << r.max_error << ", tolerance " << r.tolerance;
  }
  return n;
}

// The first 6 positions of kPrompt on `cpu`, the graph schedule and (with
// `persistent`) the persistent one: the largest |logit diff| of the graph
// from the CPU, the positions whose CPU top-2 margin clears 2·tol and at how
// many of them the argmaxes agree, and how many logits the persistent
// schedule gives differently from the graph.
struct FollowsCpu {
  double max_diff = 0;
  size_t clear = 0, agree = 0, differ = 0;
};
FollowsCpu follow_cpu(const Model& m, Backend& cpu, double tol, bool persistent = true) {
  cuda::CudaBackend gpu(m, cuda::Driver::load(), 16, Schedule::Graph);
  std::optional<cuda::CudaBackend> pers;   // the GEMVs inline
  if (persistent) pers.emplace(m, cuda::Driver::load(), 16, Schedule::Persistent);
  const size_t nv = m.n_vocab;
  std::vector<float> a(nv), b(nv), p(nv);
  FollowsCpu f;
  for (uint32_t i = 0; i < 6; ++i) {
    cpu.eval(kPrompt[i], i, a.data());
    gpu.eval(kPrompt[i], i, b.data());
    if (pers) {
      pers->eval(kPrompt[i], i, p.data());
      for (size_t t = 0; t < nv; ++t) f.differ += b[t] != p[t];
    }
    for (size_t t = 0; t < nv; ++t) f.max_diff = std::max(f.max_diff, std::fabs(double(a[t]) - b[t]));
    std::vector<float> top = a;
    std::partial_sort(top.begin(), top.begin() + 2, top.end(), std::greater<float>());
    if (top[0] - top[1] <= 2 * tol) continue;
    ++f.clear;
    f.agree += std::max_element(a.begin(), a.end()) - a.begin() == std::max_element(b.begin(), b.end()) - b.begin();
  }
  return f;
}

// Issue 25's weight types end to end on the default path: the tiny llama in
// each synthetic type mix (Q5_K_M, Q3_K_M, Q2_K, IQ4_XS: Q5_K, Q3_K, Q2_K,
// IQ4_XS and IQ4_NL weights and embeddings, beside Q4_K and Q6_K). `ptxlm
// selftest`'s checks (the embedding row bit for bit, every GEMV kernel
// against the CPU op on random inputs) pass; every GEMV op of four positions
// equals the CPU quantized op on the device's own input, most on 8-bit
// inputs; and the logits follow the CPU quantized path (the embedding row
// and every op chained) within a measured bound, the argmax the CPU's wherever
// its top-2 margin is clear; the persistent schedule (every GEMV inline)
// gives the graph schedule's logits exactly.
TEST(CudaOpsTypeMixes, EachMixFollowsTheCpuQuantizedPath) {
  // Max |logit diff| from the CPU quantized path (scalar), 1.25x the maximum
  // measured 2026-11-27 (issue 25): Q5_K_M 5.72e-6, Q2_K 3.81e-6, IQ4_XS
  // 2.48e-5 (float reordering), Q3_K_M 0.200 (one flip of an 8-bit rounding,
  // as whole_model_tolerance's qwen2 and gemma3: every op of it is within
  // 4% of its reordering bound).
  const std::vector<std::pair<synth::TypeMix, double>> mixes = {
      {synth::TypeMix::Q5_K_M, 7.2e-6}, {synth::TypeMix::Q3_K_M, 0.25}, {synth::TypeMix::Q2_K, 4.8e-6},
      {synth::TypeMix::IQ4_XS, 3.1e-5}};
  for (const auto& [mix, tol] : mixes) {
    std::vector<uint8_t> bytes;
    Model m = tiny(synth::Arch::Llama, bytes, mix);
    std::set<std::string> types;
    for (const LayerDesc& l : m.layers)
      for (const Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down}) types.insert(gguf::type_traits(w->type).name);
    types.insert(gguf::type_traits(m.tok_embd.type).name);
    std::string names;
    for (const std::string& t : types) names += t + " ";
    SCOPED_TRACE(names);
    EXPECT_GE(types.size(), 2u);

    const size_t selftests = passing_selftests(m);
    EXPECT_GT(selftests, 5u);

    cuda::CudaBackend traced(m, cuda::Driver::load(), 16, Schedule::Chain);
    const OpCheck c = check_prompt(traced, {kPrompt.begin(), kPrompt.begin() + 4});
    EXPECT_EQ(c.bad, 0u);
    EXPECT_GE(c.q8_ops * 2, c.ops) << "most GEMVs should run on 8-bit inputs";

    cpu::CpuBackend cpu(m, 16, KvType::F16, 2);
    cpu.set_isa(cpu::Isa::Scalar);
    const FollowsCpu f = follow_cpu(m, cpu, tol);
    std::printf("[cuda-ops] llama %s: %zu selftests, %zu GEMV ops (%zu on 8-bit inputs), worst %.3g of the tolerance; "
                "max |logit diff| %.3g, argmax agrees at %zu of %zu clear positions\n",
                names.c_str(), selftests, c.ops, c.q8_ops, c.worst, f.max_diff, f.agree, f.clear);
    EXPECT_LE(f.max_diff, tol);
    EXPECT_EQ(f.agree, f.clear);
    EXPECT_EQ(f.differ, 0u) << "the persistent schedule's logits differ from the graph schedule's";
  }
}

// F16, BF16 and F32 matrices beside quantized ones: the tiny llama with some
// matrices re-encoded in memory, so the CPU reference dequantizes the same
// bytes the device multiplies. Layer 0's Q in one 16-bit type and K in the
// other beside a Q4_K V (one QKV launch, on the f32 input), its gate beside a
// Q4_K up (one GLU launch), layer 1's down, the token embedding and the LM
// head (untied), then the same with F16 and BF16 swapped, then F32 with
// F16 (F32 the embedding and Q: gemma4's per_layer_model_proj). The selftest's
// checks (the embedding row bit for bit) and every GEMV op of four positions
// must pass; the other launches stay on the 8-bit input; the persistent
// schedule's logits equal the graph schedule's.
TEST(CudaOpsTypeMixes, SixteenBitFloatMatrices) {
  using gguf::GgmlType;
  for (const auto& [a, b] : {std::pair{GgmlType::F16, GgmlType::BF16}, std::pair{GgmlType::BF16, GgmlType::F16},
                             std::pair{GgmlType::F32, GgmlType::F16}}) {
    std::vector<uint8_t> bytes;
    Model m = tiny(synth::Arch::Llama, bytes);
    std::deque<std::vector<uint8_t>> store;
    auto retype = [&](Weight& w, GgmlType t) {
      const uint64_t el = gguf::type_traits(t).block_bytes;   // bytes an element: 2, or 4 (F32)
      std::vector<float> row(w.cols);
      std::vector<uint8_t> out(w.rows * w.cols * el);
      for (uint64_t r = 0; r < w.rows; ++r) {
        gguf::type_traits(w.type).dequantize_row(w.row(r), row.data(), int64_t(w.cols));
        gguf::type_traits(t).quantize_row(row.data(), out.data() + r * w.cols * el, int64_t(w.cols));
      }
      store.push_back(std::move(out));
      w.type = t;
      w.data = store.back().data();
      w.row_bytes = w.cols * el;
    };
    const bool tied = m.tied_embeddings();
    retype(m.layers[0].wq, a);
    retype(m.layers[0].wk, b);
    retype(m.layers[0].gate, a);
    retype(m.layers[1].down, b);
    retype(m.tok_embd, a);
    if (tied) m.output = m.tok_embd;
    else retype(m.output, b);
    SCOPED_TRACE(std::string(gguf::type_traits(a).name) + " first");
    const size_t selftests = passing_selftests(m);
    EXPECT_GT(selftests, 5u);
    cuda::CudaBackend traced(m, cuda::Driver::load(), 16, Schedule::Chain);
    const OpCheck c = check_prompt(traced, {kPrompt.begin(), kPrompt.begin() + 4});
    EXPECT_EQ(c.bad, 0u);
    EXPECT_GT(c.q8_ops, 0u);
    EXPECT_LT(c.q8_ops, c.ops) << "the 16-bit matrices' launches must stay on the f32 input";
    // The persistent schedule (the GEMVs inline) gives the graph schedule's logits exactly.
    cuda::CudaBackend gpu(m, cuda::Driver::load(), 16, Schedule::Graph);
    cuda::CudaBackend pers(m, cuda::Driver::load(), 16, Schedule::Persistent);
    std::vector<float> g(m.n_vocab), p(m.n_vocab);
    size_t differ = 0;
    for (uint32_t i = 0; i < 3; ++i) {
      gpu.eval(kPrompt[i], i, g.data());
      pers.eval(kPrompt[i], i, p.data());
      for (size_t t = 0; t < g.size(); ++t) differ += g[t] != p[t];
    }
    EXPECT_EQ(differ, 0u) << "the persistent schedule's logits differ from the graph schedule's";
    std::printf("[cuda-ops] llama with %s/%s matrices (%s LM head): %zu selftests, %zu GEMV ops (%zu on 8-bit inputs), "
                "worst %.3g of the tolerance\n",
                gguf::type_traits(a).name, gguf::type_traits(b).name, tied ? "tied" : "untied", selftests, c.ops,
                c.q8_ops, c.worst);
  }
}

// Whole 16-bit files (synth's f16 and bf16 mixes: every matrix, the token
// embedding and the LM head 16-bit, the norms F32), as llama-quantize writes
// a model's F16 or BF16 conversion (test_vs_llamacpp checks the CPU against
// llama.cpp on them). The device converts every weight exactly and
// multiplies in f32, as the CPU does, so its logits differ from the CPU's by
// float reordering alone: within a bound measured here, the argmax the
// CPU's at every position whose margin is clear of it; every op of four
// positions passes its check, none on 8-bit inputs; the persistent schedule
// gives the graph schedule's bits. The negative control: the CPU with its
// inputs rounded to the matrices' type first (what a device multiplying in
// f16x2 or bf16x2 would compute; llama.cpp's CPU does it) lands at least
// twice the bound away.
TEST(CudaOpsTypeMixes, SixteenBitFilesFollowTheCpu) {
  // Max |logit diff| from the CPU (its default path: exact f32 products for
  // 16-bit matrices), 1.25x the largest measured 2026-12-02 on an AVX-512
  // VNNI Xeon over every Isa (PTXLM_CPU_ISA): F16 3.53e-5 (scalar; 6.7e-6
  // to 8.1e-6 on the others), BF16 3.46e-5 (avx512, avx512vnni; 6.7e-6 and
  // 7.9e-6 on avx2 and scalar).
  constexpr double kTol = 4.4e-5;
  for (synth::TypeMix mix : {synth::TypeMix::F16, synth::TypeMix::BF16}) {
    std::vector<uint8_t> bytes;
    Model m = tiny(synth::Arch::Llama, bytes, mix);
    const gguf::GgmlType want = mix == synth::TypeMix::F16 ? gguf::GgmlType::F16 : gguf::GgmlType::BF16;
    SCOPED_TRACE(gguf::type_traits(want).name);
    ASSERT_EQ(m.tok_embd.type, want);
    for (const LayerDesc& l : m.layers)
      for (const Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down}) ASSERT_EQ(w->type, want);
    const size_t selftests = passing_selftests(m);
    EXPECT_GT(selftests, 5u);
    cuda::CudaBackend traced(m, cuda::Driver::load(), 16, Schedule::Chain);
    const OpCheck c = check_prompt(traced, {kPrompt.begin(), kPrompt.begin() + 4});
    EXPECT_EQ(c.bad, 0u);
    EXPECT_EQ(c.q8_ops, 0u) << "a 16-bit matrix's launch took the 8-bit input";
    cpu::CpuBackend cpu(m, 16, KvType::F16, 2);
    const FollowsCpu f = follow_cpu(m, cpu, kTol);
    std::printf("[cuda-ops] llama, every matrix %s: %zu selftests, %zu GEMV ops, worst %.3g of the tolerance; "
                "max |logit diff| %.3g, argmax agrees at %zu of %zu clear positions\n",
                gguf::type_traits(want).name, selftests, c.ops, c.worst, f.max_diff, f.agree, f.clear);
    EXPECT_LE(f.max_diff, kTol);
    EXPECT_EQ(f.agree, f.clear);
    EXPECT_GE(f.clear, 4u);
    EXPECT_EQ(f.differ, 0u) << "the persistent schedule's logits differ from the graph schedule's";

    cpu::CpuBackend rounded(m, 16, KvType::F16, 2);
    rounded.set_input_rounding(cpu::InputRounding::LikeLlamaCpp);
    const double control = follow_cpu(m, rounded, kTol, false).max_diff;
    std::printf("[cuda-ops]   control (the CPU's inputs rounded to %s): max |logit diff| %.3g, %.1f x the bound\n",
                gguf::type_traits(want).name, control, control / kTol);
    EXPECT_GE(control, 2 * kTol) << "the bound is over half of what rounding the inputs to 16 bits moves";
  }
}

// Real models: the first positions of a prompt (emu runs a few seconds per
// token of these), every GEMV op checked.
void check_real_model(const char* file, uint32_t n) {
  const testing_util::RealPrompt r = testing_util::real_model_prompt(file);
  const Model& m = r.model;
  const std::vector<TokenId>& ids = r.ids;
  ASSERT_GE(ids.size(), n);
  cuda::CudaBackend gpu(m, cuda::Driver::load(), 16, Schedule::Chain);
  const OpCheck c = check_prompt(gpu, {ids.begin(), ids.begin() + n});
  std::printf("[cuda-ops] %s: %zu GEMV ops (%zu on 8-bit inputs), %zu rows, worst error %.3g of the tolerance\n", file,
              c.ops, c.q8_ops, c.rows, c.worst);
  EXPECT_EQ(c.bad, 0u);
  EXPECT_EQ(c.ops, n * (4 * m.layers.size() + 1));
  EXPECT_GE(c.q8_ops * 10, c.ops * 9) << "most GEMVs of " << file << " should run on 8-bit inputs";
}

TEST(CudaOpsReal, SmolLM2) { check_real_model("SmolLM2-135M-Instruct.Q4_1.gguf", 2); }
TEST(CudaOpsReal, Gemma3) { check_real_model("gemma-3-270m-q4_k_m.gguf", 2); }

}  // namespace
