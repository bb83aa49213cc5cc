// Projected decode speed on a named GPU from counted work: what bench's
// counted mode reports when the device is emu, whose times mean nothing.
//
// The model: each launch costs a fixed overhead (about 2 µs on a stream,
// 1.3 µs inside a CUDA graph; ../shared/FACTS.md) plus the time to move the
// distinct global bytes it touches at 90% of the GPU's peak bandwidth, scaled
// down when the grid has fewer blocks than the GPU has SMs (an idle SM's
// share of the bandwidth goes unused). Launches run one after another, as a
// single decode stream's do. A projection, never a measurement: bench labels
// it so.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>

namespace ptxlm {

struct GpuSpec {
    const char* name;          // "h100-sxm"
    const char* description;   // "NVIDIA H100 SXM5 (HBM3)"
    double bandwidth_gbs;      // peak memory bandwidth, GB/s (10^9 bytes)
    int sms;
    int max_threads_per_sm;    // resident threads
    uint32_t smem_per_sm;      // shared memory an SM can give its blocks, bytes
};

// Blocks of `threads` threads, `registers` registers per thread and
// `smem_bytes` of shared memory (static + dynamic) that fit on one SM at once:
// the least of the thread, register (65536 per SM, allocated per warp in
// units of 256), shared memory (1 KiB reserved per block) and 32-block limits.
int blocks_per_sm(const GpuSpec& gpu, uint32_t threads, int registers, uint32_t smem_bytes);

// h100-sxm, h100-pcie, h200, a100, rtx4090; nullopt for another name.
std::optional<GpuSpec> find_gpu(std::string_view name);
// "h100-sxm, h100-pcie, h200, a100, rtx4090", for messages.
std::string gpu_names();

enum class LaunchMode { Stream, Graph, Persistent };
// By LaunchMode; a persistent kernel is one cooperative launch on a stream.
constexpr double kLaunchOverheadUs[] = {2.0, 1.3, 2.0};
// A synchronisation inside a persistent kernel (an op waiting for the op it
// reads): a release to L2, seen by the waiting block's acquire poll. An
// assumed figure (about two L2 round trips), stated wherever it is used.
constexpr double kGridSyncUs = 1.0;
constexpr double kAchievableBandwidth = 0.9;          // of peak

struct LaunchCost {
    uint64_t blocks = 0;       // grid size
    uint64_t bytes = 0;        // distinct global bytes the launch reads or writes
};

struct Projection {
    double us_per_token = 0;
    double tokens_per_s = 0;
    double launch_us = 0;      // per token: launch overheads
    double memory_us = 0;      // per token: moving the bytes
    double launches = 0;       // per token
    double sync_us = 0;        // per token: grid-wide synchronisations (persistent)
    double bytes = 0;          // per token
    double bandwidth_share = 0;   // bytes per token × tokens/s ÷ peak
};

// `launches` ran `tokens` tokens (a persistent kernel may run several per
// launch), with `grid_syncs` grid-wide synchronisations in all (each
// kGridSyncUs). Throws std::invalid_argument when tokens is 0.
Projection project(std::span<const LaunchCost> launches, uint32_t tokens, const GpuSpec& gpu, LaunchMode mode,
                   uint64_t grid_syncs = 0);

}  // namespace ptxlm
