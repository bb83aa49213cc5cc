// emu's interpreter core, the rest of the instruction set: sub-word loads
// and conversions, transcendentals, %clock64, bit operations (popc, clz,
// brev, bfi), elect.sync, griddepcontrol, f16/bf16 arithmetic and atomics,
// register pack/unpack and trap.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>

#include "emu_test_util.h"

using namespace ptxlm::emu;
using namespace ptxlm::emu::testing_util;

namespace {

TEST(EmuInterp, SubWordMemoryTranscendentalsAndClock) {
    Emu e(R"(
.visible .entry misc(.param .u64 in, .param .u64 out)
{
    .reg .pred %p<4>;
    .reg .b16 %rs<4>;
    .reg .b32 %r<12>;
    .reg .f32 %f<8>;
    .reg .b64 %rd<8>;
    .shared .align 4 .b8 cnt[4];
    ld.param.u64 %rd1, [in];
    ld.param.u64 %rd2, [out];
    mov.u32 %r9, %tid.x;
    setp.eq.u32 %p3, %r9, 0;
    @%p3 st.shared.u32 [cnt], 0;
    bar.sync 0;
    atom.shared.add.u32 %r10, [cnt], 2;
    bar.sync 0;
    @!%p3 bra END;
    ld.global.s8 %r1, [%rd1];            st.global.u32 [%rd2+0], %r1;
    ld.global.u8 %r1, [%rd1];            st.global.u32 [%rd2+4], %r1;
    ld.global.s16 %r1, [%rd1];           st.global.u32 [%rd2+8], %r1;
    ld.u32 %r1, [%rd1];                  st.u32 [%rd2+12], %r1;
    cvt.sat.u8.s32 %r2, %r1;             st.global.u32 [%rd2+16], %r2;
    cvt.s8.s32 %r2, %r1;                 st.global.u32 [%rd2+20], %r2;
    cvt.sat.s16.s32 %r2, 70000;          st.global.u32 [%rd2+24], %r2;
    rcp.rn.f32 %f1, 0f40800000;          st.global.f32 [%rd2+28], %f1;
    rsqrt.approx.f32 %f1, 0f40800000;    st.global.f32 [%rd2+32], %f1;
    lg2.approx.f32 %f1, 0f41000000;      st.global.f32 [%rd2+36], %f1;
    tanh.approx.f32 %f1, 0f00000000;     st.global.f32 [%rd2+40], %f1;
    cos.approx.f32 %f1, 0f00000000;      st.global.f32 [%rd2+44], %f1;
    setp.gt.s32 %p1, %r1, 0;
    not.pred %p2, %p1;
    or.pred %p2, %p2, %p1;
    selp.b32 %r3, 11, 22, %p2;           st.global.u32 [%rd2+48], %r3;
    mov.u64 %rd3, %clock64;
    mov.u64 %rd4, %clock64;
    sub.s64 %rd5, %rd4, %rd3;            st.global.u64 [%rd2+56], %rd5;
    ld.shared.u32 %r4, [cnt];            st.global.u32 [%rd2+64], %r4;
    cvt.rn.f32.s32 %f2, -3;              st.global.f32 [%rd2+68], %f2;
    cvt.f32.bf16 %f3, %rs1;
    mov.b16 %rs1, 0x3FC0;
    cvt.f32.bf16 %f3, %rs1;              st.global.f32 [%rd2+72], %f3;
    cvt.rn.f32.f64 %f4, 0d3FD5555555555555; st.global.f32 [%rd2+76], %f4;
END:
    ret;
}
)");
    ASSERT_LOADED(e);
    uint64_t in = e.alloc(4), out = e.alloc(80);
    e.put(in, std::vector<uint32_t>{0x8123f0fe});
    ASSERT_NO_FAULT(e.run("misc", {1, 1, 1}, {96, 1, 1}, Params().add(in).add(out)));
    auto r = e.get<uint32_t>(out, 20);
    EXPECT_EQ(int32_t(r[0]), -2);             // 0xfe sign-extended
    EXPECT_EQ(r[1], 0xfeu);
    EXPECT_EQ(int32_t(r[2]), int16_t(0xf0fe));
    EXPECT_EQ(r[3], 0x8123f0feu);             // generic addressing reaches global memory
    EXPECT_EQ(r[4], 0u);                      // negative saturates to 0
    EXPECT_EQ(int32_t(r[5]), -2);             // truncated to s8, sign-extended
    EXPECT_EQ(r[6], 32767u);
    EXPECT_EQ(bitsf(r[7]), 0.25f);
    EXPECT_NEAR(bitsf(r[8]), 0.5f, 1e-6);
    EXPECT_NEAR(bitsf(r[9]), 3.0f, 1e-6);
    EXPECT_EQ(bitsf(r[10]), 0.0f);
    EXPECT_EQ(bitsf(r[11]), 1.0f);
    EXPECT_EQ(r[12], 11u);
    uint64_t dclk = e.get<uint64_t>(out + 56, 1)[0];
    EXPECT_GT(dclk, 0u);
    EXPECT_LT(dclk, 100u);
    EXPECT_EQ(r[16], 96u * 2);
    EXPECT_EQ(bitsf(r[17]), -3.0f);
    EXPECT_EQ(bitsf(r[18]), 1.5f);
    EXPECT_EQ(bitsf(r[19]), float(1.0 / 3.0));
}

TEST(EmuInterp, BitOpsElectAndHalfAtomics) {
    Emu e(R"(
.version 8.0
.target sm_90
.address_size 64
.visible .entry bits(.param .u64 out, .param .u32 a)
{
    .reg .pred %p<3>;
    .reg .b16 %h<4>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [a];
    griddepcontrol.wait;
    elect.sync %r2|%p1, 0xffffffff;
    selp.u32 %r3, 1, 0, %p1;
    atom.global.add.u32 %r4, [%rd1+24], %r3;
    mov.b16 %h1, 0x3C00;
    atom.global.add.noftz.f16 %h2, [%rd1+28], %h1;
    mov.b16 %h1, 0x3F80;
    atom.global.add.noftz.bf16 %h2, [%rd1+30], %h1;
    mov.u32 %r5, %laneid;
    setp.ne.u32 %p2, %r5, 0;
    @%p2 bra END;
    popc.b32 %r6, %r1;                 st.global.u32 [%rd1+0], %r6;
    clz.b32 %r6, %r1;                  st.global.u32 [%rd1+4], %r6;
    brev.b32 %r6, %r1;                 st.global.u32 [%rd1+8], %r6;
    bfi.b32 %r6, 0xff, %r1, 8, 4;      st.global.u32 [%rd1+12], %r6;
    st.global.u32 [%rd1+16], %r2;
    clz.b32 %r6, 0;                    st.global.u32 [%rd1+20], %r6;
    griddepcontrol.launch_dependents;
END:
    ret;
}
)");
    ASSERT_LOADED(e);
    uint64_t out = e.alloc(32);
    const uint32_t a = 0x00f0f00fu;
    ASSERT_NO_FAULT(e.run("bits", {3, 1, 1}, {64, 1, 1}, Params().add(out).add(a)));
    auto r = e.get<uint32_t>(out, 8);
    EXPECT_EQ(r[0], uint32_t(__builtin_popcount(a)));
    EXPECT_EQ(r[1], 8u);
    uint32_t rev = 0;
    for (int i = 0; i < 32; ++i) rev |= ((a >> i) & 1u) << (31 - i);
    EXPECT_EQ(r[2], rev);
    EXPECT_EQ(r[3], (a & ~0xf00u) | 0xf00u);
    EXPECT_EQ(r[4], 0u);                      // the lowest member lane is elected
    EXPECT_EQ(r[5], 32u);
    EXPECT_EQ(r[6], 3u * 2);                  // one leader per warp
    EXPECT_EQ(r[7] & 0xffff, 0x5A00u);        // f16: 192 x 1.0 = 192
    EXPECT_EQ(r[7] >> 16, 0x4340u);           // bf16: 192
}

TEST(EmuInterp, HalfArithmeticPackAndTrap) {
    Emu e(R"(
.visible .entry half(.param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b16 %h<8>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.b16 %h1, 0x3C00;
    mov.b16 %h2, 0x1001;
    add.rn.f16 %h3, %h1, %h2;
    fma.rn.f16 %h4, %h1, %h1, %h2;
    mov.b16 %h5, 0x3F80;
    mov.b16 %h6, 0x3B80;
    add.rn.bf16 %h7, %h5, %h6;
    mov.b32 %r1, {%h3, %h4};            st.global.u32 [%rd1+0], %r1;
    mov.b16 %h3, 0x7E00;
    min.f16 %h3, %h1, %h3;
    neg.f16 %h4, %h1;
    mov.b32 %r1, {%h3, %h4};            st.global.u32 [%rd1+4], %r1;
    mov.b32 %r4, 0x12345678;
    mov.b32 {%h3, %h4}, %r4;
    mov.b32 %r1, {%h4, %h3};            st.global.u32 [%rd1+8], %r1;
    mov.b64 %rd2, {%r1, %r1};           st.global.u64 [%rd1+16], %rd2;
    setp.lt.bf16 %p1, %h6, %h5;
    selp.u32 %r2, 1, 0, %p1;            st.global.u32 [%rd1+24], %r2;
    mov.b32 %r3, {%h7, %h7};            st.global.u32 [%rd1+28], %r3;
    trap;
}
)");
    ASSERT_LOADED(e);
    uint64_t out = e.alloc(32);
    auto f = e.run("half", {1, 1, 1}, {1, 1, 1}, Params().add(out));
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->cuda_error, 719);
    EXPECT_NE(f->message.find("trap"), std::string::npos) << f->message;
    auto r = e.get<uint32_t>(out, 8);
    // 1 + 2^-11 * (1 + 2^-10): just above the tie, so f16 rounds up; the same
    // sum through fma (1*1 + x) also rounds once.
    EXPECT_EQ(r[0] & 0xffff, 0x3C01u);
    EXPECT_EQ(r[0] >> 16, 0x3C01u);
    EXPECT_EQ(r[1] & 0xffff, 0x3C00u);        // min with NaN returns the number
    EXPECT_EQ(r[1] >> 16, 0xBC00u);
    EXPECT_EQ(r[2], 0x56781234u);
    EXPECT_EQ(e.get<uint64_t>(out + 16, 1)[0], 0x5678123456781234ull);
    EXPECT_EQ(r[6], 1u);
    EXPECT_EQ(r[7], 0x3F803F80u);             // bf16: 1 + 2^-8 is a tie, to even: 1
}

TEST(EmuInterp, PairedHalvesAndLaneSpecials) {
    Emu e(R"(
.visible .entry pairs(.param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b16 %h<4>;
    .reg .f16x2 %hh<4>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %laneid;
    mul.wide.u32 %rd2, %r1, 16;
    add.s64 %rd3, %rd1, %rd2;
    mov.u32 %r2, %lanemask_lt;          st.global.u32 [%rd3+0], %r2;
    mov.u32 %r2, %lanemask_ge;          st.global.u32 [%rd3+4], %r2;
    mov.u32 %r2, %smid;                 st.global.u32 [%rd3+8], %r2;
    mov.b16 %h1, 0x3C00;
    mov.b16 %h2, 0xC000;
    mov.b32 %hh1, {%h1, %h2};
    mul.rn.f16x2 %hh2, %hh1, %hh1;
    add.rn.f16x2 %hh3, %hh2, %hh1;
    st.global.b32 [%rd3+12], %hh3;
    ret;
}
)");
    ASSERT_LOADED(e);
    uint64_t out = e.alloc(32 * 16 * 3);
    ASSERT_NO_FAULT(e.run("pairs", {3, 1, 1}, {32, 1, 1}, Params().add(out)));
    auto r = e.get<uint32_t>(out, 32 * 4);   // the last block wrote last
    for (uint32_t l = 0; l < 32; ++l) {
        EXPECT_EQ(r[4 * l + 0], (1u << l) - 1);
        EXPECT_EQ(r[4 * l + 1], ~((1u << l) - 1));
        EXPECT_EQ(r[4 * l + 2], 2u % device_limits().sm_count);
        EXPECT_EQ(r[4 * l + 3], 0x40004000u);   // (1*1 + 1, -2*-2 + -2) = (2, 2)
    }
}

}  // namespace
