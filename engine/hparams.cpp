#include "engine/hparams.h"

#include <algorithm>

namespace ptxlm {

const std::vector<std::string>& supported_architectures() {
    static const std::vector<std::string> archs = {"llama", "qwen2", "gemma3", "qwen3", "mistral3", "phi3", "gemma4"};
    return archs;
}

bool HParams::uniform(const std::vector<uint32_t>& v) const {
    return std::adjacent_find(v.begin(), v.end(), std::not_equal_to<>()) == v.end();
}

bool HParams::is_sliding_layer(uint32_t il) const {
    if (sliding_window == 0) return false;
    if (!swa_layers.empty()) return il < swa_layers.size() && swa_layers[il];
    if (sliding_period == 0) return true;
    return il % sliding_period != sliding_period - 1;
}

namespace {

struct Keys {
    const gguf::File& f;
    std::string prefix;

    std::string k(const char* suffix) const { return prefix + "." + suffix; }

    uint32_t required_u32(const char* suffix) const {
        std::string key = k(suffix);
        auto v = f.get_u32(key);
        if (!v) throw ModelError(f.path() + ": required key '" + key + "' is missing");
        return *v;
    }
};

// Gemma 4's keys, as llama.cpp's llama_model_gemma4::load_arch_hparams and
// the generic loader read them: the pattern, the window, the sliding layers'
// head size and the per-layer embedding width are required there; the rest
// optional with llama.cpp's defaults.
void read_gemma4(const gguf::File& f, const Keys& k, HParams& h) {
    const std::string pat = k.k("attention.sliding_window_pattern");
    const gguf::KeyValue* kv = f.find(pat);
    if (!kv) throw ModelError(f.path() + ": required key '" + pat + "' is missing");
    if (!kv->is_array() || kv->count != h.n_layer)
        throw ModelError(f.path() + ": '" + pat + "' must be an array of one bool per layer (" + std::to_string(h.n_layer) +
                         ")");
    if (kv->elem_type == gguf::ValueType::BOOL) {
        for (uint64_t il = 0; il < kv->count; ++il) h.swa_layers.push_back(kv->raw[il] != 0);
    } else {
        const std::vector<int64_t> v = *f.get_int_array(pat);   // gguf::Error if not integers
        for (int64_t x : v) h.swa_layers.push_back(x != 0);
    }
    h.sliding_window = k.required_u32("attention.sliding_window");
    h.head_dim_k_swa = k.required_u32("attention.key_length_swa");
    h.head_dim_v_swa = k.required_u32("attention.value_length_swa");
    h.n_rot_swa = f.get_u32(k.k("rope.dimension_count_swa")).value_or(h.n_rot);
    h.rope_base_local = static_cast<float>(f.get_float(k.k("rope.freq_base_swa")).value_or(10000.0));
    h.shared_kv_layers = f.get_u32(k.k("attention.shared_kv_layers")).value_or(0);
    h.n_embd_per_layer = k.required_u32("embedding_length_per_layer_input");
    h.n_expert = f.get_u32(k.k("expert_count")).value_or(0);
}

}  // namespace

HParams read_hparams(const gguf::File& f) {
    HParams h;
    auto arch = f.get_string("general.architecture");
    if (!arch) throw ModelError(f.path() + ": required key 'general.architecture' is missing");
    h.arch = std::string(*arch);
    const auto& sup = supported_architectures();
    h.supported = std::find(sup.begin(), sup.end(), h.arch) != sup.end();
    if (auto n = f.get_string("general.name")) h.name = std::string(*n);
    h.file_type = f.get_u32("general.file_type").value_or(0);

    Keys k{f, h.arch};
    h.n_layer = k.required_u32("block_count");
    h.n_embd = k.required_u32("embedding_length");
    h.n_ctx_train = k.required_u32("context_length");
    if (h.n_layer == 0 || h.n_embd == 0)
        throw ModelError(f.path() + ": " + h.arch + ".block_count and .embedding_length must be positive");

    auto per_layer = [&](const char* suffix, bool required) -> std::vector<uint32_t> {
        std::string key = k.k(suffix);
        auto v = f.get_per_layer_u32(key, h.n_layer);
        if (!v) {
            if (required) throw ModelError(f.path() + ": required key '" + key + "' is missing");
            return {};
        }
        return *v;
    };
    h.n_head = per_layer("attention.head_count", true);
    h.n_head_kv = per_layer("attention.head_count_kv", false);
    if (h.n_head_kv.empty()) h.n_head_kv = h.n_head;
    h.n_ff = per_layer("feed_forward_length", true);
    for (uint32_t il = 0; il < h.n_layer; ++il) {
        if (h.n_head[il] == 0 && h.supported)
            throw ModelError(f.path() + ": " + h.arch + ".attention.head_count is 0 for layer " + std::to_string(il));
        if (h.n_head_kv[il] > h.n_head[il] || (h.n_head_kv[il] && h.n_head[il] % h.n_head_kv[il]))
            throw ModelError(f.path() + ": " + h.arch + ".attention.head_count_kv (" + std::to_string(h.n_head_kv[il]) +
                             ") must divide head_count (" + std::to_string(h.n_head[il]) + ") at layer " + std::to_string(il));
    }

    const uint32_t nh = h.n_head[0];
    const uint32_t default_hd = nh ? h.n_embd / nh : 0;
    h.head_dim_k = f.get_u32(k.k("attention.key_length")).value_or(default_hd);
    h.head_dim_v = f.get_u32(k.k("attention.value_length")).value_or(default_hd);
    h.n_rot = f.get_u32(k.k("rope.dimension_count")).value_or(h.head_dim_k);

    auto eps = f.get_float(k.k("attention.layer_norm_rms_epsilon"));
    if (!eps && h.supported)
        throw ModelError(f.path() + ": required key '" + k.k("attention.layer_norm_rms_epsilon") + "' is missing");
    h.rms_eps = static_cast<float>(eps.value_or(0.0));
    h.rope_base = static_cast<float>(f.get_float(k.k("rope.freq_base")).value_or(10000.0));

    h.rope_scaling = std::string(f.get_string(k.k("rope.scaling.type")).value_or(""));
    h.rope_scaling_factor = static_cast<float>(
        f.get_float(k.k("rope.scaling.factor")).value_or(f.get_float(k.k("rope.scale_linear")).value_or(0.0)));
    h.rope_orig_ctx = f.get_u32(k.k("rope.scaling.original_context_length")).value_or(h.n_ctx_train);
    auto f32_or = [&](const char* suffix, float def) {
        return static_cast<float>(f.get_float(k.k(suffix)).value_or(def));
    };
    h.yarn_beta_fast = f32_or("rope.scaling.yarn_beta_fast", h.yarn_beta_fast);
    h.yarn_beta_slow = f32_or("rope.scaling.yarn_beta_slow", h.yarn_beta_slow);
    h.yarn_log_mul = f32_or("rope.scaling.yarn_log_multiplier", 0.0f);
    h.rope_attn_factor = f32_or("rope.scaling.attn_factor", 1.0f);
    h.attn_temp_scale = f32_or("attention.temperature_scale", 0.0f);
    if (h.arch == "qwen2" || h.arch == "gemma3" || h.arch == "qwen3" || h.arch == "phi3" || h.arch == "gemma4")
        h.rope_style = RopeStyle::Neox;
    // phi3 files carry attention.sliding_window (Phi-4's is 0); llama.cpp
    // turns phi3's sliding-window attention off ("Phi SWA is currently
    // disabled"), and so does ptxlm, to compute what llama.cpp computes:
    // only `inspect` shows the value.
    if (h.arch == "gemma3") {
        // Gemma 3: 5 local (sliding-window) layers, then one global layer; the
        // local layers use RoPE base 10000 whatever rope.freq_base says.
        h.sliding_window = f.get_u32(k.k("attention.sliding_window")).value_or(0);
        h.sliding_period = 6;
        h.rope_base_local = 10000.0f;
    }
    if (h.arch == "gemma4") read_gemma4(f, k, h);

    h.tokenizer_model = std::string(f.get_string("tokenizer.ggml.model").value_or(""));
    h.tokenizer_pre = std::string(f.get_string("tokenizer.ggml.pre").value_or(""));
    if (const gguf::KeyValue* tokens = f.find("tokenizer.ggml.tokens")) {
        if (!tokens->is_array() || tokens->elem_type != gguf::ValueType::STRING)
            throw ModelError(f.path() + ": 'tokenizer.ggml.tokens' must be an array of strings");
        if (tokens->count > UINT32_MAX) throw ModelError(f.path() + ": 'tokenizer.ggml.tokens' has too many entries");
        h.n_vocab = static_cast<uint32_t>(tokens->count);
    }
    h.bos_id = f.get_u32("tokenizer.ggml.bos_token_id");
    h.eos_id = f.get_u32("tokenizer.ggml.eos_token_id");
    h.eot_id = f.get_u32("tokenizer.ggml.eot_token_id");
    h.add_bos = f.get_bool("tokenizer.ggml.add_bos_token");
    h.has_chat_template = f.find("tokenizer.chat_template") != nullptr;
    return h;
}

std::string file_type_name(uint32_t ft) {
    // llama_ftype values (llama.h); the gaps are retired types.
    static const char* const names[] = {
        "F32", "F16", "Q4_0", "Q4_1", "Q4_1_SOME_F16", nullptr, nullptr, "Q8_0", "Q5_0", "Q5_1",
        "Q2_K", "Q3_K_S", "Q3_K_M", "Q3_K_L", "Q4_K_S", "Q4_K_M", "Q5_K_S", "Q5_K_M", "Q6_K",
        "IQ2_XXS", "IQ2_XS", "Q2_K_S", "IQ3_XS", "IQ3_XXS", "IQ1_S", "IQ4_NL", "IQ3_S", "IQ3_M", "IQ2_S", "IQ2_M",
        "IQ4_XS", "IQ1_M", "BF16", nullptr, nullptr, nullptr, "TQ1_0", "TQ2_0", "MXFP4_MOE",
    };
    if (ft < std::size(names) && names[ft]) return names[ft];
    return "type " + std::to_string(ft);
}

}  // namespace ptxlm
