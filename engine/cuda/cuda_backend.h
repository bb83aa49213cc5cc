// The GPU backend: the model's weights on the device in their quantized form
// (kernels/decode/layout.h), an f16 KV cache, and the per-token chain of
// generated kernels (kernels/decode), built once from the model description:
//
//   embed → per layer: fused RMSNorm + QKV GEMV → attention (RoPE, KV
//   append, splits, their reduction: one kernel) → output GEMV (+ residual, or gemma3's
//   normalised add) → fused RMSNorm + gate/up GEMV → down GEMV of act(gate)·up
//   (+ residual or normalised add) → final norm + LM head.
//
// With GpuTuning::paged_kv the KV cache is a pool of pages and the attention
// op is two (paged_rope, paged_attention) over the sequence's page table.
//
// Given KvPages (a pool for several sequences, paged KV implied), it is a
// StepBackend (engine/step_backend.h) that cpu::Batcher drives: a step's
// tokens, up to kMaxStep of any sequences, go through one chain of T-row
// kernels (T the step's tokens rounded up to 1, 2, 4, 8 or 16; a graph per
// T and count of rows that want logits): the GEMVs with T input columns
// (weights read once), paged_rope and paged_attention over each row's own
// page table row and position, the LM head over the rows that want logits
// only (placed last), copied back. A row's result is
// bit for bit what eval_batch gives its sequence alone (the same kernels'
// arithmetic per column, the same attention splits whatever T).
//
// The token id and position live in device memory (written with a
// stream-ordered copy from pinned memory before each token), so every launch
// and its arguments stay the same from token to token. Schedules: `chain`
// (plain launches, one after another on one stream) and `graph` (the chain
// captured once into a CUDA graph, replayed per token: one launch call).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "engine/backend.h"
#include "engine/step_backend.h"
#include "engine/cuda/driver.h"
#include "kernels/decode/gemv.h"

namespace ptxlm::cuda {

// Choices of the GPU path a GPU run has to weigh (pdl and prefetch stay off by default until one does).
struct GpuTuning {
    bool pdl = false;        // launch every op of the chain programmatically (sm_90; griddepcontrol.wait opens each)
    bool prefetch = false;   // each GEMV prefetches its block's first weight rows into L2 at its start (persistent: before its wait)
    // The KV cache in pages of kKvPageSize (decode_plan.h), [page][kv_head][slot][hd] f16 per layer, and each layer's
    // attention as paged_rope -> paged_attention over one page table row (pages 0..n-1 in order; every schedule).
    // What ptxlm runs by default since 2026-11-29 (BackendOptions::gpu_contiguous_kv false); false here is the one
    // contiguous cache with its attention kernel (latency-bound at depth; head sizes 64, 128 and 256 only), kept
    // for A/B runs (--gpu-contiguous-kv) and as the tests' default, each test naming the layout it checks.
    bool paged_kv = false;
    // The most warps a GEMV block takes (kernels::GemvShape::max_warps, 8 to 16); 0: the schedule's, gemv_warps(m,
    // schedule) (decode_plan.h: 16, 8 for gemma4's persistent decoder). A row's result depends on it only through
    // a fused norm's sum of squares, which the block reduces: the tests compare schedules at one count.
    uint32_t gemv_warps = 0;
};

class CudaBackend final : public StepBackend {
public:
    // n_ctx = 0: the model's trained context, capped to what device memory
    // allows. Throws ModelError naming what the GPU path cannot run (a weight
    // type, a head size) or what does not fit (with the numbers).
    // path: the GEMVs' arithmetic (decode_plan's quantized_inputs, as
    // quantized_gemvs resolves it).
    // tuning: what is off by default until a GPU weighs it.
    // pages: n_pages > 0 makes the KV cache a pool of that many pages of
    // page_size (kKvPageSize only; at least one sequence's context) for
    // step(), paged KV implied; n_ctx must then be given. eval_batch and
    // eval_argmax use the pool's first pages in order.
    CudaBackend(const Model& m, std::shared_ptr<const Driver> driver, uint32_t n_ctx,
                Schedule schedule = Schedule::Default, GpuArithmetic path = GpuArithmetic::Default,
                std::string* note = nullptr, GpuTuning tuning = {}, KvPages pages = {});
    ~CudaBackend() override;

    std::string description() const override;
    ptxlm::DeviceInfo device_info() const override;
    uint32_t n_ctx() const override;
    uint32_t n_vocab() const override;
    void eval_batch(std::span<const TokenId> tokens, uint32_t pos, float* logits, uint32_t n_logits) override;
    uint32_t max_batch() const override { return kMaxBatch; }
    static constexpr uint32_t kMaxBatch = 64;
    TokenId eval_argmax(TokenId token, uint32_t pos) override;
    // Under the persistent schedule, a stream of greedy tokens from one
    // launch per up to 256 tokens; otherwise nullptr.
    std::unique_ptr<GreedyStream> start_greedy(TokenId token, uint32_t pos, uint32_t max_tokens,
                                               std::span<const TokenId> stop) override;

    // StepBackend, with KvPages given (else std::logic_error), under the
    // chain or graph schedule (the persistent decoder serves one sequence
    // per launch: std::logic_error). copy_page runs kernels/decode/kv_copy.
    static constexpr uint32_t kMaxStep = 16;
    void step(std::span<const SeqStep> batch) override;
    void copy_page(uint32_t from, uint32_t to, uint32_t positions) override;
    KvPages kv_pages() const override;
    uint32_t max_step_tokens() const override { return kMaxStep; }

    // Launches per token: the chain's length, or 1 under the persistent
    // schedule (a greedy stream runs up to 256 tokens in one).
    size_t launches_per_token() const;
    // Ops per token: the chain's kernels, launched or inline.
    size_t ops_per_token() const;
    // The persistent schedule's all-to-all waits per token: ops that wait for
    // every block of an op run by more than one block (a gather: each of its
    // blocks needs what all of the producer's blocks wrote, as a grid-wide
    // barrier would give). Waits on part of an op, or on a one-block op (a
    // broadcast), are not counted. 0 under the other schedules.
    size_t all_to_all_waits() const;
    // The persistent kernel's grid (resident blocks); 0 under the other schedules.
    uint32_t persistent_blocks() const;
    // The chain, in order: each launch's kernel, grid size (blocks), block
    // size and dynamic shared memory; under the persistent schedule, how many
    // all-to-all waits (see above) the op makes.
    struct Launch {
        std::string kernel;
        uint64_t blocks = 0;
        uint32_t threads = 0;
        uint32_t shared_bytes = 0;
        uint32_t all_to_all_waits = 0;
    };
    std::vector<Launch> launches() const;
    // The chain a step of `tokens` rows runs when `logit_rows` of them want
    // logits (buckets T >= tokens, H >= logit_rows), as launches()
    // describes the single-token chain; built if not yet.
    std::vector<Launch> step_launches(uint32_t tokens, uint32_t logit_rows);
    // Positions [from, to) of every layer's K and V cache set to fixed
    // pseudo-random f16 values in (-1, 1) by a host copy, as if tokens had
    // been evaluated there: what counted mode uses to run one token at depth
    // `to` without evaluating the tokens before it on emu. Throws
    // std::invalid_argument when to exceeds the context or from > to.
    void fill_kv_for_count(uint32_t from, uint32_t to);
    // For the per-op check: one token through the chain op by op (not under
    // the persistent schedule), and for each GEMV op what it read and wrote,
    // so that the CPU's own op (gemv_reference) can be fed the device's input
    // and compared at float-reordering tolerance. The token's other effects
    // (its KV cache row) are as eval's.
    struct GemvTrace {
        size_t op = 0;                         // index into launches()
        std::string kernel;
        kernels::GemvShape shape;
        const Weight* norm = nullptr;          // with shape.norm
        std::vector<const Weight*> matrices;   // one per segment
        std::vector<float> input;              // x as the op read it (before its norm)
        std::vector<std::vector<float>> before, after;   // each output (one per segment, one under a GLU)
        std::vector<float> gate;               // a gated output's multiplier (shape.gated), one per row
    };
    std::vector<GemvTrace> trace_gemvs(TokenId token, uint32_t pos);
    // For `ptxlm profile`: one token's ops launched `reps` times (not under
    // the persistent schedule), an event recorded before each launch and after
    // the last; per op of the chain (launches() order), the mean and least
    // time between its events in microseconds. An op's time includes any
    // wait of the GPU for the host's next launch (when enqueueing a launch
    // and an event takes longer than the op runs), so a sum over ops bounds
    // the kernels' time from above. On emu the times are the emulator's.
    struct OpTime {
        double us_mean = 0, us_min = 0;
    };
    std::vector<OpTime> time_ops(TokenId token, uint32_t pos, uint32_t reps);
    // Device addresses of the buffers holding quantized weight matrices (for
    // counters that tell weight traffic from the rest).
    std::vector<uint64_t> weight_buffers() const;

    // What the persistent schedule's greedy streams did (for tests and
    // bench): launches, tokens handed out while their launch still ran, and
    // for the last cancelled stream the tokens produced when the host asked
    // to stop and when the device had stopped.
    struct StreamStats {
        uint64_t launches = 0, tokens = 0, tokens_while_running = 0;
        uint32_t produced_at_cancel = 0, produced_after_cancel = 0;
        bool cancelled = false;
    };
    StreamStats stream_stats() const;
    Schedule schedule() const;
    // The GEMVs' arithmetic (Quantized or Reference, never Default) and the
    // tuning this backend runs with (paged_kv: whether its KV is in pages).
    GpuArithmetic arithmetic() const;
    GpuTuning tuning() const;
    // For tests only, a negative control of the persistent schedule's
    // dependency table: removes dependency `dep` (per-head ranges, in the
    // order head_deps gives them) of every op whose kernel name starts with
    // `prefix`, and re-uploads the table; returns how many ops lost one.
    // emu's race checker must then report what the dropped wait protected.
    size_t drop_dependency_for_test(const std::string& prefix, size_t dep);
    // For tests only, under paged KV: sets entry `index` of the single
    // sequence's page table (its page for positions index·kKvPageSize
    // onwards; the device's for one token, the host's for prompt chunks) to
    // `page`, as a negative control. Throws std::logic_error without paged KV,
    // std::out_of_range for an index or page outside the pool.
    void poke_page_table_for_test(uint32_t index, uint32_t page);

    struct Impl;

private:
    std::unique_ptr<Impl> p_;
};

}  // namespace ptxlm::cuda
