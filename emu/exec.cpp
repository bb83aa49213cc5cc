// The interpreter: launch checks, block and warp scheduling, control flow,
// memory instructions, warp-collective instructions, barriers, the watchdog.
//
// Execution model. Blocks of an ordinary launch run one after another on the
// calling thread. In a block, warps run round-robin in time slices; a warp
// runs until it exits, waits at a barrier or has used its slice. A warp
// executes SIMT-style: each instruction is applied to its active lanes at
// once. Divergence uses the "minimum PC" rule: every live lane has its own
// PC, and the warp always runs the lanes whose PC is the smallest; lanes that
// branched ahead wait and rejoin when the others reach their PC. For the
// structured code PTX generators emit (if/else, loops) this reconverges at
// the immediate post-dominator like the hardware stack does, so shfl.sync and
// vote.sync see every lane of a converged warp together.
//
// In an ordinary launch, blocks that spin-wait on each other (a flag set by a
// later block, a grid-wide barrier) would hang: the watchdog stops such a
// kernel with CUDA_ERROR_LAUNCH_TIMEOUT rather than letting it run forever.
// Atomics between blocks that do not wait on each other work.
//
// A cooperative launch (every block resident at once, as the driver checked)
// runs its blocks concurrently: rounds in which every block, in an order
// drawn from a generator seeded by PTXLM_EMU_SEED (the same seed replays the
// same interleaving exactly), runs each of its warps for a quantum of
// instructions. A warp also yields early when it spins: at a backward branch,
// when the iteration just finished stored nothing and its global loads and
// atomics returned exactly what the previous iteration's did (a load in a
// loop that sees no change), or at nanosleep. A round in which no warp
// stored, made an atomic change or passed a barrier, and every warp spun or
// waited, repeats forever: the launch stops with a deadlock report naming
// each block's waiting warps (CUDA_ERROR_LAUNCH_TIMEOUT), never a hang.
#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <random>
#include <sstream>
#include <thread>
#include <type_traits>

#include "program.h"
#include "racecheck.h"
#include "stats.h"

namespace ptxlm::emu {

namespace {

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
    std::vector<uint64_t> sector_scratch;
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
        const auto end = std::unique(sector_scratch.begin(), sector_scratch.end());
        uint64_t sectors = uint64_t(end - sector_scratch.begin());
        if (load) {
            stats->global_load_bytes += total; stats->global_load_requests++; stats->global_load_sectors += sectors;
            if (!mixed) {
                stats->load_sectors_by_alloc[alloc] += sectors;
            } else {
                // Allocations start 256-byte aligned, so a sector's first
                // byte lies in the allocation of the lane that touched it.
                for (auto it = sector_scratch.begin(); it != end; ++it) {
                    global_ptr(*it << 5, 1);
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
    bool atom_op(Warp& w, const Inst& in, uint32_t m);
    bool shfl(Warp& w, const Inst& in, uint32_t m);
    bool vote(Warp& w, const Inst& in, uint32_t m);
    bool elect(Warp& w, const Inst& in, uint32_t m);
    bool bar(Warp& w, const Inst& in, uint32_t m, bool* blocked);
    // Runs the warp until it exits, blocks at a barrier, faults (false) or has
    // run `slice` instructions (then the next warp gets its turn, so a warp
    // spinning on a flag another warp of the block sets still sees it).
    bool run_warp(Warp& w, uint32_t slice);
    void init_block(Block& b, uint32_t bx, uint32_t by, uint32_t bz);
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

inline uint64_t load_le(const uint8_t* p, uint32_t n) {
    uint64_t v = 0;
    std::memcpy(&v, p, n);
    return v;
}

bool Launch::mem_op(Warp& w, const Inst& in, uint32_t m) {
    const bool is_ld = in.op == Op::Ld;
    const uint32_t esz = ty_bits(in.ty) / 8, n = esz * in.vec;
    const Space sp = in.space == Space::Generic ? Space::Global : in.space;
    const uint64_t* base = w.regs + size_t(in.addr) * 32;
    const bool sgn = ty_signed(in.ty);
    bool changed = false;   // a store that leaves memory as it was is no progress
    for (uint32_t mm = m; mm; mm &= mm - 1) {
        int l = __builtin_ctz(mm);
        uint64_t a = base[l] + uint64_t(in.off);
        uint8_t* p = access(w, l, in, sp, a, n);
        if (!p) return false;
        if (race && sp != Space::Param) {
            std::optional<RaceCheck::Race> r;
            if (sp == Space::Shared) r = race->shared(who(w, l), uint32_t(a), n, !is_ld);
            else if (is_ld) r = race->load(who(w, l), a, n, MemSem(in.sem), MemScope(in.scope), in.nc);
            else r = race->store(who(w, l), a, n, MemSem(in.sem), MemScope(in.scope));
            if (r) return raise_race(*r);
        }
        for (uint32_t i = 0; i < in.vec; ++i) {
            if (is_ld) {
                uint64_t v = load_le(p + i * esz, esz);
                uint32_t rb = k.reg_bits[in.d[i]];
                if (sgn && esz < 8) v = uint64_t(int64_t(v << (64 - 8 * esz)) >> (64 - 8 * esz));
                if (rb < 64) v &= (uint64_t(1) << rb) - 1;
                w.regs[size_t(in.d[i]) * 32 + l] = v;
                if (concurrent && sp == Space::Global) {
                    w.iter_hash = spin_mix(w.iter_hash, a + i * esz, v);
                    w.iter_host |= cache_mapped;   // access() just pointed the cache at a's allocation
                }
            } else {
                uint64_t v = w.regs[size_t(in.a[i]) * 32 + l];
                if (std::memcmp(p + i * esz, &v, esz) != 0) changed = true;
                std::memcpy(p + i * esz, &v, esz);
            }
        }
    }
    if (sp == Space::Global) count_global(w, in, m, n, is_ld, false);
    else if (sp == Space::Shared && stats) (is_ld ? stats->shared_load_bytes : stats->shared_store_bytes) += uint64_t(__builtin_popcount(m)) * n;
    if (is_ld && sp == Space::Global) w.iter_read = true;
    if (changed) progress(w);
    return true;
}

template <class T>
T atom_apply(AtomOp op, T old, T b, T c, bool* write) {
    using U = std::make_unsigned_t<T>;   // wrapping add, no signed overflow
    *write = true;
    switch (op) {
    case AtomOp::Add: return T(U(old) + U(b));
    case AtomOp::Min: return old < b ? old : b;
    case AtomOp::Max: return old > b ? old : b;
    case AtomOp::Exch: return b;
    case AtomOp::Cas: if (old == b) return c; *write = false; return old;
    case AtomOp::And: return T(old & b);
    case AtomOp::Or: return T(old | b);
    case AtomOp::Xor: return T(old ^ b);
    case AtomOp::Inc: return old >= b ? T(0) : T(U(old) + 1);
    case AtomOp::Dec: return (old == 0 || old > b) ? b : T(U(old) - 1);
    }
    return old;
}

bool Launch::atom_op(Warp& w, const Inst& in, uint32_t m) {
    const uint32_t n = ty_bits(in.ty) / 8;
    const Space sp = in.space == Space::Generic ? Space::Global : in.space;
    const uint64_t* base = w.regs + size_t(in.addr) * 32;
    const AtomOp op = AtomOp(in.sub);
    bool changed = false;   // an atomic that leaves memory as it was (a failed CAS) is no progress
    for (uint32_t mm = m; mm; mm &= mm - 1) {   // lanes in order: one valid serialisation
        int l = __builtin_ctz(mm);
        uint8_t* p = access(w, l, in, sp, base[l] + uint64_t(in.off), n);
        if (!p) return false;
        if (race && sp == Space::Global)   // shared atomics: strong, never a race among themselves
            race->atomic(who(w, l), base[l] + uint64_t(in.off), n, MemSem(in.sem), MemScope(in.scope));
        uint64_t b = w.regs[size_t(in.a[0]) * 32 + l];
        uint64_t c = in.a[1] != kNoReg ? w.regs[size_t(in.a[1]) * 32 + l] : 0;
        uint64_t old = load_le(p, n), nv;
        bool write;
        switch (in.ty) {
        case Ty::S32: nv = uint32_t(atom_apply<int32_t>(op, int32_t(old), int32_t(b), int32_t(c), &write)); break;
        case Ty::S64: nv = uint64_t(atom_apply<int64_t>(op, int64_t(old), int64_t(b), int64_t(c), &write)); break;
        case Ty::F32: {
            float o, x; uint32_t ou = uint32_t(old), xu = uint32_t(b);
            std::memcpy(&o, &ou, 4); std::memcpy(&x, &xu, 4);
            float r = op == AtomOp::Add ? o + x : x;
            write = true;
            std::memcpy(&ou, &r, 4);
            nv = ou;
            break;
        }
        case Ty::F16: case Ty::BF16: {   // .noftz add, computed exactly in double, rounded once
            bool h = in.ty == Ty::F16;
            double o = h ? f32_from_f16(uint16_t(old)) : f32_from_bf16(uint16_t(old));
            double x = h ? f32_from_f16(uint16_t(b)) : f32_from_bf16(uint16_t(b));
            nv = h ? f16_from_f64(o + x, Rnd::Rn) : bf16_from_f32(float(o + x), Rnd::Rn);
            write = true;
            break;
        }
        case Ty::F64: {
            double o, x; std::memcpy(&o, &old, 8); std::memcpy(&x, &b, 8);
            double r = o + x;
            write = true;
            std::memcpy(&nv, &r, 8);
            break;
        }
        default:
            nv = n == 4 ? uint64_t(atom_apply<uint32_t>(op, uint32_t(old), uint32_t(b), uint32_t(c), &write))
                        : atom_apply<uint64_t>(op, old, b, c, &write);
        }
        if (write && std::memcmp(p, &nv, n) != 0) {
            std::memcpy(p, &nv, n);
            changed = true;
        }
        if (in.d[0] != kNoReg) w.regs[size_t(in.d[0]) * 32 + l] = old;
        if (concurrent) {
            w.iter_hash = spin_mix(w.iter_hash, base[l] + uint64_t(in.off), old);
            w.iter_host |= cache_mapped;
        }
    }
    if (sp == Space::Global) count_global(w, in, m, n, false, true);
    w.iter_read = true;
    if (changed) progress(w);
    return true;
}

bool Launch::shfl(Warp& w, const Inst& in, uint32_t m) {
    const uint64_t* A = w.regs + size_t(in.a[0]) * 32;
    const uint64_t* B = w.regs + size_t(in.a[1]) * 32;
    const uint64_t* C = w.regs + size_t(in.a[2]) * 32;
    const uint64_t* M = w.regs + size_t(in.a[3]) * 32;
    int first = __builtin_ctz(m);
    uint32_t member = uint32_t(M[first]);
    if (member != m) {
        std::ostringstream s;
        s << "shfl.sync membermask 0x" << std::hex << member << " differs from the lanes executing it 0x" << m << std::dec
          << ": " << where(w, first, in);
        return raise(kIllegalInstruction, s.str());
    }
    uint64_t src[32], out[32];
    bool pv[32];
    std::memcpy(src, A, sizeof(src));
    for (uint32_t mm = m; mm; mm &= mm - 1) {
        uint32_t lane = uint32_t(__builtin_ctz(mm));
        uint32_t b = uint32_t(B[lane]), c = uint32_t(C[lane]);
        uint32_t segmask = (c >> 8) & 31, clamp = c & 31;
        uint32_t max_lane = (lane & segmask) | (clamp & ~segmask);
        uint32_t min_lane = lane & segmask;
        int64_t j;
        bool ok;
        switch (ShflMode(in.sub)) {
        case ShflMode::Up: j = int64_t(lane) - int64_t(b); ok = j >= int64_t(max_lane); break;
        case ShflMode::Down: j = int64_t(lane) + int64_t(b); ok = j <= int64_t(max_lane); break;
        case ShflMode::Bfly: j = int64_t(lane ^ b); ok = j <= int64_t(max_lane); break;
        default: j = int64_t(min_lane | (b & ~segmask & 31)); ok = j <= int64_t(max_lane); break;
        }
        if (!ok) j = lane;
        if (ok && !(m >> j & 1)) {
            std::ostringstream s;
            s << "shfl.sync reads lane " << j << " which is not executing it: " << where(w, int(lane), in);
            return raise(kIllegalInstruction, s.str());
        }
        out[lane] = src[j] & 0xffffffffu;
        pv[lane] = ok;
    }
    uint64_t* D = w.regs + size_t(in.d[0]) * 32;
    uint64_t* P = in.pd != kNoReg ? w.regs + size_t(in.pd) * 32 : nullptr;
    for (uint32_t mm = m; mm; mm &= mm - 1) {
        int l = __builtin_ctz(mm);
        D[l] = out[l];
        if (P) P[l] = pv[l];
    }
    return true;
}

bool Launch::vote(Warp& w, const Inst& in, uint32_t m) {
    const uint64_t* P = w.regs + size_t(in.a[0]) * 32;
    int first = __builtin_ctz(m);
    uint32_t member = uint32_t(w.regs[size_t(in.a[1]) * 32 + first]);
    if (member != m) {
        std::ostringstream s;
        s << "vote.sync membermask 0x" << std::hex << member << " differs from the lanes executing it 0x" << m << std::dec
          << ": " << where(w, first, in);
        return raise(kIllegalInstruction, s.str());
    }
    uint32_t ballot = 0;
    for (uint32_t mm = m; mm; mm &= mm - 1) {
        int l = __builtin_ctz(mm);
        if ((P[l] & 1) != in.neg_c) ballot |= 1u << l;
    }
    uint64_t r = VoteMode(in.sub) == VoteMode::Ballot ? ballot
               : VoteMode(in.sub) == VoteMode::All   ? uint64_t(ballot == m)
                                                     : uint64_t(ballot != 0);
    uint64_t* D = w.regs + size_t(in.d[0]) * 32;
    for (uint32_t mm = m; mm; mm &= mm - 1) D[__builtin_ctz(mm)] = r;
    return true;
}

bool Launch::elect(Warp& w, const Inst& in, uint32_t m) {
    int first = __builtin_ctz(m);
    uint32_t member = uint32_t(w.regs[size_t(in.a[0]) * 32 + first]);
    if (member != m) {
        std::ostringstream s;
        s << "elect.sync membermask 0x" << std::hex << member << " differs from the lanes executing it 0x" << m << std::dec
          << ": " << where(w, first, in);
        return raise(kIllegalInstruction, s.str());
    }
    uint64_t* D = w.regs + size_t(in.d[0]) * 32;
    uint64_t* P = w.regs + size_t(in.pd) * 32;
    for (uint32_t mm = m; mm; mm &= mm - 1) {
        int l = __builtin_ctz(mm);
        D[l] = uint64_t(first);
        P[l] = l == first;
    }
    return true;
}

bool Launch::bar(Warp& w, const Inst& in, uint32_t m, bool* blocked) {
    *blocked = false;
    int first = __builtin_ctz(w.active);
    if (m != w.active || w.active != w.live) {
        std::ostringstream s;
        s << "bar.sync executed by a diverged warp (lanes 0x" << std::hex << m << " of live 0x" << w.live << std::dec
          << "): " << where(w, first, in);
        return raise(kIllegalInstruction, s.str());
    }
    uint32_t id = uint32_t(w.regs[size_t(in.a[0]) * 32 + first]);
    uint32_t expected = in.na == 2 ? uint32_t(w.regs[size_t(in.a[1]) * 32 + first]) : nthreads;
    if (id > 15) return raise(kIllegalInstruction, "barrier id " + std::to_string(id) + " over 15: " + where(w, first, in));
    if (in.na == 2 && (expected == 0 || expected % 32 || expected > (nthreads + 31) / 32 * 32))
        return raise(kIllegalInstruction, "bad barrier thread count " + std::to_string(expected) + ": " + where(w, first, in));
    Barrier& b = blk->bars[id];
    if (b.arrived && b.expected != expected)
        return raise(kIllegalInstruction, "barrier " + std::to_string(id) + " used with thread counts " +
                                              std::to_string(b.expected) + " and " + std::to_string(expected) + ": " + where(w, first, in));
    b.expected = expected;
    b.arrived += uint32_t(__builtin_popcount(m));
    progress(w);
    w.pc++;
    if (b.arrived >= b.expected) {
        for (uint32_t wi : b.warps) blk->warps[wi].waiting_bar = -1;
        round_progress = true;
        if (race) race->barrier(blk->index);
        b.warps.clear();
        b.arrived = 0;
        if (stats) stats->barriers++;
        return true;
    }
    b.warps.push_back(w.id);
    w.waiting_bar = int(id);
    *blocked = true;
    return true;
}

bool Launch::run_warp(Warp& w, uint32_t slice) {
    const Inst* code = k.code.data();
    uint64_t* R = w.regs;
    for (;;) {
        if (slice-- == 0) return true;
        const Inst& in = code[w.pc];
        uint32_t m = w.active;
        if (in.guard != kNoReg) {
            const uint64_t* g = R + size_t(in.guard) * 32;
            uint32_t gm = 0;
            for (uint32_t mm = m; mm; mm &= mm - 1) {
                int l = __builtin_ctz(mm);
                if ((g[l] & 1) != in.guard_neg) gm |= 1u << l;
            }
            m = gm;
        }
        ++clock;
        ++w.iter_instructions;
        if (stats) {
            stats->warp_instructions++;
            stats->thread_instructions += uint64_t(__builtin_popcount(w.active));
        }
        if (++w.since_progress > watchdog) {
            std::ostringstream s;
            s << "watchdog: kernel '" << k.info.name << "' block (" << blk->cta.x << "," << blk->cta.y << "," << blk->cta.z << ") warp "
              << w.id << " stopped at PC " << w.pc << " (PTX line " << in.line << " `" << prog.line_text(in.line)
              << "`) after " << watchdog << " instructions without a store, atomic or barrier "
              << "(a spin-wait on another block cannot finish: blocks run one after another; PTXLM_EMU_WATCHDOG sets the limit)";
            return raise(kLaunchTimeout, s.str());
        }
        switch (in.op) {
        case Op::Bra: {
            // A taken backward branch ends a loop iteration: a cooperative
            // launch checks whether the warp spins, and if so yields after it.
            const bool yield = concurrent && m && in.target <= w.pc && spins(w, w.pc);
            if (m == w.active) {
                w.pc = in.target;
            } else if (m == 0) {
                w.pc++;
            } else {
                for (uint32_t mm = w.active; mm; mm &= mm - 1) {
                    int l = __builtin_ctz(mm);
                    w.lane_pc[l] = (m >> l & 1) ? in.target : w.pc + 1;
                }
                w.reschedule();
                if (yield) { w.spinning = true; return true; }
                continue;
            }
            if (w.pc >= w.merge_pc) { w.save_active_pc(); w.reschedule(); }
            if (yield) { w.spinning = true; return true; }
            continue;
        }
        case Op::Nanosleep:   // a hint: a cooperative launch lets the other warps run
            w.pc++;
            if (w.pc == w.merge_pc) { w.save_active_pc(); w.reschedule(); }
            if (concurrent) return true;
            continue;
        case Op::Exit:
            w.live &= ~m;
            w.active &= ~m;
            if (!w.live) return true;
            if (w.active) w.pc++;
            else w.pc = kNoPc;
            if (w.pc >= w.merge_pc) { w.save_active_pc(); w.reschedule(); }
            continue;
        case Op::Bar: {
            bool blocked;
            if (!bar(w, in, m, &blocked)) return false;
            if (blocked) return true;
            continue;
        }
        case Op::Nop:
            if (race && m && in.sem != uint8_t(MemSem::Weak)) race->fence(blk->index, MemSem(in.sem), MemScope(in.scope));
            break;
        case Op::Trap:
            if (m) return raise(kLaunchFailed, "trap: " + where(w, __builtin_ctz(m), in));
            break;
        case Op::Ld: case Op::St: if (m && !mem_op(w, in, m)) return false; break;
        case Op::Atom: if (m && !atom_op(w, in, m)) return false; break;
        case Op::Shfl: if (m && !shfl(w, in, m)) return false; break;
        case Op::Vote: if (m && !vote(w, in, m)) return false; break;
        case Op::Elect: if (m && !elect(w, in, m)) return false; break;
        case Op::Clock:
            for (uint32_t mm = m; mm; mm &= mm - 1) R[size_t(in.d[0]) * 32 + __builtin_ctz(mm)] = clock;
            break;
        default:
            if (m) exec_alu(in, R, m);
            break;
        }
        w.pc++;
        if (w.pc == w.merge_pc) { w.save_active_pc(); w.reschedule(); }
    }
}

void Launch::init_block(Block& b, uint32_t bx, uint32_t by, uint32_t bz) {
    b.cta = {bx, by, bz};
    b.index = uint32_t(bx + uint64_t(by) * cfg.grid.x + uint64_t(bz) * cfg.grid.x * cfg.grid.y);
    b.done = false;
    std::fill(b.shared.begin(), b.shared.end(), uint8_t(0xcd));
    for (auto& bar : b.bars) bar = Barrier{};
    const size_t per_warp = size_t(k.nregs) * 32;
    std::fill(b.regfile.begin(), b.regfile.end(), 0);
    for (uint32_t wi = 0; wi < nwarps; ++wi) {
        Warp& w = b.warps[wi];
        w = Warp{};
        w.id = wi;
        w.regs = b.regfile.data() + wi * per_warp;
        uint32_t lanes = std::min<uint32_t>(32, nthreads - wi * 32);
        w.live = w.active = lanes == 32 ? 0xffffffffu : (1u << lanes) - 1;
        for (auto& c : k.constants) std::fill_n(w.regs + size_t(c.reg) * 32, 32, c.value);
        for (auto& s : k.specials) {
            uint64_t* r = w.regs + size_t(s.reg) * 32;
            for (uint32_t l = 0; l < 32; ++l) {
                uint32_t t = wi * 32 + l;
                uint32_t v = 0;
                switch (s.what) {
                case Special::TidX: v = t % cfg.block.x; break;
                case Special::TidY: v = (t / cfg.block.x) % cfg.block.y; break;
                case Special::TidZ: v = t / (cfg.block.x * cfg.block.y); break;
                case Special::NtidX: v = cfg.block.x; break;
                case Special::NtidY: v = cfg.block.y; break;
                case Special::NtidZ: v = cfg.block.z; break;
                case Special::CtaX: v = bx; break;
                case Special::CtaY: v = by; break;
                case Special::CtaZ: v = bz; break;
                case Special::NctaX: v = cfg.grid.x; break;
                case Special::NctaY: v = cfg.grid.y; break;
                case Special::NctaZ: v = cfg.grid.z; break;
                case Special::LaneId: v = l; break;
                case Special::WarpId: v = wi; break;
                case Special::NWarpId: v = nwarps; break;
                case Special::SmId:   // blocks run in order; spread them over the SMs round-robin
                    v = uint32_t((uint64_t(bz) * cfg.grid.y * cfg.grid.x + uint64_t(by) * cfg.grid.x + bx) %
                                 device_limits().sm_count);
                    break;
                case Special::NSmId: v = device_limits().sm_count; break;
                case Special::LaneMaskLt: v = (1u << l) - 1; break;
                case Special::LaneMaskLe: v = l == 31 ? 0xffffffffu : (2u << l) - 1; break;
                case Special::LaneMaskEq: v = 1u << l; break;
                case Special::LaneMaskGe: v = ~((1u << l) - 1); break;
                case Special::LaneMaskGt: v = l == 31 ? 0 : ~((2u << l) - 1); break;
                case Special::ClusterCtaRank: v = 0; break;        // no clusters: each CTA is its own
                case Special::ClusterNCtaRank: v = 1; break;
                }
                r[l] = v;
            }
        }
    }
}

bool Launch::step_block(uint32_t slice, bool* all_done, bool* stuck) {
    bool ran = false, pending = false;
    for (auto& w : blk->warps) {
        if (!w.live) continue;
        if (w.waiting_bar >= 0) { pending = true; continue; }
        ran = true;
        w.spinning = false;
        if (!run_warp(w, slice)) return false;
    }
    *all_done = !pending && !ran;
    *stuck = pending && !ran;
    return true;
}

// The current block's barriers, who waits at them and who has exited.
std::string Launch::barrier_report() const {
    std::ostringstream s;
    for (uint32_t id = 0; id < 16; ++id) {
        const Barrier& b = blk->bars[id];
        if (b.warps.empty()) continue;
        s << " barrier " << id << " has " << b.arrived << " of " << b.expected << " threads (waiting warps";
        for (uint32_t wi : b.warps) s << " " << wi;
        s << ");";
    }
    s << " exited warps:";
    bool any = false;
    for (auto& w : blk->warps)
        if (!w.live) { s << " " << w.id; any = true; }
    if (!any) s << " none";
    uint32_t partial = 0;
    for (auto& w : blk->warps)
        if (w.live && w.live != (nthreads - w.id * 32 >= 32 ? 0xffffffffu : (1u << (nthreads - w.id * 32)) - 1)) ++partial;
    if (partial) s << "; " << partial << " warp(s) have exited threads";
    return s.str();
}

bool Launch::run_block(uint32_t bx, uint32_t by, uint32_t bz) {
    init_block(*blk, bx, by, bz);
    for (;;) {
        bool done, stuck;
        if (!step_block(kSlice, &done, &stuck)) return false;
        if (done) return true;
        if (stuck) {
            std::ostringstream s;
            s << "deadlock: kernel '" << k.info.name << "' block (" << bx << "," << by << "," << bz << "):" << barrier_report();
            return raise(kLaunchTimeout, s.str());
        }
    }
}

bool Launch::spins(Warp& w, uint32_t at) {
    const bool same = w.iter_read && !w.iter_wrote && w.spin_pc == at && w.iter_hash == w.last_hash;
    if (same && stats) {
        stats->spin_yields++;
        stats->spin_waits += !w.in_wait;
        stats->spin_instructions += w.iter_instructions;
    }
    w.in_wait = same;
    w.spin_host = same && w.iter_host;
    w.spin_pc = at;
    w.last_hash = w.iter_hash;
    w.iter_hash = 0;
    w.iter_read = w.iter_wrote = w.iter_host = false;
    w.iter_instructions = 0;
    return same;
}

bool Launch::run_cooperative(uint64_t seed) {
    const Dim3& g = cfg.grid;
    std::vector<Block> blocks(g.count());
    for (uint64_t i = 0; i < blocks.size(); ++i) {
        Block& b = blocks[i];
        b.regfile.resize(size_t(nwarps) * k.nregs * 32);
        b.shared.resize(shared_bytes);
        b.warps.resize(nwarps);
        init_block(b, uint32_t(i % g.x), uint32_t(i / g.x % g.y), uint32_t(i / (uint64_t(g.x) * g.y)));
    }
    std::mt19937_64 rng(seed);
    std::vector<uint32_t> order(blocks.size());
    for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
    uint32_t quiet = 0;
    for (;;) {
        // One round: every unfinished block, in a seeded order, runs each of
        // its warps for a quantum of 16 to 256 instructions (seeded too).
        std::shuffle(order.begin(), order.end(), rng);
        round_progress = false;
        bool all_done = true, all_waiting = true;
        for (uint32_t bi : order) {
            Block& b = blocks[bi];
            if (b.done) continue;
            blk = &b;
            bool done, stuck;
            if (!step_block(16u << (rng() % 5), &done, &stuck)) return false;
            b.done = done;
            all_done &= done;
            if (done) continue;
            for (const Warp& w : b.warps)
                if (w.live && w.waiting_bar < 0 && !w.spinning) all_waiting = false;
        }
        if (all_done) return true;
        // Nothing changed memory and every warp waited or spun: the next
        // round would be the same, unless a warp waits on host-mapped memory,
        // which the host may change (a cancel flag, a go signal). Then the
        // launch sleeps between rounds, up to PTXLM_EMU_HOST_WAIT_MS in all.
        quiet = !round_progress && all_waiting ? quiet + 1 : 0;
        bool host_wait = false;
        if (quiet >= 2)
            for (const Block& b : blocks)
                for (const Warp& w : b.warps) host_wait |= !b.done && w.live && w.spinning && w.spin_host;
        if (!host_wait) {
            host_wait_since = {};
        } else {
            const auto now = std::chrono::steady_clock::now();
            if (host_wait_since == std::chrono::steady_clock::time_point{}) host_wait_since = now;
            if (now - host_wait_since < host_wait_limit) {
                std::this_thread::sleep_for(std::chrono::microseconds(200));
                continue;
            }
        }
        if (quiet >= 2) {
            std::ostringstream s;
            s << "deadlock: cooperative kernel '" << k.info.name << "': every unfinished block waits and nothing changes";
            if (host_wait)
                s << " (host-mapped memory a warp polls stayed the same for "
                  << std::chrono::duration_cast<std::chrono::milliseconds>(host_wait_limit).count()
                  << " ms; PTXLM_EMU_HOST_WAIT_MS sets the limit)";
            uint32_t listed = 0, unlisted = 0;
            for (Block& b : blocks) {
                if (b.done) continue;
                if (listed == 8) { ++unlisted; continue; }
                ++listed;
                blk = &b;
                s << "\n  block (" << b.cta.x << "," << b.cta.y << "," << b.cta.z << "):";
                for (const Warp& w : b.warps)
                    if (w.live && w.spinning) {
                        const Inst& br = k.code[w.spin_pc];
                        const uint32_t top = k.code[br.target].line;
                        s << " warp " << w.id << " spins in the loop from PTX line " << top << " `"
                          << prog.line_text(top) << "` to line " << br.line << ";";
                    }
                s << barrier_report();
            }
            if (unlisted) s << "\n  and " << unlisted << " more blocks";
            return raise(kLaunchTimeout, s.str());
        }
    }
}

// PTXLM_EMU_SEED (decimal or 0x hex) orders a cooperative launch's blocks
// and quanta; 1 when unset.
uint64_t schedule_seed() {
    const char* v = std::getenv("PTXLM_EMU_SEED");
    if (v && *v) {
        char* e = nullptr;
        unsigned long long x = std::strtoull(v, &e, 0);
        if (e && *e == 0) return x;
    }
    return 1;
}

// How long a cooperative launch whose warps all wait on host-mapped memory
// keeps waiting for the host to change it (default 60 s).
std::chrono::milliseconds host_wait_limit_ms() {
    const char* v = std::getenv("PTXLM_EMU_HOST_WAIT_MS");
    if (v && *v) {
        char* e = nullptr;
        unsigned long long x = std::strtoull(v, &e, 0);
        if (e && *e == 0) return std::chrono::milliseconds(x);
    }
    return std::chrono::milliseconds(60000);
}

bool racecheck_all() {
    const char* v = std::getenv("PTXLM_EMU_RACECHECK");
    return v && std::strcmp(v, "1") == 0;
}

uint64_t watchdog_limit() {
    const char* v = std::getenv("PTXLM_EMU_WATCHDOG");
    if (v && *v) {
        char* e = nullptr;
        unsigned long long x = std::strtoull(v, &e, 0);
        if (e && *e == 0 && x > 0) return x;
    }
    return uint64_t(1) << 26;
}

}  // namespace

std::optional<Fault> run_kernel(const Program& p, std::string_view kernel, const LaunchConfig& cfg, Memory& mem,
                                Stats* stats) {
    const Kernel* k = nullptr;
    for (auto& kk : p.kernels)
        if (kk.info.name == kernel) k = &kk;
    if (!k) return Fault{kNotFound, "no kernel named '" + std::string(kernel) + "' in the module"};
    const DeviceLimits& lim = device_limits();
    const std::string kn = "kernel '" + k->info.name + "': ";
    if (cfg.params_size != k->info.param_bytes || (cfg.params_size && !cfg.params))
        return Fault{kInvalidValue, kn + "parameter buffer is " + std::to_string(cfg.params_size) + " bytes, the kernel takes " +
                                        std::to_string(k->info.param_bytes)};
    const Dim3& b = cfg.block;
    const Dim3& g = cfg.grid;
    if (!b.x || !b.y || !b.z || b.x > 1024 || b.y > 1024 || b.z > 64)
        return Fault{kInvalidValue, kn + "block dimensions out of range (max 1024 x 1024 x 64, none zero)"};
    if (b.count() > lim.max_threads_per_block)
        return Fault{kInvalidValue, kn + "block of " + std::to_string(b.count()) + " threads exceeds the limit of " +
                                        std::to_string(lim.max_threads_per_block)};
    if (k->info.max_ntid && b.count() > k->info.max_ntid)
        return Fault{kInvalidValue, kn + "block of " + std::to_string(b.count()) + " threads exceeds .maxntid " +
                                        std::to_string(k->info.max_ntid)};
    if (!g.x || !g.y || !g.z || g.x > 0x7fffffffu || g.y > 65535 || g.z > 65535)
        return Fault{kInvalidValue, kn + "grid dimensions out of range"};
    uint64_t shared_total = uint64_t(k->has_dynamic_shared ? k->dynamic_shared_offset : k->info.static_shared_bytes) +
                            cfg.dynamic_shared_bytes;
    uint32_t shared_limit = cfg.shared_limit ? std::min(cfg.shared_limit, lim.shared_per_block_optin) : lim.shared_per_block;
    if (shared_total > shared_limit)
        return Fault{kInvalidValue, kn + "static + dynamic shared memory " + std::to_string(shared_total) +
                                        " bytes exceeds the limit of " + std::to_string(shared_limit) + " bytes"};

    Launch L(p, *k, cfg, mem, stats);
    if (stats) { *stats = Stats{}; stats->launches = 1; }
    L.watchdog = watchdog_limit();
    L.nthreads = uint32_t(b.count());
    L.nwarps = (L.nthreads + 31) / 32;
    L.shared_bytes = uint32_t(shared_total);
    // Memory-model checking: always for a cooperative launch, for any launch
    // with PTXLM_EMU_RACECHECK=1; per-block clocks cost blocks^2, so grids of
    // more than 4096 blocks go unchecked.
    if ((cfg.cooperative || racecheck_all()) && g.count() <= 4096)
        L.race = std::make_unique<RaceCheck>(uint32_t(g.count()), uint32_t(shared_total));
    if (cfg.cooperative) {
        L.concurrent = true;
        L.host_wait_limit = host_wait_limit_ms();
        const bool ok = L.run_cooperative(schedule_seed());
        if (stats) {
            if (L.race) stats->grid_syncs = L.race->grid_syncs();
            stats->finish();
        }
        if (!ok) return L.fault;
        return std::nullopt;
    }
    Block one;
    one.shared.resize(shared_total);
    one.regfile.resize(size_t(L.nwarps) * k->nregs * 32);
    one.warps.resize(L.nwarps);
    L.blk = &one;
    for (uint32_t z = 0; z < g.z; ++z)
        for (uint32_t y = 0; y < g.y; ++y)
            for (uint32_t x = 0; x < g.x; ++x)
                if (!L.run_block(x, y, z)) {
                    if (stats) stats->finish();
                    return L.fault;
                }
    if (stats) stats->finish();
    return std::nullopt;
}

}  // namespace ptxlm::emu
