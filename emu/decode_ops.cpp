// Per-opcode decoding: modifiers, types and operands of each supported
// instruction, checked strictly (see decode.cpp for the operand forms).
#include "decoder.h"

namespace ptxlm::emu::detail {

struct OpEntry { const char* name; Op op; };
const OpEntry kOps[] = {
    {"mov", Op::Mov}, {"add", Op::Add}, {"sub", Op::Sub}, {"mul", Op::Mul}, {"mad", Op::Mad},
    {"fma", Op::Fma}, {"div", Op::Div}, {"rem", Op::Rem}, {"min", Op::Min}, {"max", Op::Max},
    {"neg", Op::Neg}, {"abs", Op::Abs}, {"and", Op::And}, {"or", Op::Or}, {"xor", Op::Xor},
    {"not", Op::Not}, {"shl", Op::Shl}, {"shr", Op::Shr}, {"setp", Op::Setp}, {"selp", Op::Selp},
    {"cvt", Op::Cvt}, {"cvta", Op::Mov}, {"ld", Op::Ld}, {"st", Op::St}, {"atom", Op::Atom},
    {"red", Op::Atom}, {"fence", Op::Nop}, {"membar", Op::Nop}, {"bar", Op::Bar}, {"barrier", Op::Bar},
    {"shfl", Op::Shfl}, {"vote", Op::Vote}, {"dp4a", Op::Dp4a}, {"prmt", Op::Prmt}, {"bfe", Op::Bfe},
    {"ex2", Op::Ex2}, {"lg2", Op::Lg2}, {"rsqrt", Op::Rsqrt}, {"sqrt", Op::Sqrt}, {"rcp", Op::Rcp},
    {"tanh", Op::Tanh}, {"sin", Op::Sin}, {"cos", Op::Cos}, {"bra", Op::Bra}, {"ret", Op::Exit},
    {"exit", Op::Exit}, {"popc", Op::Popc}, {"clz", Op::Clz}, {"brev", Op::Brev}, {"bfi", Op::Bfi},
    {"elect", Op::Elect}, {"griddepcontrol", Op::Nop}, {"trap", Op::Trap}, {"nanosleep", Op::Nanosleep},
    {"prefetch", Op::Prefetch}, {"mma", Op::Mma},
};

bool Decoder::decode(Inst* in) {
    std::string base = mods_[0].substr(1);
    mods_.erase(mods_.begin());
    const OpEntry* e = nullptr;
    for (auto& x : kOps)
        if (base == x.name) e = &x;
    if (!e) return fail("unsupported instruction '" + opname_ + "'");
    in->op = e->op;
    auto is_intb = [](Ty t) { return ty_int(t); };
    auto is_f3264 = [](Ty t) { return t == Ty::F32 || t == Ty::F64; };
    auto is_bits = [](Ty t) { return t == Ty::B16 || t == Ty::B32 || t == Ty::B64 || t == Ty::Pred; };
    // Scalar f16/bf16 arithmetic: round-to-nearest only, no .ftz/.sat; the
    // ISA version and target each needs are checked as ptxas does.
    auto half_ok = [&](Op op) {
        if (!ty_half(in->ty)) return false;
        bool mm = op == Op::Min || op == Op::Max;
        bool pair = in->ty == Ty::F16x2 || in->ty == Ty::BF16x2;
        if (pair && op == Op::Setp) return false;
        if (!(op == Op::Add || op == Op::Sub || op == Op::Mul || op == Op::Fma || mm || op == Op::Neg ||
              op == Op::Abs || op == Op::Setp))
            return false;
        if (in->ty == Ty::BF16 || in->ty == Ty::BF16x2)   // bf16 fma/min/max/neg/abs came with sm_80
            return (op == Op::Add || op == Op::Sub || op == Op::Mul || op == Op::Setp) ? require(78, 90) : require(70, 80);
        return mm ? require(70, 80) : require(42, 53);
    };
    auto three = [&](Ty t) {   // d, a, b
        return count(3) && dst(ops_[0], &in->d[0]) && src(ops_[1], t, &in->a[0]) && src(ops_[2], t, &in->a[1]);
    };
    auto two = [&](Ty t) { return count(2) && dst(ops_[0], &in->d[0]) && src(ops_[1], t, &in->a[0]); };
    auto float_mods = [&](bool rnd_required, bool approx_ok) {
        Rnd r = take_rnd();
        bool full = approx_ok && take(".full");
        bool approx = full || (approx_ok && take(".approx"));
        if (approx) in->vary = full ? Vary::DivFull : Vary::Approx;   // kept only in variance mode
        in->ftz = take(".ftz");
        in->sat = take(".sat");
        if (r > Rnd::Rp) return fail("bad rounding modifier in '" + opname_ + "'");
        if (rnd_required && r == Rnd::None && !approx) return fail("'" + opname_ + "' needs a rounding modifier");
        in->rnd = approx ? Rnd::None : r;
        return true;
    };
    switch (e->op) {
    case Op::Mov: {
        if (base == "cvta") {
            take(".to");
            if (!take(".global")) return fail("unsupported instruction '" + opname_ + "' (only cvta.to.global)");
            in->ty = take_type();
            if (!need_type(in->ty, in->ty == Ty::U64 || in->ty == Ty::B64) || !finish_mods()) return false;
            return two(in->ty);
        }
        in->ty = take_type();
        if (!need_type(in->ty, true) || !finish_mods() || !count(2)) return false;
        if (ops_[0].kind == Opnd::Vec || ops_[1].kind == Opnd::Vec) {   // mov.b32 %r, {%h1, %h2} and back
            bool pack = ops_[1].kind == Opnd::Vec;
            const Opnd& v = pack ? ops_[1] : ops_[0];
            if ((in->ty != Ty::B32 && in->ty != Ty::B64) || (v.vec.size() != 2 && v.vec.size() != 4) ||
                ty_bits(in->ty) / v.vec.size() < 8 || (pack ? ops_[0] : ops_[1]).kind != Opnd::Reg)
                return fail("unsupported vector form of '" + opname_ + "'");
            in->op = pack ? Op::Pack : Op::Unpack;
            in->vec = uint8_t(v.vec.size());
            for (size_t i = 0; i < v.vec.size(); ++i) (pack ? in->a : in->d)[i] = v.vec[i];
            (pack ? in->d[0] : in->a[0]) = (pack ? ops_[0] : ops_[1]).reg;
            return true;
        }
        if (ops_[1].kind == Opnd::Special && (ops_[1].name == "%clock" || ops_[1].name == "%clock64" ||
                                              ops_[1].name == "%globaltimer")) {
            in->op = Op::Clock;   // both are one monotonic counter here
            in->ty2 = ops_[1].name == "%clock" ? Ty::U32 : Ty::U64;
            return dst(ops_[0], &in->d[0]);
        }
        return two(in->ty);
    }
    case Op::Add: case Op::Sub: case Op::Mul: case Op::Mad: case Op::Div: case Op::Rem:
    case Op::Min: case Op::Max: {
        static const char* const mm[] = {".lo", ".hi", ".wide"};
        int mode = take_one(mm);
        in->ty = take_type();
        if (in->ty == Ty::None) return need_type(in->ty, false);
        if (ty_float(in->ty)) {
            if (!is_f3264(in->ty) && !half_ok(e->op)) return fail("unsupported type in '" + opname_ + "'");
            if (mode >= 0 || e->op == Op::Rem) return fail("unsupported modifier combination '" + opname_ + "'");
            bool need = e->op == Op::Mad || (e->op == Op::Div && in->ty == Ty::F64);
            if (!float_mods(need, e->op == Op::Div && in->ty == Ty::F32)) return false;
            if (e->op == Op::Mad) in->op = Op::Fma;
            if ((e->op == Op::Min || e->op == Op::Max) && (in->rnd != Rnd::None || in->sat))
                return fail("unsupported modifier combination '" + opname_ + "'");
        } else {
            if (!is_intb(in->ty) || ty_bits(in->ty) < 16) return fail("unsupported type in '" + opname_ + "'");
            if (e->op == Op::Mul || e->op == Op::Mad) {
                if (mode < 0) return fail("'" + opname_ + "' needs .lo, .hi or .wide");
                if (mode == 2 && ty_bits(in->ty) == 64) return fail("mul.wide/mad.wide take 16- or 32-bit types");
                in->sub = uint8_t(mode);
            } else if (mode >= 0) {
                return fail("unsupported modifier combination '" + opname_ + "'");
            }
            in->sat = take(".sat");
            if (in->sat && !(in->ty == Ty::S32 && (e->op == Op::Add || e->op == Op::Sub)))
                return fail("unsupported modifier combination '" + opname_ + "'");
            if (is_bits(in->ty) && e->op != Op::Add && e->op != Op::Sub)
                return fail("unsupported type in '" + opname_ + "'");
        }
        if (!finish_mods()) return false;
        if (in->op == Op::Mad || in->op == Op::Fma) {
            Ty ct = (in->op == Op::Mad && in->sub == 2) ? (ty_signed(in->ty) ? Ty::S64 : Ty::U64) : in->ty;
            if (in->op == Op::Mad && in->sub == 2 && ty_bits(in->ty) == 16) ct = ty_signed(in->ty) ? Ty::S32 : Ty::U32;
            return count(4) && dst(ops_[0], &in->d[0]) && src(ops_[1], in->ty, &in->a[0]) &&
                   src(ops_[2], in->ty, &in->a[1]) && src(ops_[3], ct, &in->a[2]);
        }
        return three(in->ty);
    }
    case Op::Fma:
        in->ty = take_type();
        if (!need_type(in->ty, is_f3264(in->ty) || half_ok(Op::Fma)) || !float_mods(true, false) || !finish_mods())
            return false;
        return count(4) && dst(ops_[0], &in->d[0]) && src(ops_[1], in->ty, &in->a[0]) &&
               src(ops_[2], in->ty, &in->a[1]) && src(ops_[3], in->ty, &in->a[2]);
    case Op::Neg: case Op::Abs:
        in->ty = take_type();
        if (ty_float(in->ty)) {
            in->ftz = take(".ftz");
            if (!need_type(in->ty, is_f3264(in->ty) || half_ok(e->op))) return false;
        } else if (!need_type(in->ty, ty_signed(in->ty) && ty_bits(in->ty) >= 16)) {
            return false;
        }
        return finish_mods() && two(in->ty);
    case Op::And: case Op::Or: case Op::Xor: case Op::Not:
        in->ty = take_type();
        if (!need_type(in->ty, is_bits(in->ty)) || !finish_mods()) return false;
        return e->op == Op::Not ? two(in->ty) : three(in->ty);
    case Op::Shl: case Op::Shr:
        in->ty = take_type();
        if (!need_type(in->ty, ty_int(in->ty) && ty_bits(in->ty) >= 16 && (e->op == Op::Shr || is_bits(in->ty))) ||
            !finish_mods())
            return false;
        return count(3) && dst(ops_[0], &in->d[0]) && src(ops_[1], in->ty, &in->a[0]) && src(ops_[2], Ty::U32, &in->a[1]);
    case Op::Setp: {
        static const char* const cmps[] = {".eq", ".ne", ".lt", ".le", ".gt", ".ge", ".equ", ".neu", ".ltu",
                                           ".leu", ".gtu", ".geu", ".num", ".nan", ".lo", ".ls", ".hi", ".hs"};
        static const char* const bops[] = {".and", ".or", ".xor"};
        int c = take_one(cmps);
        int b = take_one(bops);
        in->ty = take_type();
        in->ftz = take(".ftz");
        if (c < 0) return fail("'" + opname_ + "' needs a comparison");
        if (!need_type(in->ty, is_f3264(in->ty) || (ty_int(in->ty) && ty_bits(in->ty) >= 16) || half_ok(Op::Setp)) ||
            !finish_mods())
            return false;
        if (c >= 14) c = c == 14 ? int(Cmp::Lt) : c == 15 ? int(Cmp::Le) : c == 16 ? int(Cmp::Gt) : int(Cmp::Ge);
        if (c >= 6 && !ty_float(in->ty)) return fail("unordered comparison on integers in '" + opname_ + "'");
        in->sub = uint8_t(c);
        in->bop = BoolOp(b + 1);
        if (!count(b >= 0 ? 4 : 3)) return false;
        if (ops_[0].kind != Opnd::Reg || ops_[0].neg) return fail("bad setp destination");
        in->d[0] = ops_[0].reg;
        in->pd = ops_[0].reg2;
        if (!src(ops_[1], in->ty, &in->a[0]) || !src(ops_[2], in->ty, &in->a[1])) return false;
        if (b >= 0) return pred(ops_[3], &in->a[2], true, &in->neg_c);
        return true;
    }
    case Op::Selp:
        in->ty = take_type();
        if (!need_type(in->ty, !ty_half(in->ty) && in->ty != Ty::Pred && ty_bits(in->ty) >= 16) ||
            !finish_mods())
            return false;
        return count(4) && dst(ops_[0], &in->d[0]) && src(ops_[1], in->ty, &in->a[0]) &&
               src(ops_[2], in->ty, &in->a[1]) && pred(ops_[3], &in->a[2], false, nullptr);
    case Op::Cvt: {
        in->rnd = take_rnd();
        in->ftz = take(".ftz");
        in->sat = take(".sat");
        in->ty = take_type();
        in->ty2 = take_type();
        if (in->ty == Ty::None || in->ty2 == Ty::None || in->ty == Ty::Pred || in->ty2 == Ty::Pred ||
            in->ty == Ty::F16x2 || in->ty2 == Ty::F16x2 || in->ty == Ty::BF16x2 || in->ty2 == Ty::BF16x2)
            return fail("unsupported conversion '" + opname_ + "'");
        if (!finish_mods()) return false;
        // sm_80 has cvt.rn.bf16.f32 and cvt.f32.bf16; other bf16 conversions need sm_90.
        if (in->ty == Ty::BF16 || in->ty2 == Ty::BF16) {
            bool basic = (in->ty == Ty::BF16 && in->ty2 == Ty::F32) || (in->ty == Ty::F32 && in->ty2 == Ty::BF16);
            if (!(basic ? require(70, 80) : require(78, 90))) return false;
        }
        bool di = ty_int(in->ty), si = ty_int(in->ty2);
        bool int_rnd = in->rnd >= Rnd::Rni, flt_rnd = in->rnd != Rnd::None && !int_rnd;
        bool ok;
        if (di && si) ok = in->rnd == Rnd::None;
        else if (di) ok = int_rnd;                              // float -> int
        else if (si) ok = flt_rnd;                              // int -> float
        else if (ty_bits(in->ty) < ty_bits(in->ty2) || (in->ty != in->ty2 && ty_bits(in->ty) == 16))
            ok = flt_rnd;                                       // narrowing float (f16 <-> bf16 too)
        else if (in->ty == in->ty2) ok = int_rnd;               // round to integral
        else ok = in->rnd == Rnd::None;                         // widening float
        if (!ok) return fail("missing or wrong rounding modifier in '" + opname_ + "'");
        return count(2) && dst(ops_[0], &in->d[0]) && src(ops_[1], in->ty2, &in->a[0]);
    }
    case Op::Ld: return decode_memory(in, true);
    case Op::St: return decode_memory(in, false);
    case Op::Atom: return decode_atom(in, base == "red");
    case Op::Nop: {
        // Programmatic dependent launch: launches run one after another, so the
        // prerequisite grid has always completed and both forms are no-ops.
        if (base == "griddepcontrol") return require(78, 90) && (take(".wait") || take(".launch_dependents")) && finish_mods() && count(0);
        static const char* const sem[] = {".sc", ".acq_rel", ".acquire", ".release"};
        static const char* const scope[] = {".cta", ".gpu", ".sys", ".gl"};
        // fence.sc (the default) and membar are Sc; the scope as written
        // (membar.gl is gpu scope, membar.cta cta, membar.sys sys).
        int fs = base == "fence" ? take_one(sem) : -1;
        static const MemSem fence_sem[] = {MemSem::Sc, MemSem::AcqRel, MemSem::Acquire, MemSem::Release};
        in->sem = uint8_t(fs < 0 ? MemSem::Sc : fence_sem[fs]);
        int sc = take_one(scope);
        if (sc < 0) return fail("'" + opname_ + "' needs a scope");
        static const MemScope fence_scope[] = {MemScope::Cta, MemScope::Gpu, MemScope::Sys, MemScope::Gpu};
        in->scope = uint8_t(fence_scope[sc]);
        return finish_mods() && count(0);
    }
    case Op::Prefetch: {
        // prefetch{.global}.level [a] (.L1, .L2; sm_20), and
        // prefetch.global.L2::evict_last / ::evict_normal (PTX 7.4, sm_80):
        // a hint that moves no data. .local is refused (kernels here keep
        // no local arrays) and so is .tensormap.
        const bool global = take(".global");
        static const char* const levels[] = {".L1", ".L2", ".L2::evict_last", ".L2::evict_normal"};
        const int lv = take_one(levels);
        if (lv < 0 || !finish_mods()) return fail("bad '" + opname_ + "' (prefetch{.global}.L1|.L2 [a])");
        if (lv >= 2 && !global) return fail("bad '" + opname_ + "' (an eviction priority needs .global)");
        if (lv >= 2 && !require(74, 80)) return false;
        in->space = global ? Space::Global : Space::Generic;
        return count(1) && address(ops_[0], in);
    }
    case Op::Nanosleep:   // nanosleep.u32 t (sm_70+): a hint; a cooperative launch yields the warp
        if (!take(".u32") || !finish_mods()) return fail("bad '" + opname_ + "' (nanosleep.u32 t)");
        return require(63, 70) && count(1) && src(ops_[0], Ty::U32, &in->a[0]);
    case Op::Bar: {
        if (base == "bar" && take(".warp")) {
            if (!take(".sync") || !finish_mods() || !count(1)) return fail("bad '" + opname_ + "'");
            in->op = Op::Nop;   // warp-converged at every instruction under the min-PC scheduler
            return true;
        }
        take(".cta");
        if (!take(".sync") && base == "bar") return fail("unsupported instruction '" + opname_ + "' (only bar.sync)");
        take(".aligned");
        if (!finish_mods()) return false;
        if (ops_.size() < 1 || ops_.size() > 2) return fail("'" + opname_ + "' takes 1 or 2 operands");
        if (ops_[0].kind == Opnd::Imm && ops_[0].bits > 15) return fail("barrier id must be 0..15");
        if (ops_.size() == 2 && ops_[1].kind == Opnd::Imm && (ops_[1].bits % 32 || ops_[1].bits == 0))
            return fail("barrier thread count must be a positive multiple of 32");
        if (!src(ops_[0], Ty::U32, &in->a[0])) return false;
        in->na = uint8_t(ops_.size());
        return ops_.size() == 1 || src(ops_[1], Ty::U32, &in->a[1]);
    }
    case Op::Shfl: {
        static const char* const modes[] = {".up", ".down", ".bfly", ".idx"};
        if (!take(".sync")) return fail("only shfl.sync is supported");
        int m = take_one(modes);
        if (m < 0 || !take(".b32") || !finish_mods()) return fail("unsupported instruction '" + opname_ + "'");
        in->sub = uint8_t(m);
        in->ty = Ty::B32;
        if (!count(5) || ops_[0].kind != Opnd::Reg || ops_[0].neg) return fail("bad shfl operands");
        in->d[0] = ops_[0].reg;
        in->pd = ops_[0].reg2;
        return src(ops_[1], Ty::B32, &in->a[0]) && src(ops_[2], Ty::U32, &in->a[1]) &&
               src(ops_[3], Ty::U32, &in->a[2]) && src(ops_[4], Ty::U32, &in->a[3]);
    }
    case Op::Vote: {
        static const char* const modes[] = {".all", ".any", ".ballot"};
        if (!take(".sync")) return fail("only vote.sync is supported");
        int m = take_one(modes);
        bool ok = m == 2 ? take(".b32") : take(".pred");
        if (m < 0 || !ok || !finish_mods()) return fail("unsupported instruction '" + opname_ + "'");
        in->sub = uint8_t(m);
        return count(3) && dst(ops_[0], &in->d[0]) && pred(ops_[1], &in->a[0], true, &in->neg_c) &&
               src(ops_[2], Ty::U32, &in->a[1]);
    }
    case Op::Dp4a:
        in->ty = take_type();
        in->ty2 = take_type();
        if (!need_type(in->ty, in->ty == Ty::U32 || in->ty == Ty::S32) ||
            !need_type(in->ty2, in->ty2 == Ty::U32 || in->ty2 == Ty::S32) || !finish_mods())
            return false;
        return count(4) && dst(ops_[0], &in->d[0]) && src(ops_[1], in->ty, &in->a[0]) &&
               src(ops_[2], in->ty2, &in->a[1]) && src(ops_[3], Ty::U32, &in->a[2]);
    case Op::Mma: {
        // mma.sync.aligned.m16n8k32.row.col.s32.{s8,u8}.{s8,u8}.s32 {d0..d3},
        // {a0..a3}, {b0, b1}, {c0..c3}: the integer shape of the tensor
        // cores that the 8-bit GEMVs take (no .satfinite: sums wrap).
        if (!take(".sync") || !take(".aligned") || !take(".m16n8k32") || !take(".row") || !take(".col"))
            return fail("only mma.sync.aligned.m16n8k32.row.col is supported");
        const Ty dt = take_type(), at = take_type(), bt = take_type(), ct = take_type();
        auto int8 = [](Ty t) { return t == Ty::S8 || t == Ty::U8; };
        if (dt != Ty::S32 || ct != Ty::S32 || !int8(at) || !int8(bt))
            return fail("unsupported types in '" + opname_ + "' (.s32, .s8 or .u8, .s8 or .u8, .s32)");
        if (!finish_mods() || !require(70, 80) || !count(4)) return false;
        in->ty = at;
        in->ty2 = bt;
        const size_t sizes[4] = {4, 4, 2, 4};
        for (size_t i = 0; i < 4; ++i)
            if (ops_[i].kind != Opnd::Vec || ops_[i].vec.size() != sizes[i])
                return fail("'" + opname_ + "' takes {4 registers}, {4}, {2}, {4}");
        for (size_t i = 0; i < 4; ++i) in->d[i] = ops_[0].vec[i], in->a[i] = ops_[1].vec[i];
        for (size_t i = 0; i < 2; ++i) in->x[i] = ops_[2].vec[i];
        for (size_t i = 0; i < 4; ++i) in->x[2 + i] = ops_[3].vec[i];
        in->nd = 4;
        return true;
    }
    case Op::Popc: case Op::Clz: case Op::Brev:
        in->ty = take_type();
        if (!need_type(in->ty, in->ty == Ty::B32 || in->ty == Ty::B64) || !finish_mods() || !count(2)) return false;
        if (e->op == Op::Brev) return two(in->ty);
        in->ty2 = in->ty;   // source type; the count is a .u32
        in->ty = Ty::U32;
        return dst(ops_[0], &in->d[0]) && src(ops_[1], in->ty2, &in->a[0]);
    case Op::Bfi:
        in->ty = take_type();
        if (!need_type(in->ty, in->ty == Ty::B32 || in->ty == Ty::B64) || !finish_mods()) return false;
        return count(5) && dst(ops_[0], &in->d[0]) && src(ops_[1], in->ty, &in->a[0]) && src(ops_[2], in->ty, &in->a[1]) &&
               src(ops_[3], Ty::U32, &in->a[2]) && src(ops_[4], Ty::U32, &in->a4);
    case Op::Elect:
        if (!require(80, 90)) return false;
        if (!take(".sync") || !finish_mods() || !count(2) || ops_[0].kind != Opnd::Reg || ops_[0].reg2 == kNoReg)
            return fail("unsupported form of '" + opname_ + "' (elect.sync d|p, membermask)");
        in->d[0] = ops_[0].reg;
        in->pd = ops_[0].reg2;
        return src(ops_[1], Ty::U32, &in->a[0]);
    case Op::Prmt: case Op::Bfe: {
        in->ty = take_type();
        bool ok = e->op == Op::Prmt ? in->ty == Ty::B32
                                    : (in->ty == Ty::U32 || in->ty == Ty::S32 || in->ty == Ty::U64 || in->ty == Ty::S64);
        if (!need_type(in->ty, ok) || !finish_mods()) return false;
        Ty bt = e->op == Op::Prmt ? Ty::B32 : Ty::U32;
        return count(4) && dst(ops_[0], &in->d[0]) && src(ops_[1], in->ty, &in->a[0]) &&
               src(ops_[2], bt, &in->a[1]) && src(ops_[3], bt, &in->a[2]);
    }
    case Op::Ex2: case Op::Lg2: case Op::Rsqrt: case Op::Tanh: case Op::Sin: case Op::Cos:
        if (!take(".approx")) return fail("'" + opname_ + "' needs .approx");
        in->ftz = take(".ftz");
        in->ty = take_type();
        if (!need_type(in->ty, in->ty == Ty::F32 || (e->op == Op::Rsqrt && in->ty == Ty::F64)) || !finish_mods())
            return false;
        if (in->ty == Ty::F32) in->vary = Vary::Approx;   // rsqrt.approx.f64 has no stated bound
        return two(in->ty);
    case Op::Sqrt: case Op::Rcp: {
        bool approx = take(".approx");
        in->rnd = take_rnd();
        in->ftz = take(".ftz");
        in->ty = take_type();
        if (!need_type(in->ty, is_f3264(in->ty)) || !finish_mods()) return false;
        if (approx == (in->rnd != Rnd::None) || in->rnd > Rnd::Rp || (approx && in->ty == Ty::F64 && e->op == Op::Sqrt))
            return fail("'" + opname_ + "' needs exactly one of .approx or .rn/.rz/.rm/.rp");
        if (approx) in->vary = Vary::Approx;
        return two(in->ty);
    }
    case Op::Bra:
        take(".uni");
        if (!finish_mods() || !count(1) || ops_[0].kind != Opnd::Label) return fail("bad branch '" + opname_ + "'");
        sc_.branch_to(ops_[0].name, idx_, in->line);
        return true;
    case Op::Trap:
        return finish_mods() && count(0);
    case Op::Exit:
        take(".uni");
        return finish_mods() && count(0);
    default:
        break;
    }
    return fail("unsupported instruction '" + opname_ + "'");
}

bool Decoder::decode_memory(Inst* in, bool is_ld) {
    static const char* const sems[] = {".weak", ".relaxed", ".acquire", ".release", ".volatile"};
    static const char* const scopes[] = {".cta", ".gpu", ".sys"};
    static const char* const spaces[] = {".global", ".shared", ".param"};
    static const char* const vecs[] = {".v2", ".v4"};
    int sem = take_one(sems);
    int scope = take_one(scopes);
    static const MemSem mem_sem[] = {MemSem::Weak, MemSem::Relaxed, MemSem::Acquire, MemSem::Release, MemSem::Volatile};
    in->sem = uint8_t(sem < 0 ? MemSem::Weak : mem_sem[sem]);
    in->scope = uint8_t(scope < 0 ? MemScope::None : MemScope(scope + 1));
    if ((sem == 1 || sem == 2 || sem == 3) != (scope >= 0)) return fail("'" + opname_ + "': .relaxed/.acquire/.release need a scope");
    if ((sem == 2 && !is_ld) || (sem == 3 && is_ld)) return fail("unsupported modifier combination '" + opname_ + "'");
    int sp = take_one(spaces);
    in->space = sp < 0 ? Space::Generic : Space(sp + 1);
    if (is_ld && take(".nc")) {
        if (in->space != Space::Global) return fail("'.nc' needs .global in '" + opname_ + "'");
        in->nc = true;
    }
    // Cache operators are hints without meaning in a sequential interpreter.
    static const char* const ld_cache[] = {".ca", ".cg", ".cs", ".lu", ".cv"};
    static const char* const st_cache[] = {".wb", ".cg", ".cs", ".wt"};
    if (is_ld) take_one(ld_cache); else take_one(st_cache);
    if (in->space == Space::Param && !is_ld) return fail("st.param is not supported in kernels");
    int v = take_one(vecs);
    in->vec = v < 0 ? 1 : v == 0 ? 2 : 4;
    in->ty = take_type();
    if (!need_type(in->ty, in->ty != Ty::Pred && in->ty != Ty::BF16) || !finish_mods()) return false;
    if (ty_half(in->ty)) return fail("unsupported type in '" + opname_ + "' (spell half loads .b16/.b32)");
    if (in->vec > 1 && sem > 0 && sem < 4) return fail("vector '" + opname_ + "' with .relaxed/.acquire/.release is not supported");
    if (!count(2)) return false;
    const Opnd& data = is_ld ? ops_[0] : ops_[1];
    if (!address(is_ld ? ops_[1] : ops_[0], in)) return false;
    if (in->vec > 1) {
        if (data.kind != Opnd::Vec || data.vec.size() != in->vec)
            return fail("'" + opname_ + "' needs a {..} operand of " + std::to_string(in->vec) + " registers");
        for (unsigned i = 0; i < in->vec; ++i) (is_ld ? in->d : in->a)[i] = data.vec[i];
        in->nd = is_ld ? in->vec : 0;
        return true;
    }
    if (is_ld) return dst(data, &in->d[0]);
    return src(data, in->ty, &in->a[0]);
}

bool Decoder::decode_atom(Inst* in, bool is_red) {
    static const char* const sems[] = {".relaxed", ".acquire", ".release", ".acq_rel"};
    static const char* const scopes[] = {".cta", ".gpu", ".sys"};
    static const char* const spaces[] = {".global", ".shared"};
    static const char* const ops[] = {".add", ".min", ".max", ".exch", ".cas", ".and", ".or", ".xor", ".inc", ".dec"};
    // Atomics are relaxed unless written otherwise, at gpu scope by default.
    static const MemSem atom_sem[] = {MemSem::Relaxed, MemSem::Acquire, MemSem::Release, MemSem::AcqRel};
    int asem = take_one(sems), ascope = take_one(scopes);
    in->sem = uint8_t(asem < 0 ? MemSem::Relaxed : atom_sem[asem]);
    in->scope = uint8_t(ascope < 0 ? MemScope::Gpu : MemScope(ascope + 1));
    int sp = take_one(spaces);
    in->space = sp < 0 ? Space::Generic : Space(sp + 1);
    int op = take_one(ops);
    if (op < 0) return fail("'" + opname_ + "' needs an operation");
    in->sub = uint8_t(op);
    in->ty = take_type();
    bool ok;
    AtomOp a = AtomOp(op);
    switch (a) {
    case AtomOp::Add: ok = in->ty == Ty::U32 || in->ty == Ty::S32 || in->ty == Ty::U64 || in->ty == Ty::F32 || in->ty == Ty::F64; break;
    case AtomOp::Min: case AtomOp::Max: ok = in->ty == Ty::U32 || in->ty == Ty::S32 || in->ty == Ty::U64 || in->ty == Ty::S64; break;
    case AtomOp::Inc: case AtomOp::Dec: ok = in->ty == Ty::U32; break;
    case AtomOp::And: case AtomOp::Or: case AtomOp::Xor: ok = in->ty == Ty::B32 || in->ty == Ty::B64; break;
    default: ok = in->ty == Ty::B32 || in->ty == Ty::B64 || in->ty == Ty::U32 || in->ty == Ty::U64 || in->ty == Ty::S32 ||
                  (a == AtomOp::Exch && in->ty == Ty::F32); break;
    }
    if (in->ty == Ty::BF16 && !require(78, 90)) return false;
    if (in->ty == Ty::F16 && !require(63, 70)) return false;
    if (take(".noftz")) ok = a == AtomOp::Add && (in->ty == Ty::F16 || in->ty == Ty::BF16);
    else if (in->ty == Ty::F16 || in->ty == Ty::BF16) ok = false;   // f16/bf16 adds need .noftz
    if (!need_type(in->ty, ok) || !finish_mods()) return false;
    size_t n = (is_red ? 2 : 3) + (a == AtomOp::Cas ? 1 : 0);
    if (is_red && (a == AtomOp::Cas || a == AtomOp::Exch)) return fail("unsupported instruction '" + opname_ + "'");
    if (!count(n)) return false;
    size_t i = 0;
    if (!is_red && !dst(ops_[i++], &in->d[0])) return false;
    if (!address(ops_[i++], in)) return false;
    if (!src(ops_[i++], in->ty, &in->a[0])) return false;
    if (a == AtomOp::Cas && !src(ops_[i++], in->ty, &in->a[1])) return false;
    return true;
}

}  // namespace ptxlm::emu::detail
