// The embedding row and the normalised residual add (kernels/decode/
// elementwise) on emu: the embedding bit-equal to gguf's reference
// dequantizer for every type the GPU path stores; add_norm against the CPU
// reference's formula.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "gguf/quant.h"
#include "kernels/decode/elementwise.h"
#include "kernels/decode/layout.h"
#include "tests/emu_cuda_fixture.h"

namespace {

using namespace ptxlm;
namespace kx = ptxlm::kernels;
using gguf::GgmlType;
using ptx::DevPtr;

class ElementwiseOnEmu : public testing_util::EmuCudaTest {};

TEST_F(ElementwiseOnEmu, EmbeddingRowIsTheReferenceDequantization) {
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q8_0, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0,
                     GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_K, GgmlType::Q3_K, GgmlType::Q2_K,
                     GgmlType::IQ4_XS, GgmlType::IQ4_NL}) {
    const auto& tt = gguf::type_traits(t);
    SCOPED_TRACE(tt.name);
    const uint32_t n = 512, rows = 5, token = 3;
    const float scale = 22.627417f;   // √512, gemma3's embedding scale
    std::vector<uint8_t> file(rows * (n / tt.block_elems) * tt.block_bytes);
    for (uint32_t r = 0; r < rows; ++r) {
      const std::vector<float> w = randv(n, 0.1f);
      tt.quantize_row(w.data(), file.data() + r * (file.size() / rows), n);
    }
    const kx::RowLayout l = kx::row_layout(t, n);
    auto dw = upload(kx::repack_rows(l, file.data(), rows));
    auto dtok = upload(std::vector<uint32_t>{token});
    auto dx = upload(std::vector<float>(n, NAN));
    launch(kx::embed_kernel({t, n, scale}), {DevPtr{dw.ptr()}, DevPtr{dtok.ptr()}, DevPtr{dx.ptr()}});
    std::vector<float> ref(n);
    tt.dequantize_row(file.data() + token * (file.size() / rows), ref.data(), n);
    const std::vector<float> got = download<float>(dx, n);
    size_t bad = 0;
    for (uint32_t i = 0; i < n; ++i)
      if (got[i] != ref[i] * scale && bad++ < 3) ADD_FAILURE() << "x[" << i << "]: " << got[i] << " vs " << ref[i] * scale;
    EXPECT_EQ(bad, 0u);
  }
}

TEST_F(ElementwiseOnEmu, AddNormMatchesTheReferenceFormula) {
  const uint32_t n = 640;
  const std::vector<float> x = randv(n, 1.0f), o = randv(n, 3.0f), w = randv(n, 0.5f);
  auto dx = upload(x), dob = upload(o), dw = upload(w);
  launch(kx::add_norm_kernel({n, 1e-6f}), {DevPtr{dx.ptr()}, DevPtr{dob.ptr()}, DevPtr{dw.ptr()}});
  double ss = 0;
  for (float v : o) ss += double(v) * v;
  const float scale = 1.0f / std::sqrt(float(ss / n) + 1e-6f);
  const std::vector<float> got = download<float>(dx, n);
  for (uint32_t i = 0; i < n; ++i) {
    const float ref = x[i] + (o[i] * scale) * w[i];
    EXPECT_NEAR(got[i], ref, 1e-6 * (1 + std::fabs(ref))) << i;
  }
}

}  // namespace
