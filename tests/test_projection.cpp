// The projection bench's counted mode reports (engine/projection.h): each
// launch takes the largest of its limits (DRAM bytes, load round trips,
// instruction issue, each pipe, shared wavefronts) plus a launch overhead.
// Known answers per term, and which term binds.
#include <gtest/gtest.h>

#include <vector>

#include "engine/projection.h"

namespace ptxlm {
namespace {

GpuSpec gpu(const char* name) {
    std::optional<GpuSpec> g = find_gpu(name);
    EXPECT_TRUE(g.has_value()) << name;
    return g.value_or(gpus()[0]);
}

TEST(Projection, NamedGpus) {
    EXPECT_EQ(gpu("h100-sxm").sms, 132);
    EXPECT_DOUBLE_EQ(gpu("h100-sxm").bandwidth_gbs, 3350);
    EXPECT_EQ(gpu("a100").sms, 108);
    EXPECT_DOUBLE_EQ(gpu("a100").pipe_rate[size_t(Pipe::Fp32)], 64);   // compute capability 8.0
    EXPECT_DOUBLE_EQ(gpu("h100-sxm").pipe_rate[size_t(Pipe::Fp32)], 128);
    // mma.m16n8k32 8-bit per SM and clock (x32): A100 half an mma, Ada a
    // quarter, H100's mma.sync taken at A100's rate.
    EXPECT_DOUBLE_EQ(gpu("a100").pipe_rate[size_t(Pipe::Tensor)], 16);
    EXPECT_DOUBLE_EQ(gpu("rtx4090").pipe_rate[size_t(Pipe::Tensor)], 8);
    EXPECT_DOUBLE_EQ(gpu("h100-sxm").pipe_rate[size_t(Pipe::Tensor)], 16);
    EXPECT_EQ(gpu("rtx4090").sms, 128);
    EXPECT_EQ(gpu("h100-pcie").sms, 114);
    EXPECT_EQ(gpu("l40s").sms, 142);
    EXPECT_FALSE(find_gpu("h100").has_value());
    EXPECT_NE(gpu_names().find("rtx4090"), std::string::npos);
    for (const GpuSpec& g : gpus()) {   // every figure set, plausible
        EXPECT_GT(g.clock_ghz, 1.0) << g.name;
        EXPECT_GT(g.achievable, 0.5) << g.name;
        EXPECT_LE(g.achievable, 1.0) << g.name;
        EXPECT_GT(g.dram_latency_us, 0.1) << g.name;
        for (size_t i = 0; i < kPipes; ++i) EXPECT_GE(g.pipe_rate[i], i == size_t(Pipe::Tensor) ? 8 : 16) << g.name;
    }
}

TEST(Projection, BytesOnly) {
    // 1 GB with nothing else counted: 2 µs + 1e9 B / (0.94 × 3.35e12 B/s).
    const std::vector<LaunchCost> l = {{264, 1'000'000'000}};
    const Projection p = project(l, 1, gpu("h100-sxm"), LaunchMode::Stream);
    EXPECT_DOUBLE_EQ(p.launch_us, 2.0);
    EXPECT_NEAR(p.memory_us, 1e9 / (0.94 * 3350e9) * 1e6, 1e-9);
    EXPECT_DOUBLE_EQ(p.work_us, p.memory_us);
    EXPECT_NEAR(p.us_per_token, p.launch_us + p.work_us, 1e-12);
    EXPECT_NEAR(p.tokens_per_s, 1e6 / p.us_per_token, 1e-9);
    EXPECT_LT(p.bandwidth_share, 0.94);
    EXPECT_GT(p.bandwidth_share, 0.93);
    ASSERT_EQ(p.bound_us.size(), 1u);
    EXPECT_EQ(p.bound_us[0].first, "dram");
}

// One launch on an H100 SXM (132 SMs, 1.98 GHz, 0.7 µs): 264 blocks of 256
// threads (8 warps), 2 fit per SM, so the busiest SM runs 2 blocks in one
// round and does 2/264 of the work.
LaunchCost base() {
    LaunchCost l;
    l.blocks = 264;
    l.threads = 256;
    l.blocks_per_sm = 2;
    l.bytes = 100'000'000;   // 31.76 µs at 0.94 × 3350 GB/s
    return l;
}

TEST(Projection, EachTermKnownAnswers) {
    const GpuSpec g = gpu("h100-sxm");
    const double share = 2.0 / 264, mhz = 1980;
    LaunchCost l = base();
    l.warp_instructions = 264e6;
    l.pipe[size_t(Pipe::Fp32)] = 66e6;
    l.pipe[size_t(Pipe::Int)] = 132e6;
    l.pipe[size_t(Pipe::Cvt)] = 26.4e6;
    l.shared_wavefronts = 13.2e6;
    l.load_waits = 264 * 8 * 10;   // 10 waits per warp
    const LaunchTerms t = launch_terms(l, g);
    EXPECT_NEAR(t.dram, 1e8 / (0.94 * 3350e3), 1e-9);
    EXPECT_NEAR(t.issue, 264e6 * share / (4 * mhz), 1e-9);               // 505 µs
    EXPECT_NEAR(t.pipe[size_t(Pipe::Fp32)], 66e6 * share / (4 * mhz), 1e-9);
    EXPECT_NEAR(t.pipe[size_t(Pipe::Int)], 132e6 * share / (2 * mhz), 1e-9);
    EXPECT_NEAR(t.pipe[size_t(Pipe::Cvt)], 26.4e6 * share / (0.5 * mhz), 1e-9);
    EXPECT_NEAR(t.shared, 13.2e6 * share / mhz, 1e-9);
    EXPECT_NEAR(t.latency, 10 * 0.7, 1e-12);
    EXPECT_EQ(t.bound_by(), "issue");
    EXPECT_DOUBLE_EQ(t.bound_us(), t.issue);
    // Conversions at a quarter of the integer rate bind once they are many.
    l.pipe[size_t(Pipe::Cvt)] = 264e6;
    EXPECT_EQ(launch_terms(l, g).bound_by(), "cvt");
}

TEST(Projection, LatencyBindsWithFewBytesInFlight) {
    const GpuSpec g = gpu("h100-sxm");
    LaunchCost l = base();
    // 100 MB in 264 × 8 warps that each wait 1000 times: ~47 KB per warp, 47
    // bytes per wait: 700 µs of round trips against 31.8 µs of bytes.
    l.load_waits = 264 * 8 * 1000;
    LaunchTerms t = launch_terms(l, g);
    EXPECT_NEAR(t.latency, 700, 1e-9);
    EXPECT_EQ(t.bound_by(), "latency");
    // Twice the blocks with the same fit: two rounds on the busiest SM, each
    // warp half the waits: the same time. Negative control: with room for
    // all four at once, half.
    l.blocks = 528;
    l.load_waits = 528 * 8 * 500;
    EXPECT_NEAR(launch_terms(l, g).latency, 700, 1e-9);
    l.blocks_per_sm = 4;
    EXPECT_NEAR(launch_terms(l, g).latency, 350, 1e-9);
}

// The launch's start: a round trip per fill (when the launch waits on loads
// at all), the prologue's waits (per warp on average) at a round trip each
// when it streams after them, less what prefetched bytes cover at the
// achievable bandwidth (the fill too when it was issued a round trip ahead);
// added to the DRAM term only. Negative controls: a prefetch at the start
// never hides the fill, the latency term does not move, and a
// launch whose every wait comes before its first barrier pays no prologue.
TEST(Projection, LaunchStartFillsPrologueAndPrefetch) {
    const GpuSpec g = gpu("h100-sxm");
    LaunchCost l = base();
    const double dram = launch_terms(l, g).dram;
    EXPECT_DOUBLE_EQ(launch_terms(l, g).start, 0.0);   // the bytes-only model
    l.fills = 1;
    EXPECT_DOUBLE_EQ(launch_terms(l, g).start, 0.0);   // no wait: nothing streams after a prologue
    l.load_waits = 264 * 8 * 3;
    EXPECT_NEAR(launch_terms(l, g).start, 0.7, 1e-12);
    l.prologue_waits = 264 * 8 * 2;   // two waits per warp before the first barrier
    LaunchTerms t = launch_terms(l, g);
    EXPECT_NEAR(t.prologue, 1.4, 1e-12);
    EXPECT_NEAR(t.start, 2.1, 1e-12);
    EXPECT_NEAR(t.bound_us(), dram + 2.1, 1e-9);
    EXPECT_EQ(t.bound_by(), "dram");
    l.prefetch_bytes = 1'000'000;   // 0.3176 µs at 0.94 × 3350 GB/s
    EXPECT_NEAR(launch_terms(l, g).start, 2.1 - 1e6 / (0.94 * 3350e3), 1e-9);
    l.prefetch_bytes = 10'000'000;   // more than the prologue takes
    t = launch_terms(l, g);
    EXPECT_NEAR(t.start, 0.7, 1e-12);
    EXPECT_NEAR(t.latency, 3 * 0.7, 1e-12);
    const std::vector<LaunchCost> one = {l};
    EXPECT_NEAR(project(one, 1, g, LaunchMode::Graph).start_us, 0.7, 1e-12);
    // Prefetched a round trip ahead (a persistent op at its handoff): the
    // fill hides too, once the bytes cover it; fewer bytes hide less.
    l.prefetch_ahead = true;
    EXPECT_NEAR(launch_terms(l, g).start, 0.0, 1e-12);
    l.prefetch_bytes = 1'000'000;
    EXPECT_NEAR(launch_terms(l, g).start, 2.1 - 1e6 / (0.94 * 3350e3), 1e-9);
    l.prefetch_bytes = 10'000'000;
    l.prefetch_ahead = false;
    l.load_waits = l.prologue_waits;   // every wait before the barrier: it streams in them
    l.prefetch_bytes = 0;
    t = launch_terms(l, g);
    EXPECT_NEAR(t.start, 0.7, 1e-12);
    EXPECT_DOUBLE_EQ(t.prologue, 0.0);
}

TEST(Projection, UnevenGridsLoadTheBusiestSm) {
    const GpuSpec g = gpu("a100");   // 108 SMs
    LaunchCost l = base();
    l.bytes = 0;
    l.warp_instructions = 1e6;
    l.blocks = 108;
    const double even = launch_terms(l, g).issue;
    l.blocks = 109;   // one SM runs two blocks: 2/109 of the work
    EXPECT_NEAR(launch_terms(l, g).issue, even * (2.0 / 109) / (1.0 / 108), 1e-9);
}

TEST(Projection, GraphsAndSeveralTokens) {
    const GpuSpec g = gpu("a100");
    const std::vector<LaunchCost> two = {{108, 1 << 20}, {216, 1 << 20}};
    const Projection s = project(two, 1, g, LaunchMode::Stream);
    const Projection gr = project(two, 1, g, LaunchMode::Graph);
    EXPECT_DOUBLE_EQ(s.launch_us, 4.0);
    EXPECT_DOUBLE_EQ(gr.launch_us, 2.6);
    EXPECT_DOUBLE_EQ(s.memory_us, gr.memory_us);
    // Programmatic dependent launches: the assumed 0.6 us per launch, the same work.
    const Projection pdl = project(two, 1, g, LaunchMode::GraphPdl);
    EXPECT_DOUBLE_EQ(pdl.launch_us, 1.2);
    EXPECT_DOUBLE_EQ(pdl.work_us, gr.work_us);
    // The same launches over 4 tokens (a persistent kernel): per-token figures.
    const Projection four = project(two, 4, g, LaunchMode::Graph);
    EXPECT_DOUBLE_EQ(four.launches, 0.5);
    EXPECT_NEAR(four.us_per_token, gr.us_per_token / 4, 1e-12);
    EXPECT_DOUBLE_EQ(four.bytes, 2.0 * (1 << 20) / 4);
    EXPECT_THROW(project(two, 0, g, LaunchMode::Graph), std::invalid_argument);
    // No bytes: only overheads.
    const std::vector<LaunchCost> empty = {{1, 0}};
    EXPECT_DOUBLE_EQ(project(empty, 1, g, LaunchMode::Stream).us_per_token, 2.0);
    // Work by binding limit sums to the work.
    std::vector<LaunchCost> mixed = {base(), base()};
    mixed[1].load_waits = 264 * 8 * 1000;
    const Projection m = project(mixed, 1, gpu("h100-sxm"), LaunchMode::Graph);
    ASSERT_EQ(m.bound_us.size(), 2u);
    EXPECT_EQ(m.bound_us[0].first, "latency");   // largest first
    EXPECT_NEAR(m.bound_us[0].second + m.bound_us[1].second, m.work_us, 1e-9);
}

TEST(Projection, PersistentKernelPaysOneLaunchAndItsGridSyncs) {
    const GpuSpec g = gpu("h100-sxm");
    const std::vector<LaunchCost> one = {{132, 100 << 20}};
    const Projection p = project(one, 2, g, LaunchMode::Persistent, 8);
    EXPECT_DOUBLE_EQ(p.launch_us, kLaunchOverheadUs[int(LaunchMode::Persistent)] / 2);
    EXPECT_DOUBLE_EQ(p.sync_us, 4 * kGridSyncUs);
    EXPECT_NEAR(p.us_per_token, p.launch_us + p.work_us + p.sync_us, 1e-12);
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
