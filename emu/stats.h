// Per-launch counters that emu collects while interpreting a kernel: what a
// GPU engineer would read off a profiler for memory-bound code.
//
// "Requests" are warp-level instructions (one per executed ld/st/atom by a
// warp, whatever its active mask); "sectors" are the distinct 32-byte aligned
// global segments one such request touches, summed over requests. A warp
// reading 32 consecutive f32 is 1 request and 4 sectors.
#pragma once

#include <cstdint>
#include <string>
#include <map>
#include <vector>

namespace ptxlm::emu {

// Warp instructions by the pipe they load (emu/inst_class.h): floating-point
// add/mul/fma (Fp), integer and bit operations and compares (Alu), integer
// multiply-add (Imad), conversions between float and integer or float widths
// (Cvt), dp4a, the special-function unit (Sfu: ex2, rsqrt, div.f32 ...),
// global and shared loads and stores, atomics, shuffles and votes, barriers
// and fences (Sync), branches and exits, moves (and parameter loads: free in
// SASS), tensor-core mma (Tensor) and the rest.
enum class InstClass : uint8_t {
    Fp, Alu, Imad, Cvt, Dp4a, Sfu, LdGlobal, StGlobal, LdShared, StShared, Atomic, Shfl, Sync, Branch, Mov, Tensor, Other,
};
constexpr size_t kInstClasses = size_t(InstClass::Other) + 1;
// JSON names, in InstClass order.
constexpr const char* kInstClassNames[kInstClasses] = {
    "fp", "alu", "imad", "cvt", "dp4a", "sfu", "ld_global", "st_global", "ld_shared", "st_shared",
    "atomic", "shfl", "sync", "branch", "mov", "tensor", "other"};

struct Stats {
    uint64_t launches = 0;
    uint64_t warp_instructions = 0;     // instructions issued per warp
    uint64_t thread_instructions = 0;   // sum of active lanes over issued instructions
    uint64_t by_class[kInstClasses] = {};   // warp_instructions by InstClass
    uint64_t global_load_bytes = 0;     // bytes requested by ld.global (all lanes)
    uint64_t global_store_bytes = 0;    // bytes written by st.global
    uint64_t global_atomic_bytes = 0;   // bytes accessed by atom/red.global
    uint64_t global_load_requests = 0;
    uint64_t global_store_requests = 0;
    uint64_t global_load_sectors = 0;
    uint64_t global_store_sectors = 0;
    uint64_t shared_load_bytes = 0;
    uint64_t shared_store_bytes = 0;
    // Shared-memory wavefronts of ld/st.shared (emu/shared_banks.h: our model
    // of the 32-bank rules), and the ideal: ceil(distinct 4-byte words per
    // access / 32). Shared atomics are not counted (see exec_ops.cpp).
    uint64_t shared_load_wavefronts = 0;
    uint64_t shared_store_wavefronts = 0;
    uint64_t shared_load_ideal_wavefronts = 0;
    uint64_t shared_store_ideal_wavefronts = 0;
    uint64_t barriers = 0;              // bar.sync completions (per block and barrier phase)
    // Cooperative launches: loop iterations of a warp that read the same
    // global values as the previous one and wrote nothing (a wait on another
    // block's counter), the waits they make up (a run of such iterations by
    // one warp at one loop), and the instructions those iterations executed.
    uint64_t spin_yields = 0;
    uint64_t spin_waits = 0;
    uint64_t spin_instructions = 0;
    // Launches with memory-model checking (every cooperative one): grid-wide
    // synchronisations, each a point by which every block has acquired
    // (directly or through others) a release every other block made after
    // the previous one. A grid barrier built from counters is one; so is any
    // all-to-all dependency however it is built.
    uint64_t grid_syncs = 0;
    uint64_t unique_global_bytes = 0;   // distinct global bytes touched (ld/st/atom), filled at launch end
    // Memory-level parallelism, counted per warp (emu/inflight.h): a global
    // load (ld.global or generic ld) is pending from its issue until the first
    // later instruction of the warp that reads one of its destination
    // registers; that instruction, and bar, membar/fence, ret/exit, is a wait.
    // At a wait every load pending then forms one batch in flight, and the
    // wait completes them all. These are counts of the program's
    // dependency structure, not timings: emu has no latency model.
    // inflight_batches: the waits that found at least one load pending.
    uint64_t inflight_batches = 0;
    // Sum over those waits of the distinct global bytes pending (distinct
    // 32-byte sectors over every lane and pending load, times 32); divided by
    // inflight_batches it is the average bytes a warp has in flight.
    uint64_t inflight_bytes_sum = 0;
    // The most distinct bytes (sectors x 32) one warp had pending at one wait.
    uint64_t inflight_bytes_max = 0;
    // The longest chain of global loads in one warp where each load's address
    // (or a value feeding it, or its guard predicate) depends on an earlier
    // load's result: dependent round trips to memory a warp must make one
    // after another (a count, not a timing). Registers carry a depth: a global
    // load's destinations get 1 + the largest depth among its sources, any
    // other instruction's destinations the largest depth among its sources.
    uint64_t dependent_load_chain_max = 0;
    // Waits (as inflight_batches counts them) each warp made before its first
    // barrier, summed over the warps that reached one: the round trips of a
    // kernel's prologue (staging its input) before its block moves on
    // together. Warps that never wait at a barrier add nothing.
    uint64_t prologue_waits = 0;
    // prefetch instructions (warp-level) and the distinct 128-byte lines they
    // named, summed over requests.
    uint64_t prefetch_requests = 0;
    uint64_t prefetch_bytes = 0;

    // Distinct global bytes touched: allocation start -> one bit per byte of
    // the allocation (an eighth of the memory read, kept only with stats).
    std::map<uint64_t, std::vector<uint64_t>> touched;
    // Sectors of global loads per allocation start (a request spanning two
    // allocations counts each one's sectors), so a caller that knows which
    // allocations hold weights can tell the weight loads' sector efficiency.
    std::map<uint64_t, uint64_t> load_sectors_by_alloc;

    // Sectors per warp-level request (ideal for 4-byte loads: 4).
    double load_sectors_per_request() const {
        return global_load_requests ? double(global_load_sectors) / double(global_load_requests) : 0.0;
    }
    // Shared wavefronts over the ideal, loads and stores together (1.0: no
    // bank conflicts; 0 when there were no shared accesses).
    double shared_wavefront_ratio() const {
        uint64_t ideal = shared_load_ideal_wavefronts + shared_store_ideal_wavefronts;
        return ideal ? double(shared_load_wavefronts + shared_store_wavefronts) / double(ideal) : 0.0;
    }
    // Average distinct global bytes a warp had in flight at a wait (0 with none).
    double inflight_bytes_avg() const {
        return inflight_batches ? double(inflight_bytes_sum) / double(inflight_batches) : 0.0;
    }
    // Recomputes unique_global_bytes from `touched`.
    void finish();
    // Accumulates another launch (unique bytes merge as a union; maxima take
    // the larger).
    Stats& operator+=(const Stats& o);
    // One JSON object with every counter; per allocation (under
    // "allocations": base, unique bytes, load sectors) instead of `touched`.
    std::string to_json() const;
};

}  // namespace ptxlm::emu
