// Hyperparameters of a model, read from GGUF metadata alone.
//
// This is the part of the model description that `ptxlm inspect` needs; the
// forward pass (engine/model.h, later) builds on it. Keys are read under the
// file's `general.architecture` prefix exactly as llama.cpp names them.
#pragma once

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

#include "gguf/gguf.h"

namespace ptxlm {

class ModelError : public std::runtime_error {
public:
    using std::runtime_error::runtime_error;
};

enum class RopeStyle { Adjacent, Neox };   // llama: pairs (2i, 2i+1); qwen2/gemma3/qwen3/phi3/gemma4: (i, i+d/2)

// Architectures the engine runs. Other architectures can still be inspected.
const std::vector<std::string>& supported_architectures();

struct HParams {
    std::string arch;              // general.architecture
    std::string name;              // general.name, may be empty
    bool supported = false;        // arch is in supported_architectures()

    uint32_t n_layer = 0;
    uint32_t n_embd = 0;
    uint32_t n_ctx_train = 0;      // <arch>.context_length
    std::vector<uint32_t> n_head;     // per layer
    std::vector<uint32_t> n_head_kv;  // per layer (defaults to n_head)
    std::vector<uint32_t> n_ff;       // per layer
    uint32_t head_dim_k = 0;       // <arch>.attention.key_length, else n_embd / n_head
    uint32_t head_dim_v = 0;       // <arch>.attention.value_length, else n_embd / n_head
    uint32_t n_rot = 0;            // <arch>.rope.dimension_count, else head_dim_k
    float rms_eps = 0;
    float rope_base = 10000.0f;    // <arch>.rope.freq_base (gemma3, gemma4: global layers)
    // gemma3 local layers (10000, fixed by the architecture); gemma4 sliding
    // layers (rope.freq_base_swa, llama.cpp's default 10000)
    std::optional<float> rope_base_local;
    RopeStyle rope_style = RopeStyle::Adjacent;
    std::string rope_scaling;      // <arch>.rope.scaling.type ("" when absent; Model accepts none and linear)
    float rope_scaling_factor = 0; // <arch>.rope.scaling.factor, else the older rope.scale_linear; 0 when absent
    uint32_t rope_orig_ctx = 0;    // <arch>.rope.scaling.original_context_length, else n_ctx_train (YaRN's n_ctx_orig)
    float yarn_beta_fast = 32.0f;  // <arch>.rope.scaling.yarn_beta_fast (llama.cpp's default 32)
    float yarn_beta_slow = 1.0f;   // <arch>.rope.scaling.yarn_beta_slow (default 1)
    float yarn_log_mul = 0;        // <arch>.rope.scaling.yarn_log_multiplier (mscale_all_dim; 0 = absent)
    float rope_attn_factor = 1.0f; // <arch>.rope.scaling.attn_factor: RoPE's cos and sin times this
    float attn_temp_scale = 0;     // <arch>.attention.temperature_scale (Mistral 3; 0 = off)
    uint32_t sliding_window = 0;   // 0 = none
    uint32_t sliding_period = 0;   // gemma3: layer il is global iff il % period == period - 1
    // Gemma 4 (gemma4). Which layers slide: <arch>.attention.sliding_window_pattern,
    // one bool (or integer) per layer, true = sliding (empty elsewhere).
    std::vector<bool> swa_layers;
    uint32_t head_dim_k_swa = 0;   // <arch>.attention.key_length_swa (sliding layers' head size; 0 = absent)
    uint32_t head_dim_v_swa = 0;   // <arch>.attention.value_length_swa
    uint32_t n_rot_swa = 0;        // <arch>.rope.dimension_count_swa, else n_rot
    uint32_t shared_kv_layers = 0; // <arch>.attention.shared_kv_layers: the last N layers attend over an earlier layer's K/V
    uint32_t n_embd_per_layer = 0; // <arch>.embedding_length_per_layer_input (per-layer embeddings; 0 = none)
    uint32_t n_expert = 0;         // <arch>.expert_count (gemma4 26B-A4B: refused by Model)
    uint32_t file_type = 0;        // general.file_type, 0 if absent

    // Tokenizer summary.
    std::string tokenizer_model;   // "llama" (SentencePiece) or "gpt2" (byte-level BPE)
    std::string tokenizer_pre;
    uint32_t n_vocab = 0;          // length of tokenizer.ggml.tokens
    std::optional<uint32_t> bos_id, eos_id, eot_id;
    std::optional<bool> add_bos;
    bool has_chat_template = false;

    bool uniform(const std::vector<uint32_t>& per_layer) const;
    bool is_sliding_layer(uint32_t il) const;
};

// Throws ModelError naming the missing or malformed key (gguf::Error for a
// key of the wrong type passes through with its file offset).
HParams read_hparams(const gguf::File& file);

// "Q4_K_M" for general.file_type 15, or "type 42" if unknown.
std::string file_type_name(uint32_t ft);

}  // namespace ptxlm
