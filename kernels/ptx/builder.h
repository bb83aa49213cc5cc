// A small, strict PTX builder. Registers are typed virtual registers whose
// `.reg` declarations are derived at emission; every instruction checks its
// operand types when it is built and throws ptx::Error naming the op and the
// types it cannot emit. Output is deterministic, readable PTX text.
//
//   ptx::Kernel k("scale", ptx::Target{});
//   ptx::ParamList p; p.add_ptr("x").add_u32("n");
//   k.set_params(p);
//   k.set_maxntid({256});
//   Reg x = k.param("x"), n = k.param("n");          // ld.param (+ cvta for ptr)
//   Reg i = k.global_index_x();                       // ctaid.x * ntid.x + tid.x
//   k.if_(k.setp(Cmp::lt, i, n), [&] {
//     Reg a = k.add(x, k.mul_wide(i, 4u));          // add.u64
//     Reg v = k.ld_global(Type::f32, at(a));
//     k.st_global(at(a), k.mul(v, 2.0));             // mul.rn.f32
//   });
//   std::string text = k.emit();
//
// Instructions are emitted when the call runs. C++ leaves the order in which
// a call's arguments are evaluated open, so keep at most one emitting call
// per argument list (nesting is fine): that keeps the text identical across
// compilers.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <set>
#include <span>
#include <string>
#include <vector>

#include "kernels/ptx/params.h"
#include "kernels/ptx/types.h"

namespace ptxlm::ptx {

struct Reg {
  Type type = Type::pred;
  std::string name;  // "%r3"; empty = not a register
  bool valid() const { return !name.empty(); }
};

// A register, an immediate (typed by the instruction that uses it), or the
// address of a symbol (shared array).
class Operand {
 public:
  enum class Kind : uint8_t { reg, int_imm, float_imm, symbol };
  Operand(const Reg& r) : kind_(Kind::reg), reg_(r) {}
  Operand(int v) : kind_(Kind::int_imm), i_(v) {}
  Operand(unsigned v) : kind_(Kind::int_imm), i_(v) {}
  Operand(long v) : kind_(Kind::int_imm), i_(v) {}
  Operand(long long v) : kind_(Kind::int_imm), i_(v) {}
  Operand(unsigned long v) : kind_(Kind::int_imm), i_(int64_t(v)), big_(v > uint64_t(INT64_MAX)) {}
  Operand(unsigned long long v) : kind_(Kind::int_imm), i_(int64_t(v)), big_(v > uint64_t(INT64_MAX)) {}
  Operand(double v) : kind_(Kind::float_imm), f_(v) {}
  Operand(float v) : kind_(Kind::float_imm), f_(v) {}
  static Operand symbol(std::string name) {
    Operand o(0);
    o.kind_ = Kind::symbol;
    o.reg_.name = std::move(name);
    return o;
  }

  Kind kind() const { return kind_; }
  const Reg& reg() const { return reg_; }
  int64_t int_value() const { return i_; }
  bool big_unsigned() const { return big_; }  // an unsigned value above INT64_MAX
  double float_value() const { return f_; }

 private:
  Kind kind_;
  Reg reg_;
  int64_t i_ = 0;
  bool big_ = false;
  double f_ = 0;
};

struct Label {
  std::string name;  // "$L_loop_3"
};

// A `.shared` array (static) or the dynamic `extern .shared` window. Inside an
// inline op (below) an array is a region of the host kernel's window: the
// window's symbol at a byte offset.
struct Symbol {
  std::string name;
  Type elem = Type::b8;
  uint32_t count = 0;   // 0 for the dynamic window
  uint32_t offset = 0;  // bytes from the symbol's address
};

// A memory address: [base+offset] with base a register or a symbol.
struct Addr {
  Operand base;
  int64_t offset = 0;
};
inline Addr at(const Reg& base, int64_t offset = 0) { return Addr{base, offset}; }
inline Addr at(const Symbol& s, int64_t offset = 0) { return Addr{Operand::symbol(s.name), int64_t(s.offset) + offset}; }

enum class Rnd : uint8_t { none, rn, rz, rm, rp, rni, rzi, rmi, rpi };
enum class Cmp : uint8_t { eq, ne, lt, le, gt, ge, lo, ls, hi, hs, equ, neu, ltu, leu, gtu, geu, num, nan };
enum class Space : uint8_t { global, shared, local, param };
enum class Order : uint8_t { weak, relaxed, acquire, release, acq_rel, sc, volatile_ };
enum class Scope : uint8_t { none, cta, gpu, sys };
enum class AtomOp : uint8_t { add, min, max, exch, cas, and_, or_, xor_, inc, dec };
enum class Shfl : uint8_t { up, down, bfly, idx };
enum class Sreg : uint8_t {
  tid_x, tid_y, tid_z, ntid_x, ntid_y, ntid_z, ctaid_x, ctaid_y, ctaid_z,
  nctaid_x, nctaid_y, nctaid_z, laneid, warpid, nwarpid, smid, clock, clock64,
  lanemask_lt, globaltimer, cluster_ctarank,
};

// Options of ld/st: memory ordering, scope, the non-coherent path, and the
// in-memory type when it differs from the register (ld.global.u8 into .u32).
struct MemOpt {
  Order order = Order::weak;
  Scope scope = Scope::none;
  bool nc = false;
  std::optional<Type> mem_type;
};

struct Label;

// One op of a persistent kernel, emitted inline by the op's own generator:
// while it is open (Kernel::begin_inline .. end_inline) the generator's
// calls mean the same as in a kernel of its own, on a virtual block:
// - param(name) loads the op's argument from its packed record (the layout
//   ParamList::pack gives), in global memory or in the host kernel's shared
//   copy of it, pointers as they are;
// - %ctaid.x/.y are the virtual block, %nctaid and %ntid the op's grid and
//   block (constants), %tid is unchanged (threads past the op's block do not
//   run it: the host kernel skips them);
// - shared arrays and the dynamic window are regions of the host kernel's
//   window (ops run one after another in a block, so they share it): the
//   op's dynamic bytes first, its arrays after them;
// - bar.sync counts only the op's threads when they are fewer than the host
//   kernel's, so the skipped threads are not waited for;
// - ret and exit end the virtual block (a branch to `end`): they must be
//   uniform over the op's block, as a return before a barrier must be;
// - loads drop .nc: the op's inputs are written earlier in the same launch,
//   which the non-coherent path may not see.
struct InlineOp {
  const ParamList* params = nullptr;
  std::string record;       // register (.u64) holding the record's global address
  std::string ctaid_x, ctaid_y;   // registers (.u32) holding the virtual block
  Dim3 grid, block;
  uint32_t host_threads = 0;      // the host kernel's block size
  std::string end;                // label name ending the virtual block
  std::string window;             // the host kernel's dynamic shared symbol
  std::string args_shared;        // if set: a shared copy of the record, read instead of global memory
  uint32_t dynamic_bytes = 0;     // the op's dynamic shared bytes (its geometry's)
};

class Kernel {
 public:
  explicit Kernel(std::string name, Target target = {});

  const std::string& name() const { return name_; }
  const Target& target() const { return target_; }

  // ---- interface
  void set_params(const ParamList& params);
  void set_maxntid(Dim3 block) { maxntid_ = block; }
  // .minnctapersm: the blocks per SM ptxas must leave room for (its register
  // budget follows: a persistent kernel wants 1, not ptxas's default guess).
  void set_minnctapersm(uint32_t n) { minnctapersm_ = n; }
  // Loads a parameter into a fresh register; a ptr becomes a global address.
  Reg param(std::string_view name);
  Symbol shared_array(std::string name, Type elem, uint32_t count, uint32_t align = 0);
  Symbol dynamic_shared(std::string name = "dsmem", uint32_t align = 16);
  // The shared address of a symbol (plus its offset) as a .u32 value.
  Reg shared_addr(const Symbol& s);

  // ---- inline ops (persistent kernels; see InlineOp)
  void begin_inline(const InlineOp& op);
  // Closes the op; returns the shared bytes it used (window + arrays).
  uint32_t end_inline();
  bool inlining() const { return inline_.has_value(); }

  // ---- registers
  Reg reg(Type t);
  void comment(std::string_view text);

  // ---- moves and conversions
  void mov(const Reg& d, const Operand& a);
  Reg mov(Type t, const Operand& a) { Reg d = reg(t); mov(d, a); return d; }
  void bitcast(const Reg& d, const Reg& a);  // mov.bN between same-width types
  Reg bitcast(Type t, const Reg& a) { Reg d = reg(t); bitcast(d, a); return d; }
  void pack(const Reg& d, const Reg& lo, const Reg& hi);      // mov.bN d, {lo, hi}
  void unpack(const Reg& lo, const Reg& hi, const Reg& a);    // mov.bN {lo, hi}, a
  // Rounding: float narrowing and int->float default to .rn; float->int
  // needs an explicit .rzi/.rni/.rmi/.rpi; widening takes none.
  void cvt(const Reg& d, const Reg& a, Rnd r = Rnd::none, bool sat = false);
  Reg cvt(Type t, const Reg& a, Rnd r = Rnd::none) { Reg d = reg(t); cvt(d, a, r); return d; }
  void cvta_to_global(const Reg& d, const Reg& a);
  Reg special(Sreg s);
  Reg global_index_x();  // ctaid.x * ntid.x + tid.x (u32)

  // ---- arithmetic (f32/f64 add/sub/mul always carry .rn: ptxas never fuses)
  void add(const Reg& d, const Operand& a, const Operand& b) { binary("add", d, a, b); }
  void sub(const Reg& d, const Operand& a, const Operand& b) { binary("sub", d, a, b); }
  void mul(const Reg& d, const Operand& a, const Operand& b) { binary("mul", d, a, b); }
  void min(const Reg& d, const Operand& a, const Operand& b) { binary("min", d, a, b); }
  void max(const Reg& d, const Operand& a, const Operand& b) { binary("max", d, a, b); }
  void div(const Reg& d, const Operand& a, const Operand& b) { binary("div", d, a, b); }
  void rem(const Reg& d, const Operand& a, const Operand& b) { binary("rem", d, a, b); }
  void and_(const Reg& d, const Operand& a, const Operand& b) { binary("and", d, a, b); }
  void or_(const Reg& d, const Operand& a, const Operand& b) { binary("or", d, a, b); }
  void xor_(const Reg& d, const Operand& a, const Operand& b) { binary("xor", d, a, b); }
  void shl(const Reg& d, const Operand& a, const Operand& b) { binary("shl", d, a, b); }
  void shr(const Reg& d, const Operand& a, const Operand& b) { binary("shr", d, a, b); }
  void mul_hi(const Reg& d, const Operand& a, const Operand& b) { binary("mul.hi", d, a, b); }
  Reg add(const Reg& a, const Operand& b) { return binary_new("add", a, b); }
  Reg sub(const Reg& a, const Operand& b) { return binary_new("sub", a, b); }
  Reg mul(const Reg& a, const Operand& b) { return binary_new("mul", a, b); }
  Reg min(const Reg& a, const Operand& b) { return binary_new("min", a, b); }
  Reg max(const Reg& a, const Operand& b) { return binary_new("max", a, b); }
  Reg div(const Reg& a, const Operand& b) { return binary_new("div", a, b); }
  Reg and_(const Reg& a, const Operand& b) { return binary_new("and", a, b); }
  Reg or_(const Reg& a, const Operand& b) { return binary_new("or", a, b); }
  Reg xor_(const Reg& a, const Operand& b) { return binary_new("xor", a, b); }
  Reg shl(const Reg& a, const Operand& b) { return binary_new("shl", a, b); }
  Reg shr(const Reg& a, const Operand& b) { return binary_new("shr", a, b); }

  void mul_wide(const Reg& d, const Reg& a, const Operand& b);  // u32*u32 -> u64
  Reg mul_wide(const Reg& a, const Operand& b);
  void mad_lo(const Reg& d, const Operand& a, const Operand& b, const Operand& c);
  Reg mad_lo(const Reg& a, const Operand& b, const Operand& c);
  void mad_wide(const Reg& d, const Reg& a, const Operand& b, const Operand& c);
  void fma(const Reg& d, const Operand& a, const Operand& b, const Operand& c);  // fma.rn
  Reg fma(const Reg& a, const Operand& b, const Operand& c);

  // Unary: neg, abs, not, sqrt (.rn), rcp (.rn), popc, clz; approx ones below.
  void unary(std::string_view op, const Reg& d, const Operand& a);
  Reg unary(std::string_view op, const Reg& a);
  Reg neg(const Reg& a) { return unary("neg", a); }
  Reg abs(const Reg& a) { return unary("abs", a); }
  Reg not_(const Reg& a) { return unary("not", a); }
  Reg sqrt(const Reg& a) { return unary("sqrt", a); }           // sqrt.rn
  Reg rcp(const Reg& a) { return unary("rcp", a); }             // rcp.rn
  Reg rcp_approx(const Reg& a) { return unary("rcp.approx", a); }
  Reg sqrt_approx(const Reg& a) { return unary("sqrt.approx", a); }
  Reg rsqrt_approx(const Reg& a) { return unary("rsqrt.approx", a); }
  Reg ex2_approx(const Reg& a) { return unary("ex2.approx", a); }
  Reg lg2_approx(const Reg& a) { return unary("lg2.approx", a); }
  Reg tanh_approx(const Reg& a) { return unary("tanh.approx", a); }
  Reg sin_approx(const Reg& a) { return unary("sin.approx", a); }
  Reg cos_approx(const Reg& a) { return unary("cos.approx", a); }

  // Bit manipulation.
  void bfe(const Reg& d, const Reg& a, const Operand& pos, const Operand& len);
  Reg bfe(const Reg& a, const Operand& pos, const Operand& len);
  void bfi(const Reg& d, const Operand& a, const Operand& b, const Operand& pos, const Operand& len);
  void prmt(const Reg& d, const Operand& a, const Operand& b, const Operand& selector);
  Reg prmt(const Reg& a, const Operand& b, const Operand& selector);
  // dp4a: d(u32 or s32) = c + sum of the four byte products; each operand
  // is extended by its own signedness (taken from the register types).
  void dp4a(const Reg& d, const Operand& a, const Operand& b, const Operand& c);
  // mma.sync.aligned.m16n8k32.row.col.s32: D (16 × 8 s32) = A (16 × 32) ·
  // B (32 × 8) + C over the warp, four 8-bit elements to a register of A
  // and B, signed (.s32 registers: .s8) or unsigned (.u32: .u8) by the
  // registers' type; D and C .s32. Every lane of the warp executes it. The
  // lane map is emu/exec_ops.cpp's (Launch::mma) and the PTX ISA's.
  void mma_m16n8k32(const std::array<Reg, 4>& d, const std::array<Reg, 4>& a, const std::array<Reg, 2>& b,
                    const std::array<Reg, 4>& c);

  // Compare and select.
  void setp(Cmp c, const Reg& p, const Operand& a, const Operand& b);
  Reg setp(Cmp c, const Operand& a, const Operand& b);
  void selp(const Reg& d, const Operand& a, const Operand& b, const Reg& p);
  Reg selp(const Operand& a, const Operand& b, const Reg& p, Type t);

  // ---- memory
  void ld(Space s, const Reg& d, const Addr& a, const MemOpt& o = {});
  void ld(Space s, const std::vector<Reg>& d, const Addr& a, const MemOpt& o = {});  // .v2/.v4
  void st(Space s, const Addr& a, const Operand& v, const MemOpt& o = {});
  void st(Space s, const Addr& a, const std::vector<Operand>& v, const MemOpt& o = {});
  Reg ld_global(Type t, const Addr& a) { Reg d = reg(t); ld(Space::global, d, a); return d; }
  Reg ld_global_nc(Type t, const Addr& a) {
    Reg d = reg(t);
    MemOpt o;
    o.nc = true;
    ld(Space::global, d, a, o);
    return d;
  }
  Reg ld_shared(Type t, const Addr& a) { Reg d = reg(t); ld(Space::shared, d, a); return d; }
  Reg ld_acquire_gpu(Type t, const Addr& a) {
    Reg d = reg(t);
    MemOpt o;
    o.order = Order::acquire;
    o.scope = Scope::gpu;
    ld(Space::global, d, a, o);
    return d;
  }
  void st_global(const Addr& a, const Operand& v) { st(Space::global, a, v); }
  void st_shared(const Addr& a, const Operand& v) { st(Space::shared, a, v); }
  void st_release_gpu(const Addr& a, const Operand& v) {
    MemOpt o;
    o.order = Order::release;
    o.scope = Scope::gpu;
    st(Space::global, a, v, o);
  }
  // Atomics. `d` receives the old value; red has none. cas takes cmp, val.
  void atom(AtomOp op, const Reg& d, Space s, const Addr& a, const Operand& b,
            Scope scope = Scope::gpu, Order order = Order::relaxed);
  void atom_cas(const Reg& d, Space s, const Addr& a, const Operand& cmp, const Operand& val,
                Scope scope = Scope::gpu, Order order = Order::relaxed);
  void red(AtomOp op, Space s, const Addr& a, const Operand& b, Scope scope = Scope::gpu,
           Order order = Order::relaxed);
  void fence(Order order, Scope scope);  // fence.acq_rel.gpu, fence.sc.sys
  void membar(Scope scope);              // membar.cta / .gl / .sys

  // ---- warp and block
  // shfl.sync.mode.b32 d[|p], a, b, c, membermask. c packs the clamp (bits
  // 0..4) and the segment mask (bits 8..12).
  void shfl(Shfl mode, const Reg& d, const Reg& a, const Operand& b, const Operand& c,
            uint32_t membermask = 0xffffffffu, const Reg* pout = nullptr);
  Reg shfl_bfly(const Reg& a, const Operand& lanemask);
  Reg shfl_down(const Reg& a, const Operand& delta);
  Reg shfl_up(const Reg& a, const Operand& delta);
  Reg shfl_idx(const Reg& a, const Operand& lane);
  void bar_sync(unsigned id = 0, std::optional<uint32_t> threads = std::nullopt);
  void bar_warp_sync(uint32_t membermask = 0xffffffffu);
  // sm_90: elect.sync d|p, membermask; griddepcontrol (programmatic launch).
  void elect_sync(const Reg& d, const Reg& p, uint32_t membermask = 0xffffffffu);
  void griddepcontrol_wait();
  // prefetch.global.L2 [a]: a hint to bring a's line into L2; moves no data
  // into registers, so it waits for nothing.
  void prefetch_l2(const Addr& a);
  void griddepcontrol_launch_dependents();

  // ---- control flow
  Label label(std::string_view hint);
  void place(const Label& l);
  void bra(const Label& l);
  void bra_if(const Reg& p, const Label& l);
  void bra_ifnot(const Reg& p, const Label& l);
  void ret();
  void exit();
  void trap();
  // Every instruction emitted inside fn carries @p (or @!p for unless).
  void when(const Reg& p, const std::function<void()>& fn);
  void unless(const Reg& p, const std::function<void()>& fn);
  void if_(const Reg& p, const std::function<void()>& then);
  void if_else(const Reg& p, const std::function<void()>& then, const std::function<void()>& otherwise);
  // for (i = begin; i < end; i += step) body(); i is an integer register;
  // the comparison is signed or unsigned by i's type; step must be > 0.
  // unroll = false: `.pragma "nounroll"` in the loop's head, for a loop
  // whose body already keeps enough loads in flight (ptxas's unrolling
  // would only add registers).
  void for_range(const Reg& i, const Operand& begin, const Operand& end, const Operand& step,
                 const std::function<void()>& body, bool unroll = true);

  // ---- emission
  // The .version this kernel needs (the target's minimum raised by the
  // instructions used), or target.version when given (checked).
  unsigned version() const;
  std::string emit() const;        // a complete module
  std::string emit_entry() const;  // the .entry alone (for multi-kernel modules)

  // Declares that `op` needs sm_`sm` and PTX `version` (errors if the target
  // is older). Public so that helpers outside the builder can use it.
  void require(std::string_view op, unsigned sm, unsigned version);

  // Internal emission of one instruction (guard applied). Public for
  // helpers; operands must already be rendered.
  void instr(const std::string& text);

 private:
  void binary(std::string_view op, const Reg& d, const Operand& a, const Operand& b);
  Reg binary_new(std::string_view op, const Reg& a, const Operand& b);
  std::string render(std::string_view op, Type t, const Operand& o, bool same_width_ok = false) const;
  std::string render_addr(std::string_view op, Space s, const Addr& a, unsigned access_bytes) const;
  // "{%r1, %r2}": a vector operand (ld/st .v2/.v4, mma's fragments).
  static std::string vector_operand(std::span<const Reg> regs);
  std::string mem_prefix(std::string_view op, Space s, const MemOpt& o, bool is_load);
  void check_no_guard(std::string_view what) const;
  void guarded(const std::string& g, const Reg& p, const std::function<void()>& fn);

  std::string name_;
  Target target_;
  unsigned needed_version_ = 0;
  std::optional<Dim3> maxntid_;
  uint32_t minnctapersm_ = 0;
  ParamList params_;
  std::vector<std::string> shared_decls_;
  std::set<std::string> symbols_;
  bool has_dynamic_shared_ = false;
  uint64_t static_shared_bytes_ = 0;
  std::map<Type, uint32_t> reg_counts_;
  std::vector<std::string> body_;
  std::string guard_;
  std::optional<InlineOp> inline_;
  uint32_t inline_shared_ = 0;   // the open op's shared bytes so far
  uint32_t label_counter_ = 0;
  std::set<std::string> labels_made_, labels_placed_, labels_used_;
};

// Several kernels in one module: one header (the highest version needed).
std::string emit_module(const std::vector<const Kernel*>& kernels);

}  // namespace ptxlm::ptx
