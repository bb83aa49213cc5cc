// The fixture the GEMV kernel tests on emu share (test_gemv_emu,
// test_gemv_epilogue_emu): random quantized matrices, a case's buffers
// through the engine's real CUDA path, and the rows outside gemv_tolerance of
// the double-precision reference or of the CPU quantized path.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <vector>

#include "engine/cpu/qdot.h"
#include "gguf/quant.h"
#include "kernels/decode/gemv.h"
#include "kernels/decode/layout.h"
#include "tests/emu_cuda_fixture.h"

namespace ptxlm::gemv_test {

namespace kx = ptxlm::kernels;
using gguf::GgmlType;
using ptx::DevPtr;

using ptx::DevPtr;

struct Matrix {
  GgmlType type;
  uint32_t rows = 0, cols = 0;
  std::vector<uint8_t> bytes;
  size_t row_bytes() const { return bytes.size() / rows; }
  std::vector<float> row(uint32_t r) const {
    std::vector<float> out(cols);
    gguf::type_traits(type).dequantize_row(bytes.data() + r * row_bytes(), out.data(), cols);
    return out;
  }
};

class GemvOnEmu : public testing_util::EmuCudaTest {
protected:
  Matrix random_matrix(GgmlType t, uint32_t rows, uint32_t cols) {
    Matrix m{t, rows, cols, {}};
    const gguf::TypeTraits& tt = gguf::type_traits(t);
    const size_t rb = cols / tt.block_elems * tt.block_bytes;
    m.bytes.resize(rb * rows);
    for (uint32_t r = 0; r < rows; ++r) {
      const std::vector<float> w = randv(cols, 0.05f);
      tt.quantize_row(w.data(), m.bytes.data() + r * rb, cols);
    }
    return m;
  }

  struct Case {
    kx::GemvShape shape;
    std::vector<Matrix> mats;
    std::vector<float> x, norm_w;
    std::vector<std::vector<float>> y0;   // initial outputs (accumulate)
    std::vector<float> gate;              // a gated output's multiplier (columns gate_stride apart)
  };

  // Random matrices, input (every column) and initial outputs.
  Case make_case(const kx::GemvShape& s) {
    Case c{s, {}, randv(s.columns * s.n_in, 1.0f), {}, {}, {}};
    if (s.gated != kx::Glu::None) c.gate = randv((s.columns - 1) * s.gate_stride + s.segments.at(0).rows, 1.0f);
    if (s.norm) {
      c.norm_w = randv(s.n_in, 0.3f);
      for (float& w : c.norm_w) w += 1.0f;
    }
    for (const kx::GemvSegment& seg : s.segments) {
      c.mats.push_back(random_matrix(seg.type, seg.rows, s.n_in));
      c.y0.push_back(s.accumulate ? randv(s.columns * seg.rows, 1.0f) : std::vector<float>(s.columns * seg.rows, 0.0f));
    }
    return c;
  }

  // Runs `g` on the case's buffers; returns each segment's output (every column).
  std::vector<std::vector<float>> run(const ptx::GeneratedKernel& g, const Case& c) {
    std::vector<cuda::DeviceBuffer> bufs;
    std::vector<ptx::ParamValue> args;
    bufs.push_back(upload(c.x.data(), c.x.size() * 4));
    args.push_back(DevPtr{bufs.back().ptr()});
    if (c.shape.norm) {
      bufs.push_back(upload(c.norm_w.data(), c.norm_w.size() * 4));
      args.push_back(DevPtr{bufs.back().ptr()});
    }
    std::vector<size_t> outs;
    for (size_t i = 0; i < c.mats.size(); ++i) {
      const kx::RowLayout l = kx::row_layout(c.mats[i].type, c.mats[i].cols);
      const std::vector<uint8_t> dev = kx::repack_rows(l, c.mats[i].bytes.data(), c.mats[i].rows);
      bufs.push_back(upload(dev.data(), dev.size()));
      args.push_back(DevPtr{bufs.back().ptr()});
      if (c.shape.glu != kx::Glu::None && i == 0) continue;   // a GLU's one output follows w1
      bufs.push_back(upload(c.y0[i].data(), c.y0[i].size() * 4));
      args.push_back(DevPtr{bufs.back().ptr()});
      outs.push_back(bufs.size() - 1);
    }
    if (c.shape.gated != kx::Glu::None) {
      bufs.push_back(upload(c.gate.data(), c.gate.size() * 4));
      args.push_back(DevPtr{bufs.back().ptr()});
    }
    launch(g, args);
    std::vector<std::vector<float>> ys;
    for (size_t i = 0; i < outs.size(); ++i) {
      ys.emplace_back(c.y0[c.shape.glu != kx::Glu::None ? 1 : i].size());
      bufs[outs[i]].download(ys.back().data(), ys.back().size() * 4);
    }
    return ys;
  }

  // Rows outside gemv_tolerance of the double-precision reference.
  size_t mismatches(const Case& c, const std::vector<std::vector<float>>& ys, bool report = true,
                    double* worst_out = nullptr) {
    const kx::GemvShape& s = c.shape;
    std::vector<float> xn = c.x;
    if (s.norm) {
      double ss = 0;
      for (float v : c.x) ss += double(v) * v;
      const float scale = float(1.0 / std::sqrt(ss / s.n_in + s.eps));
      for (uint32_t i = 0; i < s.n_in; ++i) xn[i] = c.x[i] * scale * c.norm_w[i];
    }
    size_t bad = 0;
    double worst = 0;
    for (size_t si = 0; si < c.mats.size(); ++si) {
      for (uint32_t r = 0; r < c.mats[si].rows; ++r) {
        const std::vector<float> w = c.mats[si].row(r);
        double dot = 0, abs_dot = 0;
        for (uint32_t i = 0; i < s.n_in; ++i) {
          dot += double(w[i]) * xn[i];
          abs_dot += std::fabs(double(w[i]) * xn[i]);
        }
        const double ref = dot + (s.accumulate ? c.y0[si][r] : 0.0);
        const double err = std::fabs(ys[si][r] - ref), tol = kx::gemv_tolerance(abs_dot, s.n_in);
        worst = std::max(worst, err / tol);
        if (!(err <= tol) && bad++ < 3 && report)
          ADD_FAILURE() << "segment " << si << " row " << r << ": got " << ys[si][r] << ", reference " << ref
                        << " (error " << err << ", tolerance " << tol << ")";
      }
    }
    if (report) std::printf("[gemv] n_in %u: worst error %.3g of the tolerance\n", s.n_in, worst);
    if (worst_out) *worst_out = worst;
    return bad;
  }

  // Rows outside gemv_tolerance of the CPU quantized path (an 8-bit-input
  // shape of one column; see EightBitInputEqualsTheCpuQuantizedPath).
  size_t q8_mismatches(const Case& c, const std::vector<std::vector<float>>& ys, double* worst_out = nullptr,
                       bool report = true) {
    const kx::GemvShape& s = c.shape;
    const uint32_t n_in = s.n_in;
    const bool norm = s.norm;
    std::vector<float> v = c.x;
    float scale = 1.0f;
    if (norm) {
      double ss = 0;
      for (float e : c.x) ss += double(e) * e;
      scale = float(1.0 / std::sqrt(ss / n_in + s.eps));
      for (uint32_t i = 0; i < n_in; ++i) v[i] = c.x[i] * c.norm_w[i];
    }
    cpu::QuantizedInput qi;
    cpu::quantize_input(v.data(), n_in, s.segments[0].type, qi);
    std::vector<float> deq(n_in);   // the quantized input, for the terms' magnitude
    for (uint32_t i = 0; i < n_in; ++i)
      deq[i] = qi.b256.empty() ? qi.b32[i / 32].d * float(qi.b32[i / 32].qs[i % 32])
                               : qi.b256[i / 256].d * float(qi.b256[i / 256].qs[i % 256]);
    size_t bad = 0;
    double worst = 0;
    for (size_t si = 0; si < c.mats.size(); ++si) {
      for (uint32_t r = 0; r < c.mats[si].rows; ++r) {
        const uint8_t* row = c.mats[si].bytes.data() + r * c.mats[si].row_bytes();
        const double ref = double(scale) * cpu::qdot(cpu::Isa::Scalar, c.mats[si].type, row, qi, n_in) +
                           (s.accumulate ? c.y0[si][r] : 0.0);
        const std::vector<float> w = c.mats[si].row(r);
        double abs_dot = 0;
        for (uint32_t i = 0; i < n_in; ++i) abs_dot += std::fabs(double(w[i]) * deq[i]) * scale;
        const double err = std::fabs(ys[si][r] - ref), tol = kx::gemv_tolerance(abs_dot, n_in);
        worst = std::max(worst, err / tol);
        if (!(err <= tol) && bad++ < 3 && report)
          ADD_FAILURE() << "norm " << norm << " n_in " << n_in << " segment " << si << " row " << r << ": got "
                        << ys[si][r] << ", CPU quantized path " << ref << " (error " << err << ", tolerance " << tol << ")";
      }
    }
    if (worst_out) *worst_out = worst;
    return bad;
  }

};

inline kx::GemvShape shape(uint32_t n_in, std::vector<uint32_t> rows, bool norm, bool acc = false,
                    std::vector<GgmlType> types = {}) {
  kx::GemvShape s;
  s.n_in = n_in;
  s.norm = norm;
  s.eps = 1e-6f;
  s.accumulate = acc;
  for (size_t i = 0; i < rows.size(); ++i) s.segments.push_back({i < types.size() ? types[i] : GgmlType::Q4_K, rows[i]});
  return s;
}

}  // namespace ptxlm::gemv_test
