// The quantized path's attention (engine/cpu/attention.h) and elementwise
// math (engine/cpu/elementwise.h), on every Isa this CPU runs:
//   - attention equals a plain double-precision softmax(q·K)·V over random
//     caches, for head sizes with and without the SIMD inner loops, GQA
//     groups of 1 to 6 heads (AVX2's scores in tiles of 3, 2 and 1 heads),
//     f16 and f32 caches, several chunks of positions and sliding windows
//     that cut chunks;
//   - a batch of tokens gives each token the bits it gets alone (the chunks
//     are fixed by position), on 1 and 3 threads;
//   - a wrong score scale or a shifted window is caught (the test can fail);
//   - K/V in shuffled pages (the KV pool's page tables) give the contiguous
//     cache's bits; a page table with two pages swapped does not;
//   - several sequences in one call give each the bits of its own call; a
//     page table pointing at another sequence's page does not;
//   - exp, SiLU·u and GELU·u stay within a few ulp of the libm formulas,
//     including array tails and extreme inputs;
//   - the KV cache's f16 store gives f32_to_f16's bits for every f16 value,
//     the ties and their neighbours between them, overflow, subnormals and
//     NaNs.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "engine/cpu/attention.h"
#include "engine/cpu/elementwise.h"
#include "gguf/f16.h"

using namespace ptxlm;
using cpu::Isa;

namespace {

struct Shape {
    uint32_t head_dim, n_head, n_head_kv, window;
    KvType kv;
};

std::string name(const Shape& s, Isa isa) {
    return std::string(cpu::isa_name(isa)) + " hd" + std::to_string(s.head_dim) + " heads " + std::to_string(s.n_head) +
           "/" + std::to_string(s.n_head_kv) + " window " + std::to_string(s.window) +
           (s.kv == KvType::F16 ? " f16" : " f32");
}

uint64_t kv_bytes(const Shape& s) { return s.kv == KvType::F32 ? 4 : 2; }

// The positions of src (n_head_kv · head_dim floats each) into a cache of
// `rows` rows as attention reads it (AttentionArgs: a plane of rows per KV
// head), position j at cache row at(j); the rest of dst as it was.
template <class At>
void put_rows(const Shape& s, const std::vector<float>& src, uint64_t rows, At at, std::vector<uint8_t>& dst) {
    const uint32_t hd = s.head_dim;
    const uint64_t kv_dim = uint64_t(s.n_head_kv) * hd, n_pos = src.size() / kv_dim, el = kv_bytes(s);
    for (uint32_t j = 0; j < n_pos; ++j)
        for (uint32_t g = 0; g < s.n_head_kv; ++g)
            for (uint32_t i = 0; i < hd; ++i) {
                const float x = src[j * kv_dim + uint64_t(g) * hd + i];
                uint8_t* d = dst.data() + (cpu::kv_index(rows * hd, hd, at(j), g) + i) * el;
                if (s.kv == KvType::F32) {
                    std::memcpy(d, &x, 4);
                } else {
                    const uint16_t h = f32_to_f16(x);
                    std::memcpy(d, &h, 2);
                }
            }
}

// A cache of n_pos rows and queries for n tokens, random; the f16 cache holds
// values that are exact in f16, so the reference sees the same numbers.
struct Problem {
    Shape s;
    uint32_t n_pos, pos, n;
    std::vector<float> q, k, v;            // k, v as floats: [n_pos][n_head_kv · head_dim]
    std::vector<uint8_t> k_bytes, v_bytes;  // the cache of n_pos rows as the kernel reads it

    Problem(const Shape& shape, uint32_t pos_, uint32_t n_, uint32_t seed) : s(shape), pos(pos_), n(n_) {
        n_pos = pos + n;
        std::mt19937 rng(seed);
        std::normal_distribution<float> nd(0.0f, 1.0f);
        const uint64_t kv_dim = uint64_t(s.n_head_kv) * s.head_dim;
        q.resize(uint64_t(n) * s.n_head * s.head_dim);
        for (float& x : q) x = nd(rng);
        k.resize(n_pos * kv_dim);
        v.resize(n_pos * kv_dim);
        for (float& x : k) x = f16_to_f32(f32_to_f16(nd(rng)));
        for (float& x : v) x = f16_to_f32(f32_to_f16(nd(rng)));
        const auto own_row = [](uint32_t j) { return uint64_t(j); };
        k_bytes.resize(n_pos * kv_dim * kv_bytes(s));
        v_bytes.resize(k_bytes.size());
        put_rows(s, k, n_pos, own_row, k_bytes);
        put_rows(s, v, n_pos, own_row, v_bytes);
    }

    cpu::AttentionArgs args(float* out, float scale) const {
        cpu::AttentionArgs a;
        a.q = q.data();
        a.ldq = uint64_t(s.n_head) * s.head_dim;
        a.out = out;
        a.ldo = a.ldq;
        a.k_cache = k_bytes.data();
        a.v_cache = v_bytes.data();
        a.kv = s.kv;
        a.head_stride = uint64_t(n_pos) * s.head_dim;
        a.n_head = s.n_head;
        a.n_head_kv = s.n_head_kv;
        a.head_dim = s.head_dim;
        a.scale = scale;
        a.pos = pos;
        a.n = n;
        a.window = s.window;
        return a;
    }

    // softmax(scale · q·K)·V in double, per token and head.
    std::vector<double> reference(float scale) const {
        const uint32_t hd = s.head_dim, group = s.n_head / s.n_head_kv;
        const uint64_t kv_dim = uint64_t(s.n_head_kv) * hd;
        std::vector<double> out(q.size());
        for (uint32_t t = 0; t < n; ++t) {
            const uint32_t p = pos + t, p0 = s.window && p + 1 > s.window ? p + 1 - s.window : 0;
            for (uint32_t h = 0; h < s.n_head; ++h) {
                const float* qh = &q[(uint64_t(t) * s.n_head + h) * hd];
                const uint64_t off = uint64_t(h / group) * hd;
                std::vector<double> w(p + 1, 0.0);
                double mx = -INFINITY, sum = 0;
                for (uint32_t j = p0; j <= p; ++j) {
                    double d = 0;
                    for (uint32_t i = 0; i < hd; ++i) d += double(qh[i]) * k[j * kv_dim + off + i];
                    w[j] = d * scale;
                    mx = std::max(mx, w[j]);
                }
                for (uint32_t j = p0; j <= p; ++j) sum += (w[j] = std::exp(w[j] - mx));
                for (uint32_t i = 0; i < hd; ++i) {
                    double acc = 0;
                    for (uint32_t j = p0; j <= p; ++j) acc += w[j] * v[j * kv_dim + off + i];
                    out[(uint64_t(t) * s.n_head + h) * hd + i] = acc / sum;
                }
            }
        }
        return out;
    }
};

const Shape kShapes[] = {
    {64, 9, 3, 0, KvType::F16},     // SmolLM2: SIMD loops, group 3
    {64, 9, 3, 0, KvType::F32},
    {256, 4, 1, 200, KvType::F16},  // gemma3-like, a window that cuts chunks
    {32, 6, 1, 0, KvType::F16},     // group 6: the weighted sum's four heads, then two (AVX2 loops only)
    {64, 10, 2, 0, KvType::F16},    // group 5: AVX2's scores in tiles of three heads, then two
    {64, 10, 2, 0, KvType::F32},    // group 5, f32: AVX-512's tiles of four heads, then one
    {128, 7, 1, 0, KvType::F32},    // group 7, f32: AVX-512's tiles of four, then three
    {128, 7, 1, 0, KvType::F16},    // group 7, f16: the same tiles on converted K
    {80, 4, 2, 150, KvType::F32},   // no SIMD loops (80 is no multiple of 32)
    {128, 2, 2, 0, KvType::F16},    // group 1
    {64, 2, 2, 0, KvType::F32},     // group 1, f32: AVX-512's head over 16 positions
};

float max_rel_err(const std::vector<float>& got, const std::vector<double>& want) {
    double worst = 0, scale = 0;
    for (double w : want) scale = std::max(scale, std::abs(w));
    for (size_t i = 0; i < got.size(); ++i) worst = std::max(worst, std::abs(got[i] - want[i]));
    return float(worst / scale);
}

TEST(CpuAttention, MatchesADoubleReferenceOnEveryIsa) {
    for (Isa isa : cpu::runnable_isas())
        for (const Shape& s : kShapes)
            for (uint32_t pos : {0u, 127u, 300u}) {
                SCOPED_TRACE(name(s, isa) + " pos " + std::to_string(pos));
                const Problem pr(s, pos, 5, pos + s.head_dim);
                const float scale = 1.0f / std::sqrt(float(s.head_dim));
                cpu::ThreadPool pool(2);
                cpu::Attention attn;
                std::vector<float> out(pr.q.size());
                attn.run(pool, pr.args(out.data(), scale), isa);
                EXPECT_LT(max_rel_err(out, pr.reference(scale)), 2e-5f);
            }
}

TEST(CpuAttention, ABatchGivesEachTokenItsOwnBits) {
    for (Isa isa : cpu::runnable_isas())
        for (const Shape& s : kShapes) {
            SCOPED_TRACE(name(s, isa));
            const uint32_t pos = 250, n = 12;
            const Problem pr(s, pos, n, 7);
            const float scale = 0.125f;
            cpu::ThreadPool one(1), three(3);
            cpu::Attention attn;
            std::vector<float> batched(pr.q.size()), alone(pr.q.size());
            attn.run(three, pr.args(batched.data(), scale), isa);
            const uint64_t w = uint64_t(s.n_head) * s.head_dim;
            for (uint32_t t = 0; t < n; ++t) {
                cpu::AttentionArgs a = pr.args(alone.data() + t * w, scale);
                a.q += t * w;
                a.pos = pos + t;
                a.n = 1;
                attn.run(one, a, isa);
            }
            EXPECT_EQ(0, std::memcmp(batched.data(), alone.data(), batched.size() * 4));
        }
}

// 70 tokens at depth 8000 with head_dim 256: their partials would pass
// 16 MiB, so the batch runs in waves; each token still gets its own bits.
TEST(CpuAttention, ADeepBatchRunsInWavesWithTheSameBits) {
    const Shape s{256, 4, 1, 0, KvType::F16};
    const uint32_t pos = 8000, n = 70;
    const Problem pr(s, pos, n, 13);
    const Isa isa = cpu::runnable_isas().back();
    cpu::ThreadPool pool(2);
    cpu::Attention attn;
    std::vector<float> batched(pr.q.size()), alone(pr.q.size());
    attn.run(pool, pr.args(batched.data(), 0.0625f), isa);
    const uint64_t w = uint64_t(s.n_head) * s.head_dim;
    for (uint32_t t = 0; t < n; ++t) {
        cpu::AttentionArgs a = pr.args(alone.data() + t * w, 0.0625f);
        a.q += t * w;
        a.pos = pos + t;
        a.n = 1;
        attn.run(pool, a, isa);
    }
    EXPECT_EQ(0, std::memcmp(batched.data(), alone.data(), batched.size() * 4));
    // And one token of it against the double reference.
    const Problem last(s, pos + n - 1, 1, 13);
    std::vector<float> out(last.q.size());
    cpu::AttentionArgs a = last.args(out.data(), 0.0625f);
    attn.run(pool, a, isa);
    EXPECT_LT(max_rel_err(out, last.reference(0.0625f)), 2e-5f);
}

TEST(CpuAttention, AWrongScaleOrWindowIsCaught) {
    const Shape s{64, 4, 2, 100, KvType::F16};
    const Problem pr(s, 200, 3, 11);
    cpu::ThreadPool pool(2);
    cpu::Attention attn;
    std::vector<float> out(pr.q.size());
    attn.run(pool, pr.args(out.data(), 0.2f), cpu::runnable_isas().back());
    EXPECT_LT(max_rel_err(out, pr.reference(0.2f)), 2e-5f);
    EXPECT_GT(max_rel_err(out, pr.reference(0.21f)), 1e-3f);
    Problem wider = pr;
    wider.s.window = 101;
    EXPECT_GT(max_rel_err(out, wider.reference(0.2f)), 1e-4f);
}

// The same problem with its K/V rows scattered over pages of 2^shift
// positions in a larger cache (in shuffled order, the slots between them
// holding noise): every token's output is the contiguous cache's bit for bit,
// on every Isa, f16 and f32, with windows, batches and page sizes of 1 to
// 128 positions. Negative control: swapping two page table entries moves
// the output.
TEST(CpuAttention, PagedCacheGivesTheContiguousBits) {
    for (Isa isa : cpu::runnable_isas())
        for (const Shape& s : kShapes)
            for (uint32_t shift : {0u, 4u, 7u}) {
                SCOPED_TRACE(name(s, isa) + " pages of " + std::to_string(1u << shift));
                const Problem pr(s, 290, 6, 5);
                const uint32_t page = 1u << shift, used = (pr.n_pos + page - 1) / page, total = 2 * used + 3;
                std::vector<uint32_t> slots(total);
                for (uint32_t i = 0; i < total; ++i) slots[i] = i;
                std::shuffle(slots.begin(), slots.end(), std::mt19937(shift + 1));
                std::vector<uint32_t> table(slots.begin(), slots.begin() + used);
                const uint64_t rows = uint64_t(total) * page;
                std::mt19937 rng(9);
                auto scatter = [&](const std::vector<float>& src) {
                    std::vector<uint8_t> dst(rows * s.n_head_kv * s.head_dim * kv_bytes(s));
                    for (uint8_t& b : dst) b = uint8_t(rng() & 0x3b);   // finite f16 and f32 noise
                    put_rows(s, src, rows, [&](uint32_t j) { return cpu::kv_row(table.data(), shift, j); }, dst);
                    return dst;
                };
                const std::vector<uint8_t> k_pages = scatter(pr.k), v_pages = scatter(pr.v);
                cpu::ThreadPool pool(2);
                cpu::Attention attn;
                std::vector<float> flat(pr.q.size()), paged(pr.q.size());
                attn.run(pool, pr.args(flat.data(), 0.1f), isa);
                cpu::AttentionArgs a = pr.args(paged.data(), 0.1f);
                a.k_cache = k_pages.data();
                a.v_cache = v_pages.data();
                a.head_stride = rows * s.head_dim;
                a.pages = table.data();
                a.page_shift = shift;
                attn.run(pool, a, isa);
                EXPECT_EQ(0, std::memcmp(flat.data(), paged.data(), flat.size() * 4));
                std::swap(table[used - 1], table[used - 2]);
                attn.run(pool, a, isa);
                EXPECT_NE(0, std::memcmp(flat.data(), paged.data(), flat.size() * 4));
            }
}

// Several sequences of one layer in one call (a batch step's decode tokens
// and prompt chunks): their pages in one shared storage, at different
// depths (one token deep in several chunks, a chunk of 5 prompt tokens, a
// single first token), on every Isa, f16 and f32, with windows: each
// sequence's output is the bits of its own call. Negative control: one
// sequence's table pointing at another's page changes its output and only
// its output.
TEST(CpuAttention, SequencesTogetherGiveTheirOwnBits) {
    constexpr uint32_t kShift = 4, kPage = 1u << kShift;
    for (Isa isa : cpu::runnable_isas())
        for (const Shape& s : kShapes) {
            SCOPED_TRACE(name(s, isa));
            const Problem prs[] = {Problem(s, 300, 1, 11), Problem(s, 40, 5, 12), Problem(s, 0, 1, 13),
                                   Problem(s, 131, 2, 14)};
            constexpr uint32_t kSeqs = std::size(prs);
            // Sequence i's page p is storage page p·kSeqs + i.
            std::vector<std::vector<uint32_t>> tables(kSeqs);
            uint32_t n_pages = 0;
            for (uint32_t i = 0; i < kSeqs; ++i) {
                for (uint32_t p = 0; p * kPage < prs[i].n_pos; ++p) tables[i].push_back(p * kSeqs + i);
                n_pages = std::max(n_pages, tables[i].back() + 1);
            }
            const uint64_t rows = uint64_t(n_pages) * kPage;
            std::vector<uint8_t> k_store(rows * s.n_head_kv * s.head_dim * kv_bytes(s)), v_store(k_store.size());
            for (uint32_t i = 0; i < kSeqs; ++i) {
                const auto at = [&](uint32_t j) { return cpu::kv_row(tables[i].data(), kShift, j); };
                put_rows(s, prs[i].k, rows, at, k_store);
                put_rows(s, prs[i].v, rows, at, v_store);
            }
            std::vector<std::vector<float>> alone(kSeqs), together(kSeqs);
            std::vector<cpu::AttentionArgs> args(kSeqs);
            cpu::ThreadPool pool(2);
            cpu::Attention attn;
            for (uint32_t i = 0; i < kSeqs; ++i) {
                alone[i].resize(prs[i].q.size());
                together[i].resize(prs[i].q.size());
                args[i] = prs[i].args(together[i].data(), 0.1f);
                args[i].k_cache = k_store.data();
                args[i].v_cache = v_store.data();
                args[i].head_stride = rows * s.head_dim;
                args[i].pages = tables[i].data();
                args[i].page_shift = kShift;
                cpu::AttentionArgs a = args[i];
                a.out = alone[i].data();
                attn.run(pool, a, isa);
            }
            attn.run(pool, args, isa);
            for (uint32_t i = 0; i < kSeqs; ++i)
                EXPECT_EQ(0, std::memcmp(alone[i].data(), together[i].data(), alone[i].size() * 4)) << "sequence " << i;
            // Sequence 0's last page (inside every window) is sequence 1's.
            tables[0].back() = tables[1][0];
            attn.run(pool, args, isa);
            EXPECT_NE(0, std::memcmp(alone[0].data(), together[0].data(), alone[0].size() * 4));
            for (uint32_t i = 1; i < kSeqs; ++i)
                EXPECT_EQ(0, std::memcmp(alone[i].data(), together[i].data(), alone[i].size() * 4)) << "sequence " << i;
        }
}

double ulps(float got, double want) {
    const double ulp = std::ldexp(1.0, std::ilogb(float(want)) - 23);
    return std::abs(got - want) / ulp;
}

// With out_q set, each token's output row also comes quantized: the bits of
// quantize_input on the row, and the float rows those of a run without it
// (several chunks, one token and several, windows that cut chunks). A
// head_dim that is no multiple of 32 is refused.
TEST(CpuAttention, TheQuantizedOutputIsItsRowQuantized) {
    for (Isa isa : cpu::runnable_isas())
        for (const Shape& s : kShapes) {
            SCOPED_TRACE(name(s, isa));
            cpu::ThreadPool pool(2);
            cpu::Attention attn;
            for (const Problem& pr : {Problem(s, 300, 1, 21), Problem(s, 131, 3, 22), Problem(s, 0, 1, 23)}) {
                std::vector<float> plain(pr.q.size()), with_q(pr.q.size());
                std::vector<cpu::QuantizedInput> outq(pr.n);
                attn.run(pool, pr.args(plain.data(), 0.1f), isa);
                cpu::AttentionArgs a = pr.args(with_q.data(), 0.1f);
                a.out_q = outq.data();
                if (s.head_dim % 32 != 0) {
                    EXPECT_THROW(attn.run(pool, a, isa), std::invalid_argument);
                    continue;
                }
                attn.run(pool, a, isa);
                EXPECT_EQ(0, std::memcmp(plain.data(), with_q.data(), plain.size() * 4)) << "pos " << pr.pos;
                const uint64_t width = uint64_t(s.n_head) * s.head_dim;
                for (uint32_t t = 0; t < pr.n; ++t) {
                    cpu::QuantizedInput want;
                    cpu::quantize_input(with_q.data() + t * width, width, gguf::GgmlType::Q8_0, want, isa);
                    ASSERT_EQ(outq[t].n, width);
                    EXPECT_EQ(0, std::memcmp(want.b32.data(), outq[t].b32.data(), want.b32.size() * sizeof(cpu::BlockQ8x32)))
                        << "pos " << pr.pos << " token " << t;
                }
            }
        }
}

TEST(CpuElementwise, ExpSiluAndGeluStayWithinAFewUlp) {
    std::mt19937 rng(5);
    std::uniform_real_distribution<float> ud(-20.0f, 20.0f);
    std::vector<float> xs(1003);   // not a multiple of 8 or 16: the tails too
    for (float& x : xs) x = ud(rng);
    xs[0] = 0.0f;
    xs[1] = -87.0f;
    xs[2] = -200.0f;   // exp underflows to 0
    xs[3] = 87.0f;
    xs[4] = 1e-8f;
    for (Isa isa : cpu::runnable_isas()) {
        SCOPED_TRACE(cpu::isa_name(isa));
        const cpu::ElementwiseOps ops = cpu::elementwise_ops(isa);
        std::vector<float> e = xs;
        ops.exp_inplace(e.data(), uint32_t(e.size()));
        double worst = 0;
        for (size_t i = 0; i < xs.size(); ++i) {
            const double want = std::exp(double(xs[i]));
            if (want < 1e-37) EXPECT_LT(e[i], 1e-37f) << xs[i];
            else worst = std::max(worst, ulps(e[i], want));
        }
        EXPECT_LE(worst, 3.0);
        std::vector<float> u(xs.size());
        for (size_t i = 0; i < u.size(); ++i) u[i] = 0.5f + float(i % 7);
        for (bool gelu : {false, true}) {
            std::vector<float> g = xs;
            (gelu ? ops.gelu_mul : ops.silu_mul)(g.data(), u.data(), uint32_t(g.size()));
            double worst_abs = 0;
            for (size_t i = 0; i < xs.size(); ++i) {
                const double x = xs[i];
                const double act = gelu ? 0.5 * x * (1 + std::tanh(0.7978845608028654 * (x + 0.044715 * x * x * x)))
                                        : x / (1 + std::exp(-x));
                const double want = act * u[i];
                worst_abs = std::max(worst_abs, std::abs(g[i] - want) / std::max(1.0, std::abs(want)));
            }
            EXPECT_LT(worst_abs, 1e-6) << (gelu ? "gelu" : "silu");
        }
        // The soft-cap at Gemma's 30 over logits of ±20 (and 0, ±87, -200, 1e-8
        // above, 1e4): measured (2026-12-02, Zen 4) at most 1.21e-7 of the cap
        // on scalar, 1.98e-7 on the SIMD Isas (cap 1.5); the bound is 1.25x.
        for (float cap : {30.0f, 1.5f}) {
            std::vector<float> c = xs;
            c[5] = 1e4f;   // saturates: e^2y past exp's range
            ops.softcap(c.data(), c.size(), cap);
            double worst_cap = 0;
            for (size_t i = 0; i < xs.size(); ++i) {
                const double x = i == 5 ? 1e4 : xs[i];
                worst_cap = std::max(worst_cap, std::abs(c[i] - cap * std::tanh(x / cap)) / cap);
            }
            std::printf("[elementwise] %s soft-cap %g: worst |error| %.3g of the cap\n", cpu::isa_name(isa), cap, worst_cap);
            EXPECT_LT(worst_cap, 2.5e-7) << "cap " << cap;
        }
    }
}

TEST(CpuElementwise, TheF16StoreRoundsAsTheScalarConversion) {
    // Every f16 value as f32, the midpoint to the next one (a tie) and the
    // floats one bit either side of it: each rounding case of each binade.
    std::vector<float> xs;
    for (uint32_t h = 0; h < 0x7c00u; ++h) {
        for (uint32_t sign : {0u, 0x8000u}) {
            const float a = f16_to_f32(uint16_t(h | sign)), b = f16_to_f32(uint16_t((h + 1) | sign));
            const uint32_t mid = f32_bits(float((double(a) + double(b)) / 2));
            for (uint32_t bits : {f32_bits(a), mid - 1, mid, mid + 1}) xs.push_back(f32_from_bits(bits));
        }
    }
    for (float x : {65504.0f, 65519.99f, 65520.0f, 1e6f, INFINITY, -INFINITY, 1e-30f, -1e-30f, 0x1p-25f, 0x1p-24f,
                    std::nanf(""), -std::nanf("")})
        xs.push_back(x);
    xs.push_back(f32_from_bits(0x7f800001u));   // a signalling NaN: quieted, payload's top bits kept
    xs.push_back(f32_from_bits(0xffa5a5a5u));
    xs.resize(xs.size() + (29 - xs.size() % 16) % 16);   // 13 past a multiple of 16: a tail for the SIMD loops
    std::vector<uint16_t> want(xs.size());
    for (size_t i = 0; i < xs.size(); ++i) want[i] = f32_to_f16(xs[i]);
    // Control: the inputs tell rounding from truncation (a truncating store
    // would differ on more than a quarter of them).
    size_t truncated_differs = 0;
    for (size_t i = 0; i < xs.size(); ++i) {
        const uint32_t u = f32_bits(xs[i]);
        const uint16_t t = uint16_t((u >> 16 & 0x8000u) | ((((u & 0x7fffffffu) - (112u << 23)) >> 13) & 0x7fffu));
        truncated_differs += (u & 0x7fffffffu) >= 0x38800000u && (u & 0x7fffffffu) < 0x477fe000u && t != want[i];
    }
    EXPECT_GT(truncated_differs, xs.size() / 4);
    for (Isa isa : cpu::runnable_isas()) {
        SCOPED_TRACE(cpu::isa_name(isa));
        std::vector<uint16_t> got(xs.size(), 0x1234);
        cpu::elementwise_ops(isa).to_f16(xs.data(), got.data(), xs.size());
        size_t wrong = 0;
        for (size_t i = 0; i < xs.size(); ++i)
            if (got[i] != want[i] && wrong++ < 5)
                ADD_FAILURE() << std::hexfloat << xs[i] << ": " << std::hex << got[i] << ", want " << want[i];
        EXPECT_EQ(wrong, 0u) << "of " << xs.size();
    }
}

}  // namespace
