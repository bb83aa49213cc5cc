// Shared by the Driver-layer tests on emu (test_cuda_driver, test_cuda_events):
// hand-written PTX, emu's library, an environment variable for one scope, and
// a helper that returns the ptxlm::cuda::Error a call throws.
#pragma once

#include <gtest/gtest.h>

#include <cstdlib>
#include <memory>
#include <optional>
#include <string>

#include "engine/cuda/driver.h"

namespace ptxlm::cuda::test {


// c[i] = a[i] + b[i] for i < n; x[i] *= s for i < n.
inline const char* kPtx = R"(.version 7.8
.target sm_90
.address_size 64

.visible .entry vadd(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<10>;
    ld.param.u64 %rd1, [pa];
    ld.param.u64 %rd2, [pb];
    ld.param.u64 %rd3, [pc];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd1, %rd1;
    cvta.to.global.u64 %rd2, %rd2;
    cvta.to.global.u64 %rd3, %rd3;
    mul.wide.u32 %rd4, %r5, 4;
    add.s64 %rd5, %rd1, %rd4;
    add.s64 %rd6, %rd2, %rd4;
    add.s64 %rd7, %rd3, %rd4;
    ld.global.f32 %f1, [%rd5];
    ld.global.f32 %f2, [%rd6];
    add.rn.f32 %f3, %f1, %f2;
    st.global.f32 [%rd7], %f3;
DONE:
    ret;
}

.visible .entry scale(.param .u64 px, .param .f32 s, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [px];
    ld.param.f32 %f1, [s];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %ntid.x;
    mov.u32 %r4, %tid.x;
    mad.lo.s32 %r5, %r2, %r3, %r4;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
    cvta.to.global.u64 %rd1, %rd1;
    mul.wide.u32 %rd2, %r5, 4;
    add.s64 %rd3, %rd1, %rd2;
    ld.global.f32 %f2, [%rd3];
    mul.rn.f32 %f3, %f2, %f1;
    st.global.f32 [%rd3], %f3;
DONE:
    ret;
}
)";

// Line 8 holds an instruction no PTX assembler knows.
inline const char* kBadPtx = R"(.version 7.8
.target sm_90
.address_size 64

.visible .entry broken(.param .u64 p)
{
    .reg .b32 %r<4>;
    frobnicate.u32 %r1, %r2;
    ret;
}
)";

inline std::string emu_libcuda() {
    const char* p = std::getenv("PTXLM_LIBCUDA");
    return p && *p ? p : PTXLM_EMU_LIBCUDA;
}

// Sets an environment variable for one scope.
class ScopedEnv {
public:
    ScopedEnv(const char* name, const std::string& value) : name_(name) {
        if (const char* old = std::getenv(name)) old_ = old;
        setenv(name, value.c_str(), 1);
    }
    ~ScopedEnv() {
        if (old_) setenv(name_, old_->c_str(), 1);
        else unsetenv(name_);
    }
private:
    const char* name_;
    std::optional<std::string> old_;
};

inline std::shared_ptr<const Driver> driver() { return Driver::load(emu_libcuda()); }

// Runs f and returns the Error it throws (fails the test if it does not throw one).
template <class F>
Error expect_error(F&& f) {
    try {
        f();
    } catch (const Error& e) {
        return e;
    }
    ADD_FAILURE() << "expected ptxlm::cuda::Error";
    return Error(CUDA_SUCCESS, "", "");
}

inline unsigned blocks_for(unsigned n, unsigned block) { return (n + block - 1) / block; }


}  // namespace ptxlm::cuda::test
