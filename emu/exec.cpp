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
#include "exec_launch.h"

namespace ptxlm::emu {

namespace exec {

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
            stats->by_class[size_t(inst_class(in))]++;
        }
        if (++w.since_progress > watchdog) {
            std::ostringstream s;
            s << "watchdog: kernel '" << k.info.name << "' block (" << blk->cta.x << "," << blk->cta.y << "," << blk->cta.z << ") warp "
              << w.id << " stopped at PC " << w.pc << " (PTX line " << in.line << " `" << prog.line_text(in.line)
              << "`) after " << watchdog << " instructions without a store, atomic or barrier "
              << "(a spin-wait on another block cannot finish: blocks run one after another; PTXLM_EMU_WATCHDOG sets the limit)";
            return raise(kLaunchTimeout, s.str());
        }
        if (stats && m) w.fly.before(in, *stats, fly_scratch);
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
        case Op::Prefetch: if (m && !prefetch_op(w, in, m)) return false; break;
        case Op::Atom: if (m && !atom_op(w, in, m)) return false; break;
        case Op::Shfl: if (m && !shfl(w, in, m)) return false; break;
        case Op::Vote: if (m && !vote(w, in, m)) return false; break;
        case Op::Elect: if (m && !elect(w, in, m)) return false; break;
        case Op::Mma: if (m && !mma(w, in, m)) return false; break;
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

void Launch::init_block(Block& b, uint32_t bx, uint32_t by, uint32_t bz, bool regs_zeroed) {
    b.cta = {bx, by, bz};
    b.index = uint32_t(bx + uint64_t(by) * cfg.grid.x + uint64_t(bz) * cfg.grid.x * cfg.grid.y);
    b.done = false;
    std::fill(b.shared.begin(), b.shared.end(), uint8_t(0xcd));
    for (auto& bar : b.bars) bar = Barrier{};
    const size_t per_warp = size_t(k.nregs) * 32;
    if (!regs_zeroed) std::fill(b.regfile.begin(), b.regfile.end(), 0);
    if (stats) {
        b.fly_pend.resize(size_t(nwarps) * k.nregs);
        b.fly_depth.resize(size_t(nwarps) * k.nregs);
    }
    for (uint32_t wi = 0; wi < nwarps; ++wi) {
        Warp& w = b.warps[wi];
        WarpInflight fly = std::move(w.fly);   // keeps its vectors' capacity from block to block
        w = Warp{};
        if (stats) {
            w.fly = std::move(fly);
            w.fly.reset(b.fly_pend.data() + size_t(wi) * k.nregs, b.fly_depth.data() + size_t(wi) * k.nregs, k.nregs);
        }
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
        b.regfile.resize(size_t(nwarps) * k.nregs * 32);   // zeroed, as init_block would
        b.shared.resize(shared_bytes);
        b.warps.resize(nwarps);
        init_block(b, uint32_t(i % g.x), uint32_t(i / g.x % g.y), uint32_t(i / (uint64_t(g.x) * g.y)), true);
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

}  // namespace exec

namespace {

using exec::Block;
using exec::Launch;
using exec::kInvalidValue;
using exec::kNotFound;

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
