// Every kernel the decode chains of the real models and the synthetic ones
// need, and their persistent decoders (paged KV's too), assembled by ptxas
// for sm_80, sm_86, sm_89 and sm_90: accepted, no warnings, and no spills or
// stack frames (they are all hot).
#include <gtest/gtest.h>

#include <filesystem>
#include <map>
#include <string>
#include <vector>

#include "engine/cuda/decode_plan.h"
#include "kernels/ptx/ptxas.h"
#include "models/synth/synth.h"

#ifndef PTXLM_PTXAS
#define PTXLM_PTXAS ""
#endif

using namespace ptxlm;

namespace {

// ptxas's report on (arch, PTX), each distinct text assembled once: many
// models share kernels (the same type and shape, or the same persistent op
// set), and assembling a text twice proves nothing more.
struct Assembled {
  size_t runs = 0, lookups = 0;
  std::map<std::pair<std::string, std::string>, ptx::PtxasResult> results;
};
Assembled& assembled() {
  static Assembled a;
  return a;
}
const ptx::PtxasResult& assemble(const std::string& ptx, const std::string& arch) {
  Assembled& a = assembled();
  ++a.lookups;
  auto [it, fresh] = a.results.try_emplace({arch, ptx});
  if (fresh) {
    it->second = ptx::run_ptxas(PTXLM_PTXAS, ptx, arch);
    ++a.runs;
  }
  return it->second;
}

// contiguous: false for a model the contiguous cache refuses (gemma4):
// then both GEMV paths' plans are paged ones.
void assemble_all(const Model& m, const std::string& what, bool contiguous = true) {
  ASSERT_FALSE(std::string(PTXLM_PTXAS).empty()) << "ptxas not found: these tests never skip";
  // The standalone kernels of both GEMV paths (8-bit inputs, the default,
  // and f32 inputs, --gpu-path reference) and of paged KV, then the
  // persistent decoder on each path.
  const cuda::DecodePlan plan = cuda::decode_plan(m, 4096, true, kernels::kH100SxmSms, !contiguous),
                         ref = cuda::decode_plan(m, 4096, false, kernels::kH100SxmSms, !contiguous),
                         paged = cuda::decode_plan(m, 4096, true, kernels::kH100SxmSms, true);
  // The persistent decoder's plans: GEMV blocks of the schedule's warps
  // (gemma4's 8, cuda::gemv_warps).
  const uint32_t pw = cuda::gemv_warps(m, Schedule::Persistent);
  const cuda::DecodePlan p_plan = cuda::decode_plan(m, 4096, true, kernels::kH100SxmSms, !contiguous, pw),
                         p_ref = cuda::decode_plan(m, 4096, false, kernels::kH100SxmSms, !contiguous, pw),
                         p_paged = cuda::decode_plan(m, 4096, true, kernels::kH100SxmSms, true, pw);
  const kernels::PersistentState state = cuda::state_layout(!contiguous);
  for (const char* arch : {"sm_80", "sm_86", "sm_89", "sm_90"}) {
    std::vector<ptx::GeneratedKernel> ks = cuda::decode_kernels(plan, ptx::Target::parse(arch));
    EXPECT_GE(ks.size(), 8u);
    for (ptx::GeneratedKernel& g : cuda::decode_kernels(ref, ptx::Target::parse(arch)))
      if (g.name.starts_with("gemv")) ks.push_back(std::move(g));
    // Paged KV (the default): paged_rope and paged_attention per layer shape.
    size_t n_paged = 0;
    for (ptx::GeneratedKernel& g : cuda::decode_kernels(paged, ptx::Target::parse(arch)))
      if (g.name.starts_with("paged_")) ks.push_back(std::move(g)), ++n_paged;
    EXPECT_GE(n_paged, 2u) << what;
    // The persistent decoder on each path: every kind inline in one kernel, also hot.
    const size_t standalone = ks.size();
    for (const cuda::DecodePlan* p : {&p_plan, &p_ref})
      ks.push_back(kernels::persistent_kernel(cuda::decode_op_kinds(*p), ptx::Target::parse(arch), state).kernel);
    ptx::Target prefetching = ptx::Target::parse(arch);   // --gpu-prefetch: GEMV ops prefetch before their wait
    prefetching.prefetch = true;
    ks.push_back(kernels::persistent_kernel(cuda::decode_op_kinds(p_plan), prefetching, state).kernel);
    // Paged KV (the default): paged_rope and paged_attention inline, the advance
    // writing paged KV's state {pos, table row, token}.
    ks.push_back(kernels::persistent_kernel(cuda::decode_op_kinds(p_paged), ptx::Target::parse(arch),
                                            kernels::PersistentState{8, 0}).kernel);
    EXPECT_NE(ks.back().ptx.find("inline op paged_rope"), std::string::npos) << what;
    EXPECT_NE(ks.back().ptx.find("inline op paged_attention"), std::string::npos) << what;
    int max_regs = 0;
    std::vector<int> persistent_regs;
    for (const ptx::GeneratedKernel& g : ks) {
      const ptx::PtxasResult& r = assemble(g.ptx, arch);
      ASSERT_TRUE(r.ok()) << what << " " << g.name << " for " << arch << ":\n" << r.log;
      EXPECT_EQ(r.log.find("warning"), std::string::npos) << g.name << ":\n" << r.log;
      const ptx::PtxasFunctionReport* f = r.find(g.name);
      ASSERT_NE(f, nullptr) << g.name;
      EXPECT_TRUE(g.hot);
      EXPECT_FALSE(f->spills()) << what << " " << g.name << " spills on " << arch;
      EXPECT_EQ(f->stack_frame_bytes, 0u) << what << " " << g.name << " on " << arch;
      if (size_t(&g - ks.data()) >= standalone) persistent_regs.push_back(f->registers);
      else max_regs = std::max(max_regs, f->registers);
    }
    ASSERT_EQ(persistent_regs.size(), 4u);
    std::printf("[decode-plan] %s %s: %zu kernels, at most %d registers, no spills (persistent decoder, GEMVs of at "
                "most %u warps: %d registers, %d with f32 GEMV inputs, %d prefetching, %d with paged KV)\n",
                what.c_str(), arch, standalone, max_regs, pw, persistent_regs[0], persistent_regs[1], persistent_regs[2],
                persistent_regs[3]);
  }
  std::printf("[decode-plan] ptxas ran %zu times for %zu kernels so far (the rest were texts already assembled)\n",
              assembled().runs, assembled().lookups);
}

TEST(DecodePlan, RealModelsKernelsAssemble) {
  for (const char* file : {"SmolLM2-135M-Instruct.Q4_1.gguf", "gemma-3-270m-q4_k_m.gguf"}) {
    const std::string path = std::string(PTXLM_MODELS_DIR) + "/" + file;
    ASSERT_TRUE(std::filesystem::exists(path)) << path << " is missing: models/fetch (run by ./run.sh) puts it there";
    assemble_all(Model::load(path), file);
  }
}

TEST(DecodePlan, SyntheticModelsKernelsAssemble) {
  for (synth::Arch a : synth::all_archs()) {
    std::vector<uint8_t> bytes = synth::model_bytes(synth::preset(a, synth::Size::Small));
    assemble_all(Model::from_file(gguf::File::parse(bytes, "synth")), std::string("synth ") + synth::arch_name(a));
  }
}

// Gemma 4 (paged KV only): its small preset's kernels (the size every
// synthetic arch is assembled at), the per-layer embedding steps, the F32
// projection's GEMV, the q-only RoPE and the soft-cap among them, and its
// persistent decoder (GEMV blocks of 8 warps, cuda::gemv_warps) on every
// arch without spills.
TEST(DecodePlan, Gemma4KernelsAssemble) {
  // small, then small with Gemma-4-E2B's attention (8 query heads over one
  // KV head, full layers of head 512, sliding ones of 256).
  for (bool e2b : {false, true}) {
    synth::Spec spec = synth::preset(synth::Arch::Gemma4, synth::Size::Small);
    if (e2b) spec.n_head = 8, spec.n_head_kv = 1, spec.head_dim = 512, spec.head_dim_swa = 256;
    std::vector<uint8_t> bytes = synth::model_bytes(spec);
    const Model m = Model::from_file(gguf::File::parse(bytes, "synth"));
    std::string names;
    for (const ptx::GeneratedKernel& g :
         cuda::decode_kernels(cuda::decode_plan(m, 4096, true, kernels::kH100SxmSms, true), ptx::Target::parse("sm_90")))
      names += g.name + " ";
    for (const char* want : {"ple_input_", "_geluby_", "softcap_", "_qonly", "_vnorm", "_scaled", "_f32x"})
      EXPECT_NE(names.find(want), std::string::npos) << want << " not among " << names;
    assemble_all(m, e2b ? "synth gemma4 small, E2B's attention" : "synth gemma4 small", false);
  }
}

// --gpu-pdl's kernels: every standalone kernel of gemma-3-270m's chain (both
// GEMV paths) opens with griddepcontrol.wait before any memory access and
// then launches its dependents, and assembles for sm_90 without spills;
// sm_80 has no griddepcontrol and is refused.
TEST(DecodePlan, ProgrammaticLaunchKernelsWaitBeforeTheirFirstAccess) {
  ASSERT_FALSE(std::string(PTXLM_PTXAS).empty()) << "ptxas not found: these tests never skip";
  const Model m = Model::load(std::string(PTXLM_MODELS_DIR) + "/gemma-3-270m-q4_k_m.gguf");
  ptx::Target t = ptx::Target::parse("sm_90");
  t.pdl = true;
  size_t n = 0;
  for (bool q : {true, false}) {
    for (const ptx::GeneratedKernel& g : cuda::decode_kernels(cuda::decode_plan(m, 1024, q, kernels::kH100SxmSms), t)) {
      const size_t body = g.ptx.find("{", g.ptx.find(".entry"));
      const size_t wait = g.ptx.find("griddepcontrol.wait;", body);
      const size_t trigger = g.ptx.find("griddepcontrol.launch_dependents;", body);
      ASSERT_NE(wait, std::string::npos) << g.name;
      EXPECT_LT(wait, trigger) << g.name;
      for (const char* access : {"\tld.", "\tst.", "\tatom.", "\tred.", "\tcp.async"})
        EXPECT_GT(g.ptx.find(access, body), wait) << g.name << ": " << access << " before the wait";
      const ptx::PtxasResult r = ptx::run_ptxas(PTXLM_PTXAS, g.ptx, "sm_90");
      ASSERT_TRUE(r.ok()) << g.name << ":\n" << r.log;
      ASSERT_NE(r.find(g.name), nullptr) << g.name;
      EXPECT_FALSE(r.find(g.name)->spills()) << g.name;
      ++n;
    }
  }
  EXPECT_GE(n, 10u);
  ptx::Target old = ptx::Target::parse("sm_80");
  old.pdl = true;
  EXPECT_THROW(cuda::decode_kernels(cuda::decode_plan(m, 1024, true, kernels::kH100SxmSms), old), ptx::Error);
}

// --gpu-prefetch in the persistent decoder: each GEMV op's prefetch comes
// before the op's dependency wait (the first acquire poll of the op loop), one
// per GEMV kind (the other kinds have none); without the flag no prefetch.
TEST(DecodePlan, PersistentDecoderPrefetchesBeforeItsDependencyWait) {
  const Model m = Model::load(std::string(PTXLM_MODELS_DIR) + "/gemma-3-270m-q4_k_m.gguf");
  const cuda::DecodePlan plan = cuda::decode_plan(m, 1024, true, kernels::kH100SxmSms);
  ptx::Target t = ptx::Target::parse("sm_90");
  EXPECT_EQ(kernels::persistent_kernel(cuda::decode_op_kinds(plan), t).kernel.ptx.find("prefetch"), std::string::npos);
  t.prefetch = true;
  const std::string ptx = kernels::persistent_kernel(cuda::decode_op_kinds(plan), t).kernel.ptx;
  const size_t loop = ptx.find("the op table, in order");
  const size_t first = ptx.find("prefetch.global.L2", loop), wait = ptx.find("ld.acquire.gpu", loop);
  ASSERT_NE(loop, std::string::npos);
  ASSERT_NE(first, std::string::npos);
  EXPECT_LT(first, wait);
  size_t kinds = 0;
  for (size_t at = ptx.find("prefetch of inline op gemv"); at < wait; at = ptx.find("prefetch of inline op gemv", at + 1)) ++kinds;
  size_t gemvs = 0;
  for (const kernels::OpGenerator& g : cuda::decode_op_kinds(plan)) gemvs += g(t, nullptr).name.starts_with("gemv");
  EXPECT_EQ(kinds, gemvs);
  EXPECT_GE(gemvs, 4u);
}

TEST(DecodePlan, LayerShapesFollowTheModel) {
  const Model m = Model::load(std::string(PTXLM_MODELS_DIR) + "/gemma-3-270m-q4_k_m.gguf");
  const cuda::DecodePlan p = cuda::decode_plan(m, 1024, true, kernels::kH100SxmSms);
  ASSERT_EQ(p.layers.size(), m.layers.size());
  for (size_t il = 0; il < p.layers.size(); ++il) {
    const cuda::LayerPlan& l = p.layers[il];
    EXPECT_EQ(l.attention.window, m.layers[il].sliding ? m.hp.sliding_window : 0u) << il;
    EXPECT_TRUE(l.post_attn_norm && l.post_ffn_norm && l.attention.qk_norm && l.attention.neox);
    EXPECT_FALSE(l.wo.accumulate || l.down.accumulate);   // gemma3 adds through its post norms
    EXPECT_EQ(l.gate_up.glu, kernels::Glu::GeGlu);
  }
  EXPECT_EQ(p.head.segments.at(0).rows, m.n_vocab);
  EXPECT_EQ(p.embed.scale, m.embd_scale);
}

// Every GEMV grid is one wave of the SMs the plan is made for, with the
// fewest rows per block that fit (H100 PCIe's 114 SMs: 114 blocks, not a
// second wave of 18 as a grid sized for 132 would run); no SMs is refused.
TEST(DecodePlan, GemvGridsAreOneWaveOfTheDevicesSms) {
  const Model m = Model::load(std::string(PTXLM_MODELS_DIR) + "/gemma-3-270m-q4_k_m.gguf");
  for (uint32_t sms : {8u, 108u, 114u, 132u}) {
    const cuda::DecodePlan p = cuda::decode_plan(m, 1024, true, sms);
    std::vector<const kernels::GemvShape*> shapes = {&p.head};
    for (const cuda::LayerPlan& l : p.layers)
      for (const kernels::GemvShape* s : {&l.qkv, &l.wo, &l.gate_up, &l.down}) shapes.push_back(s);
    for (const kernels::GemvShape* s : shapes) {
      uint32_t rows = 0;
      for (const kernels::GemvSegment& g : s->segments) rows += g.rows;
      if (s->glu != kernels::Glu::None) rows = s->segments[0].rows;
      const uint32_t grid = kernels::gemv_geometry(*s).grid.x, rpb = kernels::gemv_plan(*s).rows_per_block;
      EXPECT_EQ(s->sms, sms);
      EXPECT_LE(grid, sms) << kernels::gemv_kernel(*s).name;
      EXPECT_TRUE(rpb == 1 || (rows + rpb - 2) / (rpb - 1) > sms) << "fewer rows per block would fit " << rows;
    }
    EXPECT_EQ(kernels::gemv_geometry(p.head).grid.x, sms);   // 262144 rows fill every SM
  }
  EXPECT_THROW(cuda::decode_plan(m, 1024, true, 0), std::invalid_argument);
}

}  // namespace

// A type the GPU path has no kernel for is refused by name when the plan is
// made, before anything is allocated (so `--device auto` falls back to the
// CPU): a matrix (the GEMVs), the token embedding and gemma4's per-layer
// embedding table (the embedding kernel). Only the types are changed: the
// plan reads no weight bytes.
TEST(DecodePlan, RefusesTypesItHasNoKernelForByName) {
  std::vector<uint8_t> bytes = synth::model_bytes(synth::preset(synth::Arch::Gemma4, synth::Size::Tiny));
  const Model base = Model::from_file(gguf::File::parse(bytes, "synth"));
  EXPECT_NO_THROW(cuda::decode_plan(base, 64, true, 8, true));
  auto refusal = [&](void (*edit)(Model&)) {
    Model m = Model::from_file(gguf::File::parse(bytes, "synth"));
    edit(m);
    try {
      cuda::decode_plan(m, 64, true, 8, true);
    } catch (const ModelError& e) {
      return std::string(e.what());
    }
    return std::string("(no refusal)");
  };
  EXPECT_EQ(refusal([](Model& m) { m.layers[1].up.type = gguf::GgmlType::Q5_1; }),
            "blk.1.ffn_up.weight: weight type Q5_1 is not supported on the GPU path yet");
  EXPECT_EQ(refusal([](Model& m) { m.tok_embd.type = gguf::GgmlType::Q5_1; }),
            "token_embd.weight: weight type Q5_1 is not supported on the GPU path's embedding rows yet");
  EXPECT_EQ(refusal([](Model& m) { m.per_layer_tok_embd.type = gguf::GgmlType::Q5_1; }),
            "per_layer_token_embd.weight: weight type Q5_1 is not supported on the GPU path's embedding rows yet");
}
