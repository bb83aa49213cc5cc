// Anonymous memory mapped lazily (a page is committed when touched): the KV
// cache on 4 KiB pages (resident only as far as a context is used), and
// data streamed from DRAM (the packed and copied weights, the read stream)
// with Pages::Huge: from 2 MiB up, aligned to 2 MiB and marked
// MADV_HUGEPAGE, so that
// where transparent huge pages are enabled (`always` or `madvise` in
// /sys/kernel/mm/transparent_hugepage/enabled) a stream takes one TLB entry
// per 2 MiB instead of per 4 KiB. On a 2-core Xeon (docs/benchmarks.md,
// 2026-11-28) a 2-thread read stream ran ~4% faster on huge pages and
// SmolLM2's tg64 ~5%. Where huge pages are off the advice is ignored and
// the buffer is plain 4 KiB pages: nothing else changes.
#pragma once

#include <sys/mman.h>

#include <cstddef>
#include <cstdint>
#include <new>
#include <utility>

namespace ptxlm::cpu {

class LazyBuffer {
public:
    enum class Pages { Small, Huge };
    static constexpr size_t kHugePage = size_t(2) << 20;

    LazyBuffer() = default;
    // Throws std::bad_alloc when the mapping fails.
    LazyBuffer(size_t bytes, Pages pages) : n_(bytes) {
        if (!bytes) return;
        const bool huge = pages == Pages::Huge && bytes >= kHugePage;
        map_ = bytes + (huge ? kHugePage : 0);   // room to align the start
        void* m = mmap(nullptr, map_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        if (m == MAP_FAILED) throw std::bad_alloc();
        base_ = static_cast<uint8_t*>(m);
        const uintptr_t a = reinterpret_cast<uintptr_t>(base_);
        p_ = huge ? reinterpret_cast<uint8_t*>((a + kHugePage - 1) & ~uintptr_t(kHugePage - 1)) : base_;
        if (huge) madvise(p_, bytes, MADV_HUGEPAGE);   // advice only: its failure leaves 4 KiB pages
    }
    LazyBuffer(LazyBuffer&& o) noexcept { swap(o); }
    LazyBuffer& operator=(LazyBuffer&& o) noexcept {
        swap(o);
        return *this;
    }
    LazyBuffer(const LazyBuffer&) = delete;
    LazyBuffer& operator=(const LazyBuffer&) = delete;
    ~LazyBuffer() {
        if (base_) munmap(base_, map_);
    }

    uint8_t* data() const { return p_; }
    size_t size() const { return n_; }

private:
    void swap(LazyBuffer& o) noexcept {
        std::swap(base_, o.base_);
        std::swap(p_, o.p_);
        std::swap(n_, o.n_);
        std::swap(map_, o.map_);
    }
    uint8_t* base_ = nullptr;   // the mapping
    uint8_t* p_ = nullptr;      // its aligned start
    size_t n_ = 0, map_ = 0;
};

}  // namespace ptxlm::cpu
