// The attention op (kernels/decode/attention: RoPE, the KV append, split
// attention and its reduction in one launch) on emu against the host
// reference engine/cuda/attention_reference (rotation as the CPU backend
// computes it, bit-equal without q/k norms; attention in double from the f16
// cache). Shapes of SmolLM2 (adjacent pairs, GQA 9/3, head 64), qwen2 (NEOX,
// biases) and gemma3 (NEOX, q/k norms, head 256, sliding window), at
// positions one split reaches (the block writes the output itself) and
// positions several reach (the last block of each head combines them).
// Negative controls: a window one too small, a position one short, and a
// split counter that does not start at zero.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "engine/cuda/attention_reference.h"
#include "gguf/f16.h"
#include "kernels/decode/attention.h"
#include "tests/emu_cuda_fixture.h"

namespace {

using namespace ptxlm;
namespace kx = ptxlm::kernels;
using ptx::DevPtr;

struct Launched {
  size_t bad = 0;        // values outside the tolerance
  double worst = 0;      // the largest error as a share of its tolerance
  size_t touched = 0;    // cache rows other than pos that changed
  uint32_t counters = 0; // the split counters' sum after the launch (0: left ready)
};

class AttentionOnEmu : public testing_util::EmuCudaTest {
protected:
  // One launch at `pos` over random caches; the reference attends with
  // `ref_window` / `ref_pos`, or computes `ref_shape`, when given (negative
  // controls).
  Launched run(const kx::AttentionShape& s, uint32_t pos, uint32_t ref_window = ~0u, uint32_t ref_pos = ~0u,
          uint32_t counter0 = 0, const kx::AttentionShape* ref_shape = nullptr) {
    const uint32_t hd = s.head_dim, kv = s.n_head_kv * hd;
    cuda::AttentionInputs in;
    in.pos = pos;
    in.q = randv(s.n_head * hd, 1.0f);
    in.k = randv(kv, 1.0f);
    in.v = randv(kv, 1.0f);
    if (s.bias) in.bq = randv(in.q.size(), 0.5f), in.bk = randv(kv, 0.5f), in.bv = randv(kv, 0.5f);
    if (s.qk_norm) in.q_norm = randv(hd, 0.2f), in.k_norm = randv(hd, 0.2f);
    in.rope = testing_util::rope_table(s.n_ctx, s.rot(), 10000.0);
    const std::vector<float> kf = randv(size_t(s.n_ctx) * kv, 1.0f), vf = randv(kf.size(), 1.0f);
    for (size_t i = 0; i < kf.size(); ++i) in.k_cache.push_back(f32_to_f16(kf[i])), in.v_cache.push_back(f32_to_f16(vf[i]));

    auto dq = upload(in.q), dk = upload(in.k), dv = upload(in.v), drope = upload(in.rope);
    auto dbq = upload(s.bias ? in.bq : in.q), dbk = upload(s.bias ? in.bk : in.k), dbv = upload(s.bias ? in.bv : in.v);
    auto dqn = upload(s.qk_norm ? in.q_norm : in.q), dkn = upload(s.qk_norm ? in.k_norm : in.q);
    auto dkc = upload(in.k_cache), dvc = upload(in.v_cache), dout = upload(std::vector<float>(in.q.size(), 0.0f));
    auto dpart = upload(std::vector<float>(size_t(s.n_head) * s.splits() * (hd + 2), 0.0f));
    auto dsync = upload(std::vector<uint32_t>(s.n_head, counter0));
    auto dpos = upload(std::vector<uint32_t>{pos});
    std::vector<ptx::ParamValue> args = {DevPtr{dq.ptr()}, DevPtr{dk.ptr()}, DevPtr{dv.ptr()}};
    if (s.bias) args.insert(args.end(), {DevPtr{dbq.ptr()}, DevPtr{dbk.ptr()}, DevPtr{dbv.ptr()}});
    if (s.qk_norm) args.insert(args.end(), {DevPtr{dqn.ptr()}, DevPtr{dkn.ptr()}});
    args.insert(args.end(), {DevPtr{drope.ptr()}, DevPtr{dpos.ptr()}, DevPtr{dkc.ptr()}, DevPtr{dvc.ptr()},
                             DevPtr{dpart.ptr()}, DevPtr{dsync.ptr()}, DevPtr{dout.ptr()}});
    launch(kx::attention_kernel(s), args);

    const std::vector<uint16_t> gk = download<uint16_t>(dkc, in.k_cache.size()), gv = download<uint16_t>(dvc, in.v_cache.size());
    in.own_k.assign(gk.begin() + long(pos) * kv, gk.begin() + long(pos + 1) * kv);
    const cuda::AttentionExpected e = cuda::attention_reference(ref_shape ? *ref_shape : s, in, ref_window, ref_pos);
    Launched r;
    auto check = [&](double got, const cuda::Checked& c, const char* what, size_t i) {
      const double err = std::fabs(got - c.value);
      r.worst = std::max(r.worst, c.tol > 0 ? err / c.tol : (err > 0 ? 1e9 : 0.0));
      if (!(err <= c.tol) && r.bad++ < 3 && ref_pos == ~0u && ref_window == ~0u && counter0 == 0 && !ref_shape)
        ADD_FAILURE() << what << "[" << i << "]: " << got << " vs " << c.value << " (tolerance " << c.tol << ")";
    };
    const std::vector<float> out = download<float>(dout, in.q.size());
    for (size_t i = 0; i < out.size(); ++i) check(out[i], e.out[i], "out", i);
    for (uint32_t i = 0; i < kv; ++i) {
      check(f16_to_f32(gk[size_t(pos) * kv + i]), e.k_row[i], "k cache", i);
      check(f16_to_f32(gv[size_t(pos) * kv + i]), e.v_row[i], "v cache", i);
    }
    for (size_t row = 0; row < s.n_ctx; ++row)
      for (uint32_t i = 0; i < kv; ++i)
        if (row != pos && (gk[row * kv + i] != in.k_cache[row * kv + i] || gv[row * kv + i] != in.v_cache[row * kv + i]))
          ++r.touched;
    for (uint32_t c : download<uint32_t>(dsync, s.n_head)) r.counters += c;
    return r;
  }

  void expect_exact(const kx::AttentionShape& s, uint32_t pos) {
    const Launched r = run(s, pos);
    std::printf("[attention] %u/%u heads, head_dim %u, chunk %u, window %u, pos %u: worst %.3g of the tolerance\n",
                s.n_head, s.n_head_kv, s.head_dim, s.chunk, s.window, pos, r.worst);
    EXPECT_EQ(r.bad, 0u) << "pos " << pos;
    EXPECT_EQ(r.touched, 0u) << "rows other than pos were written";
    EXPECT_EQ(r.counters, 0u) << "the split counters were not left at zero";
  }
};

// SmolLM2's heads (adjacent pairs, GQA 9/3); 3 of 4 splits reached, the last partly.
TEST_F(AttentionOnEmu, SmolLM2) {
  const kx::AttentionShape s{9, 3, 64, 512, 0, 0.125f, 128, false, false, false, 1e-5f};
  for (uint32_t pos : {0u, 37u, 127u, 128u, 300u, 511u}) expect_exact(s, pos);
}

TEST_F(AttentionOnEmu, Qwen2NeoxWithBiases) {
  const kx::AttentionShape s{4, 2, 128, 256, 0, 0.088f, 64, true, true, false, 1e-6f};
  for (uint32_t pos : {31u, 200u}) expect_exact(s, pos);
}

TEST_F(AttentionOnEmu, Gemma3QkNormsAndSlidingWindow) {
  const kx::AttentionShape s{4, 1, 256, 256, 40, 0.0625f, 32, true, false, true, 1e-6f};
  for (uint32_t pos : {0u, 20u, 200u}) expect_exact(s, pos);   // the window not yet full; splits before it empty
}

// Mistral 3's attention temperature on q, stepping every 16 positions; left
// out of the reference, the launch must fail.
TEST_F(AttentionOnEmu, Mistral3Temperature) {
  const kx::AttentionShape s{4, 2, 64, 256, 0, 0.125f, 64, false, false, false, 1e-5f, 0.1f, 16};
  for (uint32_t pos : {0u, 15u, 16u, 47u, 200u}) expect_exact(s, pos);
  kx::AttentionShape plain = s;
  plain.temp_scale = 0;
  EXPECT_GT(run(s, 47, ~0u, ~0u, 0, &plain).bad, 0u) << "the temperature left out passed";
}

// Phi-4-mini's partial rotary: the first 96 of 128 dims rotate (NEOX pairs
// (i, i + 48)), the rest pass through; adjacent pairs too (no architecture
// here has both, the kernel does). The reference rotating the whole head
// (its table of 64 pairs a position read from the 48-pair one) must fail.
TEST_F(AttentionOnEmu, Phi4MiniPartialRotary) {
  const kx::AttentionShape s{4, 2, 128, 256, 0, 0.088f, 64, true, false, false, 1e-5f, 0, 0, 96};
  for (uint32_t pos : {0u, 37u, 200u}) expect_exact(s, pos);
  const kx::AttentionShape adjacent{4, 2, 64, 128, 0, 0.125f, 64, false, false, false, 1e-5f, 0, 0, 48};
  for (uint32_t pos : {5u, 100u}) expect_exact(adjacent, pos);
  kx::AttentionShape whole = s;
  whole.n_rot = 0;
  EXPECT_GT(run(s, 37, ~0u, ~0u, 0, &whole).bad, 0u) << "the whole head rotated passed";
}

TEST_F(AttentionOnEmu, NegativeControls) {
  const kx::AttentionShape s{4, 2, 128, 128, 16, 0.1f, 32, false, false, false, 1e-5f};
  EXPECT_GT(run(s, 90, 15).bad, 0u) << "a window one too small passed";
  const kx::AttentionShape full{4, 2, 128, 128, 0, 0.1f, 32, false, false, false, 1e-5f};
  EXPECT_GT(run(full, 90, ~0u, 89).bad, 0u) << "attention one position short passed";
  EXPECT_GT(run(full, 90, ~0u, ~0u, 1).bad, 0u) << "a split counter starting at 1 passed";
}

TEST(Attention, RefusesShapesItCannotRun) {
  EXPECT_THROW(kx::attention_kernel({9, 4, 64, 64}), ptx::Error);      // 9 heads over 4 KV heads
  EXPECT_THROW(kx::attention_kernel({4, 4, 80, 64}), ptx::Error);      // head_dim not a multiple of 64
  EXPECT_THROW(kx::attention_kernel({4, 4, 64, 0}), ptx::Error);       // no context
  EXPECT_THROW(kx::attention_kernel({4, 4, 64, 1u << 20}), ptx::Error);   // more splits than the reduction stages
  EXPECT_THROW(kx::attention_kernel({4, 4, 64, 64, 0, 1, 64, true, false, false, 1e-5f, 0, 0, 47}), ptx::Error);  // odd n_rot
  EXPECT_THROW(kx::attention_kernel({4, 4, 64, 64, 0, 1, 64, true, false, false, 1e-5f, 0, 0, 66}), ptx::Error);  // n_rot > hd
}

}  // namespace
