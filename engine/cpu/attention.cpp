#include "engine/cpu/attention.h"

#include <algorithm>
#include <cmath>
#include <stdexcept>
#include <string>

#include "engine/cpu/elementwise.h"
#include "engine/cpu/x86_intrinsics.h"
#include "gguf/f16.h"

namespace ptxlm::cpu {

namespace {

// The three row operations attention needs, per ISA: a cache row from f16 to
// f32, a dot product, y += a·x. The SIMD versions carry their ISA as a
// function attribute, so this file needs no special flags and nothing here
// runs before the CPU check (runnable_isas) chose them.
struct RowOps {
    void (*to_f32)(const uint16_t* h, float* out, uint32_t n);
    float (*dot)(const float* a, const float* b, uint32_t n);
    void (*axpy)(float* y, float a, const float* x, uint32_t n);
};

void to_f32_scalar(const uint16_t* h, float* out, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) out[i] = f16_to_f32(h[i]);
}
float dot_scalar(const float* a, const float* b, uint32_t n) {
    float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; ++k) acc[k] += a[i + k] * b[i + k];
    for (; i < n; ++i) acc[0] += a[i] * b[i];
    return ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
}
void axpy_scalar(float* y, float a, const float* x, uint32_t n) {
    for (uint32_t i = 0; i < n; ++i) y[i] += a * x[i];
}

#define PTXLM_AVX2 __attribute__((target("avx2,fma,f16c")))
PTXLM_AVX2 void to_f32_avx2(const uint16_t* h, float* out, uint32_t n) {
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(out + i, _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(h + i))));
    for (; i < n; ++i) out[i] = _cvtsh_ss(h[i]);
}
PTXLM_AVX2 float hsum_avx2(__m256 s) {
    __m128 r = _mm_add_ps(_mm256_castps256_ps128(s), _mm256_extractf128_ps(s, 1));
    r = _mm_add_ps(r, _mm_movehl_ps(r, r));
    r = _mm_add_ss(r, _mm_movehdup_ps(r));
    return _mm_cvtss_f32(r);
}
PTXLM_AVX2 float dot_avx2(const float* a, const float* b, uint32_t n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = _mm256_setzero_ps();
    uint32_t i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    float total = hsum_avx2(_mm256_add_ps(s0, s1));
    for (; i < n; ++i) total += a[i] * b[i];
    return total;
}
PTXLM_AVX2 void axpy_avx2(float* y, float a, const float* x, uint32_t n) {
    const __m256 va = _mm256_set1_ps(a);
    uint32_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm256_storeu_ps(y + i, _mm256_fmadd_ps(va, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
    for (; i < n; ++i) y[i] += a * x[i];
}

#define PTXLM_AVX512 __attribute__((target("avx512f,avx2,fma,f16c")))
PTXLM_AVX512 void to_f32_avx512(const uint16_t* h, float* out, uint32_t n) {
    uint32_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(out + i, _mm512_cvtph_ps(_mm256_loadu_si256(reinterpret_cast<const __m256i*>(h + i))));
    to_f32_avx2(h + i, out + i, n - i);
}
PTXLM_AVX512 float dot_avx512(const float* a, const float* b, uint32_t n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = _mm512_setzero_ps();
    uint32_t i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    for (; i + 16 <= n; i += 16) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    const __m512 s = _mm512_add_ps(s0, s1);
    return _mm512_reduce_add_ps(s) + dot_avx2(a + i, b + i, n - i);
}
PTXLM_AVX512 void axpy_avx512(float* y, float a, const float* x, uint32_t n) {
    const __m512 va = _mm512_set1_ps(a);
    uint32_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_fmadd_ps(va, _mm512_loadu_ps(x + i), _mm512_loadu_ps(y + i)));
    axpy_avx2(y + i, a, x + i, n - i);
}

RowOps row_ops(Isa isa) {
    switch (isa) {
        case Isa::Scalar: return {to_f32_scalar, dot_scalar, axpy_scalar};
        case Isa::Avx2: return {to_f32_avx2, dot_avx2, axpy_avx2};
        case Isa::Avx512:
        case Isa::Avx512Vnni: return {to_f32_avx512, dot_avx512, axpy_avx512};
    }
    return {to_f32_scalar, dot_scalar, axpy_scalar};
}

// The SIMD inner loops (attention_simd.h) where the ISA has them and the
// head dimension is a multiple of their width; else both null.
struct ChunkOps {
    void (*scores)(const AttnChunk&) = nullptr;
    void (*accumulate)(const AttnChunk&) = nullptr;
};
ChunkOps chunk_ops(Isa isa, uint32_t head_dim) {
    switch (isa) {
        case Isa::Scalar: break;
        case Isa::Avx2:
            if (head_dim % 32 == 0) return {attn_scores_avx2, attn_accumulate_avx2};
            break;
        case Isa::Avx512:
        case Isa::Avx512Vnni:
            if (head_dim % 64 == 0) return {attn_scores_avx512, attn_accumulate_avx512};
            if (head_dim % 32 == 0) return {attn_scores_avx2, attn_accumulate_avx2};
            break;
    }
    return {};
}

// The first position token position p sees.
uint32_t first_visible(uint32_t p, uint32_t window) { return window && p + 1 > window ? p + 1 - window : 0; }

}  // namespace

void Attention::run(ThreadPool& pool, const AttentionArgs& a, Isa isa) { run(pool, std::span(&a, 1), isa); }

void Attention::run(ThreadPool& pool, std::span<const AttentionArgs> seqs, Isa isa) {
    if (seqs.empty()) return;
    // The partials of every task of a call are kept until the merge: a batch
    // deep in a long context runs in waves of tokens, so they stay under
    // kMaxPartialFloats (a token's result does not depend on its wave, nor
    // on the sequences it runs beside).
    constexpr uint64_t kMaxPartialFloats = uint64_t(4) << 20;   // 16 MiB
    const auto per_token = [](const AttentionArgs& a) {
        return (uint64_t(a.pos + a.n - 1) / kAttnChunk + 1) * a.n_head * (2 + uint64_t(a.head_dim));
    };
    uint64_t partials = 0;
    for (const AttentionArgs& a : seqs) partials += a.n * per_token(a);
    if (partials > kMaxPartialFloats && seqs.size() > 1) {
        for (const AttentionArgs& a : seqs) run(pool, std::span(&a, 1), isa);
        return;
    }
    const AttentionArgs& a = seqs[0];
    if (a.n > 1 && partials > kMaxPartialFloats) {
        const uint32_t wave = static_cast<uint32_t>(std::max<uint64_t>(1, kMaxPartialFloats / per_token(a)));
        for (uint32_t t0 = 0; t0 < a.n; t0 += wave) {
            AttentionArgs b = a;
            b.q += t0 * a.ldq;
            b.out += t0 * a.ldo;
            if (b.out_q) b.out_q += t0;
            b.pos += t0;
            b.n = std::min(wave, a.n - t0);
            run(pool, std::span(&b, 1), isa);
        }
        return;
    }
    // What the sequences share: one layer's shapes and cache.
    for (const AttentionArgs& o : seqs)
        if (o.n_head != a.n_head || o.n_head_kv != a.n_head_kv || o.head_dim != a.head_dim ||
            o.head_stride != a.head_stride || o.kv != a.kv || o.k_cache != a.k_cache || o.v_cache != a.v_cache ||
            o.window != a.window || o.page_shift != a.page_shift || o.scale != a.scale)
            throw std::invalid_argument("attention: the sequences of one call differ in more than q, out, pos, n and pages");
    if (a.pages && a.page_shift > 16)
        throw std::invalid_argument("attention: pages of 2^" + std::to_string(a.page_shift) + " positions (at most 65536)");
    const RowOps ops = row_ops(isa);
    const ElementwiseOps ew = elementwise_ops(isa);
    const uint32_t hd = a.head_dim, group = a.n_head / a.n_head_kv;
    const ChunkOps simd = chunk_ops(isa, hd);
    const uint64_t rec = 2 + uint64_t(hd);   // a partial: max, sum, outputs

    // Tasks in (sequence, token, KV head, chunk) order: the chunks of one
    // (sequence, token, KV head) are consecutive, which the merge relies on.
    // rows_[r] = (sequence, token) of the r-th token of the call.
    tasks_.clear();
    rows_.clear();
    std::vector<uint32_t>& first = first_;   // the first task of each (row, KV head), and the end
    first.clear();
    for (uint32_t si = 0; si < seqs.size(); ++si) {
        const AttentionArgs& sa = seqs[si];
        for (uint32_t t = 0; t < sa.n; ++t) {
            const uint32_t p = sa.pos + t, c0 = first_visible(p, a.window) / kAttnChunk, c1 = p / kAttnChunk;
            rows_.push_back({si, t});
            for (uint32_t g = 0; g < a.n_head_kv; ++g) {
                first.push_back(static_cast<uint32_t>(tasks_.size()));
                for (uint32_t c = c0; c <= c1; ++c) tasks_.push_back({si, t, g, c, uint32_t(first.size() - 1)});
            }
        }
    }
    first.push_back(static_cast<uint32_t>(tasks_.size()));
    if (partial_.size() < tasks_.size() * group * rec) partial_.resize(tasks_.size() * group * rec);
    const uint64_t stride = uint64_t(group) * kAttnChunk + hd;   // per thread: scores, one converted row
    if (scratch_.size() < stride * pool.size()) scratch_.resize(stride * pool.size());

    const QuantizeBlock32Fn quantize = quantize_block32_fn(isa);
    for (const AttentionArgs& sa : seqs) {
        if (!sa.out_q) continue;
        if (hd % 32 != 0)
            throw std::invalid_argument("attention: a quantized output needs head_dim a multiple of 32, not " +
                                        std::to_string(hd));
        for (uint32_t t = 0; t < sa.n; ++t) sa.out_q[t].reset_block32(uint64_t(a.n_head) * hd);
    }
    // Head h of call row r from its chunks' partials, in chunk order: the
    // same arithmetic whichever thread runs it.
    const auto merge = [&](uint64_t r, uint32_t h) {
        const uint32_t g = h / group, hh = h % group;
        const uint64_t tg = r * a.n_head_kv + g;
        const AttentionArgs& sa = seqs[rows_[r].s];
        const uint32_t t = rows_[r].t;
        const float* part0 = partial_.data() + hh * rec;
        float mx = -INFINITY;
        for (uint32_t ti = first[tg]; ti < first[tg + 1]; ++ti) mx = std::max(mx, part0[ti * group * rec]);
        float* out = sa.out + t * sa.ldo + uint64_t(h) * hd;
        std::fill(out, out + hd, 0.0f);
        float sum = 0;
        for (uint32_t ti = first[tg]; ti < first[tg + 1]; ++ti) {
            const float* part = part0 + ti * group * rec;
            const float w = std::exp(part[0] - mx);
            sum += w * part[1];
            ops.axpy(out, w, part + 2, hd);
        }
        const float inv = 1.0f / sum;
        for (uint32_t k = 0; k < hd; ++k) out[k] *= inv;
        if (sa.out_q)
            for (uint32_t b = 0; b < hd / 32; ++b) quantize(out + 32 * b, sa.out_q[t].b32[h * (hd / 32) + b]);
    };
    // The thread that finishes the last chunk of a (row, KV head) merges
    // that group's heads, inside the pass: no merge is left for the caller
    // alone (a decode step's 1 us a layer), and its acquire sees the other
    // chunks' partials.
    const uint64_t n_groups = first.size() - 1;
    if (done_cap_ < n_groups) {
        done_ = std::make_unique<std::atomic<uint32_t>[]>(n_groups);
        done_cap_ = n_groups;
    }
    for (uint64_t i = 0; i < n_groups; ++i) done_[i].store(0, std::memory_order_relaxed);
    const auto finished = [&](uint32_t tg) {
        if (done_[tg].fetch_add(1, std::memory_order_acq_rel) + 1 != first[tg + 1] - first[tg]) return;
        const uint64_t r = tg / a.n_head_kv;
        const uint32_t g = tg % a.n_head_kv;
        for (uint32_t hh = 0; hh < group; ++hh) merge(r, g * group + hh);
    };

    pool.parallel_for(tasks_.size(), 1, [&](uint64_t tb, uint64_t te, int thread) {
        float* sc = scratch_.data() + stride * thread;
        float* buf = sc + uint64_t(group) * kAttnChunk;
        const auto row = [&](const uint32_t* pages, const uint8_t* cache, uint32_t j, uint32_t g) -> const float* {
            const uint64_t i = kv_index(a.head_stride, hd, kv_row(pages, a.page_shift, j), g);
            if (a.kv == KvType::F32) return reinterpret_cast<const float*>(cache) + i;
            ops.to_f32(reinterpret_cast<const uint16_t*>(cache) + i, buf, hd);
            return buf;
        };
        for (uint64_t ti = tb; ti < te; ++ti) {
            const Task task = tasks_[ti];
            const AttentionArgs& sa = seqs[task.s];
            const uint32_t p = sa.pos + task.t;
            const uint32_t j0 = std::max(first_visible(p, a.window), task.chunk * kAttnChunk);
            const uint32_t j1 = std::min(p + 1, (task.chunk + 1) * kAttnChunk);
            const float* q = sa.q + task.t * sa.ldq + uint64_t(task.g) * group * hd;
            float* part = partial_.data() + ti * group * rec;
            AttnChunk c;
            if (simd.scores) {
                c.q = q;
                c.k_cache = a.k_cache;
                c.v_cache = a.v_cache;
                c.f16 = a.kv == KvType::F16;
                c.offset = kv_index(a.head_stride, hd, 0, task.g);
                c.pages = sa.pages;
                c.page_shift = a.page_shift;
                c.j0 = j0;
                c.j1 = j1;
                c.head_dim = hd;
                c.group = group;
                c.scale = a.scale;
                c.scores = sc;
                c.out = part + 2;
                c.out_stride = rec;
                simd.scores(c);
            } else {
                for (uint32_t j = j0; j < j1; ++j) {
                    const float* k = row(sa.pages, a.k_cache, j, task.g);
                    for (uint32_t h = 0; h < group; ++h)
                        sc[h * kAttnChunk + (j - j0)] = ops.dot(q + h * hd, k, hd) * a.scale;
                }
            }
            for (uint32_t h = 0; h < group; ++h) {
                float* s = sc + h * kAttnChunk;
                float mx = -INFINITY;
                for (uint32_t j = 0; j < j1 - j0; ++j) mx = std::max(mx, s[j]);
                for (uint32_t j = 0; j < j1 - j0; ++j) s[j] -= mx;
                ew.exp_inplace(s, j1 - j0);
                float sum = 0;
                for (uint32_t j = 0; j < j1 - j0; ++j) sum += s[j];
                part[h * rec] = mx;
                part[h * rec + 1] = sum;
            }
            if (simd.accumulate) {
                simd.accumulate(c);
            } else {
                for (uint32_t h = 0; h < group; ++h) std::fill(part + h * rec + 2, part + (h + 1) * rec, 0.0f);
                for (uint32_t j = j0; j < j1; ++j) {
                    const float* v = row(sa.pages, a.v_cache, j, task.g);
                    for (uint32_t h = 0; h < group; ++h) ops.axpy(part + h * rec + 2, sc[h * kAttnChunk + (j - j0)], v, hd);
                }
            }
            finished(task.tg);
        }
    });
}

}  // namespace ptxlm::cpu
