// PTX value types, the builder's error type, and the target description.
#pragma once

#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>

namespace ptxlm::ptx {

// Every failure of the builder: a type mismatch, an op it cannot emit, an
// unbalanced label. The message names the op and the types involved.
struct Error : std::runtime_error {
  using std::runtime_error::runtime_error;
};

enum class Type : uint8_t {
  pred,
  b8, b16, b32, b64,
  u8, u16, u32, u64,
  s8, s16, s32, s64,
  f16, f16x2, bf16, bf16x2, f32, f64,
};

const char* type_name(Type t);  // "u32", without the dot
unsigned type_bits(Type t);     // pred: 1
inline unsigned type_bytes(Type t) { return type_bits(t) / 8; }
inline bool is_unsigned(Type t) { return t >= Type::u8 && t <= Type::u64; }
inline bool is_signed(Type t) { return t >= Type::s8 && t <= Type::s64; }
inline bool is_int(Type t) { return is_unsigned(t) || is_signed(t); }
inline bool is_bits(Type t) { return t >= Type::b8 && t <= Type::b64; }
inline bool is_float(Type t) { return t >= Type::f16; }
// The .bN type of the same width (pred stays pred).
Type bits_type(unsigned bits);

// `.target` and `.version`. version 0 = the lowest the target and the
// instructions used need. Versions are written ×10: 78 = PTX ISA 7.8.
struct Target {
  unsigned sm = 80;
  bool arch_specific = false;  // sm_90a
  unsigned version = 0;
  // Programmatic dependent launch (sm_90): the decode kernels generated
  // standalone (kernels/examples/common.h, Emit) open with
  // griddepcontrol.wait, before any memory access, then let the next grid
  // launch (griddepcontrol.launch_dependents). Not part of the name.
  bool pdl = false;
  // Weight prefetch: each standalone GEMV kernel opens (before
  // griddepcontrol.wait under pdl, before staging its input in any case) by
  // prefetching into L2 the first weight rows its block reads, a 128-byte
  // line per thread; the persistent decoder emits the same prefetch for each
  // GEMV op's virtual block before the op's dependency wait. Not part of the
  // name.
  bool prefetch = false;

  static Target parse(std::string_view name);  // "sm_80", "sm_90a"
  std::string name() const;                    // "sm_90a"
  unsigned min_version() const;                // what the target alone needs
};

std::string version_string(unsigned v);  // 78 -> "7.8"

}  // namespace ptxlm::ptx
