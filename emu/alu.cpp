// Arithmetic, logic, comparison and conversion instructions, applied to the
// lanes of an active mask. Values live in 64-bit slots; an instruction of
// type .t reads the low ty_bits(t) bits and writes its result zero-extended
// (signed narrow conversions sign-extend to 32 bits, as a .s32 register holds).
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>

#include "program.h"

namespace ptxlm::emu {

namespace {

template <class F>
inline void each(uint32_t m, F f) {
    if (m == 0xffffffffu) {
        for (int l = 0; l < 32; ++l) f(l);
    } else {
        while (m) {
            int l = __builtin_ctz(m);
            m &= m - 1;
            f(l);
        }
    }
}

inline uint64_t wmask(unsigned bits) { return bits >= 64 ? ~uint64_t(0) : (uint64_t(1) << bits) - 1; }
inline int64_t sext(uint64_t v, unsigned bits) {
    return bits >= 64 ? int64_t(v) : int64_t(v << (64 - bits)) >> (64 - bits);
}
inline float f32(uint64_t v) { float f; uint32_t u = uint32_t(v); std::memcpy(&f, &u, 4); return f; }
inline double f64(uint64_t v) { double d; std::memcpy(&d, &v, 8); return d; }
inline uint64_t bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
inline uint64_t bits(double d) { uint64_t u; std::memcpy(&u, &d, 8); return u; }
template <class T> inline T ftz(T x) { return std::fpclassify(x) == FP_SUBNORMAL ? std::copysign(T(0), x) : x; }
template <class T> inline T sat01(T x) { return std::isnan(x) ? T(0) : x < T(0) ? T(0) : x > T(1) ? T(1) : x; }

template <class T> inline T get(uint64_t v);
template <> inline float get<float>(uint64_t v) { return f32(v); }
template <> inline double get<double>(uint64_t v) { return f64(v); }

FpOp fp_op(Op op) {
    switch (op) {
    case Op::Add: return FpOp::Add;
    case Op::Sub: return FpOp::Sub;
    case Op::Mul: return FpOp::Mul;
    case Op::Div: return FpOp::Div;
    case Op::Fma: return FpOp::Fma;
    default: return FpOp::Sqrt;
    }
}

template <class T>
T round_op(FpOp op, Rnd r, T a, T b, T c) {
    if constexpr (sizeof(T) == 4) return f32_round_op(op, r, a, b, c);
    else return f64_round_op(op, r, a, b, c);
}

// Float min/max: the non-NaN operand wins; -0 is below +0.
template <class T>
T fminmax(T a, T b, bool is_max) {
    if (std::isnan(a)) return std::isnan(b) ? std::numeric_limits<T>::quiet_NaN() : b;
    if (std::isnan(b)) return a;
    if (a == b) return (std::signbit(a) != is_max) ? a : b;
    return (a < b) != is_max ? a : b;
}

template <class T>
bool fcmp(Cmp c, T a, T b) {
    bool un = std::isnan(a) || std::isnan(b);
    switch (c) {
    case Cmp::Eq: return !un && a == b;
    case Cmp::Ne: return !un && a != b;
    case Cmp::Lt: return !un && a < b;
    case Cmp::Le: return !un && a <= b;
    case Cmp::Gt: return !un && a > b;
    case Cmp::Ge: return !un && a >= b;
    case Cmp::Equ: return un || a == b;
    case Cmp::Neu: return un || a != b;
    case Cmp::Ltu: return un || a < b;
    case Cmp::Leu: return un || a <= b;
    case Cmp::Gtu: return un || a > b;
    case Cmp::Geu: return un || a >= b;
    case Cmp::Num: return !un;
    case Cmp::Nan: return un;
    }
    return false;
}

template <class T>
bool icmp(Cmp c, T a, T b) {
    switch (c) {
    case Cmp::Eq: return a == b;
    case Cmp::Ne: return a != b;
    case Cmp::Lt: return a < b;
    case Cmp::Le: return a <= b;
    case Cmp::Gt: return a > b;
    case Cmp::Ge: return a >= b;
    default: return false;
    }
}

// ---- Hardware-variance mode (Inst::vary, set at load) ----
//
// An .approx instruction's result is moved by a fraction of its ISA bound
// (docs/ARCHITECTURE.md, "emu", has the table with its sources):
//   ex2.approx.f32           2 ulp from the correctly rounded result
//   lg2.approx.f32           2^-22 absolute for a in (0.5, 2), else 2^-22 relative
//   rsqrt.approx.f32         2^-22.9 relative
//   sqrt.approx.f32          2^-23 relative
//   rcp.approx.f32           1 ulp
//   tanh.approx.f32          2^-11 relative
//   sin/cos.approx.f32       2^-20.5 absolute in [-2pi, 2pi], 2^-14.7 in [-100pi, 100pi],
//                            none stated outside (left unperturbed)
//   div.approx.f32           2 ulp for |b| in [2^-126, 2^126]; for 2^126 < |b| < 2^128
//                            the ISA's result: NaN for infinite a, else a signed zero
//   div.full.f32             2 ulp
//   rcp.approx(.ftz).f64     the ISA's semantics: the reciprocal of a's upper word,
//                            kept to its upper word (truncated or rounded up)
// rsqrt.approx.f64 has no stated bound and stays as without the mode. The
// fraction, one of {-1, -1/2, 0, +1/2, +1}, is a hash of the input bits and
// the instruction's salt (PC and PTXLM_EMU_SEED): the same program, inputs and
// seed give the same results. Only finite normal results of finite nonzero
// inputs (after .ftz) move; NaN, infinite and zero inputs, and NaN, infinite,
// zero and subnormal results, are as without the mode (ftz/sat apply after).

inline uint64_t mix64(uint64_t x) {
    x ^= x >> 30;
    x *= 0xbf58476d1ce4e5b9ull;
    x ^= x >> 27;
    x *= 0x94d049bb133111ebull;
    return x ^ (x >> 31);
}

double pick(uint32_t salt, uint64_t a, uint64_t b) {
    static const double frac[5] = {-1, -0.5, 0, 0.5, 1};
    return frac[mix64(mix64(a ^ (uint64_t(salt) << 32 | salt)) ^ (b * 0x9e3779b97f4a7c15ull)) % 5];
}

// The float spacing at |x| (the ulp of x's binade; 2^-149 below 2^-126).
double f32_ulp(double x) {
    int e;
    std::frexp(x, &e);   // |x| in [2^(e-1), 2^e)
    return std::ldexp(1.0, std::max(e - 1, -126) - 23);
}

// The float nearest exact + frac * bound, pulled one step back toward exact
// when rounding carried it past the bound; the rounded exact value if even
// that does not fit (a bound below half an ulp) or the result overflows.
float within(double exact, double bound, double frac) {
    float f = float(exact + frac * bound);
    if (std::fabs(double(f) - exact) > bound)
        f = std::nextafter(f, exact > double(f) ? INFINITY : -INFINITY);
    if (!std::isfinite(f) || std::fabs(double(f) - exact) > bound) return float(exact);
    return f;
}

// f32 .approx result for input x (divisor y for div); `base` is the result
// without the mode.
float vary_f32(const Inst& in, float x, float y, float base) {
    const double X = x, frac = pick(in.salt, bits(x), bits(y));
    if (in.op == Op::Div && in.vary == Vary::Approx) {
        const double ay = std::fabs(double(y));
        if (ay > 0x1p126 && ay < 0x1p128 && !std::isnan(x))
            return std::isinf(x) ? std::numeric_limits<float>::quiet_NaN()
                                 : std::copysign(0.0f, std::signbit(x) != std::signbit(y) ? -1.0f : 1.0f);
        if (!(ay >= 0x1p-126 && ay <= 0x1p126)) return base;
    }
    // The ISA's tables fix the results for NaN, infinite and zero inputs (ex2(0)
    // and cos(0) are exactly 1, tanh(inf) exactly 1): those stay as they are.
    auto ordinary = [](float v) { return std::isfinite(v) && v != 0; };
    if (!std::isnormal(base) || !ordinary(x) || (in.op == Op::Div && !ordinary(y))) return base;
    switch (in.op) {
    case Op::Ex2: {   // whole ulp steps from the correctly rounded result
        float r = float(std::exp2(X));
        for (int k = int(frac * 2); k != 0; k += k > 0 ? -1 : 1) r = std::nextafter(r, k > 0 ? INFINITY : -INFINITY);
        return std::isnormal(r) ? r : float(std::exp2(X));
    }
    case Op::Lg2: {
        double e = std::log2(X);
        return within(e, X > 0.5 && X < 2 ? 0x1p-22 : 0x1p-22 * std::fabs(e), frac);
    }
    case Op::Rsqrt: { double e = 1 / std::sqrt(X); return within(e, std::exp2(-22.9) * e, frac); }
    case Op::Sqrt: { double e = std::sqrt(X); return within(e, 0x1p-23 * e, frac); }
    case Op::Rcp: { double e = 1 / X; return within(e, f32_ulp(e), frac); }
    case Op::Tanh: { double e = std::tanh(X); return within(e, 0x1p-11 * std::fabs(e), frac); }
    case Op::Sin: case Op::Cos: {
        const double ax = std::fabs(X), pi = 3.14159265358979323846;
        if (ax > 100 * pi) return base;
        return within(in.op == Op::Sin ? std::sin(X) : std::cos(X), ax <= 2 * pi ? std::exp2(-20.5) : std::exp2(-14.7), frac);
    }
    case Op::Div: { double e = X / double(y); return within(e, 2 * f32_ulp(e), frac); }
    default: return base;
    }
}

// rcp.approx.f64: 1 / (a's upper 32 bits), kept to the upper 32 bits of the
// result, truncated or (by the hash) rounded up in magnitude.
double vary_rcp_f64(const Inst& in, double x, double base) {
    if (!std::isnormal(base) || !std::isnormal(x)) return base;
    const uint64_t hi = ~uint64_t(0) << 32;
    const double r = 1 / f64(bits(x) & hi);
    uint64_t rb = bits(r) & hi;
    if (pick(in.salt, bits(x), 0) > 0 && (bits(r) & ~hi)) rb += uint64_t(1) << 32;
    const double v = f64(rb);
    return std::isnormal(v) ? v : f64(bits(r) & hi);
}

// Variance-mode execution of a marked instruction of type T; false for one
// it leaves to exec_float.
template <class T>
bool exec_vary(const Inst& in, uint64_t* R, uint32_t m) {
    uint64_t* d = R + size_t(in.d[0]) * 32;
    const uint64_t* a = R + size_t(in.a[0]) * 32;
    const uint64_t* b = in.a[1] != kNoReg ? R + size_t(in.a[1]) * 32 : a;
    const bool fz = in.ftz && sizeof(T) == 4;
    auto fin = [&](T x) {
        if (fz) x = ftz(x);
        if (in.sat) x = sat01(x);
        return bits(x);
    };
    auto arg = [&](const uint64_t* p, int l) { T x = get<T>(p[l]); return fz ? ftz(x) : x; };
    if (in.vary == Vary::FuseA || in.vary == Vary::FuseB) {
        // One fma of the mul's sources: t = x*y; d = t + c  ->  fma(x, y, c);
        // t - c -> fma(x, y, -c); c - t -> fma(-x, y, c).
        const uint64_t* x = R + size_t(in.a[2]) * 32;
        const uint64_t* y = R + size_t(in.a[3]) * 32;
        const bool first = in.vary == Vary::FuseA, sub = in.op == Op::Sub;
        each(m, [&](int l) {
            T p = arg(x, l), c = first ? arg(b, l) : arg(a, l);
            if (sub && first) c = -c;
            if (sub && !first) p = -p;
            d[l] = fin(std::fma(p, arg(y, l), c));
        });
        return true;
    }
    if constexpr (sizeof(T) == 4) {
        each(m, [&](int l) {
            const float x = arg(a, l), y = arg(b, l);
            float base;
            switch (in.op) {   // as without the mode (exec_float)
            case Op::Ex2: base = std::exp2(x); break;
            case Op::Lg2: base = std::log2(x); break;
            case Op::Rsqrt: base = 1.0f / std::sqrt(x); break;
            case Op::Sqrt: base = std::sqrt(x); break;
            case Op::Rcp: base = 1.0f / x; break;
            case Op::Tanh: base = std::tanh(x); break;
            case Op::Sin: base = std::sin(x); break;
            case Op::Cos: base = std::cos(x); break;
            case Op::Div: base = x / y; break;
            default: base = x; break;
            }
            d[l] = fin(vary_f32(in, x, y, base));
        });
        return true;
    }
    if (in.op != Op::Rcp) return false;
    each(m, [&](int l) { double x = arg(a, l); d[l] = fin(vary_rcp_f64(in, x, 1 / x)); });
    return true;
}

// Floating-point instructions of type T (float or double).
template <class T>
void exec_float(const Inst& in, uint64_t* R, uint32_t m) {
    if (in.vary != Vary::None && exec_vary<T>(in, R, m)) return;
    uint64_t* d = R + size_t(in.d[0]) * 32;
    const uint64_t* a = R + size_t(in.a[0]) * 32;
    const uint64_t* b = in.a[1] != kNoReg ? R + size_t(in.a[1]) * 32 : a;
    const uint64_t* c = in.a[2] != kNoReg ? R + size_t(in.a[2]) * 32 : a;
    const bool fz = in.ftz && sizeof(T) == 4;
    auto fin = [&](T x) {
        if (fz) x = ftz(x);
        if (in.sat) x = sat01(x);
        return bits(x);
    };
    auto arg = [&](const uint64_t* p, int l) { T x = get<T>(p[l]); return fz ? ftz(x) : x; };
    switch (in.op) {
    case Op::Add: case Op::Sub: case Op::Mul: case Op::Div: case Op::Fma: {
        FpOp op = fp_op(in.op);
        if (in.rnd == Rnd::None || in.rnd == Rnd::Rn) {
            switch (op) {
            case FpOp::Add: each(m, [&](int l) { d[l] = fin(arg(a, l) + arg(b, l)); }); break;
            case FpOp::Sub: each(m, [&](int l) { d[l] = fin(arg(a, l) - arg(b, l)); }); break;
            case FpOp::Mul: each(m, [&](int l) { d[l] = fin(arg(a, l) * arg(b, l)); }); break;
            case FpOp::Div: each(m, [&](int l) { d[l] = fin(arg(a, l) / arg(b, l)); }); break;
            default: each(m, [&](int l) { d[l] = fin(std::fma(arg(a, l), arg(b, l), arg(c, l))); }); break;
            }
        } else {
            each(m, [&](int l) { d[l] = fin(round_op<T>(op, in.rnd, arg(a, l), arg(b, l), arg(c, l))); });
        }
        return;
    }
    case Op::Min: each(m, [&](int l) { d[l] = fin(fminmax<T>(arg(a, l), arg(b, l), false)); }); return;
    case Op::Max: each(m, [&](int l) { d[l] = fin(fminmax<T>(arg(a, l), arg(b, l), true)); }); return;
    case Op::Neg: each(m, [&](int l) { d[l] = fin(-arg(a, l)); }); return;
    case Op::Abs: each(m, [&](int l) { d[l] = fin(std::fabs(arg(a, l))); }); return;
    case Op::Ex2: each(m, [&](int l) { d[l] = fin(std::exp2(arg(a, l))); }); return;
    case Op::Lg2: each(m, [&](int l) { d[l] = fin(std::log2(arg(a, l))); }); return;
    case Op::Rsqrt: each(m, [&](int l) { d[l] = fin(T(1) / std::sqrt(arg(a, l))); }); return;
    case Op::Tanh: each(m, [&](int l) { d[l] = fin(std::tanh(arg(a, l))); }); return;
    case Op::Sin: each(m, [&](int l) { d[l] = fin(std::sin(arg(a, l))); }); return;
    case Op::Cos: each(m, [&](int l) { d[l] = fin(std::cos(arg(a, l))); }); return;
    case Op::Sqrt:
        each(m, [&](int l) { d[l] = fin(round_op<T>(FpOp::Sqrt, in.rnd, arg(a, l), T(0), T(0))); });
        return;
    case Op::Rcp:
        each(m, [&](int l) { d[l] = fin(round_op<T>(FpOp::Div, in.rnd, T(1), arg(a, l), T(0))); });
        return;
    case Op::Setp: break;
    default: return;
    }
}

uint64_t cvt_one(const Inst& in, uint64_t v) {
    const Ty dt = in.ty, st = in.ty2;
    const unsigned db = ty_bits(dt), sb = ty_bits(st);
    auto store_int = [&](int64_t x) -> uint64_t {
        if (ty_signed(dt) && db < 32) return uint64_t(x) & 0xffffffffu;
        return uint64_t(x) & wmask(db);
    };
    auto int_range = [&](double x) -> uint64_t {   // float -> int, saturating, NaN -> 0
        if (std::isnan(x)) return 0;
        if (ty_signed(dt)) {
            double lo = -std::ldexp(1.0, int(db) - 1), hi = std::ldexp(1.0, int(db) - 1);
            int64_t r = x <= lo ? int64_t(lo) : x >= hi ? int64_t(wmask(db - 1)) : int64_t(x);
            return store_int(r);
        }
        double hi = std::ldexp(1.0, int(db));
        return x <= 0 ? 0 : x >= hi ? wmask(db) : uint64_t(x);
    };
    auto integral = [&](double x) {
        switch (in.rnd) {
        case Rnd::Rni: return std::nearbyint(x);
        case Rnd::Rzi: return std::trunc(x);
        case Rnd::Rmi: return std::floor(x);
        case Rnd::Rpi: return std::ceil(x);
        default: return x;
        }
    };
    if (ty_int(st)) {
        bool s = ty_signed(st);
        int64_t x = s ? sext(v, sb) : int64_t(v & wmask(sb));
        if (ty_int(dt)) {
            if (in.sat) {
                if (ty_signed(dt)) {
                    int64_t lo = -int64_t(wmask(db - 1)) - 1, hi = int64_t(wmask(db - 1));
                    if (!s && uint64_t(x) > uint64_t(hi)) x = hi;
                    else if (s) x = x < lo ? lo : x > hi ? hi : x;
                } else {
                    if (s && x < 0) x = 0;
                    else if (db < 64 && uint64_t(x) > wmask(db)) x = int64_t(wmask(db));
                }
            }
            return ty_signed(dt) && db < 32 ? uint64_t(sext(uint64_t(x), db)) & 0xffffffffu : store_int(x);
        }
        if (dt == Ty::F32) {
            float f = f32_from_i64(x, s, in.rnd);
            return bits(in.sat ? sat01(f) : f);
        }
        if (dt == Ty::F16 || dt == Ty::BF16) {   // exact halves, summed rounded to odd, rounded once
            uint64_t u = uint64_t(x), lo = u & 0xffffffffu;
            double hi = s ? double(x - int64_t(lo)) : double(u - lo);
            double y = add_round_odd(hi, double(lo));
            if (in.sat) y = sat01(y);
            return dt == Ty::F16 ? f16_from_f64(y, in.rnd) : bf16_from_f64(y, in.rnd);
        }
        double f = f64_from_i64(x, s, in.rnd);
        return bits(in.sat ? sat01(f) : f);
    }
    // Float source.
    double x;
    if (st == Ty::F64) x = f64(v);
    else if (st == Ty::F16) x = f32_from_f16(uint16_t(v));
    else if (st == Ty::BF16) x = f32_from_bf16(uint16_t(v));
    else x = in.ftz ? ftz(f32(v)) : f32(v);
    if (ty_int(dt)) return int_range(integral(x));
    switch (dt) {
    case Ty::F16: case Ty::BF16: {
        double y = in.rnd >= Rnd::Rni ? integral(x) : x;
        if (in.sat) y = sat01(y);
        Rnd r = in.rnd >= Rnd::Rni ? Rnd::Rn : in.rnd;   // an integral value in range is exact
        return dt == Ty::F16 ? f16_from_f64(y, r) : bf16_from_f64(y, r);
    }
    case Ty::F32: {
        float f = st == Ty::F64 ? f32_from_f64(x, in.rnd) : float(integral(x));
        if (in.ftz) f = ftz(f);
        return bits(in.sat ? sat01(f) : f);
    }
    default: {
        double f = integral(x);
        return bits(in.sat ? sat01(f) : f);
    }
    }
}

// f16/bf16 arithmetic (scalar, or both halves of .f16x2/.bf16x2): operands
// widen exactly to double, products are exact there, sums are rounded to odd,
// and the result is rounded once.
uint64_t half_op(Op op, bool h, uint64_t av, uint64_t bv, uint64_t cv) {
    auto to = [h](uint64_t v) { return double(h ? f32_from_f16(uint16_t(v)) : f32_from_bf16(uint16_t(v))); };
    auto from = [h](double x) { return uint64_t(h ? f16_from_f64(x, Rnd::Rn) : bf16_from_f64(x, Rnd::Rn)); };
    switch (op) {
    case Op::Add: return from(add_round_odd(to(av), to(bv)));
    case Op::Sub: return from(add_round_odd(to(av), -to(bv)));
    case Op::Mul: return from(to(av) * to(bv));
    case Op::Fma: return from(add_round_odd(to(av) * to(bv), to(cv)));
    case Op::Min: return from(fminmax<double>(to(av), to(bv), false));
    case Op::Max: return from(fminmax<double>(to(av), to(bv), true));
    case Op::Neg: return (av ^ 0x8000u) & 0xffffu;
    case Op::Abs: return av & 0x7fffu;
    default: return 0;
    }
}

void exec_half(const Inst& in, uint64_t* R, uint32_t m) {
    const bool h = in.ty == Ty::F16 || in.ty == Ty::F16x2;
    const bool pair = in.ty == Ty::F16x2 || in.ty == Ty::BF16x2;
    uint64_t* d = R + size_t(in.d[0]) * 32;
    const uint64_t* a = R + size_t(in.a[0]) * 32;
    const uint64_t* b = in.a[1] != kNoReg ? R + size_t(in.a[1]) * 32 : a;
    const uint64_t* c = in.a[2] != kNoReg ? R + size_t(in.a[2]) * 32 : a;
    each(m, [&](int l) {
        uint64_t r = half_op(in.op, h, a[l] & 0xffff, b[l] & 0xffff, c[l] & 0xffff);
        if (pair) r |= half_op(in.op, h, (a[l] >> 16) & 0xffff, (b[l] >> 16) & 0xffff, (c[l] >> 16) & 0xffff) << 16;
        d[l] = r;
    });
}

uint64_t bfe(uint64_t a, uint32_t pos, uint32_t len, unsigned w, bool s) {
    pos &= 0xff;
    len &= 0xff;
    if (len == 0) return 0;
    uint64_t r = pos >= w ? 0 : a >> pos;
    unsigned keep = std::min<unsigned>(len, pos >= w ? 0 : w - pos);
    r &= wmask(keep);
    if (s) {
        unsigned sbit = std::min<unsigned>(pos + len - 1, w - 1);
        if ((a >> sbit) & 1) r |= ~wmask(keep);
    }
    return r & wmask(w);
}

}  // namespace

void exec_alu(const Inst& in, uint64_t* R, uint32_t m) {
    const unsigned w = ty_bits(in.ty);
    const uint64_t mk = wmask(w);
    uint64_t* d = R + size_t(in.d[0]) * 32;
    const uint64_t* a = in.a[0] != kNoReg ? R + size_t(in.a[0]) * 32 : nullptr;
    const uint64_t* b = in.a[1] != kNoReg ? R + size_t(in.a[1]) * 32 : nullptr;
    const uint64_t* c = in.a[2] != kNoReg ? R + size_t(in.a[2]) * 32 : nullptr;
    const bool sg = ty_signed(in.ty);

    if (in.op == Op::Setp) {
        uint64_t* q = in.pd != kNoReg ? R + size_t(in.pd) * 32 : nullptr;
        Cmp cm = Cmp(in.sub);
        each(m, [&](int l) {
            bool r;
            if (in.ty == Ty::F16) r = fcmp<float>(cm, f32_from_f16(uint16_t(a[l])), f32_from_f16(uint16_t(b[l])));
            else if (in.ty == Ty::BF16) r = fcmp<float>(cm, f32_from_bf16(uint16_t(a[l])), f32_from_bf16(uint16_t(b[l])));
            else if (in.ty == Ty::F32) r = fcmp<float>(cm, in.ftz ? ftz(f32(a[l])) : f32(a[l]), in.ftz ? ftz(f32(b[l])) : f32(b[l]));
            else if (in.ty == Ty::F64) r = fcmp<double>(cm, f64(a[l]), f64(b[l]));
            else if (sg) r = icmp<int64_t>(cm, sext(a[l], w), sext(b[l], w));
            else r = icmp<uint64_t>(cm, a[l] & mk, b[l] & mk);
            bool nr = !r;
            if (in.bop != BoolOp::None) {
                bool cv = (c[l] & 1) != in.neg_c;
                if (in.bop == BoolOp::And) { r = r && cv; nr = nr && cv; }
                else if (in.bop == BoolOp::Or) { r = r || cv; nr = nr || cv; }
                else { r = r != cv; nr = nr != cv; }
            }
            d[l] = r;
            if (q) q[l] = nr;
        });
        return;
    }
    if (in.op == Op::Cvt) { each(m, [&](int l) { d[l] = cvt_one(in, a[l]); }); return; }
    if (in.op == Op::Pack) {
        const unsigned ew = w / in.vec;
        each(m, [&](int l) {
            uint64_t r = 0;
            for (unsigned i = 0; i < in.vec; ++i) r |= (R[size_t(in.a[i]) * 32 + l] & wmask(ew)) << (i * ew);
            d[l] = r;
        });
        return;
    }
    if (in.op == Op::Unpack) {
        const unsigned ew = w / in.vec;
        each(m, [&](int l) {
            uint64_t v = a[l];
            for (unsigned i = 0; i < in.vec; ++i) R[size_t(in.d[i]) * 32 + l] = (v >> (i * ew)) & wmask(ew);
        });
        return;
    }
    if (ty_half(in.ty) && in.op != Op::Mov) { exec_half(in, R, m); return; }
    if (in.ty == Ty::F32 && in.op != Op::Mov && in.op != Op::Selp) { exec_float<float>(in, R, m); return; }
    if (in.ty == Ty::F64 && in.op != Op::Mov && in.op != Op::Selp) { exec_float<double>(in, R, m); return; }

    switch (in.op) {
    case Op::Mov: each(m, [&](int l) { d[l] = a[l] & mk; }); return;
    case Op::Selp: each(m, [&](int l) { d[l] = (c[l] & 1) ? a[l] & mk : b[l] & mk; }); return;
    case Op::Add:
        if (in.sat) each(m, [&](int l) {
            int64_t r = sext(a[l], 32) + sext(b[l], 32);
            d[l] = uint64_t(r < INT32_MIN ? INT32_MIN : r > INT32_MAX ? INT32_MAX : r) & mk;
        });
        else each(m, [&](int l) { d[l] = (a[l] + b[l]) & mk; });
        return;
    case Op::Sub:
        if (in.sat) each(m, [&](int l) {
            int64_t r = sext(a[l], 32) - sext(b[l], 32);
            d[l] = uint64_t(r < INT32_MIN ? INT32_MIN : r > INT32_MAX ? INT32_MAX : r) & mk;
        });
        else each(m, [&](int l) { d[l] = (a[l] - b[l]) & mk; });
        return;
    case Op::Mul: case Op::Mad: {
        MulMode mm = MulMode(in.sub);
        bool mad = in.op == Op::Mad;
        each(m, [&](int l) {
            __int128 x = sg ? __int128(sext(a[l], w)) : __int128(a[l] & mk);
            __int128 y = sg ? __int128(sext(b[l], w)) : __int128(b[l] & mk);
            __int128 p = x * y;
            uint64_t r;
            if (mm == MulMode::Lo) r = (uint64_t(p) + (mad ? c[l] : 0)) & mk;
            else if (mm == MulMode::Hi) r = (uint64_t(p >> w) + (mad ? c[l] : 0)) & mk;
            else r = (uint64_t(p) + (mad ? c[l] : 0)) & wmask(2 * w);
            d[l] = r;
        });
        return;
    }
    case Op::Div: case Op::Rem: {
        bool div = in.op == Op::Div;
        each(m, [&](int l) {
            uint64_t r;
            if (sg) {
                int64_t x = sext(a[l], w), y = sext(b[l], w);
                if (y == 0) r = div ? ~uint64_t(0) : uint64_t(x);
                else if (y == -1) r = div ? uint64_t(0) - uint64_t(x) : 0;
                else r = uint64_t(div ? x / y : x % y);
            } else {
                uint64_t x = a[l] & mk, y = b[l] & mk;
                r = y == 0 ? (div ? ~uint64_t(0) : x) : div ? x / y : x % y;
            }
            d[l] = r & mk;
        });
        return;
    }
    case Op::Min: case Op::Max: {
        bool mx = in.op == Op::Max;
        if (sg) each(m, [&](int l) { int64_t x = sext(a[l], w), y = sext(b[l], w); d[l] = uint64_t((x < y) != mx ? x : y) & mk; });
        else each(m, [&](int l) { uint64_t x = a[l] & mk, y = b[l] & mk; d[l] = (x < y) != mx ? x : y; });
        return;
    }
    case Op::Neg: each(m, [&](int l) { d[l] = (uint64_t(0) - a[l]) & mk; }); return;
    case Op::Abs: each(m, [&](int l) { int64_t x = sext(a[l], w); d[l] = (x < 0 ? uint64_t(0) - uint64_t(x) : uint64_t(x)) & mk; }); return;
    case Op::And: each(m, [&](int l) { d[l] = a[l] & b[l] & mk; }); return;
    case Op::Or: each(m, [&](int l) { d[l] = (a[l] | b[l]) & mk; }); return;
    case Op::Xor: each(m, [&](int l) { d[l] = (a[l] ^ b[l]) & mk; }); return;
    case Op::Not: each(m, [&](int l) { d[l] = ~a[l] & mk; }); return;
    case Op::Shl: each(m, [&](int l) { uint32_t s = uint32_t(b[l]); d[l] = s >= w ? 0 : (a[l] << s) & mk; }); return;
    case Op::Shr:
        if (sg) each(m, [&](int l) {
            uint32_t s = uint32_t(b[l]);
            d[l] = uint64_t(sext(a[l], w) >> (s >= w ? w - 1 : s)) & mk;
        });
        else each(m, [&](int l) { uint32_t s = uint32_t(b[l]); d[l] = s >= w ? 0 : ((a[l] & mk) >> s); });
        return;
    case Op::Dp4a: {
        bool sa = in.ty == Ty::S32, sb = in.ty2 == Ty::S32;
        each(m, [&](int l) {
            int64_t sum = (sa || sb) ? sext(c[l], 32) : int64_t(c[l] & 0xffffffffu);
            for (int i = 0; i < 4; ++i) {
                uint64_t x = (a[l] >> (8 * i)) & 0xff, y = (b[l] >> (8 * i)) & 0xff;
                sum += (sa ? sext(x, 8) : int64_t(x)) * (sb ? sext(y, 8) : int64_t(y));
            }
            d[l] = uint64_t(sum) & 0xffffffffu;
        });
        return;
    }
    case Op::Prmt:
        each(m, [&](int l) {
            uint64_t t = ((b[l] & 0xffffffffu) << 32) | (a[l] & 0xffffffffu);
            uint64_t r = 0;
            for (int i = 0; i < 4; ++i) {
                uint32_t sel = uint32_t(c[l] >> (4 * i)) & 0xf;
                uint64_t byte = (t >> (8 * (sel & 7))) & 0xff;
                if (sel & 8) byte = (byte & 0x80) ? 0xff : 0;
                r |= byte << (8 * i);
            }
            d[l] = r;
        });
        return;
    case Op::Bfe: each(m, [&](int l) { d[l] = bfe(a[l] & mk, uint32_t(b[l]), uint32_t(c[l]), w, sg); }); return;
    case Op::Popc: {
        const uint64_t sm = wmask(ty_bits(in.ty2));
        each(m, [&](int l) { d[l] = uint64_t(__builtin_popcountll(a[l] & sm)); });
        return;
    }
    case Op::Clz: {
        const unsigned sw = ty_bits(in.ty2);
        each(m, [&](int l) {
            uint64_t x = a[l] & wmask(sw);
            d[l] = x ? uint64_t(__builtin_clzll(x)) - (64 - sw) : sw;
        });
        return;
    }
    case Op::Brev:
        each(m, [&](int l) {
            uint64_t x = a[l], r = 0;
            for (unsigned i = 0; i < w; ++i) r |= ((x >> i) & 1) << (w - 1 - i);
            d[l] = r;
        });
        return;
    case Op::Bfi: {   // insert a's low bits into b at [pos, pos+len)
        const uint64_t* e = R + size_t(in.a4) * 32;
        each(m, [&](int l) {
            uint32_t pos = uint32_t(c[l]) & 0xff, len = uint32_t(e[l]) & 0xff;
            uint64_t r = b[l] & mk;
            if (pos < w && len) {
                unsigned n = std::min<unsigned>(len, w - pos);
                uint64_t fm = wmask(n) << pos;
                r = (r & ~fm) | ((a[l] << pos) & fm);
            }
            d[l] = r;
        });
        return;
    }
    default: return;
    }
}

}  // namespace ptxlm::emu
