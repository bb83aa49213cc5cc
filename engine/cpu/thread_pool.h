// A persistent pool of worker threads for the CPU backend. The calling thread
// takes part in every job, so a pool of N threads starts N - 1 workers. Jobs
// are split into chunks taken from a shared counter, each a share of what is
// left (guided scheduling: large first, small last, at least the grain);
// parallel_for returns once every chunk is done; it waits for the workers
// that joined the job, never for one that has not woken yet (on a loaded
// machine a worker may sit descheduled for a whole time slice: its share is
// taken by whoever runs). Workers spin briefly before sleeping, since decode
// posts hundreds of short jobs per token.
#pragma once

#include <atomic>
#include <cstdint>
#include <functional>
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
    // items; `thread` is in [0, size()) and unique among concurrent calls.
    using RangeFn = std::function<void(uint64_t begin, uint64_t end, int thread)>;
    void parallel_for(uint64_t n, uint64_t grain, const RangeFn& fn);

    // Threads to use when the machine's count is not given: the cores this
    // process may run on.
    static int default_threads();

private:
    void worker(int index);
    void work(int thread);

    int n_threads_;
    std::vector<std::thread> workers_;
    // Current job.
    const RangeFn* fn_ = nullptr;
    uint64_t n_ = 0, chunk_ = 1;   // chunk_: the smallest take (the grain)
    std::atomic<uint64_t> next_{0};
    std::atomic<int> active_{0};          // workers inside (or entering) the current job
    std::atomic<uint64_t> open_{0};       // the generation of the job workers may join; 0: none
    std::atomic<uint64_t> generation_{0}; // bumped to start a job
    std::atomic<bool> stop_{false};
};

}  // namespace ptxlm::cpu
