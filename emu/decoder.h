// emu internals: the instruction decoder shared by decode.cpp (operands,
// register widths) and decode_ops.cpp (one handler per opcode).
#pragma once

#include <cerrno>
#include <cmath>
#include <cstring>
#include <string>
#include <vector>

#include "program.h"

namespace ptxlm::emu::detail {

struct Opnd {
    enum Kind { Reg, Imm, Special, Sym, Addr, Vec, Label } kind = Reg;
    uint32_t reg = kNoReg, reg2 = kNoReg;   // reg2: the "|p" half of d|p
    bool neg = false;                       // !%p
    // Immediates.
    enum ImmKind { Int, F32Bits, F64Bits, Dec } ik = Int;
    uint64_t bits = 0;
    double dec = 0;
    enum Special sp = Special::TidX;
    Space space = Space::Generic;
    uint64_t sym_addr = 0;
    int64_t off = 0;
    std::vector<uint32_t> vec;
    std::string name;
};

class Decoder {
public:
    Decoder(const std::vector<Tok>& t, size_t b, size_t e, DecodeScope& sc, std::string* err)
        : t_(t), p_(b), e_(e), sc_(sc), err_(err) {}

    bool run(uint32_t index, Inst* in);

private:
    const std::vector<Tok>& t_;
    size_t p_, e_;
    DecodeScope& sc_;
    std::string* err_;
    uint32_t idx_ = 0;
    std::string opname_;
    std::vector<std::string> mods_;
    std::vector<Opnd> ops_;

    bool fail(const std::string& m) { *err_ = m; return false; }
    // Rejects what ptxas would for this module's .version / .target.
    bool require(unsigned version, unsigned sm) {
        if (sc_.ptx_version() < version)
            return fail("'" + opname_ + "' requires PTX ISA .version " + std::to_string(version / 10) + "." +
                        std::to_string(version % 10) + " or later");
        if (sc_.sm_target() < sm) return fail("'" + opname_ + "' requires .target sm_" + std::to_string(sm) + " or later");
        return true;
    }
    bool at(const char* s) const { return p_ < e_ && t_[p_].text == s; }

    bool take(const char* m) {
        for (size_t i = 0; i < mods_.size(); ++i)
            if (mods_[i] == m) { mods_.erase(mods_.begin() + long(i)); return true; }
        return false;
    }
    template <size_t N>
    int take_one(const char* const (&names)[N]) {
        for (size_t i = 0; i < N; ++i)
            if (take(names[i])) return int(i);
        return -1;
    }
    Ty take_type() {
        static const std::pair<const char*, Ty> types[] = {
            {".pred", Ty::Pred}, {".b8", Ty::B8}, {".b16", Ty::B16}, {".b32", Ty::B32}, {".b64", Ty::B64},
            {".u8", Ty::U8}, {".u16", Ty::U16}, {".u32", Ty::U32}, {".u64", Ty::U64},
            {".s8", Ty::S8}, {".s16", Ty::S16}, {".s32", Ty::S32}, {".s64", Ty::S64},
            {".f16", Ty::F16}, {".bf16", Ty::BF16}, {".f32", Ty::F32}, {".f64", Ty::F64},
            {".f16x2", Ty::F16x2}, {".bf16x2", Ty::BF16x2}};
        for (size_t i = 0; i < mods_.size(); ++i)
            for (auto& [n, t] : types)
                if (mods_[i] == n) { mods_.erase(mods_.begin() + long(i)); return t; }
        return Ty::None;
    }
    Rnd take_rnd() {
        static const char* const r[] = {".rn", ".rz", ".rm", ".rp", ".rni", ".rzi", ".rmi", ".rpi"};
        int i = take_one(r);
        return i < 0 ? Rnd::None : Rnd(i + 1);
    }
    bool finish_mods() {
        if (!mods_.empty()) return fail("unsupported modifier '" + mods_[0] + "' in '" + opname_ + "'");
        return true;
    }
    bool need_type(Ty t, bool ok) {
        if (t == Ty::None) return fail("missing type in '" + opname_ + "'");
        if (!ok) return fail("unsupported type in '" + opname_ + "'");
        return true;
    }
    bool count(size_t n) {
        if (ops_.size() != n)
            return fail("'" + opname_ + "' takes " + std::to_string(n) + " operands, found " + std::to_string(ops_.size()));
        return true;
    }

    bool parse_imm(bool neg, Opnd* o);
    bool parse_operand(Opnd* o);
    bool src(const Opnd& o, Ty ty, uint32_t* reg);
    bool dst(const Opnd& o, uint32_t* reg) {
        if (o.kind != Opnd::Reg || o.neg) return fail("destination of '" + opname_ + "' must be a register");
        *reg = o.reg;
        return true;
    }
    bool pred(const Opnd& o, uint32_t* reg, bool allow_neg, bool* neg) {
        if (o.kind != Opnd::Reg) return fail("'" + opname_ + "' needs a predicate register");
        if (o.neg && !allow_neg) return fail("negated predicate not allowed here in '" + opname_ + "'");
        if (neg) *neg = o.neg;
        *reg = o.reg;
        return true;
    }
    bool address(const Opnd& o, Inst* in);
    bool decode(Inst* in);
    bool check_widths(const Inst& in);
    bool width(uint32_t reg, unsigned bits, bool at_least, const char* role);
    bool decode_memory(Inst* in, bool is_ld);
    bool decode_atom(Inst* in, bool is_red);
};

}  // namespace ptxlm::emu::detail
