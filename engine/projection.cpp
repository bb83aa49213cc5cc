#include "engine/projection.h"

#include <algorithm>
#include <stdexcept>

namespace ptxlm {

namespace {

// Vendors' figures: peak DRAM bandwidth, SM count, resident threads and
// shared memory per SM (CUDA programming guide, compute capabilities 8.0,
// 8.9 and 9.0).
constexpr GpuSpec kGpus[] = {
    {"h100-sxm", "NVIDIA H100 SXM5 80 GB (HBM3)", 3350, 132, 2048, 228 * 1024},
    {"h100-pcie", "NVIDIA H100 PCIe 80 GB (HBM2e)", 2000, 114, 2048, 228 * 1024},
    {"h200", "NVIDIA H200 SXM 141 GB (HBM3e)", 4800, 132, 2048, 228 * 1024},
    {"a100", "NVIDIA A100 SXM4 80 GB (HBM2e)", 2039, 108, 2048, 164 * 1024},
    {"rtx4090", "NVIDIA GeForce RTX 4090 (GDDR6X)", 1008, 128, 1536, 100 * 1024},
};

}  // namespace

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

Projection project(std::span<const LaunchCost> launches, uint32_t tokens, const GpuSpec& gpu, LaunchMode mode,
                   uint64_t grid_syncs) {
    if (tokens == 0) throw std::invalid_argument("project: no tokens");
    Projection p;
    const double bytes_per_us = gpu.bandwidth_gbs * 1e3 * kAchievableBandwidth;
    for (const LaunchCost& l : launches) {
        const double sm_share = std::min(1.0, double(l.blocks) / gpu.sms);
        p.launch_us += kLaunchOverheadUs[int(mode)];
        if (l.bytes) p.memory_us += double(l.bytes) / (bytes_per_us * sm_share);
        p.bytes += double(l.bytes);
    }
    p.launches = double(launches.size()) / tokens;
    p.launch_us /= tokens;
    p.memory_us /= tokens;
    p.bytes /= tokens;
    p.sync_us = double(grid_syncs) * kGridSyncUs / tokens;
    p.us_per_token = p.launch_us + p.memory_us + p.sync_us;
    p.tokens_per_s = p.us_per_token > 0 ? 1e6 / p.us_per_token : 0;
    p.bandwidth_share = p.bytes * p.tokens_per_s / (gpu.bandwidth_gbs * 1e9);
    return p;
}

}  // namespace ptxlm
