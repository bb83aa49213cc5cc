// A persistent pool of worker threads for the CPU backend. The calling thread
// takes part in every job, so a pool of N threads starts N - 1 workers.
//
// A job's items are split into one contiguous share per thread, each in its
// own cache line: a thread takes chunks from the front of its share (a
// quarter of what is left, at least the grain) with no other thread touching
// that line, and once its share is empty steals the back half of another's.
// Decode posts ~150 short jobs a token, so a job costs what its cache-line
// transfers between cores cost: a worker sets up its own share, claims the
// job on a line only it writes, and reports on another that only the caller
// reads; the generation workers spin on has a line of its own. A shared
// counter cost every take a transfer (SmolLM2 on 2 threads: 1.1-1.3 us a
// job against 0.6 for the hand-off alone); docs/benchmarks.md has the
// figures of each step.
//
// parallel_for returns once every item is done. It waits for the workers
// that claimed the job, never for one that has not woken yet (on a loaded
// machine a worker may sit descheduled for a whole time slice): the caller
// closes such a worker's claim and runs its share itself. Workers spin
// briefly before sleeping.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <thread>
#include <vector>

namespace ptxlm::cpu {

class ThreadPool {
public:
    explicit ThreadPool(int n_threads);
    ~ThreadPool();
    ThreadPool(const ThreadPool&) = delete;
    ThreadPool& operator=(const ThreadPool&) = delete;

    int size() const { return n_threads_; }

    // fn(begin, end, thread) over [0, n) in chunks of at least `grain`
    // items (a share's last chunk may be smaller); `thread` is in
    // [0, size()) and unique among concurrent calls.
    using RangeFn = std::function<void(uint64_t begin, uint64_t end, int thread)>;
    void parallel_for(uint64_t n, uint64_t grain, const RangeFn& fn);

    // Threads to use when the machine's count is not given: the cores this
    // process may run on.
    static int default_threads();

private:
    // One thread's share of the current job, the items left: begin | end << 32.
    struct alignas(64) Share {
        std::atomic<uint64_t> range{0};
    };
    // A worker's word in the hand-shake: 2g once it has claimed job g, 2g + 1
    // once the caller has closed job g to it; its line written by the caller
    // only in that second case.
    struct alignas(64) Claim {
        std::atomic<uint64_t> word{0};
    };
    // The last job a worker finished, read by the caller.
    struct alignas(64) Done {
        std::atomic<uint64_t> generation{0};
    };

    void worker(int index);
    void work(int thread);
    void run_job(uint64_t n, uint64_t grain, const RangeFn& fn);
    uint64_t share_begin(int thread) const { return n_ * uint64_t(thread) / uint64_t(n_threads_); }

    int n_threads_;
    std::unique_ptr<Share[]> shares_;
    std::unique_ptr<Claim[]> claims_;
    std::unique_ptr<Done[]> done_;
    std::vector<std::thread> workers_;
    // The current job, written by the caller before generation_ moves on.
    alignas(64) const RangeFn* fn_ = nullptr;
    uint64_t n_ = 0, grain_ = 1;
    alignas(64) std::atomic<uint64_t> generation_{0}; // bumped to start a job, on a line of its own: workers spin on it
    std::atomic<bool> stop_{false};
};

}  // namespace ptxlm::cpu
