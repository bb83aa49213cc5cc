#include "engine/cuda/gemv_reference.h"

#include <cmath>
#include <stdexcept>

#include "engine/cpu/qdot.h"

namespace ptxlm::cuda {

namespace kx = ptxlm::kernels;

float glu_activation(kx::Glu g, float x) {
    return g == kx::Glu::SwiGlu ? x / (1.0f + std::exp(-x))
                                : 0.5f * x * (1.0f + std::tanh(0.7978845608028654f * (x + 0.044715f * x * x * x)));
}

std::vector<std::vector<RowCheck>> gemv_reference(const kx::GemvShape& s, const std::vector<const Weight*>& ws,
                                                  const std::vector<float>& norm, const std::vector<float>& x,
                                                  const std::vector<std::vector<float>>& y0,
                                                  const std::vector<float>& gate) {
    const uint32_t n = s.n_in;
    const bool glu = s.glu != kx::Glu::None;
    if (ws.size() != s.segments.size() || x.size() != n || (s.norm && norm.size() != n) ||
        (s.accumulate && y0.size() != ws.size()) || (s.gated != kx::Glu::None && gate.size() != ws.at(0)->rows))
        throw std::invalid_argument("gemv_reference: operands do not match the shape");
    // The norm's scale, and the input the rows multiply: x ∘ norm_w, scaled
    // after the dot on the quantized path (as the CPU's is), before on the
    // reference path.
    float scale = 1.0f;
    if (s.norm) {
        double ss = 0;
        for (float v : x) ss += double(v) * v;
        scale = 1.0f / std::sqrt(float(ss / n) + s.eps);
    }
    std::vector<float> in(x);
    for (uint32_t i = 0; s.norm && i < n; ++i) in[i] = s.q8_input ? x[i] * norm[i] : (x[i] * scale) * norm[i];
    cpu::QuantizedInput qi;
    std::vector<float> deq;   // what the rows multiply, for the terms' magnitude
    if (s.q8_input) {
        cpu::quantize_input(in.data(), n, ws[0]->type, qi);
        deq.resize(n);
        for (uint32_t i = 0; i < n; ++i)
            deq[i] = qi.layout == cpu::QuantizedInput::Layout::Block256 ? qi.b256[i / 256].d * float(qi.b256[i / 256].qs[i % 256])
                                                                      : qi.b32[i / 32].d * float(qi.b32[i / 32].qs[i % 32]);
    }
    auto row = [&](size_t si, uint64_t r) {
        const Weight& w = *ws[si];
        std::vector<float> wr(n);
        gguf::type_traits(w.type).dequantize_row(w.row(r), wr.data(), int64_t(n));
        double dot = 0, mag = 0;
        for (uint32_t i = 0; i < n; ++i) {
            const double xi = s.q8_input ? double(deq[i]) * scale : double(in[i]);
            dot += double(wr[i]) * xi;
            mag += std::fabs(double(wr[i]) * xi);
        }
        if (s.q8_input) dot = double(scale) * cpu::qdot(cpu::Isa::Scalar, w.type, w.row(r), qi, n);
        return RowCheck{dot, kx::gemv_tolerance(mag, n)};
    };
    std::vector<std::vector<RowCheck>> out;
    if (glu) {
        // act(g)·u: an error e_g in g moves it by at most max|act'| (< 1.13
        // for SiLU and GELU) times e_g times |u|, an error e_u by |act(g)| e_u.
        out.emplace_back(ws[0]->rows);
        for (uint64_t r = 0; r < ws[0]->rows; ++r) {
            const RowCheck g = row(0, r), u = row(1, r);
            const double a = glu_activation(s.glu, float(g.value));
            out[0][r] = {a * u.value, 1.13 * g.tol * (std::fabs(u.value) + u.tol) + std::fabs(a) * u.tol +
                                          1e-6 * std::fabs(a * u.value)};
        }
        return out;
    }
    if (s.gated != kx::Glu::None) {
        // act(g)·m, m exact: e_g moves it by at most 1.13 e_g |m|.
        out.emplace_back(ws[0]->rows);
        for (uint64_t r = 0; r < ws[0]->rows; ++r) {
            const RowCheck g = row(0, r);
            const double v = double(glu_activation(s.gated, float(g.value))) * gate[r];
            out[0][r] = {v, 1.13 * g.tol * std::fabs(gate[r]) + 1e-6 * std::fabs(v)};
        }
        return out;
    }
    for (size_t si = 0; si < ws.size(); ++si) {
        out.emplace_back(ws[si]->rows);
        for (uint64_t r = 0; r < ws[si]->rows; ++r) {
            out[si][r] = row(si, r);
            if (s.accumulate) out[si][r].value += y0[si][r];
            // The device's result is an f32: one rounding of the sum (a
            // residual can be large, e.g. 2e4 in SmolLM2's outlier dimensions).
            out[si][r].tol += 0x1p-23 * std::fabs(out[si][r].value);
        }
    }
    return out;
}

}  // namespace ptxlm::cuda
