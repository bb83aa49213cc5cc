#include "kernels/decode/layout.h"

#include <cstring>
#include <stdexcept>
#include <string>

namespace ptxlm::kernels {

using gguf::GgmlType;

namespace {

struct Field {
  uint32_t offset, bytes;
};

// Each type's block fields in device plane order: the widest (the quants)
// first. Offsets and sizes are ggml's block layouts (gguf/quant.h).
std::vector<Field> fields(GgmlType t) {
  switch (t) {
    case GgmlType::F32:
    case GgmlType::F16:
    case GgmlType::BF16: return {};             // kept as they are
    case GgmlType::Q4_0: return {{2, 16}, {0, 2}};               // qs, d
    case GgmlType::Q4_1: return {{4, 16}, {0, 4}};               // qs, (d, m)
    case GgmlType::Q5_0: return {{6, 16}, {2, 4}, {0, 2}};       // qs, qh, d
    case GgmlType::Q8_0: return {{2, 32}, {0, 2}};               // qs, d
    case GgmlType::Q4_K: return {{16, 128}, {0, 16}};            // qs, (d, dmin, scales)
    case GgmlType::Q6_K: return {{0, 128}, {128, 64}, {192, 16}, {208, 2}};   // ql, qh, scales, d
    case GgmlType::Q5_K: return {{48, 128}, {0, 16}, {16, 32}};              // qs, (d, dmin, scales), qh
    case GgmlType::Q3_K: return {{32, 64}, {0, 32}, {96, 12}, {108, 2}};     // qs, hmask, scales, d
    case GgmlType::Q2_K: return {{16, 64}, {0, 16}, {80, 4}};                // qs, scales, (d, dmin)
    case GgmlType::IQ4_NL: return {{2, 16}, {0, 2}};                         // qs, d
    case GgmlType::IQ4_XS: return {{8, 128}, {0, 8}};                        // qs, (d, scales_h, scales_l)
    default: break;
  }
  throw std::invalid_argument(std::string("device layout: weight type ") + gguf::type_traits(t).name +
                              " is not supported on the GPU path");
}

// Planes and rows start on 32-byte boundaries: a GPU's memory transactions
// are 32-byte sectors, so an aligned plane costs no sector it does not use.
uint32_t round_sector(uint64_t n) {
  if (n > (1ull << 31)) throw std::invalid_argument("device layout: a row of more than 2 GiB");
  return uint32_t((n + kSectorBytes - 1) / kSectorBytes * kSectorBytes);
}

}  // namespace

RowLayout row_layout(GgmlType t, uint32_t cols) {
  const gguf::TypeTraits& tt = gguf::type_traits(t);
  const std::vector<Field> fs = fields(t);
  if (cols == 0 || cols % tt.block_elems)
    throw std::invalid_argument("device layout: " + std::to_string(cols) + " columns is not a multiple of " + tt.name +
                                "'s " + std::to_string(tt.block_elems) + "-element block");
  RowLayout l;
  l.type = t;
  l.cols = cols;
  l.blocks = cols / tt.block_elems;
  l.file_row_bytes = uint32_t(uint64_t(l.blocks) * tt.block_bytes);
  if (fs.empty()) {
    l.planes.push_back({0, uint32_t(tt.block_bytes), 0});
    l.row_bytes = round_sector(l.file_row_bytes);
    return l;
  }
  uint32_t off = 0;
  for (const Field& f : fs) {
    l.planes.push_back({f.offset, f.bytes, off});
    off = round_sector(uint64_t(off) + uint64_t(f.bytes) * l.blocks);
  }
  l.row_bytes = off;
  return l;
}

namespace {

// Copies every block field between the file layout and the device layout
// (to_device picks the direction).
std::vector<uint8_t> convert_rows(const RowLayout& l, const uint8_t* src, uint64_t rows, bool to_device) {
  std::vector<uint8_t> out(rows * (to_device ? l.row_bytes : l.file_row_bytes), 0);
  const uint32_t block_bytes = uint32_t(gguf::type_traits(l.type).block_bytes);
  for (uint64_t r = 0; r < rows; ++r)
    for (const Plane& p : l.planes)
      for (uint32_t b = 0; b < l.blocks; ++b) {
        const uint64_t file = r * l.file_row_bytes + uint64_t(b) * block_bytes + p.src_offset;
        const uint64_t dev = r * l.row_bytes + p.offset + uint64_t(b) * p.bytes_per_block;
        std::memcpy(out.data() + (to_device ? dev : file), src + (to_device ? file : dev), p.bytes_per_block);
      }
  return out;
}

}  // namespace

std::vector<uint8_t> repack_rows(const RowLayout& l, const uint8_t* src, uint64_t rows) {
  return convert_rows(l, src, rows, true);
}

std::vector<uint8_t> unpack_rows(const RowLayout& l, const uint8_t* src, uint64_t rows) {
  return convert_rows(l, src, rows, false);
}

}  // namespace ptxlm::kernels
