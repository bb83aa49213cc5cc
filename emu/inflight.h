// Per-warp tracking behind two Stats counters (stats.h): the distinct global
// bytes a warp has in flight when it waits on a load, and the longest chain of
// dependent global loads. Counts of the program's dependency structure, not
// timings: emu has no latency model.
//
// Bytes in flight. A global load (ld.global or a generic ld) is pending from
// its issue until the first later instruction of the warp that reads one of
// its destination registers (a source, the address, or the guard). That
// instruction waits: every load pending at that moment is one batch in flight
// (its distinct 32-byte sectors over all lanes and loads, times 32), and the
// wait completes them all (the model: loads issued together return together;
// a warp that reads four loaded registers one add at a time waits once). A
// software-pipelined loop (load the next row, use the current one) thus waits
// every other iteration with two rows in flight. bar/barrier, membar/fence and
// ret/exit wait on everything pending too. A register overwritten by another
// instruction stops being pending (the load's value is dead); the load itself
// stays pending until a wait completes it. More than
// kMaxPendingLoads pending loads (a long run of loads nobody reads) count as a
// wait on all of them, which bounds the memory this takes.
//
// Dependent chain. Every register has a depth: a global load's destinations
// get 1 + the largest depth among its sources (address, guard); any other
// instruction's destinations the largest depth among its sources; atomics are
// not loads here (their result gets its sources' depth). The chain's length
// is the largest depth a load gave. Per warp, not per lane: a diverged warp's
// lanes share one depth per register.
//
// Prologue. The waits a warp makes before it first reaches a barrier (its
// part of staging a block's input), added to Stats::prologue_waits when it
// gets there.
//
// Only launches that collect stats pay for this: one check of the
// instruction's registers per instruction, a sort only at a wait with more
// than one load pending.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "program.h"
#include "stats.h"

namespace ptxlm::emu {

struct WarpInflight {
    static constexpr size_t kMaxPendingLoads = 256;
    uint32_t* pend = nullptr;    // per register: seq of the pending load that writes it (0: none)
    uint16_t* depth = nullptr;   // per register: dependent-load depth of its value
    uint32_t seq = 0;            // the last issued load's seq (the first is 1)
    uint32_t done = 0;           // loads up to this seq have completed
    uint32_t npending = 0;       // loads pending (issued after `done`)
    uint32_t early_waits = 0;    // waits before the warp's first barrier
    bool barred = false;         // the warp has reached a barrier
    std::vector<uint64_t> sectors;   // their sectors (sorted and distinct per load), concatenated

    // Clears the per-warp state; pend and depth point at nregs entries each.
    void reset(uint32_t* p, uint16_t* d, uint32_t nregs) {
        pend = p;
        depth = d;
        std::fill_n(pend, nregs, 0u);
        std::fill_n(depth, nregs, uint16_t(0));
        seq = done = npending = early_waits = 0;
        barred = false;
        sectors.clear();
    }

    // The warp waits: everything pending is one batch in flight, and completes.
    void wait(Stats& st, std::vector<uint64_t>& scratch) {
        if (!npending) return;
        uint64_t distinct = sectors.size();
        if (npending > 1) {
            scratch.assign(sectors.begin(), sectors.end());
            std::sort(scratch.begin(), scratch.end());
            distinct = uint64_t(std::unique(scratch.begin(), scratch.end()) - scratch.begin());
        }
        const uint64_t bytes = distinct * 32;
        if (!barred) ++early_waits;
        st.inflight_batches++;
        st.inflight_bytes_sum += bytes;
        st.inflight_bytes_max = std::max(st.inflight_bytes_max, bytes);
        sectors.clear();
        npending = 0;
        done = seq;
    }

    // Before the warp executes `in` (with at least one active lane).
    void before(const Inst& in, Stats& st, std::vector<uint64_t>& scratch) {
        if (in.op == Op::Bar || in.op == Op::Exit || (in.op == Op::Nop && in.sem != uint8_t(MemSem::Weak))) {
            wait(st, scratch);
            if (in.op == Op::Bar && !barred) {
                barred = true;
                st.prologue_waits += early_waits;
            }
            return;
        }
        const uint32_t src[13] = {in.a[0], in.a[1], in.a[2], in.a[3], in.a4, in.addr, in.guard,
                                  in.x[0], in.x[1], in.x[2], in.x[3], in.x[4], in.x[5]};
        bool use = false;
        uint16_t dep = 0;
        const bool any = npending != 0;
        for (uint32_t r : src) {
            if (r == kNoReg) continue;
            use |= any && pend[r] > done;
            dep = std::max(dep, depth[r]);
        }
        if (use) wait(st, scratch);
        if (in.op == Op::Ld && (in.space == Space::Global || in.space == Space::Generic)) {
            if (dep < UINT16_MAX) ++dep;
            st.dependent_load_chain_max = std::max<uint64_t>(st.dependent_load_chain_max, dep);
        }
        for (uint32_t r : {in.d[0], in.d[1], in.d[2], in.d[3], in.pd}) {
            if (r == kNoReg) continue;
            depth[r] = dep;
            pend[r] = 0;   // a global load sets it again in issued()
        }
    }

    // A global load `in` was issued and touched the sorted, distinct sectors
    // [s, e) over its active lanes.
    void issued(const Inst& in, const uint64_t* s, const uint64_t* e, Stats& st, std::vector<uint64_t>& scratch) {
        if (npending >= kMaxPendingLoads) wait(st, scratch);
        ++seq;
        ++npending;
        sectors.insert(sectors.end(), s, e);
        for (uint32_t i = 0; i < in.vec && i < 4; ++i)
            if (in.d[i] != kNoReg) pend[in.d[i]] = seq;
    }
};

}  // namespace ptxlm::emu
