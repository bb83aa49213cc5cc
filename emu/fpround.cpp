// IEEE arithmetic and conversions under an explicit rounding mode. Built with
// -frounding-math so the compiler keeps each operation inside its fesetround
// bracket. Round-to-nearest paths avoid the mode switch.
#include <cfenv>
#include <cmath>
#include <cstring>

#include "program.h"

namespace ptxlm::emu {

namespace {

int fe_mode(Rnd r) {
    switch (r) {
    case Rnd::Rz: case Rnd::Rzi: return FE_TOWARDZERO;
    case Rnd::Rm: case Rnd::Rmi: return FE_DOWNWARD;
    case Rnd::Rp: case Rnd::Rpi: return FE_UPWARD;
    default: return FE_TONEAREST;
    }
}

// The process runs in round-to-nearest outside these brackets, so the
// nearest-even paths skip the mode switch (two libm calls that cost the
// emulator a third of its time when every integer conversion took them).
bool nearest(Rnd r) { return r == Rnd::Rn || r == Rnd::None; }

struct ModeGuard {
    int old;
    explicit ModeGuard(Rnd r) : old(std::fegetround()) { std::fesetround(fe_mode(r)); }
    ~ModeGuard() { std::fesetround(old); }
};

template <class T>
T op_t(FpOp op, T a, T b, T c) {
    switch (op) {
    case FpOp::Add: return a + b;
    case FpOp::Sub: return a - b;
    case FpOp::Mul: return a * b;
    case FpOp::Div: return a / b;
    case FpOp::Fma: return std::fma(a, b, c);
    case FpOp::Sqrt: return std::sqrt(a);
    }
    return a;
}

uint32_t bits(float f) { uint32_t u; std::memcpy(&u, &f, 4); return u; }
float from_bits(uint32_t u) { float f; std::memcpy(&f, &u, 4); return f; }

// Rounds `v` to a narrower float with `mbits` mantissa bits and
// exponent range [emin, emax] (normal exponents, unbiased), returning the
// encoded value. Handles subnormals, overflow and NaN. Used for f16.
uint16_t narrow(double v, Rnd r, int mbits, int ebias, int emax_biased) {
    uint16_t sign = std::signbit(v) ? 0x8000 : 0;
    if (std::isnan(v)) return uint16_t(sign | (uint16_t(emax_biased + 1) << mbits) | (1u << (mbits - 1)));
    double a = std::fabs(v);
    const double max_normal = std::ldexp(2.0 - std::ldexp(1.0, -mbits), emax_biased - ebias);
    const double min_normal = std::ldexp(1.0, 1 - ebias);
    bool neg = sign != 0;
    // Quantum at this magnitude.
    int e = a >= min_normal ? std::ilogb(a) : 1 - ebias;
    double q = std::ldexp(1.0, e - mbits);
    double k = a / q;                      // exact: q is a power of two
    double fl = std::floor(k), frac = k - fl;
    bool up;
    switch (r) {
    case Rnd::Rz: up = false; break;
    case Rnd::Rm: up = neg && frac > 0; break;
    case Rnd::Rp: up = !neg && frac > 0; break;
    default: up = frac > 0.5 || (frac == 0.5 && std::fmod(fl, 2.0) != 0); break;
    }
    double m = (fl + (up ? 1 : 0)) * q;
    if (std::isinf(a) || m > max_normal) {
        bool to_inf = std::isinf(a) || r == Rnd::Rn || r == Rnd::None || (r == Rnd::Rp && !neg) || (r == Rnd::Rm && neg);
        if (to_inf) return uint16_t(sign | (uint16_t(emax_biased + 1) << mbits));
        m = max_normal;
    }
    if (m == 0) return sign;
    if (m < min_normal) return uint16_t(sign | uint16_t(m / std::ldexp(1.0, 1 - ebias - mbits)));
    int me = std::ilogb(m);
    uint32_t mant = uint32_t(std::ldexp(m, mbits - me)) - (1u << mbits);
    return uint16_t(sign | (uint16_t(me + ebias) << mbits) | mant);
}

}  // namespace

float f32_round_op(FpOp op, Rnd r, float a, float b, float c) {
    if (nearest(r)) return op_t<float>(op, a, b, c);
    ModeGuard g(r);
    volatile float res = op_t<float>(op, a, b, c);
    return res;
}

double f64_round_op(FpOp op, Rnd r, double a, double b, double c) {
    if (nearest(r)) return op_t<double>(op, a, b, c);
    ModeGuard g(r);
    volatile double res = op_t<double>(op, a, b, c);
    return res;
}

float f32_from_f64(double v, Rnd r) {
    if (nearest(r)) return float(v);
    ModeGuard g(r);
    volatile double in = v;
    volatile float res = float(in);
    return res;
}

float f32_from_i64(int64_t v, bool is_signed, Rnd r) {
    if (nearest(r)) return is_signed ? float(v) : float(uint64_t(v));
    ModeGuard g(r);
    volatile float res = is_signed ? float(v) : float(uint64_t(v));
    return res;
}

double f64_from_i64(int64_t v, bool is_signed, Rnd r) {
    if (nearest(r)) return is_signed ? double(v) : double(uint64_t(v));
    ModeGuard g(r);
    volatile double res = is_signed ? double(v) : double(uint64_t(v));
    return res;
}

uint16_t f16_from_f32(float v, Rnd r) { return narrow(double(v), r, 10, 15, 30); }
uint16_t f16_from_f64(double v, Rnd r) { return narrow(v, r, 10, 15, 30); }
uint16_t bf16_from_f64(double v, Rnd r) { return narrow(v, r, 7, 127, 254); }

double add_round_odd(double a, double b) {
    double s = a + b;                      // round-to-nearest (the mode is restored after each bracket)
    if (std::isinf(s) || std::isnan(s)) return s;
    double bb = s - a;
    double e = (a - (s - bb)) + (b - bb);  // TwoSum: a + b == s + e exactly
    uint64_t u;
    std::memcpy(&u, &s, 8);
    if (e != 0 && !(u & 1)) s = std::nextafter(s, e > 0 ? INFINITY : -INFINITY);
    return s;
}

float f32_from_f16(uint16_t h) {
    uint32_t sign = uint32_t(h >> 15) << 31, e = (h >> 10) & 31, m = h & 1023;
    if (e == 31) return from_bits(sign | 0x7f800000u | (m << 13));
    if (e == 0) {
        float f = std::ldexp(float(m), -24);
        return sign ? -f : f;
    }
    return from_bits(sign | ((e + 112) << 23) | (m << 13));
}

uint16_t bf16_from_f32(float v, Rnd r) {
    uint32_t u = bits(v);
    if (std::isnan(v)) return uint16_t((u >> 16) | 0x40);
    uint32_t lo = u & 0xffff, hi = u >> 16;
    bool neg = u >> 31;
    bool up;
    switch (r) {
    case Rnd::Rz: up = false; break;
    case Rnd::Rm: up = neg && lo; break;
    case Rnd::Rp: up = !neg && lo; break;
    default: up = lo > 0x8000 || (lo == 0x8000 && (hi & 1)); break;
    }
    return uint16_t(hi + (up ? 1 : 0));   // carries into the exponent correctly, up to inf
}

float f32_from_bf16(uint16_t h) { return from_bits(uint32_t(h) << 16); }

}  // namespace ptxlm::emu
