// emu's device work queue: when the work a stream-ordered call submits
// (kernel launches, graph launches, async copies and memsets) actually runs.
//
// The device is one FIFO: work from every stream runs in submission order,
// one item at a time (a legal schedule of CUDA's stream semantics: streams
// may overlap, they need not). Items take the API lock only for their
// bookkeeping: a kernel runs without it, so the host may call the API (a
// stream query) while it runs. Three modes, chosen
// once per process:
// - async (default): a device thread runs the queue while the host goes on,
//   as on hardware. A launch returns before its kernel has run; a host
//   polling mapped pinned memory sees a running kernel's stores.
// - deferred (PTXLM_EMU_DEFERRED=1): nothing runs until the host reaches a
//   synchronisation point (stream or context sync, a synchronous copy or
//   memset, cuMemFree, cuModuleUnload, a stream query); then everything
//   queued runs on the calling thread. A result read without a sync is
//   always stale, so a missing sync shows as wrong data every time.
// - eager (PTXLM_EMU_EAGER=1): work runs inside the submitting call (one
//   thread: easiest under a debugger).
//
// Synchronisation points wait for everything queued before them, on every
// stream (over-synchronising is a legal schedule too). They must be called
// without the API lock held: the device thread takes it in each item.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

namespace ptxlm::emu::driver {

enum class ExecMode { Async, Deferred, Eager };

class WorkQueue {
public:
    WorkQueue();
    ~WorkQueue();   // runs what is queued (deferred: nothing more runs), stops the device thread

    ExecMode mode() const { return mode_; }
    // Queues `fn` for `stream` (compared, never dereferenced). Eager mode
    // runs it now, on the caller's thread.
    void submit(const void* stream, std::function<void()> fn);
    // Returns once everything submitted before the call has run.
    void drain();
    // Whether work of `stream` (nullptr: any) is queued or running. In
    // deferred mode a query is a synchronisation point: it runs the queue
    // after answering, so a polling host makes progress.
    bool busy(const void* stream);

private:
    struct Item {
        const void* stream;
        std::function<void()> fn;
    };
    void worker();
    void run_one(Item& it);

    ExecMode mode_;
    std::mutex mu_;
    std::condition_variable cv_;
    std::deque<Item> q_;
    const void* running_ = nullptr;   // the stream of the item being run
    bool is_running_ = false;
    bool stop_ = false;
    uint64_t submitted_ = 0, done_ = 0;
    std::thread thread_;   // async mode, started at the first submission
};

WorkQueue& queue();

}  // namespace ptxlm::emu::driver
