// emu_bench: how fast the interpreter runs a simple ALU loop, in
// thread-instructions per second on one core. A measurement tool, not a test.
//
//   emu_bench [iterations-per-thread] [blocks]
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "interp.h"
#include "stats.h"

namespace {

// Per iteration: 6 ALU instructions plus the loop's add/setp/bra.
const char* kPtx = R"(
.version 7.8
.target sm_90
.address_size 64
.visible .entry alu_loop(.param .u64 out, .param .u32 iters)
{
    .reg .pred %p<2>;
    .reg .b32 %r<10>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [iters];
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, 0;
    mov.u32 %r4, 7;
    cvt.rn.f32.u32 %f1, %r2;
    mov.f32 %f2, 0f3F800000;
LOOP:
    mad.lo.s32 %r4, %r4, 1664525, %r2;
    xor.b32 %r5, %r4, %r3;
    shr.u32 %r6, %r5, 3;
    add.s32 %r4, %r4, %r6;
    fma.rn.f32 %f2, %f2, 0f3F7FFFFE, %f1;
    max.f32 %f2, %f2, 0f00000000;
    add.s32 %r3, %r3, 1;
    setp.lt.u32 %p1, %r3, %r1;
    @%p1 bra LOOP;
    cvt.u64.u32 %rd2, %r2;
    shl.b64 %rd2, %rd2, 2;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r4;
    ret;
}
)";

// A streaming kernel: each thread reads 16-byte vectors grid-stride and
// accumulates, the memory-bound shape of a GEMV.
const char* kStreamPtx = R"(
.version 7.8
.target sm_90
.address_size 64
.visible .entry stream(.param .u64 in, .param .u64 out, .param .u32 n4)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .f32 %f<8>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [in];
    ld.param.u64 %rd2, [out];
    ld.param.u32 %r1, [n4];
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, %ctaid.x;
    mov.u32 %r4, %ntid.x;
    mad.lo.u32 %r5, %r3, %r4, %r2;
    mov.u32 %r6, %nctaid.x;
    mul.lo.u32 %r6, %r6, %r4;
    mov.f32 %f1, 0f00000000;
    setp.ge.u32 %p1, %r5, %r1;
    @%p1 bra DONE;
LOOP:
    mul.wide.u32 %rd3, %r5, 16;
    add.s64 %rd4, %rd1, %rd3;
    ld.global.nc.v4.f32 {%f2, %f3, %f4, %f5}, [%rd4];
    fma.rn.f32 %f1, %f2, %f3, %f1;
    fma.rn.f32 %f1, %f4, %f5, %f1;
    add.u32 %r5, %r5, %r6;
    setp.lt.u32 %p1, %r5, %r1;
    @%p1 bra LOOP;
DONE:
    mul.wide.u32 %rd3, %r2, 4;
    add.s64 %rd5, %rd2, %rd3;
    st.global.f32 [%rd5], %f1;
    ret;
}
)";

}  // namespace

int main(int argc, char** argv) {
    using namespace ptxlm::emu;
    uint32_t iters = argc > 1 ? uint32_t(std::strtoul(argv[1], nullptr, 10)) : 2000;
    uint32_t blocks = argc > 2 ? uint32_t(std::strtoul(argv[2], nullptr, 10)) : 64;
    std::string log;
    auto prog = load_program(kPtx, &log);
    if (!prog) {
        std::fprintf(stderr, "load failed:\n%s", log.c_str());
        return 1;
    }
    Memory mem;
    const uint32_t threads = 256;
    uint64_t out = mem.alloc(uint64_t(blocks) * threads * 4);
    uint8_t params[16] = {};
    std::memcpy(params, &out, 8);
    std::memcpy(params + 8, &iters, 4);
    LaunchConfig cfg;
    cfg.grid = {blocks, 1, 1};
    cfg.block = {threads, 1, 1};
    cfg.params = params;
    cfg.params_size = 12;
    Stats stats;
    auto t0 = std::chrono::steady_clock::now();
    auto fault = run_kernel(*prog, "alu_loop", cfg, mem, &stats);
    double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    if (fault) {
        std::fprintf(stderr, "fault %d: %s\n", fault->cuda_error, fault->message.c_str());
        return 1;
    }
    // Without stats collection (the driver's default path).
    t0 = std::chrono::steady_clock::now();
    fault = run_kernel(*prog, "alu_loop", cfg, mem, nullptr);
    double s2 = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    std::printf("emu_bench: %u blocks x %u threads x %u iterations\n", blocks, threads, iters);
    std::printf("thread-instructions: %llu in %.3f s with stats (%.1f M/s), %.3f s without (%.1f M/s)\n",
                (unsigned long long)stats.thread_instructions, s, stats.thread_instructions / s / 1e6, s2,
                stats.thread_instructions / s2 / 1e6);
    std::printf("%s\n", stats.to_json().c_str());

    auto sprog = load_program(kStreamPtx, &log);
    if (!sprog) {
        std::fprintf(stderr, "load failed:\n%s", log.c_str());
        return 1;
    }
    const uint32_t n4 = 1u << 20;   // 16 MiB of f32
    uint64_t in = mem.alloc(uint64_t(n4) * 16);
    std::memset(mem.translate(in, uint64_t(n4) * 16), 0, uint64_t(n4) * 16);
    uint8_t sp[24] = {};
    std::memcpy(sp, &in, 8);
    std::memcpy(sp + 8, &out, 8);
    std::memcpy(sp + 16, &n4, 4);
    cfg.grid = {64, 1, 1};
    cfg.params = sp;
    cfg.params_size = 20;
    for (Stats* st : {&stats, static_cast<Stats*>(nullptr)}) {
        t0 = std::chrono::steady_clock::now();
        fault = run_kernel(*sprog, "stream", cfg, mem, st);
        double t = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        if (fault) {
            std::fprintf(stderr, "fault %d: %s\n", fault->cuda_error, fault->message.c_str());
            return 1;
        }
        std::printf("stream (16 MiB, 16-byte loads) %s stats: %.3f s, %.1f MB/s of global loads, %.1f M thread-instructions/s\n",
                    st ? "with" : "without", t, double(n4) * 16 / t / 1e6, stats.thread_instructions / t / 1e6);
    }
    return 0;
}
