// ptxas accepts every example kernel and every builder coverage kernel for
// sm_80, sm_86, sm_89 and sm_90; the -v report is parsed, and hot kernels
// must not spill. A missing ptxas is a failure, never a skip.
#include <gtest/gtest.h>

#include <unistd.h>

#include <cstdio>
#include <regex>

#include "kernels/decode/attention.h"
#include "kernels/decode/gemv.h"
#include "kernels/decode/paged_attention.h"
#include "kernels/decode/elementwise.h"
#include "kernels/decode/kv_copy.h"
#include "kernels/decode/paged_rope.h"
#include "kernels/examples/examples.h"
#include "kernels/ptx/ptxas.h"

using namespace ptxlm::ptx;
namespace kx = ptxlm::kernels;

#ifndef PTXLM_PTXAS
#define PTXLM_PTXAS ""
#endif

namespace {

const char* const kArches[] = {"sm_80", "sm_86", "sm_89", "sm_90"};

std::string ptxas_path() { return PTXLM_PTXAS; }

bool have_ptxas() {
  std::string p = ptxas_path();
  return !p.empty() && access(p.c_str(), X_OK) == 0;
}

std::string expected_version(const std::string& arch) {
  return arch == "sm_80" ? "7.0" : arch == "sm_86" ? "7.1" : "7.8";
}

// Assembles one generated kernel and checks the report; returns it.
PtxasFunctionReport assemble(const GeneratedKernel& g, const std::string& arch) {
  PtxasResult r = run_ptxas(ptxas_path(), g.ptx, arch);
  EXPECT_TRUE(r.ok()) << g.name << " for " << arch << ": ptxas exit " << r.exit_code << "\n" << r.log << "\n" << g.ptx;
  EXPECT_EQ(r.log.find("warning"), std::string::npos) << g.name << " for " << arch << ":\n" << r.log;
  const PtxasFunctionReport* f = r.find(g.name);
  EXPECT_NE(f, nullptr) << g.name << ": no report in\n" << r.log;
  if (!f) return {};
  EXPECT_EQ(f->arch, arch);
  EXPECT_GT(f->registers, 0) << g.name;
  EXPECT_LE(f->registers, 255) << g.name;
  if (g.hot) {
    EXPECT_FALSE(f->spills()) << g.name << " (hot) spills on " << arch << ": " << f->spill_store_bytes << " B stores, "
                              << f->spill_load_bytes << " B loads";
    EXPECT_EQ(f->stack_frame_bytes, 0u) << g.name << " (hot) has a stack frame on " << arch;
  }
  return *f;
}

// assemble(), then one line of its registers, shared memory and spills.
void assemble_and_print(const GeneratedKernel& g, const char* arch) {
  const PtxasFunctionReport f = assemble(g, arch);
  std::printf("[ptxas] %-44s %s: %3d registers, %llu B smem, %llu B spills\n", g.name.c_str(), arch, f.registers,
              (unsigned long long)f.smem_bytes, (unsigned long long)(f.spill_store_bytes + f.spill_load_bytes));
}

}  // namespace

TEST(Ptxas, IsAvailable) {
  ASSERT_TRUE(have_ptxas()) << "ptxas not found (configured path: '" << ptxas_path()
                            << "'). Install the CUDA toolkit or reconfigure with "
                               "-DPTXLM_PTXAS_EXECUTABLE=/path/to/ptxas; these tests never skip.";
}

TEST(Ptxas, ExampleKernelsAssembleWithoutSpills) {
  ASSERT_TRUE(have_ptxas()) << "ptxas missing: see Ptxas.IsAvailable";
  for (const char* arch : kArches) {
    std::vector<GeneratedKernel> ks = kx::example_kernels(Target::parse(arch));
    ASSERT_GE(ks.size(), 7u);
    for (const GeneratedKernel& g : ks) {
      EXPECT_NE(g.ptx.find(".version " + expected_version(arch) + "\n"), std::string::npos) << g.name << " " << arch;
      PtxasFunctionReport f = assemble(g, arch);
      // Reductions use a shared scratch of one value per warp and barrier 0.
      if (g.name == "rmsnorm" || g.name == "softmax" || g.name == "sumsq_partials" || g.name == "clip_scale") {
        if (g.geometry.block.x > 32) {
          EXPECT_EQ(f.smem_bytes, g.geometry.block.x / 32 * 4) << g.name;
          EXPECT_EQ(f.barriers, 1) << g.name;
        }
      }
      if (g.name == "argmax") {
        EXPECT_EQ(f.smem_bytes, g.geometry.block.x / 32 * 8);
      }
      if (g.name.find("backward") != std::string::npos) {
        EXPECT_EQ(f.smem_bytes, 0u) << g.name;
      }
      std::printf("[ptxas] %-20s %s: %3d registers, %u barriers, %llu B smem, %llu B spills\n", g.name.c_str(), arch,
                  f.registers, unsigned(f.barriers), (unsigned long long)f.smem_bytes,
                  (unsigned long long)(f.spill_store_bytes + f.spill_load_bytes));
    }
  }
}

// The decode GEMVs at real shapes: Llama-3-8B's fused QKV, gate/up and down
// (14336 inputs: 57 KiB of staged input, above the 48 KiB default), and a
// 640-wide model's; every one without spills, with at most 255 registers at
// 256 threads (ptxas must fit .maxntid).
TEST(Ptxas, GemvKernelsAssembleWithoutSpills) {
  ASSERT_TRUE(have_ptxas()) << "ptxas missing: see Ptxas.IsAvailable";
  using ptxlm::gguf::GgmlType;
  auto shape = [](uint32_t n_in, std::vector<uint32_t> rows, bool norm, bool acc) {
    kx::GemvShape s;
    s.n_in = n_in;
    s.norm = norm;
    s.accumulate = acc;
    for (uint32_t r : rows) s.segments.push_back({GgmlType::Q4_K, r});
    return s;
  };
  std::vector<kx::GemvShape> shapes = {shape(4096, {4096, 1024, 1024}, true, false),
                                       shape(4096, {14336, 14336}, true, false), shape(14336, {4096}, false, true),
                                       shape(1024, {640}, false, true)};
  // Llama-3-8B Q4_K_M's Q6_K down projection; gemma-3-270m's QKV
  // (Q5_0, Q5_0, Q8_0) and down (Q6_K); SmolLM2's QKV (Q4_1, Q8_0) and a Q4_0.
  auto typed = [&](uint32_t n_in, std::vector<std::pair<GgmlType, uint32_t>> segs, bool norm, bool acc) {
    kx::GemvShape s = shape(n_in, {}, norm, acc);
    for (auto [t, rows] : segs) s.segments.push_back({t, rows});
    return s;
  };
  shapes.push_back(typed(14336, {{GgmlType::Q6_K, 4096}}, false, true));
  shapes.push_back(typed(640, {{GgmlType::Q5_0, 1024}, {GgmlType::Q5_0, 256}, {GgmlType::Q8_0, 256}}, true, false));
  shapes.push_back(typed(2048, {{GgmlType::Q6_K, 640}}, false, true));
  shapes.push_back(typed(576, {{GgmlType::Q4_1, 576}, {GgmlType::Q4_1, 192}, {GgmlType::Q8_0, 192}}, true, false));
  shapes.push_back(typed(576, {{GgmlType::Q4_0, 1536}}, true, false));
  // The 8-bit-input (dp4a) kernels at Llama-3-8B Q4_K_M's QKV (Q4_K, and
  // with a Q6_K V), gate/up, down (Q4_K and Q6_K) and LM head.
  for (kx::GemvShape s : {shape(4096, {4096, 1024, 1024}, true, false), shape(4096, {14336, 14336}, true, false),
                          shape(14336, {4096}, false, true),
                          typed(4096, {{GgmlType::Q4_K, 4096}, {GgmlType::Q4_K, 1024}, {GgmlType::Q6_K, 1024}}, true,
                                false),
                          typed(14336, {{GgmlType::Q6_K, 4096}}, false, true),
                          typed(4096, {{GgmlType::Q6_K, 128256}}, true, false),
                          // gemma-3-270m's QKV and SmolLM2's QKV and LM head on the 32-element input
                          typed(640, {{GgmlType::Q5_0, 1024}, {GgmlType::Q5_0, 256}, {GgmlType::Q8_0, 256}}, true, false),
                          typed(576, {{GgmlType::Q4_1, 576}, {GgmlType::Q4_1, 192}, {GgmlType::Q8_0, 192}}, true, false),
                          typed(576, {{GgmlType::Q4_0, 1536}}, true, false),
                          typed(576, {{GgmlType::Q8_0, 49152}}, true, false)}) {
    s.q8_input = true;
    shapes.push_back(s);
  }
  // N input columns (a batch) at Llama-3-8B's QKV, gate/up (a GLU), down (Q6_K; Q4_K at 16 below) and
  // gemma-3-270m's QKV.
  {
    kx::GemvShape down = typed(14336, {{GgmlType::Q4_K, 4096}}, false, true);
    down.q8_input = true;
    down.columns = 16;
    shapes.push_back(down);
  }
  for (uint32_t n : {4u, 16u}) {
    for (kx::GemvShape s : {typed(4096, {{GgmlType::Q4_K, 4096}, {GgmlType::Q4_K, 1024}, {GgmlType::Q6_K, 1024}}, true,
                                  false),
                            shape(4096, {14336, 14336}, true, false), typed(14336, {{GgmlType::Q6_K, 4096}}, false, true),
                            typed(640, {{GgmlType::Q5_0, 1024}, {GgmlType::Q5_0, 256}, {GgmlType::Q8_0, 256}}, true,
                                  false)}) {
      s.q8_input = true;
      s.columns = n;
      if (s.segments.size() == 2) s.glu = kx::Glu::SwiGlu;
      shapes.push_back(s);   // 16 columns of 14336: the input in passes (q8_pass_blocks), two rows per warp
    }
  }
  // Issue 25's types at Llama-3-8B's shapes: QKV on both inputs, the
  // register-heaviest 8-bit-input kernels (a GLU of 16 columns, a down
  // projection of 8), and Q3_K_M's mix of Q3_K with a Q5_K V in one launch.
  for (GgmlType t : {GgmlType::Q5_K, GgmlType::Q3_K, GgmlType::Q2_K, GgmlType::IQ4_XS, GgmlType::IQ4_NL}) {
    kx::GemvShape qkv = typed(4096, {{t, 4096}, {t, 1024}, {t, 1024}}, true, false);
    shapes.push_back(qkv);
    qkv.q8_input = true;
    shapes.push_back(qkv);
    kx::GemvShape glu = typed(4096, {{t, 14336}, {t, 14336}}, true, false);
    glu.q8_input = true;
    glu.glu = kx::Glu::SwiGlu;
    glu.columns = 16;
    shapes.push_back(glu);
    kx::GemvShape down = typed(14336, {{t, 4096}}, false, true);
    down.q8_input = true;
    down.columns = 8;
    shapes.push_back(down);
  }
  kx::GemvShape q3km = typed(4096, {{GgmlType::Q3_K, 4096}, {GgmlType::Q3_K, 1024}, {GgmlType::Q5_K, 1024}}, true, false);
  q3km.q8_input = true;
  shapes.push_back(q3km);
  // F16 and BF16 (the f32 input only) at Llama-3-8B's QKV, gate/up (a GLU),
  // down, and mixed with a Q4_K V in one launch.
  for (GgmlType t : {GgmlType::F16, GgmlType::BF16}) {
    shapes.push_back(typed(4096, {{t, 4096}, {t, 1024}, {t, 1024}}, true, false));
    kx::GemvShape glu = typed(4096, {{t, 14336}, {t, 14336}}, true, false);
    glu.glu = kx::Glu::SwiGlu;
    shapes.push_back(glu);
    shapes.push_back(typed(14336, {{t, 4096}}, false, true));
    shapes.push_back(typed(4096, {{t, 4096}, {t, 1024}, {GgmlType::Q4_K, 1024}}, true, false));
    kx::GemvShape qkv8 = typed(4096, {{t, 4096}, {t, 1024}, {t, 1024}}, true, false);
    qkv8.columns = 12;   // N f32 columns: 12 of 4096 fill 192 KiB
    shapes.push_back(qkv8);
    glu.columns = 8;
    shapes.push_back(glu);
    kx::GemvShape glu16 = typed(2048, {{t, 8192}, {t, 8192}}, true, false);   // Llama-3.2-1B's, 16 columns
    glu16.glu = kx::Glu::SwiGlu;
    glu16.columns = 16;
    shapes.push_back(glu16);
  }
  for (const char* arch : kArches) {
    for (const kx::GemvShape& s : shapes) {
      Target t = Target::parse(arch);
      // sm_90 with --gpu-prefetch and --gpu-pdl on the 8-bit-input shapes of one column; the rest plain
      t.prefetch = t.pdl = t.sm >= 90 && s.q8_input && s.columns == 1;
      const GeneratedKernel g = kx::gemv_kernel(s, t);
      EXPECT_TRUE(g.hot);
      EXPECT_EQ(g.ptx.find("prefetch.global.L2") != std::string::npos, t.prefetch) << g.name;
      PtxasFunctionReport f = assemble(g, arch);
      std::printf("[ptxas] %-40s %s: %3d registers, %llu B smem, %llu B spills, grid %u x %u threads\n", g.name.c_str(),
                  arch, f.registers, (unsigned long long)f.smem_bytes,
                  (unsigned long long)(f.spill_store_bytes + f.spill_load_bytes), g.geometry.grid.x, g.geometry.block.x);
    }
  }
}

// RoPE + KV append and split attention at SmolLM2's, qwen2's, gemma3's,
// Llama-3-8B's and Phi-4-mini's head shapes.
TEST(Ptxas, AttentionKernelsAssembleWithoutSpills) {
  ASSERT_TRUE(have_ptxas()) << "ptxas missing: see Ptxas.IsAvailable";
  // SmolLM2, qwen2 (NEOX, biases), gemma3 (NEOX, q/k norms, a window), Llama-3-8B, Phi-4-mini (NEOX,
  // partial rotary: 96 of 128 dims).
  const std::vector<kx::AttentionShape> attns = {{9, 3, 64, 8192, 0, 0.125f, 256, false, false, false, 1e-5f},
                                                 {14, 2, 64, 32768, 0, 0.125f, 256, true, true, false, 1e-6f},
                                                 {4, 1, 256, 32768, 512, 0.0625f, 256, true, false, true, 1e-6f},
                                                 {32, 8, 128, 8192, 0, 0.088f, 256, false, false, false, 1e-5f},
                                                 {24, 8, 128, 131072, 0, 0.088f, 256, true, false, false, 1e-5f, 0, 0, 96}};
  for (const char* arch : kArches) {
    std::vector<GeneratedKernel> ks;
    for (const kx::AttentionShape& a : attns) ks.push_back(kx::attention_kernel(a, Target::parse(arch)));
    for (const GeneratedKernel& g : ks) {
      EXPECT_TRUE(g.hot);
      PtxasFunctionReport f = assemble(g, arch);
      std::printf("[ptxas] %-40s %s: %3d registers, %llu B smem, %llu B spills\n", g.name.c_str(), arch, f.registers,
                  (unsigned long long)f.smem_bytes, (unsigned long long)(f.spill_store_bytes + f.spill_load_bytes));
    }
  }
}

// Paged flash-decoding attention: groups of 1, 4, 7 and 8 query heads per KV
// head, head_dim 64, 96 (a row on 16 lanes, 4 idle), 128, 256 and 512 (and
// sub-groups: Gemma 4's 8 query heads over one KV head), a sliding window,
// a batch of 16 rows.
TEST(Ptxas, PagedAttentionKernelsAssembleWithoutSpills) {
  ASSERT_TRUE(have_ptxas()) << "ptxas missing: see Ptxas.IsAvailable";
  const std::vector<kx::PagedAttentionShape> shapes = {
      {32, 8, 128, 16, 512, 1, 16, 0},     // Llama-3-8B, one decode token (132 SMs)
      {32, 8, 128, 16, 512, 16, 2, 0},     // ... a batch of 16
      {9, 3, 64, 16, 512, 1, 32, 0},       // SmolLM2
      {28, 4, 128, 16, 2048, 1, 32, 0},    // Qwen2.5-7B: a group of 7
      {64, 8, 128, 16, 512, 1, 32, 0},     // a group of 8
      {16, 16, 64, 32, 256, 1, 16, 0},     // a group of 1, pages of 32
      {32, 32, 96, 16, 256, 1, 4, 0},      // Phi-3-mini: head 96, a group of 1
      {24, 8, 96, 16, 256, 1, 16, 0},      // Phi-4-mini: head 96, a group of 3
      {24, 8, 96, 16, 256, 16, 2, 0},      // ... a batch of 16
      {4, 1, 256, 16, 2048, 1, 64, 512},   // gemma3's sliding layers
      {8, 1, 512, 16, 2048, 1, 33, 0},     // Gemma-4-E2B's full layers: head 512, sub-groups of 2
      {8, 1, 512, 16, 2048, 16, 2, 0},     // ... a batch of 16
      {8, 1, 256, 16, 2048, 1, 64, 512},   // its sliding layers: sub-groups of 4
      {8, 2, 512, 16, 2048, 1, 33, 0},     // Gemma-4-E4B's full layers
      {4, 4, 512, 16, 2048, 1, 16, 0},     // head 512, a group of 1
  };
  for (const char* arch : kArches) {
    for (const kx::PagedAttentionShape& s : shapes) {
      const GeneratedKernel g = kx::paged_attention_kernel(s, Target::parse(arch));
      EXPECT_TRUE(g.hot);
      assemble_and_print(g, arch);
    }
  }
}

// RoPE + K/V append into pages: Llama-3-8B (one row, a batch of 16),
// qwen2 (NEOX, biases), gemma3 (head 256, q/k norms), Phi-4-mini (head 96,
// n_rot 72), Mistral 3's temperature, Gemma 4 (head 512, v's norm, q only).
TEST(Ptxas, PagedRopeKernelsAssembleWithoutSpills) {
  ASSERT_TRUE(have_ptxas()) << "ptxas missing: see Ptxas.IsAvailable";
  const std::vector<kx::PagedRopeShape> shapes = {
      {.n_head = 32, .n_head_kv = 8, .head_dim = 128, .max_pages = 512, .scale = 0.088f},
      {.n_head = 32, .n_head_kv = 8, .head_dim = 128, .max_pages = 512, .tokens = 16, .scale = 0.088f},
      {.n_head = 14, .n_head_kv = 2, .head_dim = 64, .max_pages = 2048, .scale = 0.125f, .neox = true, .bias = true},
      {.n_head = 4, .n_head_kv = 1, .head_dim = 256, .max_pages = 2048, .scale = 0.0625f, .neox = true, .qk_norm = true},
      {.n_head = 24, .n_head_kv = 8, .head_dim = 96, .n_rot = 72, .max_pages = 8192, .scale = 0.102f, .neox = true},
      {.n_head = 32, .n_head_kv = 8, .head_dim = 128, .max_pages = 512, .scale = 0.088f, .temp_scale = 0.1f,
       .temp_floor = 8192},
      // Gemma-4-E2B: head 512 (full) and 256 (sliding) with v's norm; a shared-KV layer's q only; a batch of 16.
      {.n_head = 8, .n_head_kv = 1, .head_dim = 512, .max_pages = 2048, .neox = true, .qk_norm = true, .v_norm = true},
      {.n_head = 8, .n_head_kv = 1, .head_dim = 256, .max_pages = 2048, .tokens = 16, .neox = true, .qk_norm = true,
       .v_norm = true},
      {.n_head = 8, .n_head_kv = 1, .head_dim = 512, .max_pages = 2048, .neox = true, .qk_norm = true, .v_norm = true,
       .q_only = true},
  };
  for (const char* arch : kArches) {
    for (const kx::PagedRopeShape& s : shapes) {
      const GeneratedKernel g = kx::paged_rope_kernel(s, Target::parse(arch));
      EXPECT_TRUE(g.hot);
      assemble_and_print(g, arch);
    }
  }
}

// The batch step's forms of the small kernels (16 rows): the embedding,
// the normalised add, the slot clear and the argmax per column.
TEST(Ptxas, BatchElementwiseKernelsAssembleWithoutSpills) {
  ASSERT_TRUE(have_ptxas()) << "ptxas missing: see Ptxas.IsAvailable";
  for (const char* arch : kArches) {
    const Target t = Target::parse(arch);
    for (const GeneratedKernel& g : std::vector<GeneratedKernel>{kx::embed_kernel({ptxlm::gguf::GgmlType::Q4_K, 4096, 1.0f, 16}, t), kx::add_norm_kernel({4096, 1e-6f, 16}, t),
          kx::clear_u64_kernel(t, nullptr, 16), kx::argmax_kernel({.n = 128256, .columns = 16}, t)}) {
      assemble_and_print(g, arch);
    }
  }
}

// Copy-on-write of KV pages: 64 pools (32 layers), pages of 16 and 32.
TEST(Ptxas, KvCopyKernelsAssembleWithoutSpills) {
  ASSERT_TRUE(have_ptxas()) << "ptxas missing: see Ptxas.IsAvailable";
  for (const char* arch : kArches) {
    for (uint32_t page : {16u, 32u}) {
      const GeneratedKernel g = kx::kv_copy_kernel({64, page, 16}, Target::parse(arch));
      assemble_and_print(g, arch);
    }
  }
}

TEST(Ptxas, CoverageKernelsAssemble) {
  ASSERT_TRUE(have_ptxas()) << "ptxas missing: see Ptxas.IsAvailable";
  for (const char* arch : kArches) {
    std::vector<GeneratedKernel> ks = kx::builder_coverage_kernels(Target::parse(arch));
    EXPECT_EQ(ks.size(), std::string(arch) == "sm_90" ? 5u : 4u);
    for (const GeneratedKernel& g : ks) {
      PtxasFunctionReport f = assemble(g, arch);
      if (g.name == "cover_sm90") {
        EXPECT_NE(g.ptx.find(".version 8.0\n"), std::string::npos);  // elect.sync
      }
      if (g.name == "cover_memory") {
        EXPECT_EQ(f.smem_bytes, 128u * 4 + 4 * 4) << "static shared only (dynamic is per launch)";
        EXPECT_GE(f.barriers, 2);
      }
    }
  }
}

TEST(Ptxas, ArchSpecificTarget) {
  ASSERT_TRUE(have_ptxas()) << "ptxas missing: see Ptxas.IsAvailable";
  Target t = Target::parse("sm_90a");
  for (const GeneratedKernel& g : kx::example_kernels(t)) {
    EXPECT_NE(g.ptx.find(".version 8.0\n.target sm_90a\n"), std::string::npos) << g.name;
    assemble(g, "sm_90a");
  }
}

TEST(Ptxas, RejectsBrokenPtxAndReportsIt) {
  ASSERT_TRUE(have_ptxas()) << "ptxas missing: see Ptxas.IsAvailable";
  // Negative control: the harness must see a failure when ptxas rejects.
  std::string bad = kx::example_kernels()[0].ptx;
  bad = std::regex_replace(bad, std::regex("add\\.rn\\.f32"), "add.rn.q32", std::regex_constants::format_first_only);
  PtxasResult r = run_ptxas(ptxas_path(), bad, "sm_80");
  EXPECT_FALSE(r.ok());
  EXPECT_NE(r.log.find("error"), std::string::npos) << r.log;
  EXPECT_TRUE(r.functions.empty());
  // Arguments go to ptxas unquoted and unsplit: a path with spaces fails cleanly.
  EXPECT_THROW(run_ptxas("/nonexistent dir/ptxas", bad, "sm_80"), Error);
}
