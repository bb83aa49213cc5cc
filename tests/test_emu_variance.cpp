// emu's hardware-variance mode (PTXLM_EMU_VARIANCE=1): .approx results moved
// within their PTX ISA bounds, plain mul+add fused into one fma the way ptxas
// may, a tolerance of 0 that passes on emu only without the mode. The mode is
// switched per loaded program with set_variance_mode_for_testing (the
// variable itself is read once per process).
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "emu_test_util.h"
#include "program.h"

using namespace ptxlm::emu;
using namespace ptxlm::emu::testing_util;

namespace {

// Switches the mode for the programs loaded in its scope, then restores it.
struct ModeScope {
    VarianceMode saved = variance_mode();
    ModeScope(bool on, uint64_t seed) { set_variance_mode_for_testing(on, seed); }
    ~ModeScope() { set_variance_mode_for_testing(saved.on, saved.seed); }
};

// An elementwise kernel: out[i] = OP(x[i]) or OP(x[i], y[i]), type .f32 or .f64.
std::string elementwise(const std::string& name, const std::string& op, bool binary, bool f64 = false) {
    const std::string t = f64 ? "f64" : "f32", r = f64 ? "%fd" : "%f", sz = f64 ? "8" : "4";
    std::string s = ".visible .entry " + name + R"((.param .u64 px, .param .u64 py, .param .u64 po, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<8>;
    .reg .f32 %f<4>;
    .reg .f64 %fd<4>;
    mov.u32 %r1, %ctaid.x;
    mov.u32 %r2, %ntid.x;
    mov.u32 %r3, %tid.x;
    mad.lo.u32 %r1, %r1, %r2, %r3;
    ld.param.u32 %r2, [n];
    setp.ge.u32 %p1, %r1, %r2;
    @%p1 bra DONE;
    ld.param.u64 %rd1, [px];
    ld.param.u64 %rd2, [py];
    ld.param.u64 %rd3, [po];
    mul.wide.u32 %rd4, %r1, )" + sz + R"(;
    add.u64 %rd1, %rd1, %rd4;
    add.u64 %rd2, %rd2, %rd4;
    add.u64 %rd3, %rd3, %rd4;
    ld.global.)" + t + " " + r + "1, [%rd1];\n    ld.global." + t + " " + r + "2, [%rd2];\n    " + op + " " + r + "3, " +
                    r + "1" + (binary ? ", " + r + "2" : std::string()) + ";\n    st.global." + t + " [%rd3], " + r +
                    R"(3;
DONE:
    ret;
}
)";
    return s;
}

// Runs `kernel` of `ptx` over x (and y) with the mode as given; the raw result bits.
template <class T>
std::vector<T> run(const std::string& ptx, const char* kernel, const std::vector<T>& x, const std::vector<T>& y,
                   bool vary, uint64_t seed = 1) {
    ModeScope mode(vary, seed);
    Emu e(ptx);
    EXPECT_TRUE(e.prog) << e.log;
    if (!e.prog) return {};
    const size_t n = x.size();
    uint64_t px = e.alloc(n * sizeof(T)), py = e.alloc(n * sizeof(T)), po = e.alloc(n * sizeof(T));
    e.put(px, x);
    e.put(py, y.empty() ? x : y);
    auto f = e.run(kernel, {uint32_t((n + 127) / 128), 1, 1}, {128, 1, 1},
                   Params().add(px).add(py).add(po).add(uint32_t(n)));
    EXPECT_FALSE(f.has_value()) << f->message;
    return e.get<T>(po, n);
}

uint64_t bits_of(double d) { uint64_t u; std::memcpy(&u, &d, 8); return u; }
bool same_bits(float a, float b) { return fbits(a) == fbits(b); }
bool same_bits(double a, double b) { return bits_of(a) == bits_of(b); }

// The float spacing at |x| (the test's own; 2^-149 below 2^-126).
double ulp32(double x) { return std::ldexp(1.0, std::max(std::ilogb(x), -126) - 23); }

// One perturbed instruction: its inputs, its exact value and its ISA bound.
struct Case {
    const char* name;
    std::string op;
    bool binary;
    std::function<float(std::mt19937&)> gen_x, gen_y;
    std::function<double(double, double)> exact;
    std::function<double(double x, double e)> bound;   // absolute bound on |result - exact|
};

float pow2_between(std::mt19937& g, float lo, float hi, bool any_sign) {
    float v = std::exp2(std::uniform_real_distribution<float>(lo, hi)(g));
    return any_sign && (g() & 1) ? -v : v;
}

std::vector<Case> cases() {
    const double pi = 3.14159265358979323846;
    auto uni = [](float lo, float hi) { return [=](std::mt19937& g) { return std::uniform_real_distribution<float>(lo, hi)(g); }; };
    auto mag = [](float lo, float hi, bool sign) { return [=](std::mt19937& g) { return pow2_between(g, lo, hi, sign); }; };
    auto div_ulp = [](double, double e) { return 2 * ulp32(e); };
    return {
        // PTX ISA 9.7.3.21: 2 ulp from the correctly rounded result (checked in
        // steps below), so 2.5 ulp from the exact value.
        {"ex2", "ex2.approx.f32", false, uni(-125, 127), nullptr, [](double x, double) { return std::exp2(x); },
         [](double, double e) { return 2.5 * ulp32(e); }},
        // 9.7.3.20: 2^-22 absolute for x in (0.5, 2), 2^-22 relative elsewhere.
        {"lg2", "lg2.approx.f32", false,
         [](std::mt19937& g) { return g() % 2 ? std::uniform_real_distribution<float>(0.5f, 2.0f)(g) : pow2_between(g, -120, 120, false); },
         nullptr, [](double x, double) { return std::log2(x); },
         [](double x, double e) { return x > 0.5 && x < 2 ? 0x1p-22 : 0x1p-22 * std::fabs(e); }},
        // 9.7.3.16: 2^-22.9 relative over the positive finite range.
        {"rsqrt", "rsqrt.approx.f32", false, mag(-126, 127, false), nullptr, [](double x, double) { return 1 / std::sqrt(x); },
         [](double, double e) { return std::exp2(-22.9) * e; }},
        // 9.7.3.15: 2^-23 relative.
        {"sqrt", "sqrt.approx.f32", false, mag(-126, 127, false), nullptr, [](double x, double) { return std::sqrt(x); },
         [](double, double e) { return 0x1p-23 * e; }},
        // 9.7.3.13: 1 ulp.
        {"rcp", "rcp.approx.f32", false, mag(-125, 125, true), nullptr, [](double x, double) { return 1 / x; },
         [](double, double e) { return ulp32(e); }},
        // 9.7.3.22: 2^-11 relative.
        {"tanh", "tanh.approx.f32", false, uni(-9, 9), nullptr, [](double x, double) { return std::tanh(x); },
         [](double, double e) { return 0x1p-11 * std::fabs(e); }},
        // 9.7.3.18/19: 2^-20.5 absolute in [-2pi, 2pi], 2^-14.7 in [-100pi, 100pi].
        {"sin", "sin.approx.f32", false,
         [=](std::mt19937& g) { return float(std::uniform_real_distribution<double>(-1, 1)(g) * (g() % 4 ? 2 * pi : 100 * pi)); },
         nullptr, [](double x, double) { return std::sin(x); },
         [=](double x, double) { return std::fabs(x) <= 2 * pi ? std::exp2(-20.5) : std::exp2(-14.7); }},
        {"cos", "cos.approx.f32", false,
         [=](std::mt19937& g) { return float(std::uniform_real_distribution<double>(-1, 1)(g) * (g() % 4 ? 2 * pi : 100 * pi)); },
         nullptr, [](double x, double) { return std::cos(x); },
         [=](double x, double) { return std::fabs(x) <= 2 * pi ? std::exp2(-20.5) : std::exp2(-14.7); }},
        // 9.7.3.8: div.approx 2 ulp for |b| in [2^-126, 2^126]; div.full 2 ulp.
        {"div_approx", "div.approx.f32", true, mag(-60, 60, true), mag(-60, 60, true),
         [](double x, double y) { return x / y; }, div_ulp},
        {"div_full", "div.full.f32", true, mag(-60, 60, true), mag(-60, 60, true),
         [](double x, double y) { return x / y; }, div_ulp},
    };
}

// Every perturbed result lies within the ISA bound of the exact value, a good
// share sit at or near the bound, and the mode does move results.
TEST(EmuVariance, ApproxResultsStayWithinTheIsaBounds) {
    for (const Case& c : cases()) {
        SCOPED_TRACE(c.name);
        std::mt19937 g(7);
        const size_t n = 4096;
        std::vector<float> x(n), y(n);
        for (size_t i = 0; i < n; ++i) {
            x[i] = c.gen_x(g);
            y[i] = c.gen_y ? c.gen_y(g) : 0.0f;
        }
        const std::string ptx = elementwise(c.name, c.op, c.binary);
        auto base = run(ptx, c.name, x, y, false);
        auto var = run(ptx, c.name, x, y, true);
        ASSERT_EQ(var.size(), n);
        size_t moved = 0, near_bound = 0, checked = 0;
        double worst = 0;
        for (size_t i = 0; i < n; ++i) {
            if (!std::isnormal(base[i])) {
                EXPECT_TRUE(same_bits(var[i], base[i])) << "x=" << x[i];
                continue;
            }
            ++checked;
            const double e = c.exact(x[i], y[i]), b = c.bound(x[i], e), err = std::fabs(double(var[i]) - e);
            worst = std::max(worst, err / b);
            EXPECT_LE(err, b * (1 + 1e-9)) << "x=" << x[i] << " y=" << y[i] << " exact=" << e << " got=" << var[i];
            if (std::string(c.name) == "ex2") {   // whole ulp steps from the correctly rounded result
                float cr = float(e);
                EXPECT_LE(std::abs(int64_t(fbits(var[i])) - int64_t(fbits(cr))), 2) << "x=" << x[i];
            }
            if (!same_bits(var[i], base[i])) ++moved;
            if (err >= 0.5 * b) ++near_bound;
        }
        EXPECT_GT(checked, n * 9 / 10);
        // rcp's 1 ulp leaves only the two floats around the exact value.
        EXPECT_GT(moved, checked / 3) << "the mode must perturb";
        EXPECT_GT(near_bound, checked / 4) << "a good share at or near the bound (worst " << worst << " of the bound)";
    }
}

// Without the mode the results are today's: the C library's functions and
// exactly rounded division.
TEST(EmuVariance, WithoutTheModeResultsAreUnchanged) {
    std::mt19937 g(3);
    const size_t n = 1024;
    for (const Case& c : cases()) {
        SCOPED_TRACE(c.name);
        std::vector<float> x(n), y(n);
        for (size_t i = 0; i < n; ++i) {
            x[i] = c.gen_x(g);
            y[i] = c.gen_y ? c.gen_y(g) : 0.0f;
        }
        auto base = run(elementwise(c.name, c.op, c.binary), c.name, x, y, false);
        std::function<float(float, float)> today;
        const std::string nm = c.name;
        if (nm == "ex2") today = [](float a, float) { return std::exp2(a); };
        if (nm == "lg2") today = [](float a, float) { return std::log2(a); };
        if (nm == "rsqrt") today = [](float a, float) { return 1.0f / std::sqrt(a); };
        if (nm == "sqrt") today = [](float a, float) { return std::sqrt(a); };
        if (nm == "rcp") today = [](float a, float) { return 1.0f / a; };
        if (nm == "tanh") today = [](float a, float) { return std::tanh(a); };
        if (nm == "sin") today = [](float a, float) { return std::sin(a); };
        if (nm == "cos") today = [](float a, float) { return std::cos(a); };
        if (nm == "div_approx" || nm == "div_full") today = [](float a, float b) { return a / b; };
        for (size_t i = 0; i < n; ++i) ASSERT_TRUE(same_bits(base[i], today(x[i], y[i]))) << "x=" << x[i];
    }
}

// NaN, infinite and zero inputs (the ISA's tables: ex2(0) and cos(0) are
// exactly 1), subnormals flushed by .ftz, subnormal results and sin/cos
// inputs beyond 100pi come out as without the mode.
TEST(EmuVariance, SpecialValuesAreNotPerturbed) {
    const float inf = INFINITY, nan = NAN, sub = 1e-40f;
    const std::vector<float> specials = {nan, -nan, inf, -inf, 0.0f, -0.0f, sub, -sub, 1.0f, -1.0f, 2.0f, 0.5f};
    struct U { const char* name; const char* op; bool ftz; };
    const U ops[] = {{"ex2f", "ex2.approx.ftz.f32", true},   {"lg2f", "lg2.approx.ftz.f32", true},
                     {"rsqrtf", "rsqrt.approx.ftz.f32", true}, {"sqrtf", "sqrt.approx.ftz.f32", true},
                     {"rcpf", "rcp.approx.ftz.f32", true},     {"sinf", "sin.approx.ftz.f32", true},
                     {"cosf", "cos.approx.ftz.f32", true},     {"tanh", "tanh.approx.f32", false},
                     {"ex2", "ex2.approx.f32", false},         {"rcp", "rcp.approx.f32", false},
                     {"lg2", "lg2.approx.f32", false},         {"cos", "cos.approx.f32", false}};
    for (const U& u : ops) {
        SCOPED_TRACE(u.op);
        const std::string ptx = elementwise(u.name, u.op, false);
        auto base = run(ptx, u.name, specials, {}, false);
        auto var = run(ptx, u.name, specials, {}, true);
        ASSERT_EQ(var.size(), specials.size());
        for (size_t i = 0; i < specials.size(); ++i) {
            const float x = specials[i];
            if (std::isfinite(x) && x != 0 && !(u.ftz && !std::isnormal(x)) && std::isnormal(base[i])) continue;
            EXPECT_TRUE(same_bits(var[i], base[i])) << "x=" << x << ": " << var[i] << " vs " << base[i];
        }
    }
    struct S { const char* op; std::vector<float> x; };
    const S fixed[] = {{"ex2.approx.f32", {-130.0f, -140.5f, -149.0f, 1000.0f, -2000.5f, 0.0f, -0.0f}},
                       {"sin.approx.f32", {1000.0f, -2000.5f, 400.0f, 0.0f, -0.0f}},
                       {"cos.approx.f32", {1000.0f, -2000.5f, 400.0f, 0.0f, -0.0f}},
                       {"lg2.approx.f32", {1.0f, 0.0f, -0.0f, -1.0f}},
                       {"tanh.approx.f32", {inf, -inf, 0.0f, -0.0f, sub, -sub}}};
    for (const S& f : fixed) {
        SCOPED_TRACE(f.op);
        const std::string ptx = elementwise("k", f.op, false);
        auto base = run(ptx, "k", f.x, {}, false), var = run(ptx, "k", f.x, {}, true);
        ASSERT_EQ(var.size(), f.x.size());
        for (size_t i = 0; i < f.x.size(); ++i) EXPECT_TRUE(same_bits(var[i], base[i])) << "x=" << f.x[i];
    }
    auto lg = run(elementwise("k", "lg2.approx.f32", false), "k", std::vector<float>{1.0f}, {}, true);
    EXPECT_EQ(fbits(lg.at(0)), fbits(0.0f));
    // div.approx with 2^126 < |b| < 2^128: the ISA's signed zero (NaN for an
    // infinite a); without the mode, exactly rounded division.
    const std::vector<float> a = {3.0f, -3.0f, 0x1p127f, inf, nan}, b = {0x1p127f, 0x1p127f, -0x1.8p126f, 0x1p127f, 0x1p127f};
    const std::string ptx = elementwise("d", "div.approx.f32", true);
    auto dv = run(ptx, "d", a, b, true), d0 = run(ptx, "d", a, b, false);
    EXPECT_EQ(fbits(dv[0]), fbits(0.0f));
    EXPECT_EQ(fbits(dv[1]), fbits(-0.0f));
    EXPECT_EQ(fbits(dv[2]), fbits(-0.0f));
    EXPECT_TRUE(std::isnan(dv[3]));
    EXPECT_TRUE(std::isnan(dv[4]));
    EXPECT_EQ(d0[2], -0x1p127f / 0x1.8p126f);
    EXPECT_TRUE(std::isinf(d0[3]));
}

// The same seed replays the same results; another seed moves them differently.
TEST(EmuVariance, DeterministicPerSeed) {
    std::mt19937 g(11);
    std::vector<float> x(2048);
    for (auto& v : x) v = std::uniform_real_distribution<float>(-20, 20)(g);
    const std::string ptx = elementwise("k", "ex2.approx.f32", false);
    auto a = run(ptx, "k", x, {}, true, 5), b = run(ptx, "k", x, {}, true, 5), c = run(ptx, "k", x, {}, true, 6);
    size_t differ = 0;
    for (size_t i = 0; i < x.size(); ++i) {
        ASSERT_TRUE(same_bits(a[i], b[i]));
        differ += !same_bits(a[i], c[i]);
    }
    EXPECT_GT(differ, x.size() / 4);
}

// rcp.approx.ftz.f64 follows the ISA's semantics in the mode: the reciprocal
// of a's upper 32 bits, kept to 32 bits (relative error below 2^-19).
TEST(EmuVariance, RcpApproxF64KeepsTheUpperWord) {
    std::mt19937 g(5);
    std::vector<double> x(1024);
    for (auto& v : x) v = std::ldexp(std::uniform_real_distribution<double>(1, 2)(g), int(g() % 200) - 100) * (g() & 1 ? -1 : 1);
    const std::string ptx = elementwise("k", "rcp.approx.ftz.f64", false, true);
    auto base = run(ptx, "k", x, {}, false), var = run(ptx, "k", x, {}, true);
    for (size_t i = 0; i < x.size(); ++i) {
        EXPECT_TRUE(same_bits(base[i], 1 / x[i]));
        EXPECT_EQ(bits_of(var[i]) & 0xffffffffu, 0u);
        EXPECT_LE(std::fabs(var[i] * x[i] - 1), 0x1p-19) << x[i];
    }
}

// ---- mul + add fusion ----

// x = y = 1 + 2^-12: x*y = 1 + 2^-11 + 2^-24 rounds to 1 + 2^-11, so
// x*y - (1 + 2^-11) is 0 with two roundings and 2^-24 fused.
constexpr float kX = 1.0f + 0x1p-12f, kC = 1.0f + 0x1p-11f;

std::string fusion_kernel(const std::string& body) {
    return R"(
.visible .entry k(.param .u64 p)
{
    .reg .f32 %f<10>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [p];
    ld.global.f32 %f1, [%rd1];
    ld.global.f32 %f2, [%rd1+4];
    ld.global.f32 %f3, [%rd1+8];
)" + body + R"(
    st.global.f32 [%rd1+12], %f5;
    st.global.f32 [%rd1+16], %f4;
    ret;
}
)";
}

// {d, the mul's own result} for inputs (x, y, c).
std::vector<float> run_fusion(const std::string& body, bool vary, float c) {
    ModeScope mode(vary, 1);
    Emu e(fusion_kernel(body));
    EXPECT_TRUE(e.prog) << e.log;
    if (!e.prog) return {0, 0};
    uint64_t p = e.alloc(32);
    e.put(p, std::vector<float>{kX, kX, c});
    auto f = e.run("k", {1, 1, 1}, {1, 1, 1}, Params().add(p));
    EXPECT_FALSE(f.has_value()) << f->message;
    auto r = e.get<float>(p, 5);
    return {r[3], r[4]};
}

TEST(EmuVariance, PlainMulAddFusesIntoOneFma) {
    struct F { const char* body; float c, fused, separate; };
    const float t = 0x1p-24f;
    const F fuse[] = {
        {"mul.f32 %f4, %f1, %f2;\n add.f32 %f5, %f4, %f3;", -kC, t, 0},
        {"mul.f32 %f4, %f1, %f2;\n add.f32 %f5, %f3, %f4;", -kC, t, 0},   // the product second
        {"mul.f32 %f4, %f1, %f2;\n sub.f32 %f5, %f4, %f3;", kC, t, 0},
        {"mul.f32 %f4, %f1, %f2;\n sub.f32 %f5, %f3, %f4;", kC, -t, 0},
        {"mul.f32 %f4, %f1, %f2;\n mov.f32 %f6, %f1;\n add.f32 %f7, %f1, %f1;\n add.f32 %f5, %f4, %f3;", -kC, t, 0},
        {"mul.ftz.f32 %f4, %f1, %f2;\n add.ftz.f32 %f5, %f4, %f3;", -kC, t, 0},
    };
    for (const F& f : fuse) {
        SCOPED_TRACE(f.body);
        auto on = run_fusion(f.body, true, f.c), off = run_fusion(f.body, false, f.c);
        EXPECT_EQ(on[0], f.fused);
        EXPECT_EQ(off[0], f.separate);
        EXPECT_EQ(on[1], kC);   // the mul keeps its own (rounded) result
    }
}

TEST(EmuVariance, FusionNeedsPlainOpsInOneStraightLineRun) {
    const char* never[] = {
        "mul.rn.f32 %f4, %f1, %f2;\n add.f32 %f5, %f4, %f3;",
        "mul.f32 %f4, %f1, %f2;\n add.rn.f32 %f5, %f4, %f3;",
        "mul.f32 %f4, %f1, %f2;\nL1:\n add.f32 %f5, %f4, %f3;",
        "mul.f32 %f4, %f1, %f2;\n bra.uni L1;\nL1:\n add.f32 %f5, %f4, %f3;",
        "mul.f32 %f4, %f1, %f2;\n mov.f32 %f1, 0f3F800000;\n add.f32 %f5, %f4, %f3;\n mov.f32 %f1, %f2;",
        "mul.f32 %f4, %f1, %f2;\n mov.f32 %f4, %f4;\n add.f32 %f5, %f4, %f3;",
        "mul.sat.f32 %f4, %f1, %f2;\n add.f32 %f5, %f4, %f3;",
        "mul.ftz.f32 %f4, %f1, %f2;\n add.f32 %f5, %f4, %f3;",
        "mov.f32 %f6, %f1;\n mul.f32 %f6, %f6, %f2;\n mov.f32 %f4, %f6;\n add.f32 %f5, %f4, %f3;",
    };
    for (const char* body : never) {
        SCOPED_TRACE(body);
        auto on = run_fusion(body, true, -kC), off = run_fusion(body, false, -kC);
        EXPECT_EQ(fbits(on[0]), fbits(off[0])) << "must not fuse";
        EXPECT_NE(on[0], 0x1p-24f);
    }
    // A mul that overwrites its own source is not fused either.
    auto self = run_fusion("mov.f32 %f4, %f1;\n mul.f32 %f4, %f4, %f2;\n add.f32 %f5, %f4, %f3;", true, -kC);
    EXPECT_EQ(self[0], 0.0f);
}

TEST(EmuVariance, F64MulAddFuses) {
    // x = 1 + 2^-27: x*x = 1 + 2^-26 + 2^-54 rounds to 1 + 2^-26.
    const double x = 1.0 + 0x1p-27, c = -(1.0 + 0x1p-26);
    const std::string ptx = R"(
.visible .entry k(.param .u64 p)
{
    .reg .f64 %fd<6>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [p];
    ld.global.f64 %fd1, [%rd1];
    ld.global.f64 %fd2, [%rd1+8];
    mul.f64 %fd3, %fd1, %fd1;
    add.f64 %fd4, %fd3, %fd2;
    st.global.f64 [%rd1+16], %fd4;
    ret;
}
)";
    for (bool vary : {false, true}) {
        ModeScope mode(vary, 1);
        Emu e(ptx);
        ASSERT_LOADED(e);
        uint64_t p = e.alloc(24);
        e.put(p, std::vector<double>{x, c});
        auto f = e.run("k", {1, 1, 1}, {1, 1, 1}, Params().add(p));
        ASSERT_NO_FAULT(f);
        EXPECT_EQ(e.get<double>(p, 3)[2], vary ? 0x1p-54 : 0.0);
    }
}

// ---- a tolerance that would not survive real hardware ----

// A host check comparing ex2.approx with the exact 2^k at tolerance 0: it
// passes on emu without the mode and fails with it, as it could on a GPU.
TEST(EmuVariance, ZeroToleranceOnEx2FailsInTheMode) {
    std::vector<float> x;
    for (int k = -20; k <= 20; ++k) x.push_back(float(k));
    const std::string ptx = elementwise("k", "ex2.approx.f32", false);
    auto exact_match = [&](const std::vector<float>& got) {
        for (size_t i = 0; i < x.size(); ++i)
            if (got.at(i) != std::ldexp(1.0f, int(x[i]))) return false;
        return true;
    };
    EXPECT_TRUE(exact_match(run(ptx, "k", x, {}, false)));
    EXPECT_FALSE(exact_match(run(ptx, "k", x, {}, true)));
    // A tolerance of the ISA's 2 ulp survives the mode.
    auto var = run(ptx, "k", x, {}, true);
    for (size_t i = 0; i < x.size(); ++i) {
        float e = std::ldexp(1.0f, int(x[i]));
        EXPECT_LE(std::fabs(var[i] - e), 2 * ulp32(e)) << x[i];
    }
}

}  // namespace
