// emu's Driver API surface, part 3: events (cuEventCreate, cuEventRecord,
// cuEventSynchronize, cuEventElapsedTime_v2, cuEventDestroy_v2).
//
// A record is an item on the device queue (driver_queue.h) like a launch: it
// completes when the queue reaches it, that is when everything queued before
// it (on its stream, and on every other stream: one FIFO) has run, and takes
// its timestamp from the host's steady clock then. So in async mode a record
// completes on the device thread, in deferred mode at the next sync point
// (cuEventSynchronize is one), in eager mode inside cuEventRecord. Elapsed
// times measure the emulator's work, never a GPU's.
//
// Where emu differs from the real driver:
// - cuEventRecord on a capturing stream fails with
//   CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED and invalidates the capture, as an
//   async copy does (emu captures kernel launches only). The real driver
//   accepts it: the record joins the capture's dependency set (for fork/join
//   across streams) or, with CU_EVENT_RECORD_EXTERNAL, becomes a graph node.
// - cuEventElapsedTime_v2 is not a sync point in deferred mode: polling it
//   answers CUDA_ERROR_NOT_READY until the host syncs (as the real driver
//   would for a record whose work never finishes).
// - CU_EVENT_BLOCKING_SYNC changes nothing: cuEventSynchronize always blocks.
#include "emu/driver_queue.h"
#include "emu/driver_state.h"

#include <chrono>

using namespace ptxlm::emu::driver;

namespace {

bool valid_event(CUctx_st* ctx, CUevent e) { return alive(e) && e->ctx == ctx; }

}  // namespace

CUresult CUDAAPI cuEventCreate(CUevent* phEvent, unsigned int Flags) {
    State& s = state();
    Lock lock(s.mu);
    constexpr unsigned kKnown = CU_EVENT_BLOCKING_SYNC | CU_EVENT_DISABLE_TIMING | CU_EVENT_INTERPROCESS;
    if (!phEvent || (Flags & ~kKnown)) return CUDA_ERROR_INVALID_VALUE;
    // An interprocess event cannot carry timing (cuda.h).
    if ((Flags & CU_EVENT_INTERPROCESS) && !(Flags & CU_EVENT_DISABLE_TIMING)) return CUDA_ERROR_INVALID_VALUE;
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    auto e = std::make_unique<CUevent_st>();
    e->ctx = ctx;
    e->flags = Flags;
    *phEvent = e.get();
    s.live.insert(e.get());
    ctx->events[e.get()] = std::move(e);
    return CUDA_SUCCESS;
}

// Does not wait for a pending record: its queued item keeps its own mark.
CUresult CUDAAPI cuEventDestroy_v2(CUevent hEvent) {
    State& s = state();
    Lock lock(s.mu);
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    if (!valid_event(ctx, hEvent)) return CUDA_ERROR_INVALID_HANDLE;
    s.live.erase(hEvent);
    ctx->events.erase(hEvent);
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventRecord(CUevent hEvent, CUstream hStream) {
    Lock lock(state().mu);
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    if (!valid_event(ctx, hEvent)) return CUDA_ERROR_INVALID_HANDLE;
    if (CUresult r = enter_async(&ctx, hStream)) return r;   // a capturing stream: see the top of the file
    // A fresh mark: a record still queued from before completes its own
    // mark, never this one (re-recording replaces what the event captures).
    auto mark = std::make_shared<EmuEventMark>();
    hEvent->mark = mark;
    queue().submit(queue_key(hStream), [mark] {
        const auto now = std::chrono::steady_clock::now();   // the preceding work has just finished
        Lock item_lock(state().mu);
        mark->when = now;
        mark->done = true;
    });
    return CUDA_SUCCESS;
}

CUresult CUDAAPI cuEventSynchronize(CUevent hEvent) {
    {
        Lock lock(state().mu);
        CUctx_st* ctx;
        if (CUresult r = enter(&ctx)) return r;
        if (!valid_event(ctx, hEvent)) return CUDA_ERROR_INVALID_HANDLE;
        if (!hEvent->mark || hEvent->mark->done) return CUDA_SUCCESS;   // never recorded: no work to wait for
    }
    // Everything queued so far, the record included (over-synchronising is a
    // legal schedule); without the API lock, which the queued items take.
    queue().drain();
    Lock lock(state().mu);
    CUctx_st* ctx;
    return enter(&ctx);   // a fault of the work before the record surfaces here
}

CUresult CUDAAPI cuEventElapsedTime_v2(float* pMilliseconds, CUevent hStart, CUevent hEnd) {
    Lock lock(state().mu);
    if (!pMilliseconds) return CUDA_ERROR_INVALID_VALUE;
    CUctx_st* ctx;
    if (CUresult r = enter(&ctx)) return r;
    if (!valid_event(ctx, hStart) || !valid_event(ctx, hEnd)) return CUDA_ERROR_INVALID_HANDLE;
    // The driver's contract: no timing flag or never recorded is an invalid
    // handle; recorded but not yet complete is NOT_READY.
    if ((hStart->flags | hEnd->flags) & CU_EVENT_DISABLE_TIMING) return CUDA_ERROR_INVALID_HANDLE;
    if (!hStart->mark || !hEnd->mark) return CUDA_ERROR_INVALID_HANDLE;
    if (!hStart->mark->done || !hEnd->mark->done) return CUDA_ERROR_NOT_READY;
    *pMilliseconds = float(std::chrono::duration<double, std::milli>(hEnd->mark->when - hStart->mark->when).count());
    return CUDA_SUCCESS;
}
