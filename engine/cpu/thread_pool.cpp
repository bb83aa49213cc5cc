#include "engine/cpu/thread_pool.h"

#include <sched.h>

#include <algorithm>

namespace ptxlm::cpu {

ThreadPool::ThreadPool(int n_threads) : n_threads_(std::max(1, n_threads)) {
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
    // Guided: each take is a share of what is left (half of it over the
    // threads, at least chunk_), so the first takes are large and the last
    // small: the threads finish within a small take of each other.
    const uint64_t parts = 2 * uint64_t(n_threads_);
    uint64_t begin = next_.load(std::memory_order_relaxed);
    for (;;) {
        if (begin >= n_) break;
        const uint64_t take = std::min(n_ - begin, std::max(chunk_, (n_ - begin) / parts));
        if (!next_.compare_exchange_weak(begin, begin + take, std::memory_order_relaxed)) continue;
        (*fn_)(begin, begin + take, thread);
        begin = next_.load(std::memory_order_relaxed);
    }
}

void ThreadPool::worker(int index) {
    uint64_t seen = 0;
    for (;;) {
        // Spin a little (the next job usually follows within microseconds), then sleep.
        uint64_t g = generation_.load(std::memory_order_acquire);
        for (int spin = 0; g == seen && spin < 20000; ++spin) {
#if defined(__x86_64__)
            __builtin_ia32_pause();
#endif
            g = generation_.load(std::memory_order_acquire);
        }
        while (g == seen) {
            generation_.wait(seen, std::memory_order_acquire);
            g = generation_.load(std::memory_order_acquire);
        }
        seen = g;
        if (stop_.load()) return;
        // Join job g unless its caller has closed it: either the caller's
        // check of active_ sees this increment (and waits for it), or this
        // load sees the job closed (and the worker stays out of it).
        active_.fetch_add(1, std::memory_order_seq_cst);
        if (open_.load(std::memory_order_seq_cst) == g) work(index);
        active_.fetch_sub(1, std::memory_order_release);
    }
}

void ThreadPool::parallel_for(uint64_t n, uint64_t grain, const RangeFn& fn) {
    if (n == 0) return;
    grain = std::max<uint64_t>(1, grain);
    if (n_threads_ == 1 || n <= grain) {
        fn(0, n, 0);
        return;
    }
    fn_ = &fn;
    n_ = n;
    chunk_ = grain;
    next_.store(0, std::memory_order_relaxed);
    const uint64_t g = generation_.load(std::memory_order_relaxed) + 1;
    open_.store(g, std::memory_order_relaxed);
    generation_.store(g, std::memory_order_release);
    generation_.notify_all();
    work(0);
    // Every chunk is taken. Close the job, then wait only for the workers
    // inside it: one that has not woken yet (descheduled on a loaded
    // machine) is not waited for, and finds the job closed when it runs.
    open_.store(0, std::memory_order_seq_cst);
    while (active_.load(std::memory_order_seq_cst) != 0) {
#if defined(__x86_64__)
        __builtin_ia32_pause();
#endif
    }
    fn_ = nullptr;
}

}  // namespace ptxlm::cpu
