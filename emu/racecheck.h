// emu's memory-model checker for one launch.
//
// Global memory at gpu scope, between blocks, by vector clocks (one clock
// per block, FastTrack-style write epochs): every global write records which
// block wrote it and at which of that block's epochs. A block's clock moves
// on at each release. A release (st.release, atom.release / .acq_rel, or a
// strong store or atomic after fence.release / .acq_rel / .sc / membar) at
// gpu or sys scope publishes the block's clock at that address; an acquire
// (ld.acquire, atom.acquire / .acq_rel, or a strong load or atomic followed
// by fence.acquire / .acq_rel / .sc) joins what was published there into
// the reader's clock. A read (or write) of a location another block wrote is
// a race unless the reader's clock covers the write's epoch, or both
// accesses are strong (relaxed, acquire, release, volatile or atomic, at a
// scope that includes both blocks: gpu or sys). `ld.global.nc` of a location
// written earlier in the same launch (by any thread) is reported too: the
// non-coherent path may return stale data.
//
// Shared memory, per block: between two completions of a block barrier,
// accesses to the same 4-byte word by different warps, at least one a write,
// are a race.
//
// What it cannot see (by construction): clocks are per block, so an acquire
// by one thread counts for its whole block as if a bar.sync followed, and a
// release covers every earlier write of the block as if a bar.sync preceded
// it (a missing bar.sync around an acquire or release is not detected);
// write-after-read races (reads leave no record); races within one warp;
// release sequences are joined, never cut (an intervening plain store does
// not end one).
#pragma once

#include <cstdint>
#include <optional>
#include <unordered_map>
#include <vector>

#include "program.h"

namespace ptxlm::emu {

class RaceCheck {
public:
    struct Who {
        uint32_t block = 0, warp = 0, lane = 0, pc = 0;
    };
    struct Race {
        enum Kind { ReadAfterWrite, WriteAfterWrite, NcAfterWrite, SharedConflict } kind;
        Who now, before;      // the access found racing, and the earlier one
        uint64_t addr = 0;    // global address, or shared offset
        bool now_writes = false, before_writes = true;
    };

    RaceCheck(uint32_t blocks, uint32_t shared_bytes);

    // Global accesses of `n` bytes by one lane; `strong` per the rule above.
    std::optional<Race> load(const Who& w, uint64_t addr, uint32_t n, MemSem sem, MemScope scope, bool nc);
    std::optional<Race> store(const Who& w, uint64_t addr, uint32_t n, MemSem sem, MemScope scope);
    // An atomic read-modify-write (never itself a race: atomics are strong).
    void atomic(const Who& w, uint64_t addr, uint32_t n, MemSem sem, MemScope scope);
    void fence(uint32_t block, MemSem sem, MemScope scope);

    // Shared memory of block `w.block`; `barrier` when one of its barriers completes.
    std::optional<Race> shared(const Who& w, uint32_t offset, uint32_t n, bool write);
    void barrier(uint32_t block);

    // Grid-wide synchronisations so far: points by which every block's clock
    // covers a release of every other block made after that block passed
    // the previous such point (an all-to-all happens-before; a grid barrier
    // built from counters is one).
    uint64_t grid_syncs() const { return grid_syncs_; }

private:
    struct Write {
        Who who;
        uint32_t epoch = 0;
        bool strong = false;
    };
    struct SharedWord {
        uint32_t phase = 0;
        uint32_t writer = 0;   // warp + 1, 0 none
        uint32_t reader = 0;   // warp + 1, 0 none, kMany several
        Who write_who, read_who;
    };
    static constexpr uint32_t kMany = 0xffffffffu;

    static bool is_strong(MemSem sem, MemScope scope);
    static bool gpu_wide(MemScope scope) { return scope == MemScope::Gpu || scope == MemScope::Sys; }
    void join(std::vector<uint32_t>& into, const std::vector<uint32_t>& from) const;
    void acquire_from(uint32_t block, uint64_t word, bool now);
    void release_to(uint32_t block, uint64_t word, bool fenced_only);
    void check_grid_sync(uint32_t block);
    std::optional<Race> check(const Who& w, uint64_t word, bool strong, bool write);

    uint32_t blocks_;
    std::vector<std::vector<uint32_t>> clock_;          // clock_[b][c]: what block b knows of block c
    std::vector<std::vector<uint32_t>> pending_acq_;    // strong reads since b's last acquire fence
    std::vector<std::vector<uint32_t>> fence_clock_;    // b's clock at its last release fence
    std::vector<bool> fenced_;                          // a release fence precedes b's next strong write
    std::unordered_map<uint64_t, std::vector<uint32_t>> sync_;   // word -> clocks released there
    std::unordered_map<uint64_t, Write> writes_;                 // word -> last write
    uint32_t shared_words_;
    std::vector<uint32_t> phase_;                       // per block
    std::vector<std::vector<SharedWord>> shared_;       // per block, lazily sized
    std::vector<uint32_t> req_;         // per block x: the epoch of x the next grid sync needs every block to know
    std::vector<uint32_t> passed_at_;   // per block: its own clock when it came to know every req_ (0: not yet)
    uint32_t passed_ = 0;               // blocks that passed the next grid sync
    uint64_t grid_syncs_ = 0;
};

}  // namespace ptxlm::emu
