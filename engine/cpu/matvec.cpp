#include "engine/cpu/matvec.h"

#include <algorithm>
#include <stdexcept>
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
        case GgmlType::IQ4_XS:
            via = GgmlType::Q8_K; break;
        // Q4_0, Q4_1, Q5_0, Q5_1, Q8_0, IQ4_NL (Q8_1 rounds the same way)
        default: via = GgmlType::Q8_0; break;
    }
    const gguf::TypeTraits& tt = gguf::type_traits(via);
    std::vector<uint8_t> q(n / tt.block_elems * tt.block_bytes);
    tt.quantize_row(x, q.data(), static_cast<int64_t>(n));
    tt.dequantize_row(q.data(), out, static_cast<int64_t>(n));
}

// Walks the rows of several jobs as one range: global row i is row r of job j.
struct RowWalk {
    const MatVec* js;
    size_t j = 0;
    uint64_t base = 0;   // the global index of job j's row 0
    uint64_t row(uint64_t i) {   // i never decreases between calls
        while (i >= base + js[j].w->rows) base += js[j++].w->rows;
        return i - base;
    }
};

void matmul_reference(ThreadPool& pool, const MatVec* js, size_t n_jobs, const float* x, uint64_t n_in, uint64_t ldx,
                      InputRounding rounding) {
    if (rounding == InputRounding::LikeLlamaCpp) {
        // One rounded copy of the inputs per job (jobs sharing x may differ in type).
        for (size_t j = 0; j < n_jobs; ++j) {
            const uint64_t n = js[j].w->cols;
            std::vector<float> xr(n_in * n);
            for (uint64_t t = 0; t < n_in; ++t) round_like_llamacpp(js[j].w->type, x + t * ldx, xr.data() + t * n, n);
            matmul_reference(pool, js + j, 1, xr.data(), n_in, n, InputRounding::Exact);
        }
        return;
    }
    uint64_t total = 0, max_cols = 0;
    for (size_t j = 0; j < n_jobs; ++j) {
        total += js[j].w->rows;
        max_cols = std::max(max_cols, js[j].w->cols);
    }
    // One dequantized row per thread, reused across the inputs.
    std::vector<float> rows(max_cols * pool.size());
    pool.parallel_for(total, 16, [&](uint64_t begin, uint64_t end, int thread) {
        float* buf = rows.data() + uint64_t(thread) * max_cols;
        RowWalk walk{js};
        for (uint64_t i = begin; i < end; ++i) {
            const uint64_t r = walk.row(i);
            const size_t j = walk.j;
            const Weight& w = *js[j].w;
            // An F32 row is its own dequantization: read in place, not copied
            // (gemma4's per_layer_model_proj, 55 MB a token at E2B's size).
            const float* row = buf;
            if (w.type == gguf::GgmlType::F32) row = reinterpret_cast<const float*>(w.row(r));
            else dequantize_row(w, r, buf);
            for (uint64_t t = 0; t < n_in; ++t) js[j].y[t * js[j].ldy + r] = dot(row, x + t * ldx, w.cols);
        }
    });
}

}  // namespace

QuantizedProduct::QuantizedProduct(ThreadPool& pool, const MatVec* jobs, size_t n, const float* x, uint64_t n_inputs,
                                   uint64_t ldx, Isa isa, const QuantizedInput* pre)
    : js(jobs), n_jobs(n), n_in(n_inputs), cols(jobs[0].w->cols) {
    constexpr size_t kLayouts = 3;   // QuantizedInput::Layout: None, Block32, Block256
    // Kept per calling thread, so steady decoding allocates nothing.
    thread_local std::vector<QuantizedInput> inputs[kLayouts];
    thread_local std::vector<const void*> blocks[kLayouts];   // inputs[l][t].blocks(), as QDotMultiFn takes them
    if (n_jobs > kMaxJobs) throw std::logic_error("matmul: too many jobs in one product");
    gguf::GgmlType layout_type[kLayouts] = {};
    bool needed[kLayouts] = {};
    for (size_t j = 0; j < n_jobs; ++j) {
        const Weight& w = *js[j].w;
        if (w.cols != cols) throw std::logic_error("matmul: jobs sharing an input differ in width");
        const size_t l = size_t(qdot_layout(w.type));
        if (pre && (size_t(pre[0].layout) != l || pre[0].n != cols))
            throw std::logic_error("matmul: a quantized input of another layout or width");
        needed[l] = true;
        layout_type[l] = w.type;
        if (!pre && inputs[l].size() < n_in) inputs[l].resize(n_in);
        if (blocks[l].size() < n_in) blocks[l].resize(n_in);
        in_blocks[j] = blocks[l].data();
        fns[j] = qdot_fn(isa, w.type);
        multi_fns[j] = qdot_multi_fn(isa, w.type);
        packed[j] = js[j].packed && js[j].packed->isa == isa && js[j].packed->fn ? js[j].packed : nullptr;
    }
    for (size_t l = 0; l < kLayouts; ++l) {
        if (!needed[l]) continue;
        if (pre) {
            for (uint64_t t = 0; t < n_in; ++t) blocks[l][t] = pre[t].blocks();
            continue;
        }
        std::vector<QuantizedInput>& q = inputs[l];
        if (n_in == 1) quantize_input(x, cols, layout_type[l], q[0], isa);
        else
            pool.parallel_for(n_in, 1, [&](uint64_t begin, uint64_t end, int) {
                for (uint64_t t = begin; t < end; ++t) quantize_input(x + t * ldx, cols, layout_type[l], q[t], isa);
            });
        for (uint64_t t = 0; t < n_in; ++t) blocks[l][t] = q[t].blocks();
    }
    first_unit[0] = 0;
    for (size_t j = 0; j < n_jobs; ++j) first_unit[j + 1] = first_unit[j] + (js[j].w->rows + kPackRows - 1) / kPackRows;
}

void QuantizedProduct::run(size_t j, uint64_t unit) const {
    const Weight& w = *js[j].w;
    const uint64_t r0 = unit * kPackRows;
    const PackedWeight* p = packed[j];
    if (p && unit < p->groups) {
        for (uint64_t t = 0; t < n_in; t += kQDotMaxInputs)
            p->fn(p->group(unit), in_blocks[j] + t, int(std::min<uint64_t>(kQDotMaxInputs, n_in - t)), cols,
                  js[j].y + t * js[j].ldy + r0, js[j].ldy);
        return;
    }
    const uint64_t r1 = std::min<uint64_t>(r0 + kPackRows, w.rows);
    if (n_in == 1) {
        for (uint64_t r = r0; r < r1; ++r) js[j].y[r] = fns[j](w.row(r), in_blocks[j][0], cols);
        return;
    }
    // Up to kQDotMaxRows rows together.
    QDotBatch batch;
    batch.row_bytes = w.row_bytes;
    batch.n = cols;
    batch.out_stride = js[j].ldy;
    for (uint64_t r = r0; r < r1; r += uint64_t(batch.n_rows)) {
        batch.rows = w.row(r);
        batch.n_rows = int(std::min<uint64_t>(kQDotMaxRows, r1 - r));
        for (uint64_t t = 0; t < n_in; t += kQDotMaxInputs) {
            batch.xs = in_blocks[j] + t;
            batch.n_x = int(std::min<uint64_t>(kQDotMaxInputs, n_in - t));
            batch.out = js[j].y + t * js[j].ldy + r;
            multi_fns[j](batch);
        }
    }
}

namespace {

void matmul_quantized(ThreadPool& pool, const MatVec* js, size_t n_jobs, const float* x, uint64_t n_in, uint64_t ldx,
                      Isa isa, const QuantizedInput* pre = nullptr) {
    const QuantizedProduct pass(pool, js, n_jobs, x, n_in, ldx, isa, pre);
    pool.parallel_for(pass.units(), 2, [&](uint64_t begin, uint64_t end, int) {
        size_t j = 0;
        for (uint64_t u = begin; u < end; ++u) {
            while (u >= pass.first_unit[j + 1]) ++j;
            pass.run(j, u - pass.first_unit[j]);
        }
    });
}

}  // namespace

void matmul(ThreadPool& pool, std::initializer_list<MatVec> jobs, const float* x, uint64_t n_in, uint64_t ldx,
            const Arithmetic& arith) {
    if (arith.path == CpuPath::Reference) return matmul_reference(pool, jobs.begin(), jobs.size(), x, n_in, ldx, arith.rounding);
    // Jobs of types without quantized dot products (F32, F16, BF16) take the
    // reference arithmetic.
    MatVec fast[8], slow[8];
    size_t n_fast = 0, n_slow = 0;
    for (const MatVec& j : jobs) {
        if (n_fast == 8 || n_slow == 8) throw std::logic_error("matmul: too many jobs in one product");
        (has_qdot(j.w->type) ? fast[n_fast++] : slow[n_slow++]) = j;
    }
    if (n_fast) matmul_quantized(pool, fast, n_fast, x, n_in, ldx, arith.isa);
    if (n_slow) matmul_reference(pool, slow, n_slow, x, n_in, ldx, InputRounding::Exact);
}

void matmul(ThreadPool& pool, std::initializer_list<MatVec> jobs, const QuantizedInput* xq, uint64_t n_in, Isa isa) {
    matmul_quantized(pool, jobs.begin(), jobs.size(), nullptr, n_in, 0, isa, xq);
}

void matmul_glu(ThreadPool& pool, const MatVec& gate, const MatVec& up, const float* x, uint64_t n_in, uint64_t ldx,
                Isa isa, GluFn act, QuantizedInput* next) {
    const uint64_t rows = gate.w->rows;
    if (up.w->rows != rows || !has_qdot(gate.w->type) || !has_qdot(up.w->type))
        throw std::logic_error("matmul_glu: gate and up need quantized dot products and the same rows");
    if (next && rows % kGluRows != 0) throw std::logic_error("matmul_glu: rows not a multiple of 32 for a quantized output");
    const MatVec jobs[2] = {gate, up};
    const QuantizedProduct pass(pool, jobs, 2, x, n_in, ldx, isa, nullptr);
    const QuantizeBlock32Fn quantize = quantize_block32_fn(isa);
    if (next)
        for (uint64_t t = 0; t < n_in; ++t) next[t].reset_block32(rows);
    // An item: rows [32i, 32i + 32) of both, kGluRows / kPackRows units each.
    static_assert(kGluRows % kPackRows == 0);
    constexpr uint64_t kUnits = kGluRows / kPackRows;
    const uint64_t units = pass.units(0);
    // Packed as a pair (repack.h), an item's gate rows then its up rows are
    // the next bytes of one stream: item by item. Otherwise all of a chunk's
    // gate rows, then its up rows: two streams of the chunk's length, not a
    // switch every 32 rows (two interleaved streams kept 0.70 of a Zen 4
    // core's read, one 0.87; SmolLM2 tg128 on one core +11-16%,
    // docs/benchmarks.md).
    static_assert(kUnits == kRunGroups);
    const bool one_stream = gate.packed && up.packed && gate.packed->isa == isa && paired(*gate.packed, *up.packed);
    pool.parallel_for((units + kUnits - 1) / kUnits, 1, [&](uint64_t begin, uint64_t end, int) {
        const uint64_t step = one_stream ? 1 : end - begin;   // items whose gate rows, then up rows, go together
        for (uint64_t i0 = begin; i0 < end; i0 += step) {
            const uint64_t i1 = std::min(end, i0 + step), u0 = i0 * kUnits, u1 = std::min(units, i1 * kUnits);
            for (uint64_t u = u0; u < u1; ++u) pass.run(0, u);
            for (uint64_t u = u0; u < u1; ++u) pass.run(1, u);
            for (uint64_t i = i0; i < i1; ++i) {
                const uint64_t r0 = i * kGluRows, n = std::min(rows, r0 + kGluRows) - r0;
                for (uint64_t t = 0; t < n_in; ++t) {
                    float* g = gate.y + t * gate.ldy + r0;
                    act(g, up.y + t * up.ldy + r0, uint32_t(n));
                    if (next) quantize(g, next[t].b32[i]);
                }
            }
        }
    });
}

}  // namespace ptxlm::cpu
