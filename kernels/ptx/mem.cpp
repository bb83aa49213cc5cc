// Memory (ld/st/atom/red/fence), warp (shfl) and block (bar) instructions.
#include <cstdio>
#include <string>

#include "kernels/ptx/builder.h"

namespace ptxlm::ptx {

namespace {

std::string dot(Type t) { return std::string(".") + type_name(t); }

const char* space_name(Space s) {
  switch (s) {
    case Space::global: return ".global";
    case Space::shared: return ".shared";
    case Space::local: return ".local";
    case Space::param: return ".param";
  }
  return "";
}

const char* scope_name(Scope s) {
  switch (s) {
    case Scope::none: return "";
    case Scope::cta: return ".cta";
    case Scope::gpu: return ".gpu";
    case Scope::sys: return ".sys";
  }
  return "";
}

const char* order_name(Order o) {
  switch (o) {
    case Order::weak: return "";
    case Order::relaxed: return ".relaxed";
    case Order::acquire: return ".acquire";
    case Order::release: return ".release";
    case Order::acq_rel: return ".acq_rel";
    case Order::sc: return ".sc";
    case Order::volatile_: return ".volatile";
  }
  return "";
}

std::string hex32(uint32_t v) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "0x%08x", v);
  return buf;
}

// Is a value of memory type m loadable into / storable from a register of type r?
bool mem_compatible(Type m, Type r) {
  if (m == r) return true;
  if (m == Type::pred || r == Type::pred) return false;
  if (type_bits(m) == type_bits(r)) return is_bits(m) || is_bits(r);
  // Narrow integer memory into a wider integer register (size-relaxed ld/st).
  return type_bits(m) < type_bits(r) && (is_int(m) || is_bits(m)) && (is_int(r) || is_bits(r));
}

}  // namespace

std::string Kernel::vector_operand(std::span<const Reg> regs) {
  std::string s = "{";
  for (size_t i = 0; i < regs.size(); ++i) s += (i ? ", " : "") + regs[i].name;
  return s + "}";
}

std::string Kernel::render_addr(std::string_view op, Space s, const Addr& a, unsigned access_bytes) const {
  std::string base;
  const Operand& b = a.base;
  if (b.kind() == Operand::Kind::symbol) {
    if (s != Space::shared && s != Space::param) throw Error(std::string(op) + ": symbol address outside .shared/.param");
    if (a.offset % access_bytes)
      throw Error(std::string(op) + ": offset " + std::to_string(a.offset) + " of " + b.reg().name +
                  " is not aligned to the " + std::to_string(access_bytes) + "-byte access");
    base = b.reg().name;
  } else if (b.kind() == Operand::Kind::reg) {
    const Reg& r = b.reg();
    bool ok = (r.type == Type::u64 || r.type == Type::s64 || r.type == Type::b64) ||
              ((s == Space::shared || s == Space::local) && (r.type == Type::u32 || r.type == Type::b32));
    if (!ok || s == Space::param)
      throw Error(std::string(op) + ": address register " + r.name + " is ." + type_name(r.type) + " for " +
                  space_name(s) + " (global needs .u64; shared .u32 or .u64)");
    base = r.name;
  } else {
    throw Error(std::string(op) + ": address must be a register or a symbol");
  }
  if (a.offset == 0) return "[" + base + "]";
  return "[" + base + "+" + std::to_string(a.offset) + "]";
}

std::string Kernel::mem_prefix(std::string_view op_in, Space s, const MemOpt& o, bool is_load) {
  const std::string op(op_in);
  std::string out = op;
  switch (o.order) {
    case Order::weak:
    case Order::volatile_:
      if (o.scope != Scope::none) throw Error(op + ": a scope needs .relaxed/.acquire/.release");
      out += order_name(o.order);
      break;
    case Order::relaxed:
    case Order::acquire:
    case Order::release:
      if ((o.order == Order::acquire && !is_load) || (o.order == Order::release && is_load))
        throw Error(op + std::string(order_name(o.order)) + ": invalid ordering for " + op);
      if (o.scope == Scope::none) throw Error(op + std::string(order_name(o.order)) + ": needs a scope (.cta/.gpu/.sys)");
      if (s != Space::global && s != Space::shared) throw Error(op + std::string(order_name(o.order)) + ": only global/shared");
      require(op + order_name(o.order), 70, 60);
      out += std::string(order_name(o.order)) + scope_name(o.scope);
      break;
    default:
      throw Error(op + std::string(order_name(o.order)) + ": invalid ordering for " + op);
  }
  out += space_name(s);
  if (o.nc) {
    if (!is_load || s != Space::global || o.order != Order::weak) throw Error(op + ": .nc only on weak ld.global");
    if (!inline_) out += ".nc";   // an inline op's inputs may be written earlier in the launch
  }
  if (s == Space::param && (!is_load || o.order != Order::weak)) throw Error(op + ": .param is read-only and weak");
  return out;
}

void Kernel::ld(Space s, const Reg& d, const Addr& a, const MemOpt& o) { ld(s, std::vector<Reg>{d}, a, o); }

void Kernel::ld(Space s, const std::vector<Reg>& d, const Addr& a, const MemOpt& o) {
  if (d.size() != 1 && d.size() != 2 && d.size() != 4) throw Error("ld: vector of " + std::to_string(d.size()));
  const Type rt = d[0].type;
  const Type mt = o.mem_type.value_or(rt);
  std::string prefix = mem_prefix("ld", s, o, true);
  const std::string op = prefix + (d.size() > 1 ? ".v" + std::to_string(d.size()) : "") + dot(mt);
  for (const Reg& r : d) {
    if (r.type != rt) throw Error(op + ": vector registers of mixed types ." + type_name(rt) + " and ." + type_name(r.type));
    if (!mem_compatible(mt, r.type)) throw Error(op + ": register " + r.name + " is ." + type_name(r.type));
  }
  unsigned bytes = type_bytes(mt) * unsigned(d.size());
  if (bytes > 16) throw Error(op + ": a vector access is at most 16 bytes");
  const std::string regs = d.size() == 1 ? d[0].name : vector_operand(d);
  // ld/st of half types is spelled .b16/.b32 in PTX.
  Type emit_t = (mt == Type::f16 || mt == Type::bf16 || mt == Type::f16x2 || mt == Type::bf16x2) ? bits_type(type_bits(mt)) : mt;
  std::string opcode = prefix + (d.size() > 1 ? ".v" + std::to_string(d.size()) : "") + dot(emit_t);
  instr(opcode + " " + regs + ", " + render_addr(op, s, a, bytes));
}

void Kernel::st(Space s, const Addr& a, const Operand& v, const MemOpt& o) { st(s, a, std::vector<Operand>{v}, o); }

void Kernel::st(Space s, const Addr& a, const std::vector<Operand>& v, const MemOpt& o) {
  if (v.size() != 1 && v.size() != 2 && v.size() != 4) throw Error("st: vector of " + std::to_string(v.size()));
  std::optional<Type> rt;
  for (const Operand& x : v)
    if (x.kind() == Operand::Kind::reg) {
      if (rt && *rt != x.reg().type) throw Error("st: vector registers of mixed types");
      rt = x.reg().type;
    }
  if (!o.mem_type && !rt) throw Error("st: an immediate store needs MemOpt::mem_type");
  const Type mt = o.mem_type.value_or(*rt);
  std::string prefix = mem_prefix("st", s, o, false);
  const std::string op = prefix + (v.size() > 1 ? ".v" + std::to_string(v.size()) : "") + dot(mt);
  if (rt && !mem_compatible(mt, *rt)) throw Error(op + ": value register is ." + type_name(*rt));
  unsigned bytes = type_bytes(mt) * unsigned(v.size());
  if (bytes > 16) throw Error(op + ": a vector access is at most 16 bytes");
  Type emit_t = (mt == Type::f16 || mt == Type::bf16 || mt == Type::f16x2 || mt == Type::bf16x2) ? bits_type(type_bits(mt)) : mt;
  std::string vals;
  for (size_t i = 0; i < v.size(); ++i) {
    std::string r = v[i].kind() == Operand::Kind::reg ? v[i].reg().name : render(op, emit_t, v[i]);
    vals += (i ? ", " : "") + r;
  }
  if (v.size() > 1) vals = "{" + vals + "}";
  std::string opcode = prefix + (v.size() > 1 ? ".v" + std::to_string(v.size()) : "") + dot(emit_t);
  instr(opcode + " " + render_addr(op, s, a, bytes) + ", " + vals);
}

// ---------------------------------------------------------------- atomics

namespace {

// The type suffix atom/red use for (op, value type), or throws.
Type atom_type(Kernel& k, AtomOp op, Type t, std::string& opname) {
  auto bad = [&]() -> Type { throw Error("atom." + opname + ": unsupported type ." + std::string(type_name(t))); };
  switch (op) {
    case AtomOp::add:
      opname = "add";
      if (t == Type::u32 || t == Type::s32 || t == Type::u64 || t == Type::f32 || t == Type::f64) return t;
      if (t == Type::f16) { k.require("atom.add.f16", 70, 63); opname = "add.noftz"; return t; }
      if (t == Type::bf16) { k.require("atom.add.bf16", 90, 78); opname = "add.noftz"; return t; }
      return bad();
    case AtomOp::min:
    case AtomOp::max:
      opname = op == AtomOp::min ? "min" : "max";
      if (t == Type::u32 || t == Type::s32 || t == Type::u64 || t == Type::s64) return t;
      return bad();
    case AtomOp::inc:
    case AtomOp::dec:
      opname = op == AtomOp::inc ? "inc" : "dec";
      if (t == Type::u32) return t;
      return bad();
    case AtomOp::exch:
    case AtomOp::cas:
      opname = op == AtomOp::exch ? "exch" : "cas";
      if (t != Type::pred && (type_bits(t) == 32 || type_bits(t) == 64)) return bits_type(type_bits(t));
      return bad();
    case AtomOp::and_:
    case AtomOp::or_:
    case AtomOp::xor_:
      opname = op == AtomOp::and_ ? "and" : op == AtomOp::or_ ? "or" : "xor";
      if ((is_int(t) || is_bits(t)) && (type_bits(t) == 32 || type_bits(t) == 64)) return bits_type(type_bits(t));
      return bad();
  }
  return bad();
}

std::string atom_prefix(const char* op, Space s, Scope scope, Order order) {
  if (s != Space::global && s != Space::shared) throw Error(std::string(op) + ": only .global or .shared");
  if (order != Order::relaxed && order != Order::acquire && order != Order::release && order != Order::acq_rel)
    throw Error(std::string(op) + std::string(order_name(order)) + ": invalid ordering");
  // .relaxed is the default ordering: leave it implicit.
  return std::string(op) + (order == Order::relaxed ? "" : order_name(order)) + scope_name(scope) + space_name(s);
}

}  // namespace

void Kernel::atom(AtomOp op, const Reg& d, Space s, const Addr& a, const Operand& b, Scope scope, Order order) {
  if (op == AtomOp::cas) throw Error("atom: use atom_cas for cas");
  std::string opname;
  Type t = atom_type(*this, op, d.type, opname);
  std::string prefix = atom_prefix("atom", s, scope, order);
  std::string full = prefix + "." + opname + dot(t);
  instr(full + " " + d.name + ", " + render_addr(full, s, a, type_bytes(t)) + ", " + render(full, t, b, is_bits(t)));
}

void Kernel::atom_cas(const Reg& d, Space s, const Addr& a, const Operand& cmp, const Operand& val, Scope scope,
                      Order order) {
  std::string opname;
  Type t = atom_type(*this, AtomOp::cas, d.type, opname);
  std::string full = atom_prefix("atom", s, scope, order) + ".cas" + dot(t);
  instr(full + " " + d.name + ", " + render_addr(full, s, a, type_bytes(t)) + ", " + render(full, t, cmp, true) + ", " +
        render(full, t, val, true));
}

void Kernel::red(AtomOp op, Space s, const Addr& a, const Operand& b, Scope scope, Order order) {
  if (b.kind() != Operand::Kind::reg) throw Error("red: the value must be a register (it types the op)");
  if (op == AtomOp::cas || op == AtomOp::exch) throw Error("red: no cas/exch form");
  if (order == Order::acquire || order == Order::acq_rel) throw Error("red: only relaxed or release ordering");
  std::string opname;
  Type t = atom_type(*this, op, b.reg().type, opname);
  std::string full = atom_prefix("red", s, scope, order) + "." + opname + dot(t);
  instr(full + " " + render_addr(full, s, a, type_bytes(t)) + ", " + render(full, t, b, is_bits(t)));
}

void Kernel::fence(Order order, Scope scope) {
  if (order != Order::acq_rel && order != Order::sc) throw Error("fence: only .acq_rel or .sc");
  if (scope == Scope::none) throw Error("fence: needs a scope");
  require("fence", 70, 60);
  instr(std::string("fence") + order_name(order) + scope_name(scope));
}

void Kernel::membar(Scope scope) {
  const char* s = scope == Scope::cta ? ".cta" : scope == Scope::gpu ? ".gl" : scope == Scope::sys ? ".sys" : nullptr;
  if (!s) throw Error("membar: needs a scope");
  instr(std::string("membar") + s);
}

// ---------------------------------------------------------------- warp, block

void Kernel::shfl(Shfl mode, const Reg& d, const Reg& a, const Operand& b, const Operand& c, uint32_t membermask,
                  const Reg* pout) {
  static const char* const modes[] = {"up", "down", "bfly", "idx"};
  const std::string op = std::string("shfl.sync.") + modes[static_cast<int>(mode)] + ".b32";
  if (type_bits(d.type) != 32 || d.type == Type::f16x2 || d.type == Type::bf16x2)
    throw Error(op + ": destination " + d.name + " is ." + type_name(d.type));
  if (a.type != d.type) throw Error(op + ": source " + a.name + " is ." + type_name(a.type) + ", destination ." + type_name(d.type));
  if (b.kind() == Operand::Kind::int_imm && (b.int_value() < 0 || b.int_value() > 31))
    throw Error(op + ": lane operand " + std::to_string(b.int_value()) + " outside 0..31");
  if (c.kind() == Operand::Kind::int_imm && (c.int_value() < 0 || c.int_value() > 0x1fff || (c.int_value() & 0xe0)))
    throw Error(op + ": clamp/segment operand " + std::to_string(c.int_value()) + " invalid");
  std::string dst = d.name;
  if (pout) {
    if (pout->type != Type::pred) throw Error(op + ": predicate output " + pout->name + " is not .pred");
    dst += "|" + pout->name;
  }
  instr(op + " " + dst + ", " + a.name + ", " + render(op, Type::u32, b, false) + ", " + render(op, Type::u32, c) + ", " +
        hex32(membermask));
}

Reg Kernel::shfl_bfly(const Reg& a, const Operand& lanemask) {
  Reg d = reg(a.type);
  shfl(Shfl::bfly, d, a, lanemask, 0x1f);
  return d;
}
Reg Kernel::shfl_down(const Reg& a, const Operand& delta) {
  Reg d = reg(a.type);
  shfl(Shfl::down, d, a, delta, 0x1f);
  return d;
}
Reg Kernel::shfl_up(const Reg& a, const Operand& delta) {
  Reg d = reg(a.type);
  shfl(Shfl::up, d, a, delta, 0);
  return d;
}
Reg Kernel::shfl_idx(const Reg& a, const Operand& lane) {
  Reg d = reg(a.type);
  shfl(Shfl::idx, d, a, lane, 0x1f);
  return d;
}

void Kernel::bar_sync(unsigned id, std::optional<uint32_t> threads) {
  if (id > 15) throw Error("bar.sync: barrier id " + std::to_string(id) + " outside 0..15");
  std::string text = "bar.sync " + std::to_string(id);
  // In an inline op with fewer threads than the host kernel, only the op's
  // threads arrive (the rest skip the op).
  if (!threads && inline_ && inline_->block.x < inline_->host_threads) threads = inline_->block.x;
  if (threads) {
    if (*threads == 0 || *threads % 32) throw Error("bar.sync: thread count " + std::to_string(*threads) + " is not a positive multiple of 32");
    text += ", " + std::to_string(*threads);
  }
  instr(text);
}

void Kernel::bar_warp_sync(uint32_t membermask) { instr("bar.warp.sync " + hex32(membermask)); }

void Kernel::elect_sync(const Reg& d, const Reg& p, uint32_t membermask) {
  require("elect.sync", 90, 80);
  if (d.type != Type::u32 && d.type != Type::b32) throw Error("elect.sync: destination " + d.name + " is ." + type_name(d.type));
  if (p.type != Type::pred) throw Error("elect.sync: predicate " + p.name + " is ." + type_name(p.type));
  instr("elect.sync " + d.name + "|" + p.name + ", " + hex32(membermask));
}

void Kernel::prefetch_l2(const Addr& a) { instr("prefetch.global.L2 " + render_addr("prefetch", Space::global, a, 1)); }

void Kernel::griddepcontrol_wait() {
  require("griddepcontrol.wait", 90, 78);
  instr("griddepcontrol.wait");
}

void Kernel::griddepcontrol_launch_dependents() {
  require("griddepcontrol.launch_dependents", 90, 78);
  instr("griddepcontrol.launch_dependents");
}

}  // namespace ptxlm::ptx
