// engine/cuda end to end against emu's libcuda.so.1 (selected by
// PTXLM_LIBCUDA, which ctest sets): loading, device attributes, memory,
// modules and launches of hand-written PTX, stream capture into a graph with a
// node update (events: test_cuda_events), and the error paths a user meets (bad PTX, a kernel fault,
// no driver, the toolkit's stub driver).
#include "engine/cuda/device.h"
#include "engine/cuda/driver.h"
#include "engine/cuda/module.h"
#include "tests/cuda_driver_test_util.h"

#include <dlfcn.h>
#include <unistd.h>
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <numeric>
#include <optional>
#include <string>
#include <thread>
#include <vector>

using namespace ptxlm::cuda;
using ::testing::HasSubstr;

using namespace ptxlm::cuda::test;

TEST(CudaDriver, LoadsEmuAndDescribesTheDevice) {
    auto drv = driver();
    EXPECT_EQ(drv->path(), emu_libcuda());
    EXPECT_GE(drv->version(), 12000);
    Context ctx(drv);
    const DeviceInfo& d = ctx.info();
    EXPECT_THAT(d.name, HasSubstr("emu"));
    EXPECT_GT(d.sm_count, 0);
    EXPECT_EQ(d.warp_size, 32);
    EXPECT_EQ(d.max_threads_per_block, 1024);
    EXPECT_GE(d.max_threads_per_sm, d.max_threads_per_block);
    EXPECT_GE(d.cc_major, 8);
    EXPECT_EQ(d.shared_per_block, 48 * 1024);
    EXPECT_GT(d.shared_per_block_optin, d.shared_per_block);
    EXPECT_GE(d.shared_per_sm, d.shared_per_block_optin);
    EXPECT_GT(d.regs_per_sm, 0);
    EXPECT_TRUE(d.cooperative_launch);
    EXPECT_GT(d.total_mem, uint64_t(1) << 30);
    // emu reports H100 SXM5's memory: 2 × 2619 MHz × 5120 bits = 3352 GB/s.
    EXPECT_EQ(d.memory_bus_bits, 5120);
    EXPECT_NEAR(d.peak_bandwidth_gbs(), 3352.3, 0.1);
}

TEST(CudaDriver, MemoryRoundTrip) {
    Context ctx(driver());
    std::vector<uint8_t> host(1000);
    std::iota(host.begin(), host.end(), uint8_t(0));
    DeviceBuffer buf(ctx, host.size());
    EXPECT_NE(buf.ptr(), 0u);
    buf.upload(host.data(), host.size());
    std::vector<uint8_t> back(host.size());
    buf.download(back.data(), back.size());
    EXPECT_EQ(back, host);

    // Offsets, a fill, and stream-ordered copies through pinned memory.
    uint8_t part[10];
    buf.download(part, sizeof part, 500);
    EXPECT_EQ(part[0], uint8_t(500 % 256));
    buf.fill_bytes(0xAB);
    Stream s(ctx);
    PinnedBuffer pin(ctx, host.size());
    buf.download_async(pin.data(), host.size(), s);
    s.synchronize();
    EXPECT_EQ(static_cast<uint8_t*>(pin.data())[999], 0xAB);
    buf.upload_async(host.data(), host.size(), s);
    s.synchronize();
    buf.download(back.data(), back.size());
    EXPECT_EQ(back, host);

    Error e = expect_error([&] { buf.upload(host.data(), 10, 995); });
    EXPECT_THAT(e.what(), HasSubstr("exceed"));
    Context::MemoryInfo mi = ctx.memory_info();
    EXPECT_EQ(mi.total, ctx.info().total_mem);
    EXPECT_LT(mi.free, mi.total);
    // More than the device has: the message says how much was asked for and is free.
    e = expect_error([&] { DeviceBuffer huge(ctx, size_t(mi.total) + 1); });
    EXPECT_EQ(e.code(), CUDA_ERROR_OUT_OF_MEMORY);
    EXPECT_THAT(e.what(), HasSubstr("requested " + std::to_string(mi.total + 1) + " bytes"));
    // The driver checks ranges too: a raw copy past the allocation is refused.
    const Driver& d = ctx.driver();
    EXPECT_EQ(d.api().cuMemcpyDtoH_v2(back.data(), buf.ptr() + 900, 200), CUDA_ERROR_INVALID_VALUE);
    DeviceBuffer moved = std::move(buf);
    EXPECT_EQ(buf.ptr(), 0u);
    EXPECT_EQ(moved.size(), host.size());
}

TEST(CudaDriver, LaunchesAVectorAdd) {
    Context ctx(driver());
    Module mod(ctx, kPtx);
    Function vadd = mod.function("vadd");
    EXPECT_EQ(vadd.static_shared_bytes(), 0);
    EXPECT_GT(vadd.max_threads_per_block(), 0);
    EXPECT_GT(vadd.max_active_blocks_per_sm(128, 0), 0);
    EXPECT_EQ(vadd.max_active_blocks_per_sm(2048, 0), 0);   // larger than any block

    const unsigned n = 1000;   // not a multiple of the block: the bounds check matters
    std::vector<float> a(n), b(n), c(n, -1.0f);
    for (unsigned i = 0; i < n; ++i) a[i] = 0.5f * float(i), b[i] = 1000.0f - float(i);
    DeviceBuffer da(ctx, n * 4), db(ctx, n * 4), dc(ctx, (n + 24) * 4);
    da.upload(a.data(), n * 4);
    db.upload(b.data(), n * 4);
    dc.fill_bytes(0);
    CUdeviceptr pa = da.ptr(), pb = db.ptr(), pc = dc.ptr();
    unsigned nn = n;
    void* args[] = {&pa, &pb, &pc, &nn};
    Stream s(ctx);
    launch(vadd, {{blocks_for(n, 128)}, {128}, 0}, s, args);
    s.synchronize();
    std::vector<float> tail(n + 24);
    dc.download(tail.data(), tail.size() * 4);
    for (unsigned i = 0; i < n; ++i) ASSERT_EQ(tail[i], a[i] + b[i]) << "element " << i;
    for (unsigned i = n; i < n + 24; ++i) ASSERT_EQ(tail[i], 0.0f) << "thread past n wrote element " << i;
}

// Events around launches: each completes once the work queued before it on
// its stream has, so syncing the last one makes an async copy's result
// visible, and the times between them are finite and follow stream order.
TEST(CudaDriver, CapturesReplaysAndUpdatesAGraph) {
    Context ctx(driver());
    Module mod(ctx, kPtx);
    Function vadd = mod.function("vadd"), scale = mod.function("scale");
    const unsigned n = 300;
    std::vector<float> a(n), b(n);
    for (unsigned i = 0; i < n; ++i) a[i] = float(i), b[i] = 2.0f;
    DeviceBuffer da(ctx, n * 4), db(ctx, n * 4), dc(ctx, n * 4);
    da.upload(a.data(), n * 4);
    db.upload(b.data(), n * 4);
    dc.fill_bytes(0);
    CUdeviceptr pa = da.ptr(), pb = db.ptr(), pc = dc.ptr();
    unsigned nn = n;
    float factor = 3.0f;
    void* add_args[] = {&pa, &pb, &pc, &nn};
    void* scale_args[] = {&pc, &factor, &nn};
    LaunchDims dims{{blocks_for(n, 64)}, {64}, 0};

    Stream s(ctx);
    s.begin_capture();
    launch(vadd, dims, s, add_args);
    launch(scale, dims, s, scale_args);
    factor = 100.0f;   // parameters were copied at the call: the graph keeps 3
    Graph g = s.end_capture();
    std::vector<float> c(n);
    dc.download(c.data(), n * 4);
    EXPECT_EQ(c[7], 0.0f) << "captured launches must not run";

    std::vector<CUgraphNode> nodes = g.nodes();
    ASSERT_EQ(nodes.size(), 2u);
    CUDA_KERNEL_NODE_PARAMS kp = g.kernel_params(nodes[1]);
    EXPECT_EQ(kp.func, scale.handle());
    EXPECT_EQ(kp.gridDimX, dims.grid.x);
    EXPECT_EQ(kp.blockDimX, 64u);
    ASSERT_NE(kp.kernelParams, nullptr);
    EXPECT_EQ(*static_cast<float*>(kp.kernelParams[1]), 3.0f);

    GraphExec exec = g.instantiate();
    for (int replay = 0; replay < 2; ++replay) {   // replays are idempotent: c is recomputed from a and b
        exec.launch(s);
        s.synchronize();
        dc.download(c.data(), n * 4);
        for (unsigned i = 0; i < n; ++i) ASSERT_EQ(c[i], (a[i] + b[i]) * 3.0f) << "replay " << replay << " i " << i;
    }

    // Update the scale node of the exec: new factor, and only the first half.
    float new_factor = 10.0f;
    unsigned half = n / 2;
    void* new_args[] = {&pc, &new_factor, &half};
    CUDA_KERNEL_NODE_PARAMS up = kp;
    up.kernelParams = new_args;
    exec.set_kernel_params(nodes[1], up);
    new_factor = -1.0f;   // copied at the call
    exec.launch(s);
    s.synchronize();
    dc.download(c.data(), n * 4);
    for (unsigned i = 0; i < n; ++i)
        ASSERT_EQ(c[i], (a[i] + b[i]) * (i < half ? 10.0f : 1.0f)) << "i " << i;
    // The source graph is unchanged by an exec update.
    EXPECT_EQ(*static_cast<float*>(g.kernel_params(nodes[1]).kernelParams[1]), 3.0f);
}

TEST(CudaDriver, CaptureRules) {
    Context ctx(driver());
    const Driver& d = ctx.driver();
    // The legacy stream cannot be captured.
    EXPECT_EQ(d.api().cuStreamBeginCapture_v2(nullptr, CU_STREAM_CAPTURE_MODE_GLOBAL),
              CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    // Syncing a capturing stream fails and invalidates the capture.
    Stream s(ctx);
    s.begin_capture();
    Error e = expect_error([&] { s.synchronize(); });
    EXPECT_EQ(e.code(), CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED);
    EXPECT_THAT(e.what(), HasSubstr("cuStreamSynchronize"));
    e = expect_error([&] { s.end_capture(); });
    EXPECT_EQ(e.code(), CUDA_ERROR_STREAM_CAPTURE_INVALIDATED);
    // The stream is usable again afterwards.
    s.synchronize();
}

TEST(CudaDriver, DynamicSharedAbove48KiBNeedsOptIn) {
    Context ctx(driver());
    Module mod(ctx, kPtx);
    Function vadd = mod.function("vadd");
    DeviceBuffer buf(ctx, 256);
    CUdeviceptr p = buf.ptr();
    unsigned n = 0;
    void* args[] = {&p, &p, &p, &n};
    Stream s(ctx);
    const unsigned big = 64 * 1024;
    Error e = expect_error([&] { launch(vadd, {{1}, {32}, big}, s, args); });
    EXPECT_EQ(e.code(), CUDA_ERROR_INVALID_VALUE);
    EXPECT_THAT(e.what(), HasSubstr("cuLaunchKernel"));
    EXPECT_THAT(e.what(), HasSubstr("vadd"));
    vadd.reserve_dynamic_shared(big);
    EXPECT_EQ(vadd.attribute(CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES), int(big));
    launch(vadd, {{1}, {32}, big}, s, args);
    s.synchronize();
    EXPECT_LT(vadd.max_active_blocks_per_sm(32, big), vadd.max_active_blocks_per_sm(32, 0));
}

TEST(CudaDriver, CooperativeLaunchIsLimitedToResidentBlocks) {
    Context ctx(driver());
    Module mod(ctx, kPtx);
    Function vadd = mod.function("vadd");
    const unsigned block = 256;
    const unsigned resident = unsigned(vadd.max_active_blocks_per_sm(block, 0)) * unsigned(ctx.info().sm_count);
    ASSERT_GT(resident, 0u);
    const unsigned n = resident * block;
    DeviceBuffer a(ctx, n * 4), c(ctx, n * 4);
    std::vector<float> ones(n, 1.0f);
    a.upload(ones.data(), n * 4);
    CUdeviceptr pa = a.ptr(), pc = c.ptr();
    unsigned nn = n;
    void* args[] = {&pa, &pa, &pc, &nn};
    Stream s(ctx);
    launch_cooperative(vadd, {{resident}, {block}, 0}, s, args);
    s.synchronize();
    std::vector<float> out(n);
    c.download(out.data(), n * 4);
    EXPECT_EQ(out[0], 2.0f);
    EXPECT_EQ(out[n - 1], 2.0f);
    Error e = expect_error([&] { launch_cooperative(vadd, {{resident + 1}, {block}, 0}, s, args); });
    EXPECT_EQ(e.code(), CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE);
    EXPECT_THAT(e.what(), HasSubstr("cuLaunchCooperativeKernel"));
}

// Programmatic dependent launches (cuLaunchKernelEx with the programmatic
// stream serialization attribute): a dependent chain, launched and captured,
// computes what plain launches do; an attribute emu does not implement and a
// missing config are refused, and the error names the call.
TEST(CudaDriver, ProgrammaticLaunchesRunInStreamOrderAndCapture) {
    Context ctx(driver());
    Module mod(ctx, kPtx);
    Function vadd = mod.function("vadd"), scale = mod.function("scale");
    const unsigned n = 300;
    std::vector<float> a(n), b(n, 2.0f);
    for (unsigned i = 0; i < n; ++i) a[i] = float(i);
    DeviceBuffer da(ctx, n * 4), db(ctx, n * 4), dc(ctx, n * 4);
    da.upload(a.data(), n * 4);
    db.upload(b.data(), n * 4);
    CUdeviceptr pa = da.ptr(), pb = db.ptr(), pc = dc.ptr();
    unsigned nn = n;
    float factor = 3.0f;
    void* add_args[] = {&pa, &pb, &pc, &nn};
    void* scale_args[] = {&pc, &factor, &nn};
    const LaunchDims dims{{blocks_for(n, 64)}, {64}, 0};
    Stream s(ctx);
    auto check = [&](const char* what) {
        std::vector<float> c(n);
        dc.download(c.data(), n * 4);
        for (unsigned i = 0; i < n; ++i) ASSERT_EQ(c[i], (a[i] + b[i]) * 3.0f) << what << " i " << i;
    };
    dc.fill_bytes(0);
    launch_programmatic(vadd, dims, s, add_args);
    launch_programmatic(scale, dims, s, scale_args);
    s.synchronize();
    check("stream");
    dc.fill_bytes(0);
    s.begin_capture();
    launch_programmatic(vadd, dims, s, add_args);
    launch_programmatic(scale, dims, s, scale_args);
    Graph g = s.end_capture();
    EXPECT_EQ(g.nodes().size(), 2u);
    GraphExec exec = g.instantiate();
    exec.launch(s);
    s.synchronize();
    check("graph");

    const Driver& drv = ctx.driver();
    CUlaunchAttribute attr{};
    attr.id = CU_LAUNCH_ATTRIBUTE_CLUSTER_DIMENSION;
    attr.value.clusterDim.x = attr.value.clusterDim.y = attr.value.clusterDim.z = 1;
    CUlaunchConfig cfg{};
    cfg.gridDimX = dims.grid.x, cfg.gridDimY = cfg.gridDimZ = 1;
    cfg.blockDimX = 64, cfg.blockDimY = cfg.blockDimZ = 1;
    cfg.hStream = s.handle();
    cfg.attrs = &attr;
    cfg.numAttrs = 1;
    EXPECT_EQ(drv.api().cuLaunchKernelEx(&cfg, vadd.handle(), add_args, nullptr), CUDA_ERROR_NOT_SUPPORTED);
    EXPECT_EQ(drv.api().cuLaunchKernelEx(nullptr, vadd.handle(), add_args, nullptr), CUDA_ERROR_INVALID_VALUE);
    Error e = expect_error([&] { launch_programmatic(vadd, {{1}, {2048}, 0}, s, add_args); });
    EXPECT_THAT(e.what(), HasSubstr("cuLaunchKernelEx"));
}

TEST(CudaDriver, MappedHostMemoryIsReadAndWrittenByKernels) {
    Context ctx(driver());
    const Api& api = ctx.driver().api();
    int can_map = 0;
    ASSERT_EQ(api.cuDeviceGetAttribute(&can_map, CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY, 0), CUDA_SUCCESS);
    EXPECT_EQ(can_map, 1);
    const unsigned n = 64;
    void* in = nullptr;
    void* out = nullptr;
    ASSERT_EQ(api.cuMemHostAlloc(&in, n * 4, CU_MEMHOSTALLOC_DEVICEMAP), CUDA_SUCCESS);
    ASSERT_EQ(api.cuMemHostAlloc(&out, n * 4, CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_PORTABLE), CUDA_SUCCESS);
    CUdeviceptr din = 0, dout = 0, dmid = 0;
    ASSERT_EQ(api.cuMemHostGetDevicePointer_v2(&din, in, 0), CUDA_SUCCESS);
    ASSERT_EQ(api.cuMemHostGetDevicePointer_v2(&dout, out, 0), CUDA_SUCCESS);
    ASSERT_EQ(api.cuMemHostGetDevicePointer_v2(&dmid, static_cast<char*>(in) + 8, 0), CUDA_SUCCESS);
    EXPECT_EQ(dmid, din + 8);
    // The host writes the input where it lives; the kernel's sums land in host memory.
    float* hin = static_cast<float*>(in);
    for (unsigned i = 0; i < n; ++i) hin[i] = float(i);
    Module mod(ctx, kPtx);
    Function vadd = mod.function("vadd");
    unsigned nn = n;
    void* args[] = {&din, &din, &dout, &nn};
    Stream s(ctx);
    launch(vadd, {{1}, {n}, 0}, s, args);
    s.synchronize();
    const float* hout = static_cast<const float*>(out);
    for (unsigned i = 0; i < n; ++i) ASSERT_EQ(hout[i], 2.0f * float(i)) << i;
    // Bad uses: unknown flags, a pointer outside any mapped block, flags on the query,
    // and plain pinned memory (no DEVICEMAP) has no device address in emu.
    void* bad = nullptr;
    EXPECT_EQ(api.cuMemHostAlloc(&bad, 64, 0x80), CUDA_ERROR_INVALID_VALUE);
    CUdeviceptr d = 0;
    int local = 0;
    EXPECT_EQ(api.cuMemHostGetDevicePointer_v2(&d, &local, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(api.cuMemHostGetDevicePointer_v2(&d, in, 1), CUDA_ERROR_INVALID_VALUE);
    void* plain = nullptr;
    ASSERT_EQ(api.cuMemHostAlloc(&plain, 64, 0), CUDA_SUCCESS);
    EXPECT_EQ(api.cuMemHostGetDevicePointer_v2(&d, plain, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(api.cuMemFreeHost(plain), CUDA_SUCCESS);
    EXPECT_EQ(api.cuMemFreeHost(in), CUDA_SUCCESS);
    EXPECT_EQ(api.cuMemFreeHost(out), CUDA_SUCCESS);
    // Unmapped with the free: the device address is gone.
    EXPECT_EQ(api.cuMemHostGetDevicePointer_v2(&d, in, 0), CUDA_ERROR_INVALID_VALUE);
}

// The parts of the Driver API contract emu must keep that engine/cuda does not
// exercise on its own: raw calls, checked result codes.
TEST(CudaDriver, EmuKeepsTheDriverContract) {
    Context ctx(driver());
    const Api& api = ctx.driver().api();

    // The whole log first, then a buffer smaller than it: truncated to the
    // log's first bytes, terminated, size written back.
    std::vector<char> big(8192, 0);
    void* big_vals[] = {big.data(), reinterpret_cast<void*>(uintptr_t(big.size()))};
    CUjit_option big_opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    CUmodule unused = nullptr;
    ASSERT_EQ(api.cuModuleLoadDataEx(&unused, kBadPtx, 2, big_opts, big_vals), CUDA_ERROR_INVALID_PTX);
    const std::string full(big.data());
    EXPECT_THAT(full, HasSubstr("line 8"));
    char small[16];
    std::memset(small, 'x', sizeof small);
    CUjit_option opts[] = {CU_JIT_ERROR_LOG_BUFFER, CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES};
    void* vals[] = {small, reinterpret_cast<void*>(uintptr_t(sizeof small))};
    CUmodule m = nullptr;
    EXPECT_EQ(api.cuModuleLoadDataEx(&m, kBadPtx, 2, opts, vals), CUDA_ERROR_INVALID_PTX);
    size_t filled = reinterpret_cast<uintptr_t>(vals[1]);
    EXPECT_GT(filled, 0u);
    EXPECT_LE(filled, sizeof small);
    EXPECT_LT(strnlen(small, sizeof small), sizeof small) << "log not terminated inside the buffer";
    EXPECT_EQ(std::string(small), full.substr(0, sizeof small - 1));

    // Frees must name an allocation's start; copies must stay inside one allocation.
    CUdeviceptr p = 0;
    ASSERT_EQ(api.cuMemAlloc_v2(&p, 1024), CUDA_SUCCESS);
    EXPECT_EQ(api.cuMemAlloc_v2(&p, 0), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(api.cuMemFree_v2(p + 4), CUDA_ERROR_INVALID_VALUE);
    char host[8] = {};
    EXPECT_EQ(api.cuMemcpyHtoD_v2(p + 1020, host, 8), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(api.cuMemcpyHtoD_v2(p + 1016, host, 8), CUDA_SUCCESS);
    EXPECT_EQ(api.cuMemFree_v2(p), CUDA_SUCCESS);
    EXPECT_EQ(api.cuMemFree_v2(p), CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(api.cuMemFreeHost(host), CUDA_ERROR_INVALID_VALUE);   // not from cuMemAllocHost

    // Launch validation: a block over 1024 threads, missing parameters, a foreign handle.
    Module mod(ctx, kPtx);
    Function scale = mod.function("scale");
    DeviceBuffer buf(ctx, 64);
    CUdeviceptr x = buf.ptr();
    float f = 1.0f;
    unsigned n = 16;
    void* args[] = {&x, &f, &n};
    EXPECT_EQ(api.cuLaunchKernel(scale.handle(), 1, 1, 1, 2048, 1, 1, 0, nullptr, args, nullptr),
              CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(api.cuLaunchKernel(scale.handle(), 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, nullptr),
              CUDA_ERROR_INVALID_VALUE);
    int not_a_function = 0;
    EXPECT_EQ(api.cuLaunchKernel(reinterpret_cast<CUfunction>(&not_a_function), 1, 1, 1, 32, 1, 1, 0, nullptr,
                                 args, nullptr),
              CUDA_ERROR_INVALID_HANDLE);
    // The packed-buffer form (CU_LAUNCH_PARAM_BUFFER_POINTER) is accepted when its size matches.
    struct { CUdeviceptr x; float f; unsigned n; } packed{x, 2.0f, 16};
    size_t packed_size = sizeof packed;
    void* extra[] = {CU_LAUNCH_PARAM_BUFFER_POINTER, &packed, CU_LAUNCH_PARAM_BUFFER_SIZE, &packed_size,
                     CU_LAUNCH_PARAM_END};
    EXPECT_EQ(api.cuLaunchKernel(scale.handle(), 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, extra), CUDA_SUCCESS);
    packed_size = 12;
    EXPECT_EQ(api.cuLaunchKernel(scale.handle(), 1, 1, 1, 32, 1, 1, 0, nullptr, nullptr, extra),
              CUDA_ERROR_INVALID_VALUE);
    EXPECT_EQ(api.cuCtxSynchronize(), CUDA_SUCCESS);

    // Every code emu returns has a name and a description.
    for (CUresult r : {CUDA_ERROR_INVALID_VALUE, CUDA_ERROR_INVALID_PTX, CUDA_ERROR_ILLEGAL_ADDRESS,
                       CUDA_ERROR_MISALIGNED_ADDRESS, CUDA_ERROR_LAUNCH_TIMEOUT, CUDA_ERROR_ILLEGAL_INSTRUCTION,
                       CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE,
                       CUDA_ERROR_NOT_READY}) {
        const char* name = nullptr;
        const char* text = nullptr;
        EXPECT_EQ(api.cuGetErrorName(r, &name), CUDA_SUCCESS);
        EXPECT_EQ(api.cuGetErrorString(r, &text), CUDA_SUCCESS);
        EXPECT_NE(name, nullptr);
        EXPECT_NE(text, nullptr);
    }
}

TEST(CudaDriver, BadPtxReportsTheJitLog) {
    Context ctx(driver());
    Error e = expect_error([&] { Module m(ctx, kBadPtx); });
    EXPECT_EQ(e.code(), CUDA_ERROR_INVALID_PTX);
    EXPECT_EQ(e.call(), "cuModuleLoadDataEx");
    EXPECT_THAT(e.what(), HasSubstr("cuModuleLoadDataEx"));
    EXPECT_THAT(e.what(), HasSubstr("CUDA_ERROR_INVALID_PTX"));
    EXPECT_THAT(e.what(), HasSubstr("line 8"));
    EXPECT_THAT(e.what(), HasSubstr("frobnicate"));
}

TEST(CudaDriver, PtxHeaderIsCheckedLikeTheJit) {
    Context ctx(driver());
    auto module_with = [](const std::string& version, const std::string& target) {
        return ".version " + version + "\n.target " + target +
               "\n.address_size 64\n.visible .entry k()\n{\n    ret;\n}\n";
    };
    Module ok(ctx, module_with("7.8", "sm_90"));
    Module older_target(ctx, module_with("7.0", "sm_80"));
    Error e = expect_error([&] { Module m(ctx, module_with("9.9", "sm_90")); });
    EXPECT_EQ(e.code(), CUDA_ERROR_UNSUPPORTED_PTX_VERSION);
    EXPECT_THAT(e.what(), HasSubstr("9.9"));
    e = expect_error([&] { Module m(ctx, module_with("8.6", "sm_100")); });
    EXPECT_EQ(e.code(), CUDA_ERROR_INVALID_PTX);
    EXPECT_THAT(e.what(), HasSubstr("sm_100"));
    e = expect_error([&] { Module m(ctx, module_with("7.0", "sm_90")); });   // sm_90 needs 7.8
    EXPECT_EQ(e.code(), CUDA_ERROR_INVALID_PTX);
    EXPECT_THAT(e.what(), HasSubstr("7.8"));
}

TEST(CudaDriver, MissingKernelIsNamed) {
    Context ctx(driver());
    Module mod(ctx, kPtx);
    Error e = expect_error([&] { mod.function("no_such_kernel"); });
    EXPECT_EQ(e.code(), CUDA_ERROR_NOT_FOUND);
    EXPECT_THAT(e.what(), HasSubstr("no_such_kernel"));
}

TEST(CudaDriver, KernelFaultSurfacesAtSyncAndPoisonsTheContext) {
    {
        Context ctx(driver());
        Module mod(ctx, kPtx);
        Function scale = mod.function("scale");
        DeviceBuffer buf(ctx, 64 * 4);
        buf.fill_bytes(0);
        CUdeviceptr p = buf.ptr();
        float f = 2.0f;
        unsigned n = 4096;   // far past the 64-element allocation
        void* args[] = {&p, &f, &n};
        Stream s(ctx);
        testing::internal::CaptureStderr();
        launch(scale, {{32}, {128}, 0}, s, args);   // faults are asynchronous: the launch itself succeeds
        Error e = expect_error([&] { s.synchronize(); });
        std::string err = testing::internal::GetCapturedStderr();
        EXPECT_EQ(e.code(), CUDA_ERROR_ILLEGAL_ADDRESS);
        EXPECT_THAT(e.what(), HasSubstr("CUDA_ERROR_ILLEGAL_ADDRESS"));
        EXPECT_THAT(e.what(), HasSubstr("cuStreamSynchronize"));
        EXPECT_THAT(err, HasSubstr("emu: "));
        EXPECT_THAT(err, HasSubstr("scale"));
        // Sticky: every later call reports the same fault.
        std::vector<float> host(64);
        e = expect_error([&] { buf.download(host.data(), 64 * 4); });
        EXPECT_EQ(e.code(), CUDA_ERROR_ILLEGAL_ADDRESS);
        e = expect_error([&] { ctx.synchronize(); });
        EXPECT_EQ(e.code(), CUDA_ERROR_ILLEGAL_ADDRESS);
    }
    // Releasing the last reference destroys the primary context; a new one is healthy.
    Context fresh(driver());
    DeviceBuffer buf(fresh, 16);
    buf.fill_bytes(1);
    fresh.synchronize();
}

TEST(CudaDriver, SpinningKernelIsStoppedByTheWatchdog) {
    // A kernel that never stores, never arrives at a barrier and never ends:
    // emu's watchdog stops it and the sync reports a launch timeout naming it.
    static const char* kSpin = R"(.version 7.8
.target sm_90
.address_size 64
.visible .entry spin_forever(.param .u32 n)
{
    .reg .b32 %r<3>;
    .reg .pred %p<2>;
    ld.param.u32 %r1, [n];
    mov.u32 %r2, 0;
LOOP:
    add.u32 %r2, %r2, %r1;
    setp.ne.u32 %p1, %r1, 0;
    @%p1 bra LOOP;
    ret;
}
)";
    setenv("PTXLM_EMU_WATCHDOG", "100000", 1);   // read at each launch
    {
        Context ctx(driver());
        Module mod(ctx, kSpin);
        Function f = mod.function("spin_forever");
        unsigned n = 1;
        void* args[] = {&n};
        Stream s(ctx);
        testing::internal::CaptureStderr();
        launch(f, {{1}, {32}, 0}, s, args);
        Error e = expect_error([&] { s.synchronize(); });
        std::string err = testing::internal::GetCapturedStderr();
        EXPECT_EQ(e.code(), CUDA_ERROR_LAUNCH_TIMEOUT);
        EXPECT_THAT(err, HasSubstr("watchdog"));
        EXPECT_THAT(err, HasSubstr("spin_forever"));
    }
    unsetenv("PTXLM_EMU_WATCHDOG");
    Context fresh(driver());   // the next context is healthy again
    fresh.synchronize();
}

TEST(CudaDriver, EmuWritesStatsWhenTheContextIsDestroyed) {
    std::string path = (std::filesystem::temp_directory_path() /
                        ("ptxlm_emu_stats_" + std::to_string(getpid()) + ".json")).string();
    std::filesystem::remove(path);
    {
        ScopedEnv env("PTXLM_EMU_STATS", path);   // read when the primary context is created
        Context ctx(driver());
        Module mod(ctx, kPtx);
        Function scale = mod.function("scale");
        DeviceBuffer buf(ctx, 256 * 4);
        buf.fill_bytes(0);
        CUdeviceptr p = buf.ptr();
        float f = 2.0f;
        unsigned n = 256;
        void* args[] = {&p, &f, &n};
        Stream s(ctx);
        for (int i = 0; i < 3; ++i) launch(scale, {{2}, {128}, 0}, s, args);
        s.synchronize();
    }
    std::ifstream in(path);
    ASSERT_TRUE(in) << "no stats file at " << path;
    std::string json((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    EXPECT_THAT(json, HasSubstr("\"kernels\""));
    EXPECT_THAT(json, HasSubstr("\"scale\""));
    EXPECT_THAT(json, HasSubstr("launches"));
    std::filesystem::remove(path);
}

TEST(CudaDriver, NoCurrentContextOnAnotherThread) {
    Context ctx(driver());
    const Driver& d = ctx.driver();
    CUresult res = CUDA_SUCCESS;
    std::thread t([&] {
        CUdeviceptr p = 0;
        res = d.api().cuMemAlloc_v2(&p, 64);   // this thread never made the context current
    });
    t.join();
    EXPECT_EQ(res, CUDA_ERROR_INVALID_CONTEXT);
    std::thread t2([&] {
        ctx.make_current();
        DeviceBuffer b(ctx, 64);
    });
    t2.join();
}

TEST(CudaDriver, EmuExportsOnlyVersionedAbis) {
    void* h = dlopen(emu_libcuda().c_str(), RTLD_NOW | RTLD_LOCAL);
    ASSERT_NE(h, nullptr) << dlerror();
    void* v2 = dlsym(h, "cuMemAlloc_v2");
    EXPECT_NE(v2, nullptr);
    EXPECT_EQ(dlsym(h, "cuMemAlloc"), nullptr) << "the legacy 32-bit ABI must not be exported";
    using GetProc = decltype(&cuGetProcAddress_v2);
    auto get = reinterpret_cast<GetProc>(dlsym(h, "cuGetProcAddress_v2"));
    ASSERT_NE(get, nullptr);
    void* fn = nullptr;
    CUdriverProcAddressQueryResult st{};
    EXPECT_EQ(get("cuMemAlloc", &fn, CUDA_VERSION, 0, &st), CUDA_SUCCESS);
    EXPECT_EQ(fn, v2);
    // Base names resolve to the versioned events cuda.h maps them to.
    EXPECT_EQ(get("cuEventElapsedTime", &fn, CUDA_VERSION, 0, &st), CUDA_SUCCESS);
    EXPECT_EQ(fn, dlsym(h, "cuEventElapsedTime_v2"));
    EXPECT_EQ(get("cuEventDestroy", &fn, CUDA_VERSION, 0, &st), CUDA_SUCCESS);
    EXPECT_EQ(fn, dlsym(h, "cuEventDestroy_v2"));
    EXPECT_NE(fn, nullptr);
    EXPECT_EQ(get("cuNoSuchThing", &fn, CUDA_VERSION, 0, &st), CUDA_ERROR_NOT_FOUND);
    EXPECT_EQ(st, CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND);
    dlclose(h);
}

TEST(CudaDriver, MissingLibraryGivesAClearError) {
    ScopedEnv env("PTXLM_LIBCUDA", "/nonexistent/ptxlm/libcuda.so.1");
    Error e = expect_error([] { Driver::load(); });
    EXPECT_THAT(e.what(), HasSubstr("no CUDA driver found"));
    EXPECT_THAT(e.what(), HasSubstr("/nonexistent/ptxlm/libcuda.so.1"));
    EXPECT_THAT(e.what(), HasSubstr("PTXLM_LIBCUDA"));
    EXPECT_THAT(e.what(), HasSubstr("--device cpu"));
}

TEST(CudaDriver, StubLibraryIsRecognised) {
    const std::string stub = "/usr/local/cuda/lib64/stubs/libcuda.so";
    // The stub ships with the toolkit run.sh requires: its absence is a broken install, not a skip.
    ASSERT_TRUE(std::filesystem::exists(stub)) << "no toolkit stub at " << stub << " (incomplete CUDA toolkit)";
    ScopedEnv env("PTXLM_LIBCUDA", stub);   // a full path: the stubs folder is never on a library path
    Error e = expect_error([] { Driver::load(); });
    EXPECT_EQ(e.code(), CUDA_ERROR_STUB_LIBRARY);
    EXPECT_THAT(e.what(), HasSubstr("cuInit"));
    EXPECT_THAT(e.what(), HasSubstr("CUDA_ERROR_STUB_LIBRARY"));
    EXPECT_THAT(e.what(), HasSubstr("the CUDA stub library was loaded: no GPU driver on this machine"));
}
