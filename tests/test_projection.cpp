// The projection bench's counted mode reports: launch overheads plus bytes at
// 90% of peak bandwidth, scaled by the share of SMs a grid can occupy.
#include <gtest/gtest.h>

#include <vector>

#include "engine/projection.h"

namespace ptxlm {
namespace {

GpuSpec gpu(const char* name) {
    std::optional<GpuSpec> g = find_gpu(name);
    EXPECT_TRUE(g.has_value()) << name;
    return g.value_or(GpuSpec{"none", "", 1, 1, 2048, 0});
}

TEST(Projection, NamedGpus) {
    EXPECT_EQ(gpu("h100-sxm").sms, 132);
    EXPECT_DOUBLE_EQ(gpu("h100-sxm").bandwidth_gbs, 3350);
    EXPECT_EQ(gpu("a100").sms, 108);
    EXPECT_EQ(gpu("rtx4090").sms, 128);
    EXPECT_EQ(gpu("h100-pcie").sms, 114);
    EXPECT_FALSE(find_gpu("h100").has_value());
    EXPECT_NE(gpu_names().find("rtx4090"), std::string::npos);
}

TEST(Projection, OneFullLaunch) {
    // 1 GB with every SM busy: 2 µs + 1e9 B / (0.9 × 3.35e12 B/s).
    const std::vector<LaunchCost> l = {{264, 1'000'000'000}};
    const Projection p = project(l, 1, gpu("h100-sxm"), LaunchMode::Stream);
    EXPECT_DOUBLE_EQ(p.launch_us, 2.0);
    EXPECT_NEAR(p.memory_us, 1e9 / (0.9 * 3350e9) * 1e6, 1e-9);
    EXPECT_NEAR(p.us_per_token, p.launch_us + p.memory_us, 1e-12);
    EXPECT_NEAR(p.tokens_per_s, 1e6 / p.us_per_token, 1e-9);
    EXPECT_LT(p.bandwidth_share, 0.9);
    EXPECT_GT(p.bandwidth_share, 0.89);
}

TEST(Projection, GraphsSmallGridsAndSeveralTokens) {
    const GpuSpec g = gpu("a100");
    const std::vector<LaunchCost> full = {{108, 1 << 20}, {216, 1 << 20}};
    const std::vector<LaunchCost> half = {{54, 1 << 20}, {216, 1 << 20}};
    const Projection s = project(full, 1, g, LaunchMode::Stream);
    const Projection gr = project(full, 1, g, LaunchMode::Graph);
    EXPECT_DOUBLE_EQ(s.launch_us, 4.0);
    EXPECT_DOUBLE_EQ(gr.launch_us, 2.6);
    EXPECT_DOUBLE_EQ(s.memory_us, gr.memory_us);
    // Half the SMs: the first launch moves its bytes at half the rate.
    const Projection h = project(half, 1, g, LaunchMode::Stream);
    EXPECT_NEAR(h.memory_us, 1.5 * s.memory_us, 1e-9);
    // The same launches over 4 tokens (a persistent kernel): per-token figures.
    const Projection four = project(full, 4, g, LaunchMode::Graph);
    EXPECT_DOUBLE_EQ(four.launches, 0.5);
    EXPECT_NEAR(four.us_per_token, gr.us_per_token / 4, 1e-12);
    EXPECT_DOUBLE_EQ(four.bytes, 2.0 * (1 << 20) / 4);
    EXPECT_THROW(project(full, 0, g, LaunchMode::Graph), std::invalid_argument);
    // No bytes: only overheads.
    const std::vector<LaunchCost> empty = {{1, 0}};
    EXPECT_DOUBLE_EQ(project(empty, 1, g, LaunchMode::Stream).us_per_token, 2.0);
}

TEST(Projection, PersistentKernelPaysOneLaunchAndItsGridSyncs) {
    const GpuSpec g = gpu("h100-sxm");
    const std::vector<LaunchCost> one = {{132, 100 << 20}};
    const Projection p = project(one, 2, g, LaunchMode::Persistent, 8);
    EXPECT_DOUBLE_EQ(p.launch_us, kLaunchOverheadUs[int(LaunchMode::Persistent)] / 2);
    EXPECT_DOUBLE_EQ(p.sync_us, 4 * kGridSyncUs);
    EXPECT_NEAR(p.us_per_token, p.launch_us + p.memory_us + p.sync_us, 1e-12);
    EXPECT_DOUBLE_EQ(project(one, 2, g, LaunchMode::Persistent).sync_us, 0.0);
}

TEST(Projection, BlocksPerSm) {
    const GpuSpec h = gpu("h100-sxm");
    // 256 threads, 32 registers, little shared memory: threads limit (2048 / 256).
    EXPECT_EQ(blocks_per_sm(h, 256, 32, 1024), 8);
    // 64 registers: 8 warps x 2048 registers = 16384 per block, 4 blocks of 65536.
    EXPECT_EQ(blocks_per_sm(h, 256, 64, 1024), 4);
    // Registers round up per warp to 256: 33 registers take 1280 per warp, 10240 per block: 6.
    EXPECT_EQ(blocks_per_sm(h, 256, 33, 1024), 6);
    // Shared memory: 48 KiB + 1 KiB reserved per block fits 4 times in 228 KiB.
    EXPECT_EQ(blocks_per_sm(h, 256, 32, 48 * 1024), 4);
    // The 32-block limit, and RTX 4090's 1536 threads and 100 KiB.
    EXPECT_EQ(blocks_per_sm(h, 32, 16, 0), 32);
    EXPECT_EQ(blocks_per_sm(gpu("rtx4090"), 512, 32, 0), 3);
    EXPECT_EQ(blocks_per_sm(gpu("rtx4090"), 128, 32, 40 * 1024), 2);
    EXPECT_EQ(blocks_per_sm(h, 256, 0, 0), 0);   // registers unknown
}

}  // namespace
}  // namespace ptxlm
