#include "engine/cuda/device.h"

#include <cstring>
#include <utility>

namespace ptxlm::cuda {

// ---- Context ----

Context::Context(std::shared_ptr<const Driver> driver, int ordinal) : driver_(std::move(driver)) {
    const Driver& d = *driver_;
    int count = 0;
    PTXLM_CU(d, cuDeviceGetCount, &count);
    if (count == 0)
        throw Error(CUDA_ERROR_NO_DEVICE, "cuDeviceGetCount",
                    "the CUDA driver (" + d.path() + ") sees no device; use --device cpu");
    if (ordinal < 0 || ordinal >= count)
        throw Error(CUDA_ERROR_INVALID_DEVICE, "cuDeviceGet",
                    "CUDA device " + std::to_string(ordinal) + " does not exist (the driver sees " +
                        std::to_string(count) + ")");
    PTXLM_CU(d, cuDeviceGet, &dev_, ordinal);
    PTXLM_CU(d, cuDevicePrimaryCtxRetain, &ctx_, dev_);
    try {
        make_current();
        info_.ordinal = ordinal;
        info_.driver_version = d.version();
        char name[256] = {};
        PTXLM_CU(d, cuDeviceGetName, name, int(sizeof(name) - 1), dev_);
        info_.name = name;
        size_t total = 0;
        PTXLM_CU(d, cuDeviceTotalMem_v2, &total, dev_);
        info_.total_mem = total;
        auto attr = [&](CUdevice_attribute a) {
            int v = 0;
            PTXLM_CU(d, cuDeviceGetAttribute, &v, a, dev_);
            return v;
        };
        info_.cc_major = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MAJOR);
        info_.cc_minor = attr(CU_DEVICE_ATTRIBUTE_COMPUTE_CAPABILITY_MINOR);
        info_.sm_count = attr(CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT);
        info_.max_threads_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_BLOCK);
        info_.max_threads_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_THREADS_PER_MULTIPROCESSOR);
        info_.max_blocks_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_BLOCKS_PER_MULTIPROCESSOR);
        info_.warp_size = attr(CU_DEVICE_ATTRIBUTE_WARP_SIZE);
        info_.shared_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK);
        info_.shared_per_block_optin = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_BLOCK_OPTIN);
        info_.shared_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_SHARED_MEMORY_PER_MULTIPROCESSOR);
        info_.regs_per_block = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_BLOCK);
        info_.regs_per_sm = attr(CU_DEVICE_ATTRIBUTE_MAX_REGISTERS_PER_MULTIPROCESSOR);
        info_.cooperative_launch = attr(CU_DEVICE_ATTRIBUTE_COOPERATIVE_LAUNCH) != 0;
        // Only for reports (bench's share of peak): a driver that no longer
        // answers these leaves them 0, meaning unknown.
        if (d.api().cuDeviceGetAttribute(&info_.memory_clock_khz, CU_DEVICE_ATTRIBUTE_MEMORY_CLOCK_RATE, dev_) != CUDA_SUCCESS ||
            d.api().cuDeviceGetAttribute(&info_.memory_bus_bits, CU_DEVICE_ATTRIBUTE_GLOBAL_MEMORY_BUS_WIDTH, dev_) != CUDA_SUCCESS)
            info_.memory_clock_khz = info_.memory_bus_bits = 0;
    } catch (...) {
        d.api().cuDevicePrimaryCtxRelease_v2(dev_);
        throw;
    }
}

Context::~Context() {
    // Errors are ignored: a faulted context reports its fault on every call,
    // and releasing the last reference is exactly what resets it.
    driver_->api().cuDevicePrimaryCtxRelease_v2(dev_);
}

void Context::make_current() const { PTXLM_CU(*driver_, cuCtxSetCurrent, ctx_); }

void Context::synchronize() const { PTXLM_CU(*driver_, cuCtxSynchronize); }

Context::MemoryInfo Context::memory_info() const {
    size_t free_bytes = 0, total = 0;
    PTXLM_CU(*driver_, cuMemGetInfo_v2, &free_bytes, &total);
    return {free_bytes, total};
}

// ---- DeviceBuffer ----

DeviceBuffer::DeviceBuffer(const Context& ctx, size_t bytes) : drv_(&ctx.driver()), bytes_(bytes) {
    if (bytes == 0) return;   // the driver refuses zero-byte allocations; an empty buffer needs none
    CUresult res = drv_->api().cuMemAlloc_v2(&ptr_, bytes);
    if (res != CUDA_SUCCESS) {
        // Say how much was asked for and how much is free: the usual cause is a model too large.
        size_t free_bytes = 0, total = 0;
        std::string detail = "requested " + std::to_string(bytes) + " bytes";
        if (drv_->api().cuMemGetInfo_v2(&free_bytes, &total) == CUDA_SUCCESS)
            detail += "; " + std::to_string(free_bytes) + " of " + std::to_string(total) + " bytes free";
        drv_->check(res, "cuMemAlloc_v2", detail);
    }
}

DeviceBuffer::~DeviceBuffer() { reset(); }

DeviceBuffer::DeviceBuffer(DeviceBuffer&& o) noexcept
    : drv_(o.drv_), ptr_(std::exchange(o.ptr_, 0)), bytes_(std::exchange(o.bytes_, 0)) {}

DeviceBuffer& DeviceBuffer::operator=(DeviceBuffer&& o) noexcept {
    if (this != &o) {
        reset();
        drv_ = o.drv_;
        ptr_ = std::exchange(o.ptr_, 0);
        bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
}

void DeviceBuffer::reset() noexcept {
    if (ptr_) drv_->api().cuMemFree_v2(ptr_);   // no throw from a destructor; a fault was reported at sync
    ptr_ = 0;
    bytes_ = 0;
}

void DeviceBuffer::check_range(size_t n, size_t offset, const char* what) const {
    if (offset > bytes_ || n > bytes_ - offset)
        throw Error(CUDA_ERROR_INVALID_VALUE, what,
                    std::string(what) + ": " + std::to_string(n) + " bytes at offset " + std::to_string(offset) +
                        " exceed the " + std::to_string(bytes_) + "-byte device buffer");
}

void DeviceBuffer::upload(const void* src, size_t n, size_t offset) {
    check_range(n, offset, "cuMemcpyHtoD_v2");
    if (n) PTXLM_CU(*drv_, cuMemcpyHtoD_v2, ptr_ + offset, src, n);
}

void DeviceBuffer::download(void* dst, size_t n, size_t offset) const {
    check_range(n, offset, "cuMemcpyDtoH_v2");
    if (n) PTXLM_CU(*drv_, cuMemcpyDtoH_v2, dst, ptr_ + offset, n);
}

void DeviceBuffer::upload_async(const void* src, size_t n, const Stream& s, size_t offset) {
    check_range(n, offset, "cuMemcpyHtoDAsync_v2");
    if (n) PTXLM_CU(*drv_, cuMemcpyHtoDAsync_v2, ptr_ + offset, src, n, s.handle());
}

void DeviceBuffer::download_async(void* dst, size_t n, const Stream& s, size_t offset) const {
    check_range(n, offset, "cuMemcpyDtoHAsync_v2");
    if (n) PTXLM_CU(*drv_, cuMemcpyDtoHAsync_v2, dst, ptr_ + offset, n, s.handle());
}

void DeviceBuffer::fill_bytes(uint8_t value) {
    if (bytes_) PTXLM_CU(*drv_, cuMemsetD8_v2, ptr_, value, bytes_);
}

void DeviceBuffer::fill_bytes_async(uint8_t value, const Stream& s) {
    if (bytes_) PTXLM_CU(*drv_, cuMemsetD8Async, ptr_, value, bytes_, s.handle());
}

// ---- PinnedBuffer ----

PinnedBuffer::PinnedBuffer(const Context& ctx, size_t bytes) : drv_(&ctx.driver()), bytes_(bytes) {
    PTXLM_CU(*drv_, cuMemAllocHost_v2, &p_, bytes);
}

PinnedBuffer::~PinnedBuffer() { reset(); }

PinnedBuffer::PinnedBuffer(PinnedBuffer&& o) noexcept
    : drv_(o.drv_), p_(std::exchange(o.p_, nullptr)), bytes_(std::exchange(o.bytes_, 0)) {}

PinnedBuffer& PinnedBuffer::operator=(PinnedBuffer&& o) noexcept {
    if (this != &o) {
        reset();
        drv_ = o.drv_;
        p_ = std::exchange(o.p_, nullptr);
        bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
}

void PinnedBuffer::reset() noexcept {
    if (p_) drv_->api().cuMemFreeHost(p_);
    p_ = nullptr;
    bytes_ = 0;
}

// ---- MappedBuffer ----

MappedBuffer::MappedBuffer(const Context& ctx, size_t bytes) : drv_(&ctx.driver()), bytes_(bytes) {
    PTXLM_CU(*drv_, cuMemHostAlloc, &p_, bytes, CU_MEMHOSTALLOC_DEVICEMAP);
    std::memset(p_, 0, bytes);
    try {
        PTXLM_CU(*drv_, cuMemHostGetDevicePointer_v2, &dev_, p_, 0);
    } catch (...) {
        reset();
        throw;
    }
}

MappedBuffer::~MappedBuffer() { reset(); }

MappedBuffer::MappedBuffer(MappedBuffer&& o) noexcept
    : drv_(o.drv_), p_(std::exchange(o.p_, nullptr)), dev_(std::exchange(o.dev_, 0)), bytes_(std::exchange(o.bytes_, 0)) {}

MappedBuffer& MappedBuffer::operator=(MappedBuffer&& o) noexcept {
    if (this != &o) {
        reset();
        drv_ = o.drv_;
        p_ = std::exchange(o.p_, nullptr);
        dev_ = std::exchange(o.dev_, 0);
        bytes_ = std::exchange(o.bytes_, 0);
    }
    return *this;
}

void MappedBuffer::reset() noexcept {
    if (p_) drv_->api().cuMemFreeHost(p_);
    p_ = nullptr;
    dev_ = 0;
    bytes_ = 0;
}

// ---- Stream ----

Stream::Stream(const Context& ctx) : drv_(&ctx.driver()) {
    PTXLM_CU(*drv_, cuStreamCreate, &s_, CU_STREAM_NON_BLOCKING);
}

Stream::~Stream() {
    if (s_) drv_->api().cuStreamDestroy_v2(s_);
}

void Stream::synchronize() const { PTXLM_CU(*drv_, cuStreamSynchronize, s_); }

bool Stream::idle() const {
    const CUresult r = drv_->api().cuStreamQuery(s_);
    if (r == CUDA_ERROR_NOT_READY) return false;
    PTXLM_CU(*drv_, cuStreamQuery, s_);   // SUCCESS, or the error with its name
    return true;
}

void Stream::begin_capture(CUstreamCaptureMode mode) { PTXLM_CU(*drv_, cuStreamBeginCapture_v2, s_, mode); }

Graph Stream::end_capture() {
    CUgraph g = nullptr;
    PTXLM_CU(*drv_, cuStreamEndCapture, s_, &g);
    return Graph(*drv_, g);
}

// ---- Event ----

Event::Event(const Context& ctx) : drv_(&ctx.driver()) { PTXLM_CU(*drv_, cuEventCreate, &e_, CU_EVENT_DEFAULT); }

Event::~Event() { reset(); }

Event::Event(Event&& o) noexcept : drv_(o.drv_), e_(std::exchange(o.e_, nullptr)) {}

Event& Event::operator=(Event&& o) noexcept {
    if (this != &o) {
        reset();
        drv_ = o.drv_;
        e_ = std::exchange(o.e_, nullptr);
    }
    return *this;
}

void Event::reset() noexcept {
    if (e_) drv_->api().cuEventDestroy_v2(e_);   // no throw from a destructor; a fault was reported at sync
    e_ = nullptr;
}

void Event::record(const Stream& s) { PTXLM_CU(*drv_, cuEventRecord, e_, s.handle()); }

void Event::synchronize() const { PTXLM_CU(*drv_, cuEventSynchronize, e_); }

float Event::elapsed_ms(const Event& start, const Event& end) {
    float ms = 0.0f;
    PTXLM_CU(*start.drv_, cuEventElapsedTime_v2, &ms, start.e_, end.e_);
    return ms;
}

// ---- Graph, GraphExec ----

Graph::~Graph() {
    if (g_) drv_->api().cuGraphDestroy(g_);
}

std::vector<CUgraphNode> Graph::nodes() const {
    size_t n = 0;
    PTXLM_CU(*drv_, cuGraphGetNodes, g_, nullptr, &n);
    std::vector<CUgraphNode> out(n);
    if (n) PTXLM_CU(*drv_, cuGraphGetNodes, g_, out.data(), &n);
    out.resize(n);
    return out;
}

CUDA_KERNEL_NODE_PARAMS Graph::kernel_params(CUgraphNode node) const {
    CUDA_KERNEL_NODE_PARAMS p{};
    PTXLM_CU(*drv_, cuGraphKernelNodeGetParams_v2, node, &p);
    return p;
}

GraphExec Graph::instantiate() const {
    CUgraphExec e = nullptr;
    PTXLM_CU(*drv_, cuGraphInstantiateWithFlags, &e, g_, 0);
    return GraphExec(*drv_, e);
}

GraphExec::~GraphExec() {
    if (e_) drv_->api().cuGraphExecDestroy(e_);
}

void GraphExec::launch(const Stream& s) const { PTXLM_CU(*drv_, cuGraphLaunch, e_, s.handle()); }

void GraphExec::set_kernel_params(CUgraphNode node, const CUDA_KERNEL_NODE_PARAMS& p) {
    PTXLM_CU(*drv_, cuGraphExecKernelNodeSetParams_v2, e_, node, &p);
}

}  // namespace ptxlm::cuda
