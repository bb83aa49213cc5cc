// The CPU backend against llama.cpp's logits (tests/golden/
// llamacpp_*.json, recorded by bench/golden-llamacpp with llama-cpp-python):
// the reference arithmetic against the F32 twins, both arithmetics against
// llama.cpp on the quantized files.
//
// llama.cpp's CPU backend rounds activations to 8 bits before its quantized
// dot products, so on a quantized file its logits carry noise of its own: its
// batched and one-token-at-a-time logits differ by up to 1.6 (gemma-3-270m;
// tolerance_hint in each file). The tight check therefore runs on each
// model's F32 twin (the same weights dequantized by llama-quantize, which
// llama.cpp multiplies in float32), recorded with an f32 KV cache:
//  - teacher-forced on llama.cpp's greedy sequence (prompt + 64 tokens), our
//    logits at llama.cpp's top-20 ids, and the row's log-sum-exp, agree within
//    the model's tolerance at every position;
//  - our argmax is llama.cpp's wherever llama.cpp's top-2 margin exceeds
//    twice the tolerance; positions under it are near-ties, reported, and at least 90%
//    of positions must be checked;
//  - free-running greedy output equals llama.cpp's on most prompts, and every
//    divergence starts at a near-tie (its first tokens decoded one at a
//    time, bit for bit the teacher-forced rows, the rest read from them).
// A negative control repeats it with a wrong RoPE base on layer 1 (gemma3:
// the global base on a local layer; others: 10% off) and requires the
// comparison to fail; so do the q/k norms (gemma3, qwen3), rope_freqs and
// linear RoPE scaling (llama3), YaRN and the attention temperature (mistral3),
// LongRoPE's factors and their magnitude (phi3), gemma4's per-layer
// embeddings, v norm and output scales each left out of the model
// description, phi3's LongRoPE sets or its fused gate/up halves swapped, and
// gemma4's shared-KV layers reading the wrong layer. Our reference path reads the quantized file itself
// (no dequantized copy), so this checks its dequantization too.
//
// The same sequences as llama.cpp computes them on the quantized file (what
// its users get) are compared too, with a tolerance set by llama.cpp's own
// noise: log-probabilities, and the argmax where the margin exceeds twice it;
// on every Isa the engine can select here.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "engine/cpu/cpu_backend.h"
#include "engine/sampler.h"
#include "models/synth/synth.h"

using namespace ptxlm;
using nlohmann::json;

namespace {

struct Case {
    const char* golden;    // tests/golden/llamacpp_<golden>[_f32].json
    const char* model;     // file in PTXLM_MODELS_DIR, or "synth:<arch>[:<type mix>]"
    float tol;             // vs the F32 twin: logits and log-sum-exp, absolute (spread ~30 real, ~6 synthetic)
    float tol_q;           // vs llama.cpp on the quantized file, log-probabilities: scalar, avx2, reference path
    float tol_q_avx512;    // the same on avx512 and avx512vnni (see below)
};

// Every bound is 1.25 x the largest maximum measured (issue 19, 2026-11-25,
// AMD EPYC, avx2 machine); the negative controls must land at least twice
// the bound away. gemma3's F32 bounds are wider: llama.cpp's CPU GELU reads
// a table indexed by the input rounded to f16.
//
// F32 twin (the reference path: the same plain C++ on every Isa), max of
// |logit diff| and |log-sum-exp diff|; control (layer 1's RoPE base wrong):
//   gemma3-270m 0.0273 -> 0.035, control 1.075
//   smollm2-135m 1.335e-4 -> 1.7e-4, control 0.0774
//   synth-llama 5.531e-5 -> 7.0e-5, control 0.2557
//   synth-qwen2 5.722e-5 -> 7.2e-5, control 0.1751
//   synth-gemma3 0.01014 -> 0.013, control 8.371
//   synth-qwen3 5.913e-5 -> 7.4e-5, control 0.2823 (issue 25, 2026-11-27)
//   synth-llama3 5.436e-5 -> 6.8e-5, control 0.05705 (issue 25)
//   synth-mistral3 5.627e-5 -> 7.1e-5, control 0.1146 (issue 25; without
//   YaRN 9.673, without the attention temperature 0.9267)
//   synth-phi3 5.627e-5 -> 7.1e-5, control 0.1961 (issue 25, 2026-11-27, an
//   AVX-512 machine; at the context of 1024, LongRoPE's long factors: without
//   them 8.654, the short ones instead 9.265, without the magnitude 0.8968,
//   gate and up swapped 14.87)
//   synth-phi4mini 5.531e-5 -> 6.9e-5, control 0.1529 (issue 25, 2026-11-28,
//   an AVX-512 VNNI machine; partial rotary, 48 of 64 dims: the whole head
//   rotated 8.347, 1.2e5 x the bound; without the factors 7.653, the short
//   ones 6.906, without the magnitude 0.9467, gate and up swapped 13.39)
// Quantized file, max |log-prob diff| (llama.cpp's own 8-bit activation noise
// dominates): scalar (real models: the first two prompts; all eight, as
// PTXLM_CPU_ISA=scalar runs them: gemma3-270m 1.366, smollm2-135m 1.175) /
// avx2 / reference path; control (every layer's RoPE base a tenth of the
// file's, avx2; scalar 6.459 and 4.633 on the real models):
//   gemma3-270m 0.7715 / 1.416 / 1.507 -> 1.9, control 6.196
//   smollm2-135m 1.048 / 1.260 / 0.9810 -> 1.58, control 4.738
// With the packed AVX2 kernels (2026-11-27, Zen 3 EPYC, PTXLM_CPU_ISA=avx2,
// fresh clone at 0387af5; another float order per row, the same integers):
//   gemma3-270m avx2 1.958 -> 2.45, control 5.991
//   smollm2-135m avx2 1.408 -> 1.76, control 4.46
//   synth-llama 0.4589 / 0.4589 / 0.4621 -> 0.58, control 7.891
//   synth-qwen2 0.4318 / 0.4507 / 0.5302 -> 0.67, control 8.075
//   synth-gemma3 1.187 / 1.210 / 1.019 -> 1.52, control 15.14
// Issue 25 (2026-11-27, the same kind of machine, packed AVX2 kernels; the
// goldens recorded on build-peer/llama.cpp/bin's libllama):
//   synth-qwen3 0.4979 / 0.5690 / 0.4524 -> 0.71, control 8.514
//   synth-llama3 0.5017 / 0.5017 / 0.4614 -> 0.63, control 3.304
//   synth-mistral3 0.5057 / 0.6325 / 0.5894 -> 0.79, control 6.137
//   synth-phi3 0.5298 / 0.5298 / 0.5098 -> 0.67, control 7.630 (2026-11-27,
//   an AVX-512 machine: avx512 and avx512vnni 0.5298 too)
//   synth-phi4mini 0.4410 / 0.4410 / 0.4207, avx512 and avx512vnni 0.4514
//   -> 0.57, control 6.262 (issue 25, 2026-11-28, the AVX-512 VNNI machine)
//   synth-gemma4 (issue 25, 2026-11-28, an AVX-512 VNNI machine; its
//   per_layer_model_proj is F32 in both files, as llama-quantize leaves that
//   tensor alone, which at Q4_K alone had put 0.05 on the twin): F32 twin
//   0.01085 -> 0.014 (0.00269 with llama.cpp's f16 GELU table emulated at a
//   soft-cap of 15, like gemma3's 0.0101 -> 0.0034), control 0.8148; without
//   rope_freqs (proportional RoPE) 7.606, without the per-layer embeddings
//   19.46, shared-KV layers reading layers 0/1 17.75, without v's norm 1.805,
//   without the soft-cap 4.874, without the output scales 4.613; quantized
//   file scalar 0.8624 / avx2 0.9922 / reference 0.9019, avx512 and
//   avx512vnni 0.8630 -> 1.24, control 19.52; on 2026-12-02 (a Zen 4 EPYC,
//   the soft-cap vectorised in the quantized path) scalar 0.8624 / avx2
//   0.8377 / avx512 and avx512vnni 0.9071 / reference 0.9019, the same four
//   digits as the build before that change gave
//   synth-llama-f16 and synth-llama-bf16 (issue 25, 2026-12-02, an AVX-512
//   VNNI Xeon, family 6 model 207; ptxlm-synth --types f16 / bf16: every
//   matrix, the embedding and the LM head 16-bit; goldens from this
//   machine's native libllama): F32 twin 5.817e-5 on both -> 7.3e-5 (the
//   same weights exactly, so the plain llama's bound), control 0.3539 and
//   0.2453; the file itself, where llama.cpp rounds each product's input
//   to f16 or bf16 and we do not (exact f32 products for 16-bit matrices,
//   every Isa): F16 0.01203 on every Isa and the reference path -> 0.015,
//   control 7.543; BF16 0.08283 -> 0.104, control 8.844
// avx512 / avx512vnni, measured 2026-11-28 on an AVX-512 VNNI Xeon (Intel
// family 6 model 207; the 32-element types on the packed AVX2 kernels):
// gemma3-270m 0.9317 (2 prompts) / 1.428 (8), smollm2-135m 0.9948 / 1.022,
// synth llama 0.4589, qwen2 0.4318, gemma3 1.095, qwen3 0.5690, llama3
// 0.5017, mistral3 0.6325, phi3 0.5298 on both: every one within the avx2
// column's bound, which both Isas now share.
const Case kCases[] = {
    {"gemma3-270m", "gemma-3-270m-q4_k_m.gguf", 0.035f, 2.45f, 2.45f},
    {"smollm2-135m", "SmolLM2-135M-Instruct.Q4_1.gguf", 1.7e-4f, 1.76f, 1.76f},
    {"synth-llama", "synth:llama", 7.0e-5f, 0.58f, 0.58f},
    {"synth-qwen2", "synth:qwen2", 7.2e-5f, 0.67f, 0.67f},
    {"synth-gemma3", "synth:gemma3", 0.013f, 1.52f, 1.52f},
    {"synth-qwen3", "synth:qwen3", 7.4e-5f, 0.71f, 0.71f},
    {"synth-llama3", "synth:llama3", 6.8e-5f, 0.63f, 0.63f},
    {"synth-mistral3", "synth:mistral3", 7.1e-5f, 0.79f, 0.79f},
    {"synth-phi3", "synth:phi3", 7.1e-5f, 0.67f, 0.67f},
    {"synth-phi4mini", "synth:phi4mini", 6.9e-5f, 0.57f, 0.57f},
    {"synth-gemma4", "synth:gemma4", 0.014f, 1.24f, 1.24f},
    {"synth-llama-f16", "synth:llama:f16", 7.3e-5f, 0.015f, 0.015f},
    {"synth-llama-bf16", "synth:llama:bf16", 7.3e-5f, 0.104f, 0.104f},
};

float tol_q(const Case& c, cpu::Isa isa) {
    return isa == cpu::Isa::Avx512 || isa == cpu::Isa::Avx512Vnni ? c.tol_q_avx512 : c.tol_q;
}

json load_golden(const std::string& name) {
    std::ifstream in(std::string(PTXLM_SOURCE_DIR) + "/tests/golden/llamacpp_" + name + ".json");
    if (!in) return {};
    return json::parse(in);
}

// The model the golden file was recorded on (synthetic ones regenerated).
Model load_model(const Case& c, std::vector<uint8_t>* keep) {
    std::string m = c.model;
    if (m.rfind("synth:", 0) == 0) {   // synth:<arch>[:<type mix>]
        const size_t colon = m.find(':', 6);
        auto arch = synth::parse_arch(m.substr(6, colon == std::string::npos ? std::string::npos : colon - 6));
        synth::Spec spec = synth::preset(*arch, synth::Size::Tiny);
        if (colon != std::string::npos) spec.types = *synth::parse_type_mix(m.substr(colon + 1));
        *keep = synth::model_bytes(spec);
        return Model::from_file(gguf::File::parse(*keep, m));
    }
    return Model::load(std::string(PTXLM_MODELS_DIR) + "/" + m);
}

struct Stats {
    size_t positions = 0, checked = 0, near_ties = 0, argmax_wrong = 0;
    float max_logit_diff = 0, max_lse_diff = 0, max_logprob_diff = 0;
    size_t prompts = 0, identical = 0, divergences_off_tie = 0;
};

uint32_t argmax(const float* l, size_t n) { return uint32_t(std::max_element(l, l + n) - l); }

// Teacher-forced logits of seq[0..n-1) (row i predicts seq[i+1]).
std::vector<float> teacher_forced(Backend& b, const std::vector<TokenId>& seq) {
    const size_t nv = b.n_vocab(), n = seq.size() - 1;
    std::vector<float> rows(n * nv);
    for (size_t i = 0; i < n; i += b.max_batch()) {
        const uint32_t k = uint32_t(std::min<size_t>(b.max_batch(), n - i));
        b.eval_batch({seq.data() + i, k}, uint32_t(i), &rows[i * nv], k);
    }
    return rows;
}

// free_run: also decode greedily from each prompt and compare the outputs.
Stats compare(Backend& b, const json& golden, float tol, bool verbose, bool free_run = true) {
    Stats st;
    const size_t nv = b.n_vocab();
    for (const json& p : golden["prompts"]) {
        std::vector<TokenId> prompt = p["prompt_ids"].get<std::vector<TokenId>>();
        std::vector<TokenId> gen = p["generated_ids"].get<std::vector<TokenId>>();
        std::vector<TokenId> seq = prompt;
        seq.insert(seq.end(), gen.begin(), gen.end());
        const std::vector<float> rows = teacher_forced(b, seq);
        const json& pos = p["positions"];
        std::vector<bool> tie(pos.size());
        for (size_t i = 0; i < pos.size(); ++i) {
            const float* r = &rows[i * nv];
            const json& top = pos[i]["top"];
            const double our_lse = log_sum_exp({r, nv}), their_lse = pos[i]["lse"].get<double>();
            for (const json& pair : top) {
                const float ours = r[pair[0].get<int>()], theirs = pair[1].get<float>();
                st.max_logit_diff = std::max(st.max_logit_diff, std::fabs(ours - theirs));
                const double d = std::fabs((ours - our_lse) - (theirs - their_lse));
                st.max_logprob_diff = std::max(st.max_logprob_diff, float(d));
            }
            st.max_lse_diff = std::max(st.max_lse_diff, float(std::fabs(our_lse - their_lse)));
            const float margin = top[0][1].get<float>() - top[1][1].get<float>();
            ++st.positions;
            // Two logits each up to `tol` off can swap when their margin is
            // under twice that.
            tie[i] = margin <= 2 * tol;
            if (tie[i]) { ++st.near_ties; continue; }
            ++st.checked;
            if (int(argmax(r, nv)) != top[0][0].get<int>()) ++st.argmax_wrong;
        }
        ++st.prompts;
        if (!free_run) continue;
        // Greedy from the prompt, as a chat decodes: the prompt in batches,
        // then one token at a time. While its tokens are llama.cpp's, its
        // context is the teacher-forced one, and the backend's logits do not
        // depend on how tokens are batched (CpuBackend: bit for bit), so its
        // logits are the teacher-forced rows: the first kFreeSteps tokens
        // are decoded and their logits required to be those rows' bits, the
        // rest read from the rows (64 one-token steps of a 270M model in
        // f32 were most of this test's time).
        constexpr size_t kFreeSteps = 4;
        std::vector<float> logits(nv);
        for (size_t i = 0; i < prompt.size(); i += b.max_batch()) {
            const uint32_t k = uint32_t(std::min<size_t>(b.max_batch(), prompt.size() - i));
            const bool last = i + k == prompt.size();
            b.eval_batch({prompt.data() + i, k}, uint32_t(i), last ? logits.data() : nullptr, last ? 1 : 0);
        }
        size_t diverge = gen.size();
        for (size_t g = 0; g < gen.size() && diverge == gen.size(); ++g) {
            const float* row = &rows[(prompt.size() - 1 + g) * nv];
            if (g < kFreeSteps) {
                EXPECT_EQ(std::memcmp(logits.data(), row, nv * sizeof(float)), 0)
                    << "prompt " << st.prompts - 1 << ", generated token " << g
                    << ": one-token logits differ from the batched (teacher-forced) row";
            }
            const TokenId t = TokenId(argmax(g < kFreeSteps ? logits.data() : row, nv));
            if (t != gen[g]) diverge = g;
            else if (g + 1 < kFreeSteps && g + 1 < gen.size()) b.eval(t, uint32_t(prompt.size() + g), logits.data());
        }
        if (diverge == gen.size()) {
            ++st.identical;
        } else {
            // Row of llama.cpp's sequence that chose generated token `diverge`.
            const size_t row = prompt.size() - 1 + diverge;
            const bool at_tie = tie[row];
            if (!at_tie) ++st.divergences_off_tie;
            if (verbose)
                std::printf("    prompt %zu: greedy output diverges at generated token %zu (%s)\n", st.prompts - 1, diverge,
                            at_tie ? "a near-tie in llama.cpp's logits" : "NOT at a near-tie");
        }
    }
    return st;
}

class VsLlamaCpp : public ::testing::TestWithParam<Case> {};

// The negative controls' defect. gemma3: the global layers' base on local
// layer 1 (a bug that is easy to make); elsewhere the base 10% off.
float wrong_rope_base(const Model& m) {
    const float wrong = m.layers[1].sliding ? m.hp.rope_base : m.layers[1].rope_base * 1.1f;
    EXPECT_NE(wrong, m.layers[1].rope_base);
    return wrong;
}

void print(const char* what, const Case& c, const Stats& st, float tol) {
    std::printf("  %s %s: %zu prompts, %zu positions; max |logit diff| %.4g, |log-sum-exp diff| %.4g, "
                "|log-prob diff| %.4g (tolerance %.3g); %zu near-ties, %zu checked (%.1f%%), argmax wrong at %zu; "
                "greedy identical on %zu/%zu\n",
                c.golden, what, st.prompts, st.positions, st.max_logit_diff, st.max_lse_diff, st.max_logprob_diff, tol,
                st.near_ties, st.checked, 100.0 * st.checked / st.positions, st.argmax_wrong, st.identical, st.prompts);
}

TEST_P(VsLlamaCpp, F32TwinTeacherForcedLogitsAndGreedyOutputAgree) {
    const Case& c = GetParam();
    const json golden = load_golden(std::string(c.golden) + "_f32");
    ASSERT_FALSE(golden.is_null()) << "tests/golden/llamacpp_" << c.golden << "_f32.json is missing";
    std::vector<uint8_t> keep;
    Model m = load_model(c, &keep);
    ASSERT_EQ(golden["sha256"].get<std::string>().size(), 64u);
    cpu::CpuBackend b(m, 1024, KvType::F32, 0);
    b.set_path(cpu::CpuPath::Reference);   // float32 arithmetic, as llama.cpp runs the F32 twin
    const Stats st = compare(b, golden, c.tol, true);
    print("(F32 twin)", c, st, c.tol);
    EXPECT_LE(st.max_logit_diff, c.tol);
    EXPECT_LE(st.max_lse_diff, c.tol);
    EXPECT_EQ(st.argmax_wrong, 0u);
    EXPECT_GE(st.checked * 10, st.positions * 9) << "fewer than 90% of positions had a margin above the tolerance";
    EXPECT_GE(st.identical * 2, st.prompts) << "greedy output differs on most prompts";
    EXPECT_EQ(st.divergences_off_tie, 0u);
}

TEST_P(VsLlamaCpp, NegativeControlWrongRopeBaseOnOneLayerFails) {
    const Case& c = GetParam();
    const json golden = load_golden(std::string(c.golden) + "_f32");
    ASSERT_FALSE(golden.is_null());
    std::vector<uint8_t> keep;
    Model m = load_model(c, &keep);
    cpu::CpuBackend b(m, 1024, KvType::F32, 0);
    b.set_path(cpu::CpuPath::Reference);
    b.debug_set_rope_base(1, wrong_rope_base(m));
    json some = golden;
    some["prompts"] = json::array({golden["prompts"][0], golden["prompts"][golden["prompts"].size() - 1]});
    const Stats st = compare(b, some, c.tol, false);
    print("(F32 twin, layer 1 with a wrong RoPE base)", c, st, c.tol);
    EXPECT_GE(st.max_logit_diff, 2 * c.tol) << "the tolerance is over half of what a wrong RoPE base moves";
}

// Negative controls for what a model has beyond plain llama: with the feature
// taken out of the model description (`remove` returns false when the model
// has none), the F32 twin comparison must land at least twice the tolerance
// away.
void expect_removing_fails(const Case& c, const char* what, void (*remove)(Model&), bool (*has)(const Model&)) {
    const json golden = load_golden(std::string(c.golden) + "_f32");
    ASSERT_FALSE(golden.is_null());
    std::vector<uint8_t> keep;
    Model m = load_model(c, &keep);
    if (!has(m)) GTEST_SKIP() << c.golden << " has no " << what;   // only the models that have it
    remove(m);
    cpu::CpuBackend b(m, 1024, KvType::F32, 0);
    b.set_path(cpu::CpuPath::Reference);
    json some = golden;
    some["prompts"] = json::array({golden["prompts"][0], golden["prompts"][golden["prompts"].size() - 1]});
    const Stats st = compare(b, some, c.tol, false);
    print((std::string("(F32 twin, without its ") + what + ")").c_str(), c, st, c.tol);
    std::printf("    control: %.1f x the tolerance\n", st.max_logit_diff / c.tol);
    EXPECT_GE(st.max_logit_diff, 2 * c.tol) << "the tolerance is over half of what leaving out " << what << " moves";
}

// gemma3, qwen3: the per-head RMSNorm of q and k before RoPE.
TEST_P(VsLlamaCpp, NegativeControlWithoutQkNormFails) {
    expect_removing_fails(
        GetParam(), "q/k norms",
        [](Model& m) { for (LayerDesc& l : m.layers) l.q_norm = l.k_norm = Weight{}; },
        [](const Model& m) { return bool(m.layers[0].q_norm); });
}

// Llama 3.x: the rope_freqs divisors, and linear RoPE scaling, each left out.
TEST_P(VsLlamaCpp, NegativeControlWithoutRopeFreqsFails) {
    expect_removing_fails(
        GetParam(), "rope_freqs", [](Model& m) { m.rope_freqs = Weight{}; },
        [](const Model& m) { return bool(m.rope_freqs); });
}

TEST_P(VsLlamaCpp, NegativeControlWithoutLinearRopeScalingFails) {
    expect_removing_fails(
        GetParam(), "linear RoPE scaling", [](Model& m) { m.rope_freq_scale = 1.0f; },
        [](const Model& m) { return m.rope_freq_scale != 1.0f; });
}

// Mistral 3: YaRN (plain RoPE instead: no per-pair mix, no magnitude), and
// the attention temperature, each left out.
TEST_P(VsLlamaCpp, NegativeControlWithoutYarnFails) {
    expect_removing_fails(
        GetParam(), "YaRN", [](Model& m) { m.yarn.reset(), m.rope_mscale = 1.0f; },
        [](const Model& m) { return bool(m.yarn); });
}

TEST_P(VsLlamaCpp, NegativeControlWithoutAttentionTemperatureFails) {
    expect_removing_fails(
        GetParam(), "attention temperature", [](Model& m) { m.attn_temp_scale = 0; },
        [](const Model& m) { return m.attn_temp_scale != 0; });
}

// Phi-3/Phi-4: LongRoPE's factors (at the tests' context of 1024, past the
// file's original 512, the long set) left out, the short set used instead,
// the magnitude (rope.scaling.attn_factor) left out, and the fused ffn_up
// read with its halves the other way round (up's rows as the gate).
TEST_P(VsLlamaCpp, NegativeControlWithoutLongRopeFactorsFails) {
    expect_removing_fails(
        GetParam(), "LongRoPE factors", [](Model& m) { m.rope_factors_long = m.rope_factors_short = Weight{}; },
        [](const Model& m) { return bool(m.rope_factors_long); });
}

TEST_P(VsLlamaCpp, NegativeControlShortLongRopeFactorsFail) {
    expect_removing_fails(
        GetParam(), "long LongRoPE factors (the short ones instead)",
        [](Model& m) { std::swap(m.rope_factors_long, m.rope_factors_short); },
        [](const Model& m) { return bool(m.rope_factors_long); });
}

TEST_P(VsLlamaCpp, NegativeControlWithoutRopeMagnitudeFails) {
    expect_removing_fails(
        GetParam(), "RoPE magnitude (rope.scaling.attn_factor)", [](Model& m) { m.rope_mscale = 1.0f; },
        [](const Model& m) { return !m.yarn && m.rope_mscale != 1.0f; });
}

TEST_P(VsLlamaCpp, NegativeControlGateAndUpSwappedFails) {
    expect_removing_fails(
        GetParam(), "gate/up order (swapped)",
        [](Model& m) { for (LayerDesc& l : m.layers) std::swap(l.gate, l.up); },
        [](const Model& m) { return m.hp.arch == "phi3"; });
}

// Phi-4-mini's partial rotary (n_rot 3/4 of the head): every dim of the head
// rotated instead, at rates base^(-2i/head_dim) (the LongRoPE factors on the
// first n_rot/2 pairs only).
TEST_P(VsLlamaCpp, NegativeControlWholeHeadRotationFails) {
    expect_removing_fails(
        GetParam(), "partial rotary (the whole head rotated)", [](Model& m) { m.n_rot = m.head_dim; },
        [](const Model& m) { return m.n_rot != m.head_dim; });
}

// Gemma 4: the per-layer embeddings, each shared-KV layer reading the first
// layer of its kind (0 sliding, 1 full) instead of llama.cpp's source, the
// unweighted RMSNorm of v, the final soft-cap and the layers' output scales,
// each left out.
// (Its proportional RoPE is rope_freqs, left out by the control above.)
TEST_P(VsLlamaCpp, NegativeControlWithoutPerLayerEmbeddingsFails) {
    expect_removing_fails(
        GetParam(), "per-layer embeddings",
        [](Model& m) {
            m.n_embd_per_layer = 0;
            m.per_layer_tok_embd = m.per_layer_model_proj = m.per_layer_proj_norm = Weight{};
            for (LayerDesc& l : m.layers) l.ple_gate = l.ple_proj = l.ple_post_norm = Weight{};
        },
        [](const Model& m) { return m.n_embd_per_layer > 0; });
}

TEST_P(VsLlamaCpp, NegativeControlSharedKvFromTheWrongLayerFails) {
    expect_removing_fails(
        GetParam(), "shared-KV source layers (the first of each kind instead)",
        [](Model& m) {
            for (uint32_t il = 0; il < m.layers.size(); ++il)
                if (!m.has_kv(il)) m.layers[il].kv_layer = m.layers[il].sliding ? 0 : 1;
        },
        [](const Model& m) {
            for (uint32_t il = 0; il < m.layers.size(); ++il)
                if (!m.has_kv(il)) return m.layers[0].sliding && !m.layers[1].sliding;
            return false;
        });
}

TEST_P(VsLlamaCpp, NegativeControlWithoutVNormFails) {
    expect_removing_fails(
        GetParam(), "RMSNorm of v", [](Model& m) { for (LayerDesc& l : m.layers) l.v_norm = false; },
        [](const Model& m) { return m.layers[0].v_norm; });
}

TEST_P(VsLlamaCpp, NegativeControlWithoutFinalSoftcapFails) {
    expect_removing_fails(
        GetParam(), "final logit soft-cap", [](Model& m) { m.final_softcap = 0; },
        [](const Model& m) { return m.final_softcap > 0; });
}

TEST_P(VsLlamaCpp, NegativeControlWithoutLayerOutputScaleFails) {
    expect_removing_fails(
        GetParam(), "layer output scales", [](Model& m) { for (LayerDesc& l : m.layers) l.out_scale = Weight{}; },
        [](const Model& m) { return bool(m.layers.back().out_scale); });
}

// The first `n` prompts of a golden file.
json first_prompts(const json& golden, size_t n) {
    json some = golden;
    some["prompts"] = json::array();
    for (size_t i = 0; i < n && i < golden["prompts"].size(); ++i) some["prompts"].push_back(golden["prompts"][i]);
    return some;
}

bool is_synthetic(const Case& c) { return std::string(c.model).rfind("synth:", 0) == 0; }

// Every Isa the engine can select here (PTXLM_CPU_ISA caps them). The best
// one runs every prompt; the others run every prompt of the synthetic
// models and the first two of the real ones (the scalar kernels take
// minutes over a real model's eight).
TEST_P(VsLlamaCpp, QuantizedRunAgreesWithinLlamaCppsOwnNoise) {
    const Case& c = GetParam();
    const json golden = load_golden(c.golden);
    ASSERT_FALSE(golden.is_null()) << "tests/golden/llamacpp_" << c.golden << ".json is missing";
    std::vector<uint8_t> keep;
    Model m = load_model(c, &keep);
    ASSERT_EQ(golden["sha256"].get<std::string>().size(), 64u);
    const std::vector<cpu::Isa> isas = cpu::runnable_isas();
    for (cpu::Isa isa : isas) {
        cpu::CpuBackend b(m, 1024, KvType::F16, 0);
        b.set_isa(isa);
        const bool all = isa == isas.back() || is_synthetic(c);
        const float tol = tol_q(c, isa);
        // llama.cpp's own argmax flips between its batched and one-by-one runs
        // here, so free-running outputs are not compared on the quantized files.
        const Stats st = compare(b, all ? golden : first_prompts(golden, 2), tol, false, false);
        print((std::string("(quantized file, quantized path, ") + cpu::isa_name(isa) + ")").c_str(), c, st, tol);
        EXPECT_LE(st.max_logprob_diff, tol) << b.description();
        EXPECT_EQ(st.argmax_wrong, 0u) << b.description();
    }
    cpu::CpuBackend ref(m, 1024, KvType::F16, 0);
    ref.set_path(cpu::CpuPath::Reference);
    const Stats st = compare(ref, golden, c.tol_q, false, false);
    print("(quantized file, reference path)", c, st, c.tol_q);
    EXPECT_LE(st.max_logprob_diff, c.tol_q) << ref.description();
    EXPECT_EQ(st.argmax_wrong, 0u) << ref.description();
    std::printf("    llama.cpp's own batched vs one-by-one difference on this file: %s\n",
                golden["tolerance_hint"].dump().c_str());
}

// The quantized comparison's negative control: the quantized path on the
// best Isa with every layer's RoPE base a tenth of the file's (SmolLM2's
// 100000 read as llama's default 10000), over the first two prompts, must
// land at least twice the widest tolerance away. The F32 twin's defect (one
// layer) is not enough here: on gemma-3-270m it moves the log-probabilities
// by 1.7, inside llama.cpp's own noise.
TEST_P(VsLlamaCpp, QuantizedNegativeControlWrongRopeBaseFails) {
    const Case& c = GetParam();
    const json golden = load_golden(c.golden);
    ASSERT_FALSE(golden.is_null());
    std::vector<uint8_t> keep;
    Model m = load_model(c, &keep);
    cpu::CpuBackend b(m, 1024, KvType::F16, 0);
    ASSERT_EQ(b.path(), cpu::CpuPath::Quantized);
    for (uint32_t l = 0; l < m.layers.size(); ++l) b.debug_set_rope_base(l, m.layers[l].rope_base * 0.1f);
    const float tol = std::max(c.tol_q, c.tol_q_avx512);
    const Stats st = compare(b, first_prompts(golden, 2), tol, false, false);
    print("(quantized file, quantized path, every layer's RoPE base a tenth)", c, st, tol);
    EXPECT_GE(st.max_logprob_diff, 2 * tol) << "the quantized comparison's tolerance is over half of what a wrong RoPE base moves";
}

INSTANTIATE_TEST_SUITE_P(Models, VsLlamaCpp, ::testing::ValuesIn(kCases), [](const auto& info) {
    std::string s = info.param.golden;
    for (char& ch : s)
        if (!std::isalnum(static_cast<unsigned char>(ch))) ch = '_';
    return s;
});

}  // namespace
