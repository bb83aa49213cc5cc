#include "engine/projection.h"

#include <algorithm>
#include <stdexcept>

namespace ptxlm {

namespace {

// Vendors' figures: peak DRAM bandwidth and SM count.
constexpr GpuSpec kGpus[] = {
    {"h100-sxm", "NVIDIA H100 SXM5 80 GB (HBM3)", 3350, 132},
    {"h100-pcie", "NVIDIA H100 PCIe 80 GB (HBM2e)", 2000, 114},
    {"h200", "NVIDIA H200 SXM 141 GB (HBM3e)", 4800, 132},
    {"a100", "NVIDIA A100 SXM4 80 GB (HBM2e)", 2039, 108},
    {"rtx4090", "NVIDIA GeForce RTX 4090 (GDDR6X)", 1008, 128},
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

Projection project(std::span<const LaunchCost> launches, uint32_t tokens, const GpuSpec& gpu, LaunchMode mode) {
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
    p.us_per_token = p.launch_us + p.memory_us;
    p.tokens_per_s = p.us_per_token > 0 ? 1e6 / p.us_per_token : 0;
    p.bandwidth_share = p.bytes * p.tokens_per_s / (gpu.bandwidth_gbs * 1e9);
    return p;
}

}  // namespace ptxlm
