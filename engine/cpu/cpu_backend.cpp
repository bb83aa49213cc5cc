#include "engine/cpu/cpu_backend.h"

#include <unistd.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <new>
#include <stdexcept>
#include <string>
#include <unordered_map>

#include "engine/cpu/elementwise.h"
#include "engine/cpu/env_knob.h"
#include "engine/cpu/lazy_buffer.h"
#include "engine/cpu/matvec.h"
#include "engine/sampler.h"
#include "gguf/f16.h"

namespace ptxlm::cpu {

namespace {

// out = x / rms(x) · weight (weight may be null: plain normalisation).
// The sum of squares in double over 8 interleaved partial sums: one chain of
// n dependent adds took 0.85 us at SmolLM2's 576, 60 times a token, while the
// pool's other threads wait.
void rms_norm(const float* x, const float* weight, float* out, uint64_t n, float eps) {
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    uint64_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; ++k) acc[k] += double(x[i + k]) * x[i + k];
    for (; i < n; ++i) acc[0] += double(x[i]) * x[i];
    const double ss = ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    const float scale = 1.0f / std::sqrt(static_cast<float>(ss / double(n)) + eps);
    for (uint64_t i = 0; i < n; ++i) out[i] = weight ? (x[i] * scale) * weight[i] : x[i] * scale;
}

float silu(float x) { return x / (1.0f + std::exp(-x)); }
float gelu_tanh(float x) {
    const float k = 0.7978845608028654f;   // √(2/π)
    return 0.5f * x * (1.0f + std::tanh(k * (x + 0.044715f * x * x * x)));
}

}  // namespace

struct CpuBackend::Layer {
    std::vector<float> attn_norm, ffn_norm, q_norm, k_norm, attn_post_norm, ffn_post_norm, bq, bk, bv, ple_post_norm;
    float out_scale = 1.0f;         // gemma4's layer_output_scale (1 when absent)
    std::vector<double> inv_freq;   // per rotated pair (n_rot/2): base^(−2i/n_rot) / rope_factors(n_ctx)[i]
    uint64_t rope_at = 0;           // its cos and sin in a token's row of rope_cs_
    // n_head_kv planes of n_pages · page_size rows of head_dim values, f16
    // or f32 (AttentionArgs's layout); empty on a layer that reads another
    // layer's (LayerDesc::kv_layer).
    LazyBuffer k_cache, v_cache;
    // wq wk wv wo gate up down ple_gate ple_proj, in that order, as the
    // quantized products read them: the matrix (the model's, or its copy in
    // the pack arena) and its packed rows (null: not packed).
    std::array<const Weight*, 9> mats{};
    std::array<const PackedWeight*, 9> packs{};
};

CpuBackend::CpuBackend(const Model& m, uint32_t n_ctx, KvType kv, int threads)
    : CpuBackend(m, n_ctx, kv, std::make_shared<ThreadPool>(threads > 0 ? threads : ThreadPool::default_threads())) {}

CpuBackend::CpuBackend(const Model& m, uint32_t n_ctx, KvType kv, std::shared_ptr<ThreadPool> pool, KvPages pages)
    : m_(m), n_ctx_(n_ctx), kv_(kv), pages_(pages), pool_(std::move(pool)) {
    if (pages_.page_size == 0 || pages_.page_size > 65536 || (pages_.page_size & (pages_.page_size - 1)))
        throw std::invalid_argument("KV pages of " + std::to_string(pages_.page_size) +
                                    " positions: a power of two up to 65536");
    while ((1u << page_shift_) < pages_.page_size) ++page_shift_;
    if (pages_.n_pages == 0) pages_.n_pages = (n_ctx + pages_.page_size - 1) / pages_.page_size;
    own_pages_.resize(pages_.n_pages);
    for (uint32_t i = 0; i < pages_.n_pages; ++i) own_pages_[i] = i;
    const uint64_t kv_rows = uint64_t(pages_.n_pages) * pages_.page_size;
    arith_.path = CpuPath::Quantized;
    arith_.isa = best_isa();
    const uint64_t E = m.hp.n_embd;
    uint64_t max_q = 0, max_kv = 0, max_ff = 0, max_hd = 0;
    layers_.resize(m.layers.size());
    for (size_t il = 0; il < m.layers.size(); ++il) {
        const LayerDesc& d = m.layers[il];
        Layer& l = layers_[il];
        l.attn_norm = to_floats(d.attn_norm);
        l.ffn_norm = to_floats(d.ffn_norm);
        l.q_norm = to_floats(d.q_norm);
        l.k_norm = to_floats(d.k_norm);
        l.attn_post_norm = to_floats(d.attn_post_norm);
        l.ffn_post_norm = to_floats(d.ffn_post_norm);
        l.bq = to_floats(d.bq);
        l.bk = to_floats(d.bk);
        l.bv = to_floats(d.bv);
        l.ple_post_norm = to_floats(d.ple_post_norm);
        if (d.out_scale) l.out_scale = to_floats(d.out_scale)[0];
        l.inv_freq = rope_rates(m, uint32_t(il), d.rope_base, n_ctx);
        const uint64_t el = kv == KvType::F16 ? 2 : 4;
        if (m.has_kv(uint32_t(il))) {
            l.k_cache = LazyBuffer(kv_rows * m.kv_dim(il) * el, LazyBuffer::Pages::Small);
            l.v_cache = LazyBuffer(kv_rows * m.kv_dim(il) * el, LazyBuffer::Pages::Small);
        }
        const uint64_t hd = m.head_dim_of(uint32_t(il));
        max_hd = std::max(max_hd, hd);
        max_q = std::max<uint64_t>(max_q, uint64_t(d.n_head) * hd);
        max_kv = std::max<uint64_t>(max_kv, m.kv_dim(il));
        max_ff = std::max<uint64_t>(max_ff, d.n_ff);
    }
    index_rope_tables();
    output_norm_ = to_floats(m.output_norm);
    ple_norm_ = to_floats(m.per_layer_proj_norm);
    ple_w_ = uint64_t(m.n_embd_per_layer) * m.layers.size();
    ple_.resize(kMaxBatch * ple_w_);
    pg_.resize(kMaxBatch * m.n_embd_per_layer);
    q_w_ = max_q;
    kv_w_ = max_kv;
    ff_w_ = max_ff;
    x_.resize(kMaxBatch * E);
    xn_.resize(kMaxBatch * E);
    o_.resize(kMaxBatch * E);
    q_.resize(kMaxBatch * max_q);
    att_.resize(kMaxBatch * max_q);
    k_.resize(kMaxBatch * max_kv);
    v_.resize(kMaxBatch * max_kv);
    g_.resize(kMaxBatch * max_ff);
    u_.resize(kMaxBatch * max_ff);
    scores_.resize(uint64_t(pool_->size()) * n_ctx);
    rows_.resize(uint64_t(pool_->size()) * max_hd);
    // PTXLM_CPU_COPY=0 leaves the matrices that are not packed in the file's
    // pages (a diagnostic: huge-page copies against the file's 4 KiB pages).
    copy_weights_ = env_switch("PTXLM_CPU_COPY", true);
    use_file_weights();
}

void CpuBackend::use_file_weights() {
    for (size_t il = 0; il < m_.layers.size(); ++il) {
        const LayerDesc& d = m_.layers[il];
        layers_[il].mats = {&d.wq, &d.wk, &d.wv, &d.wo, &d.gate, &d.up, &d.down, &d.ple_gate, &d.ple_proj};
        layers_[il].packs = {};
    }
    output_ = &m_.output;
    ple_model_ = &m_.per_layer_model_proj;
}

const Weight& CpuBackend::read_view(const Weight& w) const {
    for (const auto& c : copies_)
        if (c->of == &w) return c->view;
    return w;
}

void CpuBackend::pack_weights() {
    // PTXLM_CPU_PACK=0 keeps the file's layout (a diagnostic: packed against
    // unpacked in one benchmark run).
    static const bool off = !env_switch("PTXLM_CPU_PACK", true);
    const bool wanted = arith_.path == CpuPath::Quantized && !off;
    if (wanted ? packed_isa_ == arith_.isa && packed_copies_ == copy_weights_ : !packed_isa_) return;
    use_file_weights();
    packed_.clear();
    copies_.clear();
    pack_arena_ = {};
    packed_isa_.reset();
    output_pack_ = nullptr;
    ple_model_pack_ = nullptr;
    if (!wanted) return;
    packed_isa_ = arith_.isa;
    packed_copies_ = copy_weights_;
    // A matrix used twice is packed (or copied) once: its packed rows and
    // the matrix the products read.
    struct Prepared {
        const PackedWeight* packed;
        const Weight* mat;
    };
    std::unordered_map<const Weight*, Prepared> seen;
    // The packed (or plain) copy is what the quantized path reads from now
    // on: the file's pages of the rows copied leave memory as the copy goes,
    // so a matrix is never resident twice (they come back from the page
    // cache if the reference path, the GPU backend or an embedding lookup
    // reads them). Pages are dropped whole: from the last boundary passed, so
    // one that straddles two runs goes with the second. The page cache keeps
    // the file (no POSIX_FADV_DONTNEED): it is not this process's resident
    // set, and the next load reads it from memory rather than disk. One Drop
    // per matrix.
    struct Drop {
        const gguf::File* file;
        const uint8_t* from;
    };
    const PackProgress dropped = [](void* ctx, const uint8_t* p, uint64_t n) {
        auto& d = *static_cast<Drop*>(ctx);
        const uint8_t* end = p + n;
        d.file->drop_pages(d.from, uint64_t(end - d.from));
        const uintptr_t page = uintptr_t(sysconf(_SC_PAGESIZE));
        d.from = std::max(d.from, reinterpret_cast<const uint8_t*>(reinterpret_cast<uintptr_t>(end) / page * page));
    };
    const auto keep = [&](const Weight& w, PackedWeight p) {
        packed_.push_back(std::make_unique<PackedWeight>(std::move(p)));
        const Prepared out{packed_.back().get(), &w};
        seen.emplace(&w, out);
        return out;
    };
    auto pack = [&](const Weight& w) -> Prepared {
        if (!w) return {nullptr, &w};
        if (const auto it = seen.find(&w); it != seen.end()) return it->second;
        Drop drop{&m_.file, w.data};
        if (PackedWeight p = pack_weight(w, arith_.isa, dropped, &drop, &pack_arena_)) return keep(w, std::move(p));
        Prepared out{nullptr, &w};
        if (copy_weights_) {
            // No packed kernel (F16, F32, ...) or too few rows: the
            // file's bytes as they are, on huge pages (lazy_buffer.h), read
            // every token like the packed ones. The tail rows of a packed
            // matrix (past its last group) stay in the file: a few rows.
            auto c = std::make_unique<Copy>(Copy{&w, w, copy_weight(w, dropped, &drop, &pack_arena_)});
            c->view.data = c->bytes.get();
            out.mat = &c->view;
            copies_.push_back(std::move(c));
        }
        seen.emplace(&w, out);
        return out;
    };
    for (size_t il = 0; il < m_.layers.size(); ++il) {
        Layer& l = layers_[il];
        // Gate and up as a pair, their 32-row runs alternating: the gated
        // pass (matmul_glu) reads them as one stream. Alone when they cannot
        // be (a type without a packed kernel, rows that differ).
        const Weight &gate = *l.mats[4], &up = *l.mats[5];
        if (gate && up && &gate != &up && !seen.count(&gate) && !seen.count(&up)) {
            Drop drop_gate{&m_.file, gate.data}, drop_up{&m_.file, up.data};
            PackedPair pair = pack_pair(gate, up, arith_.isa, dropped, &drop_gate, dropped, &drop_up, &pack_arena_);
            if (pair.a) {
                keep(gate, std::move(pair.a));
                keep(up, std::move(pair.b));
            }
        }
        for (size_t i = 0; i < l.mats.size(); ++i) {
            const Prepared p = pack(*l.mats[i]);
            l.packs[i] = p.packed;
            l.mats[i] = p.mat;
        }
    }
    const Prepared out = pack(m_.output), ple = pack(m_.per_layer_model_proj);
    output_pack_ = out.packed;
    output_ = out.mat;
    ple_model_pack_ = ple.packed;
    ple_model_ = ple.mat;
}

void CpuBackend::embedding(uint64_t token, float* out) const {
    // Tied to a packed output matrix: the row from the packed copy, since
    // the file's pages are gone and faulting one back maps its neighbours
    // too (the kernel's fault-around), which on a 262k-token vocabulary
    // grew the resident set by tens of MB over a long prompt.
    if (m_.output.data == m_.tok_embd.data && output_pack_ && token < output_pack_->groups * kPackRows) {
        thread_local std::vector<uint8_t> row;
        row.resize(m_.tok_embd.row_bytes);
        unpack_row(*output_pack_, token, m_.tok_embd.row_bytes, row.data());
        gguf::type_traits(m_.tok_embd.type).dequantize_row(row.data(), out, int64_t(m_.tok_embd.cols));
        return;
    }
    // Tied to a copied output matrix: the row from the copy, for the same
    // reason (its bytes and layout are the file's).
    if (m_.output.data == m_.tok_embd.data && output_ != &m_.output && output_->data) {
        dequantize_row(*output_, token, out);
        return;
    }
    dequantize_row(m_.tok_embd, token, out);
}

CpuBackend::~CpuBackend() = default;

void CpuBackend::set_isa(Isa isa) {
    const std::vector<Isa> ok = runnable_isas();
    if (std::find(ok.begin(), ok.end(), isa) != ok.end()) {
        arith_.isa = isa;
        return;
    }
    const std::vector<Isa> hw = hardware_isas();
    if (std::find(hw.begin(), hw.end(), isa) != hw.end())
        throw std::invalid_argument(std::string("PTXLM_CPU_ISA=") + isa_name(ok.back()) + " rules out the " +
                                    isa_name(isa) + " kernels");
    throw std::invalid_argument(std::string("this CPU cannot run ") + isa_name(isa) + " kernels");
}

std::string CpuBackend::path_name() const {
    return arith_.path == CpuPath::Reference ? "reference" : std::string("quantized (") + isa_name(arith_.isa) + ")";
}

std::string CpuBackend::description() const {
    const std::string path = arith_.path == CpuPath::Reference
                                 ? "float32 reference path"
                                 : std::string("quantized dot products (") + isa_name(arith_.isa) + ")";
    return "CPU, " + std::to_string(pool_->size()) + (pool_->size() == 1 ? " thread" : " threads") + ", " + path +
           ", KV " + kv_type_name(kv_);
}

DeviceInfo CpuBackend::device_info() const {
    DeviceInfo d;
    d.kind = "cpu";
    d.name = cpu_model_name();
    d.units = ThreadPool::default_threads();
    d.threads = pool_->size();
    d.cpu_path = path_name();
    d.kv_type = kv_type_name(kv_);
    d.kv_bytes_per_el = kv_ == KvType::F32 ? 4 : 2;
    return d;
}

void CpuBackend::debug_set_rope_base(uint32_t layer, float base) {
    layers_.at(layer).inv_freq = rope_rates(m_, layer, base, n_ctx_);
    index_rope_tables();
}

void CpuBackend::index_rope_tables() {
    rope_tables_.clear();
    rope_cs_w_ = 0;
    for (uint32_t il = 0; il < layers_.size(); ++il) {
        Layer& l = layers_[il];
        const auto same = std::find_if(rope_tables_.begin(), rope_tables_.end(),
                                       [&](uint32_t o) { return layers_[o].inv_freq == l.inv_freq; });
        if (same != rope_tables_.end()) {
            l.rope_at = layers_[*same].rope_at;
            continue;
        }
        rope_tables_.push_back(il);
        l.rope_at = rope_cs_w_;
        rope_cs_w_ += l.inv_freq.size();
    }
}

namespace {

// Rotates the first 2·half dims (the model's n_rot) of each of n_heads heads
// of hd by the pairs' cos and sin cs[0..half); the rest of a head stays as it
// is (ggml_rope_ext with n_dims < ne0 copies it). NEOX pairs (i, i + half).
void rope(float* v, uint32_t n_heads, uint32_t hd, const RopeCosSin* cs, uint32_t half, RopeStyle style) {
    // One branch-free loop per head and style (the compiler vectorises it).
    const auto rotate = [cs, half](float* p, uint32_t step, uint32_t to_b) {
        for (uint32_t i = 0; i < half; ++i) {
            const float c = cs[i].c, s = cs[i].s;
            const float x0 = p[i * step], x1 = p[i * step + to_b];
            p[i * step] = x0 * c - x1 * s;
            p[i * step + to_b] = x0 * s + x1 * c;
        }
    };
    for (uint32_t h = 0; h < n_heads; ++h) {
        if (style == RopeStyle::Adjacent) rotate(v + uint64_t(h) * hd, 2, 1);   // pairs (2i, 2i + 1)
        else rotate(v + uint64_t(h) * hd, 1, half);                             // NEOX: (i, i + half)
    }
}

// The n values of a cache from element `at` on, from src.
void store_part(uint8_t* cache, KvType kv, uint64_t at, const float* src, uint64_t n, const ElementwiseOps& ew) {
    if (kv == KvType::F32) std::memcpy(cache + at * 4, src, n * 4);
    else ew.to_f16(src, reinterpret_cast<uint16_t*>(cache) + at, n);
}

// Every f16 value as f32: the cache is read once per attended position per
// head, and a table lookup is exact and far cheaper than converting bits.
const float* f16_table() {
    static const std::vector<float> table = [] {
        std::vector<float> t(65536);
        for (uint32_t h = 0; h < 65536; ++h) t[h] = f16_to_f32(static_cast<uint16_t>(h));
        return t;
    }();
    return table.data();
}

// Elements [i, i + n) of a cache as f32: in place for an f32 cache, else
// converted into `buf`.
inline const float* cache_row(const uint8_t* cache, KvType kv, uint64_t i, uint32_t n, float* buf) {
    if (kv == KvType::F32) return reinterpret_cast<const float*>(cache) + i;
    const uint16_t* h = reinterpret_cast<const uint16_t*>(cache) + i;
    const float* table = f16_table();
    for (uint32_t k = 0; k < n; ++k) buf[k] = table[h[k]];
    return buf;
}

}  // namespace

void CpuBackend::per_layer_inputs(std::span<const TokenId> tokens, uint32_t n) {
    // llama.cpp's gemma4 graph (project_per_layer_inputs): the projection of
    // the scaled input, times 1/√n_embd, RMS-normed per layer slice, plus the
    // token's per-layer embedding row times √n_embd_per_layer, times 1/√2.
    const uint64_t E = m_.hp.n_embd, P = m_.n_embd_per_layer, PL = ple_w_;
    matmul(*pool_, {job(*ple_model_, ple_model_pack_, ple_.data(), PL)}, x_.data(), n, E, arith_);
    const float proj_scale = 1.0f / std::sqrt(float(E)), embd_scale = std::sqrt(float(P));
    const float sum_scale = 1.0f / std::sqrt(2.0f);
    const auto one = [&](uint32_t t) {
        float* pl = &ple_[t * PL];
        thread_local std::vector<float> row;
        row.resize(PL);
        dequantize_row(m_.per_layer_tok_embd, uint64_t(tokens[t]), row.data());
        for (uint64_t i = 0; i < PL; ++i) pl[i] *= proj_scale;
        for (uint64_t j = 0; j < PL; j += P) rms_norm(pl + j, ple_norm_.data(), pl + j, P, m_.hp.rms_eps);
        for (uint64_t i = 0; i < PL; ++i) pl[i] = (pl[i] + row[i] * embd_scale) * sum_scale;
    };
    if (n == 1) return one(0);
    pool_->parallel_for(n, 1, [&](uint64_t b, uint64_t e, int) {
        for (uint64_t t = b; t < e; ++t) one(static_cast<uint32_t>(t));
    });
}

AttentionArgs CpuBackend::attention_args(uint32_t il, uint32_t row0, const SeqStep& s) {
    const LayerDesc& d = m_.layers[il];
    const Layer& l = layers_[d.kv_layer];   // its own cache, or the layer's it shares
    AttentionArgs a;
    a.q = q_.data() + row0 * q_w_;
    a.ldq = q_w_;
    a.out = att_.data() + row0 * q_w_;
    a.ldo = q_w_;
    a.k_cache = l.k_cache.data();
    a.v_cache = l.v_cache.data();
    a.kv = kv_;
    a.head_stride = head_stride(il);
    a.n_head = d.n_head;
    a.n_head_kv = d.n_head_kv;
    a.head_dim = m_.head_dim_of(il);
    a.scale = m_.attn_scale;
    a.pos = s.pos;
    a.n = static_cast<uint32_t>(s.tokens.size());
    a.window = d.sliding ? m_.hp.sliding_window : 0;
    a.pages = s.pages.data();
    a.page_shift = page_shift_;
    return a;
}

void CpuBackend::attention(uint32_t il, uint32_t row0, const SeqStep& s) {
    const uint32_t pos = s.pos, n = static_cast<uint32_t>(s.tokens.size());
    const uint32_t* pages = s.pages.data();
    const LayerDesc& d = m_.layers[il];
    const Layer& l = layers_[d.kv_layer];   // its own cache, or the layer's it shares
    const uint32_t hd = m_.head_dim_of(il), group = d.n_head / d.n_head_kv;
    const uint64_t stride = head_stride(il);
    const uint32_t window = m_.hp.sliding_window;
    // The reference: one task per (token, head); token t of the batch sits at position pos + t
    // and sees the positions up to its own (the causal mask).
    pool_->parallel_for(uint64_t(n) * d.n_head, 1, [&](uint64_t tb, uint64_t te, int thread) {
        float* sc = scores_.data() + uint64_t(thread) * n_ctx_;
        for (uint64_t task = tb; task < te; ++task) {
            const uint32_t t = static_cast<uint32_t>(task / d.n_head), h = static_cast<uint32_t>(task % d.n_head);
            const uint32_t p = pos + t;
            // A sliding layer sees the last `window` positions, itself included.
            const uint32_t p0 = d.sliding && p + 1 > window ? p + 1 - window : 0;
            const float* q = q_.data() + (row0 + t) * q_w_ + uint64_t(h) * hd;
            const uint32_t g = h / group;
            const auto at = [&](uint32_t j) { return kv_index(stride, hd, kv_row(pages, page_shift_, j), g); };
            float* row = rows_.data() + uint64_t(thread) * hd;
            float mx = -INFINITY;
            for (uint32_t j = p0; j <= p; ++j) {
                const float* k = cache_row(l.k_cache.data(), kv_, at(j), hd, row);
                sc[j] = dot(q, k, hd) * m_.attn_scale;
                mx = std::max(mx, sc[j]);
            }
            double sum = 0;
            for (uint32_t j = p0; j <= p; ++j) {
                sc[j] = std::exp(sc[j] - mx);
                sum += sc[j];
            }
            const float inv = static_cast<float>(1.0 / sum);
            float* out = att_.data() + (row0 + t) * q_w_ + uint64_t(h) * hd;
            std::fill(out, out + hd, 0.0f);
            for (uint32_t j = p0; j <= p; ++j) {
                const float w = sc[j] * inv;
                const float* v = cache_row(l.v_cache.data(), kv_, at(j), hd, row);
                for (uint32_t i = 0; i < hd; ++i) out[i] += w * v[i];
            }
        }
    });
}

void CpuBackend::eval_batch(std::span<const TokenId> tokens, uint32_t pos, float* logits, uint32_t n_logits) {
    if (tokens.empty()) return;
    if (tokens.size() > kMaxBatch) throw std::invalid_argument("eval_batch: more than " + std::to_string(kMaxBatch) + " tokens");
    if (logits && (n_logits == 0 || n_logits > tokens.size())) throw std::invalid_argument("eval_batch: bad n_logits");
    const SeqStep one{own_pages_, pos, tokens, logits, logits ? n_logits : 0};
    step({&one, 1});
}

void CpuBackend::copy_page(uint32_t from, uint32_t to, uint32_t positions) {
    if (from >= pages_.n_pages || to >= pages_.n_pages || positions > pages_.page_size)
        throw std::invalid_argument("copy_page: page " + std::to_string(from) + " -> " + std::to_string(to) + ", " +
                                    std::to_string(positions) + " positions, of " + std::to_string(pages_.n_pages) +
                                    " pages of " + std::to_string(pages_.page_size));
    const uint64_t el = kv_ == KvType::F16 ? 2 : 4;
    for (uint32_t il = 0; il < m_.layers.size(); ++il) {
        if (!m_.has_kv(il)) continue;
        const uint32_t hd = m_.head_dim_of(il);
        const uint64_t stride = head_stride(il), page = pages_.page_size;   // rows a page
        for (uint8_t* c : {layers_[il].k_cache.data(), layers_[il].v_cache.data()})
            for (uint32_t g = 0; g < m_.layers[il].n_head_kv; ++g)   // each head's plane
                std::memmove(c + kv_index(stride, hd, to * page, g) * el, c + kv_index(stride, hd, from * page, g) * el,
                             positions * hd * el);
    }
}

void CpuBackend::step(std::span<const SeqStep> batch) {
    pack_weights();
    // Each token's row of the activations, its position and its cache row.
    struct Row { uint32_t pos; uint64_t kv_row; };
    std::vector<Row> rows;
    std::vector<TokenId> tokens;
    uint32_t wanted = 0;
    for (const SeqStep& s : batch) {
        const uint32_t n = check_seq_step(s, uint32_t(tokens.size()), kMaxBatch, m_.n_vocab, n_ctx_, pages_);
        if (n == 0) continue;
        for (uint32_t t = 0; t < n; ++t) {
            rows.push_back({s.pos + t, kv_row(s.pages.data(), page_shift_, s.pos + t)});
            tokens.push_back(s.tokens[t]);
        }
        wanted += head_rows(s);
    }
    const uint32_t n = static_cast<uint32_t>(tokens.size());
    if (n == 0) return;
    const HParams& hp = m_.hp;
    const uint64_t E = hp.n_embd;
    const float eps = hp.rms_eps;

    // The per-token work between the products runs over the batch's tokens
    // in parallel (each token's arithmetic is the same either way).
    const auto each_token = [&](const auto& fn) {
        if (n == 1) return fn(0u);
        pool_->parallel_for(n, 1, [&](uint64_t b, uint64_t e, int) {
            for (uint64_t t = b; t < e; ++t) fn(static_cast<uint32_t>(t));
        });
    };
    const bool fast = arith_.path == CpuPath::Quantized;
    // A decode step's few tokens on the quantized path: its passes' threads
    // finish the rows they computed (the Q/K/V heads, attention's merges
    // quantizing wo's input, the gate/up items), so that little is left for
    // the caller alone between the products. A prompt's chunk keeps the
    // separate steps, parallel over its tokens (SmolLM2, 64 tokens a chunk:
    // the fused gate/up pass took 789 us a layer against 685 + 2 x 23.5).
    const bool decode = fast && n <= kQDotMaxInputs;
    const ElementwiseOps ew = elementwise_ops(arith_.isa);

    if (rope_cs_.size() < n * rope_cs_w_) rope_cs_.resize(n * rope_cs_w_);
    each_token([&](uint32_t t) {
        float* x = &x_[t * E];
        embedding(uint64_t(tokens[t]), x);
        if (m_.embd_scale != 1.0f)
            for (uint64_t i = 0; i < E; ++i) x[i] *= m_.embd_scale;
        // The token's RoPE cos and sin for every rate table (angles in double).
        const double p = double(rows[t].pos) * m_.rope_freq_scale;
        RopeCosSin* cs = &rope_cs_[t * rope_cs_w_];
        for (const uint32_t il : rope_tables_)
            for (const double r : layers_[il].inv_freq) *cs++ = rope_cos_sin(p * r, m_.rope_mscale);
    });
    if (m_.n_embd_per_layer) per_layer_inputs(tokens, n);

    for (uint32_t il = 0; il < m_.layers.size(); ++il) {
        const LayerDesc& d = m_.layers[il];
        Layer& l = layers_[il];
        const uint32_t hd = m_.head_dim_of(il);
        const uint64_t kv_dim = m_.kv_dim(il), stride = head_stride(il);
        // gemma4: the shared-KV layers compute q only; without attn_v, k's
        // projection serves as v.
        const bool own_kv = m_.has_kv(il);

        each_token([&](uint32_t t) { rms_norm(&x_[t * E], l.attn_norm.data(), &xn_[t * E], E, eps); });
        // Head h of token t's q (0), k (1) or v (2) finished after its
        // projection: bias, the head's norm, RoPE (and Mistral 3's
        // temperature on q); k and v then stored to the cache. Every head's
        // arithmetic is the same wherever it runs.
        const RopeCosSin* const cs0 = rope_cs_.data() + l.rope_at;
        const uint32_t half = static_cast<uint32_t>(l.inv_freq.size());
        const auto finish_head = [&](uint32_t t, int which, uint32_t h) {
            const uint64_t off = uint64_t(h) * hd;
            float* p = (which == 0 ? &q_[t * q_w_] : which == 1 ? &k_[t * kv_w_] : &v_[t * kv_w_]) + off;
            const std::vector<float>& bias = which == 0 ? l.bq : which == 1 ? l.bk : l.bv;
            if (!bias.empty())
                for (uint32_t i = 0; i < hd; ++i) p[i] += bias[off + i];
            const RopeCosSin* cs = cs0 + t * rope_cs_w_;
            if (which == 0) {
                if (!l.q_norm.empty()) rms_norm(p, l.q_norm.data(), p, hd, eps);
                rope(p, 1, hd, cs, half, hp.rope_style);
                if (m_.attn_temp_scale != 0) {   // Mistral 3: q scaled by the position's temperature
                    const float temp = m_.attn_temperature(rows[t].pos);
                    for (uint32_t i = 0; i < hd; ++i) p[i] *= temp;
                }
                return;
            }
            const uint64_t at = kv_index(stride, hd, rows[t].kv_row, h);
            if (which == 1) {
                if (!l.k_norm.empty()) rms_norm(p, l.k_norm.data(), p, hd, eps);
                rope(p, 1, hd, cs, half, hp.rope_style);
                store_part(l.k_cache.data(), kv_, at, p, hd, ew);
                return;
            }
            if (d.v_norm) rms_norm(p, nullptr, p, hd, eps);
            store_part(l.v_cache.data(), kv_, at, p, hd, ew);
        };
        const MatVec qkv[3] = {job(*l.mats[0], l.packs[0], q_.data(), q_w_),
                               own_kv ? job(*l.mats[1], l.packs[1], k_.data(), kv_w_) : MatVec{},
                               own_kv && d.wv ? job(*l.mats[2], l.packs[2], v_.data(), kv_w_) : MatVec{}};
        const uint32_t heads = d.n_head + 2 * d.n_head_kv;
        if (decode && own_kv && d.wv && hd % kPackRows == 0 && heads >= 4 * uint32_t(pool_->size()) &&
            has_qdot(qkv[0].w->type) && has_qdot(qkv[1].w->type) && has_qdot(qkv[2].w->type)) {
            // One item per head of q, k and v (SmolLM2: 2 us a layer the
            // caller spent alone after the pass). Enough heads per thread
            // that whole heads balance (gemma-3-270m's 6 do not).
            const QuantizedProduct product(*pool_, qkv, 3, xn_.data(), n, E, arith_.isa);
            const uint32_t units = hd / kPackRows;
            pool_->parallel_for(heads, 1, [&](uint64_t b, uint64_t e, int) {
                for (uint64_t i = b; i < e; ++i) {
                    const int which = i < d.n_head ? 0 : i < d.n_head + d.n_head_kv ? 1 : 2;
                    const uint32_t h = uint32_t(which == 0 ? i : which == 1 ? i - d.n_head : i - d.n_head - d.n_head_kv);
                    for (uint64_t u = uint64_t(h) * units; u < uint64_t(h + 1) * units; ++u) product.run(size_t(which), u);
                    for (uint32_t t = 0; t < n; ++t) finish_head(t, which, h);
                }
            });
        } else {
            if (!own_kv) matmul(*pool_, {qkv[0]}, xn_.data(), n, E, arith_);
            else if (!d.wv) matmul(*pool_, {qkv[0], qkv[1]}, xn_.data(), n, E, arith_);
            else matmul(*pool_, {qkv[0], qkv[1], qkv[2]}, xn_.data(), n, E, arith_);
            each_token([&](uint32_t t) {
                if (own_kv && !d.wv) std::memcpy(&v_[t * kv_w_], &k_[t * kv_w_], kv_dim * 4);
                for (uint32_t h = 0; h < d.n_head; ++h) finish_head(t, 0, h);
                if (!own_kv) return;
                for (uint32_t h = 0; h < d.n_head_kv; ++h) finish_head(t, 1, h);
                for (uint32_t h = 0; h < d.n_head_kv; ++h) finish_head(t, 2, h);
            });
        }

        // The quantized path's attention takes every sequence in one pass
        // over the pool; the reference runs them one by one.
        attn_args_.clear();
        for (uint32_t row0 = 0; const SeqStep& s : batch) {
            if (s.tokens.empty()) continue;
            if (fast) attn_args_.push_back(attention_args(il, row0, s));
            else attention(il, row0, s);
            row0 += static_cast<uint32_t>(s.tokens.size());
        }
        // A Block32 wo's input comes quantized from attention's merges.
        const MatVec wo = job(*l.mats[3], l.packs[3], o_.data(), E);
        const bool att_quantized = decode && hd % 32 == 0 && qdot_layout(wo.w->type) == QuantizedInput::Layout::Block32;
        if (att_quantized) {
            if (att_q_.size() < n) att_q_.resize(n);
            for (uint32_t i = 0, row0 = 0; const SeqStep& s : batch) {
                if (s.tokens.empty()) continue;
                attn_args_[i++].out_q = att_q_.data() + row0;
                row0 += static_cast<uint32_t>(s.tokens.size());
            }
        }
        if (fast) fast_attention_.run(*pool_, attn_args_, arith_.isa);
        if (att_quantized) matmul(*pool_, {wo}, att_q_.data(), n, arith_.isa);
        else matmul(*pool_, {wo}, att_.data(), n, q_w_, arith_);
        each_token([&](uint32_t t) {
            float* o = &o_[t * E];
            float* x = &x_[t * E];
            if (!l.attn_post_norm.empty()) rms_norm(o, l.attn_post_norm.data(), o, E, eps);
            for (uint64_t i = 0; i < E; ++i) x[i] += o[i];
            rms_norm(x, l.ffn_norm.data(), &xn_[t * E], E, eps);
        });
        const MatVec gate = job(*l.mats[4], l.packs[4], g_.data(), ff_w_), up = job(*l.mats[5], l.packs[5], u_.data(), ff_w_),
                     down = job(*l.mats[6], l.packs[6], o_.data(), E);
        if (decode && has_qdot(gate.w->type) && has_qdot(up.w->type)) {
            // The activation (and a Block32 down product's input
            // quantization) in the gate/up pass.
            const bool quantized = qdot_layout(down.w->type) == QuantizedInput::Layout::Block32 && d.n_ff % kGluRows == 0;
            if (quantized && ffn_in_.size() < n) ffn_in_.resize(n);
            matmul_glu(*pool_, gate, up, xn_.data(), n, E, arith_.isa, m_.ffn == FfnKind::GeGLU ? ew.gelu_mul : ew.silu_mul,
                       quantized ? ffn_in_.data() : nullptr);
            if (quantized) matmul(*pool_, {down}, ffn_in_.data(), n, arith_.isa);
            else matmul(*pool_, {down}, g_.data(), n, ff_w_, arith_);
        } else {
            matmul(*pool_, {gate, up}, xn_.data(), n, E, arith_);
            each_token([&](uint32_t t) {
                float* g = &g_[t * ff_w_];
                const float* u = &u_[t * ff_w_];
                if (fast) return (m_.ffn == FfnKind::GeGLU ? ew.gelu_mul : ew.silu_mul)(g, u, d.n_ff);
                for (uint32_t i = 0; i < d.n_ff; ++i)
                    g[i] = (m_.ffn == FfnKind::GeGLU ? gelu_tanh(g[i]) : silu(g[i])) * u[i];
            });
            matmul(*pool_, {down}, g_.data(), n, ff_w_, arith_);
        }
        each_token([&](uint32_t t) {
            float* o = &o_[t * E];
            float* x = &x_[t * E];
            if (!l.ffn_post_norm.empty()) rms_norm(o, l.ffn_post_norm.data(), o, E, eps);
            for (uint64_t i = 0; i < E; ++i) x[i] += o[i];
        });
        if (d.ple_gate) {
            // gemma4: x += rmsnorm(proj · (gelu(gate · x) ⊙ this layer's input slice)).
            const uint64_t P = m_.n_embd_per_layer;
            matmul(*pool_, {job(*l.mats[7], l.packs[7], pg_.data(), P)}, x_.data(), n, E, arith_);
            each_token([&](uint32_t t) {
                float* g = &pg_[t * P];
                const float* slice = &ple_[t * ple_w_ + il * P];
                if (fast) return ew.gelu_mul(g, slice, uint32_t(P));
                for (uint64_t i = 0; i < P; ++i) g[i] = gelu_tanh(g[i]) * slice[i];
            });
            matmul(*pool_, {job(*l.mats[8], l.packs[8], o_.data(), E)}, pg_.data(), n, P, arith_);
            each_token([&](uint32_t t) {
                float* o = &o_[t * E];
                float* x = &x_[t * E];
                rms_norm(o, l.ple_post_norm.data(), o, E, eps);
                for (uint64_t i = 0; i < E; ++i) x[i] += o[i];
            });
        }
        if (l.out_scale != 1.0f)
            each_token([&](uint32_t t) {
                for (float *x = &x_[t * E], *e = x + E; x < e; ++x) *x *= l.out_scale;
            });
    }
    if (wanted == 0) return;
    // The wanted rows normalised one after another, one product with the
    // output matrix for all of them (into the sequence's own buffer when it
    // is the only one and wants logits), then each sequence's logits copied
    // out and its argmax taken.
    const uint64_t nv = m_.n_vocab;
    const bool direct = batch.size() == 1 && batch[0].logits;
    if (!direct && step_logits_.size() < wanted * nv) step_logits_.resize(wanted * nv);
    float* out = direct ? batch[0].logits : step_logits_.data();
    for (uint32_t w = 0, row0 = 0; const SeqStep& s : batch) {
        const uint32_t sn = static_cast<uint32_t>(s.tokens.size());
        for (uint32_t t = sn - head_rows(s); t < sn; ++t, ++w)
            rms_norm(&x_[(row0 + t) * E], output_norm_.data(), &xn_[w * E], E, eps);
        row0 += sn;
    }
    matmul(*pool_, {job(*output_, output_pack_, out, m_.n_vocab)}, xn_.data(), wanted, E, arith_);
    if (m_.final_softcap > 0) elementwise_ops(fast ? arith_.isa : Isa::Scalar).softcap(out, uint64_t(wanted) * nv, m_.final_softcap);
    for (uint64_t w = 0; const SeqStep& s : batch) {
        const uint32_t rows = head_rows(s);
        if (!rows) continue;
        const float* first = out + w * nv;   // a part's rows: its n_logits, or the last token's for an argmax alone
        if (s.logits && !direct) std::memcpy(s.logits, first, uint64_t(s.n_logits) * nv * 4);
        if (s.argmax) {
            const float* last = first + (rows - 1) * nv;
            *s.argmax = TokenId(argmax({last, nv}));
        }
        w += rows;
    }
}

}  // namespace ptxlm::cpu
