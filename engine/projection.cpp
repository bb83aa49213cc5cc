#include "engine/projection.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <stdexcept>

#include <nlohmann/json.hpp>

namespace ptxlm {

namespace {

// Per-SM results per clock (CUDA C++ Programming Guide, "Arithmetic
// Instructions" throughput table): 32-bit float add/mul/fma 64 on compute
// capability 8.0 and 128 on 8.6, 8.9 and 9.0; 32-bit integer add, compare,
// shift, logic and multiply-add 64; type conversions between 32-bit types 16;
// special functions (reciprocal, rsqrt, exp2, log2, sin, cos) 16; warp
// shuffles 32. dp4a is not in the table: counted on the integer pipe at 64,
// an assumption the first GPU run checks (bench/gpu-report).
// Tensor (mma.sync m16n8k32, 8-bit inputs: 4096 multiply-adds): the
// vendors' dense int8 peaks per SM and clock, A100 624 TOPS (2048: half an
// mma per clock, 16) and RTX 4090 / L40S 661 / 733 TOPS (1024: 8). H100's
// 1979 TOPS (4096) are wgmma's; mma.sync on sm_90 is taken at A100's rate
// per SM and clock (16), an assumption the first GPU run checks.
constexpr std::array<double, kPipes> kRatesSm80 = {64, 64, 16, 16, 32, 16};
constexpr std::array<double, kPipes> kRatesSm89 = {128, 64, 16, 16, 32, 8};
constexpr std::array<double, kPipes> kRatesSm90 = {128, 64, 16, 16, 32, 16};

// Sources, by column: peak bandwidth, SMs, resident threads and shared memory
// per SM are the vendors' specifications and the programming guide's
// compute-capability tables. Clocks: boost clocks from the vendors'
// specifications (H100 SXM ~1.98 GHz, H100 PCIe 1.755 GHz: ../shared/FACTS.md;
// A100 1.41 GHz; L40S and RTX 4090 2.52 GHz); H200 is the H100 SXM's die and
// clock. Achievable bandwidth: H100 SXM's streaming reads measured at
// 3.15-3.18 of 3.35 TB/s (FACTS.md) give 0.94; the others are assumed 0.90
// until bench/gpu-report measures them. DRAM latency under load: FACTS.md's
// 0.6-0.8 µs for the H100, its middle taken for every HBM part and assumed
// for the GDDR6X ones. Figures are never changed to meet a target.
constexpr GpuSpec kGpus[] = {
    {"h100-sxm", "NVIDIA H100 SXM5 80 GB (HBM3)", 3350, 132, 2048, 228 * 1024, 1.98, 0.94, 0.7, kRatesSm90},
    {"h100-pcie", "NVIDIA H100 PCIe 80 GB (HBM2e)", 2000, 114, 2048, 228 * 1024, 1.755, 0.90, 0.7, kRatesSm90},
    {"h200", "NVIDIA H200 SXM 141 GB (HBM3e)", 4800, 132, 2048, 228 * 1024, 1.98, 0.90, 0.7, kRatesSm90},
    {"a100", "NVIDIA A100 SXM4 80 GB (HBM2e)", 2039, 108, 2048, 164 * 1024, 1.41, 0.90, 0.7, kRatesSm80},
    {"l40s", "NVIDIA L40S 48 GB (GDDR6)", 864, 142, 1536, 100 * 1024, 2.52, 0.90, 0.7, kRatesSm89},
    {"rtx4090", "NVIDIA GeForce RTX 4090 (GDDR6X)", 1008, 128, 1536, 100 * 1024, 2.52, 0.90, 0.7, kRatesSm89},
};

constexpr double kSchedulersPerSm = 4;   // warp instructions issued per clock per SM

}  // namespace

std::span<const GpuSpec> gpus() { return kGpus; }

std::optional<GpuSpec> find_gpu(std::string_view name) {
    for (const GpuSpec& g : kGpus)
        if (name == g.name) return g;
    return std::nullopt;
}

std::string gpu_names() {
    std::string s;
    for (const GpuSpec& g : kGpus) s += (s.empty() ? "" : ", ") + std::string(g.name);
    return s;
}

int blocks_per_sm(const GpuSpec& gpu, uint32_t threads, int registers, uint32_t smem_bytes) {
    if (threads == 0 || threads > 1024 || registers <= 0) return 0;
    const uint32_t warps = (threads + 31) / 32;
    const uint32_t regs_per_warp = (uint32_t(registers) * 32 + 255) / 256 * 256;
    uint32_t n = std::min<uint32_t>(32, uint32_t(gpu.max_threads_per_sm) / (warps * 32));
    n = std::min(n, 65536u / (regs_per_warp * warps));
    n = std::min(n, gpu.smem_per_sm / (smem_bytes + 1024));
    return int(n);
}

double LaunchTerms::bound_us() const {
    double m = std::max({dram + start, latency, issue, shared});
    for (double p : pipe) m = std::max(m, p);
    return m;
}

std::string LaunchTerms::bound_by() const {
    std::string name = "dram";
    double m = dram + start;
    auto take = [&](double v, const char* n) {
        if (v > m) m = v, name = n;
    };
    take(latency, "latency");
    take(issue, "issue");
    take(shared, "shared");
    for (size_t i = 0; i < kPipes; ++i) take(pipe[i], kPipeNames[i]);
    return name;
}

LaunchTerms launch_terms(const LaunchCost& l, const GpuSpec& gpu) {
    LaunchTerms t;
    const double bytes_per_us = gpu.bandwidth_gbs * 1e3 * gpu.achievable;
    t.dram = double(l.bytes) / bytes_per_us;
    if (l.blocks == 0) return t;
    // The busiest SM runs ceil(blocks / SMs) blocks, `fit` at a time.
    const uint64_t per_sm = (l.blocks + uint64_t(gpu.sms) - 1) / uint64_t(gpu.sms);
    const uint64_t fit = uint64_t(std::max(l.blocks_per_sm, 1));
    const double rounds = double((per_sm + fit - 1) / fit);
    const double share = double(per_sm) / double(l.blocks);   // of the launch's work
    const double cycles_per_us = gpu.clock_ghz * 1e3;
    t.issue = l.warp_instructions * share / (kSchedulersPerSm * cycles_per_us);
    for (size_t i = 0; i < kPipes; ++i) t.pipe[i] = l.pipe[i] * share / (gpu.pipe_rate[i] / 32 * cycles_per_us);
    t.shared = l.shared_wavefronts * share / cycles_per_us;
    const double warps = double(l.blocks) * double(std::max<uint32_t>((l.threads + 31) / 32, 1));
    t.latency = l.load_waits / warps * gpu.dram_latency_us * rounds;
    // The fill: a launch that waits on loads streams its bytes from its
    // first round trip on. Before that, its prologue, when it streams after
    // it (waits after the first barrier); a launch whose waits all come
    // before its first barrier (a reduction at its end) streams in them.
    // Prefetched weights stream while the prologue runs; issued a round trip
    // ahead, through the fill as well.
    t.prologue = l.load_waits > l.prologue_waits ? l.prologue_waits / warps * gpu.dram_latency_us : 0.0;
    const double fill = l.load_waits > 0 ? l.fills * gpu.dram_latency_us : 0.0;
    t.start = fill + t.prologue - std::min(t.prologue + (l.prefetch_ahead ? fill : 0.0), double(l.prefetch_bytes) / bytes_per_us);
    return t;
}

Projection project(std::span<const LaunchCost> launches, uint32_t tokens, const GpuSpec& gpu, LaunchMode mode,
                   uint64_t grid_syncs) {
    if (tokens == 0) throw std::invalid_argument("project: no tokens");
    Projection p;
    std::map<std::string, double> by;
    for (const LaunchCost& l : launches) {
        const LaunchTerms t = launch_terms(l, gpu);
        p.launch_us += kLaunchOverheadUs[int(mode)];
        p.memory_us += t.dram;
        p.start_us += t.start;
        p.work_us += t.bound_us();
        by[t.bound_by()] += t.bound_us() / tokens;
        p.bytes += double(l.bytes);
    }
    p.launches = double(launches.size()) / tokens;
    p.launch_us /= tokens;
    p.memory_us /= tokens;
    p.start_us /= tokens;
    p.work_us /= tokens;
    p.bytes /= tokens;
    p.sync_us = double(grid_syncs) * kGridSyncUs / tokens;
    p.us_per_token = p.launch_us + p.work_us + p.sync_us;
    p.tokens_per_s = p.us_per_token > 0 ? 1e6 / p.us_per_token : 0;
    p.bandwidth_share = p.bytes * p.tokens_per_s / (gpu.bandwidth_gbs * 1e9);
    p.bound_us.assign(by.begin(), by.end());
    std::sort(p.bound_us.begin(), p.bound_us.end(), [](auto& a, auto& b) { return a.second > b.second; });
    return p;
}

LaunchCost counted_launch_cost(const nlohmann::json& k, uint64_t blocks, uint32_t threads, int fit) {
    const double n = double(k.at("launches").get<uint64_t>());
    const nlohmann::json& c = k.at("instructions_by_class");
    auto cls = [&](const char* name) { return c.at(name).get<double>() / n; };
    auto per_launch = [&](const char* name) { return k.at(name).get<double>() / n; };
    LaunchCost l;
    l.blocks = blocks;
    l.bytes = uint64_t(per_launch("unique_global_bytes"));
    l.threads = threads;
    l.blocks_per_sm = fit;
    l.warp_instructions = per_launch("warp_instructions") - cls("mov");
    l.pipe[size_t(Pipe::Fp32)] = cls("fp");
    l.pipe[size_t(Pipe::Int)] = cls("alu") + cls("imad") + cls("dp4a");
    l.pipe[size_t(Pipe::Cvt)] = cls("cvt");
    l.pipe[size_t(Pipe::Sfu)] = cls("sfu");
    l.pipe[size_t(Pipe::Shfl)] = cls("shfl");
    l.pipe[size_t(Pipe::Tensor)] = cls("tensor");
    l.shared_wavefronts = per_launch("shared_load_wavefronts") + per_launch("shared_store_wavefronts");
    l.load_waits = per_launch("inflight_batches");
    l.prologue_waits = per_launch("prologue_waits");
    l.fills = 1;
    l.prefetch_bytes = uint64_t(per_launch("prefetch_bytes"));
    return l;
}

}  // namespace ptxlm
