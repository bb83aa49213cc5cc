// emu's device queue (emu/driver_queue.h) through the Driver API: launches
// return before their kernels run, a host talks to a running kernel through
// mapped pinned memory (the persistent decoder's token stream and cancel
// flag), a kernel waiting on a host that never answers is reported, an event
// completes only when the device queue reaches it, and deferred mode
// (PTXLM_EMU_DEFERRED=1) turns a missing sync into stale data every time.
#include "engine/cuda/device.h"
#include "engine/cuda/driver.h"
#include "engine/cuda/module.h"

#include <spawn.h>
#include <sys/wait.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

using namespace ptxlm::cuda;
using ::testing::HasSubstr;

namespace {

// pingpong: lane 0 publishes i = 1..rounds to d2h with a sys-scope release
// and waits for the host to echo it in h2d (sys-scope acquire), then acks
// the last one. Must be launched cooperatively (spin detection: a warp that
// waits on host memory is not a deadlock while the host may still answer).
//
// vadd: c[i] = a[i] + b[i].
const char* kPtx = R"(.version 7.8
.target sm_90
.address_size 64

.visible .entry pingpong(.param .u64 d2h, .param .u64 h2d, .param .u32 rounds)
{
    .reg .pred %p<4>;
    .reg .b32 %r<6>;
    .reg .b64 %rd<3>;
    ld.param.u64 %rd1, [d2h];
    ld.param.u64 %rd2, [h2d];
    ld.param.u32 %r1, [rounds];
    mov.u32 %r2, %tid.x;
    setp.ne.u32 %p1, %r2, 0;
    @%p1 bra END;
    mov.u32 %r3, 1;
NEXT:
    st.release.sys.global.u32 [%rd1], %r3;
WAIT:
    ld.acquire.sys.global.u32 %r4, [%rd2];
    setp.lt.u32 %p2, %r4, %r3;
    @%p2 bra WAIT;
    add.u32 %r3, %r3, 1;
    setp.le.u32 %p3, %r3, %r1;
    @%p3 bra NEXT;
    st.release.sys.global.u32 [%rd1], 0xffffffff;
END:
    ret;
}

.visible .entry vadd(.param .u64 pa, .param .u64 pb, .param .u64 pc, .param .u32 n)
{
    .reg .pred %p<2>;
    .reg .b32 %r<4>;
    .reg .f32 %f<4>;
    .reg .b64 %rd<8>;
    ld.param.u64 %rd1, [pa];
    ld.param.u64 %rd2, [pb];
    ld.param.u64 %rd3, [pc];
    ld.param.u32 %r1, [n];
    mov.u32 %r2, %tid.x;
    setp.ge.u32 %p1, %r2, %r1;
    @%p1 bra DONE;
    mul.wide.u32 %rd4, %r2, 4;
    add.s64 %rd5, %rd1, %rd4;
    add.s64 %rd6, %rd2, %rd4;
    add.s64 %rd7, %rd3, %rd4;
    ld.global.f32 %f1, [%rd5];
    ld.global.f32 %f2, [%rd6];
    add.rn.f32 %f3, %f1, %f2;
    st.global.f32 [%rd7], %f3;
DONE:
    ret;
}
)";

std::string emu_libcuda() {
    const char* p = std::getenv("PTXLM_LIBCUDA");
    return p && *p ? p : PTXLM_EMU_LIBCUDA;
}

std::shared_ptr<const Driver> driver() { return Driver::load(emu_libcuda()); }

bool deferred() {
    const char* v = std::getenv("PTXLM_EMU_DEFERRED");
    return v && std::strcmp(v, "1") == 0;
}

// Runs this test binary again with `env` added and only `filter`'s tests;
// returns its exit status. The device queue's mode is chosen once per
// process, so a mode needs a process of its own.
int run_self(const std::string& filter, const std::vector<std::string>& env) {
    std::vector<std::string> envs;
    for (char** e = environ; *e; ++e) envs.emplace_back(*e);
    for (const std::string& e : env) envs.push_back(e);
    std::vector<char*> envp;
    for (std::string& e : envs) envp.push_back(e.data());
    envp.push_back(nullptr);
    std::string self = "/proc/self/exe", arg = "--gtest_filter=" + filter;
    char* argv[] = {self.data(), arg.data(), nullptr};
    pid_t pid = 0;
    if (posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, argv, envp.data()) != 0) return -1;
    int status = 0;
    if (waitpid(pid, &status, 0) != pid) return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

// Mapped pinned memory: a host pointer and the device address of the same bytes.
struct Mapped {
    const Api& api;
    void* host = nullptr;
    CUdeviceptr dev = 0;
    Mapped(const Api& a, size_t bytes) : api(a) {
        EXPECT_EQ(api.cuMemHostAlloc(&host, bytes, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
        EXPECT_EQ(api.cuMemHostGetDevicePointer_v2(&dev, host, 0), CUDA_SUCCESS);
    }
    ~Mapped() { api.cuMemFreeHost(host); }
    std::atomic_ref<uint32_t> word(size_t i) const { return std::atomic_ref<uint32_t>(static_cast<uint32_t*>(host)[i]); }
};

// Polls `w` until it equals `want` or `seconds` pass; true when it did.
bool wait_for(std::atomic_ref<uint32_t> w, uint32_t want, double seconds) {
    const auto end = std::chrono::steady_clock::now() + std::chrono::duration<double>(seconds);
    while (std::chrono::steady_clock::now() < end) {
        if (w.load(std::memory_order_acquire) == want) return true;
        std::this_thread::sleep_for(std::chrono::microseconds(100));
    }
    return false;
}

}  // namespace

// The kernel cannot finish without the host's answers, so every value the
// host saw came from a kernel still running: the launch returned first.
TEST(EmuAsync, HostAndARunningKernelTalkThroughMappedMemory) {
    if (deferred()) GTEST_SKIP() << "deferred mode runs kernels only at a sync: no host round trip is possible";
    Context ctx(driver());
    const Api& api = ctx.driver().api();
    Module mod(ctx, kPtx);
    Function pingpong = mod.function("pingpong");
    Mapped d2h(api, 64), h2d(api, 64);
    Stream s(ctx);
    const uint32_t rounds = 5;
    void* args[] = {&d2h.dev, &h2d.dev, const_cast<uint32_t*>(&rounds)};
    launch_cooperative(pingpong, {{1}, {32}, 0}, s, args);
    for (uint32_t i = 1; i <= rounds; ++i) {
        ASSERT_TRUE(wait_for(d2h.word(0), i, 30)) << "round " << i << ": the kernel did not publish "
                                                  << i << " (saw " << d2h.word(0).load() << ")";
        EXPECT_EQ(api.cuStreamQuery(s.handle()), CUDA_ERROR_NOT_READY) << "round " << i;
        h2d.word(0).store(i, std::memory_order_release);
    }
    s.synchronize();
    EXPECT_EQ(d2h.word(0).load(), 0xffffffffu);
    EXPECT_EQ(api.cuStreamQuery(s.handle()), CUDA_SUCCESS);
}

// An event recorded behind a kernel that cannot finish until the host answers
// is not complete (NOT_READY, not an error) until the kernel is: the record
// is queued, never stamped at the call.
TEST(EmuAsync, AnEventBehindARunningKernelIsNotReady) {
    if (deferred()) GTEST_SKIP() << "deferred mode runs kernels only at a sync: no host round trip is possible";
    Context ctx(driver());
    const Api& api = ctx.driver().api();
    Module mod(ctx, kPtx);
    Function pingpong = mod.function("pingpong");
    Mapped d2h(api, 64), h2d(api, 64);
    Stream s(ctx);
    Event start(ctx), end(ctx);
    start.record(s);
    const uint32_t rounds = 1;
    void* args[] = {&d2h.dev, &h2d.dev, const_cast<uint32_t*>(&rounds)};
    launch_cooperative(pingpong, {{1}, {32}, 0}, s, args);
    end.record(s);
    ASSERT_TRUE(wait_for(d2h.word(0), 1, 30)) << "the kernel did not start";
    float ms = -1.0f;
    EXPECT_EQ(api.cuEventElapsedTime_v2(&ms, start.handle(), end.handle()), CUDA_ERROR_NOT_READY);
    Error e(CUDA_SUCCESS, "", "");
    try {
        Event::elapsed_ms(start, end);
    } catch (const Error& err) {
        e = err;
    }
    EXPECT_EQ(e.code(), CUDA_ERROR_NOT_READY);
    EXPECT_THAT(e.what(), HasSubstr("cuEventElapsedTime"));
    EXPECT_THAT(e.what(), HasSubstr("CUDA_ERROR_NOT_READY"));
    h2d.word(0).store(1, std::memory_order_release);
    end.synchronize();
    EXPECT_EQ(d2h.word(0).load(), 0xffffffffu) << "the event completed before the kernel did";
    ms = Event::elapsed_ms(start, end);
    EXPECT_TRUE(std::isfinite(ms));
    EXPECT_GE(ms, 0.0f);
}

// A kernel waiting on a host that never answers ends with a deadlock report
// after PTXLM_EMU_HOST_WAIT_MS, never a hang.
TEST(EmuAsync, AKernelWaitingOnASilentHostIsReported) {
    if (deferred()) GTEST_SKIP() << "covered in async mode";
    setenv("PTXLM_EMU_HOST_WAIT_MS", "300", 1);
    {
        Context ctx(driver());
        const Api& api = ctx.driver().api();
        Module mod(ctx, kPtx);
        Function pingpong = mod.function("pingpong");
        Mapped d2h(api, 64), h2d(api, 64);
        Stream s(ctx);
        uint32_t rounds = 1;
        void* args[] = {&d2h.dev, &h2d.dev, &rounds};
        testing::internal::CaptureStderr();
        const auto t0 = std::chrono::steady_clock::now();
        launch_cooperative(pingpong, {{1}, {32}, 0}, s, args);
        try {
            s.synchronize();
            ADD_FAILURE() << "the sync succeeded";
        } catch (const Error& e) {
            EXPECT_EQ(e.code(), CUDA_ERROR_LAUNCH_TIMEOUT);
        }
        const double waited = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
        const std::string err = testing::internal::GetCapturedStderr();
        EXPECT_THAT(err, HasSubstr("deadlock: cooperative kernel 'pingpong'"));
        EXPECT_THAT(err, HasSubstr("host-mapped memory a warp polls stayed the same for 300 ms"));
        EXPECT_THAT(err, HasSubstr("ld.acquire.sys.global.u32"));
        EXPECT_GE(waited, 0.3);
        EXPECT_LT(waited, 30.0);
    }
    unsetenv("PTXLM_EMU_HOST_WAIT_MS");
}

// Work queued on a stream runs in order after the launch returns; a sync (or
// a synchronous copy) sees all of it.
TEST(EmuAsync, QueuedWorkRunsInOrderAndSyncPointsWaitForIt) {
    Context ctx(driver());
    const Api& api = ctx.driver().api();
    Module mod(ctx, kPtx);
    Function vadd = mod.function("vadd");
    const unsigned n = 32;
    DeviceBuffer a(ctx, n * 4), c(ctx, n * 4);
    std::vector<float> ha(n);
    for (unsigned i = 0; i < n; ++i) ha[i] = float(i);
    a.upload(ha.data(), n * 4);
    Stream s(ctx);
    CUdeviceptr pa = a.ptr(), pc = c.ptr();
    unsigned nn = n;
    // c = a + a, then a = c + c, then c = a + a: 4x then 8x (each launch reads the previous one's output).
    void* args1[] = {&pa, &pa, &pc, &nn};
    void* args2[] = {&pc, &pc, &pa, &nn};
    launch(vadd, {{1}, {n}, 0}, s, args1);
    launch(vadd, {{1}, {n}, 0}, s, args2);
    launch(vadd, {{1}, {n}, 0}, s, args1);
    std::vector<float> got(n);
    c.download(got.data(), n * 4);   // a synchronous copy waits for the queue
    for (unsigned i = 0; i < n; ++i) ASSERT_EQ(got[i], 8.0f * float(i)) << i;
    EXPECT_EQ(api.cuStreamQuery(s.handle()), CUDA_SUCCESS);
}

// Deferred mode: a result read before the sync that would make it visible is
// stale every time; the sync brings it. An async copy from pinned memory reads
// the source when it runs, not when it was queued.
TEST(EmuDeferred, AMissingSyncReadsStaleData) {
    if (!deferred()) {
        EXPECT_EQ(run_self("EmuDeferred.*", {"PTXLM_EMU_DEFERRED=1"}), 0) << "the deferred-mode run failed (its output is above)";
        return;
    }
    Context ctx(driver());
    const Api& api = ctx.driver().api();
    Module mod(ctx, kPtx);
    Function vadd = mod.function("vadd");
    const unsigned n = 32;
    DeviceBuffer a(ctx, n * 4), c(ctx, n * 4);
    PinnedBuffer src(ctx, n * 4), dst(ctx, n * 4);
    float* hs = static_cast<float*>(src.data());
    float* hd = static_cast<float*>(dst.data());
    for (unsigned i = 0; i < n; ++i) { hs[i] = float(i); hd[i] = -1.0f; }
    Stream s(ctx);
    ASSERT_EQ(api.cuMemcpyHtoDAsync_v2(a.ptr(), hs, n * 4, s.handle()), CUDA_SUCCESS);
    for (unsigned i = 0; i < n; ++i) hs[i] = float(2 * i);   // before the copy runs: it copies these
    CUdeviceptr pa = a.ptr(), pc = c.ptr();
    unsigned nn = n;
    void* args[] = {&pa, &pa, &pc, &nn};
    launch(vadd, {{1}, {n}, 0}, s, args);
    ASSERT_EQ(api.cuMemcpyDtoHAsync_v2(hd, c.ptr(), n * 4, s.handle()), CUDA_SUCCESS);
    for (unsigned i = 0; i < n; ++i) ASSERT_EQ(hd[i], -1.0f) << "read without a sync: must be stale";
    // A query is a sync point in deferred mode: not ready, then it runs the queue.
    EXPECT_EQ(api.cuStreamQuery(s.handle()), CUDA_ERROR_NOT_READY);
    EXPECT_EQ(api.cuStreamQuery(s.handle()), CUDA_SUCCESS);
    for (unsigned i = 0; i < n; ++i) ASSERT_EQ(hd[i], 4.0f * float(i)) << i;
    // Again with a stream sync as the sync point.
    for (unsigned i = 0; i < n; ++i) hd[i] = -1.0f;
    launch(vadd, {{1}, {n}, 0}, s, args);
    ASSERT_EQ(api.cuMemcpyDtoHAsync_v2(hd, c.ptr(), n * 4, s.handle()), CUDA_SUCCESS);
    EXPECT_EQ(hd[0 + 1], -1.0f);
    s.synchronize();
    for (unsigned i = 0; i < n; ++i) ASSERT_EQ(hd[i], 4.0f * float(i)) << i;
}

// Deferred mode: a record completes at the next sync point, never at the call,
// so elapsed time is NOT_READY until then; cuEventSynchronize is a sync point.
// Run by EmuDeferred.AMissingSyncReadsStaleData's deferred-mode process.
TEST(EmuDeferred, EventsCompleteAtTheNextSyncPoint) {
    if (!deferred()) GTEST_SKIP() << "runs in the deferred-mode process EmuDeferred.AMissingSyncReadsStaleData starts";
    Context ctx(driver());
    const Api& api = ctx.driver().api();
    Module mod(ctx, kPtx);
    Function vadd = mod.function("vadd");
    const unsigned n = 32;
    DeviceBuffer a(ctx, n * 4), c(ctx, n * 4);
    std::vector<float> ha(n);
    for (unsigned i = 0; i < n; ++i) ha[i] = float(i);
    a.upload(ha.data(), n * 4);
    PinnedBuffer dst(ctx, n * 4);
    float* hd = static_cast<float*>(dst.data());
    for (unsigned i = 0; i < n; ++i) hd[i] = -1.0f;
    CUdeviceptr pa = a.ptr(), pc = c.ptr();
    unsigned nn = n;
    void* args[] = {&pa, &pa, &pc, &nn};
    Stream s(ctx);
    Event start(ctx), end(ctx);
    start.record(s);
    launch(vadd, {{1}, {n}, 0}, s, args);
    c.download_async(hd, n * 4, s);
    end.record(s);
    float ms = -1.0f;
    for (int poll = 0; poll < 3; ++poll)   // not a sync point: it never makes progress by itself
        EXPECT_EQ(api.cuEventElapsedTime_v2(&ms, start.handle(), end.handle()), CUDA_ERROR_NOT_READY) << poll;
    EXPECT_EQ(hd[0 + 1], -1.0f) << "work ran before a sync point";
    end.synchronize();
    for (unsigned i = 0; i < n; ++i) ASSERT_EQ(hd[i], 2.0f * float(i)) << i;
    ms = Event::elapsed_ms(start, end);
    EXPECT_TRUE(std::isfinite(ms));
    EXPECT_GE(ms, 0.0f);
    // A stream sync completes a record too.
    start.record(s);
    EXPECT_EQ(api.cuEventElapsedTime_v2(&ms, start.handle(), end.handle()), CUDA_ERROR_NOT_READY);
    s.synchronize();
    EXPECT_LE(Event::elapsed_ms(start, end), 0.0f);   // start is now the later one
}
