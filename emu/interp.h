// emu's core: PTX parsing, pre-decoding and interpretation, independent of the
// Driver API surface (driver.cpp) that exposes it as libcuda.so.1.
//
// The emulated device is sm_90-like; its limits live in DeviceLimits and are
// what the Driver API's attribute and occupancy queries answer from.
//
// Semantics and limits (details in exec.cpp and decode_ops.cpp):
// - Loading rejects, with the line and instruction named, anything outside the
//   implemented subset and what ptxas rejects for it (register widths, missing
//   rounding modifiers, bar.sync counts not a multiple of 32, .version/.target
//   too low for elect/griddepcontrol/bf16).
// - Blocks run one after another on the calling thread; warps of a block run
//   SIMT (minimum-PC reconvergence) in round-robin time slices. Atomics between
//   blocks work; a block spin-waiting for a later block cannot finish and is
//   stopped by the watchdog (702). A cooperative launch runs its blocks
//   concurrently in seeded rounds (PTXLM_EMU_SEED), warps yielding when they
//   spin; a round where every warp waits and nothing changes is a deadlock
//   (702, with each block's waiting warps named). Cooperative launches (and
//   any launch with PTXLM_EMU_RACECHECK=1) check the memory model
//   (racecheck.h): a race fails the launch with 719 and both accesses named.
// - Faults: out-of-bounds global/shared/param access 700, misaligned access 716
//   (vectors need their full size), bar.sync that can never complete 702,
//   PTXLM_EMU_WATCHDOG (default 2^26) instructions by one warp without a store
//   or atomic that changes memory or a barrier arrival 702, collectives whose membermask differs from the
//   executing lanes or a diverged bar.sync 715, trap 719.
// - Fresh global and shared memory read as 0xcd bytes, registers as 0.
// - Plain add/mul/fma without a rounding modifier round to nearest like .rn;
//   .approx functions use the C library. PTXLM_EMU_VARIANCE=1 (program.h,
//   alu.cpp) moves .approx results within their ISA bounds and fuses plain
//   mul+add into fma, as hardware and ptxas may.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ptxlm::emu {

struct DeviceLimits {
    uint32_t sm_count = 8;                       // PTXLM_EMU_SMS overrides
    uint32_t max_threads_per_block = 1024;
    uint32_t max_threads_per_sm = 2048;
    uint32_t max_blocks_per_sm = 32;
    uint32_t regs_per_sm = 65536;                // PTXLM_EMU_REGS_PER_SM overrides (a smaller SM)
    uint32_t max_regs_per_thread = 255;
    uint32_t shared_per_block = 48 * 1024;       // without opt-in
    uint32_t shared_per_block_optin = 227 * 1024;
    uint32_t shared_per_sm = 228 * 1024;
    uint32_t warp_size = 32;
    uint64_t total_mem = 8ull << 30;             // PTXLM_EMU_MEM_MB overrides
    int cc_major = 9, cc_minor = 0;
    // H100 SXM5's figures (HBM3): peak = 2 × clock × bus width = 3.35 TB/s.
    int memory_clock_khz = 2619000;
    int memory_bus_bits = 5120;
};
const DeviceLimits& device_limits();

struct Dim3 { uint32_t x = 1, y = 1, z = 1; uint64_t count() const { return uint64_t(x) * y * z; } };

struct ParamInfo {
    std::string name;
    uint32_t size = 0;     // bytes (.u64 = 8, .b8 arrays = n)
    uint32_t align = 1;
    uint32_t offset = 0;   // within the packed parameter buffer
};

struct KernelInfo {
    std::string name;
    std::vector<ParamInfo> params;
    uint32_t param_bytes = 0;         // packed size
    uint32_t static_shared_bytes = 0;
    uint32_t max_ntid = 0;            // .maxntid product, 0 = none
    uint32_t regs_per_thread = 0;     // from ptxas/nvJitLink when validated, else an estimate
};

// Global memory: a registry of live allocations. Device addresses are
// distinct from host addresses (never dereferenceable by accident).
class Memory {
public:
    Memory();
    ~Memory();
    uint64_t alloc(uint64_t bytes);            // 0 when out of memory; 256-byte aligned
    // Device addresses for `bytes` of host memory the caller owns (mapped
    // pinned memory): kernels read and write the host bytes themselves.
    // free() unmaps it. Not counted as device memory used.
    uint64_t map_host(uint8_t* host, uint64_t bytes);
    bool free(uint64_t addr);                  // false for an address that is not an allocation's start
    // Host pointer to [addr, addr+n) if it lies inside one live allocation, else nullptr.
    uint8_t* translate(uint64_t addr, uint64_t n);
    uint64_t used() const;
    // The live allocation containing addr: its start, size and host storage
    // (false when addr lies in none), and whether it is mapped host memory.
    // Lets the interpreter cache one range.
    bool range(uint64_t addr, uint64_t* base, uint64_t* size, uint8_t** host, bool* mapped = nullptr);
private:
    struct Impl;
    std::unique_ptr<Impl> impl_;
};

class Program;   // a loaded module: parsed, checked and pre-decoded

// Parses and pre-decodes PTX text. On failure returns nullptr and fills `log`
// with the diagnostics (line numbers, the unsupported instruction named).
std::shared_ptr<const Program> load_program(std::string_view ptx, std::string* log);
const std::vector<KernelInfo>& program_kernels(const Program& p);

struct LaunchConfig {
    Dim3 grid, block;
    uint32_t dynamic_shared_bytes = 0;
    const uint8_t* params = nullptr;   // packed parameter buffer, KernelInfo::param_bytes long
    uint32_t params_size = 0;
    // Largest static + dynamic shared bytes allowed for this launch; 0 means
    // DeviceLimits::shared_per_block (48 KiB). The driver passes the opted-in
    // value set with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES.
    uint32_t shared_limit = 0;
    // Every block resident at once (the driver checked the grid fits): blocks
    // run concurrently, interleaved as PTXLM_EMU_SEED orders them.
    bool cooperative = false;
};

struct Fault {
    int cuda_error = 0;      // CUresult value the context reports (e.g. 700 ILLEGAL_ADDRESS)
    std::string message;     // kernel, block, thread, instruction and address
};

struct Stats;  // per-launch counters, stats.h

// Runs the kernel to completion on the calling thread. Returns a Fault when the
// kernel faults, deadlocks or is stopped by the watchdog, or when the launch is
// invalid (parameter size, block size, .maxntid, shared memory: error 1).
// `stats` (may be null: faster) is reset and filled for this launch only.
// Launches on different threads may share a Program and a Memory (its registry
// is locked) as long as they do not access the same buffers.
std::optional<Fault> run_kernel(const Program& p, std::string_view kernel, const LaunchConfig& cfg,
                                Memory& mem, Stats* stats);

}  // namespace ptxlm::emu
