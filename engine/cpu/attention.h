// Attention for the CPU backend's quantized path: every query head of a
// batch of tokens against the KV cache (f16 or f32), causal, with an optional
// sliding window.
//
// The visible positions are cut into fixed chunks of kAttnChunk absolute
// positions. One task handles one (token, KV head, chunk): it reads each K and
// V row of the chunk once for all the query heads that share the KV head
// (grouped-query attention) and leaves, per head, the chunk's score maximum,
// its sum of exponentials and its unnormalised output. A second pass merges
// each head's chunks in order. So one decoded token at a long context spreads
// over every thread even when the model has a single KV head, and because
// the chunks are fixed by position (not by the batch or the thread count), a
// token's result is the same bit for bit whether it runs alone or in a batch.
//
// The float32 reference attention in cpu_backend.cpp stays the plain one;
// test_cpu_backend compares the two.
#pragma once

#include <atomic>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "engine/backend.h"
#include "engine/cpu/qdot.h"
#include "engine/cpu/thread_pool.h"

namespace ptxlm::cpu {

constexpr uint32_t kAttnChunk = 128;

struct AttentionArgs {
    const float* q = nullptr;   // token t, head h: q + t·ldq + h·head_dim
    uint64_t ldq = 0;
    float* out = nullptr;       // same layout as q
    uint64_t ldo = 0;
    // The cache (f16 or f32) holds per KV head a plane of rows of head_dim
    // values, head_stride values apart: head g of cache row r at
    // kv_index(head_stride, head_dim, r, g). A task reads one KV head's
    // positions, which so lie together (from rows of every head it read
    // head_dim values of each n_head_kv · head_dim). With the scores' one
    // base a block (attention_simd.h), SmolLM2's tg128 at depth 1024 ran
    // 1.29-1.33x faster on one Zen 3 core than in such rows (docs/benchmarks.md).
    const uint8_t* k_cache = nullptr;
    const uint8_t* v_cache = nullptr;
    KvType kv = KvType::F16;
    uint64_t head_stride = 0;   // the cache's rows · head_dim
    uint32_t n_head = 0, n_head_kv = 0, head_dim = 0;
    float scale = 1.0f;
    uint32_t pos = 0;      // token t of the batch sits at position pos + t
    uint32_t n = 0;        // tokens in the batch
    uint32_t window = 0;   // > 0: a token sees the last `window` positions, itself included
    // Paged K/V (the KV pool's page tables, engine/kv_pool.h): position j is
    // cache row kv_row(pages, page_shift, j), pages of 2^page_shift rows;
    // null: row j. Only the rows' addresses change: a token's result is the
    // same bit for bit however its positions are paged.
    const uint32_t* pages = nullptr;
    uint32_t page_shift = 0;
    // When set (head_dim a multiple of 32): token t's output row is also
    // quantized into out_q[t] as quantize_input does for a Block32 type
    // (n_head · head_dim values), each head's blocks by the thread that
    // merges it: the input of the product that follows, ready with the pass.
    QuantizedInput* out_q = nullptr;
};

// The index of KV head g's values of cache row r (see AttentionArgs).
inline uint64_t kv_index(uint64_t head_stride, uint32_t head_dim, uint64_t r, uint32_t g) {
    return g * head_stride + r * head_dim;
}

// The cache row holding position j.
inline uint64_t kv_row(const uint32_t* pages, uint32_t page_shift, uint32_t j) {
    if (!pages) return j;
    return (uint64_t(pages[j >> page_shift]) << page_shift) | (j & ((1u << page_shift) - 1));
}

// One task's chunk for the SIMD inner loops (attention_avx2.cpp,
// attention_avx512.cpp): the group's heads against positions [j0, j1).
// scores: [group][kAttnChunk]; out: head h's outputs at out + h·out_stride.
struct AttnChunk {
    const float* q = nullptr;   // the group's heads, head_dim apart
    const uint8_t* k_cache = nullptr;
    const uint8_t* v_cache = nullptr;
    bool f16 = true;
    uint64_t offset = 0;   // position j's head_dim values at kv_row(pages, page_shift, j)·head_dim + offset
    const uint32_t* pages = nullptr;
    uint32_t page_shift = 0;
    uint32_t j0 = 0, j1 = 0, head_dim = 0, group = 0;
    float scale = 1.0f;
    float* scores = nullptr;
    float* out = nullptr;
    uint64_t out_stride = 0;
};
// head_dim a multiple of 4 vectors (32 floats for AVX2, 64 for AVX-512).
// scores writes a.scores; accumulate writes a.out from a.scores (the
// softmax's weights by then).
void attn_scores_avx2(const AttnChunk& a);
void attn_accumulate_avx2(const AttnChunk& a);
void attn_scores_avx512(const AttnChunk& a);
void attn_accumulate_avx512(const AttnChunk& a);

// Keeps the scratch between calls (per-thread scores, per-chunk partials),
// so steady decoding allocates nothing once the context has been reached.
// The partials stay under 16 MiB: a batch deep in a long context runs in
// waves of tokens.
class Attention {
public:
    void run(ThreadPool& pool, const AttentionArgs& a, Isa isa);
    // Several sequences of one layer in one pass over the pool (they differ
    // only in q, out, pos, n and pages): each token's result is the same
    // bit for bit as in a call of its own.
    void run(ThreadPool& pool, std::span<const AttentionArgs> seqs, Isa isa);

private:
    struct Task { uint32_t s, t, g, chunk, tg; };   // tg: its (row, KV head) group, first_'s index
    struct Row { uint32_t s, t; };
    std::vector<Task> tasks_;
    std::vector<Row> rows_;
    std::vector<uint32_t> first_;
    std::vector<float> partial_;   // per (token, head, chunk): max, sum, head_dim outputs
    std::vector<float> scratch_;   // per thread: scores and converted rows
    std::unique_ptr<std::atomic<uint32_t>[]> done_;   // per (row, KV head) group: its chunks finished
    uint64_t done_cap_ = 0;
};

}  // namespace ptxlm::cpu
