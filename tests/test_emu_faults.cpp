// emu's interpreter core, strictness and accounting: out-of-bounds and
// misaligned accesses, deadlocked barriers, the watchdog, instructions and
// register widths the loader must refuse, launch checks, the accepted PTX
// syntax, and the memory statistics (sectors, unique bytes).
#include <gtest/gtest.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>

#include "emu_test_util.h"

using namespace ptxlm::emu;
using namespace ptxlm::emu::testing_util;

namespace {

// A kernel storing tid.x (as f32 index) to out[tid]; used by the fault tests.
const char* kStore = R"(
.visible .entry oob(.param .u64 out)
{
    .reg .b32 %r<4>;
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd2, %r1, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r1;
    ret;
}
)";

TEST(EmuInterp, OutOfBoundsStoreFaults) {
    Emu e(kStore);
    ASSERT_LOADED(e);
    uint64_t out = e.alloc(32 * 4);
    ASSERT_NO_FAULT(e.run("oob", {1, 1, 1}, {32, 1, 1}, Params().add(out)));
    auto f = e.run("oob", {1, 1, 1}, {64, 1, 1}, Params().add(out));
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->cuda_error, 700);
    EXPECT_NE(f->message.find("kernel 'oob'"), std::string::npos) << f->message;
    EXPECT_NE(f->message.find("block (0,0,0)"), std::string::npos) << f->message;
    EXPECT_NE(f->message.find("thread (32,0,0)"), std::string::npos) << f->message;
    char addr[32];
    std::snprintf(addr, sizeof addr, "0x%llx", (unsigned long long)(out + 128));
    EXPECT_NE(f->message.find(addr), std::string::npos) << f->message;
    EXPECT_NE(f->message.find("st.global.u32 [%rd3], %r1;"), std::string::npos) << f->message;
    EXPECT_NE(f->message.find("line 13"), std::string::npos) << f->message;
    // A freed buffer is no longer addressable.
    ASSERT_TRUE(e.mem.free(out));
    f = e.run("oob", {1, 1, 1}, {1, 1, 1}, Params().add(out));
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->cuda_error, 700);
}

TEST(EmuInterp, MisalignedVectorLoadFaults) {
    Emu e(R"(
.visible .entry mis(.param .u64 in)
{
    .reg .f32 %f<5>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [in];
    ld.global.nc.v4.f32 {%f1, %f2, %f3, %f4}, [%rd1+4];
    ret;
}
)");
    ASSERT_LOADED(e);
    uint64_t in = e.alloc(64);
    auto f = e.run("mis", {1, 1, 1}, {1, 1, 1}, Params().add(in));
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->cuda_error, 716);
    EXPECT_NE(f->message.find("16-byte"), std::string::npos) << f->message;
}

TEST(EmuInterp, BarrierDeadlockIsReported) {
    Emu e(R"(
.visible .entry dl(.param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    mov.u32 %r1, %tid.x;
    setp.ge.u32 %p1, %r1, 32;
    @%p1 exit;
    bar.sync 0;
    ret;
}
)");
    ASSERT_LOADED(e);
    auto f = e.run("dl", {1, 1, 1}, {64, 1, 1}, Params().add(uint64_t(0)));
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->cuda_error, 702);
    EXPECT_NE(f->message.find("deadlock"), std::string::npos) << f->message;
    EXPECT_NE(f->message.find("barrier 0 has 32 of 64"), std::string::npos) << f->message;
    EXPECT_NE(f->message.find("exited warps: 1"), std::string::npos) << f->message;
}

TEST(EmuInterp, WatchdogStopsSpinningWarp) {
    Emu e(R"(
.visible .entry spin(.param .u64 flag)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [flag];
WAIT:
    ld.global.acquire.gpu.u32 %r1, [%rd1];
    setp.eq.u32 %p1, %r1, 0;
    @%p1 bra WAIT;
    ret;
}
)");
    ASSERT_LOADED(e);
    uint64_t flag = e.alloc(4);
    setenv("PTXLM_EMU_WATCHDOG", "10000", 1);
    auto f = e.run("spin", {1, 1, 1}, {32, 1, 1}, Params().add(flag));
    unsetenv("PTXLM_EMU_WATCHDOG");
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->cuda_error, 702);
    EXPECT_NE(f->message.find("watchdog"), std::string::npos) << f->message;
    EXPECT_NE(f->message.find("warp 0"), std::string::npos) << f->message;
    EXPECT_NE(f->message.find("PC "), std::string::npos) << f->message;
}

TEST(EmuInterp, WarpsOfABlockInterleave) {
    // Warp 0 spins on a flag that warp 1 of the same block sets: this
    // finishes on hardware, so it must finish here (time-sliced warps).
    Emu e(R"(
.visible .entry flag(.param .u64 flag)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [flag];
    mov.u32 %r1, %tid.x;
    setp.ge.u32 %p1, %r1, 32;
    @%p1 bra SETTER;
WAIT:
    ld.volatile.global.u32 %r2, [%rd1];
    setp.eq.u32 %p1, %r2, 0;
    @%p1 bra WAIT;
    st.global.u32 [%rd1+4], %r2;
    ret;
SETTER:
    mov.u32 %r3, 0;
DELAY:
    add.u32 %r3, %r3, 1;
    setp.lt.u32 %p1, %r3, 20000;
    @%p1 bra DELAY;
    st.release.gpu.global.u32 [%rd1], 7;
    ret;
}
)");
    ASSERT_LOADED(e);
    uint64_t flag = e.alloc(8);
    ASSERT_NO_FAULT(e.run("flag", {1, 1, 1}, {64, 1, 1}, Params().add(flag)));
    EXPECT_EQ(e.get<uint32_t>(flag + 4, 1)[0], 7u);
}

TEST(EmuInterp, LoadRejectsWhatItDoesNotImplement) {
    struct Case { const char* body; const char* expect; };
    const Case cases[] = {
        {"    frobnicate.b32 %r1, %r2;\n", "line 9: unsupported instruction 'frobnicate.b32'"},
        {"    cvt.rn.f16x2.f32 %r1, %r2;\n", "line 9: unsupported conversion 'cvt.rn.f16x2.f32'"},
        {"    cvt.f16.f32 %r1, %r2;\n", "rounding"},
        {"    mul.u32 %r1, %r2, %r2;\n", "needs .lo, .hi or .wide"},
        {"    ld.global.L1::no_allocate.u32 %r1, [%rd1];\n", "unsupported modifier '.L1::no_allocate'"},
        {"    add.u32 %r1, %r9, %r2;\n", "unknown register '%r9'"},
        {"    bra NOWHERE;\n", "unknown label 'NOWHERE'"},
        {"    bar.sync 0, 48;\n", "multiple of 32"},
        {"    ld.local.u32 %r1, [%rd1];\n", "unsupported modifier '.local'"},
        {"    add.u32 %r1, %rd1, %r2;\n", "source %rd1 of 'add.u32' is 64-bit, expected 32-bit"},
        {"    ld.global.u32 %r1, [%r2];\n", "address %r2 of 'ld.global.u32' is 32-bit, expected 64-bit"},
        {"    mul.wide.u32 %r1, %r1, %r2;\n", "destination %r1 of 'mul.wide.u32' is 32-bit, expected 64-bit"},
        {"    setp.lt.u32 %r1, %r1, %r2;\n", "expected 1-bit"},
        {"    mov.u32 %r1, %clock64;\n", "reads a 64-bit clock"},
        {"    .extern .shared .b8 x[];\n", "module scope"},
        {"    elect.sync %r1|%p1, 0xffffffff;\n", "requires PTX ISA .version 8.0"},
        {"    prefetch.shared.L2 [%rd1];\n", "prefetch{.global}.L1|.L2"},
        {"    prefetch.global [%rd1];\n", "prefetch{.global}.L1|.L2"},
        {"    prefetch.L2::evict_last [%rd1];\n", "bad 'prefetch"},
        {"    prefetch.global.L2 [%r1];\n", "address %r1 of 'prefetch.global.L2' is 32-bit"},
    };
    for (const auto& c : cases) {
        std::string ptx = std::string(kHead) +
                          ".visible .entry k(.param .u64 p)\n{\n    .reg .b32 %r<3>;\n    .reg .b64 %rd<2>;\n    .reg .pred %p<2>;\n" + c.body + "    ret;\n}\n";
        std::string log;
        auto p = load_program(ptx, &log);
        EXPECT_FALSE(p) << c.body;
        EXPECT_NE(log.find(c.expect), std::string::npos) << "log: " << log;
    }
}

TEST(EmuInterp, ParsesTheSupportedSyntax) {
    Emu e(R"(
/* block comment
   over lines */
.extern .shared .align 16 .b8 dyn[];
.visible .entry syn(.param .u64 out, .param .u32 n, .param .align 8 .b8 s[16]) .maxntid 64, 1, 1
{
    .reg .pred %p<2>;
    .reg .b32 %r<10>;
    .reg .f64 %fd<3>;
    .reg .b64 %rd<6>;
    .shared .align 16 .b8 smem[64];
    ld.param.u64 %rd1, [out];        // trailing comment
    ld.param.u32 %r1, [n];
    ld.param.u32 %r2, [s+8];
    mov.u32 %r3, -7;
    mov.u32 %r4, 0xff;
    mov.f64 %fd1, 0d3FF8000000000000;
    mov.u32 %r5, %tid.x;
    setp.ne.u32 %p1, %r5, 0;
    @!%p1 st.shared.u32 [smem+8], %r1;
    st.shared.u32 [dyn], %r2;
    @%p1 bra END;
    ld.shared.u32 %r6, [smem+8];
    ld.shared.u32 %r7, [dyn];
    st.global.v2.u32 [%rd1], {%r6, %r7};
    st.global.u32 [%rd1+8], %r3;
    st.global.u32 [%rd1+12], %r4;
    st.global.f64 [%rd1+16], %fd1;
    mov.u32 %r8, dyn;
    st.global.u32 [%rd1+24], %r8;
END:
    ret;
}
)");
    ASSERT_LOADED(e);
    const auto& ks = program_kernels(*e.prog);
    ASSERT_EQ(ks.size(), 1u);
    EXPECT_EQ(ks[0].name, "syn");
    ASSERT_EQ(ks[0].params.size(), 3u);
    EXPECT_EQ(ks[0].params[2].offset, 16u);
    EXPECT_EQ(ks[0].param_bytes, 32u);
    EXPECT_EQ(ks[0].static_shared_bytes, 64u);
    EXPECT_EQ(ks[0].max_ntid, 64u);
    uint64_t out = e.alloc(32);
    Params p;
    p.add(out).add(uint32_t(41));
    p.b.resize(32);
    uint32_t s8 = 1234;
    std::memcpy(p.b.data() + 24, &s8, 4);
    ASSERT_NO_FAULT(e.run("syn", {1, 1, 1}, {32, 1, 1}, p, nullptr, 16));
    auto r = e.get<uint32_t>(out, 8);
    EXPECT_EQ(r[0], 41u);
    EXPECT_EQ(r[1], 1234u);
    EXPECT_EQ(int32_t(r[2]), -7);
    EXPECT_EQ(r[3], 0xffu);
    EXPECT_EQ(e.get<double>(out + 16, 1)[0], 1.5);
    EXPECT_EQ(r[6], 64u);   // dynamic shared starts after the static 64 bytes
    // Launch checks.
    auto f = e.run("syn", {1, 1, 1}, {32, 1, 1}, Params().add(out).add(uint32_t(1)));
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->cuda_error, 1);
    EXPECT_NE(f->message.find("parameter buffer is 12 bytes, the kernel takes 32"), std::string::npos) << f->message;
    f = e.run("syn", {1, 1, 1}, {128, 1, 1}, p, nullptr, 16);
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->cuda_error, 1);
    EXPECT_NE(f->message.find(".maxntid 64"), std::string::npos) << f->message;
    f = e.run("syn", {1, 1, 1}, {32, 1, 1}, p, nullptr, 48 * 1024);
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->cuda_error, 1);
    EXPECT_NE(f->message.find("limit of 49152"), std::string::npos) << f->message;
    // Dynamic shared accesses are bounded by the launch's dynamic size.
    f = e.run("syn", {1, 1, 1}, {32, 1, 1}, p, nullptr, 0);
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->cuda_error, 700);
    EXPECT_NE(f->message.find("shared"), std::string::npos) << f->message;
}

TEST(EmuInterp, StatsCountSectorsAndUniqueBytes) {
    Emu e(R"(
.visible .entry ld(.param .u64 in, .param .u64 out, .param .u32 stride, .param .u32 vec)
{
    .reg .pred %p<2>;
    .reg .b32 %r<8>;
    .reg .f32 %f<6>;
    .reg .b64 %rd<6>;
    ld.param.u64 %rd1, [in];
    ld.param.u64 %rd5, [out];
    ld.param.u32 %r2, [stride];
    ld.param.u32 %r3, [vec];
    mov.u32 %r1, %tid.x;
    mul.lo.u32 %r4, %r1, %r2;
    mul.wide.u32 %rd2, %r4, 4;
    add.s64 %rd3, %rd1, %rd2;
    setp.ne.u32 %p1, %r3, 0;
    @%p1 bra VEC;
    ld.global.f32 %f1, [%rd3];
    ld.global.f32 %f2, [%rd3];
    bra.uni END;
VEC:
    ld.global.v4.f32 {%f1, %f2, %f3, %f4}, [%rd3];
END:
    ret;
}
)");
    ASSERT_LOADED(e);
    uint64_t in = e.alloc(32 * 32 * 4);
    Stats s;
    ASSERT_NO_FAULT(e.run("ld", {1, 1, 1}, {32, 1, 1}, Params().add(in).add(in).add(1u).add(0u), &s));
    EXPECT_EQ(s.global_load_requests, 2u);
    EXPECT_EQ(s.global_load_sectors, 8u);        // 4 per warp-level load
    ASSERT_EQ(s.load_sectors_by_alloc.size(), 1u);
    EXPECT_EQ(s.load_sectors_by_alloc.at(in), 8u);   // all in the one allocation read
    EXPECT_EQ(s.global_load_bytes, 256u);
    EXPECT_EQ(s.unique_global_bytes, 128u);      // the second load re-reads
    EXPECT_EQ(s.load_sectors_per_request(), 4.0);
    ASSERT_NO_FAULT(e.run("ld", {1, 1, 1}, {32, 1, 1}, Params().add(in).add(in).add(32u).add(0u), &s));
    EXPECT_EQ(s.global_load_sectors, 64u);       // 32 per load
    EXPECT_EQ(s.unique_global_bytes, 128u);
    ASSERT_NO_FAULT(e.run("ld", {1, 1, 1}, {32, 1, 1}, Params().add(in).add(in).add(4u).add(1u), &s));
    EXPECT_EQ(s.global_load_requests, 1u);
    EXPECT_EQ(s.global_load_sectors, 16u);
    EXPECT_EQ(s.unique_global_bytes, 512u);
    EXPECT_GT(s.thread_instructions, s.warp_instructions);
    EXPECT_NE(s.to_json().find("\"global_load_sectors\":16"), std::string::npos);
    EXPECT_NE(s.to_json().find("\"allocations\":[{\"base\":" + std::to_string(in) + ",\"unique\":512,\"load_sectors\":16}]"),
              std::string::npos)
        << s.to_json();
}

TEST(EmuInterp, LoaderSurvivesMutatedInput) {
    // Deterministic mutations of a valid module: each must either load (and
    // then run without crashing, whatever it computes) or fail with a log.
    // Memory safety is what the sanitizer build checks here.
    const std::string seed = std::string(kHead) + kStore;
    const char* frags[] = {"{", "}", ";", ",", "[", "]", "%r1", "%rd1", "0f3F800000", "-", "+", "@%p1 ", "!", "|",
                           ".v4", "bra L;", "L:", "<2>", "99999999999999999999", "(", ")", "/*", "\"", ".shared"};
    uint32_t x = 12345;
    auto rnd = [&] { x = x * 1103515245u + 12345u; return x >> 8; };
    setenv("PTXLM_EMU_WATCHDOG", "5000", 1);
    int loaded = 0;
    for (int it = 0; it < 3000; ++it) {
        std::string s = seed;
        for (int k = 0, n = 1 + int(rnd() % 3); k < n; ++k) {
            size_t pos = rnd() % (s.size() + 1);
            switch (rnd() % 3) {
            case 0: s.erase(pos, 1 + rnd() % 6); break;
            case 1: s.insert(pos, frags[rnd() % (sizeof frags / sizeof *frags)]); break;
            default: if (pos < s.size()) s[pos] = char(32 + rnd() % 95); break;
            }
        }
        std::string log;
        auto p = load_program(s, &log);
        if (!p) {
            EXPECT_FALSE(log.empty());
            continue;
        }
        ++loaded;
        Memory mem;
        uint64_t buf = mem.alloc(256);
        for (const auto& k : program_kernels(*p)) {
            std::vector<uint8_t> params(k.param_bytes, 0);
            for (size_t o = 0; o + 8 <= params.size(); o += 8) std::memcpy(&params[o], &buf, 8);
            LaunchConfig c;
            c.grid = {2, 1, 1};
            c.block = {64, 1, 1};
            c.params = params.data();
            c.params_size = k.param_bytes;
            Stats st;
            (void)run_kernel(*p, k.name, c, mem, &st);
        }
    }
    unsetenv("PTXLM_EMU_WATCHDOG");
    EXPECT_GT(loaded, 0);
}

}  // namespace
