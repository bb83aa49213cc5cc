// The CPU backend: the float32-activation forward pass. Weights are read in
// their quantized form through cpu/matvec, either with quantized dot products
// on the CPU's SIMD (CpuPath::Quantized, the default) or with the float32
// reference arithmetic (CpuPath::Reference); activations, norms, RoPE,
// softmax and attention are float32 (sums of squares accumulate in double);
// the KV cache holds f16 or f32. The quantized path also takes the SIMD
// attention of cpu/attention.h and the vectorised activations of
// cpu/elementwise.h; the reference path keeps plain loops (attention()). The
// reference path is what every faster path and every GPU kernel is compared
// against; keep it plain.
#pragma once

#include <memory>
#include <span>
#include <optional>
#include <vector>

#include "engine/backend.h"
#include "engine/step_backend.h"
#include "engine/cpu/attention.h"
#include "engine/cpu/matvec.h"
#include "engine/cpu/thread_pool.h"

namespace ptxlm::cpu {

// The step interface's types (engine/step_backend.h), by their old names.
using ptxlm::KvPages;
using ptxlm::SeqStep;

class CpuBackend final : public StepBackend {
public:
    // n_ctx must already be chosen (choose_context). threads <= 0: every core.
    CpuBackend(const Model& m, uint32_t n_ctx, KvType kv, int threads);
    // On a pool shared with other backends that are evaluated in turn from
    // one thread (the server's slots): never from two threads at once.
    // `pages` sizes the K/V storage for several sequences (step); n_ctx stays
    // each sequence's limit.
    CpuBackend(const Model& m, uint32_t n_ctx, KvType kv, std::shared_ptr<ThreadPool> pool, KvPages pages = {});
    ~CpuBackend() override;

    std::string description() const override;
    DeviceInfo device_info() const override;
    uint32_t n_ctx() const override { return n_ctx_; }
    uint32_t n_vocab() const override { return m_.n_vocab; }
    void eval_batch(std::span<const TokenId> tokens, uint32_t pos, float* logits, uint32_t n_logits) override;
    uint32_t max_batch() const override { return kMaxBatch; }
    static constexpr uint32_t kMaxBatch = 64;

    // StepBackend (kMaxBatch tokens a step): a sequence's logits are bit
    // for bit what eval_batch gives it alone, however it is batched or
    // chunked. eval_batch is a step of one sequence whose pages are the
    // storage's, in order.
    void step(std::span<const SeqStep> batch) override;
    void copy_page(uint32_t from, uint32_t to, uint32_t positions) override;
    KvPages kv_pages() const override { return pages_; }
    uint32_t max_step_tokens() const override { return kMaxBatch; }

    // The arithmetic of the matrix-vector products: Quantized (on `isa`,
    // by default the best the CPU runs, PTXLM_CPU_ISA to override) or
    // Reference. The weights are packed for it (repack.h) by prepare() or
    // the next step, so choosing both packs once.
    void set_path(CpuPath p) { arith_.path = p; }
    void set_isa(Isa isa);   // throws std::invalid_argument when this CPU cannot run it
    // Packs the weights for the chosen path and Isa now rather than in the
    // first step (start-up work out of the first request's latency).
    void prepare() { pack_weights(); }
    CpuPath path() const { return arith_.path; }
    std::string path_name() const;   // "quantized (<isa>)" or "reference" (bench rows)
    Isa isa() const { return arith_.isa; }

    // Whether pack_weights copies the matrices it does not pack (F16, F32,
    // ...) unchanged into the pack arena's huge pages and drops the
    // file's pages of them (on by default; PTXLM_CPU_COPY=0 turns it off
    // for A/B runs). A change takes effect at the next prepare() or step.
    void set_weight_copies(bool on) { copy_weights_ = on; }
    // The matrix the quantized products read for the model's w: its copy
    // (data in the arena) or w itself (tests).
    const Weight& read_view(const Weight& w) const;

    // Test hooks. A different RoPE base on one layer (negative controls);
    // llama.cpp's input rounding in every matrix-vector product (diagnostics;
    // selects the reference path).
    void debug_set_rope_base(uint32_t layer, float base);
    void set_input_rounding(InputRounding r) {
        arith_.rounding = r;
        if (r != InputRounding::Exact) set_path(CpuPath::Reference);
    }

private:
    struct Layer;
    void attention(uint32_t il, uint32_t row0, const SeqStep& s);
    // The quantized path's attention arguments for sequence s of a step,
    // whose tokens sit at rows row0.. of the activations.
    AttentionArgs attention_args(uint32_t il, uint32_t row0, const SeqStep& s);
    // The matrices packed for arith_.isa where it has packed kernels
    // (repack.h), on the quantized path only (the reference path reads the
    // file's layout); called by prepare() and at every step, a no-op when
    // the packs already match both.
    void pack_weights();
    // Points the layers' `mats`, output_ and ple_model_ at the model's own
    // weights (no copies).
    void use_file_weights();
    // Groups the layers by their RoPE rate tables (rope_tables_, Layer::rope_at).
    void index_rope_tables();
    // Token `token`'s embedding as floats (n_embd of them, before any scale).
    void embedding(uint64_t token, float* out) const;
    // gemma4: every layer's per-layer input of the step's n tokens into
    // ple_, from their scaled embeddings in x_ (Model::per_layer_tok_embd).
    void per_layer_inputs(std::span<const TokenId> tokens, uint32_t n);
    // A product's job: w into y (outputs ldy apart), with w's packed rows
    // (null where w is not packed).
    static MatVec job(const Weight& w, const PackedWeight* packed, float* y, uint64_t ldy) {
        return {&w, y, ldy, packed};
    }

    const Model& m_;
    uint32_t n_ctx_;
    KvType kv_;
    KvPages pages_;
    uint32_t page_shift_ = 0;
    std::vector<uint32_t> own_pages_;   // eval_batch's table: every page, in order
    // Layer il's cache: values from one KV head's plane to the next's (its
    // n_pages · page_size rows of head_dim values; AttentionArgs).
    uint64_t head_stride(uint32_t il) const {
        return uint64_t(pages_.n_pages) * pages_.page_size * m_.head_dim_of(il);
    }
    Arithmetic arith_;
    // The packs (stable addresses: they are pointed at from Layer and
    // output_pack_), the Isa they were made for, and whether any were made.
    std::vector<std::unique_ptr<PackedWeight>> packed_;
    // A matrix not packed, copied unchanged: the view the products read
    // (data in the copy) and the copy's owner; `of` is the model's weight.
    struct Copy {
        const Weight* of;
        Weight view;
        std::shared_ptr<uint8_t> bytes;
    };
    std::vector<std::unique_ptr<Copy>> copies_;   // stable addresses: pointed at from Layer and output_
    PackArena pack_arena_;   // where packed_ and copies_ live (each holds its chunk)
    std::optional<Isa> packed_isa_;
    bool copy_weights_ = true, packed_copies_ = false;   // wanted, and what the packs were made with
    const PackedWeight* output_pack_ = nullptr;
    const PackedWeight* ple_model_pack_ = nullptr;   // gemma4's per_layer_model_proj
    const Weight* output_ = nullptr;      // the output matrix the products read (m_.output or its copy)
    const Weight* ple_model_ = nullptr;   // per_layer_model_proj alike
    std::shared_ptr<ThreadPool> pool_;
    std::vector<Layer> layers_;
    Attention fast_attention_;   // the quantized path's; the reference path's is attention()
    std::vector<AttentionArgs> attn_args_;   // a step's sequences, for fast_attention_
    std::vector<float> output_norm_, ple_norm_;
    // Activations of up to kMaxBatch tokens, row t of each at t × its width.
    std::vector<float> x_, xn_, q_, k_, v_, att_, o_, g_, u_, scores_, rows_;
    // The down product's inputs as matmul_glu leaves them quantized (a
    // Block32 down matrix on the quantized path), one per token.
    std::vector<QuantizedInput> ffn_in_;
    std::vector<QuantizedInput> att_q_;   // wo's inputs as attention's merges leave them (Block32 wo)
    // gemma4's per-layer inputs (ple_w_ = n_embd_per_layer · n_layer per
    // token) and the per-layer gate's outputs (n_embd_per_layer per token).
    std::vector<float> ple_, pg_;
    uint64_t ple_w_ = 0;
    std::vector<float> step_logits_;   // a step of several sequences: the wanted rows' logits, then copied out
    // A step's RoPE cos and sin, once per token and distinct rate table of
    // the layers (llama: one; gemma3: local and global): the layers in
    // rope_tables_ own a table each, and layer l's pairs for token t start at
    // rope_cs_[t · rope_cs_w_ + l.rope_at].
    std::vector<uint32_t> rope_tables_;
    std::vector<RopeCosSin> rope_cs_;
    uint64_t rope_cs_w_ = 0;
    uint64_t q_w_ = 0, kv_w_ = 0, ff_w_ = 0;
};

}  // namespace ptxlm::cpu
