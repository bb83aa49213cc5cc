#include "emu/driver_queue.h"

#include <cstdlib>
#include <cstring>


namespace ptxlm::emu::driver {

namespace {

bool env_on(const char* name) {
    const char* v = std::getenv(name);
    return v && std::strcmp(v, "1") == 0;
}

}  // namespace

WorkQueue::WorkQueue()
    : mode_(env_on("PTXLM_EMU_DEFERRED") ? ExecMode::Deferred
            : env_on("PTXLM_EMU_EAGER")  ? ExecMode::Eager
                                         : ExecMode::Async) {}

WorkQueue::~WorkQueue() {
    {
        std::lock_guard<std::mutex> g(mu_);
        stop_ = true;
    }
    cv_.notify_all();
    if (thread_.joinable()) thread_.join();
}

WorkQueue& queue() {
    static WorkQueue q;
    return q;
}

void WorkQueue::run_one(Item& it) { it.fn(); }

void WorkQueue::submit(const void* stream, std::function<void()> fn) {
    if (mode_ == ExecMode::Eager) {
        Item it{stream, std::move(fn)};
        run_one(it);
        return;
    }
    {
        std::lock_guard<std::mutex> g(mu_);
        q_.push_back(Item{stream, std::move(fn)});
        ++submitted_;
        if (mode_ == ExecMode::Async && !thread_.joinable()) thread_ = std::thread([this] { worker(); });
    }
    cv_.notify_all();
}

void WorkQueue::worker() {
    std::unique_lock<std::mutex> l(mu_);
    for (;;) {
        cv_.wait(l, [&] { return stop_ || !q_.empty(); });
        if (q_.empty()) return;   // stopping, and nothing left to run
        Item it = std::move(q_.front());
        q_.pop_front();
        running_ = it.stream;
        is_running_ = true;
        l.unlock();
        run_one(it);
        l.lock();
        is_running_ = false;
        ++done_;
        cv_.notify_all();
    }
}

void WorkQueue::drain() {
    if (mode_ == ExecMode::Eager) return;
    if (mode_ == ExecMode::Deferred) {
        // Runs on the caller's thread; items may be queued while it runs
        // (none are today: items do not submit), so take them one by one.
        for (;;) {
            Item it;
            {
                std::lock_guard<std::mutex> g(mu_);
                if (q_.empty()) return;
                it = std::move(q_.front());
                q_.pop_front();
            }
            run_one(it);
            std::lock_guard<std::mutex> g(mu_);
            ++done_;
        }
    }
    std::unique_lock<std::mutex> l(mu_);
    const uint64_t target = submitted_;
    cv_.wait(l, [&] { return done_ >= target; });
}

bool WorkQueue::busy(const void* stream) {
    bool b = false;
    {
        std::lock_guard<std::mutex> g(mu_);
        if (is_running_ && (!stream || running_ == stream)) b = true;
        for (const Item& it : q_) b |= !stream || it.stream == stream;
    }
    if (b && mode_ == ExecMode::Deferred) drain();
    return b;
}

}  // namespace ptxlm::emu::driver
