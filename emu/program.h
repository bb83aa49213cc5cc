// emu internals: the pre-decoded form of a PTX module that parse.cpp and
// decode.cpp build and exec.cpp / alu.cpp run. Not part of the interface.
//
// Register file model: every PTX register (and every predicate) is one 64-bit
// slot per thread. Immediates, symbol addresses and the launch-constant
// special registers (%tid.x, %ctaid.y, %laneid ...) are given slots of their
// own ("constant registers") filled once per warp, so every source operand of
// a decoded instruction is a register index and fetching it is one load.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "interp.h"

namespace ptxlm::emu {

enum class Ty : uint8_t {
    None, Pred, B8, B16, B32, B64, U8, U16, U32, U64, S8, S16, S32, S64, F16, BF16, F32, F64,
    F16x2, BF16x2,   // two halves in a 32-bit register
};
inline unsigned ty_bits(Ty t) {
    switch (t) {
    case Ty::Pred: return 1;
    case Ty::B8: case Ty::U8: case Ty::S8: return 8;
    case Ty::B16: case Ty::U16: case Ty::S16: case Ty::F16: case Ty::BF16: return 16;
    case Ty::B32: case Ty::U32: case Ty::S32: case Ty::F32: case Ty::F16x2: case Ty::BF16x2: return 32;
    case Ty::B64: case Ty::U64: case Ty::S64: case Ty::F64: return 64;
    default: return 0;
    }
}
inline bool ty_signed(Ty t) { return t == Ty::S8 || t == Ty::S16 || t == Ty::S32 || t == Ty::S64; }
inline bool ty_float(Ty t) {
    return t == Ty::F16 || t == Ty::BF16 || t == Ty::F32 || t == Ty::F64 || t == Ty::F16x2 || t == Ty::BF16x2;
}
inline bool ty_half(Ty t) { return t == Ty::F16 || t == Ty::BF16 || t == Ty::F16x2 || t == Ty::BF16x2; }
inline bool ty_int(Ty t) { return !ty_float(t) && t != Ty::Pred && t != Ty::None; }

enum class Op : uint8_t {
    Mov, Add, Sub, Mul, Mad, Fma, Div, Rem, Min, Max, Neg, Abs, And, Or, Xor, Not, Shl, Shr,
    Setp, Selp, Cvt, Ld, St, Atom, Nop, Bar, Shfl, Vote, Dp4a, Prmt, Bfe,
    Ex2, Lg2, Rsqrt, Sqrt, Rcp, Tanh, Sin, Cos, Bra, Exit, Clock, Popc, Clz, Brev, Bfi, Elect, Pack, Unpack, Trap,
    Nanosleep, Prefetch, Mma,
};

enum class Rnd : uint8_t { None, Rn, Rz, Rm, Rp, Rni, Rzi, Rmi, Rpi };
enum class Cmp : uint8_t { Eq, Ne, Lt, Le, Gt, Ge, Equ, Neu, Ltu, Leu, Gtu, Geu, Num, Nan };
enum class BoolOp : uint8_t { None, And, Or, Xor };
enum class Space : uint8_t { Generic, Global, Shared, Param };
enum class MulMode : uint8_t { Lo, Hi, Wide };
enum class AtomOp : uint8_t { Add, Min, Max, Exch, Cas, And, Or, Xor, Inc, Dec };
enum class ShflMode : uint8_t { Up, Down, Bfly, Idx };
enum class VoteMode : uint8_t { All, Any, Ballot };
// Hardware-variance marks (PTXLM_EMU_VARIANCE=1; see variance_mode()):
// Approx: an .approx instruction whose result is perturbed within its ISA
// bound; DivFull: div.full.f32 (its bound differs from div.approx); FuseA /
// FuseB: a plain add/sub whose a (b) operand a plain mul produced, computed as
// one fma of that mul's sources, which are kept in a[2] and a[3].
enum class Vary : uint8_t { None, Approx, DivFull, FuseA, FuseB };

constexpr uint32_t kNoReg = 0xffffffffu;

struct Inst {
    Op op = Op::Nop;
    Ty ty = Ty::None;     // the instruction type (destination type for cvt)
    Ty ty2 = Ty::None;    // cvt source type; dp4a b type
    Rnd rnd = Rnd::None;
    bool ftz = false, sat = false, guard_neg = false;
    bool neg_c = false;   // predicate source negated (setp's c, vote's p)
    uint8_t vec = 1;      // ld/st vector width
    uint8_t sub = 0;      // Cmp / MulMode / AtomOp / ShflMode / VoteMode, by op
    BoolOp bop = BoolOp::None;
    Space space = Space::Generic;
    uint8_t nd = 0, na = 0;
    Vary vary = Vary::None;           // set at load only in hardware-variance mode
    uint32_t guard = kNoReg;          // predicate register
    uint32_t d[4] = {kNoReg, kNoReg, kNoReg, kNoReg};   // destinations
    uint32_t a[4] = {kNoReg, kNoReg, kNoReg, kNoReg};   // sources (registers or constant registers)
    uint32_t a4 = kNoReg;             // fifth source (bfi's length)
    uint32_t x[6] = {kNoReg, kNoReg, kNoReg, kNoReg, kNoReg, kNoReg};   // mma: B's two registers, then C's four
    uint32_t pd = kNoReg;             // second predicate destination (setp p|q, shfl d|p)
    uint32_t addr = kNoReg;           // address base register (ld/st/atom)
    int64_t off = 0;                  // address offset
    uint32_t target = 0;              // branch target (instruction index)
    uint32_t line = 0;                // PTX source line
    // Memory ordering (ld/st/atom/red, fence/membar): what the race checker
    // reads. sem: MemSem; scope: MemScope; nc: ld.global.nc.
    uint8_t sem = 0, scope = 0;
    bool nc = false;
    uint32_t salt = 0;                // variance mode: hash of the PC and seed
};

// Memory semantics and scopes as written (weak = none; fence.sc and membar
// are Sc; fence.acq_rel is AcqRel).
enum class MemSem : uint8_t { Weak, Relaxed, Acquire, Release, AcqRel, Volatile, Sc };
enum class MemScope : uint8_t { None, Cta, Gpu, Sys };

struct Constant { uint32_t reg; uint64_t value; };
enum class Special : uint8_t { TidX, TidY, TidZ, NtidX, NtidY, NtidZ, CtaX, CtaY, CtaZ,
                               NctaX, NctaY, NctaZ, LaneId, WarpId, NWarpId, SmId, NSmId,
                               LaneMaskLt, LaneMaskLe, LaneMaskEq, LaneMaskGe, LaneMaskGt,
                               ClusterCtaRank, ClusterNCtaRank };
struct SpecialReg { uint32_t reg; Special what; };

struct Kernel {
    KernelInfo info;
    std::vector<Inst> code;
    uint32_t nregs = 0;                 // all slots: declared + constant + special
    std::vector<uint8_t> reg_bits;      // declared width per slot (0 for constants, 32 for specials)
    std::vector<Constant> constants;
    std::vector<SpecialReg> specials;
    bool has_dynamic_shared = false;
    uint32_t dynamic_shared_offset = 0; // where .extern .shared arrays start
};

struct Program {
    std::vector<Kernel> kernels;
    std::vector<KernelInfo> infos;
    std::vector<std::string> lines;     // source lines, for fault messages
    std::string line_text(uint32_t line) const;
};

// decode.cpp: one instruction statement as tokens, turned into an Inst.
struct Tok {
    enum Kind : uint8_t { Ident, Num, Punct, End } kind = End;
    std::string text;
    uint32_t line = 0;
};

// What decode needs from the enclosing kernel: symbol and register lookup and
// constant-register creation.
class DecodeScope {
public:
    virtual ~DecodeScope() = default;
    // Register index for a name like "%r12", or kNoReg.
    virtual uint32_t find_reg(std::string_view name) const = 0;
    // Declared width in bits of a register slot (1 for predicates); 0 for
    // constant slots, which fit any operand. Name for diagnostics.
    virtual unsigned reg_width(uint32_t reg) const = 0;
    virtual std::string reg_name(uint32_t reg) const = 0;
    // Address of a symbol (shared offset or param offset) with its space, or false.
    virtual bool find_symbol(std::string_view name, Space* space, uint64_t* addr) const = 0;
    virtual bool find_special(std::string_view name, Special* what) const = 0;
    virtual uint32_t constant(uint64_t value) = 0;
    // The module's .version (major * 10 + minor) and .target sm number.
    virtual unsigned ptx_version() const = 0;
    virtual unsigned sm_target() const = 0;
    virtual uint32_t special(Special what) = 0;
    // Records a branch target label to resolve later at the given instruction.
    virtual void branch_to(std::string_view label, uint32_t inst_index, uint32_t line) = 0;
};

// Decodes tokens [begin, end) of one statement (guard included, ';' excluded)
// into `out`. On failure returns false with `err` set (without the line prefix).
bool decode_inst(const std::vector<Tok>& toks, size_t begin, size_t end, uint32_t inst_index,
                 DecodeScope& scope, Inst* out, std::string* err);

// fpround.cpp: float arithmetic under a directed IEEE rounding mode.
enum class FpOp : uint8_t { Add, Sub, Mul, Div, Fma, Sqrt };
float f32_round_op(FpOp op, Rnd r, float a, float b, float c);
double f64_round_op(FpOp op, Rnd r, double a, double b, double c);
// Conversions with a rounding mode.
float f32_from_f64(double v, Rnd r);
float f32_from_i64(int64_t v, bool is_signed, Rnd r);
double f64_from_i64(int64_t v, bool is_signed, Rnd r);
uint16_t f16_from_f32(float v, Rnd r);   // Rn / Rz / Rm / Rp
uint16_t f16_from_f64(double v, Rnd r);
uint16_t bf16_from_f64(double v, Rnd r);
// a + b rounded to odd at double precision: rounding that once more to a
// format of <= 51 bits gives the correctly rounded sum.
double add_round_odd(double a, double b);
float f32_from_f16(uint16_t h);
uint16_t bf16_from_f32(float v, Rnd r);
float f32_from_bf16(uint16_t h);

// Hardware-variance mode: PTXLM_EMU_VARIANCE=1 (read once per process), with
// PTXLM_EMU_SEED (default 1) mixed into every perturbation. Programs loaded
// while it is on carry the marks (Inst::vary); the rest run unchanged.
struct VarianceMode { bool on = false; uint64_t seed = 1; };
const VarianceMode& variance_mode();
// Tests switch the mode for the programs they load next.
void set_variance_mode_for_testing(bool on, uint64_t seed);
// decode.cpp: marks plain add/sub fed by a plain mul in the same straight-line
// run (no label between them; `label_at` holds the instruction index of every
// label) as ptxas may fuse them into an fma.
void mark_fusions(std::vector<Inst>& code, const std::vector<uint32_t>& label_at);

// alu.cpp: executes an arithmetic/logic/conversion instruction on the lanes of
// `mask`; regs is the warp's register file (slot * 32 + lane).
void exec_alu(const Inst& in, uint64_t* regs, uint32_t mask);

}  // namespace ptxlm::emu
