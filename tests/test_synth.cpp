// The synthetic-model generator: determinism, the tensor list of each
// architecture (names, types, shapes as llama.cpp's loaders expect), the Q4_K_M
// layer rule, the vocabulary's invariants and the metadata, read back through
// our GGUF reader.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <filesystem>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <tuple>
#include <vector>

#include <unistd.h>

#include "gguf/gguf.h"
#include "models/synth/synth.h"

namespace {

using namespace ptxlm;
using namespace ptxlm::synth;
using gguf::GgmlType;
using gguf::ValueType;

// Generated once per (arch, size): the reader's views point into these bytes.
const std::vector<uint8_t>& bytes_of(Arch a, Size z) {
    static std::map<std::pair<Arch, Size>, std::vector<uint8_t>> cache;
    auto it = cache.find({a, z});
    if (it == cache.end()) it = cache.emplace(std::pair{a, z}, model_bytes(preset(a, z))).first;
    return it->second;
}

gguf::File parse(Arch a, Size z) {
    return gguf::File::parse(bytes_of(a, z), std::string(arch_name(a)) + "-" + size_name(z));
}

// ---- determinism ---------------------------------------------------------------

TEST(SynthRandom, PinnedValues) {
    // The stream is integer arithmetic plus one multiply: these values are the
    // same on every machine. A change here changes every generated file.
    EXPECT_EQ(synth_normal(0, 0), synth_normal(0, 0));
    const float v0 = synth_normal(1, 0), v1 = synth_normal(1, 1), v2 = synth_normal(42, 1000000);
    EXPECT_EQ(v0, 0x1.3f3edp+0f);       //  1.24705219
    EXPECT_EQ(v1, 0x1.5c3ca8p-1f);      //  0.68015027
    EXPECT_EQ(v2, -0x1.0667dcp+1f);     // -2.05004454
}

TEST(SynthRandom, Moments) {
    const int n = 200000;
    double s = 0, s2 = 0, mx = 0;
    for (int i = 0; i < n; ++i) {
        double z = synth_normal(7, uint64_t(i));
        s += z;
        s2 += z * z;
        mx = std::max(mx, std::fabs(z));
    }
    EXPECT_NEAR(s / n, 0.0, 0.01);
    EXPECT_NEAR(s2 / n, 1.0, 0.01);
    EXPECT_LE(mx, 2.0 * std::sqrt(3.0) + 1e-6);   // Irwin-Hall(4) support
    EXPECT_GT(mx, 3.0);
}

TEST(SynthDeterminism, SameSeedSameBytesDifferentSeedDifferentBytes) {
    for (Arch a : all_archs()) {
        SCOPED_TRACE(arch_name(a));
        const Spec s = preset(a, Size::Tiny, 7);
        Options one, four;
        one.threads = 1;
        four.threads = 4;
        const auto b1 = model_bytes(s, one);
        EXPECT_EQ(b1, model_bytes(s, four)) << "thread count changed the bytes";
        EXPECT_EQ(b1, model_bytes(s, one));
        const auto b2 = model_bytes(preset(a, Size::Tiny, 8), one);
        ASSERT_EQ(b1.size(), b2.size());   // same layout, other weights
        EXPECT_NE(b1, b2);
    }
}

TEST(SynthDeterminism, FileEqualsMemory) {
    const auto path = std::filesystem::temp_directory_path() / ("test_synth_" + std::to_string(::getpid()) + ".gguf");
    const Spec s = preset(Arch::Qwen2, Size::Tiny);
    write_model(s, path.string());
    gguf::File f = gguf::File::open(path.string());
    EXPECT_EQ(std::vector<uint8_t>(f.bytes().begin(), f.bytes().end()), bytes_of(Arch::Qwen2, Size::Tiny));
    std::filesystem::remove(path);
}

// ---- the Q4_K_M rule -------------------------------------------------------------

TEST(SynthQ4KM, MoreBitsLayers) {
    // Layers that get Q6_K for attn_v / ffn_down, worked out by hand from
    // i < n/8 || i >= 7n/8 || (i - n/8) % 3 == 2 (integer division).
    const std::map<uint32_t, std::set<uint32_t>> expect = {
        {1, {0}},
        {2, {1}},                 // n/8 = 0, 7n/8 = 1
        {6, {2, 5}},              // 7n/8 = 5; i % 3 == 2
        {8, {0, 3, 6, 7}},        // n/8 = 1, 7n/8 = 7; (i-1) % 3 == 2
        {18, {0, 1, 4, 7, 10, 13, 15, 16, 17}},   // gemma-3-270m: n/8 = 2, 7n/8 = 15
        {32, {0, 1, 2, 3, 6, 9, 12, 15, 18, 21, 24, 27, 28, 29, 30, 31}},
    };
    for (const auto& [n, layers] : expect) {
        for (uint32_t i = 0; i < n; ++i) {
            EXPECT_EQ(q4_k_m_more_bits(i, n), layers.count(i) == 1) << "layer " << i << " of " << n;
            const GgmlType want = layers.count(i) ? GgmlType::Q6_K : GgmlType::Q4_K;
            EXPECT_EQ(q4_k_m_type(WeightKind::AttnV, i, n, false), want);
            EXPECT_EQ(q4_k_m_type(WeightKind::FfnDown, i, n, false), want);
            for (WeightKind k : {WeightKind::AttnQ, WeightKind::AttnK, WeightKind::AttnOut, WeightKind::FfnGate,
                                 WeightKind::FfnUp})
                EXPECT_EQ(q4_k_m_type(k, i, n, false), GgmlType::Q4_K);
            EXPECT_EQ(q4_k_m_type(WeightKind::Norm, i, n, false), GgmlType::F32);
            EXPECT_EQ(q4_k_m_type(WeightKind::Bias, i, n, false), GgmlType::F32);
        }
    }
    EXPECT_EQ(q4_k_m_type(WeightKind::Output, 0, 8, false), GgmlType::Q6_K);
    EXPECT_EQ(q4_k_m_type(WeightKind::TokenEmbd, 0, 8, false), GgmlType::Q4_K);
    EXPECT_EQ(q4_k_m_type(WeightKind::TokenEmbd, 0, 8, true), GgmlType::Q6_K);   // doubles as the output
}

// ---- tensors -----------------------------------------------------------------------

struct Want {
    std::string name;
    GgmlType type;
    std::vector<uint64_t> ne;
};

// Written from llama.cpp's load_arch_tensors for llama, qwen2, gemma3 and
// qwen3 (ggml order: a (out, in) weight has ne = {in, out}).
std::vector<Want> expected_tensors(const Spec& s) {
    const uint64_t E = s.n_embd, Q = uint64_t(s.n_head) * s.head_dim, KV = uint64_t(s.n_head_kv) * s.head_dim;
    const uint64_t F = s.n_ff, V = s.n_vocab, L = s.n_layer;
    const bool gemma = s.arch == Arch::Gemma3, qwen = s.arch == Arch::Qwen2, qwen3 = s.arch == Arch::Qwen3;
    std::vector<Want> w;
    w.push_back({"token_embd.weight", gemma ? GgmlType::Q6_K : GgmlType::Q4_K, {E, V}});
    if (s.arch == Arch::Llama3) w.push_back({"rope_freqs.weight", GgmlType::F32, {s.head_dim / 2}});
    const bool phi3 = s.phi3();   // fused attn_qkv and ffn_up (gate rows, then up's), LongRoPE of n_rot/2
    if (phi3) {
        w.push_back({"rope_factors_long.weight", GgmlType::F32, {s.n_rot() / 2}});
        w.push_back({"rope_factors_short.weight", GgmlType::F32, {s.n_rot() / 2}});
    }
    w.push_back({"output_norm.weight", GgmlType::F32, {E}});
    if (!gemma) w.push_back({"output.weight", GgmlType::Q6_K, {E, V}});
    for (uint64_t i = 0; i < L; ++i) {
        const std::string p = "blk." + std::to_string(i) + ".";
        const bool more = i < L / 8 || i >= 7 * L / 8 || (i - L / 8) % 3 == 2;
        const GgmlType vd = more ? GgmlType::Q6_K : GgmlType::Q4_K;
        w.push_back({p + "attn_norm.weight", GgmlType::F32, {E}});
        if (phi3) {
            w.push_back({p + "attn_qkv.weight", vd, {E, Q + 2 * KV}});   // llama.cpp types it as attn_v
        } else {
            w.push_back({p + "attn_q.weight", GgmlType::Q4_K, {E, Q}});
            w.push_back({p + "attn_k.weight", GgmlType::Q4_K, {E, KV}});
            w.push_back({p + "attn_v.weight", vd, {E, KV}});
        }
        w.push_back({p + "attn_output.weight", GgmlType::Q4_K, {Q, E}});
        w.push_back({p + "ffn_norm.weight", GgmlType::F32, {E}});
        if (phi3) {
            w.push_back({p + "ffn_up.weight", GgmlType::Q4_K, {E, 2 * F}});
        } else {
            w.push_back({p + "ffn_gate.weight", GgmlType::Q4_K, {E, F}});
            w.push_back({p + "ffn_up.weight", GgmlType::Q4_K, {E, F}});
        }
        w.push_back({p + "ffn_down.weight", vd, {F, E}});
        if (qwen) {
            w.push_back({p + "attn_q.bias", GgmlType::F32, {Q}});
            w.push_back({p + "attn_k.bias", GgmlType::F32, {KV}});
            w.push_back({p + "attn_v.bias", GgmlType::F32, {KV}});
        }
        if (gemma || qwen3) {
            w.push_back({p + "attn_q_norm.weight", GgmlType::F32, {s.head_dim}});
            w.push_back({p + "attn_k_norm.weight", GgmlType::F32, {s.head_dim}});
        }
        if (gemma) {
            w.push_back({p + "post_attention_norm.weight", GgmlType::F32, {E}});
            w.push_back({p + "post_ffw_norm.weight", GgmlType::F32, {E}});
        }
    }
    return w;
}

class SynthModel : public ::testing::TestWithParam<std::pair<Arch, Size>> {};

TEST_P(SynthModel, TensorsNamesTypesShapes) {
    const auto [a, z] = GetParam();
    const Spec s = preset(a, z);
    const gguf::File f = parse(a, z);
    const auto want = expected_tensors(s);
    EXPECT_EQ(f.tensors().size(), want.size());
    for (const Want& w : want) {
        SCOPED_TRACE(w.name);
        const gguf::TensorInfo* t = f.find_tensor(w.name);
        ASSERT_NE(t, nullptr) << "missing";
        EXPECT_EQ(t->ggml_type(), w.type) << gguf::type_name(t->type);
        ASSERT_EQ(t->n_dims, w.ne.size());
        for (size_t d = 0; d < w.ne.size(); ++d) EXPECT_EQ(t->ne[d], w.ne[d]) << "dim " << d;
    }
    uint64_t params = 0;
    for (const auto& t : f.tensors()) params += t.n_elements();
    EXPECT_EQ(params, param_count(s));
}

TEST_P(SynthModel, Metadata) {
    const auto [a, z] = GetParam();
    const Spec s = preset(a, z);
    const gguf::File f = parse(a, z);
    const std::string p = std::string(gguf_arch(a)) + ".";
    auto type_of = [&](const std::string& key) {
        const gguf::KeyValue* kv = f.find(key);
        EXPECT_NE(kv, nullptr) << key << " missing";
        return kv ? kv->type : ValueType::U8;
    };
    // The types gguf-py writes and llama.cpp's typed getters accept.
    for (const char* k : {"general.file_type", "general.quantization_version"}) EXPECT_EQ(type_of(k), ValueType::U32) << k;
    for (const char* k : {"context_length", "embedding_length", "block_count", "feed_forward_length",
                          "attention.head_count", "attention.head_count_kv"})
        EXPECT_EQ(type_of(p + k), ValueType::U32) << k;
    for (const char* k : {"attention.layer_norm_rms_epsilon", "rope.freq_base"}) EXPECT_EQ(type_of(p + k), ValueType::F32) << k;
    for (const char* k : {"general.architecture", "general.name", "tokenizer.ggml.model", "tokenizer.ggml.pre",
                          "tokenizer.chat_template"})
        EXPECT_EQ(type_of(k), ValueType::STRING) << k;
    for (const char* k : {"tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.eot_token_id"})
        EXPECT_EQ(type_of(k), ValueType::U32) << k;
    EXPECT_EQ(type_of("tokenizer.ggml.add_bos_token"), ValueType::BOOL);
    for (const char* k : {"tokenizer.ggml.tokens", "tokenizer.ggml.merges", "tokenizer.ggml.token_type"})
        EXPECT_EQ(type_of(k), ValueType::ARRAY) << k;
    EXPECT_EQ(f.find("tokenizer.ggml.tokens")->elem_type, ValueType::STRING);
    EXPECT_EQ(f.find("tokenizer.ggml.merges")->elem_type, ValueType::STRING);
    EXPECT_EQ(f.find("tokenizer.ggml.token_type")->elem_type, ValueType::I32);

    EXPECT_EQ(f.get_string("general.architecture"), a == Arch::Llama3 ? "llama" : s.phi3() ? "phi3" : arch_name(a));
    EXPECT_EQ(f.get_u32("general.file_type"), 15u);   // MOSTLY_Q4_K_M
    EXPECT_EQ(f.get_u32(p + "embedding_length"), s.n_embd);
    EXPECT_EQ(f.get_u32(p + "block_count"), s.n_layer);
    EXPECT_EQ(f.get_u32(p + "feed_forward_length"), s.n_ff);
    EXPECT_EQ(f.get_u32(p + "attention.head_count"), s.n_head);
    EXPECT_EQ(f.get_u32(p + "attention.head_count_kv"), s.n_head_kv);
    EXPECT_EQ(f.get_u32(p + "context_length"), s.n_ctx);
    EXPECT_EQ(f.get_float(p + "rope.freq_base"), double(s.rope_base));
    EXPECT_EQ(f.get_string("tokenizer.ggml.model"), "gpt2");
    // llama.cpp's names: the GPT-2 regex, and what Qwen3 and Llama 3.x files carry.
    EXPECT_EQ(f.get_string("tokenizer.ggml.pre"),
              a == Arch::Qwen3 ? "qwen2" : a == Arch::Llama3 ? "llama-bpe" : a == Arch::Mistral3 ? "tekken" : "gpt-2");
    EXPECT_EQ(f.get_bool("tokenizer.ggml.add_bos_token"), true);
    EXPECT_EQ(f.get_string("tokenizer.chat_template"), chat_template());
    const Vocab& v = vocab();
    EXPECT_EQ(f.get_u32("tokenizer.ggml.bos_token_id"), v.bos_id);
    EXPECT_EQ(f.get_u32("tokenizer.ggml.eos_token_id"), v.eos_id);
    EXPECT_EQ(f.get_u32("tokenizer.ggml.eot_token_id"), v.im_end_id);
    EXPECT_EQ(f.find("tokenizer.ggml.tokens")->count, s.n_vocab);
    EXPECT_EQ(f.find_tensor("token_embd.weight")->ne[1], s.n_vocab);
    if (a == Arch::Llama3) {
        EXPECT_EQ(f.get_string(p + "rope.scaling.type"), "linear");
        EXPECT_EQ(f.get_float(p + "rope.scaling.factor"), 4.0);
        EXPECT_EQ(f.get_float(p + "rope.freq_base"), 5e5);
        const gguf::TensorInfo* rf = f.find_tensor("rope_freqs.weight");
        ASSERT_NE(rf, nullptr);
        const float* w = reinterpret_cast<const float*>(rf->data);
        EXPECT_EQ(w[0], 1.0f);
        EXPECT_EQ(w[rf->ne[0] - 1], 8.0f);
        for (uint64_t i = 1; i < rf->ne[0]; ++i) EXPECT_GE(w[i], w[i - 1]) << i;   // slower pairs stretched more
    } else if (a == Arch::Mistral3) {
        // Ministral 3's keys (llama.cpp's mistral3 loader reads each of them).
        EXPECT_EQ(f.get_string(p + "rope.scaling.type"), "yarn");
        EXPECT_EQ(f.get_float(p + "rope.scaling.factor"), 16.0);
        EXPECT_EQ(f.get_u32(p + "rope.scaling.original_context_length"), 16u);
        EXPECT_EQ(f.get_float(p + "rope.scaling.yarn_beta_fast"), 32.0);
        EXPECT_EQ(f.get_float(p + "rope.scaling.yarn_beta_slow"), 1.0);
        EXPECT_EQ(f.get_float(p + "rope.scaling.yarn_log_multiplier"), 0.5);
        EXPECT_NEAR(*f.get_float(p + "attention.temperature_scale"), 0.1, 1e-7);
        EXPECT_EQ(f.get_float(p + "rope.freq_base"), 1e6);
        EXPECT_EQ(f.find_tensor("rope_freqs.weight"), nullptr);
    } else if (s.phi3()) {
        // A LongRoPE Phi-3.5/Phi-4-mini file's keys: no scaling type, the
        // original context, the magnitude sqrt(1 + ln 2 / ln 512); phi4mini
        // rotates 3/4 of each head (Phi-4-mini: 96 of 128), its factors n_rot/2.
        EXPECT_EQ(f.find(p + "rope.scaling.type"), nullptr);
        EXPECT_EQ(f.get_u32(p + "rope.scaling.original_context_length"), 512u);
        EXPECT_NEAR(*f.get_float(p + "rope.scaling.attn_factor"), std::sqrt(1 + std::log(2.0) / std::log(512.0)), 1e-6);
        EXPECT_EQ(f.get_u32(p + "rope.dimension_count"), a == Arch::Phi4Mini ? s.head_dim / 4 * 3 : s.head_dim);
        EXPECT_EQ(f.find_tensor("rope_factors_long.weight")->ne[0], s.n_rot() / 2);
        for (const char* name : {"rope_factors_long.weight", "rope_factors_short.weight"}) {
            const gguf::TensorInfo* rf = f.find_tensor(name);
            ASSERT_NE(rf, nullptr) << name;
            const float* w = reinterpret_cast<const float*>(rf->data);
            EXPECT_EQ(w[0], 1.0f) << name;
            EXPECT_EQ(w[rf->ne[0] - 1], std::string(name).find("long") != std::string::npos ? 16.0f : 2.0f) << name;
        }
    } else {
        EXPECT_EQ(f.find(p + "rope.scaling.type"), nullptr);
    }
    if (a == Arch::Qwen3) {
        EXPECT_EQ(f.get_u32(p + "attention.key_length"), s.head_dim);
        EXPECT_EQ(f.get_u32(p + "attention.value_length"), s.head_dim);
        EXPECT_EQ(f.get_float(p + "rope.freq_base"), 1e6);
        EXPECT_EQ(f.find(p + "attention.sliding_window"), nullptr);
        EXPECT_NE(s.n_head * s.head_dim, s.n_embd);   // as in Qwen3-0.6B: key_length is needed
    } else if (a == Arch::Gemma3) {
        EXPECT_EQ(f.get_u32(p + "attention.key_length"), s.head_dim);
        EXPECT_EQ(f.get_u32(p + "attention.value_length"), s.head_dim);
        EXPECT_EQ(f.get_u32(p + "attention.sliding_window"), 16u);
        EXPECT_EQ(f.get_float(p + "rope.freq_base"), 1e6);
        EXPECT_EQ(f.get_float(p + "rope.freq_base_swa"), 1e4);
        EXPECT_NE(s.n_head * s.head_dim, s.n_embd);   // as in the real gemma-3: key_length is needed
        EXPECT_GE(s.n_layer, 6u);                      // layer 5 is a global layer
    } else if (s.phi3()) {
        EXPECT_EQ(f.get_u32(p + "attention.sliding_window"), 0u);   // Phi-4's
        EXPECT_EQ(s.n_head * s.head_dim, s.n_embd);
    } else {
        EXPECT_EQ(f.find(p + "attention.sliding_window"), nullptr);
        EXPECT_EQ(s.n_head * s.head_dim, s.n_embd);
    }
}

// Norm weights: ~1, except gemma3's final norm (magnitude 2, random signs) and
// its post-branch norms, and the q/k norms of gemma3 and qwen3 (1.5): see
// kGemmaHeadNorm in synth.cpp.
double expected_norm_magnitude(Arch a, const std::string& name) {
    if (a == Arch::Qwen3) return name.find("attn_q_norm") != std::string::npos ||
                                 name.find("attn_k_norm") != std::string::npos ? 1.5 : 1.0;
    if (a != Arch::Gemma3) return 1.0;
    if (name == "output_norm.weight") return 2.0;
    for (const char* k : {"post_attention_norm", "post_ffw_norm", "attn_q_norm", "attn_k_norm"})
        if (name.find(k) != std::string::npos) return 1.5;
    return 1.0;
}

TEST_P(SynthModel, NormWeights) {
    const auto [a, z] = GetParam();
    const gguf::File f = parse(a, z);
    for (const auto& t : f.tensors()) {
        if (t.name.find("norm.weight") == std::string::npos) continue;
        SCOPED_TRACE(t.name);
        ASSERT_EQ(t.ggml_type(), GgmlType::F32);
        const float* w = reinterpret_cast<const float*>(t.data);
        double mean_abs = 0;
        size_t neg = 0;
        for (uint64_t i = 0; i < t.ne[0]; ++i) {
            mean_abs += std::fabs(w[i]);
            neg += w[i] < 0;
        }
        mean_abs /= double(t.ne[0]);
        EXPECT_NEAR(mean_abs, expected_norm_magnitude(a, t.name), 0.05);
        if (a == Arch::Gemma3 && t.name == "output_norm.weight") {
            EXPECT_GT(neg, t.ne[0] / 4);   // random signs
            EXPECT_LT(neg, 3 * t.ne[0] / 4);
        } else {
            EXPECT_EQ(neg, 0u);
        }
    }
}

std::string param_name(const ::testing::TestParamInfo<std::pair<Arch, Size>>& i) {
    return std::string(arch_name(i.param.first)) + "_" + size_name(i.param.second);
}

INSTANTIATE_TEST_SUITE_P(TinyAndSmall, SynthModel,
                         ::testing::Values(std::pair{Arch::Llama, Size::Tiny}, std::pair{Arch::Qwen2, Size::Tiny},
                                           std::pair{Arch::Gemma3, Size::Tiny}, std::pair{Arch::Llama, Size::Small},
                                           std::pair{Arch::Qwen2, Size::Small},
                                           std::pair{Arch::Gemma3, Size::Small}, std::pair{Arch::Qwen3, Size::Tiny},
                                           std::pair{Arch::Qwen3, Size::Small}, std::pair{Arch::Llama3, Size::Tiny},
                                           std::pair{Arch::Mistral3, Size::Tiny}, std::pair{Arch::Phi3, Size::Tiny},
                                           std::pair{Arch::Phi4Mini, Size::Tiny}),
                         param_name);

// ---- presets -------------------------------------------------------------------------

// The 16-bit mixes: every tensor the Q4_K_M mix quantizes (matrices, the
// token embedding, the LM head) in F16 or BF16, the rest F32 as in every
// mix; llama.cpp's file type (MOSTLY_F16 1, MOSTLY_BF16 32); the Q4_K_M
// file's tensors, names and shapes.
TEST(SynthMixes, SixteenBitMatrices) {
    for (auto [name, mix, type, ftype] : {std::tuple{"f16", TypeMix::F16, GgmlType::F16, 1u},
                                          std::tuple{"bf16", TypeMix::BF16, GgmlType::BF16, 32u}}) {
        SCOPED_TRACE(name);
        ASSERT_EQ(parse_type_mix(name), mix);
        for (Arch a : {Arch::Llama, Arch::Gemma4}) {
            Spec s = preset(a, Size::Tiny);
            const std::vector<uint8_t> q4 = model_bytes(s);
            s.types = mix;
            const std::vector<uint8_t> bytes = model_bytes(s);
            const gguf::File f = gguf::File::parse(bytes, name), fq = gguf::File::parse(q4, "q4_k_m");
            EXPECT_EQ(f.get_u32("general.file_type"), ftype);
            ASSERT_EQ(f.tensors().size(), fq.tensors().size());
            size_t sixteen = 0;
            for (const gguf::TensorInfo& t : f.tensors()) {
                const gguf::TensorInfo* o = fq.find_tensor(t.name);
                ASSERT_NE(o, nullptr) << t.name;
                EXPECT_EQ(t.ne, o->ne) << t.name;
                const bool f32 = o->ggml_type() == GgmlType::F32;
                EXPECT_EQ(t.ggml_type(), f32 ? GgmlType::F32 : type) << t.name;
                sixteen += !f32;
            }
            EXPECT_GE(sixteen, 2 + 7 * s.n_layer) << "the embedding, the LM head or a matrix is not 16-bit";
        }
    }
    EXPECT_FALSE(parse_type_mix("f32"));
}

TEST(SynthPresets, AllValidAndQ4KRows) {
    for (Size z : all_sizes()) {
        for (Arch a : all_archs()) {
            const Spec s = preset(a, z);
            SCOPED_TRACE(s.name());
            for (const TensorSpec& t : tensor_plan(s)) {
                if (t.type != GgmlType::F32) {
                    EXPECT_EQ(t.ne[0] % 256, 0u) << t.name;
                }
            }
            EXPECT_EQ(s.n_head % s.n_head_kv, 0u);
        }
    }
    EXPECT_EQ(preset(Arch::Llama, Size::Wide4096).n_ff, 11008u);   // Llama-2-7B: 43 * 256
    const Spec l3 = preset(Arch::Llama, Size::Llama3_8B_Slice);      // Llama-3-8B's layer shape
    EXPECT_EQ(l3.n_ff, 14336u);
    EXPECT_EQ(l3.n_head_kv, 8u);
    // Its two layers are the two kinds Q4_K_M makes of Llama-3-8B's 32.
    EXPECT_FALSE(q4_k_m_more_bits(0, l3.n_layer));
    EXPECT_TRUE(q4_k_m_more_bits(1, l3.n_layer));
    const Spec l8 = preset(Arch::Llama, Size::Llama3_8B);            // the whole of Llama-3-8B
    EXPECT_EQ(l8.n_layer, 32u);
    EXPECT_EQ(l8.n_vocab, kLlama3Vocab);
    EXPECT_EQ(l8.n_ff, l3.n_ff);
    const Spec l1 = preset(Arch::Llama, Size::Llama3_2_1B_Slice);    // Llama-3.2-1B's layer shape
    EXPECT_EQ(l1.n_embd, 2048u);
    EXPECT_EQ(l1.q_dim(), 2048u);
    EXPECT_EQ(l1.kv_dim(), 512u);
    EXPECT_EQ(l1.n_ff, 8192u);
    EXPECT_LT(param_count(preset(Arch::Llama, Size::Tiny)), 2'000'000u);
}

TEST(SynthPresets, ValidateRejects) {
    Spec s = preset(Arch::Llama, Size::Tiny);
    s.n_ff = 500;
    EXPECT_THROW(validate(s), std::invalid_argument);
    s = preset(Arch::Llama, Size::Tiny);
    s.n_head_kv = 3;
    EXPECT_THROW(validate(s), std::invalid_argument);
    s = preset(Arch::Qwen2, Size::Tiny);
    s.head_dim = 128;   // q_dim != n_embd without key_length
    EXPECT_THROW(validate(s), std::invalid_argument);
    EXPECT_EQ(parse_arch("qwen3"), Arch::Qwen3);
    EXPECT_EQ(parse_arch("llama3"), Arch::Llama3);
    EXPECT_EQ(parse_arch("mistral3"), Arch::Mistral3);
    EXPECT_EQ(parse_arch("phi3"), Arch::Phi3);
    EXPECT_EQ(parse_arch("phi4mini"), Arch::Phi4Mini);
    s = preset(Arch::Phi4Mini, Size::Tiny);
    s.rope_dims = 47;   // partial rotary rotates pairs
    EXPECT_THROW(validate(s), std::invalid_argument);
    s = preset(Arch::Llama, Size::Tiny);
    s.rope_dims = 48;   // phi3's alone
    EXPECT_THROW(validate(s), std::invalid_argument);
    s = preset(Arch::Llama, Size::Tiny);
    s.attn_temp_scale = 0.1f;   // mistral3's alone
    EXPECT_THROW(validate(s), std::invalid_argument);
    EXPECT_FALSE(parse_arch("gpt2"));
    EXPECT_FALSE(parse_size("huge"));
    EXPECT_EQ(parse_size("wide4096"), Size::Wide4096);
    EXPECT_EQ(parse_size("llama3-8b-slice"), Size::Llama3_8B_Slice);
    EXPECT_EQ(parse_size("llama3.2-1b-slice"), Size::Llama3_2_1B_Slice);
}

// ---- vocabulary -------------------------------------------------------------------------

TEST(SynthVocab, Invariants) {
    const Vocab& v = vocab();
    ASSERT_EQ(v.tokens.size(), v.token_type.size());
    EXPECT_GE(v.tokens.size(), 512u);
    EXPECT_LE(v.tokens.size(), 1024u);
    EXPECT_GE(v.merges.size(), 200u);

    // 256 byte tokens first, id = byte, in GPT-2's byte -> unicode spelling.
    EXPECT_EQ(v.tokens[' '], "\xC4\xA0");    // U+0120
    EXPECT_EQ(v.tokens['\n'], "\xC4\x8A");   // U+010A
    EXPECT_EQ(v.tokens['A'], "A");
    EXPECT_EQ(v.tokens[0xAD], "\xC5\x83");   // the last unprintable: U+0143
    EXPECT_EQ(v.tokens[0xFF], "\xC3\xBF");   // U+00FF stands for itself
    for (int b = 0; b < 256; ++b) {
        EXPECT_EQ(v.tokens[b], byte_to_unicode(uint8_t(b)));
        EXPECT_EQ(v.token_type[b], 1);
    }

    // Distinct tokens; every merge "a b" has a, b and ab in the vocabulary.
    std::map<std::string, size_t> id;
    for (size_t i = 0; i < v.tokens.size(); ++i) EXPECT_TRUE(id.emplace(v.tokens[i], i).second) << "duplicate " << v.tokens[i];
    std::set<std::string> seen_merges;
    for (size_t r = 0; r < v.merges.size(); ++r) {
        const std::string& m = v.merges[r];
        SCOPED_TRACE(m);
        EXPECT_TRUE(seen_merges.insert(m).second) << "duplicate merge";
        const size_t sp = m.find(' ');
        ASSERT_NE(sp, std::string::npos);
        ASSERT_EQ(m.find(' ', sp + 1), std::string::npos);   // byte-level symbols never contain ' '
        const std::string l = m.substr(0, sp), rr = m.substr(sp + 1);
        EXPECT_TRUE(id.count(l) && id.count(rr) && id.count(l + rr));
        EXPECT_LT(id[l + rr], v.tokens.size() - 4);   // a normal token, not a special
        EXPECT_GE(id[l + rr], 256u);
    }
    // Merges learned from English text contain whole words.
    EXPECT_TRUE(id.count("\xC4\xA0" "the"));   // " the"
    EXPECT_TRUE(id.count("\xC4\xA0" "and"));

    // Specials last, typed control, ids in range.
    const uint32_t n = uint32_t(v.tokens.size());
    EXPECT_EQ(v.tokens[v.bos_id], "<|bos|>");
    EXPECT_EQ(v.tokens[v.eos_id], "<|eos|>");
    EXPECT_EQ(v.tokens[v.im_start_id], "<|im_start|>");
    EXPECT_EQ(v.tokens[v.im_end_id], "<|im_end|>");
    for (uint32_t id_ : {v.bos_id, v.eos_id, v.im_start_id, v.im_end_id}) {
        EXPECT_LT(id_, n);
        EXPECT_GE(id_, n - 4);
        EXPECT_EQ(v.token_type[id_], 3);
    }
    for (uint32_t i = 0; i < n - 4; ++i) EXPECT_EQ(v.token_type[i], 1) << i;
}

TEST(SynthVocab, ChatTemplateIsChatML) {
    const std::string& t = chat_template();
    EXPECT_NE(t.find("<|im_start|>"), std::string::npos);
    EXPECT_NE(t.find("<|im_end|>"), std::string::npos);
    EXPECT_NE(t.find("add_generation_prompt"), std::string::npos);
    EXPECT_EQ(t.find("bos_token"), std::string::npos);   // add_bos_token adds it; no double BOS
}

}  // namespace

// ---- gemma4 ----------------------------------------------------------------------------

namespace {

// gemma4 (issue 25; tiny and small only, not in all_archs): the tensors
// llama.cpp's gemma4 loader creates for these shapes (q only on the shared-KV
// layers, attn_v only on the sliding ones, the sliding layers' own head
// size), its keys, and the same determinism as the other presets.
TEST(SynthGemma4, TensorsMetadataAndDeterminism) {
    EXPECT_EQ(parse_arch("gemma4"), Arch::Gemma4);
    EXPECT_THROW(preset(Arch::Gemma4, Size::Medium), std::invalid_argument);
    for (Size z : {Size::Tiny, Size::Small}) {
        const Spec s = preset(Arch::Gemma4, z);
        SCOPED_TRACE(s.name());
        const gguf::File f = parse(Arch::Gemma4, z);
        const uint64_t E = s.n_embd, F = s.n_ff, V = s.n_vocab, L = s.n_layer, P = s.n_embd_per_layer;
        std::vector<Want> want = {{"token_embd.weight", GgmlType::Q6_K, {E, V}},
                                  {"rope_freqs.weight", GgmlType::F32, {s.head_dim / 2}},
                                  {"per_layer_token_embd.weight", GgmlType::Q4_K, {P * L, V}},
                                  {"per_layer_model_proj.weight", GgmlType::F32, {E, P * L}},
                                  {"per_layer_proj_norm.weight", GgmlType::F32, {P}},
                                  {"output_norm.weight", GgmlType::F32, {E}}};
        const uint32_t n_kv = s.n_layer - s.shared_kv_layers;
        ASSERT_TRUE(s.is_swa(n_kv - 2) && !s.is_swa(n_kv - 1));   // llama.cpp's reuse sources
        for (uint32_t i = 0; i < L; ++i) {
            const std::string p = "blk." + std::to_string(i) + ".";
            const uint64_t hd = i % 2 == 0 ? s.head_dim / 2 : s.head_dim, Q = s.n_head * hd, KV = s.n_head_kv * hd;
            const GgmlType vd = q4_k_m_more_bits(i, s.n_layer) ? GgmlType::Q6_K : GgmlType::Q4_K;
            want.push_back({p + "attn_q.weight", GgmlType::Q4_K, {E, Q}});
            want.push_back({p + "attn_q_norm.weight", GgmlType::F32, {hd}});
            if (i < n_kv) {
                want.push_back({p + "attn_k.weight", GgmlType::Q4_K, {E, KV}});
                want.push_back({p + "attn_k_norm.weight", GgmlType::F32, {hd}});
                if (i % 2 == 0) want.push_back({p + "attn_v.weight", vd, {E, KV}});
            }
            want.push_back({p + "attn_output.weight", GgmlType::Q4_K, {Q, E}});
            want.push_back({p + "ffn_down.weight", vd, {F, E}});
            want.push_back({p + "inp_gate.weight", GgmlType::Q4_K, {E, P}});
            want.push_back({p + "proj.weight", GgmlType::Q4_K, {P, E}});
            want.push_back({p + "layer_output_scale.weight", GgmlType::F32, {1}});
            for (const char* n : {"attn_norm", "post_attention_norm", "ffn_norm", "post_ffw_norm", "post_norm"})
                want.push_back({p + n + ".weight", GgmlType::F32, {E}});
            for (const char* n : {"ffn_gate", "ffn_up"}) want.push_back({p + n + ".weight", GgmlType::Q4_K, {E, F}});
        }
        EXPECT_EQ(f.tensors().size(), want.size());
        for (const Want& w : want) {
            const gguf::TensorInfo* t = f.find_tensor(w.name);
            ASSERT_NE(t, nullptr) << w.name;
            EXPECT_EQ(t->ggml_type(), w.type) << w.name;
            ASSERT_EQ(t->n_dims, w.ne.size()) << w.name;
            for (size_t d = 0; d < w.ne.size(); ++d) EXPECT_EQ(t->ne[d], w.ne[d]) << w.name;
        }
        // Proportional RoPE: 1 on the first quarter of the full head's pairs, 1e30 past it.
        const float* rf = reinterpret_cast<const float*>(f.find_tensor("rope_freqs.weight")->data);
        EXPECT_EQ(rf[s.head_dim / 8 - 1], 1.0f);
        EXPECT_EQ(rf[s.head_dim / 8], 1e30f);
        const std::string k = "gemma4.";
        EXPECT_EQ(f.get_u32(k + "attention.key_length"), s.head_dim);
        EXPECT_EQ(f.get_u32(k + "attention.key_length_swa"), s.head_dim / 2);
        EXPECT_EQ(f.get_u32(k + "attention.value_length_swa"), s.head_dim / 2);
        EXPECT_EQ(f.get_u32(k + "rope.dimension_count_swa"), s.head_dim / 2);
        EXPECT_EQ(f.get_u32(k + "attention.shared_kv_layers"), 2u);
        EXPECT_EQ(f.get_u32(k + "embedding_length_per_layer_input"), 256u);
        EXPECT_EQ(f.get_u32(k + "attention.sliding_window"), 16u);
        EXPECT_EQ(f.get_float(k + "rope.freq_base_swa"), 1e4);
        EXPECT_EQ(f.get_float(k + "final_logit_softcapping"), 30.0);
        const gguf::KeyValue* pat = f.find(k + "attention.sliding_window_pattern");
        ASSERT_NE(pat, nullptr);
        ASSERT_EQ(pat->elem_type, ValueType::BOOL);   // as gguf-py writes a list of bools
        ASSERT_EQ(pat->count, L);
        for (uint32_t i = 0; i < L; ++i) EXPECT_EQ(pat->raw[i], i % 2 == 0 ? 1 : 0) << i;
    }
    Options one, four;
    one.threads = 1;
    four.threads = 4;
    const auto b1 = model_bytes(preset(Arch::Gemma4, Size::Tiny, 7), one);
    EXPECT_EQ(b1, model_bytes(preset(Arch::Gemma4, Size::Tiny, 7), four));
    EXPECT_NE(b1, model_bytes(preset(Arch::Gemma4, Size::Tiny, 8), one));
    Spec bad = preset(Arch::Gemma4, Size::Tiny);
    bad.shared_kv_layers = 3;   // layer n_kv - 1 would slide
    EXPECT_THROW(validate(bad), std::invalid_argument);
    bad = preset(Arch::Llama, Size::Tiny);
    bad.n_embd_per_layer = 256;   // gemma4's alone
    EXPECT_THROW(validate(bad), std::invalid_argument);
}

// gemma4-e2b (for measuring at Gemma-4-E2B's size; never generated here): its
// widths, Gemma 4's vocabulary, E2B's window, and a plan whose every
// quantized row is whole Q4_K blocks; gemma4's alone.
TEST(SynthGemma4, E2bPreset) {
    EXPECT_EQ(parse_size("gemma4-e2b"), Size::Gemma4E2B);
    const Spec s = preset(Arch::Gemma4, Size::Gemma4E2B);
    EXPECT_EQ(s.n_embd, 1536u);
    EXPECT_EQ(s.n_layer, 35u);
    EXPECT_EQ(s.head_dim, 512u);
    EXPECT_EQ(s.head_dim_swa, 256u);
    EXPECT_EQ(s.n_head, 8u);
    EXPECT_EQ(s.n_head_kv, 1u);
    EXPECT_EQ(s.n_vocab, kGemma4Vocab);
    EXPECT_EQ(s.sliding_window, 512u);
    EXPECT_EQ(s.n_embd_per_layer, 256u);
    EXPECT_NO_THROW(validate(s));
    for (const TensorSpec& t : tensor_plan(s)) {
        if (t.type != GgmlType::F32) {
            EXPECT_EQ(t.ne[0] % 256, 0u) << t.name;
        }
    }
    EXPECT_GT(param_count(s), 4'000'000'000u);   // E2B: about 5.1B with its wider later FFNs
    for (Arch a : all_archs()) EXPECT_THROW(preset(a, Size::Gemma4E2B), std::invalid_argument) << arch_name(a);
}

}  // namespace
