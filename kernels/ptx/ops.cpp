// Arithmetic, logic, conversions, compares: each checks its types and
// throws Error naming the op and type it cannot emit.
#include <string>

#include "kernels/ptx/builder.h"

namespace ptxlm::ptx {

namespace {

std::string dot(Type t) { return std::string(".") + type_name(t); }

[[noreturn]] void unsupported(std::string_view op, Type t, std::string_view why = "unsupported type") {
  throw Error(std::string(op) + ": " + std::string(why) + " ." + type_name(t));
}

bool is_int_ge16(Type t) { return is_int(t) && type_bits(t) >= 16; }
bool is_half(Type t) { return t == Type::f16 || t == Type::f16x2; }
bool is_bhalf(Type t) { return t == Type::bf16 || t == Type::bf16x2; }

const char* rnd_name(Rnd r) {
  switch (r) {
    case Rnd::none: return "";
    case Rnd::rn: return ".rn";
    case Rnd::rz: return ".rz";
    case Rnd::rm: return ".rm";
    case Rnd::rp: return ".rp";
    case Rnd::rni: return ".rni";
    case Rnd::rzi: return ".rzi";
    case Rnd::rmi: return ".rmi";
    case Rnd::rpi: return ".rpi";
  }
  return "";
}

bool is_int_rnd(Rnd r) { return r == Rnd::rni || r == Rnd::rzi || r == Rnd::rmi || r == Rnd::rpi; }

const char* cmp_name(Cmp c) {
  static const char* const n[] = {"eq", "ne", "lt", "le", "gt", "ge", "lo", "ls", "hi",
                                  "hs", "equ", "neu", "ltu", "leu", "gtu", "geu", "num", "nan"};
  return n[static_cast<int>(c)];
}

}  // namespace

// ---------------------------------------------------------------- binary

void Kernel::binary(std::string_view op_in, const Reg& d, const Operand& a, const Operand& b) {
  const std::string op(op_in);
  const Type t = d.type;
  std::string opcode;  // "add.rn.f32"
  bool bits_ok = false;
  if (op == "add" || op == "sub" || op == "mul") {
    if (is_int_ge16(t)) opcode = op + (op == "mul" ? ".lo" : "") + dot(t);
    else if (t == Type::f32 || t == Type::f64) opcode = op + ".rn" + dot(t);
    else if (is_half(t)) { require(op + dot(t), 53, 42); opcode = op + ".rn" + dot(t); }
    else if (is_bhalf(t)) { require(op + dot(t), 90, 78); opcode = op + ".rn" + dot(t); }
    else unsupported(op, t);
  } else if (op == "mul.hi") {
    if (!is_int_ge16(t)) unsupported(op, t);
    opcode = op + dot(t);
  } else if (op == "min" || op == "max") {
    if (is_int_ge16(t) || t == Type::f32 || t == Type::f64) opcode = op + dot(t);
    else if (is_half(t) || is_bhalf(t)) { require(op + dot(t), 80, 70); opcode = op + dot(t); }
    else unsupported(op, t);
  } else if (op == "div") {
    if (is_int_ge16(t)) opcode = op + dot(t);
    else if (t == Type::f32 || t == Type::f64) opcode = "div.rn" + dot(t);
    else unsupported(op, t);
  } else if (op == "rem") {
    if (!is_int_ge16(t)) unsupported(op, t);
    opcode = op + dot(t);
  } else if (op == "and" || op == "or" || op == "xor") {
    if (t == Type::pred) opcode = op + ".pred";
    else if ((is_int(t) || is_bits(t)) && type_bits(t) >= 16) { opcode = op + dot(bits_type(type_bits(t))); bits_ok = true; }
    else unsupported(op, t);
    for (const Operand* o : {&a, &b})
      if (o->kind() == Operand::Kind::reg && is_float(o->reg().type))
        throw Error(opcode + ": operand " + o->reg().name + " is ." + type_name(o->reg().type) +
                    " (bitcast floats first)");
  } else if (op == "shl" || op == "shr") {
    if (!(is_int(t) || is_bits(t)) || type_bits(t) < 16) unsupported(op, t);
    if (a.kind() == Operand::Kind::reg && is_float(a.reg().type))
      throw Error(op + dot(t) + ": operand " + a.reg().name + " is ." + type_name(a.reg().type) + " (bitcast floats first)");
    Type it = (op == "shl" || is_bits(t)) ? bits_type(type_bits(t)) : t;
    std::string sa = render(op, it, a, op == "shl");
    std::string sb = render(op + " amount", Type::u32, b);
    instr(op + dot(it) + " " + render(op, it, d, op == "shl") + ", " + sa + ", " + sb);
    return;
  } else {
    throw Error("unknown binary op " + op);
  }
  Type it = bits_ok ? bits_type(type_bits(t)) : t;
  std::string sd = render(op, it, d, bits_ok), sa = render(op, it, a, bits_ok), sb = render(op, it, b, bits_ok);
  instr(opcode + " " + sd + ", " + sa + ", " + sb);
}

Reg Kernel::binary_new(std::string_view op, const Reg& a, const Operand& b) {
  Reg d = reg(a.type);
  binary(op, d, a, b);
  return d;
}

void Kernel::mul_wide(const Reg& d, const Reg& a, const Operand& b) {
  if (!is_int(a.type) || (type_bits(a.type) != 16 && type_bits(a.type) != 32)) unsupported("mul.wide", a.type);
  if (type_bits(d.type) != 2 * type_bits(a.type) || is_signed(d.type) != is_signed(a.type) || !is_int(d.type))
    throw Error("mul.wide" + dot(a.type) + ": destination " + d.name + " is ." + type_name(d.type));
  instr("mul.wide" + dot(a.type) + " " + d.name + ", " + render("mul.wide", a.type, a) + ", " +
        render("mul.wide", a.type, b));
}

Reg Kernel::mul_wide(const Reg& a, const Operand& b) {
  if (!is_int(a.type) || type_bits(a.type) != 32) unsupported("mul.wide", a.type);
  Reg d = reg(is_signed(a.type) ? Type::s64 : Type::u64);
  mul_wide(d, a, b);
  return d;
}

void Kernel::mad_lo(const Reg& d, const Operand& a, const Operand& b, const Operand& c) {
  if (!is_int_ge16(d.type)) unsupported("mad.lo", d.type);
  const Type t = d.type;
  instr("mad.lo" + dot(t) + " " + d.name + ", " + render("mad.lo", t, a) + ", " + render("mad.lo", t, b) + ", " +
        render("mad.lo", t, c));
}

Reg Kernel::mad_lo(const Reg& a, const Operand& b, const Operand& c) {
  Reg d = reg(a.type);
  mad_lo(d, a, b, c);
  return d;
}

void Kernel::mad_wide(const Reg& d, const Reg& a, const Operand& b, const Operand& c) {
  if (!is_int(a.type) || (type_bits(a.type) != 16 && type_bits(a.type) != 32)) unsupported("mad.wide", a.type);
  if (type_bits(d.type) != 2 * type_bits(a.type) || is_signed(d.type) != is_signed(a.type) || !is_int(d.type))
    throw Error("mad.wide" + dot(a.type) + ": destination " + d.name + " is ." + type_name(d.type));
  instr("mad.wide" + dot(a.type) + " " + d.name + ", " + render("mad.wide", a.type, a) + ", " +
        render("mad.wide", a.type, b) + ", " + render("mad.wide", d.type, c));
}

void Kernel::fma(const Reg& d, const Operand& a, const Operand& b, const Operand& c) {
  const Type t = d.type;
  if (is_half(t)) require("fma" + dot(t), 53, 42);
  else if (is_bhalf(t)) require("fma" + dot(t), 80, 70);
  else if (t != Type::f32 && t != Type::f64) unsupported("fma", t);
  instr("fma.rn" + dot(t) + " " + d.name + ", " + render("fma", t, a) + ", " + render("fma", t, b) + ", " +
        render("fma", t, c));
}

Reg Kernel::fma(const Reg& a, const Operand& b, const Operand& c) {
  Reg d = reg(a.type);
  fma(d, a, b, c);
  return d;
}

// ---------------------------------------------------------------- unary

void Kernel::unary(std::string_view op_in, const Reg& d, const Operand& a) {
  const std::string op(op_in);
  const Type t = d.type;
  std::string opcode;
  Type src_t = t;
  bool bits_ok = false;
  if (op == "neg" || op == "abs") {
    if ((is_signed(t) && type_bits(t) >= 16) || t == Type::f32 || t == Type::f64) opcode = op + dot(t);
    else if (is_half(t)) { require(op + dot(t), 53, 60); opcode = op + dot(t); }
    else if (is_bhalf(t)) { require(op + dot(t), 80, 70); opcode = op + dot(t); }
    else unsupported(op, t);
  } else if (op == "not") {
    if (t == Type::pred) opcode = "not.pred";
    else if ((is_int(t) || is_bits(t)) && type_bits(t) >= 16) {
      src_t = bits_type(type_bits(t));
      opcode = "not" + dot(src_t);
      bits_ok = true;
    } else unsupported(op, t);
  } else if (op == "sqrt" || op == "rcp") {
    if (t != Type::f32 && t != Type::f64) unsupported(op, t);
    opcode = op + ".rn" + dot(t);
  } else if (op == "sqrt.approx" || op == "ex2.approx" || op == "lg2.approx" || op == "sin.approx" ||
             op == "cos.approx") {
    if (t != Type::f32) unsupported(op, t);
    opcode = op + dot(t);
  } else if (op == "rcp.approx" || op == "rsqrt.approx") {
    if (t == Type::f32) opcode = op + ".f32";
    else if (t == Type::f64) opcode = op + ".ftz.f64";  // the only f64 approx form
    else unsupported(op, t);
  } else if (op == "tanh.approx") {
    if (t != Type::f32) unsupported(op, t);
    require(op + dot(t), 75, 70);
    opcode = op + dot(t);
  } else if (op == "popc" || op == "clz" || op == "brev") {
    if (a.kind() != Operand::Kind::reg) throw Error(op + ": operand must be a register");
    src_t = a.reg().type;
    if (!(is_int(src_t) || is_bits(src_t)) || type_bits(src_t) < 32) unsupported(op, src_t);
    src_t = bits_type(type_bits(src_t));
    if (op == "brev" ? type_bits(t) != type_bits(src_t) : t != Type::u32)
      throw Error(op + dot(src_t) + ": destination " + d.name + " is ." + type_name(t));
    instr(op + dot(src_t) + " " + d.name + ", " + render(op, src_t, a));
    return;
  } else {
    throw Error("unknown unary op " + op);
  }
  instr(opcode + " " + render(op, src_t, d, bits_ok) + ", " + render(op, src_t, a, bits_ok));
}

Reg Kernel::unary(std::string_view op, const Reg& a) {
  Reg d = reg((op == "popc" || op == "clz") ? Type::u32 : a.type);
  unary(op, d, a);
  return d;
}

// ---------------------------------------------------------------- bits

void Kernel::bfe(const Reg& d, const Reg& a, const Operand& pos, const Operand& len) {
  const Type t = d.type;
  if (!is_int(t) || type_bits(t) < 32) unsupported("bfe", t);
  instr("bfe" + dot(t) + " " + d.name + ", " + render("bfe", t, a) + ", " + render("bfe", Type::u32, pos) + ", " +
        render("bfe", Type::u32, len));
}

Reg Kernel::bfe(const Reg& a, const Operand& pos, const Operand& len) {
  Reg d = reg(a.type);
  bfe(d, a, pos, len);
  return d;
}

void Kernel::bfi(const Reg& d, const Operand& a, const Operand& b, const Operand& pos, const Operand& len) {
  if (!(is_int(d.type) || is_bits(d.type)) || type_bits(d.type) < 32) unsupported("bfi", d.type);
  const Type t = bits_type(type_bits(d.type));
  instr("bfi" + dot(t) + " " + render("bfi", t, d, true) + ", " + render("bfi", t, a, true) + ", " +
        render("bfi", t, b, true) + ", " + render("bfi", Type::u32, pos) + ", " + render("bfi", Type::u32, len));
}

void Kernel::prmt(const Reg& d, const Operand& a, const Operand& b, const Operand& selector) {
  if (!(is_int(d.type) || is_bits(d.type)) || type_bits(d.type) != 32) unsupported("prmt", d.type);
  instr("prmt.b32 " + render("prmt", Type::b32, d, true) + ", " + render("prmt", Type::b32, a, true) + ", " +
        render("prmt", Type::b32, b, true) + ", " + render("prmt", Type::b32, selector, true));
}

Reg Kernel::prmt(const Reg& a, const Operand& b, const Operand& selector) {
  Reg d = reg(a.type);
  prmt(d, a, b, selector);
  return d;
}

void Kernel::dp4a(const Reg& d, const Operand& a, const Operand& b, const Operand& c) {
  auto kind = [](const Operand& o) -> Type {
    if (o.kind() == Operand::Kind::reg) {
      Type t = o.reg().type;
      if (t != Type::u32 && t != Type::s32) unsupported("dp4a", t, "operand must be .u32 or .s32, got");
      return t;
    }
    return Type::u32;
  };
  Type at = kind(a), bt = kind(b);
  Type dt = (at == Type::u32 && bt == Type::u32) ? Type::u32 : Type::s32;
  if (d.type != dt) throw Error("dp4a" + dot(at) + dot(bt) + ": destination " + d.name + " is ." + type_name(d.type) + ", expected ." + type_name(dt));
  require("dp4a", 61, 50);
  instr("dp4a" + dot(at) + dot(bt) + " " + d.name + ", " + render("dp4a", at, a) + ", " + render("dp4a", bt, b) +
        ", " + render("dp4a", dt, c));
}

void Kernel::mma_m16n8k32(const std::array<Reg, 4>& d, const std::array<Reg, 4>& a, const std::array<Reg, 2>& b,
                          const std::array<Reg, 4>& c) {
  auto elements = [](std::span<const Reg> regs, const char* what) {
    const Type t = regs[0].type;
    if (t != Type::s32 && t != Type::u32) unsupported("mma", t, std::string(what) + " registers must be .s32 or .u32, got");
    for (const Reg& r : regs)
      if (r.type != t) throw Error(std::string("mma: ") + what + " registers of mixed types");
    return t == Type::s32 ? "s8" : "u8";
  };
  for (const Reg& r : d)
    if (r.type != Type::s32) throw Error("mma: destination " + r.name + " is ." + type_name(r.type) + ", expected .s32");
  for (const Reg& r : c)
    if (r.type != Type::s32) throw Error("mma: accumulator " + r.name + " is ." + type_name(r.type) + ", expected .s32");
  const std::string at = elements(a, "A"), bt = elements(b, "B");
  require("mma.m16n8k32", 80, 70);
  instr("mma.sync.aligned.m16n8k32.row.col.s32." + at + "." + bt + ".s32 " + vector_operand(d) + ", " +
        vector_operand(a) + ", " + vector_operand(b) + ", " + vector_operand(c));
}

// ---------------------------------------------------------------- compare, select

void Kernel::setp(Cmp c, const Reg& p, const Operand& a, const Operand& b) {
  if (p.type != Type::pred) throw Error("setp: destination " + p.name + " is ." + type_name(p.type) + ", expected .pred");
  const Operand* r = a.kind() == Operand::Kind::reg ? &a : b.kind() == Operand::Kind::reg ? &b : nullptr;
  if (!r) throw Error("setp: needs a register operand to type the compare");
  const Type t = r->reg().type;
  const std::string op = std::string("setp.") + cmp_name(c);
  const int ci = static_cast<int>(c);
  bool ok;
  if (t == Type::pred || type_bits(t) < 16) ok = false;
  else if (is_float(t)) ok = ci <= static_cast<int>(Cmp::ge) || ci >= static_cast<int>(Cmp::equ);
  else if (is_bits(t)) ok = c == Cmp::eq || c == Cmp::ne;
  else if (is_signed(t)) ok = ci <= static_cast<int>(Cmp::ge);
  else ok = ci <= static_cast<int>(Cmp::hs);
  if (!ok) unsupported(op, t);
  if (is_half(t)) require(op + dot(t), 53, 42);
  if (is_bhalf(t)) require(op + dot(t), 90, 78);
  if (t == Type::f16x2 || t == Type::bf16x2) unsupported(op, t, "paired compare (two predicates) not supported for");
  instr(op + dot(t) + " " + p.name + ", " + render(op, t, a) + ", " + render(op, t, b));
}

Reg Kernel::setp(Cmp c, const Operand& a, const Operand& b) {
  Reg p = reg(Type::pred);
  setp(c, p, a, b);
  return p;
}

void Kernel::selp(const Reg& d, const Operand& a, const Operand& b, const Reg& p) {
  const Type t = d.type;
  if (!((is_int(t) || is_bits(t)) && type_bits(t) >= 16) && t != Type::f32 && t != Type::f64) unsupported("selp", t);
  if (p.type != Type::pred) throw Error("selp: selector " + p.name + " is ." + type_name(p.type) + ", expected .pred");
  instr("selp" + dot(t) + " " + d.name + ", " + render("selp", t, a) + ", " + render("selp", t, b) + ", " + p.name);
}

Reg Kernel::selp(const Operand& a, const Operand& b, const Reg& p, Type t) {
  Reg d = reg(t);
  selp(d, a, b, p);
  return d;
}

// ---------------------------------------------------------------- moves, conversions

void Kernel::mov(const Reg& d, const Operand& a) {
  const Type t = d.type;
  if (t == Type::pred) {
    instr("mov.pred " + d.name + ", " + render("mov", t, a));
    return;
  }
  if (is_half(t) || is_bhalf(t)) {
    // No f16 literals in PTX: an integer immediate is taken as the raw bits.
    Type bt = bits_type(type_bits(t));
    std::string src = a.kind() == Operand::Kind::reg ? render("mov", t, a) : render("mov", bt, a);
    instr("mov" + dot(bt) + " " + d.name + ", " + src);
    return;
  }
  instr("mov" + dot(t) + " " + d.name + ", " + render("mov", t, a));
}

void Kernel::bitcast(const Reg& d, const Reg& a) {
  if (type_bits(d.type) != type_bits(a.type) || d.type == Type::pred || a.type == Type::pred)
    throw Error("bitcast: ." + std::string(type_name(a.type)) + " to ." + type_name(d.type) + ": widths differ");
  Type bt = bits_type(type_bits(d.type));
  instr("mov" + dot(bt) + " " + d.name + ", " + a.name);
}

void Kernel::pack(const Reg& d, const Reg& lo, const Reg& hi) {
  if (lo.type == Type::pred || type_bits(lo.type) != type_bits(hi.type) || type_bits(d.type) != 2 * type_bits(lo.type) ||
      type_bits(d.type) > 64)
    throw Error("pack: ." + std::string(type_name(d.type)) + " from ." + type_name(lo.type) + " and ." + type_name(hi.type));
  instr("mov" + dot(bits_type(type_bits(d.type))) + " " + d.name + ", {" + lo.name + ", " + hi.name + "}");
}

void Kernel::unpack(const Reg& lo, const Reg& hi, const Reg& a) {
  if (lo.type == Type::pred || type_bits(lo.type) != type_bits(hi.type) || type_bits(a.type) != 2 * type_bits(lo.type) ||
      type_bits(a.type) > 64)
    throw Error("unpack: ." + std::string(type_name(a.type)) + " into ." + type_name(lo.type) + " and ." + type_name(hi.type));
  instr("mov" + dot(bits_type(type_bits(a.type))) + " {" + lo.name + ", " + hi.name + "}, " + a.name);
}

void Kernel::cvt(const Reg& d, const Reg& a, Rnd r, bool sat) {
  const Type dt = d.type, at = a.type;
  const std::string op = "cvt" + dot(dt) + dot(at);
  for (Type t : {dt, at})
    if (t == Type::pred || is_bits(t) || t == Type::f16x2 || t == Type::bf16x2) unsupported(op, t);
  auto bad_rnd = [&](const char* why) { throw Error(op + ": rounding " + std::string(r == Rnd::none ? "(none)" : rnd_name(r) + 1) + " " + why); };
  if (dt == Type::bf16 || at == Type::bf16) {
    // sm_80 has cvt.rn.bf16.f32 and (PTX 7.1) cvt.f32.bf16; every other bf16 conversion is sm_90.
    if (dt == Type::bf16 && at == Type::f32) require(op, 80, 70);
    else if (dt == Type::f32 && at == Type::bf16) require(op, 80, 71);
    else require(op, 90, 78);
  }
  if (is_int(dt) && is_int(at)) {
    if (r != Rnd::none) bad_rnd("not allowed for integer conversions");
  } else if (is_float(dt) && is_float(at)) {
    if (dt == at) {
      if (!is_int_rnd(r)) bad_rnd("invalid: same-type float cvt needs .rni/.rzi/.rmi/.rpi");
    } else if (type_bits(dt) < type_bits(at) || (type_bits(dt) == type_bits(at))) {
      if (r == Rnd::none) r = Rnd::rn;
      if (is_int_rnd(r)) bad_rnd("invalid for a narrowing float conversion");
    } else if (r != Rnd::none) {
      bad_rnd("not allowed: widening float conversions are exact");
    }
  } else if (is_float(at)) {  // float -> int
    if (!is_int_rnd(r)) bad_rnd("invalid: float->int needs .rzi, .rni, .rmi or .rpi");
  } else {  // int -> float
    if (r == Rnd::none) r = Rnd::rn;
    if (is_int_rnd(r)) bad_rnd("invalid for int->float");
  }
  instr("cvt" + std::string(rnd_name(r)) + (sat ? ".sat" : "") + dot(dt) + dot(at) + " " + d.name + ", " + a.name);
}

void Kernel::cvta_to_global(const Reg& d, const Reg& a) {
  if (d.type != Type::u64) unsupported("cvta.to.global", d.type);
  instr("cvta.to.global.u64 " + d.name + ", " + render("cvta.to.global", Type::u64, a));
}

}  // namespace ptxlm::ptx
