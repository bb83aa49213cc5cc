// CUDA events (engine/cuda/device.h's Event) against emu's libcuda.so.1:
// timing launches in stream order, and the driver's error contract.
#include "engine/cuda/device.h"
#include "engine/cuda/driver.h"
#include "engine/cuda/module.h"
#include "tests/cuda_driver_test_util.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

using namespace ptxlm::cuda;
using namespace ptxlm::cuda::test;
using ::testing::HasSubstr;

TEST(CudaDriver, EventsTimeLaunchesInStreamOrder) {
    Context ctx(driver());
    Module mod(ctx, kPtx);
    Function vadd = mod.function("vadd");
    const unsigned n = 1000;
    std::vector<float> a(n), b(n);
    for (unsigned i = 0; i < n; ++i) a[i] = float(i), b[i] = 2.0f;
    DeviceBuffer da(ctx, n * 4), db(ctx, n * 4), dc(ctx, n * 4);
    da.upload(a.data(), n * 4);
    db.upload(b.data(), n * 4);
    PinnedBuffer out(ctx, n * 4);
    float* hc = static_cast<float*>(out.data());
    std::fill(hc, hc + n, -1.0f);
    CUdeviceptr pa = da.ptr(), pb = db.ptr(), pc = dc.ptr();
    unsigned nn = n;
    void* args[] = {&pa, &pb, &pc, &nn};
    const LaunchDims dims{{blocks_for(n, 128)}, {128}, 0};

    Stream s(ctx);
    Event start(ctx), mid(ctx), end(ctx);
    start.record(s);
    launch(vadd, dims, s, args);
    mid.record(s);
    launch(vadd, dims, s, args);
    dc.download_async(hc, n * 4, s);
    end.record(s);
    end.synchronize();   // the only sync: the copy queued before `end` has landed
    for (unsigned i = 0; i < n; ++i) ASSERT_EQ(hc[i], a[i] + b[i]) << "element " << i;
    EXPECT_TRUE(s.idle());

    const float first = Event::elapsed_ms(start, mid), second = Event::elapsed_ms(mid, end);
    const float total = Event::elapsed_ms(start, end);
    for (float ms : {first, second, total}) {
        EXPECT_TRUE(std::isfinite(ms)) << ms;
        EXPECT_GE(ms, 0.0f) << "an event completed before one recorded earlier on its stream";
    }
    EXPECT_GE(total, first);
    EXPECT_GE(total, second);
    EXPECT_LE(Event::elapsed_ms(end, start), 0.0f);   // reversed: the same span, negated
    EXPECT_EQ(Event::elapsed_ms(mid, mid), 0.0f);

    // Recording again replaces what an event marks; a moved event keeps its handle.
    Event later = std::move(start);
    later.record(s);
    later.synchronize();
    EXPECT_GE(Event::elapsed_ms(end, later), 0.0f);
    s.synchronize();
}

TEST(CudaDriver, EventErrorsFollowTheDriver) {
    Context ctx(driver());
    const Api& api = ctx.driver().api();
    Stream s(ctx);
    Event never(ctx), done(ctx);
    done.record(s);
    done.synchronize();
    never.synchronize();   // never recorded: no work to wait for

    // Never recorded is an invalid handle (cuda.h's cuEventElapsedTime), named in the error.
    Error e = expect_error([&] { Event::elapsed_ms(never, done); });
    EXPECT_EQ(e.code(), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_EQ(e.call(), "cuEventElapsedTime_v2");
    EXPECT_THAT(e.what(), HasSubstr("cuEventElapsedTime"));
    EXPECT_THAT(e.what(), HasSubstr("CUDA_ERROR_INVALID_HANDLE"));
    e = expect_error([&] { Event::elapsed_ms(done, never); });
    EXPECT_EQ(e.code(), CUDA_ERROR_INVALID_HANDLE);

    float ms = -1.0f;
    EXPECT_EQ(api.cuEventElapsedTime_v2(&ms, nullptr, done.handle()), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_EQ(api.cuEventElapsedTime_v2(&ms, done.handle(), nullptr), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_EQ(api.cuEventElapsedTime_v2(nullptr, done.handle(), done.handle()), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(api.cuEventRecord(nullptr, s.handle()), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_EQ(api.cuEventSynchronize(nullptr), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_EQ(ms, -1.0f) << "a failed call wrote its result";

    // Without timing data there is no elapsed time (an invalid handle, as documented).
    CUevent untimed = nullptr;
    ASSERT_EQ(api.cuEventCreate(&untimed, CU_EVENT_DISABLE_TIMING), CUDA_SUCCESS);
    ASSERT_EQ(api.cuEventRecord(untimed, s.handle()), CUDA_SUCCESS);
    ASSERT_EQ(api.cuEventSynchronize(untimed), CUDA_SUCCESS);
    EXPECT_EQ(api.cuEventElapsedTime_v2(&ms, done.handle(), untimed), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_EQ(api.cuEventDestroy_v2(untimed), CUDA_SUCCESS);
    // An interprocess event must not carry timing; unknown flags are refused.
    CUevent bad = nullptr;
    EXPECT_EQ(api.cuEventCreate(&bad, CU_EVENT_INTERPROCESS), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(api.cuEventCreate(&bad, 0x80), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(api.cuEventCreate(nullptr, CU_EVENT_DEFAULT), CUDA_ERROR_INVALID_VALUE);

    // Destroying an event whose record is still queued does not wait and
    // leaves the queued record harmless; emu knows a destroyed handle.
    Module mod(ctx, kPtx);
    Function scale = mod.function("scale");
    DeviceBuffer buf(ctx, 4096 * 4);
    buf.fill_bytes(0);
    CUdeviceptr p = buf.ptr();
    float f = 2.0f;
    unsigned n = 4096;
    void* args[] = {&p, &f, &n};
    CUevent pending = nullptr;
    ASSERT_EQ(api.cuEventCreate(&pending, CU_EVENT_DEFAULT), CUDA_SUCCESS);
    launch(scale, {{32}, {128}, 0}, s, args);
    ASSERT_EQ(api.cuEventRecord(pending, s.handle()), CUDA_SUCCESS);
    EXPECT_EQ(api.cuEventDestroy_v2(pending), CUDA_SUCCESS);
    s.synchronize();
    EXPECT_EQ(api.cuEventDestroy_v2(pending), CUDA_ERROR_INVALID_HANDLE);
    EXPECT_EQ(api.cuEventSynchronize(pending), CUDA_ERROR_INVALID_HANDLE);

    // emu captures kernel launches only: recording an event in a capturing
    // stream fails and invalidates the capture, like an async copy (the real
    // driver adds the record to the capture instead).
    s.begin_capture();
    e = expect_error([&] { done.record(s); });
    EXPECT_EQ(e.code(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    EXPECT_THAT(e.what(), HasSubstr("cuEventRecord"));
    e = expect_error([&] { s.end_capture(); });
    EXPECT_EQ(e.code(), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    done.record(s);   // usable again after the capture ended
    done.synchronize();
}
