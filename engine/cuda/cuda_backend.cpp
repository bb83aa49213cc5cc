#include "engine/cuda/cuda_backend.h"

#include "engine/cuda/cuda_backend_impl.h"

namespace ptxlm::cuda {

CudaBackend::CudaBackend(const Model& m, std::shared_ptr<const Driver> driver, uint32_t n_ctx, Schedule schedule,
                         GpuArithmetic path, std::string* note, GpuTuning tuning, KvPages pages)
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
    const uint32_t warps = tuning.gemv_warps ? tuning.gemv_warps : gemv_warps(m, p.schedule);
    p.paged = tuning.paged_kv || pages.n_pages;
    if (pages.n_pages) {
        if (pages.page_size != kKvPageSize)
            throw std::invalid_argument("CudaBackend: pages of " + std::to_string(pages.page_size) + " positions (the GPU path's are " +
                                        std::to_string(kKvPageSize) + ")");
        if (n_ctx == 0) throw std::invalid_argument("CudaBackend: a pool of KV pages needs the context given");
        if (pages.n_pages < cuda::kv_pages(n_ctx))
            throw std::invalid_argument("CudaBackend: a pool of " + std::to_string(pages.n_pages) +
                                        " pages is smaller than one sequence's context of " + std::to_string(n_ctx));
        p.pages = pages;
    }
    // Paged KV runs prompts in chunks of T rows through the step's chains
    // (eval_batch), so its buffers hold kMaxStep rows.
    if (p.paged) p.rows = kMaxStep;
    const HParams& hp = m.hp;
    const uint32_t E = hp.n_embd;
    decode_plan(m, 1, p.quantized, uint32_t(dev.sm_count), p.paged, warps);   // refuses what the GPU path cannot run before anything is allocated

    // The memory plan, against the device's free memory, before allocating.
    // (Shared-KV layers keep no cache; gemma4's per-layer inputs take
    // 2·P·L + P floats a row.)
    uint64_t max_q = 0, max_kv = 0, max_ff = 0, kv_per_token = 0, weight_bytes = 0;
    const uint64_t ple_w = uint64_t(m.n_embd_per_layer) * m.layers.size();
    for (uint32_t il = 0; il < m.layers.size(); ++il) {
        max_q = std::max<uint64_t>(max_q, uint64_t(m.layers[il].n_head) * m.head_dim_of(il));
        max_kv = std::max<uint64_t>(max_kv, m.kv_dim(il));
        max_ff = std::max<uint64_t>(max_ff, m.layers[il].n_ff);
        if (m.has_kv(il)) kv_per_token += 2ull * m.kv_dim(il) * 2;
    }
    m.for_each_weight([&](const Weight& w) {
        weight_bytes += w.rows == 1 ? w.cols * 4 : uint64_t(kx::row_layout(w.type, uint32_t(w.cols)).row_bytes) * w.rows;
    });
    std::map<Impl::RopeKey, uint32_t> ropes;   // each table's first layer
    for (uint32_t il = 0; il < m.layers.size(); ++il) ropes.emplace(Impl::rope_key(m, il), il);
    // KV (a step's pool is fixed) + RoPE tables.
    uint64_t per_token = pages.n_pages ? 0 : kv_per_token;
    for (const auto& [key, il] : ropes) per_token += uint64_t(key.n_rot) * 4;
    // (Paged KV rounds the context up to whole pages: at most kKvPageSize - 1
    // more positions; a step's pool holds its own number of pages.)
    const uint64_t fixed = weight_bytes +
                           4ull * p.rows * (3 * E + 4 * max_q + 2 * max_kv + max_ff + m.n_vocab + 2 * ple_w + m.n_embd_per_layer) +
                           (64 << 20) +
                           (pages.n_pages ? uint64_t(pages.n_pages) * kKvPageSize * kv_per_token
                            : p.paged     ? uint64_t(kKvPageSize) * kv_per_token
                                          : 0);
    const Context::MemoryInfo mem = p.ctx.memory_info();
    const uint32_t want = n_ctx ? n_ctx : (hp.n_ctx_train ? hp.n_ctx_train : 4096);
    const uint64_t fits = mem.free > fixed ? (mem.free - fixed) / per_token : 0;
    if (fits < want) {
        const std::string numbers =
            "weights " + format_bytes(weight_bytes) +
            (pages.n_pages ? " + " + format_bytes(uint64_t(pages.n_pages) * kKvPageSize * kv_per_token) + " of KV pages" : "") +
            " + " + format_bytes(per_token) + " per token of context; " + format_bytes(mem.free) + " free on " + dev.name;
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
    auto& [attn_norm, wq, wk, wv, wo, bq, bk, bv, qn, kn, post_attn, ffn_norm, wg, wu, wd, post_ffn, embd, out_norm, out] = p.w;
    auto& pw = p.pw;
    auto vector_or_null = [&](const Weight& w) { return w ? p.vector(w) : DevPtr{}; };
    for (uint32_t il = 0; il < m.layers.size(); ++il) {
        const LayerDesc& l = m.layers[il];
        attn_norm.push_back(p.vector(l.attn_norm));
        ffn_norm.push_back(p.vector(l.ffn_norm));
        // A shared-KV layer has no k/v of its own; without attn_v, k's
        // projection serves as v (one upload: weights are keyed by their bytes).
        const bool own_kv = m.has_kv(il);
        const Weight* v = own_kv ? (l.wv ? &l.wv : &l.wk) : nullptr;
        for (auto [w, dst] : {std::pair{&l.wq, &wq}, {own_kv ? &l.wk : nullptr, &wk}, {v, &wv}, {&l.wo, &wo},
                              {&l.gate, &wg}, {&l.up, &wu}, {&l.down, &wd}, {l.ple_gate ? &l.ple_gate : nullptr, &pw.gate},
                              {l.ple_proj ? &l.ple_proj : nullptr, &pw.proj}}) {
            dst->push_back(w ? p.weight(*w) : DevPtr{});
            if (w && !(dst == &wv && w == &l.wk)) progress(w->rows * w->row_bytes);
        }
        pw.post_norm.push_back(vector_or_null(l.ple_post_norm));
        pw.out_scale.push_back(vector_or_null(l.out_scale));
        bq.push_back(l.bq ? p.vector(l.bq) : DevPtr{});
        bk.push_back(l.bk ? p.vector(l.bk) : DevPtr{});
        bv.push_back(l.bv ? p.vector(l.bv) : DevPtr{});
        qn.push_back(l.q_norm ? p.vector(l.q_norm) : DevPtr{});
        kn.push_back(l.k_norm ? p.vector(l.k_norm) : DevPtr{});
        post_attn.push_back(l.attn_post_norm ? p.vector(l.attn_post_norm) : DevPtr{});
        post_ffn.push_back(l.ffn_post_norm ? p.vector(l.ffn_post_norm) : DevPtr{});
    }
    embd = p.weight(m.tok_embd);
    out_norm = p.vector(m.output_norm);
    out = p.weight(m.output);
    progress(m.tok_embd.rows * m.tok_embd.row_bytes);
    if (m.n_embd_per_layer) {
        pw.tok_embd = p.weight(m.per_layer_tok_embd);
        pw.model_proj = p.weight(m.per_layer_model_proj);
        pw.proj_norm = p.vector(m.per_layer_proj_norm);
        progress(m.per_layer_tok_embd.rows * m.per_layer_tok_embd.row_bytes +
                 m.per_layer_model_proj.rows * m.per_layer_model_proj.row_bytes);
    }
    if (tty) std::fprintf(stderr, "\rptxlm: uploading weights 100%%\n");

    // RoPE tables: cos, sin of (pos · freq_scale) · rate, in double then f32,
    // times the magnitude (YaRN's), as the CPU's rope() takes them.
    for (const auto& [key, il] : ropes) {
        // n_rot/2 pairs a position (partial rotary: the rest of a head is not rotated).
        const std::vector<double> inv = rope_rates(m, il, key.base, C);
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
        p.rope_tables.emplace(key, std::move(b));
    }
    // The KV cache: C positions a layer, or under paged KV kv_pages(C) whole
    // pages (a step's pool: its own number).
    p.max_pages = p.paged ? cuda::kv_pages(C) : 0;
    p.n_pages = pages.n_pages ? pages.n_pages : p.max_pages;
    const size_t kv_positions = p.paged ? size_t(p.n_pages) * kKvPageSize : C;
    for (uint32_t il = 0; il < m.layers.size(); ++il) {
        if (!m.has_kv(il)) {   // reads layer kv_layer's
            p.k_cache.emplace_back();
            p.v_cache.emplace_back();
            continue;
        }
        p.k_cache.emplace_back(p.ctx, kv_positions * m.kv_dim(il) * 2);
        p.v_cache.emplace_back(p.ctx, kv_positions * m.kv_dim(il) * 2);
    }
    uint32_t max_heads = 0;
    for (const LayerDesc& l : m.layers) max_heads = std::max(max_heads, l.n_head);
    const uint32_t splits = (C + kAttentionChunk - 1) / kAttentionChunk;
    const size_t R = p.rows;
    for (auto [b, n] : {std::pair{&p.x, uint64_t(E)}, {&p.q, max_q}, {&p.k, max_kv}, {&p.v, max_kv}, {&p.att, max_q},
                        {&p.o, uint64_t(E)}, {&p.h, max_ff}, {&p.logits, uint64_t(m.n_vocab)}}) {
        *b = DeviceBuffer(p.ctx, R * n * 4);
        if (R > 1) b->fill_bytes(0);   // a step's unused rows are computed on, never read: keep them finite
    }
    if (ple_w)
        for (auto [b, n] : {std::pair{&p.ple_in, ple_w}, {&p.ple_g, uint64_t(m.n_embd_per_layer)}}) {
            *b = DeviceBuffer(p.ctx, R * n * 4);
            if (R > 1) b->fill_bytes(0);
        }
    if (!p.paged) {   // the contiguous attention's split workspace (paged: paged_part below)
        uint32_t max_hd = 0;
        for (uint32_t il = 0; il < m.layers.size(); ++il) max_hd = std::max(max_hd, m.head_dim_of(il));
        p.part = DeviceBuffer(p.ctx, size_t(max_heads) * splits * (max_hd + 2) * 4);
        p.att_sync = DeviceBuffer(p.ctx, size_t(m.layers.size()) * max_heads * 4);
        p.att_sync.fill_bytes(0);
    }
    p.state = DeviceBuffer(p.ctx, 4 * p.state_words());
    p.state_host = PinnedBuffer(p.ctx, 4 * p.state_words() * kMaxBatch);   // one state per token of a batch
    p.best = DeviceBuffer(p.ctx, 8);
    p.best_host = PinnedBuffer(p.ctx, 8);
    const DevPtr token_ptr = Impl::ptr(p.state, p.paged ? 8 : 0), pos_ptr = Impl::ptr(p.state, p.paged ? 0 : 4);
    const DevPtr desc_ptr = Impl::ptr(p.state);   // paged KV: {pos, table row}
    const DevPtr X = Impl::ptr(p.x), Q = Impl::ptr(p.q), K = Impl::ptr(p.k), V = Impl::ptr(p.v), ATT = Impl::ptr(p.att),
                 O = Impl::ptr(p.o), H = Impl::ptr(p.h), PART = Impl::ptr(p.part);

    // The chain, from the plan; the GEMV grids sized for this device's SMs.
    p.plan = decode_plan(m, C, p.quantized, uint32_t(dev.sm_count), p.paged, warps);
    const DecodePlan& plan = p.plan;
    if (p.paged) {
        // One sequence: table row 0 holds pages 0..max_pages-1 in order (pos /
        // kKvPageSize is its page). Workspaces sized for the widest layer.
        std::vector<uint32_t> row(p.max_pages);
        for (uint32_t i = 0; i < p.max_pages; ++i) row[i] = i;
        p.page_table = DeviceBuffer(p.ctx, row.size() * 4);
        p.page_table.upload(row.data(), row.size() * 4);
        uint64_t part_floats = 0;
        for (const LayerPlan& lp : plan.layers) {
            const kx::PagedAttentionShape& a = lp.paged_attention;
            part_floats = std::max<uint64_t>(part_floats, uint64_t(a.n_head) * a.splits * (a.head_dim + 4));
            p.sync_heads = std::max(p.sync_heads, kx::paged_attention_sync_slots(a));   // per token row
        }
        p.q_rot = DeviceBuffer(p.ctx, R * max_q * 4);
        p.q_rot.fill_bytes(0);
        p.paged_part = DeviceBuffer(p.ctx, part_floats * 4);
        p.paged_sync = DeviceBuffer(p.ctx, size_t(m.layers.size()) * p.sync_heads * 4);
        p.paged_sync.fill_bytes(0);
        p.state.fill_bytes(0);   // the table row word: 0, also before the first token's copy
        p.step_io = DeviceBuffer(p.ctx, Impl::kTablesOffset + R * p.max_pages * 4);
        p.step_host = PinnedBuffer(p.ctx, Impl::kTablesOffset + R * p.max_pages * 4);
        p.step_part = DeviceBuffer(p.ctx, R * part_floats * 4);
        p.step_sync = DeviceBuffer(p.ctx, size_t(m.layers.size()) * R * p.sync_heads * 4);
        p.step_sync.fill_bytes(0);
        p.identity = row;
        if (pages.n_pages) p.prepare_copies();
    }
    // A generator bound to its shape: called standalone here, inline by the persistent kernel.
    auto bind = [](auto fn, auto shape) -> kx::OpGenerator {
        return [fn, shape](const ptx::Target& t, const kx::InlineTarget* in) { return fn(shape, t, in); };
    };
    p.add(bind(kx::embed_kernel, plan.embed), {embd, token_ptr, X});
    const DevPtr PLI = Impl::ptr(p.ple_in), PG = Impl::ptr(p.ple_g);
    if (plan.ple) {   // gemma4's per-layer inputs, from the token and the scaled embedding
        p.gemv_io.push_back({p.add(bind(kx::gemv_kernel, plan.ple_model), {X, pw.model_proj, PLI}), plan.ple_model, nullptr,
                             {&m.per_layer_model_proj}, &p.x, {&p.ple_in}});
        p.add(bind(kx::ple_input_kernel, plan.ple_input), {PLI, pw.tok_embd, token_ptr, pw.proj_norm, PLI});
    }
    for (uint32_t il = 0; il < m.layers.size(); ++il) {
        const LayerPlan& lp = plan.layers[il];
        const DevPtr kc = Impl::ptr(p.k_cache[lp.kv_layer]), vc = Impl::ptr(p.v_cache[lp.kv_layer]);
        const LayerDesc& l = m.layers[il];
        const bool own_kv = lp.kv_layer == il;
        const size_t qkv_op =
            own_kv ? p.add(bind(kx::gemv_kernel, lp.qkv), {X, attn_norm[il], wq[il], Q, wk[il], K, wv[il], V})
                   : p.add(bind(kx::gemv_kernel, lp.qkv), {X, attn_norm[il], wq[il], Q});
        if (own_kv)
            p.gemv_io.push_back({qkv_op, lp.qkv, &l.attn_norm, {&l.wq, &l.wk, l.wv ? &l.wv : &l.wk}, &p.x, {&p.q, &p.k, &p.v}});
        else
            p.gemv_io.push_back({qkv_op, lp.qkv, &l.attn_norm, {&l.wq}, &p.x, {&p.q}});
        const DevPtr rope = p.rope_table(il);
        if (lp.paged) {
            // RoPE + the K/V append into the pages, then attention over them:
            // the same inputs as the contiguous op (biases, norms, the table).
            const DevPtr table = Impl::ptr(p.page_table), QR = Impl::ptr(p.q_rot);
            std::vector<ptx::ParamValue> ra = {desc_ptr, table, Q, K, V};
            if (lp.rope.bias) ra.insert(ra.end(), {bq[il], bk[il], bv[il]});
            if (lp.rope.qk_norm) ra.insert(ra.end(), {qn[il], kn[il]});
            ra.insert(ra.end(), {rope, kc, vc, QR});
            const size_t rope_op = p.add(paged_rope_op(lp.rope), ra);
            const size_t attn_op = p.add(paged_attention_op(lp.paged_attention),
                                         {desc_ptr, table, QR, kc, vc, Impl::ptr(p.paged_part),
                                          Impl::ptr(p.paged_sync, size_t(il) * p.sync_heads * 4), ATT});
            p.chain[rope_op].plain = p.chain[attn_op].plain = true;
            p.paged_deps(lp, qkv_op, rope_op, attn_op);
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
        auto add_norm = [&](const kx::AddNormShape& an, DevPtr norm) {   // scaled: times gemma4's output scale
            std::vector<ptx::ParamValue> a = {X, O, norm};
            if (an.scaled) a.push_back(pw.out_scale[il]);
            p.add(bind(kx::add_norm_kernel, an), a);
        };
        if (lp.post_ffn_norm) add_norm(lp.ffn_add, post_ffn[il]);
        if (lp.ple) {   // x += rmsnorm(proj · (gelu(gate · x) ⊙ slice))
            const DevPtr SLICE = Impl::ptr(p.ple_in, size_t(il) * m.n_embd_per_layer * 4);
            p.gemv_io.push_back({p.add(bind(kx::gemv_kernel, lp.ple_gate), {X, pw.gate[il], PG, SLICE}), lp.ple_gate,
                                 nullptr, {&l.ple_gate}, &p.x, {&p.ple_g}});
            p.gemv_io.back().gate = {&p.ple_in, size_t(il) * m.n_embd_per_layer};
            p.gemv_io.push_back({p.add(bind(kx::gemv_kernel, lp.ple_proj), {PG, pw.proj[il], O}), lp.ple_proj, nullptr,
                                 {&l.ple_proj}, &p.ple_g, {&p.o}});
            add_norm(lp.ple_add, pw.post_norm[il]);
        }
    }
    p.gemv_io.push_back({p.add(bind(kx::gemv_kernel, plan.head), {X, out_norm, out, Impl::ptr(p.logits)}), plan.head,
                         &m.output_norm, {&m.output}, &p.x, {&p.logits}});
    if (plan.softcap.cap > 0) p.add(bind(kx::softcap_kernel, plan.softcap), {Impl::ptr(p.logits)});
    // Greedy decoding reads only this: the argmax key of the logits.
    p.add([](const ptx::Target& t, const kx::InlineTarget* in) { return kx::clear_u64_kernel(t, in); },
          {Impl::ptr(p.best)});
    p.add(bind(kx::argmax_kernel, kx::ArgmaxShape{m.n_vocab}), {Impl::ptr(p.logits), Impl::ptr(p.best)});

    if (p.schedule == Schedule::Persistent) p.build_persistent();
    // Captured once: the launches read the token and position from device
    // memory, so the same graph serves every token.
    if (p.schedule == Schedule::Graph) p.graph = p.capture(p.chain);
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

GpuArithmetic CudaBackend::arithmetic() const {
    return p_->quantized ? GpuArithmetic::Quantized : GpuArithmetic::Reference;
}

GpuTuning CudaBackend::tuning() const { return {p_->target.pdl, p_->target.prefetch, p_->paged}; }

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
    auto read = [](const DeviceBuffer* b, size_t n, size_t first = 0) {
        std::vector<float> v(n);
        b->download(v.data(), n * 4, first * 4);
        return v;
    };
    std::vector<GemvTrace> out;
    size_t next = 0;   // the next GemvIo, in chain order
    for (size_t i = 0; i < p.chain.size(); ++i) {
        Impl::Op& op = p.chain[i];
        const Impl::GemvIo* io = next < p.gemv_io.size() && p.gemv_io[next].op == i ? &p.gemv_io[next++] : nullptr;
        GemvTrace t;
        if (io) {
            t = {i, op.kernel, io->shape, io->norm, io->matrices, read(io->in, io->shape.n_in), {}, {}, {}};
            // The outputs: one per segment, or the pairs' one under a GLU.
            const bool glu = io->shape.glu != kx::Glu::None;
            for (size_t o = 0; o < io->outs.size(); ++o)
                t.before.push_back(read(io->outs[o], io->shape.segments[glu ? 0 : o].rows));
            if (io->gate.buf) t.gate = read(io->gate.buf, io->shape.segments[0].rows, io->gate.first);
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
        if (!p.m.has_kv(uint32_t(il))) continue;   // reads an earlier layer's
        const size_t dim = p.m.kv_dim(uint32_t(il)), hd = p.m.head_dim_of(uint32_t(il)), nkv = dim / hd;
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
    if (index >= p.max_pages || page >= p.n_pages)
        throw std::out_of_range("poke_page_table_for_test: entry " + std::to_string(index) + " or page " +
                                std::to_string(page) + " outside the table's " + std::to_string(p.max_pages) + " or the " +
                                std::to_string(p.n_pages) + " pages");
    p.ctx.make_current();
    p.stream.synchronize();   // no queued launch may read the entry being replaced
    p.page_table.upload(&page, 4, size_t(index) * 4);
    p.identity[index] = page;   // the table eval_batch's prompt chunks use
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
    if (p.paged && !p.persistent && n > 1) {
        // A prompt: chunks of up to kMaxStep rows through the step's chains,
        // over the pool's first pages in order (each row's logits are what
        // one token at a time gives: test_cuda_step).
        for (uint32_t i = 0; i < n; i += kMaxStep) {
            const uint32_t k = std::min(kMaxStep, n - i), first_wanted = n - (logits ? n_logits : 0);
            const uint32_t w = logits && i + k > first_wanted ? i + k - std::max(i, first_wanted) : 0;
            const SeqStep s{p.identity, pos + i, tokens.subspan(i, k),
                            w ? logits + size_t(std::max(i, first_wanted) - first_wanted) * p.m.n_vocab : nullptr, w};
            p.run_step({&s, 1});
        }
        return;
    }
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
