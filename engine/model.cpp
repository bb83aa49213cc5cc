#include "engine/model.h"

#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <sstream>

namespace ptxlm {

const std::string& Weight::name() const {
    static const std::string none = "(absent)";
    return info ? info->name : none;
}

namespace {

std::string dims(uint64_t cols, uint64_t rows) {
    return rows == 1 ? std::to_string(cols) : std::to_string(cols) + " x " + std::to_string(rows);
}

class Loader {
public:
    explicit Loader(const gguf::File& f) : f_(f) {}

    // rows == 0 accepts any row count (checked by the caller).
    Weight get(const std::string& name, uint64_t cols, uint64_t rows, bool required) {
        const gguf::TensorInfo* t = f_.find_tensor(name);
        if (!t) {
            if (required) throw ModelError(f_.path() + ": required tensor '" + name + "' is missing");
            return {};
        }
        const uint64_t t_rows = t->ne[1] * t->ne[2] * t->ne[3];
        if (t->ne[0] != cols || (rows && t_rows != rows) || t->ne[2] != 1 || t->ne[3] != 1)
            throw ModelError(f_.path() + ": tensor '" + name + "' has shape " + dims(t->ne[0], t_rows) +
                             ", expected " + (rows ? dims(cols, rows) : std::to_string(cols) + " x N"));
        const gguf::TypeTraits* tt = gguf::find_type(t->type);
        if (!tt || !tt->dequantize_row)
            throw ModelError(f_.path() + ": tensor '" + name + "' has type " + gguf::type_name(t->type) +
                             ", which ptxlm cannot compute with yet (supported: F32, F16, BF16, Q4_0, Q4_1, "
                             "Q5_0, Q5_1, Q8_0, Q2_K, Q3_K, Q4_K, Q5_K, Q6_K)");
        Weight w;
        w.info = t;
        w.type = t->ggml_type();
        w.cols = t->ne[0];
        w.rows = t_rows;
        w.row_bytes = *gguf::row_bytes(*tt, w.cols);
        w.data = t->data;
        return w;
    }
    Weight vec(const std::string& name, uint64_t n, bool required = true) { return get(name, n, 1, required); }

private:
    const gguf::File& f_;
};

std::string blk(uint32_t il, const char* what) { return "blk." + std::to_string(il) + "." + what; }

// Gemma 4's model-level numbers, from the keys read_hparams read (llama.cpp's
// llama_model_gemma4::load_arch_hparams and the generic loader): what differs
// from gemma3 and the refusals.
void read_gemma4(Model& m) {
    const HParams& hp = m.hp;
    const std::string& path = m.file.path();
    if (hp.n_expert > 0 || std::any_of(m.file.tensors().begin(), m.file.tensors().end(), [](const gguf::TensorInfo& t) {
            return t.name.find(".ffn_gate_inp.") != std::string::npos;
        }))
        throw ModelError(path + ": gemma4 with experts (the 26B-A4B mixture of experts) is not supported");
    if (hp.head_dim_k_swa != hp.head_dim_v_swa || hp.head_dim_k_swa == 0 || hp.head_dim_k_swa % 2)
        throw ModelError(path + ": gemma4.attention.key_length_swa (" + std::to_string(hp.head_dim_k_swa) +
                         ") and value_length_swa (" + std::to_string(hp.head_dim_v_swa) +
                         ") must be equal, even and positive");
    if (hp.n_rot_swa == 0 || hp.n_rot_swa % 2 || hp.n_rot_swa > hp.head_dim_k_swa)
        throw ModelError(path + ": rope.dimension_count_swa " + std::to_string(hp.n_rot_swa) + " of head size " +
                         std::to_string(hp.head_dim_k_swa) + ": RoPE rotates pairs of a head");
    // llama.cpp scales the full layers' positions only (the sliding ones keep
    // rope_freq_scale_train_swa = 1); no Gemma 4 file has a scaling.
    if (!hp.rope_scaling.empty() && hp.rope_scaling != "none")
        throw ModelError(path + ": RoPE scaling '" + hp.rope_scaling + "' is not supported for gemma4");
    if (hp.rope_scaling_factor != 0)
        throw ModelError(path + ": RoPE scaling (rope.scaling.factor) is not supported for gemma4");
    const bool any_swa = std::any_of(hp.swa_layers.begin(), hp.swa_layers.end(), [](bool swa) { return swa; });
    if (any_swa && hp.sliding_window == 0)
        throw ModelError(path + ": gemma4 has sliding layers but attention.sliding_window is 0");
    if (hp.shared_kv_layers && (hp.shared_kv_layers > hp.n_layer || hp.n_layer - hp.shared_kv_layers < 2))
        throw ModelError(path + ": attention.shared_kv_layers " + std::to_string(hp.shared_kv_layers) + " of " +
                         std::to_string(hp.n_layer) + " layers leaves fewer than 2 layers with their own K/V");
    m.head_dim_swa = hp.head_dim_k_swa;
    m.n_rot_swa = hp.n_rot_swa;
    m.attn_scale = 1.0f;   // q and k are RMS-normed; llama.cpp's f_attention_scale 1
    m.n_embd_per_layer = hp.n_embd_per_layer;
}

// One Gemma 4 layer (llama_model_gemma4::load_arch_tensors): q always; k, v
// and k's norm only on layers with their own K/V (v optional: k's projection
// serves as v); the post norms; per-layer embedding weights; an optional
// output scale. The last shared_kv_layers layers read the K/V of layer
// n_kv - 2 (sliding) or n_kv - 1 (full), n_kv the count of layers with their
// own (llama.cpp's layer_reuse_cb), which must be of the same kind and shape.
void load_gemma4_layer(Model& m, Loader& L, uint32_t il) {
    const HParams& hp = m.hp;
    const std::string& path = m.file.path();
    LayerDesc& l = m.layers[il];
    const uint64_t E = hp.n_embd, hd = m.head_dim_of(il);
    const uint64_t q_dim = uint64_t(l.n_head) * hd, kv_dim = uint64_t(l.n_head_kv) * hd;
    const uint32_t n_kv = hp.n_layer - hp.shared_kv_layers;
    if (il >= n_kv) {
        const uint32_t src = n_kv - (l.sliding ? 2 : 1);
        const LayerDesc& s = m.layers[src];
        if (s.sliding != l.sliding || s.n_head_kv != l.n_head_kv || m.head_dim_of(src) != hd)
            throw ModelError(path + ": shared-KV layer " + std::to_string(il) + " (" + (l.sliding ? "sliding" : "full") +
                             ") would read layer " + std::to_string(src) + "'s K/V, which is " +
                             (s.sliding ? "sliding" : "full") + " with " + std::to_string(s.n_head_kv) + " KV heads of " +
                             std::to_string(m.head_dim_of(src)) + " (not supported)");
        l.kv_layer = src;
    }
    const bool own = l.kv_layer == il;
    if (m.file.find_tensor(blk(il, "attn_qkv.weight")))
        throw ModelError(path + ": tensor '" + blk(il, "attn_qkv.weight") + "' (fused QKV) is not supported for gemma4");
    l.rope_factors = !l.sliding;   // proportional RoPE on the full layers only
    l.v_norm = true;
    l.wq = L.get(blk(il, "attn_q.weight"), E, q_dim, true);
    if (own) {
        l.wk = L.get(blk(il, "attn_k.weight"), E, kv_dim, true);
        l.wv = L.get(blk(il, "attn_v.weight"), E, kv_dim, false);   // absent: v is k's projection
        l.k_norm = L.vec(blk(il, "attn_k_norm.weight"), hd);
    }
    l.wo = L.get(blk(il, "attn_output.weight"), q_dim, E, true);
    l.q_norm = L.vec(blk(il, "attn_q_norm.weight"), hd);
    l.attn_post_norm = L.vec(blk(il, "post_attention_norm.weight"), E);
    l.out_scale = L.vec(blk(il, "layer_output_scale.weight"), 1, false);
    l.ffn_norm = L.vec(blk(il, "ffn_norm.weight"), E);
    l.gate = L.get(blk(il, "ffn_gate.weight"), E, l.n_ff, true);
    l.up = L.get(blk(il, "ffn_up.weight"), E, l.n_ff, true);
    l.down = L.get(blk(il, "ffn_down.weight"), l.n_ff, E, true);
    l.ffn_post_norm = L.vec(blk(il, "post_ffw_norm.weight"), E);
    if (const uint64_t P = hp.n_embd_per_layer) {
        l.ple_gate = L.get(blk(il, "inp_gate.weight"), E, P, true);
        l.ple_proj = L.get(blk(il, "proj.weight"), P, E, true);
        l.ple_post_norm = L.vec(blk(il, "post_norm.weight"), E);
    }
    for (const char* t : {"attn_q.bias", "attn_k.bias", "attn_v.bias", "attn_output.bias", "ffn_gate.bias", "ffn_up.bias",
                          "ffn_down.bias"})
        if (m.file.find_tensor(blk(il, t)))
            throw ModelError(path + ": tensor '" + blk(il, t) + "' (a bias) is not supported for gemma4");
}

// Rows [first, first + n) of a 2-D weight, as a weight of its own.
Weight rows_of(const Weight& w, uint64_t first, uint64_t n) {
    Weight v = w;
    v.rows = n;
    v.data = w.row(first);
    return v;
}

}  // namespace

Model Model::load(const std::string& path) { return from_file(gguf::File::open(path)); }

Model Model::from_file(gguf::File file) {
    Model m(std::move(file));
    m.hp = read_hparams(m.file);
    const HParams& hp = m.hp;
    const std::string& path = m.file.path();
    if (!hp.supported) {
        std::string list;
        for (const auto& a : supported_architectures()) list += (list.empty() ? "" : ", ") + a;
        throw ModelError(path + ": architecture '" + hp.arch + "' is not supported (supported: " + list + ")");
    }
    if (hp.head_dim_k != hp.head_dim_v || hp.head_dim_k == 0)
        throw ModelError(path + ": attention.key_length (" + std::to_string(hp.head_dim_k) +
                         ") and value_length (" + std::to_string(hp.head_dim_v) + ") must be equal and positive");
    if (hp.head_dim_k % 2) throw ModelError(path + ": head size " + std::to_string(hp.head_dim_k) + " must be even");
    const std::string rot_of = "rope.dimension_count " + std::to_string(hp.n_rot) + " of head size " +
                               std::to_string(hp.head_dim_k);
    if (hp.n_rot == 0 || hp.n_rot % 2 || hp.n_rot > hp.head_dim_k)
        throw ModelError(path + ": " + rot_of + ": RoPE rotates pairs of a head (an even count, at most the head size)");
    // Partial rotary: llama.cpp's phi3 graph passes n_rot to ggml_rope_ext,
    // which rotates the first n_rot dims and copies the rest; its llama,
    // qwen2, qwen3 and mistral3 graphs assert n_rot == head size, and gemma3's
    // takes layer 0's (rope.dimension_count_swa on a sliding layer 0): refused.
    // gemma4 passes each layer's n_rot too (rope.dimension_count on the full
    // layers, rope.dimension_count_swa on the sliding ones).
    if (hp.n_rot != hp.head_dim_k && hp.arch != "phi3" && hp.arch != "gemma4")
        throw ModelError(path + ": partial RoPE (" + rot_of + ") is not supported for architecture '" + hp.arch +
                         "' (only phi3 and gemma4)");
    m.head_dim = hp.head_dim_k;
    m.n_rot = hp.n_rot;
    m.attn_scale = 1.0f / std::sqrt(static_cast<float>(m.head_dim));

    const std::string a = hp.arch;
    const bool gemma4 = a == "gemma4";
    if (gemma4) read_gemma4(m);
    // rope.scaling.type linear with rope.scaling.factor, or (older files) no
    // type and rope.scale_linear: positions divided by the factor.
    if (hp.rope_scaling == "linear" || (hp.rope_scaling.empty() && m.file.find(a + ".rope.scale_linear"))) {
        if (!(hp.rope_scaling_factor > 0))
            throw ModelError(path + ": linear RoPE scaling needs a positive rope.scaling.factor (or rope.scale_linear)");
        m.rope_freq_scale = 1.0f / hp.rope_scaling_factor;
    } else if (hp.rope_scaling == "yarn" && a == "mistral3") {
        if (!(hp.rope_scaling_factor > 0))
            throw ModelError(path + ": YaRN RoPE scaling needs a positive rope.scaling.factor");
        if (hp.rope_orig_ctx == 0)
            throw ModelError(path + ": YaRN RoPE scaling needs rope.scaling.original_context_length (or context_length)");
        Model::Yarn y;
        y.freq_scale = 1.0f / hp.rope_scaling_factor;
        y.beta_fast = hp.yarn_beta_fast;
        y.beta_slow = hp.yarn_beta_slow;
        y.n_ctx_orig = hp.rope_orig_ctx;
        m.yarn = y;
        m.rope_mscale = yarn_mscale(1.0f / y.freq_scale, hp.yarn_log_mul);
    } else if (!hp.rope_scaling.empty() && hp.rope_scaling != "none") {
        throw ModelError(path + ": RoPE scaling '" + hp.rope_scaling + "' is not supported for architecture '" + a +
                         "' (supported: none, linear; yarn for mistral3)");
    }
    m.rope_mscale *= hp.rope_attn_factor;   // llama.cpp applies rope.scaling.attn_factor on every architecture
    if (!(m.rope_mscale > 0) || !std::isfinite(m.rope_mscale))
        throw ModelError(path + ": rope.scaling.attn_factor and YaRN give a RoPE magnitude that is not positive");
    if (a == "mistral3") {
        // llama.cpp's mistral3 graph: the temperature's floor is YaRN's original context.
        if (hp.attn_temp_scale != 0) {
            if (hp.rope_orig_ctx == 0)
                throw ModelError(path + ": attention.temperature_scale needs rope.scaling.original_context_length");
            m.attn_temp_scale = hp.attn_temp_scale;
            m.attn_temp_floor = hp.rope_orig_ctx;
        }
        if (m.file.get_u32(a + ".expert_count").value_or(0) > 0)
            throw ModelError(path + ": mistral3 with experts (mistral3.expert_count > 0) is not supported");
    }
    if (auto cap = m.file.get_float(a + ".final_logit_softcapping")) m.final_softcap = static_cast<float>(*cap);
    if (!(m.final_softcap >= 0) || !std::isfinite(m.final_softcap))
        throw ModelError(path + ": final_logit_softcapping must be a non-negative number");
    if (m.file.get_float(a + ".attn_logit_softcapping").value_or(0.0) != 0.0)
        throw ModelError(path + ": attention logit soft-capping (Gemma 2) is not supported");

    const bool gemma = a == "gemma3" || gemma4;   // post norms, √n_embd input scale, GeGLU
    const bool qk_norm = gemma || a == "qwen3";   // per-head RMSNorm of q and k before RoPE
    if (gemma) {
        m.embd_scale = std::sqrt(static_cast<float>(hp.n_embd));
        m.ffn = FfnKind::GeGLU;
    }
    const float base_local =
        static_cast<float>(m.file.get_float(a + ".rope.freq_base_swa").value_or(hp.rope_base_local.value_or(hp.rope_base)));

    Loader L(m.file);
    const uint64_t E = hp.n_embd;
    m.tok_embd = L.get("token_embd.weight", E, 0, true);
    if (m.tok_embd.rows > UINT32_MAX || m.tok_embd.rows == 0)
        throw ModelError(path + ": token_embd.weight has an unusable vocabulary size " + std::to_string(m.tok_embd.rows));
    m.n_vocab = static_cast<uint32_t>(m.tok_embd.rows);
    if (hp.n_vocab > m.n_vocab)
        throw ModelError(path + ": the tokenizer has " + std::to_string(hp.n_vocab) + " tokens but token_embd.weight only " +
                         std::to_string(m.n_vocab) + " rows");
    m.output_norm = L.vec("output_norm.weight", E);
    m.output = L.get("output.weight", E, m.n_vocab, false);
    if (!m.output) m.output = m.tok_embd;
    // Llama 3.x's per-pair divisors (llama.cpp's mistral3 graph reads them
    // too); its other graphs here do not, so a file that has them is refused
    // rather than run differently.
    // gemma4: the full layers' proportional RoPE (head_dim/2 divisors, huge
    // past the rotated fraction), required when a layer is full.
    const bool any_full = std::any_of(hp.swa_layers.begin(), hp.swa_layers.end(), [](bool swa) { return !swa; });
    m.rope_freqs = L.vec("rope_freqs.weight", gemma4 ? m.head_dim / 2 : m.n_rot / 2, gemma4 && any_full);
    if (m.rope_freqs && a != "llama" && a != "mistral3" && !gemma4)
        throw ModelError(path + ": tensor 'rope_freqs.weight' is not used by architecture '" + a +
                         "' (only llama, mistral3 and gemma4)");
    const bool phi3 = a == "phi3";
    // LongRoPE (Phi-3/Phi-4): llama.cpp loads either set alone too (the
    // other then means no factors).
    m.rope_factors_long = L.vec("rope_factors_long.weight", m.n_rot / 2, false);   // llama.cpp: {n_rot/2}
    m.rope_factors_short = L.vec("rope_factors_short.weight", m.n_rot / 2, false);
    for (const Weight* w : {&m.rope_factors_long, &m.rope_factors_short})
        if (*w && !phi3)
            throw ModelError(path + ": tensor '" + w->name() + "' is not used by architecture '" + a + "' (only phi3)");
    if (phi3) {
        // Phi-3.5-MoE is its own architecture (phimoe); llama.cpp's phi3
        // graph has a MoE branch it never loads.
        if (m.file.get_u32(a + ".expert_count").value_or(0) > 0)
            throw ModelError(path + ": phi3 with experts (phi3.expert_count > 0) is not supported");
    }

    if (gemma4 && hp.n_embd_per_layer) {
        const uint64_t PL = uint64_t(hp.n_embd_per_layer) * hp.n_layer;
        m.per_layer_tok_embd = L.get("per_layer_token_embd.weight", PL, m.n_vocab, true);
        m.per_layer_model_proj = L.get("per_layer_model_proj.weight", E, PL, true);
        m.per_layer_proj_norm = L.vec("per_layer_proj_norm.weight", hp.n_embd_per_layer);
    }

    m.layers.resize(hp.n_layer);
    for (uint32_t il = 0; il < hp.n_layer; ++il) {
        LayerDesc& l = m.layers[il];
        l.n_head = hp.n_head[il];
        l.n_head_kv = hp.n_head_kv[il];
        l.n_ff = hp.n_ff[il];
        if (l.n_head_kv == 0 || l.n_ff == 0)
            throw ModelError(path + ": layer " + std::to_string(il) + " has no KV heads or no feed-forward (not supported)");
        l.sliding = hp.is_sliding_layer(il);
        l.rope_base = l.sliding && hp.rope_base_local ? base_local : hp.rope_base;
        l.kv_layer = il;
        const uint64_t hd = m.head_dim_of(il);
        const uint64_t q_dim = uint64_t(l.n_head) * hd, kv_dim = uint64_t(l.n_head_kv) * hd;
        l.attn_norm = L.vec(blk(il, "attn_norm.weight"), E);
        if (gemma4) {
            load_gemma4_layer(m, L, il);
            continue;
        }
        // phi3: q, k and v fused in one matrix, or separate as elsewhere.
        const Weight qkv = phi3 ? L.get(blk(il, "attn_qkv.weight"), E, q_dim + 2 * kv_dim, false) : Weight{};
        if (qkv) {
            l.wq = rows_of(qkv, 0, q_dim);
            l.wk = rows_of(qkv, q_dim, kv_dim);
            l.wv = rows_of(qkv, q_dim + kv_dim, kv_dim);
            for (const char* t : {"attn_qkv.bias", "attn_q.weight", "attn_k.weight", "attn_v.weight"})
                if (m.file.find_tensor(blk(il, t)))
                    throw ModelError(path + ": tensor '" + blk(il, t) + "' next to a fused attn_qkv is not supported");
        } else {
            l.wq = L.get(blk(il, "attn_q.weight"), E, q_dim, true);
            l.wk = L.get(blk(il, "attn_k.weight"), E, kv_dim, true);
            l.wv = L.get(blk(il, "attn_v.weight"), E, kv_dim, true);
        }
        l.wo = L.get(blk(il, "attn_output.weight"), q_dim, E, true);
        const bool biases = a == "qwen2";
        l.bq = L.vec(blk(il, "attn_q.bias"), q_dim, biases);
        l.bk = L.vec(blk(il, "attn_k.bias"), kv_dim, biases);
        l.bv = L.vec(blk(il, "attn_v.bias"), kv_dim, biases);
        l.q_norm = L.vec(blk(il, "attn_q_norm.weight"), m.head_dim, qk_norm);
        l.k_norm = L.vec(blk(il, "attn_k_norm.weight"), m.head_dim, qk_norm);
        l.attn_post_norm = L.vec(blk(il, "post_attention_norm.weight"), E, gemma);
        l.ffn_norm = L.vec(blk(il, "ffn_norm.weight"), E);
        if (phi3) {
            // ffn_up holds the gate's n_ff rows, then up's (llama.cpp's
            // ggml_swiglu: silu of the first half times the second); there
            // is no ffn_gate, and a file with one is not what the graph reads.
            if (m.file.find_tensor(blk(il, "ffn_gate.weight")))
                throw ModelError(path + ": tensor '" + blk(il, "ffn_gate.weight") +
                                 "' is not used by phi3 (its ffn_up holds the gate)");
            const Weight up = L.get(blk(il, "ffn_up.weight"), E, 2 * uint64_t(l.n_ff), true);
            l.gate = rows_of(up, 0, l.n_ff);
            l.up = rows_of(up, l.n_ff, l.n_ff);
        } else {
            l.gate = L.get(blk(il, "ffn_gate.weight"), E, l.n_ff, true);
            l.up = L.get(blk(il, "ffn_up.weight"), E, l.n_ff, true);
        }
        l.down = L.get(blk(il, "ffn_down.weight"), l.n_ff, E, true);
        l.ffn_post_norm = L.vec(blk(il, "post_ffw_norm.weight"), E, gemma);
        // llama.cpp's llama and mistral3 graphs take optional output and FFN
        // biases; Ministral 3 files have none, and ptxlm adds none: refused by
        // name on every architecture rather than left out.
        for (const char* bias : {"attn_output.bias", "ffn_gate.bias", "ffn_up.bias", "ffn_down.bias"})
            if (m.file.find_tensor(blk(il, bias)))
                throw ModelError(path + ": tensor '" + blk(il, bias) + "' (an optional bias of " + a +
                                 ") is not supported");
    }
    return m;
}

uint64_t Model::weight_bytes() const {
    uint64_t n = 0;
    for_each_weight([&](const Weight& w) { n += w.rows * w.row_bytes; });
    return n;
}

std::vector<float> to_floats(const Weight& w) {
    std::vector<float> v;
    if (!w) return v;
    v.resize(w.cols * w.rows);
    for (uint64_t r = 0; r < w.rows; ++r)
        gguf::type_traits(w.type).dequantize_row(w.row(r), v.data() + r * w.cols, static_cast<int64_t>(w.cols));
    return v;
}

const Weight& Model::rope_factors(uint32_t n_ctx) const {
    if (rope_freqs) return rope_freqs;
    // llama.cpp compares its context per sequence, which it rounds up to a
    // multiple of 256, with the original context.
    return n_ctx > hp.rope_orig_ctx ? rope_factors_long : rope_factors_short;
}

namespace {

std::vector<double> rope_rates(const Model& m, float base, uint32_t n_ctx, uint32_t n_rot, bool with_factors) {
    // ggml_rope_ext's n_dims: theta_scale = base^(-2/n_dims), YaRN's
    // correction dims of n_dims (ggml-cpu ops.cpp).
    const uint32_t hd = n_rot;
    const std::vector<float> factors = with_factors ? to_floats(m.rope_factors(n_ctx)) : std::vector<float>{};
    std::vector<double> f(hd / 2);
    for (uint32_t i = 0; i < hd / 2; ++i) {
        f[i] = std::pow(double(base), -2.0 * double(i) / double(hd));
        // The loader holds the factors to n_rot/2; fewer only in a test's
        // control that rotates more of the head than the file says.
        if (i < factors.size()) f[i] /= factors[i];
    }
    if (m.yarn) {
        // ggml's correction dims (in f32, as ggml_rope_yarn_corr_dims): the
        // pairs below `lo` keep their rate, those past `hi` are interpolated
        // (× freq_scale), a linear ramp between.
        const Model::Yarn& y = *m.yarn;
        auto corr = [&](float beta) {
            return float(hd) * std::log(float(y.n_ctx_orig) / (beta * 2.0f * float(M_PI))) / (2.0f * std::log(base));
        };
        const float lo = std::max(0.0f, std::floor(corr(y.beta_fast)));
        const float hi = std::min(float(hd - 1), std::ceil(corr(y.beta_slow)));
        for (uint32_t i = 0; i < hd / 2; ++i) {
            const float r = (float(i) - lo) / std::max(0.001f, hi - lo);
            const float mix = (1.0f - std::min(1.0f, std::max(0.0f, r))) * y.ext_factor;
            f[i] *= double(y.freq_scale) * (1.0 - double(mix)) + double(mix);
        }
    }
    return f;
}

}  // namespace

std::vector<double> rope_rates(const Model& m, float base, uint32_t n_ctx) {
    return rope_rates(m, base, n_ctx, m.n_rot, true);
}

std::vector<double> rope_rates(const Model& m, uint32_t il, float base, uint32_t n_ctx) {
    return rope_rates(m, base, n_ctx, m.n_rot_of(il), m.layers[il].rope_factors);
}

float yarn_mscale(float factor, float log_mul) {
    // llama.cpp divides its attn_factor by 1 + 0.1·ln f and ggml's RoPE
    // multiplies it back; the product is the ratio itself (within an f32 ulp).
    auto get = [](float scale, float ms) { return scale <= 1.0f ? 1.0f : 0.1f * ms * std::log(scale) + 1.0f; };
    return log_mul != 0.0f ? get(factor, 1.0f) / get(factor, log_mul) : get(factor, 1.0f);
}

double attn_temperature(uint32_t pos, float scale, uint32_t floor) {
    if (scale == 0) return 1.0;
    return std::log(double(pos / floor) + 1.0) * scale + 1.0;
}

float Model::attn_temperature(uint32_t pos) const {
    return float(ptxlm::attn_temperature(pos, attn_temp_scale, attn_temp_floor));
}

PassTraffic pass_traffic(const Model& m) {
    PassTraffic t;
    m.for_each_weight([&](const Weight& w) {
        // The embedding tables are looked up a row per token.
        const bool table = &w == &m.tok_embd || &w == &m.per_layer_tok_embd;
        if (!table && &w != &m.output_norm) t.weights += w.rows * w.row_bytes;
        if (!table && &w != &m.output && w.rows > 1) t.weight_macs += w.rows * w.cols;
    });
    t.lm_head = m.output.rows * m.output.row_bytes + m.output_norm.rows * m.output_norm.row_bytes;
    t.lm_head_macs = m.output.rows * m.output.cols;
    if (!m.tied_embeddings()) t.weights -= m.output.rows * m.output.row_bytes;
    t.embd_row = m.tok_embd.row_bytes + (m.per_layer_tok_embd ? m.per_layer_tok_embd.row_bytes : 0);
    return t;
}

uint64_t kv_read_bytes(const Model& m, uint32_t pos, uint32_t kv_bytes_per_el) {
    uint64_t n = 0;
    for (uint32_t il = 0; il < m.layers.size(); ++il) {
        uint64_t visible = uint64_t(pos) + 1;
        if (m.layers[il].sliding && m.hp.sliding_window) visible = std::min<uint64_t>(visible, m.hp.sliding_window);
        n += 2 * visible * m.kv_dim(il) * kv_bytes_per_el;
    }
    return n;
}

MemoryPlan plan_memory(const Model& m, uint32_t n_ctx, uint32_t kv_bytes_per_el) {
    MemoryPlan p;
    p.weights = m.weight_bytes();
    uint64_t max_ff = 0, max_q = 0;
    for (uint32_t il = 0; il < m.layers.size(); ++il) {
        if (m.has_kv(il)) p.kv_cache += 2ull * n_ctx * m.kv_dim(il) * kv_bytes_per_el;
        max_ff = std::max<uint64_t>(max_ff, m.layers[il].n_ff);
        max_q = std::max<uint64_t>(max_q, uint64_t(m.layers[il].n_head) * m.head_dim_of(il));
    }
    // Residual, normed input, q/k/v/attention output, two FFN vectors, the
    // attention scores of one head per thread (bounded by 64 threads here),
    // logits.
    const uint64_t E = m.hp.n_embd;
    p.activations = 4 * (4 * E + 3 * max_q + 2 * max_ff + 64ull * n_ctx + m.n_vocab +
                         2ull * m.n_embd_per_layer * (m.layers.size() + 1));
    return p;
}

std::optional<uint64_t> available_memory() {
    std::optional<uint64_t> avail;
    std::ifstream mi("/proc/meminfo");
    std::string key;
    uint64_t kb;
    std::string unit;
    while (mi >> key >> kb) {
        std::getline(mi, unit);
        if (key == "MemAvailable:") { avail = kb * 1024; break; }
    }
    // cgroup v2 limit, when one applies.
    std::ifstream max("/sys/fs/cgroup/memory.max"), cur("/sys/fs/cgroup/memory.current");
    std::string lim;
    uint64_t used = 0;
    if (max >> lim && lim != "max" && cur >> used) {
        uint64_t limit = std::stoull(lim);
        uint64_t left = limit > used ? limit - used : 0;
        avail = avail ? std::min(*avail, left) : left;
    }
    return avail;
}

std::string format_bytes(uint64_t n) {
    const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = static_cast<double>(n);
    int u = 0;
    while (v >= 1024 && u < 4) { v /= 1024; ++u; }
    char buf[32];
    if (u == 0) std::snprintf(buf, sizeof buf, "%llu B", static_cast<unsigned long long>(n));
    else std::snprintf(buf, sizeof buf, "%.1f %s", v, units[u]);
    return buf;
}

}  // namespace ptxlm
