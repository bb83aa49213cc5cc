// emu's Driver API surface, part 1: initialisation, the device, the primary
// context, memory, error names, cuGetProcAddress and the stats file.
// Exported with C linkage under the real libcuda's versioned symbol names
// (cuda.h's declarations; its #defines map cuMemAlloc to cuMemAlloc_v2 etc.).
#include "emu/driver_queue.h"
#include "emu/driver_state.h"

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <functional>
#include <memory>
#include <vector>
#include <fstream>

namespace ptxlm::emu::driver {

State& state() {
    // Destroyed at exit or when the engine dlcloses the library; its
    // destructor writes the stats file (then frees everything, so a leak
    // checker sees no leftovers).
    static State s;
    return s;
}

State::~State() {
    write_stats();
    for (auto& [p, n] : primary.pinned) std::free(p);
}

bool healthy(CUctx_st* ctx) {
    Lock lock(state().mu);
    return ctx->sticky == CUDA_SUCCESS;
}

CUctx_st*& current() {
    thread_local CUctx_st* ctx = nullptr;
    return ctx;
}

CUresult enter(CUctx_st** out) {
    State& s = state();
    if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
    CUctx_st* ctx = current();
    if (!ctx || ctx->refcount == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (ctx->sticky != CUDA_SUCCESS) return ctx->sticky;
    *out = ctx;
    return CUDA_SUCCESS;
}

bool capture_forbids_unsafe(CUctx_st* ctx) {
    for (auto& [p, st] : ctx->streams) {
        if (st->capture != CU_STREAM_CAPTURE_STATUS_ACTIVE) continue;
        if (st->mode == CU_STREAM_CAPTURE_MODE_GLOBAL) return true;
        if (st->mode == CU_STREAM_CAPTURE_MODE_THREAD_LOCAL && st->capture_thread == std::this_thread::get_id())
            return true;
    }
    return false;
}

void invalidate_captures(CUctx_st* ctx) {
    for (auto& [p, st] : ctx->streams)
        if (st->capture == CU_STREAM_CAPTURE_STATUS_ACTIVE) st->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
}

// A capturing stream cannot record copies, memsets or events in emu (kernels
// only), which invalidates it.
CUresult enter_async(CUctx_st** ctx, CUstream hStream) {
    if (CUresult r = enter(ctx)) return r;
    if (hStream == nullptr || hStream == CU_STREAM_LEGACY || hStream == CU_STREAM_PER_THREAD)
        return capture_forbids_unsafe(*ctx) ? (invalidate_captures(*ctx), CUDA_ERROR_STREAM_CAPTURE_IMPLICIT)
                                            : CUDA_SUCCESS;
    if (!alive(hStream) || hStream->ctx != *ctx) return CUDA_ERROR_INVALID_HANDLE;
    if (hStream->capture != CU_STREAM_CAPTURE_STATUS_NONE) {
        hStream->capture = CU_STREAM_CAPTURE_STATUS_INVALIDATED;
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    return CUDA_SUCCESS;
}

void destroy_context(CUctx_st* ctx) {
    State& s = state();
    for (auto& [m, mod] : ctx->modules) {
        for (auto& f : mod->funcs) s.live.erase(f.get());
        s.live.erase(m);
    }
    for (auto& [g, graph] : ctx->graphs) {
        for (auto& n : graph->nodes) s.live.erase(n.get());
        s.live.erase(g);
    }
    for (auto& [st, stream] : ctx->streams) {
        if (stream->graph)
            for (auto& n : stream->graph->nodes) s.live.erase(n.get());
        s.live.erase(st);
    }
    for (auto& [e, exec] : ctx->execs) s.live.erase(e);
    for (auto& [e, event] : ctx->events) s.live.erase(e);
    for (auto& [p, n] : ctx->pinned) std::free(p);
    ctx->modules.clear();
    ctx->graphs.clear();
    ctx->streams.clear();
    ctx->execs.clear();
    ctx->events.clear();
    ctx->pinned.clear();
    ctx->mapped.clear();
    ctx->mem.reset();
    ctx->sticky = CUDA_SUCCESS;
    write_stats();
}

void write_stats() {
    const State& s = state();
    if (!s.stats_enabled) return;
    std::ofstream out(s.stats_path, std::ios::trunc);
    if (!out) {
        std::fprintf(stderr, "emu: cannot write PTXLM_EMU_STATS file %s\n", s.stats_path.c_str());
        return;
    }
    // PTX identifiers need no JSON escaping ([A-Za-z0-9_$%]).
    out << "{\"kernels\": {";
    bool first = true;
    for (auto& [name, st] : s.stats) {
        out << (first ? "" : ",") << "\n  \"" << name << "\": " << st.to_json();
        first = false;
    }
    out << "\n}}\n";
}

namespace {

struct ErrorText { CUresult code; const char* name; const char* text; };
#define E(code, text) {code, #code, text}
constexpr ErrorText kErrors[] = {
    E(CUDA_SUCCESS, "no error"),
    E(CUDA_ERROR_INVALID_VALUE, "invalid argument"),
    E(CUDA_ERROR_OUT_OF_MEMORY, "out of memory"),
    E(CUDA_ERROR_NOT_INITIALIZED, "initialization error (cuInit has not been called)"),
    E(CUDA_ERROR_DEINITIALIZED, "driver shutting down"),
    E(CUDA_ERROR_STUB_LIBRARY, "CUDA driver is a stub library"),
    E(CUDA_ERROR_NO_DEVICE, "no CUDA-capable device is detected"),
    E(CUDA_ERROR_INVALID_DEVICE, "invalid device ordinal"),
    E(CUDA_ERROR_INVALID_IMAGE, "device kernel image is invalid (emu runs PTX text only)"),
    E(CUDA_ERROR_INVALID_CONTEXT, "invalid device context"),
    E(CUDA_ERROR_INVALID_PTX, "a PTX JIT compilation failed"),
    E(CUDA_ERROR_UNSUPPORTED_PTX_VERSION, "the provided PTX was compiled with an unsupported toolchain"),
    E(CUDA_ERROR_INVALID_HANDLE, "invalid resource handle"),
    E(CUDA_ERROR_ILLEGAL_STATE, "the operation cannot be performed in the present state"),
    E(CUDA_ERROR_NOT_FOUND, "named symbol not found"),
    E(CUDA_ERROR_NOT_READY, "device not ready"),
    E(CUDA_ERROR_ILLEGAL_ADDRESS, "an illegal memory access was encountered"),
    E(CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES, "too many resources requested for launch"),
    E(CUDA_ERROR_LAUNCH_TIMEOUT, "the launch timed out and was terminated"),
    E(CUDA_ERROR_CONTEXT_IS_DESTROYED, "context is destroyed"),
    E(CUDA_ERROR_ASSERT, "device-side assert triggered"),
    E(CUDA_ERROR_ILLEGAL_INSTRUCTION, "an illegal instruction was encountered"),
    E(CUDA_ERROR_MISALIGNED_ADDRESS, "misaligned address"),
    E(CUDA_ERROR_INVALID_ADDRESS_SPACE, "operation not supported on global/shared address space"),
    E(CUDA_ERROR_INVALID_PC, "invalid program counter"),
    E(CUDA_ERROR_LAUNCH_FAILED, "unspecified launch failure"),
    E(CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE, "too many blocks in cooperative launch"),
    E(CUDA_ERROR_NOT_SUPPORTED, "operation not supported (by emu)"),
    E(CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, "operation not permitted when stream is capturing"),
    E(CUDA_ERROR_STREAM_CAPTURE_INVALIDATED, "operation failed due to a previous error during capture"),
    E(CUDA_ERROR_STREAM_CAPTURE_UNMATCHED, "capture was not initiated in this stream"),
    E(CUDA_ERROR_STREAM_CAPTURE_IMPLICIT,
      "operation would make the legacy stream depend on a capturing blocking stream"),
    E(CUDA_ERROR_STREAM_CAPTURE_WRONG_THREAD,
      "attempt to terminate a thread-local capture sequence from another thread"),
    E(CUDA_ERROR_UNKNOWN, "unknown error"),
};
#undef E

const ErrorText* find_error(CUresult code) {
    for (const ErrorText& e : kErrors)
        if (e.code == code) return &e;
    return nullptr;
}

}  // namespace
}  // namespace ptxlm::emu::driver

using namespace ptxlm::emu::driver;
namespace emu = ptxlm::emu;

// ---- errors, init, version ----

CUresult CUDAAPI cuGetErrorName(CUresult error, const char** pStr) {
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    const ErrorText* e = find_error(error);
    *pStr = e ? e->name : nullptr;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuGetErrorString(CUresult error, const char** pStr) {
    if (!pStr) return CUDA_ERROR_INVALID_VALUE;
    const ErrorText* e = find_error(error);
    *pStr = e ? e->text : nullptr;
    return e ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuInit(unsigned int Flags) {
    if (Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    State& s = state();
    Lock lock(s.mu);
    s.initialized = true;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDriverGetVersion(int* driverVersion) {
    if (!driverVersion) return CUDA_ERROR_INVALID_VALUE;
    *driverVersion = CUDA_VERSION;
    return CUDA_SUCCESS;
}

// ---- device ----

static CUresult check_device(CUdevice dev) {
    if (!state().initialized) return CUDA_ERROR_NOT_INITIALIZED;
    return dev == 0 ? CUDA_SUCCESS : CUDA_ERROR_INVALID_DEVICE;
}

CUresult CUDAAPI cuDeviceGetCount(int* count) {
    Lock lock(state().mu);
    if (!count) return CUDA_ERROR_INVALID_VALUE;
    if (!state().initialized) return CUDA_ERROR_NOT_INITIALIZED;
    *count = 1;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGet(CUdevice* device, int ordinal) {
    Lock lock(state().mu);
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    if (!state().initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (ordinal != 0) return CUDA_ERROR_INVALID_DEVICE;
    *device = 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetName(char* name, int len, CUdevice dev) {
    Lock lock(state().mu);
    if (!name || len <= 0) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = check_device(dev)) return r;
    const emu::DeviceLimits& L = emu::device_limits();
    std::snprintf(name, size_t(len), "ptxlm emu (sm_%d%d-like, %u SMs)", L.cc_major, L.cc_minor, L.sm_count);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceTotalMem_v2(size_t* bytes, CUdevice dev) {
    Lock lock(state().mu);
    if (!bytes) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = check_device(dev)) return r;
    *bytes = emu::device_limits().total_mem;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDeviceGetAttribute(int* pi, CUdevice_attribute attrib, CUdevice dev) {
    Lock lock(state().mu);
    if (!pi) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = check_device(dev)) return r;
    const emu::DeviceLimits& L = emu::device_limits();
    int v = 0;
    switch (attrib) {
    case CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT: v = int(L.sm_count); break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK: v = int(L.max_threads_per_block); break;
    case CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR: v = int(L.max_threads_per_sm); break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR: v = int(L.max_blocks_per_sm); break;
    case CU_DEVICE_ATTRIBUTE_WARP_SIZE: v = int(L.warp_size); break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK: v = int(L.shared_per_block); break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN: v = int(L.shared_per_block_optin); break;
    case CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR: v = int(L.shared_per_sm); break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK: v = int(L.regs_per_sm); break;
    case CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR: v = int(L.regs_per_sm); break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR: v = L.cc_major; break;
    case CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR: v = L.cc_minor; break;
    case CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE: v = L.memory_clock_khz; break;
    case CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH: v = L.memory_bus_bits; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_X: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Y: v = 1024; break;
    case CU_DEVICE_ATTRIBUTE_MAX_BLOCK_DIM_Z: v = 64; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_X: v = 0x7fffffff; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Y: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_MAX_GRID_DIM_Z: v = 65535; break;
    case CU_DEVICE_ATTRIBUTE_UNIFIED_ADDRESSING: v = 1; break;
    case CU_DEVICE_ATTRIBUTE_INTEGRATED: v = 0; break;
    case CU_DEVICE_ATTRIBUTE_CAN_MAP_HOST_MEMORY: v = 1; break;   // cuMemHostAlloc with DEVICEMAP
    case CU_DEVICE_ATTRIBUTE_CONCURRENT_KERNELS: v = 0; break;
    default: return CUDA_ERROR_INVALID_VALUE;   // strict: emu does not guess attributes it does not model
    }
    *pi = v;
    return CUDA_SUCCESS;
}

// ---- primary context ----

CUresult CUDAAPI cuDevicePrimaryCtxRetain(CUcontext* pctx, CUdevice dev) {
    State& s = state();
    Lock lock(s.mu);
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (CUresult r = check_device(dev)) return r;
    CUctx_st* ctx = &s.primary;
    if (ctx->refcount++ == 0) {
        // PTXLM_EMU_STATS is read when the context is created: the file holds
        // the counters of that context's launches, per kernel name.
        const char* path = std::getenv("PTXLM_EMU_STATS");
        s.stats.clear();
        s.stats_enabled = path && *path;
        if (s.stats_enabled) s.stats_path = path;
        ctx->mem = std::make_unique<emu::Memory>();
        ctx->sticky = CUDA_SUCCESS;
        s.live.insert(ctx);
    }
    *pctx = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuDevicePrimaryCtxRelease_v2(CUdevice dev) {
    queue().drain();   // queued work of a context about to be destroyed
    State& s = state();
    Lock lock(s.mu);
    if (CUresult r = check_device(dev)) return r;
    CUctx_st* ctx = &s.primary;
    if (ctx->refcount == 0) return CUDA_ERROR_INVALID_CONTEXT;
    if (--ctx->refcount == 0) destroy_context(ctx);   // stays current where it was: later calls fail cleanly
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSetCurrent(CUcontext ctx) {
    State& s = state();
    Lock lock(s.mu);
    if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
    if (ctx && (ctx != &s.primary || ctx->refcount == 0)) return CUDA_ERROR_INVALID_CONTEXT;
    current() = ctx;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetCurrent(CUcontext* pctx) {
    State& s = state();
    Lock lock(s.mu);
    if (!pctx) return CUDA_ERROR_INVALID_VALUE;
    if (!s.initialized) return CUDA_ERROR_NOT_INITIALIZED;
    *pctx = current();
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxGetDevice(CUdevice* device) {
    Lock lock(state().mu);
    if (!device) return CUDA_ERROR_INVALID_VALUE;
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    *device = 0;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuCtxSynchronize(void) {
    queue().drain();
    Lock lock(state().mu);
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;   // a fault from earlier work surfaces here
    for (auto& [p, st] : ctx->streams)
        if (st->capture != CU_STREAM_CAPTURE_STATUS_NONE) {
            invalidate_captures(ctx);
            return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
        }
    return CUDA_SUCCESS;
}

// ---- memory ----

// The "unsafe during capture" rule shared by the synchronous memory calls.
static CUresult enter_sync(CUctx_st** ctx) {
    if (CUresult r = enter(ctx)) return r;
    if (capture_forbids_unsafe(*ctx)) {
        invalidate_captures(*ctx);
        return CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED;
    }
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAlloc_v2(CUdeviceptr* dptr, size_t bytesize) {
    Lock lock(state().mu);
    if (!dptr || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    CUctx_st* ctx;
    if (CUresult r = enter_sync(&ctx)) return r;
    if (ctx->mem->used() + bytesize > emu::device_limits().total_mem) return CUDA_ERROR_OUT_OF_MEMORY;
    uint64_t a = ctx->mem->alloc(bytesize);
    if (!a) return CUDA_ERROR_OUT_OF_MEMORY;
    *dptr = a;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFree_v2(CUdeviceptr dptr) {
    queue().drain();   // cuMemFree synchronises: queued work may still use the memory
    Lock lock(state().mu);
    CUctx_st* ctx;
    if (CUresult r = enter_sync(&ctx)) return r;
    return ctx->mem->free(dptr) ? CUDA_SUCCESS : CUDA_ERROR_INVALID_VALUE;
}

CUresult CUDAAPI cuMemGetInfo_v2(size_t* free_bytes, size_t* total) {
    Lock lock(state().mu);
    if (!free_bytes || !total) return CUDA_ERROR_INVALID_VALUE;
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    *total = emu::device_limits().total_mem;
    *free_bytes = *total - std::min<uint64_t>(*total, ctx->mem->used());
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemAllocHost_v2(void** pp, size_t bytesize) {
    Lock lock(state().mu);
    if (!pp || bytesize == 0) return CUDA_ERROR_INVALID_VALUE;
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    size_t rounded = (bytesize + 4095) / 4096 * 4096;
    void* p = std::aligned_alloc(4096, rounded);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    ctx->pinned[p] = bytesize;
    *pp = p;
    return CUDA_SUCCESS;
}

// Pinned memory; with CU_MEMHOSTALLOC_DEVICEMAP also mapped into the device's
// address space (cuMemHostGetDevicePointer): kernels then read and write the
// host bytes themselves, while the host may poll them. Only DEVICEMAP blocks
// have device addresses in emu (a real driver with unified addressing maps
// every pinned block; code that relies on that is wrong on older devices).
CUresult CUDAAPI cuMemHostAlloc(void** pp, size_t bytesize, unsigned int Flags) {
    Lock lock(state().mu);
    constexpr unsigned kKnown = CU_MEMHOSTALLOC_PORTABLE | CU_MEMHOSTALLOC_DEVICEMAP | CU_MEMHOSTALLOC_WRITECOMBINED;
    if (!pp || bytesize == 0 || (Flags & ~kKnown)) return CUDA_ERROR_INVALID_VALUE;
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    size_t rounded = (bytesize + 4095) / 4096 * 4096;
    void* p = std::aligned_alloc(4096, rounded);
    if (!p) return CUDA_ERROR_OUT_OF_MEMORY;
    std::memset(p, 0, rounded);
    if (Flags & CU_MEMHOSTALLOC_DEVICEMAP) {
        const uint64_t dev = ctx->mem->map_host(static_cast<uint8_t*>(p), bytesize);
        if (!dev) {
            std::free(p);
            return CUDA_ERROR_OUT_OF_MEMORY;
        }
        ctx->mapped[p] = dev;
    }
    ctx->pinned[p] = bytesize;
    *pp = p;
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemHostGetDevicePointer_v2(CUdeviceptr* pdptr, void* p, unsigned int Flags) {
    Lock lock(state().mu);
    if (!pdptr || !p || Flags != 0) return CUDA_ERROR_INVALID_VALUE;
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    // p may point inside a mapped block.
    auto it = ctx->mapped.upper_bound(p);
    if (it == ctx->mapped.begin()) return CUDA_ERROR_INVALID_VALUE;
    --it;
    const size_t off = size_t(static_cast<uint8_t*>(p) - static_cast<uint8_t*>(it->first));
    if (off >= ctx->pinned.at(it->first)) return CUDA_ERROR_INVALID_VALUE;
    *pdptr = CUdeviceptr(it->second + off);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemFreeHost(void* p) {
    queue().drain();
    Lock lock(state().mu);
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    auto it = ctx->pinned.find(p);
    if (it == ctx->pinned.end()) return CUDA_ERROR_INVALID_VALUE;
    auto m = ctx->mapped.find(p);
    if (m != ctx->mapped.end()) {
        ctx->mem->free(m->second);
        ctx->mapped.erase(m);
    }
    std::free(p);
    ctx->pinned.erase(it);
    return CUDA_SUCCESS;
}

// Host pointer for [dptr, dptr+n) inside one live allocation, else nullptr.
static uint8_t* device_range(CUctx_st* ctx, CUdeviceptr dptr, size_t n) {
    return ctx->mem->translate(dptr, n);
}

static CUresult copy_htod(CUctx_st* ctx, CUdeviceptr dst, const void* src, size_t n) {
    if (n == 0) return CUDA_SUCCESS;
    uint8_t* d = device_range(ctx, dst, n);
    if (!d || !src) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(d, src, n);
    return CUDA_SUCCESS;
}

static CUresult copy_dtoh(CUctx_st* ctx, void* dst, CUdeviceptr src, size_t n) {
    if (n == 0) return CUDA_SUCCESS;
    uint8_t* s = device_range(ctx, src, n);
    if (!s || !dst) return CUDA_ERROR_INVALID_VALUE;
    std::memcpy(dst, s, n);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyHtoD_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount) {
    queue().drain();   // synchronous: after the work queued before it
    Lock lock(state().mu);
    CUctx_st* ctx;
    if (CUresult r = enter_sync(&ctx)) return r;
    return copy_htod(ctx, dstDevice, srcHost, ByteCount);
}

CUresult CUDAAPI cuMemcpyDtoH_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount) {
    queue().drain();   // synchronous: after the work queued before it
    Lock lock(state().mu);
    CUctx_st* ctx;
    if (CUresult r = enter_sync(&ctx)) return r;
    return copy_dtoh(ctx, dstHost, srcDevice, ByteCount);
}

CUresult CUDAAPI cuMemcpyDtoD_v2(CUdeviceptr dstDevice, CUdeviceptr srcDevice, size_t ByteCount) {
    queue().drain();   // synchronous: after the work queued before it
    Lock lock(state().mu);
    CUctx_st* ctx;
    if (CUresult r = enter_sync(&ctx)) return r;
    if (ByteCount == 0) return CUDA_SUCCESS;
    uint8_t* d = device_range(ctx, dstDevice, ByteCount);
    uint8_t* s = device_range(ctx, srcDevice, ByteCount);
    if (!d || !s) return CUDA_ERROR_INVALID_VALUE;
    std::memmove(d, s, ByteCount);
    return CUDA_SUCCESS;
}

// Whether [p, p+n) lies in pinned memory (cuMemAllocHost / cuMemHostAlloc).
static bool is_pinned(CUctx_st* ctx, const void* p, size_t n) {
    auto it = ctx->pinned.upper_bound(const_cast<void*>(p));
    if (it == ctx->pinned.begin()) return false;
    --it;
    const size_t off = size_t(static_cast<const uint8_t*>(p) - static_cast<const uint8_t*>(it->first));
    return off < it->second && n <= it->second - off;
}

// Async copies are checked at the call and queued. From pinned memory the
// source is read when the copy runs (the host must not change it before a
// sync); from pageable memory the driver stages it at the call, so it is read
// now. Into pageable memory the copy is synchronous, as the driver makes it.
CUresult CUDAAPI cuMemcpyHtoDAsync_v2(CUdeviceptr dstDevice, const void* srcHost, size_t ByteCount, CUstream hStream) {
    Lock lock(state().mu);
    CUctx_st* ctx;
    if (CUresult r = enter_async(&ctx, hStream)) return r;
    if (ByteCount == 0) return CUDA_SUCCESS;
    uint8_t* d = device_range(ctx, dstDevice, ByteCount);
    if (!d || !srcHost) return CUDA_ERROR_INVALID_VALUE;
    std::function<void()> copy;
    if (is_pinned(ctx, srcHost, ByteCount)) {
        copy = [ctx, d, srcHost, ByteCount] {
            if (healthy(ctx)) std::memcpy(d, srcHost, ByteCount);
        };
    } else {
        auto staged = std::make_shared<std::vector<uint8_t>>(static_cast<const uint8_t*>(srcHost),
                                                             static_cast<const uint8_t*>(srcHost) + ByteCount);
        copy = [ctx, d, staged] {
            if (healthy(ctx)) std::memcpy(d, staged->data(), staged->size());
        };
    }
    queue().submit(queue_key(hStream), std::move(copy));
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemcpyDtoHAsync_v2(void* dstHost, CUdeviceptr srcDevice, size_t ByteCount, CUstream hStream) {
    bool pageable;
    {
        Lock lock(state().mu);
        CUctx_st* ctx;
        if (CUresult r = enter_async(&ctx, hStream)) return r;
        if (ByteCount == 0) return CUDA_SUCCESS;
        const uint8_t* src = device_range(ctx, srcDevice, ByteCount);
        if (!src || !dstHost) return CUDA_ERROR_INVALID_VALUE;
        pageable = !is_pinned(ctx, dstHost, ByteCount);
        queue().submit(queue_key(hStream), [ctx, dstHost, src, ByteCount] {
            if (healthy(ctx)) std::memcpy(dstHost, src, ByteCount);
        });
    }
    if (pageable) queue().drain();
    return CUDA_SUCCESS;
}

static CUresult memset_n(CUctx_st* ctx, CUdeviceptr dst, const void* value, size_t width, size_t n) {
    if (n == 0) return CUDA_SUCCESS;
    if (dst % width) return CUDA_ERROR_INVALID_VALUE;
    uint8_t* d = device_range(ctx, dst, n * width);
    if (!d) return CUDA_ERROR_INVALID_VALUE;
    for (size_t i = 0; i < n; ++i) std::memcpy(d + i * width, value, width);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemsetD8_v2(CUdeviceptr dstDevice, unsigned char uc, size_t N) {
    queue().drain();   // synchronous: after the work queued before it
    Lock lock(state().mu);
    CUctx_st* ctx;
    if (CUresult r = enter_sync(&ctx)) return r;
    return memset_n(ctx, dstDevice, &uc, 1, N);
}

CUresult CUDAAPI cuMemsetD32_v2(CUdeviceptr dstDevice, unsigned int ui, size_t N) {
    queue().drain();   // synchronous: after the work queued before it
    Lock lock(state().mu);
    CUctx_st* ctx;
    if (CUresult r = enter_sync(&ctx)) return r;
    return memset_n(ctx, dstDevice, &ui, 4, N);
}

// Checked at the call, run in stream order.
static CUresult memset_async(CUdeviceptr dst, uint32_t value, size_t width, size_t n, CUstream hStream) {
    Lock lock(state().mu);
    CUctx_st* ctx;
    if (CUresult r = enter_async(&ctx, hStream)) return r;
    if (n == 0) return CUDA_SUCCESS;
    if (dst % width || !device_range(ctx, dst, n * width)) return CUDA_ERROR_INVALID_VALUE;
    queue().submit(queue_key(hStream), [ctx, dst, value, width, n] {
        if (healthy(ctx)) memset_n(ctx, dst, &value, width, n);
    });
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuMemsetD8Async(CUdeviceptr dstDevice, unsigned char uc, size_t N, CUstream hStream) {
    return memset_async(dstDevice, uc, 1, N, hStream);
}

CUresult CUDAAPI cuMemsetD32Async(CUdeviceptr dstDevice, unsigned int ui, size_t N, CUstream hStream) {
    return memset_async(dstDevice, ui, 4, N, hStream);
}
