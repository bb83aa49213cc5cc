// The interpreter's launch state (emu/exec.cpp, emu/exec_ops.cpp): the
// warps, blocks and barriers of one launch and the Launch that runs them.
// exec.cpp schedules blocks and warps and runs control flow; exec_ops.cpp
// holds the memory and warp-collective instructions and barriers. See the
// top of exec.cpp for the execution model.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <thread>
#include <type_traits>

#include "inflight.h"
#include "inst_class.h"
#include "program.h"
#include "racecheck.h"
#include "stats.h"

namespace ptxlm::emu::exec {


constexpr int kIllegalAddress = 700, kLaunchTimeout = 702, kIllegalInstruction = 715, kMisaligned = 716;
constexpr int kInvalidValue = 1, kNotFound = 500, kLaunchFailed = 719;
constexpr uint32_t kNoPc = 0xffffffffu;
constexpr uint32_t kSlice = 4096;   // instructions a warp runs before the next warp's turn

struct Warp {
    uint32_t id = 0;
    uint32_t live = 0;     // lanes that have not exited
    uint32_t active = 0;   // lanes at pc
    uint32_t pc = 0;
    uint32_t merge_pc = kNoPc;   // smallest PC among live lanes not in active
    uint32_t lane_pc[32] = {};   // PCs of live lanes not in active
    int waiting_bar = -1;
    uint64_t since_progress = 0;
    uint64_t* regs = nullptr;
    // Spin detection (cooperative launches): a hash of the values this loop
    // iteration's global loads and atomics returned, whether it wrote memory,
    // and the previous iteration's hash at the same backward branch.
    uint64_t iter_hash = 0, last_hash = 0;
    uint32_t spin_pc = kNoPc;
    uint32_t iter_instructions = 0;
    bool iter_wrote = true, iter_read = false;
    bool iter_host = false;   // this iteration read host-mapped memory
    bool spin_host = false;   // the last spinning iteration did: the host may end the wait
    bool in_wait = false;     // the previous iteration spun too (one wait, many iterations)
    bool spinning = false;   // yielded because it spins (reset when it runs again)
    WarpInflight fly;        // loads in flight and dependent-load depths (stats only, inflight.h)

    // Picks the lanes with the smallest PC (lane_pc must hold every live lane's PC).
    void reschedule() {
        uint32_t best = kNoPc, second = kNoPc, m = 0;
        for (uint32_t l = 0; l < 32; ++l) {
            if (!(live >> l & 1)) continue;
            uint32_t p = lane_pc[l];
            if (p < best) { second = best; best = p; m = 1u << l; }
            else if (p == best) m |= 1u << l;
            else if (p < second) second = p;
        }
        pc = best;
        active = m;
        merge_pc = second;
    }
    void save_active_pc() {
        for (uint32_t m = active; m; m &= m - 1) lane_pc[__builtin_ctz(m)] = pc;
    }
};

struct Barrier { uint32_t arrived = 0, expected = 0; std::vector<uint32_t> warps; };

// One block's state: the sequential path reuses one; a cooperative launch
// keeps every block's at once.
struct Block {
    Dim3 cta;
    std::vector<uint64_t> regfile;
    std::vector<uint8_t> shared;
    std::vector<Warp> warps;
    Barrier bars[16];
    bool done = false;
    uint32_t index = 0;   // linear block index in the grid
    // With stats: per warp and register, the pending-load seq and the
    // dependent-load depth (WarpInflight's arrays).
    std::vector<uint32_t> fly_pend;
    std::vector<uint16_t> fly_depth;
};

struct Launch {
    const Program& prog;
    const Kernel& k;
    const LaunchConfig& cfg;
    Memory& mem;
    Stats* stats;
    uint64_t watchdog;
    uint32_t nthreads, nwarps, shared_bytes;
    Block* blk = nullptr;   // the block whose warp runs
    bool concurrent = false;   // cooperative: spin detection on
    bool round_progress = false;   // a store, atomic change or barrier passage in this round
    std::unique_ptr<RaceCheck> race;   // memory-model checking, when on
    uint64_t clock = 0;
    // One cached global allocation (most kernels hit the same buffer in a row).
    uint64_t cache_base = 1, cache_size = 0;
    uint8_t* cache_host = nullptr;
    bool cache_mapped = false;         // the cached allocation is host memory (cuMemHostAlloc DEVICEMAP)
    uint64_t cache_bits_base = 0;      // allocation whose touched-bitmap cache_bits is
    uint64_t* cache_bits = nullptr;
    std::optional<Fault> fault;
    std::vector<uint64_t> sector_scratch;   // count_global: the last global access's sorted, distinct sectors
    std::vector<uint64_t> fly_scratch;
    std::chrono::milliseconds host_wait_limit{0};
    std::chrono::steady_clock::time_point host_wait_since{};

    Launch(const Program& p, const Kernel& kk, const LaunchConfig& c, Memory& m, Stats* s)
        : prog(p), k(kk), cfg(c), mem(m), stats(s) {}

    std::string where(const Warp& w, int lane, const Inst& in) const {
        uint32_t t = w.id * 32 + uint32_t(lane);
        uint32_t tx = t % cfg.block.x, ty = (t / cfg.block.x) % cfg.block.y, tz = t / (cfg.block.x * cfg.block.y);
        std::ostringstream s;
        s << "kernel '" << k.info.name << "' block (" << blk->cta.x << "," << blk->cta.y << "," << blk->cta.z << ") thread ("
          << tx << "," << ty << "," << tz << ") at PTX line " << in.line << " `" << prog.line_text(in.line) << "`";
        return s.str();
    }
    bool raise(int code, const std::string& msg) {
        if (!fault) fault = Fault{code, msg};
        return false;
    }

    uint8_t* global_ptr(uint64_t addr, uint32_t n) {
        if (addr - cache_base < cache_size && n <= cache_size - (addr - cache_base)) return cache_host + (addr - cache_base);
        uint64_t b, s;
        uint8_t* h;
        bool mapped = false;
        if (!mem.range(addr, &b, &s, &h, &mapped) || n > s - (addr - b)) return nullptr;
        cache_base = b; cache_size = s; cache_host = h; cache_mapped = mapped;
        return h + (addr - b);
    }

    // Host pointer for one lane's access, or nullptr with the fault raised.
    uint8_t* access(const Warp& w, int lane, const Inst& in, Space sp, uint64_t addr, uint32_t n) {
        if (addr % n) {
            std::ostringstream s;
            s << "misaligned address 0x" << std::hex << addr << std::dec << " for a " << n << "-byte access: " << where(w, lane, in);
            raise(kMisaligned, s.str());
            return nullptr;
        }
        uint8_t* p = nullptr;
        const char* what = "global";
        if (sp == Space::Shared) {
            what = "shared";
            if (addr < shared_bytes && n <= shared_bytes - addr) p = blk->shared.data() + addr;
        } else if (sp == Space::Param) {
            what = "parameter";
            if (addr < cfg.params_size && n <= cfg.params_size - addr) p = const_cast<uint8_t*>(cfg.params) + addr;
        } else {
            p = global_ptr(addr, n);
        }
        if (!p) {
            std::ostringstream s;
            s << "illegal " << what << " address 0x" << std::hex << addr << std::dec << " (" << n << " bytes";
            if (sp == Space::Shared) s << ", block has " << shared_bytes << " bytes of shared memory";
            s << "): " << where(w, lane, in);
            raise(kIllegalAddress, s.str());
        }
        return p;
    }

    // Marks [addr, addr+n) as touched; the cache holds addr's allocation (the
    // access just succeeded). Aligned accesses of <= 32 bytes fit one word.
    void mark(uint64_t addr, uint32_t n) {
        if (cache_bits_base != cache_base) {
            auto& v = stats->touched[cache_base];
            if (v.size() < (cache_size + 63) / 64) v.resize((cache_size + 63) / 64);
            cache_bits = v.data();
            cache_bits_base = cache_base;
        }
        uint64_t off = addr - cache_base;
        cache_bits[off >> 6] |= (n >= 64 ? ~uint64_t(0) : (uint64_t(1) << n) - 1) << (off & 63);
    }

    void count_global(const Warp& w, const Inst& in, uint32_t m, uint32_t bytes, bool load, bool atomic) {
        if (!stats) return;
        const uint64_t* base = w.regs + size_t(in.addr) * 32;
        sector_scratch.clear();
        uint64_t alloc = 0;
        bool mixed = false;   // lanes in more than one allocation
        for (uint32_t mm = m; mm; mm &= mm - 1) {
            int l = __builtin_ctz(mm);
            uint64_t a = base[l] + uint64_t(in.off);
            sector_scratch.push_back(a >> 5);
            global_ptr(a, bytes);   // re-points the cache at a's allocation (always valid here)
            if (mm == m) alloc = cache_base;
            else mixed |= cache_base != alloc;
            mark(a, bytes);
        }
        uint64_t total = uint64_t(__builtin_popcount(m)) * bytes;
        if (atomic) { stats->global_atomic_bytes += total; return; }
        std::sort(sector_scratch.begin(), sector_scratch.end());
        sector_scratch.erase(std::unique(sector_scratch.begin(), sector_scratch.end()), sector_scratch.end());
        uint64_t sectors = uint64_t(sector_scratch.size());
        if (load) {
            stats->global_load_bytes += total; stats->global_load_requests++; stats->global_load_sectors += sectors;
            if (!mixed) {
                stats->load_sectors_by_alloc[alloc] += sectors;
            } else {
                // Allocations start 256-byte aligned, so a sector's first
                // byte lies in the allocation of the lane that touched it.
                for (uint64_t sec : sector_scratch) {
                    global_ptr(sec << 5, 1);
                    stats->load_sectors_by_alloc[cache_base] += 1;
                }
            }
        } else {
            stats->global_store_bytes += total; stats->global_store_requests++; stats->global_store_sectors += sectors;
        }
    }

    // Memory changed or a barrier was reached: the watchdog restarts, and a
    // cooperative round is not quiet.
    void progress(Warp& w) {
        w.since_progress = 0;
        w.iter_wrote = true;
        round_progress = true;
    }
    static uint64_t spin_mix(uint64_t h, uint64_t addr, uint64_t v) {
        h ^= addr * 0x9e3779b97f4a7c15ull;
        h = (h ^ v) * 0xff51afd7ed558ccdull;
        return h ^ (h >> 29);
    }

    RaceCheck::Who who(const Warp& w, int lane) const { return {blk->index, w.id, uint32_t(lane), w.pc}; }
    std::string block_name(uint32_t index) const {
        const Dim3& g = cfg.grid;
        std::ostringstream s;
        s << "block (" << index % g.x << "," << index / g.x % g.y << "," << index / (uint64_t(g.x) * g.y) << ")";
        return s.str();
    }
    // "block (1,0,0) warp 0 lane 3 reads at PTX line 30 `...`" (past: "read", "wrote").
    std::string access_name(const RaceCheck::Who& a, bool write, bool past = false) const {
        const uint32_t line = k.code[a.pc].line;
        std::ostringstream s;
        s << block_name(a.block) << " warp " << a.warp << " lane " << a.lane << " "
          << (write ? (past ? "wrote" : "writes") : (past ? "read" : "reads")) << " at PTX line " << line << " `"
          << prog.line_text(line) << "`";
        return s.str();
    }
    // A race the checker found: the launch fails with both accesses named.
    bool raise_race(const RaceCheck::Race& r) {
        std::ostringstream s;
        s << std::hex;
        switch (r.kind) {
        case RaceCheck::Race::ReadAfterWrite:
        case RaceCheck::Race::WriteAfterWrite:
            s << "race: kernel '" << k.info.name << "': " << access_name(r.now, r.now_writes) << " address 0x" << r.addr
              << ", which " << access_name(r.before, true, true)
              << ", with no acquire (gpu scope) of a release made after that write";
            break;
        case RaceCheck::Race::NcAfterWrite:
            s << "race: kernel '" << k.info.name << "': " << access_name(r.now, false) << " address 0x" << r.addr
              << " through the non-coherent path (ld.global.nc), which " << access_name(r.before, true, true)
              << " in this launch";
            break;
        case RaceCheck::Race::SharedConflict:
            s << "shared-memory race: kernel '" << k.info.name << "': " << access_name(r.now, r.now_writes)
              << " shared offset 0x" << r.addr << ", which " << access_name(r.before, r.before_writes, true)
              << ", with no barrier between";
            break;
        }
        return raise(kLaunchFailed, s.str());
    }

    bool mem_op(Warp& w, const Inst& in, uint32_t m);
    bool prefetch_op(Warp& w, const Inst& in, uint32_t m);
    bool atom_op(Warp& w, const Inst& in, uint32_t m);
    bool shfl(Warp& w, const Inst& in, uint32_t m);
    bool vote(Warp& w, const Inst& in, uint32_t m);
    bool elect(Warp& w, const Inst& in, uint32_t m);
    bool mma(Warp& w, const Inst& in, uint32_t m);
    bool bar(Warp& w, const Inst& in, uint32_t m, bool* blocked);
    // Runs the warp until it exits, blocks at a barrier, faults (false) or has
    // run `slice` instructions (then the next warp gets its turn, so a warp
    // spinning on a flag another warp of the block sets still sees it).
    bool run_warp(Warp& w, uint32_t slice);
    // regs_zeroed: b's register file is all zeros already (freshly sized).
    void init_block(Block& b, uint32_t bx, uint32_t by, uint32_t bz, bool regs_zeroed = false);
    // Runs the current block's warps for one slice each; false on a fault.
    // *all_done when every warp has exited; *stuck when none could run (all
    // wait at barriers that cannot complete).
    bool step_block(uint32_t slice, bool* all_done, bool* stuck);
    std::string barrier_report() const;
    bool run_block(uint32_t bx, uint32_t by, uint32_t bz);
    bool run_cooperative(uint64_t seed);
    // Spin detection at a taken backward branch; true when the warp should yield.
    bool spins(Warp& w, uint32_t target);
};

}  // namespace ptxlm::emu::exec
