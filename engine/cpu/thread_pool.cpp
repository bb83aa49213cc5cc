#include "engine/cpu/thread_pool.h"

#include <sched.h>

#include <algorithm>

namespace ptxlm::cpu {

namespace {

constexpr uint64_t pack(uint64_t begin, uint64_t end) { return begin | end << 32; }
constexpr uint64_t first(uint64_t range) { return range & 0xffffffffu; }
constexpr uint64_t last(uint64_t range) { return range >> 32; }

void relax() {
#if defined(__x86_64__)
    __builtin_ia32_pause();
#endif
}

// Sets a worker's claim word for job g to `to` (2g: claimed, 2g + 1: closed)
// unless the other side got there first; true if this call set it.
bool settle_claim(std::atomic<uint64_t>& claim, uint64_t g, uint64_t to) {
    uint64_t c = claim.load(std::memory_order_relaxed);
    while (c < 2 * g && !claim.compare_exchange_weak(c, to, std::memory_order_relaxed)) {}
    return c < 2 * g;
}

}  // namespace

ThreadPool::ThreadPool(int n_threads)
    : n_threads_(std::max(1, n_threads)),
      shares_(new Share[size_t(n_threads_)]),
      claims_(new Claim[size_t(n_threads_)]),
      done_(new Done[size_t(n_threads_)]) {
    for (int i = 1; i < n_threads_; ++i) workers_.emplace_back([this, i] { worker(i); });
}

ThreadPool::~ThreadPool() {
    stop_.store(true);
    generation_.fetch_add(1, std::memory_order_release);
    generation_.notify_all();
    for (auto& t : workers_) t.join();
}

int ThreadPool::default_threads() {
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0) return std::max(1, CPU_COUNT(&set));
    return std::max(1u, std::thread::hardware_concurrency());
}

void ThreadPool::work(int thread) {
    Share& own = shares_[size_t(thread)];
    for (;;) {
        // From the front of this thread's share: a quarter of what is left,
        // at least the grain.
        uint64_t r = own.range.load(std::memory_order_relaxed);
        while (first(r) < last(r)) {
            const uint64_t b = first(r), left = last(r) - b;
            const uint64_t take = std::min(left, std::max(grain_, left / 4));
            if (!own.range.compare_exchange_weak(r, pack(b + take, last(r)), std::memory_order_relaxed)) continue;
            (*fn_)(b, b + take, thread);
            r = own.range.load(std::memory_order_relaxed);
        }
        // Then the back half of another share (all of it when no more than
        // the grain is left), made this thread's own so that it can be stolen
        // in turn.
        bool stole = false;
        for (int k = 1; k < n_threads_ && !stole; ++k) {
            Share& victim = shares_[size_t((thread + k) % n_threads_)];
            uint64_t v = victim.range.load(std::memory_order_relaxed);
            while (first(v) < last(v)) {
                const uint64_t left = last(v) - first(v);
                const uint64_t steal = left <= grain_ ? left : std::max(grain_, left / 2);
                if (!victim.range.compare_exchange_weak(v, pack(first(v), last(v) - steal), std::memory_order_relaxed))
                    continue;
                own.range.store(pack(last(v) - steal, last(v)), std::memory_order_relaxed);
                stole = true;
                break;
            }
        }
        if (!stole) return;
    }
}

void ThreadPool::worker(int index) {
    std::atomic<uint64_t>& claim = claims_[size_t(index)].word;
    uint64_t seen = 0;
    for (;;) {
        // Spin a little (the next job usually follows within microseconds), then sleep.
        uint64_t g = generation_.load(std::memory_order_acquire);
        for (int spin = 0; g == seen && spin < 20000; ++spin) {
            relax();
            g = generation_.load(std::memory_order_acquire);
        }
        while (g == seen) {
            generation_.wait(seen, std::memory_order_acquire);
            g = generation_.load(std::memory_order_acquire);
        }
        seen = g;
        if (stop_.load()) return;
        // Claim job g unless its caller has closed it to this worker (it has
        // then run this worker's share itself).
        if (!settle_claim(claim, g, 2 * g)) continue;
        shares_[size_t(index)].range.store(pack(share_begin(index), share_begin(index + 1)), std::memory_order_relaxed);
        work(index);
        done_[size_t(index)].generation.store(g, std::memory_order_release);
    }
}

void ThreadPool::run_job(uint64_t n, uint64_t grain, const RangeFn& fn) {
    fn_ = &fn;
    n_ = n;
    grain_ = grain;
    shares_[0].range.store(pack(0, share_begin(1)), std::memory_order_relaxed);
    const uint64_t g = generation_.load(std::memory_order_relaxed) + 1;
    generation_.store(g, std::memory_order_release);
    generation_.notify_all();
    work(0);
    // Every item of the shares set up is taken. To a worker that has not
    // claimed the job (descheduled on a loaded machine) the job is closed
    // and its share run here, before any wait: it finds the job closed when
    // it runs. Then the workers that claimed it are waited for (one that
    // has finished costs a single read).
    for (int t = 1; t < n_threads_; ++t) {
        if (done_[size_t(t)].generation.load(std::memory_order_acquire) == g) continue;
        const uint64_t b = share_begin(t), e = share_begin(t + 1);
        if (settle_claim(claims_[size_t(t)].word, g, 2 * g + 1) && b < e) fn(b, e, 0);
    }
    for (int t = 1; t < n_threads_; ++t)
        while (done_[size_t(t)].generation.load(std::memory_order_acquire) != g &&
               claims_[size_t(t)].word.load(std::memory_order_relaxed) == 2 * g)
            relax();
    fn_ = nullptr;
}

void ThreadPool::parallel_for(uint64_t n, uint64_t grain, const RangeFn& fn) {
    if (n == 0) return;
    grain = std::max<uint64_t>(1, grain);
    if (n_threads_ == 1 || n <= grain) {
        fn(0, n, 0);
        return;
    }
    // A share's bounds are 32 bits: a larger job runs as several.
    constexpr uint64_t kMaxJob = uint64_t(1) << 31;
    for (uint64_t at = 0; at < n; at += kMaxJob) {
        const uint64_t m = std::min(kMaxJob, n - at);
        if (at == 0 && m == n) run_job(n, grain, fn);
        else {
            const RangeFn shifted = [&](uint64_t b, uint64_t e, int t) { fn(at + b, at + e, t); };
            run_job(m, grain, shifted);
        }
    }
}

}  // namespace ptxlm::cpu
