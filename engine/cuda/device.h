// RAII over the Driver API objects the decode engine uses: the device's
// primary context, device and pinned host memory, streams, timing events,
// and CUDA graphs captured from a stream. Every object keeps a pointer to its Context's
// Driver: a Context must outlive everything created from it.
#pragma once

#include "engine/cuda/driver.h"

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace ptxlm::cuda {

struct DeviceInfo {
    int ordinal = 0;
    std::string name;
    int cc_major = 0, cc_minor = 0;
    int sm_count = 0;
    int max_threads_per_block = 0;
    int max_threads_per_sm = 0;
    int max_blocks_per_sm = 0;
    int warp_size = 0;
    int shared_per_block = 0;         // bytes without opt-in (48 KiB)
    int shared_per_block_optin = 0;   // bytes with CU_FUNC_ATTRIBUTE_MAX_DYNAMIC_SHARED_SIZE_BYTES
    int shared_per_sm = 0;
    int regs_per_block = 0;
    int regs_per_sm = 0;
    bool cooperative_launch = false;
    uint64_t total_mem = 0;           // bytes
    int driver_version = 0;
    int memory_clock_khz = 0;         // 0 when the driver does not say
    int memory_bus_bits = 0;
    // Peak DRAM bandwidth in GB/s (10^9 bytes): two transfers per clock over
    // the bus; 0 when unknown.
    double peak_bandwidth_gbs() const { return 2.0 * memory_clock_khz * 1e3 * (memory_bus_bits / 8.0) / 1e9; }
};

// The device's primary context, retained and made current on the creating
// thread (cuDevicePrimaryCtxRetain alone does not make it current).
class Context {
public:
    explicit Context(std::shared_ptr<const Driver> driver, int ordinal = 0);
    ~Context();
    Context(const Context&) = delete;
    Context& operator=(const Context&) = delete;

    // Binds the context to the calling thread (needed once per thread that calls the driver).
    void make_current() const;
    // Waits for all work; a kernel fault from earlier work surfaces here as Error.
    void synchronize() const;
    // Device memory free and total now (cuMemGetInfo), in bytes.
    struct MemoryInfo { uint64_t free = 0, total = 0; };
    MemoryInfo memory_info() const;

    const Driver& driver() const { return *driver_; }
    const DeviceInfo& info() const { return info_; }
    CUcontext handle() const { return ctx_; }

private:
    std::shared_ptr<const Driver> driver_;
    CUdevice dev_ = 0;
    CUcontext ctx_ = nullptr;
    DeviceInfo info_;
};

class Stream;

// Device memory. Move-only; freed on destruction. A zero-byte buffer holds no
// allocation (ptr() == 0).
class DeviceBuffer {
public:
    DeviceBuffer() = default;
    DeviceBuffer(const Context& ctx, size_t bytes);
    ~DeviceBuffer();
    DeviceBuffer(DeviceBuffer&& o) noexcept;
    DeviceBuffer& operator=(DeviceBuffer&& o) noexcept;

    CUdeviceptr ptr() const { return ptr_; }
    size_t size() const { return bytes_; }

    // Synchronous copies of n bytes at byte offset `offset` (range-checked here).
    void upload(const void* src, size_t n, size_t offset = 0);
    void download(void* dst, size_t n, size_t offset = 0) const;
    // Stream-ordered copies; `host` should be pinned (PinnedBuffer) for real overlap.
    void upload_async(const void* src, size_t n, const Stream& s, size_t offset = 0);
    void download_async(void* dst, size_t n, const Stream& s, size_t offset = 0) const;
    void fill_bytes(uint8_t value);
    void fill_bytes_async(uint8_t value, const Stream& s);   // stream-ordered

private:
    void check_range(size_t n, size_t offset, const char* what) const;
    void reset() noexcept;
    const Driver* drv_ = nullptr;
    CUdeviceptr ptr_ = 0;
    size_t bytes_ = 0;
};

// Page-locked host memory (for async copies and the token read-back).
class PinnedBuffer {
public:
    PinnedBuffer() = default;
    PinnedBuffer(const Context& ctx, size_t bytes);
    ~PinnedBuffer();
    PinnedBuffer(PinnedBuffer&& o) noexcept;
    PinnedBuffer& operator=(PinnedBuffer&& o) noexcept;

    void* data() const { return p_; }
    size_t size() const { return bytes_; }

private:
    void reset() noexcept;
    const Driver* drv_ = nullptr;
    void* p_ = nullptr;
    size_t bytes_ = 0;
};

// Page-locked host memory mapped into the device's address space
// (cuMemHostAlloc with DEVICEMAP): a kernel reads and writes these bytes
// while the host polls them (the persistent decoder's token stream and
// cancel flag). Zeroed at allocation.
class MappedBuffer {
public:
    MappedBuffer() = default;
    MappedBuffer(const Context& ctx, size_t bytes);
    ~MappedBuffer();
    MappedBuffer(MappedBuffer&& o) noexcept;
    MappedBuffer& operator=(MappedBuffer&& o) noexcept;

    void* data() const { return p_; }
    CUdeviceptr device_ptr() const { return dev_; }
    size_t size() const { return bytes_; }

private:
    void reset() noexcept;
    const Driver* drv_ = nullptr;
    void* p_ = nullptr;
    CUdeviceptr dev_ = 0;
    size_t bytes_ = 0;
};

class Graph;

// A created, non-blocking stream: never the legacy stream, which cannot be
// captured and implicitly synchronises with everything.
class Stream {
public:
    explicit Stream(const Context& ctx);
    ~Stream();
    Stream(const Stream&) = delete;
    Stream& operator=(const Stream&) = delete;

    CUstream handle() const { return s_; }
    const Driver& driver() const { return *drv_; }
    void synchronize() const;
    // Whether everything queued on the stream has finished (cuStreamQuery);
    // a fault of finished work throws, as synchronize() would.
    bool idle() const;

    // Launches on this stream are recorded instead of run until end_capture.
    // THREAD_LOCAL: other threads may keep using the driver meanwhile.
    void begin_capture(CUstreamCaptureMode mode = CU_STREAM_CAPTURE_MODE_THREAD_LOCAL);
    Graph end_capture();

private:
    const Driver* drv_;
    CUstream s_ = nullptr;
};

// A timing event (CU_EVENT_DEFAULT): recorded on a stream, it completes when
// the work queued on that stream before it has; elapsed_ms reads the time
// between two completed events. Move-only; destroying an event does not wait
// for it (the driver releases it once its work completes).
class Event {
public:
    explicit Event(const Context& ctx);
    ~Event();
    Event(Event&& o) noexcept;
    Event& operator=(Event&& o) noexcept;

    CUevent handle() const { return e_; }
    // Marks the work queued on `s` so far; recording again replaces the mark.
    void record(const Stream& s);
    // Waits until the recorded work has completed (at once when never
    // recorded); a fault of that work throws, as a stream sync would.
    void synchronize() const;
    // Milliseconds from `start`'s completion to `end`'s (resolution about
    // 0.5 us on a GPU). Both must be recorded (else CUDA_ERROR_INVALID_HANDLE)
    // and complete (else CUDA_ERROR_NOT_READY): synchronize `end` first.
    static float elapsed_ms(const Event& start, const Event& end);

private:
    void reset() noexcept;
    const Driver* drv_ = nullptr;
    CUevent e_ = nullptr;
};

class GraphExec;

// A captured graph (the decode chain recorded once).
class Graph {
public:
    Graph(const Driver& drv, CUgraph g) : drv_(&drv), g_(g) {}
    ~Graph();
    Graph(Graph&& o) noexcept : drv_(o.drv_), g_(o.g_) { o.g_ = nullptr; }
    Graph& operator=(Graph&&) = delete;
    Graph(const Graph&) = delete;

    CUgraph handle() const { return g_; }
    std::vector<CUgraphNode> nodes() const;   // in capture order for a linear capture
    CUDA_KERNEL_NODE_PARAMS kernel_params(CUgraphNode node) const;
    GraphExec instantiate() const;

private:
    const Driver* drv_;
    CUgraph g_;
};

// An instantiated graph: launched once per token.
class GraphExec {
public:
    GraphExec(const Driver& drv, CUgraphExec e) : drv_(&drv), e_(e) {}
    ~GraphExec();
    GraphExec(GraphExec&& o) noexcept : drv_(o.drv_), e_(o.e_) { o.e_ = nullptr; }
    GraphExec& operator=(GraphExec&&) = delete;
    GraphExec(const GraphExec&) = delete;

    CUgraphExec handle() const { return e_; }
    void launch(const Stream& s) const;
    // Replaces a kernel node's launch (grid, block, shared, parameters: the
    // pointed-to values are copied now) for later launches of this exec only.
    void set_kernel_params(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS& p);

private:
    const Driver* drv_;
    CUgraphExec e_;
};

}  // namespace ptxlm::cuda
