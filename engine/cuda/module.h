// PTX modules, their kernels, launches and occupancy. A Module JIT-compiles
// PTX text with cuModuleLoadDataEx and keeps the JIT's logs: a rejected module
// throws Error carrying the driver's error log (line and offending instruction).
#pragma once

#include "engine/cuda/device.h"

#include <cstdint>
#include <string>
#include <string_view>

namespace ptxlm::cuda {

struct Dim3 {
    unsigned x = 1, y = 1, z = 1;
    uint64_t count() const { return uint64_t(x) * y * z; }
};

// One launch's geometry.
struct LaunchDims {
    Dim3 grid, block;
    unsigned dynamic_shared_bytes = 0;
};

class Function;

class Module {
public:
    // `ptx` is PTX text (it need not be NUL-terminated; a terminated copy is passed on).
    Module(const Context& ctx, std::string_view ptx);
    ~Module();
    Module(const Module&) = delete;
    Module& operator=(const Module&) = delete;

    CUmodule handle() const { return m_; }
    const std::string& info_log() const { return info_log_; }   // the JIT's informational output
    // Throws Error (CUDA_ERROR_NOT_FOUND) naming the kernel when the module lacks it.
    Function function(const std::string& name) const;

private:
    const Driver* drv_;
    CUmodule m_ = nullptr;
    std::string info_log_;
};

// A kernel of a loaded module (valid while its Module lives).
class Function {
public:
    Function(const Driver& drv, CUfunction f, std::string name) : drv_(&drv), f_(f), name_(std::move(name)) {}

    CUfunction handle() const { return f_; }
    const std::string& name() const { return name_; }

    int num_regs() const { return attribute(CU_FUNC_ATTRIBUTE_NUM_REGS); }
    int static_shared_bytes() const { return attribute(CU_FUNC_ATTRIBUTE_SHARED_SIZE_BYTES); }
    int max_threads_per_block() const { return attribute(CU_FUNC_ATTRIBUTE_MAX_THREADS_PER_BLOCK); }
    int attribute(CUfunction_attribute a) const;

    // Opts in to `bytes` of dynamic shared memory. Needed (and only then
    // called) above the 48 KiB every kernel gets without asking.
    void reserve_dynamic_shared(unsigned bytes) const;
    // Resident blocks per SM for this block size and dynamic shared memory.
    int max_active_blocks_per_sm(unsigned block_threads, size_t dynamic_shared_bytes) const;

private:
    const Driver* drv_;
    CUfunction f_;
    std::string name_;
};

// Launches `f` on `s`. `args` holds one pointer per kernel .param, in order
// (the driver copies the pointed-to values at the call).
void launch(const Function& f, const LaunchDims& dims, const Stream& s, void** args);

// A programmatic dependent launch (sm_90; cuLaunchKernelEx with
// CU_LAUNCH_ATTRIBUTE_PROGRAMMATIC_STREAM_SERIALIZATION): `f` may start before
// the kernel ahead of it on `s` has finished, so it must wait
// (griddepcontrol.wait) before it touches memory that kernel writes.
void launch_programmatic(const Function& f, const LaunchDims& dims, const Stream& s, void** args);

// A cooperative launch: every block is resident at once, so blocks may wait
// on each other (the persistent decoder). The grid must not exceed
// max_active_blocks_per_sm x SM count (else CUDA_ERROR_COOPERATIVE_LAUNCH_TOO_LARGE).
void launch_cooperative(const Function& f, const LaunchDims& dims, const Stream& s, void** args);

}  // namespace ptxlm::cuda
