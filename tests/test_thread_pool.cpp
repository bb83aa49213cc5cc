// The CPU backend's thread pool (engine/cpu/thread_pool.h): every index of a
// job runs exactly once, on a thread id in [0, size()), and never after
// parallel_for has returned, over many back-to-back jobs of every size,
// grain and thread count, including more threads than this machine has
// cores (workers that wake late, after their job closed, must stay out of
// it). A thread stalled in its first chunk does not hold up the rest of its
// share: the others steal it. Negative control: a job whose function skips
// an index is caught.
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>
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

TEST(ThreadPool, AStalledThreadsShareIsStolen) {
    // The caller (thread 0) stalls in its first chunk until another thread
    // has run an item of the caller's share, or for 2 s; it then checks
    // which happened. Without stealing the share waits for the caller.
    cpu::ThreadPool pool(2);
    constexpr uint64_t n = 64;
    for (int job = 0; job < 20; ++job) {
        std::atomic<bool> first{true}, stolen{false};
        bool waited_out = false;
        pool.parallel_for(n, 1, [&](uint64_t b, uint64_t e, int thread) {
            if (thread != 0) {
                if (b < n / 2) stolen.store(true);
                return;
            }
            if (!first.exchange(false)) return;
            const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(2);
            while (!stolen.load() && std::chrono::steady_clock::now() < until) std::this_thread::yield();
            waited_out = !stolen.load();
            (void)e;
        });
        EXPECT_FALSE(waited_out) << "job " << job << ": thread 0's share was not stolen while it stalled";
    }
}

TEST(ThreadPool, NegativeControlASkippedIndexIsCaught) {
    cpu::ThreadPool pool(3);
    EXPECT_GT(run_jobs(pool, 50, true), 0u);
}

}  // namespace
