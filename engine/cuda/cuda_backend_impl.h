// CudaBackend's state, shared by its translation units (cuda_backend.cpp:
// the chain, its buffers and the Backend calls; cuda_persistent.cpp: the
// persistent decoder's op table, launch and greedy stream). Private to
// engine/cuda.
#pragma once

#include "engine/cuda/cuda_backend.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <tuple>
#include <stdexcept>
#include <thread>
#include <vector>

#include "engine/cuda/decode_plan.h"
#include "engine/cuda/device.h"
#include "engine/cuda/launch.h"
#include "engine/cuda/module.h"
#include "gguf/f16.h"
#include "kernels/decode/attention.h"
#include "kernels/decode/elementwise.h"
#include "kernels/decode/gemv.h"
#include "kernels/decode/kv_copy.h"
#include "kernels/decode/layout.h"
#include "kernels/decode/persistent.h"
#include "kernels/examples/examples.h"

namespace ptxlm::cuda {

namespace kx = ptxlm::kernels;
using ptx::DevPtr;

struct CudaBackend::Impl {
    const Model& m;
    Context ctx;
    Stream stream;
    ptx::Target target;
    uint32_t n_ctx = 0;

    // By first row in the file: a tied LM head shares the embedding; the views
    // of a fused matrix (phi3's attn_qkv, ffn_up) start at different rows and
    // are uploaded each as a matrix of its own, in the device's padded rows.
    std::map<const uint8_t*, DeviceBuffer> weights;
    std::vector<DeviceBuffer> vectors;                 // norms and biases as f32
    // RoPE tables by what a layer's rates depend on (rope_rates(m, il, ...)):
    // its base, its rotary dims and whether it takes the model's factors.
    struct RopeKey {
        float base;
        uint32_t n_rot;
        bool factors;
        auto operator<=>(const RopeKey&) const = default;
    };
    static RopeKey rope_key(const Model& m, uint32_t il) {
        return {m.layers[il].rope_base, m.n_rot_of(il), m.layers[il].rope_factors};
    }
    std::map<RopeKey, DeviceBuffer> rope_tables;
    DevPtr rope_table(uint32_t il) const { return ptr(rope_tables.at(rope_key(m, il))); }
    std::vector<DeviceBuffer> k_cache, v_cache;
    DeviceBuffer x, q, k, v, att, o, h, logits, part, state, best;   // h: the FFN's act(gate)·up
    DeviceBuffer att_sync;   // per layer, the attention's split counters (one u32 per head; left zero)
    PinnedBuffer state_host, best_host;
    // Paged KV (GpuTuning::paged_kv): k_cache / v_cache hold each layer's
    // pools of n_pages pages ([page][kv_head][kKvPageSize][hd] f16), one
    // table row lists pages 0..n_pages-1 in order; q_rot is paged_rope's
    // output (paged_attention's q), paged_part / paged_sync its workspace and
    // split counters (per layer, one u32 per KV head; left zero).
    bool paged = false;
    uint32_t n_pages = 0, sync_heads = 0;   // sync_heads: paged_sync's u32 per layer (and token row)
    DeviceBuffer page_table, q_rot, paged_part, paged_sync;
    // The device state one token reads, written per token from a pinned slot:
    // {token, pos}; under paged KV {pos, table row 0, token, 0}, so that its
    // first 8 bytes are the paged kernels' token descriptor (8-byte aligned).
    uint32_t state_words() const { return paged ? 4 : 2; }
    void put_state(uint32_t* slot, TokenId token, uint32_t pos) const {
        const kx::PersistentState l = cuda::state_layout(paged);
        std::fill_n(slot, state_words(), 0u);   // paged: the table row word, 0
        slot[l.token / 4] = uint32_t(token);
        slot[l.pos / 4] = pos;
    }

    // The batch step (paged KV, cuda_step.cpp; step() with KvPages given,
    // eval_batch's prompt chunks): the activation buffers
    // above hold `rows` rows (kMaxStep; 1 without paged KV), row t at t times
    // a row's size; step_io holds the rows' {pos, table row} descriptors,
    // their token ids and their page table rows (max_pages entries each:
    // kv_pages(n_ctx)), written per step from step_host; step_part and
    // step_sync the T-row attention's workspace and counters (per layer
    // rows x sync_heads u32; left zero). copy_pools / copy_list: kv_copy's
    // pool descriptors (every layer's K and V) and its one copy entry.
    KvPages pages{0, 16};
    uint32_t rows = 1, max_pages = 0;
    std::vector<uint32_t> identity;   // pages 0..max_pages-1: one sequence in the pool's first pages
    DeviceBuffer step_io, step_part, step_sync, copy_pools, copy_list;
    PinnedBuffer step_host;
    static constexpr size_t kIdsOffset = 8 * CudaBackend::kMaxStep;                 // bytes into step_io
    static constexpr size_t kTablesOffset = kIdsOffset + 4 * CudaBackend::kMaxStep;
    // What the chains read: each layer's weights, norms and biases on the
    // device (null where the model has none), the embedding and the head.
    struct Weights {
        std::vector<DevPtr> attn_norm, wq, wk, wv, wo, bq, bk, bv, qn, kn, post_attn, ffn_norm, wg, wu, wd, post_ffn;
        DevPtr embd, out_norm, out;
    } w;
    // gemma4's per-layer embeddings and output scales (null where absent):
    // per layer the gate and projection matrices, the post norm and the
    // scale; the token table, the model projection and its slice norm.
    struct PleWeights {
        std::vector<DevPtr> gate, proj, post_norm, out_scale;
        DevPtr tok_embd, model_proj, proj_norm;
    } pw;
    // Its activations (rows each): the per-layer inputs (ple_in, P·L: the
    // projection, combined in place by ple_input with the token's row) and
    // a layer's gate (ple_g, P).
    DeviceBuffer ple_in, ple_g;
    DecodePlan plan;   // the single-token chain's

    struct Kernel {
        std::unique_ptr<Module> module;
        std::unique_ptr<Function> fn;
    };
    std::map<std::string, Kernel> kernels;   // by kernel name (names encode shapes)
    struct Op {
        std::string kernel;
        const Function* fn;   // null under the persistent schedule (no standalone module)
        ptx::LaunchGeometry geometry;
        ptx::ParamPack args;
        uint32_t kind = 0;    // index into kinds
        // What the op reads under the persistent schedule; empty: all of the
        // op before it. A dependency with ranges (one first, count, stride
        // triple per virtual block) waits only for those producer blocks.
        struct Dep {
            uint32_t op = 0;
            std::vector<uint32_t> ranges;   // empty: every block of `op`
        };
        std::vector<Dep> deps;
        // Launched plainly even under target.pdl: a kernel without
        // griddepcontrol.wait (the paged pair) must not start before the op
        // before it ends; the op after it waits for it as for any primary.
        bool plain = false;
    };
    std::vector<Op> chain;
    struct StepChain {
        std::vector<Op> ops;
        std::unique_ptr<GraphExec> graph;
    };
    // By (T, H, A): T rows (1, 2, 4, 8, 16), the LM head over the last H of
    // them (0 or a bucket up to T), with A the argmax of each of those H
    // rows into step_best (H u64 keys, kx::argmax_index decodes them);
    // built at first use.
    std::map<std::tuple<uint32_t, uint32_t, bool>, StepChain> step_chains;
    DeviceBuffer step_best;
    PinnedBuffer step_best_host;
    // The chain (and under the graph schedule its graph) of `tokens` rows,
    // `logit_rows` of them last, whose logits are computed, and with
    // `argmax` their argmax keys.
    StepChain& step_chain(uint32_t tokens, uint32_t logit_rows, bool argmax = false);
    std::vector<Op> copy_op;   // kv_copy of one entry (a step's pool only)
    // One step's rows through the chain of their bucket (the checks of
    // CudaBackend::step, less the pool's).
    void run_step(std::span<const SeqStep> batch);
    void prepare_copies();
    // `ops` captured into a graph on `stream`.
    std::unique_ptr<GraphExec> capture(std::vector<Op>& ops);
    // The GEMV ops' operands (trace_gemvs): the buffers they read and write.
    struct GemvIo {
        size_t op = 0;
        kx::GemvShape shape;
        const Weight* norm = nullptr;
        std::vector<const Weight*> matrices;
        const DeviceBuffer* in = nullptr;
        std::vector<const DeviceBuffer*> outs;
        struct Gate {
            const DeviceBuffer* buf = nullptr;   // a gated output's multiplier (GemvShape::gated)
            size_t first = 0;                    // its first float in buf
        };
        Gate gate = {};                          // set after the op's other operands
    };
    std::vector<GemvIo> gemv_io;
    bool quantized = true;   // decode_plan's quantized_inputs
    std::vector<kx::OpGenerator> kinds;   // the distinct kernels, in chain order
    std::map<std::string, uint32_t> kind_of;
    Schedule schedule = Schedule::Graph;
    std::unique_ptr<GraphExec> graph;   // the chain, captured once (graph schedule)

    // The persistent schedule: one cooperative kernel walks `ops` (the chain
    // as a device-side table, kernels/decode/persistent.h).
    struct Persistent {
        Kernel kernel;
        ptx::LaunchGeometry geometry;   // grid: resident blocks (occupancy x SMs)
        ptx::ParamList params;
        DeviceBuffer ops, args, sync, ranges, stop_ids;
        MappedBuffer io;
        static constexpr uint32_t kMaxSteps = 256;   // tokens per launch (io's capacity)
        static constexpr uint32_t kMaxStop = 16;
    };
    std::unique_ptr<Persistent> persistent;
    CudaBackend::StreamStats stream_stats;

    // target.pdl: programmatic dependent launches (the ops open with griddepcontrol.wait).
    void launch_op(Op& op) {
        if (target.pdl && !op.plain) launch_programmatic(*op.fn, op.geometry, stream, op.args);
        else launch(*op.fn, op.geometry, stream, op.args);
    }
    void launch_chain() {
        for (Op& op : chain) launch_op(op);
    }

    // One token's id and position, as eval_argmax and start_greedy take them.
    void check_token(TokenId token, uint32_t pos) const {
        if (token < 0 || uint32_t(token) >= m.n_vocab)
            throw ModelError("token id " + std::to_string(token) + " is outside the vocabulary (0.." +
                             std::to_string(m.n_vocab - 1) + ")");
        if (pos >= n_ctx)
            throw ModelError("position " + std::to_string(pos) + " is past the context of " + std::to_string(n_ctx) +
                             " tokens");
    }

    // Checks one token and queues its (id, position) to the device state.
    void queue_state(TokenId token, uint32_t pos) {
        check_token(token, pos);
        ctx.make_current();
        auto* host = static_cast<uint32_t*>(state_host.data());
        put_state(host, token, pos);
        state.upload_async(host, 4 * state_words(), stream);
    }

    void build_persistent();
    void upload_op_table();
    // Queues one persistent launch of up to `steps` tokens from the state
    // already queued; n_stop ids at stop_ids end it early.
    void launch_persistent(uint32_t steps, uint32_t n_stop);
    const uint32_t* io_tokens() const {
        return reinterpret_cast<const uint32_t*>(static_cast<const uint8_t*>(persistent->io.data()) + kx::kPersistentIoHeader);
    }
    kx::PersistentIo* io() const { return static_cast<kx::PersistentIo*>(persistent->io.data()); }

    Impl(const Model& model, std::shared_ptr<const Driver> drv) : m(model), ctx(std::move(drv)), stream(ctx) {}

    DevPtr weight(const Weight& w) {
        auto it = weights.find(w.data);
        if (it != weights.end()) return DevPtr{it->second.ptr()};
        const kx::RowLayout l = kx::row_layout(w.type, uint32_t(w.cols));
        const std::vector<uint8_t> bytes = kx::repack_rows(l, w.data, w.rows);
        DeviceBuffer b(ctx, bytes.size());
        b.upload(bytes.data(), bytes.size());
        return DevPtr{weights.emplace(w.data, std::move(b)).first->second.ptr()};
    }
    DevPtr vector(const Weight& w) {
        const std::vector<float> f = to_floats(w);
        vectors.emplace_back(ctx, f.size() * 4);
        vectors.back().upload(f.data(), f.size() * 4);
        return DevPtr{vectors.back().ptr()};
    }
    static DevPtr ptr(const DeviceBuffer& b, size_t offset = 0) { return DevPtr{b.ptr() + offset}; }

    // One launch of the kernel `gen` makes; its module loaded unless `load` is false.
    Op make_op(const kx::OpGenerator& gen, const std::vector<ptx::ParamValue>& args, bool load = true) {
        const ptx::GeneratedKernel g = gen(target, nullptr);
        const Function* fn = nullptr;
        if (load) {
            auto it = kernels.find(g.name);
            if (it == kernels.end()) {
                Kernel k;
                k.module = std::make_unique<Module>(ctx, g.ptx);
                k.fn = std::make_unique<Function>(k.module->function(g.name));
                it = kernels.emplace(g.name, std::move(k)).first;
            }
            fn = it->second.fn.get();
        }
        return {g.name, fn, g.geometry, g.params.pack(args), 0, {}};
    }
    // Appends one launch of the kernel `gen` makes (a generator bound to its
    // shape, so the persistent schedule can emit it inline too).
    size_t add(const kx::OpGenerator& gen, const std::vector<ptx::ParamValue>& args) {
        chain.push_back(make_op(gen, args, schedule != Schedule::Persistent));
        auto [kit, fresh] = kind_of.emplace(chain.back().kernel, uint32_t(kinds.size()));
        if (fresh) kinds.push_back(gen);
        chain.back().kind = kit->second;
        return chain.size() - 1;
    }

    // The persistent schedule's per-head dependencies of one layer's
    // attention op (the rest wait for the whole op before them: those are the
    // true all-to-all points, a full vector in: QKV, output GEMV, gate/up,
    // down). Attention block (h, s) = h + s * n_head reads q head h and, for
    // the token's own row, k and v head h / group.
    void head_deps(const LayerPlan& lp, size_t qkv, size_t attention) {
        const kx::AttentionShape& a = lp.attention;
        const uint32_t hd = a.head_dim, q_dim = a.n_head * hd, kv_dim = a.n_head_kv * hd;
        const uint32_t rpb = kx::gemv_plan(lp.qkv).rows_per_block, group = a.n_head / a.n_head_kv;
        auto rows = [&](Op::Dep& d, uint32_t lo) {   // the qkv blocks holding rows [lo, lo + hd)
            d.ranges.insert(d.ranges.end(), {lo / rpb, (lo + hd - 1) / rpb - lo / rpb + 1, 1u});
        };
        Op::Dep q{uint32_t(qkv), {}}, k{uint32_t(qkv), {}}, v{uint32_t(qkv), {}};
        for (uint32_t s = 0; s < a.splits(); ++s)
            for (uint32_t h = 0; h < a.n_head; ++h) {
                rows(q, h * hd);
                rows(k, q_dim + h / group * hd);
                rows(v, q_dim + kv_dim + h / group * hd);
            }
        chain[attention].deps = {q, k, v};
    }

    // The same for the paged pair (one token row): paged_rope's virtual
    // block b serves head units [4b, 4b + 4) (query heads, then KV heads:
    // K and V), so it reads q rows of its query heads and k, v rows of its
    // KV heads (a range of none where it has none); paged_attention's
    // (split s, KV head g) = s + g * splits reads q_rot of g's group, written
    // by the rope blocks of those query heads, and this token's K/V slot of
    // head g, written by the rope block of unit n_head + g (earlier
    // positions: earlier tokens). Their other inputs and the buffers they
    // overwrite are the layer before's, which every QKV block waited for.
    void paged_deps(const LayerPlan& lp, size_t qkv, size_t rope, size_t attention) {
        const kx::PagedRopeShape& r = lp.rope;
        const uint32_t hd = r.head_dim, nh = r.n_head, nkv = r.n_head_kv, q_dim = nh * hd, kv_dim = nkv * hd;
        const uint32_t rpb = kx::gemv_plan(lp.qkv).rows_per_block, W = kx::kPagedRopeWarps;
        const uint32_t units = r.units(), rope_blocks = (units + W - 1) / W;
        if (r.tokens != 1 || chain[rope].geometry.grid.count() != rope_blocks)
            throw std::logic_error("paged_deps: a paged_rope grid of other than one token row");
        // The qkv blocks holding output rows [lo, hi), as a (first, count, 1) triple; none when empty.
        auto rows = [&](Op::Dep& d, uint32_t lo, uint32_t hi) {
            if (lo >= hi) d.ranges.insert(d.ranges.end(), {0u, 0u, 1u});
            else d.ranges.insert(d.ranges.end(), {lo / rpb, (hi - 1) / rpb - lo / rpb + 1, 1u});
        };
        Op::Dep q{uint32_t(qkv), {}}, k{uint32_t(qkv), {}}, v{uint32_t(qkv), {}};
        for (uint32_t b = 0; b < rope_blocks; ++b) {
            const uint32_t u0 = b * W, u1 = std::min(u0 + W, units);
            const uint32_t h0 = std::min(u0, nh), h1 = std::min(u1, nh);         // its query heads
            const uint32_t g0 = std::max(u0, nh) - nh, g1 = std::max(u1, nh) - nh;   // its KV heads
            rows(q, h0 * hd, h1 * hd);
            rows(k, q_dim + g0 * hd, q_dim + g1 * hd);
            rows(v, q_dim + kv_dim + g0 * hd, q_dim + kv_dim + g1 * hd);
        }
        chain[rope].deps = {q, k, v};
        const kx::PagedAttentionShape& a = lp.paged_attention;
        const uint32_t group = nh / nkv, hpb = a.heads_per_block(), subs = a.sub_groups();
        if (chain[attention].geometry.grid.count() != a.splits * nkv * subs)
            throw std::logic_error("paged_deps: a paged_attention grid of other than one token row");
        Op::Dep heads{uint32_t(rope), {}}, slot{uint32_t(rope), {}};
        for (uint32_t y = 0; y < nkv * subs; ++y)   // KV head g = y / subs, its sub-group y % subs
            for (uint32_t s = 0; s < a.splits; ++s) {   // virtual block s + y * splits
                const uint32_t g = y / subs, h0 = g * group + y % subs * hpb;
                const uint32_t first = h0 / W, last = (h0 + hpb - 1) / W;
                heads.ranges.insert(heads.ranges.end(), {first, last - first + 1, 1u});
                slot.ranges.insert(slot.ranges.end(), {(nh + g) / W, 1u, 1u});
            }
        // A shared-KV layer (q_only) reads an earlier layer's pages, this
        // token's slot included: written before this layer's QKV GEMV, which
        // waited for the whole op before it.
        chain[attention].deps = r.q_only ? std::vector<Op::Dep>{heads} : std::vector<Op::Dep>{heads, slot};
    }

};

}  // namespace ptxlm::cuda
