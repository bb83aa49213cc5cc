// ptxlm-synth: synthetic GGUF test models shaped like llama, qwen2, gemma3 and
// qwen3, plus "llama3": a llama file with Llama 3.x's RoPE features,
// mistral3 (Ministral 3: YaRN, attention temperature, the tekken tokenizer)
// and phi3 (Phi-3/Phi-4: fused attn_qkv and gate/up, LongRoPE factors), and
// phi4mini: a phi3 file with Phi-4-mini's partial rotary (3/4 of each head),
// and gemma4 (Gemma 4 dense: sliding and full layers of different head sizes,
// shared-KV layers, per-layer embeddings, proportional RoPE on the full
// layers; tiny and small only, so it is not in all_archs()).
//
// A model is fully described by a Spec (shapes, RoPE bases, seed). The weights
// are random but deterministic (same Spec = byte-identical file on any machine),
// typed by llama.cpp's Q4_K_M rule, scaled so activations stay O(1) and the
// logits are peaked (argmax comparisons have real margins). The tokenizer is a
// small byte-level BPE ("gpt2") vocabulary learned from built-in English text,
// with ChatML special tokens and a ChatML chat template. Tensor names and
// metadata keys are the ones llama.cpp reads for each architecture.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "gguf/quant.h"
#include "gguf/writer.h"

namespace ptxlm::synth {

// Llama3 is general.architecture "llama" with rope_freqs.weight factors, linear
// RoPE scaling and the llama-bpe pre-tokenizer (a separate preset, so that
// the plain llama files and their goldens stay as they are).
// Phi4Mini is general.architecture "phi3" with rope.dimension_count 3/4 of
// head_dim (LongRoPE factors of n_rot/2), as Phi-4-mini's 96 of 128.
enum class Arch { Llama, Qwen2, Gemma3, Qwen3, Llama3, Mistral3, Phi3, Phi4Mini, Gemma4 };
enum class Size { Tiny, Small, Medium, Wide4096, Llama3_8B_Slice, Llama3_2_1B_Slice, Llama3_8B };

const char* arch_name(Arch a);   // "llama", "qwen2", "gemma3", "qwen3", "llama3", "mistral3", "phi3", "phi4mini": the preset's name
const char* gguf_arch(Arch a);   // general.architecture: arch_name, but "llama" for Llama3, "phi3" for Phi4Mini
const char* size_name(Size s);   // "tiny", "small", "medium", "wide4096", "llama3-8b-slice",
                                 // "llama3.2-1b-slice", "llama3-8b"
std::optional<Arch> parse_arch(std::string_view s);
std::optional<Size> parse_size(std::string_view s);
// The presets both devices run, in every size (gemma4, tiny and small only,
// is parsed and named but left out).
const std::vector<Arch>& all_archs();
const std::vector<Size>& all_sizes();

constexpr uint64_t kDefaultSeed = 1;
constexpr uint32_t kLlama3Vocab = 128256;   // the slices' vocabulary (Llama-3's)

enum class TypeMix { Q4_K_M, Q5_K_M, Q3_K_M, Q2_K, IQ4_XS };

struct Spec {
    Arch arch = Arch::Llama;
    Size size = Size::Tiny;
    uint32_t n_embd = 0;          // residual width; token_embd is (n_vocab, n_embd)
    uint32_t n_layer = 0;
    uint32_t n_head = 0;          // query heads
    uint32_t n_head_kv = 0;       // key/value heads; n_head % n_head_kv == 0
    uint32_t head_dim = 0;        // per head, q, k and v alike
    uint32_t n_ff = 0;            // FFN hidden width
    uint32_t n_vocab = 0;         // tokenizer size: vocab()'s tokens, then reserved control tokens up to it
    uint32_t n_ctx = 0;           // <arch>.context_length
    float rms_eps = 1e-5f;        // <arch>.attention.layer_norm_rms_epsilon
    float rope_base = 10000.0f;   // <arch>.rope.freq_base (gemma3: the global layers)
    float rope_base_local = 0.0f; // gemma3 sliding-window layers (rope.freq_base_swa); 0 elsewhere
    uint32_t sliding_window = 0;  // gemma3: <arch>.attention.sliding_window; 0 = none
    float rope_scale_linear = 0;  // llama3: <arch>.rope.scaling.type linear with this factor; 0 = none
    // mistral3: <arch>.rope.scaling.type yarn with this factor (0 = none), its
    // original_context_length, yarn_beta_fast/slow and yarn_log_multiplier,
    // and <arch>.attention.temperature_scale (0 = none).
    float rope_yarn_factor = 0;
    uint32_t rope_orig_ctx = 0;
    float yarn_beta_fast = 32.0f, yarn_beta_slow = 1.0f, yarn_log_mul = 0;
    float attn_temp_scale = 0;
    // phi3: rope_factors_long/short.weight with rope_orig_ctx as
    // original_context_length, and <arch>.rope.scaling.attn_factor (0 = not written).
    float rope_attn_factor = 0;
    uint32_t rope_dims = 0;       // phi4mini: <arch>.rope.dimension_count (even, < head_dim); 0 = head_dim
    // gemma4: layer il slides iff il is even (llama.cpp's reuse needs the
    // last layer with its own K/V full, the one before it sliding); the
    // sliding layers' head size (key_length_swa; head_dim is the full ones'),
    // the last shared_kv_layers layers attend over layer n_kv-2's (sliding)
    // or n_kv-1's (full) K/V, per-layer embeddings of n_embd_per_layer,
    // attn_v only on the sliding layers (k's projection serves as v on the
    // full ones), final_logit_softcapping (0 = not written).
    uint32_t head_dim_swa = 0;
    uint32_t shared_kv_layers = 0;
    uint32_t n_embd_per_layer = 0;
    float final_softcap = 0;
    uint64_t seed = kDefaultSeed;
    TypeMix types = TypeMix::Q4_K_M;   // the quantization mix of the weights (see mix_type)

    uint32_t q_dim() const { return n_head * head_dim; }     // attn_q rows, attn_output input
    uint32_t kv_dim() const { return n_head_kv * head_dim; } // attn_k / attn_v rows
    bool gemma() const { return arch == Arch::Gemma3 || arch == Arch::Gemma4; }
    bool is_swa(uint32_t il) const { return arch == Arch::Gemma4 && il % 2 == 0; }   // gemma4's sliding layers
    uint32_t head_dim_of(uint32_t il) const { return is_swa(il) ? head_dim_swa : head_dim; }
    bool has_kv(uint32_t il) const { return il + shared_kv_layers < n_layer; }   // gemma4: its own K/V
    bool tied_embeddings() const { return gemma(); }  // no output.weight
    bool qkv_bias() const { return arch == Arch::Qwen2; }
    bool qk_norm() const { return gemma() || arch == Arch::Qwen3; }   // attn_{q,k}_norm.weight
    bool rope_freqs() const { return arch == Arch::Llama3 || arch == Arch::Gemma4; }   // rope_freqs.weight
    uint32_t n_rot() const { return rope_dims ? rope_dims : head_dim; }   // dims RoPE rotates per head
    bool phi3() const { return arch == Arch::Phi3 || arch == Arch::Phi4Mini; }   // general.architecture "phi3"
    bool rope_factors() const { return phi3(); }  // rope_factors_long/short.weight (n_rot / 2 each)
    bool fused() const { return phi3(); }   // attn_qkv (q, k, v rows) and ffn_up (gate, up rows)
    // Written as key_length/value_length (head_dim may differ from n_embd / n_head).
    bool key_length() const { return gemma() || arch == Arch::Qwen3; }
    const char* tokenizer_pre() const;   // tokenizer.ggml.pre
    std::string name() const;     // general.name, e.g. "ptxlm-synth llama tiny" (phi3: "ptxlm-synth phi tiny")
};

// The named presets. Throws std::invalid_argument for an unknown pair.
Spec preset(Arch arch, Size size, uint64_t seed = kDefaultSeed);
// Throws std::invalid_argument naming the first inconsistent field.
void validate(const Spec& spec);
uint64_t param_count(const Spec& spec);

// ---- Q4_K_M tensor types -------------------------------------------------

enum class WeightKind {
    TokenEmbd, Output, AttnQ, AttnK, AttnV, AttnOut, FfnGate, FfnUp, FfnDown,
    Norm,   // every *norm.weight (1-D)
    Bias,   // qwen2 attn_{q,k,v}.bias (1-D)
    RopeFreqs,   // llama3 rope_freqs.weight (1-D, head_dim / 2 divisors)
    AttnQkv,     // phi3 attn_qkv.weight: q's rows, then k's, then v's
    RopeFactorsLong, RopeFactorsShort,   // phi3 (1-D, n_rot / 2 divisors)
    // gemma4's per-layer embeddings: per_layer_token_embd (a lookup table)
    // and each layer's inp_gate and proj (Q4_K, as llama.cpp's quantizer
    // gives any other 2-D weight), per_layer_model_proj (F32: llama.cpp's
    // quantizer leaves it as it is).
    PleTokEmbd, PleModelProj, PleGate, PleProj,
    Scale,   // gemma4's layer_output_scale.weight (1 element, F32)
};

// llama.cpp's "use more bits" layer rule of Q4_K_M (integer division n/8):
// layer i of n gets the bigger type when i < n/8, i >= 7n/8 or (i - n/8) % 3 == 2.
bool q4_k_m_more_bits(uint32_t layer, uint32_t n_layer);
// The type llama.cpp's Q4_K_M would give this tensor (all rows are multiples of
// 256 here, so no fallback types arise).
gguf::GgmlType q4_k_m_type(WeightKind kind, uint32_t layer, uint32_t n_layer, bool tied_embeddings);
// Other mixes, after llama.cpp's rules for rows that are multiples of 256:
// Q5_K_M (Q5_K, Q6_K where Q4_K_M gives it), Q3_K_M (Q3_K; attn_v Q5_K on
// layers 0-1, else Q4_K; ffn_down Q4_K on Q4_K_M's more-bits layers;
// attn_output Q4_K), Q2_K (Q2_K; attn_v, ffn_down and attn_output Q3_K),
// IQ4_XS (IQ4_XS; IQ4_NL token embeddings); the output Q6_K in each.
gguf::GgmlType mix_type(TypeMix mix, WeightKind kind, uint32_t layer, uint32_t n_layer, bool tied_embeddings);
std::optional<TypeMix> parse_type_mix(std::string_view name);   // "q4_k_m", "q5_k_m", "q3_k_m", "q2_k", "iq4_xs"

// One tensor of a model, in file order. ne is ggml order: a weight W of shape
// (out, in) has ne = {in, out}.
struct TensorSpec {
    std::string name;
    WeightKind kind;
    int layer;                    // -1 outside the blocks
    gguf::GgmlType type;
    std::vector<uint64_t> ne;
};
std::vector<TensorSpec> tensor_plan(const Spec& spec);

// ---- tokenizer -----------------------------------------------------------

struct Vocab {
    std::vector<std::string> tokens;    // 256 byte tokens (id = byte), merges, specials
    std::vector<int32_t> token_type;    // 1 normal, 3 control
    std::vector<std::string> merges;    // "a b" in rank order
    uint32_t bos_id = 0;                // <|bos|>
    uint32_t eos_id = 0;                // <|eos|>
    uint32_t im_start_id = 0;           // <|im_start|>
    uint32_t im_end_id = 0;             // <|im_end|> (= eot)
};
// Built once from the built-in text; identical on every run.
const Vocab& vocab();
// GPT-2's byte -> unicode map, as UTF-8.
std::string byte_to_unicode(uint8_t b);
// The built-in English text the merges are learned from.
std::string_view training_text();
// A ChatML template in Jinja: <|im_start|>role\ncontent<|im_end|>\n per message.
const std::string& chat_template();

// ---- generation ----------------------------------------------------------

struct Options {
    unsigned threads = 0;   // 0 = hardware concurrency; the output does not depend on it
    // Called before each tensor is generated: (index, count, tensor).
    std::function<void(size_t, size_t, const TensorSpec&)> progress;
};

// The whole model as a GGUF writer (tensors quantized, metadata set).
gguf::Writer build_model(const Spec& spec, const Options& opt = {});
// Convenience: build_model(...).write(path) / .serialize().
void write_model(const Spec& spec, const std::string& path, const Options& opt = {});
std::vector<uint8_t> model_bytes(const Spec& spec, const Options& opt = {});

// The standard normal-ish sample the weights are drawn from (exposed for tests):
// element `index` of the stream `key`. Mean 0, variance 1, |z| < 3.47.
float synth_normal(uint64_t key, uint64_t index);

// llama3's rope_freqs factor of RoPE pair i of n: 1 for the first quarter,
// 8 for the last, a linear ramp between (exact float arithmetic).
float rope_freq_factor(uint32_t i, uint32_t n);
// gemma4's rope_freqs (the converter's "proportional" RoPE with a partial
// rotary factor of 1/4): 1 on the first quarter of the pairs, 1e30 (no
// rotation) on the rest.
float rope_freq_factor_proportional(uint32_t i, uint32_t n);
// phi3's LongRoPE factors of pair i of n, shaped like Phi-3.5-mini's: the
// long set rises from 1 to 16 over the pairs, the short one from 1 to 2.
float rope_factor_long(uint32_t i, uint32_t n);
float rope_factor_short(uint32_t i, uint32_t n);

}  // namespace ptxlm::synth
