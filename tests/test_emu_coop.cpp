// Cooperative launches on emu: every block resident, blocks interleaved in
// seeded rounds, spinning warps yield, a launch that can never finish is
// stopped with a deadlock report (never a hang), and a seed replays exactly.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <set>
#include <string>
#include <vector>

#include "emu_test_util.h"

namespace ptxlm::emu {
namespace {

using namespace testing_util;

// A grid-wide barrier from a counter: thread 0 of each block writes its
// block's value, arrives with a release add, spins with acquire loads until
// `expected` blocks arrived, then (after bar.sync) the block reads its
// neighbour's value. `expected` above the grid size never completes.
const char* kBarrier = R"(
.visible .entry grid_barrier(.param .u64 data, .param .u64 counter, .param .u64 out, .param .u32 expected)
{
    .reg .pred %p<4>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<10>;
    ld.param.u64 %rd1, [data];
    ld.param.u64 %rd2, [counter];
    ld.param.u64 %rd3, [out];
    ld.param.u32 %r1, [expected];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %nctaid.x;
    mov.u32 %r4, %tid.x;
    setp.ne.u32 %p1, %r4, 0;
    @%p1 bra WAIT;
    mul.wide.u32 %rd4, %r2, 4;
    add.s64 %rd5, %rd1, %rd4;
    mad.lo.u32 %r5, %r2, 7, 3;
    st.global.u32 [%rd5], %r5;
    atom.add.release.gpu.global.u32 %r6, [%rd2], 1;
SPIN:
    ld.acquire.gpu.global.u32 %r7, [%rd2];
    setp.lt.u32 %p2, %r7, %r1;
    @%p2 bra SPIN;
WAIT:
    bar.sync 0;
    add.u32 %r8, %r2, 1;
    rem.u32 %r8, %r8, %r3;
    mul.wide.u32 %rd6, %r8, 4;
    add.s64 %rd7, %rd1, %rd6;
    ld.global.u32 %r9, [%rd7];
    mul.wide.u32 %rd8, %r2, 4;
    add.s64 %rd9, %rd3, %rd8;
    @%p1 bra END;
    st.global.u32 [%rd9], %r9;
END:
    ret;
}

// Each block takes a ticket: out[block] = the counter's value it saw.
.visible .entry tickets(.param .u64 counter, .param .u64 out)
{
    .reg .pred %p<2>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<5>;
    ld.param.u64 %rd1, [counter];
    ld.param.u64 %rd2, [out];
    mov.u32 %r1, %tid.x;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra END;
    atom.add.global.u32 %r2, [%rd1], 1;
    mov.u32 %r3, %ctaid.x;
    mul.wide.u32 %rd3, %r3, 4;
    add.s64 %rd4, %rd2, %rd3;
    st.global.u32 [%rd4], %r2;
END:
    ret;
}

// `rounds` grid barriers in a row on one counter: round r waits for r times
// the grid's arrivals.
.visible .entry barrier_rounds(.param .u64 counter, .param .u32 rounds)
{
    .reg .pred %p<4>;
    .reg .b32 %r<10>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [counter];
    ld.param.u32 %r1, [rounds];
    mov.u32 %r3, %nctaid.x;
    mov.u32 %r4, %tid.x;
    setp.ne.u32 %p1, %r4, 0;
    mov.u32 %r5, 1;
ROUND:
    @%p1 bra ARRIVED;
    atom.add.release.gpu.global.u32 %r6, [%rd1], 1;
    mul.lo.u32 %r7, %r5, %r3;
SPIN:
    ld.acquire.gpu.global.u32 %r8, [%rd1];
    setp.lt.u32 %p2, %r8, %r7;
    @%p2 bra SPIN;
ARRIVED:
    bar.sync 0;
    add.u32 %r5, %r5, 1;
    setp.le.u32 %p3, %r5, %r1;
    @%p3 bra ROUND;
    ret;
}

// A spin with nanosleep in its loop, on a flag block 1 sets.
.visible .entry sleepy(.param .u64 flag)
{
    .reg .pred %p<3>;
    .reg .b32 %r<4>;
    .reg .b64 %rd<2>;
    ld.param.u64 %rd1, [flag];
    mov.u32 %r1, %ctaid.x;
    setp.eq.u32 %p1, %r1, 1;
    @%p1 bra SET;
LOOP:
    nanosleep.u32 100;
    ld.acquire.gpu.global.u32 %r2, [%rd1];
    setp.eq.u32 %p2, %r2, 0;
    @%p2 bra LOOP;
    ret;
SET:
    st.release.gpu.global.u32 [%rd1], 1;
    ret;
}
)";

class Coop : public ::testing::Test {
protected:
    void SetUp() override { unsetenv("PTXLM_EMU_SEED"); }
    void TearDown() override {
        unsetenv("PTXLM_EMU_SEED");
        unsetenv("PTXLM_EMU_WATCHDOG");
    }
    static void seed(uint64_t s) { setenv("PTXLM_EMU_SEED", std::to_string(s).c_str(), 1); }

    std::optional<Fault> run(Emu& e, const char* k, uint32_t blocks, uint32_t threads, const Params& p, bool coop,
                             Stats* st = nullptr) {
        LaunchConfig c;
        c.grid = {blocks, 1, 1};
        c.block = {threads, 1, 1};
        c.params = p.b.data();
        c.params_size = uint32_t(p.b.size());
        c.cooperative = coop;
        return run_kernel(*e.prog, k, c, e.mem, st);
    }
};

TEST_F(Coop, GridBarrierFromCountersCompletesUnderTwentySeeds) {
    Emu e(kBarrier);
    ASSERT_LOADED(e);
    const uint32_t n = 8;
    uint64_t yields = 0;
    for (uint64_t s = 1; s <= 20; ++s) {
        seed(s);
        const uint64_t data = e.alloc(n * 4), counter = e.alloc(4), out = e.alloc(n * 4);
        Stats st;
        const auto f = run(e, "grid_barrier", n, 64, Params().add(data).add(counter).add(out).add(n), true, &st);
        ASSERT_NO_FAULT(f);
        const std::vector<uint32_t> got = e.get<uint32_t>(out, n);
        for (uint32_t b = 0; b < n; ++b) EXPECT_EQ(got[b], ((b + 1) % n) * 7 + 3) << "seed " << s << " block " << b;
        EXPECT_EQ(e.get<uint32_t>(counter, 1)[0], n);
        EXPECT_GE(st.spin_instructions, st.spin_yields);
        EXPECT_LE(st.spin_waits, st.spin_yields);
        EXPECT_LE(st.spin_waits, n) << "one wait per block at most: only thread 0 spins, once";
        EXPECT_EQ(st.grid_syncs, 1u) << "seed " << s;
        yields += st.spin_yields;
    }
    // Blocks that arrived early were seen waiting (not under every seed, so
    // the sum is what must be positive).
    EXPECT_GT(yields, 0u);
}

// emu counts grid-wide synchronisations (all-to-all happens-before), not
// waits: three barriers are three, a one-way flag handoff is none.
TEST_F(Coop, GridSyncsAreCountedPerBarrierNotPerWait) {
    Emu e(kBarrier);
    ASSERT_LOADED(e);
    for (uint64_t s = 1; s <= 5; ++s) {
        seed(s);
        const uint64_t counter = e.alloc(4);
        Stats st;
        ASSERT_NO_FAULT(run(e, "barrier_rounds", 6, 64, Params().add(counter).add(3u), true, &st));
        EXPECT_EQ(e.get<uint32_t>(counter, 1)[0], 18u);
        EXPECT_EQ(st.grid_syncs, 3u) << "seed " << s;
        EXPECT_LE(st.spin_waits, 3u * 6u);
        const uint64_t flag = e.alloc(4);
        Stats one_way;
        ASSERT_NO_FAULT(run(e, "sleepy", 2, 32, Params().add(flag), true, &one_way));
        EXPECT_EQ(one_way.grid_syncs, 0u) << "seed " << s;
    }
}

TEST_F(Coop, TheSameBarrierHangsWithoutACooperativeLaunchAndTheWatchdogSaysWhy) {
    Emu e(kBarrier);
    ASSERT_LOADED(e);
    setenv("PTXLM_EMU_WATCHDOG", "200000", 1);
    const uint64_t data = e.alloc(16), counter = e.alloc(4), out = e.alloc(16);
    const auto f = run(e, "grid_barrier", 4, 32, Params().add(data).add(counter).add(out).add(4u), false);
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->cuda_error, 702);
    EXPECT_NE(f->message.find("watchdog"), std::string::npos) << f->message;
}

TEST_F(Coop, ABarrierThatCannotCompleteIsReportedAsADeadlock) {
    Emu e(kBarrier);
    ASSERT_LOADED(e);
    const uint64_t data = e.alloc(16), counter = e.alloc(4), out = e.alloc(16);
    Stats st;
    // Five arrivals expected from four blocks: every block spins forever.
    const auto f = run(e, "grid_barrier", 4, 64, Params().add(data).add(counter).add(out).add(5u), true, &st);
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->cuda_error, 702);
    EXPECT_NE(f->message.find("deadlock: cooperative kernel 'grid_barrier'"), std::string::npos) << f->message;
    EXPECT_NE(f->message.find("warp 0 spins in the loop from PTX line"), std::string::npos) << f->message;
    EXPECT_NE(f->message.find("ld.acquire.gpu.global.u32"), std::string::npos) << f->message;
    EXPECT_NE(f->message.find("barrier 0 has 32 of 64 threads"), std::string::npos) << f->message;
    EXPECT_GT(st.spin_yields, 0u);
    std::printf("[coop] %s\n", f->message.c_str());
}

TEST_F(Coop, ASeedReplaysItsInterleavingExactly) {
    Emu e(kBarrier);
    ASSERT_LOADED(e);
    const uint32_t n = 16;
    auto tickets = [&](uint64_t s) {
        seed(s);
        const uint64_t counter = e.alloc(4), out = e.alloc(n * 4);
        const auto f = run(e, "tickets", n, 32, Params().add(counter).add(out), true);
        EXPECT_FALSE(f.has_value()) << f->message;
        return e.get<uint32_t>(out, n);
    };
    std::set<std::vector<uint32_t>> seen;
    for (uint64_t s = 1; s <= 20; ++s) {
        const std::vector<uint32_t> a = tickets(s);
        EXPECT_EQ(tickets(s), a) << "seed " << s << " did not replay";
        std::vector<uint32_t> sorted = a;
        std::sort(sorted.begin(), sorted.end());
        for (uint32_t i = 0; i < n; ++i) ASSERT_EQ(sorted[i], i);   // a permutation
        seen.insert(a);
    }
    EXPECT_GE(seen.size(), 10u) << "seeds hardly change the block order";
    // An ordinary launch runs blocks in order: tickets 0, 1, 2, ...
    const uint64_t counter = e.alloc(4), out = e.alloc(n * 4);
    ASSERT_NO_FAULT(run(e, "tickets", n, 32, Params().add(counter).add(out), false));
    const std::vector<uint32_t> seq = e.get<uint32_t>(out, n);
    for (uint32_t i = 0; i < n; ++i) EXPECT_EQ(seq[i], i);
}

TEST_F(Coop, NanosleepInASpinLoopYields) {
    Emu e(kBarrier);
    ASSERT_LOADED(e);
    for (uint64_t s = 1; s <= 5; ++s) {
        seed(s);
        const uint64_t flag = e.alloc(4);
        ASSERT_NO_FAULT(run(e, "sleepy", 2, 32, Params().add(flag), true));
        EXPECT_EQ(e.get<uint32_t>(flag, 1)[0], 1u);
    }
}

// ---- memory-model checking ------------------------------------------------

// The grid barrier with its arrival, its spin load and the fences around
// them spelled by the test; then every block reads its neighbour's value.
std::string handoff(const std::string& before_arrive, const std::string& arrive, const std::string& spin_load,
                    const std::string& after_spin, const std::string& read = "ld.global.u32") {
    return std::string(kHead) + R"(
.visible .entry handoff(.param .u64 data, .param .u64 counter, .param .u64 out)
{
    .reg .pred %p<4>;
    .reg .b32 %r<12>;
    .reg .b64 %rd<10>;
    ld.param.u64 %rd1, [data];
    ld.param.u64 %rd2, [counter];
    ld.param.u64 %rd3, [out];
    mov.u32 %r2, %ctaid.x;
    mov.u32 %r3, %nctaid.x;
    mul.wide.u32 %rd4, %r2, 4;
    add.s64 %rd5, %rd1, %rd4;
    mad.lo.u32 %r5, %r2, 7, 3;
    st.global.u32 [%rd5], %r5;
    )" + before_arrive + R"(
    )" + arrive + R"( %r6, [%rd2], 1;
SPIN:
    )" + spin_load + R"( %r7, [%rd2];
    setp.lt.u32 %p2, %r7, %r3;
    @%p2 bra SPIN;
    )" + after_spin + R"(
    add.u32 %r8, %r2, 1;
    rem.u32 %r8, %r8, %r3;
    mul.wide.u32 %rd6, %r8, 4;
    add.s64 %rd7, %rd1, %rd6;
    )" + read + R"( %r9, [%rd7];
    add.s64 %rd9, %rd3, %rd4;
    st.global.u32 [%rd9], %r9;
    ret;
}
)";
}

class MemoryModel : public Coop {
protected:
    // Runs the handoff on 6 one-thread blocks under `seeds` seeds; returns the
    // first fault (nullopt when every seed passed with the right values).
    std::optional<Fault> run_handoff(const std::string& ptx, int seeds = 5) {
        Emu e(ptx);
        EXPECT_TRUE(e.prog) << e.log;
        if (!e.prog) return Fault{0, "not loaded"};
        const uint32_t n = 6;
        for (int s = 1; s <= seeds; ++s) {
            seed(uint64_t(s));
            const uint64_t data = e.alloc(n * 4), counter = e.alloc(4), out = e.alloc(n * 4);
            std::optional<Fault> f = run(e, "handoff", n, 1, Params().add(data).add(counter).add(out), true);
            if (f) return f;
            const std::vector<uint32_t> got = e.get<uint32_t>(out, n);
            for (uint32_t b = 0; b < n; ++b) EXPECT_EQ(got[b], ((b + 1) % n) * 7 + 3);
        }
        return std::nullopt;
    }
};

TEST_F(MemoryModel, ReleaseAcquireHandoffPasses) {
    EXPECT_FALSE(run_handoff(handoff("", "atom.add.release.gpu.global.u32", "ld.acquire.gpu.global.u32", ""), 20));
    // The same through fences around relaxed (and plain atomic) accesses.
    EXPECT_FALSE(run_handoff(handoff("fence.acq_rel.gpu;", "atom.add.global.u32", "ld.relaxed.gpu.global.u32",
                                     "fence.acq_rel.gpu;")));
    EXPECT_FALSE(run_handoff(handoff("membar.gl;", "atom.add.global.u32", "ld.volatile.global.u32", "membar.gl;")));
}

TEST_F(MemoryModel, RelaxedHandoffIsReported) {
    const std::optional<Fault> f =
        run_handoff(handoff("", "atom.add.relaxed.gpu.global.u32", "ld.relaxed.gpu.global.u32", ""));
    ASSERT_TRUE(f.has_value());
    EXPECT_EQ(f->cuda_error, 719);
    // Both accesses are named: the reader's and the writer's block, warp and PTX line.
    EXPECT_NE(f->message.find("race: kernel 'handoff': block ("), std::string::npos) << f->message;
    EXPECT_NE(f->message.find("reads at PTX line"), std::string::npos) << f->message;
    EXPECT_NE(f->message.find("wrote at PTX line"), std::string::npos) << f->message;
    EXPECT_NE(f->message.find("`ld.global.u32 %r9, [%rd7];`"), std::string::npos) << f->message;
    EXPECT_NE(f->message.find("`st.global.u32 [%rd5], %r5;`"), std::string::npos) << f->message;
    std::printf("[memory model] %s\n", f->message.c_str());
}

TEST_F(MemoryModel, BrokenBarriersAreReported) {
    // The release missing: arrival relaxed, the wait still an acquire.
    EXPECT_TRUE(run_handoff(handoff("", "atom.add.global.u32", "ld.acquire.gpu.global.u32", "")).has_value());
    // The acquire missing.
    EXPECT_TRUE(run_handoff(handoff("", "atom.add.release.gpu.global.u32", "ld.relaxed.gpu.global.u32", "")).has_value());
    // Release and acquire at cta scope: nothing between blocks.
    EXPECT_TRUE(run_handoff(handoff("", "atom.add.release.cta.global.u32", "ld.acquire.cta.global.u32", "")).has_value());
    // A fence of cta scope only.
    EXPECT_TRUE(run_handoff(handoff("fence.acq_rel.cta;", "atom.add.global.u32", "ld.relaxed.gpu.global.u32",
                                    "fence.acq_rel.cta;")).has_value());
}

TEST_F(MemoryModel, NonCoherentReadOfDataWrittenInTheLaunchIsReported) {
    const std::optional<Fault> f = run_handoff(
        handoff("", "atom.add.release.gpu.global.u32", "ld.acquire.gpu.global.u32", "", "ld.global.nc.u32"));
    ASSERT_TRUE(f.has_value());
    EXPECT_NE(f->message.find("non-coherent path (ld.global.nc)"), std::string::npos) << f->message;
}

const char* kShared = R"(
.visible .entry shared_pass(.param .u64 out, .param .u32 sync)
{
    .reg .pred %p<3>;
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    .shared .align 4 .b32 buf[64];
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [sync];
    mov.u32 %r2, %tid.x;
    mov.u32 %r3, buf;
    shl.b32 %r4, %r2, 2;
    add.u32 %r5, %r3, %r4;
    st.shared.u32 [%r5], %r2;
    setp.ne.u32 %p1, %r1, 0;
    @!%p1 bra NOSYNC;
    bar.sync 0;
NOSYNC:
    xor.b32 %r6, %r4, 128;
    add.u32 %r6, %r3, %r6;
    ld.shared.u32 %r7, [%r6];
    mul.wide.u32 %rd2, %r2, 4;
    add.s64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r7;
    ret;
}
)";

TEST_F(MemoryModel, SharedMemoryRaceBetweenWarpsIsReported) {
    // Each of 64 threads writes its word, then reads the other warp's word
    // (offset ^ 128): with the barrier fine, without it a race. Checked in an
    // ordinary launch too with PTXLM_EMU_RACECHECK=1.
    Emu e(kShared);
    ASSERT_LOADED(e);
    const uint64_t out = e.alloc(64 * 4);
    ASSERT_NO_FAULT(run(e, "shared_pass", 1, 64, Params().add(out).add(1u), true));
    const std::vector<uint32_t> got = e.get<uint32_t>(out, 64);
    for (uint32_t t = 0; t < 64; ++t) EXPECT_EQ(got[t], t ^ 32);
    std::optional<Fault> f = run(e, "shared_pass", 1, 64, Params().add(out).add(0u), true);
    ASSERT_TRUE(f.has_value());
    EXPECT_NE(f->message.find("shared-memory race: kernel 'shared_pass'"), std::string::npos) << f->message;
    EXPECT_NE(f->message.find("no barrier between"), std::string::npos) << f->message;
    // Ordinary launches are checked only when asked.
    EXPECT_FALSE(run(e, "shared_pass", 1, 64, Params().add(out).add(0u), false).has_value());
    setenv("PTXLM_EMU_RACECHECK", "1", 1);
    f = run(e, "shared_pass", 1, 64, Params().add(out).add(0u), false);
    unsetenv("PTXLM_EMU_RACECHECK");
    ASSERT_TRUE(f.has_value());
    EXPECT_NE(f->message.find("shared-memory race"), std::string::npos) << f->message;
}

}  // namespace
}  // namespace ptxlm::emu
