// The CPU backend on synthetic models: batched and one-by-one evaluation,
// thread counts and prompt reuse give bit-identical logits (on the quantized
// and the reference path); the quantized path stays close to the reference
// on every SIMD variant the CPU runs; the f16 cache
// stays close to the f32 one; steps of several sequences over a KV pool's
// pages give each sequence its solo bits; the model loader and the memory check refuse
// what they must, with messages that name the problem.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/cpu/cpu_backend.h"
#include "engine/cuda/decode_plan.h"
#include "engine/kv_pool.h"
#include "gguf/writer.h"
#include "models/synth/synth.h"

using namespace ptxlm;

namespace {

gguf::File synth_file(synth::Arch arch, std::vector<uint8_t>* keep) {
    *keep = synth::model_bytes(synth::preset(arch, synth::Size::Tiny));
    return gguf::File::parse(*keep, std::string("synth-") + synth::arch_name(arch));
}

std::vector<TokenId> sequence(uint32_t n) {
    std::vector<TokenId> ids{764};
    for (uint32_t i = 1; i < n; ++i) ids.push_back(static_cast<TokenId>((i * 7919u + 13u) % 700u));
    return ids;
}

// Logits of every position, evaluated in batches of `batch` tokens.
std::vector<float> logits_of(Backend& b, const std::vector<TokenId>& ids, uint32_t batch) {
    const size_t nv = b.n_vocab();
    std::vector<float> out(ids.size() * nv);
    for (size_t i = 0; i < ids.size(); i += batch) {
        const uint32_t n = static_cast<uint32_t>(std::min<size_t>(batch, ids.size() - i));
        b.eval_batch({ids.data() + i, n}, static_cast<uint32_t>(i), &out[i * nv], n);
    }
    return out;
}

class CpuBackendTest : public ::testing::TestWithParam<synth::Arch> {};

TEST_P(CpuBackendTest, BatchedThreadedAndOneByOneAreBitIdentical) {
    std::vector<uint8_t> bytes;
    Model m = Model::from_file(synth_file(GetParam(), &bytes));
    const auto ids = sequence(40);   // crosses gemma3 tiny's window of 16
    for (cpu::CpuPath path : {cpu::CpuPath::Quantized, cpu::CpuPath::Reference}) {
        // One token a step takes the decode passes whose threads finish the
        // rows they computed (Q/K/V heads, gate/up items); 17 a step, the
        // separate steps parallel over the tokens.
        cpu::CpuBackend one(m, 64, KvType::F16, 1), two(m, 64, KvType::F16, 2), two_single(m, 64, KvType::F16, 2);
        one.set_path(path);
        two.set_path(path);
        two_single.set_path(path);
        const std::vector<float> a = logits_of(one, ids, 1);
        const std::vector<float> b = logits_of(two, ids, 17);
        const std::vector<float> c = logits_of(two_single, ids, 1);
        ASSERT_EQ(a.size(), b.size());
        EXPECT_EQ(std::memcmp(a.data(), b.data(), a.size() * sizeof(float)), 0) << one.description();
        EXPECT_EQ(std::memcmp(c.data(), b.data(), c.size() * sizeof(float)), 0) << two_single.description();
        for (float v : a) ASSERT_TRUE(std::isfinite(v));
    }
}

float max_abs_diff(const std::vector<float>& a, const std::vector<float>& b) {
    float worst = 0;
    for (size_t i = 0; i < a.size(); ++i) worst = std::max(worst, std::fabs(a[i] - b[i]));
    return worst;
}

// The negative controls' defect: layer 1's RoPE base ten times the file's (a
// base read from the wrong key, or a default where the file had its own). A
// 10% error is not enough here: over these 40 positions it moves the
// reference logits by 0.19-0.46, inside the quantized path's own reach.
// llama3 takes it on every layer: its positions are divided by 4 and its slow
// pairs by up to 8 more, so one layer's base moves its logits by only 0.87;
// so does mistral3, whose YaRN divides all but its fastest pairs by 16.
void break_rope(cpu::CpuBackend& b, const Model& m) {
    const bool every_layer = m.rope_freq_scale != 1.0f || m.yarn;
    for (uint32_t l = every_layer ? 0 : 1; l < (every_layer ? m.layers.size() : 2); ++l)
        b.debug_set_rope_base(l, m.layers[l].rope_base * 10.f);
}

// The quantized path's bound against the reference, the same on every Isa:
// 1.25 x the largest maximum measured (issue 19, 2026-11-25). Measured at
// 40 positions, teacher-forced, logits spread about 6:
//   llama  scalar 0.4438, avx2 0.4438: bound 0.57
//   qwen2  scalar 0.4386, avx2 0.4386: bound 0.57
//   gemma3 scalar 0.9964, avx2 1.0192: bound 1.28
//   qwen3  scalar 0.4319, avx2 0.4236 (issue 25, 2026-11-27): bound 0.57
//   llama3 scalar 0.4930, avx2 0.4930 (issue 25): bound 0.62
//   mistral3 scalar 0.5063, avx2 0.5063 (issue 25): bound 0.64
//   gemma4 scalar 1.3612, avx2 1.0388, avx512 and avx512vnni 1.0611 (issue
//   25, 2026-11-28, the AVX-512 VNNI Xeon): bound 1.70; control 10.76,
//   f16 cache 0.0140 (control 10.37)
// avx512 and avx512vnni (2026-11-28, an AVX-512 VNNI Xeon): llama 0.4438,
// qwen2 0.4397, gemma3 0.9594, qwen3 0.4325, llama3 0.4930, mistral3
// 0.5063, within every bound. Negative control (break_rope,
// avx2): llama 3.99, qwen2 3.71, gemma3 7.43, qwen3 3.70, llama3 1.60 (every layer),
// mistral3 10.28 (every layer),
// each over twice its bound.
float quantized_tolerance(synth::Arch arch) {
    switch (arch) {
        case synth::Arch::Gemma3: return 1.28f;
        case synth::Arch::Llama3: return 0.62f;
        case synth::Arch::Mistral3: return 0.64f;
        case synth::Arch::Gemma4: return 1.70f;
        default: return 0.57f;
    }
}

// The quantized path (8-bit activations, integer dot products) against the
// float32 reference, teacher-forced, on every Isa the engine can select here
// (PTXLM_CPU_ISA caps them): logits within the activation rounding's reach.
// The Isas' kernels agree to float summation order (test_qdot); through the
// layers that order can flip an 8-bit rounding of the next product's input.
TEST_P(CpuBackendTest, QuantizedPathStaysCloseToTheReference) {
    const float tol = quantized_tolerance(GetParam());
    std::vector<uint8_t> bytes;
    Model m = Model::from_file(synth_file(GetParam(), &bytes));
    const auto ids = sequence(40);
    cpu::CpuBackend ref(m, 64, KvType::F16, 2);
    ref.set_path(cpu::CpuPath::Reference);
    const std::vector<float> r = logits_of(ref, ids, 8);
    for (cpu::Isa isa : cpu::runnable_isas()) {
        cpu::CpuBackend q(m, 64, KvType::F16, 2);
        q.set_isa(isa);
        ASSERT_EQ(q.path(), cpu::CpuPath::Quantized);
        const float worst = max_abs_diff(logits_of(q, ids, 8), r);
        std::printf("[cpu] %s %s: max |logit - reference| %.4f (bound %.2f)\n", synth::arch_name(GetParam()),
                    cpu::isa_name(isa), worst, tol);
        EXPECT_LE(worst, tol) << cpu::isa_name(isa);
        EXPECT_GT(worst, 0.0f) << "the quantized path did not take effect";
    }
}

// Its negative control: the quantized path with a wrong RoPE base on one
// layer lands at least twice the bound away from the reference.
TEST_P(CpuBackendTest, QuantizedNegativeControlWrongRopeBaseFails) {
    const float tol = quantized_tolerance(GetParam());
    std::vector<uint8_t> bytes;
    Model m = Model::from_file(synth_file(GetParam(), &bytes));
    const auto ids = sequence(40);
    cpu::CpuBackend ref(m, 64, KvType::F16, 2), q(m, 64, KvType::F16, 2);
    ref.set_path(cpu::CpuPath::Reference);
    break_rope(q, m);
    const float worst = max_abs_diff(logits_of(q, ids, 8), logits_of(ref, ids, 8));
    std::printf("[cpu] %s %s, a wrong RoPE base (break_rope): max |logit - reference| %.4f (bound %.2f)\n",
                synth::arch_name(GetParam()), cpu::isa_name(q.isa()), worst, tol);
    EXPECT_GE(worst, 2 * tol) << "the bound is over half of what a wrong RoPE base moves";
}

TEST_P(CpuBackendTest, BackendsSharingAPoolKeepTheirOwnCaches) {
    // The server's slots: two backends on one pool, evaluated in turn.
    std::vector<uint8_t> bytes;
    Model m = Model::from_file(synth_file(GetParam(), &bytes));
    auto pool = std::make_shared<cpu::ThreadPool>(2);
    cpu::CpuBackend x(m, 64, KvType::F16, pool), y(m, 64, KvType::F16, pool), alone(m, 64, KvType::F16, 2);
    const auto a = sequence(24);
    auto b = sequence(24);
    for (auto& t : b) t = (t + 5) % 700;
    const size_t nv = m.n_vocab;
    std::vector<float> lx(a.size() * nv), ly(b.size() * nv);
    for (size_t i = 0; i < a.size(); ++i) {   // interleaved, token by token
        x.eval(a[i], uint32_t(i), &lx[i * nv]);
        y.eval(b[i], uint32_t(i), &ly[i * nv]);
    }
    EXPECT_EQ(std::memcmp(lx.data(), logits_of(alone, a, 8).data(), lx.size() * sizeof(float)), 0);
    EXPECT_EQ(std::memcmp(ly.data(), logits_of(alone, b, 8).data(), ly.size() * sizeof(float)), 0);
    EXPECT_EQ(x.device_info().threads, 2);
}

// The f16 cache against the f32 one, on the reference arithmetic (the
// quantized path's 8-bit roundings would amplify the cache's difference into
// their own), which is the same plain C++ on every Isa. Negative control: the
// f16 cache with a wrong RoPE base on one layer.
TEST_P(CpuBackendTest, F16CacheStaysCloseToF32) {
    // 1.25 x the largest maximum measured (issue 19; the same plain C++ on
    // every Isa): llama 0.0036, qwen2 0.0046, gemma3 0.0165. Negative control:
    // llama 4.03, qwen2 3.55, gemma3 7.44. Logits spread about 6. Issue 25:
    // mistral3 0.0062, control 10.38 (every layer).
    const float tol = 0.021f;
    std::vector<uint8_t> bytes;
    Model m = Model::from_file(synth_file(GetParam(), &bytes));
    const auto ids = sequence(40);
    cpu::CpuBackend f16(m, 64, KvType::F16, 2), f32(m, 64, KvType::F32, 2), broken(m, 64, KvType::F16, 2);
    for (cpu::CpuBackend* b : {&f16, &f32, &broken}) b->set_path(cpu::CpuPath::Reference);
    break_rope(broken, m);
    const std::vector<float> want = logits_of(f32, ids, 8);
    const float worst = max_abs_diff(logits_of(f16, ids, 8), want);
    const float control = max_abs_diff(logits_of(broken, ids, 8), want);
    std::printf("[cpu] %s: f16 cache vs f32 max |logit diff| %.4f, with a wrong RoPE base %.4f (bound %.3f)\n",
                synth::arch_name(GetParam()), worst, control, tol);
    EXPECT_LE(worst, tol);
    EXPECT_GT(worst, 0.0f);   // the cache type did take effect
    EXPECT_GE(control, 2 * tol) << "the bound is over half of what a wrong RoPE base moves";
}

TEST_P(CpuBackendTest, RewritingPositionsReplacesTheCache) {
    // Evaluating a different continuation at the same positions must give the
    // logits of a fresh run of that sequence: later positions never leak.
    std::vector<uint8_t> bytes;
    Model m = Model::from_file(synth_file(GetParam(), &bytes));
    auto first = sequence(30), second = sequence(30);
    for (size_t i = 20; i < second.size(); ++i) second[i] = static_cast<TokenId>((second[i] + 101) % 700);
    cpu::CpuBackend reused(m, 64, KvType::F32, 2), fresh(m, 64, KvType::F32, 2);
    logits_of(reused, first, 30);
    const size_t nv = reused.n_vocab();
    std::vector<float> a((second.size() - 20) * nv);
    reused.eval_batch({second.data() + 20, second.size() - 20}, 20, a.data(), static_cast<uint32_t>(second.size() - 20));
    const std::vector<float> b = logits_of(fresh, second, 30);
    EXPECT_EQ(std::memcmp(a.data(), b.data() + 20 * nv, a.size() * sizeof(float)), 0);
}

// Several sequences in steps over a KV pool (issue 21): prompt chunks and
// decode tokens of sequences at different depths in one step, a fork whose
// shared, partly filled page is copied on write, and a new sequence reusing
// a cached prefix's pages: every logits row is bit for bit the one the
// sequence gets alone (a fresh backend, token by token), on both paths.
// Negative control: a page table pointing one page at another sequence's
// page changes the logits. Bad tables are refused by name.
TEST_P(CpuBackendTest, StepsOfSeveralSequencesOverPagesGiveEachItsSoloBits) {
    std::vector<uint8_t> bytes;
    Model m = Model::from_file(synth_file(GetParam(), &bytes));
    const size_t nv = m.n_vocab;
    const auto shifted = [](std::vector<TokenId> v, TokenId by) {
        for (TokenId& t : v) t = (t + by) % 700;
        return v;
    };
    const std::vector<TokenId> a = sequence(30), b = shifted(sequence(21), 5);
    std::vector<TokenId> c(a.begin(), a.begin() + 10), d(a.begin(), a.begin() + 8);
    for (TokenId t : shifted(sequence(10), 17)) c.push_back(t);   // a fork after 10 tokens, then its own
    for (TokenId t : shifted(sequence(5), 29)) d.push_back(t);    // a new request sharing 8 tokens (2 pages)
    for (cpu::CpuPath path : {cpu::CpuPath::Quantized, cpu::CpuPath::Reference}) {
        SCOPED_TRACE(path == cpu::CpuPath::Quantized ? "quantized" : "reference");
        cpu::CpuBackend solo(m, 64, KvType::F16, 1);
        solo.set_path(path);
        std::map<const std::vector<TokenId>*, std::vector<float>> want;
        for (const std::vector<TokenId>* v : {&a, &b, static_cast<const std::vector<TokenId>*>(&c), static_cast<const std::vector<TokenId>*>(&d)})
            want[v] = logits_of(solo, *v, 1);

        const uint32_t page = 4;
        KvPool pool(24, page);
        cpu::CpuBackend eng(m, 64, KvType::F16, std::make_shared<cpu::ThreadPool>(2), cpu::KvPages{24, page});
        eng.set_path(path);
        ASSERT_EQ(eng.kv_pages().n_pages, 24u);
        struct Seq { const std::vector<TokenId>* tokens; KvPool::Seq id; std::vector<float> logits; };
        std::vector<Seq> seqs;
        std::vector<KvPool::Copy> copies;
        size_t copied = 0;
        // One step: for each (sequence, count), its next `count` tokens, all their logits.
        auto step = [&](std::vector<std::pair<size_t, uint32_t>> parts) {
            std::vector<cpu::SeqStep> batch;
            for (auto [i, n] : parts) {
                Seq& s = seqs[i];
                const uint32_t pos = pool.length(s.id);
                copies.clear();
                ASSERT_TRUE(pool.append(s.id, {s.tokens->data() + pos, n}, copies));
                for (const KvPool::Copy& cp : copies) eng.copy_page(cp.from, cp.to, cp.positions);
                copied += copies.size();
                s.logits.resize(s.tokens->size() * nv);
                batch.push_back({pool.pages(s.id), pos, {s.tokens->data() + pos, n}, &s.logits[pos * nv], n});
            }
            eng.step(batch);
        };
        seqs.push_back({&a, pool.create(), {}});
        seqs.push_back({&b, pool.create(), {}});
        step({{0, 10}, {1, 7}});
        seqs.push_back({&c, pool.fork(seqs[0].id), {}});
        seqs[2].logits = seqs[0].logits;   // the shared prefix's logits are A's
        step({{0, 3}, {2, 5}, {1, 1}});   // A copies the shared partial page; C then writes it alone
        EXPECT_EQ(copied, 1u);
        EXPECT_EQ(pool.stats().evictions, 0u);
        seqs.push_back({&d, pool.create(), {}});
        ASSERT_EQ(pool.attach_prefix(seqs[3].id, {d.data(), 8}), 8u);
        seqs[3].logits.assign(d.size() * nv, 0.0f);
        std::copy(want[&d].begin(), want[&d].begin() + 8 * nv, seqs[3].logits.begin());   // not evaluated: reused
        step({{0, 17}, {1, 12}, {2, 5}, {3, 5}});
        step({{1, 1}});
        for (const Seq& s : seqs) {
            ASSERT_EQ(pool.length(s.id), s.tokens->size());
            EXPECT_EQ(std::memcmp(s.logits.data(), want[s.tokens].data(), s.logits.size() * 4), 0)
                << "sequence of " << s.tokens->size() << " tokens";
        }
        // B's last token again with its first page swapped for A's: other logits.
        std::vector<uint32_t> wrong(pool.pages(seqs[1].id).begin(), pool.pages(seqs[1].id).end());
        wrong[0] = pool.pages(seqs[0].id)[0];
        std::vector<float> bad(nv);
        const cpu::SeqStep tampered{wrong, uint32_t(b.size() - 1), {b.data() + b.size() - 1, 1}, bad.data(), 1};
        eng.step({&tampered, 1});
        EXPECT_NE(std::memcmp(bad.data(), want[&b].data() + (b.size() - 1) * nv, nv * 4), 0);
        // Refused: a table that stops short of the positions, a page past the storage.
        const cpu::SeqStep short_table{std::span<const uint32_t>(wrong).first(2), 20, {b.data(), 1}, nullptr, 0};
        EXPECT_THROW(eng.step({&short_table, 1}), std::invalid_argument);
        wrong[0] = 24;
        EXPECT_THROW(eng.step({&tampered, 1}), std::invalid_argument);
        EXPECT_THROW(eng.copy_page(0, 24, 1), std::invalid_argument);
    }
    EXPECT_THROW(cpu::CpuBackend(m, 64, KvType::F16, std::make_shared<cpu::ThreadPool>(1), cpu::KvPages{8, 12}),
                 std::invalid_argument);
}

INSTANTIATE_TEST_SUITE_P(Archs, CpuBackendTest,
                         ::testing::Values(synth::Arch::Llama, synth::Arch::Qwen2, synth::Arch::Gemma3,
                                           synth::Arch::Qwen3, synth::Arch::Llama3, synth::Arch::Mistral3,
                                           synth::Arch::Gemma4),
                         [](const auto& info) { return std::string(synth::arch_name(info.param)); });

// PTXLM_CPU_ISA caps what set_isa accepts: the hardware's Isas above the cap
// are refused by the variable's name (what makes PTXLM_CPU_ISA=avx2 on an
// AVX-512 machine behave as an AVX2-only one for the whole suite).
TEST(CpuBackendIsa, TheEnvironmentCapsSetIsa) {
    const char* outer = std::getenv("PTXLM_CPU_ISA");
    const std::string saved = outer ? outer : "";
    const std::vector<cpu::Isa> hw = cpu::hardware_isas();
    ASSERT_GE(hw.size(), 2u) << "the suite's machines have AVX2 at least (README)";
    std::vector<uint8_t> bytes;
    Model m = Model::from_file(synth_file(synth::Arch::Llama, &bytes));
    setenv("PTXLM_CPU_ISA", "scalar", 1);
    {
        cpu::CpuBackend b(m, 16, KvType::F16, 1);
        EXPECT_EQ(b.isa(), cpu::Isa::Scalar);
        try {
            b.set_isa(hw.back());
            ADD_FAILURE() << "set_isa(" << cpu::isa_name(hw.back()) << ") passed the cap";
        } catch (const std::invalid_argument& e) {
            EXPECT_NE(std::string(e.what()).find("PTXLM_CPU_ISA=scalar"), std::string::npos) << e.what();
        }
    }
    if (outer)
        setenv("PTXLM_CPU_ISA", saved.c_str(), 1);
    else
        unsetenv("PTXLM_CPU_ISA");
}

std::string load_error(const std::vector<uint8_t>& bytes) {
    try {
        Model::from_file(gguf::File::parse(bytes, "patched.gguf"));
    } catch (const ModelError& e) {
        return e.what();
    }
    return "(no error)";
}

// Replaces every occurrence of `from` by `to` (same length) in the file's bytes.
void patch(std::vector<uint8_t>& bytes, const std::string& from, const std::string& to) {
    ASSERT_EQ(from.size(), to.size());
    auto it = bytes.begin();
    int n = 0;
    while ((it = std::search(it, bytes.end(), from.begin(), from.end())) != bytes.end()) {
        std::copy(to.begin(), to.end(), it);
        ++n;
    }
    ASSERT_GT(n, 0) << from;
}

TEST(ModelLoad, MissingTensorIsNamed) {
    std::vector<uint8_t> bytes = synth::model_bytes(synth::preset(synth::Arch::Llama, synth::Size::Tiny));
    patch(bytes, "blk.1.attn_q.weight", "blk.1.attn_X.weight");
    EXPECT_NE(load_error(bytes).find("required tensor 'blk.1.attn_q.weight' is missing"), std::string::npos)
        << load_error(bytes);
}

TEST(ModelLoad, WrongShapeIsNamed) {
    const synth::Spec spec = synth::preset(synth::Arch::Llama, synth::Size::Tiny);
    ASSERT_NE(spec.n_head, spec.n_head_kv);
    std::vector<uint8_t> bytes = synth::model_bytes(spec);
    patch(bytes, "blk.0.attn_q.weight", "blk.0.attn_#.weight");
    patch(bytes, "blk.0.attn_k.weight", "blk.0.attn_q.weight");
    patch(bytes, "blk.0.attn_#.weight", "blk.0.attn_k.weight");
    const std::string e = load_error(bytes);
    EXPECT_NE(e.find("tensor 'blk.0.attn_q.weight' has shape"), std::string::npos) << e;
}

TEST(ModelLoad, UnsupportedArchitectureListsTheSupported) {
    gguf::Writer w;
    w.set_string("general.architecture", "mamba");
    w.set_u32("mamba.block_count", 1);
    w.set_u32("mamba.embedding_length", 64);
    w.set_u32("mamba.context_length", 64);
    w.set_u32("mamba.attention.head_count", 1);
    w.set_u32("mamba.feed_forward_length", 64);
    const std::string e = load_error(w.serialize());
    EXPECT_NE(e.find("architecture 'mamba' is not supported (supported: llama, qwen2, gemma3, qwen3, mistral3, phi3, gemma4)"), std::string::npos) << e;
}

TEST(ModelLoad, MissingKeyIsNamed) {
    std::vector<uint8_t> bytes = synth::model_bytes(synth::preset(synth::Arch::Qwen2, synth::Size::Tiny));
    patch(bytes, "qwen2.attention.layer_norm_rms_epsilon", "qwen2.attention.layer_norm_rms_epsiloX");
    const std::string e = load_error(bytes);
    EXPECT_NE(e.find("'qwen2.attention.layer_norm_rms_epsilon' is missing"), std::string::npos) << e;
}

// qwen3: its q/k norms are required, and what its graph in llama.cpp does not
// read (rope_freqs) or ptxlm does not compute (other RoPE scalings) is refused
// by name rather than run differently.
TEST(ModelLoad, Qwen3RefusesWhatItCannotRunByName) {
    const synth::Spec spec = synth::preset(synth::Arch::Qwen3, synth::Size::Tiny);
    ASSERT_NE(spec.q_dim(), spec.n_embd);   // key_length is what sets the head size
    std::vector<uint8_t> bytes = synth::model_bytes(spec);
    const Model m = Model::from_file(gguf::File::parse(bytes, "qwen3.gguf"));
    EXPECT_EQ(m.head_dim, spec.head_dim);
    EXPECT_EQ(m.hp.rope_style, RopeStyle::Neox);
    EXPECT_TRUE(m.layers[1].q_norm && m.layers[1].k_norm);
    EXPECT_FALSE(m.layers[1].bq);
    EXPECT_FLOAT_EQ(m.hp.rms_eps, 1e-6f);

    std::vector<uint8_t> no_norm = bytes;
    patch(no_norm, "blk.1.attn_k_norm.weight", "blk.1.attn_k_norX.weight");
    std::string e = load_error(no_norm);
    EXPECT_NE(e.find("required tensor 'blk.1.attn_k_norm.weight' is missing"), std::string::npos) << e;

    // The llama3 file (rope_freqs, linear scaling) renamed to qwen3.
    std::vector<uint8_t> l3 = synth::model_bytes(synth::preset(synth::Arch::Llama3, synth::Size::Tiny));
    patch(l3, "llama", "qwen3");
    e = load_error(l3);
    EXPECT_NE(e.find("tensor 'rope_freqs.weight' is not used by architecture 'qwen3'"), std::string::npos) << e;
    // Qwen3's long-context files say yarn: refused by name (shown on the
    // llama3 file, the synthetic one with a scaling type to rewrite).
    std::vector<uint8_t> yarn = synth::model_bytes(synth::preset(synth::Arch::Llama3, synth::Size::Tiny));
    patch(yarn, "linear", "yarn__");
    e = load_error(yarn);
    EXPECT_NE(e.find("RoPE scaling 'yarn__' is not supported"), std::string::npos) << e;
}

// mistral3: YaRN and the attention temperature read as llama.cpp derives
// them, and what ptxlm does not compute (experts, the optional biases, YaRN on
// another architecture) refused by name.
TEST(ModelLoad, Mistral3ReadsYarnAndTemperatureAndRefusesTheRest) {
    const synth::Spec spec = synth::preset(synth::Arch::Mistral3, synth::Size::Tiny);
    const std::vector<uint8_t> bytes = synth::model_bytes(spec);
    const Model m = Model::from_file(gguf::File::parse(bytes, "mistral3.gguf"));
    ASSERT_TRUE(m.yarn);
    EXPECT_EQ(m.hp.rope_style, RopeStyle::Adjacent);
    EXPECT_FLOAT_EQ(m.yarn->freq_scale, 1.0f / 16);
    EXPECT_EQ(m.yarn->n_ctx_orig, 16u);
    EXPECT_EQ(m.rope_freq_scale, 1.0f);   // YaRN's scaling lives in the per-pair rates
    // (1 + 0.1 ln 16) / (1 + 0.05 ln 16) with log multiplier 0.5; a real
    // Ministral 3 file's multiplier of 1 cancels to 1; none: 1 + 0.1 ln f.
    EXPECT_NEAR(m.rope_mscale, (1 + 0.1 * std::log(16.0)) / (1 + 0.05 * std::log(16.0)), 1e-6);
    EXPECT_NEAR(yarn_mscale(16.0f, 1.0f), 1.0, 1e-6);
    EXPECT_NEAR(yarn_mscale(16.0f, 0.0f), 1 + 0.1 * std::log(16.0), 1e-6);
    EXPECT_NEAR(yarn_mscale(1.0f, 0.0f), 1.0, 1e-7);
    // ggml's correction dims for 64 dims, context 16, base 1e6: [0, 3]. Pair
    // 0 keeps its rate, pairs 1 and 2 are 2/3 and 1/3 of the way, 3.. are / 16.
    const std::vector<double> r = rope_rates(m, 1e6f, 1024);
    auto plain = [](uint32_t i) { return std::pow(1e6, -2.0 * i / 64); };
    EXPECT_NEAR(r[0], 1.0, 1e-12);
    EXPECT_NEAR(r[1] / plain(1), 1.0 / 16 * (1 - 2.0 / 3) + 2.0 / 3, 1e-6);
    EXPECT_NEAR(r[2] / plain(2), 1.0 / 16 * (1 - 1.0 / 3) + 1.0 / 3, 1e-6);
    for (uint32_t i = 3; i < 32; ++i) EXPECT_NEAR(r[i] / plain(i), 1.0 / 16, 1e-9) << i;
    EXPECT_FLOAT_EQ(m.attn_temp_scale, 0.1f);
    EXPECT_EQ(m.attn_temp_floor, 16u);
    EXPECT_EQ(m.attn_temperature(15), 1.0f);
    EXPECT_FLOAT_EQ(m.attn_temperature(16), float(1 + 0.1 * std::log(2.0)));
    EXPECT_FLOAT_EQ(m.attn_temperature(47), float(1 + 0.1 * std::log(3.0)));

    auto with = [&](synth::Arch arch, const std::function<void(gguf::Writer&)>& edit) {
        gguf::Writer w = synth::build_model(synth::preset(arch, synth::Size::Tiny));
        edit(w);
        return load_error(w.serialize());
    };
    std::string e = with(synth::Arch::Mistral3, [](gguf::Writer& w) { w.set_u32("mistral3.expert_count", 8); });
    EXPECT_NE(e.find("mistral3 with experts (mistral3.expert_count > 0) is not supported"), std::string::npos) << e;
    e = with(synth::Arch::Mistral3, [&](gguf::Writer& w) {
        w.add_tensor("blk.1.attn_output.bias", gguf::GgmlType::F32, {spec.n_embd}, std::vector<uint8_t>(spec.n_embd * 4));
    });
    EXPECT_NE(e.find("tensor 'blk.1.attn_output.bias' (an optional bias of mistral3) is not supported"), std::string::npos)
        << e;
    e = with(synth::Arch::Qwen3, [](gguf::Writer& w) {
        w.set_string("qwen3.rope.scaling.type", "yarn");
        w.set_f32("qwen3.rope.scaling.factor", 4.0f);
    });
    EXPECT_NE(e.find("RoPE scaling 'yarn' is not supported for architecture 'qwen3'"), std::string::npos) << e;
}

TEST(Memory, AnExplicitContextThatDoesNotFitIsRefusedWithNumbers) {
    std::vector<uint8_t> bytes;
    Model m = Model::from_file(synth_file(synth::Arch::Llama, &bytes));
    try {
        choose_context(m, 1u << 30, 4, nullptr);   // a billion tokens of f32 cache
        FAIL() << "no error";
    } catch (const ModelError& e) {
        const std::string s = e.what();
        EXPECT_NE(s.find("KV cache"), std::string::npos) << s;
        EXPECT_NE(s.find("available"), std::string::npos) << s;
    }
    std::string note;
    EXPECT_EQ(choose_context(m, 128, 2, &note), 128u);
    EXPECT_NE(note.find("128"), std::string::npos);
    EXPECT_EQ(plan_memory(m, 100, 2).kv_cache * 2, plan_memory(m, 100, 4).kv_cache);
}

TEST(Backend, PositionsAndTokensAreChecked) {
    std::vector<uint8_t> bytes;
    Model m = Model::from_file(synth_file(synth::Arch::Llama, &bytes));
    cpu::CpuBackend b(m, 8, KvType::F16, 1);
    std::vector<float> logits(b.n_vocab());
    EXPECT_THROW(b.eval(0, 8, logits.data()), ModelError);
    EXPECT_THROW(b.eval(static_cast<TokenId>(b.n_vocab()), 0, logits.data()), ModelError);
    EXPECT_THROW(b.eval(-1, 0, logits.data()), ModelError);
    EXPECT_THROW(parse_device("gpu"), std::invalid_argument);
    std::string note;
    EXPECT_THROW(make_backend(m, DeviceKind::Cuda, {}, &note), ModelError);
}

}  // namespace

namespace {

// phi3: the fused matrices as views of their rows, LongRoPE's choice by the
// context, its magnitude, and what llama.cpp's phi3 graph does not read
// refused by name.
TEST(ModelLoad, Phi3SplitsFusedMatricesAndPicksLongRopeFactorsByContext) {
    const synth::Spec spec = synth::preset(synth::Arch::Phi3, synth::Size::Tiny);
    const std::vector<uint8_t> bytes = synth::model_bytes(spec);
    const Model m = Model::from_file(gguf::File::parse(bytes, "phi3.gguf"));
    EXPECT_EQ(m.hp.rope_style, RopeStyle::Neox);
    const gguf::TensorInfo* qkv = m.file.find_tensor("blk.1.attn_qkv.weight");
    const gguf::TensorInfo* up = m.file.find_tensor("blk.1.ffn_up.weight");
    ASSERT_TRUE(qkv && up);
    const LayerDesc& l = m.layers[1];
    const uint64_t rb = l.wq.row_bytes;
    EXPECT_EQ(l.wq.data, qkv->data);
    EXPECT_EQ(l.wk.data, qkv->data + spec.q_dim() * rb);
    EXPECT_EQ(l.wv.data, qkv->data + (spec.q_dim() + spec.kv_dim()) * rb);
    EXPECT_EQ(l.wq.rows, spec.q_dim());
    EXPECT_EQ(l.wk.rows, spec.kv_dim());
    EXPECT_EQ(l.wv.rows, spec.kv_dim());
    EXPECT_EQ(l.gate.data, up->data);
    EXPECT_EQ(l.up.data, up->data + spec.n_ff * l.gate.row_bytes);
    EXPECT_EQ(l.gate.rows, spec.n_ff);
    EXPECT_EQ(l.up.rows, spec.n_ff);
    EXPECT_EQ(l.wv.name(), "blk.1.attn_qkv.weight");
    // The views cover the file's matrices exactly once.
    EXPECT_EQ(m.weight_bytes(), [&] {
        uint64_t n = 0;
        for (const gguf::TensorInfo& t : m.file.tensors()) n += t.n_bytes;
        return n;
    }());
    // Long past the original context of 512 (llama.cpp: n_ctx_seq > n_ctx_orig_yarn).
    EXPECT_EQ(m.hp.rope_orig_ctx, 512u);
    EXPECT_EQ(m.rope_factors(512).data, m.rope_factors_short.data);
    EXPECT_EQ(m.rope_factors(513).data, m.rope_factors_long.data);
    const std::vector<double> lng = rope_rates(m, 1e4f, 1024), shrt = rope_rates(m, 1e4f, 256);
    const uint32_t half = m.head_dim / 2;
    for (uint32_t i = 0; i < half; ++i) {
        const double plain = std::pow(1e4, -2.0 * i / m.head_dim);
        EXPECT_NEAR(lng[i] * synth::rope_factor_long(i, half) / plain, 1.0, 1e-6) << i;
        EXPECT_NEAR(shrt[i] * synth::rope_factor_short(i, half) / plain, 1.0, 1e-6) << i;
    }
    EXPECT_FLOAT_EQ(m.rope_mscale, spec.rope_attn_factor);
    EXPECT_GT(m.rope_mscale, 1.05f);

    auto with = [&](synth::Arch arch, const std::function<void(gguf::Writer&)>& edit) {
        gguf::Writer w = synth::build_model(synth::preset(arch, synth::Size::Tiny));
        edit(w);
        return load_error(w.serialize());
    };
    const uint64_t E = spec.n_embd, F = spec.n_ff, QKV = spec.q_dim() + 2 * spec.kv_dim();
    std::string e = with(synth::Arch::Phi3, [&](gguf::Writer& w) {
        w.add_tensor("blk.0.ffn_gate.weight", gguf::GgmlType::F32, {E, F}, std::vector<uint8_t>(E * F * 4));
    });
    EXPECT_NE(e.find("tensor 'blk.0.ffn_gate.weight' is not used by phi3"), std::string::npos) << e;
    e = with(synth::Arch::Phi3, [&](gguf::Writer& w) {
        w.add_tensor("blk.0.attn_qkv.bias", gguf::GgmlType::F32, {QKV}, std::vector<uint8_t>(QKV * 4));
    });
    EXPECT_NE(e.find("tensor 'blk.0.attn_qkv.bias' next to a fused attn_qkv is not supported"), std::string::npos) << e;
    e = with(synth::Arch::Phi3, [](gguf::Writer& w) { w.set_u32("phi3.expert_count", 16); });
    EXPECT_NE(e.find("phi3 with experts (phi3.expert_count > 0) is not supported"), std::string::npos) << e;
    // rope.dimension_count rewritten in place (a u32 after the key's name and
    // its type): the LongRoPE factors must then have n_rot/2 entries
    // (llama.cpp's {n_rot/2}), and n_rot must be even and at most the head.
    auto with_rot = [&](uint32_t rot) {
        std::vector<uint8_t> partial = bytes;
        const std::string key = "phi3.rope.dimension_count";
        const auto at = std::search(partial.begin(), partial.end(), key.begin(), key.end());
        EXPECT_NE(at, partial.end());
        std::memcpy(&*(at + key.size() + 4), &rot, 4);
        return load_error(partial);
    };
    e = with_rot(48);
    EXPECT_NE(e.find("tensor 'rope_factors_long.weight' has shape 32, expected 24"), std::string::npos) << e;
    e = with_rot(47);
    EXPECT_NE(e.find("rope.dimension_count 47 of head size 64: RoPE rotates pairs"), std::string::npos) << e;
    e = with_rot(66);
    EXPECT_NE(e.find("rope.dimension_count 66 of head size 64: RoPE rotates pairs"), std::string::npos) << e;
    // Partial rotary elsewhere: llama.cpp's llama, qwen2, qwen3 and mistral3
    // graphs assert whole-head rotation; gemma3's is untested against it.
    for (synth::Arch arch : {synth::Arch::Llama, synth::Arch::Gemma3}) {
        const std::string name = synth::gguf_arch(arch);
        e = with(arch, [&](gguf::Writer& w) { w.set_u32(name + ".rope.dimension_count", 32); });
        EXPECT_NE(e.find("partial RoPE (rope.dimension_count 32 of head size " + std::to_string(synth::preset(arch, synth::Size::Tiny).head_dim) +
                         ") is not supported for architecture '" + name + "' (only phi3 and gemma4)"),
                  std::string::npos) << e;
    }
    e = with(synth::Arch::Qwen3, [](gguf::Writer& w) {
        w.add_tensor("rope_factors_long.weight", gguf::GgmlType::F32, {64}, std::vector<uint8_t>(64 * 4));
    });
    EXPECT_NE(e.find("tensor 'rope_factors_long.weight' is not used by architecture 'qwen3' (only phi3)"),
              std::string::npos) << e;
}

// phi4mini: Phi-4-mini's partial rotary, 48 of 64 dims. The rates are
// ggml_rope_ext's of n_dims = n_rot (base^(-2i/n_rot), over n_rot/2 pairs,
// each divided by its LongRoPE factor; the rotation itself is checked
// against llama.cpp by test_vs_llamacpp and check_synth.py).
TEST(ModelLoad, Phi4MiniRotatesTheFirstNRotDimsOfEachHead) {
    const synth::Spec spec = synth::preset(synth::Arch::Phi4Mini, synth::Size::Tiny);
    const std::vector<uint8_t> bytes = synth::model_bytes(spec);
    const Model m = Model::from_file(gguf::File::parse(bytes, "phi4mini.gguf"));
    EXPECT_EQ(m.hp.arch, "phi3");
    EXPECT_EQ(m.head_dim, 64u);
    EXPECT_EQ(m.n_rot, 48u);
    EXPECT_EQ(m.rope_factors_long.cols, 24u);
    const std::vector<double> lng = rope_rates(m, 1e4f, 1024), shrt = rope_rates(m, 1e4f, 256);
    ASSERT_EQ(lng.size(), 24u);
    ASSERT_EQ(shrt.size(), 24u);
    for (uint32_t i = 0; i < 24; ++i) {
        const double plain = std::pow(1e4, -2.0 * i / 48);
        EXPECT_NEAR(lng[i] * synth::rope_factor_long(i, 24) / plain, 1.0, 1e-6) << i;
        EXPECT_NEAR(shrt[i] * synth::rope_factor_short(i, 24) / plain, 1.0, 1e-6) << i;
    }
}

}  // namespace

namespace {

// gemma4 (issue 25): the per-layer shapes, RoPE and K/V sources read as
// llama.cpp's gemma4 loader and its layer-reuse rule give them, the memory
// plan without the shared layers' caches, and what ptxlm does not compute
// (experts, fused QKV, RoPE scaling, a shared layer whose source is of
// another kind) refused by name, also by the GPU path.
TEST(ModelLoad, Gemma4ReadsPerLayerShapesAndSharedKvAndRefusesTheRest) {
    const synth::Spec spec = synth::preset(synth::Arch::Gemma4, synth::Size::Tiny);
    const std::vector<uint8_t> bytes = synth::model_bytes(spec);
    const Model m = Model::from_file(gguf::File::parse(bytes, "gemma4.gguf"));
    ASSERT_EQ(m.layers.size(), 6u);
    EXPECT_EQ(m.hp.rope_style, RopeStyle::Neox);
    EXPECT_EQ(m.attn_scale, 1.0f);
    EXPECT_EQ(m.embd_scale, 16.0f);   // √256
    EXPECT_EQ(m.final_softcap, 30.0f);
    EXPECT_EQ(m.n_embd_per_layer, 256u);
    EXPECT_TRUE(m.tied_embeddings() && m.rope_freqs && m.per_layer_tok_embd && m.per_layer_model_proj);
    for (uint32_t il = 0; il < 6; ++il) {
        SCOPED_TRACE(il);
        const LayerDesc& l = m.layers[il];
        const bool swa = il % 2 == 0;
        EXPECT_EQ(l.sliding, swa);
        EXPECT_EQ(m.head_dim_of(il), swa ? 128u : 256u);
        EXPECT_EQ(m.n_rot_of(il), swa ? 128u : 256u);
        EXPECT_EQ(l.rope_base, swa ? 1e4f : 1e6f);
        EXPECT_EQ(l.rope_factors, !swa);
        EXPECT_EQ(l.kv_layer, il < 4 ? il : il - 2);   // 4 reads 2 (sliding), 5 reads 3 (full)
        EXPECT_EQ(m.has_kv(il), il < 4);
        EXPECT_EQ(bool(l.wk), il < 4);
        EXPECT_EQ(bool(l.wv), il < 4 && swa);   // the full layers' v is k's projection
        EXPECT_TRUE(l.v_norm && l.q_norm && l.ple_gate && l.ple_proj && l.ple_post_norm && l.out_scale);
    }
    // Proportional RoPE on the full layers: pairs past the first quarter
    // divided by 1e30 (they stay put); the sliding layers' rates are plain.
    const std::vector<double> full = rope_rates(m, 1, 1e6f, 1024), local = rope_rates(m, 0, 1e4f, 1024);
    ASSERT_EQ(full.size(), 128u);
    ASSERT_EQ(local.size(), 64u);
    EXPECT_NEAR(full[31], std::pow(1e6, -62.0 / 256), 1e-12);
    EXPECT_LT(full[32], 1e-29);
    EXPECT_NEAR(local[63], std::pow(1e4, -126.0 / 128), 1e-12);
    // The KV cache of the 4 layers with their own: 2 · n_ctx · Σ kv_dim · 2 bytes.
    EXPECT_EQ(plan_memory(m, 64, 2).kv_cache, 2ull * 64 * (128 + 256 + 128 + 256) * 2);
    // The GPU plan (paged KV): the shared layers' QKV GEMV is q only and
    // their RoPE writes no K/V; the rest as the CPU reads them.
    const cuda::DecodePlan gp = cuda::decode_plan(m, 64, true, 132, true);
    ASSERT_EQ(gp.layers.size(), m.layers.size());
    for (uint32_t il = 0; il < m.layers.size(); ++il) {
        const cuda::LayerPlan& lp = gp.layers[il];
        EXPECT_EQ(lp.kv_layer, m.layers[il].kv_layer) << il;
        EXPECT_EQ(lp.rope.q_only, !m.has_kv(il)) << il;
        EXPECT_EQ(lp.qkv.segments.size(), m.has_kv(il) ? 3u : 1u) << il;
        EXPECT_EQ(lp.rope.head_dim, m.head_dim_of(il)) << il;
        EXPECT_TRUE(lp.ple && lp.out_scale && lp.rope.v_norm) << il;
    }
    EXPECT_EQ(gp.softcap.cap, m.final_softcap);
    EXPECT_TRUE(gp.ple);
    try {
        cuda::decode_plan(m, 64, true, 132);
        ADD_FAILURE() << "the contiguous cache's plan took gemma4";
    } catch (const ModelError& e) {
        EXPECT_STREQ(e.what(), "layer 0's v norm is on the GPU path's paged KV only (the default), not on the contiguous "
                               "cache (--gpu-contiguous-kv)");
    }

    auto with = [&](const std::function<void(gguf::Writer&)>& edit) {
        gguf::Writer w = synth::build_model(spec);
        edit(w);
        return load_error(w.serialize());
    };
    std::string e = with([](gguf::Writer& w) { w.set_u32("gemma4.expert_count", 128); });
    EXPECT_NE(e.find("gemma4 with experts (the 26B-A4B mixture of experts) is not supported"), std::string::npos) << e;
    e = with([&](gguf::Writer& w) {
        w.add_tensor("blk.1.ffn_gate_inp.weight", gguf::GgmlType::F32, {spec.n_embd, 4},
                     std::vector<uint8_t>(spec.n_embd * 16));
    });
    EXPECT_NE(e.find("gemma4 with experts"), std::string::npos) << e;
    e = with([&](gguf::Writer& w) {
        w.add_tensor("blk.0.attn_qkv.weight", gguf::GgmlType::F32, {spec.n_embd, 4}, std::vector<uint8_t>(spec.n_embd * 16));
    });
    EXPECT_NE(e.find("'blk.0.attn_qkv.weight' (fused QKV) is not supported for gemma4"), std::string::npos) << e;
    e = with([](gguf::Writer& w) {
        w.set_string("gemma4.rope.scaling.type", "linear");
        w.set_f32("gemma4.rope.scaling.factor", 2.0f);
    });
    EXPECT_NE(e.find("RoPE scaling 'linear' is not supported for gemma4"), std::string::npos) << e;
    // Required keys, named.
    for (const char* key : {"gemma4.attention.sliding_window_pattern", "gemma4.attention.key_length_swa",
                            "gemma4.embedding_length_per_layer_input"}) {
        std::vector<uint8_t> b = bytes;
        std::string renamed = key;
        renamed.back() = '#';
        patch(b, key, renamed);
        e = load_error(b);
        EXPECT_NE(e.find(std::string("required key '") + key + "' is missing"), std::string::npos) << e;
    }
    // Three shared layers: llama.cpp's rule sends full layer 3 to layer
    // n_kv - 1 = 2, which slides (and has another head size): refused.
    std::vector<uint8_t> b = bytes;
    const std::string key = "gemma4.attention.shared_kv_layers";
    auto it = std::search(b.begin(), b.end(), key.begin(), key.end());
    ASSERT_NE(it, b.end());
    it += key.size() + 4;   // the value's type (u32), then the value
    *it = 3;
    e = load_error(b);
    EXPECT_NE(e.find("shared-KV layer 3 (full) would read layer 2's K/V, which is sliding"), std::string::npos) << e;
}

}  // namespace
