// The persistent schedule: the op table the persistent decoder walks, its
// cooperative launch, and greedy streams of up to Persistent::kMaxSteps
// tokens per launch (CudaBackend::start_greedy).
#include <atomic>
#include <chrono>
#include <cstdio>
#include <thread>

#include "engine/cuda/cuda_backend_impl.h"

namespace ptxlm::cuda {

void CudaBackend::Impl::build_persistent() {
    auto ps = std::make_unique<Persistent>();
    // The advance writes the next token's input where put_state puts it.
    const kx::PersistentKernel pk = kx::persistent_kernel(kinds, target, cuda::state_layout(paged));
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
