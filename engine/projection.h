// Projected decode speed on a named GPU from counted work: what bench's
// counted mode reports when the device is emu, whose times mean nothing.
//
// The model (issue 20): each launch takes the largest of its limits, plus a
// fixed launch overhead (about 2 µs on a stream, 1.3 µs inside a CUDA graph;
// ../shared/FACTS.md); launches run one after another, as a single decode
// stream's do. The limits:
//   dram     distinct global bytes ÷ the bandwidth a streaming read achieves;
//   latency  every wait of a warp on its global loads is one DRAM round trip
//            the warp cannot hide (Little's law: bytes in flight ÷ latency is
//            the rate a warp moves data); per warp on average, times the
//            rounds of blocks the busiest SM runs one after another;
//   issue    warp instructions (all but moves, which ptxas folds away) ÷ the
//            SM's 4 schedulers;
//   pipes    each pipe's warp instructions ÷ its rate per SM (fp32, integer,
//            conversions, special functions, shuffles) and shared-memory
//            wavefronts ÷ 1 per clock;
// every per-SM term on the busiest SM (a grid that is not a multiple of the
// SM count puts more blocks on some SMs). Each launch names the limit that
// binds it. The DRAM term carries the launch's start, when DRAM idles for
// it: a round trip before its first bytes return (each `fill`, for a launch
// that waits on loads at all), and, for one that streams after its first
// barrier, its prologue before that: the waits a warp makes before the
// barrier (staging the input, the norm's reduction), at a DRAM round trip
// each (its input may answer from L2, sooner: an overestimate of that
// part). Weights prefetched into L2 at the launch's start hide the prologue
// while DRAM streams them (prefetch_bytes ÷ the achievable bandwidth);
// prefetched a round trip ahead (a persistent op's, at its handoff), the
// fill too. Instruction counts are PTX instructions emu executed, not SASS
// (bench/sass shows what ptxas makes of the hot loops). A projection, never
// a measurement: bench labels it so; it leaves out L2 hits, DRAM page and
// refresh effects, clock throttling and the overlap of one launch's tail
// with the next one's start.
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json_fwd.hpp>

namespace ptxlm {

// Per-SM pipes whose warp instructions a launch counts (emu's classes,
// emu/inst_class.h, grouped by the throughput table they share).
enum class Pipe { Fp32, Int, Cvt, Sfu, Shfl, Tensor };
constexpr size_t kPipes = 6;
constexpr const char* kPipeNames[kPipes] = {"fp32", "int", "cvt", "sfu", "shfl", "tensor"};

struct GpuSpec {
    const char* name;          // "h100-sxm"
    const char* description;   // "NVIDIA H100 SXM5 (HBM3)"
    double bandwidth_gbs;      // peak memory bandwidth, GB/s (10^9 bytes)
    int sms;
    int max_threads_per_sm;    // resident threads
    uint32_t smem_per_sm;      // shared memory an SM can give its blocks, bytes
    double clock_ghz;          // SM clock under load
    double achievable;         // share of peak bandwidth a streaming read reaches
    double dram_latency_us;    // a global load's round trip under load
    // Results per clock per SM by pipe (thread-level operations; a warp
    // instruction is 32; Tensor: 32 per mma.m16n8k32 of 8-bit inputs), in
    // Pipe order.
    std::array<double, kPipes> pipe_rate;
};

// Blocks of `threads` threads, `registers` registers per thread and
// `smem_bytes` of shared memory (static + dynamic) that fit on one SM at once:
// the least of the thread, register (65536 per SM, allocated per warp in
// units of 256), shared memory (1 KiB reserved per block) and 32-block limits.
int blocks_per_sm(const GpuSpec& gpu, uint32_t threads, int registers, uint32_t smem_bytes);

// h100-sxm, h100-pcie, h200, a100, l40s, rtx4090; nullopt for another name.
std::optional<GpuSpec> find_gpu(std::string_view name);
// "h100-sxm, h100-pcie, ...", for messages.
std::string gpu_names();
// Every GPU of the table, in its order.
std::span<const GpuSpec> gpus();

enum class LaunchMode { Stream, Graph, Persistent, GraphPdl };
// By LaunchMode; a persistent kernel is one cooperative launch on a stream.
// GraphPdl (--gpu-pdl): each kernel is launched, and its blocks placed, while
// the one before runs; what is left between them is the first kernel's
// completion and memory flush before griddepcontrol.wait returns. 0.6 µs is
// an assumption, not a measurement: bench/gpu-report times both ways.
constexpr double kLaunchOverheadUs[] = {2.0, 1.3, 2.0, 0.6};
// A synchronisation inside a persistent kernel (an op waiting for the op it
// reads): a release to L2, seen by the waiting block's acquire poll. An
// assumed figure (about two L2 round trips), stated wherever it is used.
constexpr double kGridSyncUs = 1.0;

// One launch's counted work. Only blocks and bytes: the bytes-only model
// (every other limit zero).
struct LaunchCost {
    uint64_t blocks = 0;       // grid size
    uint64_t bytes = 0;        // distinct global bytes the launch reads or writes
    uint32_t threads = 0;      // per block (0: unknown, one warp assumed)
    int blocks_per_sm = 0;     // blocks that fit on an SM at once (0: unknown, 1 assumed)
    double warp_instructions = 0;   // issued, moves excluded
    std::array<double, kPipes> pipe = {};   // warp instructions by pipe
    double shared_wavefronts = 0;
    double load_waits = 0;     // waits on pending global loads, summed over warps
    double prologue_waits = 0;   // of those, before each warp's first barrier, summed over warps
    uint32_t fills = 0;        // starts from an idle DRAM, a round trip each (a chain's launch 1; 0: bytes only)
    uint64_t prefetch_bytes = 0;   // prefetched into L2 at the launch's start
    // The prefetches were issued at least a DRAM round trip before the fill
    // (a persistent op's, before its handoff wait): they hide fills as well
    // as prologues. The caller caps each op's bytes at what its own start
    // can take, so the sum hides no more than each op's start.
    bool prefetch_ahead = false;
};

// The limits of one launch, µs, and the one that binds it.
struct LaunchTerms {
    double dram = 0, latency = 0, issue = 0, shared = 0;
    std::array<double, kPipes> pipe = {};
    double start = 0;          // DRAM idle at the start (fills and the prologue's exposed part), added to dram
    double prologue = 0;       // the prologue's round trips, before prefetching hides any
    double bound_us() const;   // the largest (dram + start for the DRAM term)
    std::string bound_by() const;   // "dram", "latency", "issue", "shared", or a pipe's name
};

LaunchTerms launch_terms(const LaunchCost& l, const GpuSpec& gpu);

// One launch's counted work from emu's counters (emu::Stats::to_json, summed
// over the kernel's `launches` and divided per launch): instruction classes
// map to the pipes whose throughput they share (emu/inst_class.h), moves are
// not issued work, a launch starts from an idle DRAM once (fills 1). Blocks,
// threads and the blocks that fit an SM are the caller's (the launch's
// geometry).
LaunchCost counted_launch_cost(const nlohmann::json& stats, uint64_t blocks, uint32_t threads, int fit);

struct Projection {
    double us_per_token = 0;
    double tokens_per_s = 0;
    double launch_us = 0;      // per token: launch overheads
    double work_us = 0;        // per token: each launch's binding limit, summed
    double memory_us = 0;      // per token: the dram terms alone (the bytes-only model)
    double start_us = 0;       // per token: the launches' starts (LaunchTerms::start)
    double launches = 0;       // per token
    double sync_us = 0;        // per token: grid-wide synchronisations (persistent)
    double bytes = 0;          // per token
    double bandwidth_share = 0;   // bytes per token × tokens/s ÷ peak
    // Per token: work µs by the limit that binds each launch.
    std::vector<std::pair<std::string, double>> bound_us;
};

// `launches` ran `tokens` tokens (a persistent kernel may run several per
// launch), with `grid_syncs` grid-wide synchronisations in all (each
// kGridSyncUs). Throws std::invalid_argument when tokens is 0.
Projection project(std::span<const LaunchCost> launches, uint32_t tokens, const GpuSpec& gpu, LaunchMode mode,
                   uint64_t grid_syncs = 0);

}  // namespace ptxlm
