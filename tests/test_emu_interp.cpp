// emu's interpreter core, instruction semantics: per instruction family a
// tiny PTX kernel checked against C++ expectations (integer and float ALU,
// rounding, conversions, comparisons, shuffles, divergence, barriers, atomics,
// votes, dp4a). Sub-word memory, bit ops, elect and half precision are in
// test_emu_ops.cpp; faults, load-time rejection and statistics in
// test_emu_faults.cpp.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <set>

#include "emu_test_util.h"

using namespace ptxlm::emu;
using namespace ptxlm::emu::testing_util;

namespace {

TEST(EmuInterp, IntegerAlu) {
    Emu e(R"(
.visible .entry ialu(.param .u64 out, .param .u32 a, .param .u32 b)
{
    .reg .b32 %r<30>;
    .reg .b64 %rd<10>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [a];
    ld.param.u32 %r2, [b];
    shl.b32 %r3, %r1, 33;          st.global.u32 [%rd1+0], %r3;
    shr.u32 %r3, %r1, 40;          st.global.u32 [%rd1+4], %r3;
    shr.s32 %r3, %r2, 40;          st.global.u32 [%rd1+8], %r3;
    shr.s32 %r3, %r2, 4;           st.global.u32 [%rd1+12], %r3;
    mul.hi.u32 %r3, %r1, %r2;      st.global.u32 [%rd1+16], %r3;
    mul.hi.s32 %r3, %r1, %r2;      st.global.u32 [%rd1+20], %r3;
    mul.lo.u32 %r3, %r1, %r2;      st.global.u32 [%rd1+24], %r3;
    mad.lo.s32 %r3, %r1, %r2, 7;   st.global.u32 [%rd1+28], %r3;
    div.s32 %r3, %r2, 7;           st.global.u32 [%rd1+32], %r3;
    rem.s32 %r3, %r2, 7;           st.global.u32 [%rd1+36], %r3;
    div.u32 %r3, %r1, 0;           st.global.u32 [%rd1+40], %r3;
    min.s32 %r3, %r1, %r2;         st.global.u32 [%rd1+44], %r3;
    min.u32 %r3, %r1, %r2;         st.global.u32 [%rd1+48], %r3;
    bfe.u32 %r3, %r1, 4, 8;        st.global.u32 [%rd1+52], %r3;
    bfe.s32 %r3, %r2, 4, 8;        st.global.u32 [%rd1+56], %r3;
    prmt.b32 %r3, %r1, %r2, 0x0123; st.global.u32 [%rd1+60], %r3;
    prmt.b32 %r3, %r1, %r2, 0x8884; st.global.u32 [%rd1+64], %r3;
    neg.s32 %r3, %r1;              st.global.u32 [%rd1+68], %r3;
    abs.s32 %r3, %r2;              st.global.u32 [%rd1+72], %r3;
    not.b32 %r3, %r1;              st.global.u32 [%rd1+76], %r3;
    mov.u32 %r4, 32;
    shl.b32 %r3, %r1, %r4;         st.global.u32 [%rd1+80], %r3;
    mul.wide.s32 %rd2, %r1, %r2;   st.global.u64 [%rd1+88], %rd2;
    mul.wide.u32 %rd3, %r1, %r2;   st.global.u64 [%rd1+96], %rd3;
    shl.b64 %rd4, %rd3, 64;        st.global.u64 [%rd1+104], %rd4;
    mul.hi.u64 %rd4, %rd3, %rd3;   st.global.u64 [%rd1+112], %rd4;
    xor.b32 %r3, %r1, -1;          st.global.u32 [%rd1+120], %r3;
    add.sat.s32 %r3, %r1, %r1;     st.global.u32 [%rd1+124], %r3;
    ret;
}
)");
    ASSERT_LOADED(e);
    const uint32_t a = 0x9abcdef1u, b = uint32_t(-100);
    uint64_t out = e.alloc(128);
    auto f = e.run("ialu", {1, 1, 1}, {1, 1, 1}, Params().add(out).add(a).add(b));
    ASSERT_NO_FAULT(f);
    auto r = e.get<uint32_t>(out, 32);
    auto r64 = e.get<uint64_t>(out, 16);
    EXPECT_EQ(r[0], 0u);
    EXPECT_EQ(r[1], 0u);
    EXPECT_EQ(r[2], 0xffffffffu);
    EXPECT_EQ(int32_t(r[3]), -7);
    EXPECT_EQ(r[4], uint32_t((uint64_t(a) * b) >> 32));
    EXPECT_EQ(r[5], uint32_t(uint64_t(int64_t(int32_t(a)) * int32_t(b)) >> 32));
    EXPECT_EQ(r[6], a * b);
    EXPECT_EQ(r[7], a * b + 7);
    EXPECT_EQ(int32_t(r[8]), -14);
    EXPECT_EQ(int32_t(r[9]), -2);
    EXPECT_EQ(r[10], 0xffffffffu);
    EXPECT_EQ(r[11], a);
    EXPECT_EQ(r[12], a);
    EXPECT_EQ(r[13], (a >> 4) & 0xff);
    EXPECT_EQ(r[14], 0xfffffff9u);
    EXPECT_EQ(r[15], __builtin_bswap32(a));
    EXPECT_EQ(r[16], 0xffffff9cu);   // byte 4 = b's low byte 0x9c, then its sign replicated
    EXPECT_EQ(r[17], 0u - a);
    EXPECT_EQ(r[18], 100u);
    EXPECT_EQ(r[19], ~a);
    EXPECT_EQ(r[20], 0u);
    EXPECT_EQ(r64[11], uint64_t(int64_t(int32_t(a)) * int64_t(int32_t(b))));
    EXPECT_EQ(r64[12], uint64_t(a) * uint64_t(b));
    EXPECT_EQ(r64[13], 0u);
    unsigned __int128 w = uint64_t(a) * uint64_t(b);
    EXPECT_EQ(r64[14], uint64_t((w * w) >> 64));
    EXPECT_EQ(r[30], ~a);
    EXPECT_EQ(r[31], 0x80000000u);   // saturated: a is negative as s32
}

TEST(EmuInterp, FloatRounding) {
    Emu e(R"(
.visible .entry falu(.param .u64 out)
{
    .reg .f32 %f<20>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.f32 %f1, 0f3F800000;
    mov.f32 %f2, 0f33D6BF95;
    add.rn.f32 %f3, %f1, %f2;   st.global.f32 [%rd1+0], %f3;
    add.rz.f32 %f3, %f1, %f2;   st.global.f32 [%rd1+4], %f3;
    add.rm.f32 %f3, %f1, %f2;   st.global.f32 [%rd1+8], %f3;
    add.rp.f32 %f3, %f1, %f2;   st.global.f32 [%rd1+12], %f3;
    mov.f32 %f5, 0f3F800800;
    mov.f32 %f6, 0fBF801000;
    fma.rn.f32 %f7, %f5, %f5, %f6;                               st.global.f32 [%rd1+16], %f7;
    mul.rn.f32 %f8, %f5, %f5;  add.rn.f32 %f9, %f8, %f6;         st.global.f32 [%rd1+20], %f9;
    div.rn.f32 %f3, %f1, 0f40400000;                             st.global.f32 [%rd1+24], %f3;
    sqrt.rn.f32 %f3, 0f40000000;                                 st.global.f32 [%rd1+28], %f3;
    sub.f32 %f3, 0.5, 1.25;                                      st.global.f32 [%rd1+32], %f3;
    mul.rp.f32 %f3, 0f3EAAAAAB, 0f40400000;                      st.global.f32 [%rd1+36], %f3;
    ex2.approx.ftz.f32 %f3, 0f40400000;                          st.global.f32 [%rd1+40], %f3;
    neg.f32 %f3, %f1;                                            st.global.f32 [%rd1+44], %f3;
    ret;
}
)");
    ASSERT_LOADED(e);
    uint64_t out = e.alloc(64);
    auto f = e.run("falu", {1, 1, 1}, {1, 1, 1}, Params().add(out));
    ASSERT_NO_FAULT(f);
    auto r = e.get<float>(out, 12);
    EXPECT_EQ(r[0], std::nextafter(1.0f, 2.0f));
    EXPECT_EQ(r[1], 1.0f);
    EXPECT_EQ(r[2], 1.0f);
    EXPECT_EQ(r[3], std::nextafter(1.0f, 2.0f));
    volatile float a = bitsf(0x3F800800), c = bitsf(0xBF801000);
    EXPECT_EQ(r[4], std::fma(float(a), float(a), float(c)));
    EXPECT_EQ(r[4], std::ldexp(1.0f, -24));   // one rounding
    volatile float prod = a * a;
    EXPECT_EQ(r[5], prod + c);
    EXPECT_EQ(r[5], 0.0f);                    // two roundings lose it
    EXPECT_EQ(r[6], 1.0f / 3.0f);
    EXPECT_EQ(r[7], std::sqrt(2.0f));
    EXPECT_EQ(r[8], -0.75f);
    EXPECT_EQ(r[9], std::nextafter(1.0f, 2.0f));   // 3 * 0.33333334f = 1.0000000298: .rn gives 1
    EXPECT_EQ(r[10], 8.0f);
    EXPECT_EQ(r[11], -1.0f);
}

TEST(EmuInterp, Conversions) {
    Emu e(R"(
.visible .entry conv(.param .u64 in, .param .u64 out)
{
    .reg .b32 %r<10>;
    .reg .b16 %h<4>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [in];
    ld.param.u64 %rd2, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.s64 %rd3, %rd1, %rd3;
    ld.global.f32 %f1, [%rd3];
    mul.wide.u32 %rd4, %r1, 32;
    add.s64 %rd4, %rd2, %rd4;
    cvt.rzi.s32.f32 %r2, %f1;   st.global.u32 [%rd4+0], %r2;
    cvt.rni.s32.f32 %r2, %f1;   st.global.u32 [%rd4+4], %r2;
    cvt.rzi.u32.f32 %r2, %f1;   st.global.u32 [%rd4+8], %r2;
    cvt.rn.f16.f32 %h1, %f1;    st.global.b16 [%rd4+12], %h1;
    cvt.rz.f16.f32 %h2, %f1;    st.global.b16 [%rd4+16], %h2;
    cvt.rn.bf16.f32 %h3, %f1;   st.global.b16 [%rd4+20], %h3;
    cvt.f32.f16 %f2, %h1;       st.global.f32 [%rd4+24], %f2;
    cvt.rmi.s32.f32 %r2, %f1;   st.global.u32 [%rd4+28], %r2;
    ret;
}
)");
    ASSERT_LOADED(e);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    std::vector<float> in = {3e9f, -3e9f, nan, 2.5f, 3.5f, -2.5f, -1.0f, 1.0f + std::ldexp(1.0f, -11),
                             1.0f + 3 * std::ldexp(1.0f, -11), 65520.0f, 1e-8f, 0.5f};
    const size_t n = in.size();
    uint64_t din = e.alloc(n * 4), dout = e.alloc(n * 32);
    e.put(din, in);
    auto f = e.run("conv", {1, 1, 1}, {uint32_t(n), 1, 1}, Params().add(din).add(dout));
    ASSERT_NO_FAULT(f);
    auto r = e.get<uint32_t>(dout, n * 8);
    const int32_t rzi[] = {INT32_MAX, INT32_MIN, 0, 2, 3, -2, -1, 1, 1, 65520, 0, 0};
    const int32_t rni[] = {INT32_MAX, INT32_MIN, 0, 2, 4, -2, -1, 1, 1, 65520, 0, 0};
    const uint32_t u32[] = {3000000000u, 0, 0, 2, 3, 0, 0, 1, 1, 65520, 0, 0};
    const uint16_t h_rn[] = {0x7C00, 0xFC00, 0, 0x4100, 0x4300, 0xC100, 0xBC00, 0x3C00, 0x3C02, 0x7C00, 0, 0x3800};
    const uint16_t h_rz[] = {0x7BFF, 0xFBFF, 0, 0x4100, 0x4300, 0xC100, 0xBC00, 0x3C00, 0x3C01, 0x7BFF, 0, 0x3800};
    const int32_t rmi[] = {INT32_MAX, INT32_MIN, 0, 2, 3, -3, -1, 1, 1, 65520, 0, 0};
    for (size_t i = 0; i < n; ++i) {
        SCOPED_TRACE(testing::Message() << "input " << in[i]);
        EXPECT_EQ(int32_t(r[i * 8 + 0]), rzi[i]);
        EXPECT_EQ(int32_t(r[i * 8 + 1]), rni[i]);
        EXPECT_EQ(r[i * 8 + 2], u32[i]);
        EXPECT_EQ(int32_t(r[i * 8 + 7]), rmi[i]);
        uint32_t u = fbits(in[i]);
        if (std::isnan(in[i])) {
            EXPECT_EQ(r[i * 8 + 3] & 0x7C00u, 0x7C00u);
            EXPECT_NE(r[i * 8 + 3] & 0x3FFu, 0u);
            EXPECT_TRUE(std::isnan(bitsf(r[i * 8 + 6])));
            continue;
        }
        EXPECT_EQ(r[i * 8 + 3], h_rn[i]);
        EXPECT_EQ(r[i * 8 + 4], h_rz[i]);
        EXPECT_EQ(r[i * 8 + 5], (u + 0x7fffu + ((u >> 16) & 1)) >> 16);
    }
    EXPECT_EQ(bitsf(r[3 * 8 + 6]), 2.5f);
    EXPECT_TRUE(std::isinf(bitsf(r[0 * 8 + 6])));
}

TEST(EmuInterp, SetpOrderedUnorderedAndMinMax) {
    Emu e(R"(
.visible .entry cmp(.param .u64 out, .param .f32 x, .param .f32 y)
{
    .reg .pred %p<4>;
    .reg .b32 %r<4>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [out];
    ld.param.f32 %f1, [x];
    ld.param.f32 %f2, [y];
    setp.eq.f32 %p1, %f1, %f2;    selp.u32 %r1, 1, 0, %p1;  st.global.u32 [%rd1+0], %r1;
    setp.ne.f32 %p1, %f1, %f2;    selp.u32 %r1, 1, 0, %p1;  st.global.u32 [%rd1+4], %r1;
    setp.equ.f32 %p1, %f1, %f2;   selp.u32 %r1, 1, 0, %p1;  st.global.u32 [%rd1+8], %r1;
    setp.neu.f32 %p1, %f1, %f2;   selp.u32 %r1, 1, 0, %p1;  st.global.u32 [%rd1+12], %r1;
    setp.lt.f32 %p1, %f1, %f2;    selp.u32 %r1, 1, 0, %p1;  st.global.u32 [%rd1+16], %r1;
    setp.ltu.f32 %p1, %f1, %f2;   selp.u32 %r1, 1, 0, %p1;  st.global.u32 [%rd1+20], %r1;
    setp.num.f32 %p1, %f1, %f2;   selp.u32 %r1, 1, 0, %p1;  st.global.u32 [%rd1+24], %r1;
    setp.nan.f32 %p1, %f1, %f2;   selp.u32 %r1, 1, 0, %p1;  st.global.u32 [%rd1+28], %r1;
    setp.geu.f32 %p1|%p2, %f1, %f2;  selp.u32 %r1, 1, 0, %p2;  st.global.u32 [%rd1+32], %r1;
    setp.lt.and.f32 %p3, %f2, 0f40000000, %p1;  selp.u32 %r1, 1, 0, %p3;  st.global.u32 [%rd1+36], %r1;
    min.f32 %f3, %f1, %f2;        st.global.f32 [%rd1+40], %f3;
    max.f32 %f3, %f1, %f2;        st.global.f32 [%rd1+44], %f3;
    ret;
}
)");
    ASSERT_LOADED(e);
    uint64_t out = e.alloc(48);
    const float nan = std::numeric_limits<float>::quiet_NaN();
    auto f = e.run("cmp", {1, 1, 1}, {1, 1, 1}, Params().add(out).add(nan).add(1.0f));
    ASSERT_NO_FAULT(f);
    auto r = e.get<uint32_t>(out, 12);
    EXPECT_EQ(r[0], 0u);   // eq
    EXPECT_EQ(r[1], 0u);   // ne is ordered: false with NaN
    EXPECT_EQ(r[2], 1u);   // equ
    EXPECT_EQ(r[3], 1u);   // neu
    EXPECT_EQ(r[4], 0u);
    EXPECT_EQ(r[5], 1u);
    EXPECT_EQ(r[6], 0u);
    EXPECT_EQ(r[7], 1u);
    EXPECT_EQ(r[8], 0u);   // second destination is the complement
    EXPECT_EQ(r[9], 1u);   // 1 < 2 and geu(NaN, 1)
    EXPECT_EQ(bitsf(r[10]), 1.0f);
    EXPECT_EQ(bitsf(r[11]), 1.0f);
}

TEST(EmuInterp, ShflAllModesAtSegmentEdges) {
    // Each lane's value is 100 + lane; every mode writes value and predicate.
    Emu e(R"(
.visible .entry shfl(.param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %laneid;
    add.u32 %r2, %r1, 100;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd1, %rd1, %rd2;
    shfl.sync.down.b32 %r3|%p1, %r2, 1, 0x1f, 0xffffffff;   selp.u32 %r4, 1000, 0, %p1; add.u32 %r3, %r3, %r4; st.global.u32 [%rd1+0], %r3;
    shfl.sync.up.b32 %r3|%p1, %r2, 1, 0x0, 0xffffffff;      selp.u32 %r4, 1000, 0, %p1; add.u32 %r3, %r3, %r4; st.global.u32 [%rd1+128], %r3;
    shfl.sync.down.b32 %r3|%p1, %r2, 2, 0x181f, 0xffffffff; selp.u32 %r4, 1000, 0, %p1; add.u32 %r3, %r3, %r4; st.global.u32 [%rd1+256], %r3;
    shfl.sync.up.b32 %r3|%p1, %r2, 3, 0x1800, 0xffffffff;   selp.u32 %r4, 1000, 0, %p1; add.u32 %r3, %r3, %r4; st.global.u32 [%rd1+384], %r3;
    shfl.sync.bfly.b32 %r3|%p1, %r2, 4, 0x181f, 0xffffffff; selp.u32 %r4, 1000, 0, %p1; add.u32 %r3, %r3, %r4; st.global.u32 [%rd1+512], %r3;
    shfl.sync.idx.b32 %r3|%p1, %r2, 3, 0x181f, 0xffffffff;  selp.u32 %r4, 1000, 0, %p1; add.u32 %r3, %r3, %r4; st.global.u32 [%rd1+640], %r3;
    shfl.sync.idx.b32 %r3|%p1, %r2, 9, 0x1f, 0xffffffff;    selp.u32 %r4, 1000, 0, %p1; add.u32 %r3, %r3, %r4; st.global.u32 [%rd1+768], %r3;
    shfl.sync.down.b32 %r3|%p1, %r2, 1, 0xf, 0xffffffff;    selp.u32 %r4, 1000, 0, %p1; add.u32 %r3, %r3, %r4; st.global.u32 [%rd1+896], %r3;
    ret;
}
)");
    ASSERT_LOADED(e);
    uint64_t out = e.alloc(8 * 128);
    ASSERT_NO_FAULT(e.run("shfl", {1, 1, 1}, {32, 1, 1}, Params().add(out)));
    auto r = e.get<uint32_t>(out, 8 * 32);
    auto v = [](uint32_t lane, bool ok) { return 100 + lane + (ok ? 1000 : 0); };
    for (uint32_t l = 0; l < 32; ++l) {
        SCOPED_TRACE(testing::Message() << "lane " << l);
        EXPECT_EQ(r[0 * 32 + l], l < 31 ? v(l + 1, true) : v(l, false));
        EXPECT_EQ(r[1 * 32 + l], l > 0 ? v(l - 1, true) : v(l, false));
        EXPECT_EQ(r[2 * 32 + l], l % 8 < 6 ? v(l + 2, true) : v(l, false));       // width 8
        EXPECT_EQ(r[3 * 32 + l], l % 8 >= 3 ? v(l - 3, true) : v(l, false));
        EXPECT_EQ(r[4 * 32 + l], v(l ^ 4, true));
        EXPECT_EQ(r[5 * 32 + l], v(l / 8 * 8 + 3, true));
        EXPECT_EQ(r[6 * 32 + l], v(9, true));
        EXPECT_EQ(r[7 * 32 + l], l < 15 ? v(l + 1, true) : v(l, false));          // clamp at 15
    }
}

TEST(EmuInterp, DivergenceReconvergesBeforeShfl) {
    // Lane-dependent trip counts and an if/else, then a full-warp shuffle:
    // the interpreter must have reconverged all 32 lanes by then.
    Emu e(R"(
.visible .entry div(.param .u64 out)
{
    .reg .pred %p<3>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %laneid;
    mov.u32 %r2, 0;
    mov.u32 %r3, 0;
LOOP:
    setp.ge.u32 %p1, %r3, %r1;
    @%p1 bra DONE;
    add.u32 %r2, %r2, 2;
    add.u32 %r3, %r3, 1;
    bra.uni LOOP;
DONE:
    and.b32 %r4, %r1, 1;
    setp.eq.u32 %p2, %r4, 0;
    @%p2 bra EVEN;
    add.u32 %r2, %r2, 1000;
    bra.uni JOIN;
EVEN:
    add.u32 %r2, %r2, 2000;
JOIN:
    shfl.sync.bfly.b32 %r5, %r2, 1, 0x1f, 0xffffffff;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r5;
    ret;
}
)");
    ASSERT_LOADED(e);
    uint64_t out = e.alloc(128);
    ASSERT_NO_FAULT(e.run("div", {1, 1, 1}, {32, 1, 1}, Params().add(out)));
    auto r = e.get<uint32_t>(out, 32);
    for (uint32_t l = 0; l < 32; ++l) {
        uint32_t o = l ^ 1;
        EXPECT_EQ(r[l], 2 * o + (o % 2 ? 1000 : 2000)) << "lane " << l;
    }
}

TEST(EmuInterp, BarrierFullAndPartialCount) {
    Emu e(R"(
.visible .entry bars(.param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<4>;
    .shared .align 4 .b8 buf[512];
    .shared .align 4 .b8 half[256];
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    shl.b32 %r2, %r1, 2;
    mov.u32 %r9, buf;
    add.u32 %r3, %r9, %r2;
    st.shared.u32 [%r3], %r1;
    bar.sync 0;
    sub.u32 %r4, 127, %r1;
    shl.b32 %r4, %r4, 2;
    ld.shared.u32 %r5, [buf+%r4];
    ret;
}
)");
    // "[buf+%r4]" is not PTX: the loader must refuse it rather than guess.
    EXPECT_FALSE(e.prog);
    Emu g(R"(
.visible .entry bars(.param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<6>;
    .shared .align 4 .b8 buf[512];
    .shared .align 4 .b8 half[256];
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    shl.b32 %r2, %r1, 2;
    mov.u32 %r9, buf;
    add.u32 %r3, %r9, %r2;
    st.shared.u32 [%r3], %r1;
    bar.sync 0;
    sub.u32 %r4, 127, %r1;
    shl.b32 %r4, %r4, 2;
    add.u32 %r4, %r4, %r9;
    ld.shared.u32 %r5, [%r4];
    mul.wide.u32 %rd2, %r1, 8;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r5;
    setp.ge.u32 %p1, %r1, 64;
    @%p1 bra SKIP;
    mov.u32 %r8, half;
    add.u32 %r6, %r8, %r2;
    add.u32 %r7, %r1, 500;
    st.shared.u32 [%r6], %r7;
    barrier.sync 1, 64;
    sub.u32 %r4, 63, %r1;
    shl.b32 %r4, %r4, 2;
    add.u32 %r4, %r4, %r8;
    ld.shared.u32 %r5, [%r4];
    st.global.u32 [%rd3+4], %r5;
SKIP:
    ret;
}
)");
    ASSERT_LOADED(g);
    uint64_t out = g.alloc(128 * 8);
    Stats st;
    ASSERT_NO_FAULT(g.run("bars", {2, 1, 1}, {128, 1, 1}, Params().add(out), &st));
    auto r = g.get<uint32_t>(out, 256);
    for (uint32_t t = 0; t < 128; ++t) {
        EXPECT_EQ(r[2 * t], 127 - t);
        EXPECT_EQ(r[2 * t + 1], t < 64 ? 500 + 63 - t : 0u);
    }
    EXPECT_EQ(st.barriers, 4u);   // 2 blocks x (barrier 0 + barrier 1)
}

TEST(EmuInterp, AtomicsUnderContention) {
    Emu e(R"(
.visible .entry atoms(.param .u64 ctr, .param .u64 olds)
{
    .reg .b32 %r<10>;
    .reg .f32 %f<2>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [ctr];
    ld.param.u64 %rd2, [olds];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mad.lo.u32 %r4, %r2, %r3, %r1;
    atom.global.add.u32 %r5, [%rd1], 1;
    mul.wide.u32 %rd3, %r5, 4;
    add.s64 %rd3, %rd2, %rd3;
    st.global.u32 [%rd3], %r4;
    atom.global.max.s32 %r6, [%rd1+4], %r4;
    atom.relaxed.gpu.global.inc.u32 %r6, [%rd1+8], 99;
    red.global.add.f32 [%rd1+12], 0f3F000000;
    atom.global.cas.b32 %r7, [%rd1+16], %r4, 77;
    atom.global.exch.b32 %r7, [%rd1+20], %r4;
    atom.global.add.u64 %rd4, [%rd1+24], 3;
    ret;
}
)");
    ASSERT_LOADED(e);
    const uint32_t blocks = 64, threads = 128, total = blocks * threads;
    uint64_t ctr = e.alloc(32), olds = e.alloc(total * 4);
    ASSERT_NO_FAULT(e.run("atoms", {blocks, 1, 1}, {threads, 1, 1}, Params().add(ctr).add(olds)));
    auto c = e.get<uint32_t>(ctr, 8);
    EXPECT_EQ(c[0], total);
    EXPECT_EQ(int32_t(c[1]), int32_t(total - 1));
    EXPECT_EQ(c[2], total % 100);
    EXPECT_EQ(bitsf(c[3]), total * 0.5f);
    EXPECT_EQ(c[4], 77u);             // thread 0 swapped 0 -> 77, later compares fail
    EXPECT_EQ(c[5], total - 1);       // the last exchange in sequential order
    EXPECT_EQ(e.get<uint64_t>(ctr + 24, 1)[0], 3ull * total);
    auto o = e.get<uint32_t>(olds, total);
    std::set<uint32_t> seen(o.begin(), o.end());
    EXPECT_EQ(seen.size(), total);    // every old value returned exactly once
}

TEST(EmuInterp, VoteAndDp4a) {
    Emu e(R"(
.visible .entry vd(.param .u64 out)
{
    .reg .pred %p<4>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %laneid;
    and.b32 %r2, %r1, 1;
    setp.eq.u32 %p1, %r2, 1;
    vote.sync.ballot.b32 %r3, %p1, 0xffffffff;
    vote.sync.any.pred %p2, %p1, 0xffffffff;
    vote.sync.all.pred %p3, %p1, 0xffffffff;
    setp.ne.u32 %p1, %r1, 99;
    vote.sync.all.pred %p1, %p1, 0xffffffff;
    vote.sync.ballot.b32 %r7, !%p1, 0xffffffff;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra END;
    st.global.u32 [%rd1+0], %r3;
    selp.u32 %r4, 1, 0, %p2;  st.global.u32 [%rd1+4], %r4;
    selp.u32 %r4, 1, 0, %p3;  st.global.u32 [%rd1+8], %r4;
    st.global.u32 [%rd1+12], %r7;
    dp4a.u32.u32 %r5, 0xffffffff, 0xffffffff, 10;   st.global.u32 [%rd1+16], %r5;
    dp4a.s32.s32 %r5, 0xffffffff, 0xffffffff, 10;   st.global.u32 [%rd1+20], %r5;
    dp4a.u32.s32 %r5, 0xffffffff, 0xffffffff, 10;   st.global.u32 [%rd1+24], %r5;
    dp4a.s32.u32 %r5, 0x7f80ff01, 0x02020202, -5;   st.global.u32 [%rd1+28], %r5;
END:
    ret;
}
)");
    ASSERT_LOADED(e);
    uint64_t out = e.alloc(32);
    ASSERT_NO_FAULT(e.run("vd", {1, 1, 1}, {32, 1, 1}, Params().add(out)));
    auto r = e.get<uint32_t>(out, 8);
    EXPECT_EQ(r[0], 0xaaaaaaaau);
    EXPECT_EQ(r[1], 1u);
    EXPECT_EQ(r[2], 0u);
    EXPECT_EQ(r[3], 0u);
    EXPECT_EQ(r[4], 10u + 4 * 255 * 255);
    EXPECT_EQ(int32_t(r[5]), 10 + 4);
    EXPECT_EQ(int32_t(r[6]), 10 - 4 * 255);
    EXPECT_EQ(int32_t(r[7]), -5 + 2 * (127 - 128 - 1 + 1));
}


TEST(EmuInterp, BlockReductionMatchesCpu) {
    // The shape of a real kernel: grid-stride vector loads, a warp shuffle
    // tree, a shared-memory exchange across warps, one atomic per block.
    Emu e(R"(
.visible .entry reduce(.param .u64 in, .param .u64 out, .param .u32 n) .maxntid 256, 1, 1
{
    .reg .pred %p<4>;
    .reg .b32 %r<16>;
    .reg .f32 %f<16>;
    .reg .b64 %rd<8>;
    .shared .align 16 .b8 partial[32];
    ld.param.u64 %rd1, [in];
    ld.param.u64 %rd2, [out];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mov.u32 %r5, %nctaid.x;
    mad.lo.u32 %r6, %r3, %r4, %r2;
    mul.lo.u32 %r7, %r4, %r5;
    mov.f32 %f1, 0f00000000;
LOOP:
    shl.b32 %r8, %r6, 2;
    setp.ge.u32 %p1, %r8, %r1;
    @%p1 bra REDUCE;
    mul.wide.u32 %rd3, %r8, 4;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.nc.v4.f32 {%f2, %f3, %f4, %f5}, [%rd4];
    add.rn.f32 %f1, %f1, %f2;
    add.rn.f32 %f1, %f1, %f3;
    add.rn.f32 %f1, %f1, %f4;
    add.rn.f32 %f1, %f1, %f5;
    add.u32 %r6, %r6, %r7;
    bra.uni LOOP;
REDUCE:
    mov.b32 %r9, %f1;
    shfl.sync.bfly.b32 %r10, %r9, 16, 0x1f, 0xffffffff;  mov.b32 %f6, %r10;  add.rn.f32 %f1, %f1, %f6;  mov.b32 %r9, %f1;
    shfl.sync.bfly.b32 %r10, %r9, 8, 0x1f, 0xffffffff;   mov.b32 %f6, %r10;  add.rn.f32 %f1, %f1, %f6;  mov.b32 %r9, %f1;
    shfl.sync.bfly.b32 %r10, %r9, 4, 0x1f, 0xffffffff;   mov.b32 %f6, %r10;  add.rn.f32 %f1, %f1, %f6;  mov.b32 %r9, %f1;
    shfl.sync.bfly.b32 %r10, %r9, 2, 0x1f, 0xffffffff;   mov.b32 %f6, %r10;  add.rn.f32 %f1, %f1, %f6;  mov.b32 %r9, %f1;
    shfl.sync.bfly.b32 %r10, %r9, 1, 0x1f, 0xffffffff;   mov.b32 %f6, %r10;  add.rn.f32 %f1, %f1, %f6;
    and.b32 %r11, %r2, 31;
    shr.u32 %r12, %r2, 5;
    setp.eq.u32 %p2, %r11, 0;
    shl.b32 %r13, %r12, 2;
    mov.u32 %r14, partial;
    add.u32 %r14, %r14, %r13;
    @%p2 st.shared.f32 [%r14], %f1;
    bar.sync 0;
    setp.ne.u32 %p3, %r2, 0;
    @%p3 bra END;
    mov.f32 %f7, 0f00000000;
    shr.u32 %r15, %r4, 5;
    mov.u32 %r14, partial;
SUM:
    ld.shared.f32 %f8, [%r14];
    add.rn.f32 %f7, %f7, %f8;
    add.u32 %r14, %r14, 4;
    sub.u32 %r15, %r15, 1;
    setp.ne.u32 %p1, %r15, 0;
    @%p1 bra SUM;
    red.global.add.f32 [%rd2], %f7;
END:
    ret;
}
)");
    ASSERT_LOADED(e);
    const uint32_t n = 1 << 14;
    std::vector<float> x(n);
    double ref = 0;
    for (uint32_t i = 0; i < n; ++i) {
        x[i] = float(int(i % 17) - 8) * 0.25f;   // exact in f32: every partial sum is exact
        ref += x[i];
    }
    uint64_t in = e.alloc(n * 4), out = e.alloc(4);
    e.put(in, x);
    Stats st;
    ASSERT_NO_FAULT(e.run("reduce", {8, 1, 1}, {256, 1, 1}, Params().add(in).add(out).add(n), &st));
    EXPECT_EQ(e.get<float>(out, 1)[0], float(ref));
    EXPECT_EQ(st.unique_global_bytes, uint64_t(n) * 4 + 4);
    EXPECT_EQ(st.global_load_bytes, uint64_t(n) * 4);
    EXPECT_EQ(st.load_sectors_per_request(), 16.0);   // 32 lanes x 16 B, coalesced
    EXPECT_EQ(st.barriers, 8u);
}

TEST(EmuInterp, CollectivesRejectMissingLanes) {
    // A block of 48 threads: the second warp has 16 lanes, so a full
    // membermask names lanes that do not exist (undefined on hardware).
    Emu e(R"(
.visible .entry part(.param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    mov.u32 %r1, %laneid;
    shfl.sync.down.b32 %r2, %r1, 1, 0x1f, 0xffffffff;
    ret;
}
.visible .entry divbar(.param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    mov.u32 %r1, %laneid;
    setp.lt.u32 %p1, %r1, 16;
    @%p1 bra SKIP;
    bar.sync 0;
SKIP:
    ret;
}
)");
    ASSERT_LOADED(e);
    ASSERT_NO_FAULT(e.run("part", {1, 1, 1}, {64, 1, 1}, Params().add(uint64_t(0))));
    auto f = e.run("part", {1, 1, 1}, {48, 1, 1}, Params().add(uint64_t(0)));
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->cuda_error, 715);
    EXPECT_NE(f->message.find("membermask 0xffffffff"), std::string::npos) << f->message;
    EXPECT_NE(f->message.find("thread (32,0,0)"), std::string::npos) << f->message;
    f = e.run("divbar", {1, 1, 1}, {32, 1, 1}, Params().add(uint64_t(0)));
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->cuda_error, 715);
    EXPECT_NE(f->message.find("diverged"), std::string::npos) << f->message;
}

}  // namespace
