#include "engine/cpu/matvec.h"

#include <algorithm>
#include <vector>

namespace ptxlm::cpu {

namespace {
constexpr uint64_t kChunk = 256;   // a multiple of every block size (1, 32, 256)
}

float dot(const float* w, const float* x, uint64_t n) {
    double total = 0;
    for (uint64_t c = 0; c < n; c += kChunk) {
        const uint64_t m = std::min(kChunk, n - c);
        float acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
        uint64_t i = 0;
        for (; i + 8 <= m; i += 8)
            for (int k = 0; k < 8; ++k) acc[k] += w[c + i + k] * x[c + i + k];
        for (; i < m; ++i) acc[0] += w[c + i] * x[c + i];
        total += ((acc[0] + acc[1]) + (acc[2] + acc[3])) + ((acc[4] + acc[5]) + (acc[6] + acc[7]));
    }
    return static_cast<float>(total);
}

void dequantize_row(const Weight& w, uint64_t r, float* out) {
    gguf::type_traits(w.type).dequantize_row(w.row(r), out, static_cast<int64_t>(w.cols));
}

namespace {

// x as llama.cpp's dot product for weights of type t would see it.
void round_like_llamacpp(gguf::GgmlType t, const float* x, float* out, uint64_t n) {
    using gguf::GgmlType;
    GgmlType via;
    switch (t) {
        case GgmlType::F32: std::copy(x, x + n, out); return;
        case GgmlType::F16: via = GgmlType::F16; break;
        case GgmlType::BF16: via = GgmlType::BF16; break;
        case GgmlType::Q2_K: case GgmlType::Q3_K: case GgmlType::Q4_K: case GgmlType::Q5_K: case GgmlType::Q6_K:
            via = GgmlType::Q8_K; break;
        default: via = GgmlType::Q8_0; break;   // Q4_0, Q4_1, Q5_0, Q5_1, Q8_0 (Q8_1 rounds the same way)
    }
    const gguf::TypeTraits& tt = gguf::type_traits(via);
    std::vector<uint8_t> q(n / tt.block_elems * tt.block_bytes);
    tt.quantize_row(x, q.data(), static_cast<int64_t>(n));
    tt.dequantize_row(q.data(), out, static_cast<int64_t>(n));
}

}  // namespace

void matmul(ThreadPool& pool, std::initializer_list<MatVec> jobs, const float* x, uint64_t n_in, uint64_t ldx,
            InputRounding rounding) {
    const MatVec* js = jobs.begin();
    if (rounding == InputRounding::LikeLlamaCpp) {
        // One rounded copy of the inputs per job (jobs sharing x may differ in type).
        for (const MatVec& j : jobs) {
            const uint64_t n = j.w->cols;
            std::vector<float> xr(n_in * n);
            for (uint64_t t = 0; t < n_in; ++t) round_like_llamacpp(j.w->type, x + t * ldx, xr.data() + t * n, n);
            matmul(pool, {j}, xr.data(), n_in, n);
        }
        return;
    }
    uint64_t total = 0, max_cols = 0;
    for (const MatVec& j : jobs) {
        total += j.w->rows;
        max_cols = std::max(max_cols, j.w->cols);
    }
    // One dequantized row per thread, reused across the inputs.
    std::vector<float> rows(max_cols * pool.size());
    pool.parallel_for(total, 16, [&](uint64_t begin, uint64_t end, int thread) {
        float* buf = rows.data() + uint64_t(thread) * max_cols;
        size_t j = 0;
        uint64_t base = 0;
        for (uint64_t i = begin; i < end; ++i) {
            while (i >= base + js[j].w->rows) base += js[j++].w->rows;
            const Weight& w = *js[j].w;
            const uint64_t r = i - base;
            dequantize_row(w, r, buf);
            for (uint64_t t = 0; t < n_in; ++t) js[j].y[t * js[j].ldy + r] = dot(buf, x + t * ldx, w.cols);
        }
    });
}

}  // namespace ptxlm::cpu
