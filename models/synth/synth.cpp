// Synthetic model generation: the tensor plan, deterministic weights and
// the GGUF metadata llama.cpp expects (the presets and type rules: spec.cpp).
#include "models/synth/synth.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string_view>
#include <thread>

#include "gguf/gguf.h"

namespace ptxlm::synth {

using gguf::GgmlType;

// ---- tensor plan -------------------------------------------------------------
//
// Names and shapes as llama.cpp's load_arch_tensors for llama, qwen2, gemma3
// and qwen3 create them. For llama, the converter permutes the rows of attn_q/attn_k so
// that llama.cpp's adjacent-pair RoPE matches HF's half-split one; random rows
// have no original order, so there is nothing to permute here: the file is
// simply a llama model whose RoPE pairs are (2i, 2i+1).

namespace {

// Gemma 4 (llama_model_gemma4::load_arch_tensors): what a layer with its own
// K/V has, q only on the shared-KV layers, attn_v on the sliding layers only,
// the per-layer embedding weights and an output scale on every layer.
std::vector<TensorSpec> gemma4_plan(const Spec& s) {
    std::vector<TensorSpec> v;
    const uint32_t L = s.n_layer;
    auto add = [&](std::string name, WeightKind k, int layer, std::vector<uint64_t> ne) {
        GgmlType t = mix_type(s.types, k, layer < 0 ? 0 : uint32_t(layer), L, s.tied_embeddings());
        v.push_back({std::move(name), k, layer, t, std::move(ne)});
    };
    const uint64_t E = s.n_embd, F = s.n_ff, V = s.n_vocab, P = s.n_embd_per_layer;
    add("token_embd.weight", WeightKind::TokenEmbd, -1, {E, V});
    add("rope_freqs.weight", WeightKind::RopeFreqs, -1, {s.head_dim / 2});
    add("per_layer_token_embd.weight", WeightKind::PleTokEmbd, -1, {P * L, V});
    add("per_layer_model_proj.weight", WeightKind::PleModelProj, -1, {E, P * L});
    add("per_layer_proj_norm.weight", WeightKind::Norm, -1, {P});
    for (uint32_t il = 0; il < L; ++il) {
        const int i = int(il);
        auto n = [&](const char* what) { return "blk." + std::to_string(il) + "." + what; };
        const uint64_t hd = s.head_dim_of(il), Q = s.n_head * hd, KV = s.n_head_kv * hd;
        add(n("attn_norm.weight"), WeightKind::Norm, i, {E});
        add(n("attn_q.weight"), WeightKind::AttnQ, i, {E, Q});
        if (s.has_kv(il)) {
            add(n("attn_k.weight"), WeightKind::AttnK, i, {E, KV});
            if (s.is_swa(il)) add(n("attn_v.weight"), WeightKind::AttnV, i, {E, KV});
        }
        add(n("attn_q_norm.weight"), WeightKind::Norm, i, {hd});
        if (s.has_kv(il)) add(n("attn_k_norm.weight"), WeightKind::Norm, i, {hd});
        add(n("attn_output.weight"), WeightKind::AttnOut, i, {Q, E});
        add(n("post_attention_norm.weight"), WeightKind::Norm, i, {E});
        add(n("ffn_norm.weight"), WeightKind::Norm, i, {E});
        add(n("ffn_gate.weight"), WeightKind::FfnGate, i, {E, F});
        add(n("ffn_up.weight"), WeightKind::FfnUp, i, {E, F});
        add(n("ffn_down.weight"), WeightKind::FfnDown, i, {F, E});
        add(n("post_ffw_norm.weight"), WeightKind::Norm, i, {E});
        add(n("inp_gate.weight"), WeightKind::PleGate, i, {E, P});
        add(n("proj.weight"), WeightKind::PleProj, i, {P, E});
        add(n("post_norm.weight"), WeightKind::Norm, i, {E});
        add(n("layer_output_scale.weight"), WeightKind::Scale, i, {1});
    }
    add("output_norm.weight", WeightKind::Norm, -1, {E});
    return v;
}

}  // namespace

std::vector<TensorSpec> tensor_plan(const Spec& s) {
    if (s.arch == Arch::Gemma4) return gemma4_plan(s);
    std::vector<TensorSpec> v;
    const uint32_t L = s.n_layer;
    auto add = [&](std::string name, WeightKind k, int layer, std::vector<uint64_t> ne) {
        GgmlType t = mix_type(s.types, k, layer < 0 ? 0 : uint32_t(layer), L, s.tied_embeddings());
        v.push_back({std::move(name), k, layer, t, std::move(ne)});
    };
    const uint64_t E = s.n_embd, Q = s.q_dim(), KV = s.kv_dim(), F = s.n_ff, V = s.n_vocab;

    add("token_embd.weight", WeightKind::TokenEmbd, -1, {E, V});
    if (s.rope_freqs()) add("rope_freqs.weight", WeightKind::RopeFreqs, -1, {s.head_dim / 2});
    if (s.rope_factors()) {
        add("rope_factors_long.weight", WeightKind::RopeFactorsLong, -1, {s.n_rot() / 2});
        add("rope_factors_short.weight", WeightKind::RopeFactorsShort, -1, {s.n_rot() / 2});
    }
    for (uint32_t il = 0; il < L; ++il) {
        const int i = int(il);
        auto n = [&](const char* what) { return "blk." + std::to_string(il) + "." + what; };
        add(n("attn_norm.weight"), WeightKind::Norm, i, {E});
        if (s.fused()) {
            add(n("attn_qkv.weight"), WeightKind::AttnQkv, i, {E, Q + 2 * KV});
        } else {
            add(n("attn_q.weight"), WeightKind::AttnQ, i, {E, Q});
            if (s.qkv_bias()) add(n("attn_q.bias"), WeightKind::Bias, i, {Q});
            add(n("attn_k.weight"), WeightKind::AttnK, i, {E, KV});
            if (s.qkv_bias()) add(n("attn_k.bias"), WeightKind::Bias, i, {KV});
            add(n("attn_v.weight"), WeightKind::AttnV, i, {E, KV});
            if (s.qkv_bias()) add(n("attn_v.bias"), WeightKind::Bias, i, {KV});
        }
        if (s.qk_norm()) {
            add(n("attn_q_norm.weight"), WeightKind::Norm, i, {s.head_dim});
            add(n("attn_k_norm.weight"), WeightKind::Norm, i, {s.head_dim});
        }
        add(n("attn_output.weight"), WeightKind::AttnOut, i, {Q, E});
        if (s.arch == Arch::Gemma3) add(n("post_attention_norm.weight"), WeightKind::Norm, i, {E});
        add(n("ffn_norm.weight"), WeightKind::Norm, i, {E});
        if (s.fused()) {
            add(n("ffn_up.weight"), WeightKind::FfnUp, i, {E, 2 * F});   // the gate's rows, then up's
        } else {
            add(n("ffn_gate.weight"), WeightKind::FfnGate, i, {E, F});
            add(n("ffn_up.weight"), WeightKind::FfnUp, i, {E, F});
        }
        add(n("ffn_down.weight"), WeightKind::FfnDown, i, {F, E});
        if (s.arch == Arch::Gemma3) add(n("post_ffw_norm.weight"), WeightKind::Norm, i, {E});
    }
    add("output_norm.weight", WeightKind::Norm, -1, {E});
    if (!s.tied_embeddings()) add("output.weight", WeightKind::Output, -1, {E, V});
    return v;
}

uint64_t param_count(const Spec& s) {
    uint64_t n = 0;
    for (const TensorSpec& t : tensor_plan(s)) {
        uint64_t e = 1;
        for (uint64_t d : t.ne) e *= d;
        n += e;
    }
    return n;
}

// ---- random numbers ----------------------------------------------------------

namespace {

uint64_t splitmix64(uint64_t x) {
    x += 0x9E3779B97F4A7C15ull;
    x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
    x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
    return x ^ (x >> 31);
}

uint64_t fnv1a64(std::string_view s) {
    uint64_t h = 0xCBF29CE484222325ull;
    for (unsigned char c : s) h = (h ^ c) * 0x100000001B3ull;
    return h;
}

// One stream per (seed, tensor name): a tensor's values do not depend on which
// other tensors exist or in what order they are generated.
uint64_t stream_key(uint64_t seed, std::string_view tensor) { return splitmix64(seed) ^ fnv1a64(tensor); }

}  // namespace

// Counter-based: one splitmix64 hash per element, its four 16-bit lanes summed
// (Irwin-Hall, n = 4) and standardized. Integer arithmetic up to a single
// float multiply, so the bits are the same on every machine and libm (Box-Muller
// would depend on log/cos rounding). Tails are bounded at 2*sqrt(3).
float rope_freq_factor(uint32_t i, uint32_t n) {
    const uint32_t lo = n / 4, hi = n - n / 4;
    if (i < lo) return 1.0f;
    if (i >= hi) return 8.0f;
    return 1.0f + 7.0f * float(i - lo) / float(hi - lo);
}

float rope_freq_factor_proportional(uint32_t i, uint32_t n) { return i < n / 4 ? 1.0f : 1e30f; }

float rope_factor_long(uint32_t i, uint32_t n) { return 1.0f + 15.0f * float(i) / float(n - 1); }
float rope_factor_short(uint32_t i, uint32_t n) { return 1.0f + float(i) / float(n - 1); }

float synth_normal(uint64_t key, uint64_t index) {
    const uint64_t h = splitmix64(key + splitmix64(index));
    const int32_t sum = int32_t(h & 0xFFFF) + int32_t((h >> 16) & 0xFFFF) + int32_t((h >> 32) & 0xFFFF) +
                        int32_t(h >> 48);
    // Each lane: mean 32767.5, variance (65536^2 - 1) / 12; 2*sum - 262140 is
    // centred, with standard deviation 2 * sqrt((65536^2 - 1) / 3).
    static const float k = float(1.0 / (2.0 * std::sqrt((65536.0 * 65536.0 - 1.0) / 3.0)));
    return float(2 * sum - 262140) * k;
}

// ---- weights -------------------------------------------------------------------

namespace {

// The logits' target standard deviation. With ~770 tokens, the gap between the
// two largest of that many N(0, 6^2) draws has a median of ~1.2 (measured on a
// float reference of these inits): argmax comparisons have margins far above
// kernel rounding (1e-3); a test should still skip the rare near-ties.
constexpr float kLogitStd = 6.0f;

// gemma3's norms. With tied embeddings the residual stream carries the input
// token's own embedding e to the head, and with positive final-norm weights
// its logit e.(g*x) ~ |e|^2 stands ~sqrt(n_embd) standard deviations above the
// rest: the model echoes its input whatever attention does (measured on a
// float reference: 100% echo, skipping attention never changes the argmax).
// So the final norm's weights get random signs (decorrelating the head from
// the embedding) and magnitude 2 (so the embedding, and with it the input,
// can be smaller), and the post-attention/post-FFN norms 1.5 (branches
// outweigh the input in the residual). q/k norm weights of 1.5 make the
// scores of the per-head-normalized q, k of std ~2, like llama's. Measured:
// greedy decoding gives ~40 distinct tokens in 48 (llama, qwen2: ~40), against
// 3-20 with all norms ~1 and random signs. qwen3's q/k norm weights are 1.5 for
// the same reason (its weights are plain w, gemma3's 1 + w: the same values).
constexpr float kGemmaHeadNorm = 2.0f;
constexpr float kGemmaBranchNorm = 1.5f;
constexpr float kQkNorm = 1.5f;
// gemma4 attends with scale 1 (q, k RMS-normed): q·k of norm weights w over
// a head of d has std ~w²·√d, 2.6 at d = 256 and 1.8 at 128 for w = 0.4.
constexpr float kGemma4QkNorm = 0.4f;

// How one tensor's values are drawn: mean + std * z, with z ~ synth_normal;
// `random_sign` flips each value's sign with a second stream.
struct Init {
    float mean = 0.0f;
    float std = 1.0f;
    bool random_sign = false;
};

Init init_of(const Spec& s, const TensorSpec& t) {
    const float E = float(s.n_embd), Q = float(s.q_dim()), F = float(s.n_ff), L = float(s.n_layer);
    const bool gemma = s.gemma();
    switch (t.kind) {
        case WeightKind::TokenEmbd:
            // Untied: the residual stream starts at RMS 1. Tied (gemma3): the
            // same matrix makes the logits, logit std = std * sqrt(n_embd) *
            // kGemmaHeadNorm (normed hidden state of RMS 1 times the final
            // norm), and the input, scaled by sqrt(n_embd), starts at RMS 3.
            return {0.0f, gemma ? kLogitStd / (kGemmaHeadNorm * std::sqrt(E)) : 1.0f};
        case WeightKind::Output:
            return {0.0f, kLogitStd / std::sqrt(E)};   // logit std = kLogitStd
        case WeightKind::AttnQ:
        case WeightKind::AttnK:
            // q, k entries of std 1.4: scores q.k/sqrt(head_dim) of std ~2, so
            // attention is selective rather than a flat average. (gemma3
            // normalizes q and k per head, where the norm weights set this.)
            return {0.0f, 1.4f / std::sqrt(E)};
        case WeightKind::AttnQkv:   // q's and k's rows; make_tensor gives v's AttnV's std
        case WeightKind::AttnV:
        case WeightKind::FfnGate:
        case WeightKind::FfnUp:
            return {0.0f, t.kind == WeightKind::AttnQkv ? 1.4f / std::sqrt(E) : 1.0f / std::sqrt(E)};   // outputs of RMS ~1
        case WeightKind::AttnOut:
            // Each residual branch adds ~1/(2L) of unit variance: the stream
            // stays O(1) however deep the model.
            return {0.0f, 1.0f / std::sqrt(Q * 2.0f * L)};
        case WeightKind::FfnDown:
            return {0.0f, 2.0f / std::sqrt(F * 2.0f * L)};   // silu(g)*u has RMS ~0.5
        case WeightKind::Bias:
            return {0.0f, 0.1f};
        case WeightKind::RopeFreqs:
        case WeightKind::RopeFactorsLong:
        case WeightKind::RopeFactorsShort:
        case WeightKind::Scale:
            return {};   // not random: rope_freq_factor, rope_factor_long/short, layer_output_scale
        // gemma4's per-layer embeddings: the looked-up rows times √n_embd_per_layer
        // and the gate's outputs of RMS ~1, the projection's normed after it.
        case WeightKind::PleTokEmbd:
        case WeightKind::PleProj:
            return {0.0f, 1.0f / std::sqrt(float(s.n_embd_per_layer))};
        case WeightKind::PleModelProj:
        case WeightKind::PleGate:
            return {0.0f, 1.0f / std::sqrt(E)};
        case WeightKind::Norm: {
            const std::string_view n = t.name;
            if (n.ends_with("attn_q_norm.weight") || n.ends_with("attn_k_norm.weight"))
                return s.arch == Arch::Gemma4 ? Init{kGemma4QkNorm, 0.05f} : Init{kQkNorm, 0.1f};
            if (gemma) {   // gemma3 stores 1 + w; see kGemmaHeadNorm for the values
                if (n == "output_norm.weight") return {kGemmaHeadNorm, 0.1f, true};
                for (std::string_view k : {"post_attention_norm.weight", "post_ffw_norm.weight"})
                    if (n.ends_with(k)) return {kGemmaBranchNorm, 0.1f};
            }
            return {1.0f, 0.1f};
        }
    }
    return {};
}

void fill_row(const Init& init, uint64_t key, uint64_t sign_key, uint64_t first, float* out, uint64_t n) {
    for (uint64_t j = 0; j < n; ++j) {
        float v = init.mean + init.std * synth_normal(key, first + j);
        if (init.random_sign && (splitmix64(sign_key + first + j) >> 63)) v = -v;
        out[j] = v;
    }
}

// Generates and quantizes one tensor row by row: at most one f32 row per thread
// is alive at a time. Rows are independent, so the bytes do not depend on the
// thread count.
std::vector<uint8_t> make_tensor(const Spec& s, const TensorSpec& t, unsigned threads) {
    const gguf::TypeTraits& tr = gguf::type_traits(t.type);
    if (!tr.quantize_row) throw std::runtime_error(t.name + ": no quantizer for " + tr.name);
    const uint64_t ne0 = t.ne[0];
    uint64_t rows = 1;
    for (size_t d = 1; d < t.ne.size(); ++d) rows *= t.ne[d];
    const auto rb = gguf::row_bytes(tr, ne0);
    if (!rb) throw std::runtime_error(t.name + ": row of " + std::to_string(ne0) + " is not a whole number of " +
                                      tr.name + " blocks");
    std::vector<uint8_t> out(*rb * rows);
    const Init init = init_of(s, t);
    // attn_qkv: v's rows (the last kv_dim) drawn as attn_v's.
    Init v_init = init;
    v_init.std = 1.0f / std::sqrt(float(s.n_embd));
    const uint64_t v_first = t.kind == WeightKind::AttnQkv ? uint64_t(s.q_dim()) + s.kv_dim() : UINT64_MAX;
    const uint64_t key = stream_key(s.seed, t.name);
    const uint64_t sign_key = stream_key(s.seed ^ 0x5167u, t.name);

    auto work = [&](uint64_t r0, uint64_t r1) {
        std::vector<float> row(ne0);
        for (uint64_t r = r0; r < r1; ++r) {
            if (t.kind == WeightKind::RopeFreqs) {
                for (uint64_t j = 0; j < ne0; ++j)
                    row[j] = s.arch == Arch::Gemma4 ? rope_freq_factor_proportional(uint32_t(j), uint32_t(ne0))
                                                    : rope_freq_factor(uint32_t(j), uint32_t(ne0));
            } else if (t.kind == WeightKind::Scale) {
                row[0] = 1.0f - 0.05f * float(t.layer);   // gemma4's layer_output_scale: 1, 0.95, 0.9, ...
            } else if (t.kind == WeightKind::RopeFactorsLong || t.kind == WeightKind::RopeFactorsShort) {
                const bool lng = t.kind == WeightKind::RopeFactorsLong;
                for (uint64_t j = 0; j < ne0; ++j)
                    row[j] = lng ? rope_factor_long(uint32_t(j), uint32_t(ne0)) : rope_factor_short(uint32_t(j), uint32_t(ne0));
            } else {
                fill_row(r >= v_first ? v_init : init, key, sign_key, r * ne0, row.data(), ne0);
            }
            tr.quantize_row(row.data(), out.data() + r * *rb, int64_t(ne0));
        }
    };
    // Threads only pay off past ~1M elements.
    const uint64_t n_threads = std::min<uint64_t>({threads, rows, 1 + rows * ne0 / (1u << 20)});
    if (n_threads <= 1) {
        work(0, rows);
    } else {
        std::vector<std::thread> pool;
        for (uint64_t k = 0; k < n_threads; ++k)
            pool.emplace_back(work, rows * k / n_threads, rows * (k + 1) / n_threads);
        for (auto& th : pool) th.join();
    }
    return out;
}

// llama.cpp's llama_ftype for the mix (LLAMA_FTYPE_MOSTLY_*), which its
// loader and llama-bench show as the file's type.
uint32_t llama_ftype(TypeMix m) {
    switch (m) {
        case TypeMix::Q4_K_M: return 15;
        case TypeMix::Q5_K_M: return 17;
        case TypeMix::Q3_K_M: return 12;
        case TypeMix::Q2_K: return 10;
        case TypeMix::IQ4_XS: return 30;
        case TypeMix::F16: return 1;
        case TypeMix::BF16: return 32;
    }
    return 15;
}

void set_metadata(gguf::Writer& w, const Spec& s) {
    const std::string a = gguf_arch(s.arch);
    auto k = [&](const char* suffix) { return a + "." + suffix; };

    w.set_string("general.architecture", a);
    w.set_string("general.name", s.name());
    w.set_u32("general.file_type", llama_ftype(s.types));
    w.set_u32("general.quantization_version", 2);    // ggml's k-quant layout version
    w.set_string("ptxlm.synth.size", size_name(s.size));
    w.set("ptxlm.synth.seed", s.seed);

    w.set_u32(k("context_length"), s.n_ctx);
    w.set_u32(k("embedding_length"), s.n_embd);
    w.set_u32(k("block_count"), s.n_layer);
    w.set_u32(k("feed_forward_length"), s.n_ff);
    w.set_u32(k("attention.head_count"), s.n_head);
    w.set_u32(k("attention.head_count_kv"), s.n_head_kv);
    w.set_f32(k("attention.layer_norm_rms_epsilon"), s.rms_eps);
    w.set_f32(k("rope.freq_base"), s.rope_base);
    if (s.key_length()) {
        // head_dim is not n_embd / n_head here, as in the real gemma-3 and
        // Qwen3 models.
        w.set_u32(k("attention.key_length"), s.head_dim);
        w.set_u32(k("attention.value_length"), s.head_dim);
    }
    if (s.rope_scale_linear > 0) {
        w.set_string(k("rope.scaling.type"), "linear");
        w.set_f32(k("rope.scaling.factor"), s.rope_scale_linear);
    }
    if (s.rope_yarn_factor > 0) {   // the keys a Ministral 3 file carries
        w.set_string(k("rope.scaling.type"), "yarn");
        w.set_f32(k("rope.scaling.factor"), s.rope_yarn_factor);
        w.set_u32(k("rope.scaling.original_context_length"), s.rope_orig_ctx);
        w.set_f32(k("rope.scaling.yarn_beta_fast"), s.yarn_beta_fast);
        w.set_f32(k("rope.scaling.yarn_beta_slow"), s.yarn_beta_slow);
        w.set_f32(k("rope.scaling.yarn_log_multiplier"), s.yarn_log_mul);
    }
    if (s.attn_temp_scale != 0) w.set_f32(k("attention.temperature_scale"), s.attn_temp_scale);
    if (s.phi3()) {   // the keys the converter writes for a LongRoPE model
        w.set_u32(k("rope.dimension_count"), s.n_rot());
        w.set_u32(k("rope.scaling.original_context_length"), s.rope_orig_ctx);
        w.set_f32(k("rope.scaling.attn_factor"), s.rope_attn_factor);
        w.set_u32(k("attention.sliding_window"), 0);   // Phi-4's; llama.cpp ignores it for phi3
    }
    if (s.arch == Arch::Gemma4) {   // the keys the converter writes for a Gemma 4 text model
        w.set_u32(k("attention.key_length_swa"), s.head_dim_swa);
        w.set_u32(k("attention.value_length_swa"), s.head_dim_swa);
        w.set_u32(k("rope.dimension_count"), s.head_dim);   // the full layers' pass-through pairs: rope_freqs
        w.set_u32(k("rope.dimension_count_swa"), s.head_dim_swa);
        gguf::MetaArray pattern{gguf::ValueType::BOOL, {}, {}};
        for (uint32_t il = 0; il < s.n_layer; ++il) pattern.bytes.push_back(s.is_swa(il) ? 1 : 0);
        w.set(k("attention.sliding_window_pattern"), pattern);
        w.set_u32(k("attention.shared_kv_layers"), s.shared_kv_layers);
        w.set_u32(k("embedding_length_per_layer_input"), s.n_embd_per_layer);
        w.set_f32(k("final_logit_softcapping"), s.final_softcap);
    }
    if (s.gemma()) {
        w.set_u32(k("attention.sliding_window"), s.sliding_window);
        // llama.cpp reads the local base from here (default 10000, the value
        // the architecture fixes); written so the file states it.
        w.set_f32(k("rope.freq_base_swa"), s.rope_base_local);
    }

    const Vocab& v = vocab();
    w.set_string("tokenizer.ggml.model", "gpt2");
    // A name llama.cpp knows (an unknown one is a load error there).
    w.set_string("tokenizer.ggml.pre", s.tokenizer_pre());
    std::vector<std::string> tokens = v.tokens;
    std::vector<int32_t> types = v.token_type;
    for (uint32_t id = uint32_t(tokens.size()); id < s.n_vocab; ++id) {
        tokens.push_back("<|reserved_" + std::to_string(id) + "|>");
        types.push_back(3);   // control
    }
    w.set_strings("tokenizer.ggml.tokens", tokens);
    w.set_i32s("tokenizer.ggml.token_type", types);
    w.set_strings("tokenizer.ggml.merges", v.merges);
    w.set_u32("tokenizer.ggml.bos_token_id", v.bos_id);
    w.set_u32("tokenizer.ggml.eos_token_id", v.eos_id);
    w.set_u32("tokenizer.ggml.eot_token_id", v.im_end_id);
    w.set_bool("tokenizer.ggml.add_bos_token", true);
    w.set_bool("tokenizer.ggml.add_eos_token", false);
    w.set_string("tokenizer.chat_template", chat_template());
}

}  // namespace

// ---- generation ------------------------------------------------------------------

gguf::Writer build_model(const Spec& spec, const Options& opt) {
    validate(spec);
    unsigned threads = opt.threads ? opt.threads : std::max(1u, std::thread::hardware_concurrency());
    gguf::Writer w;
    set_metadata(w, spec);
    const std::vector<TensorSpec> plan = tensor_plan(spec);
    for (size_t i = 0; i < plan.size(); ++i) {
        const TensorSpec& t = plan[i];
        if (opt.progress) opt.progress(i, plan.size(), t);
        w.add_tensor(t.name, t.type, t.ne, make_tensor(spec, t, threads));
    }
    return w;
}

void write_model(const Spec& spec, const std::string& path, const Options& opt) {
    build_model(spec, opt).write(path);
}

std::vector<uint8_t> model_bytes(const Spec& spec, const Options& opt) {
    return build_model(spec, opt).serialize();
}

}  // namespace ptxlm::synth
