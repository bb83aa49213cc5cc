// emu's memory-level-parallelism counters (emu/inflight.h, Stats
// inflight_* and dependent_load_chain_max): hand-written one-warp PTX
// kernels whose loads in flight and dependent-load chains are known by
// construction, with negative controls (a pointer chase has one row in
// flight per wait, not four; independent loads are a chain of 1, not 4).
#include <gtest/gtest.h>

#include <cstdint>
#include <string>
#include <vector>

#include "emu_test_util.h"

using namespace ptxlm::emu;
using namespace ptxlm::emu::testing_util;

namespace {

// Every kernel: lane l of warp w works on element tid = 32 w + l; a "row" is
// 32 consecutive u32 (128 bytes, 4 sectors, for one warp-wide ld.u32).
const char* kKernels = R"(
// Four independent row loads, then adds that use them: one wait, 4 rows.
.visible .entry indep(.param .u64 in, .param .u64 out)
{
    .reg .b32 %r<10>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [in];
    ld.param.u64 %rd2, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.u64 %rd4, %rd1, %rd3;
    ld.global.u32 %r2, [%rd4];
    ld.global.u32 %r3, [%rd4+128];
    ld.global.u32 %r4, [%rd4+256];
    ld.global.u32 %r5, [%rd4+384];
    add.u32 %r6, %r2, %r3;
    add.u32 %r7, %r4, %r5;
    add.u32 %r8, %r6, %r7;
    add.u64 %rd5, %rd2, %rd3;
    st.global.u32 [%rd5], %r8;
    ret;
}
// The same four loads, each used right after it: four waits of one row.
.visible .entry each(.param .u64 in, .param .u64 out)
{
    .reg .b32 %r<10>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [in];
    ld.param.u64 %rd2, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.u64 %rd4, %rd1, %rd3;
    mov.u32 %r8, 0;
    ld.global.u32 %r2, [%rd4];
    add.u32 %r8, %r8, %r2;
    ld.global.u32 %r3, [%rd4+128];
    add.u32 %r8, %r8, %r3;
    ld.global.u32 %r4, [%rd4+256];
    add.u32 %r8, %r8, %r4;
    ld.global.u32 %r5, [%rd4+384];
    add.u32 %r8, %r8, %r5;
    add.u64 %rd5, %rd2, %rd3;
    st.global.u32 [%rd5], %r8;
    ret;
}
// One 16-byte vector load per lane (512 bytes per warp), used once.
.visible .entry vec4(.param .u64 in, .param .u64 out)
{
    .reg .b32 %r<10>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [in];
    ld.param.u64 %rd2, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 16;
    add.u64 %rd4, %rd1, %rd3;
    ld.global.v4.u32 {%r2, %r3, %r4, %r5}, [%rd4];
    add.u32 %r6, %r2, %r5;
    mul.wide.u32 %rd3, %r1, 4;
    add.u64 %rd5, %rd2, %rd3;
    st.global.u32 [%rd5], %r6;
    ret;
}
// Pointer chasing: each load's value is the index of the next load.
.visible .entry chase(.param .u64 in, .param .u64 out)
{
    .reg .b32 %r<10>;
    .reg .b64 %rd<12>;
    ld.param.u64 %rd1, [in];
    ld.param.u64 %rd2, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.u64 %rd4, %rd1, %rd3;
    ld.global.u32 %r2, [%rd4];
    mul.wide.u32 %rd5, %r2, 4;
    add.u64 %rd6, %rd1, %rd5;
    ld.global.u32 %r3, [%rd6];
    mul.wide.u32 %rd7, %r3, 4;
    add.u64 %rd8, %rd1, %rd7;
    ld.global.u32 %r4, [%rd8];
    add.u64 %rd9, %rd2, %rd3;
    st.global.u32 [%rd9], %r4;
    ret;
}
// Two loads, then a barrier, then their use: the barrier is the wait.
.visible .entry barrier(.param .u64 in, .param .u64 out)
{
    .reg .b32 %r<10>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [in];
    ld.param.u64 %rd2, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.u64 %rd4, %rd1, %rd3;
    ld.global.u32 %r2, [%rd4];
    ld.global.u32 %r3, [%rd4+128];
    bar.sync 0;
    add.u32 %r6, %r2, %r3;
    add.u64 %rd5, %rd2, %rd3;
    st.global.u32 [%rd5], %r6;
    ret;
}
// A prologue: two loads each used at once (two waits), a barrier, then a
// third load and its use (a wait after the barrier); prefetches of the next
// rows (8 lanes per 128-byte line at a stride of 16 bytes: 4 lines) wait
// for nothing.
.visible .entry prologue(.param .u64 in, .param .u64 out)
{
    .reg .b32 %r<10>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [in];
    ld.param.u64 %rd2, [out];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.u64 %rd4, %rd1, %rd3;
    mul.wide.u32 %rd6, %r1, 16;
    and.b64 %rd6, %rd6, 511;
    add.u64 %rd6, %rd1, %rd6;
    prefetch.global.L2 [%rd6];
    ld.global.u32 %r2, [%rd4];
    add.u32 %r8, %r2, 1;
    ld.global.u32 %r3, [%rd4+128];
    add.u32 %r8, %r8, %r3;
    bar.sync 0;
    prefetch.global.L2::evict_last [%rd6+512];
    ld.global.u32 %r4, [%rd4+256];
    add.u32 %r8, %r8, %r4;
    add.u64 %rd5, %rd2, %rd3;
    st.global.u32 [%rd5], %r8;
    ret;
}
// A prefetch past the end of every allocation.
.visible .entry prefetch_out(.param .u64 in, .param .u64 out)
{
    .reg .b64 %rd<4>;
    ld.param.u64 %rd1, [in];
    prefetch.L2 [%rd1+1048576];
    ret;
}
// Two loads nobody reads: the warp's end is the wait.
.visible .entry unused(.param .u64 in, .param .u64 out)
{
    .reg .b32 %r<10>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [in];
    mov.u32 %r1, %tid.x;
    mul.wide.u32 %rd3, %r1, 4;
    add.u64 %rd4, %rd1, %rd3;
    ld.global.u32 %r2, [%rd4];
    ld.global.u32 %r3, [%rd4+128];
    ret;
}
)";

constexpr uint32_t kWords = 256;   // the input: 1 KiB

struct Launched {
    Stats s;
    std::vector<uint32_t> out;
};

Launched run(Emu& e, const char* kernel, const std::vector<uint32_t>& input, Dim3 grid = {1, 1, 1}, Dim3 block = {32, 1, 1}) {
    Launched r;
    uint64_t in = e.alloc(kWords * 4), out = e.alloc(64 * 4);
    e.put(in, input);
    auto f = e.run(kernel, grid, block, Params().add(in).add(out), &r.s);
    EXPECT_FALSE(f.has_value()) << kernel << ": " << f->message;
    r.out = e.get<uint32_t>(out, 64);
    return r;
}

std::vector<uint32_t> iota_input() {
    std::vector<uint32_t> v(kWords);
    for (uint32_t i = 0; i < kWords; ++i) v[i] = i;
    return v;
}

// in[i] = i + 32 (mod 256): lane l reads row 0, then row 1, row 2 (one row per hop).
std::vector<uint32_t> chase_input() {
    std::vector<uint32_t> v(kWords);
    for (uint32_t i = 0; i < kWords; ++i) v[i] = (i + 32) % kWords;
    return v;
}

TEST(EmuInflight, IndependentLoadsAreOneBatch) {
    Emu e(kKernels);
    ASSERT_LOADED(e);
    Launched r = run(e, "indep", iota_input());
    for (uint32_t l = 0; l < 32; ++l) EXPECT_EQ(r.out[l], 4 * l + 32 + 64 + 96);   // the loads read what they should
    EXPECT_EQ(r.s.global_load_sectors, 16u);
    EXPECT_EQ(r.s.inflight_batches, 1u);
    EXPECT_EQ(r.s.inflight_bytes_sum, 512u);
    EXPECT_EQ(r.s.inflight_bytes_max, 512u);
    EXPECT_DOUBLE_EQ(r.s.inflight_bytes_avg(), 512.0);
    EXPECT_EQ(r.s.dependent_load_chain_max, 1u);   // negative control: independent, not a chain of 4
}

TEST(EmuInflight, LoadsUsedAtOnceAreFourBatches) {
    Emu e(kKernels);
    ASSERT_LOADED(e);
    Launched r = run(e, "each", iota_input());
    for (uint32_t l = 0; l < 32; ++l) EXPECT_EQ(r.out[l], 4 * l + 32 + 64 + 96);
    EXPECT_EQ(r.s.inflight_batches, 4u);
    EXPECT_EQ(r.s.inflight_bytes_sum, 512u);
    EXPECT_EQ(r.s.inflight_bytes_max, 128u);
    EXPECT_DOUBLE_EQ(r.s.inflight_bytes_avg(), 128.0);
    EXPECT_EQ(r.s.dependent_load_chain_max, 1u);
}

TEST(EmuInflight, VectorLoad) {
    Emu e(kKernels);
    ASSERT_LOADED(e);
    Launched r = run(e, "vec4", iota_input());
    for (uint32_t l = 0; l < 32; ++l) EXPECT_EQ(r.out[l], 4 * l + 4 * l + 3);
    EXPECT_EQ(r.s.inflight_batches, 1u);
    EXPECT_EQ(r.s.inflight_bytes_sum, 512u);
    EXPECT_EQ(r.s.inflight_bytes_max, 512u);
    EXPECT_EQ(r.s.dependent_load_chain_max, 1u);
}

TEST(EmuInflight, PointerChaseIsAChainOfThree) {
    Emu e(kKernels);
    ASSERT_LOADED(e);
    Launched r = run(e, "chase", chase_input());
    for (uint32_t l = 0; l < 32; ++l) EXPECT_EQ(r.out[l], l + 96);   // three hops of 32
    EXPECT_EQ(r.s.global_load_sectors, 12u);
    EXPECT_EQ(r.s.dependent_load_chain_max, 3u);
    EXPECT_EQ(r.s.inflight_batches, 3u);
    EXPECT_EQ(r.s.inflight_bytes_sum, 384u);
    // Negative control: one row in flight per wait, not the four rows of the
    // independent loads.
    EXPECT_EQ(r.s.inflight_bytes_max, 128u);
    EXPECT_DOUBLE_EQ(r.s.inflight_bytes_avg(), 128.0);
    // The same kernel on data that makes every hop read the same row: the
    // chain is a property of the dependences, not of the addresses.
    std::vector<uint32_t> self(kWords);
    for (uint32_t i = 0; i < kWords; ++i) self[i] = i;
    Launched s = run(e, "chase", self);
    EXPECT_EQ(s.s.dependent_load_chain_max, 3u);
    EXPECT_EQ(s.s.inflight_bytes_max, 128u);
}

TEST(EmuInflight, BarrierAndExitDrain) {
    Emu e(kKernels);
    ASSERT_LOADED(e);
    Launched b = run(e, "barrier", iota_input());
    for (uint32_t l = 0; l < 32; ++l) EXPECT_EQ(b.out[l], 2 * l + 32);
    EXPECT_EQ(b.s.inflight_batches, 1u);   // at bar.sync; the add after it finds nothing pending
    EXPECT_EQ(b.s.inflight_bytes_sum, 256u);
    Launched u = run(e, "unused", iota_input());
    EXPECT_EQ(u.s.inflight_batches, 1u);   // at ret
    EXPECT_EQ(u.s.inflight_bytes_sum, 256u);
}

TEST(EmuInflight, PerWarpOverBlocksAndAccumulated) {
    Emu e(kKernels);
    ASSERT_LOADED(e);
    // 2 blocks x 2 warps: each warp waits once with its 4 rows in flight.
    Launched r = run(e, "indep", iota_input(), {2, 1, 1}, {64, 1, 1});
    EXPECT_EQ(r.s.inflight_batches, 4u);
    EXPECT_EQ(r.s.inflight_bytes_sum, 4u * 512);
    EXPECT_EQ(r.s.inflight_bytes_max, 512u);
    EXPECT_EQ(r.s.dependent_load_chain_max, 1u);
    // Launches accumulate: sums add, maxima take the larger.
    Stats sum = run(e, "chase", chase_input()).s;
    sum += run(e, "indep", iota_input()).s;
    EXPECT_EQ(sum.inflight_batches, 4u);
    EXPECT_EQ(sum.inflight_bytes_sum, 384u + 512u);
    EXPECT_EQ(sum.inflight_bytes_max, 512u);
    EXPECT_EQ(sum.dependent_load_chain_max, 3u);
    std::string j = sum.to_json();
    EXPECT_NE(j.find("\"inflight_batches\":4"), std::string::npos) << j;
    EXPECT_NE(j.find("\"inflight_bytes_sum\":896"), std::string::npos) << j;
    EXPECT_NE(j.find("\"inflight_bytes_max\":512"), std::string::npos) << j;
    EXPECT_NE(j.find("\"dependent_load_chain_max\":3"), std::string::npos) << j;
    // Without stats nothing is tracked, and the kernel still runs.
    uint64_t in = e.alloc(kWords * 4), out = e.alloc(64 * 4);
    e.put(in, iota_input());
    auto f = e.run("chase", {1, 1, 1}, {32, 1, 1}, Params().add(in).add(out), nullptr);
    ASSERT_NO_FAULT(f);
}

// Stats::prologue_waits: the waits before each warp's first barrier (two per
// warp here, of three in all); prefetch moves no data, makes no wait and
// counts the distinct 128-byte lines it names (4 per warp request: the
// stride-16 addresses wrap at 512 bytes). Negative control: the wait after
// the barrier is not in the prologue.
TEST(EmuInflight, PrologueWaitsAndPrefetches) {
    Emu e(kKernels);
    ASSERT_LOADED(e);
    Launched r = run(e, "prologue", iota_input(), {1, 1, 1}, {64, 1, 1});
    for (uint32_t t = 0; t < 64; ++t) EXPECT_EQ(r.out[t], 3 * t + 1 + 32 + 64);
    EXPECT_EQ(r.s.inflight_batches, 6u);     // three per warp
    EXPECT_EQ(r.s.prologue_waits, 4u);       // two per warp, before bar.sync
    EXPECT_EQ(r.s.prefetch_requests, 4u);    // two per warp
    EXPECT_EQ(r.s.prefetch_bytes, 4u * 4 * 128);
    EXPECT_EQ(r.s.global_load_requests, 6u);   // prefetches are not loads
    const std::string j = r.s.to_json();
    EXPECT_NE(j.find("\"prologue_waits\":4"), std::string::npos) << j;
    EXPECT_NE(j.find("\"prefetch_bytes\":2048"), std::string::npos) << j;
    // Without a barrier nothing is a prologue.
    EXPECT_EQ(run(e, "each", iota_input()).s.prologue_waits, 0u);
}

// emu checks what a GPU would silently drop: a prefetch outside device memory faults.
TEST(EmuInflight, PrefetchOutsideMemoryFaults) {
    Emu e(kKernels);
    ASSERT_LOADED(e);
    uint64_t in = e.alloc(kWords * 4), out = e.alloc(64 * 4);
    auto f = e.run("prefetch_out", {1, 1, 1}, {32, 1, 1}, Params().add(in).add(out));
    ASSERT_TRUE(f.has_value());
    EXPECT_NE(f->message.find("prefetch"), std::string::npos) << f->message;
}

}  // namespace
