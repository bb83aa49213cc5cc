// How quantized weights lie in device memory: the one place where the file's
// block layout is rearranged for the GPU (once, at upload).
//
// GEMV warps read whole rows with 16-byte loads, so every field a lane loads
// must be naturally aligned. Most ggml blocks are not: Q8_0 is 34 bytes, Q4_0
// 18, Q4_1 20, Q5_0 22, Q6_K 210, Q3_K 110, Q2_K 84, IQ4_NL 18, IQ4_XS 136. The device layout therefore splits each row
// into planes, one per block field (the quants of every block of the row,
// then their high bits, scales, ...), each plane starting on a 32-byte
// boundary (a memory sector), and each row padded to a multiple of 32 bytes,
// so no warp request touches a sector it does not use. Q4_K's 144-byte blocks
// are aligned but split too: a warp reading four blocks' 16-byte headers (d,
// dmin, scales) and then their 128 quant bytes touches only the sectors it
// uses when headers and quants each lie contiguous (in the file layout a
// header shares a sector with the previous block's quants). F32, F16 and
// BF16 rows stay as they are, padded. Nothing is requantized: the planes hold the
// file's bytes.
#pragma once

#include <cstdint>
#include <vector>

#include "gguf/quant.h"

namespace ptxlm::kernels {

constexpr uint32_t kSectorBytes = 32;   // plane and row alignment

// One field of every block of a row, stored contiguously.
struct Plane {
  uint32_t src_offset = 0;       // the field's offset inside a file block
  uint32_t bytes_per_block = 0;  // the field's size
  uint32_t offset = 0;           // the plane's offset inside a device row
};

struct RowLayout {
  gguf::GgmlType type = gguf::GgmlType::F32;
  uint32_t cols = 0;
  uint32_t blocks = 0;                 // blocks per row
  uint32_t file_row_bytes = 0;
  uint32_t row_bytes = 0;              // device row stride (a multiple of kSectorBytes)
  std::vector<Plane> planes;           // in device order
};

// The device layout of rows of `cols` elements of type `t`. Throws
// std::invalid_argument for a type the GPU path does not store, or cols not a
// multiple of the block size.
RowLayout row_layout(gguf::GgmlType t, uint32_t cols);

// Rearranges `rows` file rows (contiguous, file_row_bytes each) into the
// device layout (row_bytes each); padding bytes are zero.
std::vector<uint8_t> repack_rows(const RowLayout& l, const uint8_t* src, uint64_t rows);
// The inverse, for tests: device rows back to the file's bytes.
std::vector<uint8_t> unpack_rows(const RowLayout& l, const uint8_t* src, uint64_t rows);

}  // namespace ptxlm::kernels
