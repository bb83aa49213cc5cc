#include "racecheck.h"

#include <algorithm>

namespace ptxlm::emu {

RaceCheck::RaceCheck(uint32_t blocks, uint32_t shared_bytes)
    : blocks_(blocks),
      clock_(blocks, std::vector<uint32_t>(blocks, 0)),
      pending_acq_(blocks, std::vector<uint32_t>(blocks, 0)),
      fence_clock_(blocks, std::vector<uint32_t>(blocks, 0)),
      fenced_(blocks, false),
      shared_words_((shared_bytes + 3) / 4),
      phase_(blocks, 1),
      shared_(blocks),
      req_(blocks, 1),
      passed_at_(blocks, 0) {
    // Epoch 1 is each block's first: a block that knows nothing of another
    // (0) is ordered after none of its writes.
    for (uint32_t b = 0; b < blocks; ++b) clock_[b][b] = 1;
}

bool RaceCheck::is_strong(MemSem sem, MemScope scope) {
    if (sem == MemSem::Volatile) return true;   // relaxed at sys scope
    return sem != MemSem::Weak && (scope == MemScope::Gpu || scope == MemScope::Sys);
}

void RaceCheck::join(std::vector<uint32_t>& into, const std::vector<uint32_t>& from) const {
    for (uint32_t i = 0; i < blocks_; ++i) into[i] = std::max(into[i], from[i]);
}

// An acquire at `word` (now) or a strong read a later acquire fence completes.
void RaceCheck::acquire_from(uint32_t block, uint64_t word, bool now) {
    auto it = sync_.find(word);
    if (it == sync_.end()) return;
    join(now ? clock_[block] : pending_acq_[block], it->second);
    if (now) check_grid_sync(block);
}

// Grid syncs. Sync k needs every block to know, of every other block x, an
// epoch at least req_[x]: for the first, any release (epoch 1); for the next,
// a release x made after it had itself passed sync k (its clock then,
// passed_at_). A block passes when its clock covers req_ of every other
// block; when the last one passes, the sync is complete. Checked for the
// acquiring block only (only acquires can make a block pass).
void RaceCheck::check_grid_sync(uint32_t b) {
    if (blocks_ < 2 || passed_at_[b]) return;
    for (uint32_t x = 0; x < blocks_; ++x)
        if (x != b && clock_[b][x] < req_[x]) return;
    passed_at_[b] = clock_[b][b];
    if (++passed_ < blocks_) return;
    ++grid_syncs_;
    req_ = passed_at_;
    std::fill(passed_at_.begin(), passed_at_.end(), 0u);
    passed_ = 0;
    // A block may already know enough for the next one (it acquired fast
    // blocks' later releases while a slow one caught up).
    for (uint32_t c = 0; c < blocks_; ++c) check_grid_sync(c);
}

// A release at `word`, or a strong write after a release fence (fenced_only).
void RaceCheck::release_to(uint32_t block, uint64_t word, bool fenced_only) {
    if (fenced_only) {
        if (!fenced_[block]) return;
        auto [it, fresh] = sync_.try_emplace(word, std::vector<uint32_t>(blocks_, 0));
        join(it->second, fence_clock_[block]);
        return;
    }
    auto [it, fresh] = sync_.try_emplace(word, std::vector<uint32_t>(blocks_, 0));
    join(it->second, clock_[block]);
    clock_[block][block]++;
}

std::optional<RaceCheck::Race> RaceCheck::check(const Who& w, uint64_t word, bool strong, bool write) {
    auto it = writes_.find(word);
    if (it == writes_.end()) return std::nullopt;
    const Write& prev = it->second;
    if (prev.who.block == w.block) return std::nullopt;
    if (clock_[w.block][prev.who.block] >= prev.epoch) return std::nullopt;   // ordered
    if (strong && prev.strong) return std::nullopt;                           // both morally strong
    Race r{write ? Race::WriteAfterWrite : Race::ReadAfterWrite, w, prev.who, word * 4, write, true};
    return r;
}

std::optional<RaceCheck::Race> RaceCheck::load(const Who& w, uint64_t addr, uint32_t n, MemSem sem, MemScope scope,
                                               bool nc) {
    const bool strong = is_strong(sem, scope);
    std::optional<Race> race;
    for (uint64_t word = addr / 4; word * 4 < addr + n; ++word) {
        if (nc) {
            auto it = writes_.find(word);
            if (it != writes_.end() && !race)
                race = Race{Race::NcAfterWrite, w, it->second.who, word * 4, false, true};
        }
        if (!race) race = check(w, word, strong, false);
        if (strong) acquire_from(w.block, word, sem == MemSem::Acquire && gpu_wide(scope));
    }
    return race;
}

std::optional<RaceCheck::Race> RaceCheck::store(const Who& w, uint64_t addr, uint32_t n, MemSem sem, MemScope scope) {
    const bool strong = is_strong(sem, scope);
    std::optional<Race> race;
    const bool release = sem == MemSem::Release && gpu_wide(scope);
    for (uint64_t word = addr / 4; word * 4 < addr + n; ++word) {
        if (!race) race = check(w, word, strong, true);
        writes_[word] = Write{w, clock_[w.block][w.block], strong};
        if (strong && !release) release_to(w.block, word, true);
    }
    if (release)   // one release for the whole access: the clock moves on once
        for (uint64_t word = addr / 4; word * 4 < addr + n; ++word) {
            auto [it, fresh] = sync_.try_emplace(word, std::vector<uint32_t>(blocks_, 0));
            join(it->second, clock_[w.block]);
        }
    if (release) clock_[w.block][w.block]++;
    return race;
}

void RaceCheck::atomic(const Who& w, uint64_t addr, uint32_t n, MemSem sem, MemScope scope) {
    const bool wide = gpu_wide(scope);
    const bool acq = wide && (sem == MemSem::Acquire || sem == MemSem::AcqRel);
    const bool rel = wide && (sem == MemSem::Release || sem == MemSem::AcqRel);
    for (uint64_t word = addr / 4; word * 4 < addr + n; ++word) {
        acquire_from(w.block, word, acq);
        writes_[word] = Write{w, clock_[w.block][w.block], scope != MemScope::Cta};
        if (rel) {
            auto [it, fresh] = sync_.try_emplace(word, std::vector<uint32_t>(blocks_, 0));
            join(it->second, clock_[w.block]);
        } else {
            release_to(w.block, word, true);
        }
    }
    if (rel) clock_[w.block][w.block]++;
}

void RaceCheck::fence(uint32_t block, MemSem sem, MemScope scope) {
    if (!gpu_wide(scope)) return;   // a cta fence orders nothing between blocks
    if (sem == MemSem::Acquire || sem == MemSem::AcqRel || sem == MemSem::Sc) {
        join(clock_[block], pending_acq_[block]);
        check_grid_sync(block);
    }
    if (sem == MemSem::Release || sem == MemSem::AcqRel || sem == MemSem::Sc) {
        fence_clock_[block] = clock_[block];
        fenced_[block] = true;
        clock_[block][block]++;
    }
}

std::optional<RaceCheck::Race> RaceCheck::shared(const Who& w, uint32_t offset, uint32_t n, bool write) {
    std::vector<SharedWord>& sh = shared_[w.block];
    if (sh.empty()) sh.resize(shared_words_);
    const uint32_t phase = phase_[w.block], me = w.warp + 1;
    std::optional<Race> race;
    for (uint32_t word = offset / 4; word * 4 < offset + n && word < shared_words_; ++word) {
        SharedWord& s = sh[word];
        if (s.phase != phase) s = SharedWord{phase, 0, 0, {}, {}};
        if (!race && s.writer && s.writer != me)
            race = Race{Race::SharedConflict, w, s.write_who, uint64_t(word) * 4, write, true};
        if (!race && write && s.reader && s.reader != me)   // kMany: some other warp read it
            race = Race{Race::SharedConflict, w, s.read_who, uint64_t(word) * 4, true, false};
        if (write) {
            s.writer = me;
            s.write_who = w;
        } else if (s.reader != me) {
            s.reader = s.reader ? kMany : me;
            s.read_who = w;
        }
    }
    return race;
}

void RaceCheck::barrier(uint32_t block) { phase_[block]++; }

}  // namespace ptxlm::emu
