// RoPE + KV append and split attention (kernels/decode/attention) on emu
// against host references: rotation computed as the CPU backend computes it
// (the same cos/sin table, f32 products) and attention in double from the
// f16 cache. Shapes of SmolLM2 (adjacent pairs, GQA 9/3, head 64), qwen2
// (NEOX, biases) and gemma3 (NEOX, q/k norms, head 256, sliding window).
// Negative controls: a window one too small, and a position one off.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <vector>

#include "gguf/f16.h"
#include "kernels/decode/attention.h"
#include "tests/emu_cuda_fixture.h"

namespace {

using namespace ptxlm;
namespace kx = ptxlm::kernels;
using ptx::DevPtr;

// cos/sin per (position, pair) exactly as the CPU backend computes them.
std::vector<float> rope_table(uint32_t n_ctx, uint32_t hd, double base) {
  std::vector<float> t(size_t(n_ctx) * hd);
  for (uint32_t p = 0; p < n_ctx; ++p)
    for (uint32_t i = 0; i < hd / 2; ++i) {
      const double theta = double(p) * std::pow(base, -2.0 * i / hd);
      t[(size_t(p) * hd / 2 + i) * 2] = float(std::cos(theta));
      t[(size_t(p) * hd / 2 + i) * 2 + 1] = float(std::sin(theta));
    }
  return t;
}

class AttentionOnEmu : public testing_util::EmuCudaTest {
protected:
  // Runs rope_append at `pos` and checks q, the cache rows and that no other
  // cache row changed.
  void check_rope(const kx::RopeShape& s, uint32_t n_ctx, uint32_t pos) {
    const uint32_t hd = s.head_dim, kv_dim = s.n_head_kv * hd;
    std::vector<float> q = randv(s.n_head * hd, 1.0f), k = randv(kv_dim, 1.0f), v = randv(kv_dim, 1.0f);
    std::vector<float> bq = randv(q.size(), 0.5f), bk = randv(kv_dim, 0.5f), bv = randv(kv_dim, 0.5f);
    std::vector<float> qn = randv(hd, 0.2f), kn = randv(hd, 0.2f);
    const std::vector<float> table = rope_table(n_ctx, hd, 10000.0);
    std::vector<uint16_t> cache(size_t(n_ctx) * kv_dim, 0x7e00);   // f16 NaN: untouched rows stay NaN

    auto dq = upload(q), dk = upload(k), dv = upload(v), dbq = upload(bq), dbk = upload(bk), dbv = upload(bv);
    auto dqn = upload(qn), dkn = upload(kn), drope = upload(table), dkc = upload(cache), dvc = upload(cache);
    const std::vector<uint32_t> pv = {pos};
    auto dpos = upload(pv);
    std::vector<ptx::ParamValue> args = {DevPtr{dq.ptr()}, DevPtr{dk.ptr()}, DevPtr{dv.ptr()}};
    if (s.bias) args.insert(args.end(), {DevPtr{dbq.ptr()}, DevPtr{dbk.ptr()}, DevPtr{dbv.ptr()}});
    if (s.qk_norm) args.insert(args.end(), {DevPtr{dqn.ptr()}, DevPtr{dkn.ptr()}});
    args.insert(args.end(), {DevPtr{drope.ptr()}, DevPtr{dpos.ptr()}, DevPtr{dkc.ptr()}, DevPtr{dvc.ptr()}});
    launch(kx::rope_append_kernel(s), args);

    // Host reference, as engine/cpu/cpu_backend.cpp computes it.
    auto prep = [&](std::vector<float>& x, const std::vector<float>& b, const std::vector<float>& w, uint32_t heads) {
      if (s.bias)
        for (size_t i = 0; i < x.size(); ++i) x[i] += b[i];
      if (s.qk_norm)
        for (uint32_t h = 0; h < heads; ++h) {
          double ss = 0;
          for (uint32_t i = 0; i < hd; ++i) ss += double(x[h * hd + i]) * x[h * hd + i];
          const float scale = 1.0f / std::sqrt(float(ss / hd) + s.eps);
          for (uint32_t i = 0; i < hd; ++i) x[h * hd + i] = (x[h * hd + i] * scale) * w[i];
        }
      for (uint32_t h = 0; h < heads; ++h)
        for (uint32_t i = 0; i < hd / 2; ++i) {
          const float c = table[(size_t(pos) * hd / 2 + i) * 2], sn = table[(size_t(pos) * hd / 2 + i) * 2 + 1];
          const uint32_t a = s.neox ? i : 2 * i, b2 = s.neox ? i + hd / 2 : 2 * i + 1;
          const float x0 = x[h * hd + a], x1 = x[h * hd + b2];
          x[h * hd + a] = x0 * c - x1 * sn;
          x[h * hd + b2] = x0 * sn + x1 * c;
        }
    };
    std::vector<float> rq = q, rk = k, rv = v;
    prep(rq, bq, qn, s.n_head);
    prep(rk, bk, kn, s.n_head_kv);
    if (s.bias)
      for (size_t i = 0; i < rv.size(); ++i) rv[i] += bv[i];
    const std::vector<float> gq = download<float>(dq, q.size());
    const double tol = s.qk_norm ? 2e-6 : 0.0;   // f32 vs double sum of squares; else bit-equal
    size_t bad = 0;
    for (size_t i = 0; i < q.size(); ++i)
      if (!(std::fabs(gq[i] - rq[i]) <= tol * (1 + std::fabs(rq[i]))) && bad++ < 3)
        ADD_FAILURE() << "q[" << i << "]: " << gq[i] << " vs " << rq[i];
    const std::vector<uint16_t> gk = download<uint16_t>(dkc, cache.size()), gv = download<uint16_t>(dvc, cache.size());
    for (uint32_t i = 0; i < kv_dim; ++i) {
      const float k16 = f16_to_f32(gk[size_t(pos) * kv_dim + i]), v16 = f16_to_f32(gv[size_t(pos) * kv_dim + i]);
      if (!(std::fabs(k16 - f16_to_f32(f32_to_f16(rk[i]))) <= tol * 4 * (1 + std::fabs(rk[i]))) && bad++ < 6)
        ADD_FAILURE() << "k cache[" << i << "]: " << k16 << " vs " << rk[i];
      if (v16 != f16_to_f32(f32_to_f16(rv[i])) && bad++ < 9) ADD_FAILURE() << "v cache[" << i << "]: " << v16 << " vs " << rv[i];
    }
    size_t touched = 0;
    for (size_t r = 0; r < n_ctx; ++r)
      for (uint32_t i = 0; i < kv_dim; ++i)
        if (r != pos && (gk[r * kv_dim + i] != 0x7e00 || gv[r * kv_dim + i] != 0x7e00)) ++touched;
    EXPECT_EQ(touched, 0u) << "rows other than pos were written";
    EXPECT_EQ(bad, 0u);
  }

  // Attention at `pos` over random caches; returns positions-outside-
  // tolerance count against the reference computed with `ref_window` and
  // `ref_pos`.
  size_t attention_mismatches(const kx::AttentionShape& s, uint32_t pos, uint32_t ref_window, uint32_t ref_pos,
                              bool report = true) {
    const uint32_t hd = s.head_dim, kv_dim = s.n_head_kv * hd, group = s.n_head / s.n_head_kv;
    const std::vector<float> q = randv(s.n_head * hd, 1.0f);
    std::vector<uint16_t> kc(size_t(s.n_ctx) * kv_dim), vc(kc.size());
    const std::vector<float> kf = randv(kc.size(), 1.0f), vf = randv(vc.size(), 1.0f);
    for (size_t i = 0; i < kc.size(); ++i) {
      kc[i] = f32_to_f16(kf[i]);
      vc[i] = f32_to_f16(vf[i]);
    }
    auto dq = upload(q), dk = upload(kc), dv = upload(vc), dout = upload(std::vector<float>(q.size(), 0.0f));
    auto dpart = upload(std::vector<float>(size_t(s.n_head) * s.splits() * (hd + 2), 0.0f));
    const std::vector<uint32_t> pv = {pos};
    auto dpos = upload(pv);
    launch(kx::attention_split_kernel(s),
           {DevPtr{dq.ptr()}, DevPtr{dk.ptr()}, DevPtr{dv.ptr()}, DevPtr{dpos.ptr()}, DevPtr{dpart.ptr()}});
    launch(kx::attention_reduce_kernel(s), {DevPtr{dpart.ptr()}, DevPtr{dpos.ptr()}, DevPtr{dout.ptr()}});
    const std::vector<float> got = download<float>(dout, q.size());

    size_t bad = 0;
    double worst = 0;
    for (uint32_t h = 0; h < s.n_head; ++h) {
      const uint32_t kvh = h / group;
      const uint32_t p0 = ref_window && ref_pos + 1 > ref_window ? ref_pos + 1 - ref_window : 0;
      std::vector<double> w;
      double mx = -std::numeric_limits<double>::infinity(), sum = 0;
      for (uint32_t j = p0; j <= ref_pos; ++j) {
        double dot = 0;
        for (uint32_t i = 0; i < hd; ++i) dot += double(q[h * hd + i]) * f16_to_f32(kc[size_t(j) * kv_dim + kvh * hd + i]);
        w.push_back(dot * s.scale);
        mx = std::max(mx, w.back());
      }
      for (double& x : w) sum += (x = std::exp(x - mx));
      for (uint32_t i = 0; i < hd; ++i) {
        double ref = 0, mag = 0;
        for (uint32_t j = p0; j <= ref_pos; ++j) {
          const double vv = f16_to_f32(vc[size_t(j) * kv_dim + kvh * hd + i]);
          ref += w[j - p0] / sum * vv;
          mag += w[j - p0] / sum * std::fabs(vv);
        }
        const double err = std::fabs(got[h * hd + i] - ref), tol = 2e-6 * mag + 1e-7;
        worst = std::max(worst, err / tol);
        if (!(err <= tol) && bad++ < 3 && report)
          ADD_FAILURE() << "head " << h << " dim " << i << ": " << got[h * hd + i] << " vs " << ref;
      }
    }
    if (report) std::printf("[attention] head_dim %u pos %u: worst error %.3g of the tolerance\n", hd, pos, worst);
    return bad;
  }
};

TEST_F(AttentionOnEmu, RopeAdjacentSmolLM2) { check_rope({9, 3, 64, false, false, false, 1e-5f}, 64, 37); }
TEST_F(AttentionOnEmu, RopeNeoxWithBiasesQwen2) { check_rope({4, 2, 128, true, true, false, 1e-6f}, 32, 31); }
TEST_F(AttentionOnEmu, RopeNeoxWithQkNormsGemma3) { check_rope({4, 1, 256, true, false, true, 1e-6f}, 16, 0); }

TEST_F(AttentionOnEmu, FullCacheAcrossSplits) {
  // SmolLM2's heads; 3 of 4 splits reached, the last partly.
  const kx::AttentionShape s{9, 3, 64, 512, 0, 0.125f, 128};
  EXPECT_EQ(attention_mismatches(s, 300, 0, 300), 0u);
  EXPECT_EQ(attention_mismatches(s, 0, 0, 0), 0u);   // a single position
}

TEST_F(AttentionOnEmu, SlidingWindowGemma3) {
  const kx::AttentionShape s{4, 1, 256, 256, 40, 0.0625f, 32};
  EXPECT_EQ(attention_mismatches(s, 200, 40, 200), 0u);   // splits before the window are empty
  EXPECT_EQ(attention_mismatches(s, 20, 40, 20), 0u);     // the window not yet full
}

TEST_F(AttentionOnEmu, NegativeControls) {
  const kx::AttentionShape s{4, 2, 128, 128, 16, 0.1f, 32};
  EXPECT_GT(attention_mismatches(s, 90, 15, 90, false), 0u) << "a window one too small passed";
  const kx::AttentionShape full{4, 2, 128, 128, 0, 0.1f, 32};
  EXPECT_GT(attention_mismatches(full, 90, 0, 89, false), 0u) << "attention one position short passed";
}

TEST(Attention, RefusesShapesItCannotRun) {
  EXPECT_THROW(kx::rope_append_kernel({9, 4, 64}), ptx::Error);        // 9 heads over 4 KV heads
  EXPECT_THROW(kx::rope_append_kernel({4, 4, 80}), ptx::Error);        // head_dim not a multiple of 64
  EXPECT_THROW(kx::attention_split_kernel({4, 4, 64, 0}), ptx::Error);   // no context
}

}  // namespace
