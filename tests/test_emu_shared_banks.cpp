// emu's shared-memory wavefront counter: the pure bank model
// (emu/shared_banks.h) on hand-made lane addresses, then hand-written PTX
// kernels whose launch Stats must give exactly the wavefronts the model
// predicts, with a negative control (a 2-way conflict reads as ratio 2).
#include <gtest/gtest.h>

#include <array>
#include <cstdint>

#include "emu_test_util.h"
#include "shared_banks.h"

using namespace ptxlm::emu;
using namespace ptxlm::emu::testing_util;

namespace {

// Lane l accesses base + l * stride_bytes.
std::array<uint32_t, 32> lanes(uint32_t stride_bytes, uint32_t base = 0) {
    std::array<uint32_t, 32> a{};
    for (uint32_t l = 0; l < 32; ++l) a[l] = base + l * stride_bytes;
    return a;
}

void expect_wavefronts(const std::array<uint32_t, 32>& a, uint32_t mask, uint32_t bytes, uint32_t actual,
                       uint32_t ideal) {
    SharedWavefronts w = shared_wavefronts(a.data(), mask, bytes);
    EXPECT_EQ(w.actual, actual) << bytes << "-byte access, mask 0x" << std::hex << mask;
    EXPECT_EQ(w.ideal, ideal) << bytes << "-byte access, mask 0x" << std::hex << mask;
}

TEST(EmuSharedBanks, FourByteStrides) {
    expect_wavefronts(lanes(4), ~0u, 4, 1, 1);          // one word per bank
    expect_wavefronts(lanes(8), ~0u, 4, 2, 1);          // 2-way conflict, 32 distinct words
    expect_wavefronts(lanes(128), ~0u, 4, 32, 1);       // every lane in bank 0
    expect_wavefronts(lanes(0), ~0u, 4, 1, 1);          // broadcast of one word
    expect_wavefronts(lanes(4, 4 * 7), ~0u, 4, 1, 1);   // unaligned window: still distinct banks
    expect_wavefronts(lanes(4), 0x0000ffffu, 4, 1, 1);  // 16 lanes active
    expect_wavefronts(lanes(128), 0x0000000fu, 4, 4, 1);// inactive lanes cost nothing
    expect_wavefronts(lanes(4), 0u, 4, 0, 0);           // no active lane: nothing
}

TEST(EmuSharedBanks, SubWordAndBroadcastGroups) {
    expect_wavefronts(lanes(1), ~0u, 1, 1, 1);     // 32 bytes = 8 words, 4 lanes per word
    expect_wavefronts(lanes(2), ~0u, 2, 1, 1);     // 16 words
    // Lanes in pairs on the same word (l/2), words 0..15: broadcast within
    // each pair, distinct banks across pairs.
    std::array<uint32_t, 32> a{};
    for (uint32_t l = 0; l < 32; ++l) a[l] = (l / 2) * 4;
    expect_wavefronts(a, ~0u, 4, 1, 1);
    // Two distinct words in bank 0 (0 and 32), each read by 16 lanes.
    for (uint32_t l = 0; l < 32; ++l) a[l] = (l % 2) * 128;
    expect_wavefronts(a, ~0u, 4, 2, 1);
}

TEST(EmuSharedBanks, WideAccessesPhases) {
    expect_wavefronts(lanes(8), ~0u, 8, 2, 2);      // 16 lanes per phase, 2 phases, conflict-free
    expect_wavefronts(lanes(16), ~0u, 16, 4, 4);    // 8 lanes per phase, 4 phases, conflict-free
    expect_wavefronts(lanes(128), ~0u, 16, 32, 4);  // 8 lanes per phase all on banks 0..3: 8 x 4 phases
    expect_wavefronts(lanes(16), 0x000000ffu, 16, 1, 1);  // one phase active, three cost nothing
    expect_wavefronts(lanes(16), 0x01010101u, 16, 4, 1);  // one lane in each phase: 4 phases, 16 words
    expect_wavefronts(lanes(0), ~0u, 16, 4, 1);     // the same 16 bytes to every lane: 1 per phase
    expect_wavefronts(lanes(32), ~0u, 32, 8, 8);    // 32-byte: 4 lanes per phase, 8 phases
}

// One warp: each lane stores its tid at tid * 4 * stride, then loads it back
// and writes what it read to out[tid].
const char* kStrided = R"(
.visible .entry strided(.param .u64 out, .param .u32 stride)
{
    .reg .b32 %r<8>;
    .reg .b64 %rd<4>;
    .shared .align 16 .b8 sh[4096];
    ld.param.u64 %rd1, [out];
    ld.param.u32 %r1, [stride];
    mov.u32 %r2, %tid.x;
    mul.lo.u32 %r3, %r2, %r1;
    shl.b32 %r3, %r3, 2;
    mov.u32 %r4, sh;
    add.u32 %r4, %r4, %r3;
    st.shared.u32 [%r4], %r2;
    bar.sync 0;
    ld.shared.u32 %r5, [%r4];
    mul.wide.u32 %rd2, %r2, 4;
    add.u64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r5;
    ret;
}
// One warp: lane l loads 16 bytes at l * 128 (8 lanes per phase on banks 0..3).
.visible .entry wide(.param .u64 out)
{
    .reg .b32 %r<12>;
    .reg .b64 %rd<4>;
    .shared .align 16 .b8 sh[4096];
    ld.param.u64 %rd1, [out];
    mov.u32 %r2, %tid.x;
    shl.b32 %r3, %r2, 7;
    mov.u32 %r4, sh;
    add.u32 %r4, %r4, %r3;
    ld.shared.v4.u32 {%r5, %r6, %r7, %r8}, [%r4];
    add.u32 %r5, %r5, %r8;
    mul.wide.u32 %rd2, %r2, 4;
    add.u64 %rd3, %rd1, %rd2;
    st.global.u32 [%rd3], %r5;
    ret;
}
)";

struct Counted {
    Stats s;
    std::vector<uint32_t> out;
};

Counted run_strided(Emu& e, uint32_t stride) {
    Counted c;
    uint64_t out = e.alloc(32 * 4);
    auto f = e.run("strided", {1, 1, 1}, {32, 1, 1}, Params().add(out).add(stride), &c.s);
    EXPECT_FALSE(f.has_value()) << f->message;
    c.out = e.get<uint32_t>(out, 32);
    return c;
}

TEST(EmuSharedBanks, StridedKernelCounts) {
    Emu e(kStrided);
    ASSERT_LOADED(e);
    struct Case {
        uint32_t stride, wavefronts, ideal;
    };
    // stride 0: every lane on word 0 (a broadcast load; the stores all hit one word).
    for (Case c : {Case{1, 1, 1}, Case{2, 2, 1}, Case{32, 32, 1}, Case{0, 1, 1}}) {
        SCOPED_TRACE("stride " + std::to_string(c.stride));
        Counted r = run_strided(e, c.stride);
        for (uint32_t l = 0; l < 32; ++l) {   // the loads read what the stores wrote
            if (c.stride) EXPECT_EQ(r.out[l], l);
            else EXPECT_LT(r.out[l], 32u);   // one of the lanes' stores won
        }
        EXPECT_EQ(r.s.shared_load_bytes, 128u);
        EXPECT_EQ(r.s.shared_store_bytes, 128u);
        EXPECT_EQ(r.s.shared_load_wavefronts, c.wavefronts);
        EXPECT_EQ(r.s.shared_load_ideal_wavefronts, c.ideal);
        EXPECT_EQ(r.s.shared_store_wavefronts, c.wavefronts);
        EXPECT_EQ(r.s.shared_store_ideal_wavefronts, c.ideal);
    }
}

TEST(EmuSharedBanks, RatioSeesTheConflict) {
    Emu e(kStrided);
    ASSERT_LOADED(e);
    Stats one = run_strided(e, 1).s, two = run_strided(e, 2).s;
    EXPECT_DOUBLE_EQ(one.shared_wavefront_ratio(), 1.0);
    EXPECT_DOUBLE_EQ(two.shared_wavefront_ratio(), 2.0);   // negative control: a 2-way conflict is not ideal
    EXPECT_NE(one.shared_wavefront_ratio(), two.shared_wavefront_ratio());
    EXPECT_DOUBLE_EQ(Stats{}.shared_wavefront_ratio(), 0.0);
    // Accumulated over launches, the ratio of the sums ((1+2 loads + 1+2
    // stores) / (1+1 + 1+1) ideal = 1.5), and serialised.
    Stats sum = one;
    sum += two;
    EXPECT_EQ(sum.shared_load_wavefronts, 3u);
    EXPECT_EQ(sum.shared_store_ideal_wavefronts, 2u);
    EXPECT_DOUBLE_EQ(sum.shared_wavefront_ratio(), 1.5);
    std::string j = sum.to_json();
    EXPECT_NE(j.find("\"shared_load_wavefronts\":3"), std::string::npos) << j;
    EXPECT_NE(j.find("\"shared_store_wavefronts\":3"), std::string::npos) << j;
    EXPECT_NE(j.find("\"shared_load_ideal_wavefronts\":2"), std::string::npos) << j;
    EXPECT_NE(j.find("\"shared_store_ideal_wavefronts\":2"), std::string::npos) << j;
}

TEST(EmuSharedBanks, WideKernelCounts) {
    Emu e(kStrided);
    ASSERT_LOADED(e);
    Stats s;
    uint64_t out = e.alloc(32 * 4);
    auto f = e.run("wide", {1, 1, 1}, {32, 1, 1}, Params().add(out), &s);
    ASSERT_NO_FAULT(f);
    EXPECT_EQ(s.shared_load_bytes, 32u * 16);
    EXPECT_EQ(s.shared_load_wavefronts, 32u);
    EXPECT_EQ(s.shared_load_ideal_wavefronts, 4u);
    EXPECT_EQ(s.shared_store_wavefronts, 0u);
    EXPECT_DOUBLE_EQ(s.shared_wavefront_ratio(), 8.0);
}

}  // namespace
