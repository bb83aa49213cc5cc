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
#include <vector>

#include "engine/backend.h"
#include "engine/cpu/attention.h"
#include "engine/cpu/matvec.h"
#include "engine/cpu/thread_pool.h"

namespace ptxlm::cpu {

class CpuBackend final : public Backend {
public:
    // n_ctx must already be chosen (choose_context). threads <= 0: every core.
    CpuBackend(const Model& m, uint32_t n_ctx, KvType kv, int threads);
    // On a pool shared with other backends that are evaluated in turn from
    // one thread (the server's slots): never from two threads at once.
    CpuBackend(const Model& m, uint32_t n_ctx, KvType kv, std::shared_ptr<ThreadPool> pool);
    ~CpuBackend() override;

    std::string description() const override;
    DeviceInfo device_info() const override;
    uint32_t n_ctx() const override { return n_ctx_; }
    uint32_t n_vocab() const override { return m_.n_vocab; }
    void eval_batch(std::span<const TokenId> tokens, uint32_t pos, float* logits, uint32_t n_logits) override;
    uint32_t max_batch() const override { return kMaxBatch; }
    static constexpr uint32_t kMaxBatch = 64;

    // The arithmetic of the matrix-vector products: Quantized (on `isa`,
    // by default the best the CPU runs, PTXLM_CPU_ISA to override) or
    // Reference.
    void set_path(CpuPath p) { arith_.path = p; }
    void set_isa(Isa isa);   // throws std::invalid_argument when this CPU cannot run it
    CpuPath path() const { return arith_.path; }
    std::string path_name() const;   // "quantized (<isa>)" or "reference" (bench rows)
    Isa isa() const { return arith_.isa; }

    // Test hooks. A different RoPE base on one layer (negative controls);
    // llama.cpp's input rounding in every matrix-vector product (diagnostics;
    // selects the reference path).
    void debug_set_rope_base(uint32_t layer, float base);
    void set_input_rounding(InputRounding r) {
        arith_.rounding = r;
        if (r != InputRounding::Exact) arith_.path = CpuPath::Reference;
    }

private:
    struct Layer;
    void attention(uint32_t il, uint32_t pos, uint32_t n);

    const Model& m_;
    uint32_t n_ctx_;
    KvType kv_;
    Arithmetic arith_;
    std::shared_ptr<ThreadPool> pool_;
    std::vector<Layer> layers_;
    Attention fast_attention_;   // the quantized path's; the reference path's is attention()
    std::vector<float> output_norm_;
    // Activations of up to kMaxBatch tokens, row t of each at t × its width.
    std::vector<float> x_, xn_, q_, k_, v_, att_, o_, g_, u_, scores_, rows_;
    uint64_t q_w_ = 0, kv_w_ = 0, ff_w_ = 0;
};

}  // namespace ptxlm::cpu
