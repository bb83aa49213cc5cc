// A persistent pool of worker threads for the CPU backend. The calling thread
// takes part in every job, so a pool of N threads starts N - 1 workers.
//
// A job's items are split into one contiguous share per thread, each in its
// own cache line: a thread takes chunks from the front of its share (a
// quarter of what is left, at least the grain) with no other thread touching
// that line, and once its share is empty steals the back half of another's.
// Decode posts ~150 short jobs a token; a shared counter cost every take a
// cache-line transfer between the cores (SmolLM2 on 2 threads: 1.1-1.3 us a
// job against 0.6 for the hand-off alone). parallel_for returns once every
// item is done; it waits for the workers that joined the job, never for one
// that has not woken yet (on a loaded machine a worker may sit descheduled
// for a whole time slice: its share is stolen by whoever runs). Workers spin
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
    // One thread's share of the current job and, for a worker, its part in
    // the job's hand-shake. range: the items left, begin | end << 32.
    struct alignas(64) Slot {
        std::atomic<uint64_t> range{0};
        std::atomic<uint64_t> joined{0};   // the generation this worker last joined
        std::atomic<uint64_t> done{0};     // the generation it last left
    };

    void worker(int index);
    void work(int thread);
    void run_job(uint64_t n, uint64_t grain, const RangeFn& fn);

    int n_threads_;
    std::unique_ptr<Slot[]> slots_;
    std::vector<std::thread> workers_;
    // The current job, written by the caller before generation_ moves on.
    alignas(64) const RangeFn* fn_ = nullptr;
    uint64_t grain_ = 1;
    std::atomic<uint64_t> open_{0};       // the generation of the job workers may join; 0: none
    std::atomic<uint64_t> generation_{0}; // bumped to start a job
    std::atomic<bool> stop_{false};
};

}  // namespace ptxlm::cpu
