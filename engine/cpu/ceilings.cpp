#include "engine/cpu/ceilings.h"

#include "engine/cpu/lazy_buffer.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

namespace ptxlm::cpu {

namespace {

using Clock = std::chrono::steady_clock;

// Runs fn(t) on threads 0..n-1 (0 on the caller), all released together;
// returns the seconds from the release to the last one's end.
template <class Fn>
double timed_on_threads(int n, Fn fn) {
    std::atomic<int> ready{0};
    std::atomic<bool> go{false};
    std::vector<std::thread> pool;
    for (int t = 1; t < n; ++t)
        pool.emplace_back([&, t] {
            ready.fetch_add(1);
            while (!go.load(std::memory_order_acquire)) {}
            fn(t);
        });
    while (ready.load() != n - 1) {}
    const auto t0 = Clock::now();
    go.store(true, std::memory_order_release);
    fn(0);
    for (std::thread& th : pool) th.join();
    return std::chrono::duration<double>(Clock::now() - t0).count();
}

std::atomic<uint64_t> g_sink{0};   // where the loops' results go, so none is dropped

// The read loop without AVX2 (a CPU the engine would run on its scalar path).
uint64_t read_sum_plain(const void* p, uint64_t bytes) {
    const auto* v = static_cast<const uint64_t*>(p);
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (uint64_t i = 0; i < bytes / 8; i += 4) {
        a += v[i];
        b += v[i + 1];
        c += v[i + 2];
        d += v[i + 3];
    }
    return a + b + c + d;
}

// The slice each of `threads` threads takes of `bytes` (a multiple of 128),
// after the checks measure_read and measure_copy share.
uint64_t slice_of(const char* what, int threads, int reps, uint64_t bytes) {
    if (threads < 1 || reps < 1) throw std::invalid_argument(std::string(what) + ": no threads or no repetitions");
    const uint64_t slice = bytes / uint64_t(threads) / 128 * 128;
    if (slice < 4096) throw std::invalid_argument(std::string(what) + ": " + std::to_string(bytes) + " bytes over " +
                                                  std::to_string(threads) + " threads");
    return slice;
}

// The best of `reps` timed passes of fn(t) on `threads` threads, after one
// untimed warm-up pass; seconds.
template <class Fn>
double best_pass(int threads, int reps, Fn fn) {
    double best = 1e30;
    for (int rep = 0; rep <= reps; ++rep) {
        const double s = timed_on_threads(threads, fn);
        if (rep > 0) best = std::min(best, s);
    }
    return best;
}

}  // namespace

ReadRate measure_read(int threads, uint64_t bytes, int reps) {
    const uint64_t slice = slice_of("measure_read", threads, reps, bytes);
    // Huge pages where the system has them, as the packed weights get:
    // the ceiling a decode is held to must be the best stream the machine runs.
    LazyBuffer buf;
    try {
        buf = LazyBuffer(slice * threads, LazyBuffer::Pages::Huge);
    } catch (const std::bad_alloc&) {
        throw std::runtime_error("measure_read: cannot allocate " + std::to_string(slice * threads) + " bytes");
    }
    unsigned char* base = buf.data();
    // Each thread writes its own slice first (pages land near the thread
    // that reads them), untimed.
    timed_on_threads(threads, [&](int t) {
        std::fill(base + slice * t, base + slice * (t + 1), static_cast<unsigned char>(t + 1));
    });
    const std::vector<Isa> hw = hardware_isas();
    uint64_t (*sum)(const void*, uint64_t) =
        std::find(hw.begin(), hw.end(), Isa::Avx2) != hw.end() ? detail::read_sum_avx2 : read_sum_plain;
    ReadRate r;
    r.bytes = slice * uint64_t(threads);
    r.threads = threads;
    r.reps = reps;
    const double best = best_pass(threads, reps, [&](int t) {
        g_sink.fetch_add(sum(base + slice * t, slice), std::memory_order_relaxed);
    });
    r.best_ms = best * 1e3;
    r.gbs = double(r.bytes) / best / 1e9;
    return r;
}

CopyRate measure_copy(int threads, uint64_t bytes, int reps) {
    const uint64_t slice = slice_of("measure_copy", threads, reps, bytes);
    std::vector<unsigned char> src(slice * threads, 1), dst(slice * threads, 0);
    CopyRate r;
    r.bytes = slice * uint64_t(threads);
    r.threads = threads;
    r.reps = reps;
    const double best = best_pass(threads, reps, [&](int t) {
        std::memcpy(dst.data() + slice * t, src.data() + slice * t, slice);
    });
    r.gbs = 2.0 * double(r.bytes) / best / 1e9;
    return r;
}

Int8Rate measure_int8(Isa isa, int threads) {
    if (threads < 1) throw std::invalid_argument("measure_int8: no threads");
    const std::vector<Isa> ok = runnable_isas();
    if (isa == Isa::Scalar || std::find(ok.begin(), ok.end(), isa) == ok.end())
        throw std::invalid_argument(std::string("measure_int8: ") + isa_name(isa) + " is not a runnable SIMD Isa here");
    uint64_t (*loop)(uint64_t) = isa == Isa::Avx2 ? detail::int8_loop_avx2
                                 : isa == Isa::Avx512 ? detail::int8_loop_avx512
                                                      : detail::int8_loop_avx512vnni;
    const double per_iter = isa == Isa::Avx2 ? 256.0 : 512.0;
    // Iterations for about 20 ms on one thread, from a short probe.
    uint64_t iters = 1 << 14;
    for (;;) {
        const auto t0 = Clock::now();
        g_sink.fetch_add(loop(iters), std::memory_order_relaxed);
        const double s = std::chrono::duration<double>(Clock::now() - t0).count();
        if (s > 2e-3 || iters > (uint64_t(1) << 40)) {
            iters = std::max<uint64_t>(iters, uint64_t(double(iters) * 0.02 / std::max(s, 1e-9)));
            break;
        }
        iters *= 4;
    }
    double best = 1e30;
    for (int rep = 0; rep < 3; ++rep)
        best = std::min(best, timed_on_threads(threads, [&](int) {
                            g_sink.fetch_add(loop(iters), std::memory_order_relaxed);
                        }));
    return {per_iter * double(iters) * threads / best / 1e9, isa, threads};
}

}  // namespace ptxlm::cpu
