// emu's warp instructions by class (Stats::by_class, emu/inst_class.h): a
// hand-written kernel with a known number of instructions of every class,
// run by two warps, so each count is twice the kernel's.
#include <gtest/gtest.h>

#include <cstdint>
#include <map>
#include <string>

#include "emu_test_util.h"
#include "inst_class.h"

using namespace ptxlm::emu;
using namespace ptxlm::emu::testing_util;

namespace {

// Per warp, by class: mov 4 (2 parameter loads, 2 movs), imad 2, alu 6
// (add.u64 x2, cvt.u32.u8, and, setp, selp), cvt 2 (s32 -> f32, f32 -> s32),
// fp 3 (fma, mul, add), dp4a 1, sfu 2 (ex2, div.approx), ld_shared 1,
// st_shared 1, ld_global 1, st_global 1, shfl 1, sync 2 (bar, fence), branch 1.
const char* kKernel = R"(
.visible .entry classes(.param .u64 in, .param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<20>;
    .reg .f32 %f<10>;
    .reg .b64 %rd<8>;
    .shared .align 4 .b32 sm[64];
    ld.param.u64 %rd1, [in];
    ld.param.u64 %rd2, [out];
    mov.u32 %r1, %tid.x;
    mov.u32 %r2, sm;
    mul.wide.u32 %rd3, %r1, 4;
    add.u64 %rd4, %rd1, %rd3;
    ld.global.u32 %r3, [%rd4];
    cvt.u32.u8 %r4, %r3;
    and.b32 %r5, %r3, 255;
    mad.lo.u32 %r6, %r1, 4, %r2;
    st.shared.u32 [%r6], %r5;
    bar.sync 0;
    ld.shared.u32 %r7, [%r6];
    dp4a.u32.u32 %r8, %r7, %r4, %r5;
    cvt.rn.f32.s32 %f1, %r8;
    fma.rn.f32 %f2, %f1, %f1, %f1;
    mul.rn.f32 %f3, %f2, 0f3F000000;
    ex2.approx.f32 %f4, %f3;
    div.approx.f32 %f5, %f4, %f2;
    add.rn.f32 %f6, %f5, %f1;
    cvt.rzi.s32.f32 %r9, %f6;
    shfl.sync.bfly.b32 %r10, %r9, 1, 31, -1;
    setp.lt.u32 %p1, %r10, 7;
    selp.u32 %r11, %r10, %r9, %p1;
    fence.acq_rel.gpu;
    add.u64 %rd5, %rd2, %rd3;
    st.global.u32 [%rd5], %r11;
    ret;
}
)";

TEST(EmuInstClass, CountsEveryClass) {
    Emu e(kKernel);
    ASSERT_LOADED(e);
    uint64_t in = e.alloc(64 * 4), out = e.alloc(64 * 4);
    Stats s;
    auto f = e.run("classes", {1, 1, 1}, {64, 1, 1}, Params().add(in).add(out), &s);
    ASSERT_NO_FAULT(f);
    const std::map<std::string, uint64_t> want = {
        {"mov", 4}, {"imad", 2}, {"alu", 6}, {"cvt", 2}, {"fp", 3}, {"dp4a", 1}, {"sfu", 2}, {"ld_shared", 1},
        {"st_shared", 1}, {"ld_global", 1}, {"st_global", 1}, {"shfl", 1}, {"sync", 2}, {"branch", 1},
        {"atomic", 0}, {"tensor", 0}, {"other", 0}};   // tensor: test_emu_mma
    uint64_t total = 0;
    for (size_t i = 0; i < kInstClasses; ++i) {
        auto w = want.find(kInstClassNames[i]);
        ASSERT_NE(w, want.end()) << kInstClassNames[i];
        EXPECT_EQ(s.by_class[i], 2 * w->second) << kInstClassNames[i];
        total += s.by_class[i];
    }
    EXPECT_EQ(total, s.warp_instructions);   // every instruction has exactly one class
    EXPECT_EQ(s.warp_instructions, 2u * 28u);
    EXPECT_NE(s.to_json().find("\"instructions_by_class\":{\"fp\":6,"), std::string::npos) << s.to_json();
}

// Negative control: the class follows the type, not the opcode alone.
TEST(EmuInstClass, TypeDecidesTheClass) {
    Inst a;
    a.op = Op::Add;
    a.ty = Ty::U32;
    EXPECT_EQ(inst_class(a), InstClass::Alu);
    a.ty = Ty::F32;
    EXPECT_EQ(inst_class(a), InstClass::Fp);
    Inst c;
    c.op = Op::Cvt;
    c.ty = Ty::S32;
    c.ty2 = Ty::S8;
    EXPECT_EQ(inst_class(c), InstClass::Alu);
    c.ty2 = Ty::F16;
    EXPECT_EQ(inst_class(c), InstClass::Cvt);
}

}  // namespace
