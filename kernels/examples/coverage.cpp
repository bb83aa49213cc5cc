// Coverage kernels: every instruction family the builder emits, assembled
// by ptxas in the tests (and usable by emu's tests as parser input). They
// compute nonsense but store every result, so nothing is dead code.
#include "kernels/examples/common.h"
#include "kernels/examples/examples.h"

namespace ptxlm::kernels {

using namespace ptx;

namespace {

// Stores v to out + slot*8 (the slot counter keeps stores distinct).
struct Sink {
  Kernel& k;
  Reg out;
  int64_t slot = 0;
  void operator()(const Reg& v) {
    MemOpt o;
    if (type_bits(v.type) < 32) o.mem_type = bits_type(type_bits(v.type));
    k.st(Space::global, at(out, 8 * slot++), v, o);
  }
};

GeneratedKernel integer_kernel(const Target& t) {
  ParamList params;
  params.add_ptr("out").add_u32("a").add_s32("b");
  LaunchGeometry g{{1, 1, 1}, {32, 1, 1}, 0};
  Kernel k = start_kernel("cover_int", t, params, g);
  Reg out = k.param("out"), a = k.param("a"), b = k.param("b");
  Sink sink{k, out};
  for (const char* op : {"add", "sub", "mul", "min", "max", "div", "rem", "mul.hi"}) {
    Reg du = k.reg(Type::u32), ds = k.reg(Type::s32);
    if (std::string(op) == "add") { k.add(du, a, 3u); k.add(ds, b, -3); }
    else if (std::string(op) == "sub") { k.sub(du, a, 3u); k.sub(ds, b, b); }
    else if (std::string(op) == "mul") { k.mul(du, a, a); k.mul(ds, b, 7); }
    else if (std::string(op) == "min") { k.min(du, a, 9u); k.min(ds, b, -9); }
    else if (std::string(op) == "max") { k.max(du, a, 9u); k.max(ds, b, -9); }
    else if (std::string(op) == "div") { k.div(du, a, 5u); k.div(ds, b, -5); }
    else if (std::string(op) == "rem") { k.rem(du, a, 5u); k.rem(ds, b, -5); }
    else { k.mul_hi(du, a, a); k.mul_hi(ds, b, b); }
    sink(du);
    sink(ds);
  }
  Reg w = k.mul_wide(a, 1000u), ws = k.mul_wide(b, -2);
  sink(w);
  sink(ws);
  Reg md = k.reg(Type::u64);
  k.mad_wide(md, a, 3u, w);
  sink(md);
  sink(k.mad_lo(a, 3u, a));
  sink(k.neg(b));
  sink(k.abs(b));
  sink(k.and_(a, 0xff00ff00u));
  sink(k.or_(a, 1u));
  sink(k.xor_(a, 0x80000000u));
  sink(k.not_(a));
  sink(k.shl(a, 3u));
  sink(k.shr(a, 3u));
  sink(k.shr(b, 31u));  // arithmetic
  sink(k.bfe(a, 8u, 8u));
  sink(k.bfe(b, 4u, 12u));
  Reg ins = k.reg(Type::u32);
  k.bfi(ins, a, b, 16u, 8u);
  sink(ins);
  sink(k.prmt(a, b, 0x3210u));
  sink(k.prmt(a, 0u, 0x4441u));  // byte 1, zero-extended
  sink(k.unary("popc", a));
  sink(k.unary("clz", w));
  sink(k.unary("brev", a));
  Reg du = k.reg(Type::u32), ds = k.reg(Type::s32);
  k.dp4a(du, a, a, 0u);
  k.dp4a(ds, b, a, 5);
  sink(du);
  sink(ds);
  for (Cmp c : {Cmp::eq, Cmp::ne, Cmp::lt, Cmp::le, Cmp::gt, Cmp::ge, Cmp::lo, Cmp::ls, Cmp::hi, Cmp::hs})
    sink(k.selp(a, 0u, k.setp(c, a, 17u), Type::u32));
  for (Cmp c : {Cmp::lt, Cmp::le, Cmp::gt, Cmp::ge})
    sink(k.selp(b, 1, k.setp(c, b, -17), Type::s32));
  Reg p = k.setp(Cmp::eq, a, 0u), q = k.setp(Cmp::ne, b, 0);
  Reg pq = k.and_(p, q);
  Reg px = k.xor_(pq, p), nq = k.not_(q);
  sink(k.selp(1u, 2u, k.or_(px, nq), Type::u32));
  Reg h = k.cvt(Type::u16, a), s64 = k.cvt(Type::s64, b);
  sink(h);
  sink(s64);
  Reg sat = k.reg(Type::s16);
  k.cvt(sat, b, Rnd::none, true);
  sink(sat);
  Reg lo = k.reg(Type::u32), hi = k.reg(Type::u32);
  k.unpack(lo, hi, w);
  Reg packed = k.reg(Type::b64);
  k.pack(packed, hi, lo);
  sink(packed);
  sink(k.bitcast(Type::f32, a));
  return finish(k, params, g, false);
}

GeneratedKernel float_kernel(const Target& t) {
  ParamList params;
  params.add_ptr("out").add_f32("x").add_f64("y");
  LaunchGeometry g{{1, 1, 1}, {32, 1, 1}, 0};
  Kernel k = start_kernel("cover_float", t, params, g);
  Reg out = k.param("out"), x = k.param("x"), y = k.param("y");
  Sink sink{k, out};
  for (const Reg& v : {x, y}) {
    sink(k.add(v, 1.5));
    sink(k.sub(v, v));
    sink(k.mul(v, 3.0));
    sink(k.div(v, 7.0));
    sink(k.min(v, 0.0));
    sink(k.max(v, 0.0));
    sink(k.fma(v, v, 2.0));
    sink(k.neg(v));
    sink(k.abs(v));
    sink(k.sqrt(v));
    sink(k.rcp(v));
    sink(k.rcp_approx(v));
    sink(k.rsqrt_approx(v));
  }
  for (const char* op : {"ex2.approx", "lg2.approx", "sin.approx", "cos.approx", "tanh.approx", "sqrt.approx"})
    sink(k.unary(op, x));
  for (Cmp c : {Cmp::eq, Cmp::ne, Cmp::lt, Cmp::le, Cmp::gt, Cmp::ge, Cmp::equ, Cmp::neu, Cmp::ltu, Cmp::leu,
                Cmp::gtu, Cmp::geu, Cmp::num, Cmp::nan})
    sink(k.selp(x, 0.0f, k.setp(c, x, 1.0f), Type::f32));
  sink(k.selp(y, 1.0, k.setp(Cmp::ltu, y, 0.0), Type::f64));
  // Conversions among f16/bf16/f32/f64 and integers.
  Reg h = k.cvt(Type::f16, x);
  sink(h);
  sink(k.cvt(Type::f32, h));
  Reg bh = k.cvt(Type::bf16, x, Rnd::rn);
  sink(bh);
  sink(k.cvt(Type::f32, bh));  // PTX 7.1
  sink(k.cvt(Type::f32, y, Rnd::rz));
  sink(k.cvt(Type::f64, x));
  for (Rnd r : {Rnd::rni, Rnd::rzi, Rnd::rmi, Rnd::rpi}) {
    sink(k.cvt(Type::s32, x, r));
    sink(k.cvt(Type::f32, x, r));
  }
  sink(k.cvt(Type::u64, y, Rnd::rzi));
  Reg si = k.cvt(Type::s32, x, Rnd::rni);
  sink(k.cvt(Type::f32, si));
  sink(k.cvt(Type::f64, si, Rnd::rz));
  sink(k.cvt(Type::f16, si));
  // Half arithmetic (f16 sm_53+, bf16 fma/min/max sm_80+).
  Reg h2 = k.reg(Type::f16x2);
  k.pack(h2, h, h);
  sink(k.add(h, h));
  sink(k.mul(h2, h2));
  sink(k.fma(h, h, h));
  sink(k.fma(bh, bh, bh));
  sink(k.max(bh, bh));
  sink(k.min(h2, h2));
  sink(k.neg(h));
  Reg hp = k.setp(Cmp::lt, h, h);
  sink(k.selp(1u, 0u, hp, Type::u32));
  return finish(k, params, g, false);
}

GeneratedKernel memory_kernel(const Target& t) {
  ParamList params;
  params.add_ptr("buf").add_ptr("flag");
  LaunchGeometry g{{4, 1, 1}, {128, 1, 1}, 1024};
  Kernel k = start_kernel("cover_memory", t, params, g);
  Symbol tile = k.shared_array("tile", Type::f32, 128, 16);
  Symbol counts = k.shared_array("counts", Type::u32, 4);
  Symbol dyn = k.dynamic_shared();
  Reg buf = k.param("buf"), flag = k.param("flag");
  Reg tid = k.special(Sreg::tid_x);
  Reg off = k.mul_wide(tid, 16u);
  Reg gaddr = k.add(buf, off);
  // Vector and narrow loads/stores, the non-coherent path.
  std::vector<Reg> v4 = {k.reg(Type::f32), k.reg(Type::f32), k.reg(Type::f32), k.reg(Type::f32)};
  k.prefetch_l2(at(gaddr, 16));
  k.ld(Space::global, v4, at(gaddr));
  std::vector<Reg> v2 = {k.reg(Type::u64), k.reg(Type::u64)};
  k.ld(Space::global, v2, at(gaddr), [] { MemOpt o; o.nc = true; return o; }());
  Reg byte = k.reg(Type::u32), sbyte = k.reg(Type::s32), half = k.reg(Type::u32);
  MemOpt u8; u8.mem_type = Type::u8;
  MemOpt s8; s8.mem_type = Type::s8;
  MemOpt u16; u16.mem_type = Type::u16;
  k.ld(Space::global, byte, at(gaddr, 3), u8);
  k.ld(Space::global, sbyte, at(gaddr, 5), s8);
  k.ld(Space::global, half, at(gaddr, 6), u16);
  Reg hv = k.reg(Type::f16);
  k.ld(Space::global, hv, at(gaddr, 8));
  k.st(Space::global, at(gaddr, 10), hv);
  k.st(Space::global, at(gaddr, 12), byte, u8);
  k.st(Space::global, at(gaddr, 13), 7, u8);
  k.st(Space::global, at(gaddr), {v4[3], v4[2], v4[1], v4[0]});
  k.st(Space::global, at(gaddr), {v2[1], v2[0]});
  // Shared memory: static arrays by symbol and register, the dynamic window.
  Reg saddr = k.mad_lo(tid, 4u, k.mov(Type::u32, Operand::symbol(tile.name)));
  k.st_shared(at(saddr), v4[0]);
  k.bar_sync(0);
  k.ld(Space::shared, v4, at(tile, 16));
  Reg daddr = k.mad_lo(tid, 8u, k.mov(Type::u32, Operand::symbol(dyn.name)));
  k.st(Space::shared, at(daddr), {v4[0], v4[1]});
  k.bar_sync(1, 128);
  // Ordering: acquire/release, relaxed, volatile, fences.
  Reg f = k.ld_acquire_gpu(Type::u32, at(flag));
  k.st_release_gpu(at(flag, 4), f);
  MemOpt rel; rel.order = Order::relaxed; rel.scope = Scope::sys;
  k.ld(Space::global, f, at(flag, 8), rel);
  k.st(Space::global, at(flag, 8), f, rel);
  MemOpt vol; vol.order = Order::volatile_;
  k.ld(Space::global, f, at(flag, 12), vol);
  k.fence(Order::acq_rel, Scope::gpu);
  k.fence(Order::sc, Scope::sys);
  k.membar(Scope::cta);
  k.membar(Scope::gpu);
  // Atomics and reductions, every op and scope.
  Reg old = k.reg(Type::u32), olds = k.reg(Type::s32), old64 = k.reg(Type::u64), oldf = k.reg(Type::f32);
  Reg oldd = k.reg(Type::f64);
  k.mov(old64, 1u);  // read below before any atom defines it
  k.atom(AtomOp::add, old, Space::global, at(flag, 16), 1u);
  k.atom(AtomOp::add, old64, Space::global, at(flag, 24), old64, Scope::sys);
  k.atom(AtomOp::add, oldf, Space::global, at(flag, 32), v4[0], Scope::cta);
  k.atom(AtomOp::add, oldd, Space::global, at(flag, 40), 1.0);
  k.atom(AtomOp::min, olds, Space::global, at(flag, 48), -1, Scope::gpu, Order::acquire);
  k.atom(AtomOp::max, old64, Space::global, at(flag, 56), old64, Scope::gpu, Order::acq_rel);
  k.atom(AtomOp::inc, old, Space::global, at(flag, 16), 100u);
  k.atom(AtomOp::dec, old, Space::global, at(flag, 16), 100u);
  k.atom(AtomOp::exch, oldf, Space::global, at(flag, 32), oldf, Scope::gpu, Order::release);
  k.atom(AtomOp::and_, old, Space::global, at(flag, 16), 0xffu);
  k.atom(AtomOp::or_, old, Space::global, at(flag, 16), old);
  k.atom(AtomOp::xor_, old64, Space::global, at(flag, 24), old64);
  k.atom_cas(old, Space::global, at(flag, 16), 0u, old);
  k.atom_cas(old64, Space::global, at(flag, 24), old64, 5u, Scope::sys);
  k.atom(AtomOp::add, old, Space::shared, at(counts, 4), 1u, Scope::cta);
  k.red(AtomOp::add, Space::global, at(flag, 32), oldf);
  k.red(AtomOp::max, Space::global, at(flag, 56), old64, Scope::gpu, Order::release);
  k.red(AtomOp::or_, Space::shared, at(counts), old, Scope::cta);
  k.st(Space::global, at(buf), {old, old});
  k.st(Space::global, at(buf, 8), {olds, olds});
  k.st(Space::global, at(buf, 16), {oldd, oldd});
  return finish(k, params, g, false);
}

GeneratedKernel control_kernel(const Target& t) {
  ParamList params;
  params.add_ptr("out").add_u32("n");
  LaunchGeometry g{{2, 2, 1}, {64, 2, 1}, 0};
  Kernel k = start_kernel("cover_control", t, params, g);
  Reg out = k.param("out"), n = k.param("n");
  Sink sink{k, out};
  for (Sreg s : {Sreg::tid_x, Sreg::tid_y, Sreg::tid_z, Sreg::ntid_x, Sreg::ntid_y, Sreg::ntid_z, Sreg::ctaid_x,
                 Sreg::ctaid_y, Sreg::ctaid_z, Sreg::nctaid_x, Sreg::nctaid_y, Sreg::nctaid_z, Sreg::laneid,
                 Sreg::warpid, Sreg::nwarpid, Sreg::smid, Sreg::clock, Sreg::clock64, Sreg::lanemask_lt,
                 Sreg::globaltimer})
    sink(k.special(s));
  Reg lane = k.special(Sreg::laneid);
  Reg fv = k.cvt(Type::f32, lane);
  sink(k.shfl_bfly(fv, 1));
  sink(k.shfl_down(lane, 2));
  sink(k.shfl_up(lane, 4));
  sink(k.shfl_idx(fv, lane));
  Reg d = k.reg(Type::u32), p = k.reg(Type::pred);
  k.shfl(Shfl::down, d, lane, 1, 0x101f, 0xffffffffu, &p);  // 16-lane segments, predicate out
  sink(k.selp(d, 0u, p, Type::u32));
  k.bar_warp_sync();
  Reg acc = k.mov(Type::u32, 0u), i = k.reg(Type::u32), j = k.reg(Type::s32);
  k.for_range(i, 0u, n, 1u, [&] {
    k.for_range(j, -3, 3, 2, [&] {
      k.if_else(k.setp(Cmp::lt, j, 0), [&] { k.add(acc, acc, i); }, [&] { k.sub(acc, acc, 1u); });
    });
  });
  Reg q = k.setp(Cmp::hi, acc, 100u);
  k.when(q, [&] { k.mov(acc, 100u); });
  k.unless(q, [&] { k.add(acc, acc, 1u); });
  Label skip = k.label("skip");
  k.bra_if(k.setp(Cmp::eq, acc, 7u), skip);
  sink(acc);
  k.place(skip);
  k.bar_sync(0);
  k.if_(k.setp(Cmp::eq, acc, 0u), [&] { k.exit(); });
  sink(acc);
  return finish(k, params, g, false);
}

// Only for sm_90 targets: features that raise the PTX version.
GeneratedKernel sm90_kernel(const Target& t) {
  ParamList params;
  params.add_ptr("out");
  LaunchGeometry g{{1, 1, 1}, {32, 1, 1}, 0};
  Kernel k = start_kernel("cover_sm90", t, params, g);
  Reg out = k.param("out");
  k.griddepcontrol_wait();
  Reg rank = k.special(Sreg::cluster_ctarank), d = k.reg(Type::u32), p = k.reg(Type::pred);
  k.elect_sync(d, p);
  Reg f = k.cvt(Type::f32, rank);
  Reg b = k.cvt(Type::bf16, f);
  Reg b2 = k.add(b, b);  // add.rn.bf16: sm_90
  Reg s = k.cvt(Type::s32, b2, Rnd::rzi);
  Reg old = k.reg(Type::bf16);
  k.when(p, [&] { k.atom(AtomOp::add, old, Space::global, at(out), b2); });  // atom.add.noftz.bf16
  k.st_global(at(out, 2), old);
  k.st_global(at(out, 4), s);
  k.st_global(at(out, 8), d);
  k.griddepcontrol_launch_dependents();
  return finish(k, params, g, false);
}

}  // namespace

std::vector<GeneratedKernel> builder_coverage_kernels(Target t) {
  std::vector<GeneratedKernel> out = {integer_kernel(t), float_kernel(t), memory_kernel(t), control_kernel(t)};
  if (t.sm >= 90) out.push_back(sm90_kernel(t));
  return out;
}

}  // namespace ptxlm::kernels
