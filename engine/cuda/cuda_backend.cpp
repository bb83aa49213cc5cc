#include "engine/cuda/cuda_backend.h"

#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
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
    std::map<float, DeviceBuffer> rope_tables;         // by RoPE base
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
    uint32_t n_pages = 0, sync_heads = 0;   // sync_heads: paged_sync's u32 per layer
    DeviceBuffer page_table, q_rot, paged_part, paged_sync;
    // The device state one token reads, written per token from a pinned slot:
    // {token, pos}; under paged KV {pos, table row 0, token, 0}, so that its
    // first 8 bytes are the paged kernels' token descriptor (8-byte aligned).
    uint32_t state_words() const { return paged ? 4 : 2; }
    void put_state(uint32_t* slot, TokenId token, uint32_t pos) const {
        if (paged) {
            slot[0] = pos;
            slot[1] = 0;
            slot[2] = uint32_t(token);
            slot[3] = 0;
        } else {
            slot[0] = uint32_t(token);
            slot[1] = pos;
        }
    }

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
    // The GEMV ops' operands (trace_gemvs): the buffers they read and write.
    struct GemvIo {
        size_t op = 0;
        kx::GemvShape shape;
        const Weight* norm = nullptr;
        std::vector<const Weight*> matrices;
        const DeviceBuffer* in = nullptr;
        std::vector<const DeviceBuffer*> outs;
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

    // Appends one launch of the kernel `gen` makes (a generator bound to its
    // shape, so the persistent schedule can emit it inline too).
    size_t add(const kx::OpGenerator& gen, const std::vector<ptx::ParamValue>& args) {
        const ptx::GeneratedKernel g = gen(target, nullptr);
        auto [kit, fresh] = kind_of.emplace(g.name, uint32_t(kinds.size()));
        if (fresh) kinds.push_back(gen);
        const Function* fn = nullptr;
        if (schedule != Schedule::Persistent) {
            auto it = kernels.find(g.name);
            if (it == kernels.end()) {
                Kernel k;
                k.module = std::make_unique<Module>(ctx, g.ptx);
                k.fn = std::make_unique<Function>(k.module->function(g.name));
                it = kernels.emplace(g.name, std::move(k)).first;
            }
            fn = it->second.fn.get();
        }
        chain.push_back({g.name, fn, g.geometry, g.params.pack(args), kit->second, {}});
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

};

void CudaBackend::Impl::build_persistent() {
    auto ps = std::make_unique<Persistent>();
    const kx::PersistentKernel pk = kx::persistent_kernel(kinds, target);
    // The inline ops take the same arguments as the standalone kernels: the
    // records below are the chain's own argument packs (made from each
    // kind's standalone parameter list when the chain was built).
    for (const Op& op : chain) {
        const ptx::GeneratedKernel& in = pk.kinds[op.kind];
        if (in.params.size_bytes() != op.args.size() || in.geometry.grid != op.geometry.grid)
            throw std::logic_error("persistent decoder: op " + op.kernel + " differs inline from standalone");
    }
    ps->kernel.module = std::make_unique<Module>(ctx, pk.kernel.ptx);
    ps->kernel.fn = std::make_unique<Function>(ps->kernel.module->function(pk.kernel.name));
    const Function& fn = *ps->kernel.fn;
    ps->geometry = pk.kernel.geometry;
    ps->params = pk.kernel.params;
    const uint32_t threads = ps->geometry.block.x, shared = ps->geometry.shared_bytes;
    fn.reserve_dynamic_shared(shared);
    // As many blocks as can be resident at once (asked of the driver, never
    // assumed): every block must run concurrently for the waits to finish.
    const int per_sm = fn.max_active_blocks_per_sm(threads, shared);
    const cuda::DeviceInfo& dev = ctx.info();
    if (per_sm < 1)
        throw ModelError("the persistent decoder does not fit on an SM of " + dev.name + ": " + std::to_string(threads) +
                         " threads, " + std::to_string(shared) + " bytes of shared memory, " +
                         std::to_string(fn.num_regs()) + " registers per thread; use --schedule graph");
    ps->geometry.grid = {uint32_t(per_sm) * uint32_t(dev.sm_count), 1, 1};

    ps->stop_ids = DeviceBuffer(ctx, Persistent::kMaxStop * 4);
    ps->io = MappedBuffer(ctx, kx::kPersistentIoHeader + Persistent::kMaxSteps * 4);
    persistent = std::move(ps);
    upload_op_table();
}

// The op table: each op's packed arguments in one buffer, each record
// pointing at its own, with its dependencies (default: the whole op before it).
void CudaBackend::Impl::upload_op_table() {
    Persistent* ps = persistent.get();
    std::vector<uint8_t> blob;
    std::vector<size_t> offsets;
    for (const Op& op : chain) {
        blob.resize((blob.size() + 7) / 8 * 8);
        offsets.push_back(blob.size());
        const auto* b = reinterpret_cast<const uint8_t*>(op.args.data());
        blob.insert(blob.end(), b, b + op.args.size());
    }
    // The kernel copies each op's record at the largest record's size: pad
    // the end so the last op's copy stays inside the buffer.
    size_t largest = 8;
    for (const Op& op : chain) largest = std::max(largest, op.args.size());
    blob.resize((blob.size() + 7) / 8 * 8 + largest, 0);
    ps->args = DeviceBuffer(ctx, blob.size());
    ps->args.upload(blob.data(), blob.size());
    std::vector<kx::OpRecord> records(chain.size());
    std::vector<uint32_t> ranges;
    uint32_t flags = 0;
    for (size_t i = 0; i < chain.size(); ++i) {
        const Op& op = chain[i];
        kx::OpRecord& r = records[i];
        r.kind = op.kind;
        r.grid_x = op.geometry.grid.x;
        r.vblocks = uint32_t(op.geometry.grid.x * op.geometry.grid.y);
        r.flag_base = flags;
        flags += r.vblocks;
        if (op.deps.empty() && i) {   // the whole op before it: its output, or buffers it reuses
            r.n_deps = 1;
            r.deps[0] = uint32_t(i - 1);
            r.ranges[0] = kx::kAllBlocks;
        }
        if (op.deps.size() > kx::kMaxDeps) throw std::logic_error("persistent decoder: too many dependencies");
        for (const Op::Dep& d : op.deps) {
            if (d.ranges.size() != 3ull * r.vblocks || d.op >= i)
                throw std::logic_error("persistent decoder: a bad dependency of op " + op.kernel);
            r.deps[r.n_deps] = d.op;
            r.ranges[r.n_deps++] = uint32_t(ranges.size());
            ranges.insert(ranges.end(), d.ranges.begin(), d.ranges.end());
        }
        r.args = ps->args.ptr() + offsets[i];
    }
    ps->ranges = DeviceBuffer(ctx, std::max<size_t>(ranges.size(), 1) * 4);
    if (!ranges.empty()) ps->ranges.upload(ranges.data(), ranges.size() * 4);
    ps->ops = DeviceBuffer(ctx, records.size() * sizeof(kx::OpRecord));
    ps->ops.upload(records.data(), records.size() * sizeof(kx::OpRecord));
    ps->sync = DeviceBuffer(ctx, kx::persistent_sync_bytes(uint32_t(chain.size()), flags));
}

void CudaBackend::Impl::launch_persistent(uint32_t steps, uint32_t n_stop) {
    Persistent& ps = *persistent;
    ps.sync.fill_bytes_async(0, stream);   // counters are monotonic within a launch
    ptx::ParamPack args = ps.params.pack({DevPtr{ps.ops.ptr()}, uint32_t(chain.size()), DevPtr{ps.sync.ptr()},
                                          DevPtr{ps.ranges.ptr()}, DevPtr{state.ptr()}, DevPtr{best.ptr()}, DevPtr{ps.io.device_ptr()}, steps,
                                          DevPtr{ps.stop_ids.ptr()}, n_stop});
    launch_cooperative(*ps.kernel.fn, launch_dims(ps.geometry), stream, args.args());
}

CudaBackend::CudaBackend(const Model& m, std::shared_ptr<const Driver> driver, uint32_t n_ctx, Schedule schedule,
                         GpuArithmetic path, std::string* note, GpuTuning tuning)
    : p_(std::make_unique<Impl>(m, std::move(driver))) {
    Impl& p = *p_;
    p.schedule = schedule == Schedule::Default ? Schedule::Graph : schedule;
    p.quantized = quantized_gemvs(path);
    const cuda::DeviceInfo& dev = p.ctx.info();
    const unsigned sm = unsigned(dev.cc_major * 10 + dev.cc_minor);
    if (sm < 80) throw ModelError(dev.name + " is sm_" + std::to_string(sm) + "; the GPU path needs sm_80 or newer");
    p.target = ptx::Target::parse("sm_" + std::to_string(std::min(sm, 90u)));
    p.target.prefetch = tuning.prefetch;
    if (tuning.pdl) {
        if (sm < 90)
            throw ModelError("--gpu-pdl: programmatic dependent launch needs sm_90; " + dev.name + " is sm_" +
                             std::to_string(sm));
        if (p.schedule == Schedule::Persistent)
            throw ModelError("--gpu-pdl: the persistent schedule is one launch; use it with --schedule graph or chain");
        p.target.pdl = true;
    }
    if (tuning.paged_kv && p.schedule == Schedule::Persistent)
        throw ModelError("paged KV is not supported under the persistent schedule yet; use --schedule graph or chain");
    p.paged = tuning.paged_kv;
    const HParams& hp = m.hp;
    const uint32_t E = hp.n_embd, hd = m.head_dim;
    decode_plan(m, 1, p.quantized, uint32_t(dev.sm_count), p.paged);   // refuses what the GPU path cannot run before anything is allocated

    // The memory plan, against the device's free memory, before allocating.
    uint64_t max_q = 0, max_kv = 0, max_ff = 0, kv_per_token = 0, weight_bytes = 0;
    for (uint32_t il = 0; il < m.layers.size(); ++il) {
        max_q = std::max<uint64_t>(max_q, uint64_t(m.layers[il].n_head) * hd);
        max_kv = std::max<uint64_t>(max_kv, m.kv_dim(il));
        max_ff = std::max<uint64_t>(max_ff, m.layers[il].n_ff);
        kv_per_token += 2ull * m.kv_dim(il) * 2;
    }
    m.for_each_weight([&](const Weight& w) {
        weight_bytes += w.rows == 1 ? w.cols * 4 : uint64_t(kx::row_layout(w.type, uint32_t(w.cols)).row_bytes) * w.rows;
    });
    std::map<float, int> bases;
    for (const LayerDesc& l : m.layers) bases[l.rope_base] = 1;
    const uint64_t per_token = kv_per_token + bases.size() * uint64_t(m.n_rot) * 4;   // KV + RoPE tables
    // (Paged KV rounds the context up to whole pages: at most kKvPageSize - 1 more positions.)
    const uint64_t fixed = weight_bytes + 4 * (3 * E + 3 * max_q + 2 * max_kv + max_ff + m.n_vocab) + (64 << 20) +
                           (p.paged ? uint64_t(kKvPageSize) * kv_per_token : 0);
    const Context::MemoryInfo mem = p.ctx.memory_info();
    const uint32_t want = n_ctx ? n_ctx : (hp.n_ctx_train ? hp.n_ctx_train : 4096);
    const uint64_t fits = mem.free > fixed ? (mem.free - fixed) / per_token : 0;
    if (fits < want) {
        const std::string numbers = "weights " + format_bytes(weight_bytes) + " + " + format_bytes(per_token) +
                                    " per token of context; " + format_bytes(mem.free) + " free on " + dev.name;
        if (n_ctx || fits < 256)
            throw ModelError("the model with a context of " + std::to_string(want) + " tokens does not fit: " + numbers +
                             (fits >= 256 ? "; at most -c " + std::to_string(fits) + " fits" : ""));
        p.n_ctx = uint32_t(fits / 256 * 256);
        if (note) *note = "context capped to " + std::to_string(p.n_ctx) + " by device memory (" + numbers + ")";
    } else {
        p.n_ctx = want;
    }
    const uint32_t C = p.n_ctx;

    // Weights, with progress (the upload of a large model takes a while).
    const bool tty = isatty(STDERR_FILENO);
    uint64_t done = 0;
    auto progress = [&](uint64_t add) {
        done += add;
        if (tty) std::fprintf(stderr, "\rptxlm: uploading weights %3.0f%%", 100.0 * double(done) / double(weight_bytes));
    };
    std::vector<DevPtr> attn_norm, wq, wk, wv, wo, bq, bk, bv, qn, kn, post_attn, ffn_norm, wg, wu, wd, post_ffn;
    for (const LayerDesc& l : m.layers) {
        attn_norm.push_back(p.vector(l.attn_norm));
        ffn_norm.push_back(p.vector(l.ffn_norm));
        for (auto [w, dst] : {std::pair{&l.wq, &wq}, {&l.wk, &wk}, {&l.wv, &wv}, {&l.wo, &wo}, {&l.gate, &wg},
                              {&l.up, &wu}, {&l.down, &wd}}) {
            dst->push_back(p.weight(*w));
            progress(w->rows * w->row_bytes);
        }
        bq.push_back(l.bq ? p.vector(l.bq) : DevPtr{});
        bk.push_back(l.bk ? p.vector(l.bk) : DevPtr{});
        bv.push_back(l.bv ? p.vector(l.bv) : DevPtr{});
        qn.push_back(l.q_norm ? p.vector(l.q_norm) : DevPtr{});
        kn.push_back(l.k_norm ? p.vector(l.k_norm) : DevPtr{});
        post_attn.push_back(l.attn_post_norm ? p.vector(l.attn_post_norm) : DevPtr{});
        post_ffn.push_back(l.ffn_post_norm ? p.vector(l.ffn_post_norm) : DevPtr{});
    }
    const DevPtr embd = p.weight(m.tok_embd), out_norm = p.vector(m.output_norm), out = p.weight(m.output);
    progress(m.tok_embd.rows * m.tok_embd.row_bytes);
    if (tty) std::fprintf(stderr, "\rptxlm: uploading weights 100%%\n");

    // RoPE tables: cos, sin of (pos · freq_scale) · rate, in double then f32,
    // times the magnitude (YaRN's), as the CPU's rope() takes them.
    for (const auto& [base, unused] : bases) {
        (void)unused;
        // n_rot/2 pairs a position (partial rotary: the rest of a head is not rotated).
        const std::vector<double> inv = rope_rates(m, base, C);
        const size_t rp = inv.size();
        std::vector<float> t(size_t(C) * 2 * rp);
        for (uint32_t pos = 0; pos < C; ++pos) {
            const double ps = double(pos) * m.rope_freq_scale;
            for (size_t i = 0; i < rp; ++i) {
                const auto [c, s] = rope_cos_sin(ps * inv[i], m.rope_mscale);
                t[(size_t(pos) * rp + i) * 2] = c;
                t[(size_t(pos) * rp + i) * 2 + 1] = s;
            }
        }
        DeviceBuffer b(p.ctx, t.size() * 4);
        b.upload(t.data(), t.size() * 4);
        p.rope_tables.emplace(base, std::move(b));
    }
    // The KV cache: C positions a layer, or under paged KV kv_pages(C) whole pages.
    p.n_pages = p.paged ? kv_pages(C) : 0;
    const size_t kv_positions = p.paged ? size_t(p.n_pages) * kKvPageSize : C;
    for (uint32_t il = 0; il < m.layers.size(); ++il) {
        p.k_cache.emplace_back(p.ctx, kv_positions * m.kv_dim(il) * 2);
        p.v_cache.emplace_back(p.ctx, kv_positions * m.kv_dim(il) * 2);
    }
    uint32_t max_heads = 0;
    for (const LayerDesc& l : m.layers) max_heads = std::max(max_heads, l.n_head);
    const uint32_t splits = (C + kAttentionChunk - 1) / kAttentionChunk;
    p.x = DeviceBuffer(p.ctx, E * 4);
    p.q = DeviceBuffer(p.ctx, max_q * 4);
    p.k = DeviceBuffer(p.ctx, max_kv * 4);
    p.v = DeviceBuffer(p.ctx, max_kv * 4);
    p.att = DeviceBuffer(p.ctx, max_q * 4);
    p.o = DeviceBuffer(p.ctx, E * 4);
    p.h = DeviceBuffer(p.ctx, max_ff * 4);
    p.logits = DeviceBuffer(p.ctx, size_t(m.n_vocab) * 4);
    p.part = DeviceBuffer(p.ctx, size_t(max_heads) * splits * (hd + 2) * 4);
    p.att_sync = DeviceBuffer(p.ctx, size_t(m.layers.size()) * max_heads * 4);
    p.att_sync.fill_bytes(0);
    p.state = DeviceBuffer(p.ctx, 4 * p.state_words());
    p.state_host = PinnedBuffer(p.ctx, 4 * p.state_words() * kMaxBatch);   // one state per token of a batch
    p.best = DeviceBuffer(p.ctx, 8);
    p.best_host = PinnedBuffer(p.ctx, 8);
    const DevPtr token_ptr = Impl::ptr(p.state, p.paged ? 8 : 0), pos_ptr = Impl::ptr(p.state, p.paged ? 0 : 4);
    const DevPtr desc_ptr = Impl::ptr(p.state);   // paged KV: {pos, table row}
    const DevPtr X = Impl::ptr(p.x), Q = Impl::ptr(p.q), K = Impl::ptr(p.k), V = Impl::ptr(p.v), ATT = Impl::ptr(p.att),
                 O = Impl::ptr(p.o), H = Impl::ptr(p.h), PART = Impl::ptr(p.part);

    // The chain, from the plan; the GEMV grids sized for this device's SMs.
    const DecodePlan plan = decode_plan(m, C, p.quantized, uint32_t(dev.sm_count), p.paged);
    if (p.paged) {
        // One sequence: table row 0 holds pages 0..n_pages-1 in order (pos /
        // kKvPageSize is its page). Workspaces sized for the widest layer.
        std::vector<uint32_t> row(p.n_pages);
        for (uint32_t i = 0; i < p.n_pages; ++i) row[i] = i;
        p.page_table = DeviceBuffer(p.ctx, row.size() * 4);
        p.page_table.upload(row.data(), row.size() * 4);
        uint64_t part_floats = 0;
        for (const LayerPlan& lp : plan.layers) {
            const kx::PagedAttentionShape& a = lp.paged_attention;
            part_floats = std::max<uint64_t>(part_floats, uint64_t(a.n_head) * a.splits * (a.head_dim + 4));
            p.sync_heads = std::max(p.sync_heads, a.n_head_kv);
        }
        p.q_rot = DeviceBuffer(p.ctx, max_q * 4);
        p.paged_part = DeviceBuffer(p.ctx, part_floats * 4);
        p.paged_sync = DeviceBuffer(p.ctx, size_t(m.layers.size()) * p.sync_heads * 4);
        p.paged_sync.fill_bytes(0);
        p.state.fill_bytes(0);   // the table row word: 0, also before the first token's copy
    }
    // A generator bound to its shape: called standalone here, inline by the persistent kernel.
    auto bind = [](auto fn, auto shape) -> kx::OpGenerator {
        return [fn, shape](const ptx::Target& t, const kx::InlineTarget* in) { return fn(shape, t, in); };
    };
    p.add(bind(kx::embed_kernel, plan.embed), {embd, token_ptr, X});
    for (uint32_t il = 0; il < m.layers.size(); ++il) {
        const LayerPlan& lp = plan.layers[il];
        const DevPtr kc = Impl::ptr(p.k_cache[il]), vc = Impl::ptr(p.v_cache[il]);
        const LayerDesc& l = m.layers[il];
        const size_t qkv_op = p.add(bind(kx::gemv_kernel, lp.qkv), {X, attn_norm[il], wq[il], Q, wk[il], K, wv[il], V});
        p.gemv_io.push_back({qkv_op, lp.qkv, &l.attn_norm, {&l.wq, &l.wk, &l.wv}, &p.x, {&p.q, &p.k, &p.v}});
        const DevPtr rope = Impl::ptr(p.rope_tables.at(m.layers[il].rope_base));
        if (lp.paged) {
            // RoPE + the K/V append into the pages, then attention over them:
            // the same inputs as the contiguous op (biases, norms, the table).
            const DevPtr table = Impl::ptr(p.page_table), QR = Impl::ptr(p.q_rot);
            std::vector<ptx::ParamValue> ra = {desc_ptr, table, Q, K, V};
            if (lp.rope.bias) ra.insert(ra.end(), {bq[il], bk[il], bv[il]});
            if (lp.rope.qk_norm) ra.insert(ra.end(), {qn[il], kn[il]});
            ra.insert(ra.end(), {rope, kc, vc, QR});
            p.chain[p.add(paged_rope_op(lp.rope), ra)].plain = true;
            p.chain[p.add(paged_attention_op(lp.paged_attention),
                          {desc_ptr, table, QR, kc, vc, Impl::ptr(p.paged_part),
                           Impl::ptr(p.paged_sync, size_t(il) * p.sync_heads * 4), ATT})]
                .plain = true;
        } else {
            std::vector<ptx::ParamValue> aa = {Q, K, V};
            if (lp.attention.bias) aa.insert(aa.end(), {bq[il], bk[il], bv[il]});
            if (lp.attention.qk_norm) aa.insert(aa.end(), {qn[il], kn[il]});
            aa.insert(aa.end(), {rope, pos_ptr, kc, vc, PART, Impl::ptr(p.att_sync, size_t(il) * max_heads * 4), ATT});
            p.head_deps(lp, qkv_op, p.add(bind(kx::attention_kernel, lp.attention), aa));
        }
        p.gemv_io.push_back({p.add(bind(kx::gemv_kernel, lp.wo), {ATT, wo[il], lp.post_attn_norm ? O : X}), lp.wo, nullptr,
                             {&l.wo}, &p.att, {lp.post_attn_norm ? &p.o : &p.x}});
        if (lp.post_attn_norm) p.add(bind(kx::add_norm_kernel, plan.add_norm), {X, O, post_attn[il]});
        p.gemv_io.push_back({p.add(bind(kx::gemv_kernel, lp.gate_up), {X, ffn_norm[il], wg[il], wu[il], H}), lp.gate_up,
                             &l.ffn_norm, {&l.gate, &l.up}, &p.x, {&p.h}});
        p.gemv_io.push_back({p.add(bind(kx::gemv_kernel, lp.down), {H, wd[il], lp.post_ffn_norm ? O : X}), lp.down, nullptr,
                             {&l.down}, &p.h, {lp.post_ffn_norm ? &p.o : &p.x}});
        if (lp.post_ffn_norm) p.add(bind(kx::add_norm_kernel, plan.add_norm), {X, O, post_ffn[il]});
    }
    p.gemv_io.push_back({p.add(bind(kx::gemv_kernel, plan.head), {X, out_norm, out, Impl::ptr(p.logits)}), plan.head,
                         &m.output_norm, {&m.output}, &p.x, {&p.logits}});
    // Greedy decoding reads only this: the argmax key of the logits.
    p.add([](const ptx::Target& t, const kx::InlineTarget* in) { return kx::clear_u64_kernel(t, in); },
          {Impl::ptr(p.best)});
    p.add(bind(kx::argmax_kernel, kx::ArgmaxShape{m.n_vocab}), {Impl::ptr(p.logits), Impl::ptr(p.best)});

    if (p.schedule == Schedule::Persistent) p.build_persistent();
    if (p.schedule == Schedule::Graph) {
        // Captured once: the launches read the token and position from device
        // memory, so the same graph serves every token.
        p.stream.begin_capture();
        try {
            p.launch_chain();
        } catch (...) {
            try {
                p.stream.end_capture();
            } catch (...) {
            }
            throw;
        }
        Graph g = p.stream.end_capture();
        p.graph = std::make_unique<GraphExec>(g.instantiate());
    }
}

CudaBackend::~CudaBackend() = default;

std::string CudaBackend::description() const {
    const cuda::DeviceInfo& d = p_->ctx.info();
    return "CUDA " + d.name + " (sm_" + std::to_string(d.cc_major * 10 + d.cc_minor) + ", " + std::to_string(d.sm_count) +
           " SMs), " + schedule_name(p_->schedule) + " schedule, " + std::to_string(p_->chain.size()) +
           (p_->persistent ? " ops per token in one launch of " + std::to_string(p_->persistent->geometry.grid.x) +
                                 " blocks x " + std::to_string(p_->persistent->geometry.block.x) + " threads"
                           : " kernels per token") +
           (p_->target.pdl ? " launched programmatically" : "") +
           (!p_->target.prefetch         ? ""
            : p_->persistent ? ", GEMVs prefetching their first weights before waiting for their inputs"
                             : ", GEMVs prefetching their first weights") +
           ", " + (p_->quantized ? "8-bit" : "f32") + " GEMV inputs, KV f16" +
           (p_->paged ? " in " + std::to_string(p_->n_pages) + " pages of " + std::to_string(kKvPageSize) +
                            " (paged attention)"
                      : "");
}

ptxlm::DeviceInfo CudaBackend::device_info() const {
    const cuda::DeviceInfo& d = p_->ctx.info();
    ptxlm::DeviceInfo i;
    i.kind = "cuda";
    i.name = d.name;
    i.units = d.sm_count;
    i.kv_type = "f16";
    i.kv_bytes_per_el = 2;
    i.schedule = schedule_name(p_->schedule);
    i.gpu_path = p_->quantized ? "quantized" : "reference";
    i.peak_gbs = d.peak_bandwidth_gbs();
    return i;
}

uint32_t CudaBackend::n_ctx() const { return p_->n_ctx; }
uint32_t CudaBackend::n_vocab() const { return p_->m.n_vocab; }
size_t CudaBackend::launches_per_token() const { return p_->persistent ? 1 : p_->chain.size(); }
size_t CudaBackend::ops_per_token() const { return p_->chain.size(); }
uint32_t CudaBackend::persistent_blocks() const { return p_->persistent ? p_->persistent->geometry.grid.x : 0; }
size_t CudaBackend::all_to_all_waits() const {
    size_t n = 0;
    for (const Launch& l : launches()) n += l.all_to_all_waits;
    return n;
}

TokenId CudaBackend::eval_argmax(TokenId token, uint32_t pos) {
    Impl& p = *p_;
    p.queue_state(token, pos);
    if (p.persistent) {
        // One step; the kernel's advance publishes the argmax to mapped memory.
        p.launch_persistent(1, 0);
        p.stream.synchronize();
        return TokenId(std::atomic_ref<const uint32_t>(p.io_tokens()[0]).load(std::memory_order_acquire));
    }
    if (p.graph) p.graph->launch(p.stream);
    else p.launch_chain();
    p.best.download_async(p.best_host.data(), 8, p.stream);
    p.stream.synchronize();
    return TokenId(kx::argmax_index(*static_cast<const uint64_t*>(p.best_host.data())));
}
Schedule CudaBackend::schedule() const { return p_->schedule; }

std::vector<CudaBackend::OpTime> CudaBackend::time_ops(TokenId token, uint32_t pos, uint32_t reps) {
    Impl& p = *p_;
    if (p.persistent) throw std::logic_error("time_ops: the persistent schedule has no standalone ops");
    if (reps == 0) throw std::invalid_argument("time_ops: no repetitions");
    const size_t n = p.chain.size();
    std::vector<Event> marks;
    for (size_t i = 0; i <= n; ++i) marks.emplace_back(p.ctx);
    std::vector<OpTime> out(n);
    for (uint32_t r = 0; r < reps; ++r) {
        p.queue_state(token, pos);
        for (size_t i = 0; i < n; ++i) {
            marks[i].record(p.stream);
            p.launch_op(p.chain[i]);
        }
        marks[n].record(p.stream);
        marks[n].synchronize();
        for (size_t i = 0; i < n; ++i) {
            const double us = 1e3 * Event::elapsed_ms(marks[i], marks[i + 1]);
            out[i].us_mean += us / reps;
            out[i].us_min = r ? std::min(out[i].us_min, us) : us;
        }
    }
    return out;
}

std::vector<CudaBackend::GemvTrace> CudaBackend::trace_gemvs(TokenId token, uint32_t pos) {
    Impl& p = *p_;
    if (p.persistent) throw std::logic_error("trace_gemvs: the persistent schedule has no standalone ops");
    p.queue_state(token, pos);
    p.stream.synchronize();
    auto read = [](const DeviceBuffer* b, size_t n) {
        std::vector<float> v(n);
        b->download(v.data(), n * 4);
        return v;
    };
    std::vector<GemvTrace> out;
    size_t next = 0;   // the next GemvIo, in chain order
    for (size_t i = 0; i < p.chain.size(); ++i) {
        Impl::Op& op = p.chain[i];
        const Impl::GemvIo* io = next < p.gemv_io.size() && p.gemv_io[next].op == i ? &p.gemv_io[next++] : nullptr;
        GemvTrace t;
        if (io) {
            t = {i, op.kernel, io->shape, io->norm, io->matrices, read(io->in, io->shape.n_in), {}, {}};
            // The outputs: one per segment, or the pairs' one under a GLU.
            const bool glu = io->shape.glu != kx::Glu::None;
            for (size_t o = 0; o < io->outs.size(); ++o)
                t.before.push_back(read(io->outs[o], io->shape.segments[glu ? 0 : o].rows));
        }
        p.launch_op(op);
        p.stream.synchronize();
        if (!io) continue;
        for (size_t o = 0; o < io->outs.size(); ++o) t.after.push_back(read(io->outs[o], t.before[o].size()));
        out.push_back(std::move(t));
    }
    return out;
}

void CudaBackend::fill_kv_for_count(uint32_t from, uint32_t to) {
    Impl& p = *p_;
    if (from > to || to > p.n_ctx)
        throw std::invalid_argument("fill_kv_for_count: positions [" + std::to_string(from) + ", " + std::to_string(to) +
                                    ") are not inside the context of " + std::to_string(p.n_ctx));
    p.ctx.make_current();
    uint64_t state = 0x9e3779b97f4a7c15ull;
    std::vector<uint16_t> host, pages;
    for (size_t il = 0; il < p.k_cache.size(); ++il) {
        const size_t dim = p.m.kv_dim(uint32_t(il)), hd = p.m.head_dim, nkv = dim / hd;
        host.resize(size_t(to - from) * dim);
        for (DeviceBuffer* cache : {&p.k_cache[il], &p.v_cache[il]}) {
            // The same values at the same positions either way ([pos][kv_head·hd] here).
            for (uint16_t& h : host) {
                state = state * 6364136223846793005ull + 1442695040888963407ull;
                h = f32_to_f16(float(int64_t(state >> 40) - (1 << 23)) / float(1 << 23));
            }
            if (!p.paged) {
                cache->upload(host.data(), host.size() * 2, size_t(from) * dim * 2);
                continue;
            }
            if (from == to) continue;
            // Pages [from / P, ⌈to / P⌉) are contiguous in the pool (the table is
            // the identity): read them, place each position's heads, write them back.
            const size_t P = kKvPageSize, first = from / P, last = (size_t(to) + P - 1) / P, page_els = P * dim;
            pages.resize((last - first) * page_els);
            cache->download(pages.data(), pages.size() * 2, first * page_els * 2);
            for (size_t pos = from; pos < to; ++pos)
                for (size_t g = 0; g < nkv; ++g)
                    std::copy_n(host.data() + (pos - from) * dim + g * hd, hd,
                                pages.data() + (pos / P - first) * page_els + (g * P + pos % P) * hd);
            cache->upload(pages.data(), pages.size() * 2, first * page_els * 2);
        }
    }
}

size_t CudaBackend::drop_dependency_for_test(const std::string& prefix, size_t dep) {
    if (!p_->persistent) throw std::logic_error("drop_dependency_for_test: not the persistent schedule");
    size_t changed = 0;
    for (Impl::Op& op : p_->chain)
        if (op.kernel.starts_with(prefix) && dep < op.deps.size()) {
            op.deps.erase(op.deps.begin() + long(dep));
            ++changed;
        }
    p_->stream.synchronize();   // no launch may read the table being replaced
    p_->upload_op_table();
    return changed;
}

void CudaBackend::poke_page_table_for_test(uint32_t index, uint32_t page) {
    Impl& p = *p_;
    if (!p.paged) throw std::logic_error("poke_page_table_for_test: not paged KV");
    if (index >= p.n_pages || page >= p.n_pages)
        throw std::out_of_range("poke_page_table_for_test: entry " + std::to_string(index) + " or page " +
                                std::to_string(page) + " outside the " + std::to_string(p.n_pages) + " pages");
    p.ctx.make_current();
    p.stream.synchronize();   // no queued launch may read the entry being replaced
    p.page_table.upload(&page, 4, size_t(index) * 4);
}

std::vector<CudaBackend::Launch> CudaBackend::launches() const {
    const std::vector<Impl::Op>& chain = p_->chain;
    auto gather = [&](size_t producer) { return p_->persistent && chain[producer].geometry.grid.count() > 1; };
    std::vector<Launch> out;
    for (size_t i = 0; i < chain.size(); ++i) {
        const Impl::Op& op = chain[i];
        uint32_t a2a = 0;
        if (op.deps.empty() && i) a2a += gather(i - 1);   // the whole op before it (upload_op_table's default)
        for (const Impl::Op::Dep& d : op.deps) a2a += d.ranges.empty() && gather(d.op);
        out.push_back({op.kernel, op.geometry.grid.count(), uint32_t(op.geometry.block.count()), op.geometry.shared_bytes, a2a});
    }
    return out;
}

CudaBackend::StreamStats CudaBackend::stream_stats() const { return p_->stream_stats; }

std::vector<uint64_t> CudaBackend::weight_buffers() const {
    std::vector<uint64_t> out;
    for (const auto& [host, buf] : p_->weights) out.push_back(buf.ptr());
    return out;
}

void CudaBackend::eval_batch(std::span<const TokenId> tokens, uint32_t pos, float* logits, uint32_t n_logits) {
    Impl& p = *p_;
    const uint32_t n = uint32_t(tokens.size());
    if (n == 0) return;
    if (n > max_batch()) throw std::invalid_argument("eval_batch: more than " + std::to_string(max_batch()) + " tokens");
    if (logits && (n_logits == 0 || n_logits > n)) throw std::invalid_argument("eval_batch: bad n_logits");
    for (TokenId t : tokens)
        if (t < 0 || uint32_t(t) >= p.m.n_vocab)
            throw ModelError("token id " + std::to_string(t) + " is outside the vocabulary (0.." +
                             std::to_string(p.m.n_vocab - 1) + ")");
    if (uint64_t(pos) + n > p.n_ctx)
        throw ModelError("position " + std::to_string(pos + n - 1) + " is past the context of " +
                         std::to_string(p.n_ctx) + " tokens");
    p.ctx.make_current();
    // Every token's (id, position) gets its own pinned slot, so the whole
    // batch is queued at once: copy the slot to the device state, run the
    // chain, copy the logits asked for; one synchronisation at the end.
    auto* host = static_cast<uint32_t*>(p.state_host.data());
    const uint32_t w = p.state_words();
    for (uint32_t i = 0; i < n; ++i) p.put_state(host + w * i, tokens[i], pos + i);
    for (uint32_t i = 0; i < n; ++i) {
        p.state.upload_async(host + w * i, 4 * w, p.stream);
        if (p.persistent) p.launch_persistent(1, 0);
        else if (p.graph) p.graph->launch(p.stream);
        else p.launch_chain();
        if (logits && i >= n - n_logits)
            p.logits.download_async(logits + size_t(i - (n - n_logits)) * p.m.n_vocab, size_t(p.m.n_vocab) * 4, p.stream);
    }
    p.stream.synchronize();
}

}  // namespace ptxlm::cuda

namespace ptxlm::cuda {

namespace {

// Greedy decoding on the persistent decoder: launches of up to kMaxSteps
// tokens, each streaming its tokens through mapped memory while it runs.
class PersistentStream final : public Backend::GreedyStream {
public:
    PersistentStream(CudaBackend::Impl& p, TokenId token, uint32_t pos, uint32_t budget, std::span<const TokenId> stop)
        : p_(p), token_(token), pos_(pos), budget_(budget), n_stop_(uint32_t(stop.size())) {
        p_.stream_stats.cancelled = false;
        std::vector<uint32_t> ids(stop.begin(), stop.end());
        if (!ids.empty()) p_.persistent->stop_ids.upload(ids.data(), ids.size() * 4);
    }
    ~PersistentStream() override {
        if (!running_) return;
        // Stop the device within a token and wait for it: the stream's
        // buffers and the KV cache must not be in use when we return.
        CudaBackend::StreamStats& st = p_.stream_stats;
        st.cancelled = true;
        st.produced_at_cancel = std::atomic_ref<uint32_t>(p_.io()->produced).load(std::memory_order_acquire);
        std::atomic_ref<uint32_t>(p_.io()->cancel).store(1, std::memory_order_release);
        try {
            p_.stream.synchronize();
        } catch (const std::exception& e) {
            std::fprintf(stderr, "ptxlm: stopping the persistent decoder: %s\n", e.what());
        }
        st.produced_after_cancel = std::atomic_ref<uint32_t>(p_.io()->produced).load(std::memory_order_acquire);
    }

    std::optional<TokenId> next() override {
        using namespace std::chrono_literals;
        for (;;) {
            if (!running_) {
                if (ended_ || budget_ == 0) return std::nullopt;
                start();
            }
            const uint32_t produced = std::atomic_ref<uint32_t>(p_.io()->produced).load(std::memory_order_acquire);
            if (seen_ < produced) {
                const TokenId t = TokenId(std::atomic_ref<const uint32_t>(p_.io_tokens()[seen_]).load(std::memory_order_relaxed));
                ++seen_;
                --budget_;
                token_ = t;
                ++pos_;
                ++p_.stream_stats.tokens;
                if (!p_.stream.idle()) ++p_.stream_stats.tokens_while_running;
                return t;
            }
            if (p_.stream.idle()) {
                // The launch ended: a stop id or its step count (or a fault, which idle() threw).
                running_ = false;
                const uint32_t final_count = std::atomic_ref<uint32_t>(p_.io()->produced).load(std::memory_order_acquire);
                if (seen_ < final_count) continue;
                ended_ = std::atomic_ref<uint32_t>(p_.io()->stopped).load(std::memory_order_acquire) != 2;
                continue;
            }
            std::this_thread::sleep_for(20us);
        }
    }

private:
    void start() {
        using Persistent = CudaBackend::Impl::Persistent;
        const uint32_t steps = std::min(budget_, Persistent::kMaxSteps);
        kx::PersistentIo* io = p_.io();   // no launch is running: the host owns it
        io->produced = io->cancel = io->stopped = 0;
        auto* host = static_cast<uint32_t*>(p_.state_host.data());
        p_.put_state(host, token_, pos_);
        p_.state.upload_async(host, 4 * p_.state_words(), p_.stream);
        p_.launch_persistent(steps, n_stop_);
        ++p_.stream_stats.launches;
        seen_ = 0;
        running_ = true;
    }

    CudaBackend::Impl& p_;
    TokenId token_;      // the next launch's input
    uint32_t pos_;       // its position
    uint32_t budget_;    // tokens still to produce
    uint32_t n_stop_;
    uint32_t seen_ = 0;  // tokens of the current launch handed out
    bool running_ = false, ended_ = false;
};

}  // namespace

std::unique_ptr<Backend::GreedyStream> CudaBackend::start_greedy(TokenId token, uint32_t pos, uint32_t max_tokens,
                                                                 std::span<const TokenId> stop) {
    Impl& p = *p_;
    if (!p.persistent) return nullptr;
    p.check_token(token, pos);
    if (stop.size() > Impl::Persistent::kMaxStop) stop = stop.first(Impl::Persistent::kMaxStop);   // the rest: the caller's own check
    p.ctx.make_current();
    // Each token produced needs its input evaluated at a position < n_ctx.
    return std::make_unique<PersistentStream>(p, token, pos, std::min(max_tokens, p.n_ctx - pos), stop);
}

}  // namespace ptxlm::cuda
