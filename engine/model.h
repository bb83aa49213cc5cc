// The model description: hyperparameters plus a typed view of every weight
// tensor, built from GGUF metadata and the tensor table alone. Weights stay
// in the file's mapping in their quantized form; backends read them from
// here (the CPU directly, the GPU by uploading them).
#pragma once

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/hparams.h"
#include "gguf/gguf.h"
#include "gguf/quant.h"

namespace ptxlm {

// A 1-D or 2-D weight: `rows` rows of `cols` elements, row-major in `type`'s
// block layout. An absent optional weight has data == nullptr.
struct Weight {
    const gguf::TensorInfo* info = nullptr;
    gguf::GgmlType type = gguf::GgmlType::F32;
    uint64_t cols = 0;       // ne[0]
    uint64_t rows = 0;       // ne[1] (1 for vectors)
    uint64_t row_bytes = 0;
    const uint8_t* data = nullptr;

    explicit operator bool() const { return data != nullptr; }
    const uint8_t* row(uint64_t r) const { return data + r * row_bytes; }
    const std::string& name() const;
};

enum class FfnKind { SwiGLU, GeGLU };   // silu(gate)·up (llama, qwen2, qwen3), tanh-gelu(gate)·up (gemma3)

// Phi-3/Phi-4 (phi3) files fuse some matrices: attn_qkv holds q's rows, then
// k's, then v's, and ffn_up 2·n_ff rows, the gate's then up's. wq, wk, wv
// and gate, up are then views of consecutive rows of that one tensor (data
// points at the first row; name() is the fused tensor's), so the backends
// multiply them as separate matrices.
//
// Gemma 4 (gemma4) adds per layer: the sliding layers' own head size and
// rotary dims (Model::head_dim_of, n_rot_of), RoPE factors on the full layers
// only, K/V shared with an earlier layer (kv_layer), v RMS-normed without a
// weight (and, without attn_v, taken from k's projection), per-layer
// embeddings (ple_*) and an output scale.
struct LayerDesc {
    uint32_t n_head = 0, n_head_kv = 0, n_ff = 0;
    bool sliding = false;          // attends to the last `window` positions only
    float rope_base = 10000.0f;
    bool rope_factors = true;      // takes the model's rope_factors (gemma4: its full layers only)
    // The layer whose K/V cache attention reads: this layer's own index, or
    // (gemma4's last shared_kv_layers layers) an earlier layer's, in which
    // case this layer computes q only and stores nothing.
    uint32_t kv_layer = 0;
    bool v_norm = false;           // gemma4: v RMS-normed per head without a weight

    Weight attn_norm;
    Weight wq, wk, wv, wo;
    Weight bq, bk, bv;             // qwen2's QKV biases (F32), else absent
    Weight q_norm, k_norm;         // gemma3's and qwen3's per-head RMSNorm weights, else absent
    Weight attn_post_norm;         // gemma3
    Weight ffn_norm;
    Weight gate, up, down;
    Weight ffn_post_norm;          // gemma3
    // Gemma 4's per-layer embeddings, after the FFN's residual:
    // x += rmsnorm(ple_proj · (gelu(ple_gate · x) ⊙ this layer's input slice), ple_post_norm).
    Weight ple_gate;               // blk.N.inp_gate (n_embd_per_layer, n_embd)
    Weight ple_proj;               // blk.N.proj (n_embd, n_embd_per_layer)
    Weight ple_post_norm;          // blk.N.post_norm (n_embd)
    Weight out_scale;              // blk.N.layer_output_scale (1): the residual stream times it at the layer's end
};

struct Model {
    explicit Model(gguf::File f) : file(std::move(f)) {}

    gguf::File file;
    HParams hp;

    uint32_t n_vocab = 0;          // rows of token_embd
    uint32_t head_dim = 0;         // key/value head size (key_length == value_length here); gemma4: the full layers'
    uint32_t head_dim_swa = 0;     // gemma4: the sliding layers' head size (key_length_swa); 0 = head_dim
    uint32_t n_rot_swa = 0;        // gemma4: the sliding layers' rotary dims (rope.dimension_count_swa); 0 = n_rot
    // Dims RoPE rotates at the start of each head (rope.dimension_count, even,
    // ≤ head_dim; Phi-4-mini: 96 of 128); the rest of the head passes through
    // unrotated, as ggml_rope_ext with n_dims < ne0. NEOX pairs (i, i + n_rot/2).
    uint32_t n_rot = 0;
    float attn_scale = 0;          // applied to q·k
    float embd_scale = 1.0f;       // gemma3: √n_embd on the input embedding
    float final_softcap = 0;       // 0 = none; else logits = cap·tanh(logits/cap)
    float rope_freq_scale = 1.0f;  // linear RoPE scaling: position × this
    // YaRN (Mistral 3), as llama.cpp's ggml_rope_ext computes it: pair i's rate
    // is mixed between the interpolated one (× freq_scale) and the original by
    // a ramp over the pairs between the correction dims of beta_fast and
    // beta_slow (folded into rope_rates), and cos, sin carry rope_mscale.
    struct Yarn {
        float freq_scale = 1.0f;   // 1 / rope.scaling.factor
        float ext_factor = 1.0f;   // llama.cpp's default for type yarn
        float beta_fast = 32.0f, beta_slow = 1.0f;
        uint32_t n_ctx_orig = 0;   // rope.scaling.original_context_length
    };
    std::optional<Yarn> yarn;
    float rope_mscale = 1.0f;      // RoPE's cos and sin times this (YaRN's magnitude × rope.scaling.attn_factor)
    // Mistral 3's attention temperature: q at position p times
    // 1 + attn_temp_scale · ln(⌊p / attn_temp_floor⌋ + 1) after RoPE; 0 = off.
    float attn_temp_scale = 0;
    uint32_t attn_temp_floor = 0;  // YaRN's original context (llama.cpp's n_attn_temp_floor_scale)
    FfnKind ffn = FfnKind::SwiGLU;
    // Gemma 4's per-layer embeddings (n_embd_per_layer > 0): each token's
    // input to layer il is the slice il of
    //   (per_layer_tok_embd[token] · √n_embd_per_layer
    //    + rmsnorm_slices(per_layer_model_proj · x₀ / √n_embd, per_layer_proj_norm)) / √2
    // with x₀ the scaled input embedding; LayerDesc::ple_* consume it.
    uint32_t n_embd_per_layer = 0;
    Weight per_layer_tok_embd;     // (n_vocab, n_embd_per_layer · n_layer): looked up, never multiplied
    Weight per_layer_model_proj;   // (n_embd_per_layer · n_layer, n_embd)
    Weight per_layer_proj_norm;    // n_embd_per_layer

    Weight tok_embd;
    Weight output_norm;
    Weight output;                 // = tok_embd when the embeddings are tied
    Weight rope_freqs;             // optional per-pair divisors of the RoPE frequencies (Llama 3.x)
    // Phi-3/Phi-4's LongRoPE: per-pair divisors like rope_freqs (n_rot/2
    // each, one pair shared by every layer), the long set when the context
    // per sequence exceeds hp.rope_orig_ctx, else the short (llama.cpp's
    // get_rope_factors). The magnitude comes as rope.scaling.attn_factor.
    Weight rope_factors_long, rope_factors_short;
    std::vector<LayerDesc> layers;

    // Opens and validates `path`: the architecture must be supported, every
    // required tensor present with the expected shape, and every weight of a
    // type the backends can multiply. Throws ModelError (or gguf::Error) with
    // one message naming what is wrong.
    static Model load(const std::string& path);
    static Model from_file(gguf::File file);

    uint64_t weight_bytes() const;        // all tensors the forward pass reads
    // Calls fn(const Weight&) once for each weight the forward pass reads
    // (the tied output matrix once, as the token embedding).
    template <class Fn> void for_each_weight(Fn&& fn) const;
    bool tied_embeddings() const { return output.data == tok_embd.data; }
    float attn_temperature(uint32_t pos) const;   // the factor on q at `pos` (1 when off)
    uint32_t head_dim_of(uint32_t il) const { return layers[il].sliding && head_dim_swa ? head_dim_swa : head_dim; }
    uint32_t n_rot_of(uint32_t il) const { return layers[il].sliding && n_rot_swa ? n_rot_swa : n_rot; }
    uint32_t kv_dim(uint32_t il) const { return layers[il].n_head_kv * head_dim_of(il); }
    bool has_kv(uint32_t il) const { return layers[il].kv_layer == il; }   // keeps a K/V cache of its own
    // The per-pair divisors RoPE uses with a context of n_ctx positions per
    // sequence: rope_freqs, else LongRoPE's long or short set, else none.
    const Weight& rope_factors(uint32_t n_ctx) const;
};

template <class Fn> void Model::for_each_weight(Fn&& fn) const {
    auto visit = [&](const Weight& w) { if (w) fn(w); };
    visit(tok_embd);
    visit(output_norm);
    if (!tied_embeddings()) visit(output);
    visit(rope_freqs);
    visit(rope_factors_long);
    visit(rope_factors_short);
    visit(per_layer_tok_embd);
    visit(per_layer_model_proj);
    visit(per_layer_proj_norm);
    for (const LayerDesc& l : layers)
        for (const Weight* w : {&l.attn_norm, &l.wq, &l.wk, &l.wv, &l.wo, &l.bq, &l.bk, &l.bv, &l.q_norm, &l.k_norm,
                                &l.attn_post_norm, &l.ffn_norm, &l.gate, &l.up, &l.down, &l.ffn_post_norm,
                                &l.ple_gate, &l.ple_proj, &l.ple_post_norm, &l.out_scale})
            visit(*w);
}

// Every element of `w` as f32 (empty when w is absent), through gguf's
// reference dequantizers.
std::vector<float> to_floats(const Weight& w);

// RoPE's per-pair rates (n_rot/2 of them) for a layer with base `base` in a
// context of n_ctx positions per sequence: base^(−2i/n_rot), divided by the model's
// rope_factors(n_ctx) when it has them, and with YaRN mixed per pair
// (Model::Yarn). The angle of pair i at position p is (p · rope_freq_scale) ·
// rate[i], in double; its cos and sin are rounded to f32 and then multiplied
// by rope_mscale (rope_cos_sin).
std::vector<double> rope_rates(const Model& m, float base, uint32_t n_ctx);
// The same for layer il: its rotary dims (Model::n_rot_of) and the model's
// factors only where the layer takes them (LayerDesc::rope_factors), at `base`.
std::vector<double> rope_rates(const Model& m, uint32_t il, float base, uint32_t n_ctx);
struct RopeCosSin {
    float c, s;
};
inline RopeCosSin rope_cos_sin(double theta, float mscale) {
    return {static_cast<float>(std::cos(theta)) * mscale, static_cast<float>(std::sin(theta)) * mscale};
}
// YaRN's magnitude on cos and sin for a scaling factor, llama.cpp's formula
// (llama_context's yarn_attn_factor times ggml's own 1 + 0.1·ln(factor)):
// (1 + 0.1·ln f) / (1 + 0.1·log_mul·ln f) with a yarn_log_multiplier, else
// 1 + 0.1·ln f.
float yarn_mscale(float factor, float log_mul);
// Mistral 3's attention temperature, the factor on q at `pos`:
// 1 + scale·ln(⌊pos / floor⌋ + 1), the division in integers as llama.cpp's
// graph does it (floor > 0; scale 0 gives 1).
double attn_temperature(uint32_t pos, float scale, uint32_t floor);

// Bytes one forward pass reads from memory: what bounds single-stream decode.
// A pass over a batch of tokens reads every weight once (the token embedding
// only one row per token; the LM head once when the pass produces logits),
// and each token's attention reads its visible part of the KV cache.
struct PassTraffic {
    uint64_t weights = 0;      // all weights but the token embedding table and the LM head
    uint64_t lm_head = 0;      // output matrix (+ final norm)
    uint64_t embd_row = 0;     // one row of the token embedding
    // Multiply-adds a token's matrix products take (rows x columns of each
    // matrix; the embedding is a lookup, norms are not counted).
    uint64_t weight_macs = 0;
    uint64_t lm_head_macs = 0;
};
PassTraffic pass_traffic(const Model& m);
// KV-cache bytes attention reads for the token at `pos` (K and V of every
// visible position, every layer; sliding layers see their window).
uint64_t kv_read_bytes(const Model& m, uint32_t pos, uint32_t kv_bytes_per_el);

// Memory a session needs beyond the mapped weights, for a context of n_ctx.
struct MemoryPlan {
    uint64_t weights = 0;     // mapped from the file (page cache)
    uint64_t kv_cache = 0;
    uint64_t activations = 0; // scratch and logits
    uint64_t total() const { return weights + kv_cache + activations; }
};
MemoryPlan plan_memory(const Model& m, uint32_t n_ctx, uint32_t kv_bytes_per_el);

// Bytes of memory the system can give us now (MemAvailable, capped by a
// cgroup limit when one is set); nullopt when unknown.
std::optional<uint64_t> available_memory();

// "1.2 GiB", "640 KiB".
std::string format_bytes(uint64_t n);

}  // namespace ptxlm
