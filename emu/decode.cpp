// Instruction decoding: one PTX statement (tokens) -> one pre-decoded Inst.
// Every modifier must be consumed by the instruction's handler; a leftover
// one, an unknown opcode or a wrong operand count fails the load.
#include <cstdlib>
#include <unordered_map>

#include "decoder.h"

namespace ptxlm::emu {

namespace detail {

bool Decoder::parse_imm(bool neg, Opnd* o) {
    const std::string& s = t_[p_++].text;
    o->kind = Opnd::Imm;
    auto hex = [&](size_t from, uint64_t* v) {
        char* e = nullptr;
        *v = std::strtoull(s.c_str() + from, &e, 16);
        return e && *e == 0 && s.size() > from;
    };
    if (s.size() == 10 && s[0] == '0' && (s[1] == 'f' || s[1] == 'F')) {
        if (!hex(2, &o->bits)) return fail("bad float immediate '" + s + "'");
        o->ik = Opnd::F32Bits;
        if (neg) o->bits ^= 0x80000000u;
    } else if (s.size() == 18 && s[0] == '0' && (s[1] == 'd' || s[1] == 'D')) {
        if (!hex(2, &o->bits)) return fail("bad double immediate '" + s + "'");
        o->ik = Opnd::F64Bits;
        if (neg) o->bits ^= 0x8000000000000000ull;
    } else if (s.find_first_of(".eE") != std::string::npos && !(s.size() > 1 && (s[1] == 'x' || s[1] == 'X'))) {
        char* e = nullptr;
        o->dec = std::strtod(s.c_str(), &e);
        if (*e) return fail("bad immediate '" + s + "'");
        if (neg) o->dec = -o->dec;
        o->ik = Opnd::Dec;
    } else {
        std::string body = s;
        if (!body.empty() && (body.back() == 'U' || body.back() == 'u')) body.pop_back();
        char* e = nullptr;
        errno = 0;
        uint64_t v = std::strtoull(body.c_str(), &e, 0);
        if (errno || *e || body.empty()) return fail("bad immediate '" + s + "'");
        o->bits = neg ? uint64_t(0) - v : v;
        o->ik = Opnd::Int;
    }
    return true;
}

bool Decoder::parse_operand(Opnd* o) {
    if (p_ >= e_) return fail("missing operand in '" + opname_ + "'");
    if (at("[")) {
        ++p_;
        o->kind = Opnd::Addr;
        if (p_ < e_ && t_[p_].kind == Tok::Ident) {
            const std::string& n = t_[p_].text;
            uint32_t r = sc_.find_reg(n);
            if (r != kNoReg) {
                o->reg = r;
            } else if (sc_.find_symbol(n, &o->space, &o->sym_addr)) {
                o->name = n;
            } else {
                return fail("unknown register or symbol '" + n + "' in address");
            }
            ++p_;
        } else if (p_ < e_ && t_[p_].kind == Tok::Num) {
            Opnd imm;
            if (!parse_imm(false, &imm) || imm.ik != Opnd::Int) return fail("bad absolute address");
            o->off = int64_t(imm.bits);
            o->space = Space::Generic;
            o->name = "#abs";
        } else {
            return fail("bad address operand");
        }
        if (at("+") || at("-")) {
            bool neg = at("-");
            ++p_;
            Opnd imm;
            if (p_ >= e_ || t_[p_].kind != Tok::Num || !parse_imm(neg, &imm) || imm.ik != Opnd::Int)
                return fail("bad address offset");
            o->off += int64_t(imm.bits);
        }
        if (!at("]")) return fail("expected ']' in address");
        ++p_;
        return true;
    }
    if (at("{")) {
        ++p_;
        o->kind = Opnd::Vec;
        for (;;) {
            if (p_ >= e_ || t_[p_].kind != Tok::Ident) return fail("bad vector operand");
            uint32_t r = sc_.find_reg(t_[p_].text);
            if (r == kNoReg) return fail("unknown register '" + t_[p_].text + "'");
            o->vec.push_back(r);
            ++p_;
            if (at(",")) { ++p_; continue; }
            if (at("}")) { ++p_; break; }
            return fail("bad vector operand");
        }
        return true;
    }
    bool neg = false;
    if (at("!")) { neg = true; ++p_; }
    if (at("-")) {
        ++p_;
        if (p_ >= e_ || t_[p_].kind != Tok::Num) return fail("bad negative immediate");
        return parse_imm(true, o);
    }
    if (p_ < e_ && t_[p_].kind == Tok::Num) return parse_imm(false, o);
    if (p_ >= e_ || t_[p_].kind != Tok::Ident) return fail("bad operand '" + (p_ < e_ ? t_[p_].text : "") + "'");
    const std::string& n = t_[p_++].text;
    o->name = n;
    o->neg = neg;
    if ((o->reg = sc_.find_reg(n)) != kNoReg) {
        o->kind = Opnd::Reg;
        if (at("|")) {
            ++p_;
            if (p_ >= e_ || (o->reg2 = sc_.find_reg(t_[p_].text)) == kNoReg) return fail("bad '|' predicate operand");
            ++p_;
        }
        return true;
    }
    if (sc_.find_special(n, &o->sp)) { o->kind = Opnd::Special; return true; }
    if (n == "%clock" || n == "%clock64" || n == "%globaltimer") { o->kind = Opnd::Special; o->sp = Special::NWarpId; o->name = n; return true; }
    if (sc_.find_symbol(n, &o->space, &o->sym_addr)) { o->kind = Opnd::Sym; return true; }
    if (n[0] == '%') return fail("unknown register '" + n + "'");
    o->kind = Opnd::Label;
    return true;
}

// A source operand of type `ty` as a register index (immediates become constants).
bool Decoder::src(const Opnd& o, Ty ty, uint32_t* reg) {
    switch (o.kind) {
    case Opnd::Reg:
        if (o.neg || o.reg2 != kNoReg) return fail("bad source operand in '" + opname_ + "'");
        *reg = o.reg;
        return true;
    case Opnd::Special:
        if (o.name == "%clock" || o.name == "%clock64" || o.name == "%globaltimer") return fail(o.name + " can only be read by mov");
        *reg = sc_.special(o.sp);
        return true;
    case Opnd::Sym:
        if (o.space == Space::Param) return fail("parameter '" + o.name + "' can only be read with ld.param");
        *reg = sc_.constant(o.sym_addr);
        return true;
    case Opnd::Imm: {
        uint64_t v = 0;
        unsigned bits = ty_bits(ty);
        if (ty == Ty::F32) {
            float f;
            if (o.ik == Opnd::F32Bits) { uint32_t u = uint32_t(o.bits); std::memcpy(&f, &u, 4); }
            else if (o.ik == Opnd::F64Bits) { double d; std::memcpy(&d, &o.bits, 8); f = float(d); }
            else if (o.ik == Opnd::Dec) f = float(o.dec);
            else f = float(int64_t(o.bits));
            uint32_t u; std::memcpy(&u, &f, 4); v = u;
        } else if (ty == Ty::F64) {
            double d;
            if (o.ik == Opnd::F64Bits) std::memcpy(&d, &o.bits, 8);
            else if (o.ik == Opnd::F32Bits) { float f; uint32_t u = uint32_t(o.bits); std::memcpy(&f, &u, 4); d = f; }
            else if (o.ik == Opnd::Dec) d = o.dec;
            else d = double(int64_t(o.bits));
            std::memcpy(&v, &d, 8);
        } else if (ty_float(ty)) {   // f16/bf16: PTX has no such literals; an integer is the raw bits
            if (o.ik != Opnd::Int) return fail("f16/bf16 immediates must be integers (raw bits) in '" + opname_ + "'");
            v = o.bits & (bits >= 32 ? 0xffffffffull : 0xffffull);
        } else {
            if (o.ik != Opnd::Int) return fail("float immediate for an integer operand in '" + opname_ + "'");
            v = o.bits;
            if (bits < 64) v &= (uint64_t(1) << bits) - 1;
        }
        *reg = sc_.constant(v);
        return true;
    }
    default:
        return fail("bad source operand '" + o.name + "' in '" + opname_ + "'");
    }
}

bool Decoder::address(const Opnd& o, Inst* in) {
    if (o.kind != Opnd::Addr) return fail("'" + opname_ + "' needs an address operand [..]");
    in->off = o.off;
    if (o.reg != kNoReg) {
        in->addr = o.reg;
        return true;
    }
    if (o.name == "#abs") return fail("absolute addresses are not supported");
    if (o.space != in->space) return fail("symbol '" + o.name + "' is not in the instruction's state space");
    in->addr = sc_.constant(0);
    in->off += int64_t(o.sym_addr);
    return true;
}

bool Decoder::run(uint32_t index, Inst* in) {
    idx_ = index;
    in->line = t_[p_].line;
    if (at("@")) {
        ++p_;
        if (at("!")) { in->guard_neg = true; ++p_; }
        if (p_ >= e_ || (in->guard = sc_.find_reg(t_[p_].text)) == kNoReg) return fail("bad guard predicate");
        ++p_;
    }
    if (p_ >= e_ || t_[p_].kind != Tok::Ident) return fail("expected an instruction");
    opname_ = t_[p_++].text;
    size_t dot = opname_.find('.');
    std::string base = opname_.substr(0, dot);
    while (dot != std::string::npos) {
        size_t nd = opname_.find('.', dot + 1);
        mods_.push_back(opname_.substr(dot, nd == std::string::npos ? std::string::npos : nd - dot));
        dot = nd;
    }
    while (p_ < e_) {
        Opnd o;
        if (!parse_operand(&o)) return false;
        ops_.push_back(std::move(o));
        if (p_ < e_) {
            if (!at(",")) return fail("expected ',' between operands of '" + opname_ + "'");
            ++p_;
        }
    }
    opname_ = base;
    for (auto& m : mods_) opname_ += m;
    mods_.insert(mods_.begin(), "@" + base);   // the opcode itself, consumed by decode
    return decode(in) && check_widths(*in);
}

// Register widths must match the instruction type as ptxas requires (sizes
// only: a .b32 register may hold an f32). Sub-word integer loads, stores and
// conversions may use wider registers.
bool Decoder::width(uint32_t reg, unsigned bits, bool at_least, const char* role) {
    if (reg == kNoReg) return true;
    unsigned w = sc_.reg_width(reg);
    if (w == 0 || w == bits || (at_least && w > bits && w != 1)) return true;
    return fail(std::string(role) + " " + sc_.reg_name(reg) + " of '" + opname_ + "' is " + std::to_string(w) +
                "-bit, expected " + (at_least ? "at least " : "") + std::to_string(bits) + "-bit");
}

bool Decoder::check_widths(const Inst& in) {
    const unsigned w = ty_bits(in.ty);
    if (!width(in.guard, 1, false, "guard")) return false;
    auto all = [&](unsigned dw, unsigned aw) {
        for (int i = 0; i < 4; ++i)
            if (!width(in.d[i], dw, false, "destination") || !width(in.a[i], aw, false, "source")) return false;
        return true;
    };
    switch (in.op) {
    case Op::Mul: case Op::Mad:
        if (MulMode(in.sub) == MulMode::Wide)
            return width(in.d[0], 2 * w, false, "destination") && width(in.a[0], w, false, "source") &&
                   width(in.a[1], w, false, "source") && width(in.a[2], 2 * w, false, "source");
        return all(w, w);
    case Op::Shl: case Op::Shr:
        return width(in.d[0], w, false, "destination") && width(in.a[0], w, false, "source") && width(in.a[1], 32, false, "shift");
    case Op::Setp:
        return width(in.d[0], 1, false, "destination") && width(in.pd, 1, false, "destination") &&
               width(in.a[0], w, false, "source") && width(in.a[1], w, false, "source") && width(in.a[2], 1, false, "predicate");
    case Op::Selp:
        return width(in.d[0], w, false, "destination") && width(in.a[0], w, false, "source") &&
               width(in.a[1], w, false, "source") && width(in.a[2], 1, false, "predicate");
    case Op::Cvt:   // ptxas lets cvt read and write registers wider than its types
        return width(in.d[0], w, true, "destination") && width(in.a[0], ty_bits(in.ty2), true, "source");
    case Op::Ld: case Op::St: {   // likewise for ld/st data registers
        const bool sub = true;
        for (int i = 0; i < 4; ++i)
            if (!width(in.d[i], w, sub, "destination") || !width(in.a[i], w, sub, "source")) return false;
        if (in.space == Space::Shared) return sc_.reg_width(in.addr) == 32 || width(in.addr, 64, false, "address");
        return width(in.addr, 64, false, "address");
    }
    case Op::Atom:
        if (in.space == Space::Shared && sc_.reg_width(in.addr) != 32 && !width(in.addr, 64, false, "address")) return false;
        if (in.space != Space::Shared && !width(in.addr, 64, false, "address")) return false;
        return all(w, w);
    case Op::Shfl:
        return all(32, 32) && width(in.pd, 1, false, "destination");
    case Op::Vote:
        return width(in.d[0], VoteMode(in.sub) == VoteMode::Ballot ? 32 : 1, false, "destination") &&
               width(in.a[0], 1, false, "predicate") && width(in.a[1], 32, false, "membermask");
    case Op::Dp4a: case Op::Prmt: case Op::Bar: return all(32, 32);
    case Op::Mma:
        for (uint32_t r : in.x)
            if (!width(r, 32, false, "source")) return false;
        return all(32, 32);
    case Op::Popc: case Op::Clz: return width(in.d[0], 32, false, "destination") && width(in.a[0], ty_bits(in.ty2), false, "source");
    case Op::Bfi:
        return width(in.d[0], w, false, "destination") && width(in.a[0], w, false, "source") && width(in.a[1], w, false, "source") &&
               width(in.a[2], 32, false, "source") && width(in.a4, 32, false, "source");
    case Op::Elect: return width(in.d[0], 32, false, "destination") && width(in.pd, 1, false, "destination") && width(in.a[0], 32, false, "membermask");
    case Op::Bfe:
        return width(in.d[0], w, false, "destination") && width(in.a[0], w, false, "source") &&
               width(in.a[1], 32, false, "source") && width(in.a[2], 32, false, "source");
    case Op::Clock:
        if (ty_bits(in.ty) != ty_bits(in.ty2)) return fail("'" + opname_ + "' reads a " + std::to_string(ty_bits(in.ty2)) + "-bit clock");
        return width(in.d[0], w, false, "destination");
    case Op::Pack: case Op::Unpack: {
        unsigned ew = w / in.vec;
        for (unsigned i = 0; i < in.vec; ++i)
            if (!width(in.op == Op::Pack ? in.a[i] : in.d[i], ew, false, "element")) return false;
        return width(in.op == Op::Pack ? in.d[0] : in.a[0], w, false, "register");
    }
    case Op::Nanosleep: return width(in.a[0], 32, false, "source");
    case Op::Prefetch: return width(in.addr, 64, false, "address");
    case Op::Bra: case Op::Exit: case Op::Nop: case Op::Trap: return true;
    default: return all(w, w);
    }
}

}  // namespace detail

bool decode_inst(const std::vector<Tok>& toks, size_t begin, size_t end, uint32_t inst_index,
                 DecodeScope& scope, Inst* out, std::string* err) {
    detail::Decoder d(toks, begin, end, scope, err);
    if (!d.run(inst_index, out)) return false;
    const VarianceMode& vm = variance_mode();
    if (vm.on) {
        // The perturbation of an instruction's result depends on its PC and
        // the seed (and, at run time, its inputs), never on the lane or launch.
        uint64_t h = (uint64_t(inst_index) + 1) * 0x9e3779b97f4a7c15ull ^ vm.seed * 0xc2b2ae3d27d4eb4full;
        h ^= h >> 31;
        h *= 0xbf58476d1ce4e5b9ull;
        out->salt = uint32_t(h ^ (h >> 29));
    } else {
        out->vary = Vary::None;   // decode_ops marks every .approx; only the mode keeps the marks
    }
    return true;
}

namespace {

VarianceMode read_variance_mode() {
    VarianceMode m;
    const char* v = std::getenv("PTXLM_EMU_VARIANCE");
    m.on = v && std::strcmp(v, "1") == 0;
    // The same variable (and parse) as the cooperative scheduler's seed.
    const char* s = std::getenv("PTXLM_EMU_SEED");
    if (s && *s) {
        char* e = nullptr;
        unsigned long long x = std::strtoull(s, &e, 0);
        if (e && *e == 0) m.seed = x;
    }
    return m;
}

VarianceMode& mode_storage() {
    static VarianceMode m = read_variance_mode();
    return m;
}

// The registers an instruction writes (destinations and predicate outputs).
template <class F>
void each_write(const Inst& in, F f) {
    for (uint32_t r : in.d)
        if (r != kNoReg) f(r);
    if (in.pd != kNoReg) f(in.pd);
}

// A mul ptxas may fuse into a later add: plain (no rounding modifier, no
// .sat), unguarded (else the add could see an older value on some lanes),
// and not overwriting its own sources.
bool fusable_mul(const Inst& m, const Inst& add) {
    return m.op == Op::Mul && m.ty == add.ty && m.rnd == Rnd::None && !m.sat && m.ftz == add.ftz &&
           m.guard == kNoReg && m.d[0] != m.a[0] && m.d[0] != m.a[1];
}

}  // namespace

const VarianceMode& variance_mode() { return mode_storage(); }

void set_variance_mode_for_testing(bool on, uint64_t seed) { mode_storage() = VarianceMode{on, seed}; }

void mark_fusions(std::vector<Inst>& code, const std::vector<uint32_t>& label_at) {
    std::vector<bool> label(code.size() + 1, false);
    for (uint32_t i : label_at)
        if (i < label.size()) label[i] = true;
    // The instruction that last wrote each register in the current
    // straight-line run (cleared at labels and after control flow).
    std::unordered_map<uint32_t, uint32_t> last;
    auto written_after = [&](uint32_t reg, uint32_t idx) {
        auto it = last.find(reg);
        return it != last.end() && it->second > idx;
    };
    for (uint32_t j = 0; j < code.size(); ++j) {
        if (label[j]) last.clear();
        Inst& in = code[j];
        if ((in.op == Op::Add || in.op == Op::Sub) && (in.ty == Ty::F32 || in.ty == Ty::F64) && in.rnd == Rnd::None) {
            for (int k = 0; k < 2; ++k) {
                auto it = last.find(in.a[k]);
                if (it == last.end()) continue;
                const Inst& m = code[it->second];
                if (!fusable_mul(m, in) || written_after(m.a[0], it->second) || written_after(m.a[1], it->second))
                    continue;
                in.vary = k == 0 ? Vary::FuseA : Vary::FuseB;
                in.a[2] = m.a[0];
                in.a[3] = m.a[1];
                break;
            }
        }
        each_write(in, [&](uint32_t r) { last[r] = j; });
        if (in.op == Op::Bra || in.op == Op::Exit || in.op == Op::Trap) last.clear();
    }
}

}  // namespace ptxlm::emu
