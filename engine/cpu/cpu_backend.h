// The CPU backend: the float32-activation reference forward pass. Weights are
// read in their quantized form through cpu/matvec; activations, norms, RoPE,
// softmax and attention are float32 (sums of squares and dot products
// accumulate in double); the KV cache holds f16 or f32. This path is what
// every faster path and every GPU kernel is compared against; keep it plain.
#pragma once

#include <memory>
#include <vector>

#include "engine/backend.h"
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

    // Test hooks. A different RoPE base on one layer (negative controls);
    // llama.cpp's input rounding in every matrix-vector product (diagnostics).
    void debug_set_rope_base(uint32_t layer, float base);
    void set_input_rounding(InputRounding r) { rounding_ = r; }

private:
    struct Layer;
    void attention(uint32_t il, uint32_t pos, uint32_t n);

    const Model& m_;
    uint32_t n_ctx_;
    KvType kv_;
    InputRounding rounding_ = InputRounding::Exact;
    std::shared_ptr<ThreadPool> pool_;
    std::vector<Layer> layers_;
    std::vector<float> output_norm_;
    // Activations of up to kMaxBatch tokens, row t of each at t × its width.
    std::vector<float> x_, xn_, q_, k_, v_, att_, o_, g_, u_, scores_, rows_;
    uint64_t q_w_ = 0, kv_w_ = 0, ff_w_ = 0;
};

}  // namespace ptxlm::cpu
