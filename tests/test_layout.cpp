// The device weight layout (kernels/decode/layout): every plane 32-byte
// aligned, rows padded to 32, the file's bytes where the planes say, and the
// round trip exact for every type the GPU path stores.
#include <gtest/gtest.h>

#include <random>
#include <stdexcept>
#include <vector>

#include "kernels/decode/layout.h"

namespace {

using ptxlm::gguf::GgmlType;
namespace kx = ptxlm::kernels;

TEST(DeviceLayout, PlanesAlignedAndRoundTripExact) {
  std::mt19937 rng(3);
  for (GgmlType t : {GgmlType::F32, GgmlType::F16, GgmlType::BF16, GgmlType::Q4_0, GgmlType::Q4_1, GgmlType::Q5_0, GgmlType::Q8_0,
                     GgmlType::Q4_K, GgmlType::Q6_K, GgmlType::Q5_K, GgmlType::Q3_K, GgmlType::Q2_K,
                     GgmlType::IQ4_XS, GgmlType::IQ4_NL}) {
    const auto& tt = ptxlm::gguf::type_traits(t);
    for (uint32_t cols : {256u, 640u, 4096u, 11008u, 14336u}) {
      if (cols % tt.block_elems) continue;
      SCOPED_TRACE(std::string(tt.name) + " x " + std::to_string(cols));
      const kx::RowLayout l = kx::row_layout(t, cols);
      EXPECT_EQ(l.file_row_bytes, cols / tt.block_elems * tt.block_bytes);
      EXPECT_EQ(l.row_bytes % 32, 0u);
      EXPECT_LE(l.row_bytes, l.file_row_bytes + 31 * l.planes.size());
      uint32_t per_block = 0;
      for (const kx::Plane& p : l.planes) {
        EXPECT_EQ(p.offset % 32, 0u);
        per_block += p.bytes_per_block;
      }
      EXPECT_EQ(per_block, tt.block_bytes) << "the planes must cover each block exactly";
      const uint64_t rows = 3;
      std::vector<uint8_t> src(rows * l.file_row_bytes);
      for (uint8_t& b : src) b = uint8_t(rng());
      const std::vector<uint8_t> dev = kx::repack_rows(l, src.data(), rows);
      ASSERT_EQ(dev.size(), rows * l.row_bytes);
      EXPECT_EQ(kx::unpack_rows(l, dev.data(), rows), src);
      // The last plane's field of block 1 in row 2 sits where the plane says.
      const kx::Plane& p = l.planes.back();
      if (l.blocks > 1) {
        EXPECT_EQ(dev[2 * l.row_bytes + p.offset + p.bytes_per_block],
                  src[2 * l.file_row_bytes + tt.block_bytes + p.src_offset]);
      }
    }
  }
}

TEST(DeviceLayout, SplitTypesPutTheQuantsFirst) {
  const kx::RowLayout q8 = kx::row_layout(GgmlType::Q8_0, 640);
  ASSERT_EQ(q8.planes.size(), 2u);
  EXPECT_EQ(q8.planes[0].bytes_per_block, 32u);
  EXPECT_EQ(q8.planes[1].offset, 640u);   // 20 blocks of 32 quant bytes, then the f16 scales
  EXPECT_EQ(q8.row_bytes, 640u + 64u);    // 40 bytes of scales padded to 64
  const kx::RowLayout q4k = kx::row_layout(GgmlType::Q4_K, 4096);
  EXPECT_EQ(q4k.row_bytes, 16u * 144u);   // no padding: 16 blocks
  ASSERT_EQ(q4k.planes.size(), 2u);
  EXPECT_EQ(q4k.planes[0].bytes_per_block, 128u);   // quants
  EXPECT_EQ(q4k.planes[1].offset, 16u * 128u);      // then the 16-byte headers
}

TEST(DeviceLayout, RefusesWhatItCannotStore) {
  EXPECT_THROW(kx::row_layout(GgmlType::Q5_1, 256), std::invalid_argument);
  EXPECT_THROW(kx::row_layout(GgmlType::Q4_K, 640), std::invalid_argument);
  EXPECT_THROW(kx::row_layout(GgmlType::Q8_0, 0), std::invalid_argument);
}

}  // namespace
