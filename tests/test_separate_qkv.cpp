// A phi3 file with separate attn_q/attn_k/attn_v (llama.cpp's phi3 graph
// takes either those or a fused attn_qkv: build_qkv) computes what the fused
// file computes. The separate file is the fused synthetic phi3 rewritten:
// every key and tensor copied, attn_qkv's rows cut into q's, k's and v's.
// The fused file is the one proven against llama.cpp's goldens, so every
// logit must be bit for bit the same: on the CPU's quantized and reference
// paths, and through the GPU path on emu (default and reference arithmetic).
// Negative control: k's and v's rows swapped between the two names loads
// (their shapes agree) and must change the logits.
#include <gtest/gtest.h>

#include <cstring>
#include <string>
#include <vector>

#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/cuda_backend.h"
#include "gguf/gguf.h"
#include "gguf/writer.h"
#include "models/synth/synth.h"
#include "tests/gguf_meta.h"

using namespace ptxlm;

namespace {

// The file with each layer's attn_qkv cut into attn_q, attn_k and attn_v
// (k_name and v_name: the names k's and v's rows get).
std::vector<uint8_t> separate_qkv(const gguf::File& f, uint64_t q_rows, uint64_t kv_rows, const char* k_name = "attn_k",
                                  const char* v_name = "attn_v") {
  gguf::Writer w;
  for (const gguf::KeyValue& kv : f.metadata()) w.set(kv.key, testing_util::to_meta(kv));
  const std::string fused = ".attn_qkv.weight";
  for (const gguf::TensorInfo& t : f.tensors()) {
    std::vector<uint64_t> ne(t.ne.begin(), t.ne.begin() + t.n_dims);
    if (t.name.size() <= fused.size() || t.name.compare(t.name.size() - fused.size(), fused.size(), fused) != 0) {
      w.add_tensor(t.name, t.ggml_type(), ne, std::vector<uint8_t>(t.data, t.data + t.n_bytes));
      continue;
    }
    EXPECT_EQ(t.n_rows(), q_rows + 2 * kv_rows) << t.name;
    const std::string blk = t.name.substr(0, t.name.size() - fused.size());
    const uint64_t rb = t.n_bytes / t.n_rows();
    uint64_t first = 0;
    for (auto [name, rows] : {std::pair{"attn_q", q_rows}, {k_name, kv_rows}, {v_name, kv_rows}}) {
      w.add_tensor(blk + "." + name + ".weight", t.ggml_type(), {t.ne[0], rows},
                   std::vector<uint8_t>(t.data + first * rb, t.data + (first + rows) * rb));
      first += rows;
    }
  }
  return w.serialize();
}

std::vector<TokenId> tokens() {
  std::vector<TokenId> ids{764};
  for (uint32_t i = 1; i < 24; ++i) ids.push_back(static_cast<TokenId>((i * 7919u + 13u) % 700u));
  return ids;
}

// Every position's logits, one token at a time.
std::vector<float> logits(Backend& b) {
  const std::vector<TokenId> ids = tokens();
  const size_t nv = b.n_vocab();
  std::vector<float> out(ids.size() * nv);
  for (uint32_t i = 0; i < ids.size(); ++i) b.eval(ids[i], i, out.data() + i * nv);
  return out;
}

size_t differing(const std::vector<float>& a, const std::vector<float>& b) {
  size_t n = 0;
  for (size_t i = 0; i < a.size(); ++i) n += std::memcmp(&a[i], &b[i], 4) != 0;
  return n;
}

class SeparateQkv : public ::testing::Test {
protected:
  void SetUp() override {
    fused_bytes_ = synth::model_bytes(spec_);
    const gguf::File f = gguf::File::parse(fused_bytes_, "synth-phi3");
    split_bytes_ = separate_qkv(f, spec_.q_dim(), spec_.kv_dim());
    swapped_bytes_ = separate_qkv(f, spec_.q_dim(), spec_.kv_dim(), "attn_v", "attn_k");
  }
  Model model(const std::vector<uint8_t>& bytes, const char* name) {
    return Model::from_file(gguf::File::parse(bytes, name));
  }
  const synth::Spec spec_ = synth::preset(synth::Arch::Phi3, synth::Size::Tiny);
  std::vector<uint8_t> fused_bytes_, split_bytes_, swapped_bytes_;
};

TEST_F(SeparateQkv, TheFileHasNoFusedMatrix) {
  const Model m = model(split_bytes_, "separate");
  EXPECT_FALSE(m.file.find_tensor("blk.0.attn_qkv.weight"));
  EXPECT_EQ(m.layers[0].wq.name(), "blk.0.attn_q.weight");
  EXPECT_EQ(m.layers[0].wk.name(), "blk.0.attn_k.weight");
  EXPECT_EQ(m.layers[0].wv.name(), "blk.0.attn_v.weight");
  EXPECT_EQ(m.weight_bytes(), model(fused_bytes_, "fused").weight_bytes());
}

TEST_F(SeparateQkv, CpuLogitsAreTheFusedFilesBitForBit) {
  const Model fused = model(fused_bytes_, "fused"), split = model(split_bytes_, "separate"),
              swapped = model(swapped_bytes_, "swapped");
  for (cpu::CpuPath path : {cpu::CpuPath::Quantized, cpu::CpuPath::Reference}) {
    SCOPED_TRACE(path == cpu::CpuPath::Quantized ? "quantized" : "reference");
    auto run = [&](const Model& m) {
      cpu::CpuBackend b(m, 64, KvType::F16, 2);
      b.set_path(path);
      return logits(b);
    };
    const std::vector<float> want = run(fused);
    EXPECT_EQ(differing(run(split), want), 0u);
    EXPECT_GT(differing(run(swapped), want), want.size() / 2) << "k's and v's rows swapped were not told apart";
  }
}

TEST_F(SeparateQkv, GpuLogitsOnEmuAreTheFusedFilesBitForBit) {
  const Model fused = model(fused_bytes_, "fused"), split = model(split_bytes_, "separate"),
              swapped = model(swapped_bytes_, "swapped");
  const auto driver = cuda::Driver::load();
  for (GpuArithmetic path : {GpuArithmetic::Default, GpuArithmetic::Reference}) {
    SCOPED_TRACE(path == GpuArithmetic::Default ? "default" : "reference");
    auto run = [&](const Model& m) {
      cuda::CudaBackend b(m, driver, 64, Schedule::Default, path);
      return logits(b);
    };
    const std::vector<float> want = run(fused);
    EXPECT_EQ(differing(run(split), want), 0u);
    EXPECT_GT(differing(run(swapped), want), want.size() / 2) << "k's and v's rows swapped were not told apart";
  }
}

}  // namespace
