#include "engine/cuda/decode_plan.h"

#include <algorithm>
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
void plan_paged(LayerPlan& lp, uint32_t il, uint32_t n_ctx, uint32_t sms) {
    const kx::AttentionShape& a = lp.attention;
    const uint32_t hd = a.head_dim;
    if (hd != 64 && hd != 96 && hd != 128 && hd != 256)
        throw ModelError("paged KV: head size " + std::to_string(hd) + " (layer " + std::to_string(il) +
                         ") is not supported by the paged attention kernel (64, 96, 128 or 256)");
    const uint32_t group = a.n_head / a.n_head_kv;
    if (group > 8 || group * hd > 1024)
        throw ModelError("paged KV: " + std::to_string(group) + " query heads per KV head at head size " +
                         std::to_string(hd) + " (layer " + std::to_string(il) +
                         ") are more than the paged attention kernel serves (8, and group x head size <= 1024)");
    const uint32_t pages = kv_pages(n_ctx);
    lp.paged = true;
    lp.rope = {.n_head = a.n_head, .n_head_kv = a.n_head_kv, .head_dim = hd, .n_rot = a.n_rot, .page_size = kKvPageSize,
               .max_pages = pages, .tokens = 1, .scale = a.scale, .neox = a.neox, .bias = a.bias, .qk_norm = a.qk_norm,
               .eps = a.eps, .temp_scale = a.temp_scale, .temp_floor = a.temp_floor};
    kx::PagedAttentionShape& p = lp.paged_attention;
    p = {a.n_head, a.n_head_kv, hd, kKvPageSize, pages, 1, kx::paged_attention_splits(a.n_head_kv, 1, sms), a.window};
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

DecodePlan decode_plan(const Model& m, uint32_t n_ctx, bool quantized_inputs, uint32_t sms, bool paged_kv) {
    if (sms == 0) throw std::invalid_argument("decode_plan: a device with no SMs");
    if (m.hp.arch == "gemma4") throw ModelError("architecture gemma4 is not supported on the GPU path yet");
    const bool qi = quantized_inputs;
    const HParams& hp = m.hp;
    const uint32_t E = hp.n_embd, hd = m.head_dim;
    const float eps = hp.rms_eps;
    if (m.final_softcap > 0) throw ModelError("final logit soft-capping is not on the GPU path yet");
    check_weight(m.output);
    DecodePlan p;
    p.embed = {m.tok_embd.type, E, m.embd_scale};
    p.add_norm = {E, eps};
    for (uint32_t il = 0; il < m.layers.size(); ++il) {
        const LayerDesc& l = m.layers[il];
        for (const Weight* w : {&l.wq, &l.wk, &l.wv, &l.wo, &l.gate, &l.up, &l.down}) check_weight(*w);
        if (bool(l.q_norm) != bool(l.k_norm) || bool(l.bq) != bool(l.bk) || bool(l.bq) != bool(l.bv))
            throw ModelError("layer " + std::to_string(il) + ": q/k norms and q/k/v biases must come together");
        const uint32_t q_dim = l.n_head * hd, kv = m.kv_dim(il);
        LayerPlan lp;
        lp.qkv = gemv(E, {{l.wq.type, q_dim}, {l.wk.type, kv}, {l.wv.type, kv}}, true, eps, false, qi, sms);
        lp.attention = {l.n_head, l.n_head_kv, hd, n_ctx, l.sliding ? hp.sliding_window : 0, m.attn_scale, kAttentionChunk,
                        hp.rope_style == RopeStyle::Neox, bool(l.bq), bool(l.q_norm), eps, m.attn_temp_scale,
                        m.attn_temp_floor, m.n_rot};
        if (paged_kv) plan_paged(lp, il, n_ctx, sms);
        lp.post_attn_norm = bool(l.attn_post_norm);
        lp.post_ffn_norm = bool(l.ffn_post_norm);
        lp.wo = gemv(q_dim, {{l.wo.type, E}}, false, eps, !lp.post_attn_norm, qi, sms);
        lp.gate_up = gemv(E, {{l.gate.type, l.n_ff}, {l.up.type, l.n_ff}}, true, eps, false, qi, sms);
        lp.gate_up.glu = m.ffn == FfnKind::GeGLU ? kx::Glu::GeGlu : kx::Glu::SwiGlu;
        lp.down = gemv(l.n_ff, {{l.down.type, E}}, false, eps, !lp.post_ffn_norm, qi, sms);
        p.layers.push_back(lp);
    }
    p.head = gemv(E, {{m.output.type, m.n_vocab}}, true, eps, false, qi, sms);
    return p;
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
    for (LayerPlan& lp : p.layers) {
        if (!lp.paged) throw std::invalid_argument("step_plan: a layer without paged KV");
        lp.rope.tokens = lp.paged_attention.tokens = tokens;
        for (kx::GemvShape* s : {&lp.qkv, &lp.wo, &lp.gate_up, &lp.down}) columns(*s);
    }
    columns(p.head);
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
        if (l.post_ffn_norm) add(bind(kx::add_norm_kernel, plan.add_norm));
    }
    add(bind(kx::gemv_kernel, plan.head));
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
