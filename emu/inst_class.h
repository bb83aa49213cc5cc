// Which hardware pipe a PTX instruction loads, for Stats::by_class: the
// classes a GPU's throughput table distinguishes (CUDA programming guide,
// "Arithmetic Instructions"), read at the PTX level. ptxas turns one PTX
// instruction into zero (a mov, a parameter load), one or a few SASS
// instructions; bench/sass counts the SASS of each hot loop.
#pragma once

#include <cstddef>
#include <cstdint>

#include "program.h"
#include "stats.h"

namespace ptxlm::emu {

inline InstClass inst_class(const Inst& in) {
    switch (in.op) {
    case Op::Add: case Op::Sub: case Op::Min: case Op::Max: case Op::Neg: case Op::Abs:
        return ty_float(in.ty) ? InstClass::Fp : InstClass::Alu;
    case Op::Mul: case Op::Mad: case Op::Fma:
        return ty_float(in.ty) ? InstClass::Fp : InstClass::Imad;
    case Op::Div: case Op::Rem:   // float: a reciprocal and multiplies; integer: a sequence
        return ty_float(in.ty) ? InstClass::Sfu : InstClass::Other;
    case Op::And: case Op::Or: case Op::Xor: case Op::Not: case Op::Shl: case Op::Shr: case Op::Setp:
    case Op::Selp: case Op::Prmt: case Op::Bfe: case Op::Bfi: case Op::Popc: case Op::Clz: case Op::Brev:
        return InstClass::Alu;
    case Op::Cvt:   // between integer widths it is a bit operation, not a conversion
        return ty_int(in.ty) && ty_int(in.ty2) ? InstClass::Alu : InstClass::Cvt;
    case Op::Dp4a: return InstClass::Dp4a;
    case Op::Ex2: case Op::Lg2: case Op::Rsqrt: case Op::Sqrt: case Op::Rcp: case Op::Tanh: case Op::Sin:
    case Op::Cos:
        return InstClass::Sfu;
    case Op::Ld:
        return in.space == Space::Shared ? InstClass::LdShared
               : in.space == Space::Param ? InstClass::Mov   // a constant-bank operand in SASS
                                          : InstClass::LdGlobal;
    case Op::St: return in.space == Space::Shared ? InstClass::StShared : InstClass::StGlobal;
    case Op::Prefetch: return InstClass::LdGlobal;   // issued to the load/store unit like a load
    case Op::Atom: return InstClass::Atomic;
    case Op::Shfl: case Op::Vote: case Op::Elect: return InstClass::Shfl;
    case Op::Bar: return InstClass::Sync;
    case Op::Nop: return in.sem != 0 ? InstClass::Sync : InstClass::Other;   // fence / membar
    case Op::Bra: case Op::Exit: case Op::Trap: case Op::Nanosleep: return InstClass::Branch;
    case Op::Mov: case Op::Pack: case Op::Unpack: return InstClass::Mov;
    case Op::Clock: return InstClass::Other;
    case Op::Mma: return InstClass::Tensor;
    }
    return InstClass::Other;
}

}  // namespace ptxlm::emu
