#include "kernels/ptx/types.h"

namespace ptxlm::ptx {

const char* type_name(Type t) {
  switch (t) {
    case Type::pred: return "pred";
    case Type::b8: return "b8";
    case Type::b16: return "b16";
    case Type::b32: return "b32";
    case Type::b64: return "b64";
    case Type::u8: return "u8";
    case Type::u16: return "u16";
    case Type::u32: return "u32";
    case Type::u64: return "u64";
    case Type::s8: return "s8";
    case Type::s16: return "s16";
    case Type::s32: return "s32";
    case Type::s64: return "s64";
    case Type::f16: return "f16";
    case Type::f16x2: return "f16x2";
    case Type::bf16: return "bf16";
    case Type::bf16x2: return "bf16x2";
    case Type::f32: return "f32";
    case Type::f64: return "f64";
  }
  return "?";
}

unsigned type_bits(Type t) {
  switch (t) {
    case Type::pred: return 1;
    case Type::b8: case Type::u8: case Type::s8: return 8;
    case Type::b16: case Type::u16: case Type::s16: case Type::f16: case Type::bf16: return 16;
    case Type::b32: case Type::u32: case Type::s32: case Type::f32:
    case Type::f16x2: case Type::bf16x2: return 32;
    case Type::b64: case Type::u64: case Type::s64: case Type::f64: return 64;
  }
  return 0;
}

Type bits_type(unsigned bits) {
  switch (bits) {
    case 1: return Type::pred;
    case 8: return Type::b8;
    case 16: return Type::b16;
    case 32: return Type::b32;
    case 64: return Type::b64;
  }
  throw Error("no .b type of " + std::to_string(bits) + " bits");
}

Target Target::parse(std::string_view name) {
  Target t;
  std::string s(name);
  if (s.rfind("sm_", 0) != 0) throw Error("bad target '" + s + "': expected sm_NN");
  std::string digits = s.substr(3);
  if (!digits.empty() && digits.back() == 'a') {
    t.arch_specific = true;
    digits.pop_back();
  }
  if (digits.empty() || digits.size() > 3 || digits.find_first_not_of("0123456789") != std::string::npos)
    throw Error("bad target '" + s + "'");
  t.sm = unsigned(std::stoul(digits));
  (void)t.min_version();  // validates
  return t;
}

std::string Target::name() const { return "sm_" + std::to_string(sm) + (arch_specific ? "a" : ""); }

unsigned Target::min_version() const {
  if (arch_specific) {
    if (sm == 90) return 80;
    throw Error("unsupported target " + name());
  }
  switch (sm) {
    case 75: return 63;
    case 80: return 70;
    case 86: return 71;
    case 87: return 74;
    case 89: return 78;
    case 90: return 78;
  }
  throw Error("unsupported target " + name() + " (supported: sm_75, sm_80, sm_86, sm_87, sm_89, sm_90, sm_90a)");
}

std::string version_string(unsigned v) { return std::to_string(v / 10) + "." + std::to_string(v % 10); }

}  // namespace ptxlm::ptx
