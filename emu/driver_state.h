// emu's Driver API surface, internal state shared by driver.cpp (init, device,
// context, memory, errors, stats), driver_exec.cpp (modules, launches,
// streams, graphs), driver_event.cpp (events) and driver_ptx.cpp (the JIT's
// module-header checks). Not an interface: only libcuda.so.1's exports are.
//
// The handle types cuda.h leaves incomplete (CUctx_st, CUmod_st, ...) are
// defined here. Every handle a caller passes in is checked against the set of
// live handles, so a stale or foreign pointer is CUDA_ERROR_INVALID_HANDLE,
// never a crash. One mutex serialises the API calls; stream-ordered work
// runs from the device queue (driver_queue.h), kernels without that mutex.
#pragma once

#include <cuda.h>

#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_set>
#include <vector>

#include "emu/interp.h"
#include "emu/stats.h"

// One recorded or pending kernel launch: parameters already packed (the
// driver copies the values behind kernelParams at the call).
struct EmuLaunch {
    CUfunction func = nullptr;
    ptxlm::emu::Dim3 grid, block;
    uint32_t shared = 0;                 // dynamic shared bytes
    bool cooperative = false;
    std::vector<uint8_t> params;         // KernelInfo::param_bytes
    std::vector<void*> param_ptrs;       // one per .param, into `params` (cuGraphKernelNodeGetParams)
};

struct CUfunc_st {
    CUmod_st* mod = nullptr;
    const ptxlm::emu::KernelInfo* info = nullptr;   // points at `own`
    ptxlm::emu::KernelInfo own;                      // the program's info, registers from ptxas when known
    uint32_t max_dynamic_shared = 48 * 1024;   // CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES (set to opt in)
    bool opted_in = false;
    int carveout = -1;
};

struct CUmod_st {
    CUctx_st* ctx = nullptr;
    std::shared_ptr<const ptxlm::emu::Program> prog;
    std::vector<std::unique_ptr<CUfunc_st>> funcs;
};

struct CUgraphNode_st {
    CUgraph_st* graph = nullptr;
    EmuLaunch launch;
};

struct CUgraph_st {
    CUctx_st* ctx = nullptr;
    std::vector<std::unique_ptr<CUgraphNode_st>> nodes;   // a linear chain, in capture order
};

struct CUgraphExec_st {
    CUctx_st* ctx = nullptr;
    // Keyed by the source graph's node handle (compared, never dereferenced:
    // the source graph may already be destroyed).
    std::vector<std::pair<CUgraphNode, EmuLaunch>> nodes;
};

struct CUstream_st {
    CUctx_st* ctx = nullptr;
    unsigned flags = 0;
    CUstreamCaptureStatus capture = CU_STREAM_CAPTURE_STATUS_NONE;
    CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_GLOBAL;
    std::thread::id capture_thread;
    std::unique_ptr<CUgraph_st> graph;   // being captured
};

// One cuEventRecord: done once the device queue reaches it (everything
// queued before it has run), stamped then with the host's steady clock. The
// queued item holds it too, so re-recording or destroying the event while
// the record is pending touches nothing the item uses.
struct EmuEventMark {
    bool done = false;                                   // guarded by State::mu
    std::chrono::steady_clock::time_point when;          // valid once done
};

struct CUevent_st {
    CUctx_st* ctx = nullptr;
    unsigned flags = 0;                      // CU_EVENT_*
    std::shared_ptr<EmuEventMark> mark;      // the latest record; null until the first
};

struct CUctx_st {
    int refcount = 0;                     // primary-context retains; 0 = inactive
    unsigned flags = 0;
    CUresult sticky = CUDA_SUCCESS;       // a kernel fault poisons the context until it is destroyed
    std::unique_ptr<ptxlm::emu::Memory> mem;
    std::map<CUmod_st*, std::unique_ptr<CUmod_st>> modules;
    std::map<CUstream_st*, std::unique_ptr<CUstream_st>> streams;
    std::map<CUgraph_st*, std::unique_ptr<CUgraph_st>> graphs;
    std::map<CUgraphExec_st*, std::unique_ptr<CUgraphExec_st>> execs;
    std::map<CUevent_st*, std::unique_ptr<CUevent_st>> events;
    std::map<void*, size_t> pinned;       // cuMemAllocHost / cuMemHostAlloc blocks
    std::map<void*, uint64_t> mapped;     // DEVICEMAP blocks -> their device address
};

namespace ptxlm::emu::driver {

struct State {
    ~State();
    std::recursive_mutex mu;
    bool initialized = false;
    CUctx_st primary;                          // device 0's primary context
    std::unordered_set<const void*> live;      // every live handle of every type
    bool stats_enabled = false;                // PTXLM_EMU_STATS set
    std::string stats_path;
    std::map<std::string, Stats> stats;        // per kernel name, since the primary context was created
};
State& state();
using Lock = std::lock_guard<std::recursive_mutex>;

// The calling thread's current context (cuCtxSetCurrent).
CUctx_st*& current();

// The checks every context-bound call starts with: initialised, a current
// active context, and not poisoned by an earlier fault (whose error every
// later call returns, as the real driver does).
CUresult enter(CUctx_st** ctx);

template <class T>
bool alive(T* h) { return h && state().live.count(static_cast<const void*>(h)) != 0; }

// Whether a capture sequence forbids "unsafe" calls (synchronous copies,
// cuMemAlloc, context sync) on this thread: any GLOBAL capture, or a
// THREAD_LOCAL one begun by this thread. Such a call invalidates the capture.
bool capture_forbids_unsafe(CUctx_st* ctx);
void invalidate_captures(CUctx_st* ctx);

// enter() for a stream-ordered call that emu cannot capture (async copies and
// memsets, event records): `hStream` must be the default stream or a live
// stream of the context; a capturing stream fails with
// CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and is invalidated.
CUresult enter_async(CUctx_st** ctx, CUstream hStream);
// The device queue's key for a stream handle (the default streams are one).
inline const void* queue_key(CUstream h) {
    return h == CU_STREAM_LEGACY || h == CU_STREAM_PER_THREAD ? nullptr : h;
}

// Runs a queued launch (driver_queue.h). The kernel runs without the API
// lock, so the host may call the API while it runs (a stream query, an
// allocation); what it uses of the driver's state stays put while it is
// queued (cuModuleUnload and cuMemFree drain the queue first). A fault is
// printed as "emu: <message>" and poisons the context: the next sync
// reports it. After a fault nothing more runs.
void execute(CUctx_st* ctx, const EmuLaunch& l);

// Whether the context is still healthy (takes the API lock).
bool healthy(CUctx_st* ctx);

// The JIT's checks of a module header (.version accepted by this driver,
// .target runnable on the device, ISA version new enough for the target).
// On failure returns INVALID_PTX or UNSUPPORTED_PTX_VERSION with `log` filled.
CUresult check_ptx_header(std::string_view ptx, std::string* log);

// Frees everything the context owns (the last primary-context release).
void destroy_context(CUctx_st* ctx);
void write_stats();

}  // namespace ptxlm::emu::driver
