#include "engine/cuda/selftest.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <random>
#include <set>

#include "engine/cuda/decode_plan.h"
#include "engine/cuda/device.h"
#include "engine/cuda/gemv_reference.h"
#include "engine/cuda/launch.h"
#include "engine/cuda/module.h"
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
    r.launch(kx::gemv_kernel(s, r.target()), args);
    const std::vector<std::vector<RowCheck>> ref = gemv_reference(s, ws, nw, x, y0);
    Worst worst;
    for (size_t o = 0; o < ref.size(); ++o) {
        const std::vector<float> got = r.down<float>(outs[o], ref[o].size());
        for (size_t row = 0; row < ref[o].size(); ++row) worst.add(std::fabs(got[row] - ref[o][row].value), ref[o][row].tol);
    }
    return worst;
}

}  // namespace

std::vector<SelftestResult> run_selftest(const Model& m, std::shared_ptr<const Driver> driver, uint32_t n_ctx,
                                         uint32_t seed, const std::function<void(const SelftestResult&)>& report,
                                         bool quantized_inputs) {
    const DecodePlan plan = decode_plan(m, n_ctx, quantized_inputs);
    Runner r(m, std::move(driver), seed);
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
    for (uint32_t il = 0; il < plan.layers.size(); ++il) {
        const LayerPlan& lp = plan.layers[il];
        const LayerDesc& l = m.layers[il];
        once(kx::gemv_kernel(lp.qkv, T).name, "attn_norm + Q, K, V", [&] { return check_gemv(r, lp.qkv, {&l.wq, &l.wk, &l.wv}, &l.attn_norm); });
        once(kx::rope_append_kernel(lp.rope, T).name, "RoPE + KV append", [&] {
            const kx::RopeShape& s = lp.rope;
            const uint32_t q_dim = s.n_head * hd, kv = s.n_head_kv * hd;
            std::vector<float> q = r.randv(q_dim, 1.0f), k = r.randv(kv, 1.0f), v = r.randv(kv, 1.0f);
            // cos/sin of row `pos` only: the kernel reads no other row.
            const std::vector<double> inv = rope_rates(m, l.rope_base);
            std::vector<float> table(size_t(pos + 1) * hd);
            for (uint32_t i = 0; i < hd / 2; ++i) {
                const double theta = double(pos) * m.rope_freq_scale * inv[i];
                table[(size_t(pos) * hd / 2 + i) * 2] = float(std::cos(theta));
                table[(size_t(pos) * hd / 2 + i) * 2 + 1] = float(std::sin(theta));
            }
            const std::vector<uint16_t> cache(size_t(pos + 1) * kv, 0);
            const DevPtr dq = r.up(q), kc = r.up(cache), vc = r.up(cache);
            std::vector<ptx::ParamValue> args = {dq, r.up(k), r.up(v)};
            const std::vector<float> bq = vec(l.bq), bk = vec(l.bk), bv = vec(l.bv), qn = vec(l.q_norm), kn = vec(l.k_norm);
            if (s.bias) args.insert(args.end(), {r.up(bq), r.up(bk), r.up(bv)});
            if (s.qk_norm) args.insert(args.end(), {r.up(qn), r.up(kn)});
            args.insert(args.end(), {r.up(table), r.up(std::vector<uint32_t>{pos}), kc, vc});
            r.launch(kx::rope_append_kernel(s, T), args);
            auto prep = [&](std::vector<float>& x, const std::vector<float>& b, const std::vector<float>& nw, uint32_t heads) {
                for (size_t i = 0; i < b.size(); ++i) x[i] += b[i];
                for (uint32_t h = 0; h < heads; ++h) {
                    float* p = &x[h * hd];
                    if (!nw.empty()) {
                        double ss = 0;
                        for (uint32_t i = 0; i < hd; ++i) ss += double(p[i]) * p[i];
                        const float scale = 1.0f / std::sqrt(float(ss / hd) + s.eps);
                        for (uint32_t i = 0; i < hd; ++i) p[i] = (p[i] * scale) * nw[i];
                    }
                    for (uint32_t i = 0; i < hd / 2; ++i) {
                        const float c = table[(size_t(pos) * hd / 2 + i) * 2], sn = table[(size_t(pos) * hd / 2 + i) * 2 + 1];
                        const uint32_t a = s.neox ? i : 2 * i, b2 = s.neox ? i + hd / 2 : 2 * i + 1;
                        const float x0 = p[a], x1 = p[b2];
                        p[a] = x0 * c - x1 * sn;
                        p[b2] = x0 * sn + x1 * c;
                    }
                }
            };
            std::vector<float> rq = q, rk = k, rv = v;
            prep(rq, bq, qn, s.n_head);
            prep(rk, bk, kn, s.n_head_kv);
            for (size_t i = 0; i < bv.size(); ++i) rv[i] += bv[i];
            const double rel = s.qk_norm ? 2e-6 : 0.0;   // f32 vs double sum of squares; else bit-equal
            Worst w;
            const std::vector<float> gq = r.down<float>(dq, q_dim);
            for (uint32_t i = 0; i < q_dim; ++i) w.add(std::fabs(gq[i] - rq[i]), rel * (1 + std::fabs(rq[i])));
            const std::vector<uint16_t> gk = r.down<uint16_t>(kc, cache.size()), gv = r.down<uint16_t>(vc, cache.size());
            for (uint32_t i = 0; i < kv; ++i) {
                const float want_k = f16_to_f32(f32_to_f16(rk[i]));
                w.add(std::fabs(f16_to_f32(gk[size_t(pos) * kv + i]) - want_k), 4 * rel * (1 + std::fabs(want_k)) + (rel ? 1e-3 * std::fabs(want_k) : 0));
                w.add(std::fabs(f16_to_f32(gv[size_t(pos) * kv + i]) - f16_to_f32(f32_to_f16(rv[i]))), 0.0);
            }
            return w;
        });
        const kx::AttentionShape& as = lp.attention;
        once(kx::attention_split_kernel(as, T).name, "attention (split + reduce)", [&] {
            const uint32_t kv = as.n_head_kv * hd, group = as.n_head / as.n_head_kv;
            const std::vector<float> q = r.randv(as.n_head * hd, 1.0f);
            std::vector<uint16_t> kc(size_t(n_ctx) * kv), vc(kc.size());
            const std::vector<float> kf = r.randv(kc.size(), 1.0f), vf = r.randv(vc.size(), 1.0f);
            for (size_t i = 0; i < kc.size(); ++i) kc[i] = f32_to_f16(kf[i]), vc[i] = f32_to_f16(vf[i]);
            const DevPtr dpos = r.up(std::vector<uint32_t>{pos}), part = r.up(std::vector<float>(size_t(as.n_head) * as.splits() * (hd + 2)));
            const DevPtr o = r.up(std::vector<float>(q.size()));
            r.launch(kx::attention_split_kernel(as, T), {r.up(q), r.up(kc), r.up(vc), dpos, part});
            r.launch(kx::attention_reduce_kernel(as, T), {part, dpos, o});
            const std::vector<float> got = r.down<float>(o, q.size());
            const uint32_t p0 = as.window && pos + 1 > as.window ? pos + 1 - as.window : 0;
            Worst w;
            for (uint32_t h = 0; h < as.n_head; ++h) {
                const uint32_t off = (h / group) * hd;
                std::vector<double> sc;
                double mx = -std::numeric_limits<double>::infinity(), sum = 0;
                for (uint32_t j = p0; j <= pos; ++j) {
                    double d = 0;
                    for (uint32_t i = 0; i < hd; ++i) d += double(q[h * hd + i]) * f16_to_f32(kc[size_t(j) * kv + off + i]);
                    sc.push_back(d * as.scale);
                    mx = std::max(mx, sc.back());
                }
                for (double& x : sc) sum += (x = std::exp(x - mx));
                for (uint32_t i = 0; i < hd; ++i) {
                    double ref = 0, mag = 0;
                    for (uint32_t j = p0; j <= pos; ++j) {
                        const double vv = f16_to_f32(vc[size_t(j) * kv + off + i]);
                        ref += sc[j - p0] / sum * vv;
                        mag += sc[j - p0] / sum * std::fabs(vv);
                    }
                    w.add(std::fabs(got[h * hd + i] - ref), 2e-6 * mag + 1e-7);
                }
            }
            return w;
        });
        once(kx::gemv_kernel(lp.wo, T).name, lp.wo.accumulate ? "attention output + residual" : "attention output",
             [&] { return check_gemv(r, lp.wo, {&l.wo}, nullptr); });
        if (lp.post_attn_norm)
            once(kx::add_norm_kernel(plan.add_norm, T).name, "normalised residual add", [&] {
                const std::vector<float> x = r.randv(E, 1.0f), o = r.randv(E, 3.0f), nw = vec(l.attn_post_norm);
                const DevPtr dx = r.up(x);
                r.launch(kx::add_norm_kernel(plan.add_norm, T), {dx, r.up(o), r.up(nw)});
                double ss = 0;
                for (float v : o) ss += double(v) * v;
                const float scale = 1.0f / std::sqrt(float(ss / E) + plan.add_norm.eps);
                const std::vector<float> got = r.down<float>(dx, E);
                Worst w;
                for (uint32_t i = 0; i < E; ++i) {
                    const float ref = x[i] + (o[i] * scale) * nw[i];
                    w.add(std::fabs(got[i] - ref), 1e-6 * (1 + std::fabs(ref)));
                }
                return w;
            });
        once(kx::gemv_kernel(lp.gate_up, T).name, "ffn_norm + gate, up, act(gate) * up",
             [&] { return check_gemv(r, lp.gate_up, {&l.gate, &l.up}, &l.ffn_norm); });
        once(kx::gemv_kernel(lp.down, T).name, "down projection",
             [&] { return check_gemv(r, lp.down, {&l.down}, nullptr); });
    }
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
