#include "engine/cuda/decode_plan.h"

#include <set>
#include <stdexcept>

#include "kernels/examples/examples.h"
#include <string>

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

}  // namespace

DecodePlan decode_plan(const Model& m, uint32_t n_ctx, bool quantized_inputs, uint32_t sms) {
    if (sms == 0) throw std::invalid_argument("decode_plan: a device with no SMs");
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
        add(bind(kx::attention_kernel, l.attention));
        add(bind(kx::gemv_kernel, l.wo));
        if (l.post_attn_norm) add(bind(kx::add_norm_kernel, plan.add_norm));
        add(bind(kx::gemv_kernel, l.gate_up));
        add(bind(kx::gemv_kernel, l.down));
        if (l.post_ffn_norm) add(bind(kx::add_norm_kernel, plan.add_norm));
    }
    add(bind(kx::gemv_kernel, plan.head));
    add([](const ptx::Target& t, const kx::InlineTarget* in) { return kx::clear_u64_kernel(t, in); });
    add(bind(kx::argmax_kernel, kx::ArgmaxShape{plan.head.segments.at(0).rows}));
    return out;
}

std::vector<ptx::GeneratedKernel> decode_kernels(const DecodePlan& plan, const ptx::Target& t) {
    std::vector<ptx::GeneratedKernel> out;
    for (const kx::OpGenerator& g : decode_op_kinds(plan)) out.push_back(g(t, nullptr));
    return out;
}

}  // namespace ptxlm::cuda
