// The CPU backend's thread pool (engine/cpu/thread_pool.h): every index of a
// job runs exactly once, on a thread id in [0, size()), and never after
// parallel_for has returned, over many back-to-back jobs of every size,
// grain and thread count, including more threads than this machine has
// cores (workers that wake late, after their job closed, must stay out of
// it). Negative control: a job whose function skips an index is caught.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdint>
#include <vector>

#include "engine/cpu/thread_pool.h"

using namespace ptxlm;

namespace {

// Runs `jobs` jobs of varying size on `pool`; returns the number of
// violations seen (an index run twice or never, a bad thread id, a
// function running after its job returned). skip drops one index of each
// job of at least 2 items (the negative control).
uint64_t run_jobs(cpu::ThreadPool& pool, int jobs, bool skip) {
    std::atomic<uint64_t> bad{0};
    std::atomic<int> current{-1};   // the job whose parallel_for is running
    std::vector<std::atomic<uint32_t>> hits(4096);
    for (int j = 0; j < jobs; ++j) {
        const uint64_t n = (uint64_t(j) * 2654435761u) % 1500;
        const uint64_t grain = 1 + j % 7;
        for (uint64_t i = 0; i < n; ++i) hits[i].store(0, std::memory_order_relaxed);
        current.store(j);
        pool.parallel_for(n, grain, [&, j](uint64_t b, uint64_t e, int thread) {
            if (current.load() != j || thread < 0 || thread >= pool.size()) bad.fetch_add(1);
            for (uint64_t i = b; i < e; ++i)
                if (!(skip && i == 1)) hits[i].fetch_add(1, std::memory_order_relaxed);
        });
        current.store(-1);
        for (uint64_t i = 0; i < n; ++i)
            if (hits[i].load(std::memory_order_relaxed) != 1) bad.fetch_add(1);
    }
    return bad.load();
}

TEST(ThreadPool, EveryIndexRunsOnceAndNothingRunsLate) {
    for (int threads : {1, 2, 3, 8}) {
        cpu::ThreadPool pool(threads);
        EXPECT_EQ(pool.size(), threads);
        EXPECT_EQ(run_jobs(pool, 3000, false), 0u) << threads << " threads";
    }
}

TEST(ThreadPool, NegativeControlASkippedIndexIsCaught) {
    cpu::ThreadPool pool(3);
    EXPECT_GT(run_jobs(pool, 50, true), 0u);
}

}  // namespace
