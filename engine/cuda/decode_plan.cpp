#include "engine/cuda/decode_plan.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <stdexcept>
#include <string>

#include "kernels/examples/examples.h"

namespace ptxlm::cuda {

namespace kx = ptxlm::kernels;

namespace {

void check_weight(const Weight& w) {
    if (!kx::gemv_supports(w.type))
        throw ModelError(w.name() + ": weight type " + gguf::type_traits(w.type).name +
                         " is not supported on the GPU path yet");
}

// An embedding table (looked up, never multiplied): the embedding kernel's types.
void check_table(const Weight& w) {
    try {
        kx::embed_geometry({w.type, uint32_t(w.cols), 1.0f, 1});
    } catch (const std::exception&) {   // the device layout or the kernel refuses the type
        throw ModelError(w.name() + ": weight type " + gguf::type_traits(w.type).name +
                         " is not supported on the GPU path's embedding rows yet");
    }
}

kx::GemvShape gemv(uint32_t n_in, std::vector<kx::GemvSegment> segments, bool norm, float eps, bool accumulate,
                   bool quantized, uint32_t sms) {
    kx::GemvShape s;
    s.sms = sms;
    s.n_in = n_in;
    s.segments = std::move(segments);
    s.norm = norm;
    s.eps = eps;
    s.accumulate = accumulate;
    s.q8_input = quantized && kx::gemv_q8_input_fits(s);
    return s;
}

// The paged pair for one layer, from the contiguous op's shape: the same
// RoPE, biases, norms, scale and temperature; one table row of
// kv_pages(n_ctx) pages. Splits: one block per SM at T = 1, more where a
// chunk's page ids would not fit the kernel's shared memory (long contexts).
void plan_paged(LayerPlan& lp, uint32_t il, uint32_t n_ctx, uint32_t sms, bool v_norm) {
    const kx::AttentionShape& a = lp.attention;
    const uint32_t hd = a.head_dim;
    if (hd != 64 && hd != 96 && hd != 128 && hd != 256 && hd != 512)
        throw ModelError("paged KV: head size " + std::to_string(hd) + " (layer " + std::to_string(il) +
                         ") is not supported by the paged attention kernel (64, 96, 128, 256 or 512)");
    const uint32_t group = a.n_head / a.n_head_kv;
    if (group > 8)
        throw ModelError("paged KV: " + std::to_string(group) + " query heads per KV head (layer " + std::to_string(il) +
                         ") are more than the paged attention kernel serves (8)");
    const uint32_t pages = kv_pages(n_ctx);
    lp.paged = true;
    lp.rope = {.n_head = a.n_head, .n_head_kv = a.n_head_kv, .head_dim = hd, .n_rot = a.n_rot, .page_size = kKvPageSize,
               .max_pages = pages, .tokens = 1, .scale = a.scale, .neox = a.neox, .bias = a.bias, .qk_norm = a.qk_norm,
               .eps = a.eps, .temp_scale = a.temp_scale, .temp_floor = a.temp_floor, .v_norm = v_norm,
               .q_only = lp.kv_layer != il};
    kx::PagedAttentionShape& p = lp.paged_attention;
    p = {a.n_head, a.n_head_kv, hd, kKvPageSize, pages, 1, 1, a.window};
    p.splits = kx::paged_attention_splits(a.n_head_kv * p.sub_groups(), 1, sms);   // the grid's block rows
    for (;;) {
        try {
            kx::paged_attention_geometry(p);
            return;
        } catch (const ptx::Error& e) {   // the head size and group are checked above: the chunk's shared memory
            if (p.splits >= 64)
                throw ModelError("paged KV: a context of " + std::to_string(n_ctx) + " does not fit the paged attention kernel: " +
                                 e.what());
            p.splits = std::min(64u, p.splits * 2);
        }
    }
}

}  // namespace

DecodePlan decode_plan(const Model& m, uint32_t n_ctx, bool quantized_inputs, uint32_t sms, bool paged_kv,
                       uint32_t max_gemv_warps) {
    if (sms == 0) throw std::invalid_argument("decode_plan: a device with no SMs");
    if (max_gemv_warps < 8 || max_gemv_warps > kx::kMaxGemvWarps)
        throw std::invalid_argument("decode_plan: GEMV blocks of at most " + std::to_string(max_gemv_warps) +
                                    " warps (8 to " + std::to_string(kx::kMaxGemvWarps) + ")");
    const bool qi = quantized_inputs;
    const HParams& hp = m.hp;
    const uint32_t E = hp.n_embd, L = uint32_t(m.layers.size()), P = m.n_embd_per_layer;
    const float eps = hp.rms_eps;
    check_weight(m.output);
    check_table(m.tok_embd);
    DecodePlan p;
    p.embed = {m.tok_embd.type, E, m.embd_scale};
    p.add_norm = {E, eps};
    if (P) {   // gemma4's per-layer inputs, as CpuBackend::per_layer_inputs computes them
        check_weight(m.per_layer_model_proj);
        check_table(m.per_layer_tok_embd);
        p.ple = true;
        p.ple_model = gemv(E, {{m.per_layer_model_proj.type, P * L}}, false, eps, false, qi, sms);
        p.ple_input = {P, L, eps, 1.0f / std::sqrt(float(E)), 1.0f / std::sqrt(2.0f), 1, m.per_layer_tok_embd.type,
                       std::sqrt(float(P))};
    }
    if (m.final_softcap > 0) p.softcap = {m.n_vocab, m.final_softcap, 1};
    for (uint32_t il = 0; il < L; ++il) {
        const LayerDesc& l = m.layers[il];
        const std::string layer = "layer " + std::to_string(il);
        const bool own_kv = m.has_kv(il);
        for (const Weight* w : {&l.wq, &l.wo, &l.gate, &l.up, &l.down}) check_weight(*w);
        if (own_kv) check_weight(l.wk);
        if (own_kv && l.wv) check_weight(l.wv);
        // (A shared-KV layer has q's norm only: its k is not computed.)
        if ((own_kv && bool(l.q_norm) != bool(l.k_norm)) || bool(l.bq) != bool(l.bk) || bool(l.bq) != bool(l.bv))
            throw ModelError(layer + ": q/k norms and q/k/v biases must come together");
        if (!paged_kv && (!own_kv || l.v_norm))
            throw ModelError(layer + (own_kv ? "'s v norm" : " reads layer " + std::to_string(l.kv_layer) + "'s KV: that") +
                             " is on the GPU path's paged KV only (the default), not on the contiguous cache "
                             "(--gpu-contiguous-kv)");
        const uint32_t hd = m.head_dim_of(il), q_dim = l.n_head * hd, kv = m.kv_dim(il);
        LayerPlan lp;
        lp.kv_layer = l.kv_layer;
        // Without attn_v, k's projection serves as v (the same matrix twice:
        // one upload, its rows read twice).
        const Weight& wv = l.wv ? l.wv : l.wk;
        lp.qkv = own_kv ? gemv(E, {{l.wq.type, q_dim}, {l.wk.type, kv}, {wv.type, kv}}, true, eps, false, qi, sms)
                        : gemv(E, {{l.wq.type, q_dim}}, true, eps, false, qi, sms);
        lp.attention = {l.n_head, l.n_head_kv, hd, n_ctx, l.sliding ? hp.sliding_window : 0, m.attn_scale, kAttentionChunk,
                        hp.rope_style == RopeStyle::Neox, bool(l.bq), bool(l.q_norm), eps, m.attn_temp_scale,
                        m.attn_temp_floor, m.n_rot_of(il)};
        if (paged_kv) plan_paged(lp, il, n_ctx, sms, l.v_norm);
        lp.post_attn_norm = bool(l.attn_post_norm);
        lp.post_ffn_norm = bool(l.ffn_post_norm);
        lp.wo = gemv(q_dim, {{l.wo.type, E}}, false, eps, !lp.post_attn_norm, qi, sms);
        lp.gate_up = gemv(E, {{l.gate.type, l.n_ff}, {l.up.type, l.n_ff}}, true, eps, false, qi, sms);
        lp.gate_up.glu = m.ffn == FfnKind::GeGLU ? kx::Glu::GeGlu : kx::Glu::SwiGlu;
        lp.down = gemv(l.n_ff, {{l.down.type, E}}, false, eps, !lp.post_ffn_norm, qi, sms);
        if (l.ple_gate) {
            if (!P) throw ModelError(layer + ": a per-layer gate without per-layer inputs");
            check_weight(l.ple_gate);
            check_weight(l.ple_proj);
            lp.ple = true;
            lp.ple_gate = gemv(E, {{l.ple_gate.type, P}}, false, eps, false, qi, sms);
            lp.ple_gate.gated = kx::Glu::GeGlu;   // gelu(gate · x) ⊙ the layer's slice
            lp.ple_gate.gate_stride = P * L;
            lp.ple_proj = gemv(P, {{l.ple_proj.type, E}}, false, eps, false, qi, sms);
        }
        if (l.out_scale) {
            if (!lp.ple && !lp.post_ffn_norm)
                throw ModelError(layer + ": layer_output_scale without a normalised add at the layer's end is not on the "
                                 "GPU path");
            lp.out_scale = true;
        }
        lp.ffn_add = {E, eps, 1, lp.out_scale && !lp.ple};
        lp.ple_add = {E, eps, 1, lp.out_scale};
        p.layers.push_back(lp);
    }
    p.head = gemv(E, {{m.output.type, m.n_vocab}}, true, eps, false, qi, sms);
    for (kx::GemvShape* g : {&p.ple_model, &p.head}) g->max_warps = max_gemv_warps;
    for (LayerPlan& lp : p.layers)
        for (kx::GemvShape* g : {&lp.qkv, &lp.wo, &lp.gate_up, &lp.down, &lp.ple_gate, &lp.ple_proj})
            g->max_warps = max_gemv_warps;
    return p;
}

uint32_t gemv_warps(const Model& m, Schedule s) {
    // gemma4's inlined paged attention (a group of 4 at head 128 with a
    // window, Gemma-4-E2B's head 512) needs more than the 128 registers a
    // thread that 16-warp GEMVs leave in a 512-thread block: ptxas spilled
    // it on sm_80 to sm_90. At 8 warps the block is 256 threads (255
    // registers a thread) and the decoder assembles without spills.
    return s == Schedule::Persistent && m.n_embd_per_layer ? 8 : kx::kMaxGemvWarps;
}

DecodePlan step_plan(const DecodePlan& one, uint32_t tokens) {
    if (tokens == 0 || tokens > kx::kMaxGemvColumns || (tokens & (tokens - 1)))
        throw std::invalid_argument("step_plan: " + std::to_string(tokens) + " token rows (a power of two, 1 to " +
                                    std::to_string(kx::kMaxGemvColumns) + ")");
    DecodePlan p = one;
    // The most columns (T, T/2, ... 1; T a power of two) whose kernel exists and
    // stages its inputs in at most 200 KiB of shared memory (Llama-3-8B's down
    // GEMV takes 16 8-bit columns of 14336 in two passes over its input,
    // kernels/decode/gemv_q8.h); the builder launches T / columns.
    auto columns = [&](kx::GemvShape& s) {
        for (uint32_t n = tokens; n > 1; n /= 2) {
            kx::GemvShape c = s;
            c.columns = n;
            try {
                if (kx::gemv_geometry(c).shared_bytes > 200 * 1024) continue;
            } catch (const ptx::Error&) {   // no N-column kernel for this shape
                continue;
            }
            s = c;
            return;
        }
    };
    p.embed.tokens = p.add_norm.tokens = tokens;
    p.ple_input.tokens = tokens;
    if (p.ple) columns(p.ple_model);
    for (LayerPlan& lp : p.layers) {
        if (!lp.paged) throw std::invalid_argument("step_plan: a layer without paged KV");
        lp.rope.tokens = lp.paged_attention.tokens = lp.ffn_add.tokens = lp.ple_add.tokens = tokens;
        for (kx::GemvShape* s : {&lp.qkv, &lp.wo, &lp.gate_up, &lp.down}) columns(*s);
        if (lp.ple) {
            columns(lp.ple_gate);
            columns(lp.ple_proj);
        }
    }
    columns(p.head);
    p.softcap.rows = tokens;   // the head's rows: the chain sets its own count (the last H rows)
    return p;
}

kx::OpGenerator paged_rope_op(const kx::PagedRopeShape& s) {
    return [s](const ptx::Target& t, const kx::InlineTarget* in) { return kx::paged_rope_kernel(s, t, in); };
}

kx::OpGenerator paged_attention_op(const kx::PagedAttentionShape& s) {
    return [s](const ptx::Target& t, const kx::InlineTarget* in) { return kx::paged_attention_kernel(s, t, in); };
}

std::vector<kx::OpGenerator> decode_op_kinds(const DecodePlan& plan) {
    std::vector<kx::OpGenerator> out;
    std::set<std::string> seen;
    const ptx::Target probe{};
    auto add = [&](kx::OpGenerator g) {
        if (seen.insert(g(probe, nullptr).name).second) out.push_back(std::move(g));
    };
    auto bind = [](auto fn, auto shape) -> kx::OpGenerator {
        return [fn, shape](const ptx::Target& t, const kx::InlineTarget* in) { return fn(shape, t, in); };
    };
    add(bind(kx::embed_kernel, plan.embed));
    if (plan.ple) {
        add(bind(kx::gemv_kernel, plan.ple_model));
        add(bind(kx::ple_input_kernel, plan.ple_input));
    }
    for (const LayerPlan& l : plan.layers) {
        add(bind(kx::gemv_kernel, l.qkv));
        if (l.paged) {
            add(paged_rope_op(l.rope));
            add(paged_attention_op(l.paged_attention));
        } else {
            add(bind(kx::attention_kernel, l.attention));
        }
        add(bind(kx::gemv_kernel, l.wo));
        if (l.post_attn_norm) add(bind(kx::add_norm_kernel, plan.add_norm));
        add(bind(kx::gemv_kernel, l.gate_up));
        add(bind(kx::gemv_kernel, l.down));
        if (l.post_ffn_norm) add(bind(kx::add_norm_kernel, l.ffn_add));
        if (l.ple) {
            add(bind(kx::gemv_kernel, l.ple_gate));
            add(bind(kx::gemv_kernel, l.ple_proj));
            add(bind(kx::add_norm_kernel, l.ple_add));
        }
    }
    add(bind(kx::gemv_kernel, plan.head));
    if (plan.softcap.cap > 0) add(bind(kx::softcap_kernel, plan.softcap));
    // The argmax of each of the plan's token rows (a step plan's greedy rows).
    const uint32_t rows = plan.embed.tokens;
    add([rows](const ptx::Target& t, const kx::InlineTarget* in) { return kx::clear_u64_kernel(t, in, rows); });
    add(bind(kx::argmax_kernel, kx::ArgmaxShape{plan.head.segments.at(0).rows, 256, 8, rows}));
    return out;
}

std::vector<ptx::GeneratedKernel> decode_kernels(const DecodePlan& plan, const ptx::Target& t) {
    std::vector<ptx::GeneratedKernel> out;
    for (const kx::OpGenerator& g : decode_op_kinds(plan)) out.push_back(g(t, nullptr));
    return out;
}

}  // namespace ptxlm::cuda
