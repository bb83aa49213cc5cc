// The builder's core: registers, operands, the interface (params, shared
// arrays), control flow and emission. Instruction families live in
// ops.cpp (arithmetic, conversions, compares) and mem.cpp (memory, warp).
#include "kernels/ptx/builder.h"

#include <algorithm>
#include <cinttypes>
#include <cmath>
#include <cstdio>
#include <cstring>

namespace ptxlm::ptx {

namespace {

// Register name prefixes. None ends in a digit, so `%r<4>` and `%rd<2>`
// can never declare the same name.
const char* reg_prefix(Type t) {
  switch (t) {
    case Type::pred: return "p";
    case Type::b16: return "bh";
    case Type::u16: return "rh";
    case Type::s16: return "sh";
    case Type::b32: return "b";
    case Type::u32: return "r";
    case Type::s32: return "s";
    case Type::b64: return "bd";
    case Type::u64: return "rd";
    case Type::s64: return "sd";
    case Type::f16: return "h";
    case Type::f16x2: return "hh";
    case Type::bf16: return "hb";
    case Type::bf16x2: return "hbb";
    case Type::f32: return "f";
    case Type::f64: return "fd";
    default: return nullptr;  // 8-bit registers do not exist: load into 32 bits
  }
}

std::string dot(Type t) { return std::string(".") + type_name(t); }

}  // namespace

Kernel::Kernel(std::string name, Target target) : name_(std::move(name)), target_(target) {
  if (name_.empty() || !(std::isalpha(static_cast<unsigned char>(name_[0])) || name_[0] == '_'))
    throw Error("kernel name '" + name_ + "' is not an identifier");
  (void)target_.min_version();  // rejects unsupported targets now
}

void Kernel::require(std::string_view op, unsigned sm, unsigned version) {
  if (target_.sm < sm)
    throw Error(std::string(op) + " needs sm_" + std::to_string(sm) + ", target is " + target_.name());
  needed_version_ = std::max(needed_version_, version);
}

unsigned Kernel::version() const {
  unsigned v = std::max(target_.min_version(), needed_version_);
  if (target_.version != 0) {
    if (target_.version < v)
      throw Error("kernel " + name_ + " needs .version " + version_string(v) + ", target fixes " +
                  version_string(target_.version));
    return target_.version;
  }
  return v;
}

// ---------------------------------------------------------------- registers

Reg Kernel::reg(Type t) {
  const char* prefix = reg_prefix(t);
  if (!prefix) throw Error(std::string("reg: no registers of type .") + type_name(t) + " (load 8-bit values into .u32)");
  uint32_t n = reg_counts_[t]++;
  std::string name = "%";  // built by appends: GCC 12 -Wrestrict misfires on "lit" + string
  name += prefix;
  name += std::to_string(n);
  return Reg{t, name};
}

void Kernel::comment(std::string_view text) {
  if (text.find('\n') != std::string_view::npos) throw Error("comment: newline in comment");
  for (char c : text)
    if (static_cast<unsigned char>(c) >= 0x80) throw Error("comment: non-ASCII character (ptxas rejects it)");
  body_.push_back("\t// " + std::string(text));
}

void Kernel::instr(const std::string& text) { body_.push_back("\t" + guard_ + text + ";"); }

// Renders one operand for an instruction of type t. A register must have
// the instruction's type, or the same width where either side is a .bN
// type (PTX's own rule for untyped bits), or same_width_ok is set.
std::string Kernel::render(std::string_view op, Type t, const Operand& o, bool same_width_ok) const {
  auto fail = [&](const std::string& why) -> std::string {
    throw Error(std::string(op) + "." + type_name(t) + ": " + why);
  };
  switch (o.kind()) {
    case Operand::Kind::reg: {
      const Reg& r = o.reg();
      if (!r.valid()) fail("unset register");
      if (r.type == t) return r.name;
      bool same_width = type_bits(r.type) == type_bits(t);
      if (same_width && t != Type::pred && r.type != Type::pred &&
          (same_width_ok || is_bits(t) || is_bits(r.type)))
        return r.name;
      return fail("operand " + r.name + " is ." + type_name(r.type) + ", expected ." + type_name(t));
    }
    case Operand::Kind::symbol:
      if (t == Type::u32 || t == Type::u64 || t == Type::b32 || t == Type::b64) return o.reg().name;
      return fail("symbol " + o.reg().name + " used as a value of type ." + type_name(t));
    case Operand::Kind::int_imm: {
      int64_t v = o.int_value();
      if (is_float(t)) {
        if (t != Type::f32 && t != Type::f64) fail("no immediate form for this type");
        if (o.big_unsigned() || v > (int64_t(1) << 53) || v < -(int64_t(1) << 53))
          fail("integer immediate not exact as float");
        return render(op, t, Operand(double(v)));
      }
      if (t == Type::pred) fail("no predicate immediates");
      unsigned bits = type_bits(t);
      bool ok;
      if (o.big_unsigned()) {
        ok = bits == 64 && !is_signed(t);
      } else if (bits == 64) {
        ok = !(is_unsigned(t) && v < 0);
      } else {
        int64_t lo = is_unsigned(t) ? 0 : -(int64_t(1) << (bits - 1));
        int64_t hi = is_signed(t) ? (int64_t(1) << (bits - 1)) - 1 : (int64_t(1) << bits) - 1;
        ok = v >= lo && v <= hi;
      }
      if (!ok) fail("immediate " + (o.big_unsigned() ? std::to_string(uint64_t(v)) : std::to_string(v)) + " out of range");
      if (o.big_unsigned()) return std::to_string(uint64_t(v)) + "U";
      return std::to_string(v);
    }
    case Operand::Kind::float_imm: {
      double v = o.float_value();
      char buf[32];
      if (t == Type::f32) {
        float f = float(v);  // round to nearest: a double constant meant as f32
        uint32_t u;
        std::memcpy(&u, &f, 4);
        std::snprintf(buf, sizeof buf, "0f%08X", u);
        return buf;
      }
      if (t == Type::f64) {
        uint64_t u;
        std::memcpy(&u, &v, 8);
        std::snprintf(buf, sizeof buf, "0d%016" PRIX64, u);
        return buf;
      }
      return fail("float immediate " + std::to_string(v) + " for a non-f32/f64 instruction");
    }
  }
  return fail("bad operand");
}

// ---------------------------------------------------------------- interface

void Kernel::set_params(const ParamList& params) { params_ = params; }

Reg Kernel::param(std::string_view name) {
  if (inline_) {
    const Param& p = inline_->params->find(name);
    Reg d = reg(param_reg_type(p.type));
    if (!inline_->args_shared.empty())
      instr("ld.shared" + dot(d.type) + " " + d.name + ", [" + inline_->args_shared + "+" + std::to_string(p.offset) + "]");
    else
      instr("ld.global" + dot(d.type) + " " + d.name + ", [" + inline_->record + "+" + std::to_string(p.offset) + "]");
    return d;   // a pointer argument is already a global address
  }
  const Param& p = params_.find(name);
  Reg d = reg(param_reg_type(p.type));
  instr("ld.param" + dot(d.type) + " " + d.name + ", [p_" + p.name + "]");
  if (p.type != ParamType::ptr) return d;
  Reg g = reg(Type::u64);
  cvta_to_global(g, d);
  return g;
}

Symbol Kernel::shared_array(std::string name, Type elem, uint32_t count, uint32_t align) {
  if (count == 0) throw Error("shared_array " + name + ": zero elements");
  if (inline_) {
    const uint32_t a = std::max<uint32_t>(align ? align : type_bytes(elem), 4);
    const uint32_t off = (inline_shared_ + a - 1) / a * a;
    inline_shared_ = off + count * type_bytes(elem);
    return Symbol{inline_->window, elem, count, off};
  }
  if (!reg_prefix(elem) && !(elem == Type::b8 || elem == Type::u8 || elem == Type::s8))
    throw Error(std::string("shared_array ") + name + ": bad element type ." + type_name(elem));
  if (elem == Type::pred) throw Error("shared_array " + name + ": bad element type .pred");
  uint32_t a = align ? align : type_bytes(elem);
  if (a == 0 || (a & (a - 1)) || a < type_bytes(elem))
    throw Error("shared_array " + name + ": bad alignment " + std::to_string(a));
  std::string sym = "s_" + name;
  if (!symbols_.insert(sym).second) throw Error("shared_array " + name + " declared twice");
  // Static shared memory is limited to 48 KiB per block (more needs the dynamic window).
  static_shared_bytes_ = (static_shared_bytes_ + a - 1) / a * a + uint64_t(count) * type_bytes(elem);
  if (static_shared_bytes_ > 48 * 1024)
    throw Error("shared_array " + name + ": static shared memory would be " + std::to_string(static_shared_bytes_) +
                " bytes, over the 48 KiB limit (use dynamic_shared)");
  shared_decls_.push_back("\t.shared .align " + std::to_string(a) + " " + dot(elem) + " " + sym + "[" +
                          std::to_string(count) + "];");
  return Symbol{sym, elem, count};
}

Symbol Kernel::dynamic_shared(std::string name, uint32_t align) {
  if (inline_) {
    if (align > 16) throw Error("dynamic_shared " + name + ": an inline op's window is 16-byte aligned");
    return Symbol{inline_->window, Type::b8, 0, 0};
  }
  if (has_dynamic_shared_) throw Error("dynamic_shared declared twice");
  if (align == 0 || (align & (align - 1))) throw Error("dynamic_shared: bad alignment");
  has_dynamic_shared_ = true;
  // extern .shared is only legal at module scope: prefix it with the kernel.
  std::string sym = name_ + "_" + name;
  symbols_.insert(sym);
  shared_decls_.insert(shared_decls_.begin(), ".extern .shared .align " + std::to_string(align) + " .b8 " + sym + "[];");
  return Symbol{sym, Type::b8, 0};
}

Reg Kernel::shared_addr(const Symbol& s) {
  Reg d = reg(Type::u32);
  instr("mov.u32 " + d.name + ", " + s.name);
  if (s.offset) add(d, d, s.offset);
  return d;
}

void Kernel::begin_inline(const InlineOp& op) {
  if (inline_) throw Error("begin_inline: an inline op is already open");
  if (!op.params || op.record.empty() || op.ctaid_x.empty() || op.ctaid_y.empty() || op.end.empty() || op.window.empty())
    throw Error("begin_inline: incomplete InlineOp");
  if (op.block.count() > op.host_threads || op.block.y != 1 || op.block.z != 1 || op.block.x % 32)
    throw Error("begin_inline: the op's block (" + std::to_string(op.block.count()) +
                " threads) must be 1-D, whole warps, and fit the host kernel's " + std::to_string(op.host_threads));
  if (op.grid.z != 1) throw Error("begin_inline: 3-D grids are not supported");
  inline_ = op;
  inline_shared_ = (op.dynamic_bytes + 15) / 16 * 16;
}

uint32_t Kernel::end_inline() {
  if (!inline_) throw Error("end_inline: no inline op is open");
  inline_.reset();
  return inline_shared_;
}

Reg Kernel::special(Sreg s) {
  if (inline_) {
    const InlineOp& op = *inline_;
    std::string v;
    switch (s) {
      case Sreg::ctaid_x: v = op.ctaid_x; break;
      case Sreg::ctaid_y: v = op.ctaid_y; break;
      case Sreg::ctaid_z: v = "0"; break;
      case Sreg::nctaid_x: v = std::to_string(op.grid.x); break;
      case Sreg::nctaid_y: v = std::to_string(op.grid.y); break;
      case Sreg::nctaid_z: v = "1"; break;
      case Sreg::ntid_x: v = std::to_string(op.block.x); break;
      case Sreg::ntid_y: case Sreg::ntid_z: v = "1"; break;
      default: break;
    }
    if (!v.empty()) {
      Reg d = reg(Type::u32);
      instr("mov.u32 " + d.name + ", " + v);
      return d;
    }
  }
  static const char* const names[] = {
      "%tid.x", "%tid.y", "%tid.z", "%ntid.x", "%ntid.y", "%ntid.z", "%ctaid.x", "%ctaid.y", "%ctaid.z",
      "%nctaid.x", "%nctaid.y", "%nctaid.z", "%laneid", "%warpid", "%nwarpid", "%smid", "%clock",
      "%clock64", "%lanemask_lt", "%globaltimer", "%cluster_ctarank"};
  const char* n = names[static_cast<int>(s)];
  if (s == Sreg::cluster_ctarank) require(n, 90, 78);
  Type t = (s == Sreg::clock64 || s == Sreg::globaltimer) ? Type::u64 : Type::u32;
  Reg d = reg(t);
  instr("mov" + dot(t) + " " + d.name + ", " + n);
  return d;
}

Reg Kernel::global_index_x() {
  Reg tid = special(Sreg::tid_x), ntid = special(Sreg::ntid_x), ctaid = special(Sreg::ctaid_x);
  return mad_lo(ctaid, ntid, tid);
}

// ---------------------------------------------------------------- control flow

void Kernel::check_no_guard(std::string_view what) const {
  if (!guard_.empty()) throw Error(std::string(what) + " inside a guarded (when/unless) block");
}

Label Kernel::label(std::string_view hint) {
  std::string h(hint);
  for (char& c : h)
    if (!std::isalnum(static_cast<unsigned char>(c))) c = '_';
  Label l{"$L_" + h + "_" + std::to_string(label_counter_++)};
  labels_made_.insert(l.name);
  return l;
}

void Kernel::place(const Label& l) {
  check_no_guard("label");
  if (!labels_made_.count(l.name)) throw Error("place: label " + l.name + " was not made by this kernel");
  if (!labels_placed_.insert(l.name).second) throw Error("place: label " + l.name + " placed twice");
  body_.push_back(l.name + ":");
}

void Kernel::bra(const Label& l) {
  if (!labels_made_.count(l.name)) throw Error("bra: label " + l.name + " was not made by this kernel");
  labels_used_.insert(l.name);
  // .uni promises that the warp does not diverge here: true only unguarded.
  instr((guard_.empty() ? "bra.uni " : "bra ") + l.name);
}

void Kernel::bra_if(const Reg& p, const Label& l) {
  when(p, [&] {
    labels_used_.insert(l.name);
    instr("bra " + l.name);
  });
}

void Kernel::bra_ifnot(const Reg& p, const Label& l) {
  unless(p, [&] {
    labels_used_.insert(l.name);
    instr("bra " + l.name);
  });
}

void Kernel::ret() {
  if (inline_) return instr("bra " + inline_->end);   // the virtual block's end (uniform, see InlineOp)
  instr("ret");
}
void Kernel::exit() {
  if (inline_) return instr("bra " + inline_->end);
  instr("exit");
}
void Kernel::trap() { instr("trap"); }

void Kernel::guarded(const std::string& g, const Reg& p, const std::function<void()>& fn) {
  if (p.type != Type::pred) throw Error("guard: " + p.name + " is ." + type_name(p.type) + ", expected .pred");
  check_no_guard("when/unless");
  if (inlining()) {
    // Inline in a persistent kernel, a branch instead of predicates: a
    // register the body defines under a predicate looks to ptxas as if it
    // kept its value from the previous pass of the kernel's loops, so it
    // stays live across every op (spills); behind a branch it is dead.
    Label skip = label("unguarded");
    guard_ = (g == "@" ? "@!" : "@") + p.name + " ";
    bra(skip);
    guard_.clear();
    fn();
    place(skip);
    return;
  }
  guard_ = g + p.name + " ";
  try {
    fn();
  } catch (...) {
    guard_.clear();
    throw;
  }
  guard_.clear();
}

void Kernel::when(const Reg& p, const std::function<void()>& fn) { guarded("@", p, fn); }
void Kernel::unless(const Reg& p, const std::function<void()>& fn) { guarded("@!", p, fn); }

void Kernel::if_(const Reg& p, const std::function<void()>& then) {
  check_no_guard("if_");
  Label end = label("endif");
  bra_ifnot(p, end);
  then();
  place(end);
}

void Kernel::if_else(const Reg& p, const std::function<void()>& then, const std::function<void()>& otherwise) {
  check_no_guard("if_else");
  Label els = label("else"), end = label("endif");
  bra_ifnot(p, els);
  then();
  bra(end);
  place(els);
  otherwise();
  place(end);
}

void Kernel::for_range(const Reg& i, const Operand& begin, const Operand& end, const Operand& step,
                       const std::function<void()>& body, bool unroll) {
  check_no_guard("for_range");
  if (!is_int(i.type) || type_bits(i.type) < 32)
    throw Error(std::string("for_range: counter ") + i.name + " is ." + type_name(i.type) + ", expected a 32/64-bit integer");
  if (step.kind() == Operand::Kind::int_imm && step.int_value() <= 0 && !step.big_unsigned())
    throw Error("for_range: step must be positive");
  if (step.kind() == Operand::Kind::float_imm) throw Error("for_range: float step");
  mov(i, begin);
  Label head = label("for"), done = label("endfor");
  place(head);
  if (!unroll) instr(".pragma \"nounroll\"");
  Reg p = setp(is_signed(i.type) ? Cmp::ge : Cmp::hs, i, end);
  bra_if(p, done);
  body();
  add(i, i, step);
  bra(head);
  place(done);
}

// ---------------------------------------------------------------- emission

std::string Kernel::emit_entry() const {
  for (const std::string& l : labels_used_)
    if (!labels_placed_.count(l)) throw Error("kernel " + name_ + ": label " + l + " is branched to but never placed");
  std::string out;
  for (const std::string& d : shared_decls_)
    if (d[0] == '.') out += d + "\n";
  out += ".visible .entry " + name_ + "(";
  const auto& ps = params_.params();
  for (size_t i = 0; i < ps.size(); ++i) {
    out += (i ? ",\n\t" : "\n\t");
    out += ".param ." + std::string(type_name(param_reg_type(ps[i].type))) + " p_" + ps[i].name;
  }
  out += ps.empty() ? ")\n" : "\n)\n";
  if (maxntid_)
    out += ".maxntid " + std::to_string(maxntid_->x) + ", " + std::to_string(maxntid_->y) + ", " +
           std::to_string(maxntid_->z) + "\n";
  if (minnctapersm_) out += ".minnctapersm " + std::to_string(minnctapersm_) + "\n";
  out += "{\n";
  for (const auto& [t, n] : reg_counts_) {
    // PTX has no .bf16 register type: bf16 values live in .b16/.b32 registers.
    Type decl = t == Type::bf16 ? Type::b16 : t == Type::bf16x2 ? Type::b32 : t;
    out += "\t.reg ." + std::string(type_name(decl)) + " %" + reg_prefix(t) + "<" + std::to_string(n) + ">;\n";
  }
  for (const std::string& d : shared_decls_)
    if (d[0] == '\t') out += d + "\n";
  out += "\n";
  for (const std::string& line : body_) out += line + "\n";
  out += "\tret;\n}\n";
  return out;
}

std::string Kernel::emit() const { return emit_module({this}); }

std::string emit_module(const std::vector<const Kernel*>& kernels) {
  if (kernels.empty()) throw Error("emit_module: no kernels");
  const Target& t = kernels[0]->target();
  unsigned v = 0;
  for (const Kernel* k : kernels) {
    if (k->target().name() != t.name()) throw Error("emit_module: kernels for different targets");
    v = std::max(v, k->version());
  }
  std::string out = "//\n// Generated by ptxlm\n//\n\n.version " + version_string(v) + "\n.target " + t.name() +
                    "\n.address_size 64\n";
  for (const Kernel* k : kernels) {
    out += "\n";
    out += k->emit_entry();
  }
  return out;
}

}  // namespace ptxlm::ptx
