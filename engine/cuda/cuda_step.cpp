// CudaBackend's batch step (issue 22): several sequences' tokens through
// one chain of T-row kernels over the pool of KV pages (cuda_backend.h).
#include "engine/cuda/cuda_backend_impl.h"

namespace ptxlm::cuda {

namespace {

// The chain's rows for `n` tokens: the least power of two that holds them.
uint32_t bucket(uint32_t n) {
    uint32_t t = 1;
    while (t < n) t *= 2;
    return t;
}

}  // namespace

std::unique_ptr<GraphExec> CudaBackend::Impl::capture(std::vector<Op>& ops) {
    // The launches read their tokens, positions and tables from device
    // memory, so one capture serves every step.
    stream.begin_capture();
    try {
        for (Op& op : ops) launch_op(op);
    } catch (...) {
        try {
            stream.end_capture();
        } catch (...) {
        }
        throw;
    }
    Graph g = stream.end_capture();
    return std::make_unique<GraphExec>(g.instantiate());
}

void CudaBackend::Impl::prepare_copies() {
    // kv_copy's pools: {u64 base, u32 kv_heads, u32 row_bytes}, each layer's K then V.
    std::vector<uint8_t> desc;
    for (size_t il = 0; il < k_cache.size(); ++il) {
        if (!m.has_kv(uint32_t(il))) continue;   // no pool: reads an earlier layer's
        for (const DeviceBuffer* c : {&k_cache[il], &v_cache[il]}) {
            const uint64_t base = c->ptr();
            const uint32_t hd = m.head_dim_of(uint32_t(il));
            const uint32_t heads = uint32_t(m.kv_dim(uint32_t(il)) / hd), row_bytes = hd * 2;
            const size_t at = desc.size();
            desc.resize(at + 16);
            std::memcpy(desc.data() + at, &base, 8);
            std::memcpy(desc.data() + at + 8, &heads, 4);
            std::memcpy(desc.data() + at + 12, &row_bytes, 4);
        }
    }
    copy_pools = DeviceBuffer(ctx, desc.size());
    copy_pools.upload(desc.data(), desc.size());
    copy_list = DeviceBuffer(ctx, 16);
    const kx::KvCopyShape s{uint32_t(desc.size() / 16), kKvPageSize, 1};
    copy_op.push_back(make_op([s](const ptx::Target& t, const kx::InlineTarget*) { return kx::kv_copy_kernel(s, t); },
                              {ptr(copy_pools), ptr(copy_list)}));
    copy_op.back().plain = true;   // no griddepcontrol.wait in it
}

CudaBackend::Impl::StepChain& CudaBackend::Impl::step_chain(uint32_t tokens, uint32_t logit_rows, bool argmax) {
    const uint32_t T = bucket(tokens), H = logit_rows ? bucket(logit_rows) : 0;
    if (argmax && !H) throw std::logic_error("step_chain: an argmax without logit rows");
    auto found = step_chains.find({T, H, argmax});
    if (found != step_chains.end()) return found->second;
    const DecodePlan sp = step_plan(plan, T);
    StepChain c;
    auto bind = [](auto fn, auto shape) -> kx::OpGenerator {
        return [fn, shape](const ptx::Target& t, const kx::InlineTarget* in) { return fn(shape, t, in); };
    };
    auto op = [&](const kx::OpGenerator& g, const std::vector<ptx::ParamValue>& args) {
        c.ops.push_back(make_op(g, args));
        return &c.ops.back();
    };
    // A GEMV over the T rows of `in`, as T / g.columns launches: each takes
    // its columns of the input and of every output (a GLU's one output).
    // `first`: the input's first row (the LM head reads the last H rows).
    // A gated output's multiplier: `gate` (its first row; rows gate_stride apart).
    auto gemv = [&](const kx::GemvShape& g, const DeviceBuffer& in, DevPtr norm, std::vector<DevPtr> ws,
                    std::vector<const DeviceBuffer*> outs, uint32_t rows = 0, uint32_t first = 0, DevPtr gate = {}) {
        const bool glu = g.glu != kx::Glu::None;
        for (uint32_t c0 = 0; c0 < (rows ? rows : T); c0 += g.columns) {
            std::vector<ptx::ParamValue> a = {ptr(in, size_t(first + c0) * g.n_in * 4)};
            if (g.norm) a.push_back(norm);
            for (size_t i = 0; i < ws.size(); ++i) {
                a.push_back(ws[i]);
                if (!glu) a.push_back(ptr(*outs[i], size_t(c0) * g.segments[i].rows * 4));
            }
            if (glu) a.push_back(ptr(*outs[0], size_t(c0) * g.segments[0].rows * 4));
            if (g.gated != kx::Glu::None) a.push_back(DevPtr{gate.addr + uint64_t(c0) * g.gate_stride * 4});
            op(bind(kx::gemv_kernel, g), a);
        }
    };
    const DevPtr desc = ptr(step_io), ids = ptr(step_io, kIdsOffset), tables = ptr(step_io, kTablesOffset);
    const DevPtr X = ptr(x), O = ptr(o);
    op(bind(kx::embed_kernel, sp.embed), {w.embd, ids, X});
    const DevPtr PLI = ptr(ple_in);
    if (sp.ple) {   // gemma4's per-layer inputs (the single-token chain's, T rows)
        gemv(sp.ple_model, x, {}, {pw.model_proj}, {&ple_in});
        op(bind(kx::ple_input_kernel, sp.ple_input), {PLI, pw.tok_embd, ids, pw.proj_norm, PLI});
    }
    for (uint32_t il = 0; il < m.layers.size(); ++il) {
        const LayerPlan& lp = sp.layers[il];
        const DevPtr kc = ptr(k_cache[lp.kv_layer]), vc = ptr(v_cache[lp.kv_layer]), QR = ptr(q_rot);
        if (lp.kv_layer == il) gemv(lp.qkv, x, w.attn_norm[il], {w.wq[il], w.wk[il], w.wv[il]}, {&q, &k, &v});
        else gemv(lp.qkv, x, w.attn_norm[il], {w.wq[il]}, {&q});
        std::vector<ptx::ParamValue> ra = {desc, tables, ptr(q), ptr(k), ptr(v)};
        if (lp.rope.bias) ra.insert(ra.end(), {w.bq[il], w.bk[il], w.bv[il]});
        if (lp.rope.qk_norm) ra.insert(ra.end(), {w.qn[il], w.kn[il]});
        ra.insert(ra.end(), {rope_table(il), kc, vc, QR});
        op(paged_rope_op(lp.rope), ra)->plain = true;
        op(paged_attention_op(lp.paged_attention),
           {desc, tables, QR, kc, vc, ptr(step_part), ptr(step_sync, size_t(il) * rows * sync_heads * 4), ptr(att)})
            ->plain = true;
        gemv(lp.wo, att, {}, {w.wo[il]}, {lp.post_attn_norm ? &o : &x});
        if (lp.post_attn_norm) op(bind(kx::add_norm_kernel, sp.add_norm), {X, O, w.post_attn[il]});
        gemv(lp.gate_up, x, w.ffn_norm[il], {w.wg[il], w.wu[il]}, {&h});
        gemv(lp.down, h, {}, {w.wd[il]}, {lp.post_ffn_norm ? &o : &x});
        auto add_norm = [&](const kx::AddNormShape& an, DevPtr norm) {   // scaled: times gemma4's output scale
            std::vector<ptx::ParamValue> a = {X, O, norm};
            if (an.scaled) a.push_back(pw.out_scale[il]);
            op(bind(kx::add_norm_kernel, an), a);
        };
        if (lp.post_ffn_norm) add_norm(lp.ffn_add, w.post_ffn[il]);
        if (lp.ple) {
            const DevPtr SLICE = ptr(ple_in, size_t(il) * m.n_embd_per_layer * 4);
            gemv(lp.ple_gate, x, {}, {pw.gate[il]}, {&ple_g}, 0, 0, SLICE);
            gemv(lp.ple_proj, ple_g, {}, {pw.proj[il]}, {&o});
            add_norm(lp.ple_add, pw.post_norm[il]);
        }
    }
    if (H) {
        const DecodePlan hp = step_plan(plan, H);
        gemv(hp.head, x, w.out_norm, {w.out}, {&logits}, H, T - H);
        if (hp.softcap.cap > 0) op(bind(kx::softcap_kernel, hp.softcap), {ptr(logits)});
    }
    if (argmax) {   // greedy rows: H keys instead of H x n_vocab logits to copy back
        if (!step_best.size()) {
            step_best = DeviceBuffer(ctx, 8 * CudaBackend::kMaxStep);
            step_best_host = PinnedBuffer(ctx, 8 * CudaBackend::kMaxStep);
        }
        op([H](const ptx::Target& t, const kx::InlineTarget* in) { return kx::clear_u64_kernel(t, in, H); },
           {ptr(step_best)});
        op(bind(kx::argmax_kernel, kx::ArgmaxShape{m.n_vocab, 256, 8, H}), {ptr(logits), ptr(step_best)});
    }
    if (schedule == Schedule::Graph) c.graph = capture(c.ops);
    return step_chains.emplace(std::tuple{T, H, argmax}, std::move(c)).first->second;
}

void CudaBackend::step(std::span<const SeqStep> batch) {
    Impl& p = *p_;
    if (!p.pages.n_pages) throw std::logic_error("step: no pool of KV pages (the backend was made without KvPages)");
    if (p.persistent)
        throw std::logic_error("step: the persistent schedule serves one sequence per launch; use the graph or chain schedule");
    p.run_step(batch);
}

void CudaBackend::Impl::run_step(std::span<const SeqStep> batch) {
    Impl& p = *this;
    auto* host = static_cast<uint8_t*>(p.step_host.data());
    auto* desc = reinterpret_cast<uint32_t*>(host);
    auto* ids = reinterpret_cast<uint32_t*>(host + Impl::kIdsOffset);
    auto* tables = reinterpret_cast<uint32_t*>(host + Impl::kTablesOffset);
    // The checks first; then the rows: those whose logits are wanted go last
    // (each sequence's in order), so the LM head runs over the last rows
    // only; a row's place changes nothing else (each carries its position
    // and table row).
    uint32_t n = 0, wanted = 0;
    bool argmax = false;
    for (const SeqStep& s : batch) {
        const uint32_t k = check_seq_step(s, n, kMaxStep, p.m.n_vocab, p.n_ctx, KvPages{p.n_pages, kKvPageSize});
        if (k == 0) continue;
        n += k;
        wanted += head_rows(s);
        argmax = argmax || s.argmax;
    }
    if (n == 0) return;
    const uint32_t T = bucket(n), H = wanted ? bucket(wanted) : 0;
    uint32_t plain = 0, last = T - wanted, table_rows = 0;   // next plain row, next logits row
    auto put = [&](uint32_t row, uint32_t pos, uint32_t table, TokenId token) {
        desc[2 * row] = pos;
        desc[2 * row + 1] = table;
        ids[row] = uint32_t(token);
    };
    struct Out {
        float* dst;
        uint32_t row, count;   // row: in the head's output (the last H rows)
    };
    std::vector<Out> outs;
    std::vector<std::pair<TokenId*, uint32_t>> argmaxes;   // where, and the head row
    for (const SeqStep& s : batch) {
        const uint32_t k = uint32_t(s.tokens.size());
        if (k == 0) continue;
        std::copy_n(s.pages.data(), (s.pos + k - 1) / kKvPageSize + 1, tables + size_t(table_rows) * p.max_pages);
        const uint32_t w = head_rows(s);
        for (uint32_t t = 0; t < k - w; ++t) put(plain++, s.pos + t, table_rows, s.tokens[t]);
        if (s.logits) outs.push_back({s.logits, last - (T - H), w});
        if (s.argmax) argmaxes.push_back({s.argmax, last - (T - H) + w - 1});
        for (uint32_t t = k - w; t < k; ++t) put(last++, s.pos + t, table_rows, s.tokens[t]);
        ++table_rows;
    }
    for (uint32_t i = plain; i < T - wanted; ++i) put(i, ~0u, 0, 0);   // unused rows: every paged block of theirs exits
    p.ctx.make_current();
    Impl::StepChain& c = p.step_chain(T, H, argmax);
    p.step_io.upload_async(host, Impl::kTablesOffset + size_t(table_rows) * p.max_pages * 4, p.stream);
    if (c.graph) c.graph->launch(p.stream);
    else
        for (Impl::Op& op : c.ops) p.launch_op(op);
    const size_t nv = p.m.n_vocab;
    for (const Out& o : outs) p.logits.download_async(o.dst, o.count * nv * 4, p.stream, o.row * nv * 4);
    if (argmax) p.step_best.download_async(p.step_best_host.data(), size_t(H) * 8, p.stream);
    p.stream.synchronize();
    const auto* keys = static_cast<const uint64_t*>(p.step_best_host.data());
    for (const auto& [dst, row] : argmaxes) *dst = TokenId(kx::argmax_index(keys[row]));
}

void CudaBackend::copy_page(uint32_t from, uint32_t to, uint32_t positions) {
    Impl& p = *p_;
    if (!p.pages.n_pages) throw std::logic_error("copy_page: no pool of KV pages (the backend was made without KvPages)");
    if (from >= p.n_pages || to >= p.n_pages || from == to || positions > kKvPageSize)
        throw std::invalid_argument("copy_page: page " + std::to_string(from) + " -> " + std::to_string(to) + ", " +
                                    std::to_string(positions) + " positions, of " + std::to_string(p.n_pages) +
                                    " pages of " + std::to_string(kKvPageSize));
    if (positions == 0) return;
    p.ctx.make_current();
    p.stream.synchronize();   // the last copy's launch may still read the entry
    const uint32_t entry[4] = {from, to, positions, 0};
    p.copy_list.upload(entry, sizeof entry);
    p.launch_op(p.copy_op.front());
}

KvPages CudaBackend::kv_pages() const { return p_->pages; }

std::vector<CudaBackend::Launch> CudaBackend::step_launches(uint32_t tokens, uint32_t logit_rows) {
    Impl& p = *p_;
    if (!p.pages.n_pages) throw std::logic_error("step_launches: no pool of KV pages");
    if (tokens == 0 || tokens > kMaxStep || logit_rows > tokens)
        throw std::invalid_argument("step_launches: " + std::to_string(tokens) + " tokens (1 to " +
                                    std::to_string(kMaxStep) + "), " + std::to_string(logit_rows) + " with logits");
    p.ctx.make_current();
    std::vector<Launch> out;
    for (const Impl::Op& op : p.step_chain(tokens, logit_rows).ops)
        out.push_back({op.kernel, op.geometry.grid.count(), uint32_t(op.geometry.block.count()), op.geometry.shared_bytes, 0});
    return out;
}

}  // namespace ptxlm::cuda
