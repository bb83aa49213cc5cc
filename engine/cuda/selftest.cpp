#include "engine/cuda/selftest.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "engine/cuda/attention_reference.h"
#include "engine/cuda/decode_plan.h"
#include "engine/cuda/device.h"
#include "engine/cuda/gemv_reference.h"
#include "engine/cuda/launch.h"
#include "engine/cuda/module.h"
#include "engine/cuda/paged_attention_reference.h"
#include "gguf/f16.h"
#include "kernels/decode/layout.h"
#include "kernels/examples/examples.h"

namespace ptxlm::cuda {

namespace kx = ptxlm::kernels;
using ptx::DevPtr;

namespace {

std::vector<float> dequantize(const Weight& w, uint64_t r) {
    std::vector<float> v(w.cols);
    gguf::type_traits(w.type).dequantize_row(w.row(r), v.data(), int64_t(w.cols));
    return v;
}

std::vector<float> vec(const Weight& w) { return to_floats(w); }

// Tracks the worst element: the largest error relative to its bound.
struct Worst {
    double ratio = 0, error = 0, tol = 0;
    bool pass = true;
    void add(double err, double tol_here) {
        if (!(err <= tol_here)) pass = false;
        const double r = tol_here > 0 ? err / tol_here : (err > 0 ? std::numeric_limits<double>::infinity() : 0);
        if (r >= ratio || (ratio == 0 && err > error)) ratio = r, error = err, tol = tol_here;
    }
};

class Runner {
public:
    Runner(const Model& m, std::shared_ptr<const Driver> drv, uint32_t seed)
        : m_(m), ctx_(std::move(drv)), stream_(ctx_), rng_(seed) {
        const DeviceInfo& d = ctx_.info();
        target_ = ptx::Target::parse("sm_" + std::to_string(std::min(unsigned(d.cc_major * 10 + d.cc_minor), 90u)));
    }
    const ptx::Target& target() const { return target_; }
    uint32_t sms() const { return uint32_t(ctx_.info().sm_count); }

    std::vector<float> randv(size_t n, float sd) {
        std::normal_distribution<float> nd(0.0f, sd);
        std::vector<float> v(n);
        for (float& x : v) x = nd(rng_);
        return v;
    }
    uint32_t rand_below(uint32_t n) { return uint32_t(rng_() % n); }

    template <class T>
    DevPtr up(const std::vector<T>& v) {
        bufs_.emplace_back(ctx_, std::max<size_t>(v.size() * sizeof(T), 4));
        if (!v.empty()) bufs_.back().upload(v.data(), v.size() * sizeof(T));
        return DevPtr{bufs_.back().ptr()};
    }
    DevPtr weight(const Weight& w) {
        const kx::RowLayout l = kx::row_layout(w.type, uint32_t(w.cols));
        return up(kx::repack_rows(l, w.data, w.rows));
    }
    template <class T>
    std::vector<T> down(DevPtr p, size_t n) {
        for (const DeviceBuffer& b : bufs_)
            if (b.ptr() == p.addr) {
                std::vector<T> v(n);
                b.download(v.data(), n * sizeof(T));
                return v;
            }
        throw std::logic_error("selftest: unknown buffer");
    }
    void launch(const ptx::GeneratedKernel& g, const std::vector<ptx::ParamValue>& args) {
        Module mod(ctx_, g.ptx);
        ptx::ParamPack pack = g.params.pack(args);
        cuda::launch(mod.function(g.name), g.geometry, stream_, pack);
        stream_.synchronize();
    }
    void release() { bufs_.clear(); }

private:
    const Model& m_;
    Context ctx_;
    Stream stream_;
    std::mt19937 rng_;
    ptx::Target target_;
    std::vector<DeviceBuffer> bufs_;
};

// GEMV: the model's own matrices for `ws`, random inputs, against the CPU
// arithmetic the shape claims to equal (gemv_reference).
Worst check_gemv(Runner& r, const kx::GemvShape& s, const std::vector<const Weight*>& ws, const Weight* norm) {
    const std::vector<float> x = r.randv(s.n_in, 1.0f);
    const std::vector<float> nw = norm ? vec(*norm) : std::vector<float>{};
    std::vector<ptx::ParamValue> args = {r.up(x)};
    if (s.norm) args.push_back(r.up(nw));
    std::vector<std::vector<float>> y0;
    std::vector<DevPtr> outs;
    for (const Weight* w : ws) {
        args.push_back(r.weight(*w));
        if (s.glu != kx::Glu::None && w != ws.back()) continue;   // one output after the pair
        y0.push_back(s.accumulate ? r.randv(w->rows, 1.0f) : std::vector<float>(w->rows, 0.0f));
        outs.push_back(r.up(y0.back()));
        args.push_back(outs.back());
    }
    std::vector<float> gate;   // a gated output's multiplier (gemma4's per-layer inputs)
    if (s.gated != kx::Glu::None) {
        gate = r.randv(ws[0]->rows, 1.0f);
        args.push_back(r.up(gate));
    }
    r.launch(kx::gemv_kernel(s, r.target()), args);
    const std::vector<std::vector<RowCheck>> ref = gemv_reference(s, ws, nw, x, y0, gate);
    Worst worst;
    for (size_t o = 0; o < ref.size(); ++o) {
        const std::vector<float> got = r.down<float>(outs[o], ref[o].size());
        for (size_t row = 0; row < ref[o].size(); ++row) worst.add(std::fabs(got[row] - ref[o][row].value), ref[o][row].tol);
    }
    return worst;
}

// The RoPE table as the backend uploads it, filled at row `pos` only (the
// kernels read no other row): cos and sin of pos · freq_scale · rate_i.
std::vector<float> rope_row(const Model& m, uint32_t il, uint32_t n_ctx, uint32_t pos, uint32_t pairs) {
    const std::vector<double> inv = rope_rates(m, il, m.layers[il].rope_base, n_ctx);   // the layer's own rates
    std::vector<float> t(size_t(pos + 1) * 2 * pairs, 0.0f);
    for (uint32_t i = 0; i < pairs; ++i) {
        const double theta = double(pos) * m.rope_freq_scale * inv[i];
        t[(size_t(pos) * pairs + i) * 2] = float(std::cos(theta));
        t[(size_t(pos) * pairs + i) * 2 + 1] = float(std::sin(theta));
    }
    return t;
}

// A page-table row for a sequence of n_ctx positions: the pool's pages
// (one spare) in a shuffled order, so no page sits where its index says.
std::vector<uint32_t> shuffled_pages(Runner& r, uint32_t max_pages, uint32_t n_pages) {
    std::vector<uint32_t> pages(n_pages);
    for (uint32_t i = 0; i < n_pages; ++i) pages[i] = i;
    for (uint32_t i = n_pages - 1; i > 0; --i) std::swap(pages[i], pages[r.rand_below(i + 1)]);
    pages.resize(max_pages);
    return pages;
}

// Paged KV's first op: q, k, v of one token at `pos` (biases, q/k norms,
// RoPE, the temperature) into q_rot and the K/V slot of its page. q_rot
// within the reference's bound, the K/V slot bit-equal, no other pool
// element written.
Worst check_paged_rope(Runner& r, const Model& m, uint32_t il, const kx::PagedRopeShape& s, uint32_t n_ctx,
                       uint32_t pos) {
    const LayerDesc& l = m.layers[il];
    const uint32_t hd = s.head_dim, nkv = s.n_head_kv, n_pages = s.max_pages + 1;
    PagedRopeInputs in;
    in.q = r.randv(size_t(s.n_head) * hd, 1.0f);
    in.k = r.randv(size_t(nkv) * hd, 1.0f);
    in.v = r.randv(in.k.size(), 1.0f);
    if (s.bias) in.bq = vec(l.bq), in.bk = vec(l.bk), in.bv = vec(l.bv);
    if (s.qk_norm) in.q_norm = vec(l.q_norm), in.k_norm = s.q_only ? in.q_norm : vec(l.k_norm);   // q_only: k unread
    in.rope = rope_row(m, il, n_ctx, pos, s.rot() / 2);
    in.tables = shuffled_pages(r, s.max_pages, n_pages);
    in.pos = {pos};
    in.row = {0};
    const size_t pool = size_t(n_pages) * nkv * s.page_size * hd;
    const uint16_t sentinel = 0x5a5a;   // an f16 the op cannot write by chance
    std::vector<ptx::ParamValue> args = {r.up(std::vector<uint32_t>{pos, 0}), r.up(in.tables), r.up(in.q), r.up(in.k),
                                         r.up(in.v)};
    if (s.bias) args.insert(args.end(), {r.up(in.bq), r.up(in.bk), r.up(in.bv)});
    if (s.qk_norm) args.insert(args.end(), {r.up(in.q_norm), r.up(in.k_norm)});
    const DevPtr kp = r.up(std::vector<uint16_t>(pool, sentinel)), vp = r.up(std::vector<uint16_t>(pool, sentinel));
    const DevPtr out = r.up(std::vector<float>(in.q.size()));
    args.insert(args.end(), {r.up(in.rope), kp, vp, out});
    r.launch(kx::paged_rope_kernel(s, r.target()), args);
    const PagedRopeExpected e = paged_rope_reference(s, in);
    Worst w;
    const std::vector<float> got = r.down<float>(out, in.q.size());
    for (size_t i = 0; i < got.size(); ++i) w.add(std::fabs(got[i] - e.q[i].value), e.q[i].tol);
    const std::vector<uint16_t> gk = r.down<uint16_t>(kp, pool), gv = r.down<uint16_t>(vp, pool);
    // Any pool element wrong: an error of 1 against a bound of 0.
    w.add(paged_rope_check_pools(s, e, gk, gv, sentinel).pass() ? 0.0 : 1.0, 0.0);
    return w;
}

// Paged KV's second op: one token at `pos` attending over a page-table row
// of shuffled pages filled with random K/V (the window's on a sliding
// layer), against paged_attention_reference.
Worst check_paged_attention(Runner& r, const kx::PagedAttentionShape& s, uint32_t pos) {
    const uint32_t hd = s.head_dim, n_pages = s.max_pages + 1;
    PagedAttentionInputs in;
    in.q = r.randv(size_t(s.n_head) * hd, 0.3f);
    const std::vector<float> kf = r.randv(size_t(n_pages) * s.n_head_kv * s.page_size * hd, 1.0f),
                             vf = r.randv(kf.size(), 1.0f);
    for (size_t i = 0; i < kf.size(); ++i) in.k_pool.push_back(f32_to_f16(kf[i])), in.v_pool.push_back(f32_to_f16(vf[i]));
    in.tables = shuffled_pages(r, s.max_pages, n_pages);
    in.pos = {pos};
    in.row = {0};
    const DevPtr out = r.up(std::vector<float>(in.q.size()));
    r.launch(kx::paged_attention_kernel(s, r.target()),
             {r.up(std::vector<uint32_t>{pos, 0}), r.up(in.tables), r.up(in.q), r.up(in.k_pool), r.up(in.v_pool),
              r.up(std::vector<float>(size_t(s.n_head) * s.splits * (hd + 4))),
              r.up(std::vector<uint32_t>(kx::paged_attention_sync_slots(s), 0u)),
              out});
    const std::vector<Checked> e = paged_attention_reference(s, in);
    const std::vector<float> got = r.down<float>(out, in.q.size());
    Worst w;
    for (size_t i = 0; i < got.size(); ++i) w.add(std::fabs(got[i] - e[i].value), e[i].tol);
    return w;
}


// gemma4's per-layer inputs (kernels::ple_input_kernel): a random projection
// and a random token's row of the model's table against
// CpuBackend::per_layer_inputs' arithmetic (the sum of squares in double
// there, in f32 pairs here: 1e-6 relative).
Worst check_ple_input(Runner& r, const Model& m, const kx::PleInputShape& s) {
    const uint32_t P = s.per_layer, PL = P * s.layers, token = r.rand_below(m.n_vocab);
    const std::vector<float> proj = r.randv(PL, 4.0f), row = dequantize(m.per_layer_tok_embd, token),
                             norm = vec(m.per_layer_proj_norm);
    const DevPtr out = r.up(std::vector<float>(PL, 0.0f));
    r.launch(kx::ple_input_kernel(s, r.target()),
             {r.up(proj), r.weight(m.per_layer_tok_embd), r.up(std::vector<uint32_t>{token}), r.up(norm), out});
    const std::vector<float> got = r.down<float>(out, PL);
    Worst w;
    for (uint32_t j = 0; j < PL; j += P) {
        double ss = 0;
        for (uint32_t i = 0; i < P; ++i) ss += double(proj[j + i] * s.proj_scale) * double(proj[j + i] * s.proj_scale);
        const float scale = 1.0f / std::sqrt(float(ss / P) + s.eps);
        for (uint32_t i = 0; i < P; ++i) {
            const float ref = ((proj[j + i] * s.proj_scale) * scale * norm[i] + row[j + i] * s.tok_scale) * s.sum_scale;
            w.add(std::fabs(got[j + i] - ref), 1e-6 * (1 + std::fabs(ref)));
        }
    }
    return w;
}

}  // namespace

std::vector<SelftestResult> run_selftest(const Model& m, std::shared_ptr<const Driver> driver, uint32_t n_ctx,
                                         uint32_t seed, const std::function<void(const SelftestResult&)>& report,
                                         bool quantized_inputs, bool paged_kv) {
    Runner r(m, std::move(driver), seed);
    const DecodePlan plan = decode_plan(m, n_ctx, quantized_inputs, r.sms(), paged_kv);
    const ptx::Target& T = r.target();
    std::vector<SelftestResult> out;
    std::set<std::string> done;
    auto once = [&](const std::string& name, const std::string& what, const std::function<Worst()>& fn) {
        if (!done.insert(name).second) return;
        const Worst w = fn();
        r.release();
        out.push_back({name, what, w.error, w.tol, w.pass});
        if (report) report(out.back());
    };
    const uint32_t E = m.hp.n_embd, hd = m.head_dim, pos = n_ctx - 1;

    once(kx::embed_kernel(plan.embed, T).name, "embedding row", [&] {
        const uint32_t token = r.rand_below(m.n_vocab);
        const DevPtr x = r.up(std::vector<float>(E, 0.0f));
        r.launch(kx::embed_kernel(plan.embed, T), {r.weight(m.tok_embd), r.up(std::vector<uint32_t>{token}), x});
        const std::vector<float> got = r.down<float>(x, E), ref = dequantize(m.tok_embd, token);
        Worst w;
        for (uint32_t i = 0; i < E; ++i) w.add(std::fabs(got[i] - ref[i] * m.embd_scale), 0.0);
        return w;
    });
    if (plan.ple) {   // gemma4's per-layer inputs
        once(kx::gemv_kernel(plan.ple_model, T).name, "per-layer model projection",
             [&] { return check_gemv(r, plan.ple_model, {&m.per_layer_model_proj}, nullptr); });
        once(kx::ple_input_kernel(plan.ple_input, T).name, "per-layer inputs: slices normed, plus the token's row",
             [&] { return check_ple_input(r, m, plan.ple_input); });
    }
    for (uint32_t il = 0; il < plan.layers.size(); ++il) {
        const LayerPlan& lp = plan.layers[il];
        const LayerDesc& l = m.layers[il];
        // gemma4: a shared-KV layer's GEMV is q only; without attn_v, k's matrix serves as v.
        const std::vector<const Weight*> qkv = lp.kv_layer != il ? std::vector<const Weight*>{&l.wq}
                                                                  : std::vector<const Weight*>{&l.wq, &l.wk, l.wv ? &l.wv : &l.wk};
        once(kx::gemv_kernel(lp.qkv, T).name, lp.kv_layer != il ? "attn_norm + Q" : "attn_norm + Q, K, V",
             [&] { return check_gemv(r, lp.qkv, qkv, &l.attn_norm); });
        if (lp.paged) {
            once(kx::paged_rope_kernel(lp.rope, T).name,
                 lp.rope.q_only ? "RoPE of q (the K/V: an earlier layer's)" : "RoPE, K/V append into a page",
                 [&] { return check_paged_rope(r, m, il, lp.rope, n_ctx, pos); });
            once(kx::paged_attention_kernel(lp.paged_attention, T).name, "attention over shuffled pages",
                 [&] { return check_paged_attention(r, lp.paged_attention, pos); });
        }
        const kx::AttentionShape& as = lp.attention;
        if (!lp.paged) once(kx::attention_kernel(as, T).name, "RoPE, KV append, attention", [&] {
            const uint32_t q_dim = as.n_head * hd, kv = as.n_head_kv * hd;
            AttentionInputs in;
            in.pos = pos;
            in.q = r.randv(q_dim, 1.0f);
            in.k = r.randv(kv, 1.0f);
            in.v = r.randv(kv, 1.0f);
            if (as.bias) in.bq = vec(l.bq), in.bk = vec(l.bk), in.bv = vec(l.bv);
            if (as.qk_norm) in.q_norm = vec(l.q_norm), in.k_norm = vec(l.k_norm);
            in.rope = rope_row(m, il, n_ctx, pos, as.rot() / 2);   // pairs a row (partial rotary: n_rot/2)
            const std::vector<float> kf = r.randv(size_t(n_ctx) * kv, 1.0f), vf = r.randv(kf.size(), 1.0f);
            for (size_t i = 0; i < kf.size(); ++i) in.k_cache.push_back(f32_to_f16(kf[i])), in.v_cache.push_back(f32_to_f16(vf[i]));
            std::vector<ptx::ParamValue> args = {r.up(in.q), r.up(in.k), r.up(in.v)};
            if (as.bias) args.insert(args.end(), {r.up(in.bq), r.up(in.bk), r.up(in.bv)});
            if (as.qk_norm) args.insert(args.end(), {r.up(in.q_norm), r.up(in.k_norm)});
            const DevPtr kc = r.up(in.k_cache), vc = r.up(in.v_cache), o = r.up(std::vector<float>(q_dim));
            args.insert(args.end(), {r.up(in.rope), r.up(std::vector<uint32_t>{pos}), kc, vc,
                                     r.up(std::vector<float>(size_t(as.n_head) * as.splits() * (hd + 2))),
                                     r.up(std::vector<uint32_t>(as.n_head, 0u)), o});
            r.launch(kx::attention_kernel(as, T), args);
            const std::vector<uint16_t> gk = r.down<uint16_t>(kc, in.k_cache.size()), gv = r.down<uint16_t>(vc, in.v_cache.size());
            in.own_k.assign(gk.begin() + long(pos) * kv, gk.begin() + long(pos + 1) * kv);
            const AttentionExpected e = attention_reference(as, in);
            Worst w;
            const std::vector<float> got = r.down<float>(o, q_dim);
            for (uint32_t i = 0; i < q_dim; ++i) w.add(std::fabs(got[i] - e.out[i].value), e.out[i].tol);
            for (uint32_t i = 0; i < kv; ++i) {
                w.add(std::fabs(f16_to_f32(gk[size_t(pos) * kv + i]) - e.k_row[i].value), e.k_row[i].tol);
                w.add(std::fabs(f16_to_f32(gv[size_t(pos) * kv + i]) - e.v_row[i].value), e.v_row[i].tol);
            }
            return w;
        });
        once(kx::gemv_kernel(lp.wo, T).name, lp.wo.accumulate ? "attention output + residual" : "attention output",
             [&] { return check_gemv(r, lp.wo, {&l.wo}, nullptr); });
        // x += rmsnorm(o) ∘ w, times gemma4's output scale when the shape says so.
        auto add_norm = [&](const kx::AddNormShape& an, const Weight& norm) {
            once(kx::add_norm_kernel(an, T).name, an.scaled ? "normalised residual add, times the layer's output scale"
                                                            : "normalised residual add",
                 [&] {
                     const std::vector<float> x = r.randv(E, 1.0f), o = r.randv(E, 3.0f), nw = vec(norm);
                     const float out_scale = an.scaled ? vec(l.out_scale).at(0) : 1.0f;
                     const DevPtr dx = r.up(x);
                     std::vector<ptx::ParamValue> args = {dx, r.up(o), r.up(nw)};
                     if (an.scaled) args.push_back(r.up(std::vector<float>{out_scale}));
                     r.launch(kx::add_norm_kernel(an, T), args);
                     double ss = 0;
                     for (float v : o) ss += double(v) * v;
                     const float scale = 1.0f / std::sqrt(float(ss / E) + an.eps);
                     const std::vector<float> got = r.down<float>(dx, E);
                     Worst w;
                     for (uint32_t i = 0; i < E; ++i) {
                         const float sum = x[i] + (o[i] * scale) * nw[i], ref = an.scaled ? sum * out_scale : sum;
                         w.add(std::fabs(got[i] - ref), 1e-6 * (1 + std::fabs(ref)));
                     }
                     return w;
                 });
        };
        if (lp.post_attn_norm) add_norm(plan.add_norm, l.attn_post_norm);
        once(kx::gemv_kernel(lp.gate_up, T).name, "ffn_norm + gate, up, act(gate) * up",
             [&] { return check_gemv(r, lp.gate_up, {&l.gate, &l.up}, &l.ffn_norm); });
        once(kx::gemv_kernel(lp.down, T).name, "down projection",
             [&] { return check_gemv(r, lp.down, {&l.down}, nullptr); });
        if (lp.post_ffn_norm) add_norm(lp.ffn_add, l.ffn_post_norm);
        if (lp.ple) {   // gemma4: x += rmsnorm(proj · (gelu(gate · x) ⊙ slice))
            once(kx::gemv_kernel(lp.ple_gate, T).name, "per-layer input gate, gelu(gate) * the layer's slice",
                 [&] { return check_gemv(r, lp.ple_gate, {&l.ple_gate}, nullptr); });
            once(kx::gemv_kernel(lp.ple_proj, T).name, "per-layer input projection",
                 [&] { return check_gemv(r, lp.ple_proj, {&l.ple_proj}, nullptr); });
            add_norm(lp.ple_add, l.ple_post_norm);
        }
    }
    if (plan.softcap.cap > 0)
        once(kx::softcap_kernel(plan.softcap, T).name, "final logit soft-cap", [&] {
            const std::vector<float> x = r.randv(m.n_vocab, 2.0f * plan.softcap.cap);
            const DevPtr dx = r.up(x);
            r.launch(kx::softcap_kernel(plan.softcap, T), {dx});
            const std::vector<float> got = r.down<float>(dx, x.size());
            Worst w;   // tanh as 1 - 2 / (1 + e^2y) with ex2.approx: ~1e-7 absolute, times the cap
            for (size_t i = 0; i < x.size(); ++i) {
                const double ref = plan.softcap.cap * std::tanh(double(x[i]) / plan.softcap.cap);
                w.add(std::fabs(got[i] - ref), 1e-6 * plan.softcap.cap + 1e-6 * std::fabs(ref));
            }
            return w;
        });
    once(kx::gemv_kernel(plan.head, T).name, "output_norm + LM head",
         [&] { return check_gemv(r, plan.head, {&m.output}, &m.output_norm); });
    once(kx::clear_u64_kernel(T).name, "clear the argmax slot", [&] {
        const DevPtr slot = r.up(std::vector<uint64_t>{~0ull});
        r.launch(kx::clear_u64_kernel(T), {slot});
        Worst w;
        w.add(r.down<uint64_t>(slot, 1)[0] == 0 ? 0.0 : 1.0, 0.0);
        return w;
    });
    const kx::ArgmaxShape am{m.n_vocab};
    once(kx::argmax_kernel(am, T).name, "argmax of the logits (error: index distance)", [&] {
        std::vector<float> logits = r.randv(m.n_vocab, 3.0f);
        logits[r.rand_below(m.n_vocab)] = 40.0f;   // one clear winner, anywhere
        const DevPtr slot = r.up(std::vector<uint64_t>{0});
        r.launch(kx::argmax_kernel(am, T), {r.up(logits), slot});
        const uint32_t got = kx::argmax_index(r.down<uint64_t>(slot, 1)[0]);
        const uint32_t want = uint32_t(std::max_element(logits.begin(), logits.end()) - logits.begin());
        Worst w;
        w.add(std::fabs(double(got) - double(want)), 0.0);
        return w;
    });
    return out;
}

}  // namespace ptxlm::cuda
